#!/usr/bin/env bash
# test_sweep_mpi.sh: `galley sweep` under mpirun -np 4 with 2 ranks per trial (2 groups):
#   - random search, 8 trials: every trial done, results.csv/jsonl complete, best.yaml trained
#     by a plain `galley train` (on 2 ranks, as the trial) gives the best trial's metric exactly;
#     np=2 (one group) gives the same results.csv as np=4 (two);
#   - ASHA over learning rates where the large ones diverge: those are failed with the
#     non-finite loss message, weak ones stopped at lower rungs, the sweep goes on and finishes;
#   - SIGUSR1 mid-sweep (mpirun forwards it): exit 4 with the running trials checkpointed;
#     --resume auto finishes with the same results.csv as the uninterrupted sweep;
#   - `galley report SWEEP_DIR`: the trials' table, metric against each key, curves.html;
#   - an existing sweep directory without --resume, and ranks_per_trial not dividing the world:
#     exit 2 with FILE:LINE:COL.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd mpirun timeout

cd "$GL_TMP"
S=$GALLEY_SRC/tests/recipes/sweep
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# rows FILE STATE: how many rows of results.csv FILE are in STATE.
rows() { awk -F, -v s="$2" 'NR > 1 && $(NF - 1) == s' "$1" | wc -l; }

info "random search: 8 trials on 2 groups of 2 ranks"
run timeout 120 "${mpi[@]}" -np 4 "$GALLEY" sweep "$S/random.yaml" --dir rnd
assert_rc 0
assert_no_crash
assert_contains "$OUT" "random, 8 trials, 2 groups of 2 ranks"
[[ $(rows rnd/results.csv "done") == 8 ]] || { cat rnd/results.csv; fail "random: not 8 trials done"; }
[[ $(wc -l <rnd/results.jsonl) == 8 ]] || fail "results.jsonl: not 8 lines"
[[ $(grep -c '"event":"end"' rnd/journal.jsonl) == 8 ]] || fail "journal: not 8 end events"
[[ -f rnd/best.yaml ]] || fail "no best.yaml"
best=$(grep -o 'best: trial [0-9]*' <<<"$OUT" | grep -o '[0-9]*$')
want=$(awk -F, -v t="$best" '$1 == t { print $(NF - 2) }' rnd/results.csv)
info "best trial $best: accuracy $want; training best.yaml with galley train"
run timeout 60 "${mpi[@]}" -np 2 "$GALLEY" train rnd/best.yaml --run-dir plain checkpoint.dir=plain-ck
[[ $RC == 0 || $RC == 3 ]] || { show_run; fail "galley train best.yaml exited $RC"; }
got=$(grep '"kind":"eval"' plain/metrics.jsonl | tail -1 | sed -E 's/.*"accuracy":([^,}]+).*/\1/')
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(d < 1e-6 && d > -1e-6) }' ||
    fail "best.yaml trained alone gives accuracy $got, the sweep said $want"

info "the same trials and results on 1 group (np=2) as on 2"
run timeout 120 "${mpi[@]}" -np 2 "$GALLEY" sweep "$S/random.yaml" --dir rnd1
assert_rc 0
assert_contains "$OUT" "random, 8 trials, 1 group of 2 ranks"
diff rnd/results.csv rnd1/results.csv || fail "1 group and 2 groups give different results"

info "ASHA: diverging learning rates fail, the rest go through the rungs"
run timeout 120 "${mpi[@]}" -np 4 "$GALLEY" sweep "$S/asha.yaml" --dir asha
assert_rc 0
assert_no_crash
failed=$(rows asha/results.csv failed)
done16=$(awk -F, 'NR > 1 && $(NF - 1) == "done" && $3 == 16' asha/results.csv | wc -l)
stopped=$(rows asha/results.csv stopped)
info "asha: $failed failed, $stopped stopped early, $done16 done at 16 steps"
((failed >= 1 && done16 >= 1)) || { cat asha/results.csv; fail "asha: expected failed and done trials"; }
grep -q 'the loss became' asha/results.csv || fail "asha: no non-finite loss message in results.csv"

info "galley report SWEEP_DIR: the trials' table, the metric against lr, every trial's curves"
run "$GALLEY" report asha
assert_rc 0
assert_contains "$OUT" "sweep of 9 trials -> asha/report.html"
[[ $(grep -o '<tr>' asha/report.html | wc -l) == 10 ]] || fail "report.html: not 9 trial rows"
assert_contains "$(cat asha/report.html)" "loss against optimizer.lr (log axis)"
[[ $(grep -o '<circle' asha/report.html | wc -l) == 9 ]] || fail "report.html: not 9 points"
grep -q '<svg' asha/curves.html || fail "no curves.html"

info "SIGUSR1 mid-sweep, then --resume auto: the same results.csv"
long=(train.steps=240 train.eval_every=80 log.every=80)
run timeout 120 "${mpi[@]}" -np 4 "$GALLEY" sweep "$S/random.yaml" --dir full "${long[@]}"
assert_rc 0
"${mpi[@]}" -np 4 "$GALLEY" sweep "$S/random.yaml" --dir cut "${long[@]}" >cut.out 2>&1 &
pid=$!
for _ in $(seq 400); do  # until 3 trials ended (and others run)
    [[ -f cut/journal.jsonl ]] && (($(grep -c '"event":"end"' cut/journal.jsonl) >= 3)) && break
    sleep 0.05
done
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 4 ]] || { cat cut.out; fail "the signalled sweep exited $rc, expected 4"; }
paused=$(grep -c '"state":"paused"' cut/journal.jsonl || true)
info "stopped: $(grep -c '"state":"done"' cut/journal.jsonl) runs done, $paused paused"
run timeout 120 "${mpi[@]}" -np 4 "$GALLEY" sweep "$S/random.yaml" --dir cut "${long[@]}" --resume auto
assert_rc 0
diff full/results.csv cut/results.csv || fail "the resumed sweep's results.csv differs from the uninterrupted one"

info "bad input: a used directory without --resume; ranks_per_trial not dividing the world"
run "${mpi[@]}" -np 4 "$GALLEY" sweep "$S/random.yaml" --dir rnd
assert_rc 2
assert_contains "$ERR" "already holds a sweep"
run "${mpi[@]}" -np 3 "$GALLEY" sweep "$S/random.yaml" --dir three
assert_rc 2
assert_contains "$ERR" "random.yaml:6:18: error: ranks_per_trial: 2 does not divide the 3 ranks"
[[ $(grep -c 'does not divide' <<<"$ERR") == 1 ]] || fail "the error was printed more than once"
info "ok"
