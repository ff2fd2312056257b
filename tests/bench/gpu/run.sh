#!/usr/bin/env bash
# tests/bench/gpu/run.sh: galley's GPU training throughput against PyTorch, same recipes, one GPU.
#
#   bash tests/bench/gpu/run.sh [RESULTS_MD]     (default tests/bench/gpu/results.md)
#
# Run by tests/gpu/run.sh on a lent GPU machine (no network: nothing is installed), or by hand.
# Without a GPU it prints "no GPU: skipped" and exits 0 at once. Whole run: about BENCH_BUDGET
# seconds (default 240), never more than BENCH_SECONDS when that is set (the caller's time left).
#
# Models: the SC22 3D U-Net (recipes/unet3d.yaml, 64^3 crops, batch 64), ResNet-18 (CIFAR
# form, recipes/resnet18.yaml, 32x32, batch 128) and the NERSC tutorial's weather ViT
# (recipes/vit.yaml, 20x360x720, 4,050 tokens, batch 16; PyTorch through SDPA). Columns, each its own process:
#   galley PREC        `galley train RECIPE train.device=cuda train.precision=PREC ...` on the
#                      recipe's synthetic data (its host data pipeline, the gather and upload of
#                      every batch, is timed); PREC is BENCH_GALLEY_PRECISION, default bf16 (what
#                      `auto` picks on compute capability 8.0+: 16-bit operands and fp32
#                      accumulation in dense and conv layers, activations stored in fp32).
#   torch fp32 eager   tests/bench/gpu/torch_gpu_bench.py --mode fp32: strict fp32 (TF32 off), the
#                      like-for-like column;
#   torch AMP eager    --mode amp: autocast bf16, channels-last;
#   torch compiled     --mode compile: torch.compile with AMP bf16, first in mode reduce-overhead
#                      (Inductor and CUDA graphs: compiles in well under a minute), then, if time
#                      is left, max-autotune (also autotunes its GEMM/conv kernels: minutes for
#                      ResNet-18, which a 4-minute budget rarely has); the faster one is shown.
# PyTorch's inputs are one random batch already on the GPU; its optimizer is the fused one.
# The twins have the recipes' layers (the script fails loudly, exit 1, if a parameter count
# differs from what `galley check` reports). Throughput excludes warm-up in both: galley's is
# taken from its per-step progress lines (log.every=1) after its first 3 steps, its "done:"
# line (all steps) is shown beside it; a galley run that outlives its time box is killed and
# measured from the steps it printed.
# Memory: every process's peak GPU memory by nvidia-smi (memory.used sampled every 0.25 s,
# less the idle value before it started), plus torch.cuda.max_memory_allocated and galley's
# own report when it gives one. TFLOP/s = samples/s x 3 x forward FLOPs per sample (convs and
# dense, counted from the layer shapes), against the H200's dense bf16 peak (989 TFLOP/s, SXM)
# and, for torch fp32 and galley in fp32 or tf32, its fp32 non-tensor peak (67 TFLOP/s) or its
# dense TF32 peak (494 TFLOP/s); galley in bf16 or fp16 against the bf16 peak (fp16's is the same).
#
# Time: each run gets a time box, a share of the time left in proportion to its weight
# (galley 3, torch eager 2 each, first compile 5, later compiles 4 and only with 40 s or more);
# the eager runs (galley's included) share what is left less BENCH_COMPILE_SHARE percent of the
# budget, which the compiled runs keep; what a run leaves unused goes to the later ones.
# The U-Net's batch falls back to 16 (for every column) when galley runs out of GPU memory at 64.
#
# Environment:
#   GALLEY              galley binary (default build/galley, else build-gpu/galley)
#   BENCH_PYTHON        a python3 with a CUDA PyTorch (default: the first that works of
#                       tests/bench/.venv/bin/python, python3, /usr/bin/python3)
#   BENCH_BUDGET        seconds for the whole benchmark (default 240)
#   BENCH_SECONDS       a hard limit on that (tests/gpu/run.sh sets it to its time left)
#   BENCH_MODELS        default "unet3d resnet18 vit"
#   BENCH_UNET_BATCH    default 64;   BENCH_RESNET_BATCH  default 128;   BENCH_VIT_BATCH  default 16
#   BENCH_UNET_FALLBACK the U-Net's batch when galley runs out of GPU memory (default 16)
#   BENCH_COMPILE_MODES torch.compile modes to try, in order (default "reduce-overhead
#                       max-autotune"): the first for every model, the others as time allows;
#                       set and empty: no compiled runs
#   BENCH_COMPILE_SHARE percent of the budget the eager runs leave to the compiled ones (default 40)
#   BENCH_GALLEY_PRECISION  galley's train.precision: fp32, tf32, bf16 (default: the product's
#                       default on an H200) or fp16; always passed on galley's command line
#   BENCH_PEAK_BF16, BENCH_PEAK_TF32, BENCH_PEAK_FP32   TFLOP/s peaks (default 989, 494 and 67:
#                       an H200 SXM; bf16 and tf32 dense tensor-core, fp32 non-tensor)
#   BENCH_DEVICE        cuda (default); cpu runs both frameworks on the CPU: only to try this
#                       script's plumbing without a GPU (with a stand-in nvidia-smi on PATH);
#                       galley then runs train.precision=fp32 (the CPU trains in fp32 only)
# Output: the tables on stdout and in RESULTS_MD; when RESULTS_MD is given, every run's log too,
# in a folder beside it (OUT/gpu-bench.md -> OUT/gpu-bench-logs/).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
RESULTS=${1:-$HERE/results.md}
say() { printf '== [%3d s] %s\n' "$((SECONDS - T0))" "$*"; }
T0=$SECONDS

