#!/usr/bin/env bash
# test_log_terminal.sh: what `galley train` prints. Without a terminal: the start banner, a plain
# progress line every log.every steps (none with log.every=0), the end summary, and no control
# characters at all. On a terminal (a pty from `script`): a live line redrawn with \r, and a
# console.log that still holds only plain lines. The end summary's time breakdown accounts for
# the wall time of the steps.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd python3

recipe=$GALLEY_SRC/recipes/quickstart.yaml
# 3 epochs of 256 steps, no early stop (a target no run reaches: exit 3).
short=(train.epochs=3 train.target.above=1.5 "checkpoint.dir=$GL_TMP/ck")

# no_control FILE WHAT: FILE has no control characters except newlines.
no_control() {
    local bad
    bad=$(LC_ALL=C grep -c $'[\x01-\x09\x0b-\x1f\x7f]' "$1" || true)
    [[ $bad -eq 0 ]] || {
        LC_ALL=C grep -n $'[\x01-\x09\x0b-\x1f\x7f]' "$1" | head -n 3 | cat -v >&2
        fail "$2 has $bad line(s) with control characters"
    }
}

# ---- 1. not a terminal -------------------------------------------------------------------------
run "$GALLEY" train "$recipe" "${short[@]}" --run-dir "$GL_TMP/plain"
assert_rc 3
assert_no_crash
printf '%s\n' "$OUT" >"$GL_TMP/plain.out"
printf '%s\n' "$ERR" >"$GL_TMP/plain.err"
no_control "$GL_TMP/plain.out" "stdout"
no_control "$GL_TMP/plain.err" "stderr"
no_control "$GL_TMP/plain/console.log" "console.log"
for want in "galley: training 'quickstart'" "device cpu, 1 rank, " " thread" "fp32" "global batch 32, 32 per rank" \
    "25477 parameters" "train 8192, val 2048 samples" "run: 768 steps (256 per epoch) | lr 0.01; constant" \
    "run directory: $GL_TMP/plain" "peak memory: host " "device n/a" "last val loss" "best val loss"; do
    assert_contains "$OUT" "$want" "stdout"
done
for phase in "data wait" forward backward communication optimizer checkpoint evaluation other; do
    grep -qE "^    $phase +[0-9.]+ s +[0-9.]+ %" <<<"$OUT" || fail "the end summary lacks the '$phase' line"
done
# log.every (default 50): steps 50, 100, ..., 750.
steps=$(grep -E '^step +[0-9]+/768 \(epoch [0-9]\)  loss [0-9.]+  acc [0-9.]+ \| lr 0.01 \| [0-9]+ samples/s \| ETA ' <<<"$OUT" |
    sed -E 's/^step +([0-9]+)\/.*/\1/' | tr '\n' ' ')
[[ $steps == "$(seq 50 50 750 | tr '\n' ' ')" ]] || fail "progress lines at steps '$steps', expected every 50"
[[ $(grep -cE '^epoch +[0-9]+/3 ' <<<"$OUT") -eq 3 ]] || fail "expected 3 epoch lines"
# The console copy is what was printed (stderr is empty here).
[[ -z $ERR ]] || fail "unexpected stderr: $ERR"
diff <(printf '%s\n' "$OUT") "$GL_TMP/plain/console.log" >/dev/null || fail "console.log differs from stdout"
info "no terminal: banner, 15 progress lines, summary, no control characters; console.log = stdout"

run "$GALLEY" train "$recipe" "${short[@]}" log.every=100 log.files=false
assert_rc 3
[[ $(grep -cE '^step ' <<<"$OUT") -eq 7 ]] || fail "log.every=100: expected 7 progress lines"
run "$GALLEY" train "$recipe" "${short[@]}" log.every=0 log.files=false
assert_rc 3
[[ $(grep -cE '^step ' <<<"$OUT") -eq 0 ]] || fail "log.every=0: expected no progress lines"
assert_not_contains "$OUT" "run directory:" "output with log.files=false"
info "log.every=100: 7 lines; log.every=0: none"

