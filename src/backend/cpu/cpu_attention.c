// cpu_attention.c: memory-efficient multi-head self-attention (backend.h's attention_forward and
// attention_backward), FlashAttention-2's algorithm on the CPU.
//
// Forward takes one (sample, head, tile of AQ queries) at a time: the scores against a tile of AK
// keys go into a fixed AQ x AK buffer, an online softmax rescales the running output rows (kept in
// y itself) by e^(m_old - m_new) whenever a row's maximum grows, and the tile's probabilities times
// the value tile are added in; at the end each row is divided by its sum and lse = m + log(sum) is
// kept. Backward first forms D_i = rowsum(dy * y), then recomputes each (query tile, key tile)'s
// probabilities from lse and sums dV += P^T dy, dK += dS^T q, dQ += dS k with dS = P (dP - D)
// scale (P^T and dS^T are read by the product, mm_ta, not copied). The first tile to reach a row
// of y, dQ, dK or dV writes it rather than adding to zeros (the same sums: a chain from 0); with
// vit-tiny's one tile (T 64, E 64, H 3, batch 64) that and mm_ta took the attention from 2.2 to
// 1.65 ms forward and 5.0 to 3.0 ms backward (2 threads, 2-core Xeon: the zeroing was per-row
// memsets, the transposes strided stores), the whole run 4.4% faster (4 alternating pairs).
// Every temporary is a tile on the stack (at most ~80 KiB, whatever T is) or the caller's
// work [N, H, T]: nothing here allocates, so no buffer grows with T^2 (test_attention.c checks
// the layer's sizes are linear in T; this file has no allocation at all).
//
// Order: every output element sums its terms in one fixed order (keys in tile order for y and dQ,
// queries in tile order for dK and dV) whichever thread computes it, so results do not depend on
// the thread count. Threads take (sample, head, query tile) tasks forward; backward takes whole
// (sample, head) pairs when there are at least as many pairs as threads, else two passes (key
// tiles for dK and dV, then query tiles for dQ: the scores are computed twice) with the same sums.
//
// Instruction sets: the exponentials and row maxima have AVX-512 and AVX2+FMA versions
// (cpu_attention_body.h, chosen at run time as the conv kernels choose theirs), whose tile
// products are serial galley or OpenBLAS calls (mm_blas below), and a scalar set (plain loops, libm's expf);
// AVX2 and AVX-512 give the same bits (the same exponential, 16 lane sums on both), the scalar
// set differs in rounding. The table is for the earlier hand-written tile products
// (mm_blas's comment has the gain since). Measured (one thread of a shared 2-core AMD EPYC with AVX2, no AVX-512; N = H = 1,
// E = 48, no mask, best of several runs, ms):
//     T       scalar fwd / bwd      AVX2 fwd / bwd     (AVX2 forward: ~22 GFLOP/s of q k^T and p v)
//     64        0.29 /    0.67        0.035 / 0.082
//     256       4.6  /   10.8         0.55  / 1.30
//     1024     75    /  173           9.1   / 20.7
//     4050   1185    / 2754         141     / 324
// AVX-512 could not be timed here (none on this CPU; it compiles and shares the AVX2 code).
// Tried and dropped: 4 x 3 register tiles (GCC spilled them on AVX2: 1.3-2x slower), 128-query
// forward tiles (no gain measurable on this loaded machine).
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/cpu_isa.h"
#include "galley/rng.h"
#include "galley/rng_mix.h"  // the dropout key hashed once per call, then one mix per draw

#define AQ 64   // queries per tile
#define AK 64   // keys per tile
#define AEC 64  // features per packed chunk of a transposed tile

// ---- inner kernels ------------------------------------------------------------------------------

