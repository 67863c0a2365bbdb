#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The Debian package, end to end, in a fresh Debian 13 root: an overlay on the
# GIMP 3.0 chroot of tests/gimp/chroot.sh (the chroot itself is never
# written; the overlay's changes live in a temporary folder, deleted at the
# end). In that root: the build dependencies from debian/control, then
#   dpkg-buildpackage -us -uc -b     on a copy of this working tree;
#   lintian                          no errors (the warnings are printed);
#   apt-get install ./cudafx_*.deb   then, with an empty home and no GIMP
#                                    profile, GIMP 3 must find the procedures
#                                    and the live filters in the system folders
#                                    and the gegl command cudafx:median, each
#                                    equal to the CLI;
#   apt-get remove cudafx            must leave the file system as it was
#                                    before the install.
# Ends with "N passed, N failed". Needs root (mount, chroot).
#   tests/package/run.sh            KEEP=1 keeps the temporary root
set -euo pipefail
cd "$(dirname "$0")/../.."
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

[ "$(id -u)" -eq 0 ] || { echo "tests/package/run.sh needs root (overlay mount, chroot)"; echo "0 passed, 1 failed"; exit 1; }
base=$(CUDAFX_GIMP3_VERSION=3.0 tests/gimp/chroot.sh ensure) || { echo "0 passed, 1 failed"; exit 1; }

