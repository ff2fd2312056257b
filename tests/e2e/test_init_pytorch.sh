#!/usr/bin/env bash
# test_init_pytorch.sh: a recipe ported from PyTorch with `init: pytorch` on its conv,
# conv_transpose and dense layers (PyTorch's default init) passes `galley check`, which shows the
# choice, and trains: exit 0 and the training loss goes down. (The draws themselves are checked
# against torch's formula in unit/test_init_pytorch.)
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
cat >p.yaml <<'YAML'
name: ported
seed: 3
data:
  synthetic: {kind: shapes2d, classes: 4, size: 16, train_size: 512, val_size: 64}
model:
  layers:
    - {type: conv, filters: 8, kernel: 3, padding: same, init: pytorch}
    - {type: relu}
    - {type: conv_transpose, filters: 8, kernel: 2, stride: 2, init: pytorch}
    - {type: relu}
    - {type: max_pool, kernel: 4}
    - {type: dense, units: 32, init: pytorch}
    - {type: relu}
    - {type: dense, units: 4, init: pytorch}
train: {batch_size: 32, steps: 60, threads: 1}
optimizer: {type: adamw, lr: 0.003}
log: {every: 10, files: false}
checkpoint: {at_end: false}
YAML

info "galley check accepts init: pytorch and shows it"
assert_exit 0 "$GALLEY" check p.yaml
assert_contains "$OUT" "init: pytorch"

info "it trains: exit 0, the training loss goes down"
assert_exit 0 "$GALLEY" train p.yaml
mapfile -t losses < <(grep -E '^step ' <<<"$OUT" | sed -E 's/.*\)  loss ([0-9.eE+-]+|nan|inf).*/\1/')
[[ ${#losses[@]} -ge 2 ]] || fail "expected logged windows: $OUT"
awk -v a="${losses[0]}" -v b="${losses[-1]}" 'BEGIN { exit !(b < a) }' ||
    fail "training loss ${losses[0]} -> ${losses[-1]} did not go down"
info "train loss ${losses[0]} -> ${losses[-1]}"
info "ok"
