#!/usr/bin/env bash
# tests/equiv/same_behaviour.sh OLD_GALLEY NEW_GALLEY [WORKDIR]: shows that a refactor changed no
# behaviour, by running two binaries side by side on the same inputs (issue #19's "done means").
#
#   1. `galley check` of every shipped recipe, `galley help`, `galley help recipe`: byte-identical.
#   2. Every shipped recipe's reduced run (the sizes tests/e2e/test_recipes_train.sh uses), plus
#      the optimizer rules, an HDF5-source run, an evaluation and a resume: the console output
#      equal once times, rates and dates are masked, and the final checkpoints equal under h5diff
#      (every tensor, every per-tensor attribute) and under `ckpt inspect` (every run attribute
#      but created, galley_version and train_seconds).
#
# Not a ctest test: it needs the binary from before the change. Build that from the old commit
# (git worktree add /tmp/old REV && (cd /tmp/old && ./build.sh build)) and pass both binaries.
# Needs h5diff (hdf5-tools). Prints one line per comparison and a final `N passed, N failed`.
# Exit 0 when every comparison passed. Takes about 3 minutes on 2 cores (CPU-only binaries).
set -uo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 OLD_GALLEY NEW_GALLEY [WORKDIR]" >&2; exit 2; }
OLD=$(realpath "$1")
NEW=$(realpath "$2")
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=${3:-$(mktemp -d "${TMPDIR:-/tmp}/galley-equiv.XXXXXX")}
mkdir -p "$WORK"
command -v h5diff >/dev/null || { echo "$0: needs h5diff (apt-get install hdf5-tools)" >&2; exit 2; }
export OMP_NUM_THREADS=2
passed=0
failed=0

ok() { echo "same:      $*"; passed=$((passed + 1)); }
bad() { echo "DIFFERENT: $*"; failed=$((failed + 1)); }

# mask: times, rates, sizes that depend on timing, dates and run-directory stamps.
mask() {
    sed -E -e 's/[0-9]{8}-[0-9]{6}(-[0-9]+)?/STAMP/g' \
        -e 's/[0-9]+(\.[0-9]+)?( ?)(s|ms|us|samples\/s|MiB|GiB|KiB|B\/s|GB\/s)\b/#\2\3/g' \
        -e 's/[0-9]+(\.[0-9]+)?( ?)%/#\2%/g' \
        -e 's/~[0-9]+ (ms|us)/~# \1/g' -e 's/[0-9]+ changes?$/# changes/' \
        -e 's/[0-9]+ of [0-9]+ batches were ready/# of # batches were ready/' \
        -e 's/ETA [0-9hm]*#s/ETA #/' "$1" | tr -s ' '
}

# same_text WHAT ARGS...: both binaries' stdout+stderr and exit code, byte for byte.
same_text() {
    local what=$1
    shift
    (cd "$WORK" && "$OLD" "$@" >old.txt 2>&1; echo "exit $?" >>old.txt)
    (cd "$WORK" && "$NEW" "$@" >new.txt 2>&1; echo "exit $?" >>new.txt)
    if cmp -s "$WORK/old.txt" "$WORK/new.txt"; then ok "$what"; else
        bad "$what"
        diff "$WORK/old.txt" "$WORK/new.txt" | head -20
    fi
}

# newest DIR: the checkpoint of the highest step in DIR (names sort by step), or nothing.
newest() {
    find "$1" -maxdepth 1 -name '*.h5' 2>/dev/null | sort | tail -n 1
}

# h5same A B: every dataset and attribute equal, except galley_version (it names the commit
# each binary was built from).
h5same() {
    local d
    d=$( (h5diff -r "$1" "$2" 2>&1 || true) |
        awk '/^(attribute|dataset): /{o=$0} /differences found/ && $1 > 0 {print o}' |
        grep -Ev '^attribute: <galley_version of </>>' || true)
    [[ -f $1 && -f $2 && -z $d ]]
}

