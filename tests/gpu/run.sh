#!/usr/bin/env bash
# tests/gpu/run.sh: everything that needs a GPU, in one call of a few minutes (a GPU machine is lent
# rarely and briefly, with no network). Run from the repository root:
#
#   bash tests/gpu/run.sh [OUT_DIR]        (OUT_DIR default: $OUT, else build/gpu-run)
#
# On a GPU machine without galley's build dependencies (no network to install them): run
# tests/gpu/pack.sh where galley builds, copy build/gpu-carry/ beside the same checkout there, and
# run tests/gpu/bare.sh, which sets up Open MPI and NVIDIA's libraries and then runs this script.
# That is how it ran on a lent H200 on 2026-12-04 (about 215 s for every part but the benchmark).
#
#   1. the machine: nvidia-smi, `galley info`;
#   2. the build: build/galley if it was carried along and has the CUDA backend, else a fresh
#      Release build for sm_90 in build-gpu (needs cmake, nvcc and the -dev packages there);
#   3. tests: unit/test_cuda_ops (every kernel against the CPU backend; then again with
#      GALLEY_CUDNN_AUTOTUNE=1 and a 0.05 MB workspace cap: timed algorithms, chunked convolutions),
#      unit/test_cuda_transformer (attention: the fp32 kernels, galley's tensor-core kernels and
#      cuDNN's fused attention, each against the CPU; token ops, relative L2), e2e/test_cuda_train
#      (every layer kind: training losses on the GPU against the CPU in fp32; then bf16, fp16 and
#      tf32 trainings whose loss must go down) and e2e/test_dist_nccl (the gradient allreduce
#      through NCCL on one GPU, GALLEY_NCCL=force; mpirun -np 2: NCCL, or with one GPU the MPI
#      fallback and its one line; losses against one process) and e2e/test_dist_tensor_gpu
#      (tensor_parallel 2 on one GPU: bitwise tp=1 in deterministic mode, 1e-4 otherwise);
#   4. the benchmark: tests/bench/gpu/run.sh (galley, in bf16 by default, against PyTorch where
#      PyTorch is installed).
# Each part has its own time limit and none runs past 470 s after the start, so the whole run
# stays under 8 minutes: the build at most 240 s (configure and compile together), test_cuda_ops
# 120 s, its tuned run 60 s, test_cuda_train 300 s, test_dist_nccl 60 s, test_dist_tensor_gpu 60 s (each cut to the time left; test_cuda_ops
# keeps 120 s of it for test_cuda_train, which keeps 30 s for test_dist_nccl), the benchmark what is left after the tests (BENCH_SECONDS; its own default
# BENCH_BUDGET of 240 s at most; skipped with 60 s or less). Everything is logged to
# OUT_DIR/gpu-run.log, the benchmark table to OUT_DIR/gpu-bench.md. Exit 0 when every test passed.
# GPU_RUN_END sets the 470 s; GPU_RUN_SKIP="ops transformer optim train nccl tensor bench" (any of
# them) leaves parts out, for a second call that only checks what the first one found.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${1:-${OUT:-$ROOT/build/gpu-run}}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/gpu-run.log
exec > >(tee "$LOG") 2>&1
T0=$SECONDS
say() { echo "== [$((SECONDS - T0)) s] $*"; }
END=${GPU_RUN_END:-470} # seconds after the start by which every part has ended (8 minutes less a margin)
# limit CAP [RESERVE]: a part's time limit: CAP seconds, or what is left before END less RESERVE
# (kept for the parts after it) when that is shorter; at least 1 (timeout 0 would mean no limit)
limit() {
    local l=$((END - (SECONDS - T0) - ${2:-0}))
    ((l > $1)) && l=$1
    ((l < 1)) && l=1
    echo "$l"
}
# want PART: PART (ops, transformer, optim, train, nccl, tensor, bench) is not in GPU_RUN_SKIP
want() { [[ " ${GPU_RUN_SKIP:-} " != *" $1 "* ]] || { say "$1: skipped (GPU_RUN_SKIP)"; return 1; }; }
timed_out() { [[ $1 == 124 ]] && echo " (timed out after $2 s)"; }
status=0
unit_failed=0 # a unit test failed: compute-sanitizer runs them again (3e)

say "1. machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || say "nvidia-smi failed"
GALLEY=""
for g in "$ROOT/build/galley" "$ROOT/build-gpu/galley"; do
    if [[ -x $g ]] && grep -q '^cuda=1$' "$(dirname "$g")/galley-build-info.txt" 2>/dev/null; then GALLEY=$g; break; fi
done

say "2. build"
if [[ -z $GALLEY ]]; then
    if command -v cmake >/dev/null && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
        build_end=$((SECONDS + 240)) # configure and compile share 240 s
        timeout "$(limit 240)" cmake -S "$ROOT" -B "$ROOT/build-gpu" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
            >"$OUT_DIR/build.log" 2>&1 &&
            timeout "$(limit $((build_end - SECONDS)))" cmake --build "$ROOT/build-gpu" -j"$(nproc)" >>"$OUT_DIR/build.log" 2>&1 &&
            GALLEY=$ROOT/build-gpu/galley
        [[ -n $GALLEY ]] || { tail -20 "$OUT_DIR/build.log"; say "build failed"; exit 1; }
    else
        say "no carried CUDA build and no toolchain to build one"; exit 1
    fi
