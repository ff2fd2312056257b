// cpu_dense.c: dense layer kernels on OpenBLAS sgemm.
#include <cblas.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

#define DENSE_K_BLOCK 128

// x is (N,K), w is (U,K), b is (U) or NULL, y is (N,U)
void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y) {
    if (b) {
        for (int64_t i = 0; i < n; i++) memcpy(y + i * u, b, sizeof(float) * (size_t)u);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)u, (blasint)k, 1.0f, x, (blasint)k, w,
                (blasint)k, b ? 1.0f : 0.0f, y, (blasint)u);
}

// x is (N,K), w is (U,K), dy is (N,U); dw (U,K) and db (U) are overwritten, dx (N,K) accumulated
void cpu_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx) {
    // dW sums over the batch: in blocks of DENSE_K_BLOCK rows, because OpenBLAS's threaded sgemm
    // splits a long inner dimension differently from its serial one, and results must not depend
    // on the thread count. A block this short is summed the same way by both.
    for (int64_t r0 = 0; r0 < n; r0 += DENSE_K_BLOCK) {
        int64_t rn = n - r0 < DENSE_K_BLOCK ? n - r0 : DENSE_K_BLOCK;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)u, (blasint)k, (blasint)rn, 1.0f, dy + r0 * u,
                    (blasint)u, x + r0 * k, (blasint)k, r0 ? 1.0f : 0.0f, dw, (blasint)k);
    }
    if (db) {
        // Threads own blocks of 64 units; each sum runs over the batch in order, as on one thread.
#pragma omp parallel for schedule(static) if (n * u >= 65536)
        for (int64_t j0 = 0; j0 < u; j0 += 64) {
            const int64_t j1 = u - j0 < 64 ? u : j0 + 64;
            memset(db + j0, 0, sizeof(float) * (size_t)(j1 - j0));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = j0; j < j1; j++) db[j] += dy[i * u + j];
        }
    }
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)k, (blasint)u, 1.0f, dy,
                    (blasint)u, w, (blasint)k, 1.0f, dx, (blasint)k);
}
