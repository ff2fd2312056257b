// cuda_backend.cu: the CUDA backend's table, its one context, memory and checks.
//
// Binding: backend_cuda(ordinal) picks GPU ordinal % visible GPUs (callers pass the local rank;
// CUDA_VISIBLE_DEVICES narrows what is visible), loads cuDNN and cuBLAS (cuda_dl.cu), and makes
// one non-blocking stream that every kernel, copy and library call of the run goes to.
//
// Memory: the run's arena is CUDA managed memory, zeroed on the GPU so its pages start there.
// Kernels never fault; host code that reads tensors (metrics, checkpoints) waits for sync()
// first and pulls the pages it touches. The optimizer runs on the GPU (cuda_optim.cu), so
// parameters, gradients and moments stay there; moving metrics onto the GPU is what remains.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"
#include "galley/cuda_probe.h"

static cuda_ctx ctx;  // the process's one GPU binding (see cuda_internal.h)
static int bound;

cuda_ctx *cuda_ctx_get(void) { return &ctx; }

// ---- checks ----------------------------------------------------------------------------------

// While a pass is being recorded nothing runs, so a failure there (a call that cannot be
// recorded, say) breaks only the recording: the pass then runs eagerly, where a real error
// ends the run as usual.
static bool broke_recording(const char *call, const char *what) {
    if (!ctx.capturing) return false;
    char why[256];
    snprintf(why, sizeof why, "%s: %s", call, what);
    cuda_capture_break(why);
    return true;
}

void cuda_check_rt_at(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    if (broke_recording(call, cudaGetErrorString(e))) {
        cudaGetLastError();  // not sticky: clear it
        return;
    }
    const char *hint = e == cudaErrorMemoryAllocation ? "reduce train.batch_size or the model size"
                       : e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure
                           ? "a kernel fault: rerun with CUDA_LAUNCH_BLOCKING=1 and compute-sanitizer to find it, "
                             "and please report the recipe"
                           : "check the GPU with nvidia-smi; set train.device: cpu to train without it";
    gl_die_at(file, line, GL_EXIT_RUNTIME, hint, "CUDA: %s failed: %s (%s)", call, cudaGetErrorString(e),
              cudaGetErrorName(e));
}

void cuda_check_dnn_at(cudnnStatus_t s, const char *call, const char *file, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return;
    if (broke_recording(call, cudnnGetErrorString(s))) return;
    gl_die_at(file, line, GL_EXIT_RUNTIME,
              "cuDNN rejected this layer's geometry or ran out of memory; set train.device: cpu to train without it",
              "cuDNN: %s failed: %s", call, cudnnGetErrorString(s));
}

void cuda_check_blas_at(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    if (broke_recording(call, cublasGetStatusString(s))) return;
    gl_die_at(file, line, GL_EXIT_RUNTIME, "set train.device: cpu to train without the GPU", "cuBLAS: %s failed: %s",
              call, cublasGetStatusString(s));
}

// ---- scratch that grows ------------------------------------------------------------------------

// Grows *buf to at least bytes of device memory. Waits for the stream first: kernels issued
// earlier may still read the old buffer. recorded: recorded passes may point into it, so they
// go stale (mem_gen).
static void *grow_device(void **buf, size_t *have, size_t bytes, bool recorded) {
    if (bytes <= *have && *buf) return *buf;
    if (ctx.capturing) {  // no allocation while recording: the pass runs eagerly and grows it then
        cuda_capture_break("a workspace had to grow");
        return *buf;
    }
    if (recorded) ctx.mem_gen++;  // recordings that point into the old buffer are stale
    size_t want = bytes + bytes / 4 + 256;
    CU_CHECK(cudaStreamSynchronize(ctx.stream));
    if (*buf) CU_CHECK(cudaFree(*buf));
    *buf = NULL;
    CU_CHECK(cudaMalloc(buf, want));
    *have = want;
    return *buf;
}

void *cuda_workspace(size_t bytes) { return grow_device(&ctx.work, &ctx.work_bytes, bytes ? bytes : 256, true); }

size_t cuda_workspace_bytes(void) { return ctx.work ? ctx.work_bytes : 0; }

void *cuda_stage(const void *host, size_t bytes) {
    void *d = grow_device(&ctx.stage, &ctx.stage_bytes, bytes ? bytes : 256, false);  // no pass reads it
    if (bytes) CU_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, ctx.stream));
    ctx.stage_of = host, ctx.stage_of_bytes = bytes;
    return d;
}

void cuda_stage_name(const void *host, size_t bytes) { ctx.stage_of = host, ctx.stage_of_bytes = bytes; }

const void *cuda_prestaged(const void *host, size_t bytes) {
    const char *h = (const char *)host, *lo = (const char *)ctx.pre_of;
    if (!lo || h < lo || bytes > ctx.pre_bytes || (size_t)(h - lo) > ctx.pre_bytes - bytes) return NULL;
    return (const char *)ctx.pre_dev + (h - lo);
}

