// cuda_attention.cu: backend.h's attention_forward and attention_backward on the GPU, fp32, the
// contract of cpu_attention.c. Plain and deterministic: each thread owns one output row and sums
// its terms in key (or query) order; blocks only share tiles of K and V (or Q and dY) loaded into
// shared memory, so no T x T buffer and no atomics exist.
//   forward:  a block per (sample, head, tile of AT_ROWS queries); a thread per query runs the
//             online softmax over key tiles (scores of a tile in local memory, one rescale of its
//             output row per tile), y row kept in y itself, lse = m + log(l) at the end.
//   backward: D = rowsum(dy * y) into work; dQ by a block per query tile (thread per query, over
//             keys); dK and dV by a block per key tile (thread per key, over queries), each
//             recomputing p = e^(q.k scale - lse).
// Dropout draws rng_mix_uniform(key, base + ((n H + h) T + i) T + j), the CPU's rng_uniform; in a
// recorded pass (cuda_graph.cu) the step is read on the device, as cuda_elem.cu's dropout does.
// fp32 (and tf32) runs, and attention dropout, take these kernels; bf16 and fp16 take the tensor
// cores' (cuda_attention_tc.cu) where it applies.
#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"
#include "galley/rng.h"
#include "galley/rng_mix.h"

#define AT_ROWS 64       // threads (query or key rows) per block
#define AT_TILE_MAX 32   // rows of the other side per shared tile (fewer for a wide head)
#define AT_SMEM 49152    // shared bytes a block may take without opting in

// What every kernel takes: sizes, scale, mask, dropout.
struct at_args {
    int64_t t, h, e;
    float scale, rate, keep;  // keep = 1 / (1 - rate)
    int causal, tile;         // tile: rows per shared tile
    uint64_t key, seed, base;
    const uint64_t *step_dev;  // recorded pass: the key is made from *step_dev on the device
};

__device__ static inline uint64_t at_key(const at_args &a) {
    return a.step_dev ? rng_mix_key(a.seed, RNG_DROPOUT, *a.step_dev) : a.key;
}

// The dropout factor of (pair, i, j): 0 or 1 / (1 - rate); 1 without dropout.
__device__ static inline float at_keep(const at_args &a, uint64_t key, int64_t pair, int64_t i, int64_t j) {
    if (a.rate <= 0.0f) return 1.0f;
    const uint64_t idx = a.base + (uint64_t)((pair * a.t + i) * a.t + j);
    return rng_mix_uniform(key, idx) < a.rate ? 0.0f : a.keep;
}

// Rows j0 .. j0+cnt-1 of a head's q (part 0), k (1) or v (2) in qkv, or of y/dy (part -1), into
// s[cnt][E] by the whole block.
__device__ static void at_load(const at_args &a, const float *src, int64_t n, int64_t hh, int part, int64_t j0,
                               int cnt, float *s) {
    for (int64_t x = threadIdx.x; x < (int64_t)cnt * a.e; x += blockDim.x) {
        const int64_t r = x / a.e, f = x % a.e, tok = n * a.t + j0 + r;
        s[x] = part < 0 ? src[(tok * a.h + hh) * a.e + f] : src[((tok * 3 + part) * a.h + hh) * a.e + f];
    }
}

__device__ static inline float at_dot(const float *x, const float *y, int64_t e) {
    float s = 0.0f;
    for (int64_t f = 0; f < e; f++) s += x[f] * y[f];
    return s;
}

