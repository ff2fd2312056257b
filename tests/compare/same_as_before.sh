#!/usr/bin/env bash
# same_as_before.sh OLD_GALLEY NEW_GALLEY [WORKDIR]: shows that a refactor left behaviour alone.
# Runs both binaries side by side: `galley check` of every recipe and the help texts byte for
# byte; `galley data synth` of every kind equal under h5diff; reduced training runs (in-memory
# and HDF5 sources) with final checkpoints equal under h5diff and console output equal apart
# from timings. Prints one line per comparison; exit 1 if any differs.
set -uo pipefail
OLD=$(realpath "$1") NEW=$(realpath "$2")
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
W=${3:-$(mktemp -d /tmp/galley-same-XXXXXX)}
mkdir -p "$W/old" "$W/new"
bad=0
same() { echo "same: $1"; }
differ() { echo "DIFFERS: $1"; bad=1; }
# h5diff of two files: every dataset and attribute equal, except the root's wall-clock ones and
# galley_version (it names the commit each binary was built from).
h5same() {
    local d
    d=$( (h5diff -r "$1" "$2" 2>&1 || true) | awk '/^(attribute|dataset): /{o=$0} /differences found/ && $1 > 0 {print o}' |
        grep -Ev '^attribute: <(created|train_seconds|galley_version) of </>>' || true)
    [[ -z $d ]] || echo "$d" | head -3
    [[ -z $d ]]
}

# Both binaries run the same command in $W/old and $W/new; stdout+stderr and the rc compared.
both() {
    local tag=$1
    shift
    for v in old new; do
        local bin=$OLD
        [[ $v == new ]] && bin=$NEW
        (cd "$W/$v" && "$bin" "$@" >"$tag.out" 2>&1; echo "rc=$?" >>"$tag.out")
    done
}
cmp_text() {  # tag [sed filter for timings]
    local tag=$1 f=${2:-}
    if [[ -n $f ]]; then
        cmp -s <(sed -E "$f" "$W/old/$1.out") <(sed -E "$f" "$W/new/$1.out") && same "$tag" || differ "$tag"
    else
        cmp -s "$W/old/$1.out" "$W/new/$1.out" && same "$tag" || differ "$tag"
    fi
}

