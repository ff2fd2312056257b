#!/usr/bin/env bash
# test_dist_failures.sh: a failing rank ends the whole job, within a bounded time, saying why.
#   - a rank killed (SIGKILL) mid-run: mpirun ends the job non-zero within 60 s;
#   - a rank that hangs (SIGSTOP): the others give up after distributed.timeout, naming the
#     rank, the collective and the step, and end the job (MPI_Abort) non-zero (test_dist_hang.sh:
#     the report, its checkpoint and exit codes);
#   - a set-up failure on one rank only (its data file missing; rank 0's run directory already
#     used): every rank stops at the set-up agreement within seconds, exit 2, not after
#     distributed.timeout (60 s here); rank 0 names the failing rank when it is not itself;
#   - a non-finite loss on one rank only (an Inf target in that rank's part of the batch): every
#     rank stops at that step, exit 1; the rank that had it names itself and the cause.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
need_cmd mpirun timeout pgrep
[[ $GALLEY_SANITIZE == 1 ]] && skip "release tree only: killing ranks under ASan adds nothing but Open MPI's noise"

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
long=(train.steps=10000000 train.target=null log.every=100000 train.threads=1 log.files=false
    data.synthetic.train_size=2048 checkpoint.at_end=false)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# galley_pids TAG: the galley processes of the run whose checkpoint.dir is TAG.
galley_pids() { pgrep -f "galley train .*checkpoint.dir=$1" || true; }

# wait_started TAG: until both ranks of run TAG are training (their first lines are out).
wait_started() {
    local _
    for _ in $(seq 100); do
        [[ $(galley_pids "$1" | wc -l) -ge 2 ]] && grep -q "^step" "$1.out" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "run $1 did not start: $(cat "$1.out" "$1.err" 2>/dev/null)"
}

info "a rank killed mid-run ends the job non-zero within 60 s"
t0=$(now)
timeout 120 "${mpi[@]}" "$GALLEY" train "$MLP" "${long[@]}" checkpoint.dir=killed >killed.out 2>killed.err &
job=$!
wait_started killed
victim=$(galley_pids killed | tail -n 1)
kill -9 "$victim"
rc=0
wait "$job" || rc=$?
secs=$(since "$t0")
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "killed rank: exit $rc after $secs s (want non-zero, before the 120 s guard)"
awk -v s="$secs" 'BEGIN { exit !(s < 60) }' || fail "killed rank: the job took $secs s to end"
[[ -z $(galley_pids killed) ]] || fail "killed rank: galley processes remain: $(galley_pids killed)"
info "killed rank: job ended with exit $rc after $secs s"

info "a hung rank: the others end the job after distributed.timeout (3 s), naming the collective"
t0=$(now)
timeout 120 "${mpi[@]}" "$GALLEY" train "$MLP" "${long[@]}" distributed.timeout=3 checkpoint.dir=hung \
    >hung.out 2>hung.err &
job=$!
wait_started hung
victim=$(galley_pids hung | tail -n 1)
kill -STOP "$victim"
rc=0
wait "$job" || rc=$?
secs=$(since "$t0")
kill -9 "$victim" 2>/dev/null || true
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "hung rank: exit $rc after $secs s"
awk -v s="$secs" 'BEGIN { exit !(s < 60) }' || fail "hung rank: the job took $secs s to end"
grep -qE "^galley: error: hang: collective #[0-9]+ \(the .* at step [0-9]+\) made no progress for 3 s \(distributed.timeout\)" \
    hung.err || fail "hung rank: no timeout message: $(cat hung.err)"
grep -qE "^galley: error: hang: rank [01] of 2 \(host .+\) (never entered|is stuck in) #[0-9]+ " hung.err ||
    fail "hung rank: the message does not name the rank and collective (test_dist_hang.sh tests the rest)"
info "hung rank: job ended with exit $rc after $secs s"

info "a rank that cannot open its data: every rank stops at once, exit 2, rank 0 names it"
"$GALLEY" data synth spirals tr.h5 n=256 >/dev/null
"$GALLEY" data synth spirals va.h5 n=64 split=val >/dev/null
cat >spirals.yaml <<'EOF'
name: spirals
data:
  source: hdf5
  train: {files: tr.h5}
  val: {files: va.h5}
  target: class
  classes: 3
model:
  layers:
    - {type: dense, units: 8}
    - {type: relu}
    - {type: dense, units: 3}
train: {batch_size: 32, steps: 5, threads: 1}
optimizer: {type: sgd, lr: 0.01}
distributed: {timeout: 60}
log: {files: false}
checkpoint: {at_end: false}
EOF
# MPMD: rank 1 alone is given a file that does not exist (as if its node lacked it).
t0=$(now)
run timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 "$GALLEY" train spirals.yaml : \
    -np 1 "$GALLEY" train spirals.yaml data.train.files=missing.h5
secs=$(since "$t0")
assert_rc 2
assert_contains "$ERR" "cannot open missing.h5"
assert_contains "$ERR" "rank 1 of 2 failed while opening the data and planning the model"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "missing data on one rank: the job took $secs s to end"
info "missing data on rank 1: job ended with exit $RC after $secs s"

info "rank 0 cannot open the run directory: every rank stops at once, exit 2"
"$GALLEY" train spirals.yaml --run-dir used >/dev/null 2>&1 || fail "the single-process run failed"
t0=$(now)
run timeout 120 "${mpi[@]}" "$GALLEY" train spirals.yaml --run-dir used
secs=$(since "$t0")
assert_rc 2
assert_contains "$ERR" "used already holds a run"
assert_not_contains "$ERR" "made no progress"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "used run directory: the job took $secs s to end"
info "used run directory: job ended with exit $RC after $secs s"

info "a non-finite loss on one rank stops every rank at that step, exit 1"
need_pyenv  # PY: a Python with h5py
# 32 samples of 2 features -> 1 value; one global batch of all 32, so the Inf target (sample 5)
# lands in exactly one rank's half of every batch.
"$PY" - <<'EOF'
import h5py, numpy as np
rng = np.random.default_rng(3)
x = rng.standard_normal((32, 2)).astype(np.float32)
y = (x[:, :1] * 0.5).astype(np.float32)
y[5, 0] = np.inf
for name, yy in (("train.h5", y), ("val.h5", np.nan_to_num(y, posinf=0.0))):
    with h5py.File(name, "w") as f:
        f["x"], f["y"] = x, yy
EOF
cat >reg.yaml <<'EOF'
name: reg
data:
  source: hdf5
  train: {files: train.h5}
  val: {files: val.h5}
  target: values
model:
  layers:
    - {type: dense, units: 8}
    - {type: relu}
    - {type: dense, units: 1}
train: {batch_size: 32, steps: 5, threads: 1, loss: mse}
optimizer: {type: sgd, lr: 0.01}
log: {files: false}
checkpoint: {at_end: false}
EOF
t0=$(now)
run timeout 120 "${mpi[@]}" "$GALLEY" train reg.yaml
secs=$(since "$t0")
assert_rc 1
assert_contains "$ERR" "the loss became inf at step 0 (epoch 1)"
assert_contains "$ERR" "every layer's output is finite, so the loss itself overflowed (check the targets)"
grep -qE "galley: rank [01] of 2: every layer's output is finite" <<<"$ERR" ||
    fail "the rank with the Inf target did not name itself: $ERR"
n=$(grep -c "the loss became inf" <<<"$ERR" || true)
[[ $n == 1 ]] || fail "the stop message was printed $n times (once, by rank 0)"
info "non-finite loss on one rank: job ended with exit 1 after $secs s"

info "ok"
