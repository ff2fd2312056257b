#!/usr/bin/env bash
# The CUDA backend trains like the CPU backend: a few steps of recipes that use every layer kind
# run on both devices from the same seed, and every logged training loss agrees within
# 2e-3 relative (fp32: only summation order differs; dropout masks are bitwise the same).
# Staged targets (input_stage.c) give the losses of unstaged ones (distributed.deterministic).
# train.precision (auto picks bf16 or fp16 on a GPU, so the comparison sets fp32): a few steps in
# bf16 and fp16 (and tf32) of a dense, a conv and a transposed-conv recipe train, the loss going
# down; the banner names the precision; fp16 says its loss scale.
# Needs a GPU: skipped (exit 77) where `galley info` lists none.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
[[ $GALLEY_HAVE_CUDA == 1 ]] || skip "built without CUDA"
run "$GALLEY" info
grep -qE '^  GPUs: +[1-9]' <<<"$OUT" || skip "no GPU: $(grep -E '^  GPUs:' <<<"$OUT")"

cd "$GL_TMP"
common=(train.target.metric=none train.target.above=null train.target.below=null log.every=1 log.files=false
    checkpoint.at_end=false train.threads=2)
# recipe | overrides: small sizes; together they use dense, conv (2D, 3D, strided, same), transposed
# conv, pools, batch norm, layer norm, dropout, concat, residual add, upsampling, the losses and the
# transformer layers (patch_embed, pos_embed, attention, token layer_norm and dense, token_pool, unpatch)
cases=(
    "$GALLEY_SRC/recipes/quickstart.yaml|train.steps=6"
    "$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml|train.steps=6"
    "$GALLEY_SRC/recipes/resnet18.yaml|data.synthetic.train_size=32 data.synthetic.val_size=16 train.batch_size=16 train.steps=4 optimizer.schedule.warmup=0 optimizer.lr=0.01"
    "$GALLEY_SRC/recipes/deepcam-unet.yaml|data.synthetic.size=32 data.synthetic.train_size=16 data.synthetic.val_size=8 train.batch_size=8 train.steps=4 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/cosmoflow.yaml|data.synthetic.size=32 data.synthetic.train_size=16 data.synthetic.val_size=8 train.batch_size=8 train.steps=4 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/unet3d.yaml|data.synthetic.train_size=4 data.synthetic.val_size=2 train.batch_size=2 train.steps=3 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/vit-tiny.yaml|data.synthetic.train_size=64 data.synthetic.val_size=16 train.batch_size=16 train.steps=4 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/vit.yaml|data.synthetic.size=64 data.synthetic.train_size=8 data.synthetic.val_size=4 train.batch_size=4 train.steps=4"
)
# resnet18 runs at lr 0.01: at the recipe's 0.1 with batch 16 and no warm-up its loss jumps from
# 1.8 to 10 in three steps, and that chaos made fp32's summation-order differences 5e-3 apart on
# an H200 (2026-12-04).
losses() { grep -E '^step ' <<<"$1" | sed -E 's/.*\)  loss ([0-9.eE+-]+|nan|inf).*/\1/'; }
# Each case runs in a subshell (fail ends it alone), so one failure does not hide the rest: a GPU
# is lent rarely, and every case's verdict is wanted from one run.
failed=()
# GPU_TRAIN_CASES="NAME ...": only the cases of these recipes (a short second call on a lent GPU)
wanted() { [[ -z ${GPU_TRAIN_CASES:-} || " $GPU_TRAIN_CASES " == *" $1 "* ]]; }
same_case() {
    local c=$1
    recipe=${c%%|*}
    name=$(basename "$recipe" .yaml)
    wanted "$name" || return 0
    read -r -a ov <<<"${c#*|}"
    run "$GALLEY" train "$recipe" "${ov[@]}" "${common[@]}" train.device=cpu
    [[ $RC == 0 ]] || { show_run; fail "$name on the CPU: exit $RC"; }
    cpu=$(losses "$OUT")
    run "$GALLEY" train "$recipe" "${ov[@]}" "${common[@]}" train.device=cuda train.precision=fp32
    [[ $RC == 0 ]] || { show_run; fail "$name on the GPU: exit $RC"; }
    grep -q 'device cuda' <<<"$OUT" || { show_run; fail "$name: the banner does not name the cuda device"; }
    gpu=$(losses "$OUT")
    [[ -n $cpu && $(wc -l <<<"$cpu") == $(wc -l <<<"$gpu") ]] || fail "$name: logged steps differ: cpu [$cpu] gpu [$gpu]"
    paste <(echo "$cpu") <(echo "$gpu") | awk -v n="$name" '
        { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1) + 0; if (r > worst) worst = r
          if (r > 2e-3) { printf "%s: step %d: cpu loss %s, gpu loss %s (rel %.2e)\n", n, NR, $1, $2, r; bad = 1 } }
        END { printf "[test_cuda_train] %s: %d steps, worst relative loss difference %.2e\n", n, NR, worst; exit bad }' ||
        fail "$name: CPU and GPU losses differ"
    # train.cuda_graphs (on by default): the recorded and replayed passes give the bits of eager
    # ones, dropout draws (read on the device when replayed) included.
    if [[ $name == quickstart || $name == conv_bn_dropout ]]; then
        grep -qE 'CUDA graphs: [1-9][0-9]* passes replayed' <<<"$OUT" || { show_run; fail "$name: no pass was replayed"; }
        run "$GALLEY" train "$recipe" "${ov[@]}" "${common[@]}" train.device=cuda train.precision=fp32 train.cuda_graphs=false
        [[ $RC == 0 ]] || { show_run; fail "$name on the GPU without CUDA graphs: exit $RC"; }
        [[ $(losses "$OUT") == "$gpu" ]] || fail "$name: losses with CUDA graphs [$gpu] differ from eager ones [$(losses "$OUT")]"
        info "$name: replayed passes give the eager losses bit for bit"
    fi
    # Input staging copies each batch's targets beside the step and the loss reads that copy;
    # distributed.deterministic (one part on one rank: the same arithmetic) stages nothing, so
    # its loss copies the targets itself: the same losses, for masks, fields and class labels.
    if [[ $name == deepcam-unet || $name == cosmoflow || $name == unet3d || $name == resnet18 ]]; then
        run "$GALLEY" train "$recipe" "${ov[@]}" "${common[@]}" train.device=cuda train.precision=fp32 \
            distributed.deterministic=true
        [[ $RC == 0 ]] || { show_run; fail "$name on the GPU, deterministic: exit $RC"; }
        [[ $(losses "$OUT") == "$gpu" ]] ||
            fail "$name: losses with staged targets [$gpu] differ from unstaged ones [$(losses "$OUT")]"
        info "$name: staged and unstaged targets give the same losses"
    fi
}
for c in "${cases[@]}"; do
    (same_case "$c") || failed+=("$(basename "${c%%|*}" .yaml) (fp32 against the CPU)")
