#!/usr/bin/env bash
# tests/bench/run.sh: galley's CPU training throughput against PyTorch, on this machine.
#
# Not a test (CI does not run it): a benchmark run by hand, which takes 10-20 minutes (plus the
# PyTorch install the first time: several GB) and overwrites tests/bench/results.md with its table.
#
# What it does, in one run:
#   1. PyTorch: the current release from PyPI in tests/bench/.venv (made when missing or
#      broken), and Debian's python3-torch (apt-get installed when missing) run with
#      /usr/bin/python3 as a second column.
#   2. This machine's sgemm peak: tests/bench/sgemm_peak.c built against the static OpenMP
#      OpenBLAS galley links, on the OpenBLAS core galley runs (galley picks one itself where
#      OpenBLAS does not know the CPU: src/backend/cpu/cpu_blas_core.c); square 2048..4096
#      sgemm, best of 5, at 1 and at all threads.
#   3. Five models, the same in galley and PyTorch (tests/bench/torch_bench.py): small_cnn
#      (tests/bench/small_cnn.yaml, batch 64), mlp (recipes/mlp.yaml, batch 128), cosmoflow
#      (recipes/cosmoflow.yaml at 32^3, batch 8), cnn3d (tests/bench/cnn3d.yaml: one channel at
#      40^3, three conv blocks, batch 8), vit_tiny (recipes/vit-tiny.yaml, batch 64,
#      AdamW); fp32, SGD momentum 0.9 but for vit_tiny, synthetic in-memory data. Each framework at each of BENCH_THREADS; a framework's best counts.
#   4. All of that twice: with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE as the environment sets
#      them, and with both unset.
#   5. One table per environment setting, printed and written to tests/bench/results.md.
#
# Galley's number is its `done:` line's "training Z samples/s" (evaluation excluded; batch
# gathering, forward, loss, backward and optimizer included); the step count is sized from a
# short calibration run so the timed run lasts about BENCH_SECONDS. PyTorch's number times only
# the training steps after warm-up steps. "% of sgemm peak" is samples/s x 3 x forward FLOPs
# per sample (from `galley check`) over the best all-thread sgemm peak measured here.
#
# Environment:
#   GALLEY          a galley binary to use (default: build one in build-bench/ with CMake)
#   BENCH_SECONDS   timed seconds per run (default 5; cosmoflow runs at least 10 steps)
#   BENCH_THREADS   thread counts to try (default "1 2")
#   BENCH_MODELS    models to run (default "small_cnn mlp cosmoflow cnn3d vit_tiny")
#   BENCH_REPEAT    runs of each (framework, model, threads); the best counts (default 2)
#   BENCH_VENV      the virtual environment for PyPI PyTorch (default tests/bench/.venv)
#   BENCH_NO_INSTALL=1  never install anything; a missing PyTorch leaves its column empty
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV=${BENCH_VENV:-$HERE/.venv}
SECS=${BENCH_SECONDS:-5}
THREADS=${BENCH_THREADS:-"1 2"}
MODELS=${BENCH_MODELS:-"small_cnn mlp cosmoflow cnn3d vit_tiny"}
REPEAT=${BENCH_REPEAT:-2}
NO_INSTALL=${BENCH_NO_INSTALL:-0}
DEB_PY=/usr/bin/python3
OPENBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp
OPENBLAS_INC=/usr/include/x86_64-linux-gnu/openblas-openmp
RESULTS=$HERE/results.md
WORK=$(mktemp -d /tmp/galley-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
RAW=$WORK/raw.tsv # pass framework model threads samples_per_s peak_rss_mib cpu_util steps load1
: >"$RAW"
T_START=$(date +%s)

say() { printf '%s\n' "$*"; }
warn() { printf 'run.sh: %s\n' "$*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# --- 1. PyTorch ------------------------------------------------------------------------------
torch_ok() { # PYTHON: 0 when PYTHON imports torch and runs a small backward on the CPU
    "$1" -W ignore -c 'import torch; x = torch.ones(4, 4, requires_grad=True); (x @ x).sum().backward()' \
        >/dev/null 2>&1
}

install_pypi_torch() {
    say "== installing PyTorch from PyPI into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV" || { warn "python3 -m venv failed"; return 1; }
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    # PyTorch's own CPU-only index, where it can be reached (usually it cannot from here).
    if curl -sf --max-time 10 -o /dev/null https://download.pytorch.org/whl/cpu/torch/ 2>/dev/null; then
        say "   PyTorch's CPU wheel index is reachable: installing the CPU build"
        "${pip[@]}" torch --index-url https://download.pytorch.org/whl/cpu && torch_ok "$VENV/bin/python" && return 0
        warn "the CPU build did not install; trying PyPI"
    fi
    # PyPI's Linux wheel is the CUDA build. Try it without its nvidia-*/triton dependencies
    # first (it runs on the CPU when the CUDA libraries it links resolve, e.g. from a CUDA
    # toolkit of the same major version); otherwise install it whole.
    say "   PyPI: torch --no-deps plus its pure-Python dependencies"
    if ! "${pip[@]}" --no-deps torch ||
        ! "${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec mpmath MarkupSafe setuptools; then
        warn "pip install failed"
        return 1
    fi
    if torch_ok "$VENV/bin/python"; then
        say "   import torch works without the nvidia-* wheels"
        return 0
    fi
    say "   import torch needs the CUDA libraries it links:"
    "$VENV/bin/python" -W ignore -c 'import torch' 2>&1 | tail -1 | sed 's/^/     /'
    say "   installing the full PyPI torch (with its nvidia-* wheels; several GB)"
    "${pip[@]}" torch || { warn "pip install torch failed"; return 1; }
    torch_ok "$VENV/bin/python"
}

PYPI_PY=""
if torch_ok "$VENV/bin/python"; then
    PYPI_PY=$VENV/bin/python
elif [[ $NO_INSTALL != 1 ]]; then
    install_pypi_torch && PYPI_PY=$VENV/bin/python
fi
[[ -n $PYPI_PY ]] || warn "no PyPI PyTorch: its column stays empty"

DEBIAN_PY=""
if torch_ok "$DEB_PY"; then
    DEBIAN_PY=$DEB_PY
elif [[ $NO_INSTALL != 1 && $(id -u) == 0 ]]; then
    say "== installing Debian's python3-torch"
    { apt-get install -y python3-torch >/dev/null 2>&1 ||
        { apt-get update >/dev/null 2>&1 && apt-get install -y python3-torch >/dev/null 2>&1; }; } &&
        torch_ok "$DEB_PY" && DEBIAN_PY=$DEB_PY
fi
[[ -n $DEBIAN_PY ]] || warn "no Debian python3-torch (apt-get install -y python3-torch as root): its column stays empty"

torch_version() { "$1" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null; }
V_PYPI=$([[ -n $PYPI_PY ]] && torch_version "$PYPI_PY" || echo none)
V_DEB=$([[ -n $DEBIAN_PY ]] && torch_version "$DEBIAN_PY" || echo none)

# --- galley ----------------------------------------------------------------------------------
if [[ -z ${GALLEY:-} ]]; then
    say "== building galley in $ROOT/build-bench"
    built=0
    for try in 1 2 3; do
        if cmake -S "$ROOT" -B "$ROOT/build-bench" >"$WORK/cmake.log" 2>&1 &&
            cmake --build "$ROOT/build-bench" -j2 --target galley >>"$WORK/cmake.log" 2>&1; then
            built=1
            break
        fi
        warn "galley build failed (try $try of 3; the tree may be mid-edit), retrying in 60 s:"
        tail -5 "$WORK/cmake.log" >&2
        sleep 60
    done
    [[ $built == 1 ]] || { warn "could not build galley"; exit 1; }
    GALLEY=$ROOT/build-bench/galley
    # what was built: the commit, and whether the tree had edits on top of it
    GALLEY_SRC="built from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    dirty=$(git -C "$ROOT" status --porcelain -- src include CMakeLists.txt cmake 2>/dev/null | wc -l)
    [[ $dirty == 0 ]] || GALLEY_SRC+=" with uncommitted changes to $dirty files under src/, include/, cmake/"
fi
GALLEY_SRC=${GALLEY_SRC:-"$GALLEY as given"}
[[ -x $GALLEY ]] || { warn "no galley binary at $GALLEY"; exit 1; }

# --- 2. sgemm peak ---------------------------------------------------------------------------
say "== building sgemm_peak against $OPENBLAS_DIR/libopenblas.a"
cc -O2 -fopenmp -I"$OPENBLAS_INC" -o "$WORK/sgemm_peak" "$HERE/sgemm_peak.c" \
    "$OPENBLAS_DIR/libopenblas.a" -lgfortran -lm -lpthread || { warn "sgemm_peak did not build"; exit 1; }

# --- models ----------------------------------------------------------------------------------
model_batch() { case $1 in small_cnn | vit_tiny) echo 64 ;; mlp) echo 128 ;; cosmoflow | cnn3d) echo 8 ;; esac; }
model_args() { # MODEL -> galley recipe and overrides (without steps and threads)
    case $1 in
        small_cnn) echo "$HERE/small_cnn.yaml data.synthetic.val_size=64" ;;
        mlp) echo "$ROOT/recipes/mlp.yaml data.synthetic.val_size=128" ;;
        cosmoflow) echo "$ROOT/recipes/cosmoflow.yaml data.synthetic.size=32 data.synthetic.train_size=64 data.synthetic.val_size=8 train.batch_size=8" ;;
        cnn3d) echo "$HERE/cnn3d.yaml" ;;
        vit_tiny) echo "$ROOT/recipes/vit-tiny.yaml data.synthetic.val_size=64" ;;
    esac
}
model_cal_steps() { case $1 in small_cnn | vit_tiny) echo 8 ;; mlp) echo 40 ;; cosmoflow | cnn3d) echo 2 ;; esac; }
model_warmup() { case $1 in cosmoflow | cnn3d) echo 2 ;; *) echo 3 ;; esac; }