typedef struct {
    // c[m, cols] (=, or += when acc) a[m, k] . b[k, cols]; row-major, leading dimensions given
    void (*mm)(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
               float *c, int64_t ldc, int acc);
    // the same with a transposed: c[m, cols] (=, +=) a[k, m]^T . b[k, cols]
    void (*mm_ta)(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float *c, int64_t ldc, int acc);
    // x[j] = e^(x[j] * scale - sub) for j < cnt; returns their sum
    float (*exp_row)(float *x, int64_t cnt, float scale, float sub);
    // max(m, max_j x[j] * scale) over j < cnt
    float (*row_max)(const float *x, int64_t cnt, float scale, float m);
    // x[j] *= a
    void (*scale_row)(float *x, int64_t cnt, float a);
    // s[j] = s[j] * (dp[j] - d) * scale (dS; with dropout dp already holds dP keep)
    void (*ds_row)(float *s, const float *dp, int64_t cnt, float d, float scale);
    // sum_j a[j] b[j]
    float (*dot)(const float *a, const float *b, int64_t cnt);
    // Whole 64-key tiles (AVX-512 only; NULL elsewhere): cpu_attention_body.h's pack_kt, qk_rows,
    // softmax_rows and pv_rows.
    void (*pack_kt)(int64_t e, const float *k, int64_t ldk, float *kt);
    void (*qk_rows)(int64_t bq, int64_t e, const float *q, int64_t ldq, const float *kt, float *s);
    void (*softmax_rows)(int64_t bq, float *s, float scale, const float *m, float *mx, float *sum);
    void (*pv_rows)(int64_t bq, int64_t e, const float *p, const float *v, int64_t ldv, float *y, int64_t ldy,
                    bool acc);
    void (*ptv_rows)(int64_t bq, int64_t e, const float *p, const float *v, int64_t ldv, float *y, int64_t ldy,
                     bool acc);
} attn_kernels;

// c[m, cols] (=, or += when acc) op(a)[m, k] . b[k, cols], op(a) = a, or a^T (ta: a is [k, m]).
static void mm_scalar_op(bool ta, int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b,
                         int64_t ldb, float *c, int64_t ldc, int acc) {
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (!acc) memset(ci, 0, sizeof(float) * (size_t)cols);
        for (int64_t q = 0; q < k; q++) {
            const float x = ta ? a[q * lda + i] : a[i * lda + q], *bq = b + q * ldb;
            for (int64_t j = 0; j < cols; j++) ci[j] += x * bq[j];
        }
    }
}

static void mm_scalar(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, int acc) {
    mm_scalar_op(false, m, cols, k, a, lda, b, ldb, c, ldc, acc);
}

static void mm_ta_scalar(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b,
                         int64_t ldb, float *c, int64_t ldc, int acc) {
    mm_scalar_op(true, m, cols, k, a, lda, b, ldb, c, ldc, acc);
}

static float exp_row_scalar(float *x, int64_t cnt, float scale, float sub) {
    float sum = 0.0f;
    for (int64_t j = 0; j < cnt; j++) sum += x[j] = expf(x[j] * scale - sub);
    return sum;
}

static float row_max_scalar(const float *x, int64_t cnt, float scale, float m) {
    for (int64_t j = 0; j < cnt; j++) m = fmaxf(m, x[j] * scale);
    return m;
}

static void scale_row_scalar(float *x, int64_t cnt, float a) {
    for (int64_t j = 0; j < cnt; j++) x[j] *= a;
}

static void ds_row_scalar(float *s, const float *dp, int64_t cnt, float d, float scale) {
    for (int64_t j = 0; j < cnt; j++) s[j] = s[j] * (dp[j] - d) * scale;
}

static float dot_scalar(const float *a, const float *b, int64_t cnt) {
    float sum = 0.0f;
    for (int64_t j = 0; j < cnt; j++) sum += a[j] * b[j];
    return sum;
}

static const attn_kernels attn_scalar = {mm_scalar,        mm_ta_scalar, exp_row_scalar, row_max_scalar,
                                         scale_row_scalar, ds_row_scalar, dot_scalar};

// The vector sets contract a * b + c into fused multiply-adds (-std=c11 leaves fp-contract off):
// the exponential's polynomial and range steps, the scaling and the dot products; forward 1.63 ->
// 1.55 ms at vit-tiny's shape (best of 50). The instruction choice is fixed at compile time, so
// the bits still depend on nothing at run time.
#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_VECTOR 1
#include <immintrin.h>

