#!/usr/bin/env bash
# test_sweep_errors.sh: bad sweep files exit 2 with FILE:LINE:COL, the key path and the reason,
# before anything is trained: an unknown recipe key in the space (did-you-mean), a value the
# recipe refuses, an empty range, loguniform with a bound <= 0, a budget key the base recipe
# lacks, an unknown sweep key, an unknown metric, an int range beyond 2^53, a choice too long.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

cd "$GL_TMP"
cp "$GALLEY_SRC/tests/recipes/sweep/base.yaml" .

# bad NAME WANT... : writes NAME.yaml from stdin, expects exit 2 and each WANT in stderr.
bad() {
    local name=$1
    shift
    cat >"$name.yaml"
    run "$GALLEY" sweep "$name.yaml" --dir "d-$name"
    assert_rc 2
    assert_no_crash
    local w
    for w in "$@"; do assert_contains "$ERR" "$w" "$name: stderr"; done
    [[ ! -e d-$name ]] || fail "$name: the sweep directory was made for a bad sweep file"
}

bad unknown_key "unknown_key.yaml:4:3: error: space.optimizer.lrr:" "did you mean 'lr'" <<'EOF2'
base: base.yaml
method: random
space:
  optimizer.lrr: {uniform: [0.1, 0.2]}
trials: 2
metric: loss
EOF2
bad out_of_range "out_of_range.yaml:4:3: error: space.optimizer.momentum:" "out of range" <<'EOF2'
base: base.yaml
method: random
space:
  optimizer.momentum: {uniform: [0.5, 2.5]}
trials: 2
metric: loss
EOF2
bad empty "empty.yaml:4:27: error: space.optimizer.lr.uniform: empty range [0.3, 0.1]" <<'EOF2'
base: base.yaml
method: random
space:
  optimizer.lr: {uniform: [0.3, 0.1]}
trials: 2
metric: loss
EOF2
bad logzero "logzero.yaml:4:30: error: space.optimizer.lr.loguniform: loguniform needs bounds > 0" <<'EOF2'
base: base.yaml
method: random
space:
  optimizer.lr: {loguniform: [0, 0.1]}
trials: 2
metric: loss
EOF2
# An int range beyond 2^53 (its value count overflowed int64_t: grid asked for `points` of "loguniform").
bad int_huge "int_huge.yaml:4:15: error: space.seed.int: int takes integers within +-2^53" <<'EOF2'
base: base.yaml
method: grid
space:
  seed: {int: [-1e300, 1e300]}
metric: loss
EOF2
# A choice longer than the value buffers: it was validated cut to 127 characters and trained cut to 255.
long=$(printf 'n%.0s' {1..250})
bad long_choice "long_choice.yaml:4:19: error: space.name.choice: a choice is at most 200 characters; this one has 250" <<EOF2
base: base.yaml
method: grid
space:
  name: {choice: [$long]}
metric: loss
EOF2
bad nobudget "nobudget.yaml:4:15: error: budget.key: the base recipe" "does not set train.epochs" <<'EOF2'
base: base.yaml
method: asha
trials: 4
budget: {key: train.epochs, min: 1, max: 4}
space:
  optimizer.lr: {loguniform: [0.01, 0.1]}
metric: loss
EOF2
bad typo "typo.yaml:3:1: error: trails: unknown key 'trails'" "did you mean 'trials'" <<'EOF2'
base: base.yaml
method: random
trails: 4
space:
  optimizer.lr: {loguniform: [0.01, 0.1]}
metric: loss
EOF2
bad metric "metric.yaml:6:9: error: metric: unknown metric 'acuracy'" "did you mean 'accuracy'" <<'EOF2'
base: base.yaml
method: grid
space:
  optimizer.lr: {choice: [0.01, 0.1]}
  train.batch_size: {choice: [16, 33]}
metric: acuracy
EOF2
bad grid_range "grid_range.yaml:4:3: error: optimizer.lr: grid needs a finite set" <<'EOF2'
base: base.yaml
method: grid
space:
  optimizer.lr: {uniform: [0.01, 0.1]}
metric: loss
EOF2
info "ok"
