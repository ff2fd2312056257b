// optim_simd_body.h: optim_simd.c's loops for one vector width, written once and compiled three
// times there (the baseline, AVX2, AVX-512) under a target pragma; not a header of its own.
// Expects OW (doubles per vector) and OFN(name) (suffixes a name) from the includer.

typedef double OFN(vd) __attribute__((vector_size(OW * 8)));
typedef float OFN(vh) __attribute__((vector_size(OW * 4)));
typedef float OFN(vh_u) __attribute__((vector_size(OW * 4), aligned(4), may_alias));

// Lane l of OS_LANES sums x[i]^2 for i % OS_LANES == l, in order of i (OS_LANES / OW independent
// chains of vector adds: the loop runs at the caches' speed, not the add's latency); the tail
// joins its lanes one by one; the lanes fold pairwise (l + h into l, h halving).
static double OFN(sumsq)(const float *x, int64_t n) {
    typedef OFN(vd) vd;
    enum { NV = OS_LANES / OW };
    vd acc[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; j++) acc[j] = (vd){0};
    int64_t i = 0;
    for (; i + OS_LANES <= n; i += OS_LANES) {
#pragma GCC unroll 16  // every sum in a register
        for (int j = 0; j < NV; j++) {
            vd d = __builtin_convertvector(*(const OFN(vh_u) *)(x + i + j * OW), vd);
            acc[j] += d * d;
        }
    }
    double lane[OS_LANES];
    memcpy(lane, acc, sizeof lane);
    for (int l = 0; i < n; i++, l++) lane[l] += (double)x[i] * (double)x[i];
    for (int h = OS_LANES / 2; h > 0; h /= 2)
        for (int l = 0; l < h; l++) lane[l] += lane[l + h];
    return lane[0];
}

// sgd.c's update over one chunk; the branches hoisted out of the element loops.
static void OFN(sgd)(const optim_sgd_k *k, int64_t n, float *restrict w, float *restrict g, float *restrict vel) {
    const float m = k->m, wdc = k->wdc, step = k->step, coef = k->coef;
    if (k->clip) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) g[i] *= coef;
    }
    if (!vel) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) w[i] -= step * (g[i] + wdc * w[i]);
    } else if (!k->nesterov) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            vel[i] = m * vel[i] + (g[i] + wdc * w[i]);
            w[i] -= step * vel[i];
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + wdc * w[i];
            vel[i] = m * vel[i] + d;
            w[i] -= step * (d + m * vel[i]);
        }
    }
}

// adam.c's AdamW over one chunk (adam_direction's expression inline: sqrtf vectorises, this
// file being built without errno from math functions).
static void OFN(adamw)(const gl_optim_args *a, float keep, int64_t n, float *restrict w, float *restrict g,
                       float *restrict m, float *restrict v) {
    const float b1 = a->b1, b2 = a->b2, one_b1 = a->one_b1, one_b2 = a->one_b2, step = a->lr, coef = a->coef;
    const float inv_bc1 = a->inv_bc1, inv_sqrt_bc2 = a->inv_sqrt_bc2, eps = a->eps;
#define OS_ADAMW(GI)                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                     \
        float gi = GI;                                                                    \
        m[i] = b1 * m[i] + one_b1 * gi;                                                   \
        v[i] = b2 * v[i] + one_b2 * gi * gi;                                              \
        w[i] *= keep;                                                                     \
        w[i] -= step * ((m[i] * inv_bc1) / (sqrtf(v[i]) * inv_sqrt_bc2 + eps));           \
    }
    if (a->clip) {
#pragma omp simd
        OS_ADAMW(g[i] = g[i] * coef)
    } else {
#pragma omp simd
        OS_ADAMW(g[i])
    }
#undef OS_ADAMW
}

static const optim_simd OFN(optim_simd) = {OFN(sumsq), OFN(sgd), OFN(adamw)};