# MFLOPs forward per sample, from galley check's summary ("12.31 MFLOPs forward per sample").
declare -A MFLOPS
for m in $MODELS; do
    # shellcheck disable=SC2046
    line=$("$GALLEY" check $(model_args "$m") 2>&1 | grep -oE '[0-9.]+ [kMGT]?FLOPs forward per sample')
    MFLOPS[$m]=$(awk '{v=$1; u=substr($2,1,1); f=(u=="k")?1e-3:(u=="M")?1:(u=="G")?1e3:(u=="T")?1e6:1e-6; print v*f}' <<<"$line")
    [[ -n ${MFLOPS[$m]} ]] || { warn "galley check $m printed no FLOPs"; MFLOPS[$m]=0; }
done

# galley_once PASS MODEL THREADS STEPS ENVPREFIX... -> "samples_per_s peak_rss_mib cpu_util"
galley_once() {
    local model=$2 t=$3 steps=$4
    shift 4
    local out
    # shellcheck disable=SC2046
    # From the scratch folder, so that the run directory galley may write goes away with it.
    out=$(cd "$WORK" && "$@" /usr/bin/time -f 'TIME %e %U %S %M' "$GALLEY" train $(model_args "$model") \
        train.steps="$steps" train.eval_every="$steps" 'train.target={metric: none}' \
        train.threads="$t" 2>&1)
    local done_line time_line
    done_line=$(grep '^done:' <<<"$out")
    time_line=$(grep '^TIME ' <<<"$out" | tail -1)
    if [[ -z $done_line ]]; then
        warn "galley train $model threads $t failed:"
        tail -5 <<<"$out" >&2
        echo "0 0 0"
        return
    fi
    local sps rss util
    sps=$(sed -E 's/.*training ([0-9.]+) samples\/s.*/\1/' <<<"$done_line")
    # peak RSS as /usr/bin/time reads it (getrusage ru_maxrss, KiB), the same measure as torch's
    rss=$(awk '{ printf "%.1f", $5 / 1024 }' <<<"$time_line")
    util=$(awk -v t="$t" '{ if ($2 > 0) printf "%.3f", ($3 + $4) / ($2 * t); else print 0 }' <<<"$time_line")
    echo "$sps ${rss:-0} ${util:-0}"
}

