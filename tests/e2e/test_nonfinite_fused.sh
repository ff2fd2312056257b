#!/usr/bin/env bash
# test_nonfinite_fused.sh: a run whose loss turns non-finite names the first layer whose output is
# not finite. Where a convolution writes the max pool after it (model.fuse, graph_fuse_pools), its
# own output is never written: the message names the pool and that convolution; with
# model.fuse: false it names the convolution alone. Likewise a dense layer that adds the residual
# add after it as it stores (graph_fuse_adds): its output is the sum, so the message names the
# layer and the add. Exit 1 both ways (README "Exit codes").
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
recipe=$GALLEY_SRC/tests/bench/small_cnn.yaml
args=(optimizer.lr=1000000 data.synthetic.train_size=256 data.synthetic.val_size=64 train.steps=6
      train.threads=2 log.files=false)
run "$GALLEY" train "$recipe" "${args[@]}" checkpoint.dir="$GL_TMP/fused"
assert_rc 1
assert_contains "$ERR" "the loss became"
assert_contains "$ERR" "the first layer whose output is not finite is 'max_pool_5' (model.layers[5]) or 'conv_3' (model.layers[3]) before it, which writes it as it stores its own"
run "$GALLEY" train "$recipe" "${args[@]}" model.fuse=false checkpoint.dir="$GL_TMP/plain"
assert_rc 1
assert_contains "$ERR" "the first layer whose output is not finite is 'conv_3' (model.layers[3])"
assert_not_contains "$ERR" "which writes it as it stores"
info "a NaN from a convolution that writes its pool is traced to the pool and the convolution (exit 1)"

# A residual add computed by the dense layer before it: the logits are head + d0; SGD at lr 1e6
# overflows them at step 2 (seed 1: head first; d0, made before it, is still finite there).
res=$GL_TMP/residual.yaml
cat >"$res" <<'EOF'
name: nonfinite-residual
seed: 1
data:
  source: synthetic
  synthetic: {kind: blobs, classes: 4, features: 64, train_size: 256, val_size: 64, noise: 1.0}
model:
  layers:
    - {type: dense, units: 64, name: d1}
    - {type: dense, units: 4, name: d0}
    - {type: dense, units: 4, name: head}
    - {type: add, inputs: [head, d0], name: out}
train: {steps: 20, batch_size: 32, threads: 2}
optimizer: {type: sgd, lr: 1000000}
EOF
run "$GALLEY" train "$res" log.files=false checkpoint.dir="$GL_TMP/res-fused"
assert_rc 1
assert_contains "$ERR" "the first layer whose output is not finite is 'head' (model.layers[2]) or the add 'out' (model.layers[3]) after it, whose sum it stores as its output"
run "$GALLEY" train "$res" log.files=false model.fuse=false checkpoint.dir="$GL_TMP/res-plain"
assert_rc 1
assert_contains "$ERR" "the first layer whose output is not finite is 'head' (model.layers[2])"
assert_not_contains "$ERR" "whose sum it stores"
info "a NaN in a sum a dense layer stores for the add after it is traced to both (exit 1)"
