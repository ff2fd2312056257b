// cuda_optim.cu: the optimizer step on the GPU (backend.h: chunk_sumsq, optim_update), so the
// parameters, gradients and optimizer state never leave it. src/optim computes every scalar on
// the host (gl_optim_args) and keeps the per-tensor and global sums there; this file runs the
// element loops of src/optim/sgd.c and adam.c, one block per chunk (GL_OPTIM_CHUNK = 4096
// elements at most, GL_BLOCK threads striding over it).
//
// Arithmetic: formula for formula the CPU's, in the same float/double types. __fmul_rn and
// friends keep nvcc from fusing a multiply into the following add (an FMA rounds once, the CPU
// rounds twice), so SGD and AdamW give the CPU's bits for the same scalars. The double sums
// (norms, LAMB's ||W||, ||U||) are a fixed tree per chunk: repeatable, not bitwise the CPU's
// simd order. LAMB's phase 2 step is (float)((double)a->lr * ratio): a->lr is a float, the CPU
// rounds lr * ratio from the double lr, so it may differ from the CPU's by one rounding.
//
// The chunk table is the same for a whole run (backend.h): it is copied to the device once and
// kept, together with the device copy of LAMB's ratios (see table_on_device).
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"
#include "galley/backend_types.h"  // OPT_*

// ---- the chunk table on the device -------------------------------------------------------------

// Part of the process's one GPU binding (cuda_ctx), kept here because only this file uses it:
// the last chunk table seen (a host copy, to notice a new one) and its device copy, and room
// for one ratio per tensor.
typedef struct {
    const gl_chunk *key;  // the caller's table pointer
    int nchunks, ntensors;
    gl_chunk *host;       // [nchunks] what was uploaded
    gl_chunk *dev;        // [nchunks]
    double *ratio;        // [ntensors] device
    double *ratio_host;   // [ntensors] pageable staging (see ratio_upload)
} optim_table;

static optim_table table;

static void table_release(void) {
    if (table.dev || table.ratio) CU_CHECK(cudaStreamSynchronize(cuda_ctx_get()->stream));  // kernels may read them
    if (table.dev) CU_CHECK(cudaFree(table.dev));
    if (table.ratio) CU_CHECK(cudaFree(table.ratio));
    free(table.host);
    free(table.ratio_host);
    memset(&table, 0, sizeof table);
}

// The device copy of chunks[nchunks]. A run has one table, so this uploads once; a different
// pointer, count or content (a test that builds several optimizers) uploads the new one. The
// content check is a host memcmp of nchunks * 24 bytes: cheap next to the update it guards.
static const gl_chunk *table_on_device(int nchunks, const gl_chunk *chunks) {
    const size_t bytes = sizeof(gl_chunk) * (size_t)nchunks;
    if (table.dev && table.key == chunks && table.nchunks == nchunks && !memcmp(table.host, chunks, bytes))
        return table.dev;
    table_release();
    int ntensors = 0;
    for (int c = 0; c < nchunks; c++) {
        GL_CHECK(chunks[c].offset >= 0 && chunks[c].len >= 0 && chunks[c].tensor >= 0, "a malformed optimizer chunk");
        if (chunks[c].tensor + 1 > ntensors) ntensors = chunks[c].tensor + 1;
    }
    table.host = (gl_chunk *)gl_xmalloc(bytes);
    memcpy(table.host, chunks, bytes);
    table.ratio_host = (double *)gl_xmalloc(sizeof(double) * (size_t)ntensors);
    CU_CHECK(cudaMalloc((void **)&table.dev, bytes));
    CU_CHECK(cudaMalloc((void **)&table.ratio, sizeof(double) * (size_t)ntensors));
    // From pageable memory: the call returns once the source is staged, so table.host may change later.
    CU_CHECK(cudaMemcpyAsync(table.dev, table.host, bytes, cudaMemcpyHostToDevice, cuda_ctx_get()->stream));
    table.key = chunks;
    table.nchunks = nchunks;
    table.ntensors = ntensors;
    return table.dev;
}

// LAMB's host ratios [ntensors] -> the device, on the stream. Through a pageable copy: the
// caller's array may be managed memory (the arena), which a truly asynchronous copy would
// read after the caller has moved on; a pageable source is staged before the call returns.
static const double *ratio_upload(const double *ratio) {
    const size_t bytes = sizeof(double) * (size_t)table.ntensors;
    memcpy(table.ratio_host, ratio, bytes);
    CU_CHECK(cudaMemcpyAsync(table.ratio, table.ratio_host, bytes, cudaMemcpyHostToDevice, cuda_ctx_get()->stream));
    return table.ratio;
}

// ---- reductions ----------------------------------------------------------------------------------

// The sums of v[0, K) over the block (blockDim a multiple of 32), valid in thread 0: a shuffle
// tree per warp, then one over the warps. Fixed order, so repeatable. Every thread must call it.
template <int K>
__device__ static void block_sums(double (&v)[K]) {
    __shared__ double part[K][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int k = 0; k < K; k++) {
        for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
        if (lane == 0) part[k][warp] = v[k];
    }
    __syncthreads();
    if (warp == 0)
        for (int k = 0; k < K; k++) {
            v[k] = lane < warps ? part[k][lane] : 0.0;
            for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
        }
}

