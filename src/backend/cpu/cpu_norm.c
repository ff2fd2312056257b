// cpu_norm.c: batch and layer normalisation. Statistics are summed in double, in a fixed order
// per channel (batch norm) or per row (layer norm), one OpenMP iteration each, and layer norm's
// parameter gradients over fixed parts of the rows, so results do not depend on the thread count.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/check.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// x, y are (N,C,S); gamma, beta are (C) or NULL; running is (2C+1): mean, var, ready flag;
// saved is (2C+1): mean, 1/sqrt(var+eps), train flag.
// Training statistics are per-channel sums; with red (sync_batchnorm) the sums and the count are
// added over ranks between the passes, so every rank normalises with the global batch's mean and
// variance. Two passes (sum, then squared deviations from the mean) keep the variance accurate.
// act (when on) is applied as y is stored, with cpu_act_forward's expressions.
static void bn_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                       float eps, int train, float momentum, float *running, float *saved, float *y,
                       const gl_reducer *red, cpu_store_act act) {
    float *rmean = running, *rvar = running + c, *ready = running + 2 * c;
    if (*ready == 0.0f) {  // the arena starts zeroed; PyTorch starts at mean 0, var 1
        for (int64_t ch = 0; ch < c; ch++) rmean[ch] = 0.0f, rvar[ch] = 1.0f;
        *ready = 1.0f;
    }
    const int par = n * c * s >= CPU_PAR_MIN_WORK;
    double buf[c + 1], mean[c], inv[c];
    if (train) {
#pragma omp parallel for schedule(static) if (par)
        for (int64_t ch = 0; ch < c; ch++) {
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++) sum += x[(i * c + ch) * s + j];
            buf[ch] = sum;
        }
        buf[c] = (double)(n * s);  // values per channel
        if (red) red->sum(red->ctx, buf, (int)c + 1);
        const double m = buf[c];
        for (int64_t ch = 0; ch < c; ch++) mean[ch] = m > 0 ? buf[ch] / m : 0.0;
#pragma omp parallel for schedule(static) if (par)
        for (int64_t ch = 0; ch < c; ch++) {
            double sq = 0.0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++) {
                    double d = x[(i * c + ch) * s + j] - mean[ch];
                    sq += d * d;
                }
            buf[ch] = sq;
        }
        if (red) red->sum(red->ctx, buf, (int)c);
        for (int64_t ch = 0; ch < c; ch++) {
            double var = m > 0 ? buf[ch] / m : 0.0;
            // PyTorch refuses one value per channel in training; here the running variance
            // then takes the biased (zero) variance instead of dividing by m - 1 = 0.
            double unbiased = m > 1 ? buf[ch] / (m - 1) : var;
            inv[ch] = 1.0 / sqrt(var + (double)eps);
            rmean[ch] = (float)((1.0 - momentum) * rmean[ch] + momentum * mean[ch]);
            rvar[ch] = (float)((1.0 - momentum) * rvar[ch] + momentum * unbiased);
        }
    } else {
        for (int64_t ch = 0; ch < c; ch++) mean[ch] = rmean[ch], inv[ch] = 1.0 / sqrt((double)rvar[ch] + (double)eps);
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t ch = 0; ch < c; ch++) {
        saved[ch] = (float)mean[ch];
        saved[c + ch] = (float)inv[ch];
        float mu = (float)mean[ch], sc = (float)(inv[ch] * (gamma ? gamma[ch] : 1.0f)), sh = beta ? beta[ch] : 0.0f;
        for (int64_t i = 0; i < n; i++) {
            const float *xp = x + (i * c + ch) * s;
            float *yp = y + (i * c + ch) * s;
            if (!act.on) {
                for (int64_t j = 0; j < s; j++) yp[j] = (xp[j] - mu) * sc + sh;
            } else if (act.act == ACT_RELU) {
                for (int64_t j = 0; j < s; j++) {
                    float v = (xp[j] - mu) * sc + sh;
                    yp[j] = v > 0.0f ? v : 0.0f;
                }
            } else {
                for (int64_t j = 0; j < s; j++) {
                    float v = (xp[j] - mu) * sc + sh;
                    yp[j] = v > 0.0f ? v : act.slope * v;
                }
            }
        }
    }
    saved[2 * c] = train ? 1.0f : 0.0f;
}