# same_ckpt WHAT A B: tensors and their attributes by h5diff; run attributes by ckpt inspect.
same_ckpt() {
    local what=$1 a=$2 b=$3 ia ib
    if [[ ! -f $a || ! -f $b ]]; then bad "$what: checkpoint missing ($a, $b)"; return; fi
    if ! h5diff -r --exclude-attribute / "$a" "$b" >"$WORK/h5diff.txt" 2>&1; then
        bad "$what: h5diff"
        grep -v ' 0 differences found' "$WORK/h5diff.txt" | head -10
        return
    fi
    ia=$("$OLD" ckpt inspect "$a" | grep -Ev '^ *(created|galley_version|train_seconds) ' | sed 1d)
    ib=$("$NEW" ckpt inspect "$b" | grep -Ev '^ *(created|galley_version|train_seconds) ' | sed 1d)
    if [[ $ia == "$ib" ]]; then ok "$what"; else
        bad "$what: ckpt inspect"
        diff <(echo "$ia") <(echo "$ib") | head -10
    fi
}

# same_run WHAT ARGS...: `galley ARGS` in WORK/old and WORK/new (same relative paths, so the same
# resolved recipe); masked console output, exit code, and the newest checkpoint of each.
same_run() {
    local what=$1 d
    shift
    for d in old new; do
        mkdir -p "$WORK/$d"
        local bin=$OLD
        [[ $d == new ]] && bin=$NEW
        (cd "$WORK/$d" && "$bin" "$@" >out.txt 2>&1; echo "exit $?" >>out.txt)
        mask "$WORK/$d/out.txt" >"$WORK/$d/out.masked"
    done
    local rc
    rc=$(tail -n 1 "$WORK/old/out.txt")
    if cmp -s "$WORK/old/out.masked" "$WORK/new/out.masked"; then ok "$what: console ($rc)"; else
        bad "$what: console"
        diff "$WORK/old/out.masked" "$WORK/new/out.masked" | head -20
    fi
    local ca cb
    ca=$(newest "$WORK/old/ck")
    cb=$(newest "$WORK/new/ck")
    [[ -n $ca || -n $cb ]] && same_ckpt "$what: checkpoint" "$ca" "$cb"
    rm -rf "$WORK/old/ck" "$WORK/new/ck" "$WORK/old/runs" "$WORK/new/runs"
}

