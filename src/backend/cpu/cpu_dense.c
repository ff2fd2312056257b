// cpu_dense.c: dense layer kernels: galley's own product (cpu_gemm_fast.c, bias fused into its
// first load) where it applies and measured faster, else OpenBLAS sgemm through cpu_gemm; both
// keep the sums independent of the thread count.
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

// x is (N,K), w is (U,K), b is (U) or NULL, y is (N,U)
void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y) {
    const cpu_store_act none = {0};
    if (cpu_gemm_fast(false, true, n, u, k, x, k, w, k, false, b, none, y, u, false)) return;
    if (b) {
        for (int64_t i = 0; i < n; i++) memcpy(y + i * u, b, sizeof(float) * (size_t)u);
    }
    cpu_gemm(false, true, n, u, k, x, k, w, k, b ? 1.0f : 0.0f, y, u);
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
    // batch 64), hence OpenBLAS past N = 1024.
    if (n > 1024 || !cpu_gemm_fast(true, false, u, k, n, dy, u, x, k, false, NULL, none, dw, k, true))
        cpu_gemm_rows(true, false, u, k, n, dy, u, x, k, 0.0f, dw, k);
    if (db) {
        // Threads own blocks of 32 units; each sum runs over the batch in order, as on one thread.
        // (Blocks of 64 gave one of two threads two thirds of a 192-unit layer: vit-tiny's.)
#pragma omp parallel for schedule(static) if (n * u >= 65536)
        for (int64_t j0 = 0; j0 < u; j0 += 32) {
            const int64_t j1 = u - j0 < 32 ? u : j0 + 32, width = j1 - j0;
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
void cpu_dense_backward_act(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx, gl_act act, float slope) {
    dense_param_grads(n, k, u, x, dy, dw, db);
    const cpu_store_act gate = {.on = true, .act = act, .slope = slope, .gate = x};
    if (cpu_gemm_fast(false, false, n, k, u, dy, u, w, k, false, NULL, gate, dx, k, false)) return;
    cpu_gemm(false, false, n, k, u, dy, u, w, k, 0.0f, dx, k);  // small, or no AVX2: in two passes
    cpu_act_backward_set(act, slope, n * k, x, dx, dx);
}
