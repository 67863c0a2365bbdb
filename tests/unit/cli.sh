#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Tests of the cudafx command-line tool (cli/): usage errors exit 2
# and name the option, runtime errors exit 1, neither creates OUT nor touches
# an existing one; each filter runs on the test images and writes a valid
# image of the same size and depth; --json and --palette-out write what they
# promise; damaged and hostile input files are refused (the corpus of
# tests/reliability/damaged_files.py, each case counted), the paths people
# use (IN = OUT, a full disk, a read-only directory, symbolic links, FIFOs,
# names with spaces and non-ASCII letters) behave, and ICC/EXIF/XMP
# metadata goes from input to output unless --strip.
# Ends with "N passed, N failed". Usage: tests/unit/cli.sh BUILD/cudafx
set -u
cli=${1:?usage: tests/unit/cli.sh BUILD/cudafx}
cli=$(cd "$(dirname "$cli")" && pwd)/$(basename "$cli")
cd "$(dirname "$0")/../.."
data=tests/data
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect STATUS PATTERN ARGS...: cudafx ARGS exits STATUS, stderr names
# PATTERN (fixed string), and neither $tmp/out.png nor a temporary file appears.
expect() {
  local want=$1 pattern=$2; shift 2
  rm -f "$tmp/out.png"
  "$cli" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    bad "cudafx $* exited $rc, expected $want: $(tail -n 3 "$tmp/stderr")"
  elif ! grep -qF -- "$pattern" "$tmp/stderr"; then
    bad "cudafx $*: stderr does not mention '$pattern': $(cat "$tmp/stderr")"
  elif [ -e "$tmp/out.png" ] || ls -A "$tmp" | grep -q '\.cudafx-'; then
    bad "cudafx $*: output or temporary file left behind"
  else
    ok
  fi
}

