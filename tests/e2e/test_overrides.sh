#!/usr/bin/env bash
# test_overrides.sh: key=value overrides after the recipe change what `galley check` resolves
# (and what `galley train` runs); bad ones exit 2 with "command line:N:" naming the argument.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

# A recipe of our own (no train section, so train.* overrides create keys) with small data.
base=$GL_TMP/base.yaml
cat >"$base" <<'EOF'
name: overrides
data:
  synthetic: {kind: blobs, classes: 3, features: 4, train_size: 256, val_size: 64}
model:
  layers:
    - {type: dense, units: 16}
    - {type: relu}
    - {type: dense, units: 3}
optimizer:
  lr: 0.05
EOF

# yaml_get TEXT PATH: the value at PATH (a.b.c, list items as a.b[2].c) in `galley check`
# output, which is block YAML indented by two, list items as "- key: value". Comments skipped.
yaml_get() {
    printf '%s\n' "$1" | awk -v want="$2" '
        /^[ ]*#/ || /^[ ]*$/ { next }
        {
            match($0, /^ */); ind = RLENGTH; line = substr($0, ind + 1)
            lvl = ind / 2
            if (substr(line, 1, 2) == "- ") {
                idx[lvl]++
                comp[lvl] = "[" (idx[lvl] - 1) "]"
                line = substr(line, 3); lvl++
            }
            k = index(line, ":"); if (!k) next
            comp[lvl] = substr(line, 1, k - 1)
            for (j = lvl + 1; j < 64; j++) { idx[j] = 0; delete comp[j] }
            val = substr(line, k + 1); sub(/^ /, "", val)
            path = ""
            for (j = 0; j <= lvl; j++)
                path = (j == 0) ? comp[j] : (substr(comp[j], 1, 1) == "[" ? path comp[j] : path "." comp[j])
            if (path == want) { print val; found = 1; exit }
        }
        END { if (!found) print "<absent>" }'
}

# check_ok ARGS...: `galley check base ARGS...` must exit 0; sets OUT.
check_ok() {
    run "$GALLEY" check "$base" "$@"
    assert_rc 0
    assert_no_crash
}

# expect_value PATH WANT: after check_ok, PATH resolves to WANT.
expect_value() {
    local got
    got=$(yaml_get "$OUT" "$1")
    if [[ $got != "$2" ]]; then
        show_run
        fail "'$RUN_CMD': $1 is '$got', expected '$2'"
    fi
}

# ---- the baseline -------------------------------------------------------------------------
check_ok
expect_value train.epochs 10
expect_value model.layers[0].units 16
expect_value train.target.metric none
expect_value name '"overrides"'
baseline=$OUT
info "baseline resolves as expected"

# ---- overrides change the resolved recipe --------------------------------------------------
check_ok train.epochs=5
expect_value train.epochs 5
assert_contains "$OUT" "  epochs: 5" "check output with train.epochs=5"
# Only that line changes.
changed=$(diff <(printf '%s\n' "$baseline") <(printf '%s\n' "$OUT") | grep -c '^[<>]' || true)
[[ $changed -eq 2 ]] || fail "train.epochs=5 changed $changed lines of the check output, expected 1 (-/+)"
info "train.epochs=5 -> epochs: 5"

check_ok 'model.layers[0].units=7'
expect_value model.layers[0].units 7
expect_value model.layers[2].units 3
bracket=$OUT
check_ok model.layers.0.units=7
expect_value model.layers[0].units 7
[[ $OUT == "$bracket" ]] || fail "model.layers.0.units=7 and model.layers[0].units=7 resolve differently"
info "model.layers[0].units=7 and model.layers.0.units=7 agree"

# A new key path creates the keys on the way (this recipe has no train section).
check_ok train.target.metric=accuracy train.target.above=0.5
expect_value train.target.metric accuracy
expect_value train.target.above 0.5
expect_value train.epochs 10
info "train.target.metric=accuracy train.target.above=0.5 creates train.target"

# A list value.
check_ok 'model.layers[1].inputs=[dense_0]'
expect_value model.layers[1].inputs '["dense_0"]'
check_ok 'model.layers[1].name=act' 'model.layers[2].inputs=[act]'
expect_value model.layers[1].name '"act"'
expect_value model.layers[2].inputs '["act"]'
info "list values: inputs=[dense_0], inputs=[act]"

# A quoted string stays a string; an unquoted number for a string key is a string too.
check_ok 'name="123"'
expect_value name '"123"'
check_ok 'name=123'
expect_value name '"123"'
info "name=\"123\" -> name: \"123\""

# The last override of a key wins.
check_ok train.epochs=3 train.epochs=4
expect_value train.epochs 4
info "later override wins"

# A whole layer replaced by a mapping.
check_ok 'model.layers[1]={type: leaky_relu, slope: 0.2}'
expect_value model.layers[1].type leaky_relu
expect_value model.layers[1].slope 0.2
expect_value model.layers[1].name '"leaky_relu_1"'
info "model.layers[1]={type: leaky_relu, slope: 0.2} replaces the layer"

