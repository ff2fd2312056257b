// cpu_pool.c: max, average and global-average pooling over 2D and 3D maps. Every kernel treats
// a map as [D, H, W] (2D: D = 1) and runs one (sample, channel) plane per OpenMP iteration, so
// each output and input-gradient element is written by one thread in a fixed order.
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

// The part of a window of k that lies inside [0, size): offsets lo .. hi-1 from its start.
static inline void window_clip(int64_t start, int k, int64_t size, int64_t *lo, int64_t *hi) {
    *lo = start < 0 ? -start : 0;
    *hi = start + k > size ? size - start : k;
}

// x is (N,C,D,H,W), y and argmax are (N,C,OD,OH,OW); in = {D,H,W}, out = {OD,OH,OW}
void cpu_max_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                          const int s[3], const int p[3], const float *x, float *y, int32_t *argmax) {
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (n * c * op * k[0] * k[1] * k[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const float *xp = x + q * ip;
        float *yp = y + q * op;
        int32_t *ap = argmax + q * op;
        for (int64_t od = 0; od < out[0]; od++)
            for (int64_t oh = 0; oh < out[1]; oh++)
                for (int64_t ow = 0; ow < out[2]; ow++) {
                    int64_t d0 = od * s[0] - p[0], h0 = oh * s[1] - p[1], w0 = ow * s[2] - p[2];
                    int64_t dl, dh, hl, hh, wl, wh;
                    window_clip(d0, k[0], in[0], &dl, &dh);
                    window_clip(h0, k[1], in[1], &hl, &hh);
                    window_clip(w0, k[2], in[2], &wl, &wh);
                    float best = -INFINITY;
                    int64_t bi = -1;
                    for (int64_t a = dl; a < dh; a++)
                        for (int64_t b = hl; b < hh; b++)
                            for (int64_t e = wl; e < wh; e++) {
                                int64_t i = ((d0 + a) * in[1] + h0 + b) * in[2] + w0 + e;
                                float v = xp[i];
                                // Strictly greater keeps the first of equal values; NaN wins (and
                                // so propagates), as in PyTorch.
                                if (bi < 0 || v > best || isnan(v)) best = v, bi = i;
                            }
                    int64_t o = (od * out[1] + oh) * out[2] + ow;
                    yp[o] = best;
                    ap[o] = (int32_t)bi;
                }
    }
}

// argmax and dy are (N,C,OD,OH,OW), dx is (N,C,D,H,W) and accumulated
void cpu_max_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                           const float *dy, float *dx) {
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (n * c * op >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const int32_t *ap = argmax + q * op;
        const float *dyp = dy + q * op;
        float *dxp = dx + q * ip;
        for (int64_t o = 0; o < op; o++) dxp[ap[o]] += dyp[o];
    }
}

// x is (N,C,D,H,W), y is (N,C,OD,OH,OW); padding counts as zeros (divisor k0*k1*k2)
void cpu_avg_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                          const int s[3], const int p[3], const float *x, float *y) {
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
    const double inv = 1.0 / ((double)k[0] * k[1] * k[2]);
#pragma omp parallel for schedule(static) if (n * c * op * k[0] * k[1] * k[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const float *xp = x + q * ip;
        float *yp = y + q * op;
        for (int64_t od = 0; od < out[0]; od++)
            for (int64_t oh = 0; oh < out[1]; oh++)
                for (int64_t ow = 0; ow < out[2]; ow++) {
                    int64_t d0 = od * s[0] - p[0], h0 = oh * s[1] - p[1], w0 = ow * s[2] - p[2];
                    int64_t dl, dh, hl, hh, wl, wh;
                    window_clip(d0, k[0], in[0], &dl, &dh);
                    window_clip(h0, k[1], in[1], &hl, &hh);
                    window_clip(w0, k[2], in[2], &wl, &wh);
                    double sum = 0.0;
                    for (int64_t a = dl; a < dh; a++)
                        for (int64_t b = hl; b < hh; b++)
                            for (int64_t e = wl; e < wh; e++) sum += xp[((d0 + a) * in[1] + h0 + b) * in[2] + w0 + e];
                    yp[(od * out[1] + oh) * out[2] + ow] = (float)(sum * inv);
                }
    }
}

// dy is (N,C,OD,OH,OW), dx is (N,C,D,H,W) and accumulated
void cpu_avg_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *dy, float *dx) {
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
    const float inv = (float)(1.0 / ((double)k[0] * k[1] * k[2]));
#pragma omp parallel for schedule(static) if (n * c * op * k[0] * k[1] * k[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const float *dyp = dy + q * op;
        float *dxp = dx + q * ip;
        for (int64_t od = 0; od < out[0]; od++)
            for (int64_t oh = 0; oh < out[1]; oh++)
                for (int64_t ow = 0; ow < out[2]; ow++) {
                    int64_t d0 = od * s[0] - p[0], h0 = oh * s[1] - p[1], w0 = ow * s[2] - p[2];
                    int64_t dl, dh, hl, hh, wl, wh;
                    window_clip(d0, k[0], in[0], &dl, &dh);
                    window_clip(h0, k[1], in[1], &hl, &hh);
                    window_clip(w0, k[2], in[2], &wl, &wh);
                    float g = dyp[(od * out[1] + oh) * out[2] + ow] * inv;
                    for (int64_t a = dl; a < dh; a++)
                        for (int64_t b = hl; b < hh; b++)
                            for (int64_t e = wl; e < wh; e++) dxp[((d0 + a) * in[1] + h0 + b) * in[2] + w0 + e] += g;
                }
    }
}

// x is (N,C,S), y is (N,C)
void cpu_global_avg_pool_forward(int64_t n, int64_t c, int64_t s, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (n * c * s >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        double sum = 0.0;
        for (int64_t j = 0; j < s; j++) sum += x[q * s + j];
        y[q] = (float)(sum / (double)s);
    }
}

// dy is (N,C), dx is (N,C,S) and accumulated
void cpu_global_avg_pool_backward(int64_t n, int64_t c, int64_t s, const float *dy, float *dx) {
    const float inv = (float)(1.0 / (double)s);
#pragma omp parallel for schedule(static) if (n * c * s >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        float g = dy[q] * inv;
        for (int64_t j = 0; j < s; j++) dx[q * s + j] += g;
    }
}
