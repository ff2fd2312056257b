#!/usr/bin/env bash
# Results do not depend on the thread count or on model.fuse: conv nets whose relu or leaky_relu
# feeds a max_pool (the pool then applies the activation's derivative, and its gradient buffers
# are shared by lifetime, as in every training run) train to bitwise the same losses and weights
# at 1, 2 and 3 threads and with model.fuse: false. A first version of that fusion planned the
# pool's output gradient onto the conv's: the loss then changed with model.fuse and, at 2
# threads, from one run to the next, and no test saw it (they kept every buffer or ran 1 thread).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
# shellcheck source=tests/e2e/lib/dist_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/dist_compare.sh"
need_galley
need_pyenv  # same_weights reads the checkpoints with h5py

cd "$GL_TMP"
common=(train.target.metric=none train.target.above=null train.target.below=null log.every=2)
# small_cnn: 2D conv -> relu -> max_pool twice; cosmoflow at 32^3: 3D conv -> leaky_relu ->
# max_pool five times (the recipe's reduced size).
small=("$GALLEY_SRC/tests/bench/small_cnn.yaml" data.synthetic.train_size=256 data.synthetic.val_size=32
    train.batch_size=32 train.steps=6 train.eval_every=3 "${common[@]}")
cosmo=("$GALLEY_SRC/recipes/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=32
    data.synthetic.val_size=8 train.batch_size=8 train.steps=4 train.eval_every=2 optimizer.lr=0.02
    optimizer.schedule.warmup=0 "${common[@]}")
runs=("2 threads=2" "3 threads=3" "unfused threads=2 model.fuse=false")
# Under ASan (about 10x slower) cosmoflow's 3 runs took 3 minutes: small_cnn at 2 threads and
# unfused there; test_graph covers the 3D fusion in both trees.
[[ $GALLEY_SANITIZE == 1 ]] && runs=("2 threads=2" "unfused threads=1 model.fuse=false")

# same_bits NAME ARGS...: NAME at 1 thread, then at each of runs: the same losses and weights.
same_bits() {
    local model=$1 r tag t fuse
    shift
    train 1 "$model-1" "$@" train.threads=1
    for r in "${runs[@]}"; do
        read -r tag t fuse <<<"$r"
        local extra=("train.$t")
        [[ -n ${fuse:-} ]] && extra+=("$fuse")
        train 1 "$model-$tag" "$@" "${extra[@]}"
        same_losses "$model-1" "$model-$tag" 0
        same_weights "$model-1" "$model-$tag" exact
    done
}
same_bits small "${small[@]}"
[[ $GALLEY_SANITIZE == 1 ]] || same_bits cosmo "${cosmo[@]}"
info "the same bits at every thread count and unfused"

# The runs above took Winograd's F(2,3) (cpu_conv_wino.c) for the passes cpu_conv_wino_worth
# finds worth it on this CPU (on AVX2 all of small_cnn's second convolution, on AVX-512 its
# forward and input gradient). Forced with GALLEY_CONV_ALGO=winograd it gives the same bits at 1
# and 2 threads, and other bits than GALLEY_CONV_ALGO=direct (the implicit GEMM throughout),
# losses within 1e-4 of them; an unknown value ends the run with exit 2, naming the values.
GALLEY_CONV_ALGO=winograd train 1 small-wino1 "${small[@]}" train.threads=1
GALLEY_CONV_ALGO=winograd train 1 small-wino2 "${small[@]}" train.threads=2
same_losses small-wino1 small-wino2 0
same_weights small-wino1 small-wino2 exact
GALLEY_CONV_ALGO=direct train 1 small-direct "${small[@]}" train.threads=2
[[ $(losses small-wino2) != "$(losses small-direct)" ]] || fail "GALLEY_CONV_ALGO=direct gave F(2,3)'s bits"
same_losses small-wino2 small-direct 1e-4
GALLEY_CONV_ALGO=fast run "$GALLEY" train "${small[@]}" train.threads=2 --run-dir bad-algo
assert_rc 2
grep -q "GALLEY_CONV_ALGO=fast: the values are auto, direct and winograd" <<<"$ERR" ||
    fail "GALLEY_CONV_ALGO=fast: expected the values named, got: $ERR"
info "GALLEY_CONV_ALGO=winograd: the same bits at 1 and 2 threads; direct: other bits, losses within 1e-4;" \
    "an unknown value: exit 2"
