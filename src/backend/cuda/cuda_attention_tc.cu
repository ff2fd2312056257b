// cuda_attention_tc.cu: backend.h's attention on tensor cores, for train.precision bf16 and fp16
// (cuda_attention.cu calls it first and runs its fp32 kernels where this declines).
//
// Why by hand: galley's fp32 kernels (one thread per row, no tensor cores) kept the tutorial ViT
// (4,050 tokens, head width 48) under 2 samples/s on an H200 on 2026-12-04, where PyTorch's fp32
// eager ran 18.4, and cuDNN's fused attention, a graph of a dozen backend descriptors, was not
// built yet. It is now (cuda_sdpa_graph.cu, cuda_sdpa.cu: GALLEY_ATTENTION_KERNEL=cudnn or
// measure), but has not run on a GPU: this kernel, which has, stays the default until a GPU run
// measures the two.
//
// FlashAttention-2's tiling with WMMA 16x16x16 fragments (16-bit operands, fp32 accumulation):
//   forward:  a block of 4 warps per (sample, head, 64 queries); each warp owns 16 query rows.
//             Per tile of 64 keys: S = Q K^T (tensor cores, fp32) -> online softmax by two lanes
//             a row (fp32, scaled scores) -> P in 16 bits -> O = O * alpha + P V, O kept in
//             shared memory in fp32. y = O / l, lse = m + log(l) as the fp32 kernels give them.
//   backward: D = rowsum(dy * y) (cuda_attention.cu's kernel), then two kernels with no atomics,
//             so results repeat bit for bit: dK, dV by a block per 64 keys looping over query
//             tiles (S^T = K Q^T, dP^T = V dY^T, P = e^(S scale - lse), dS = P (dP - D) scale,
//             dV += P^T dY, dK += dS^T Q, accumulators in registers), and dQ by a block per 64
//             queries looping over key tiles (dQ += dS K).
// Inputs and outputs stay fp32 in memory (the layer's contract); tiles are rounded to 16 bits
// as they are loaded into shared memory. Taken when: precision bf16 or fp16, no attention
// dropout (its draws are the fp32 kernels'), a head width of 32, 48, 64, 96 or 128, and 16-byte
// aligned buffers, where cuDNN's fused attention does not run it instead (cuda_sdpa.cu chooses).
// GALLEY_ATTENTION_KERNEL=fp32 turns it off (to compare the two).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"

using namespace nvcuda;

#define TC_ROWS 64  // rows of a block's own side (4 warps x 16) and of each tile of the other side
#define TC_THREADS 128

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_acc;

struct tc_args {
    int64_t t, h;
    float scale;
    int causal;
};

template <typename T> __device__ inline T tc_round(float x);
template <> __device__ inline __half tc_round<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 tc_round<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Rows r0 .. r0+63 of head hh of sample n, rounded to T, into s[64][E]; rows at or past t are 0.
// part 0, 1, 2: q, k or v of qkv[N, T, 3, H, E]; part -1: a [N, T, H, E] tensor (y, dy).
template <typename T, int E>
__device__ static void tc_load(const float *src, const tc_args &a, int64_t n, int64_t hh, int part, int64_t r0,
                               T *s) {
    constexpr int Q = E / 4;  // float4s a row
    for (int x = threadIdx.x; x < TC_ROWS * Q; x += TC_THREADS) {
        const int r = x / Q, c = (x % Q) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < a.t) {
            const int64_t row = n * a.t + r0 + r;
            const int64_t at = part < 0 ? (row * a.h + hh) * E + c : ((row * 3 + part) * a.h + hh) * E + c;
            v = *(const float4 *)(src + at);
        }
        T *d = s + r * E + c;
        d[0] = tc_round<T>(v.x), d[1] = tc_round<T>(v.y), d[2] = tc_round<T>(v.z), d[3] = tc_round<T>(v.w);
    }
}

// One warp: out[16][64] (fp32, row-major) = a[16][E] b[64][E]^T, both row-major in shared memory.
template <typename T, int E>
__device__ static void tc_abt(const T *a, const T *b, float *out) {
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        tc_acc c;
        wmma::fill_fragment(c, 0.0f);
#pragma unroll
        for (int kt = 0; kt < E / 16; kt++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;  // b's rows are its columns
            wmma::load_matrix_sync(fa, a + kt * 16, E);
            wmma::load_matrix_sync(fb, b + nt * 16 * E + kt * 16, E);
            wmma::mma_sync(c, fa, fb, c);
        }
        wmma::store_matrix_sync(out + nt * 16, c, 64, wmma::mem_row_major);
    }
}

