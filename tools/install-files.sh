#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# `make install`: copies what `make` built into place. Never installs
# packages (install.sh does that for a user's whole set-up).
#   tools/install-files.sh BUILD_DIR
# Without PREFIX, for the user who runs it:
#   the CLI                 ~/.local/bin/cudafx (translations in ~/.local/share/locale)
#   the GIMP 3 plug-in      ~/.config/GIMP/<3.x>/plug-ins/cudafx/ for the installed GIMP 3's
#                           version and every existing 3.x profile
#   the GIMP 2.10 plug-in   ~/.config/GIMP/2.10/plug-ins/cudafx/
#   the GEGL module         ${XDG_DATA_HOME:-~/.local/share}/gegl-0.4/plug-ins/
# With PREFIX (packagers; DESTDIR is prepended to every path), system-wide:
#   PREFIX/bin/cudafx, PREFIX/share/locale, GIMP's and GEGL's plug-in folders
#   as their pkg-config files name them, moved under PREFIX.
# Each part is installed when it was built, and skipped with a line saying so.
set -euo pipefail
build=${1:-build}
prefix=${PREFIX:-}
destdir=${DESTDIR:-}
installed=0

say() { echo "install: $*"; }

# pkg-config's directory for a variable, re-rooted from the package's prefix to PREFIX.
system_dir() { # package variable
  local dir pkg_prefix
  dir=$(pkg-config --variable="$2" "$1" 2>/dev/null) || return 1
  [ -n "$dir" ] || return 1
  pkg_prefix=$(pkg-config --variable=prefix "$1")
  echo "$destdir$prefix${dir#"$pkg_prefix"}"
}

plugin_into() { # executable dest
  tools/install-plugin.sh "$1" "$build/locale" "$2"
  say "$1 -> $2/"
  installed=$((installed + 1))
}

# The CLI, with its translations where it looks for them (../share/locale).
if [ -x "$build/cudafx" ]; then
  if [ -n "$prefix" ]; then bin=$destdir$prefix/bin; share=$destdir$prefix/share
  else bin=$HOME/.local/bin; share=${XDG_DATA_HOME:-$HOME/.local/share}; fi
  install -D -m 755 "$build/cudafx" "$bin/cudafx"
  if [ -d "$build/locale" ]; then
    for mo in "$build"/locale/*/LC_MESSAGES/cudafx.mo; do
      lang=${mo#"$build/locale/"}; lang=${lang%%/*}
      install -D -m 644 "$mo" "$share/locale/$lang/LC_MESSAGES/cudafx.mo"
    done
  fi
  say "$build/cudafx -> $bin/cudafx"
  installed=$((installed + 1))
else
  say "no CLI built (GEGL's development files missing): skipped"
fi

# A GIMP plug-in: system-wide into the plug-in folder its .pc file names, or
# for the user into ~/.config/GIMP/<version>/plug-ins for each version given.
gimp_plugin() { # executable package dev-package user-versions...
  local exe=$1 package=$2 dev=$3 dir v; shift 3
  if [ ! -x "$exe" ]; then
    say "no $package plug-in built ($dev missing): skipped"
  elif [ -n "$prefix" ]; then
    dir=$(system_dir "$package" gimplibdir) || { echo "install: $package.pc has no gimplibdir" >&2; exit 1; }
    plugin_into "$exe" "$dir/plug-ins/cudafx"
  else
    for v in "$@"; do
      plugin_into "$exe" "${XDG_CONFIG_HOME:-$HOME/.config}/GIMP/$v/plug-ins/cudafx"
    done
  fi
}

# GIMP 3: the installed GIMP 3's version and every existing 3.x profile.
versions3=$(pkg-config --modversion gimp-3.0 2>/dev/null | grep -o '^3\.[0-9]\+' || true)
for d in "${XDG_CONFIG_HOME:-$HOME/.config}"/GIMP/3.*/; do
  [ -d "$d" ] && versions3="$versions3 $(basename "$d")"
done
# shellcheck disable=SC2046
gimp_plugin "$build/gimp3-native/cudafx" gimp-3.0 libgimp-3.0-dev $(echo "$versions3" | tr ' ' '\n' | sort -u)
gimp_plugin "$build/gimp210/cudafx" gimp-2.0 libgimp2.0-dev 2.10

# The GEGL operations module.
modules=$(find "$build/gegl" -maxdepth 1 -name '*.so' 2>/dev/null || true)
if [ -n "$modules" ]; then
  if [ -n "$prefix" ]; then
    dir=$(system_dir gegl-0.4 pluginsdir) || { echo "install: gegl-0.4.pc has no pluginsdir" >&2; exit 1; }
  else
    dir=${XDG_DATA_HOME:-$HOME/.local/share}/gegl-0.4/plug-ins
  fi
  for m in $modules; do
    install -D -m 755 "$m" "$dir/$(basename "$m")"
    say "$m -> $dir/"
    installed=$((installed + 1))
  done
  # The module finds its catalogs in locale/ beside itself.
  if [ -d "$build/locale" ]; then rm -rf "$dir/locale"; cp -R "$build/locale" "$dir/locale"; fi
fi

[ "$installed" -gt 0 ] || { echo "install: nothing was built to install (run make first)" >&2; exit 1; }