echo "== 1. check and help output"
for f in "$SRC"/recipes/*.yaml; do
    same_text "check $(basename "$f")" check "$f"
done
same_text "help" help
same_text "help recipe" help recipe
same_text "help data" help data
same_text "data synth --help" data synth --help
same_text "data synth of an unknown kind" data synth nosuchkind x.h5
bads=("$SRC"/tests/recipes/bad/*.yaml)
for f in "${bads[@]:0:12}"; do
    same_text "check of bad/$(basename "$f")" check "$f"
done

echo "== 2. reduced runs"
R=$SRC/recipes
C=(checkpoint.dir=ck train.target.metric=none train.target.above=null train.target.below=null)
same_run "mlp sgd" train "$R/mlp.yaml" train.steps=24 train.eval_every=8 "${C[@]}"
same_run "mlp adamw" train "$R/mlp.yaml" train.steps=12 optimizer.type=adamw optimizer.lr=0.001 \
    optimizer.momentum=null "${C[@]}"
same_run "mlp lamb" train "$R/mlp.yaml" train.steps=12 optimizer.type=lamb optimizer.lr=0.001 \
    optimizer.momentum=null "${C[@]}"
same_run "cosmoflow" train "$R/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=64 \
    data.synthetic.val_size=16 train.batch_size=8 train.steps=12 train.eval_every=6 optimizer.lr=0.02 \
    optimizer.schedule.warmup=0 "${C[@]}"
same_run "resnet18" train "$R/resnet18.yaml" data.synthetic.train_size=64 data.synthetic.val_size=32 \
    train.batch_size=16 train.steps=6 train.eval_every=3 optimizer.schedule.warmup=0 "${C[@]}"
same_run "deepcam-unet" train "$R/deepcam-unet.yaml" data.synthetic.size=32 data.synthetic.train_size=32 \
    data.synthetic.val_size=16 train.batch_size=8 train.steps=6 train.eval_every=3 \
    optimizer.schedule.warmup=0 "${C[@]}"
same_run "unet3d" train "$R/unet3d.yaml" data.synthetic.train_size=4 data.synthetic.val_size=2 \
    train.batch_size=2 train.steps=3 train.eval_every=3 optimizer.schedule.warmup=0 "${C[@]}"
same_run "quickstart" train "$R/quickstart.yaml" train.epochs=3 "${C[@]}"

echo "== 3. HDF5 source, evaluation, resume, a diverging run"
for d in old new; do
    mkdir -p "$WORK/$d"
    bin=$OLD
    [[ $d == new ]] && bin=$NEW
    for k in spirals shapes2d cosmo3d climate2d nbody3d blobs; do
        (cd "$WORK/$d" && "$bin" data synth $k $k.h5 n=24 size=16 classes=4 >/dev/null 2>&1
         "$bin" data synth $k $k-val.h5 n=8 size=16 classes=4 split=val >/dev/null 2>&1)
    done
done
for k in spirals shapes2d cosmo3d climate2d nbody3d blobs; do
    if h5same "$WORK/old/$k.h5" "$WORK/new/$k.h5" && h5same "$WORK/old/$k-val.h5" "$WORK/new/$k-val.h5"; then
        ok "data synth $k"
    else
        bad "data synth $k"
    fi
done
same_run "quickstart on HDF5" train "$R/quickstart.yaml" data.source=hdf5 data.synthetic=null data.train.files=spirals.h5 \
    data.val.files=spirals-val.h5 data.classes=4 "model.layers[6].units=4" train.epochs=2 "${C[@]}"
for d in old new; do
    bin=$OLD
    [[ $d == new ]] && bin=$NEW
    mkdir -p "$WORK/$d/stage"
    (cd "$WORK/$d" && "$bin" data synth cosmo3d c-train.h5 n=16 size=32 seed=7 noise=0 >/dev/null 2>&1
     "$bin" data synth cosmo3d c-val.h5 n=8 size=32 seed=7 noise=0 split=val >/dev/null 2>&1
     "$bin" data synth climate2d pf-train n=16 size=32 seed=7 per_file=true >/dev/null 2>&1
     "$bin" data synth climate2d pf-val n=8 size=32 seed=7 per_file=true split=val >/dev/null 2>&1)
done
pf_same=1
for f in "$WORK"/old/pf-val/*.h5; do
    h5same "$f" "$WORK/new/pf-val/$(basename "$f")" || pf_same=0
done
if [[ $pf_same == 1 ]]; then ok "data synth climate2d per_file"; else bad "data synth climate2d per_file"; fi
same_run "cosmoflow on HDF5 (log1p, cache memory)" train "$R/cosmoflow.yaml" train.batch_size=4 train.steps=8 \
    train.eval_every=4 seed=7 optimizer.schedule.warmup=0 data.source=hdf5 data.synthetic=null \
    "data.train={files: c-train.h5}" "data.val={files: c-val.h5}" data.target=values data.transform=log1p \
    data.loader.cache=memory "${C[@]}"
same_run "deepcam-unet on per-file HDF5 (channels-last, staged, flips)" train "$R/deepcam-unet.yaml" \
    train.batch_size=4 train.steps=8 train.eval_every=4 optimizer.schedule.warmup=0 data.source=hdf5 \
    data.synthetic=null "data.train={files: 'pf-train/*.h5', x: climate/data, y: climate/labels_0}" \
    "data.val={files: 'pf-val/*.h5', x: climate/data, y: climate/labels_0}" data.samples=per_file \
    data.target=mask data.classes=3 data.layout=channels_last data.loader.stage=stage data.augment.flip=true \
    "${C[@]}"
same_run "mlp, 10 of 20 steps" train "$R/mlp.yaml" train.steps=20 train.time_limit=0 "${C[@]}" \
    checkpoint.every_steps=10 checkpoint.keep=5
same_run "mlp diverging (lr 1e6, nonfinite skip)" train "$R/mlp.yaml" train.steps=6 optimizer.lr=1e6 \
    train.nonfinite=skip "${C[@]}"
same_run "mlp diverging (lr 1e6, stop)" train "$R/mlp.yaml" train.steps=6 optimizer.lr=1e6 "${C[@]}"
# resume: 10 steps with a checkpoint, then --resume auto to 20; and eval of the result.
for d in old new; do
    bin=$OLD
    [[ $d == new ]] && bin=$NEW
    rm -rf "$WORK/$d/ckr"
    (cd "$WORK/$d" && "$bin" train "$R/mlp.yaml" train.steps=10 checkpoint.dir=ckr >/dev/null 2>&1)
done
same_run "mlp resumed 10 -> 20" train "$R/mlp.yaml" train.steps=20 checkpoint.dir=ckr --resume auto
same_ckpt "mlp resumed 10 -> 20: checkpoint" "$(newest "$WORK/old/ckr")" "$(newest "$WORK/new/ckr")"
same_run "eval of the resumed checkpoint" eval "$R/mlp.yaml" --checkpoint auto checkpoint.dir=ckr

echo
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
