// cpu_dense.c: dense layer kernels on OpenBLAS sgemm (through cpu_gemm, which keeps the sums
// independent of the thread count).
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

// x is (N,K), w is (U,K), b is (U) or NULL, y is (N,U)
void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y) {
    if (b) {
        for (int64_t i = 0; i < n; i++) memcpy(y + i * u, b, sizeof(float) * (size_t)u);
    }
    cpu_gemm(false, true, n, u, k, x, k, w, k, b ? 1.0f : 0.0f, y, u);
}

// x is (N,K), w is (U,K), dy is (N,U); dw (U,K) and db (U) are overwritten, dx (N,K) accumulated
void cpu_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx) {
    cpu_gemm_rows(true, false, u, k, n, dy, u, x, k, 0.0f, dw, k);  // dW = dy^T . x
    if (db) {
        // Threads own blocks of 64 units; each sum runs over the batch in order, as on one thread.
#pragma omp parallel for schedule(static) if (n * u >= 65536)
        for (int64_t j0 = 0; j0 < u; j0 += 64) {
            const int64_t j1 = u - j0 < 64 ? u : j0 + 64, width = j1 - j0;
            // A local block: db may alias dy as far as the compiler knows, which kept the loop
            // scalar (4.6% of a one-thread vit-tiny step, where N is batch x tokens).
            float acc[64] = {0};
            for (int64_t i = 0; i < n; i++) {
                const float *row = dy + i * u + j0;
#pragma omp simd
                for (int64_t j = 0; j < width; j++) acc[j] += row[j];
            }
            memcpy(db + j0, acc, sizeof(float) * (size_t)width);
        }
    }
    if (dx) cpu_gemm(false, false, n, k, u, dy, u, w, k, 1.0f, dx, k);  // dx += dy . W
}
