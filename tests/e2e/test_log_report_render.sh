#!/usr/bin/env bash
# test_log_report_render.sh: the report of two runs renders in headless Chromium (Debian's
# chromium): the DOM Chromium builds has the expected chart titles and SVG curves, and its
# screenshot is not blank (many colours, much ink, and both runs' colours present).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
[[ $GALLEY_SANITIZE == 1 ]] && skip "sanitizer build: the page is the same as the release build's, rendered there"
need_cmd python3 timeout
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || skip "needs chromium (Debian: apt-get install chromium; build.sh does)"

cd "$GL_TMP"
short=(train.epochs=3 train.target.above=1.5 log.dir=runs)
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${short[@]}"
assert_rc 3
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${short[@]}" optimizer.lr=0.03 name=lr0.03
assert_rc 3
run "$GALLEY" report runs -o report.html
assert_rc 0

# headless Chromium, without a sandbox (CI runs as root), its profile in GL_TMP.
chrome() {
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
        --hide-scrollbars --user-data-dir="$GL_TMP/profile" "$@" 2>>"$GL_TMP/chromium.log"
}

chrome --dump-dom "file://$GL_TMP/report.html" >dom.html || { tail -n 20 chromium.log >&2; fail "chromium --dump-dom failed"; }
for t in Loss Accuracy "Learning rate" Throughput "Time breakdown" "Run summary" Recipe; do
    grep -qF "<h2>$t</h2>" dom.html || fail "the rendered DOM has no '$t' title"
done
[[ $(grep -o '<polyline' dom.html | wc -l) -ge 12 ]] || fail "the rendered DOM has fewer than 12 curves"
info "DOM: 7 titles, $(grep -o '<polyline' dom.html | wc -l) curves"

chrome --window-size=1100,2200 --screenshot="$GL_TMP/shot.png" "file://$GL_TMP/report.html" >/dev/null ||
    { tail -n 20 chromium.log >&2; fail "chromium --screenshot failed"; }
[[ -s shot.png ]] || fail "no screenshot"
# Decode the PNG with the standard library (zlib) and look at its pixels.
python3 - shot.png <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = hdr
assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
rows, prev, i = [], bytearray(stride), 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
counts = {}
for line in rows:
    for x in range(0, stride, bpp):
        px = line[x:x + 3]
        counts[px] = counts.get(px, 0) + 1
total = w * h
bg = max(counts.values())
ink = total - bg
blue, red = counts.get(bytes((0x1f, 0x77, 0xb4)), 0), counts.get(bytes((0xd6, 0x27, 0x28)), 0)
print(f"[render] {w}x{h} screenshot: {len(counts)} colours, {100 * ink / total:.1f}% not background, "
      f"run colours: {blue} blue and {red} red pixels")
assert len(counts) >= 50, "too few colours: blank?"
assert ink >= 0.10 * total, "almost all one colour: blank?"
assert blue >= 100 and red >= 100, "a run's colour is missing"
PY
info "screenshot: not blank, both runs drawn"
mkdir -p "$GALLEY_BUILD/test-artifacts"
cp shot.png "$GALLEY_BUILD/test-artifacts/report-screenshot.png"
info "kept as $GALLEY_BUILD/test-artifacts/report-screenshot.png"
info "PASS"
