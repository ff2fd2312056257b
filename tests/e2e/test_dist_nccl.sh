#!/usr/bin/env bash
# test_dist_nccl.sh: the gradient allreduce on GPU buffers (NCCL) and its MPI fallback.
#   - one process, GALLEY_NCCL=force (the test switch of src/dist/grad_nccl.c): the buckets go
#     through NCCL's enqueue, join and bounded wait on one GPU, with overlap on and off and three
#     buckets; a sum over one rank is the identity, so every loss is bitwise that of the run
#     without NCCL, and rank 0 names NCCL once;
#   - `mpirun -np 2` with train.device=cuda: with one GPU both ranks share it, which NCCL refuses,
#     so rank 0 says once that MPI sums the gradients and why; with two or more GPUs NCCL sums
#     them. Either way the losses agree with one process within 1e-4 relative (fp32);
#   - GALLEY_NCCL=0 keeps MPI and says so.
# Where `galley info` finds no NCCL the NCCL parts are skipped (said so) and the fallback checked.
# Needs a GPU: skipped (exit 77) where `galley info` lists none; the mpirun part needs mpirun.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
[[ $GALLEY_HAVE_CUDA == 1 ]] || skip "built without CUDA"
run "$GALLEY" info
gpus=$(sed -nE 's/^  GPUs: +([0-9]+).*/\1/p' <<<"$OUT" | head -1)
[[ ${gpus:-0} -ge 1 ]] || skip "no GPU: $(grep -E '^  GPUs:' <<<"$OUT" || echo 'no GPUs line')"
nccl=1
grep -qE '^  NCCL: +[0-9]' <<<"$OUT" || nccl=0

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
# 0.02 MB buckets cut the MLP's 25k parameters into three
common=(train.steps=6 train.target=null log.every=1 checkpoint.at_end=false train.threads=2
    train.device=cuda train.precision=fp32 distributed.bucket_mb=0.02)
# losses DIR: "kind step loss" per train/eval record of run directory DIR, the loss as written
losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}
# once TEXT NEEDLE: NEEDLE is on exactly one line of TEXT
once() {
    local n
    n=$(grep -cF -- "$2" <<<"$1" || true)
    [[ $n == 1 ]] || { show_run; fail "'$2' printed $n times (rank 0, once)"; }
}

info "one process: losses without NCCL"
run "$GALLEY" train "$MLP" "${common[@]}" --run-dir base
assert_rc 0
assert_not_contains "$ERR" "gradients summed by" "stderr of one process without GALLEY_NCCL"
base=$(losses base)
[[ $(grep -c '^train' <<<"$base") == 6 ]] || { show_run; fail "expected 6 training losses, got [$base]"; }

if [[ $nccl == 1 ]]; then
    for overlap in true false; do
        info "one process, GALLEY_NCCL=force, distributed.overlap=$overlap: bitwise the same losses"
        run env GALLEY_NCCL=force "$GALLEY" train "$MLP" "${common[@]}" distributed.overlap=$overlap --run-dir "f$overlap"
        assert_rc 0
        once "$ERR" "galley: gradients summed by NCCL"
        assert_contains "$ERR" "GALLEY_NCCL=force"
        [[ $(losses "f$overlap") == "$base" ]] || fail "overlap=$overlap: losses differ from the run without NCCL:
$(diff <(echo "$base") <(losses "f$overlap"))"
    done
else
    info "NCCL not found by galley info: the one-GPU NCCL path is not tested here"
fi

command -v mpirun >/dev/null || { info "no mpirun: the two-rank part is not tested"; info "ok"; exit 0; }
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
# close DIR: every loss of run DIR within 1e-4 relative of the one-process run's (same records)
close() {
    paste <(echo "$base") <(losses "$1") | awk -v what="$1" '
        { n++; if ($1 != $4 || $2 != $5) { bad = 1; next }
          d = $3 - $6; if (d < 0) d = -d; m = $3 < 0 ? -$3 : $3; if (m < 1e-30) m = 1e-30
          if (d / m > worst) worst = d / m }
        END { printf "[test_dist_nccl] %s: %d losses, worst relative difference %.2e\n", what, n, worst
              exit bad || n < 6 || worst > 1e-4 }' ||
        fail "$1: losses differ from one process:
$(paste <(echo "$base") <(losses "$1"))"
}

info "mpirun -np 2 on $gpus GPU(s)"
run "${mpi[@]}" "$GALLEY" train "$MLP" "${common[@]}" --run-dir np2
assert_rc 0
assert_no_crash
if [[ $gpus -ge 2 && $nccl == 1 ]]; then
    once "$ERR" "galley: gradients summed by NCCL"
    assert_contains "$ERR" "(2 ranks)"
else
    once "$ERR" "galley: gradients summed by MPI, not NCCL: "
    [[ $nccl == 0 ]] || assert_contains "$ERR" "ranks 0 and 1 share GPU"
fi
close np2

if [[ $gpus -ge 2 ]]; then
    info "mpirun -np 2, GALLEY_NCCL=0: MPI, and said so"
    run "${mpi[@]}" -x GALLEY_NCCL=0 "$GALLEY" train "$MLP" "${common[@]}" --run-dir np2-mpi
    assert_rc 0
    once "$ERR" "galley: gradients summed by MPI, not NCCL: GALLEY_NCCL turns it off on rank 0"
    close np2-mpi
fi
info "ok"
