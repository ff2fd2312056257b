// cuda_twin.h: what the CUDA-vs-CPU unit tests share (test_cuda_ops.c, test_cuda_transformer.c):
// tensors held twice (one copy in each backend's memory) and the comparisons with their
// tolerances. Include after testlib.h.
#ifndef GALLEY_TESTS_CUDA_TWIN_H
#define GALLEY_TESTS_CUDA_TWIN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "galley/backend.h"

// fp32 tolerances, |gpu - cpu| <= rtol * max(scale, |cpu|):
//   element-wise kernels: rtol RTOL_ELEM, scale 1 (libm and CUDA's math functions differ by
//     a few ulps; pure arithmetic by at most one rounding);
//   normalisation outputs: rtol RTOL_NORM, scale 1 (statistics summed in another order);
//   sums of K terms (GEMMs, convolutions, reductions): rtol sum_rtol(K), scale the largest
//     |cpu| of the tensor: the rounding of either summation order grows like sqrt(K).
#define RTOL_ELEM 1e-5
#define RTOL_NORM 1e-4
#define PAD_SAME (-1)  // a conv case's padding: TensorFlow's `same`, as the conv layer computes it

static inline double sum_rtol(int64_t k) { return fmax(1e-4, 1e-5 * sqrt((double)k)); }

// Reduced precisions, |gpu - cpu| <= rtol * max |cpu| of the tensor. Operands are rounded to
// tf32 or fp16 (11 significant bits: 2^-11 ~ 4.9e-4 relative each) or bf16 (8 bits: ~3.9e-3),
// accumulation stays fp32; the sums of the cases here land well inside these. tf32 is given
// the loose 1e-2 the issue names, though its rounding is fp16's.
#define PREC_CASES {{PRECISION_TF32, "tf32", 1e-2}, {PRECISION_BF16, "bf16", 3e-2}, {PRECISION_FP16, "fp16", 5e-3}}

typedef struct {
    const gl_backend *cpu, *gpu;
    double rtol;  // 0: fp32 (sum_rtol); else the GPU's precision is reduced: see PREC_CASES
} backends;

// ---- buffers on both backends -----------------------------------------------------------------

// One tensor twice: c from cpu->mem_alloc, g from gpu->mem_alloc (managed memory).
typedef struct {
    float *c, *g;
    int64_t n;
} twin;

static inline twin twin_new(const backends *b, int64_t n) {
    size_t bytes = sizeof(float) * (size_t)n;
    twin t = {b->cpu->mem_alloc(bytes), b->gpu->mem_alloc(bytes), n};
    if (!t.c || !t.g) fail_msg("mem_alloc of %zu bytes failed", bytes);
    return t;
}

// Copies the CPU's values into the GPU's copy; the host may touch managed memory only while
// no kernel runs, hence the sync.
static inline void twin_push(const backends *b, twin *t) {
    b->gpu->sync();
    memcpy(t->g, t->c, sizeof(float) * (size_t)t->n);
}

static inline twin twin_uniform(const backends *b, int64_t n, float lo, float hi, uint64_t stream) {
    twin t = twin_new(b, n);
    tl_fill_uniform(t.c, n, lo, hi, stream);
    twin_push(b, &t);
    return t;
}

static inline twin twin_const(const backends *b, int64_t n, float v) {
    twin t = twin_new(b, n);
    for (int64_t i = 0; i < n; i++) t.c[i] = v;
    twin_push(b, &t);
    return t;
}

static inline void twin_set(const backends *b, twin *t, float v) {
    for (int64_t i = 0; i < t->n; i++) t->c[i] = v;
    twin_push(b, t);
}

static inline void twin_free(const backends *b, twin *t) {
    b->gpu->sync();
    b->cpu->mem_free(t->c);
    b->gpu->mem_free(t->g);
    t->c = t->g = NULL;
}

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) abort();  // (fail_msg is not noreturn)
    return p;
}

// ---- comparisons --------------------------------------------------------------------------------

