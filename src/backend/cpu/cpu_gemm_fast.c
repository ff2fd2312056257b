// cpu_gemm_fast.c: galley's own matrix product for dense layers on AVX-512 or AVX2+FMA CPUs,
// with the bias and the activation fused into the tile's first load and last store.
//
// c[M, N] = init + op(a)[M, K] . op(b)[K, N], row-major, init = c itself (acc), else bias[j] per
// column (or 0); act (relu, leaky_relu) applied as c is stored, or its derivative through a gate
// array laid out as c (cpu_store_act.gate: a dense layer's input gradient through the relu before
// it); then a residual array laid out as c added (cpu_store_act.res: a residual add's other
// input). A 12 x 32 register tile of C (24 AVX-512 accumulators) takes, for each k in order, 2 vectors
// of op(b)'s row k and 12 broadcasts of op(a)'s column k: every element of C is one chain of fused
// multiply-adds in k order from its init, whichever tile, thread or instruction set computes it, so
// the bits do not depend on the thread count, and AVX2 (which runs the tile as four 6 x 16
// quarters) gives the bits of AVX-512. K is cut into blocks of GKC: a block's sums go back to c and
// are loaded again for the next, which continues the same chain.
//
// Operands: op(a) is read in place (12 broadcasts a row apart, or 12 neighbours of a row), but
// for a weight gradient (op(a) = dy^T, op(b) = x in place), where each row tile's block of op(a)
// is first copied to [GKC][12] (gf_task_at; not where a's rows are near, GA_NEAR). op(b)'s row k
// is read in place when b is not transposed (32 floats of row k), and packed [GKC][32] on the
// stack by 8 x 8 transposes when it is (a dense forward's W^T). Tiles never hang over C's edge:
// the last row tile and column block are moved back to end at M and N (the rows and columns they
// share with their neighbours are computed again, with the same chain, and not stored), so M >= 12
// and N >= 32 are needed; smaller products stay with OpenBLAS (cpu_gemm).
//
// Why not OpenBLAS (through cpu_gemm's fixed tiles, which repack the shared operand per tile).
// Measured on a 2-core Xeon (Emerald Rapids, AVX-512), 2 threads, best of 8 alternating runs, ms,
// OpenBLAS (core Cooperlake) -> this file, M x N x K:
//     MLP (batch 128): forward 128x512x784 0.449 -> 0.381, 128x512x512 0.298 -> 0.244; weight
//         gradients 512x784x128 0.398 -> 0.376, 512x512x128 0.247 -> 0.225; input gradient
//         128x512x512 0.282 -> 0.244.
//     vit-tiny (batch 64: 4096 tokens): forward 4096x576x192 3.29 -> 3.21, 4096x768x192 4.30 ->
//         4.23, 4096x192x768 4.48 -> 4.34, 4096x192x192 1.14 -> 1.02; input gradients 4096x192x576
//         3.25 -> 2.93, 4096x192x768 4.36 -> 3.98, 4096x768x192 4.36 -> 4.12; weight gradients
//         576x192x4096 3.37 -> 3.53, 768x192x4096 4.39 -> 4.65, 192x768x4096 4.52 -> 7.69 (its
//         rows of x 3 KiB apart): cpu_dense.c leaves weight gradients over more than 1024 rows
//         to OpenBLAS.
//     The AVX2 kernels on the same Xeon against OpenBLAS's Haswell kernels: 0.96-1.17x, 0.79x for
//     the last weight gradient (not measured on an AVX2-only CPU).
// In the training step the gain is smaller than alone (the operands come from other layers, not
// warm in cache): vit-tiny's dense forward time 10% lower, the MLP about 5% faster end to end.

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

#define GM 12    // rows of C per register tile
#define GN 32    // columns of C per tile
#define GKC 256  // depth of one block of op(b) (a packed block: 32 KiB on the stack)
#define GMC 192  // rows of C per task (16 tiles: their rows of op(a) for one block stay in L2)
#define GJB 8    // column blocks per task at most
#define GJB_AT 32  // the same for a weight gradient (gf_task_at)
// op(a) = a^T with a's rows at most GA_NEAR floats apart (the attention's P^T and dS^T, a tile on
// the stack): read in place, 12 neighbours of a row per k, as gf_tile512 reads any op(a) = a^T;
// copying them first (gf_task_at, for weight gradients' rows a layer's width apart) made
// vit-tiny's attention backward 3.6 ms instead of 3.0 (2 threads, Xeon).
#define GA_NEAR 64

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backend/cpu/cpu_transpose16.h"
#define GF_512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define GF_256 __attribute__((target("avx2,fma")))
#define GF_BUILT 1
#else
#define GF_BUILT 0
#endif

