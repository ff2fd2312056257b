#!/usr/bin/env bash
# test_nonfinite_fused.sh: a run whose loss turns non-finite names the first layer whose output is
# not finite. Where a convolution writes the max pool after it (model.fuse, graph_fuse_pools), its
# own output is never written: the message names the pool and that convolution; with
# model.fuse: false it names the convolution alone. Exit 1 both ways (README "Exit codes").
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