static inline double max_abs(const float *x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// Fails on the first i with |got - want| > rtol * max(scale, |want|); NaN fails.
static inline void expect_close(const char *ctx, const char *name, const float *got, const float *want, int64_t n,
                         double rtol, double scale) {
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - (double)want[i]), tol = rtol * fmax(scale, fabs(want[i]));
        if (!(diff <= tol))
            fail_msg("%s: %s[%lld]: gpu %.9g, cpu %.9g (difference %.3g > tolerance %.3g)", ctx, name, (long long)i,
                     got[i], want[i], diff, tol);
    }
}

static inline void expect_elem(const char *ctx, const char *name, const float *got, const float *want, int64_t n) {
    expect_close(ctx, name, got, want, n, RTOL_ELEM, 1.0);
}

static inline void expect_norm(const char *ctx, const char *name, const float *got, const float *want, int64_t n) {
    expect_close(ctx, name, got, want, n, RTOL_NORM, 1.0);
}

// want[i] are sums of (at most) k terms each.
static inline void expect_sum(const char *ctx, const char *name, const float *got, const float *want, int64_t n, int64_t k) {
    expect_close(ctx, name, got, want, n, sum_rtol(k), fmax(max_abs(want, n), 1e-30));
}

// A GEMM-shaped result (dense, conv): fp32's sum tolerance, or the reduced precision's.
static inline void expect_gemm(const backends *b, const char *ctx, const char *name, const float *got, const float *want,
                        int64_t n, int64_t k) {
    if (b->rtol > 0) expect_close(ctx, name, got, want, n, b->rtol, fmax(max_abs(want, n), 1e-30));
    else expect_sum(ctx, name, got, want, n, k);
}

static inline void expect_bitwise(const char *ctx, const char *name, const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            uint32_t a, c;
            memcpy(&a, &got[i], 4);
            memcpy(&c, &want[i], 4);
            fail_msg("%s: %s[%lld]: gpu %.9g (0x%08x), cpu %.9g (0x%08x): must be bitwise equal", ctx, name,
                     (long long)i, got[i], a, want[i], c);
        }
}

static inline void expect_same_i32(const char *ctx, const char *name, const int32_t *got, const int32_t *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: %s[%lld]: gpu %d, cpu %d: must be equal", ctx, name, (long long)i, got[i], want[i]);
}

static inline void expect_loss(const char *ctx, const char *name, double got, double want) {
    double diff = fabs(got - want), tol = RTOL_ELEM * fmax(1.0, fabs(want));
    if (!(diff <= tol) || !isfinite(want))
        fail_msg("%s: %s: gpu %.12g, cpu %.12g (difference %.3g > tolerance %.3g)", ctx, name, got, want, diff, tol);
}

// The CUDA backend, or NULL with why in msg (a build without CUDA has no backend_cuda).
// GALLEY_TEST_FAKE_GPU=cpu puts the CPU backend on the GPU's side: the test's own bookkeeping
// (sizes, strides, the NaN starts) then runs where there is no GPU, every comparison exact.
static inline const gl_backend *cuda_twin_gpu(char *msg, size_t len) {
    const char *fake = getenv("GALLEY_TEST_FAKE_GPU");
    if (fake && !strcmp(fake, "cpu")) {
        snprintf(msg, len, "GALLEY_TEST_FAKE_GPU=cpu: the CPU backend on both sides");
        return backend_cpu();
    }
#if GALLEY_HAVE_CUDA
    return backend_cuda(0, msg, len);
#else
    snprintf(msg, len, "built without CUDA (GALLEY_HAVE_CUDA=0)");
    return NULL;
#endif
}

// Runs the tests with the CUDA backend as the GPU side, or exits 77 (skipped) where there is none.
#define CUDA_TWIN_MAIN(name, ...)                                                                   \
    int main(void) {                                                                                 \
        char msg[256];                                                                               \
        const gl_backend *gpu = cuda_twin_gpu(msg, sizeof msg);                                      \
        if (!gpu) {                                                                                  \
            printf(name ": skipped: %s\n", msg);                                                     \
            return 77;                                                                               \
        }                                                                                            \
        printf(name ": %s\n", msg);                                                                  \
        backends be = {backend_cpu(), gpu, 0};                                                       \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                             \
        return cmocka_run_group_tests(tests, NULL, NULL);                                            \
    }

#endif
