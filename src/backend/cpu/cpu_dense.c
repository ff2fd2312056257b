// cpu_dense.c: dense layer kernels: galley's own product (cpu_gemm_fast.c, bias fused into its
// first load) where it applies and measured faster, else OpenBLAS sgemm through cpu_gemm; both
// keep the sums independent of the thread count.
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DB_BUILT 1
#else
#define DB_BUILT 0
#endif

// db[j] = the sum of dy's rows at column j, in row order from 0 (float adds), for j in [j0, j1).
// The build's baseline (SSE2) kept 2 of a 32-column block's sums per vector add in flight; on
// AVX-512 eight 16-lane sums of a 128-column block, on AVX2 eight 8-lane ones of 64: the same
// adds per column in the same order, so the same bits on every instruction set. Measured on a
// 2-core Xeon (2 threads, best of 50): 4096 rows of 768 columns 672 -> 302-348 us, of 192 137 ->
// 39-47 us (vit-tiny's dense layers: the bias gradients were 2.3% of its samples).
#if DB_BUILT
__attribute__((target("avx512f"))) static void db_cols_512(int64_t n, int64_t u, const float *dy, int64_t j0,
                                                           int64_t j1, float *db) {
    for (; j0 < j1; j0 += 128) {
        __m512 acc[8];
        __mmask16 m[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            const int64_t left = j1 - j0 - 16 * v;
            m[v] = (__mmask16)(left >= 16 ? 0xffffu : left <= 0 ? 0u : (1u << left) - 1u);
            acc[v] = _mm512_setzero_ps();
        }
        for (int64_t i = 0; i < n; i++) {
            const float *row = dy + i * u + j0;
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], row + 16 * v));
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) _mm512_mask_storeu_ps(db + j0 + 16 * v, m[v], acc[v]);
    }
}

__attribute__((target("avx2"))) static void db_cols_256(int64_t n, int64_t u, const float *dy, int64_t j0, int64_t j1,
                                                        float *db) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; j0 < j1; j0 += 64) {
        __m256 acc[8];
        __m256i m[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            const int64_t left = j1 - j0 - 8 * v;
            m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 0 ? 0 : left > 8 ? 8 : left)), lane);
            acc[v] = _mm256_setzero_ps();
        }
        for (int64_t i = 0; i < n; i++) {
            const float *row = dy + i * u + j0;
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) acc[v] = _mm256_add_ps(acc[v], _mm256_maskload_ps(row + 8 * v, m[v]));
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) _mm256_maskstore_ps(db + j0 + 8 * v, m[v], acc[v]);
    }
}
#endif

static void db_cols(int64_t n, int64_t u, const float *dy, int64_t j0, int64_t j1, float *db) {
#if DB_BUILT
    const int isa = cpu_conv_fast_isa();
    if (isa == CPU_ISA_AVX512) return db_cols_512(n, u, dy, j0, j1, db);
    if (isa == CPU_ISA_AVX2) return db_cols_256(n, u, dy, j0, j1, db);
#endif
    for (; j0 < j1; j0 += 32) {
        const int64_t width = j1 - j0 < 32 ? j1 - j0 : 32;
        // A local block: db may alias dy as far as the compiler knows, which kept the loop
        // scalar (4.6% of a one-thread vit-tiny step, where N is batch x tokens).
        float acc[32] = {0};
        for (int64_t i = 0; i < n; i++) {
            const float *row = dy + i * u + j0;
#pragma omp simd
            for (int64_t j = 0; j < width; j++) acc[j] += row[j];
        }
        memcpy(db + j0, acc, sizeof(float) * (size_t)width);
    }
}

// x is (N,K), w is (U,K), b is (U) or NULL, y is (N,U)
void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y) {
    const cpu_store_act none = {0};
    if (cpu_gemm_fast(false, true, n, u, k, x, k, w, k, false, b, none, y, u, false)) return;
    if (b) {
        for (int64_t i = 0; i < n; i++) memcpy(y + i * u, b, sizeof(float) * (size_t)u);
    }
    cpu_gemm(false, true, n, u, k, x, k, w, k, b ? 1.0f : 0.0f, y, u);
}

// As cpu_dense_forward, y = (x W^T + b) + res as it is stored (res laid out as y): the bits of
// cpu_dense_forward and then an add (one rounding of the two, in either order). The residual add's
// own pass (read both, write the sum) is gone. Measured: see graph_fuse_adds. Fewer rows than
// units (a small batch's MLP) keep the two passes: cpu_gemm_fast computes such a forward
// transposed, 6-12% faster there, and its tiles do not take a residual; the add over so few rows
// is the cheaper part.
void cpu_dense_forward_res(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b,
                           const float *res, float *y) {
    const cpu_store_act sr = {.res = res};
    if (n >= u && cpu_gemm_fast(false, true, n, u, k, x, k, w, k, false, b, sr, y, u, false)) return;
    cpu_dense_forward(n, k, u, x, w, b, y);  // few rows, small, or no AVX2: in two passes
    cpu_axpy(n * u, 1.0f, res, y);            // the add layer's own sum
}