# ---- 2. the time breakdown adds up -------------------------------------------------------------
python3 - "$GL_TMP/plain" "$GL_TMP/plain.out" <<'PY'
import json, re, sys
d, out = sys.argv[1], open(sys.argv[2]).read()
s = json.load(open(d + "/summary.json"))
tb, wall = s["time_breakdown"], s["wall_s"]
measured = sum(v for k, v in tb.items() if k != "other")
print(f"[breakdown] wall of the steps {wall:.4f} s; measured phases {measured:.4f} s "
      f"({100 * measured / wall:.2f} %); other {tb['other']:.4f} s; " +
      ", ".join(f"{k} {v:.4f}" for k, v in tb.items()))
assert abs(sum(tb.values()) - wall) <= 2e-3 + 1e-3 * wall, "the phases do not add up to the wall time"
assert measured >= 0.95 * wall, f"only {measured / wall:.1%} of the wall time is in a measured phase"
assert tb["communication"] == 0  # one process
for k in ("forward", "backward", "optimizer", "evaluation", "checkpoint"):  # checkpoint: the one at the end
    assert tb[k] > 0, k
# The printed table says the same.
for k, word in (("forward", "forward"), ("evaluation", "evaluation")):
    m = re.search(r"^    %s +([0-9.]+) s" % word, out, re.M)
    assert m and abs(float(m.group(1)) - tb[k]) < 1.5e-3, (word, m and m.group(1), tb[k])
# Each training record's breakdown adds up to its time, and times only grow.
last = -1
for line in open(d + "/metrics.jsonl"):
    r = json.loads(line)
    assert r["time"] >= last - 1e-4
    last = r["time"]
    if r["kind"] == "train":
        assert abs(sum(r["time_breakdown"].values()) - r["time"]) < 1e-3, r
PY
# And the wall time of the steps is no more than the process took (measured from outside).
t0=$EPOCHREALTIME
run "$GALLEY" train "$recipe" "${short[@]}" --run-dir "$GL_TMP/timed"
t1=$EPOCHREALTIME
assert_rc 3
wall=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wall_s"])' "$GL_TMP/timed/summary.json")
awk -v w="$wall" -v a="$t0" -v b="$t1" 'BEGIN { exit !(w > 0 && w <= b - a) }' ||
    fail "wall time of the steps $wall s is not within the process's $(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}') s"
info "time breakdown: phases add up to the steps' wall time ($wall s of a $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') s process)"

# ---- 3. a terminal -----------------------------------------------------------------------------
need_cmd script
cmd=$(printf '%q ' "$GALLEY" train "$recipe" "${short[@]}" --run-dir "$GL_TMP/tty")
script -qfec "$cmd" /dev/null </dev/null >"$GL_TMP/tty.out" 2>&1 || true
LC_ALL=C grep -q $'\r''epoch 1/3' "$GL_TMP/tty.out" || { cat -v "$GL_TMP/tty.out" | head -n 20 >&2; fail "no live line (\\r + 'epoch 1/3') on a terminal"; }
LC_ALL=C grep -q $'\e\\[K' "$GL_TMP/tty.out" || fail "the live line is not cleared with ESC[K"
[[ $(LC_ALL=C grep -c '^step ' "$GL_TMP/tty.out" || true) -eq 0 ]] || fail "plain progress lines on a terminal"
no_control "$GL_TMP/tty/console.log" "console.log of a terminal run"
[[ $(grep -cE '^step +[0-9]+/768 ' "$GL_TMP/tty/console.log") -eq 15 ]] || fail "console.log of a terminal run lacks the plain progress lines"
grep -q '^epoch   3/3 ' "$GL_TMP/tty/console.log" || fail "console.log of a terminal run lacks the epoch lines"
info "terminal: live line with \\r and ESC[K; console.log plain"
info "PASS"