// grid (N H pairs, query tiles), AT_ROWS threads; shared: K and V tiles [tile][E].
__global__ static void at_forward_k(at_args a, const float *qkv, float *y, float *lse) {
    extern __shared__ float sm[];
    float *ks = sm, *vs = sm + (int64_t)a.tile * a.e;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, i = (int64_t)blockIdx.y * AT_ROWS + threadIdx.x;
    const bool live = i < a.t;
    const uint64_t key = at_key(a);
    const float *q = qkv + ((n * a.t + (live ? i : 0)) * 3 * a.h + hh) * a.e;
    float *yr = y + ((n * a.t + (live ? i : 0)) * a.h + hh) * a.e;
    if (live)
        for (int64_t f = 0; f < a.e; f++) yr[f] = 0.0f;
    float m = -INFINITY, l = 0.0f, sc[AT_TILE_MAX];
    const int64_t last = blockIdx.y * (int64_t)AT_ROWS + AT_ROWS, jend = a.causal && last < a.t ? last : a.t;
    for (int64_t j0 = 0; j0 < jend; j0 += a.tile) {
        const int cnt = (int)(a.t - j0 < a.tile ? a.t - j0 : a.tile);
        __syncthreads();
        at_load(a, qkv, n, hh, 1, j0, cnt, ks);
        at_load(a, qkv, n, hh, 2, j0, cnt, vs);
        __syncthreads();
        if (!live) continue;
        const int nv = !a.causal ? cnt : i + 1 - j0 <= 0 ? 0 : i + 1 - j0 < cnt ? (int)(i + 1 - j0) : cnt;
        if (nv == 0) continue;
        float mx = m;
        for (int j = 0; j < nv; j++) {
            sc[j] = at_dot(q, ks + (int64_t)j * a.e, a.e) * a.scale;
            mx = fmaxf(mx, sc[j]);
        }
        const float alpha = m == -INFINITY ? 0.0f : expf(m - mx);
        l *= alpha;
        for (int64_t f = 0; f < a.e; f++) yr[f] *= alpha;
        for (int j = 0; j < nv; j++) {
            const float p = expf(sc[j] - mx), pk = p * at_keep(a, key, pair, i, j0 + j);
            l += p;
            const float *v = vs + (int64_t)j * a.e;
            for (int64_t f = 0; f < a.e; f++) yr[f] += pk * v[f];
        }
        m = mx;
    }
    if (!live) return;
    const float inv = 1.0f / l;
    for (int64_t f = 0; f < a.e; f++) yr[f] *= inv;
    lse[pair * a.t + i] = m + logf(l);
}

// d[N, H, T] = rowsum(dy * y), a thread per row.
__global__ static void at_rowdot_k(int64_t n, int64_t t, int64_t h, int64_t e, const float *y, const float *dy,
                                   float *d) {
    const int64_t rows = n * h * t, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += stride) {
        const int64_t s = r / (h * t), hh = r / t % h, i = r % t, o = ((s * t + i) * h + hh) * e;
        d[r] = at_dot(y + o, dy + o, e);
    }
}

// dQ: grid (N H pairs, query tiles), a thread per query; shared: K and V tiles [tile][E].
__global__ static void at_dq_k(at_args a, const float *qkv, const float *dy, const float *lse, const float *d,
                               float *dqkv) {
    extern __shared__ float sm[];
    float *ks = sm, *vs = sm + (int64_t)a.tile * a.e;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, i = (int64_t)blockIdx.y * AT_ROWS + threadIdx.x;
    const bool live = i < a.t;
    const uint64_t key = at_key(a);
    const int64_t row = ((n * a.t + (live ? i : 0)) * 3 * a.h + hh) * a.e;
    const float *q = qkv + row, *dyr = dy + ((n * a.t + (live ? i : 0)) * a.h + hh) * a.e;
    float *dq = dqkv + row;
    const float li = live ? lse[pair * a.t + i] : 0.0f, di = live ? d[pair * a.t + i] : 0.0f;
    if (live)
        for (int64_t f = 0; f < a.e; f++) dq[f] = 0.0f;
    const int64_t last = blockIdx.y * (int64_t)AT_ROWS + AT_ROWS, jend = a.causal && last < a.t ? last : a.t;
    for (int64_t j0 = 0; j0 < jend; j0 += a.tile) {
        const int cnt = (int)(a.t - j0 < a.tile ? a.t - j0 : a.tile);
        __syncthreads();
        at_load(a, qkv, n, hh, 1, j0, cnt, ks);
        at_load(a, qkv, n, hh, 2, j0, cnt, vs);
        __syncthreads();
        if (!live) continue;
        for (int j = 0; j < cnt && (!a.causal || j0 + j <= i); j++) {
            const float *k = ks + (int64_t)j * a.e;
            const float p = expf(at_dot(q, k, a.e) * a.scale - li), kp = at_keep(a, key, pair, i, j0 + j);
            const float ds = p * (at_dot(dyr, vs + (int64_t)j * a.e, a.e) * kp - di) * a.scale;
            for (int64_t f = 0; f < a.e; f++) dq[f] += ds * k[f];
        }
    }
}

