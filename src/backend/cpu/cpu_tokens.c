// cpu_tokens.c: the token ops of transformers: patches of a map <-> token rows (patch_embed,
// unpatch), sums and spreads of consecutive rows (pos_embed over the batch, mean pooling over
// tokens) and a scale per row (drop_path). Each output element is written by one OpenMP thread
// in a fixed order, so results do not depend on the thread count.
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

// One segment of `len` values between a patch row and the image: dst (=|+=) src, strides ss, ds.
static inline void seg_move(int64_t len, const float *src, int64_t ss, float *dst, int64_t ds, int accumulate) {
    if (accumulate)
        for (int64_t e = 0; e < len; e++) dst[e * ds] += src[e * ss];
    else
        for (int64_t e = 0; e < len; e++) dst[e * ds] = src[e * ss];
}

// image (N,C,D,H,W) <-> rows (N,T,K): see backend.h. One thread owns whole rows (patches), and
// every image element lies in exactly one patch, so neither direction races.
void cpu_patch_rearrange(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                         int accumulate, const float *src, float *dst) {
    const int64_t gd = in[0] / p[0], gh = in[1] / p[1], gw = in[2] / p[2], t = gd * gh * gw;
    const int64_t plane = in[0] * in[1] * in[2], taps = (int64_t)p[0] * p[1] * p[2], k = c * taps;
#pragma omp parallel for schedule(static) if (n * t * k >= CPU_PAR_MIN_WORK)
    for (int64_t row = 0; row < n * t; row++) {
        const int64_t s = row / t, q = row - s * t;
        const int64_t pd = q / (gh * gw), ph = (q / gw) % gh, pw = q % gw;
        const int64_t img0 = s * c * plane + ((pd * p[0]) * in[1] + ph * p[1]) * in[2] + pw * p[2];
        for (int64_t ch = 0; ch < c; ch++)
            for (int a = 0; a < p[0]; a++)
                for (int b = 0; b < p[1]; b++) {
                    const int64_t img = img0 + ch * plane + ((int64_t)a * in[1] + b) * in[2];
                    const int64_t tap = ((int64_t)a * p[1] + b) * p[2];
                    // Row position of (ch, a, b, e = 0) and the step from e to e + 1.
                    const int64_t r0 = row * k + (c_last ? tap * c + ch : ch * taps + tap), rs = c_last ? c : 1;
                    if (to_rows)
                        seg_move(p[2], src + img, 1, dst + r0, rs, accumulate);
                    else
                        seg_move(p[2], src + r0, rs, dst + img, 1, accumulate);
                }
    }
}

// src rows of src_stride, (n*m) of them; dst (n, len): block sums over m rows in order r = 0..m-1
void cpu_row_sum(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride, float *dst,
                 int accumulate) {
    enum { JB = 256 };
    const int64_t blocks = (len + JB - 1) / JB;
#pragma omp parallel for schedule(static) if (n * m * len >= CPU_PAR_MIN_WORK)
    for (int64_t ib = 0; ib < n * blocks; ib++) {
        const int64_t i = ib / blocks, j0 = (ib - i * blocks) * JB, jn = len - j0 < JB ? len - j0 : JB;
        float acc[JB];
        memset(acc, 0, sizeof acc);
        for (int64_t r = 0; r < m; r++) {
            const float *sp = src + (i * m + r) * src_stride + j0;
#pragma omp simd
            for (int64_t j = 0; j < jn; j++) acc[j] += sp[j];
        }
        float *dp = dst + i * len + j0;
        if (accumulate)
            for (int64_t j = 0; j < jn; j++) dp[j] += scale * acc[j];
        else
            for (int64_t j = 0; j < jn; j++) dp[j] = scale * acc[j];
    }
}

// src (n, len); dst rows of dst_stride, (n*m) of them: row i*m + r (=|+=) scale * src row i
void cpu_row_spread(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst, int64_t dst_stride,
                    int accumulate) {
#pragma omp parallel for schedule(static) if (n * m * len >= CPU_PAR_MIN_WORK)
    for (int64_t row = 0; row < n * m; row++) {
        const float *sp = src + (row / m) * len;
        float *dp = dst + row * dst_stride;
        if (accumulate) {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dp[j] += scale * sp[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dp[j] = scale * sp[j];
        }
    }
}

// s (rows), src and dst (rows, len): dst row r (=|+=) s[r] * src row r
void cpu_row_scale(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate) {
#pragma omp parallel for schedule(static) if (rows * len >= CPU_PAR_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float a = s[r], *sp = src + r * len;
        float *dp = dst + r * len;
        if (accumulate) {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dp[j] += a * sp[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dp[j] = a * sp[j];
        }
    }
}
