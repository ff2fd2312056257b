#!/usr/bin/env bash
# data.loader.cache from the command line: training from HDF5 with cache none, memory and auto
# (the default) writes the same losses bit for bit to metrics.jsonl (every step, 3 epochs, with
# validation), and the start banner says what each split does: auto caches a small split (and its
# size), does not when data.loader.cache_share is too small (and why), none never caches.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
run "$GALLEY" data synth shapes2d train.h5 n=300 size=8 channels=1 seed=3
assert_rc 0
run "$GALLEY" data synth shapes2d val.h5 n=70 size=8 channels=1 seed=3 split=val
assert_rc 0
cat >small.yaml <<'YAML'
name: small
seed: 4
data:
  source: hdf5
  train: {files: train.h5}
  val: {files: val.h5}
  target: class
  classes: 3
  augment: {flip: true}
model:
  layers:
    - {type: flatten}
    - {type: dense, units: 16}
    - {type: relu}
    - {type: dense, units: 3}
train: {epochs: 3, batch_size: 16, loss: softmax_cross_entropy, target: {metric: none}}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
YAML

# losses DIR: kind, step, epoch, loss and metrics of every record, as written
losses() { sed -E 's/"time":[^,]*,"wall_time":[^,]*,//; s/,"(lr|seconds)".*//' "$1/metrics.jsonl"; }

# train WHAT ARGS...: a run into the run directory WHAT; its banner in OUT
train() {
    local what=$1
    shift
    run "$GALLEY" train small.yaml log.every=1 data.loader.threads=3 --run-dir "$what" "$@"
    assert_rc 0
    assert_no_crash
}

train auto
assert_contains "$OUT" "data cache (data.loader.cache: auto, a split within 25% of" "auto's banner"
assert_contains "$OUT" "training split cached in memory (76.8 KiB); validation split cached in memory (18.1 KiB)" \
    "auto's banner"
train memory data.loader.cache=memory
assert_contains "$OUT" "data cache (data.loader.cache: memory): training split cached in memory" "memory's banner"
train none data.loader.cache=none
assert_contains "$OUT" "data cache (data.loader.cache: none): off; both splits are read from the files every epoch" \
    "none's banner"
assert_not_contains "$OUT" "cached in memory" "none's banner"
# shares of this machine's memory (MemTotal, as galley reads it) allowing 4 KiB and 40 KiB a split
mem=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
share() { awk -v b="$1" -v m="$mem" 'BEGIN { printf "%.6g", b / m }'; }
train tiny data.loader.cache_share="$(share 4096)"
assert_contains "$OUT" "training split (76.8 KiB) not cached: over the 4.0 KiB a split may take, so read from the files" \
    "the banner with a small share"
assert_contains "$OUT" "validation split (18.1 KiB) not cached" "the banner with a small share"

n=$(losses auto | grep -c '"loss"')
[[ $n -ge 60 ]] || fail "expected a record per step and evaluation, got $n"
for c in memory none tiny; do
    diff -u <(losses auto) <(losses "$c") >/dev/null || {
        diff -u <(losses auto) <(losses "$c") | head -20 >&2
        fail "cache $c: losses differ from auto's"
    }
done
info "auto, memory, none and a share too small: the same $n loss records bit for bit"

# a split larger than the share: auto keeps the other one cached
train half data.loader.cache_share="$(share 40960)"
if [[ $OUT != *"training split (76.8 KiB) not cached"*"validation split cached in memory (18.1 KiB)"* ]]; then
    show_run
    fail "with a share between the splits' sizes, expected only the validation split cached"
fi
info "banner: $(grep -m1 'data cache' <<<"$OUT" | sed 's/^ *//')"
