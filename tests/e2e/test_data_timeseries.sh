#!/usr/bin/env bash
# test_data_timeseries.sh: data.source: timeseries on `galley data synth weather2d` files (the
# NERSC tutorial's layout: train/<year>.h5, val/<year>.h5 with fields [T, C, H, W], stats/*.npy):
# `galley check` passes, a small conv net regressing x at t + lead from x at t trains with the loss
# going down, with cache and node-local staging too, and the same kind trains from memory. Every
# bad input is exit 2 naming the key and its line, or the file and dataset: a lead beyond a
# file's series, a file shorter than lead + 1, a channel out of range, stats of the wrong length,
# files whose C/H/W differ, no files matching, a missing dataset.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
info "galley data synth weather2d writes the yearly files and the stats"
run "$GALLEY" data synth weather2d wx size=32 channels=4 steps=24 years=2 val_years=1 noise=0.02 seed=5
assert_rc 0
for f in wx/train/1979.h5 wx/train/1980.h5 wx/val/1981.h5 wx/stats/global_means.npy wx/stats/global_stds.npy; do
    [[ -s $f ]] || fail "missing $f"
done
run "$GALLEY" data inspect wx/train/1979.h5
assert_rc 0
assert_contains "$OUT" "[24, 4, 16, 32]"
run "$GALLEY" data synth weather2d bad n=5
assert_rc 2
assert_contains "$ERR" "n does not apply to weather2d"

cat >ts.yaml <<'EOF'
name: ts
seed: 3
data:
  source: timeseries
  timeseries:
    train: wx/train
    val: wx/val
    lead: 2
    channels: [0, 2, 3]
    size: [16, 24]
    mean: wx/stats/global_means.npy
    std: wx/stats/global_stds.npy
model:
  layers:
    - {type: conv, filters: 16, kernel: 3, padding: same}
    - {type: relu}
    - {type: conv, filters: 3, kernel: 3, padding: same}
train: {loss: mse, batch_size: 8, steps: 40, eval_every: 10, threads: 1}
optimizer: {type: adamw, lr: 0.003}
log: {files: false, every: 10}
checkpoint: {at_end: false}
EOF

info "galley check: valid, input [3, 16, 24]"
run "$GALLEY" check ts.yaml
assert_rc 0
assert_contains "$OUT" "source: timeseries"
assert_contains "$OUT" "[3, 16, 24]"

# The first and the last "val loss" of a run's output.
val_losses() { grep -o 'val loss [0-9.]*' <<<"$OUT" | awk '{print $3}' | sed -n '1p;$p' | tr '\n' ' '; }

info "training: the validation loss goes down"
run "$GALLEY" train ts.yaml
assert_rc 0
assert_contains "$OUT" "data: timeseries wx/train, lead 2, regression, input [3, 16, 24], train 44, val 22 samples"
read -r first last <<<"$(val_losses)"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { show_run; fail "val loss $first -> $last"; }

info "cache: memory and stage serve the same run"
mkdir stage
run "$GALLEY" train ts.yaml data.loader.cache=memory data.loader.stage=stage data.loader.threads=3
assert_rc 0
read -r first2 last2 <<<"$(val_losses)"
[[ $first2 == "$first" && $last2 == "$last" ]] || fail "cached and staged run: val loss $first2 -> $last2, plain $first -> $last"
[[ -z $(ls stage) ]] || fail "the stage directory was not cleaned: $(ls stage)"

# NumPy's own files and reading: only where the tests' Python environment (lib/py.sh) already exists.
py=${GALLEY_PYENV:-$GALLEY_BUILD/pyenv}/bin/python
if [[ -x $py ]] && "$py" -c 'import numpy, h5py' 2>/dev/null; then
    info "numpy reads the stats and fields; np.save float64 (format 1.0) and format 2.0 stats train the same"
    cat >npy_check.py <<'EOF'
import glob
import h5py
import numpy as np
from numpy.lib import format as F
m, s = np.load("wx/stats/global_means.npy"), np.load("wx/stats/global_stds.npy")
assert m.shape == (1, 4, 1, 1) and m.dtype == np.float32 and s.shape == (1, 4, 1, 1), (m.shape, m.dtype)
x = np.concatenate([h5py.File(f, "r")["fields"][:] for f in sorted(glob.glob("wx/train/*.h5"))])
assert x.shape == (48, 4, 16, 32), x.shape
assert np.abs(x.mean(axis=(0, 2, 3)) - m.ravel()).max() < 1e-5
assert np.abs(x.std(axis=(0, 2, 3)) - s.ravel()).max() < 1e-5
np.save("m64.npy", m.astype(np.float64))
np.save("s64.npy", s.astype(np.float64))
for name, a in (("m2.npy", m), ("s2.npy", s)):
    with open(name, "wb") as f:
        F.write_array(f, a.ravel()[[0, 2, 3]], version=(2, 0))