void cpu_batch_norm_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                            float eps, int train, float momentum, float *running, float *saved, float *y,
                            const gl_reducer *red) {
    bn_forward(n, c, s, x, gamma, beta, eps, train, momentum, running, saved, y, red, (cpu_store_act){0});
}

void cpu_batch_norm_forward_act(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                                const float *beta, float eps, int train, float momentum, float *running, float *saved,
                                float *y, const gl_reducer *red, gl_act act, float slope) {
    GL_CHECK(gl_act_storable(act, slope),
             "batch_norm_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    bn_forward(n, c, s, x, gamma, beta, eps, train, momentum, running, saved, y, red,
               (cpu_store_act){.on = true, .act = act, .slope = slope});
}

// x, dy, dx are (N,C,S); gamma, dgamma, dbeta are (C) or NULL; saved as written by forward.
// With batch statistics: dx = gamma * inv / M * (M dy - sum(dy) - xhat * sum(dy xhat)), M = N*S.
// dgamma and dbeta are this rank's sums (the gradient allreduce adds the others'); with red the
// sums in dx's formula, and M, are over every rank.
void cpu_batch_norm_backward(int64_t n, int64_t c, int64_t s, const float *x, const float *dy, const float *gamma,
                             const float *saved, float *dgamma, float *dbeta, float *dx, const gl_reducer *red) {
    const float *mean = saved, *inv = saved + c;
    const int train = saved[2 * c] != 0.0f, par = n * c * s >= CPU_PAR_MIN_WORK;
    double buf[2 * c + 1];
#pragma omp parallel for schedule(static) if (par)
    for (int64_t ch = 0; ch < c; ch++) {
        const float mu = mean[ch], is = inv[ch];
        double sdy = 0.0, sdyx = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) {
                int64_t e = (i * c + ch) * s + j;
                sdy += dy[e];
                sdyx += (double)dy[e] * (double)((x[e] - mu) * is);
            }
        if (dgamma) dgamma[ch] = (float)sdyx;
        if (dbeta) dbeta[ch] = (float)sdy;
        buf[ch] = sdy, buf[c + ch] = sdyx;
    }
    buf[2 * c] = (double)(n * s);
    if (train && red) red->sum(red->ctx, buf, (int)(2 * c + 1));
    if (!dx) return;
    const double m = buf[2 * c];
#pragma omp parallel for schedule(static) if (par)
    for (int64_t ch = 0; ch < c; ch++) {
        const float mu = mean[ch], is = inv[ch];
        const float g = (gamma ? gamma[ch] : 1.0f) * is;
        const float a = train ? (float)(buf[ch] / m) : 0.0f, b = train ? (float)(buf[c + ch] / m) : 0.0f;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) {
                int64_t e = (i * c + ch) * s + j;
                dx[e] += g * (dy[e] - a - (x[e] - mu) * is * b);
            }
    }
}

// Layer norm's row sums run in 4 double lanes, element j in lane j % 4, then (l0 + l1) + (l2 +
// l3): an order fixed by the row length alone (not by alignment, vector width or thread), which
// the AVX2 versions below hold in one vector of doubles. One serial double sum per row was
// latency-bound: layer norm was 6% of a vit-tiny step.
static inline double lanes_total(const double l[4]) { return (l[0] + l[1]) + (l[2] + l[3]); }

// Rows per part of layer norm's parameter gradients (cpu_layer_norm_backward).
#define LN_PART 256

// One row's terms of dgamma and dbeta, columns [j, k), added to a part's sums: sw[j] += dy[j]
// xhat[j] and sb[j] += dy[j] in double (multiply, then add), xhat = (x - mu) * is in float. The
// portable form, and the vector forms' tail.
static void ln_cols_add(int64_t j, int64_t k, const float *xp, const float *dyp, float mu, float is, double *sw,
                        double *sb) {
    for (; j < k; j++) sw[j] += (double)dyp[j] * (double)((xp[j] - mu) * is), sb[j] += dyp[j];
}

// Layer norm on AVX2 (also on AVX-512 CPUs): the portable loops below compile to SSE2 in this
// -O2 build without -march (two doubles a vector, scalar conversions). Backward took 23.2 ms of
// a 390 ms 2-thread vit-tiny step on a 2-core Xeon, 11.7 ms with these (20 steps timed per
// layer). The same operations in the same order, lane for lane (the sums' lane j % 4 is one of
// the 4 doubles of a vector; no fused multiply-adds, as in the C build), so the same bits as the
// loops below (test_tokens checks them against those loops).
#if defined(__x86_64__) && defined(__GNUC__)
#define LN_AVX2 __attribute__((target("avx2,fma")))
#define LN_BUILT 1