# torch_once PYTHON MODEL THREADS ENVPREFIX... -> "samples_per_s peak_rss_mib cpu_util steps"
torch_once() {
    local py=$1 model=$2 t=$3
    shift 3
    local out
    # torch.set_num_threads covers PyTorch's own OpenMP and MKL threads, but not the threads of
    # an OpenBLAS that Debian's build calls for GEMM (pthread OpenBLAS by default): pin them too.
    out=$("$@" env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" \
        "$py" -W ignore "$HERE/torch_bench.py" "$model" --threads "$t" --seconds "$SECS" \
        --warmup "$(model_warmup "$model")" 2>&1)
    local json
    json=$(grep '^{' <<<"$out" | tail -1)
    if [[ -z $json ]]; then
        warn "torch_bench.py $model threads $t ($py) failed:"
        tail -5 <<<"$out" >&2
        echo "0 0 0 0"
        return
    fi
    "$DEB_PY" -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["samples_per_s"], d["peak_rss_mib"], d["cpu_util"], d["steps"])' "$json"
}

# run_pass PASS ENVPREFIX...: every measurement of one environment setting
run_pass() {
    local pass=$1
    shift
    say ""
    say "== pass '$pass' (load average $(loadavg))"
    # The peak on the kernels galley runs: where OpenBLAS does not know this CPU and galley
    # chooses the core itself (cpu_blas_core.c), sgemm_peak is given the same core.
    local blas core
    blas=$("$@" "$GALLEY" info 2>/dev/null | sed -nE 's/.*OpenBLAS [^(]*\((core .*)\)$/\1/p' | head -1)
    say "   galley's OpenBLAS: ${blas:-?}"
    core=$(sed -nE 's/^core ([A-Za-z0-9]+), chosen by galley.*/\1/p' <<<"$blas")
    if [[ -n $core ]]; then
        "$@" env OPENBLAS_CORETYPE="$core" "$WORK/sgemm_peak" | tee "$WORK/sgemm.$pass"
    else
        "$@" "$WORK/sgemm_peak" | tee "$WORK/sgemm.$pass"
    fi
    loadavg >"$WORK/load_start.$pass"
    local m t r b res steps l
    # Repeats go round all models, so that a burst of load from elsewhere hits one run of each
    # rather than every run of one.
    for ((r = 0; r < REPEAT; r++)); do
        for m in $MODELS; do
            b=$(model_batch "$m")
            for t in $THREADS; do
                # galley: a short calibration run sizes the timed run
                res=$(galley_once "$pass" "$m" "$t" "$(model_cal_steps "$m")" "$@")
                steps=$(awk -v z="${res%% *}" -v b="$b" -v s="$SECS" \
                    'BEGIN { n = (z > 0) ? int(s * z / b + 0.999) : 10; if (n < 10) n = 10; print n }')
                l=$(load1)
                res=$(galley_once "$pass" "$m" "$t" "$steps" "$@")
                printf '%s\tgalley\t%s\t%s\t%s\t%s\t%s\n' "$pass" "$m" "$t" "${res// /$'\t'}" "$steps" "$l" >>"$RAW"
                say "   galley       $m threads $t: $res (samples/s, peak RSS MiB, cpu util) $steps steps, load $l"
                if [[ -n $PYPI_PY ]]; then
                    l=$(load1)
                    res=$(torch_once "$PYPI_PY" "$m" "$t" "$@")
                    printf '%s\ttorch_pypi\t%s\t%s\t%s\t%s\n' "$pass" "$m" "$t" "$(awk '{print $1"\t"$2"\t"$3"\t"$4}' <<<"$res")" "$l" >>"$RAW"
                    say "   torch $V_PYPI $m threads $t: $res (samples/s, peak RSS MiB, cpu util, steps), load $l"
                fi
                if [[ -n $DEBIAN_PY ]]; then
                    l=$(load1)
                    res=$(torch_once "$DEBIAN_PY" "$m" "$t" "$@")
                    printf '%s\ttorch_debian\t%s\t%s\t%s\t%s\n' "$pass" "$m" "$t" "$(awk '{print $1"\t"$2"\t"$3"\t"$4}' <<<"$res")" "$l" >>"$RAW"
                    say "   torch $V_DEB $m threads $t: $res (samples/s, peak RSS MiB, cpu util, steps), load $l"
                fi
            done
        done
    done
    loadavg >"$WORK/load_end.$pass"
}

