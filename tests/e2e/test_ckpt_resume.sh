#!/usr/bin/env bash
# test_ckpt_resume.sh: checkpoints and resume.
#   - a run resumed from a middle checkpoint ends bitwise equal to the uninterrupted run (SGD MLP;
#     AdamW CNN with batch norm and dropout), on one process and on 2 ranks;
#   - SIGTERM, SIGUSR1 and SIGINT mid-run: exit 4 with a checkpoint; `--resume auto` then ends
#     bitwise equal to the uninterrupted run; train.time_limit stops the same way;
#   - a stop after a step due for evaluation (the last step, 1 and 2 ranks; an epoch's end; inside
#     an epoch): the resumed run evaluates that step first and says so; its eval records (epochs
#     included) and MLPerf log events are the uninterrupted run's; the checkpoint is written again
#     with the evaluation (also with checkpoint.at_end false); older checkpoints resume as before;
#   - checkpoint.keep prunes; `galley ckpt inspect` lists the layout and verifies checksums;
#   - a truncated or bit-flipped checkpoint is refused naming the damage (the whole-file seal;
#     the tensors' own checksums in a checkpoint from before it), and `--resume auto`
#     falls back to the previous good one and says so; a checkpoint of another model: exit 2;
#   - resuming a run that reached its target trains no further and exits 0.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
need_cmd python3 timeout
need_pyenv  # PY: a Python with h5py

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
CNN=$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml

# bitwise A.h5 B.h5: every tensor of the two checkpoints is bitwise equal.
bitwise() {
    "$PY" - "$1" "$2" <<'EOF' || fail "$2 is not bitwise equal to $1"
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n != "recipe" else None)
assert names
for n in names:
    if a[n][()].tobytes() != b[n][()].tobytes():
        sys.exit(f"{n} differs")
print(f"[test_ckpt_resume] {sys.argv[2]} == {sys.argv[1]} bitwise ({len(names)} tensors)")
EOF
}

# ---- resume from a middle checkpoint -------------------------------------------------------
info "resume from a middle checkpoint: bitwise equal ends (MLP/SGD; CNN/AdamW+BN+dropout; 2 ranks)"
mlp=(train.steps=40 train.target=null log.every=10 train.threads=1 log.files=false checkpoint.keep=10)
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=a checkpoint.every_steps=15
assert_contains "$OUT" "checkpoint: a/quickstart-step00000015.h5"
[[ -f a/quickstart-step00000030.h5 && -f a/quickstart-step00000040.h5 ]] || fail "missing checkpoints in a/: $(ls a)"
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=b --resume a/quickstart-step00000015.h5
assert_contains "$OUT" "resumed from a/quickstart-step00000015.h5 at step 15 (epoch 1)"
bitwise a/quickstart-step00000040.h5 b/quickstart-step00000040.h5

cnn=(log.files=false checkpoint.keep=10)
assert_exit 0 "$GALLEY" train "$CNN" "${cnn[@]}" checkpoint.dir=c checkpoint.every_steps=3
assert_exit 0 "$GALLEY" train "$CNN" "${cnn[@]}" checkpoint.dir=d --resume c/conv_bn_dropout-step00000003.h5
bitwise c/conv_bn_dropout-step00000008.h5 d/conv_bn_dropout-step00000008.h5
if command -v mpirun >/dev/null 2>&1; then
    det=(distributed.deterministic=true distributed.parts=2)
    assert_exit 0 "$GALLEY" train "$CNN" "${cnn[@]}" "${det[@]}" checkpoint.dir=e checkpoint.every_steps=5
    assert_exit 0 mpirun --allow-run-as-root --oversubscribe -np 2 "$GALLEY" train "$CNN" "${cnn[@]}" "${det[@]}" \
        checkpoint.dir=f --resume e/conv_bn_dropout-step00000005.h5
    assert_contains "$OUT" "resumed from e/conv_bn_dropout-step00000005.h5 at step 5"
    bitwise e/conv_bn_dropout-step00000008.h5 f/conv_bn_dropout-step00000008.h5