# --- a GPU, or nothing to do -------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "tests/bench/gpu/run.sh: no GPU: skipped"
    exit 0
fi

BUDGET=${BENCH_BUDGET:-240}
if [[ -n ${BENCH_SECONDS:-} ]] && ((BENCH_SECONDS < BUDGET)); then BUDGET=$BENCH_SECONDS; fi
DEADLINE=$((BUDGET - 10)) # the last run ends by then (seconds after the start): the table takes a few
MODELS=${BENCH_MODELS:-"unet3d resnet18 vit"}
COMPILE_MODES=${BENCH_COMPILE_MODES-"reduce-overhead max-autotune"} # set and empty: no compiled runs
COMPILE_SHARE=${BENCH_COMPILE_SHARE:-40} # percent of the budget kept for the compiled runs
GPU_ID=${CUDA_VISIBLE_DEVICES:-0}
GPU_ID=${GPU_ID%%,*}
DEVICE=${BENCH_DEVICE:-cuda}
GPREC=${BENCH_GALLEY_PRECISION:-bf16} # galley's train.precision
case $GPREC in
    fp32 | tf32 | bf16 | fp16) ;;
    *)
        echo "run.sh: BENCH_GALLEY_PRECISION=$GPREC: not one of fp32, tf32, bf16, fp16" >&2
        exit 2
        ;;
esac
if [[ $DEVICE == cpu && $GPREC != fp32 ]]; then
    echo "run.sh: BENCH_DEVICE=cpu: galley runs train.precision=fp32, not $GPREC (the CPU trains in fp32 only)"
    GPREC=fp32
fi
WARMUP=3 # galley steps left out of its steady-state rate (the same count as torch's eager warm-up)
WORK=$(mktemp -d /tmp/galley-gpu-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs" "$WORK/cwd" "$(dirname "$RESULTS")" || exit 1
RUNS=$WORK/runs.tsv # model kind batch rc wall_s smi_peak_mib box_s log note
: >"$RUNS"
declare -A BATCH PARAMS MFLOPS NOTE
BATCH[unet3d]=${BENCH_UNET_BATCH:-64}
BATCH[resnet18]=${BENCH_RESNET_BATCH:-128}
BATCH[vit]=${BENCH_VIT_BATCH:-16}

recipe_of() { echo "$ROOT/recipes/$1.yaml"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }

GPU_DESC=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i "$GPU_ID" 2>/dev/null | head -1)
say "GPU $GPU_ID: $GPU_DESC; budget $BUDGET s"

# --- galley --------------------------------------------------------------------------------------
GALLEY_OK=0
GALLEY_WHY=""
if [[ -z ${GALLEY:-} ]]; then
    for g in "$ROOT/build/galley" "$ROOT/build-gpu/galley"; do
        if [[ -x $g ]] && grep -q '^cuda=1$' "$(dirname "$g")/galley-build-info.txt" 2>/dev/null; then
            GALLEY=$g
            break
        fi
    done
    GALLEY=${GALLEY:-$ROOT/build/galley}
fi
if [[ ! -x $GALLEY ]]; then
    GALLEY_WHY="no galley binary at $GALLEY"
elif [[ $DEVICE == cuda ]] && grep -q '^cuda=0$' "$(dirname "$GALLEY")/galley-build-info.txt" 2>/dev/null; then
    GALLEY_WHY="$GALLEY was built without CUDA"
else
    GALLEY_OK=1
fi
GALLEY_VERSION=$([[ -x $GALLEY ]] && "$GALLEY" --version 2>/dev/null | head -1)
say "galley: ${GALLEY_VERSION:-none} ($GALLEY)${GALLEY_WHY:+: $GALLEY_WHY}; it runs train.precision=$GPREC"