// One row forward: mean and 1/sqrt(var + eps) (in double, lanes as below), y = xhat * gamma + beta.
// 1.9% of a 2-thread vit-tiny step in its portable (SSE2) form, in perf on the Xeon.
LN_AVX2 static void ln_row_forward_avx2(int64_t k, const float *xp, const float *gamma, const float *beta, float eps,
                                        float *mean_out, float *inv_out, float *yp) {
    const int64_t k4 = k & ~(int64_t)3;
    __m256d s = _mm256_setzero_pd();
    for (int64_t j = 0; j < k4; j += 4) s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_loadu_ps(xp + j)));
    double ls[4], lq[4];
    _mm256_storeu_pd(ls, s);
    for (int64_t j = k4; j < k; j++) ls[j - k4] += xp[j];
    const double mean = lanes_total(ls) / (double)k;
    const __m256d m4 = _mm256_set1_pd(mean);
    __m256d q = _mm256_setzero_pd();
    for (int64_t j = 0; j < k4; j += 4) {
        const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xp + j)), m4);
        q = _mm256_add_pd(q, _mm256_mul_pd(d, d));
    }
    _mm256_storeu_pd(lq, q);
    for (int64_t j = k4; j < k; j++) lq[j - k4] += (xp[j] - mean) * (xp[j] - mean);
    const double inv = 1.0 / sqrt(lanes_total(lq) / (double)k + (double)eps);
    *mean_out = (float)mean, *inv_out = (float)inv;
    const float mu = (float)mean, is = (float)inv;
    const __m256 mu8 = _mm256_set1_ps(mu), is8 = _mm256_set1_ps(is);
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t j = 0; j < k8; j += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xp + j), mu8), is8);
        _mm256_storeu_ps(yp + j, gamma ? _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(gamma + j)),
                                                       _mm256_loadu_ps(beta + j))
                                       : v);
    }
    for (int64_t j = k8; j < k; j++) {
        const float v = (xp[j] - mu) * is;
        yp[j] = gamma ? v * gamma[j] + beta[j] : v;
    }
}

// One row: dx += is * (g - a - xhat * b), g = dy * gamma, a = mean(g), b = mean(g * xhat).
LN_AVX2 static void ln_row_backward_avx2(int64_t k, const float *xp, const float *dyp, const float *gamma, float mu,
                                         float is, float *dxp) {
    __m256d lg = _mm256_setzero_pd(), lgx = _mm256_setzero_pd();
    const __m128 mu4 = _mm_set1_ps(mu), is4 = _mm_set1_ps(is);
    const int64_t k4 = k & ~(int64_t)3;
    for (int64_t j = 0; j < k4; j += 4) {
        const __m128 d = _mm_loadu_ps(dyp + j), g = gamma ? _mm_mul_ps(d, _mm_loadu_ps(gamma + j)) : d;
        const __m128 xh = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xp + j), mu4), is4);
        const __m256d gd = _mm256_cvtps_pd(g);
        lg = _mm256_add_pd(lg, gd);
        lgx = _mm256_add_pd(lgx, _mm256_mul_pd(gd, _mm256_cvtps_pd(xh)));
    }
    double l1[4], l2[4];
    _mm256_storeu_pd(l1, lg), _mm256_storeu_pd(l2, lgx);
    for (int64_t j = k4; j < k; j++) {
        const float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        l1[j - k4] += g;
        l2[j - k4] += (double)g * (double)((xp[j] - mu) * is);
    }
    const float a = (float)(lanes_total(l1) / (double)k), b = (float)(lanes_total(l2) / (double)k);
    const __m256 a8 = _mm256_set1_ps(a), b8 = _mm256_set1_ps(b), mu8 = _mm256_set1_ps(mu), is8 = _mm256_set1_ps(is);
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t j = 0; j < k8; j += 8) {
        const __m256 d = _mm256_loadu_ps(dyp + j), g = gamma ? _mm256_mul_ps(d, _mm256_loadu_ps(gamma + j)) : d;
        const __m256 xb = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xp + j), mu8), is8), b8);
        const __m256 t = _mm256_mul_ps(is8, _mm256_sub_ps(_mm256_sub_ps(g, a8), xb));
        _mm256_storeu_ps(dxp + j, _mm256_add_ps(_mm256_loadu_ps(dxp + j), t));
    }
    for (int64_t j = k8; j < k; j++) {
        const float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        dxp[j] += is * (g - a - (xp[j] - mu) * is * b);
    }
}