// One tile's job: rows i0 .. i0+11 and columns j0 .. j0+31 of C over k0 .. k0+kc-1, storing rows
// from r0 and columns from s0 (those before belong to a neighbour tile).
typedef struct {
    int64_t kc, lda, ldb, ldc;
    const float *a;  // op(a)[i0][k0]
    const float *b;  // op(b) row k0, column j0 (packed: ldb = GN)
    float *c;        // c[i0][j0]
    bool ta;         // op(a) = a^T: element (i, k) at a[k * lda + i], else a[i * lda + k]
    int r0, s0;
    bool load;              // init from c (acc, or a later k block), else from bias or 0
    const float *bias;      // per column, at j0 (first k block only); NULL: 0
    cpu_store_act act;      // applied after the last k block
    const float *gate;      // act.gate at [i0][j0] (with act.on: the derivative's gate), else NULL
    const float *res;       // act.res at [i0][j0] (the last k block only), else NULL
} gf_tile_job;

#if GF_BUILT

GF_512 static inline __m512 gf_act512(cpu_store_act act, __m512 x) {
    const __m512 z = _mm512_setzero_ps();
    if (act.act == ACT_RELU) return _mm512_max_ps(x, z);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_GT_OQ), _mm512_mul_ps(x, _mm512_set1_ps(act.slope)), x);
}

// 0 + (g > 0 ? x : leaky ? slope * x : 0): the derivative through the gate (relu_like_backward's
// bits); for gelu 0 + x g, g the derivative itself (cpu_gelu_backward_kept's bits)
GF_512 static inline __m512 gf_gate512(cpu_store_act act, __m512 g, __m512 x) {
    const __m512 z = _mm512_setzero_ps();
    if (act.act == ACT_GELU) return _mm512_add_ps(z, _mm512_mul_ps(x, g));
    const __m512 off = act.act == ACT_RELU ? z : _mm512_mul_ps(_mm512_set1_ps(act.slope), x);
    return _mm512_add_ps(z, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, z, _CMP_GT_OQ), off, x));
}

