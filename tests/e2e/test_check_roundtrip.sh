#!/usr/bin/env bash
# test_check_roundtrip.sh: `galley check` prints a recipe that loads back to the same recipe:
# for every recipes/*.yaml (and a few recipes of our own with awkward values), checking the
# output again prints the same text apart from the first comment line (which names the file).
# Also: anchors, aliases and `<<` merge keys resolve to the merged values; the memory plan lines
# (GPU and CPU) add up.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

# roundtrip RECIPE LABEL: check RECIPE, check the output, compare.
roundtrip() {
    local recipe=$1 label=$2
    local out1=$GL_TMP/$label.out1.yaml out2=$GL_TMP/$label.out2.yaml
    run "$GALLEY" check "$recipe"
    assert_rc 0
    assert_no_crash
    printf '%s\n' "$OUT" >"$out1"
    [[ $(head -n 1 "$out1") == "# galley check: $recipe is valid"* ]] ||
        fail "$label: first line of the check output does not name $recipe: $(head -n 1 "$out1")"
    run "$GALLEY" check "$out1"
    assert_rc 0
    assert_no_crash
    printf '%s\n' "$OUT" >"$out2"
    [[ $(head -n 1 "$out2") == "# galley check: $out1 is valid"* ]] ||
        fail "$label: first line of the second check does not name $out1: $(head -n 1 "$out2")"
    if ! diff <(tail -n +2 "$out1") <(tail -n +2 "$out2") >"$GL_TMP/$label.diff"; then
        cat "$GL_TMP/$label.diff" >&2
        fail "$label: checking the check output gives a different recipe"
    fi
    # The output is more than the first line: a resolved recipe and a model summary.
    grep -q '^model:' "$out1" || fail "$label: no model section in the check output"
    grep -q '^# model summary' "$out1" || fail "$label: no model summary in the check output"
    # The memory plan: a GPU line and a CPU line, each total the sum of its parts (printed
    # rounded: to 0.1 MiB, or 0.01 GiB); a GPU has no im2col space, so its "other" is no larger.
    awk -v label="$label" '
        function mib(v, u) { return u == "GiB" ? v * 1024 : v }
        /^#   on a GPU|^#   on the CPU/ {
            line = $0; sub(/^#   on (a GPU|the CPU) +/, "", line); gsub(/[:,]/, "", line)
            n = split(line, w, " ")
            total = mib(w[1], w[2]); sum = 0; tol = (w[2] == "GiB" ? 6 : 0.06)
            for (i = 3; i <= n; i++) if (w[i] ~ /^[0-9.]+$/ && (w[i + 1] == "MiB" || w[i + 1] == "GiB")) {
                sum += mib(w[i], w[i + 1]); tol += (w[i + 1] == "GiB" ? 6 : 0.06)
                if (w[i - 1] == "other") other[$3] = mib(w[i], w[i + 1])
            }
            if (sum - total > tol || total - sum > tol) { print label ": plan parts sum to " sum " MiB, total " total " MiB: " $0; bad = 1 }
            lines++
        }
        END {
            if (lines != 2) { print label ": " lines + 0 " memory plan lines, want 2"; bad = 1 }
            if (other["a"] > other["the"]) { print label ": the GPU plan has more \"other\" than the CPU one"; bad = 1 }
            exit bad
        }' "$out1" >&2 || fail "$label: memory plan lines wrong (above)"
    info "$label: round trip ok ($(wc -l <"$out1") lines)"
}