S=${SECTIONS:-text synth train hdf5}
has() { [[ " $S " == *" $1 "* ]]; }
if has text; then
for r in "$SRC"/recipes/*.yaml; do
    n=$(basename "$r" .yaml)
    both "check-$n" check "$r"
    cmp_text "check-$n"
done
both help help; cmp_text help
both help-recipe help recipe; cmp_text help-recipe
both help-data help data; cmp_text help-data
both synth-help data synth --help; cmp_text synth-help
both synth-bad data synth nosuch x.h5; cmp_text synth-bad
both synth-classes data synth shapes2d x.h5 classes=7; cmp_text synth-classes
both check-badkind check "$SRC/recipes/mlp.yaml" data.synthetic.kind=nosuch; cmp_text check-badkind
both check-badsource check "$SRC/recipes/mlp.yaml" data.source=nosuch; cmp_text check-badsource
fi

if has synth; then
for k in spirals blobs shapes2d cosmo3d climate2d nbody3d; do
    both "synth-$k" data synth "$k" "$k.h5" n=12 size=16 seed=5 compress=1
    cmp_text "synth-$k"
    h5same "$W/old/$k.h5" "$W/new/$k.h5" && same "synth-$k h5diff" || differ "synth-$k h5diff"
done
both synth-perfile data synth climate2d pf n=3 size=16 per_file=true split=val
cmp_text synth-perfile
for f in "$W"/old/pf/*.h5; do
    h5same "$f" "$W/new/pf/$(basename "$f")" || differ "per_file $(basename "$f")"
done
fi

# Timings and paths a run prints vary, and so does the idle-thread spin tuning: keep the rest.
T='/^ *idle threads: /d; s/[0-9]+(\.[0-9]+)? ?(ms|s|min|h|samples\/s|img\/s|GB\/s|MB\/s)\b/T/g; s/[0-9.]+ ?%/P%/g; s/host [0-9.]+ MiB/host M/; s/ +/ /g; s/[0-9]{8}-[0-9]{6}/D/g'
train() {  # tag recipe overrides...
    local tag=$1 recipe=$2
    shift 2
    both "$tag" train "$recipe" "$@" log.dir=runs checkpoint.dir="ck-$tag" checkpoint.at_end=true \
        train.target.metric=none train.target.above=null train.target.below=null
    cmp_text "$tag" "$T"
    local a b
    a=$(ls "$W/old/ck-$tag"/*.h5 2>/dev/null | sort | tail -1) b=$(ls "$W/new/ck-$tag"/*.h5 2>/dev/null | sort | tail -1)
    if [[ -n $a && -n $b ]] && h5same "$a" "$b"; then same "$tag checkpoint ($(basename "$a"))"
    else differ "$tag checkpoint"; fi
}
if has train; then
train mlp "$SRC/recipes/mlp.yaml" train.steps=24 train.eval_every=8
train resnet18 "$SRC/recipes/resnet18.yaml" data.synthetic.train_size=64 data.synthetic.val_size=32 \
    train.batch_size=16 train.steps=12 train.eval_every=4 optimizer.schedule.warmup=0
train cosmoflow "$SRC/recipes/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=64 \
    data.synthetic.val_size=16 train.batch_size=8 train.steps=24 train.eval_every=8 optimizer.lr=0.02 \
    optimizer.schedule.warmup=0
train deepcam "$SRC/recipes/deepcam-unet.yaml" data.synthetic.size=32 data.synthetic.train_size=32 \
    data.synthetic.val_size=16 train.batch_size=8 train.steps=12 train.eval_every=4 optimizer.schedule.warmup=0
train unet3d "$SRC/recipes/unet3d.yaml" data.synthetic.train_size=4 data.synthetic.val_size=2 train.batch_size=2 \
    train.steps=6 train.eval_every=2 optimizer.schedule.warmup=0
fi

# The HDF5 source: files written by the new binary, read by both (the same bytes: see above).
if has hdf5; then
(cd "$W" && "$NEW" data synth cosmo3d train.h5 n=16 size=32 seed=7 noise=0 split=train >/dev/null &&
    "$NEW" data synth cosmo3d val.h5 n=8 size=32 seed=7 noise=0 split=val >/dev/null &&
    "$NEW" data synth climate2d ctrain n=16 size=32 seed=7 split=train per_file=true >/dev/null &&
    "$NEW" data synth climate2d cval n=8 size=32 seed=7 split=val per_file=true >/dev/null)
train h5-cosmoflow "$SRC/recipes/cosmoflow.yaml" train.batch_size=4 train.steps=8 train.eval_every=4 seed=7 \
    optimizer.schedule.warmup=0 data.source=hdf5 data.synthetic=null "data.train={files: $W/train.h5}" \
    "data.val={files: $W/val.h5}" data.target=values data.transform=log1p data.loader.cache=memory
train h5-deepcam "$SRC/recipes/deepcam-unet.yaml" train.batch_size=4 train.steps=8 train.eval_every=4 \
    optimizer.schedule.warmup=0 data.source=hdf5 data.synthetic=null \
    "data.train={files: '$W/ctrain/*.h5', x: climate/data, y: climate/labels_0}" \
    "data.val={files: '$W/cval/*.h5', x: climate/data, y: climate/labels_0}" data.samples=per_file \
    data.target=mask data.classes=3 data.layout=channels_last data.loader.stage=/tmp data.augment.flip=true
both bench-h5 data bench "$SRC/recipes/cosmoflow.yaml" steps=2 data.source=hdf5 data.synthetic=null \
    "data.train={files: $W/train.h5}" "data.val={files: $W/val.h5}" data.target=values data.transform=log1p
cmp_text bench-h5 's/^  (read|full|synthetic) .*/\1/'
both bench-mem data bench "$SRC/recipes/mlp.yaml" steps=2
cmp_text bench-mem 's/^  (read|full|synthetic) .*/\1/'
fi
echo "workdir: $W"
exit $bad