# Overrides reach training as well.
run "$GALLEY" train "$base" train.epochs=2 train.batch_size=32
assert_rc 0
assert_no_crash
assert_contains "$OUT" "epoch   2/2" "train output with train.epochs=2"
assert_contains "$OUT" "batch 32" "train output with train.batch_size=32"
epochs=$(printf '%s\n' "$OUT" | grep -cE '^epoch +[0-9]+/2 ' || true)
[[ $epochs -eq 2 ]] || fail "train.epochs=2 ran $epochs epochs"
info "galley train honours train.epochs=2 train.batch_size=32"

# ---- bad overrides: exit 2, "command line:N:" with N the override's position ---------------
# bad_override N NEEDLE ARGS...: `galley check base ARGS...` exits 2, stderr has "command
# line:N:" and NEEDLE, and does not blame the recipe file.
bad_override() {
    local n=$1 needle=$2
    shift 2
    run "$GALLEY" check "$base" "$@"
    assert_rc 2
    assert_no_crash
    assert_contains "$ERR" "command line:$n:" "stderr of '$RUN_CMD'"
    assert_contains "$ERR" "$needle" "stderr of '$RUN_CMD'"
    assert_not_contains "$ERR" "base.yaml:" "stderr of '$RUN_CMD'"
    # Every position it names is in argument n (no other "command line:M:").
    local others
    others=$(printf '%s\n' "$ERR" | grep -oE 'command line:[0-9]+:' | grep -vFx "command line:$n:" || true)
    if [[ -n $others ]]; then
        show_run
        fail "'$RUN_CMD': stderr names other positions than argument $n: ${others//$'\n'/ }"
    fi
    info "bad override #$n ($*): exit 2, command line:$n:"
}
bad_override 1 "command line:1:14: error: train.epochs: expected an integer" train.epochs=abc
bad_override 1 "found the quoted string '5'" 'train.epochs="5"'
bad_override 2 "unknown key 'bogus' in train" train.epochs=2 train.bogus=1
bad_override 2 "did you mean 'epochs'?" seed=1 train.epoch=2
bad_override 3 "index 9 is out of range" seed=1 train.epochs=2 'model.layers[9].units=1'
bad_override 2 "0 is out of range" train.epochs=2 'model.layers[0].units=0'
bad_override 1 "-1 is out of range" optimizer.lr=-1
bad_override 1 "an override is KEY=VALUE" =5
bad_override 2 "cannot read the key path" seed=3 'model.layers[0=3'
bad_override 1 "is a list; index it with a number" model.layers.first.units=3
bad_override 1 "expected one of" optimizer.type=simulated_annealing
bad_override 1 "expected true or false" optimizer.nesterov=maybe
# The same bad override through `galley train`.
run "$GALLEY" train "$base" train.epochs=2 train.batch_size=zero
assert_rc 2
assert_no_crash
assert_contains "$ERR" "command line:2:" "stderr of '$RUN_CMD'"
assert_not_contains "$OUT" "epoch " "stdout of '$RUN_CMD'"
info "galley train with a bad override: exit 2 before training"

# An argument without '=' is no override at all.
run "$GALLEY" check "$base" train.epochs
assert_rc 2
assert_no_crash
assert_contains "$ERR" "train.epochs" "stderr of '$RUN_CMD'"
info "an argument without '=': exit 2"

# ---- checks that each run in a subshell, so that one failing does not hide the others ----
failures=()
soft() {
    local what=$1
    shift
    if ! ("$@"); then failures+=("$what"); fi
}

# A value that is not valid YAML. The parser's own position must be given in the override's
# coordinates (argument 4), not as "command line:2:1" of the value text.
soft "position of a YAML error inside an override's value" \
    bad_override 4 "cannot parse the value" seed=1 seed=2 seed=3 'name=[oops'

# An empty value unsets an optional key (as "key:" does in a file, and as galley check itself
# writes unset keys: "below: null"), so a recipe's target can be switched off from the
# command line: metric none, threshold unset.
with_target=$GL_TMP/with_target.yaml
{ cat "$base"; printf 'train:\n  target: {metric: accuracy, above: 0.9}\n'; } >"$with_target"
target_off() {
    run "$GALLEY" check "$with_target" train.target.metric=none train.target.above=
    assert_rc 0
    assert_no_crash
    expect_value train.target.metric none
    local above
    above=$(yaml_get "$OUT" train.target.above)
    [[ $above == null || $above == "<absent>" ]] || fail "train.target.above is '$above' after train.target.above="
    info "train.target.metric=none train.target.above= switches the target off"
}
soft "switching a target off with train.target.metric=none train.target.above=" target_off

if [[ ${#failures[@]} -gt 0 ]]; then
    fail "$(printf '%s; ' "${failures[@]}")"
fi
info "PASS"