// ln_cols_add on AVX-512: 8 doubles a vector (the row's columns are independent: the same bits as
// any width).
__attribute__((target("avx512f"))) static void ln_cols_add_512(int64_t k, const float *xp, const float *dyp, float mu,
                                                               float is, double *sw, double *sb) {
    int64_t j = 0;
    const __m512 mu16 = _mm512_set1_ps(mu), is16 = _mm512_set1_ps(is);
    for (; j + 16 <= k; j += 16) {
        const __m512 d = _mm512_loadu_ps(dyp + j), xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xp + j), mu16), is16);
        const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
        const __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
        const __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(xh));
        const __m512d x1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xh), 1)));
        _mm512_storeu_pd(sw + j, _mm512_add_pd(_mm512_loadu_pd(sw + j), _mm512_mul_pd(d0, x0)));
        _mm512_storeu_pd(sw + j + 8, _mm512_add_pd(_mm512_loadu_pd(sw + j + 8), _mm512_mul_pd(d1, x1)));
        _mm512_storeu_pd(sb + j, _mm512_add_pd(_mm512_loadu_pd(sb + j), d0));
        _mm512_storeu_pd(sb + j + 8, _mm512_add_pd(_mm512_loadu_pd(sb + j + 8), d1));
    }
    ln_cols_add(j, k, xp, dyp, mu, is, sw, sb);
}

LN_AVX2 static void ln_cols_add_avx2(int64_t k, const float *xp, const float *dyp, float mu, float is, double *sw,
                                     double *sb) {
    int64_t j = 0;
    const __m128 mu4 = _mm_set1_ps(mu), is4 = _mm_set1_ps(is);
    for (; j + 4 <= k; j += 4) {
        const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(dyp + j));
        const __m256d xh = _mm256_cvtps_pd(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xp + j), mu4), is4));
        _mm256_storeu_pd(sw + j, _mm256_add_pd(_mm256_loadu_pd(sw + j), _mm256_mul_pd(d, xh)));
        _mm256_storeu_pd(sb + j, _mm256_add_pd(_mm256_loadu_pd(sb + j), d));
    }
    ln_cols_add(j, k, xp, dyp, mu, is, sw, sb);
}

// The column mode of the same sums (few parts: threads take blocks of 16 columns instead):
// dgamma[j0 .. j0+15] and dbeta's, each part of LN_PART rows summed in row order from 0 in
// double, the parts added in order; the same operations per column as the parts' pass.
LN_AVX2 static void ln_cols_backward_avx2(int64_t n, int64_t k, const float *x, const float *dy, const float *mean,
                                          const float *inv, int64_t j0, float *dgamma, float *dbeta) {
    __m256d tw[4], tb[4];
    for (int64_t i0 = 0; i0 < n; i0 += LN_PART) {
        __m256d sw[4], sb[4];
        for (int q = 0; q < 4; q++) sw[q] = sb[q] = _mm256_setzero_pd();
        for (int64_t i = i0; i < n && i < i0 + LN_PART; i++) {
            const float *xr = x + i * k + j0, *dr = dy + i * k + j0;
            const __m256 mu = _mm256_set1_ps(mean[i]), is = _mm256_set1_ps(inv[i]);
            for (int h = 0; h < 2; h++) {
                const __m256 d = _mm256_loadu_ps(dr + 8 * h);
                const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + 8 * h), mu), is);
                const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(d));
                const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
                const __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(xh));
                const __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(xh, 1));
                sw[2 * h] = _mm256_add_pd(sw[2 * h], _mm256_mul_pd(d0, x0));
                sw[2 * h + 1] = _mm256_add_pd(sw[2 * h + 1], _mm256_mul_pd(d1, x1));
                sb[2 * h] = _mm256_add_pd(sb[2 * h], d0);
                sb[2 * h + 1] = _mm256_add_pd(sb[2 * h + 1], d1);
            }
        }
        for (int q = 0; q < 4; q++)
            tw[q] = i0 ? _mm256_add_pd(tw[q], sw[q]) : sw[q], tb[q] = i0 ? _mm256_add_pd(tb[q], sb[q]) : sb[q];
    }
    for (int q = 0; q < 4; q++) {
        _mm_storeu_ps(dgamma + j0 + 4 * q, _mm256_cvtpd_ps(tw[q]));
        _mm_storeu_ps(dbeta + j0 + 4 * q, _mm256_cvtpd_ps(tb[q]));
    }
}
#else
#define LN_BUILT 0
#endif