EOF
    run "$py" npy_check.py
    assert_rc 0
    for stats in "m64.npy s64.npy" "m2.npy s2.npy"; do
        read -r mf sf <<<"$stats"
        run "$GALLEY" train ts.yaml data.timeseries.mean="$mf" data.timeseries.std="$sf"
        assert_rc 0
        read -r f3 l3 <<<"$(val_losses)"
        [[ $f3 == "$first" && $l3 == "$last" ]] || fail "stats $stats: val loss $f3 -> $l3, float32 ones $first -> $last"
    done
else
    info "no Python environment with numpy and h5py at $py: the numpy part is left out"
fi

info "weather2d from memory: data.source synthetic"
run "$GALLEY" train ts.yaml data.source=synthetic data.timeseries=null \
    'data.synthetic={kind: weather2d, size: 32, channels: 3, steps: 24, lead: 2, noise: 0.02, train_size: 44, val_size: 22}'
assert_rc 0
assert_contains "$OUT" "synthetic weather2d"
run "$GALLEY" check ts.yaml data.source=synthetic data.timeseries=null 'data.synthetic={kind: weather2d, steps: 4, lead: 4}'
assert_rc 2
assert_contains "$ERR" "error: data.synthetic.lead: 4 is beyond a series of data.synthetic.steps = 4"

info "bad input: exit 2 naming the key and line, or the file and dataset"
run "$GALLEY" data synth weather2d short size=32 channels=4 steps=2 years=1 val_years=1
assert_rc 0
run "$GALLEY" data synth weather2d c3 size=32 channels=3 steps=24 years=1 val_years=1
assert_rc 0
sed 's/lead: 2/lead: 24/' ts.yaml >lead.yaml
run "$GALLEY" check lead.yaml
assert_rc 2
assert_contains "$ERR" "lead.yaml:8:11: error: data.timeseries.lead: 24 is beyond the series of wx/train/1979.h5: its dataset 'fields' holds 24 time steps, and a sample needs lead + 1 = 25"
run "$GALLEY" train ts.yaml data.timeseries.train=wx/train,short/train
assert_rc 2
assert_contains "$ERR" "error: data.timeseries.lead: 2 is beyond the series of short/train/1979.h5: its dataset 'fields' holds 2 time steps"
assert_not_contains "$OUT" "step"
run "$GALLEY" check ts.yaml 'data.timeseries.channels=[0, 7]'
assert_rc 2
assert_contains "$ERR" "command line:1:26: error: data.timeseries.channels: channel 7 is out of range: wx/train/1979.h5's dataset 'fields' has 4 channels (indices 0 to 3)"
run "$GALLEY" check ts.yaml 'data.timeseries.channels=[]' data.timeseries.mean=c3/stats/global_means.npy
assert_rc 2
assert_contains "$ERR" "error: data.timeseries.mean: c3/stats/global_means.npy holds shape [1, 3, 1, 1] (3 values); expected C = 4 values (one per channel read)"
run "$GALLEY" check ts.yaml data.timeseries.train=wx/train,c3/train
assert_rc 2
assert_contains "$ERR" "c3/train/1979.h5: dataset 'fields' is [24, 3, 16, 32], but wx/train/1979.h5's is [24, 4, 16, 32]"
run "$GALLEY" check ts.yaml 'data.timeseries.val=nothere/*.h5'
assert_rc 2
assert_contains "$ERR" "command line:1:21: error: data.timeseries.val: no file matches 'nothere/*.h5'"
mkdir empty
run "$GALLEY" check ts.yaml data.timeseries.train=empty
assert_rc 2
assert_contains "$ERR" "error: data.timeseries.train: directory empty holds no .h5 files"
run "$GALLEY" check ts.yaml data.timeseries.dataset=era5
assert_rc 2
assert_contains "$ERR" "wx/train/1979.h5: no dataset 'era5' (data.timeseries.dataset) in this file; its top level holds: fields"
sed 's/    lead: 2/    lead: 2\n    leed: 3/' ts.yaml >typo.yaml
run "$GALLEY" check typo.yaml
assert_rc 2
assert_contains "$ERR" "typo.yaml:9:5: error: data.timeseries.leed: unknown key 'leed'"
run "$GALLEY" check ts.yaml data.timeseries.std=null
assert_rc 2
assert_contains "$ERR" "error: data.timeseries.mean: give data.timeseries.mean and data.timeseries.std together"
run "$GALLEY" check ts.yaml data.crop=8
assert_rc 2
assert_contains "$ERR" "data.crop: applies only when data.source is hdf5"

info "ok"