# ---- every shipped recipe -----------------------------------------------------------------
shopt -s nullglob
recipes=("$GALLEY_SRC"/recipes/*.yaml)
shopt -u nullglob
[[ ${#recipes[@]} -ge 1 ]] || fail "no recipes in $GALLEY_SRC/recipes"
for r in "${recipes[@]}"; do
    roundtrip "$r" "shipped-$(basename "$r" .yaml)"
done

# vit-tiny's 12 residual adds: on the CPU each is computed as the layer before it stores (model.fuse,
# graph_fuse_adds) and has no buffer of its own; the CUDA backend keeps them (3 MiB each at batch 64).
acts() { grep "^#   on $1" "$GL_TMP/shipped-vit-tiny.out1.yaml" | sed -E 's/.*activations ([0-9.]+) MiB.*/\1/'; }
gpu_acts=$(acts "a GPU") cpu_acts=$(acts "the CPU")
awk -v g="$gpu_acts" -v c="$cpu_acts" 'BEGIN { exit !(g - c > 35.95 && g - c < 36.05) }' ||
    fail "vit-tiny's plan: activations $gpu_acts MiB on a GPU, $cpu_acts on the CPU; want the GPU's 36.0 MiB more"
info "vit-tiny's plan: the CPU's fused residual adds save 36.0 MiB of activations ($cpu_acts against $gpu_acts)"

# ---- awkward values: strings that need quoting, floats that need 17 digits, every layer type
awk1=$GL_TMP/awkward.yaml
cat >"$awk1" <<'EOF'
name: "we\"ird \\ name: yes # no comment \t tab, unicode é ✓"
seed: 9200000000000000000
data:
  synthetic: {kind: blobs, classes: 4, features: 6, train_size: 100, val_size: 10,
              noise: 0.333333333333333314829616256247}
model:
  layers:
    - {type: dense, units: 16, bias: false, init: zeros}
    - {type: leaky_relu, slope: 0.1}
    - {type: dense, units: 16, init: he_uniform, name: h2}
    - {type: gelu, inputs: h2}
    - {type: tanh}
    - {type: sigmoid, name: s-1}
    - {type: dense, units: 4, inputs: [s-1], init: xavier_normal}
train: {epochs: 3, batch_size: 7, threads: 1, target: {metric: loss, below: 1e-7}}
optimizer: {lr: 1.0e-3, momentum: 0.45, nesterov: true, weight_decay: 5e-4}
EOF
roundtrip "$awk1" awkward
out=$(cat "$GL_TMP/awkward.out1.yaml")
assert_contains "$out" 'name: "we\"ird \\ name: yes # no comment ' "awkward check output"
assert_contains "$out" "é ✓\"" "awkward check output"
assert_contains "$out" "seed: 9200000000000000000" "awkward check output"
assert_contains "$out" "  below: 1e-07" "awkward check output"
assert_contains "$out" "  weight_decay: 0.0005" "awkward check output"

# Minimal recipe: everything else from defaults (the default name is the file's base name).
awk2=$GL_TMP/minimal.yaml
printf 'model:\n  layers:\n    - {type: dense, units: 3}\noptimizer: {lr: 0.5}\n' >"$awk2"
roundtrip "$awk2" minimal
assert_contains "$(cat "$GL_TMP/minimal.out1.yaml")" 'name: "minimal"' "minimal check output"

# ---- anchors, aliases and merge keys --------------------------------------------------------
merge=$GL_TMP/merge.yaml
# The anchors sit on layers themselves (a recipe has no free-form key to park them under).
cat >"$merge" <<'EOF'
name: merged
data:
  synthetic: {classes: 4}
model:
  layers:
    - &blk {type: dense, units: 32, init: xavier_normal, bias: false}
    - &act {type: leaky_relu, slope: 0.2}
    - <<: *blk
      units: 24
    - *act
    - <<: [*blk, {name: out, init: zeros}]
      units: 4
train: &tr
  epochs: 2
optimizer: {lr: 0.1}
EOF
run "$GALLEY" check "$merge"
assert_rc 0
assert_no_crash
m=$OUT
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
# expect_layer I KEY=VALUE...: model.layers[I] of the merged recipe has these values.
expect_layer() {
    local i=$1 kv got
    shift
    for kv in "$@"; do
        got=$(yaml_get "$m" "model.layers[$i].${kv%%=*}")
        [[ $got == "${kv#*=}" ]] ||
            fail "merged recipe: model.layers[$i].${kv%%=*} is '$got', expected '${kv#*=}'"
    done
}
expect_layer 0 type=dense name='"dense_0"' units=32 bias=false init=xavier_normal
expect_layer 1 type=leaky_relu slope=0.2
# <<: *blk plus units: 24 -- the block's keys, with units overridden.
expect_layer 2 type=dense name='"dense_2"' units=24 bias=false init=xavier_normal
expect_layer 3 type=leaky_relu name='"leaky_relu_3"' slope=0.2
# An explicit key beats every merged one; among merged mappings the first wins, so name comes
# from the second mapping (*blk has none) but init stays *blk's xavier_normal.
expect_layer 4 type=dense name='"out"' units=4 bias=false init=xavier_normal
[[ $(yaml_get "$m" "model.layers[5].type") == "<absent>" ]] || fail "merged recipe: more than 5 layers"
info "merge keys: <<: *blk with units overridden resolves to the merged values"
roundtrip "$merge" merged
# The resolved output has no anchors, aliases or merge keys left.
assert_not_contains "$(cat "$GL_TMP/merged.out1.yaml")" "<<" "resolved merged recipe"
assert_not_contains "$(cat "$GL_TMP/merged.out1.yaml")" "*blk" "resolved merged recipe"

info "PASS"
