#!/usr/bin/env bash
# test_log_tensorboard.sh: the event files galley writes natively are read back by TensorBoard's
# own code (the `tensorboard` package from PyPI): its EventAccumulator gives back every scalar
# that metrics.jsonl logged (same steps, same values, same times), and the resolved recipe as a
# text summary that the text plugin renders as a code block; the data provider behind
# `tensorboard --logdir runs/` finds the run under runs/<name>/<timestamp> and its curves.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
[[ $GALLEY_SANITIZE == 1 ]] && skip "sanitizer build: the writer runs under ASan in test_log_rundir and unit/test_log_tfevents; TensorBoard reads the release build's files"
need_pyenv

cd "$GL_TMP"
# Classification (quickstart, 3 epochs) and regression (cosmoflow, tiny: mae, a warmup LR).
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" train.epochs=3 train.target.above=1.5 log.dir=runs
assert_rc 3
assert_no_crash
run "$GALLEY" train "$GALLEY_SRC/recipes/cosmoflow.yaml" data.synthetic.size=32 data.synthetic.train_size=16 \
    data.synthetic.val_size=8 train.batch_size=4 train.steps=8 train.eval_every=4 log.every=2 \
    train.target.metric=none train.target.above=null train.target.below=null log.dir=runs
assert_rc 0
assert_no_crash

"$PY" - runs <<'PY'
import glob, json, math, os, sys, warnings
warnings.filterwarnings("ignore")
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
from tensorboard.plugins.text import text_plugin
from tensorboard.util import tensor_util

root = sys.argv[1]
runs = sorted(glob.glob(os.path.join(root, "*", "*")))
assert len(runs) == 2, runs

def close(a, b, rel=2e-6):
    return abs(a - b) <= rel * max(1.0, abs(b))

for d in runs:
    records = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # What metrics.jsonl says, as (tag, step) -> (value, wall_time).
    want = {}
    for r in records:
        pre = "train" if r["kind"] == "train" else "val"
        vals = {f"{pre}/loss": r["loss"]}
        vals.update({f"{pre}/{k}": v for k, v in r["metrics"].items()})
        if r["kind"] == "train":
            vals["train/lr"] = r["lr"]
            vals["throughput/samples_per_s"] = r["samples_per_s"]
            vals.update({f"time/{k}": v for k, v in r["time_breakdown"].items()})
        for tag, v in vals.items():
            want[(tag, r["step"])] = (v, r["wall_time"])
    want_tags = {t for t, _ in want}
    assert tags == want_tags, (d, sorted(tags ^ want_tags))
    n = 0
    for tag in sorted(tags):
        got = {e.step: e for e in acc.Scalars(tag)}
        steps = sorted(s for t, s in want if t == tag)
        assert sorted(got) == steps, (tag, sorted(got)[:5], steps[:5])
        for s in steps:
            v, wall = want[(tag, s)]
            e = got[s]
            tol = 6e-5 if tag.startswith("time/") else 2e-6  # the breakdown is logged to 0.1 ms
            assert close(e.value, v, tol) or (tag.startswith("time/") and abs(e.value - v) < 1e-4), (tag, s, e.value, v)
            assert abs(e.wall_time - wall) < 2e-3, (tag, s, e.wall_time, wall)
            n += 1
    # The recipe, as the text plugin shows it.
    assert acc.SummaryMetadata("recipe").plugin_data.plugin_name == "text"
    arr = tensor_util.make_ndarray(acc.Tensors("recipe")[0].tensor_proto)
    text = arr.item().decode()
    saved = "".join(l for l in open(os.path.join(d, "recipe.yaml")) if not l.startswith("# "))
    assert "".join(l[4:] + "\n" for l in text.splitlines()) == saved, "the recipe text differs from recipe.yaml"
    html = text_plugin.text_array_to_html(arr, True)
    assert html.startswith("<pre><code>") and "optimizer:" in html, html[:200]
    print(f"[tensorboard] {d}: {len(tags)} scalar tags, {n} values equal to metrics.jsonl; recipe text renders "
          f"as a code block ({len(saved.splitlines())} lines)")

# The data provider behind `tensorboard --logdir runs/`.
mux = pem.EventMultiplexer()
mux.AddRunsFromDirectory(root)
mux.Reload()
prov = data_provider.MultiplexerDataProvider(mux, root)
ctx = context.RequestContext()
listed = prov.list_scalars(ctx, experiment_id="", plugin_name="scalars")
assert sorted(listed) == sorted(os.path.relpath(d, root) for d in runs), sorted(listed)
series = prov.read_scalars(ctx, experiment_id="", plugin_name="scalars", downsample=100000)
for run, tags in series.items():
    assert len(tags["train/loss"]) >= 4 and len(tags["val/loss"]) >= 2, run
assert "train/mae" in series[[r for r in series if r.startswith("cosmoflow")][0]]
assert "val/accuracy" in series[[r for r in series if r.startswith("quickstart")][0]]
texts = prov.list_tensors(ctx, experiment_id="", plugin_name="text")
assert all("recipe" in t for t in texts.values()) and len(texts) == 2, texts
print(f"[tensorboard] --logdir {root}: runs {sorted(series)} with their curves and recipe text")
PY
info "PASS"