#include "backend/cpu/cpu_transpose16.h"
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define AW 8
#define AFN(name) name##_avx2
#include "backend/cpu/cpu_attention_body.h"
#undef AW
#undef AFN
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define AW 16
#define AFN(name) name##_avx512
#include "backend/cpu/cpu_attention_body.h"
#undef AW
#undef AFN
#pragma GCC pop_options

// The tile products of the vector sets: one serial product each, galley's (cpu_gemm_fast) for
// tiles of at least 12 x 32, else OpenBLAS's sgemm (cpu_gemm); both single-threaded inside this
// file's parallel loops, and their choice depends on the shape only, so the bits do not depend on
// the thread count. galley's against OpenBLAS here (2-core Xeon, AVX-512, 2 threads, 3 alternating
// runs of 20 vit-tiny steps): attention forward 0.90 -> 0.88 s, backward 1.90 -> 1.85 s (the
// same kernel as q k^T's, attn_abt). Earlier, OpenBLAS's against the hand-written 4 x 2-vector
// register tiles it replaced (AVX2, 2-core AMD EPYC, best of 7): vit-tiny's attention (N 64, T 64, H 3, E 64) forward 6.25 -> 4.17
// ms and backward 14.2 -> 8.7 ms on 2 threads (9.8 -> 5.8 and 23.7 -> 13.9 on one); T 4050, H 8,
// E 48: 601 -> 394 and 1527 -> 929 ms.
static void mm_blas(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, int acc) {
    const cpu_store_act none = {0};
    if (!cpu_gemm_fast(false, false, m, cols, k, a, lda, b, ldb, acc != 0, NULL, none, c, ldc, false))
        cpu_gemm(false, false, m, cols, k, a, lda, b, ldb, acc ? 1.0f : 0.0f, c, ldc);
}
static void mm_ta_blas(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float *c, int64_t ldc, int acc) {
    const cpu_store_act none = {0};
    if (!cpu_gemm_fast(true, false, m, cols, k, a, lda, b, ldb, acc != 0, NULL, none, c, ldc, false))
        cpu_gemm(true, false, m, cols, k, a, lda, b, ldb, acc ? 1.0f : 0.0f, c, ldc);
}
static const attn_kernels attn_avx2 = {mm_blas,        mm_ta_blas,  exp_row_avx2, row_max_avx2,
                                       scale_row_avx2, ds_row_avx2, dot_avx2};
static const attn_kernels attn_avx512 = {mm_blas,          mm_ta_blas,    exp_row_avx512, row_max_avx512,
                                         scale_row_avx512, ds_row_avx512, dot_avx512,     pack_kt_avx512,
                                         qk_rows_avx512,   softmax_rows_avx512, pv_rows_avx512, ptv_rows_avx512};
#else
#define ATTN_VECTOR 0
#endif

// The best instruction set this CPU has: 2 AVX-512, 1 AVX2+FMA, 0 none (cpu_isa.h).
static int attn_isa_best(void) { return ATTN_VECTOR ? cpu_isa_best() : 0; }

// Test hooks (cpu_kernels.h): a forced instruction set (-1: the best) and backward split (-1: by
// the thread count, 0: whole pairs, 1: two passes); the whole-tile kernels off (0) or on (1).
static int attn_isa_forced = -1, attn_split_forced = -1, attn_tiles_on = 1;

void cpu_attention_force_tiles(int on) { __atomic_store_n(&attn_tiles_on, on, __ATOMIC_RELAXED); }

int cpu_attention_force(int isa, int split) {
    __atomic_store_n(&attn_isa_forced, isa, __ATOMIC_RELAXED);
    __atomic_store_n(&attn_split_forced, split, __ATOMIC_RELAXED);
    const int best = attn_isa_best();
    return isa < 0 || isa > best ? best : isa;
}

static const attn_kernels *attn_kernels_get(void);

