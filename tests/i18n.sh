#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Translation tests: po/cudafx.pot holds every marked string of the sources
# (a fresh extraction adds nothing), each catalog compiles with
# `msgfmt --check` and translates every message (none untranslated, none
# fuzzy, none missing), and the CLI speaks Spanish and Greek: --help, a usage
# error and an engine message, each checked against the catalog's own
# translation; in a German locale (decimal comma) numbers on the command line
# and in --json keep the decimal point. Ends with "N passed, N failed".
# Usage: tests/i18n.sh BUILD_DIR
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
build=$(cd "$build" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
[ -x "$py" ] || py=python3
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
languages="es ca el de fr"

# msgids of a catalog or template, one per line (plural forms and context aside).
msgids() { msgcat --no-wrap --sort-output "$1" | sed -n 's/^msgid "\(.\+\)"$/\1/p'; }

make --no-print-directory -s pot POT="$tmp/fresh.pot" >/dev/null
if [ -s "$tmp/fresh.pot" ]; then
  missing=$(comm -13 <(msgids po/cudafx.pot) <(msgids "$tmp/fresh.pot"))
  if [ -z "$missing" ]; then ok; else bad "po/cudafx.pot is stale (run make update-po): $(echo "$missing" | head -n 3)"; fi
else
  bad "could not extract the strings (xgettext)"
fi

for lang in $languages; do
  po=po/$lang.po
  if [ ! -f "$po" ]; then bad "$po is missing"; continue; fi
  if stats=$(msgfmt --check --statistics -o /dev/null "$po" 2>&1); then ok; else bad "$po: $stats"; continue; fi
  case $stats in
    *fuzzy*|*untranslated*) bad "$po: $stats" ;;
    *) ok ;;
  esac
  absent=$(comm -23 <(msgids po/cudafx.pot) <(msgids "$po"))
  if [ -z "$absent" ]; then ok; else bad "$po lacks: $(echo "$absent" | head -n 3)"; fi
  [ -f "$build/locale/$lang/LC_MESSAGES/cudafx.mo" ] && ok || bad "$lang: $build/locale/$lang/LC_MESSAGES/cudafx.mo not built"
done

# translated MSGID in LANG, from the compiled catalog
translated() { TEXTDOMAINDIR=$build/locale LANGUAGE=$1 LANG=C.UTF-8 LC_ALL= gettext -d cudafx -- "$2"; }

# speaks LANG DESCRIPTION MSGID FORMAT-ARGS -- CLI-ARGS...: the CLI's output
# (stdout and stderr) contains the catalog's translation of MSGID (a printf
# format, filled with FORMAT-ARGS), which is not the English text.
speaks() {
  local lang=$1 what=$2 msgid=$3; shift 3
  local args=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  local fmt; fmt=$(translated "$lang" "$msgid")
  if [ "$fmt" = "$msgid" ]; then bad "$lang: no translation of '$msgid'"; return; fi
  local want; want=$(printf -- "$fmt" "${args[@]}")
  LANGUAGE=$lang LANG=C.UTF-8 LC_ALL= "$build/cudafx" "$@" >"$tmp/out" 2>&1
  if grep -qF -- "$want" "$tmp/out"; then ok; else bad "$lang $what: '$want' not in: $(head -n 3 "$tmp/out")"; fi
}

if [ -x "$build/cudafx" ]; then
  for lang in es el; do
    speaks "$lang" "--help" "Median or percentile filter over a square or circular window" -- median --help
    speaks "$lang" "usage error" "--%s '%s' is not an integer" radius x -- median --radius x in.png out.png
    speaks "$lang" "usage hint" "Try 'cudafx%s%s --help'." " " median -- median --radius x in.png out.png
    speaks "$lang" "option help" "Show this help and exit." -- convolve --help
  done
  # Numbers keep the C locale in a locale whose decimal separator is a comma
  # (de_DE.UTF-8; compiled here from the locales package's sources when the
  # system has not generated it): "--h 12.5" parses, and --json prints
  # decimal points (a comma would make "h": 12,5 and "ms": 3,141, not JSON).
  de=de_DE.UTF-8
  if ! locale -a 2>/dev/null | grep -qix 'de_DE\.utf-\?8'; then
    mkdir -p "$tmp/locales"
    if localedef -i de_DE -f UTF-8 "$tmp/locales/$de" >/dev/null 2>&1; then
      export LOCPATH=$tmp/locales
    else
      bad "cannot compile the $de locale (localedef; Debian package 'locales')"
    fi
  fi
  point=$(LC_ALL=$de locale decimal_point 2>/dev/null)
  if [ "$point" != "," ]; then
    bad "$de's decimal separator is '$point', not a comma: the check below would prove nothing"
  elif LC_ALL=$de "$build/cudafx" nl-means --h 12.5 --patch-radius 1 --search-radius 1 --json \
         tests/data/camera.png "$tmp/o.png" >"$tmp/json" 2>"$tmp/err"; then
    if "$py" -c 'import json, sys; j = json.load(sys.stdin); sys.exit(0 if j["h"] == 12.5 and isinstance(j["ms"], float) else 1)' \
         <"$tmp/json" 2>/dev/null; then ok; else bad "$de: --json is not C-locale JSON: $(head -c 300 "$tmp/json")"; fi
  else
    bad "$de: --h 12.5 rejected: $(head -n 2 "$tmp/err")"
  fi
  unset LOCPATH
else
  bad "$build/cudafx not built"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
