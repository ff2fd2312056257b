#!/usr/bin/env bash
# test_quickstart.sh: recipes/quickstart.yaml trains to its stated quality (val accuracy >= 0.95)
# within 60 s; an unreachable target exits 3; runs are reproducible (same epoch lines apart from
# timing) and independent of the thread count.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

# now: seconds since the epoch, with a fraction (bash 5 has EPOCHREALTIME; else date).
now() { if [[ -n ${EPOCHREALTIME:-} ]]; then echo "$EPOCHREALTIME"; else date +%s.%N; fi; }

recipe=$GALLEY_SRC/recipes/quickstart.yaml
[[ -r $recipe ]] || fail "missing $recipe"

# An epoch line looks like
#   epoch  14/60  loss 0.1439  acc 0.9441 | val loss 0.1216  acc 0.9551 | lr 0.01 | 168791 samples/s  0.05 s
re_epoch='^epoch +[0-9]+/[0-9]+ '

# epoch_lines TEXT: the epoch lines of a run's output.
epoch_lines() { printf '%s\n' "$1" | grep -E "$re_epoch" || true; }

# without_timing TEXT: epoch lines with the throughput and seconds columns removed, plus the
# target line (which carries no timing).
without_timing() {
    printf '%s\n' "$1" | grep -E "$re_epoch|^target " |
        sed -E 's/ *\| data [0-9.]+% *\| *[0-9.]+ samples\/s +[0-9.]+ s *$//'
}

# losses TEXT: "train-loss train-acc val-loss val-acc" per epoch.
losses() {
    epoch_lines "$1" |
        sed -E 's/^epoch +([0-9]+)\/[0-9]+ +loss +([^ ]+) +acc +([^ ]+) +\| +val loss +([^ ]+) +acc +([^ ]+) +\|.*$/\1 \2 \3 \4 \5/'
}

# ---- 1. the quickstart as shipped -----------------------------------------------------------
t0=$(now)
run "$GALLEY" train "$recipe"
t1=$(now)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
assert_rc 0
assert_no_crash
info "quickstart: exit 0 in ${wall} s"
text="$OUT
$ERR"

lines=$(epoch_lines "$text")
n=$(printf '%s\n' "$lines" | grep -c . || true)
[[ $n -ge 1 ]] || { show_run; fail "no per-epoch lines in the output"; }
info "$n epoch lines"
# Each epoch line carries the four metrics first and the timing columns last (other columns,
# such as the learning rate, may sit in between).
bad=$(printf '%s\n' "$lines" | grep -vE "$re_epoch"' *loss [0-9.]+ +acc [0-9.]+ \| val loss [0-9.]+ +acc [0-9.]+ (\| [^|]+ )*\| [0-9.]+ samples/s +[0-9.]+ s$' || true)
[[ -z $bad ]] || { show_run; fail "malformed epoch line(s): $bad"; }
# Epochs are numbered 1, 2, ... n.
nums=$(printf '%s\n' "$lines" | sed -E 's/^epoch +([0-9]+)\/.*/\1/' | tr '\n' ' ')
want=$(seq 1 "$n" | tr '\n' ' ')
[[ $nums == "$want" ]] || fail "epoch numbers are '$nums', expected '$want'"

assert_contains "$text" "target reached" "quickstart output"
assert_not_contains "$text" "target NOT reached" "quickstart output"

final_acc=$(printf '%s\n' "$lines" | tail -n 1 | sed -E 's/.*\| val loss [^ ]+ +acc ([0-9.]+) .*/\1/')
[[ $final_acc =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "cannot parse the final val accuracy from: $(printf '%s\n' "$lines" | tail -n 1)"
info "final val accuracy $final_acc"
awk -v a="$final_acc" 'BEGIN { exit !(a >= 0.95) }' || fail "final val accuracy $final_acc < 0.95"

awk -v w="$wall" 'BEGIN { exit !(w < 60) }' || fail "quickstart took ${wall} s, expected < 60 s"
info "wall time ${wall} s (< 60 s)"
first_run=$text

# ---- 2. a target it cannot reach: exit 3 ----------------------------------------------------
run "$GALLEY" train "$recipe" train.epochs=1 train.target.above=0.999
assert_rc 3
assert_no_crash
assert_contains "$OUT$ERR" "target NOT reached" "output of an unreachable target"
n1=$(epoch_lines "$OUT$ERR" | grep -c . || true)
[[ $n1 -eq 1 ]] || { show_run; fail "train.epochs=1 printed $n1 epoch lines"; }
info "train.epochs=1, target above 0.999: exit 3, 'target NOT reached'"

# ---- 3. reproducible: a second run gives the same epoch lines ------------------------------
run "$GALLEY" train "$recipe"
assert_rc 0
assert_no_crash
a=$(without_timing "$first_run")
b=$(without_timing "$OUT
$ERR")
[[ -n $a ]] || fail "nothing to compare"
if [[ $a != "$b" ]]; then
    diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") >&2 || true
    fail "two runs of the same recipe differ (apart from timing)"
fi
info "two runs: identical epoch lines apart from timing ($(printf '%s\n' "$a" | wc -l) lines)"

# ---- 4. the thread count does not change the numbers --------------------------------------
# Run a fixed number of epochs (a target no accuracy reaches: no early stop, exit 3) so both
# runs cover the same steps.
common=(train.epochs=6 train.target.above=1.5)
run "$GALLEY" train "$recipe" "${common[@]}" train.threads=1
assert_rc 3
assert_no_crash
assert_contains "$OUT" ", 1 thread" "train.threads=1 header"
l1=$(losses "$OUT$ERR")
run "$GALLEY" train "$recipe" "${common[@]}" train.threads=2
assert_rc 3
assert_no_crash
assert_contains "$OUT" ", 2 thread" "train.threads=2 header"
l2=$(losses "$OUT$ERR")
n6=$(printf '%s\n' "$l1" | grep -c . || true)
[[ $n6 -eq 6 ]] || fail "train.epochs=6 gave $n6 epoch lines"
if [[ $l1 != "$l2" ]]; then
    diff <(printf '%s\n' "$l1") <(printf '%s\n' "$l2") >&2 || true
    fail "train.threads=1 and train.threads=2 give different losses/accuracies"
fi
info "threads 1 and 2: identical loss/acc columns over 6 epochs"

info "PASS"
