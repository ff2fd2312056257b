// cuda_internal.h: what the CUDA backend's files share.
//
// One context per process (cuda_ctx): the GPU this process is bound to, the stream every kernel
// runs on, the cuDNN and cuBLAS handles on that stream, and a workspace that grows to the
// largest request (sizes settle in the first step, so the loop does not allocate after it).
// It is the backend's only state: gl_backend's entry points take no context argument because
// one process drives one GPU (ranks map to GPUs), so the table reaches it through cuda_ctx_get.
//
// Checks: CU_CHECK (runtime), CUDNN_CHECK and CUBLAS_CHECK end the run with file:line, the
// failing call, the library's message and a hint (exit 1: a runtime failure).
//
// Memory: every tensor pointer is CUDA managed memory from the run's arena; losses get labels,
// class weights and targets in host memory and stage them through cuda_stage.
#ifndef GALLEY_CUDA_INTERNAL_H
#define GALLEY_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_dl.h"
#include "galley/backend.h"
#include "galley/backend_types.h"  // PRECISION_*
#include "galley/cuda_probe.h"     // ATTN_*, sdpa_decide

typedef struct {
    int device;            // CUDA ordinal
    cudaDeviceProp prop;
    cudaStream_t stream;   // every kernel, copy, cuDNN and cuBLAS call of the step
    cudaStream_t copy;     // upload_async's host-to-device copies of the next batch
    cudaEvent_t copy_after, copy_done;  // compute -> copy (the buffer is free), copy -> compute (it is full)
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *work;            // device workspace (cuDNN, reductions)
    size_t work_bytes;
    size_t work_limit;     // the most cuDNN algorithms may ask for (bytes)
    void *stage;           // device copy of host inputs to the losses
    size_t stage_bytes;
    const void *stage_of;  // the host array whose copy starts the stage (cuda_stage_name), or NULL
    size_t stage_of_bytes;
    const void *pre_of;    // the step's targets already copied by upload_async (upload_declare), or NULL
    size_t pre_bytes;
    const void *pre_dev;   // where: pre_of[0, pre_bytes) is at pre_dev
    double *red;           // device partial sums for losses and norms: red_count doubles
    int64_t red_count;
    double *red_host;      // pinned host mirror of red
    int precision;         // PRECISION_* (backend_types.h) in effect for dense and conv (set_precision; fp32 at bind)
    // Recording (cuda_graph.cu): while capturing, failed checks mark the recording broken instead
    // of ending the run (nothing has run; the pass runs again eagerly), and buffers do not grow.
    bool capturing, capture_broken;
    char capture_msg[256];  // the first reason it broke
    uint64_t mem_gen;       // bumped when the workspace, stage or partials are reallocated
    uint64_t *step_dev;     // the step recorded dropout kernels read (replay_step sets it)
    void *blas_ws;          // cuBLAS's workspace, ours so that it never allocates while recording
    uint64_t attn_tc_smem;  // cuda_attention_tc.cu: which kernels were allowed their shared memory
} cuda_ctx;

cuda_ctx *cuda_ctx_get(void);

// cuda_attention_tc.cu: attention on tensor cores where train.precision is bf16 or fp16 (its
// header says when else it applies). 1: done; 0: not taken, the caller runs the fp32 kernels.
// backward's d is D = rowsum(dy * y), [N, H, T], already computed.
int cuda_attention_tc_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                              const float *qkv, float *y, float *lse);
int cuda_attention_tc_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                               const float *qkv, const float *lse, const float *dy, const float *d, float *dqkv);

// cuda_sdpa.cu: which attention kernels run (GALLEY_ATTENTION_KERNEL: galley, cudnn, measure,
// fp32, as ATTN_* of galley/cuda_probe.h; any other value ends the run with exit 2), and cuDNN's
// fused attention.
int cuda_attention_mode(void);
// One attention call (backend.h's arguments): forward writes y and lse from qkv; backward reads
// qkv, y, lse and dy and writes dqkv (galley's kernels also use work).
typedef struct {
    int64_t n, t, h, e;
    float scale, rate;
    int causal;
    uint64_t seed, step, base;
    const float *qkv, *dy;
    float *y, *lse, *dqkv, *work;
} sdpa_call;
// Runs the call through cuDNN where GALLEY_ATTENTION_KERNEL and the measured choice say so
// (cuda_sdpa.cu's header); galley runs galley's kernels for the measurement. 1: the outputs are
// written; 0: the caller runs galley's kernels.
int cuda_sdpa_run(int backward, const sdpa_call *c, void (*galley)(const sdpa_call *));

// At least `bytes` of device workspace, valid until the next call (grows, never shrinks).
void *cuda_workspace(size_t bytes);
// Bytes the workspace holds now (released first when it grows).
size_t cuda_workspace_bytes(void);
// Copies `bytes` of host memory into the staging buffer (on the stream) and returns its device
// address, valid until the next cuda_stage call.
void *cuda_stage(const void *host, size_t bytes);
// Declares that the stage now starts with a copy of host[0, bytes) (cuda_stage of a packed
// buffer sets no name of its own), so cuda_stage_find can reuse it.
void cuda_stage_name(const void *host, size_t bytes);
// The device copy of host[0, bytes): the declared copy of the step's targets when inside it
// (cuda_prestaged), the stage when the last cuda_stage was of that array (the loss staged the
// labels the metrics need next), else a fresh cuda_stage. Once a naming: a second find copies
// again. The caller vouches the host array is unchanged since the naming.
const void *cuda_stage_find(const void *host, size_t bytes);
// The copy of host[0, bytes) that input staging made beside the step (upload_declare), or NULL.
const void *cuda_prestaged(const void *host, size_t bytes);
// At least `count` device doubles for partial sums, and the pinned host mirror of the same size.
double *cuda_partials(int64_t count, double **host);

