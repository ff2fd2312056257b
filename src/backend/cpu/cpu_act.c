// cpu_act.c: element-wise activations and their derivatives. ReLU and leaky ReLU are
// memory-bound passes over whole activations: SIMD loops (-O2 alone vectorises neither, as x and
// y may alias), split across threads when large; tanh and sigmoid split across threads; GELU is
// cpu_gelu.c's (vector erf and exp). Element-wise, so thread-count independent.
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

// Below this many elements an activation runs on one thread.
#define CPU_ACT_PAR_MIN 65536

// x, y are (n)
void cpu_act_forward(gl_act act, float alpha, int64_t n, const float *x, float *y) {
    switch (act) {
    case ACT_RELU:
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case ACT_LEAKY_RELU:
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
        break;
    case ACT_TANH:
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
        break;
    case ACT_SIGMOID:
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case ACT_GELU:
        cpu_gelu_forward(n, x, y);
        break;
    }
}

// x, dy, dx are (n): dx accumulated, or with set dx = 0 + the term (what accumulating into a
// cleared dx gives, -0 terms included). Inlined twice, so each loop keeps a constant set.
static inline __attribute__((always_inline)) void act_backward(gl_act act, float alpha, int64_t n, const float *x,
                                                               const float *dy, float *dx, const bool set) {
    switch (act) {
    case ACT_RELU:
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float d = dy[i];  // loaded unconditionally, so the loop vectorises
            dx[i] = (set ? 0.0f : dx[i]) + (x[i] > 0.0f ? d : 0.0f);
        }
        break;
    case ACT_LEAKY_RELU:
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float d = dy[i];
            dx[i] = (set ? 0.0f : dx[i]) + (x[i] > 0.0f ? d : alpha * d);
        }
        break;
    case ACT_TANH:
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float t = tanhf(x[i]);
            dx[i] = (set ? 0.0f : dx[i]) + dy[i] * (1.0f - t * t);
        }
        break;
    case ACT_SIGMOID:
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float s = 1.0f / (1.0f + expf(-x[i]));
            dx[i] = (set ? 0.0f : dx[i]) + dy[i] * s * (1.0f - s);
        }
        break;
    case ACT_GELU:
        cpu_gelu_backward(n, x, dy, dx, set);
        break;
    }
}

void cpu_act_backward(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    act_backward(act, alpha, n, x, dy, dx, false);
}

void cpu_act_backward_set(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    act_backward(act, alpha, n, x, dy, dx, true);
}