# Parameter count and forward MFLOPs per sample, as `galley check` prints them in its summary
# ("#   total: 116977029 parameters (446.2 MiB), 2.718e+04 MFLOPs forward per sample, ...").
for m in $MODELS; do
    line=$([[ -x $GALLEY ]] && "$GALLEY" check "$(recipe_of "$m")" train.batch_size="${BATCH[$m]}" 2>&1 | grep -E 'total: [0-9]+ parameters')
    PARAMS[$m]=$(sed -nE 's/.*total: ([0-9]+) parameters.*/\1/p' <<<"$line")
    MFLOPS[$m]=$(sed -nE 's/.* ([0-9.e+]+) MFLOPs forward per sample.*/\1/p' <<<"$line")
    say "$m: galley check: ${PARAMS[$m]:-?} parameters, ${MFLOPS[$m]:-?} MFLOPs forward per sample"
done

# --- PyTorch -------------------------------------------------------------------------------------
TORCH_PY=""
for py in "${BENCH_PYTHON:-}" "$ROOT/tests/bench/.venv/bin/python" python3 /usr/bin/python3; do
    if [[ -z $py ]] || ! command -v "$py" >/dev/null 2>&1; then continue; fi
    if timeout 60 "$py" -W ignore -c 'import sys, torch
sys.exit(0 if sys.argv[1] == "cpu" or torch.cuda.is_available() else 1)' "$DEVICE" >/dev/null 2>&1; then
        TORCH_PY=$py
        break
    fi
done
TORCH_VERSION=$([[ -n $TORCH_PY ]] && "$TORCH_PY" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null)
say "PyTorch: ${TORCH_VERSION:-not available (no python3 whose torch sees a GPU)}${TORCH_PY:+ ($TORCH_PY)}"

# --- one measured run ----------------------------------------------------------------------------
smi_used() { # MiB of GPU memory in use, one line
    local v
    v=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$GPU_ID" 2>/dev/null | head -1)
    echo "${v//[!0-9]/}"
}

# measure BOX LOG CMD...: CMD (from a scratch directory) killed after BOX seconds, output to LOG.
# Sets RC, WALL and PEAK (MiB of GPU memory above the idle value before it started).
measure() {
    local box=$1 log=$2
    shift 2
    local base t0 sampler
    base=$(smi_used)
    (while :; do
        smi_used
        sleep 0.25
    done) >"$WORK/smi" 2>/dev/null &
    sampler=$!
    t0=$SECONDS
    # (the braces take bash's own "Killed" notice when the box ends a run)
    { (cd "$WORK/cwd" && exec timeout -s KILL "$box" "$@") >"$log" 2>&1; } 2>/dev/null
    RC=$?
    WALL=$((SECONDS - t0))
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    PEAK=$(awk -v b="${base:-0}" '$1 != "" && $1 + 0 > m { m = $1 + 0 } END { if (m == "") print "n/a"; else print m - b }' "$WORK/smi")
}

record() { # MODEL KIND BATCH BOX LOG NOTE
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$RC" "$WALL" "$PEAK" "$4" "$5" "$6" >>"$RUNS"
}

run_galley() { # MODEL BOX
    local m=$1 box=$2 b=${BATCH[$1]}
    local log="$WORK/logs/$m-galley-$GPREC-b$b.log"
    # Steps to fill about 40 % of the box at a guessed 20 TFLOP/s (the rest is start-up: data
    # generation, CUDA and cuDNN set-up); a wrong guess only makes the timed part shorter, or
    # longer and then killed at the box, when the printed steps still give the rate.
    local steps
    steps=$(awk -v f="${MFLOPS[$m]:-1000}" -v b="$b" -v t="$((box * 2 / 5))" -v w="$WARMUP" \
        'BEGIN { sps = 20e12 / (3 * f * 1e6); n = int(t * sps / b); if (n < 5) n = 5; if (n > 3000) n = 3000; print w + n }')
    local train_size=$b
    [[ $m == resnet18 ]] && train_size=$((8 * b)) # cheap 32x32 images: several batches an epoch
    say "$m galley $GPREC, batch $b, $steps steps (box $box s)"
    # The ViT measures cuDNN's fused attention against galley's kernels at its first pass and
    # keeps the faster (GALLEY_ATTENTION_KERNEL=measure; the default is galley's kernels).
    local attn=galley
    [[ $m == vit ]] && attn=measure
    GALLEY_ATTENTION_KERNEL=$attn measure "$box" "$log" "$GALLEY" train "$(recipe_of "$m")" train.device="$DEVICE" train.precision="$GPREC" train.steps="$steps" \
        train.batch_size="$b" data.synthetic.train_size="$train_size" data.synthetic.val_size=1 \
        train.eval_every=1000000000 'train.target={metric: none}' log.files=false log.every=1 \
        checkpoint.at_end=false
    local note=""
    ((RC == 137)) && note="killed at its $box s box: rate from the steps it printed"
    record "$m" galley "$b" "$box" "$log" "$note"
    grep -E '^(done:|galley: .*(error|fail)|.*error:)' "$log" | tail -3 | sed 's/^/     /'
    # Attention (measure): both paths' times at each geometry's first pass and the choice, or why
    # cuDNN declined.
    grep -E '^galley: (attention (forward|backward)|cuDNN fused attention)' "$log" | sed 's/^/     /'
    ((RC == 137)) && echo "     killed at its $box s box (the rate comes from the steps it printed)"
    # Out of GPU memory at the U-Net's batch 64: every column of that model at 16 instead.
    local fb=${BENCH_UNET_FALLBACK:-16}
    if [[ $m == unet3d ]] && ((RC != 0 && RC != 3 && RC != 137 && b > fb)) &&
        grep -qiE 'out of memory|cudaErrorMemoryAllocation|ALLOC_FAILED' "$log"; then
        NOTE[$m]="galley ran out of GPU memory at batch $b: every column at batch $fb"
        BATCH[$m]=$fb
        return 1
    fi
    return 0
}