// The 12 x 32 tile on AVX-512. Rows before r0 start from 0 and are not stored (they may be
// another thread's, being written); columns before s0 likewise, lane-masked.
GF_512 static void gf_tile512(const gf_tile_job *t) {
    const __mmask16 m0 = (__mmask16)(t->s0 >= 16 ? 0 : 0xffffu << t->s0),
                    m1 = (__mmask16)(t->s0 <= 16 ? 0xffffu : 0xffffu << (t->s0 - 16));
    __m512 c[GM][2];
#pragma GCC unroll 12
    for (int i = 0; i < GM; i++) {
        if (t->load && i >= t->r0) {
            c[i][0] = _mm512_maskz_loadu_ps(m0, t->c + i * t->ldc);
            c[i][1] = _mm512_maskz_loadu_ps(m1, t->c + i * t->ldc + 16);
        } else if (t->bias) {
            c[i][0] = _mm512_loadu_ps(t->bias), c[i][1] = _mm512_loadu_ps(t->bias + 16);
        } else {
            c[i][0] = c[i][1] = _mm512_setzero_ps();
        }
    }
    // The gate's and the residual's rows, wanted at the store: fetched while the sums run.
    for (int i = 0; t->gate && i < GM; i++) _mm_prefetch((const char *)(t->gate + i * t->ldc), _MM_HINT_T0),
                                             _mm_prefetch((const char *)(t->gate + i * t->ldc + 16), _MM_HINT_T0);
    for (int i = 0; t->res && i < GM; i++) _mm_prefetch((const char *)(t->res + i * t->ldc), _MM_HINT_T0),
                                            _mm_prefetch((const char *)(t->res + i * t->ldc + 16), _MM_HINT_T0);
    const float *b = t->b;
    const int64_t kc = t->kc, ldb = t->ldb, lda = t->lda;
    // Fully unrolled over i so the 24 sums stay in registers.
#define GF_FMA(AEL, i)                                      \
    {                                                       \
        const __m512 ai = _mm512_set1_ps(AEL(i));           \
        c[i][0] = _mm512_fmadd_ps(ai, b0, c[i][0]);         \
        c[i][1] = _mm512_fmadd_ps(ai, b1, c[i][1]);         \
    }
#define GF_STEP(AEL)                                                                    \
    {                                                                                   \
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);             \
        GF_FMA(AEL, 0) GF_FMA(AEL, 1) GF_FMA(AEL, 2) GF_FMA(AEL, 3) GF_FMA(AEL, 4) GF_FMA(AEL, 5) \
        GF_FMA(AEL, 6) GF_FMA(AEL, 7) GF_FMA(AEL, 8) GF_FMA(AEL, 9) GF_FMA(AEL, 10) GF_FMA(AEL, 11) \
        b += ldb;                                                                       \
    }
    if (t->ta) {
        const float *a = t->a;
#define GF_AT(i) a[i]
        for (int64_t k = 0; k < kc; k++, a += lda) GF_STEP(GF_AT)
#undef GF_AT
    } else {
        // rows a lda apart: four row pointers, the others an lda or two from them
        const float *a0 = t->a, *a3 = a0 + 3 * lda, *a6 = a0 + 6 * lda, *a9 = a0 + 9 * lda;
#define GF_AN(i) (i % 3 == 0 ? (i == 0 ? a0 : i == 3 ? a3 : i == 6 ? a6 : a9)[k] \
                  : (i < 3 ? a0 : i < 6 ? a3 : i < 9 ? a6 : a9)[k + (i % 3) * lda])
        for (int64_t k = 0; k < kc; k++) GF_STEP(GF_AN)
#undef GF_AN
    }
#undef GF_STEP
#undef GF_FMA
#pragma GCC unroll 12
    for (int i = 0; i < GM; i++) {
        if (i < t->r0) continue;
        __m512 lo = c[i][0], hi = c[i][1];
        if (t->gate) {
            lo = gf_gate512(t->act, _mm512_maskz_loadu_ps(m0, t->gate + i * t->ldc), lo);
            hi = gf_gate512(t->act, _mm512_maskz_loadu_ps(m1, t->gate + i * t->ldc + 16), hi);
        } else if (t->act.on) {
            lo = gf_act512(t->act, lo), hi = gf_act512(t->act, hi);
        }
        if (t->res) {
            lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, t->res + i * t->ldc));
            hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, t->res + i * t->ldc + 16));
        }
        _mm512_mask_storeu_ps(t->c + i * t->ldc, m0, lo);
        _mm512_mask_storeu_ps(t->c + i * t->ldc + 16, m1, hi);
    }
}


// The same tile on AVX2 as four 6 x 16 quarters (12 sums of 8 lanes each in registers), each
// over all of kc: no element's chain changes, so the bits are AVX-512's.
GF_256 static inline __m256 gf_act256(cpu_store_act act, __m256 x) {
    const __m256 z = _mm256_setzero_ps();
    if (act.act == ACT_RELU) return _mm256_max_ps(x, z);
    return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_set1_ps(act.slope)), x, _mm256_cmp_ps(x, z, _CMP_GT_OQ));
}

GF_256 static inline __m256 gf_gate256(cpu_store_act act, __m256 g, __m256 x) {
    const __m256 z = _mm256_setzero_ps();
    if (act.act == ACT_GELU) return _mm256_add_ps(z, _mm256_mul_ps(x, g));
    const __m256 off = act.act == ACT_RELU ? z : _mm256_mul_ps(_mm256_set1_ps(act.slope), x);
    return _mm256_add_ps(z, _mm256_blendv_ps(off, x, _mm256_cmp_ps(g, z, _CMP_GT_OQ)));
}

// lanes j (column h + j of the tile, j < 8) with h + j >= s0
GF_256 static inline __m256i gf_mask256(int h, int s0) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32(h + 1)), _mm256_set1_epi32(s0));
}

