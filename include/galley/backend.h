// backend.h: the kernels layers call. A layer never computes on its own; it calls through
// gl_backend so the same layer runs on the CPU (backend/cpu) or, later, CUDA (backend/cuda).
#ifndef GALLEY_BACKEND_H
#define GALLEY_BACKEND_H

#include <stdint.h>

typedef enum { ACT_RELU, ACT_LEAKY_RELU, ACT_TANH, ACT_SIGMOID, ACT_GELU } gl_act;

typedef struct gl_backend {
    const char *name;
    // y[N,U] = x[N,K] . W[U,K]^T (+ b[U])
    void (*dense_forward)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                          const float *b, float *y);
    // dW[U,K] = dy^T . x, db[U] = sum_n dy, dx[N,K] += dy . W (dx may be NULL)
    void (*dense_backward)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                           const float *dy, float *dw, float *db, float *dx);
    // y[i] = act(x[i]) over n elements; alpha is leaky_relu's slope
    void (*act_forward)(gl_act act, float alpha, int64_t n, const float *x, float *y);
    // dx[i] += dy[i] * act'(x[i])
    void (*act_backward)(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
    // Mean softmax cross-entropy over N rows of C logits; writes dlogits = (p - onehot) / N
    // (dlogits may be NULL); returns the mean loss and the number of rows whose argmax == label.
    double (*softmax_xent)(int64_t n, int64_t c, const float *logits, const int32_t *labels,
                           float *dlogits, int64_t *correct);
    // Sets the number of threads kernels may use.
    void (*set_threads)(int threads);

    // ---- convolution family (conv, transposed conv): owned by src/backend/cpu/cpu_conv*.c ----
    // (begin conv region)
    // (end conv region)

    // ---- pooling, normalisation, shape and merge layers: src/backend/cpu/cpu_pool*.c, cpu_norm*.c ----
    // (begin pool-norm region)
    // (end pool-norm region)
} gl_backend;

const gl_backend *backend_cpu(void);

#endif