float cpu_attention_exp_row(int isa, float *x, int64_t cnt, float scale, float sub) {
    const int was = __atomic_load_n(&attn_isa_forced, __ATOMIC_RELAXED);
    __atomic_store_n(&attn_isa_forced, isa, __ATOMIC_RELAXED);
    const float sum = attn_kernels_get()->exp_row(x, cnt, scale, sub);
    __atomic_store_n(&attn_isa_forced, was, __ATOMIC_RELAXED);
    return sum;
}

static const attn_kernels *attn_kernels_get(void) {
    int isa = attn_isa_best(), f = __atomic_load_n(&attn_isa_forced, __ATOMIC_RELAXED);
    if (f >= 0 && f < isa) isa = f;
#if ATTN_VECTOR
    return isa == 2 ? &attn_avx512 : isa == 1 ? &attn_avx2 : &attn_scalar;
#else
    return &attn_scalar;
#endif
}

// ---- shared pieces --------------------------------------------------------------------------------

// One call's arguments (the tensors it does not take are NULL).
typedef struct {
    const attn_kernels *kr;
    int64_t n, t, h, e;
    float scale, rate;
    int causal;
    uint64_t seed, step, base;
    const float *qkv, *y, *dy, *lse, *dsum;
    float *yo, *lseo, *dqkv;
} attn_call;

// One (sample, head) of a call: where its q, k, v, y rows start and their strides.
typedef struct {
    const attn_kernels *kr;
    int64_t t, e, ldq, ldy;  // ldq = 3 H E (a token's qkv), ldy = H E
    float scale, rate, keep_scale;
    int causal;
    // dropout: key = rng_mix_key(seed, RNG_DROPOUT, step); this pair's first draw: the call's base + (n H + h) T T
    uint64_t key, base;
    const float *q, *k, *v, *y, *dy, *lse, *dsum;
    float *yo, *lseo, *dq, *dk, *dv;
} attn_pair;

// Pair number `pair` (sample pair / H, head pair % H) of call c.
static attn_pair attn_pair_at(const attn_call *c, int64_t pair) {
    const int64_t t = c->t, e = c->e, h = c->h, s = pair / h, hh = pair % h;
    attn_pair p = {.kr = c->kr, .t = t, .e = e, .ldq = 3 * h * e, .ldy = h * e, .scale = c->scale, .rate = c->rate,
                   .keep_scale = c->rate > 0 ? 1.0f / (1.0f - c->rate) : 1.0f, .causal = c->causal,
                   .key = rng_mix_key(c->seed, RNG_DROPOUT, c->step),
                   .base = c->base + (uint64_t)(pair * t) * (uint64_t)t};
    const int64_t qo = s * t * p.ldq + hh * e, yo = s * t * p.ldy + hh * e, ro = pair * t;
    p.q = c->qkv + qo, p.k = c->qkv + qo + h * e, p.v = c->qkv + qo + 2 * h * e;
    p.y = c->y ? c->y + yo : NULL, p.dy = c->dy ? c->dy + yo : NULL, p.yo = c->yo ? c->yo + yo : NULL;
    p.lse = c->lse ? c->lse + ro : NULL, p.lseo = c->lseo ? c->lseo + ro : NULL;
    p.dsum = c->dsum ? c->dsum + ro : NULL;
    if (c->dqkv) p.dq = c->dqkv + qo, p.dk = c->dqkv + qo + h * e, p.dv = c->dqkv + qo + 2 * h * e;
    return p;
}

// s[m, AK] = a[m, E] . b[cnt, E]^T (rows of a and b with strides lda, ldb): galley's product
// (which packs b itself) where the tile allows, else b is packed transposed AEC features at a time
// into bt, and the chunks' products summed in order.
static void attn_abt(const attn_kernels *kr, int64_t m, int64_t cnt, int64_t e, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *s, float *bt) {
#if ATTN_VECTOR
    const cpu_store_act none = {0};
    if (kr != &attn_scalar && cpu_gemm_fast(false, true, m, cnt, e, a, lda, b, ldb, false, NULL, none, s, AK, false))
        return;
#endif
    for (int64_t e0 = 0; e0 < e; e0 += AEC) {
        const int64_t ec = e - e0 < AEC ? e - e0 : AEC;
        for (int64_t f = 0; f < ec; f++)
            for (int64_t j = 0; j < cnt; j++) bt[f * AK + j] = b[j * ldb + e0 + f];
        kr->mm(m, cnt, ec, a + e0, lda, bt, AK, s, AK, e0 > 0);
    }
}