tmp=$(mktemp -d /var/tmp/cudafx-package.XXXXXX)
root=$tmp/root
mkdir -p "$tmp/upper" "$tmp/work" "$root"
cleanup() {
  mountpoint -q "$root/proc" && umount "$root/proc"
  mountpoint -q "$root" && umount "$root"
  if [ -n "${KEEP:-}" ]; then echo "kept $tmp (umounted; upper/ holds the changes)"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
mount -t overlay overlay -o "lowerdir=$base,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
mount -t proc proc "$root/proc"
log=$tmp/log
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
step() { # NAME COMMAND...: runs COMMAND in the root, its output in $log.NAME
  local name=$1; shift
  local t0=$SECONDS
  if in_root "$@" >"$log.$name" 2>&1; then
    echo "  $name: $((SECONDS - t0)) s"
  else
    tail -n 30 "$log.$name"; fail "$name" "failed (log above)"; return 1
  fi
}

# The source: this working tree's files as git sees them (tracked and new,
# not ignored), so no build output comes along.
mkdir -p "$root/build/cudafx"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$root/build/cudafx"
cp tests/data/astronaut.png "$root/tmp/"

# The build dependencies as debian/control names them (apt builds an
# alternative's first choice), and the tools of the test: lintian, and gegl
# (the gegl command and gegl-imgcmp to compare images).
step apt-update apt-get update -qq || finish
step build-deps apt-get build-dep -y -qq /build/cudafx || finish
step test-tools apt-get install -y -qq --no-install-recommends lintian gegl || finish

if step dpkg-buildpackage /bin/sh -c 'cd /build/cudafx && DEB_BUILD_OPTIONS=parallel=2 dpkg-buildpackage -us -uc -b'; then
  grep -E '^ *cudafx built|GIMP 3 plug-in:' "$log.dpkg-buildpackage" | sed 's/^/  /'
  pass "dpkg-buildpackage -us -uc -b"
else
  finish
fi
deb=$(cd "$root/build" && ls cudafx_*.deb)
echo "  $deb:"; in_root dpkg-deb -c "/build/$deb" | awk '{print "    " $6}' | grep -v '/$' | grep -v '/locale/..*/LC_MESSAGES/' || true

in_root /bin/sh -c 'lintian --fail-on none -I /build/cudafx_*.changes' >"$log.lintian" 2>&1 || true
sed 's/^/  /' "$log.lintian"
if grep -q '^E:' "$log.lintian"; then fail "lintian" "errors (above)"
else pass "lintian: no errors ($(grep -c '^W:' "$log.lintian" || true) warnings)"; fi

# What the root holds, less what apt, dpkg and the test itself write.
snapshot() {
  in_root find / -xdev \( -path /proc -o -path /tmp -o -path /root -o -path /build \
    -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log \) -prune \
    -o -print | sort
}
snapshot >"$tmp/before"
step install apt-get install -y -qq "/build/$deb" && pass "apt-get install ./$deb" || finish

# GIMP with nothing of cudafx in its profile: everything must come from the
# system folders. Markers are built at run time, since GIMP echoes a failing command.
mkdir -p "$root/tmp/home" "$root/tmp/out"
script="(define (show tag value) (display (string-append \"\n\" tag \"=\")) (display value))
  (show \"PROC\" (car (gimp-pdb-procedure-exists \"plug-in-cudafx-median\")))
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"/tmp/astronaut.png\")))
         (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
    (plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:radius 2)
    (gimp-file-save RUN-NONINTERACTIVE img \"/tmp/out/procedure.png\"))
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"/tmp/astronaut.png\")))
         (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
    (gimp-drawable-append-new-filter layer \"cudafx:median\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 2)
    (show \"LIVE\" (map (lambda (f) (car (gimp-drawable-filter-get-operation-name f)))
                       (vector->list (car (gimp-drawable-get-filters layer)))))
    (gimp-drawable-merge-filters layer)
    (gimp-file-save RUN-NONINTERACTIVE img \"/tmp/out/live.png\"))
  (display (string-append \"\nall \" \"DONE\n\"))"
in_root /usr/bin/env HOME=/tmp/home XDG_CONFIG_HOME=/tmp/home/.config XDG_DATA_HOME=/tmp/home/.local/share \
  timeout 300 gimp-console -i --batch-interpreter=plug-in-script-fu-eval -b "(begin $script)" --quit \
  >"$log.gimp" 2>&1 || true
grep -q "^all DONE" "$log.gimp" || fail "gimp" "the Script-Fu run failed: $(grep -m3 -i -A1 error "$log.gimp")"
# Script-Fu 3 gives GIMP's booleans as 1 and 0.
grep -Eqx "PROC=(1|#t)" "$log.gimp" && pass "GIMP 3 finds plug-in-cudafx-median" || fail "gimp/procedure" "$(grep '^PROC=' "$log.gimp")"
grep -qx "LIVE=(cudafx:median)" "$log.gimp" && pass "GIMP 3 adds cudafx:median as a live filter" \
  || fail "gimp/live" "$(grep '^LIVE=' "$log.gimp")"
if [ -n "$(find "$root/tmp/home" -path '*plug-ins*' -name 'cudafx*' -o -path '*gegl-0.4*' -name '*cudafx*')" ]; then
  fail "profile" "cudafx files in the user's folders: $(find "$root/tmp/home" -name '*cudafx*')"
fi

in_root /usr/bin/env HOME=/tmp/home CUDAFX_BACKEND=cpu cudafx median --radius 2 /tmp/astronaut.png /tmp/out/cli.png \
  >"$log.cli" 2>&1 || fail "cli" "$(tail -n 3 "$log.cli")"
in_root /usr/bin/env HOME=/tmp/home gegl /tmp/astronaut.png -o /tmp/out/gegl.png -- cudafx:median radius=2 \
  >"$log.gegl" 2>&1 || fail "gegl" "$(tail -n 3 "$log.gegl")"
for f in procedure live gegl; do
  if [ ! -f "$root/tmp/out/$f.png" ]; then fail "$f" "no output"
  elif in_root gegl-imgcmp /tmp/out/cli.png "/tmp/out/$f.png" >"$log.cmp-$f" 2>&1; then
    pass "$f: the installed cudafx median equals the installed CLI"
  else fail "$f" "differs from the CLI: $(tail -n 2 "$log.cmp-$f")"; fi
done

step remove apt-get remove -y -qq cudafx && pass "apt-get remove cudafx" || finish
snapshot >"$tmp/after"
if left=$(diff "$tmp/before" "$tmp/after"); then
  pass "after apt-get remove the root holds what it held before the install"
else
  fail "remove" "left behind: $left"
fi
in_root dpkg-query -W -f '${db:Status-Abbrev}' cudafx 2>/dev/null | grep -q '^i' && fail "remove" "dpkg still lists cudafx"
finish
