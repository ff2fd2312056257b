#!/usr/bin/env bash
# test_log_rundir.sh: the run directory. By default runs/<name>/<YYYYmmdd-HHMMSS>/ under the working
# directory (log.dir moves it, --run-dir names it, log.files=false writes none), holding the
# resolved recipe (which trains again to the same hash), metrics.jsonl, a TensorBoard event file,
# console.log and summary.json. Runs started in the same second get their own directories; a
# --run-dir that already holds a run is refused (exit 2), one that cannot be made fails (exit 1).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd python3

recipe=$GALLEY_SRC/recipes/quickstart.yaml
short=(train.epochs=1 train.target.metric=none train.target.above=null)
cd "$GL_TMP"

# ---- 1. the default location -------------------------------------------------------------------
run "$GALLEY" train "$recipe" "${short[@]}"
assert_rc 0
assert_no_crash
mapfile -t dirs < <(find runs -mindepth 2 -maxdepth 2 -type d | sort)
[[ ${#dirs[@]} -eq 1 ]] || fail "expected one run directory under runs/, found: ${dirs[*]:-none}"
d=${dirs[0]}
[[ $d =~ ^runs/quickstart/[0-9]{8}-[0-9]{6}$ ]] || fail "run directory '$d' is not runs/quickstart/YYYYmmdd-HHMMSS"
assert_contains "$OUT" "run directory: $d" "banner"
for f in recipe.yaml metrics.jsonl console.log summary.json; do
    [[ -s $d/$f ]] || fail "$d/$f is missing or empty"
done
mapfile -t events < <(find "$d" -name 'events.out.tfevents.*')
[[ ${#events[@]} -eq 1 && -s ${events[0]} ]] || fail "expected one TensorBoard event file in $d"
size=$(du -sk "$d" | cut -f1)
info "default: $d ($(find "$d" -type f -printf '%f '), ${size} KiB)"

# summary.json: finished, with the banner's facts and the end's numbers.
python3 - "$d/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "finished" and s["exit_code"] == 0, s
for k, v in {"name": "quickstart", "device": "cpu", "ranks": 1, "precision": "fp32", "global_batch": 32,
             "local_batch": 32, "parameters": 25477, "train_samples": 8192, "val_samples": 2048, "steps": 256,
             "epochs": 1, "peak_device_memory_mib": None}.items():
    assert s[k] == v, (k, s[k], v)
assert s["peak_host_memory_mib"] > 1 and s["samples_per_s"] > 0 and s["wall_s"] > 0
assert 0 < s["last"]["accuracy"] <= 1 and s["best"]["loss"] == s["last"]["loss"]
PY

# The resolved recipe trains again, to the same recipe hash.
hash=$(sed -nE "s/^galley: training 'quickstart' \(recipe .*, hash ([0-9a-f]{16})\)$/\1/p" <<<"$OUT")
[[ -n $hash ]] || fail "no hash in the banner"
run "$GALLEY" check "$d/recipe.yaml"
assert_rc 0
run "$GALLEY" train "$d/recipe.yaml" --run-dir "$GL_TMP/again"
assert_rc 0
assert_contains "$OUT" "hash $hash)" "banner of a run of the saved recipe.yaml"
info "recipe.yaml trains again with the same hash $hash"

# ---- 2. two runs in the same second; log.dir; log.files=false ----------------------------------
"$GALLEY" train "$recipe" "${short[@]}" log.dir=elsewhere >/dev/null &
p1=$!
"$GALLEY" train "$recipe" "${short[@]}" log.dir=elsewhere >/dev/null &
p2=$!
wait $p1 || fail "first parallel run failed"
wait $p2 || fail "second parallel run failed"
n=$(find elsewhere/quickstart -name metrics.jsonl | wc -l)
[[ $n -eq 2 ]] || fail "two runs at once: expected 2 run directories under elsewhere/quickstart, found $n"
run "$GALLEY" train "$recipe" "${short[@]}" log.files=false
assert_rc 0
[[ $(find runs -name metrics.jsonl | wc -l) -eq 1 ]] || fail "log.files=false wrote a run directory"
info "parallel runs get their own directories; log.dir moves them; log.files=false writes none"

# ---- 3. --run-dir -------------------------------------------------------------------------------
run "$GALLEY" train --run-dir "$GL_TMP/given/deep" "$recipe" "${short[@]}" log.files=false
assert_rc 0
[[ -s $GL_TMP/given/deep/metrics.jsonl ]] || fail "--run-dir (before RECIPE, with log.files=false) wrote no metrics"
run "$GALLEY" train "$recipe" "${short[@]}" --run-dir="$GL_TMP/given/deep"
assert_rc 2
assert_contains "$ERR" "already holds a run" "stderr of a reused --run-dir"
run "$GALLEY" train "$recipe" "${short[@]}" --run-dir /dev/null/run
assert_rc 1
assert_contains "$ERR" "cannot create /dev/null" "stderr of an impossible --run-dir"
run "$GALLEY" train "$recipe" --run-dir
assert_rc 2
assert_contains "$ERR" "--run-dir needs a directory" "stderr of --run-dir without a value"
# A recipe error writes nothing.
run "$GALLEY" train "$recipe" optimizer.lr=-1 --run-dir "$GL_TMP/never"
assert_rc 2
[[ ! -e $GL_TMP/never ]] || fail "a recipe error made the run directory"
info "--run-dir: made with parents, refused when taken (2), impossible (1); recipe errors write nothing"
info "PASS"