GF_256 static void gf_quarter256(const gf_tile_job *t, int q0, int h) {
    const __m256i m0 = gf_mask256(h, t->s0), m1 = gf_mask256(h + 8, t->s0);
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        if (t->load && q0 + i >= t->r0) {
            c[i][0] = _mm256_maskload_ps(t->c + (q0 + i) * t->ldc + h, m0);
            c[i][1] = _mm256_maskload_ps(t->c + (q0 + i) * t->ldc + h + 8, m1);
        } else if (t->bias) {
            c[i][0] = _mm256_loadu_ps(t->bias + h), c[i][1] = _mm256_loadu_ps(t->bias + h + 8);
        } else {
            c[i][0] = c[i][1] = _mm256_setzero_ps();
        }
    }
    for (int i = 0; t->gate && i < 6; i++) _mm_prefetch((const char *)(t->gate + (q0 + i) * t->ldc + h), _MM_HINT_T0);
    for (int i = 0; t->res && i < 6; i++) _mm_prefetch((const char *)(t->res + (q0 + i) * t->ldc + h), _MM_HINT_T0);
    const float *b = t->b + h;
    const int64_t kc = t->kc, ldb = t->ldb, lda = t->lda;
#define GF_FMA(AEL, i)                                      \
    {                                                       \
        const __m256 ai = _mm256_set1_ps(AEL(i));           \
        c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);         \
        c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);         \
    }
#define GF_STEP(AEL)                                                                                   \
    {                                                                                                  \
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                             \
        GF_FMA(AEL, 0) GF_FMA(AEL, 1) GF_FMA(AEL, 2) GF_FMA(AEL, 3) GF_FMA(AEL, 4) GF_FMA(AEL, 5) \
        b += ldb;                                                                                      \
    }
    if (t->ta) {
        const float *a = t->a + q0;
#define GF_AT(i) a[i]
        for (int64_t k = 0; k < kc; k++, a += lda) GF_STEP(GF_AT)
#undef GF_AT
    } else {
        const float *a0 = t->a + q0 * lda, *a3 = a0 + 3 * lda;
#define GF_AN(i) (i < 3 ? a0 : a3)[k + (i % 3) * lda]
        for (int64_t k = 0; k < kc; k++) GF_STEP(GF_AN)
#undef GF_AN
    }
#undef GF_STEP
#undef GF_FMA
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        if (q0 + i < t->r0) continue;
        __m256 lo = c[i][0], hi = c[i][1];
        if (t->gate) {
            lo = gf_gate256(t->act, _mm256_maskload_ps(t->gate + (q0 + i) * t->ldc + h, m0), lo);
            hi = gf_gate256(t->act, _mm256_maskload_ps(t->gate + (q0 + i) * t->ldc + h + 8, m1), hi);
        } else if (t->act.on) {
            lo = gf_act256(t->act, lo), hi = gf_act256(t->act, hi);
        }
        if (t->res) {
            lo = _mm256_add_ps(lo, _mm256_maskload_ps(t->res + (q0 + i) * t->ldc + h, m0));
            hi = _mm256_add_ps(hi, _mm256_maskload_ps(t->res + (q0 + i) * t->ldc + h + 8, m1));
        }
        _mm256_maskstore_ps(t->c + (q0 + i) * t->ldc + h, m0, lo);
        _mm256_maskstore_ps(t->c + (q0 + i) * t->ldc + h + 8, m1, hi);
    }
}

GF_256 static void gf_tile256(const gf_tile_job *t) {
    for (int q0 = 0; q0 < GM; q0 += 6) {
        if (q0 + 6 <= t->r0) continue;  // a quarter wholly before r0 stores nothing
        gf_quarter256(t, q0, 0);
        gf_quarter256(t, q0, 16);
    }
}