done
# ---- reduced precisions: the loss goes down -------------------------------------------------------
# recipe | overrides: dense (quickstart), conv + batch norm (conv_bn_dropout), transposed conv
# (unet3d), attention on tensor cores (vit-tiny: head width 64; vit: 48, 128 tokens, two tiles)
prec_cases=(
    "$GALLEY_SRC/recipes/quickstart.yaml|train.steps=120 log.every=30"
    "$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml|train.steps=12 log.every=3"
    "$GALLEY_SRC/recipes/unet3d.yaml|data.synthetic.train_size=4 data.synthetic.val_size=2 train.batch_size=2 train.steps=8 log.every=2 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/vit-tiny.yaml|data.synthetic.train_size=64 data.synthetic.val_size=16 train.batch_size=16 train.steps=12 log.every=3 optimizer.schedule.warmup=0"
    "$GALLEY_SRC/recipes/vit.yaml|data.synthetic.size=64 data.synthetic.train_size=8 data.synthetic.val_size=4 train.batch_size=4 train.steps=8 log.every=2"
)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ampere=0
[[ -n $cc && $cc -ge 80 ]] && ampere=1
prec_case() {
    local c=$1
    recipe=${c%%|*}
    name=$(basename "$recipe" .yaml)
    wanted "$name" || return 0
    read -r -a ov <<<"${c#*|}"
    precs=(fp16)  # bf16 and tf32 need compute capability 8.0; tf32 on the dense recipe only (time)
    ((ampere)) && precs=(bf16 fp16)
    ((ampere)) && [[ $name == quickstart ]] && precs+=(tf32)
    for p in "${precs[@]}"; do
        run "$GALLEY" train "$recipe" "${common[@]}" "${ov[@]}" train.device=cuda train.precision="$p"
        [[ $RC == 0 ]] || { show_run; fail "$name in $p: exit $RC"; }
        grep -qE "device cuda .*, $p \|" <<<"$OUT" || { show_run; fail "$name: the banner does not say $p"; }
        if [[ $p == fp16 ]]; then
            grep -q 'fp16: dynamic loss scaling, scale 65536' <<<"$OUT" || { show_run; fail "$name: no loss-scale line"; }
        fi
        l=$(losses "$OUT")
        first=$(head -1 <<<"$l") last=$(tail -1 <<<"$l")
        awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && b < a) }' ||
            { show_run; fail "$name in $p: the loss did not go down ($first -> $last)"; }
        info "$name in $p: loss $first -> $last ($(grep -c 'overflowed' <<<"$ERR" || true) fp16 overflow steps skipped)"
    done
}
for c in "${prec_cases[@]}"; do
    (prec_case "$c") || failed+=("$(basename "${c%%|*}" .yaml) (reduced precision)")
done
# auto resolves by compute capability, and says which
run "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${common[@]}" train.steps=2 train.device=cuda
[[ $RC == 0 ]] || { show_run; fail "auto precision: exit $RC"; }
want=fp16
[[ -n $cc && $cc -ge 80 ]] && want=bf16
grep -qE "device cuda .*, $want \|" <<<"$OUT" || { show_run; fail "auto on compute capability $cc: not $want"; }
((${#failed[@]} == 0)) || fail "${#failed[@]} case(s) failed: ${failed[*]}"
info "ok"