# png_info FILE: "WIDTH HEIGHT BITDEPTH CHANNELS" of a PNG whose chunks all
# check out and whose pixel data inflates to the right size; fails otherwise.
png_info() {
  "$py" - "$1" <<'EOF'
import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat, ihdr = 8, b'', None
while pos < len(d):
    n, = struct.unpack('>I', d[pos:pos + 4])
    kind, body = d[pos + 4:pos + 8], d[pos + 8:pos + 8 + n]
    crc, = struct.unpack('>I', d[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) & 0xffffffff == crc, 'bad CRC'
    if kind == b'IHDR':
        ihdr = body
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
    if kind == b'IEND':
        break
w, h, depth, color, _, _, interlace = struct.unpack('>IIBBBBB', ihdr)
ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
raw = zlib.decompress(idat)
assert interlace or len(raw) == h * (1 + (w * ch * depth + 7) // 8), 'short pixel data'
print(w, h, depth, ch)
EOF
}

# image_is FILE "W H DEPTH CHANNELS" WHAT
image_is() {
  local got
  got=$(png_info "$1" 2>/dev/null)
  if [ "$got" = "$2" ]; then ok; else bad "$3: $1 is '${got:-not a valid PNG}', expected '$2'"; fi
}

# run_ok WHAT ARGS...: cudafx ARGS succeeds (stdout kept in $tmp/stdout).
run_ok() {
  local what=$1; shift
  if "$cli" "$@" >"$tmp/stdout" 2>"$tmp/stderr"; then
    ok; return 0
  fi
  bad "$what: cudafx $* failed: $(tail -n 3 "$tmp/stderr")"
  return 1
}

# json_ok WHAT PYTHON-EXPR: stdout is one JSON object j for which EXPR holds.
json_ok() {
  if "$py" -c "import json, sys; j = json.load(sys.stdin); sys.exit(0 if ($2) else 1)" <"$tmp/stdout" 2>/dev/null
  then ok; else bad "$1: JSON check '$2' failed on: $(cat "$tmp/stdout")"; fi
}

grey=$data/camera.png   # 512x512 grey, 8-bit
rgb=$data/chelsea.png   # 451x300 RGB, 8-bit
out=$tmp/out.png

echo "-- usage errors: exit 2, the message names the problem, OUT not created"
expect 2 "Usage"
expect 2 "unknown command 'blur'" blur "$rgb" "$out"
expect 2 "--frobnicate" median --frobnicate "$rgb" "$out"
expect 2 "-x" median -x "$rgb" "$out"
expect 2 "--radius needs a value" median "$rgb" "$out" --radius
expect 2 "--radius 'abc' is not an integer" median --radius abc "$rgb" "$out"
expect 2 "--radius '2.5' is not an integer" median --radius 2.5 "$rgb" "$out"
expect 2 "--radius 0 is out of range 1..100" median --radius 0 "$rgb" "$out"
expect 2 "--radius 101 is out of range 1..100" median --radius 101 "$rgb" "$out"
expect 2 "--percentile 'x' is not a number" median --percentile x "$rgb" "$out"
expect 2 "--percentile 100.5 is out of range 0..100" median --percentile 100.5 "$rgb" "$out"
expect 2 "--shape 'star' is not one of square, circle" median --shape star "$rgb" "$out"
expect 2 "--h 0 is out of range 0.1..100" nl-means --h 0 "$rgb" "$out"
expect 2 "--patch-radius 6 is out of range 1..5" nl-means --patch-radius 6 "$rgb" "$out"
expect 2 "--search-radius 21 is out of range 1..20" nl-means --search-radius 21 "$rgb" "$out"
expect 2 "--auto cannot be combined" nl-means --auto --h 5 "$rgb" "$out"
expect 2 "--sigma 0 is out of range 0.1..100" nl-bayes --sigma 0 "$rgb" "$out"
expect 2 "--sigma 100.5 is out of range 0.1..100" nl-bayes --sigma 100.5 "$rgb" "$out"
expect 2 "--sigma 'x' is not a number" nl-bayes --sigma x "$rgb" "$out"
expect 2 "--auto cannot be combined with --sigma" nl-bayes --auto --sigma 5 "$rgb" "$out"
expect 2 "--flat-area takes no value" nl-bayes --flat-area=1 "$rgb" "$out"
expect 2 "--colors 1 is out of range 2..256" quantize --colors 1 "$rgb" "$out"
expect 2 "--colors 257 is out of range 2..256" quantize --colors 257 "$rgb" "$out"
expect 2 "--dither 'sideways' is not one of" quantize --dither sideways "$rgb" "$out"
expect 2 "--seed -1 is out of range" quantize --seed -1 "$rgb" "$out"
expect 2 "--palette-out" median --palette-out "$tmp/p.gpl" "$rgb" "$out"
expect 2 "--kernel is 2x2; the size must be odd" convolve --kernel "1,2;3,4" "$rgb" "$out"
expect 2 "--kernel: value 2 of row 1 is not a number" convolve --kernel "1,x,1;1,1,1;1,1,1" "$rgb" "$out"
expect 2 "--kernel must be square" convolve --kernel "1,2,3;4,5,6" "$rgb" "$out"
expect 2 "--kernel must be square" convolve --kernel "1,2,3;4,5;6,7,8" "$rgb" "$out"
expect 2 "the size must be odd, 1..31" convolve --kernel "$("$py" -c "print(';'.join([','.join(['1'] * 33)] * 33))")" "$rgb" "$out"
expect 2 "--kernel cannot be combined with --preset gaussian" convolve --preset gaussian --kernel 1 "$rgb" "$out"
expect 2 "--preset 'emboss' is not one of" convolve --preset emboss "$rgb" "$out"
expect 2 "--border 'reflect' is not one of clamp, mirror, wrap, black" convolve --border reflect "$rgb" "$out"
expect 2 "--sigma 51 is out of range 0.1..50" convolve --sigma 51 "$rgb" "$out"
expect 2 "--offset -256 is out of range -255..255" convolve --offset -256 "$rgb" "$out"
expect 2 "--backend 'gpu' is not one of auto, cpu, cuda" median --backend gpu "$rgb" "$out"
expect 2 "--threads -1 is out of range" median --threads -1 "$rgb" "$out"
expect 2 "--json takes no value" median --json=yes "$rgb" "$out"
expect 2 "missing OUT" median "$rgb"
expect 2 "missing IN and OUT" median --radius 2
expect 2 "unexpected argument" median "$rgb" "$out" "$tmp/third.png"
expect 2 "no saver" median "$rgb" "$tmp/out.unknown-format"
[ -e "$tmp/out.unknown-format" ] && bad "an output with an unknown extension was created" || ok
expect 2 "unknown argument" info --verbose

echo "-- runtime errors: exit 1, OUT not created, an existing OUT left intact"
expect 1 "cannot read '$tmp/missing.png'" median "$tmp/missing.png" "$out"
echo "not an image" >"$tmp/text.png"
expect 1 "cannot load '$tmp/text.png'" median "$tmp/text.png" "$out"
expect 1 "is a directory" median "$tmp" "$out"
expect 1 "cannot write '$tmp/no/such/dir/out.png'" median --radius 1 "$rgb" "$tmp/no/such/dir/out.png"
expect 1 "cannot write '$tmp/text.png/out.png'" median --radius 1 "$rgb" "$tmp/text.png/out.png"
echo "precious" >"$tmp/keep.png"
for args in "median $tmp/missing.png" "median --radius 0 $rgb" "median $tmp/text.png"; do
  # shellcheck disable=SC2086
  "$cli" $args "$tmp/keep.png" 2>/dev/null
  if [ "$(cat "$tmp/keep.png")" = "precious" ]; then ok; else bad "cudafx $args changed an existing OUT"; fi
done

echo "-- help and info"
for cmd in "" median nl-means quantize convolve nl-bayes info; do
  # shellcheck disable=SC2086
  if "$cli" $cmd --help >"$tmp/help" 2>&1 && grep -q "Usage: cudafx" "$tmp/help"; then ok
  else bad "cudafx $cmd --help"; fi
done
"$cli" median --radius 999 --help >/dev/null 2>&1 && ok || bad "--help after a bad option does not win"
missing=""
for opt in radius percentile shape backend threads json help; do
  "$cli" median --help | grep -q -- "--$opt" || missing="$missing --$opt"
done
"$cli" median --help | tr -s '\n ' '  ' | grep -q "Integer 1..100, default 3." || missing="$missing (radius range)"
for opt in auto no-auto h patch-radius search-radius; do
  "$cli" nl-means --help | grep -q -- "--$opt" || missing="$missing --$opt"
done
for opt in colors color-space dither max-iterations seed palette palette-out; do
  "$cli" quantize --help | grep -q -- "--$opt" || missing="$missing --$opt"
done
for opt in preset kernel sigma divisor offset border; do
  "$cli" convolve --help | grep -q -- "--$opt" || missing="$missing --$opt"
done
for opt in auto no-auto sigma flat-area no-flat-area backend output-dir; do
  "$cli" nl-bayes --help | grep -q -- "--$opt" || missing="$missing nl-bayes --$opt"
done
"$cli" nl-bayes --help | tr -s '\n ' '  ' | grep -q "Number 0.1..100, default 10." || missing="$missing (nl-bayes sigma range)"
"$cli" --help | grep -q "nl-bayes" || missing="$missing (nl-bayes in the commands)"
[ -z "$missing" ] && ok || bad "--help does not list:$missing"
run_ok "info" info && grep -q "^cudafx " "$tmp/stdout" && ok || bad "info prints no version"
run_ok "info --json" info --json && json_ok "info --json" "'version' in j and 'backends' in j"

echo "-- each filter writes an image of the input's size, layout and depth"
run_ok "median" median --radius 2 "$rgb" "$out" && image_is "$out" "451 300 8 3" "median RGB"
run_ok "median grey circle" median --radius 1 --shape circle --percentile 25 --threads 1 "$grey" "$out" &&
  image_is "$out" "512 512 8 1" "median grey"
run_ok "nl-means manual" nl-means --h 12 --patch-radius 1 --search-radius 3 --json "$rgb" "$out" &&
  image_is "$out" "451 300 8 3" "nl-means" &&
  json_ok "nl-means --json" "j['filter'] == 'nl-means' and j['auto'] is False and j['sigma'] > 0 and j['h'] == 12 and j['search_radius'] == 3 and j['patch_sigma'] == 0 and j['centre_weight'] == '1'"
run_ok "nl-means auto" nl-means --json "$grey" "$out" && image_is "$out" "512 512 8 1" "nl-means auto" &&
  json_ok "nl-means auto --json" "j['auto'] is True and j['sigma'] >= 0 and 1 <= j['patch_radius'] <= 5 and 1 <= j['search_radius'] <= 20 and j['h'] > 0 and j['patch_sigma'] >= 0 and j['centre_weight'] in ('1', 'max')"
# nl-bayes on small crops: its CPU takes seconds a quarter megapixel.
"$py" -c "from PIL import Image
Image.open('$rgb').crop((100, 80, 196, 160)).save('$tmp/nlb-rgb.png')
Image.open('$grey').crop((200, 200, 290, 270)).save('$tmp/nlb-grey.png')"
run_ok "nl-bayes auto" nl-bayes --json "$tmp/nlb-rgb.png" "$out" && image_is "$out" "96 80 8 3" "nl-bayes auto" &&
  json_ok "nl-bayes auto --json" "j['filter'] == 'nl-bayes' and j['auto'] is True and j['sigma'] > 0 and j['flat_area'] is True and len(j['patch_size']) == len(j['group_size']) == len(j['search_size']) == 2 and all(3 <= k <= 7 for k in j['patch_size']) and all(n % 2 == 1 for n in j['search_size']) and j['noise_model']['kind'] in ('flat', 'signal-dependent')"
run_ok "nl-bayes manual grey" nl-bayes --sigma 20 --no-flat-area --json "$tmp/nlb-grey.png" "$out" &&
  image_is "$out" "90 70 8 1" "nl-bayes grey" &&
  json_ok "nl-bayes manual --json" "j['auto'] is False and j['sigma'] == 20 and j['flat_area'] is False and j['noise_model']['kind'] == 'flat' and j['noise_model']['sigma'] == 20 and j['noise_model']['correlated'] is False and j['patch_size'] == [5, 5]"
cp "$out" "$tmp/nlb-grey-manual.png"
run_ok "nl-bayes --no-auto" nl-bayes --no-auto --json "$tmp/nlb-grey.png" "$out" &&
  json_ok "nl-bayes --no-auto --json" "j['auto'] is False and j['sigma'] == 10"
mkdir -p "$tmp/nlb-batch"
run_ok "nl-bayes batch" nl-bayes --sigma 20 --no-flat-area --json --output-dir "$tmp/nlb-batch" "$tmp/nlb-grey.png" "$tmp/nlb-rgb.png" &&
  [ "$(grep -c '"filter": "nl-bayes"' "$tmp/stdout")" -eq 2 ] && cmp -s "$tmp/nlb-batch/nlb-grey.png" "$tmp/nlb-grey-manual.png" && ok ||
  bad "nl-bayes --output-dir: not two JSON lines, or the grey file unlike a one-file run"
run_ok "quantize" quantize --colors 8 --seed 3 --palette-out "$tmp/pal.gpl" --json "$rgb" "$out" &&
  image_is "$out" "451 300 8 3" "quantize" &&
  json_ok "quantize --json" "j['filter'] == 'quantize' and 2 <= len(j['palette']) <= 8 and all(len(c) == 3 for c in j['palette']) and j['iterations'] >= 1"
if [ -f "$tmp/pal.gpl" ] && "$py" - "$tmp/pal.gpl" "$tmp/stdout" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == 'GIMP Palette' and lines[1].startswith('Name: ') and lines[2].startswith('Columns: ')
assert lines[3] == '#'
colors = [tuple(int(v) for v in l.split('\t')[0].split()) for l in lines[4:]]
assert all(len(c) == 3 and all(0 <= v <= 255 for v in c) for c in colors)
palette = json.load(open(sys.argv[2]))['palette']
assert colors == [tuple(min(255, max(0, round(v))) for v in c) for c in palette]
EOF
then ok; else bad "--palette-out did not write a GIMP palette matching the JSON palette"; fi
run_ok "quantize dither" quantize --colors 4 --dither floyd-steinberg --color-space rgb "$grey" "$out" &&
  image_is "$out" "512 512 8 1" "quantize grey"

echo "-- quantize --palette FILE.gpl: every pixel one of the file's colours, every dither"
printf 'GIMP Palette\r\nName: three\r\n# comment\r\n  0   0   0\tBlack\r\n255 255 255 White\r\n128 128 128\r\n' >"$tmp/grey3.gpl"
printf 'GIMP Palette\nName: brand\nColumns: 2\n#\n200  30  40\tRed\n 20 120 200\tBlue\n250 220 180\n 30  30  30\n' >"$tmp/brand.gpl"
for dither in none floyd-steinberg floyd-steinberg-reduced-bleeding ordered blue-noise; do
  run_ok "quantize --palette --dither $dither" quantize --palette "$tmp/brand.gpl" --dither $dither --json "$rgb" "$out" &&
    image_is "$out" "451 300 8 3" "quantize --palette" &&
    json_ok "quantize --palette $dither --json" "j['palette'] == [[200, 30, 40], [20, 120, 200], [250, 220, 180], [30, 30, 30]] and j['iterations'] == 0" &&
    if "$py" - "$out" <<'EOF'
import sys
from PIL import Image
colours = set(Image.open(sys.argv[1]).convert('RGB').getdata())
sys.exit(0 if colours <= {(200, 30, 40), (20, 120, 200), (250, 220, 180), (30, 30, 30)} else 1)
EOF
    then ok; else bad "quantize --palette --dither $dither wrote colours outside the palette"; fi
done
run_ok "quantize grey --palette" quantize --palette "$tmp/grey3.gpl" --dither ordered "$grey" "$out" &&
  image_is "$out" "512 512 8 1" "quantize grey --palette"
expect 2 "grey.gpl: cannot open the palette" quantize --palette "$tmp/grey.gpl" "$rgb" "$out"
printf 'GIMP Palette\n1 2 3\n4 5 300\n' >"$tmp/bad.gpl"
expect 2 "bad.gpl:3: blue value \"300\" is out of range 0..255" quantize --palette "$tmp/bad.gpl" "$rgb" "$out"
printf 'JASC-PAL\n' >"$tmp/jasc.gpl"
expect 2 "jasc.gpl:1: not a GIMP palette" quantize --palette "$tmp/jasc.gpl" "$rgb" "$out"
expect 2 "--colors cannot be combined with --palette" quantize --palette "$tmp/brand.gpl" --colors 8 "$rgb" "$out"
expect 2 "--seed cannot be combined with --palette" quantize --seed 2 --palette "$tmp/brand.gpl" "$rgb" "$out"
expect 1 "is not grey" quantize --palette "$tmp/brand.gpl" "$grey" "$out"
expect 2 "is not one of none, floyd-steinberg, floyd-steinberg-reduced-bleeding, ordered, blue-noise" quantize --dither dots "$rgb" "$out"
run_ok "convolve gaussian" convolve --sigma 1 --json "$rgb" "$out" && image_is "$out" "451 300 8 3" "convolve" &&
  json_ok "convolve --json" "set(j) >= {'filter', 'backend', 'device', 'width', 'height', 'ms'} and (j['width'], j['height']) == (451, 300) and j['backend'] in ('cpu', 'cuda')"
run_ok "convolve kernel" convolve --kernel "0,-1,0; -1,5,-1; 0,-1,0" --divisor 1 --offset 10 --border wrap "$grey" "$out" &&
  image_is "$out" "512 512 8 1" "convolve custom"
run_ok "convolve sobel" convolve --preset=sobel-horizontal --border=black --backend=cpu "$rgb" "$out" &&
  image_is "$out" "451 300 8 3" "convolve sobel"
ls -A "$tmp" | grep -q '\.cudafx-' && bad "temporary files left behind after successful runs" || ok

echo "-- 16-bit input keeps 16 bits"
# A 7x5 16-bit PPM of random samples; through the identity kernel it must
# come out as a 16-bit PNG, and a 16-bit PNG through a filter stays 16-bit.
{ printf 'P6\n7 5\n65535\n'; head -c $((7 * 5 * 3 * 2)) /dev/urandom; } >"$tmp/in16.ppm"
run_ok "16-bit PPM to PNG" convolve --kernel 1 "$tmp/in16.ppm" "$tmp/in16.png" &&
  image_is "$tmp/in16.png" "7 5 16 3" "16-bit PPM to PNG"
run_ok "16-bit PNG median" median --radius 1 "$tmp/in16.png" "$out" && image_is "$out" "7 5 16 3" "16-bit median"
run_ok "16-bit PNG quantize" quantize --colors 3 "$tmp/in16.png" "$out" && image_is "$out" "7 5 16 3" "16-bit quantize"

echo "-- alpha is kept"
# make_png FILE W H CHANNELS: a random 8-bit PNG (grey+alpha or RGBA here).
make_png() {
  "$py" - "$@" <<'EOF'
import os, struct, sys, zlib
path, w, h, ch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = b''.join(b'\0' + os.urandom(w * ch) for _ in range(h))
def chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)
color = {1: 0, 2: 4, 3: 2, 4: 6}[ch]
open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, color, 0, 0, 0))
                      + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))
