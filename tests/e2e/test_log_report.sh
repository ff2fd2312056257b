#!/usr/bin/env bash
# test_log_report.sh: `galley report` writes one self-contained HTML page (no script, no link, no
# reference outside the file) with the expected charts for one run or several overlaid, escapes
# what it quotes, copes with a run that has no summary yet or a cut last line, and refuses bad
# arguments. (test_log_report_render.sh renders it in Chromium.)
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd python3

cd "$GL_TMP"
short=(train.epochs=2 train.target.above=1.5)
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${short[@]}" log.dir=runs
assert_rc 3
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${short[@]}" optimizer.lr=0.03 'name=lr <0.03> & "more"' log.dir=runs
assert_rc 3
a=$(find runs/quickstart -mindepth 1 -maxdepth 1 -type d)
b=$(find runs -mindepth 2 -maxdepth 2 -type d -path '*lr*')
[[ -d $a && -d $b ]] || fail "expected two run directories, found: $(find runs -mindepth 2 -maxdepth 2)"

# self_contained FILE: no reference to anything outside the file.
self_contained() {
    local hit
    hit=$(grep -noiE 'https?:|src=|href=|url\(|@import|<script|<link|<img|<iframe|<object|<embed|xlink' "$1" || true)
    [[ -z $hit ]] || fail "$1 references something outside itself: $hit"
}

# titles FILE TITLE...: each is an <h2> of FILE.
titles() {
    local f=$1 t
    shift
    for t in "$@"; do
        grep -qF "<h2>$t</h2>" "$f" || fail "$f has no chart or section titled '$t'"
    done
}

# ---- 1. one run: RUN_DIR/report.html ------------------------------------------------------------
run "$GALLEY" report "$a"
assert_rc 0
assert_no_crash
assert_contains "$OUT" "1 run -> $a/report.html" "report output"
self_contained "$a/report.html"
titles "$a/report.html" Loss Accuracy "Learning rate" Throughput "Time breakdown" "Run summary" Recipe
n=$(grep -c '<svg class="chart"' "$a/report.html")
[[ $n -eq 5 ]] || fail "expected 5 charts (loss, accuracy, learning rate, throughput, breakdown), found $n"
grep -q '<polyline class="line" stroke="#1f77b4"' "$a/report.html" || fail "no curve drawn"
info "one run: $a/report.html ($(wc -c <"$a/report.html") bytes, $n charts, self-contained)"

# ---- 2. two runs overlaid, found from their parent; escaping --------------------------------------
run "$GALLEY" report runs -o cmp.html
assert_rc 0
assert_contains "$OUT" "2 runs -> cmp.html" "report output"
self_contained cmp.html
titles cmp.html Loss Accuracy "Learning rate" Throughput "Time breakdown" "Run summary" Recipe
for colour in '#1f77b4' '#d62728'; do
    [[ $(grep -c "<polyline class=\"line\" stroke=\"$colour\"" cmp.html) -ge 4 ]] || fail "run colour $colour: fewer than 4 curves"
done
grep -qF 'name: &quot;lr &lt;0.03&gt; &amp; \&quot;more\&quot;&quot;' cmp.html || fail "the recipe name is not escaped in the page"
! grep -qF '<0.03>' cmp.html || fail "raw '<0.03>' in the page"
python3 - cmp.html <<'PY'
import sys
from html.parser import HTMLParser
void = {"meta", "br", "rect", "line", "circle", "path", "polyline", "hr", "img", "input"}
class Check(HTMLParser):
    def __init__(self):
        super().__init__(); self.stack = []; self.h2 = []; self.cur = None
    def handle_starttag(self, tag, attrs):
        if tag not in void: self.stack.append(tag)
        if tag == "h2": self.cur = ""
    def handle_startendtag(self, tag, attrs): pass
    def handle_endtag(self, tag):
        if tag in void: return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()
        if tag == "h2": self.h2.append(self.cur); self.cur = None
    def handle_data(self, d):
        if self.cur is not None: self.cur += d
c = Check(); c.feed(open(sys.argv[1]).read()); c.close()
assert not c.stack, c.stack
print("[report] balanced HTML; sections:", ", ".join(c.h2))
PY
info "two runs overlaid (runs/ expanded), escaped, balanced"

# ---- 3. a run still going (no summary) and a cut last line --------------------------------------
cp -r "$a" going
rm going/summary.json going/report.html
head -c -40 "$a/metrics.jsonl" >going/metrics.jsonl
run "$GALLEY" report going
assert_rc 0
assert_contains "$ERR" "1 line did not parse" "stderr for a cut metrics.jsonl"
grep -qF "no summary (still running, or stopped)" going/report.html || fail "a run without summary.json is not marked"
titles going/report.html Loss "Time breakdown"
info "a run without summary.json and with a cut line: reported, with a warning"

# ---- 4. bad arguments ---------------------------------------------------------------------------
assert_exit 2 "$GALLEY" report
assert_contains "$ERR" "missing RUN_DIR" "stderr"
assert_exit 2 "$GALLEY" report nowhere
assert_contains "$ERR" "nowhere: No such file or directory" "stderr"
mkdir empty
assert_exit 2 "$GALLEY" report empty
assert_contains "$ERR" "empty holds no run" "stderr"
assert_exit 2 "$GALLEY" report "$a" -o
assert_exit 2 "$GALLEY" report --frobnicate "$a"
assert_contains "$ERR" "unknown option '--frobnicate'" "stderr"
assert_exit 1 "$GALLEY" report "$a" -o /nonexistent-dir/r.html
assert_contains "$ERR" "cannot create /nonexistent-dir/r.html" "stderr"
assert_exit 0 "$GALLEY" report --help
assert_contains "$OUT" "usage: galley report RUN_DIR" "help"
assert_exit 0 "$GALLEY" help report
info "bad arguments: exit 2 (usage, no runs), 1 (cannot write)"
info "PASS"
