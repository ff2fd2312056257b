// cuda_dense.cu: dense layers on cuBLAS. Row-major [rows, cols] arrays are column-major
// [cols, rows] to cuBLAS, so each product below is written for the transposes.
#include "backend/cuda/cuda_internal.h"

// b[U] -> y[N, U]: every row starts as the bias (the GEMM then adds x . W^T with beta 1)
__global__ static void bias_rows(int64_t n, int64_t u, const float *b, float *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * u; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % u];
}

// dy[N, U] -> db[U]: one thread per unit sums its column in row order (coalesced across units,
// a fixed order, so repeatable)
__global__ static void column_sums(int64_t n, int64_t u, const float *dy, float *db) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < u; j += (int64_t)gridDim.x * blockDim.x) {
        double s = 0;
        for (int64_t r = 0; r < n; r++) s += dy[r * u + j];
        db[j] = (float)s;
    }
}

// y[N, U] = x[N, K] . W[U, K]^T (+ b): column-major y^T[U, N] = W (K x U)^T . x^T (K x N)
void cuda_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y) {
    cuda_ctx *c = cuda_ctx_get();
    if (n == 0 || u == 0) return;
    float beta = 0.0f, one = 1.0f;
    if (b) {
        bias_rows<<<cuda_grid(n * u, GL_BLOCK), GL_BLOCK, 0, c->stream>>>(n, u, b, y);
        CU_LAUNCHED();
        beta = 1.0f;
    }
    CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)u, (int)n, (int)k, &one, w, (int)k, x, (int)k,
                             &beta, y, (int)u));
}

// dW[U, K] = dy^T . x      column-major dW^T (K x U) = x^T (K x N) . dy (N x U)
// db[U]    = sum_n dy
// dx[N, K] += dy . W       column-major dx^T (K x N) += W^T (K x U) . dy^T (U x N)
void cuda_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                         float *db, float *dx) {
    cuda_ctx *c = cuda_ctx_get();
    float zero = 0.0f, one = 1.0f;
    if (n == 0) {  // no rows: the gradients are zero
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)(u * k), c->stream));
        if (db) CU_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * (size_t)u, c->stream));
        return;
    }
    CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, (int)k, (int)u, (int)n, &one, x, (int)k, dy, (int)u,
                             &zero, dw, (int)k));
    if (db) {
        column_sums<<<cuda_grid(u, GL_BLOCK), GL_BLOCK, 0, c->stream>>>(n, u, dy, db);
        CU_LAUNCHED();
    }
    if (dx)
        CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)k, (int)n, (int)u, &one, w, (int)k, dy,
                                 (int)u, &one, dx, (int)k));
}