EOF
}
make_png "$tmp/rgba.png" 6 5 4 && make_png "$tmp/greya.png" 6 5 2
run_ok "median RGBA" median --radius 1 "$tmp/rgba.png" "$out" && image_is "$out" "6 5 8 4" "median RGBA"
run_ok "convolve grey+alpha" convolve --preset blur-3x3 "$tmp/greya.png" "$out" && image_is "$out" "6 5 8 2" "convolve grey+alpha"
run_ok "quantize RGBA" quantize --colors 2 "$tmp/rgba.png" "$out" && image_is "$out" "6 5 8 4" "quantize RGBA"

echo "-- several inputs: --output-dir"
# Three good files (grey PNG, RGB PNG, 16-bit PPM) and a damaged one between
# them: the good ones are written under their own names and formats, each the
# same as a one-file run writes, the damaged one is reported by name, the
# exit status is 1 and no temporary file is left.
mkdir -p "$tmp/in" "$tmp/batch" "$tmp/single"
cp "$grey" "$rgb" "$tmp/in/" && cp "$tmp/in16.ppm" "$tmp/in/deep.ppm"
echo "not an image" >"$tmp/in/broken.png"
batch_in="$tmp/in/camera.png $tmp/in/broken.png $tmp/in/chelsea.png $tmp/in/deep.ppm"
# shellcheck disable=SC2086
"$cli" median --radius 1 --json --output-dir "$tmp/batch" $batch_in >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
[ "$rc" -eq 1 ] && ok || bad "a batch with a damaged file exited $rc, expected 1"
grep -qF "cannot load '$tmp/in/broken.png'" "$tmp/stderr" && ok || bad "the damaged file is not named: $(cat "$tmp/stderr")"
[ "$(ls -A "$tmp/batch" | sort | tr '\n' ' ')" = "camera.png chelsea.png deep.ppm " ] && ok ||
  bad "batch outputs: $(ls -A "$tmp/batch" | tr '\n' ' '), expected camera.png chelsea.png deep.ppm"