// As cpu_dense_forward, y = act(x W^T + b) as it is stored: the same bits as the two passes
// (cpu_gemm_fast's activation is cpu_act_forward's expression).
void cpu_dense_forward_act(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y,
                           gl_act act, float slope) {
    const cpu_store_act sa = {.on = true, .act = act, .slope = slope};
    if (cpu_gemm_fast(false, true, n, u, k, x, k, w, k, false, b, sa, y, u, false)) return;
    cpu_dense_forward(n, k, u, x, w, b, y);
    cpu_act_forward(act, slope, n * u, y, y);
}

// x is (N,K), w is (U,K), dy is (N,U); dw (U,K) and db (U) are overwritten, dx (N,K) accumulated
// (set: overwritten, the sums starting from 0 instead of from a cleared dx: the same bits). A dx
// written rather than cleared and added to saves a pass over it and reading it back: vit-tiny's
// MLP input gradients are 4096 x 768 floats (12.6 MB) a block. Measured on a 2-core Xeon
// (vit-tiny, 2 threads, 30 steps, 3 alternating runs): dense backward 3.71-4.20 -> 3.61-4.03 s,
// attention backward (its projections) 2.93-3.25 -> 2.85-3.17 s, the run 3.5-4.2% faster.
// dW = dy^T . x and db = the batch's sum of dy (dense_backward's first two parts).
static void dense_param_grads(int64_t n, int64_t k, int64_t u, const float *x, const float *dy, float *dw, float *db) {
    const cpu_store_act none = {0};
    // dW = dy^T . x. galley's product against OpenBLAS (2-core Xeon, 2 threads; cpu_gemm_fast.c's
    // table): 1.06-1.10x over N = 128 rows (the MLP), 0.59-0.95x over 4096 (vit-tiny's tokens at
    // batch 64), hence OpenBLAS past N = 1024, the N rows cut into parts (cpu_gemm_depth).
    if (n > 1024)
        cpu_gemm_depth(true, false, u, k, n, dy, u, x, k, dw, k);
    else if (!cpu_gemm_fast(true, false, u, k, n, dy, u, x, k, false, NULL, none, dw, k, true))
        cpu_gemm_rows(true, false, u, k, n, dy, u, x, k, 0.0f, dw, k);
    if (db) {
        // Threads own runs of whole 32-unit blocks; each sum runs over the batch in order, as on
        // one thread. (Blocks of 64 gave one of two threads two thirds of a 192-unit layer: vit-tiny's.)
        const int64_t nb = (u + 31) / 32;
#pragma omp parallel if (n * u >= 65536)
        {
            const int64_t me = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t j0 = nb * me / nt * 32, j1 = nb * (me + 1) / nt * 32;
            if (j0 < u) db_cols(n, u, dy, j0, j1 < u ? j1 : u, db);
        }
    }
}

static void dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                           float *dw, float *db, float *dx, bool set) {
    const cpu_store_act none = {0};
    dense_param_grads(n, k, u, x, dy, dw, db);
    if (dx && !cpu_gemm_fast(false, false, n, k, u, dy, u, w, k, !set, NULL, none, dx, k, false))
        cpu_gemm(false, false, n, k, u, dy, u, w, k, set ? 0.0f : 1.0f, dx, k);  // dx (+)= dy . W
}

void cpu_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx) {
    dense_backward(n, k, u, x, w, dy, dw, db, dx, false);
}

void cpu_dense_backward_set(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx) {
    dense_backward(n, k, u, x, w, dy, dw, db, dx, true);
}

// As cpu_dense_backward_set, dx through the derivative of the relu or leaky_relu whose output x
// is (the gate: x > 0 exactly where the activation's input was), as the product stores it: the
// activation's backward pass (a read of dx and x, a write of its own input gradient) is gone,
// with the bits of dense_backward_set and then cpu_act_backward_set. Measured on a 2-core Xeon
// (MLP, 2 threads): the two relu passes took 31 us of a 2.0 ms step; fused (the gate's rows
// prefetched as each tile starts), 16 alternating pairs of runs: median +1.3%, best +2.1%.
//
// A gelu's derivative likewise, from the array gate its forward kept (cpu_gelu_forward_keep; for
// relu and leaky_relu gate is x): the bits of dense_backward_set and then cpu_gelu_backward_kept.
// Measured: see graph_keep_derivs.
void cpu_dense_backward_act(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx, gl_act act, float slope, const float *gate) {
    dense_param_grads(n, k, u, x, dy, dw, db);
    const cpu_store_act sa = {.on = true, .act = act, .slope = slope, .gate = gate};
    if (cpu_gemm_fast(false, false, n, k, u, dy, u, w, k, false, NULL, sa, dx, k, false)) return;
    cpu_gemm(false, false, n, k, u, dy, u, w, k, 0.0f, dx, k);  // small, or no AVX2: in two passes
    if (act == ACT_GELU) cpu_gelu_backward_kept(n * k, gate, dx, dx, 1);
    else cpu_act_backward_set(act, slope, n * k, gate, dx, dx);
}