// Keys of row i (global) visible in the tile from j0 with cnt keys: all, or j <= i when causal.
static int64_t attn_visible(const attn_pair *p, int64_t i, int64_t j0, int64_t cnt) {
    if (!p->causal) return cnt;
    int64_t v = i + 1 - j0;
    return v < 0 ? 0 : v < cnt ? v : cnt;
}

// The dropout factor of probability (i, j): 0 (dropped) or 1 / (1 - rate); 1 without dropout.
static inline float attn_keep(const attn_pair *p, int64_t i, int64_t j) {
    if (p->rate <= 0) return 1.0f;
    const uint64_t idx = p->base + (uint64_t)i * (uint64_t)p->t + (uint64_t)j;
    // = rng_uniform(seed, RNG_DROPOUT, step, idx), with the key hashed once
    return rng_mix_uniform(p->key, idx) < p->rate ? 0.0f : p->keep_scale;
}

// ---- forward --------------------------------------------------------------------------------------

// Folds one key tile's scores s[bq, AK] (raw q.k) into rows i0.. of the online softmax: m, l the
// running maxima and sums; y rows rescaled (but by the first key tile, which writes them next);
// s becomes the (dropped-out) probabilities.
static void attn_fwd_softmax(const attn_pair *p, int64_t i0, int64_t bq, int64_t j0, int64_t bk, float *s, float *m,
                             float *l) {
    const attn_kernels *kr = p->kr;
    for (int64_t r = 0; r < bq; r++) {
        float *sr = s + r * AK;
        const int64_t nv = attn_visible(p, i0 + r, j0, bk);
        if (nv == 0) {
            memset(sr, 0, sizeof(float) * (size_t)bk);
            continue;
        }
        const float mx = kr->row_max(sr, nv, p->scale, m[r]);
        const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
        const float sum = kr->exp_row(sr, nv, p->scale, mx);
        if (nv < bk) memset(sr + nv, 0, sizeof(float) * (size_t)(bk - nv));
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        if (alpha != 1.0f && j0 > 0) kr->scale_row(p->yo + (i0 + r) * p->ldy, p->e, alpha);
        if (p->rate > 0)
            for (int64_t j = 0; j < nv; j++) sr[j] *= attn_keep(p, i0 + r, j0 + j);
    }
}

// Whether a query tile of bq rows takes the whole-tile kernels for its full key tiles: AVX-512, no
// mask, no dropout, E of 32, 48 or 64 (the general path's products are galley's there, whose
// chains those kernels sum), 12 rows or more (fewer go to OpenBLAS). Measured on a 2-core Xeon
// (AVX-512, 2 threads; alternating runs, the same bits): vit-tiny's attention (N 64, T 64, H 3,
// E 64) forward 1.44-1.54 -> 1.34-1.37 ms, backward 2.67 -> 2.34-2.49 ms (best of 30-40; its
// training within noise, 1.002x by median over 5 pairs: the attention core is 9% of its step);
// T 1024, H 8, E 48 forward 13.2 -> 10.9, backward 25.4 -> 19.4 ms; the tutorial's T 4050
// (vit.yaml: H 8, E 48) forward 231-246 -> 188-200 ms, backward 432-449 -> 345-378 ms. What is
// left at T 64: the exponentials (27% of the forward), K and V arriving from L3 (the packs, 10%).
static bool attn_tile_fast(const attn_pair *p, int64_t bq) {
    return p->kr->qk_rows && __atomic_load_n(&attn_tiles_on, __ATOMIC_RELAXED) && !p->causal && p->rate <= 0 &&
           bq >= 12 && p->e % 16 == 0 && p->e >= 32 && p->e <= 64;
}