ENV_DESC="OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)}"
say ""
say "== galley $("$GALLEY" --version 2>&1 | head -1) ($GALLEY_SRC) | torch $V_PYPI (PyPI) | torch $V_DEB (Debian)"
say "   $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load average $(loadavg)"
say "   environment: $ENV_DESC"

run_pass env
run_pass unset env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE

# --- 5. the table ----------------------------------------------------------------------------
T_END=$(date +%s)
GALLEY_VERSION=$("$GALLEY" --version 2>&1 | head -1)
# The model name alone does not tell CPUs apart under a hypervisor ("AMD EPYC" is Zen 2 to Zen 5):
# family and model (AMD family 25 model 17 is Zen 4; Intel family 6 model 207 Emerald Rapids) and caches.
CPU_FM=$(awk -F': ' '/^cpu family/ {f=$2} /^model\t/ {m=$2} f != "" && m != "" {print "family " f " model " m; exit}' /proc/cpuinfo)
CPU_CACHE=$(lscpu 2>/dev/null | awk -F': *' '/^L2 cache|^L3 cache/ {sub(/ cache/, "", $1); printf "%s%s %s", n++ ? ", " : "", $1, $2}')
CPU_DESC="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')${CPU_FM:+ ($CPU_FM${CPU_CACHE:+; $CPU_CACHE})}, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
# the ISA level galley's kernels see (galley info: "features: sse4.2 avx avx2 fma ...")
ISA=$("$GALLEY" info 2>/dev/null | sed -n 's/.*features: //p' | head -1)
CPU_DESC+=", ISA: ${ISA:-?}"
RUN_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
RUN_MIN=$(((T_END - T_START + 30) / 60))
MFLOPS_DESC=$(for m in $MODELS; do printf '%s=%s ' "$m" "${MFLOPS[$m]}"; done)
export WORK RAW RESULTS V_PYPI V_DEB ENV_DESC MODELS THREADS SECS REPEAT GALLEY_VERSION GALLEY_SRC CPU_DESC \
    RUN_DATE RUN_MIN MFLOPS_DESC
