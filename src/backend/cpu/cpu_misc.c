// cpu_misc.c: element-wise and data-movement kernels: dropout, scaling, axpy, strided row
// copies (flatten, concat) and nearest upsampling. Each output element is written by one
// OpenMP thread, so results do not depend on the thread count.
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/rng.h"

// x, mask, y are (count); element i's draw is keyed by (seed, RNG_DROPOUT, step, base + i)
void cpu_dropout_forward(int64_t count, float rate, int train, uint64_t seed, uint64_t step, uint64_t base,
                         const float *x, float *mask, float *y) {
    if (!train || rate <= 0.0f) {
#pragma omp parallel for schedule(static) if (count >= CPU_PAR_MIN_WORK)
        for (int64_t i = 0; i < count; i++) mask[i] = 1.0f, y[i] = x[i];
        return;
    }
    const float keep = 1.0f / (1.0f - rate);
#pragma omp parallel for schedule(static) if (count >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < count; i++) {
        float u = rng_uniform(seed, RNG_DROPOUT, step, base + (uint64_t)i);
        mask[i] = u < rate ? 0.0f : keep;
        y[i] = x[i] * mask[i];
    }
}

// mask, dy, dx are (count); dx is accumulated
void cpu_dropout_backward(int64_t count, const float *mask, const float *dy, float *dx) {
#pragma omp parallel for simd schedule(static) if (count >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < count; i++) dx[i] += dy[i] * mask[i];
}

// x, y are (count)
void cpu_scale(int64_t count, float a, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (count >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < count; i++) y[i] = a * x[i];
}

// x, y are (count); y is accumulated. `omp simd` on these element-wise loops: without it this
// -O2 build left them scalar (GCC's cheap vectorizer does not version loops for aliasing); the
// same operations per element, so the same bits.
void cpu_axpy(int64_t count, float a, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (count >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < count; i++) y[i] += a * x[i];
}

// src rows of src_stride, dst rows of dst_stride; len elements of each of rows rows
void cpu_copy_rows(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                   int accumulate) {
#pragma omp parallel for schedule(static) if (rows * len >= CPU_PAR_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float *sp = src + r * src_stride;
        float *dp = dst + r * dst_stride;
        if (accumulate) {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dp[j] += sp[j];
        } else {
            memcpy(dp, sp, sizeof(float) * (size_t)len);
        }
    }
}

// x is (N,C,D,H,W), y is (N,C,D*f0,H*f1,W*f2); in = {D,H,W}
void cpu_upsample_forward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *x, float *y) {
    const int64_t od = in[0] * f[0], oh = in[1] * f[1], ow = in[2] * f[2];
    const int64_t ip = in[0] * in[1] * in[2], op = od * oh * ow;
#pragma omp parallel for schedule(static) if (n * c * ip * f[0] * f[1] * f[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const float *xp = x + q * ip;
        float *yp = y + q * op;
        for (int64_t d = 0; d < od; d++)
            for (int64_t h = 0; h < oh; h++) {
                const float *xr = xp + ((d / f[0]) * in[1] + h / f[1]) * in[2];
                float *yr = yp + (d * oh + h) * ow;
                for (int64_t w = 0; w < ow; w++) yr[w] = xr[w / f[2]];
            }
    }
}

// dy is (N,C,D*f0,H*f1,W*f2), dx is (N,C,D,H,W) and accumulated; each dx sums its block in order
void cpu_upsample_backward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *dy, float *dx) {
    const int64_t oh = in[1] * f[1], ow = in[2] * f[2];
    const int64_t ip = in[0] * in[1] * in[2], op = in[0] * f[0] * oh * ow;
#pragma omp parallel for schedule(static) if (n * c * ip * f[0] * f[1] * f[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const float *dyp = dy + q * op;
        float *dxp = dx + q * ip;
        for (int64_t d = 0; d < in[0]; d++)
            for (int64_t h = 0; h < in[1]; h++)
                for (int64_t w = 0; w < in[2]; w++) {
                    float sum = 0.0f;
                    for (int a = 0; a < f[0]; a++)
                        for (int b = 0; b < f[1]; b++) {
                            const float *r = dyp + ((d * f[0] + a) * oh + h * f[1] + b) * ow + w * f[2];
                            for (int e = 0; e < f[2]; e++) sum += r[e];
                        }
                    dxp[(d * in[1] + h) * in[2] + w] += sum;
                }
    }
}
