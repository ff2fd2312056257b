#!/usr/bin/env bash
# tests/bench/loader_bench.sh: galley's data loader against a PyTorch DataLoader (h5py), on the
# layouts users have, in the NERSC tutorial's "benchy" modes.
#
# Not a test (CI does not run it): a benchmark run by hand, a few minutes on a 2-core machine
# (plus about 1.5 GB of data written once to LB_DIR). It writes tests/bench/loader_results.md.
#
# For each layout, each at the same worker count and batch on both sides:
#   galley   `galley data bench RECIPE data.loader.threads=W steps=N`: read, full, synthetic
#   PyTorch  tests/bench/loader_peer.py: a DataLoader with W worker processes, h5py reads, numpy
#            transforms (its docstring says what each mode does); read, full, synthetic
# Layouts (`galley data synth` writes them; loader_peer.py reads the same files):
#   cosmoflow  MLPerf CosmoFlow: int16 counts, 4 x 64^3, stacked in one file, log1p; batch 8
#   deepcam    MLPerf DeepCAM: one sample per file, climate/data (256, 256, 16) channels-last,
#              float32 and (deepcam16) float16, min-max from stats.h5, mask labels; batch 8
#              (MLPerf's samples are 768 x 1152: smaller here to keep the run short)
#   unet       SC22 tutorial U-Net: random 64^3 crops of x (4 ch) and y (5 ch) read as
#              hyperslabs from 128^3 volumes; batch 8. unet is galley's file (chunked, as
#              `galley data synth` writes), unetc the same data as h5py writes it by default
#              (contiguous: galley reads those crops with one pread per plane)
#   images     small images: 28 x 28 float32, 60000 in one file, mean/std normalisation;
#              batch 128
#   era5       the SC23-SC25 tutorial's ViT data (FourCastNet's ERA5 layout): yearly files with
#              fields [T, 20, 360, 720] float32 (weather2d at the tutorial's size, 2 years of 16
#              steps), a sample the fields at t and t + 1, per-channel mean/std from .npy stats;
#              batch 4 (41.5 MB a sample: input and target). galley reads with its cache off
#              (data.loader.cache: none), since the real data (TBs) never fits in memory
# Every (side, layout, mode) runs LB_REPEAT times; the best counts (the machine is shared).
# Files are read once before timing (page cache), as in issue #28's measurement.
#
# Environment:
#   GALLEY       galley binary (default: build/galley)
#   PY           a python with torch, h5py and numpy (default: tests/bench/.venv/bin/python when it
#                imports them, else /usr/bin/python3: Debian's python3-torch, python3-h5py)
#   LB_DIR       where the data sets go (default /tmp/galley-loader-bench; kept between runs)
#   LB_WORKERS   worker/reader counts (default "2")
#   LB_LAYOUTS   layouts (default "cosmoflow deepcam deepcam16 unet unetc images era5")
#   LB_REPEAT    runs of each, best counts (default 2)
#   LB_OUT       the results file (default tests/bench/loader_results.md)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GALLEY=${GALLEY:-$ROOT/build/galley}
LB_DIR=${LB_DIR:-/tmp/galley-loader-bench}
LB_WORKERS=${LB_WORKERS:-2}
LB_LAYOUTS=${LB_LAYOUTS:-cosmoflow deepcam deepcam16 unet unetc images era5}
LB_REPEAT=${LB_REPEAT:-2}
LB_OUT=${LB_OUT:-$HERE/loader_results.md}

say() { printf '%s\n' "$*" >&2; }
die() { say "loader_bench: $*"; exit 1; }
py_ok() { "$1" -c 'import torch, h5py, numpy' >/dev/null 2>&1; }

[[ -x $GALLEY ]] || die "no galley binary at $GALLEY (build it: ./build.sh build, or set GALLEY)"
if [[ -z ${PY:-} ]]; then
    if py_ok "$HERE/.venv/bin/python"; then PY=$HERE/.venv/bin/python
    elif py_ok /usr/bin/python3; then PY=/usr/bin/python3
    else die "no python with torch, h5py and numpy: apt-get install python3-torch python3-h5py, or set PY"; fi
fi
py_ok "$PY" || die "$PY does not import torch, h5py and numpy"