run_torch() { # MODEL MODE BOX [COMPILE_MODE]
    local m=$1 mode=$2 box=$3 cm=${4:-} b=${BATCH[$1]}
    local log="$WORK/logs/$m-torch-$mode${cm:+-$cm}-b$b.log" secs
    # timed seconds to aim for: the rest of the box is start-up and warm-up (compile)
    if [[ $mode == compile ]]; then secs=$((box / 6)); else secs=$((box * 2 / 5)); fi
    ((secs > 20)) && secs=20
    ((secs < 2)) && secs=2
    say "$m torch $mode${cm:+ ($cm)}, batch $b (box $box s)"
    measure "$((box + 5))" "$log" "$TORCH_PY" -W ignore "$HERE/torch_gpu_bench.py" "$m" --mode "$mode" \
        --device "$DEVICE" --batch "$b" ${cm:+--compile-mode "$cm"} --seconds "$secs" --budget "$box" \
        ${PARAMS[$m]:+--expect-params "${PARAMS[$m]}"}
    record "$m" "$mode" "$b" "$box" "$log" "${cm:+mode $cm}"
    grep -E '^torch_gpu_bench.py' "$log" | tail -1 | sed 's/^/     /'
    ((RC == 137)) && echo "     did not finish in its $box s box"
    if ((RC == 3)); then
        echo "run.sh: $m: PARAMETER COUNT MISMATCH between galley and the PyTorch twin:" >&2
        grep -E 'MISMATCH' "$log" | tail -1 >&2
        MISMATCH=1
    fi
    return "$RC"
}

# --- the runs, in order; each box is a weighted share of the time left --------------------------
# The first compile mode of each model comes after every eager run, the others (extra tries
# that only run when time is left) at the very end.
QM=() QK=() QW=()
queue() { QM+=("$1") QK+=("$2") QW+=("$3"); }
for m in $MODELS; do
    [[ $GALLEY_OK == 1 ]] && queue "$m" galley 3
    if [[ -n $TORCH_PY ]]; then
        queue "$m" fp32 2
        queue "$m" amp 2
    fi
done
if [[ -n $TORCH_PY ]]; then
    w=5
    for cm in $COMPILE_MODES; do
        for m in $MODELS; do queue "$m" "compile:$cm" "$w"; done
        w=4
    done