// x, y are (N,K); gamma, beta are (K) or NULL; saved is (2N): mean, 1/sqrt(var+eps) per row
void cpu_layer_norm_forward(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta, float eps,
                            float *saved, float *y) {
    const bool avx2 = cpu_conv_fast_isa() != CPU_ISA_NONE;
    (void)avx2;
#pragma omp parallel for schedule(static) if (n * k >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < n; i++) {
        const float *xp = x + i * k;
        float *yp = y + i * k;
#if LN_BUILT
        if (avx2) {
            ln_row_forward_avx2(k, xp, gamma, beta, eps, &saved[i], &saved[n + i], yp);
            continue;
        }
#endif
        const int64_t k4 = k & ~(int64_t)3;
        double ls[4] = {0}, lq[4] = {0};
        for (int64_t j = 0; j < k4; j += 4)
            for (int l = 0; l < 4; l++) ls[l] += xp[j + l];
        for (int64_t j = k4; j < k; j++) ls[j - k4] += xp[j];
        double mean = lanes_total(ls) / (double)k;
        for (int64_t j = 0; j < k4; j += 4)
            for (int l = 0; l < 4; l++) lq[l] += (xp[j + l] - mean) * (xp[j + l] - mean);
        for (int64_t j = k4; j < k; j++) lq[j - k4] += (xp[j] - mean) * (xp[j] - mean);
        double sq = lanes_total(lq);
        double inv = 1.0 / sqrt(sq / (double)k + (double)eps);
        saved[i] = (float)mean;
        saved[n + i] = (float)inv;
        float mu = (float)mean, is = (float)inv;
        for (int64_t j = 0; j < k; j++) {
            float v = (xp[j] - mu) * is;
            yp[j] = gamma ? v * gamma[j] + beta[j] : v;
        }
    }
}


// One row of the portable backward: dx += is * (g - mean(g) - xhat * mean(g xhat)), g = dy * gamma.
static void ln_row_backward(int64_t k, const float *xp, const float *dyp, const float *gamma, float mu, float is,
                            float *dxp) {
    double lg[4] = {0}, lgx[4] = {0};  // lanes_total's order
    const int64_t k4 = k & ~(int64_t)3;
    for (int64_t j0 = 0; j0 < k4; j0 += 4)
        for (int l = 0; l < 4; l++) {
            const float g = gamma ? dyp[j0 + l] * gamma[j0 + l] : dyp[j0 + l];
            lg[l] += g;
            lgx[l] += (double)g * (double)((xp[j0 + l] - mu) * is);
        }
    for (int64_t j = k4; j < k; j++) {
        const float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        lg[j - k4] += g;
        lgx[j - k4] += (double)g * (double)((xp[j] - mu) * is);
    }
    const float a = (float)(lanes_total(lg) / (double)k), b = (float)(lanes_total(lgx) / (double)k);
    for (int64_t j = 0; j < k; j++) {
        float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        dxp[j] += is * (g - a - (xp[j] - mu) * is * b);
    }
}