// One warp: acc[16][E] += p[16][64] b[64][E] (p and b row-major in shared memory).
template <typename T, int E>
__device__ static void tc_apb(const T *p, const T *b, tc_acc (&acc)[E / 16]) {
#pragma unroll
    for (int kt = 0; kt < 4; kt++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, p + kt * 16, 64);
#pragma unroll
        for (int ft = 0; ft < E / 16; ft++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fb, b + kt * 16 * E + ft * 16, E);
            wmma::mma_sync(acc[ft], fa, fb, acc[ft]);
        }
    }
}

// One warp: its 16 rows of acc (through stage[16][E], fp32) into dst rows r0 .. r0+15 (those
// below t) of part (0, 1, 2 of a qkv-shaped tensor) for head hh of sample n.
template <int E>
__device__ static void tc_store_rows(tc_acc (&acc)[E / 16], float *stage, const tc_args &a, int64_t n,
                                     int64_t hh, int part, int64_t r0, float *dst) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int ft = 0; ft < E / 16; ft++) wmma::store_matrix_sync(stage + ft * 16, acc[ft], E, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, half = lane % 2;
    if (r0 + r < a.t) {
        float *o = dst + (((n * a.t + r0 + r) * 3 + part) * a.h + hh) * E + half * (E / 2);
        const float *s = stage + r * E + half * (E / 2);
        for (int f = 0; f < E / 2; f++) o[f] = s[f];
    }
    __syncwarp();
}

// Shared bytes of each kernel (tiles of T, then fp32 scratch 128-byte aligned by construction).
template <typename T, int E> static constexpr size_t tc_fwd_smem() {
    return 3 * TC_ROWS * E * sizeof(T) + 4 * (16 * 64 + 16 * E) * sizeof(float) + 4 * 16 * 64 * sizeof(T);
}
template <typename T, int E> static constexpr size_t tc_bwd_smem() {
    return 4 * TC_ROWS * E * sizeof(T) + 2 * TC_ROWS * sizeof(float) + 4 * 2 * 16 * 64 * sizeof(float) +
           4 * 2 * 16 * 64 * sizeof(T);
}

// grid (N H pairs, query tiles of 64), 128 threads. shared: Q, K, V tiles [64][E] (T); per warp
// S [16][64] and O [16][E] (fp32), P [16][64] (T).
template <typename T, int E>
__global__ static void __launch_bounds__(TC_THREADS) tc_forward_k(tc_args a, const float *qkv, float *y, float *lse) {
    extern __shared__ __align__(128) unsigned char tc_sm[];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    T *qs = (T *)tc_sm, *ks = qs + TC_ROWS * E, *vs = ks + TC_ROWS * E;
    float *sw = (float *)(vs + TC_ROWS * E) + w * 16 * 64, *ow = (float *)(vs + TC_ROWS * E) + 4 * 16 * 64 + w * 16 * E;
    T *pw = (T *)((float *)(vs + TC_ROWS * E) + 4 * 16 * 64 + 4 * 16 * E) + w * 16 * 64;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, i0 = (int64_t)blockIdx.y * TC_ROWS;
    const int64_t i = i0 + w * 16 + r;  // this lane's query row (two lanes a row, half the columns each)
    tc_load<T, E>(qkv, a, n, hh, 0, i0, qs);
    for (int x = lane; x < 16 * E; x += 32) ow[x] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t jend = a.causal && i0 + TC_ROWS < a.t ? i0 + TC_ROWS : a.t;
    for (int64_t j0 = 0; j0 < jend; j0 += TC_ROWS) {
        __syncthreads();  // the last tile's readers are done
        tc_load<T, E>(qkv, a, n, hh, 1, j0, ks);
        tc_load<T, E>(qkv, a, n, hh, 2, j0, vs);
        __syncthreads();
        tc_abt<T, E>(qs + w * 16 * E, ks, sw);
        __syncwarp();
        float *sr = sw + r * 64 + half * 32, mx = -INFINITY;
        for (int c = 0; c < 32; c++) {
            const int64_t j = j0 + half * 32 + c;
            sr[c] = j < a.t && (!a.causal || j <= i) ? sr[c] * a.scale : -INFINITY;
            mx = fmaxf(mx, sr[c]);
        }
        const float mnew = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        const float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);  // 0 while m is -inf
        float sum = 0.0f;
        T *pr = pw + r * 64 + half * 32;
        for (int c = 0; c < 32; c++) {
            const float p = mnew == -INFINITY ? 0.0f : expf(sr[c] - mnew);
            sum += p;
            pr[c] = tc_round<T>(p);
        }
        l = l * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
        m = mnew;
        float *orow = ow + r * E + half * (E / 2);
        for (int f = 0; f < E / 2; f++) orow[f] *= alpha;
        __syncwarp();
        tc_acc acc[E / 16];
#pragma unroll
        for (int ft = 0; ft < E / 16; ft++) wmma::load_matrix_sync(acc[ft], ow + ft * 16, E, wmma::mem_row_major);
        tc_apb<T, E>(pw, vs, acc);
#pragma unroll
        for (int ft = 0; ft < E / 16; ft++) wmma::store_matrix_sync(ow + ft * 16, acc[ft], E, wmma::mem_row_major);
        __syncwarp();
    }
    if (i >= a.t) return;
    const float inv = 1.0f / l, *orow = ow + r * E + half * (E / 2);
    float *yr = y + ((n * a.t + i) * a.h + hh) * E + half * (E / 2);
    for (int f = 0; f < E / 2; f++) yr[f] = orow[f] * inv;
    if (half == 0) lse[pair * a.t + i] = m + logf(l);
}