void cuda_check_rt_at(cudaError_t e, const char *call, const char *file, int line);
void cuda_check_dnn_at(cudnnStatus_t s, const char *call, const char *file, int line);
void cuda_check_blas_at(cublasStatus_t s, const char *call, const char *file, int line);
#define CU_CHECK(call) cuda_check_rt_at((call), #call, __FILE__, __LINE__)
#define CUDNN_CHECK(call) cuda_check_dnn_at((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cuda_check_blas_at((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports a bad launch configuration at its line.
#define CU_LAUNCHED() cuda_check_rt_at(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// Grid size for one thread per element over n elements with `block` threads a block (capped;
// kernels loop with a grid stride).
static inline unsigned cuda_grid(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    if (g < 1) g = 1;
    if (g > 65535 * 8) g = 65535 * 8;
    return (unsigned)g;
}
#define GL_BLOCK 256

// The arithmetic of the GEMM-shaped kernels (backend.h's set_precision), for cuda_dense.cu
// and cuda_conv.cu: fp32 unless tf32, bf16 or fp16 was set.
static inline bool cuda_is_half(void) {
    int p = cuda_ctx_get()->precision;
    return p == PRECISION_BF16 || p == PRECISION_FP16;
}

// ---- kernels: one file per family, in the order of backend.h ----
// cuda_dense.cu
void cuda_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y);
void cuda_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                         float *db, float *dx);
// cuda_elem.cu
void cuda_act_forward(gl_act act, float alpha, int64_t n, const float *x, float *y);
void cuda_act_backward(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
void cuda_act_backward_set(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
void cuda_dropout_forward(int64_t count, float rate, int train, uint64_t seed, uint64_t step, uint64_t base,
                          const float *x, float *mask, float *y);
void cuda_dropout_backward(int64_t count, const float *mask, const float *dy, float *dx);
void cuda_scale(int64_t count, float a, const float *x, float *y);
void cuda_axpy(int64_t count, float a, const float *x, float *y);
void cuda_copy_rows(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                    int accumulate);
void cuda_upsample_forward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *x, float *y);
void cuda_upsample_backward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *dy, float *dx);
// cuda_optim.cu
void cuda_chunk_sumsq(int nchunks, const gl_chunk *chunks, const float *x, double *part);
void cuda_optim_update(int nchunks, const gl_chunk *chunks, const gl_optim_args *a, float *w, float *g, float *s0,
                       float *s1, double *part, const double *ratio);
// cuda_graph.cu
int cuda_capture_begin(char *msg, size_t len);
void *cuda_capture_end(char *msg, size_t len);
void cuda_replay(void *rec);
void cuda_replay_free(void *rec);
uint64_t cuda_capture_generation(void);
void cuda_replay_step(uint64_t step);
// Marks the recording in progress broken, keeping the first reason (checks and buffers call it).
void cuda_capture_break(const char *why);
// cuda_metrics.cu
void cuda_metrics_sums(bool class_like, bool topk, bool iou, int64_t n, int64_t c, int64_t s, int k, const float *out,
                       const int32_t *labels, const float *values, int64_t *counts, double *abs_sum);
// cuda_loss.cu
double cuda_softmax_xent(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                         const float *weights, float *dlogits);
double cuda_regression_loss(int kind, int64_t count, const float *pred, const float *target, float *dpred);
double cuda_l2_relative_loss(int64_t units, int64_t len, const float *pred, const float *target, float *dpred);
// cuda_conv.cu
void cuda_conv_forward(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                       float *scratch, int64_t scratch_floats);
void cuda_conv_forward_act(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                           float *scratch, int64_t scratch_floats, gl_act act, float slope);
void cuda_conv_backward(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx, float *scratch, int64_t scratch_floats);
void cuda_conv_transpose_forward(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                                 float *scratch, int64_t scratch_floats);
void cuda_conv_transpose_forward_act(const gl_conv_geom *g, const float *x, const float *w, const float *b,
                                     float *y, float *scratch, int64_t scratch_floats, gl_act act, float slope);
void cuda_conv_transpose_backward(const gl_conv_geom *g, const float *x, const float *w, const float *dy,
                                  float *dw, float *db, float *dx, float *scratch, int64_t scratch_floats);
// cuda_pool.cu
void cuda_max_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *x, float *y, int32_t *argmax);
void cuda_max_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                            const float *dy, float *dx);
void cuda_avg_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *x, float *y);
void cuda_avg_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                            const int s[3], const int p[3], const float *dy, float *dx);
void cuda_global_avg_pool_forward(int64_t n, int64_t c, int64_t s, const float *x, float *y);
void cuda_global_avg_pool_backward(int64_t n, int64_t c, int64_t s, const float *dy, float *dx);
// cuda_norm.cu
void cuda_batch_norm_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                             float eps, int train, float momentum, float *running, float *saved, float *y,
                             const gl_reducer *red);
void cuda_batch_norm_forward_act(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                                 const float *beta, float eps, int train, float momentum, float *running,
                                 float *saved, float *y, const gl_reducer *red, gl_act act, float slope);
void cuda_batch_norm_backward(int64_t n, int64_t c, int64_t s, const float *x, const float *dy, const float *gamma,
                              const float *saved, float *dgamma, float *dbeta, float *dx, const gl_reducer *red);
void cuda_layer_norm_forward(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta, float eps,
                             float *saved, float *y);
void cuda_layer_norm_backward(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                              const float *saved, float *dgamma, float *dbeta, float *dx);

#endif