// x, dy, dx are (N,K); gamma, dgamma, dbeta are (K) or NULL; saved as written by forward.
// dx = inv * (g - mean(g) - xhat * mean(g xhat)) with g = dy * gamma, per row.
//
// dgamma and dbeta, sums over the rows, are summed in parts of LN_PART rows (the last shorter):
// each part in row order in double, by the thread that computes its rows' dx in the same pass,
// the parts then added in order: a fixed order for any thread count, and x and dy read once
// where a second pass by columns read them again. Measured on a 2-core Xeon (AVX-512, 2 threads,
// 4096 rows of 192, vit-tiny's, best of 20): 0.383-0.391 -> 0.313-0.325 ms with caches flushed by
// 32 MiB, 0.78-0.92 -> 0.62-0.64 ms by 512 MiB (from memory); in vit-tiny's training, layer norm
// backward 3.55% -> 2.11% of perf samples. (Before, the sums were over all rows in order, by
// blocks of 16 columns: a float rounding of a double sum, so the bits moved in rare last places.)
void cpu_layer_norm_backward(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                             const float *saved, float *dgamma, float *dbeta, float *dx) {
    const float *mean = saved, *inv = saved + n;
    const int isa = cpu_conv_fast_isa();
    const bool avx2 = isa != CPU_ISA_NONE, avx512 = isa == CPU_ISA_AVX512;
    (void)avx2, (void)avx512;
    if (n <= 0) {  // no rows: zero sums
        for (int64_t j = 0; dgamma && j < k; j++) dgamma[j] = dbeta[j] = 0.0f;
        return;
    }
    const int64_t parts = (n + LN_PART - 1) / LN_PART;
    const bool par = n * k >= CPU_PAR_MIN_WORK;
    // Too few parts to share among the threads (a layer norm per sample: few rows, many
    // columns): dx by rows, then the sums by blocks of columns, part by part (the same bits).
    const bool by_cols = dgamma && par && parts < 2 * omp_get_max_threads();
    double *ps = dgamma && !by_cols ? gl_xmalloc(sizeof(double) * (size_t)(2 * k * parts)) : NULL;  // [parts][2][k]
    if (!ps && dx) {  // dx alone: by rows
#pragma omp parallel for schedule(static) if (par)
        for (int64_t i = 0; i < n; i++) {
#if LN_BUILT
            if (avx2) {
                ln_row_backward_avx2(k, x + i * k, dy + i * k, gamma, mean[i], inv[i], dx + i * k);
                continue;
            }
#endif
            ln_row_backward(k, x + i * k, dy + i * k, gamma, mean[i], inv[i], dx + i * k);
        }
    }
#pragma omp parallel for schedule(static) if (par && ps)
    for (int64_t p = 0; p < (ps ? parts : 0); p++) {
        double *sw = ps + 2 * k * p, *sb = sw + k;
        memset(sw, 0, sizeof(double) * (size_t)(2 * k));
        for (int64_t i = p * LN_PART; i < n && i < (p + 1) * LN_PART; i++) {
            const float *xp = x + i * k, *dyp = dy + i * k, mu = mean[i], is = inv[i];
#if LN_BUILT
            if (dx && avx2) ln_row_backward_avx2(k, xp, dyp, gamma, mu, is, dx + i * k);
            if (avx512) ln_cols_add_512(k, xp, dyp, mu, is, sw, sb);
            else if (avx2) ln_cols_add_avx2(k, xp, dyp, mu, is, sw, sb);
            if (avx2) continue;
#endif
            if (dx) ln_row_backward(k, xp, dyp, gamma, mu, is, dx + i * k);
            ln_cols_add(0, k, xp, dyp, mu, is, sw, sb);
        }
    }
    for (int64_t j = 0; ps && j < k; j++) {
        double w = ps[j], b = ps[k + j];
        for (int64_t p = 1; p < parts; p++) w += ps[2 * k * p + j], b += ps[2 * k * p + k + j];
        dgamma[j] = (float)w, dbeta[j] = (float)b;
    }
    free(ps);
    if (!by_cols) return;
    enum { LN_COLS = 16 };
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < k; j0 += LN_COLS) {
        const int64_t w = k - j0 < LN_COLS ? k - j0 : LN_COLS;
#if LN_BUILT
        if (avx2 && w == LN_COLS) {
            ln_cols_backward_avx2(n, k, x, dy, mean, inv, j0, dgamma, dbeta);
            continue;
        }
#endif
        double tw[LN_COLS], tb[LN_COLS];
        for (int64_t i0 = 0; i0 < n; i0 += LN_PART) {
            double sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
            for (int64_t i = i0; i < n && i < i0 + LN_PART; i++) {
                const float *xr = x + i * k + j0, *dr = dy + i * k + j0;
                const float mu = mean[i], is = inv[i];
                for (int64_t j = 0; j < w; j++) {
                    sw[j] += (double)dr[j] * (double)((xr[j] - mu) * is);
                    sb[j] += dr[j];
                }
            }
            for (int64_t j = 0; j < w; j++) tw[j] = i0 ? tw[j] + sw[j] : sw[j], tb[j] = i0 ? tb[j] + sb[j] : sb[j];
        }
        for (int64_t j = 0; j < w; j++) dgamma[j0 + j] = (float)tw[j], dbeta[j0 + j] = (float)tb[j];
    }
}
