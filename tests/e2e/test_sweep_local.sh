#!/usr/bin/env bash
# test_sweep_local.sh: `galley sweep` on one process (no launcher: one group, which is also the
# coordinator): a grid of 4 trials in grid order, best.yaml, `galley sweep --help`; the base
# recipe's train.time_limit stops the sweep (exit 4, the journal says so) and --resume auto ends
# it with the results.csv of a sweep without a limit; so does SIGTERM mid-sweep.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd timeout

cd "$GL_TMP"
G=$GALLEY_SRC/tests/recipes/sweep/grid.yaml

run "$GALLEY" sweep --help
assert_rc 0
assert_contains "$OUT" "usage: galley sweep SWEEP.yaml"

info "grid, 4 trials, one process"
long=(train.steps=6000 train.eval_every=3000 log.every=3000)
run timeout 60 "$GALLEY" sweep "$G" --dir full "${long[@]}"
assert_rc 0
assert_no_crash
assert_contains "$OUT" "grid, 4 trials, 1 group of 1 rank, accuracy (max), in full"
got=$(awk -F, 'NR > 1 { gsub(/"/, ""); print $2 "/" $3 "/" $(NF - 1) }' full/results.csv | tr '\n' ' ')
[[ $got == "0.02/16/done 0.02/64/done 0.2/16/done 0.2/64/done " ]] || fail "grid order or states: $got"
grep -q '^name: "sweep_mlp"' full/best.yaml || fail "best.yaml is not the resolved recipe"

info "train.time_limit stops the sweep; --resume auto finishes it"
limit=1.2
[[ $GALLEY_SANITIZE == 1 ]] && limit=5  # about 4x slower: each attempt still finishes a run
run timeout 60 "$GALLEY" sweep "$G" --dir cut "${long[@]}" train.time_limit=$limit
if [[ $RC == 4 ]]; then
    grep -q '"event":"stop","code":4' cut/journal.jsonl || fail "no stop event in the journal"
    assert_contains "$OUT" "--resume auto"
else
    assert_rc 0  # a machine fast enough to finish in the limit: nothing to resume, still fine
    info "(finished within the limit)"
fi
run timeout 60 "$GALLEY" sweep "$G" --dir cut "${long[@]}" train.time_limit=$limit --resume auto
for _ in $(seq 8); do  # each attempt gets the limit again, and resumes what the last one stopped
    [[ $RC == 4 ]] || break
    run timeout 60 "$GALLEY" sweep "$G" --dir cut "${long[@]}" train.time_limit=$limit --resume auto
done
assert_rc 0
diff full/results.csv cut/results.csv || fail "the resumed sweep's results.csv differs"

info "SIGTERM mid-sweep (after the first trial): exit 4; --resume auto ends with the same results.csv"
"$GALLEY" sweep "$G" --dir term "${long[@]}" >term.out 2>&1 &
pid=$!
for _ in $(seq 600); do  # until one trial ended and the next one trains
    [[ -f term/journal.jsonl ]] && (($(grep -c '"event":"end"' term/journal.jsonl) >= 1)) && break
    sleep 0.05
done
sleep 0.2
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [[ $rc == 4 ]]; then
    grep -q '"event":"stop","code":4' term/journal.jsonl || fail "no stop event in the journal after SIGTERM"
    info "stopped by SIGTERM with $(grep -c '"event":"end"' term/journal.jsonl) runs ended"
    run timeout 60 "$GALLEY" sweep "$G" --dir term "${long[@]}" --resume auto
    assert_rc 0
else
    [[ $rc == 0 ]] || { cat term.out; fail "the sweep exited $rc after SIGTERM, expected 4"; }
    info "(finished before the signal)"
fi
diff full/results.csv term/results.csv || fail "results.csv after SIGTERM and --resume auto differs"
info "ok"
