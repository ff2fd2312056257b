#!/usr/bin/env bash
# test_sweep_report.sh: `galley report SWEEP_DIR` on results.jsonl files written here (no sweep
# is run: test_sweep_mpi.sh reports a real one):
#   - text from the sweep (a string choice, the directory name, a state) is HTML-escaped;
#   - every trial is shown, past the 4,096 the page once kept (5,000 here);
#   - a choice of 200 characters (SWEEP_MAX_VALUE) is shown whole;
#   - a line that is not a trial's result (a torn last line) is counted, on the page and on stdout.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
dir='s&<b>'
mkdir -p "$dir"
touch "$dir/journal.jsonl"  # what makes a directory a sweep's for `galley report`
long=$(printf 'x%.0s' {1..200})
{
    echo '{"trial":0,"values":{"optimizer.lr":0.01,"model.act":"<script>&\"q\""},"rung":0,"budget":10,"steps":10,"loss":0.5,"state":"done","seconds":1.000,"message":""}'
    echo "{\"trial\":1,\"values\":{\"optimizer.lr\":0.02,\"model.act\":\"$long\"},\"rung\":0,\"budget\":10,\"steps\":10,\"loss\":0.25,\"state\":\"done\",\"seconds\":1.000,\"message\":\"\"}"
    for ((i = 2; i < 5000; i++)); do
        echo "{\"trial\":$i,\"values\":{\"optimizer.lr\":0.0$((i % 9 + 1)),\"model.act\":\"relu\"},\"rung\":0,\"budget\":10,\"steps\":10,\"loss\":0.$((i % 97 + 1)),\"state\":\"done\",\"seconds\":1.000,\"message\":\"\"}"
    done
    printf '{"trial":5000,"values":{"optimizer.lr":0.0'  # torn: the sweep was stopped mid-write
} >"$dir/results.jsonl"

run "$GALLEY" report "$dir"
assert_rc 0
assert_no_crash
assert_contains "$OUT" "sweep of 5000 trials -> $dir/report.html"
assert_contains "$OUT" "1 line of $dir/results.jsonl could not be read and is not shown"
page=$(cat "$dir/report.html")
[[ $(grep -o '<tr>' <<<"$page" | wc -l) == 5001 ]] || fail "report.html: not 5000 trial rows and a header"
assert_contains "$page" "&lt;script&gt;&amp;&quot;q&quot;" "the escaped string choice"
[[ $page != *"<script>"* ]] || fail "report.html holds an unescaped <script> from a choice"
assert_contains "$page" "<h1>Sweep s&amp;&lt;b&gt;</h1>" "the escaped directory name"
[[ $page != *"<b>"* ]] || fail "report.html holds an unescaped <b> from the directory name"
assert_contains "$page" "<td>$long</td>" "the 200-character choice, whole"
assert_contains "$page" "1 line of results.jsonl could not be read" "the page's note of the torn line"
info "5000 trials, escaped, the 200-character choice whole, the torn line counted"