// dK, dV: grid (N H pairs, key tiles), a thread per key; shared: Q and dY tiles [tile][E], their lse and D.
__global__ static void at_dkv_k(at_args a, const float *qkv, const float *dy, const float *lse, const float *d,
                                float *dqkv) {
    extern __shared__ float sm[];
    float *qs = sm, *dys = sm + (int64_t)a.tile * a.e, *ls = dys + (int64_t)a.tile * a.e, *ds_ = ls + a.tile;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, j = (int64_t)blockIdx.y * AT_ROWS + threadIdx.x;
    const bool live = j < a.t;
    const uint64_t key = at_key(a);
    const int64_t row = ((n * a.t + (live ? j : 0)) * 3 * a.h + hh) * a.e;
    const float *k = qkv + row + a.h * a.e, *v = qkv + row + 2 * a.h * a.e;
    float *dk = dqkv + row + a.h * a.e, *dv = dqkv + row + 2 * a.h * a.e;
    if (live)
        for (int64_t f = 0; f < a.e; f++) dk[f] = 0.0f, dv[f] = 0.0f;
    const int64_t first = a.causal ? blockIdx.y * (int64_t)AT_ROWS / a.tile * a.tile : 0;
    for (int64_t i0 = first; i0 < a.t; i0 += a.tile) {
        const int cnt = (int)(a.t - i0 < a.tile ? a.t - i0 : a.tile);
        __syncthreads();
        at_load(a, qkv, n, hh, 0, i0, cnt, qs);
        at_load(a, dy, n, hh, -1, i0, cnt, dys);
        for (int r = threadIdx.x; r < cnt; r += blockDim.x)
            ls[r] = lse[pair * a.t + i0 + r], ds_[r] = d[pair * a.t + i0 + r];
        __syncthreads();
        if (!live) continue;
        for (int r = 0; r < cnt; r++) {
            if (a.causal && i0 + r < j) continue;
            const float *q = qs + (int64_t)r * a.e, *dyr = dys + (int64_t)r * a.e;
            const float p = expf(at_dot(q, k, a.e) * a.scale - ls[r]), kp = at_keep(a, key, pair, i0 + r, j);
            const float ds = p * (at_dot(dyr, v, a.e) * kp - ds_[r]) * a.scale, pk = p * kp;
            for (int64_t f = 0; f < a.e; f++) dv[f] += pk * dyr[f], dk[f] += ds * q[f];
        }
    }
}

// Shared rows per tile for head width e: at most AT_TILE_MAX, two [tile][E] tiles (+ 2 floats a
// row) within AT_SMEM.
static int at_tile(int64_t e) {
    int64_t t = AT_SMEM / (int64_t)sizeof(float) / (2 * e + 2);
    GL_CHECK(t >= 1, "attention: a head wider than 6143 features does not fit the CUDA kernel's shared tiles");
    return (int)(t < AT_TILE_MAX ? t : AT_TILE_MAX);
}

// The kernels' grid: (sample, head) pairs in x (up to 2^31 - 1), row tiles in y (up to 65535): a
// batch or a head count above 65535 fits, as it would not in y or z.
static dim3 at_grid(int64_t n, int64_t t, int64_t h) {
    const int64_t pairs = n * h, tiles = (t + AT_ROWS - 1) / AT_ROWS;
    GL_CHECK(pairs <= 0x7fffffff && tiles <= 65535,
             "attention: at most 2^31 - 1 (sample, head) pairs and 65535 x 64 tokens in the CUDA kernels");
    return dim3((unsigned)pairs, (unsigned)tiles, 1);
}