// One reuse a naming: the loader's slots come back at the same addresses with new contents, so
// a later call for the same array (no loss in between) copies afresh.
const void *cuda_stage_find(const void *host, size_t bytes) {
    const void *pre = cuda_prestaged(host, bytes);
    if (pre) return pre;
    if (ctx.stage && host == ctx.stage_of && bytes == ctx.stage_of_bytes) {
        ctx.stage_of = NULL;
        return ctx.stage;
    }
    return cuda_stage(host, bytes);
}

double *cuda_partials(int64_t count, double **host) {
    if ((count > ctx.red_count || !ctx.red) && ctx.capturing) {
        cuda_capture_break("the partial sums had to grow");
    } else if (count > ctx.red_count || !ctx.red) {
        ctx.mem_gen++;
        int64_t want = count < 4096 ? 4096 : count + count / 4;
        CU_CHECK(cudaStreamSynchronize(ctx.stream));
        if (ctx.red) CU_CHECK(cudaFree(ctx.red));
        if (ctx.red_host) CU_CHECK(cudaFreeHost(ctx.red_host));
        CU_CHECK(cudaMalloc((void **)&ctx.red, sizeof(double) * (size_t)want));
        CU_CHECK(cudaMallocHost((void **)&ctx.red_host, sizeof(double) * (size_t)want));
        ctx.red_count = want;
    }
    if (host) *host = ctx.red_host;
    return ctx.red;
}

// ---- memory entry points -----------------------------------------------------------------------

static void *cu_mem_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMallocManaged(&p, bytes ? bytes : 256, cudaMemAttachGlobal) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error so the caller's message is the one shown
        return NULL;
    }
    // Zeroed on the GPU, so the pages start in its memory.
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, ctx.stream));
    CU_CHECK(cudaStreamSynchronize(ctx.stream));
    return p;
}

static void cu_mem_free(void *p) {
    CU_CHECK(cudaStreamSynchronize(ctx.stream));
    CU_CHECK(cudaFree(p));
}

static void cu_sync(void) {
    CU_CHECK(cudaGetLastError());
    CU_CHECK(cudaStreamSynchronize(ctx.stream));
}

static void cu_zero(void *dst, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemsetAsync(dst, 0, bytes, ctx.stream));
}

static void cu_upload(void *dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream));
}

static void cu_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream));
    CU_CHECK(cudaStreamSynchronize(ctx.stream));
}

// ---- input staging (backend.h) -------------------------------------------------------------------

// cudaHostRegister rather than allocating pinned memory: the loader owns its slots. Failure
// (RLIMIT_MEMLOCK in a container, say) is not fatal: cudaMemcpyAsync from pageable memory still
// copies, through the driver's own pinned bounce buffer, only not beside the kernels.
static int cu_host_pin(void *p, size_t bytes, char *msg, size_t len) {
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess) return 0;
    snprintf(msg, len, "cudaHostRegister of %.1f MiB failed: %s", bytes / 1048576.0, cudaGetErrorString(e));
    cudaGetLastError();  // not sticky, but clear it so the next check reports its own error
    return -1;
}

static void cu_host_unpin(void *p) {
    CU_CHECK(cudaStreamSynchronize(ctx.copy));  // no copy from it may still be in flight
    CU_CHECK(cudaHostUnregister(p));
}

// The copy stream first waits for everything issued on the compute stream so far (the step
// that last read dst), then copies; copy_done marks the end for cu_upload_wait.
static void cu_upload_async(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CU_CHECK(cudaEventRecord(ctx.copy_after, ctx.stream));
    CU_CHECK(cudaStreamWaitEvent(ctx.copy, ctx.copy_after, 0));
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.copy));  // dst: managed memory
    CU_CHECK(cudaEventRecord(ctx.copy_done, ctx.copy));
}

// An event never recorded counts as complete, so a wait before the first upload is a no-op.
static void cu_upload_wait(void) { CU_CHECK(cudaStreamWaitEvent(ctx.stream, ctx.copy_done, 0)); }

// A new step's declaration also drops the stage's naming: the slot it named may hold another
// batch by now.
static void cu_upload_declare(const void *host, size_t bytes, const void *dev) {
    ctx.pre_of = host, ctx.pre_bytes = host ? bytes : 0, ctx.pre_dev = host ? dev : NULL;
    ctx.stage_of = NULL;
}