// p[k][j] (rows GN apart) = b[j * ldb + k] for j < 32, k < kn (a dense forward's W^T, rows j
// of W): 8 x 8 transposes, the last k short of 8 by masked loads. AVX2 (both instruction sets).
GF_256 static void gf_pack_t(const float *b, int64_t ldb, int64_t kn, float *p) {
    for (int64_t k0 = 0; k0 < kn; k0 += 8) {
        const int64_t w = kn - k0 < 8 ? kn - k0 : 8;
        const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int j0 = 0; j0 < GN; j0 += 8) {
            __m256 r[8], u[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_maskload_ps(b + (j0 + j) * ldb + k0, km);
            for (int j = 0; j < 8; j += 2) {
                u[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
                u[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
            }
            for (int j = 0; j < 8; j += 4) {
                r[j] = _mm256_shuffle_ps(u[j], u[j + 2], 0x44);
                r[j + 1] = _mm256_shuffle_ps(u[j], u[j + 2], 0xee);
                r[j + 2] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0x44);
                r[j + 3] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0xee);
            }
            // r[0..3] rows 0-3, r[4..7] rows 4-7, each 128-bit half a column: join the halves
            float *dst = p + k0 * GN + j0;
            for (int q = 0; q < 4; q++) {
                if (q < w) _mm256_storeu_ps(dst + q * GN, _mm256_permute2f128_ps(r[q], r[q + 4], 0x20));
                if (q + 4 < w) _mm256_storeu_ps(dst + (q + 4) * GN, _mm256_permute2f128_ps(r[q], r[q + 4], 0x31));
            }
        }
    }
}
#endif  // GF_BUILT

typedef void (*gf_tile_fn)(const gf_tile_job *t);

// One call's operands and its cut into tasks (row chunks of mc rows x groups of column blocks).
typedef struct {
    gf_tile_fn tile;
    bool ta, tb, acc, by_rows;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b, *bias;
    float *c;
    cpu_store_act act;
    int64_t mc, nrc, nbj, ngj;
} gf_call;

// The job of column block jb over k0 .. k0+kc-1 (op(a), op(b), c and r0 left to the caller); *j0
// receives the block's first column (the last block moved back to end at n).
static gf_tile_job gf_job(const gf_call *g, int64_t k0, int64_t kc, int64_t jb, int64_t *j0) {
    const cpu_store_act none = {0};
    *j0 = jb * GN + GN <= g->n ? jb * GN : g->n - GN;
    return (gf_tile_job){.kc = kc, .lda = g->lda, .ldb = g->ldb, .ldc = g->ldc, .ta = g->ta,
                         .s0 = (int)(jb * GN - *j0), .load = g->acc || k0 > 0,
                         .bias = !g->acc && k0 == 0 && g->bias ? g->bias + *j0 : NULL,
                         .act = k0 + kc == g->k ? g->act : none};
}

// A task for op(a) = a^T and b in place (a weight gradient dy^T . x): a tile's 12 columns of a
// over a block of k lie a row of a apart (lda: a layer's width), so each row tile's block is
// first copied to [kc][12] (pk) and then meets every column block of the task.
static void gf_task_at(const gf_call *g, int64_t i_lo, int64_t i_hi, int64_t jb_lo, int64_t jb_hi, float *pk) {
    for (int64_t k0 = 0; k0 < g->k; k0 += GKC) {
        const int64_t kc = g->k - k0 < GKC ? g->k - k0 : GKC;
        for (int64_t i = i_lo; i < i_hi; i += GM) {
            const int64_t i0 = i + GM <= g->m ? i : g->m - GM;
            for (int64_t q = 0; q < kc; q++) memcpy(pk + q * GM, g->a + (k0 + q) * g->lda + i0, sizeof(float) * GM);
            for (int64_t jb = jb_lo; jb < jb_hi; jb++) {
                int64_t j0;
                gf_tile_job t = gf_job(g, k0, kc, jb, &j0);
                t.lda = GM, t.a = pk, t.b = g->b + k0 * g->ldb + j0, t.c = g->c + i0 * g->ldc + j0;
                t.gate = t.act.on && t.act.gate ? t.act.gate + i0 * g->ldc + j0 : NULL;
                t.res = t.act.res ? t.act.res + i0 * g->ldc + j0 : NULL;
                t.r0 = (int)(i - i0);
                g->tile(&t);
            }
        }
    }
}