"$DEB_PY" - <<'EOF'
import os

W = os.environ
models = W["MODELS"].split()
mflops = dict(kv.split("=") for kv in W["MFLOPS_DESC"].split())
rows = [l.rstrip("\n").split("\t") for l in open(W["RAW"]) if l.strip()]


def sgemm(pass_):
    core, peaks = "?", {}
    for line in open(os.path.join(W["WORK"], "sgemm." + pass_)):
        if line.startswith("core "):
            core = line.split("|")[0].split()[1]
        elif line.startswith("threads "):
            f = line.split()
            peaks[int(f[1])] = float(f[3])
    return core, peaks


passes = [("env", "OpenBLAS variables as set: " + W["ENV_DESC"]),
          ("unset", "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset")]
sg = {p: sgemm(p) for p, _ in passes}
peak_all = max((max(pk.values()) for _, pk in sg.values() if pk), default=0.0)


def best(pass_, fw, model):
    """-> (samples/s, threads, peak RSS MiB) of the best run, or None"""
    cand = [r for r in rows if r[0] == pass_ and r[1] == fw and r[2] == model and float(r[4]) > 0]
    if not cand:
        return None
    r = max(cand, key=lambda r: float(r[4]))
    return float(r[4]), int(r[3]), float(r[5])


def fmt_sps(b):
    if b is None:
        return "n/a"
    v = b[0]
    s = f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v < 10 else f"{v:.1f}"
    return f"{s} ({b[1]}t)"


def ratio(a, b):
    return "n/a" if a is None or b is None or b[0] == 0 else f"{a[0] / b[0]:.2f}"


def rss(b):
    return "n/a" if b is None else f"{b[2]:.0f} MiB"


out = []
out.append("# Galley vs PyTorch: CPU training throughput")
out.append("")
out.append(f"Written by `tests/bench/run.sh` on {W['RUN_DATE']} ({W['RUN_MIN']} min).")
out.append(f"Machine: {W['CPU_DESC']}. galley: {W['GALLEY_VERSION']} ({W['GALLEY_SRC']}). "
           f"PyTorch: {W['V_PYPI']} (PyPI), {W['V_DEB']} (Debian python3-torch).")