fi
MISMATCH=0
declare -A SKIP_TORCH
first_compile=compile:${COMPILE_MODES%% *}
for ((i = 0; i < ${#QM[@]}; i++)); do
    m=${QM[i]} k=${QK[i]}
    [[ $k != galley && -n ${SKIP_TORCH[$m]:-} ]] && continue
    # An eager run's box is its share of the time left less what the compiled runs keep; a
    # compiled run's, its share of all the time left. (On 2026-12-04 every box came from one
    # pool, so with 240 s torch's eager runs got under 12 s and were skipped, and no compiled
    # run finished in its 30 s either.)
    wsum=0 l=$(left)
    for ((j = i; j < ${#QM[@]}; j++)); do
        [[ $k == compile:* || ${QK[j]} != compile:* ]] && wsum=$((wsum + QW[j]))
    done
    if [[ $k != compile:* && -n $TORCH_PY && -n $COMPILE_MODES ]]; then l=$((l - BUDGET * COMPILE_SHARE / 100)); fi
    box=$((l * QW[i] / wsum))
    min=12
    [[ $k == compile:* && $k != "$first_compile" ]] && min=40 # an extra try: only with time for it
    if ((box < min)); then
        RC=-1 WALL=0 PEAK=n/a
        note="skipped: $l s left"
        [[ $k == compile:* ]] && note+="; mode ${k#compile:}"
        record "$m" "${k%%:*}" "${BATCH[$m]}" "$box" "" "$note"
        say "$m ${k/#galley/galley $GPREC} skipped: $l s left"
        continue
    fi
    case $k in
        galley)
            if ! run_galley "$m" "$box"; then
                say "${NOTE[$m]}"
                QM=("${QM[@]:0:i+1}" "$m" "${QM[@]:i+1}") QK=("${QK[@]:0:i+1}" galley "${QK[@]:i+1}")
                QW=("${QW[@]:0:i+1}" 3 "${QW[@]:i+1}")
            fi
            ;;
        fp32 | amp) run_torch "$m" "$k" "$box" ;;
        compile:*) run_torch "$m" compile "$box" "${k#compile:}" ;;
    esac
    (($? == 3)) && [[ $k != galley ]] && SKIP_TORCH[$m]=1
done
say "runs done"

# --- the tables ----------------------------------------------------------------------------------
PY=""
for py in "$TORCH_PY" python3 /usr/bin/python3; do
    [[ -n $py ]] && command -v "$py" >/dev/null 2>&1 && PY=$py && break
done
if [[ -z $PY ]]; then
    echo "run.sh: no python3 to write the tables; the runs:" >&2
    cat "$RUNS"
    exit 1
fi
NOTES=$(for m in $MODELS; do [[ -n ${NOTE[$m]:-} ]] && printf '%s: %s\n' "$m" "${NOTE[$m]}"; done)
FACTS=$(for m in $MODELS; do printf '%s %s %s\n' "$m" "${PARAMS[$m]:-0}" "${MFLOPS[$m]:-0}"; done)
export RUNS RESULTS MODELS GPU_DESC GALLEY_VERSION GALLEY_WHY TORCH_VERSION TORCH_PY NOTES FACTS WARMUP BUDGET GPREC DEVICE
export PEAK_BF16=${BENCH_PEAK_BF16:-989} PEAK_TF32=${BENCH_PEAK_TF32:-494} PEAK_FP32=${BENCH_PEAK_FP32:-67} RUN_S=$((SECONDS - T0))
RUN_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export RUN_DATE
"$PY" -W ignore - <<'EOF'
import json, os, re

E = os.environ
models = E["MODELS"].split()
peak16, peak32, peaktf = float(E["PEAK_BF16"]), float(E["PEAK_FP32"]), float(E["PEAK_TF32"])
gprec = E["GPREC"]
gname = f"galley {gprec}"
# galley's TFLOP/s share besides the bf16 one every column has: its own precision's peak
gpeak = {"fp32": ("fp32", peak32), "tf32": ("tf32", peaktf)}.get(gprec)
warm = int(E["WARMUP"])
facts = {}
for line in E["FACTS"].splitlines():
    m, p, f = line.split()
    facts[m] = (int(p), float(f) * 1e6)
order = []
for line in open(E["RUNS"]):
    f = line.rstrip("\n").split("\t")
    r = dict(zip(("model", "kind", "batch", "rc", "wall", "smi", "box", "log", "note"), f))
    r["rc"] = int(r["rc"])
    m = re.search(r"mode (\S+)", r["note"])
    r["cmode"] = m.group(1) if m else ""
    order.append(r)


def text(path):
    try:
        return open(path, errors="replace").read() if path else ""
    except OSError:
        return ""


def parse_galley(r):
    t = text(r["log"])
    rates = [(int(s), float(v)) for s, v in
             re.findall(r"^step\s+(\d+)/\d+ .*\| ([0-9.]+) samples/s \| ETA", t, re.M)]
    b = int(r["batch"])
    steady = [v for s, v in rates if s > warm and v > 0]
    if steady:  # each printed rate is one step's: samples over the sum of the step times
        r["sps"] = len(steady) * b / sum(b / v for v in steady)
        r["steps"] = len(steady)
    d = re.search(r"^done: (\d+) steps.*training ([0-9.]+) samples/s \| peak memory: host ([0-9.]+) MiB, device (.*)$", t, re.M)
    if d:
        r["done_sps"] = float(d.group(2))
        dm = re.match(r"([0-9.]+) MiB", d.group(4))
        r["own_mem"] = float(dm.group(1)) if dm else None
    # What galley said about its own path: input copies (staged, pinned?), CUDA graphs, notes
    # (a refused pin, a convolution without a 16-bit algorithm), for the notes below.
    r["said"] = [l.strip() for l in t.splitlines()
                 if re.match(r"^\s*(input: |CUDA graphs: |galley: note: )", l) or "runs in fp32" in l][:6]
    dw = re.search(r"^\s+data wait\s+[0-9.]+ s\s+([0-9.]+) %", t, re.M)
    if dw:
        r["data_pct"] = float(dw.group(1))
    p = re.search(r"\| (\d+) parameters,", t)
    if p:
        r["params"] = int(p.group(1))
    dev = re.search(r"^\s+device (.+?), \d+ ranks?,", t, re.M)
    r["device"] = dev.group(1) if dev else "?"
    pr = re.search(r"^\s+device .+?, \d+ ranks?, \d+ threads?, (\w+) \|", t, re.M)
    r["precision"] = pr.group(1) if pr else "?"
    if "sps" not in r:
        errs = [l for l in t.splitlines() if re.search(r"error|fail|CUDA", l, re.I)]
        if r["rc"] == 137:
            r["error"] = f"killed at its {r['box']} s box before a step after the first {warm} was timed"
        else:
            r["error"] = (errs[-1] if errs else (t.strip().splitlines() or ["no output"])[-1])[:160]


def parse_torch(r):
    t = text(r["log"])
    js = [l for l in t.splitlines() if l.startswith("{")]
    if js:
        try:
            j = json.loads(js[-1])
            r.update({"sps": j.get("samples_per_s"), "alloc": j.get("max_alloc_mib"), "steps": j.get("steps"),
                      "warmup_s": j.get("warmup_s"), "params": j.get("params"), "error": j.get("error"),
                      "tflops_flops": j.get("fwd_flops_per_sample")})
            if r["error"]:
                r["sps"] = None
        except ValueError:
            pass
    cg = re.search(r"skipping cudagraphs due to ([^\n]{0,100})", t)
    if cg:  # compiled without CUDA graphs after all: say why
        r["note"] = (r["note"] + "; " if r["note"] else "") + "CUDA graphs skipped: " + cg.group(1)
    if not r.get("sps") and not r.get("error"):
        if r["rc"] == 137:
            r["error"] = f"did not finish in its {r['box']} s box"
        else:
            tail = [l for l in t.strip().splitlines() if l.strip()]
            r["error"] = (tail[-1] if tail else "no output")[:160]


for r in order:
    if r["rc"] == -1:
        pass  # skipped: the note says so
    elif r["kind"] == "galley":
        parse_galley(r)
    else:
        parse_torch(r)

# One run per (model, column): a rerun at the fallback batch replaces the first; of several
# compile modes the fastest counts; a skipped run never replaces one that ran.
runs = {}
for r in order:
    key = (r["model"], r["kind"])
    old = runs.get(key)
    if old is None or old["rc"] == -1:
        runs[key] = r
    elif r["rc"] == -1:
        continue
    elif r["kind"] != "compile" or (r.get("sps") or 0) > (old.get("sps") or 0):
        runs[key] = r

KINDS = ("galley", "fp32", "amp", "compile")
NAMES = {"galley": gname, "fp32": "torch fp32 eager", "amp": "torch AMP bf16 eager",
         "compile": "torch compiled AMP bf16"}


def get(m, k):
    return runs.get((m, k))


def why(m, k):
    if k == "galley" and E["GALLEY_WHY"]:
        return "not available"
    if k != "galley" and not E["TORCH_VERSION"]:
        return "not available"
    r = get(m, k)
    if r is None:
        return "not run"
    if r["rc"] == 137:
        return "timed out"
    e = r.get("error") or r.get("note") or "failed"
    if "did not finish" in e:
        return "timed out"
    if "skipped" in e:
        return "skipped"
    if "out of memory" in e.lower():
        return "out of memory"
    return "failed"


def sps(m, k):
    r = get(m, k)
    return r.get("sps") if r else None


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def cell_sps(m, k):
    v = sps(m, k)
    if not v:
        return f"n/a ({why(m, k)})"
    s = fmt(v)
    if k == "galley" and get(m, k).get("done_sps"):
        s += f" (done: {get(m, k)['done_sps']:,.0f})"
    return s


def ratio(m, k, target=None):
    a, b = sps(m, "galley"), sps(m, k)
    if not a or not b:
        return "n/a"
    q = a / b
    return f"{q:.2f}" + ("" if target is None else (" (met)" if q >= target else " (NOT met)"))


def fwd_flops(m):
    for k in KINDS[1:]:
        r = get(m, k)
        if r and r.get("tflops_flops"):
            return r["tflops_flops"]
    return facts.get(m, (0, 0))[1]


def cell_tflops(m, k):
    v = sps(m, k)
    f = fwd_flops(m)
    if not v or not f:
        return "n/a"
    tf = v * 3 * f / 1e12
    s = f"{tf:.1f} ({100 * tf / peak16:.1f}% bf16"
    if k == "fp32":
        s += f", {100 * tf / peak32:.1f}% fp32"
    elif k == "galley" and gpeak:
        s += f", {100 * tf / gpeak[1]:.1f}% {gpeak[0]}"
    return s + ")"


def cell_mem(m, k):
    r = get(m, k)
    if not r or not r.get("sps"):
        return "n/a"
    smi = r["smi"]
    s = f"{float(smi):,.0f}" if smi not in ("", "n/a") else "n/a"
    if k == "galley":
        if r.get("own_mem"):
            s += f" (own report {r['own_mem']:,.0f})"
    elif r.get("alloc") is not None:
        s += f" (allocated {r['alloc']:,.0f})"
    return s


def batch(m):
    bs = sorted({get(m, k)["batch"] for k in KINDS if get(m, k)}, key=int)
    return "/".join(bs) if bs else "?"


cname = NAMES["compile"]
cmodes = {get(m, "compile")["cmode"] for m in models if get(m, "compile") and get(m, "compile").get("sps")}
if cmodes:
    cname += " (" + ", ".join(sorted(cmodes)) + ")"
out = ["# Galley vs PyTorch: GPU training throughput", ""]
out.append(f"Written by `tests/bench/gpu/run.sh` on {E['RUN_DATE']} in {E['RUN_S']} s (budget {E['BUDGET']} s). "
           f"GPU: {E['GPU_DESC']}. galley: {E['GALLEY_VERSION'] or 'none'}"
           f"{' (' + E['GALLEY_WHY'] + ')' if E['GALLEY_WHY'] else ''}. "
           f"PyTorch: {E['TORCH_VERSION'] or 'not available (no python3 whose torch sees a GPU)'}.")
out.append("")
if gprec == "fp32":
    about = ("Galley runs `train.precision=fp32` (exact fp32, no TF32)"
             + (" (BENCH_DEVICE=cpu: the CPU trains in fp32 only)" if E["DEVICE"] == "cpu" else "")
             + ": its column compares like for like with torch fp32 eager (TF32 off); the AMP and "
             "compiled columns run bf16 tensor cores.")
elif gprec == "tf32":
    about = ("Galley runs `train.precision=tf32` (TF32 tensor cores in its dense and conv layers, fp32 "
             "elsewhere): between torch fp32 eager (TF32 off) and the AMP and compiled columns (bf16 "
             "tensor cores).")
else:
    about = (f"Galley runs `train.precision={gprec}` (the default, `auto`, is bf16 on compute capability 8.0+): "
             "mixed precision in its dense and conv layers (16-bit operands, fp32 accumulation"
             + ("; dynamic loss scaling" if gprec == "fp16" else "")
             + "), weights, optimizer and activations kept in fp32, so its memory is not halved. "
             "Its like-for-like columns are torch AMP bf16 eager (autocast, channels-last) and compiled; "
             "torch fp32 eager (TF32 off) is the strict fp32 reference.")
out.append(about + " Galley's time includes its data pipeline (gathering each batch on the host and "
           "uploading it); PyTorch's batch already sits on the GPU.")
out.append("")
out.append("## Throughput (training samples/s, higher is better)")
out.append("")
out.append(f"| model | batch | {gname} | torch fp32 eager | torch AMP bf16 eager | {cname} "
           f"| {gname} / torch fp32 | {gname} / AMP (target >= 1.2) | {gname} / compiled (target >= 1.0) |")
out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    out.append(f"| {m} | {batch(m)} | " + " | ".join(cell_sps(m, k) for k in KINDS)
               + f" | {ratio(m, 'fp32')} | {ratio(m, 'amp', 1.2)} | {ratio(m, 'compile', 1.0)} |")
out.append("")
out.append(f"galley: the rate of the steps after its first {warm} (each step's rate as it printed it); "
           "`done:` is its end-of-run figure over every step. torch: the steps after warm-up "
           "(compilation and CUDA-graph capture included there).")
out.append("")
out.append("## Peak GPU memory (MiB, lower is better)")
out.append("")
out.append("nvidia-smi memory.used, sampled every 0.25 s, less the idle value before the run: the whole "
           "process (CUDA context, cuDNN workspaces, caching allocator). In parentheses: galley's own "
           "report, torch.cuda.max_memory_allocated over the timed steps.")
out.append("")
out.append(f"| model | {gname} | torch fp32 eager | torch AMP bf16 eager | {cname} | {gname} <= AMP and compiled |")
out.append("|---|---:|---:|---:|---:|---|")
for m in models:
    g = get(m, "galley")
    verdict = "n/a"
    try:
        gm = float(g["smi"])
        others = [float(get(m, k)["smi"]) for k in ("amp", "compile") if get(m, k) and get(m, k).get("sps")]
        if others:
            verdict = "yes" if all(gm <= o for o in others) else "NO"
    except (TypeError, ValueError):
        pass
    out.append(f"| {m} | " + " | ".join(cell_mem(m, k) for k in KINDS) + f" | {verdict} |")
out.append("")
out.append("## Achieved TFLOP/s")
out.append("")
out.append(f"samples/s x 3 x forward FLOPs per sample (convolutions and dense layers, from the layer shapes), "
           f"in parentheses as a share of the GPU's dense bf16 peak ({peak16:g} TFLOP/s"
           + (", fp16's is the same" if gprec == "fp16" else "") + ") and, for torch fp32 eager"
           + (" and galley fp32" if gprec == "fp32" else "") + f", of its fp32 non-tensor peak ({peak32:g} TFLOP/s)"
           + (f"; for galley tf32, of its dense TF32 peak ({peaktf:g} TFLOP/s)" if gprec == "tf32" else "") + ".")
out.append("")
out.append(f"| model | GFLOP forward per sample (torch count / galley check) | {gname} | torch fp32 eager "
           f"| torch AMP bf16 eager | {cname} |")
out.append("|---|---:|---:|---:|---:|---:|")
for m in models:
    gf = facts.get(m, (0, 0))[1]
    tf = fwd_flops(m)
    out.append(f"| {m} | {tf / 1e9:.2f} / {gf / 1e9:.2f} | " + " | ".join(cell_tflops(m, k) for k in KINDS) + " |")
out.append("")
out.append("## Notes")
out.append("")
for m in models:
    p_g = facts.get(m, (0, 0))[0]
    p_t = next((get(m, k).get("params") for k in KINDS[1:] if get(m, k) and get(m, k).get("params")), None)
    same = "n/a" if not p_g or not p_t else ("same" if p_g == p_t else "MISMATCH")
    out.append(f"- {m}: parameters galley {p_g or '?'}, torch twin {p_t or '?'} ({same}).")
for line in E["NOTES"].splitlines():
    out.append(f"- {line}")
for m in models:
    tries = [r for r in order if r["model"] == m and r["kind"] == "compile"]
    if len(tries) > 1:
        out.append(f"- {m}: torch.compile " + "; ".join(
            f"{r['cmode']}: " + (f"{fmt(r['sps'])} samples/s (warm-up and compile {r.get('warmup_s')} s)"
                                 if r.get("sps") else r.get("error") or "failed") for r in tries) + ".")
for m in models:
    g = get(m, "galley")
    if g and g.get("data_pct") is not None:
        out.append(f"- {m}: {gname} spent {g['data_pct']:.1f}% of its training time waiting for data.")
    for line in (g or {}).get("said", []):
        out.append(f"- {m}: {gname} said: `{line}`")
out.append("")
out.append("## Every run")
out.append("")
out.append("| model | run | batch | exit | wall s | box s | timed steps | warm-up s | samples/s | note |")
out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in order:
    v = r.get("sps")
    note = "; ".join(x for x in (r.get("note"), r.get("error")) if x)
    if r["kind"] == "galley" and r.get("precision", "?") not in ("?", gprec):
        note = f"its banner says precision {r['precision']}, not {gprec}" + (f"; {note}" if note else "")
    if r["kind"] == "galley" and not r.get("device", "?").startswith(("cuda", "?")):
        note = f"device {r['device']}; " + note
    out.append(f"| {r['model']} | {gname if r['kind'] == 'galley' else r['kind']} | {r['batch']} | {r['rc']} | {r['wall']} | {r['box']} | "
               f"{r.get('steps') or ''} | {r.get('warmup_s') or ''} | {f'{v:.1f}' if v else ''} | {note.replace('|', '/')} |")
text_out = "\n".join(out) + "\n"
open(E["RESULTS"], "w").write(text_out)
print()
print(text_out)
EOF
if [[ -n ${1:-} ]]; then
    mkdir -p "${RESULTS%.md}-logs" && cp "$WORK"/logs/*.log "${RESULTS%.md}-logs/" 2>/dev/null
fi
say "written to $RESULTS"
if ((MISMATCH)); then
    echo "run.sh: FAILED: a PyTorch twin's parameter count differs from galley's (see above)" >&2
    exit 1
fi
exit 0
