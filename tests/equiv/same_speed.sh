#!/usr/bin/env bash
# tests/equiv/same_speed.sh OLD_GALLEY NEW_GALLEY [RUNS]: CPU training speed of two binaries,
# side by side, on the benchmark's CNN and MLP models (tests/bench/run.sh's sizes: small_cnn batch
# 64, mlp batch 128, cosmoflow 32^3 batch 8, cnn3d 40^3 batch 8), alternating OLD and NEW RUNS
# times (default 3). Prints each run's "training N samples/s" (the `done:` line: evaluation
# excluded) and the ratio of the medians, NEW / OLD. A refactor should give ~1.00; PyTorch's side
# of tests/bench/run.sh does not change with galley, so this ratio carries over to galley /
# PyTorch. Not a test: timings.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_GALLEY NEW_GALLEY [RUNS]" >&2; exit 2; }
OLD=$(realpath "$1")
NEW=$(realpath "$2")
RUNS=${3:-3}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/galley-speed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

rate() {  # BIN ARGS...: samples/s of one run
    local bin=$1
    shift
    "$bin" train "$@" checkpoint.at_end=false log.files=false train.target.metric=none \
        train.target.above=null train.target.below=null 2>&1 |
        sed -nE 's/.*training ([0-9.]+) samples\/s.*/\1/p'
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

for m in small_cnn mlp cosmoflow cnn3d; do
    case $m in
        small_cnn) args=("$SRC/tests/bench/small_cnn.yaml" data.synthetic.val_size=64 train.steps=40) ;;
        mlp) args=("$SRC/recipes/mlp.yaml" train.steps=150) ;;
        cosmoflow) args=("$SRC/recipes/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=64
                         data.synthetic.val_size=8 train.batch_size=8 train.steps=16 train.eval_every=1000) ;;
        cnn3d) args=("$SRC/tests/bench/cnn3d.yaml" train.steps=24 train.eval_every=1000) ;;
    esac
    o="" n=""
    for ((i = 0; i < RUNS; i++)); do
        o="$o $(rate "$OLD" "${args[@]}")"
        n="$n $(rate "$NEW" "${args[@]}")"
    done
    mo=$(median <<<"$o")
    mn=$(median <<<"$n")
    printf '%-10s old:%s | new:%s | median new/old %.3f\n' "$m" "$o" "$n" "$(awk -v a="$mn" -v b="$mo" 'BEGIN { print a / b }')"
done