fi

info "galley eval: a checkpoint's weights give the validation numbers the run printed"
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=ev
want=$(sed -nE 's/^step +40\/40 .*\| val (loss [0-9.]+ +acc [0-9.]+) \|.*/\1/p' <<<"$OUT")
[[ -n $want ]] || fail "no validation line at step 40: $OUT"
assert_exit 0 "$GALLEY" eval "$MLP" "${mlp[@]}" checkpoint.dir=ev --checkpoint auto
assert_contains "$OUT" "evaluation at step 40: val $want"
assert_exit 2 "$GALLEY" eval "$MLP" log.files=false
assert_contains "$ERR" "give the weights to evaluate: --checkpoint"

info "a run that reached its target, resumed: nothing to train, exit 0 (it exited 3, target NOT reached)"
tgt=(train.steps=64 log.files=false checkpoint.dir=tg)
assert_exit 0 "$GALLEY" train "$GALLEY_SRC/recipes/mlp.yaml" "${tgt[@]}"
assert_contains "$OUT" "target reached: validation accuracy >= 0.9 at step 64"
assert_exit 0 "$GALLEY" train "$GALLEY_SRC/recipes/mlp.yaml" "${tgt[@]}" --resume auto
assert_contains "$OUT" "nothing to train: the checkpoint's run reached its target (validation accuracy >= 0.9"
assert_contains "$OUT" "last val: none (no evaluation in this run)"
[[ $OUT != *"NOT reached"* ]] || fail "a reached target reported as not reached: $OUT"
[[ $(ls tg) == "mlp-step00000064.h5" ]] || fail "resuming a finished run wrote checkpoints: $(ls -A tg)"
# A stricter target than the checkpoint's best: training goes on (and here cannot reach it).
assert_exit 3 "$GALLEY" train "$GALLEY_SRC/recipes/mlp.yaml" "${tgt[@]}" train.steps=70 \
    'train.target={metric: accuracy, above: 1.01}' --resume auto
assert_contains "$OUT" "target NOT reached: validation accuracy >= 1.01"

# ---- inspect and keep ----------------------------------------------------------------------
info "ckpt inspect lists the layout; checkpoint.keep prunes"
assert_exit 0 "$GALLEY" ckpt inspect c/conv_bn_dropout-step00000006.h5 --recipe
for want in "format           galley-checkpoint" "format_version   1" "step             6" "optimizer        adamw" \
    "params/conv_0/weight" "[4, 3, 3, 3]" "state/batch_norm_1/running" "optim/m/dense_5/weight" \
    "optim/v/dense_5/bias" "0 damaged" "recipe:" "name: \"conv_bn_dropout\""; do
    assert_contains "$OUT" "$want" "ckpt inspect output"
done
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=k checkpoint.every_steps=5 checkpoint.keep=2
[[ $(ls k) == "quickstart-step00000035.h5"$'\n'"quickstart-step00000040.h5" ]] || fail "keep=2 left: $(ls -A k)"
# A fresh, shorter run of the same name there: keep counts its own checkpoints; the longer run's
# are kept (pruning by step alone deleted each new checkpoint as it was written), and it is warned.
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=k checkpoint.every_steps=5 checkpoint.keep=2 \
    train.steps=15
want="quickstart-step00000010.h5 quickstart-step00000015.h5 quickstart-step00000035.h5 quickstart-step00000040.h5"
left=$(cd k && echo *)
[[ $left == "$want" ]] || fail "a shorter run in k left: $left"
assert_contains "$ERR" "holds checkpoints of 'quickstart' up to step 40, later than this run's" "later checkpoints"
[[ $(grep -c "later than this run's" <<<"$ERR") == 1 ]] || fail "the warning is said more than once: $ERR"
assert_not_contains "$OUT" "nan MiB" "checkpoint line"

