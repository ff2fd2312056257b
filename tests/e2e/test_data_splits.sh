#!/usr/bin/env bash
# test_data_splits.sh: the validation split must have the training split's shapes, since the
# model built for one evaluates the other: a validation file with another input width is exit 2
# before training (and in `galley check`), naming both files and shapes at data.val.files' line
# (it used to be read with the training rows' length and scored as garbage, exit 0). Matching
# splits still train. A file that cannot be opened is named with the key (and its line) that named it.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
run "$GALLEY" data synth spirals tr.h5 n=128
assert_rc 0
run "$GALLEY" data synth spirals va.h5 n=32 split=val
assert_rc 0
run "$GALLEY" data synth blobs va3.h5 n=32 split=val features=3
assert_rc 0
cat >splits.yaml <<'EOF'
name: splits
data:
  source: hdf5
  train: {files: tr.h5}
  val:
    files: va.h5
  target: class
  classes: 3
model:
  layers:
    - {type: dense, units: 8}
    - {type: relu}
    - {type: dense, units: 3}
train: {batch_size: 32, steps: 4, threads: 1}
optimizer: {type: sgd, lr: 0.05}
log: {files: false}
checkpoint: {at_end: false}
EOF

info "matching splits: trains, exit 0"
run "$GALLEY" train splits.yaml
assert_rc 0
assert_contains "$OUT" "val loss"

info "a validation file with 3 features against 2: exit 2 at data.val.files, both files and shapes named"
sed -i 's/files: va.h5/files: va3.h5/' splits.yaml
run "$GALLEY" train splits.yaml
assert_rc 2
assert_contains "$ERR" "splits.yaml:6:12: error: data.val: the validation split (va3.h5) has inputs of shape [3] per sample, the training split (tr.h5) [2]"
assert_not_contains "$OUT" "step"

info "galley check says the same"
run "$GALLEY" check splits.yaml
assert_rc 2
assert_contains "$ERR" "splits.yaml:6:12: error: data.val: the validation split (va3.h5) has inputs of shape [3]"

info "the same on the command line"
sed -i 's/files: va3.h5/files: va.h5/' splits.yaml
run "$GALLEY" check splits.yaml
assert_rc 0
run "$GALLEY" train splits.yaml data.val.files=va3.h5
assert_rc 2
assert_contains "$ERR" "command line:1:16: error: data.val: the validation split (va3.h5) has inputs of shape [3]"

info "a file that cannot be opened: exit 2 at the key that names it, in the recipe or on the command line"
sed -i 's/files: va.h5/files: gone.h5/' splits.yaml
run "$GALLEY" train splits.yaml
assert_rc 2
assert_contains "$ERR" "splits.yaml:6:12: error: data.val.files: cannot open gone.h5: No such file or directory"
assert_not_contains "$OUT" "step"
run "$GALLEY" check splits.yaml data.val.files=va.h5 data.train.files='tr-*.h5'
assert_rc 2
assert_contains "$ERR" "command line:2:18: error: data.train.files: no file matches 'tr-*.h5'"
run "$GALLEY" train splits.yaml data.val.files=splits.yaml
assert_rc 2
assert_contains "$ERR" "command line:1:16: error: data.val.files: splits.yaml is not a readable HDF5 file"

info "ok"