fi
BUILD=$(dirname "$GALLEY")
say "galley: $GALLEY"
"$GALLEY" info 2>&1 | sed 's/^/   /'

# unit CAP RESERVE NAME [VAR=VALUE...]: tests/unit/NAME of the build, in the environment given,
# limited to limit CAP RESERVE; a failure marks the run failed and the unit tests for memcheck.
unit() {
    local lim name=$3 rc
    lim=$(limit "$1" "$2")
    shift 3
    if [[ ! -x $BUILD/tests/unit/$name ]]; then
        say "$name not built"
        status=1
        return
    fi
    (cd "$BUILD/tests/unit" && env "$@" timeout "$lim" "./$name")
    rc=$?
    say "$name${*:+ ($*)}: exit $rc$([[ $rc == 77 ]] && echo ' (skipped: no GPU)')$(timed_out "$rc" "$lim")"
    [[ $rc == 0 ]] || { status=1; unit_failed=1; }
}
# e2e CAP RESERVE NAME: tests/e2e/NAME.sh against this build (mpirun allowed as root)
e2e() {
    local lim name=$3 rc
    lim=$(limit "$1" "$2")
    GALLEY=$GALLEY GALLEY_SRC=$ROOT GALLEY_BUILD=$BUILD GALLEY_HAVE_CUDA=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$lim" bash "$ROOT/tests/e2e/$name.sh"
    rc=$?
    say "$name: exit $rc$([[ $rc == 77 ]] && echo ' (skipped: no GPU)')$(timed_out "$rc" "$lim")"
    [[ $rc == 0 ]] || status=1
}

say "3a. unit/test_cuda_ops"
if want ops; then
    unit 120 120 test_cuda_ops # leaves test_cuda_train at least 120 s
    # Again with timed algorithms (cudnnFind, every precision) and a 0.05 MB workspace cap, so
    # convolutions run in chunks of samples (ctest's unit/test_cuda_ops_tuned).
    unit 60 120 test_cuda_ops GALLEY_CUDNN_AUTOTUNE=1 GALLEY_CUDNN_WORKSPACE_MB=0.05
fi
say "3a'. unit/test_cuda_transformer (attention: fp32, galley's tensor cores, cuDNN; token ops, relative L2 against the CPU)"
want transformer && unit 90 120 test_cuda_transformer # cuDNN plans compile (NVRTC) at first use: about 1 s each
say "3a''. unit/test_cuda_optim (chunk_sumsq and optim_update against the CPU's loops)"
want optim && unit 30 120 test_cuda_optim
say "3b. e2e/test_cuda_train"
want train && e2e 300 30 test_cuda_train # leaves test_dist_nccl at least 30 s
say "3c. e2e/test_dist_nccl"
want nccl && e2e 60 0 test_dist_nccl
say "3d. e2e/test_dist_tensor_gpu"
want tensor && e2e 60 0 test_dist_tensor_gpu

# A failed unit test runs again under compute-sanitizer's memcheck where the tool is there (it
# names the kernel and the address of a bad access), 60 s at most, before the benchmark.
if [[ $unit_failed == 1 ]] && command -v compute-sanitizer >/dev/null; then
    say "3e. compute-sanitizer memcheck on the unit tests"
    for t in test_cuda_ops test_cuda_transformer test_cuda_optim; do
        lim=$(limit 30 60)
        [[ -x $BUILD/tests/unit/$t ]] || continue
        (cd "$BUILD/tests/unit" && timeout "$lim" compute-sanitizer --tool memcheck --print-limit 20 ./$t) \
            >"$OUT_DIR/sanitize-$t.log" 2>&1
        say "$t under memcheck: exit $? ($(grep -c 'Invalid\|ERROR SUMMARY' "$OUT_DIR/sanitize-$t.log") lines of errors; sanitize-$t.log)"
        grep -m 12 -A 6 'Invalid' "$OUT_DIR/sanitize-$t.log"
    done
fi

say "4. benchmark"
if want bench; then
    left=$((END - (SECONDS - T0)))
    if [[ -f $ROOT/tests/bench/gpu/run.sh && $left -gt 60 ]]; then
        GALLEY=$GALLEY BENCH_SECONDS=$left timeout "$left" bash "$ROOT/tests/bench/gpu/run.sh" "$OUT_DIR/gpu-bench.md"
        say "benchmark: exit $?"
    else
        say "benchmark skipped ($left s left)"
    fi
fi

say "done: $([[ $status == 0 ]] && echo 'every GPU test passed' || echo 'a GPU test FAILED') in $((SECONDS - T0)) s"
exit $status
