#!/usr/bin/env bash
# test_dist_tensor_gpu.sh: tensor parallelism with the CUDA backend (tests/gpu/run.sh runs it
# where a GPU is lent): `mpirun -np 2` with distributed.tensor_parallel=2 on one GPU, the two
# ranks sharing it (the group's sums then go through MPI over managed memory; with a GPU each,
# NCCL):
#   - deterministic (tensor_parts 4): bitwise the losses and final weights of one process on
#     the GPU at tensor_parallel 1;
#   - otherwise: the losses of tensor_parallel 1 within 1e-4 relative (fp32).
# Needs a GPU: skipped (exit 77) where `galley info` lists none, or without mpirun.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
[[ $GALLEY_HAVE_CUDA == 1 ]] || skip "built without CUDA"
run "$GALLEY" info
gpus=$(sed -nE 's/^  GPUs: +([0-9]+).*/\1/p' <<<"$OUT" | head -1)
[[ ${gpus:-0} -ge 1 ]] || skip "no GPU: $(grep -E '^  GPUs:' <<<"$OUT" || echo 'no GPUs line')"
need_cmd mpirun
need_pyenv
# shellcheck source=tests/e2e/lib/dist_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/dist_compare.sh"

cd "$GL_TMP"
VIT=$GALLEY_SRC/recipes/vit.yaml
args=(data.synthetic.size=64 data.synthetic.channels=4 model.layers.4.channels=4 model.layers.2.repeat=2
    model.layers.0.dim=64 model.blocks.block.4.units=128 model.blocks.block.6.units=64
    data.synthetic.train_size=32 data.synthetic.val_size=8 train.batch_size=8 train.threads=2
    train.steps=12 train.eval_every=6 log.every=1 train.device=cuda train.precision=fp32 train.cuda_graphs=false
    model.blocks.block.1.qkv_bias=false)
det=(distributed.deterministic=true distributed.parts=1 distributed.tensor_parts=4)

# the banner of `train` asserts "device cpu": check the device here instead
gpu_train() {
    local np=$1 name=$2
    shift 2
    local cmd=("$GALLEY" train "$VIT" "${args[@]}" "$@" "checkpoint.dir=ck-$name" --run-dir "$name")
    [[ $np -gt 1 ]] && cmd=("${DIST_MPI[@]}" -np "$np" "${cmd[@]}")
    run "${cmd[@]}"
    assert_rc 0
    assert_no_crash
    assert_contains "$OUT" "device cuda"
}

info "deterministic: tp=2 on one GPU bitwise tp=1"
gpu_train 1 d1 "${det[@]}"
gpu_train 2 d2 "${det[@]}" distributed.tensor_parallel=2
assert_contains "$OUT" "grid: 1 data-parallel x 2 tensor-parallel ranks"
same_losses d1 d2 0
same_weights d1 d2 exact

info "tolerance: tp=2 within 1e-4 of tp=1"
gpu_train 1 t1
gpu_train 2 t2 distributed.tensor_parallel=2
same_losses t1 t2 1e-4
same_weights t1 t2 tol 1e-3
info "ok"