// Task q: C's rows [i_lo, i_hi) (whole tiles but for C's last, moved back to end at m) and column
// blocks [jb_lo, jb_hi), over all of k: per block of k, each column block's op(b) (packed once)
// meets every row tile, so the task's rows of op(a) for the block (GMC x GKC) and its rows of
// op(b) stay in L2 across column blocks. Tasks run in order along C's rows (by_rows: a weight
// gradient's, whose rows optim_owner gives the same thread to update) or its columns (a
// forward's units): static runs of them, so a thread meets the same part of C at every step.
// With bc (a forward's op(b) = W^T over many row chunks: gf_bcache) the thread's packed blocks
// of op(b) are packed on first use and kept for the call's later tasks.
typedef struct {
    float *panels;  // [nbj][k][GN]: column block jb's rows k of op(b)
    uint8_t *done;  // [nbj][blocks of GKC]: packed yet
} gf_bcache;

static void gf_task(const gf_call *g, int64_t q, gf_bcache *bc) {
    const int64_t rc = g->by_rows ? q / g->ngj : q % g->nrc, jg = g->by_rows ? q % g->ngj : q / g->nrc;
    // Row chunk rc: tiles [rc * tiles / nrc, (rc + 1) * tiles / nrc), so chunks differ by a tile
    // at most (whole chunks of mc rows left the last one short: the MLP's 43 weight-gradient
    // tiles went 24 and 19 to two threads).
    const int64_t tiles = (g->m + GM - 1) / GM, t_lo = rc * tiles / g->nrc, t_hi = (rc + 1) * tiles / g->nrc;
    const int64_t i_lo = t_lo * GM, i_hi = t_hi * GM < g->m ? t_hi * GM : g->m;
    const int64_t jb_lo = jg * g->nbj / g->ngj, jb_hi = (jg + 1) * g->nbj / g->ngj;
    float panel[GKC * GN] __attribute__((aligned(64)));
    if (g->ta && !g->tb && g->lda > GA_NEAR) {  // a weight gradient: pack op(a)'s tiles instead
        gf_task_at(g, i_lo, i_hi, jb_lo, jb_hi, panel);
        return;
    }
    for (int64_t k0 = 0; k0 < g->k; k0 += GKC) {
        const int64_t kc = g->k - k0 < GKC ? g->k - k0 : GKC;
        for (int64_t jb = jb_lo; jb < jb_hi; jb++) {
            int64_t j0;
            gf_tile_job t = gf_job(g, k0, kc, jb, &j0);
#if GF_BUILT
            if (g->tb && bc) {
                float *p = bc->panels + (jb * g->k + k0) * GN;
                uint8_t *d = bc->done + jb * ((g->k + GKC - 1) / GKC) + k0 / GKC;
                if (!*d) gf_pack_t(g->b + j0 * g->ldb + k0, g->ldb, kc, p), *d = 1;
                t.b = p, t.ldb = GN;
            } else if (g->tb) {
                gf_pack_t(g->b + j0 * g->ldb + k0, g->ldb, kc, panel), t.b = panel, t.ldb = GN;
            } else {
                t.b = g->b + k0 * g->ldb + j0;
            }
#else
            (void)panel;
#endif
            for (int64_t i = i_lo; i < i_hi; i += GM) {
                const int64_t i0 = i + GM <= g->m ? i : g->m - GM;
                t.r0 = (int)(i - i0);
                t.a = g->ta ? g->a + k0 * g->lda + i0 : g->a + i0 * g->lda + k0;
                t.c = g->c + i0 * g->ldc + j0;
                t.gate = t.act.on && t.act.gate ? t.act.gate + i0 * g->ldc + j0 : NULL;
                t.res = t.act.res ? t.act.res + i0 * g->ldc + j0 : NULL;
                g->tile(&t);
            }
        }
    }
}

