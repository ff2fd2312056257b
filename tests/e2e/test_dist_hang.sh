#!/usr/bin/env bash
# test_dist_hang.sh: hang localisation (dist.h) under mpirun. One rank is stopped (SIGSTOP, its
# pid found by the OMPI_COMM_WORLD_RANK in its environment) while the job trains, with
# distributed.timeout 3 s:
#   - np=3, rank 2 stopped: rank 0 reports that rank 2 on this host never entered (or is stuck
#     in) collective #k, what #k was and the steps each rank had finished; it writes a
#     checkpoint and the job exits 4, within timeout + 10 s; --resume auto continues from it;
#   - np=3, rank 0 stopped: rank 1, the lowest rank that answers, reports and checkpoints (exit 4);
#   - np=2, rank 0 stopped with batch norm in the model: rank 1 reports, but the running
#     statistics are rank 0's, so no checkpoint and exit 1.
# How long the report took after the stop is printed for each.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd mpirun timeout pgrep hostname
[[ $GALLEY_SANITIZE == 1 ]] && skip "release tree only: stopping ranks under ASan adds nothing but Open MPI's noise"

cd "$GL_TMP"
host=$(hostname)
MLP=$GALLEY_SRC/recipes/quickstart.yaml
long=(train.steps=10000000 train.target=null log.every=100000 train.threads=1 log.files=false
    checkpoint.at_end=false distributed.timeout=3 train.batch_size=48)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# rank_pid TAG RANK: the pid of rank RANK of the run whose checkpoint.dir is TAG.
rank_pid() {
    local p
    for p in $(pgrep -f "galley train .*checkpoint.dir=$1" || true); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
    done
    return 0
}

# hang_run TAG NP VICTIM RECIPE ARGS...: trains with NP ranks until the first progress line, stops
# rank VICTIM, and waits for the job. Sets RC, ERR, REPORT_S (stop to the report's first line) and
# END_S (stop to the end of the job).
hang_run() {
    local tag=$1 np=$2 victim=$3 recipe=$4 _ pid t0
    shift 4
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$GALLEY" train "$recipe" \
        "${long[@]}" checkpoint.dir="$tag" "$@" >"$tag.out" 2>"$tag.err" &
    local job=$!
    pid=
    for _ in $(seq 200); do
        grep -q "^step" "$tag.out" 2>/dev/null && pid=$(rank_pid "$tag" "$victim") && [[ -n $pid ]] && break
        sleep 0.05
    done
    [[ -n $pid ]] || fail "$tag: rank $victim did not start training: $(cat "$tag.out" "$tag.err")"
    t0=$(now)
    kill -STOP "$pid"
    REPORT_S=
    while kill -0 "$job" 2>/dev/null; do
        [[ -z $REPORT_S ]] && grep -q "^galley: error: hang: collective #" "$tag.err" && REPORT_S=$(since "$t0")
        sleep 0.05
    done
    RC=0
    wait "$job" || RC=$?
    END_S=$(since "$t0")
    kill -9 "$pid" 2>/dev/null || true
    ERR=$(cat "$tag.err")
    [[ -n $REPORT_S ]] || REPORT_S=$END_S
    [[ -z $(rank_pid "$tag" "$victim") ]] || fail "$tag: the stopped rank outlived the job"
    awk -v s="$END_S" 'BEGIN { exit !(s < 13) }' || fail "$tag: the job ended $END_S s after the stop (timeout 3 s + 10)"
}

# assert_named ERR RANK NP: the report (once) names the rank, this host and collective #k with
# what it was.
assert_named() {
    local n
    n=$(grep -c "^galley: error: hang: collective #" <<<"$1" || true)
    [[ $n == 1 ]] || fail "the report was printed $n times (once): $1"
    grep -qE "^galley: error: hang: collective #[0-9]+ \(the .+\) made no progress for 3 s \(distributed.timeout\)$" \
        <<<"$1" || fail "no report of the stuck collective: $1"
    grep -qE "^galley: error: hang: rank $2 of $3 \(host $host\) (never entered|is stuck in) #[0-9]+ \(the .+ at step [0-9]+\), which .+ for: stopped, busy outside MPI or cut off \(it did not answer\)" \
        <<<"$1" || fail "the report does not name rank $2 on $host and the collective: $1"
    grep -qE "^galley: hang: ranks? .* of $3 \(host $host\) waits? in #[0-9]+ \(.+\) for [0-9.]+ s and had finished [0-9]+ steps$" \
        <<<"$1" || fail "the report does not give the waiting ranks' steps: $1"
}

info "np=3, rank 2 stopped: rank 0 reports it, checkpoints, exit 4"
hang_run hang3 3 2 "$MLP"
[[ $RC == 4 ]] || fail "rank 2 stopped: exit $RC (want 4): $ERR"
assert_named "$ERR" 2 3
step=$(sed -n 's/^galley: hang: rank 0 had finished \([0-9]*\) steps, and every rank took part in all of them$/\1/p' <<<"$ERR")
[[ -n $step ]] || fail "rank 0 does not say which checkpoint it writes: $ERR"
assert_contains "$ERR" "checkpoint: hang3/quickstart-step$(printf %08d "$step").h5 (step $step,"
assert_contains "$ERR" "galley: stopped by a hang at step $step with a checkpoint; to continue, run the same command with --resume auto (exit code 4)"
info "rank 2 stopped: report after $REPORT_S s, job ended after $END_S s with exit 4, checkpoint at step $step"

info "the checkpoint continues"
run timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$GALLEY" train "$MLP" "${long[@]}" \
    checkpoint.dir=hang3 train.steps=$((step + 20)) --resume auto
assert_rc 0
assert_contains "$OUT" "resumed from hang3/quickstart-step$(printf %08d "$step").h5 at step $step"
assert_contains "$OUT" "done: $((step + 20)) steps"

info "np=3, rank 0 stopped: rank 1 reports it and checkpoints, exit 4"
hang_run hang0 3 0 "$MLP"
[[ $RC == 4 ]] || fail "rank 0 stopped: exit $RC (want 4): $ERR"
assert_named "$ERR" 0 3
grep -qE "^galley: hang: rank 1 had finished [0-9]+ steps, and every rank took part in all of them" <<<"$ERR" ||
    fail "rank 1 does not take over: $ERR"
grep -qE "^checkpoint: hang0/quickstart-step[0-9]+\.h5 " <<<"$ERR" || fail "no checkpoint by rank 1: $ERR"
info "rank 0 stopped: report after $REPORT_S s, job ended after $END_S s with exit 4"

info "np=2, rank 0 stopped, batch norm: rank 1 reports it, no checkpoint, exit 1"
sed 's/    - {type: dense, units: 128}/    - {type: dense, units: 128}\n    - {type: batch_norm}/' "$MLP" >bn.yaml
grep -q batch_norm bn.yaml || fail "bn.yaml has no batch norm"
hang_run hangbn 2 0 bn.yaml
[[ $RC == 1 ]] || fail "rank 0 stopped with batch norm: exit $RC (want 1): $ERR"
assert_named "$ERR" 0 2
assert_contains "$ERR" "galley: hang: no checkpoint: the model's layer state (batch-norm running statistics) is rank 0's, and rank 0 did not answer; ending the job (exit code 1)"
[[ ! -e hangbn ]] || [[ -z $(ls hangbn) ]] || fail "a checkpoint was written: $(ls hangbn)"
info "rank 0 stopped with batch norm: report after $REPORT_S s, job ended after $END_S s with exit 1"

info "ok"
