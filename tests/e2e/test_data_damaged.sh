#!/usr/bin/env bash
# test_data_damaged.sh: damaged HDF5 files (two a fuzzer made from `galley data synth blobs`
# output by changing a few bytes; tests/e2e/data/) end `galley train` with exit 2 and
# `galley data inspect` with exit 1, each saying what is damaged, within seconds:
#   damaged-dims.h5   x's first dimension is 9961474 against its maximum of 2: HDF5 1.10 reads
#                     the made-up size for hours (training and inspect both hung before);
#   damaged-attrs.h5  x's chunk index does not fit its chunk shape (HDF5 read past its buffers),
#                     and a root attribute message that crashes HDF5 1.10 while it decodes it
#                     (inspect lists attributes in a child process, so only that part is lost).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
DATA=$(cd "$(dirname "${BASH_SOURCE[0]}")/data" && pwd)

cd "$GL_TMP"
cat >d.yaml <<'YAML'
name: damaged
data:
  source: hdf5
  train: {files: in.h5}
  val: {files: in.h5}
  target: class
  classes: 3
model:
  layers:
    - {type: dense, units: 3}
train: {batch_size: 8, steps: 3, threads: 1}
optimizer: {type: sgd, lr: 0.1}
log: {files: false}
checkpoint: {at_end: false}
YAML

info "a dimension beyond its maximum: train exit 2 at once, naming file, dataset and damage"
cp "$DATA/damaged-dims.h5" in.h5
SECONDS=0
run timeout 60 "$GALLEY" train d.yaml
assert_rc 2
assert_contains "$ERR" "in.h5: dataset 'x' (the inputs, x) is damaged (a dimension exceeds its own maximum)"
((SECONDS < 30)) || fail "took ${SECONDS} s"
run timeout 60 "$GALLEY" data inspect in.h5
assert_rc 1
assert_contains "$OUT" "cannot read the values: truncated or corrupt file?"
assert_contains "$ERR" "reading the file failed part way"

info "a chunk index that does not fit the chunks: train exit 2"
cp "$DATA/damaged-attrs.h5" in.h5
run timeout 60 "$GALLEY" train d.yaml
assert_rc 2
assert_contains "$ERR" "in.h5: dataset 'x' (the inputs, x) is damaged (its chunk index does not fit its chunk shape)"

info "an attribute HDF5 cannot decode: inspect lists the rest and exits 1 (not a crash)"
run timeout 60 "$GALLEY" data inspect in.h5
assert_rc 1
assert_contains "$OUT" "/y
  shape [64]  dtype int32"
assert_contains "$OUT" "attributes of /: cannot be read (HDF5"
info "ok"