# --- data, written once ---------------------------------------------------------------------
{ mkdir -p "$LB_DIR" && cd "$LB_DIR"; } || die "cannot use $LB_DIR"
synth() { # OUT KIND ARGS...: galley data synth unless OUT is there
    local out=$1 kind=$2
    shift 2
    [[ -e $out ]] && return 0
    say "== writing $LB_DIR/$out ($kind $*)"
    "$GALLEY" data synth "$kind" "$out" "$@" >/dev/null || die "galley data synth $kind failed"
}
synth cosmo.h5 cosmo3d n=256 size=64
synth deepcam climate2d n=64 size=256 channels=16 per_file=true
synth nbody.h5 nbody3d n=8 size=128
synth images.h5 shapes2d n=60000 size=28 channels=1
synth era5 weather2d size=720 channels=20 steps=16 years=2 val_years=1
if [[ ! -e nbody_contig.h5 ]]; then
    say "== writing nbody_contig.h5 (nbody.h5 as h5py writes it: contiguous)"
    "$PY" -c 'import h5py, os
with h5py.File("nbody.h5", "r") as f, h5py.File("nbody_contig.h5.tmp", "w") as g:
    g["x"] = f["x"][...]
    g["y"] = f["y"][...]
os.replace("nbody_contig.h5.tmp", "nbody_contig.h5")' || die "writing nbody_contig.h5 failed"
fi
if [[ ! -e stats.h5 || ! -d deepcam16 ]]; then
    say "== writing stats.h5 (per-channel min/max over deepcam/) and deepcam16/ (float16 copies)"
    "$PY" - <<'PYEOF' || die "writing stats.h5 / deepcam16 failed"
import glob, os
import h5py, numpy as np
files = sorted(glob.glob("deepcam/*.h5"))
lo = hi = None
os.makedirs("deepcam16.tmp", exist_ok=True)
for p in files:
    with h5py.File(p, "r") as f:
        x, y = f["climate/data"][...], f["climate/labels_0"][...]
    a, b = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    lo = a if lo is None else np.minimum(lo, a)
    hi = b if hi is None else np.maximum(hi, b)
    with h5py.File(os.path.join("deepcam16.tmp", os.path.basename(p)), "w") as g:
        g["climate/data"] = x.astype(np.float16)
        g["climate/labels_0"] = y
with h5py.File("stats.h5.tmp", "w") as s:
    s["climate/minval"] = lo.astype(np.float32)
    s["climate/maxval"] = hi.astype(np.float32)
os.replace("stats.h5.tmp", "stats.h5")
os.rename("deepcam16.tmp", "deepcam16")
PYEOF
fi

# --- recipes --------------------------------------------------------------------------------
recipe() { # LAYOUT: the recipe file's name, written here
    local l=$1 y=$LB_DIR/$1.yaml
    case $l in
    cosmoflow) cat >"$y" <<'YAML'
name: lb-cosmoflow
data:
  source: hdf5
  train: {files: cosmo.h5}
  val: {files: cosmo.h5}
  target: values
  transform: log1p
model:
  layers:
    - {type: flatten}
    - {type: dense, units: 4}
train: {batch_size: 8, loss: mse}
optimizer: {lr: 0.01}
YAML
        ;;
    deepcam | deepcam16) cat >"$y" <<YAML
name: lb-$l
data:
  source: hdf5
  samples: per_file
  layout: channels_last
  train: {files: "$l/*.h5", x: climate/data, y: climate/labels_0}
  val: {files: "$l/*.h5", x: climate/data, y: climate/labels_0}
  target: mask
  classes: 3
  normalize: minmax
  stats: stats.h5
model:
  layers:
    - {type: conv, filters: 3, kernel: 1}
train: {batch_size: 8, loss: softmax_cross_entropy}
optimizer: {lr: 0.01}
YAML
        ;;
    unet | unetc) cat >"$y" <<YAML
name: lb-$l
data:
  source: hdf5
  train: {files: $(files_of "$l")}
  val: {files: $(files_of "$l")}
  target: values
  crop: 64
model:
  layers:
    - {type: conv, filters: 5, kernel: 1}
train: {batch_size: 8, loss: mse}
optimizer: {lr: 0.01}
YAML
        ;;
    images) cat >"$y" <<'YAML'
name: lb-images
data:
  source: hdf5
  train: {files: images.h5}
  val: {files: images.h5}
  target: class
  classes: 3
  normalize: standard
  mean: [0.5]
  std: [0.25]
model:
  layers:
    - {type: flatten}
    - {type: dense, units: 3}
train: {batch_size: 128, loss: softmax_cross_entropy}
optimizer: {lr: 0.01}
YAML
        ;;
    era5) cat >"$y" <<'YAML'
name: lb-era5
data:
  source: timeseries
  timeseries:
    train: era5/train
    val: era5/val
    lead: 1
    mean: era5/stats/global_means.npy
    std: era5/stats/global_stds.npy
  loader: {cache: none}