# ---- signals and the time limit --------------------------------------------------------------
# A run long enough to be interrupted (about 2 s on one core), and its uninterrupted result.
# Validation every 1000 steps, not every epoch: it was a third of the run's time. Under ASan
# (about 2x slower at -O2) 6000 steps, 4 s.
steps=15000
[[ $GALLEY_SANITIZE == 1 ]] && steps=6000
long=("train.steps=$steps" train.target=null log.every=1000 train.eval_every=1000 train.threads=1 log.files=false
    data.synthetic.train_size=2048 checkpoint.keep=10)
last=$(printf 'quickstart-step%08d.h5' "$steps")
assert_exit 0 "$GALLEY" train "$MLP" "${long[@]}" checkpoint.dir=full
ref=full/$last
[[ -f $ref ]] || fail "no final checkpoint: $(ls full)"

# stop_with SIG DIR: start the long run, send SIG after 0.7 s, expect exit 4 and a checkpoint, then
# `--resume auto` to the end: bitwise equal to the uninterrupted run.
stop_with() {
    local sig=$1 dir=$2 pid rc=0
    "$GALLEY" train "$MLP" "${long[@]}" checkpoint.dir="$dir" >"$dir.out" 2>"$dir.err" </dev/null &
    pid=$!
    sleep 0.7
    kill "-$sig" "$pid"
    wait "$pid" || rc=$?
    [[ $rc == 4 ]] || { cat "$dir.out" "$dir.err" >&2; fail "SIG$sig: exit $rc, expected 4"; }
    grep -q "stopped by SIG$sig at step" "$dir.out" || fail "SIG$sig: no 'stopped by' line"
    grep -q "^checkpoint: $dir/quickstart-step" "$dir.out" || fail "SIG$sig: no checkpoint line"
    assert_exit 0 "$GALLEY" train "$MLP" "${long[@]}" checkpoint.dir="$dir" --resume auto
    assert_contains "$OUT" "resumed from $dir/quickstart-step"
    bitwise "$ref" "$dir/$last"
}
info "SIGTERM, SIGUSR1, SIGINT: exit 4 with a checkpoint; --resume auto ends bitwise equal"
stop_with TERM sterm
stop_with USR1 susr1
stop_with INT sint

info "checkpoint.every_minutes writes checkpoints by the clock"
assert_exit 0 "$GALLEY" train "$MLP" "${long[@]}" checkpoint.dir=bytime checkpoint.every_minutes=0.005 checkpoint.at_end=false
n=$(grep -c "^checkpoint: bytime/quickstart-step" <<<"$OUT" || true)
[[ $n -ge 2 ]] || fail "every_minutes=0.005 (0.3 s) over a 2 s run wrote $n checkpoints"

info "train.time_limit stops with a checkpoint and exit 4"
assert_exit 4 "$GALLEY" train "$MLP" "${long[@]}" train.steps=3000000 train.time_limit=1.5 checkpoint.dir=tl
assert_contains "$OUT" "stopped by train.time_limit at step"
ls tl/quickstart-step*.h5 >/dev/null 2>&1 || fail "time limit: no checkpoint written"