// The reserve: the cuDNN workspace cap, plus what the libraries and the staging buffers take
// (cuBLAS workspaces, the loss staging, partial sums): 256 MiB covers them with room.
static void cu_mem_info(size_t *free_bytes, size_t *total_bytes, size_t *reserve, unsigned char uuid[16],
                        char *name, size_t len) {
    CU_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    *reserve = ctx.work_limit + ((size_t)256 << 20);
    memcpy(uuid, ctx.prop.uuid.bytes, 16);
    snprintf(name, len, "GPU %d (%s)", ctx.device, ctx.prop.name);
}

// Host-side work (data loading, metrics) still runs on OpenMP threads.
static void cu_set_threads(int threads) { backend_cpu()->set_threads(threads); }

// train.precision on this GPU (backend.h). auto: bf16 from compute capability 8.0 (Ampere: bf16
// and TF32 tensor cores), fp16 on 7.x (Volta, Turing: fp16 tensor cores only), fp32 before.
// cuBLAS's math mode follows: pedantic for fp32 (no silent TF32, the same bits every run), TF32
// tensor ops for tf32; bf16 and fp16 name their compute type in each cublasGemmEx call
// (cuda_dense.cu), so the handle keeps default math. cuda_conv.cu reads ctx.precision per call.
static int cu_set_precision(int precision, char *msg, size_t len) {
    int cc = ctx.prop.major * 10 + ctx.prop.minor, p = precision;
    if (p == PRECISION_AUTO) p = cc >= 80 ? PRECISION_BF16 : cc >= 70 ? PRECISION_FP16 : PRECISION_FP32;
    if (p < PRECISION_FP32 || p > PRECISION_FP16) {
        snprintf(msg, len, "unknown precision %d", precision);
        return -1;
    }
    if ((p == PRECISION_TF32 || p == PRECISION_BF16) && cc < 80) {
        snprintf(msg, len, "%s needs compute capability 8.0 or newer, and GPU %d (%s) has %d.%d",
                 recipe_precision_name(p), ctx.device, ctx.prop.name, ctx.prop.major, ctx.prop.minor);
        return -1;
    }
    cublasMath_t mode = p == PRECISION_FP32 ? CUBLAS_PEDANTIC_MATH
                        : p == PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                              : CUBLAS_DEFAULT_MATH;
    CU_CHECK(cudaStreamSynchronize(ctx.stream));  // kernels already queued keep the precision they were issued in
    CUBLAS_CHECK(cublasSetMathMode(ctx.cublas, mode));
    ctx.precision = p;
    return p;
}

// Token ops (cuda_tokens.cu; declared here, the table being their only caller).
void cuda_patch_rearrange(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                          int accumulate, const float *src, float *dst);
void cuda_row_sum(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride, float *dst,
                  int accumulate);
void cuda_row_spread(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst,
                     int64_t dst_stride, int accumulate);
void cuda_row_scale(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate);
// (begin attention region) cuda_attention.cu (backend.h's contract)
void cuda_attention_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                            uint64_t seed, uint64_t step, uint64_t base, const float *qkv, float *y, float *lse);
void cuda_attention_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                             uint64_t seed, uint64_t step, uint64_t base, const float *qkv, const float *y,
                             const float *lse, const float *dy, float *dqkv, float *work);
// (end attention region)

static const gl_backend cuda_table = {
    .name = "cuda",
    .device = 1,
    .own_conv_workspace = 1,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .sync = cu_sync,
    .zero = cu_zero,
    .upload = cu_upload,
    .download = cu_download,
    .mem_info = cu_mem_info,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .replay_free = cuda_replay_free,
    .capture_generation = cuda_capture_generation,
    .replay_step = cuda_replay_step,
    .host_pin = cu_host_pin,
    .host_unpin = cu_host_unpin,
    .upload_async = cu_upload_async,
    .upload_wait = cu_upload_wait,
    .upload_declare = cu_upload_declare,
    .chunk_sumsq = cuda_chunk_sumsq,
    .optim_update = cuda_optim_update,
    .dense_forward = cuda_dense_forward,
    .dense_backward = cuda_dense_backward,
    .act_forward = cuda_act_forward,
    .act_backward = cuda_act_backward,
    .act_backward_set = cuda_act_backward_set,
    .softmax_xent = cuda_softmax_xent,
    .regression_loss = cuda_regression_loss,
    .l2_relative_loss = cuda_l2_relative_loss,
    .metrics_sums = cuda_metrics_sums,
    .set_threads = cu_set_threads,
    .set_precision = cu_set_precision,
    .conv_forward = cuda_conv_forward,
    .conv_forward_act = cuda_conv_forward_act,
    .conv_backward = cuda_conv_backward,
    .conv_transpose_forward = cuda_conv_transpose_forward,
    .conv_transpose_forward_act = cuda_conv_transpose_forward_act,
    .conv_transpose_backward = cuda_conv_transpose_backward,
    .max_pool_forward = cuda_max_pool_forward,
    .max_pool_backward = cuda_max_pool_backward,
    .avg_pool_forward = cuda_avg_pool_forward,
    .avg_pool_backward = cuda_avg_pool_backward,
    .global_avg_pool_forward = cuda_global_avg_pool_forward,
    .global_avg_pool_backward = cuda_global_avg_pool_backward,
    .batch_norm_forward = cuda_batch_norm_forward,
    .batch_norm_forward_act = cuda_batch_norm_forward_act,
    .batch_norm_backward = cuda_batch_norm_backward,
    .layer_norm_forward = cuda_layer_norm_forward,
    .layer_norm_backward = cuda_layer_norm_backward,
    .dropout_forward = cuda_dropout_forward,
    .dropout_backward = cuda_dropout_backward,
    .scale = cuda_scale,
    .axpy = cuda_axpy,
    .copy_rows = cuda_copy_rows,
    .upsample_forward = cuda_upsample_forward,
    .upsample_backward = cuda_upsample_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .patch_rearrange = cuda_patch_rearrange,
    .row_sum = cuda_row_sum,
    .row_spread = cuda_row_spread,
    .row_scale = cuda_row_scale,
};