// The device partials dev[count] -> the caller's host part[count], waiting for the kernel.
static void partials_download(const double *dev, double *mirror, double *part, int64_t count) {
    cudaStream_t st = cuda_ctx_get()->stream;
    CU_CHECK(cudaMemcpyAsync(mirror, dev, sizeof(double) * (size_t)count, cudaMemcpyDeviceToHost, st));
    CU_CHECK(cudaStreamSynchronize(st));
    memcpy(part, mirror, sizeof(double) * (size_t)count);
}

// ---- sum of squares ------------------------------------------------------------------------------

// x over chunks[nchunks] -> part[c] = sum of x^2 over chunk c (double); one block per chunk
__global__ static void chunk_sumsq_k(const gl_chunk *chunks, const float *x, double *part) {
    const gl_chunk ch = chunks[blockIdx.x];
    const float *p = x + ch.offset;
    double s[1] = {0.0};
    for (int64_t i = threadIdx.x; i < ch.len; i += blockDim.x) s[0] += (double)p[i] * (double)p[i];
    block_sums<1>(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s[0];
}

void cuda_chunk_sumsq(int nchunks, const gl_chunk *chunks, const float *x, double *part) {
    if (nchunks <= 0) return;
    const gl_chunk *dch = table_on_device(nchunks, chunks);
    double *mirror;
    double *dpart = cuda_partials(nchunks, &mirror);
    chunk_sumsq_k<<<nchunks, GL_BLOCK, 0, cuda_ctx_get()->stream>>>(dch, x, dpart);
    CU_LAUNCHED();
    partials_download(dpart, mirror, part, nchunks);
}

// ---- the update rules ----------------------------------------------------------------------------

// m_hat / (sqrt(v_hat) + eps) from the updated moments (adam.c's adam_direction)
__device__ static inline float adam_direction(const gl_optim_args &k, float m, float v) {
    return __fdiv_rn(__fmul_rn(m, k.inv_bc1), __fadd_rn(__fmul_rn(__fsqrt_rn(v), k.inv_sqrt_bc2), k.eps));
}

enum { SGD_PLAIN, SGD_MOMENTUM, SGD_NESTEROV };

// w, g, vel over chunks (one block each) as sgd.c: d = g + wd w; v = m v + d;
// w -= lr (nesterov ? d + m v : v), or w -= lr d without momentum (vel unused)
template <int V>
__global__ static void sgd_k(const gl_chunk *chunks, gl_optim_args a, float *w, float *g, float *vel) {
    const gl_chunk ch = chunks[blockIdx.x];
    const float wdc = ch.plain ? 0.0f : a.weight_decay;
    const int64_t end = ch.offset + ch.len;
    for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
        float gi = g[i];
        if (a.clip) g[i] = gi = __fmul_rn(gi, a.coef);
        const float d = __fadd_rn(gi, __fmul_rn(wdc, w[i]));
        if (V == SGD_PLAIN) {
            w[i] = __fsub_rn(w[i], __fmul_rn(a.lr, d));
        } else {
            const float v = __fadd_rn(__fmul_rn(a.momentum, vel[i]), d);
            vel[i] = v;
            w[i] = __fsub_rn(w[i], __fmul_rn(a.lr, V == SGD_NESTEROV ? __fadd_rn(d, __fmul_rn(a.momentum, v)) : v));
        }
    }
}

// The moment updates of adam.c: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g g (g clipped first)
__device__ static inline void adam_moments(const gl_optim_args &a, int64_t i, float *g, float *m, float *v,
                                           float *mi, float *vi) {
    float gi = g[i];
    if (a.clip) g[i] = gi = __fmul_rn(gi, a.coef);
    *mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(a.one_b1, gi));
    *vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(a.one_b2, gi), gi));
    m[i] = *mi;
    v[i] = *vi;
}

// w, g, m, v over chunks as adam.c's AdamW: w *= 1 - lr wd (not for plain chunks); w -= lr dir
__global__ static void adamw_k(const gl_chunk *chunks, gl_optim_args a, float *w, float *g, float *m, float *v) {
    const gl_chunk ch = chunks[blockIdx.x];
    const float keep = ch.plain ? 1.0f : a.decayed;
    const int64_t end = ch.offset + ch.len;
    for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
        float mi, vi;
        adam_moments(a, i, g, m, v, &mi, &vi);
        const float wi = __fmul_rn(w[i], keep);
        w[i] = __fsub_rn(wi, __fmul_rn(a.lr, adam_direction(a, mi, vi)));
    }
}

