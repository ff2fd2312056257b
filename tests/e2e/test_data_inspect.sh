#!/usr/bin/env bash
# test_data_inspect.sh: `galley data inspect` lists every dataset of files `galley data synth`
# wrote (full paths, shapes, dtypes, chunks, filters, min/max/mean) and their galley_*
# attributes; a missing, non-HDF5 or truncated file is exit 2 with a reason. (The statistics
# against a direct computation, for any block size: unit/test_data_tools.)
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
run "$GALLEY" data synth cosmo3d c.h5 n=6 size=12 seed=5 compress=4
assert_rc 0
run "$GALLEY" data inspect c.h5
show_run
assert_rc 0
assert_contains "$OUT" "/x
  shape [6, 4, 12, 12, 12]  dtype int16  chunks [1, 4, 12, 12, 12]  filters shuffle, gzip(4)
  min 0  max "
assert_contains "$OUT" "/y
  shape [6, 4]  dtype float32  chunks [1, 4]"
assert_contains "$OUT" "galley_kind: cosmo3d"
assert_contains "$OUT" "galley_transform: log1p"
assert_contains "$OUT" "galley_seed: 5"
assert_not_contains "$OUT" "non-finite"

# Groups: full paths; a mask's labels are 0, 1, 2.
run "$GALLEY" data synth climate2d cl.h5 n=3 size=8
assert_rc 0
run "$GALLEY" data inspect cl.h5
assert_rc 0
assert_contains "$OUT" "/climate/data
  shape [3, 8, 8, 16]  dtype float32  chunks [1, 8, 8, 16]  filters none"
assert_contains "$OUT" "/climate/labels_0
  shape [3, 8, 8]  dtype int32"
assert_contains "$OUT" "  min 0  max 2  mean "
assert_contains "$OUT" "galley_layout: channels_last"

# Bad files: exit 2, saying why.
run "$GALLEY" data inspect missing.h5
assert_rc 2
assert_contains "$ERR" "cannot open missing.h5"
echo "not hdf5" >text.h5
run "$GALLEY" data inspect text.h5
assert_rc 2
assert_contains "$ERR" "text.h5 is not a readable HDF5 file"
head -c 3000 c.h5 >trunc.h5
run "$GALLEY" data inspect trunc.h5
assert_rc 2
assert_contains "$ERR" "trunc.h5"
run "$GALLEY" data inspect
assert_rc 2
assert_contains "$ERR" "usage: galley data inspect"
run "$GALLEY" help data
assert_rc 0
assert_contains "$OUT" "galley data inspect FILE.h5"
info "ok"