// attn_abt, attn_fwd_softmax and the product with v for a full key tile by the whole-tile
// kernels, the same sums (no mask, no dropout: every key visible).
static void attn_fwd_tile_fast(const attn_pair *p, int64_t i0, int64_t bq, int64_t j0, float *s, float *kt, float *m,
                               float *l) {
    const attn_kernels *kr = p->kr;
    float mx[AQ], sum[AQ];
    kr->pack_kt(p->e, p->k + j0 * p->ldq, p->ldq, kt);
    kr->qk_rows(bq, p->e, p->q + i0 * p->ldq, p->ldq, kt, s);
    kr->softmax_rows(bq, s, p->scale, m, mx, sum);
    for (int64_t r = 0; r < bq; r++) {
        const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx[r]);
        l[r] = l[r] * alpha + sum[r];
        m[r] = mx[r];
        if (alpha != 1.0f && j0 > 0) kr->scale_row(p->yo + (i0 + r) * p->ldy, p->e, alpha);
    }
    kr->pv_rows(bq, p->e, s, p->v + j0 * p->ldq, p->ldq, p->yo + i0 * p->ldy, p->ldy, j0 > 0);
}

// Query rows i0 .. i0+bq-1 of one pair: y (written by the first key tile, every row of which sees
// a key: key 0), lse.
static void attn_fwd_tile(const attn_pair *p, int64_t i0, int64_t bq) {
    float s[AQ * AK], bt[AEC * AK], m[AQ], l[AQ];
    for (int64_t r = 0; r < bq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    const int64_t jend = p->causal ? i0 + bq : p->t;
    const bool fast = attn_tile_fast(p, bq);
    for (int64_t j0 = 0; j0 < jend; j0 += AK) {
        const int64_t bk = p->t - j0 < AK ? p->t - j0 : AK;
        if (fast && bk == AK) {
            attn_fwd_tile_fast(p, i0, bq, j0, s, bt, m, l);
            continue;
        }
        attn_abt(p->kr, bq, bk, p->e, p->q + i0 * p->ldq, p->ldq, p->k + j0 * p->ldq, p->ldq, s, bt);
        attn_fwd_softmax(p, i0, bq, j0, bk, s, m, l);
        p->kr->mm(bq, p->e, bk, s, AK, p->v + j0 * p->ldq, p->ldq, p->yo + i0 * p->ldy, p->ldy, j0 > 0);
    }
    for (int64_t r = 0; r < bq; r++) {
        float *yr = p->yo + (i0 + r) * p->ldy;
        p->kr->scale_row(yr, p->e, 1.0f / l[r]);
        p->lseo[i0 + r] = m[r] + logf(l[r]);
    }
}

// qkv[N, T, 3, H, E] -> y[N, T, H, E], lse[N, H, T] (backend.h)
void cpu_attention_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                           uint64_t seed, uint64_t step, uint64_t base, const float *qkv, float *y, float *lse) {
    const attn_call c = {.kr = attn_kernels_get(), .n = n, .t = t, .h = h, .e = e, .scale = scale, .rate = rate,
                         .causal = causal, .seed = seed, .step = step, .base = base, .qkv = qkv, .yo = y, .lseo = lse};
    const int64_t qt = (t + AQ - 1) / AQ, tasks = n * h * qt;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && n * h * t * t * e >= 65536)
    for (int64_t task = 0; task < tasks; task++) {
        const attn_pair p = attn_pair_at(&c, task / qt);
        const int64_t i0 = task % qt * AQ;
        attn_fwd_tile(&p, i0, t - i0 < AQ ? t - i0 : AQ);
    }
}

// ---- backward -------------------------------------------------------------------------------------

