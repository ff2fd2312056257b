#!/usr/bin/env bash
# The AVX2 kernels give the AVX-512 kernels' bits (cpu_conv_fast.c, cpu_gemm_fast.c): on a CPU
# with AVX-512, GALLEY_CPU_ISA=avx2 runs the AVX2+FMA kernels, and conv nets and an MLP train to
# bitwise the same losses and weights as with the CPU's best, with the convolution's algorithm
# fixed (GALLEY_CONV_ALGO=direct, then winograd: cpu_conv_wino_worth's tables differ per
# instruction set, so `auto` may choose other passes on an AVX2 machine). The AVX-512 weight
# gradient reads the padded input (dw_direct), the AVX2 one a panel: the same sums in the same
# order. GALLEY_CPU_ISA=none leaves OpenBLAS's bits; an unknown value ends the run with exit 2.
# Skipped where the CPU has no AVX-512 (AVX2 is then the best: nothing to compare).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
# shellcheck source=tests/e2e/lib/dist_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/dist_compare.sh"
need_galley
need_pyenv  # same_weights reads the checkpoints with h5py
grep -qw avx512f /proc/cpuinfo || skip "no AVX-512 on this CPU: its best is AVX2 already"

cd "$GL_TMP"
common=(train.target.metric=none train.target.above=null train.target.below=null log.every=2 train.threads=2)
small=("$GALLEY_SRC/tests/bench/small_cnn.yaml" data.synthetic.train_size=256 data.synthetic.val_size=32
    train.batch_size=32 train.steps=6 train.eval_every=3 "${common[@]}")
cnn3d=("$GALLEY_SRC/tests/bench/cnn3d.yaml" data.synthetic.size=20 data.synthetic.train_size=16
    data.synthetic.val_size=4 train.batch_size=4 train.steps=4 train.eval_every=2 "${common[@]}")
mlp=("$GALLEY_SRC/recipes/mlp.yaml" data.synthetic.train_size=1024 data.synthetic.val_size=128 train.steps=8
    train.eval_every=4 "${common[@]}")
algos=(direct winograd)
[[ $GALLEY_SANITIZE == 1 ]] && algos=(direct)  # ASan: about 10x slower

# both NAME ALGO ARGS...: NAME with the CPU's best and with avx2, the convolutions by ALGO: the
# same losses and weights.
both() {
    local m=$1 algo=$2
    shift 2
    GALLEY_CONV_ALGO=$algo train 1 "$m-$algo-best" "$@"
    GALLEY_CONV_ALGO=$algo GALLEY_CPU_ISA=avx2 train 1 "$m-$algo-avx2" "$@"
    same_losses "$m-$algo-best" "$m-$algo-avx2" 0
    same_weights "$m-$algo-best" "$m-$algo-avx2" exact
}
for algo in "${algos[@]}"; do
    both small "$algo" "${small[@]}"
    both cnn3d "$algo" "${cnn3d[@]}"
done
train 1 mlp-best "${mlp[@]}"
GALLEY_CPU_ISA=avx2 train 1 mlp-avx2 "${mlp[@]}"
same_losses mlp-best mlp-avx2 0
same_weights mlp-best mlp-avx2 exact
# A pre-norm transformer block (patch_embed, pos_embed, layer_norm, attention, add, dense, GELU,
# token_pool, AdamW): the same bits as well (the attention sums 16 lanes on both, cpu_gelu.c's Phi
# is the same arithmetic on both).
cat >tokens.yaml <<'YAML'
name: tokens
seed: 7
data:
  source: synthetic
  synthetic: {kind: shapes2d, classes: 6, size: 32, channels: 3, train_size: 64, val_size: 16, noise: 0.1}
model:
  layers:
    - {type: patch_embed, name: patch, patch: 4, dim: 64}
    - {type: pos_embed, name: pos}
    - {type: layer_norm, name: n1}
    - {type: attention, name: attn, heads: 2}
    - {type: add, name: r1, inputs: [attn, pos]}
    - {type: layer_norm, name: n2}
    - {type: dense, name: fc1, units: 256}
    - {type: gelu, name: act}
    - {type: dense, name: fc2, units: 64}
    - {type: add, name: r2, inputs: [fc2, r1]}
    - {type: token_pool, name: pool, mode: mean}
    - {type: dense, name: head, units: 6}
train: {epochs: 1, batch_size: 16, loss: softmax_cross_entropy}
optimizer: {type: adamw, lr: 0.001, weight_decay: 0.05}
YAML
tok=(tokens.yaml train.steps=4 train.eval_every=2 "${common[@]}")
train 1 tok-best "${tok[@]}"
GALLEY_CPU_ISA=avx2 train 1 tok-avx2 "${tok[@]}"
same_losses tok-best tok-avx2 0
same_weights tok-best tok-avx2 exact
info "GALLEY_CPU_ISA=avx2: the AVX-512 machine's bits (small CNN and 3D CNN with ${algos[*]}, MLP, a transformer block)"

GALLEY_CONV_ALGO=direct GALLEY_CPU_ISA=none train 1 small-none "${small[@]}"
[[ $(losses small-none) != "$(losses small-direct-best)" ]] || fail "GALLEY_CPU_ISA=none gave the fast kernels' bits"
same_losses small-direct-best small-none 1e-4
GALLEY_CPU_ISA=avx3 run "$GALLEY" train "${small[@]}" --run-dir bad-isa
assert_rc 2
grep -q "GALLEY_CPU_ISA=avx3: the values are auto, avx2 and none" <<<"$ERR" ||
    fail "GALLEY_CPU_ISA=avx3: expected the values named, got: $ERR"
info "GALLEY_CPU_ISA=none: OpenBLAS's bits, losses within 1e-4; an unknown value: exit 2"