// LAMB phase 1: the moments, and per chunk c (one block each) part[c] = sum w^2 and
// part[nchunks + c] = sum u^2 with u = dir + wd w (w not yet updated)
__global__ static void lamb_moments_k(const gl_chunk *chunks, int nchunks, gl_optim_args a, const float *w, float *g,
                                      float *m, float *v, double *part) {
    const gl_chunk ch = chunks[blockIdx.x];
    const float wdc = ch.plain ? 0.0f : a.weight_decay;
    const int64_t end = ch.offset + ch.len;
    double s[2] = {0.0, 0.0};
    for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
        float mi, vi;
        adam_moments(a, i, g, m, v, &mi, &vi);
        const float wi = w[i];
        const float u = __fadd_rn(adam_direction(a, mi, vi), __fmul_rn(wdc, wi));
        s[0] += (double)wi * (double)wi;
        s[1] += (double)u * (double)u;
    }
    block_sums<2>(s);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = s[0];
        part[nchunks + blockIdx.x] = s[1];
    }
}

// LAMB phase 2: w -= (lr * ratio[tensor]) u, u recomputed from the stored moments as in phase 1
__global__ static void lamb_apply_k(const gl_chunk *chunks, gl_optim_args a, const double *ratio, float *w,
                                    const float *m, const float *v) {
    const gl_chunk ch = chunks[blockIdx.x];
    const float step = (float)((double)a.lr * ratio[ch.tensor]);
    const float wdc = ch.plain ? 0.0f : a.weight_decay;
    const int64_t end = ch.offset + ch.len;
    for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
        const float wi = w[i];
        const float u = __fadd_rn(adam_direction(a, m[i], v[i]), __fmul_rn(wdc, wi));
        w[i] = __fsub_rn(wi, __fmul_rn(step, u));
    }
}

// One rule's device update (backend.h's optim_update): dch is the chunk table on the device. A
// rule's is cuda_optim_<name> (GL_OPTIM_RULES, backend_types.h), here or in a .cu file of its own.
typedef void cuda_rule_fn(int nchunks, const gl_chunk *dch, const gl_optim_args &k, float *w, float *g, float *s0,
                          float *s1, double *part, const double *ratio, cudaStream_t st);
#define CUDA_RULE_DECLARE_(E, name) cuda_rule_fn cuda_optim_##name;
GL_OPTIM_RULES(CUDA_RULE_DECLARE_)
#undef CUDA_RULE_DECLARE_

void cuda_optim_sgd(int nchunks, const gl_chunk *dch, const gl_optim_args &k, float *w, float *g, float *s0,
                    float *s1, double *part, const double *ratio, cudaStream_t st) {
    (void)s1, (void)part, (void)ratio;
    if (!s0)
        sgd_k<SGD_PLAIN><<<nchunks, GL_BLOCK, 0, st>>>(dch, k, w, g, s0);
    else if (!k.nesterov)
        sgd_k<SGD_MOMENTUM><<<nchunks, GL_BLOCK, 0, st>>>(dch, k, w, g, s0);
    else
        sgd_k<SGD_NESTEROV><<<nchunks, GL_BLOCK, 0, st>>>(dch, k, w, g, s0);
    CU_LAUNCHED();
}

void cuda_optim_adamw(int nchunks, const gl_chunk *dch, const gl_optim_args &k, float *w, float *g, float *s0,
                      float *s1, double *part, const double *ratio, cudaStream_t st) {
    (void)part, (void)ratio;
    adamw_k<<<nchunks, GL_BLOCK, 0, st>>>(dch, k, w, g, s0, s1);
    CU_LAUNCHED();
}

void cuda_optim_lamb(int nchunks, const gl_chunk *dch, const gl_optim_args &k, float *w, float *g, float *s0,
                     float *s1, double *part, const double *ratio, cudaStream_t st) {
    if (!ratio) {  // phase 1
        GL_CHECK(part != NULL, "LAMB phase 1 returns its sums in part");
        double *mirror;
        double *dpart = cuda_partials(2 * (int64_t)nchunks, &mirror);
        lamb_moments_k<<<nchunks, GL_BLOCK, 0, st>>>(dch, nchunks, k, w, g, s0, s1, dpart);
        CU_LAUNCHED();
        partials_download(dpart, mirror, part, 2 * (int64_t)nchunks);
    } else {  // phase 2
        const double *dratio = ratio_upload(ratio);
        lamb_apply_k<<<nchunks, GL_BLOCK, 0, st>>>(dch, k, dratio, w, s0, s1);
        CU_LAUNCHED();
    }
}

// The rules by OPT_* value, from the registry's list (backend_types.h): cuda_optim_<name> each.
#define CUDA_RULE_(E, name) cuda_optim_##name,
static cuda_rule_fn *const cuda_rules[OPT_COUNT] = {GL_OPTIM_RULES(CUDA_RULE_)};
#undef CUDA_RULE_

void cuda_optim_update(int nchunks, const gl_chunk *chunks, const gl_optim_args *a, float *w, float *g, float *s0,
                       float *s1, double *part, const double *ratio) {
    if (nchunks <= 0) return;
    GL_CHECK(a->rule >= 0 && a->rule < OPT_COUNT, "unknown optimizer rule");
    const gl_chunk *dch = table_on_device(nchunks, chunks);
    const gl_optim_args k = *a;
    cuda_rules[k.rule](nchunks, dch, k, w, g, s0, s1, part, ratio, cuda_ctx_get()->stream);
}