static at_args at_make(int64_t t, int64_t h, int64_t e, float scale, int causal, float rate, uint64_t seed,
                       uint64_t step, uint64_t base) {
    cuda_ctx *c = cuda_ctx_get();
    at_args a = {t, h, e, scale, rate, rate > 0.0f ? 1.0f / (1.0f - rate) : 1.0f, causal, at_tile(e),
                 rng_mix_key(seed, RNG_DROPOUT, step), seed, base, NULL};
    if (c->capturing && rate > 0.0f) a.step_dev = c->step_dev;
    return a;
}

// galley's forward: the tensor-core kernels where they apply, else the fp32 ones.
static void at_forward(const sdpa_call *c) {
    if (cuda_attention_tc_forward(c->n, c->t, c->h, c->e, c->scale, c->causal, c->rate, c->qkv, c->y, c->lse)) return;
    const at_args a = at_make(c->t, c->h, c->e, c->scale, c->causal, c->rate, c->seed, c->step, c->base);
    const size_t smem = sizeof(float) * (size_t)(2 * a.tile * c->e);
    at_forward_k<<<at_grid(c->n, c->t, c->h), AT_ROWS, smem, cuda_ctx_get()->stream>>>(a, c->qkv, c->y, c->lse);
    CU_LAUNCHED();
}

// galley's backward: D = rowsum(dy * y) into work, then the tensor-core kernels or the fp32 ones.
static void at_backward(const sdpa_call *c) {
    cudaStream_t st = cuda_ctx_get()->stream;
    const int64_t n = c->n, t = c->t, h = c->h, e = c->e;
    at_rowdot_k<<<cuda_grid(n * h * t, GL_BLOCK), GL_BLOCK, 0, st>>>(n, t, h, e, c->y, c->dy, c->work);
    CU_LAUNCHED();
    if (cuda_attention_tc_backward(n, t, h, e, c->scale, c->causal, c->rate, c->qkv, c->lse, c->dy, c->work, c->dqkv))
        return;
    const at_args a = at_make(t, h, e, c->scale, c->causal, c->rate, c->seed, c->step, c->base);
    const dim3 grid = at_grid(n, t, h);
    at_dq_k<<<grid, AT_ROWS, sizeof(float) * (size_t)(2 * a.tile * e), st>>>(a, c->qkv, c->dy, c->lse, c->work,
                                                                              c->dqkv);
    CU_LAUNCHED();
    at_dkv_k<<<grid, AT_ROWS, sizeof(float) * (size_t)(2 * a.tile * e + 2 * a.tile), st>>>(a, c->qkv, c->dy, c->lse,
                                                                                           c->work, c->dqkv);
    CU_LAUNCHED();
}

// qkv[N, T, 3, H, E] -> y[N, T, H, E], lse[N, H, T] (backend.h): cuDNN's fused attention or
// galley's kernels, as cuda_sdpa.cu chooses.
void cuda_attention_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                            uint64_t seed, uint64_t step, uint64_t base, const float *qkv, float *y, float *lse) {
    if (n <= 0 || t <= 0) return;
    const sdpa_call c = {n, t, h, e, scale, rate, causal, seed, step, base, qkv, NULL, y, lse, NULL, NULL};
    if (!cuda_sdpa_run(0, &c, at_forward)) at_forward(&c);
}

// dqkv[N, T, 3, H, E] (overwritten) from dy[N, T, H, E]; work [N, H, T] holds D (backend.h)
void cuda_attention_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                             uint64_t seed, uint64_t step, uint64_t base, const float *qkv, const float *y,
                             const float *lse, const float *dy, float *dqkv, float *work) {
    if (n <= 0 || t <= 0) return;
    const sdpa_call c = {n, t, h, e, scale, rate, causal, seed, step, base, qkv, dy, (float *)y, (float *)lse,
                         dqkv, work};
    if (!cuda_sdpa_run(1, &c, at_backward)) at_backward(&c);
}
