#!/usr/bin/env bash
# test_sweep_srun.sh: `srun -n 4 --mpi=pmix galley sweep` on a private one-node Slurm (2 ranks
# per trial, 2 groups): the random search gives the very results.csv that mpirun -np 4 gives
# (each trial is the same 2-rank run wherever it lands); the ASHA sweep fails its diverging
# trials and finishes; SIGUSR1 to srun mid-sweep (forwarded to every task) exits 4 and
# --resume auto ends with the results.csv of the uninterrupted sweep.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm.sh"
need_galley
need_cmd mpirun timeout
if [[ $GALLEY_SANITIZE == 1 ]]; then
    skip "release tree only (ASan/UBSan + Open MPI + Slurm PMIx is noise, not galley's bugs)"
fi
slurm_start

cd "$GL_TMP"
S=$GALLEY_SRC/tests/recipes/sweep
srun4=(timeout 120 srun --overcommit -n 4 --mpi="$GL_SLURM_MPI" --kill-on-bad-exit=1)

info "random search under srun -n 4 and under mpirun -np 4: the same results.csv"
run "${srun4[@]}" "$GALLEY" sweep "$S/random.yaml" --dir srun-rnd
assert_rc 0
assert_no_crash
assert_contains "$OUT" "random, 8 trials, 2 groups of 2 ranks"
run timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "$GALLEY" sweep "$S/random.yaml" \
    --dir mpi-rnd
assert_rc 0
diff mpi-rnd/results.csv srun-rnd/results.csv || fail "srun and mpirun sweeps differ"
[[ $(awk -F, 'NR > 1 && $(NF - 1) == "done"' srun-rnd/results.csv | wc -l) == 8 ]] || fail "not 8 trials done"

info "ASHA under srun: diverging trials fail, the sweep finishes"
run "${srun4[@]}" "$GALLEY" sweep "$S/asha.yaml" --dir srun-asha
assert_rc 0
grep -q ',failed,"the loss became' srun-asha/results.csv || fail "no failed trial with its message"
grep -q ',16,16,[0-9.e+-]*,done,' srun-asha/results.csv || fail "no trial done at 16 steps"

info "SIGUSR1 to srun mid-sweep (srun forwards it; its own SIGTERM cancels the step), then --resume auto"
long=(train.steps=240 train.eval_every=80 log.every=80)
run "${srun4[@]}" "$GALLEY" sweep "$S/random.yaml" --dir full "${long[@]}"
assert_rc 0
srun --overcommit -n 4 --mpi="$GL_SLURM_MPI" "$GALLEY" sweep "$S/random.yaml" --dir cut "${long[@]}" >cut.out 2>&1 &
pid=$!
for _ in $(seq 400); do
    [[ -f cut/journal.jsonl ]] && (($(grep -c '"event":"end"' cut/journal.jsonl) >= 3)) && break
    sleep 0.05
done
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 4 ]] || { cat cut.out; fail "the signalled sweep exited $rc, expected 4"; }
run "${srun4[@]}" "$GALLEY" sweep "$S/random.yaml" --dir cut "${long[@]}" --resume auto
assert_rc 0
diff full/results.csv cut/results.csv || fail "the resumed sweep's results.csv differs from the uninterrupted one"
info "ok"