// ---- a forward over few rows, transposed (gf_fwd_t) -------------------------------------------
//
// c[m][n] = bias + a[m][k] . b[n][k]^T (a dense forward: a = x, b = W) with fewer rows than
// columns: computed as its transpose, the 12 rows of a tile being 12 of b's rows read in place and
// its 32 columns 32 of a's rows, from a^T packed once per call and thread ([k][32] per block of
// 32 rows) instead of b^T ([k][32] per block of 32 columns, packed by the tasks for every block
// of k: n x k floats, 4x more for the MLP's 512 units at batch 128). Each tile sums all of k into
// a [12][32] block on the stack, from the bias, and stores it through a 16 x 16 transpose. Every
// element is the same chain (its init, then fmaf over k in order; the product's factors swap
// places, which changes nothing): the bits of the other path, hence of AVX2 (which keeps it).
// Measured on a 2-core Xeon (MLP, 2 threads): the forward products 6-12% faster in training, whole
// runs +1.4% by median and +1.2% by best over 16 alternating pairs (+0.9% and +4.3% by median in
// two earlier series of 12, with the pack shared); the small CNN's 4096 -> 128 unchanged. The
// panels are malloc'ed per call (the dense hooks take no scratch): glibc hands the same block back
// each step (perf stat: 5,089 page faults for 2,000 MLP steps, 5,093 for 500), and where malloc
// fails the product takes the other path.

#if GF_BUILT
// rows[r][j] (r < 12, j < 16, rows GN apart) to c[j][r] for j in [s0, 16), r in [r0, 12) (c rows ldc apart).
GF_512 static void gf_store_t16(const float *rows, int r0, int s0, float *c, int64_t ldc) {
    __m512 r[16];
    for (int i = 0; i < 16; i++) r[i] = i < GM ? _mm512_loadu_ps(rows + i * GN) : _mm512_setzero_ps();
    cpu_transpose16(r);
    const __mmask16 keep = (__mmask16)(((1u << GM) - 1u) & ~((1u << r0) - 1u));
    for (int q = s0; q < 16; q++) _mm512_mask_storeu_ps(c + q * ldc, keep, r[q]);
}

// Tile (unit tile jt, row block ib) of gf_fwd_t: pt is a^T's panel for the block.
GF_512 static void gf_fwd_t_tile(const gf_call *g, const float *pt, int64_t jt, int64_t ib) {
    const int64_t j0 = jt * GM + GM <= g->n ? jt * GM : g->n - GM, i0 = ib * GN + GN <= g->m ? ib * GN : g->m - GN;
    float blk[GM * GN] __attribute__((aligned(64)));
    for (int r = 0; r < GM; r++) {
        const __m512 v = _mm512_set1_ps(g->bias ? g->bias[j0 + r] : 0.0f);
        _mm512_store_ps(blk + r * GN, v), _mm512_store_ps(blk + r * GN + 16, v);
    }
    gf_tile_job t = {.kc = g->k, .lda = g->ldb, .ldb = GN, .ldc = GN, .a = g->b + j0 * g->ldb, .b = pt, .c = blk,
                     .load = true, .act = g->act};
    gf_tile512(&t);
    const int r0 = (int)(jt * GM - j0), s0 = (int)(ib * GN - i0);
    gf_store_t16(blk, r0, s0, g->c + i0 * g->ldc + j0, g->ldc);
    gf_store_t16(blk + 16, r0, s0 > 16 ? s0 - 16 : 0, g->c + (i0 + 16) * g->ldc + j0, g->ldc);
}

// The whole product this way: a^T packed by the team (blocks of GKC rows of k), then the tiles.
static bool gf_fwd_t(const gf_call *g) {
    const int64_t nib = (g->m + GN - 1) / GN, njt = (g->n + GM - 1) / GM, nkb = (g->k + GKC - 1) / GKC;
    const bool par = !omp_in_parallel() && (double)g->m * (double)g->n * (double)g->k >= 131072.0;
    const int64_t nt = par ? omp_get_max_threads() : 1, per = nib * g->k * GN;
    float *all = aligned_alloc(64, sizeof(float) * (size_t)(nt * per));
    if (!all) return false;
#pragma omp parallel if (par)
    {
        // Each thread packs all of a^T for itself: no barrier, and a stays in every core's cache
        // for the weight gradient that reads it next (a shared pack slowed that by 8%).
        float *pt = all + omp_get_thread_num() * per;
        for (int64_t q = 0; q < nib * nkb; q++) {
            const int64_t ib = q / nkb, k0 = q % nkb * GKC, i0 = ib * GN + GN <= g->m ? ib * GN : g->m - GN;
            gf_pack_t(g->a + i0 * g->lda + k0, g->lda, g->k - k0 < GKC ? g->k - k0 : GKC, pt + (ib * g->k + k0) * GN);
        }
#pragma omp for schedule(static)
        for (int64_t q = 0; q < njt * nib; q++) gf_fwd_t_tile(g, pt + q % nib * g->k * GN, q / nib, q % nib);
    }
    free(all);
    return true;
}
#endif  // GF_BUILT