model:
  layers:
    - {type: conv, filters: 20, kernel: 1}
train: {batch_size: 4, loss: mse}
optimizer: {lr: 0.01}
YAML
        ;;
    esac
    printf '%s' "$y"
}
steps_of() { case $1 in cosmoflow) echo 32 ;; deepcam*) echo 8 ;; unet*) echo 8 ;; images) echo 60 ;; era5) echo 48 ;; esac; }
batch_of() { case $1 in images) echo 128 ;; era5) echo 4 ;; *) echo 8 ;; esac; }
files_of() { case $1 in cosmoflow) echo cosmo.h5 ;; deepcam*) echo "$1 stats.h5" ;; unet) echo nbody.h5 ;; unetc) echo nbody_contig.h5 ;; images) echo images.h5 ;; era5) echo era5/train ;; esac; }

# --- runs -----------------------------------------------------------------------------------
best() { sort -g | tail -1; }
galley_rates() { # RECIPE W STEPS: "read full synthetic" samples/s, each the best of LB_REPEAT runs
    # (one `galley data bench` runs all three modes)
    for _ in $(seq "$LB_REPEAT"); do
        "$GALLEY" data bench "$1" data.loader.threads="$2" steps="$3" 2>/dev/null
    done | awk '$1 == "read" || $1 == "full" || $1 == "synthetic" {
            if (!($1 in b) || $2 + 0 > b[$1] + 0) b[$1] = $2
        }
        END {
            n = split("read full synthetic", m, " ")
            for (i = 1; i <= n; i++) printf "%s%s", (m[i] in b) ? b[m[i]] : "-", i < n ? " " : "\n"
        }'
}
peer_rate() { # LAYOUT W BATCH STEPS MODE [OPS]
    for _ in $(seq "$LB_REPEAT"); do
        "$PY" -W ignore "$HERE/loader_peer.py" "$1" "$LB_DIR" --workers "$2" --batch "$3" --steps "$4" --mode "$5" \
            --ops "${6:-numpy}" \
            2>/dev/null | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read())["samples_per_s"])'
    done | best
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }
larger() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { print (a > b ? a : b) }'; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
    echo "# Loader benchmark: galley data bench vs PyTorch DataLoader + h5py"
    echo
    echo "Written by tests/bench/loader_bench.sh on $(date -u +%Y-%m-%d) (UTC); samples/s, best of $LB_REPEAT."
    echo
    echo "- Machine: $cpu, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- galley: $("$GALLEY" info 2>/dev/null | grep -E '^ +(version|build|CPU):' | sed 's/^ *//; s/  */ /g' | paste -sd';' | sed 's/;/; /g')"
    echo "- PyTorch $("$PY" -c 'import torch, h5py, numpy; print(torch.__version__, "/ h5py", h5py.__version__, "/ numpy", numpy.__version__)' 2>/dev/null) ($PY)"
    echo "- OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)} (the loader does not call BLAS)"
    echo
    echo "torch full: transforms in numpy / on torch tensors; the ratio divides galley full by the faster of the two."
    echo
    echo "| layout | workers | batch | galley read | galley full | galley synthetic | torch read | torch full (numpy / torch ops) | torch synthetic | full: galley / torch |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$LB_OUT.tmp"

for l in $LB_LAYOUTS; do
    y=$(recipe "$l")
    st=$(steps_of "$l") b=$(batch_of "$l")
    # shellcheck disable=SC2046
    cat $(find $(files_of "$l") -type f) >/dev/null  # into the page cache
    for w in $LB_WORKERS; do
        say "== $l, $w workers"
        read -r gr gf gs <<<"$(galley_rates "$y" "$w" "$st")"
        pr=$(peer_rate "$l" "$w" "$b" "$st" read) pf=$(peer_rate "$l" "$w" "$b" "$st" full)
        pt=$(peer_rate "$l" "$w" "$b" "$st" full torch)
        ps=$(peer_rate "$l" "$w" "$b" "$st" synthetic)
        row="| $l | $w | $b | ${gr:--} | ${gf:--} | ${gs:--} | ${pr:--} | ${pf:--} / ${pt:--} | ${ps:--} | $(ratio "$gf" "$(larger "$pf" "$pt")") |"
        say "$row"
        echo "$row" >>"$LB_OUT.tmp"
    done
done
mv "$LB_OUT.tmp" "$LB_OUT"
say "== wrote $LB_OUT"
cat "$LB_OUT"