for f in camera.png chelsea.png deep.ppm; do
  "$cli" median --radius 1 "$tmp/in/$f" "$tmp/single/$f" 2>/dev/null
  cmp -s "$tmp/batch/$f" "$tmp/single/$f" && ok || bad "batch output $f differs from a one-file run's"
done
head -c 2 "$tmp/batch/deep.ppm" | grep -q P6 && ok || bad "deep.ppm was not written as PPM"
if "$py" - "$tmp/stdout" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
by = {l['input'].rsplit('/', 1)[1]: l for l in lines}
assert sorted(by) == ['broken.png', 'camera.png', 'chelsea.png', 'deep.ppm'], sorted(by)
assert 'cannot load' in by['broken.png']['error'] and 'backend' not in by['broken.png']
for name in ('camera.png', 'chelsea.png', 'deep.ppm'):
    j = by[name]
    assert 'error' not in j and j['output'].endswith('/' + name) and j['filter'] == 'median'
    assert j['backend'] in ('cpu', 'cuda') and j['backend_reason']
assert (by['camera.png']['width'], by['camera.png']['height']) == (512, 512)
EOF
then ok; else bad "--json in a batch: not one line per file with input, output and error or results: $(cat "$tmp/stdout")"; fi
ls -A "$tmp/batch" "$tmp/in" | grep -q '^\.cudafx-' && bad "a batch left temporary files" || ok

rm -rf "$tmp/batch"
expect 1 "cannot write to '$tmp/batch'" median --output-dir "$tmp/batch" "$rgb" "$grey"
[ -e "$tmp/batch" ] && bad "a missing output directory was created" || ok
expect 1 "cannot write to '$tmp/text.png'" median --output-dir "$tmp/text.png" "$rgb"
mkdir -p "$tmp/batch"
expect 2 "would both be written to '$tmp/batch/chelsea.png'" median --output-dir "$tmp/batch" "$rgb" "$tmp/in/chelsea.png"
expect 2 "missing IN" median --output-dir "$tmp/batch"
expect 2 "cannot be combined with --output-dir" quantize --palette-out "$tmp/p.gpl" --output-dir "$tmp/batch" "$rgb"
expect 2 "--output-dir needs a directory" median --output-dir= "$rgb"
[ -z "$(ls -A "$tmp/batch")" ] && ok || bad "a refused batch wrote $(ls -A "$tmp/batch")"
run_ok "batch of one" convolve --preset blur-3x3 --output-dir "$tmp/batch" "$rgb" &&
  image_is "$tmp/batch/chelsea.png" "451 300 8 3" "batch of one"