// The backward kernels' per-tile work for one warp: P and dS [16][64] in T from the scores
// sf = A B^T and dpf = C D^T (fp32, [16][64]); rows are the warp's, columns the tile's.
// row_q: rows are queries (dQ kernel) or keys (dK/dV kernel); the mask and the row statistics
// (lse, D) follow. ls/dd: lse and D of the block's queries (dQ: rows; dK/dV: columns).
struct tc_tile {
    int64_t row0, col0;  // first row and column of the warp's [16][64] in token indices
    bool row_q;
};
template <typename T>
__device__ static void tc_probs(const tc_args &a, const tc_tile &tt, const float *sf, const float *dpf,
                                const float *ls, const float *dd, T *pt, T *dst) {
    const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    const int64_t rowtok = tt.row0 + r;
    for (int c = half * 32; c < half * 32 + 32; c++) {
        const int64_t coltok = tt.col0 + c, qi = tt.row_q ? rowtok : coltok, kj = tt.row_q ? coltok : rowtok;
        const int qs = tt.row_q ? (int)(qi % TC_ROWS) : c;  // the query's index in ls and dd
        const bool ok = qi < a.t && kj < a.t && (!a.causal || kj <= qi);
        const float p = ok ? expf(sf[r * 64 + c] * a.scale - ls[qs]) : 0.0f;
        const float ds = p * (dpf[r * 64 + c] - dd[qs]) * a.scale;
        if (pt) pt[r * 64 + c] = tc_round<T>(p);
        dst[r * 64 + c] = tc_round<T>(ds);
    }
}

// grid (N H pairs, key tiles of 64), 128 threads; each warp owns 16 keys. shared: K, V (the
// block's keys), Q, dY (the query tile) [64][E] (T); lse, D [64]; per warp S, dP [16][64]
// (fp32), P, dS [16][64] (T).
template <typename T, int E>
__global__ static void __launch_bounds__(TC_THREADS) tc_dkv_k(tc_args a, const float *qkv, const float *dy,
                                                               const float *lse, const float *d, float *dqkv) {
    extern __shared__ __align__(128) unsigned char tc_sm[];
    const int w = threadIdx.x / 32;
    T *ks = (T *)tc_sm, *vs = ks + TC_ROWS * E, *qs = vs + TC_ROWS * E, *dys = qs + TC_ROWS * E;
    float *ls = (float *)(dys + TC_ROWS * E), *dd = ls + TC_ROWS;
    float *sf = dd + TC_ROWS + w * 2 * 16 * 64, *dpf = sf + 16 * 64;  // [16][64] each, or the [16][E] stage
    T *pt = (T *)(dd + TC_ROWS + 4 * 2 * 16 * 64) + w * 2 * 16 * 64, *dst = pt + 16 * 64;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, j0 = (int64_t)blockIdx.y * TC_ROWS;
    tc_load<T, E>(qkv, a, n, hh, 1, j0, ks);
    tc_load<T, E>(qkv, a, n, hh, 2, j0, vs);
    tc_acc dk[E / 16], dv[E / 16];
#pragma unroll
    for (int ft = 0; ft < E / 16; ft++) wmma::fill_fragment(dk[ft], 0.0f), wmma::fill_fragment(dv[ft], 0.0f);
    for (int64_t i0 = a.causal ? j0 : 0; i0 < a.t; i0 += TC_ROWS) {  // causal: queries before j0 see none
        __syncthreads();
        tc_load<T, E>(qkv, a, n, hh, 0, i0, qs);
        tc_load<T, E>(dy, a, n, hh, -1, i0, dys);
        for (int x = threadIdx.x; x < TC_ROWS; x += TC_THREADS) {
            const bool live = i0 + x < a.t;
            ls[x] = live ? lse[pair * a.t + i0 + x] : 0.0f, dd[x] = live ? d[pair * a.t + i0 + x] : 0.0f;
        }
        __syncthreads();
        tc_abt<T, E>(ks + w * 16 * E, qs, sf);   // S^T [16 keys][64 queries]
        tc_abt<T, E>(vs + w * 16 * E, dys, dpf); // dP^T = V dY^T
        __syncwarp();
        tc_probs<T>(a, tc_tile{j0 + w * 16, i0, false}, sf, dpf, ls, dd, pt, dst);
        __syncwarp();
        tc_apb<T, E>(pt, dys, dv);  // dV += P^T dY
        tc_apb<T, E>(dst, qs, dk);  // dK += dS^T Q
    }
    tc_store_rows<E>(dk, sf, a, n, hh, 1, j0 + w * 16, dqkv);
    tc_store_rows<E>(dv, sf, a, n, hh, 2, j0 + w * 16, dqkv);
}