// attn_bwd_tile for a full key tile by the whole-tile kernels (attn_tile_fast: no mask, no
// dropout), the same sums.
static void attn_bwd_tile_fast(const attn_pair *p, int64_t i0, int64_t bq, int64_t j0, bool kv, bool q,
                               bool kv_first, bool q_first, float *s, float *dp, float *kt) {
    const attn_kernels *kr = p->kr;
    kr->pack_kt(p->e, p->k + j0 * p->ldq, p->ldq, kt);
    kr->qk_rows(bq, p->e, p->q + i0 * p->ldq, p->ldq, kt, s);  // q k^T
    kr->pack_kt(p->e, p->v + j0 * p->ldq, p->ldq, kt);
    kr->qk_rows(bq, p->e, p->dy + i0 * p->ldy, p->ldy, kt, dp);  // dy v^T
    for (int64_t r = 0; r < bq; r++) kr->exp_row(s + r * AK, AK, p->scale, p->lse[i0 + r]);  // P
    if (kv) kr->ptv_rows(bq, p->e, s, p->dy + i0 * p->ldy, p->ldy, p->dv + j0 * p->ldq, p->ldq, !kv_first);
    for (int64_t r = 0; r < bq; r++)  // dS = P (dP - D) scale
        kr->ds_row(s + r * AK, dp + r * AK, AK, p->dsum[i0 + r], p->scale);
    if (kv) kr->ptv_rows(bq, p->e, s, p->q + i0 * p->ldq, p->ldq, p->dk + j0 * p->ldq, p->ldq, !kv_first);
    if (q) kr->pv_rows(bq, p->e, s, p->k + j0 * p->ldq, p->ldq, p->dq + i0 * p->ldq, p->ldq, !q_first);
}

// One (query tile, key tile) of backward: dK, dV rows j0.. (with kv; written when kv_first, else
// added to), dQ rows i0.. (with q; likewise q_first). P and dS stay [bq, AK] as the products read
// them (transposed by the product for dV and dK); columns past a row's visible keys are 0.
static void attn_bwd_tile(const attn_pair *p, int64_t i0, int64_t bq, int64_t j0, int64_t bk, bool kv, bool q,
                          bool kv_first, bool q_first) {
    float s[AQ * AK], dp[AQ * AK], pk[AQ * AK], bt[AEC * AK];
    const attn_kernels *kr = p->kr;
    if (bk == AK && attn_tile_fast(p, bq)) {
        attn_bwd_tile_fast(p, i0, bq, j0, kv, q, kv_first, q_first, s, dp, bt);
        return;
    }
    attn_abt(kr, bq, bk, p->e, p->q + i0 * p->ldq, p->ldq, p->k + j0 * p->ldq, p->ldq, s, bt);    // q k^T
    attn_abt(kr, bq, bk, p->e, p->dy + i0 * p->ldy, p->ldy, p->v + j0 * p->ldq, p->ldq, dp, bt);  // dy v^T
    for (int64_t r = 0; r < bq; r++) {
        float *sr = s + r * AK;
        const int64_t nv = attn_visible(p, i0 + r, j0, bk);
        kr->exp_row(sr, nv, p->scale, p->lse[i0 + r]);  // P
        if (nv < bk) memset(sr + nv, 0, sizeof(float) * (size_t)(bk - nv));
    }
    if (p->rate > 0)  // dropout, each draw once: dP keep, and the dropped-out P (pk) for dV
        for (int64_t r = 0; r < bq; r++)
            for (int64_t j = 0; j < bk; j++) {
                const float keep = attn_keep(p, i0 + r, j0 + j);
                dp[r * AK + j] *= keep, pk[r * AK + j] = s[r * AK + j] * keep;
            }
    if (kv) kr->mm_ta(bk, p->e, bq, p->rate > 0 ? pk : s, AK, p->dy + i0 * p->ldy, p->ldy, p->dv + j0 * p->ldq,
                      p->ldq, !kv_first);
    for (int64_t r = 0; r < bq; r++)  // dS = P (dP keep - D) scale
        kr->ds_row(s + r * AK, dp + r * AK, attn_visible(p, i0 + r, j0, bk), p->dsum[i0 + r], p->scale);
    if (kv) kr->mm_ta(bk, p->e, bq, s, AK, p->q + i0 * p->ldq, p->ldq, p->dk + j0 * p->ldq, p->ldq, !kv_first);
    if (q) kr->mm(bq, p->e, bk, s, AK, p->k + j0 * p->ldq, p->ldq, p->dq + i0 * p->ldq, p->ldq, !q_first);
}