# ---- an evaluation the stop left out ---------------------------------------------------------
# A checkpoint is written before its step's evaluation, and a stop after a step due for one skips
# it: the resumed run evaluates that step first (a sweep's trial stopped at its last step kept the
# evaluation before it as its result). train.time_limit below any step's cost stops at step 1.
info "a stop before a due evaluation: the resumed run evaluates that step first, as the whole run did"
# val_at FILE STEP: the eval record of STEP in metrics.jsonl FILE (epoch, loss and metrics).
val_at() { grep "^{\"kind\":\"eval\",\"step\":$2," "$1" | sed -E 's/.*"epoch":([0-9]+),.*("loss":[^}]*\}).*/epoch \1 \2/'; }
ev=(train.steps=40 train.eval_every=10 train.target=null log.every=10 train.threads=1 checkpoint.keep=10)
assert_exit 0 "$GALLEY" train "$MLP" "${ev[@]}" checkpoint.dir=ew checkpoint.every_steps=20 --run-dir ew-run
[[ $(grep -c '"kind":"eval"' ew-run/metrics.jsonl) == 4 ]] || fail "the whole run: not 4 evaluations"
assert_exit 0 "$GALLEY" train "$MLP" "${ev[@]}" checkpoint.dir=er --resume ew/quickstart-step00000020.h5 --run-dir er-run
assert_contains "$OUT" "evaluating step 20 first: the run that wrote the checkpoint stopped before its evaluation"
for k in 20 30 40; do
    [[ -n $(val_at er-run/metrics.jsonl $k) && $(val_at er-run/metrics.jsonl $k) == "$(val_at ew-run/metrics.jsonl $k)" ]] ||
        fail "step $k: the resumed run's evaluation '$(val_at er-run/metrics.jsonl $k)' is not the whole run's '$(val_at ew-run/metrics.jsonl $k)'"
done
bitwise ew/quickstart-step00000040.h5 er/quickstart-step00000040.h5
# A checkpoint from before the attribute 'evaluated' (unsealed, the attribute deleted): resumed as
# those were, without the evaluation; the attribute unreadable: refused as corrupt.
mkdir -p eo
tail -c +513 ew/quickstart-step00000020.h5 >eo/old.h5
cp eo/old.h5 eo/bad.h5
"$PY" - eo/old.h5 eo/bad.h5 <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    assert f.attrs["evaluated"] == 0
    del f.attrs["evaluated"]
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["evaluated"] = "yes"
EOF
assert_exit 0 "$GALLEY" train "$MLP" "${ev[@]}" checkpoint.dir=eo --resume eo/old.h5 --run-dir eo-run
assert_not_contains "$OUT" "evaluating step"
[[ -z $(val_at eo-run/metrics.jsonl 20) ]] || fail "a checkpoint without 'evaluated' was evaluated on resume"
bitwise ew/quickstart-step00000040.h5 eo/quickstart-step00000040.h5
assert_exit 1 "$GALLEY" train "$MLP" "${ev[@]}" checkpoint.dir=eb --resume eo/bad.h5
assert_contains "$ERR" "eo/bad.h5: the attribute 'evaluated' is unreadable: corrupt"
# The last step: stopped after it, the run had no final evaluation, and its resume trained nothing.
one=(train.steps=1 train.eval_every=1 train.target=null train.threads=1)
assert_exit 0 "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir=l1 --run-dir l1-whole
launchers=("")
command -v mpirun >/dev/null 2>&1 && launchers+=("mpirun --allow-run-as-root --oversubscribe -np 2")
for launch in "${launchers[@]}"; do
    dir=l-${launch:+mpi}
    # shellcheck disable=SC2086  # the launcher's words
    assert_exit 4 $launch "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir="$dir" train.time_limit=0.001 --run-dir "$dir-a"
    assert_contains "$OUT" "stopped by train.time_limit at step 1"
    [[ -z $(val_at "$dir-a/metrics.jsonl" 1) ]] || fail "$dir: the stopped run evaluated step 1"
    # shellcheck disable=SC2086
    assert_exit 0 $launch "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir="$dir" --resume auto --run-dir "$dir-b"
    assert_contains "$OUT" "evaluating step 1 first"
    assert_not_contains "$OUT" "nothing to train"
    [[ -n $(val_at "$dir-b/metrics.jsonl" 1) && $(val_at "$dir-b/metrics.jsonl" 1) == "$(val_at l1-whole/metrics.jsonl 1)" ]] ||
        fail "$dir: step 1 evaluated on resume as '$(val_at "$dir-b/metrics.jsonl" 1)', the whole run's '$(val_at l1-whole/metrics.jsonl 1)'"
    # The checkpoint, written again with its evaluation: a second resume has nothing to do.
    assert_exit 0 "$GALLEY" ckpt inspect "$dir/quickstart-step00000001.h5"
    assert_contains "$OUT" "evaluated        1"
    # shellcheck disable=SC2086
    assert_exit 0 $launch "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir="$dir" --resume auto --run-dir "$dir-c"
    assert_contains "$OUT" "nothing to train: the checkpoint is at step 1"
    assert_not_contains "$OUT" "evaluating step"