bool cpu_gemm_fast_isa(int isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, bool acc, const float *bias, cpu_store_act act, float *c,
                       int64_t ldc, bool by_rows) {
    gf_tile_fn tile = NULL;
#if GF_BUILT
    tile = isa == CPU_ISA_AVX512 ? gf_tile512 : isa == CPU_ISA_AVX2 ? gf_tile256 : NULL;
#else
    (void)isa;
#endif
    if (!tile || m < GM || n < GN || k < 1) return false;
    gf_call g = {.tile = tile, .ta = ta, .tb = tb, .acc = acc, .by_rows = by_rows, .m = m, .n = n, .k = k,
                 .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b, .bias = bias, .c = c, .act = act};
#if GF_BUILT
    // A forward over fewer rows than columns (the MLP's batch of 128 into 512 units): transposed.
    if (isa == CPU_ISA_AVX512 && tb && !ta && !acc && !act.gate && !act.res && m >= GN && m < n && gf_fwd_t(&g))
        return true;
#endif
    // Row chunks of GMC rows and column groups of at most GJB blocks (sizes differing by at most
    // one), more groups while that leaves fewer than 8 tasks. A weight gradient (gf_task_at) packs
    // op(a) per row tile, which pays when the tile meets many column blocks: there the rows are
    // cut finer (8 chunks where M allows) and the columns kept whole up to GJB_AT blocks.
    const bool at = ta && !tb;
    const int64_t tiles = (m + GM - 1) / GM, gjb = at ? GJB_AT : GJB;
    g.mc = at && GM * ((tiles + 7) / 8) < GMC ? GM * ((tiles + 7) / 8) : GMC;
    g.nrc = (m + g.mc - 1) / g.mc, g.nbj = (n + GN - 1) / GN;
    g.ngj = (g.nbj + gjb - 1) / gjb;
    while (g.ngj < g.nbj && g.nrc * g.ngj < 8) g.ngj++;
    const int64_t tasks = g.nrc * g.ngj;
    if (tasks > 1 && !omp_in_parallel() && (double)m * (double)n * (double)k >= 131072.0) {
        // A forward (op(b) = W^T) over several row chunks: each thread packs a block of W^T once
        // for all its tasks (gf_bcache) rather than once per task. vit-tiny's products (4096 rows,
        // 22 chunks of 192) packed every block of W^T 22 times a call: gf_pack_t 3.3% of its samples.
        const int64_t nt = omp_get_max_threads(), nkb = (k + GKC - 1) / GKC, per = g.nbj * k * GN;
        const int64_t flags = (g.nbj * nkb + 63) / 64 * 16;  // in floats, a whole number of cache lines
        float *all = tb && !ta && g.nrc > 1 ? aligned_alloc(64, sizeof(float) * (size_t)(nt * (per + flags))) : NULL;
#pragma omp parallel
        {
            gf_bcache bc = {0};
            if (all) {
                bc.panels = all + omp_get_thread_num() * (per + flags);
                bc.done = (uint8_t *)(void *)(bc.panels + per);
                memset(bc.done, 0, (size_t)(g.nbj * nkb));
            }
#pragma omp for schedule(static)
            for (int64_t q = 0; q < tasks; q++) gf_task(&g, q, all ? &bc : NULL);
        }
        free(all);
    } else {
        // Small, or inside another parallel loop (the attention's tiles): no OpenMP region, whose
        // start and end cost about a microsecond even for one thread.
        for (int64_t q = 0; q < tasks; q++) gf_task(&g, q, NULL);
    }
    return true;
}

bool cpu_gemm_fast(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                   int64_t ldb, bool acc, const float *bias, cpu_store_act act, float *c, int64_t ldc, bool by_rows) {
    return cpu_gemm_fast_isa(cpu_conv_fast_isa(), ta, tb, m, n, k, a, lda, b, ldb, acc, bias, act, c, ldc, by_rows);
}