// The first query tile that sees key tile j0 (causal: the one holding query j0).
static int64_t attn_first_q(const attn_pair *p, int64_t j0) { return p->causal ? j0 / AQ * AQ : 0; }

// Key rows j0.. (kv) or query rows i0.. (!kv) of one pair, summed over the tiles of the other side
// in order (the first one writes them).
static void attn_bwd_rows(const attn_pair *p, int64_t x0, bool kv) {
    const int64_t t = p->t, bx = t - x0 < (kv ? AK : AQ) ? t - x0 : (kv ? AK : AQ);
    if (kv) {
        const int64_t first = attn_first_q(p, x0);
        for (int64_t i0 = first; i0 < t; i0 += AQ)
            attn_bwd_tile(p, i0, t - i0 < AQ ? t - i0 : AQ, x0, bx, true, false, i0 == first, false);
    } else {
        const int64_t jend = p->causal ? x0 + bx : t;
        for (int64_t j0 = 0; j0 < jend; j0 += AK)
            attn_bwd_tile(p, x0, bx, j0, t - j0 < AK ? t - j0 : AK, false, true, false, j0 == 0);
    }
}

// A whole pair in one pass: key tiles outer, query tiles inner (each dQ row still sums its key
// tiles in order, as attn_bwd_rows does).
static void attn_bwd_pair(const attn_pair *p) {
    const int64_t t = p->t;
    for (int64_t j0 = 0; j0 < t; j0 += AK)
        for (int64_t i0 = attn_first_q(p, j0); i0 < t; i0 += AQ)
            attn_bwd_tile(p, i0, t - i0 < AQ ? t - i0 : AQ, j0, t - j0 < AK ? t - j0 : AK, true, true,
                          i0 == attn_first_q(p, j0), j0 == 0);
}

// D[N, H, T] = rowsum(dy * y) per (sample, head, query), in kr->dot's fixed order over E.
static void attn_row_dots(const attn_kernels *kr, int64_t n, int64_t t, int64_t h, int64_t e, const float *y,
                          const float *dy, float *d) {
#pragma omp parallel for schedule(static) if (n * t * h * e >= 65536)
    for (int64_t s = 0; s < n; s++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t i = 0; i < t; i++) {
                const float *yr = y + (s * t + i) * h * e + hh * e, *dr = dy + (s * t + i) * h * e + hh * e;
                d[(s * h + hh) * t + i] = kr->dot(yr, dr, e);
            }
}

// dqkv[N, T, 3, H, E] from dy[N, T, H, E] (backend.h); work [N, H, T] holds D.
void cpu_attention_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                            uint64_t seed, uint64_t step, uint64_t base, const float *qkv, const float *y,
                            const float *lse, const float *dy, float *dqkv, float *work) {
    const attn_call c = {.kr = attn_kernels_get(), .n = n, .t = t, .h = h, .e = e, .scale = scale, .rate = rate,
                         .causal = causal, .seed = seed, .step = step, .base = base, .qkv = qkv, .y = y, .dy = dy,
                         .lse = lse, .dsum = work, .dqkv = dqkv};
    attn_row_dots(c.kr, n, t, h, e, y, dy, work);
    const int64_t pairs = n * h;
    const bool big = n * h * t * t * e >= 65536;
    int split = __atomic_load_n(&attn_split_forced, __ATOMIC_RELAXED);
    if (split < 0) split = pairs < omp_get_max_threads() && t > AQ;
    if (!split) {
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1 && big)
        for (int64_t pair = 0; pair < pairs; pair++) {
            const attn_pair p = attn_pair_at(&c, pair);
            attn_bwd_pair(&p);
        }
        return;
    }
    const int64_t tiles = (t + AK - 1) / AK;  // AK == AQ: one count for both passes
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 1) if (big)
        for (int64_t task = 0; task < pairs * tiles; task++) {
            const attn_pair p = attn_pair_at(&c, task / tiles);
            attn_bwd_rows(&p, task % tiles * AK, pass == 0);
        }
    }
}

_Static_assert(AQ == AK, "attn_bwd_rows and the two-pass split count tiles once for queries and keys");