out.append("")
out.append("Each number is training samples/s (higher is better), the best over threads "
           f"{W['THREADS'].replace(' ', ', ')} (the count in parentheses), "
           f"{W['REPEAT']} run(s) each of about {W['SECS']} s timed. "
           "Ratio = galley / torch (above 1: galley is faster). Peak RSS is that best run's. "
           "% of sgemm peak = samples/s x 3 x forward FLOPs per sample "
           f"({', '.join(f'{m} {float(mflops[m]):g} MFLOPs' for m in models)}) / "
           f"{peak_all:.1f} GFLOP/s, the best all-thread sgemm measured below.")
out.append("")
out.append("Reading the numbers: every process on the machine shares its cores, so the load average "
           "(given for each pass and each run) says how far to trust a number. A run whose threads do "
           "not all get a core shows a cpu util well below 1 in the last table; PyTorch's OpenMP "
           "threads then wait at every parallel region for the one that lost its core, and a 2-thread "
           "run can fall to a fraction of the 1-thread one. The best over thread counts and repeats "
           "is what the tables show.")
if W["ENV_DESC"].count("(unset)") == 2:
    out.append("")
    out.append("The environment set neither OpenBLAS variable, so the two passes ran the same "
               "configuration: where they differ, that is the machine's load and run-to-run noise.")
for p, desc in passes:
    core, pk = sg[p]
    ls = open(os.path.join(W["WORK"], "load_start." + p)).read().strip()
    le = open(os.path.join(W["WORK"], "load_end." + p)).read().strip()
    out.append("")
    out.append(f"## {desc}")
    out.append("")
    out.append(f"OpenBLAS core {core}; sgemm peak "
               + ", ".join(f"{v:.1f} GFLOP/s at {t} thread{'s' if t > 1 else ''}" for t, v in sorted(pk.items()))
               + f". Load average (1, 5, 15 min) {ls} at the start, {le} at the end.")
    out.append("")
    out.append(f"| model | galley samples/s | torch {W['V_PYPI']} (PyPI) | ratio | torch {W['V_DEB']} (Debian) "
               "| ratio | galley peak RSS | torch peak RSS (PyPI / Debian) | galley % of sgemm peak |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        g, tp, td = best(p, "galley", m), best(p, "torch_pypi", m), best(p, "torch_debian", m)
        pct = "n/a"
        if g is not None and peak_all > 0:
            pct = f"{100 * g[0] * 3 * float(mflops[m]) / 1e3 / peak_all:.1f}%"
        out.append(f"| {m} | {fmt_sps(g)} | {fmt_sps(tp)} | {ratio(g, tp)} | {fmt_sps(td)} | {ratio(g, td)} "
                   f"| {rss(g)} | {rss(tp)} / {rss(td)} | {pct} |")
out.append("")
out.append("## Every run")
out.append("")
out.append("cpu util = (user + system CPU time) / (wall time x threads): torch over its timed steps, "
           "galley over the whole process (with data generation and evaluation). Well below 1 means "
           "the run did not get its cores; load = 1-minute load average when the run started.")
out.append("")
out.append("| pass | framework | model | threads | samples/s | peak RSS MiB | cpu util | steps | load |")
out.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    out.append("| " + " | ".join(r) + " |")
text = "\n".join(out) + "\n"
# Earlier runs stay below the new one (their tables, not their every-run lists), headings one
# level down, so that tables from different machines are kept apart and none is lost.
try:
    old = open(W["RESULTS"]).read()
except OSError:
    old = ""
if old.strip():
    old_main, _, old_earlier = old.partition("\n## Earlier runs\n")
    old_main = old_main.split("\n## Every run\n")[0].rstrip("\n")
    demoted = "\n".join("##" + l if l.startswith("#") else l for l in old_main.split("\n"))
    earlier = old_earlier.partition("\n")[2] if old_earlier else ""  # past its intro line
    text += ("\n## Earlier runs\n"
             "Earlier results of this script, newest first, as they were written (machines differ).\n\n"
             + demoted + "\n" + (("\n" + earlier.lstrip("\n")) if earlier.strip() else ""))
open(W["RESULTS"], "w").write(text)
print()
print(text)
EOF
say "(written to $RESULTS)"
