// cuda_dense.cu: dense layers on cuBLAS. Row-major [rows, cols] arrays are column-major
// [cols, rows] to cuBLAS, so each product below is written for the transposes.
//
// Precision (set_precision): fp32 is cublasSgemm in pedantic math, the same bits every run.
// tf32, bf16 and fp16 are cublasGemmEx on the same fp32 arrays with a _FAST compute type: the
// library rounds the operands to 19 or 16 bits inside the kernel and accumulates and writes in
// fp32, so no conversion buffers are needed.
#include "backend/cuda/cuda_internal.h"

// The compute type of cublasGemmEx for the precision in effect (fp32 never gets here).
static cublasComputeType_t gemm_compute(void) {
    int p = cuda_ctx_get()->precision;
    return p == PRECISION_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
           : p == PRECISION_FP16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                 : CUBLAS_COMPUTE_32F_FAST_TF32;
}

// C (m x n) = alpha op(A) op(B) + beta C, column-major fp32 arrays, in the precision in effect.
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const float *alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, const float *beta, float *c, int64_t ldc) {
    cuda_ctx *cx = cuda_ctx_get();
    if (cx->precision != PRECISION_TF32 && !cuda_is_half()) {
        CUBLAS_CHECK(cublasSgemm(cx->cublas, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c,
                                 (int)ldc));
        return;
    }
    CUBLAS_CHECK(cublasGemmEx(cx->cublas, ta, tb, (int)m, (int)n, (int)k, alpha, a, CUDA_R_32F, (int)lda, b,
                              CUDA_R_32F, (int)ldb, beta, c, CUDA_R_32F, (int)ldc, gemm_compute(),
                              CUBLAS_GEMM_DEFAULT));
}

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
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, u, n, k, &one, w, k, x, k, &beta, y, u);
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
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, k, u, n, &one, x, k, dy, u, &zero, dw, k);
    if (db) {
        column_sums<<<cuda_grid(u, GL_BLOCK), GL_BLOCK, 0, c->stream>>>(n, u, dy, db);
        CU_LAUNCHED();
    }
    if (dx) gemm(CUBLAS_OP_N, CUBLAS_OP_N, k, n, u, &one, w, k, dy, u, &one, dx, k);
}
