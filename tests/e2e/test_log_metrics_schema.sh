#!/usr/bin/env bash
# test_log_metrics_schema.sh: every line of metrics.jsonl validates against the documented
# schema (docs/metrics-schema.json, checked by the `jsonschema` package) for classification,
# segmentation and regression runs, and the schema is not vacuous: records with a wrong type, a
# missing field or an unknown key are rejected.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
[[ $GALLEY_SANITIZE == 1 ]] && skip "sanitizer build: the records are written under ASan by test_log_rundir; the schema is checked on the release build's"
need_pyenv

schema=$GALLEY_SRC/docs/metrics-schema.json
[[ -r $schema ]] || fail "missing $schema"
none=(train.target.metric=none train.target.above=null train.target.below=null)
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" train.epochs=2 train.eval_every=100 --run-dir "$GL_TMP/class"
assert_rc 3
run "$GALLEY" train "$GALLEY_SRC/recipes/deepcam-unet.yaml" data.synthetic.size=16 data.synthetic.train_size=8 \
    data.synthetic.val_size=4 train.batch_size=4 train.steps=4 train.eval_every=2 log.every=1 "${none[@]}" \
    --run-dir "$GL_TMP/seg"
assert_rc 0
run "$GALLEY" train "$GALLEY_SRC/recipes/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=8 \
    data.synthetic.val_size=4 train.batch_size=4 train.steps=4 train.eval_every=2 log.every=0 "${none[@]}" \
    --run-dir "$GL_TMP/reg"
assert_rc 0
# A step that goes non-finite and is skipped: its loss is null.
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" train.steps=8 log.every=1 optimizer.lr=1000000 \
    train.nonfinite=skip "${none[@]}" --run-dir "$GL_TMP/nan"
assert_rc 0

"$PY" - "$schema" "$GL_TMP" <<'PY'
import copy, json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
seen = {}
for name, metrics in (("class", {"accuracy"}), ("seg", {"accuracy", "mean_iou"}), ("reg", {"mae"}), ("nan", {"accuracy"})):
    lines = open(f"{sys.argv[2]}/{name}/metrics.jsonl").read().splitlines()
    kinds = {}
    for i, line in enumerate(lines, 1):
        r = json.loads(line)
        errs = sorted(v.iter_errors(r), key=str)
        assert not errs, f"{name} line {i}: {errs[0].message}"
        assert set(r["metrics"]) == metrics, (name, i, r["metrics"])
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        seen.setdefault(r["kind"], r)
    print(f"[schema] {name}: {len(lines)} lines valid ({kinds})")
nulls = [json.loads(l)["loss"] for l in open(f"{sys.argv[2]}/nan/metrics.jsonl")]
assert None in nulls, nulls
# Not vacuous.
bad = []
t = copy.deepcopy(seen["train"]); t["step"] = "50"; bad.append(("step as a string", t))
t = copy.deepcopy(seen["train"]); del t["time_breakdown"]; bad.append(("no time_breakdown", t))
t = copy.deepcopy(seen["train"]); t["time_breakdown"]["gpu"] = 1.0; bad.append(("an unknown phase", t))
t = copy.deepcopy(seen["eval"]); t["kind"] = "test"; bad.append(("an unknown kind", t))
t = copy.deepcopy(seen["eval"]); t["metrics"]["accuracy"] = 1.5; bad.append(("accuracy above 1", t))
t = copy.deepcopy(seen["eval"]); t["lr"] = 0.1; bad.append(("lr on an evaluation", t))
for what, rec in bad:
    assert not v.is_valid(rec), f"the schema accepts a record with {what}"
print(f"[schema] {len(bad)} broken records rejected")
PY
info "PASS"
