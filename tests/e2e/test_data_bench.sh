#!/usr/bin/env bash
# test_data_bench.sh: `galley data bench` reports samples/s and MB/s in its three modes (read,
# full, synthetic) for an HDF5 recipe and a synthetic one, with the reader threads as set and
# steps=N batches; bad recipes and arguments are exit 2.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
run "$GALLEY" data synth cosmo3d c.h5 n=12 size=16
assert_rc 0
cat >bench.yaml <<'YAML'
name: bench
data:
  source: hdf5
  train: {files: c.h5}
  val: {files: c.h5}
  target: values
  transform: log1p
  augment: {flip: true, rotate: true}
model:
  layers:
    - {type: flatten}
    - {type: dense, units: 4}
train: {batch_size: 4, loss: mse}
optimizer: {lr: 0.01}
YAML
# number: the row's samples/s and MB/s are positive numbers, and it served the samples asked for.
check_row() {
    local mode=$1 samples=$2
    grep -qE "^  $mode +[0-9]+\.[0-9] +[0-9]+\.[0-9] +$samples +[0-9]+\.[0-9]{3}  " <<<"$OUT" ||
        fail "no '$mode' row serving $samples samples in: $OUT"
}
run "$GALLEY" data bench bench.yaml data.loader.threads=2 steps=5
show_run
assert_rc 0
assert_contains "$OUT" "hdf5 data, batch 4, 2 reader threads"
check_row read 20
check_row full 20
check_row synthetic 20
assert_contains "$OUT" "samples/s"
assert_contains "$OUT" "MB/s"

# Default steps: one epoch.
run "$GALLEY" data bench bench.yaml data.loader.threads=1
assert_rc 0
assert_contains "$OUT" "1 reader threads"
check_row full 12

# Synthetic data: read = generating the split.
run "$GALLEY" data bench "$GALLEY_SRC/recipes/quickstart.yaml" data.synthetic.train_size=512 train.batch_size=64 steps=3
assert_rc 0
assert_contains "$OUT" "synthetic data"
check_row read 512
assert_contains "$OUT" "generating the split"
check_row synthetic 192

# Errors: exit 2.
run "$GALLEY" data bench bench.yaml steps=0
assert_rc 2
assert_contains "$ERR" "bad value '0' for steps"
run "$GALLEY" data bench bench.yaml 'data.train={files: nowhere.h5}'
assert_rc 2
assert_contains "$ERR" "nowhere.h5"
run "$GALLEY" data bench missing.yaml
assert_rc 2
run "$GALLEY" data bench
assert_rc 2
info "ok"
