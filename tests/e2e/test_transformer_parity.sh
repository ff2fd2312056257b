#!/usr/bin/env bash
# test_transformer_parity.sh: galley's transformer layers give PyTorch's loss (1e-5 relative) and
# gradients (1e-4 relative) on shared weights: patch_embed -> pos_embed -> 2 pre-norm blocks
# (layer_norm, attention, residual, layer_norm, dense-gelu-dense, residual; written once as a
# recipe block) -> layer_norm -> unpatch, under the MSE loss and the tutorial's relative L2 loss.
# One SGD step with lr 1e-30 leaves the checkpoint's /params at the weights the step started
# from and its momentum velocity equal to the step's gradient; tests/e2e/lib/transformer_parity.py
# loads both into the PyTorch twin (tests/bench/torch_vit.py, Debian's python3-torch) in double.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
PYTHON=/usr/bin/python3
"$PYTHON" -c 'import torch, h5py, numpy' 2>/dev/null ||
    skip "Debian's python3-torch and python3-h5py are not installed (build.sh test installs them)"
PARITY="$GALLEY_SRC/tests/e2e/lib/transformer_parity.py"

cd "$GL_TMP"
"$PYTHON" "$PARITY" data .
cat >parity.yaml <<'YAML'
name: parity
seed: 5
data:
  source: hdf5
  train: {files: train.h5}
  val: {files: val.h5}
  target: values
model:
  blocks:
    block:
      - {type: layer_norm, name: n1}
      - {type: attention, name: attn, heads: 4}
      - {type: add, name: r1, inputs: [attn, in]}
      - {type: layer_norm, name: n2}
      - {type: dense, name: fc1, units: 64, init: pytorch}
      - {type: gelu, name: act}
      - {type: dense, name: fc2, units: 16, init: pytorch}
      - {type: add, name: r2, inputs: [fc2, r1]}
  layers:
    - {type: patch_embed, name: pe, patch: 2, dim: 16}
    - {type: pos_embed, name: pos, init: xavier_uniform}
    - {block: block, repeat: 2, name: blk}
    - {type: layer_norm, name: norm}
    - {type: unpatch, name: head, channels: 3, init: pytorch}
train: {batch_size: 4, steps: 1, eval_every: 1, threads: 1, loss: mse, target: {metric: none}}
optimizer: {type: sgd, lr: 1.0e-30, momentum: 0.9, schedule: {warmup: 0}}
checkpoint: {dir: ck, at_end: true}
YAML

for loss in mse l2_relative; do
    info "loss $loss: one step, then PyTorch on the checkpoint's weights"
    rm -rf ck rd
    run "$GALLEY" train parity.yaml train.loss="$loss" --run-dir rd
    [[ $RC == 0 ]] || fail "galley train failed (exit $RC): $ERR"
    step_loss=$(sed -nE 's/^\{"kind":"train","step":1,.*"loss":([^,]+),.*/\1/p' rd/metrics.jsonl)
    [[ -n $step_loss ]] || fail "no step-1 loss in rd/metrics.jsonl: $(cat rd/metrics.jsonl)"
    ckpt=$(ls ck/*.h5)
    run "$PYTHON" "$PARITY" compare "$ckpt" "$step_loss" "$loss"
    echo "$OUT"
    [[ $RC == 0 ]] || fail "galley and PyTorch differ under $loss: $OUT $ERR"
done
info "ok"