// grid (N H pairs, query tiles of 64), 128 threads; each warp owns 16 queries. shared: Q, dY (the
// block's queries), K, V (the key tile) [64][E] (T); lse, D [64]; per warp S, dP [16][64] (fp32),
// dS [16][64] (T).
template <typename T, int E>
__global__ static void __launch_bounds__(TC_THREADS) tc_dq_k(tc_args a, const float *qkv, const float *dy,
                                                              const float *lse, const float *d, float *dqkv) {
    extern __shared__ __align__(128) unsigned char tc_sm[];
    const int w = threadIdx.x / 32;
    T *qs = (T *)tc_sm, *dys = qs + TC_ROWS * E, *ks = dys + TC_ROWS * E, *vs = ks + TC_ROWS * E;
    float *ls = (float *)(vs + TC_ROWS * E), *dd = ls + TC_ROWS;
    float *sf = dd + TC_ROWS + w * 2 * 16 * 64, *dpf = sf + 16 * 64;
    T *dst = (T *)(dd + TC_ROWS + 4 * 2 * 16 * 64) + w * 2 * 16 * 64;
    const int64_t pair = blockIdx.x, n = pair / a.h, hh = pair % a.h, i0 = (int64_t)blockIdx.y * TC_ROWS;
    tc_load<T, E>(qkv, a, n, hh, 0, i0, qs);
    tc_load<T, E>(dy, a, n, hh, -1, i0, dys);
    for (int x = threadIdx.x; x < TC_ROWS; x += TC_THREADS) {
        const bool live = i0 + x < a.t;
        ls[x] = live ? lse[pair * a.t + i0 + x] : 0.0f, dd[x] = live ? d[pair * a.t + i0 + x] : 0.0f;
    }
    tc_acc dq[E / 16];
#pragma unroll
    for (int ft = 0; ft < E / 16; ft++) wmma::fill_fragment(dq[ft], 0.0f);
    const int64_t jend = a.causal && i0 + TC_ROWS < a.t ? i0 + TC_ROWS : a.t;
    for (int64_t j0 = 0; j0 < jend; j0 += TC_ROWS) {
        __syncthreads();
        tc_load<T, E>(qkv, a, n, hh, 1, j0, ks);
        tc_load<T, E>(qkv, a, n, hh, 2, j0, vs);
        __syncthreads();
        tc_abt<T, E>(qs + w * 16 * E, ks, sf);   // S [16 queries][64 keys]
        tc_abt<T, E>(dys + w * 16 * E, vs, dpf); // dP = dY V^T
        __syncwarp();
        tc_probs<T>(a, tc_tile{i0 + w * 16, j0, true}, sf, dpf, ls, dd, (T *)NULL, dst);
        __syncwarp();
        tc_apb<T, E>(dst, ks, dq);  // dQ += dS K
    }
    tc_store_rows<E>(dq, sf, a, n, hh, 0, i0 + w * 16, dqkv);
}

// ---- host side -----------------------------------------------------------------------------------