done
# checkpoint.at_end: false: the checkpoint is still written again with its evaluation (no new file).
assert_exit 4 "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir=lf checkpoint.at_end=false train.time_limit=0.001
assert_exit 0 "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir=lf checkpoint.at_end=false --resume auto
assert_contains "$OUT" "evaluating step 1 first"
assert_exit 0 "$GALLEY" train "$MLP" "${one[@]}" checkpoint.dir=lf checkpoint.at_end=false --resume auto
assert_not_contains "$OUT" "evaluating step"
[[ $(ls lf) == "quickstart-step00000001.h5" ]] || fail "at_end false: $(ls lf)"
# At an epoch's end (evaluations by epoch), and inside an epoch (every step): the eval records,
# with their epochs, and the MLPerf log's events are the uninterrupted run's.
mlkeys() { grep -oE '"key": "[a-z_]+"|"epoch_num": [0-9]+' "$1" | paste -sd' '; }
for size in 32 64; do
    ep=("data.synthetic.train_size=$size" data.synthetic.val_size=64 train.epochs=2 train.target=null train.threads=1)
    [[ $size == 64 ]] && ep+=(train.eval_every=1)
    assert_exit 0 "$GALLEY" train "$MLP" "${ep[@]}" checkpoint.dir=e$size-w --run-dir e$size-w log.mlperf=e$size-w.log
    assert_exit 4 "$GALLEY" train "$MLP" "${ep[@]}" checkpoint.dir=e$size-s --run-dir e$size-a log.mlperf=e$size-s.log \
        train.time_limit=0.001
    assert_exit 0 "$GALLEY" train "$MLP" "${ep[@]}" checkpoint.dir=e$size-s --run-dir e$size-b log.mlperf=e$size-s.log \
        --resume auto
    assert_contains "$OUT" "evaluating step 1 first"
    assert_contains "$OUT" "done: $((size / 16)) steps, 2 epochs"
    for k in $(seq $((size / 16))); do
        got=$(val_at "e$size-b/metrics.jsonl" "$k") want=$(val_at "e$size-w/metrics.jsonl" "$k")
        [[ -n $got && $got == "$want" ]] || fail "train_size $size, step $k: resumed '$got', whole '$want'"
    done
    [[ $(mlkeys e$size-s.log) == "$(mlkeys e$size-w.log)" ]] ||
        fail "train_size $size: the resumed MLPerf log's events differ:"$'\n'"$(mlkeys e$size-s.log)"$'\n'"$(mlkeys e$size-w.log)"
done

# ---- damaged checkpoints ---------------------------------------------------------------------
info "truncated and bit-flipped checkpoints are refused; --resume auto falls back"
cp -r a dmg
truncate -s 40000 dmg/quickstart-step00000040.h5
assert_exit 2 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=dmg --resume dmg/quickstart-step00000040.h5
assert_contains "$ERR" "dmg/quickstart-step00000040.h5 is damaged: it has 40000 bytes, its seal says"
# The seal (the file's first 512 bytes) checks every byte before HDF5 reads any: one flipped
# bit anywhere is found, and the file is not parsed.
cp a/quickstart-step00000015.h5 flip.h5
"$PY" - flip.h5 <<'EOF'
import sys
with open(sys.argv[1], "r+b") as g:
    g.seek(5000)
    b = g.read(1)
    g.seek(5000)
    g.write(bytes([b[0] ^ 0x10]))