// GALLEY_CUDNN_WORKSPACE_MB caps what one convolution algorithm may use (default: 1/16 of the
// GPU's memory, at most 2 GiB), like PyTorch's cudnn workspace limit.
static size_t workspace_limit(const cudaDeviceProp *p) {
    const char *e = getenv("GALLEY_CUDNN_WORKSPACE_MB");
    if (e && *e) {
        char *end;
        double mb = strtod(e, &end);
        if (*end == '\0' && mb >= 0) return (size_t)(mb * 1048576.0);
    }
    size_t lim = p->totalGlobalMem / 16;
    return lim > ((size_t)2 << 30) ? ((size_t)2 << 30) : lim;
}

const gl_backend *backend_cuda(int ordinal, char *msg, size_t len) {
    if (bound) {
        snprintf(msg, len, "GPU %d: %s", ctx.device, ctx.prop.name);
        return &cuda_table;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cuda_no_gpu_reason(msg, len);
        cudaGetLastError();
        return NULL;
    }
    if (cuda_dl_load(msg, len) != 0) return NULL;
    ctx.device = (ordinal < 0 ? 0 : ordinal) % count;
    if ((e = cudaSetDevice(ctx.device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&ctx.prop, ctx.device)) != cudaSuccess) {
        snprintf(msg, len, "GPU %d: %s", ctx.device, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    if (!ctx.prop.managedMemory) {
        snprintf(msg, len, "GPU %d (%s) does not support CUDA managed memory, which the CUDA backend needs",
                 ctx.device, ctx.prop.name);
        return NULL;
    }
    CU_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    CU_CHECK(cudaStreamCreateWithFlags(&ctx.copy, cudaStreamNonBlocking));
    // Ordering only, no timing: the cheapest events.
    CU_CHECK(cudaEventCreateWithFlags(&ctx.copy_after, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&ctx.copy_done, cudaEventDisableTiming));
    CUDNN_CHECK(cudnnCreate(&ctx.cudnn));
    CUDNN_CHECK(cudnnSetStream(ctx.cudnn, ctx.stream));
    CUBLAS_CHECK(cublasCreate(&ctx.cublas));
    CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
    // fp32 means fp32: no silent TF32 in GEMMs until train.precision asks for it (cu_set_precision).
    CUBLAS_CHECK(cublasSetMathMode(ctx.cublas, CUBLAS_PEDANTIC_MATH));
    // cuBLAS's workspace is ours (32 MiB, what NVIDIA advises for Hopper), so it never allocates
    // inside a recorded pass.
    const size_t blas_ws = (size_t)32 << 20;
    CU_CHECK(cudaMalloc(&ctx.blas_ws, blas_ws));
    CUBLAS_CHECK(cublasSetWorkspace_v2(ctx.cublas, ctx.blas_ws, blas_ws));
    CU_CHECK(cudaMalloc((void **)&ctx.step_dev, sizeof(uint64_t)));
    CU_CHECK(cudaMemset(ctx.step_dev, 0, sizeof(uint64_t)));
    ctx.precision = PRECISION_FP32;
    ctx.work_limit = workspace_limit(&ctx.prop);
    int blas = 0;
    CUBLAS_CHECK(cublasGetVersion(ctx.cublas, &blas));
    size_t dnn = cudnnGetVersion();
    snprintf(msg, len, "GPU %d: %s (sm_%d%d, %.1f GiB), cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d", ctx.device,
             ctx.prop.name, ctx.prop.major, ctx.prop.minor, ctx.prop.totalGlobalMem / 1073741824.0, dnn / 10000,
             (dnn % 10000) / 100, dnn % 100, blas / 10000, (blas % 10000) / 100, blas % 100);
    bound = 1;
    return &cuda_table;
}