// Which 16-bit type and head width: -1 where the tensor-core kernels do not apply.
static int tc_choice(int64_t e, float rate, const void *const *ptrs, int nptr) {
    const int p = cuda_ctx_get()->precision;
    if ((p != PRECISION_BF16 && p != PRECISION_FP16) || rate > 0.0f) return -1;
    if (e != 32 && e != 48 && e != 64 && e != 96 && e != 128) return -1;
    for (int k = 0; k < nptr; k++)
        if ((uintptr_t)ptrs[k] % 16 != 0) return -1;
    if (cuda_attention_mode() == ATTN_FP32) return -1;
    return p == PRECISION_BF16 ? 1 : 0;
}

// The shared memory a kernel takes, allowed once per kernel (above 48 KB it must be asked for);
// the bit of (kernel, type, width) in ctx.attn_tc_smem says it was.
template <typename K>
static void tc_allow(K kernel, size_t bytes, int bit) {
    cuda_ctx *c = cuda_ctx_get();
    if (c->attn_tc_smem & (1ull << bit)) return;
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    c->attn_tc_smem |= 1ull << bit;
}

static dim3 tc_grid(int64_t n, int64_t t, int64_t h) {
    const int64_t pairs = n * h, tiles = (t + TC_ROWS - 1) / TC_ROWS;
    GL_CHECK(pairs <= 0x7fffffff && tiles <= 65535,
             "attention: at most 2^31 - 1 (sample, head) pairs and 65535 x 64 tokens in the CUDA kernels");
    return dim3((unsigned)pairs, (unsigned)tiles, 1);
}

template <typename T, int E>
static void tc_forward(int64_t n, int64_t t, int64_t h, float scale, int causal, const float *qkv, float *y,
                       float *lse, int bit) {
    const size_t smem = tc_fwd_smem<T, E>();
    tc_allow(tc_forward_k<T, E>, smem, bit);
    tc_forward_k<T, E><<<tc_grid(n, t, h), TC_THREADS, smem, cuda_ctx_get()->stream>>>(tc_args{t, h, scale, causal},
                                                                                        qkv, y, lse);
    CU_LAUNCHED();
}

template <typename T, int E>
static void tc_backward(int64_t n, int64_t t, int64_t h, float scale, int causal, const float *qkv,
                        const float *lse, const float *dy, const float *d, float *dqkv, int bit) {
    const size_t smem = tc_bwd_smem<T, E>();
    const tc_args a{t, h, scale, causal};
    cudaStream_t st = cuda_ctx_get()->stream;
    tc_allow(tc_dkv_k<T, E>, smem, bit);
    tc_allow(tc_dq_k<T, E>, smem, bit + 1);
    tc_dkv_k<T, E><<<tc_grid(n, t, h), TC_THREADS, smem, st>>>(a, qkv, dy, lse, d, dqkv);
    CU_LAUNCHED();
    tc_dq_k<T, E><<<tc_grid(n, t, h), TC_THREADS, smem, st>>>(a, qkv, dy, lse, d, dqkv);
    CU_LAUNCHED();
}

// Each (type, width) has three kernels: bits 3 * (5 * bf16 + width index) + {0 forward, 1 dK/dV, 2 dQ}.
#define TC_WIDTHS(X) X(32, 0) X(48, 1) X(64, 2) X(96, 3) X(128, 4)

int cuda_attention_tc_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                              const float *qkv, float *y, float *lse) {
    const void *ptrs[] = {qkv, y};
    const int bf = tc_choice(e, rate, ptrs, 2);
    if (bf < 0) return 0;
#define TC_FWD(E_, K_)                                                                                \
    case E_:                                                                                         \
        if (bf) tc_forward<__nv_bfloat16, E_>(n, t, h, scale, causal, qkv, y, lse, 3 * (5 + K_));    \
        else tc_forward<__half, E_>(n, t, h, scale, causal, qkv, y, lse, 3 * K_);                    \
        return 1;
    switch (e) { TC_WIDTHS(TC_FWD) }
#undef TC_FWD
    return 0;
}

int cuda_attention_tc_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                               const float *qkv, const float *lse, const float *dy, const float *d, float *dqkv) {
    const void *ptrs[] = {qkv, dy, dqkv};
    const int bf = tc_choice(e, rate, ptrs, 3);
    if (bf < 0) return 0;
#define TC_BWD(E_, K_)                                                                                   \
    case E_:                                                                                            \
        if (bf) tc_backward<__nv_bfloat16, E_>(n, t, h, scale, causal, qkv, lse, dy, d, dqkv, 3 * (5 + K_) + 1); \
        else tc_backward<__half, E_>(n, t, h, scale, causal, qkv, lse, dy, d, dqkv, 3 * K_ + 1);        \
        return 1;
    switch (e) { TC_WIDTHS(TC_BWD) }
#undef TC_BWD
    return 0;
}