# Three engine workers share a batch (on the CPU here, on one device with
# CUDAFX_BACKEND=cuda): every file is filtered once, into what one worker
# writes. Six files, so each worker gets some.
mkdir -p "$tmp/w3" "$tmp/w1" "$tmp/win"
for i in 1 2 3 4 5 6; do cp "$rgb" "$tmp/win/rgb$i.png"; cp "$grey" "$tmp/win/grey$i.png"; done
"$cli" nl-means --json --workers 3 --output-dir "$tmp/w3" "$tmp"/win/*.png >"$tmp/w3.json" 2>"$tmp/stderr" &&
  "$cli" nl-means --workers 1 --output-dir "$tmp/w1" "$tmp"/win/*.png 2>>"$tmp/stderr" && ok ||
  bad "--workers 3 / 1 failed: $(cat "$tmp/stderr")"
[ "$(wc -l <"$tmp/w3.json")" -eq 12 ] && [ "$(grep -c '"error"' "$tmp/w3.json")" -eq 0 ] && ok ||
  bad "--workers 3: $(wc -l <"$tmp/w3.json") JSON lines for 12 files"
[ "$(cut -d, -f1 "$tmp/w3.json" | sort -u | wc -l)" -eq 12 ] && ok || bad "--workers 3 filtered a file twice"
for f in "$tmp"/win/*.png; do
  name=$(basename "$f")
  cmp -s "$tmp/w3/$name" "$tmp/w1/$name" || { bad "--workers 3 wrote $name unlike one worker"; break; }
done && ok
expect 2 "--workers 65 is out of range 0..64" median --workers 65 --output-dir "$tmp/batch" "$rgb"

# On a terminal, a progress line with the count (script(1) gives a terminal);
# without one, a batch that succeeds prints nothing.
if command -v script >/dev/null; then
  script -qec "'$cli' median --radius 1 --output-dir '$tmp/batch' '$rgb' '$grey' '$tmp/in/broken.png'" \
    /dev/null >"$tmp/tty" 2>&1
  grep -qF "[3/3] 1 failed" "$tmp/tty" && ok || bad "no progress line on a terminal: $(tr '\r' '\n' <"$tmp/tty" | tail -n 3)"
fi
"$cli" median --radius 1 --output-dir "$tmp/batch" "$rgb" "$grey" 2>"$tmp/stderr"
grep -qE '\[[0-9]+/[0-9]+\]|^cudafx: ' "$tmp/stderr" && bad "a progress line or message without a terminal: $(cat "$tmp/stderr")" || ok

echo "-- pixel values where the result is known"
# samples FILE: "W H MAXVAL" then every sample, of a binary PPM/PGM or of a
# non-interlaced PNG (filters undone here, so nothing of cudafx reads it).
samples() {
  "$py" - "$1" <<'EOF'
import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
if d[:2] in (b'P5', b'P6'):
    fields, pos = [], 2
    while len(fields) < 3:
        while d[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not d[end:end + 1].isspace():
            end += 1
        fields.append(int(d[pos:end]))
        pos = end
    w, h, maxval = fields
    size = 2 if maxval > 255 else 1
    data = d[pos + 1:]
    vals = [int.from_bytes(data[i:i + size], 'big') for i in range(0, len(data), size)]
else:
    assert d[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG or PPM'
    pos, idat = 8, b''
    while pos < len(d):
        n, = struct.unpack('>I', d[pos:pos + 4])
        kind, body = d[pos + 4:pos + 8], d[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            w, h, depth, color, _, _, interlace = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat += body
        pos += 12 + n
    assert not interlace and depth in (8, 16)
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    size, raw = depth // 8, zlib.decompress(idat)
    bpp, stride = ch * size, w * ch * size
    prev, out = bytearray(stride), bytearray()
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    maxval = (1 << depth) - 1
    vals = [int.from_bytes(out[i:i + size], 'big') for i in range(0, len(out), size)]
print(w, h, maxval, *vals)
EOF
}

# same_samples WHAT A B: A and B hold the same size, depth and samples.
same_samples() {
  local a b
  a=$(samples "$2" 2>&1) b=$(samples "$3" 2>&1)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "$1: $3 differs from $2 (${b:0:60}... vs ${a:0:60}...)"; fi
}

identity="0,0,0; 0,1,0; 0,0,0"
make_png "$tmp/rgb8.png" 37 23 3
run_ok "identity 8-bit" convolve --kernel "$identity" --border black "$tmp/rgb8.png" "$out" &&
  same_samples "identity kernel, 8-bit" "$tmp/rgb8.png" "$out"
run_ok "identity 16-bit" convolve --kernel "$identity" --border mirror "$tmp/in16.ppm" "$out" &&
  same_samples "identity kernel, 16-bit" "$tmp/in16.ppm" "$out"

# The benchmarks' switches are read by cudafx-bench alone (the CLI's objects
# and bench/cli_bench.c, built beside it): with CUDAFX_BENCH_CODECS_ONLY the
# shipped cudafx still filters, writing what it writes without it, and
# cudafx-bench writes the input's samples back, filtering as cudafx without it.
bench_cli=$(dirname "$cli")/cudafx-bench
run_ok "median, the reference" median --radius 2 "$tmp/rgb8.png" "$tmp/plain.png"
CUDAFX_BENCH_CODECS_ONLY=1 run_ok "median with CUDAFX_BENCH_CODECS_ONLY" median --radius 2 "$tmp/rgb8.png" "$out" &&
  { cmp -s "$out" "$tmp/plain.png" && ok || bad "CUDAFX_BENCH_CODECS_ONLY changed what cudafx writes"; }
if [ -x "$bench_cli" ]; then
  CUDAFX_BENCH_CODECS_ONLY=1 "$bench_cli" median --radius 2 "$tmp/rgb8.png" "$out" 2>"$tmp/stderr" &&
    same_samples "cudafx-bench, codecs only" "$tmp/rgb8.png" "$out" || bad "cudafx-bench failed: $(cat "$tmp/stderr")"
  "$bench_cli" median --radius 2 "$tmp/rgb8.png" "$out" 2>"$tmp/stderr" && cmp -s "$out" "$tmp/plain.png" && ok ||
    bad "cudafx-bench without its switches does not write what cudafx writes: $(cat "$tmp/stderr")"
else
  bad "$bench_cli not built (make BUILD/cudafx-bench)"
fi
# Constant images, 8 and 16 bits: every median and percentile is the colour.
"$py" - "$tmp/flat.ppm" "$tmp/flat16.ppm" <<'EOF'
import sys
open(sys.argv[1], 'wb').write(b'P6\n41 29\n255\n' + bytes([17, 200, 133]) * (41 * 29))
open(sys.argv[2], 'wb').write(b'P6\n23 19\n65535\n' + bytes([0x12, 0x34, 0xfe, 0xdc, 0x80, 0x01]) * (23 * 19))
EOF
run_ok "median of a constant image" median --radius 4 --percentile 30 "$tmp/flat.ppm" "$out" &&
  same_samples "median of a constant 8-bit image" "$tmp/flat.ppm" "$out"
run_ok "median of a constant 16-bit image" median --radius 2 --shape circle "$tmp/flat16.ppm" "$out" &&
  same_samples "median of a constant 16-bit image" "$tmp/flat16.ppm" "$out"

echo "-- --max-megapixels and --strip are options"
expect 2 "--max-megapixels 'x' is not a number" median --max-megapixels x "$rgb" "$out"
expect 2 "--max-megapixels '-1' is not a number" median --max-megapixels -1 "$rgb" "$out"
expect 2 "--strip takes no value" median --strip=1 "$rgb" "$out"
expect 1 "exceed the limit of 0.1 megapixels" median --max-megapixels 0.1 "$grey" "$out"
run_ok "--max-megapixels 0 (no limit)" median --max-megapixels 0 --radius 1 "$grey" "$out"
"$cli" median --help | grep -q -- "--max-megapixels" && "$cli" median --help | grep -q -- "--strip" && ok ||
  bad "--help does not list --max-megapixels and --strip"

echo "-- damaged and hostile files: an error naming the file, or the pixels Pillow decodes"
"$py" tests/reliability/damaged_files.py check "$cli" >"$tmp/damaged" 2>/dev/null
grep -E '^FAIL|^damaged files|^  \.' "$tmp/damaged"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/damaged")
if [ -n "$line" ]; then
  pass=$((pass + ${line%% passed*})); f=${line#*, }; fail=$((fail + ${f%% failed*}))
else
  bad "tests/reliability/damaged_files.py did not finish: $(tail -n 3 "$tmp/damaged")"
fi

echo "-- paths"
# IN and OUT the same file: replaced only once the new one is complete.
cp "$rgb" "$tmp/same.png"
run_ok "IN = OUT" median --radius 1 "$tmp/same.png" "$tmp/same.png" && image_is "$tmp/same.png" "451 300 8 3" "IN = OUT"
# IN = OUT with a failing run leaves the file as it was.
cp "$rgb" "$tmp/same.png"
"$cli" median --max-megapixels 0.01 "$tmp/same.png" "$tmp/same.png" 2>/dev/null
cmp -s "$rgb" "$tmp/same.png" && ok || bad "a failed IN = OUT run changed the file"
# Names with spaces and non-ASCII letters.
mkdir -p "$tmp/dir ñ é"
cp "$rgb" "$tmp/dir ñ é/in put ü.png"
run_ok "non-ASCII names" median --radius 1 "$tmp/dir ñ é/in put ü.png" "$tmp/dir ñ é/out ü.jpg" &&
  { [ -s "$tmp/dir ñ é/out ü.jpg" ] && ok || bad "non-ASCII output name not written"; }
expect 1 "cannot read '$tmp/dir ñ é/missing ü.png'" median "$tmp/dir ñ é/missing ü.png" "$out"
# IN a directory or a FIFO: refused at once (a FIFO is never read).
expect 1 "is a directory" median "$tmp/dir ñ é" "$out"
mkfifo "$tmp/fifo.png"
expect 1 "not a regular file" median "$tmp/fifo.png" "$out"
# OUT a symbolic link: its target is replaced (atomically), the link stays;
# after an error the target is as it was.
cp "$rgb" "$tmp/target.png"
ln -s target.png "$tmp/link.png"
run_ok "OUT a symbolic link" median --radius 1 "$grey" "$tmp/link.png" &&
  { [ -L "$tmp/link.png" ] && image_is "$tmp/target.png" "512 512 8 1" "the link's target replaced"; }
cp "$rgb" "$tmp/target.png"
"$cli" median "$tmp/text.png" "$tmp/link.png" 2>/dev/null
[ -L "$tmp/link.png" ] && cmp -s "$rgb" "$tmp/target.png" && ok || bad "a failed run through a link changed its target"
ls -A "$tmp" | grep -q '\.cudafx-' && bad "temporary files left behind by the path cases" || ok
# A full disk and a read-only file system: small tmpfs mounts (root only;
# otherwise a directory without write permission stands in for read-only).
mkdir -p "$tmp/full" "$tmp/ro"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=200k tmpfs "$tmp/full" 2>/dev/null; then
  for ext in png jpg tif webp ppm exr; do
    head -c 200000 /dev/zero >"$tmp/full/filler" 2>/dev/null
    echo precious >"$tmp/full/keep.$ext"
    "$cli" median --radius 1 "$rgb" "$tmp/full/keep.$ext" 2>"$tmp/stderr"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "No space left\|out of disk space" "$tmp/stderr" &&
      [ "$(cat "$tmp/full/keep.$ext")" = precious ] && ! ls -A "$tmp/full" | grep -q '\.cudafx-'; then ok
    else bad "full disk, .$ext: exit $rc, $(cat "$tmp/stderr"), left: $(ls -A "$tmp/full")"; fi
    rm -f "$tmp/full/filler" "$tmp/full/keep.$ext"
  done
  umount "$tmp/full"
  mount -t tmpfs -o ro tmpfs "$tmp/ro"
  expect 1 "Read-only file system" median "$rgb" "$tmp/ro/out.png"
  umount "$tmp/ro"
else
  chmod 555 "$tmp/ro"
  expect 1 "Permission denied" median "$rgb" "$tmp/ro/out.png"
  echo "   (not root: the full-disk cases need a tmpfs mount; skipped)"
fi

echo "-- hostile and careless use: refused at once, nothing lost, nothing left behind"
# Palettes: only a regular file of at most 1 MiB is read, so a FIFO or a
# device never blocks the run (timeout: a hang fails, never waits).
mkfifo "$tmp/fifo.gpl"
for p in "$tmp/fifo.gpl" /dev/zero; do
  timeout 10 "$cli" quantize --palette "$p" "$rgb" "$out" >/dev/null 2>"$tmp/stderr"; rc=$?
  [ "$rc" -eq 2 ] && grep -qF "$p: not a regular file" "$tmp/stderr" && [ ! -e "$out" ] && ok ||
    bad "quantize --palette $p: exit $rc (124: it hung): $(cat "$tmp/stderr")"
done
expect 2 "$tmp: is a directory, not a palette file" quantize --palette "$tmp" "$rgb" "$out"
{ echo "GIMP Palette"; head -c 1100000 /dev/zero | tr '\0' '#'; echo; } >"$tmp/huge.gpl"
expect 2 "huge.gpl: larger than 1024 KiB" quantize --palette "$tmp/huge.gpl" "$rgb" "$out"
: >"$tmp/empty.gpl"
expect 2 "empty.gpl: empty file" quantize --palette "$tmp/empty.gpl" "$rgb" "$out"
# --palette-out naming IN or OUT: refused before anything is written.
cp "$rgb" "$tmp/keep.png"
expect 2 "--palette-out '$tmp/keep.png' is the input image IN" \
  quantize --palette-out "$tmp/keep.png" "$tmp/keep.png" "$out"
cmp -s "$rgb" "$tmp/keep.png" && ok || bad "--palette-out IN changed the input"
expect 2 "--palette-out '$tmp/out.png' is the output image OUT" \
  quantize --palette-out "$tmp/out.png" "$rgb" "$out"
expect 2 "is the output image OUT" quantize --palette-out "$tmp/./out.png" "$rgb" "$out"
ln -sf keep.png "$tmp/keep-link.png"
expect 2 "is the input image IN" quantize --palette-out "$tmp/keep-link.png" "$tmp/keep.png" "$out"
cmp -s "$rgb" "$tmp/keep.png" && ok || bad "--palette-out through a link changed the input"
# An output name that fits but leaves no room for the temporary file's 15
# bytes more: the message says so.
long=$(printf 'n%.0s' $(seq 237)).png
expect 1 "its name is 241 bytes, and the temporary file" median "$rgb" "$tmp/$long"
# SIGINT, SIGTERM, SIGHUP while filtering (the output's temporary file
# exists), one file and a batch: the temporary files are removed and the
# process ends by the signal. Each run starts with the three signals at
# their default action, as from a terminal: a test run under nohup or as a
# background job inherits them ignored, and the CLI rightly keeps an
# ignored signal ignored.
mkdir -p "$tmp/sig"
cp "$data/astronaut.png" "$tmp/sig/in.png"
if "$py" - "$cli" "$tmp/sig" <<'EOF'
import os, signal, subprocess, sys, time
cli, d = sys.argv[1], sys.argv[2]
slow = ['nl-means', '--threads', '1', '--h', '10', '--patch-radius', '5', '--search-radius', '20']
os.makedirs(d + '/batch'); os.makedirs(d + '/b')
os.system("cp '%s/in.png' '%s/b/in2.png'" % (d, d))
failed = 0
def default_signals():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    for args in ([d + '/in.png', d + '/out.png'], ['--output-dir', d + '/batch', d + '/in.png', d + '/b/in2.png']):
        p = subprocess.Popen([cli] + slow + args, stderr=subprocess.PIPE, preexec_fn=default_signals)
        for _ in range(600):  # until a temporary file exists (or the run ended)
            if p.poll() is not None or any('.cudafx-' in n for _, _, f in os.walk(d) for n in f):
                break
            time.sleep(0.05)
        p.send_signal(sig)
        err = p.communicate()[1].decode()
        left = [n for _, _, f in os.walk(d) for n in f if '.cudafx-' in n]
        if p.returncode != -sig or left or 'interrupted by ' + sig.name not in err:
            print('%s %s: exit %s, left %s: %s' % (sig.name, args[-1], p.returncode, left, err))
            failed += 1
sys.exit(failed)
EOF
then ok; else bad "a signal left temporary files or did not end the run by that signal"; fi

# --json prints one valid JSON object whatever happens: a usage error, a
# failed single file, a refused output; names not in UTF-8 as U+FFFD.
json_lines() { # WHAT PYTHON-EXPR-OVER-LINES ARGS...: every stdout line is JSON, and EXPR holds for ls
  local what=$1 expr=$2; shift 2
  "$cli" "$@" >"$tmp/stdout" 2>/dev/null
  if "$py" -c "import json, sys
d = open(sys.argv[1], 'rb').read()
ls = [json.loads(l) for l in d.decode('utf-8').splitlines()]
sys.exit(0 if ($expr) else 1)" "$tmp/stdout" 2>/dev/null
  then ok; else bad "$what: --json printed '$(cat "$tmp/stdout")'"; fi
}
json_lines "usage error" "len(ls) == 1 and 'out of range' in ls[0]['error'] and ls[0]['status'] == 2" \
  median --json --radius 0 "$rgb" "$out"
json_lines "usage error before --json" "len(ls) == 1 and 'unknown option' in ls[0]['error']" \
  median --frobnicate --json "$rgb" "$out"
json_lines "missing input" "len(ls) == 1 and ls[0]['input'] == '$tmp/missing.png' and 'no such file' in ls[0]['error']" \
  median --json "$tmp/missing.png" "$out"
json_lines "no saver" "len(ls) == 1 and 'no saver' in ls[0]['error']" median --json "$rgb" "$tmp/out.xyz"
json_lines "batch into a missing directory" "len(ls) == 2 and all('cannot write to' in l['error'] for l in ls)" \
  median --json --output-dir "$tmp/no-such-dir" "$rgb" "$grey"
cp "$rgb" "$tmp/$(printf 'bad\377name.png')"
json_lines "a name with byte 0xFF" "len(ls) == 1 and ls[0]['input'].endswith('bad\ufffdname.png') and ls[0]['output'].endswith('o\ufffd\u00e9.png') and 'filter' in ls[0]" \
  median --radius 1 --json "$tmp/$(printf 'bad\377name.png')" "$tmp/$(printf 'o\377\303\251.png')"
# Messages that name what is wrong.
expect 2 "--sigma 1e309 is out of range 0.1..50" convolve --sigma 1e309 "$rgb" "$out"
expect 2 "--divisor 1e-320 is too small to be told from 0" convolve --kernel 1 --divisor 1e-320 "$rgb" "$out"
expect 2 "--kernel: value 1 of row 1, '1e309', is too large" convolve --kernel 1e309 "$rgb" "$out"
expect 2 "--kernel: value 2 of row 1, '1e-320', is too small" convolve --kernel "1,1e-320,1;1,1,1;1,1,1" "$rgb" "$out"
expect 2 "'-': standard input and output are not supported" median - "$out"
expect 2 "'-': standard input and output are not supported" median "$rgb" -
printf 'GIMP Palette\n1 2 3\n' >"$tmp/as-image.gpl"
expect 1 "it is a GIMP palette, not an image" median "$tmp/as-image.gpl" "$out"
grep -q gegl-magick "$tmp/stderr" && bad "a .gpl as IN mentions GEGL's temporary file" || ok
# A Gaussian up to the table's σ 50 runs in every host (the GEGL tests run σ 20).
run_ok "convolve --sigma 20" convolve --preset gaussian --sigma 20 "$grey" "$out"

# EXIF orientation 6 (turn 90° clockwise to display): JPEG, PNG and WebP
# keep the tag; TIFF writes it as its own Orientation tag; EXR (through
# GEGL, no tag) gets the pixels turned; --strip leaves it out everywhere.
if "$py" -c "
from PIL import Image
import numpy as np
a = np.zeros((40, 60, 3), np.uint8); a[:10, :20] = 255
ex = Image.Exif(); ex[0x0112] = 6
Image.fromarray(a).save('$tmp/orient.jpg', exif=ex.tobytes(), quality=95)" 2>/dev/null; then
  for ext in png tif exr; do run_ok "orientation -> .$ext" median --radius 1 "$tmp/orient.jpg" "$tmp/orient-out.$ext"; done
  run_ok "orientation --strip -> .tif" median --radius 1 --strip "$tmp/orient.jpg" "$tmp/orient-strip.tif"
  run_ok "EXR read back" convolve --kernel 1 "$tmp/orient-out.exr" "$tmp/orient-exr.png"
  if "$py" - "$tmp" <<'EOF'
import sys
from PIL import Image
import numpy as np
d = sys.argv[1]
png = Image.open(d + '/orient-out.png'); tif = Image.open(d + '/orient-out.tif')
assert png.getexif().get(0x0112) == 6 and png.size == (60, 40), 'PNG: tag kept, pixels as they were'
assert tif.tag_v2.get(274) == 6 and tif.size == (60, 40), 'TIFF: Orientation tag %s' % tif.tag_v2.get(274)
assert Image.open(d + '/orient-strip.tif').tag_v2.get(274, 1) == 1, '--strip: no orientation'
exr = np.asarray(Image.open(d + '/orient-exr.png')).astype(int)
exr = exr // 257 if exr.max() > 255 else exr
turned = np.rot90(np.asarray(png).astype(int), -1)
assert exr.shape == turned.shape and np.abs(exr - turned).max() <= 1, 'EXR: pixels not turned upright'
EOF
  then ok; else bad "EXIF orientation not kept consistently (see above)"; fi
else
  bad "could not make the orientation test file (python3-pil)"
fi

echo "-- metadata: ICC profile, EXIF and XMP carried; --strip drops them"
# Inputs made by Pillow with an ICC profile (Pillow's sRGB), EXIF (a camera
# make and a date) and an XMP packet; outputs read back by Pillow (ICC, EXIF)
# and by a byte search (XMP).
if "$py" - "$tmp" <<'EOF'
import sys
from PIL import Image, ImageCms
tmp = sys.argv[1]
icc = ImageCms.ImageCmsProfile(ImageCms.createProfile('sRGB')).tobytes()
img = Image.open('tests/data/chelsea.png').convert('RGB').crop((0, 0, 96, 64))
exif = Image.Exif()
exif[0x010F] = 'cudafx-test-camera'
exif[0x0132] = '2026:11:25 12:00:00'
xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><cudafx-test-xmp/></x:xmpmeta>'
img.save(tmp + '/meta.jpg', quality=95, icc_profile=icc, exif=exif.tobytes())
img.save(tmp + '/meta.png', icc_profile=icc, exif=exif.tobytes())
img.save(tmp + '/meta.webp', quality=95, icc_profile=icc, exif=exif.tobytes(), xmp=xmp)
open(tmp + '/icc', 'wb').write(icc)
open(tmp + '/xmp', 'wb').write(xmp)
EOF
then
  # meta_is FILE ICC EXIF XMP (each 1 or 0): what FILE carries.
  meta_is() {
    "$py" - "$tmp" "$@" <<'EOF'
import sys
from PIL import Image
tmp, path, want = sys.argv[1], sys.argv[2], [int(v) for v in sys.argv[3:6]]
icc, xmp = open(tmp + '/icc', 'rb').read(), open(tmp + '/xmp', 'rb').read()
with Image.open(path) as im:
    got = [int(im.info.get('icc_profile') == icc),
           int(im.getexif().get(0x010F) == 'cudafx-test-camera'),
           int(xmp in open(path, 'rb').read())]
if got != want:
    print(path, 'carries icc, exif, xmp:', got, 'expected', want)
    sys.exit(1)
EOF
  }
  # Pillow 9 writes no XMP into JPEG or PNG: cudafx carries it there from the WebP.
  run_ok "XMP into JPEG" convolve --kernel 1 "$tmp/meta.webp" "$tmp/meta.jpg"
  run_ok "XMP into PNG" convolve --kernel 1 "$tmp/meta.webp" "$tmp/meta.png"
  for in in meta.jpg meta.png meta.webp; do
    for ext in jpg png webp tif; do
      o="$tmp/m-${in#meta.}.$ext"
      # TIFF output carries the ICC profile and XMP, not EXIF (see README).
      if [ $ext = tif ]; then want="1 0 1"; else want="1 1 1"; fi
      run_ok "metadata $in -> .$ext" median --radius 1 "$tmp/$in" "$o" &&
        { meta_is "$o" $want && ok || bad "metadata $in -> .$ext"; }
      run_ok "--strip $in -> .$ext" median --radius 1 --strip "$tmp/$in" "$tmp/stripped.$ext" &&
        { meta_is "$tmp/stripped.$ext" 0 0 0 && ok || bad "--strip $in -> .$ext"; }
    done
  done
  run_ok "metadata from TIFF" median --radius 1 "$tmp/m-png.tif" "$tmp/from-tif.png" &&
    { meta_is "$tmp/from-tif.png" 1 0 1 && ok || bad "metadata TIFF -> PNG"; }
else
  bad "could not make the metadata test files (Pillow with ImageCms: python3-pil)"
fi

# A float TIFF with 67 NaN and infinite pixels: every filter that keeps them
# to themselves gives them back where they were, the others all finite.
if "$py" -c "
from PIL import Image
import numpy as np
r = np.random.default_rng(3)
a = (np.add.outer(np.arange(64), np.arange(64)) / 128 + r.normal(0, 0.05, (64, 64))).astype(np.float32)
i = r.choice(64 * 64, 67, replace=False)
a.flat[i] = np.array([np.nan, np.inf, -np.inf], np.float32)[np.arange(67) % 3]
Image.fromarray(a, 'F').save('$tmp/nonfinite.tif')" 2>/dev/null; then
  for f in "nl-means" "median --radius 2" "quantize --colors 4" "convolve --preset gaussian --sigma 2" \
           "convolve --preset sobel-horizontal --border mirror"; do
    run_ok "float TIFF with NaN: $f" $f "$tmp/nonfinite.tif" "$tmp/nonfinite-out.tif" &&
      { "$py" -c "
from PIL import Image
import numpy as np
a = np.array(Image.open('$tmp/nonfinite.tif')); b = np.array(Image.open('$tmp/nonfinite-out.tif'))
assert b.dtype == np.float32, b.dtype
assert (~np.isfinite(a) == ~np.isfinite(b)).all(), '%d non-finite values out of %d' % ((~np.isfinite(b)).sum(), (~np.isfinite(a)).sum())
assert np.array_equal(a[~np.isfinite(a)], b[~np.isfinite(a)], equal_nan=True), 'the non-finite values changed'
assert np.abs(b[np.isfinite(b)]).max() < 2, 'a value spread: %g' % np.abs(b[np.isfinite(b)]).max()
" && ok || bad "float TIFF with NaN: $f keeps the non-finite values to themselves"; }
  done
else
  bad "could not make the float TIFF (python3-pil, python3-numpy)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