EOF
assert_exit 1 "$GALLEY" ckpt inspect flip.h5
assert_contains "$ERR" "flip.h5 is damaged: its bytes fail the file's checksum"
assert_exit 2 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=flipped --resume flip.h5
assert_contains "$ERR" "flip.h5 is damaged: its bytes fail the file's checksum"
head -c 512 flip.h5 | grep -aq "galley checkpoint seal 1" || fail "no seal in the first 512 bytes"
# Damage to the seal's own neighbourhood: a file cut inside the seal, an HDF5 signature gone.
head -c 300 a/quickstart-step00000015.h5 >cut.h5
assert_exit 1 "$GALLEY" ckpt inspect cut.h5
assert_contains "$ERR" "cut.h5 is damaged: it ends inside its seal (truncated)"
cp a/quickstart-step00000015.h5 nosig.h5
printf 'XXXXXXXX' | dd of=nosig.h5 bs=1 seek=512 conv=notrunc status=none
assert_exit 1 "$GALLEY" ckpt inspect nosig.h5
assert_contains "$ERR" "nosig.h5 is damaged: its HDF5 signature after the seal is gone"
# A checkpoint from before the seal (the HDF5 image alone) is still read, its tensors checked by
# their own checksums: flip one bit inside a tensor's data (found with h5py), so that only the
# tensor's checksum can tell.
tail -c +513 dmg/quickstart-step00000030.h5 >dmg/unsealed.h5
mv dmg/unsealed.h5 dmg/quickstart-step00000030.h5
assert_exit 0 "$GALLEY" ckpt inspect dmg/quickstart-step00000030.h5
assert_contains "$OUT" "0 damaged"
"$PY" - dmg/quickstart-step00000030.h5 <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["params/dense_2/weight"].id.get_offset()
with open(sys.argv[1], "r+b") as g:
    g.seek(off + 100)
    b = g.read(1)
    g.seek(off + 100)
    g.write(bytes([b[0] ^ 0x04]))
EOF
assert_exit 1 "$GALLEY" ckpt inspect dmg/quickstart-step00000030.h5
assert_contains "$OUT" "params/dense_2/weight"
assert_contains "$OUT" "CHECKSUM MISMATCH"
assert_contains "$ERR" "1 tensors are damaged"
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" train.steps=45 checkpoint.dir=dmg --resume auto
assert_contains "$OUT" "--resume auto: skipping dmg/quickstart-step00000040.h5"
assert_contains "$OUT" "--resume auto: skipping dmg/quickstart-step00000030.h5"
assert_contains "$OUT" "fails its checksum"
assert_contains "$OUT" "resumed from dmg/quickstart-step00000015.h5 at step 15"
assert_exit 0 "$GALLEY" train "$MLP" "${mlp[@]}" checkpoint.dir=empty --resume auto
assert_contains "$OUT" "--resume auto: no checkpoint in empty/, starting from scratch"

info "a checkpoint of another model, or another optimizer, is refused with exit 2"
assert_exit 2 "$GALLEY" train "$MLP" "${mlp[@]}" model.layers[0].units=64 checkpoint.dir=x --resume a/quickstart-step00000040.h5
assert_contains "$ERR" "has shape [128, 2], but this recipe's model has [64, 2]"
assert_exit 2 "$GALLEY" train "$MLP" "${mlp[@]}" optimizer.type=adamw optimizer.momentum=null optimizer.nesterov=null \
    checkpoint.dir=x --resume a/quickstart-step00000040.h5
assert_contains "$ERR" "holds sgd optimizer state, but the recipe's optimizer.type is adamw"
assert_exit 2 "$GALLEY" train "$MLP" "${mlp[@]}" --resume no/such.h5
assert_contains "$ERR" "cannot open no/such.h5"

info "ok"
