#!/usr/bin/env bash
# The reduced CosmoFlow recipe trained from HDF5 files written by `galley data synth` gives the
# same losses, to the last printed digit, as trained from the same data generated in memory.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
[[ $GALLEY_SANITIZE == 1 ]] && skip "a 3D CNN run is slow under ASan; the release build runs it"

cd "$GL_TMP"
run "$GALLEY" data synth cosmo3d train.h5 n=16 size=32 seed=7 noise=0 split=train
assert_rc 0
run "$GALLEY" data synth cosmo3d val.h5 n=8 size=32 seed=7 noise=0 split=val
assert_rc 0

common=(train.batch_size=4 train.steps=8 train.eval_every=4 train.target.metric=none train.target.below=null
    log.files=false seed=7 optimizer.schedule.warmup=0)
run "$GALLEY" train "$GALLEY_SRC/recipes/cosmoflow.yaml" "${common[@]}" data.synthetic.size=32 \
    data.synthetic.train_size=16 data.synthetic.val_size=8
assert_rc 0
grep -E '^step ' <<<"$OUT" | sed -E 's/ \| lr .*//' >memory.txt
run "$GALLEY" train "$GALLEY_SRC/recipes/cosmoflow.yaml" "${common[@]}" data.source=hdf5 \
    data.synthetic=null 'data.train={files: train.h5}' 'data.val={files: val.h5}' data.target=values \
    data.transform=log1p
[[ $RC == 0 ]] || fail "training from HDF5 failed: $ERR"
grep -E '^step ' <<<"$OUT" | sed -E 's/ \| lr .*//' >hdf5.txt
[[ $(wc -l <memory.txt) -eq 2 ]] || fail "expected 2 evaluation lines, got: $(cat memory.txt)"
diff -u memory.txt hdf5.txt || fail "losses from HDF5 differ from the in-memory run"
info "identical losses from memory and from HDF5: $(tr '\n' ' ' <hdf5.txt)"
