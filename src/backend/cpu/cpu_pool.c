// cpu_pool.c: max, average and global-average pooling over 2D and 3D maps. Every kernel treats
// a map as [D, H, W] (2D: D = 1) and runs one (sample, channel) plane per OpenMP iteration, so
// each output and input-gradient element is written by one thread in a fixed order.
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

// The part of a window of k that lies inside [0, size): offsets lo .. hi-1 from its start.
static inline void window_clip(int64_t start, int k, int64_t size, int64_t *lo, int64_t *hi) {
    *lo = start < 0 ? -start : 0;
    *hi = start + k > size ? size - start : k;
}

// The common "kernel 2" pool: a 2x2 (2D, k[0] = 1) or 2x2x2 window at stride 2 without
// padding, every window inside the input. Same scan order and tie/NaN rule as the general loop.
static bool max_pool_is_k2(const int64_t in[3], const int64_t out[3], const int k[3], const int s[3],
                           const int p[3]) {
    bool ok = (k[0] == 1 || k[0] == 2) && k[0] == s[0] && out[0] * k[0] <= in[0];
    for (int i = 1; i < 3; i++) ok = ok && k[i] == 2 && s[i] == 2 && out[i] * 2 <= in[i];
    return ok && !p[0] && !p[1] && !p[2];
}

// One tap of a window: it wins if strictly greater than the best so far, or NaN. Branch-free,
// so the loops below vectorise.
#define MAX_POOL_TAP(v, idx)                  \
    do {                                      \
        float v_ = (v);                       \
        int win_ = v_ > best || v_ != v_;     \
        best = win_ ? v_ : best;              \
        bi = win_ ? (idx) : bi;               \
    } while (0)

// Windows ow < nout (a multiple of 8 is done, returned) of cpu_max_pool_k2_rows, 8 at a time. A
// row's 16 floats split into its even and odd columns (the windows' two taps along W) by one
// shuffle, which leaves the windows in the order 0 1 4 5 2 3 6 7 in every tap alike, put right
// once at the end. The taps meet in a tree, each pair the later one winning where it is greater
// or NaN: the scan's winner (the first of equal maxima; where there are NaNs, the last NaN, as
// the scan's "NaN wins" leaves it), in 2 or 3 steps of latency rather than 3 or 7 in a chain.
// The scalar loop below, compiled for SSE2 with its stride-2 reads, took ~30 cycles per 8
// windows, as much as the separate pooling pass it replaced once fused into the small CNN's
// convolutions; a chained first version of this one ~40.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
typedef struct {
    __m256 v;
    __m256i at;  // the winner's offset in its window
} k2_best;

__attribute__((target("avx2"))) static inline k2_best k2_pick(k2_best a, k2_best b) {
    const __m256 win = _mm256_or_ps(_mm256_cmp_ps(b.v, a.v, _CMP_GT_OQ), _mm256_cmp_ps(b.v, b.v, _CMP_UNORD_Q));
    return (k2_best){_mm256_blendv_ps(a.v, b.v, win), _mm256_blendv_epi8(a.at, b.at, _mm256_castps_si256(win))};
}

// The window row's two taps (offsets off, off + 1) of 8 windows, in the shuffled order.
__attribute__((target("avx2"))) static inline k2_best k2_row_pair(const float *p, int32_t off) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const k2_best e = {_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_set1_epi32(off)};
    const k2_best o = {_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)), _mm256_set1_epi32(off + 1)};
    return k2_pick(e, o);
}

__attribute__((target("avx2"))) static inline int64_t k2_fwd_avx2(int64_t nout, int kd, const float *const r[4],
                                                                  int32_t i0, int32_t w1, int32_t hw, float *yr,
                                                                  int32_t *ar) {
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7), lanes = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    int64_t ow = 0;
    for (; ow + 8 <= nout; ow += 8) {
        k2_best m = k2_pick(k2_row_pair(r[0] + 2 * ow, 0), k2_row_pair(r[1] + 2 * ow, w1));
        if (kd == 2)
            m = k2_pick(m, k2_pick(k2_row_pair(r[2] + 2 * ow, hw), k2_row_pair(r[3] + 2 * ow, hw + w1)));
        _mm256_storeu_ps(yr + ow, _mm256_permutevar8x32_ps(m.v, order));
        const __m256i at = _mm256_permutevar8x32_epi32(m.at, order);
        _mm256_storeu_si256((void *)(ar + ow),
                            _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(i0 + 2 * (int32_t)ow), lanes), at));
    }
    return ow;
}
#endif

// The windows ow0 <= ow < nout of one channel of cpu_max_pool_k2_rows (rows: its r0..r3), as the
// scan does them: the first of equal maxima, NaN winning.
static inline void k2_fwd_tail(int64_t ow0, int64_t nout, int kd, const float *const rows[4], int32_t i0, int32_t w1,
                               int32_t hw, float *yr, int32_t *ar) {
    const float *q0 = rows[0], *q1 = rows[1], *q2 = rows[2], *q3 = rows[3];
    for (int32_t ow = (int32_t)ow0; ow < (int32_t)nout; ow++) {
        float best = q0[2 * ow];
        int32_t bi = i0 + 2 * ow;
        MAX_POOL_TAP(q0[2 * ow + 1], i0 + 2 * ow + 1);
        MAX_POOL_TAP(q1[2 * ow], i0 + w1 + 2 * ow);
        MAX_POOL_TAP(q1[2 * ow + 1], i0 + w1 + 2 * ow + 1);
        if (kd == 2) {
            MAX_POOL_TAP(q2[2 * ow], i0 + hw + 2 * ow);
            MAX_POOL_TAP(q2[2 * ow + 1], i0 + hw + 2 * ow + 1);
            MAX_POOL_TAP(q3[2 * ow], i0 + hw + w1 + 2 * ow);
            MAX_POOL_TAP(q3[2 * ow + 1], i0 + hw + w1 + 2 * ow + 1);
        }
        yr[ow] = best, ar[ow] = bi;
    }
}

// cpu_max_pool_k2_rows on AVX2: every channel in one call, k2_fwd_avx2 inlined (a call per
// channel and row of windows, 16 or 20 windows each, was as much again as its vector work). The
// last nout % 8 windows take one more vector step on a copy of their inputs (zeros after them,
// whose windows are not kept): the same picks as the scan. In place of a scalar tail of 4 windows
// in rows of 20 (cnn3d's first layer): this function 3.7 -> 3.2% of cnn3d's samples (perf).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void k2_rows_avx2(int64_t nch, int64_t cs, int64_t os, int64_t nout, int kd,
                                                         const float *r0, const float *r1, const float *r2,
                                                         const float *r3, int32_t i0, int32_t w1, int32_t hw, float *y,
                                                         int32_t *argmax) {
    for (int64_t c = 0; c < nch; c++) {
        const float *const rows[4] = {r0 + c * cs, r1 + c * cs, kd == 2 ? r2 + c * cs : NULL,
                                      kd == 2 ? r3 + c * cs : NULL};
        const int64_t done = k2_fwd_avx2(nout, kd, rows, i0, w1, hw, y + c * os, argmax + c * os);
        if (done == nout) continue;
        const int64_t left = nout - done;  // 1 .. 7 windows: 2 left inputs a row
        float t[4][16] = {{0}}, yt[8];
        int32_t at[8];
        for (int r = 0; r < 2 * kd; r++) memcpy(t[r], rows[r] + 2 * done, sizeof(float) * (size_t)(2 * left));
        const float *const tr[4] = {t[0], t[1], t[2], t[3]};
        k2_fwd_avx2(8, kd, tr, i0 + 2 * (int32_t)done, w1, hw, yt, at);
        memcpy(y + c * os + done, yt, sizeof(float) * (size_t)left);
        memcpy(argmax + c * os + done, at, sizeof(int32_t) * (size_t)left);
    }
}
#endif

// Rows of "kernel 2" windows (cpu_kernels.h): for each of nch channels (rows cs floats apart in
// the input, outputs os apart), outputs ow < nout from the rows r0, r1 (h, h + 1) and, with kd =
// 2, r2, r3 (the next plane's); window ow's winner index i0 + 2 ow + its offset.
void cpu_max_pool_k2_rows(int64_t nch, int64_t cs, int64_t os, int64_t nout, int kd, const float *r0,
                          const float *r1, const float *r2, const float *r3, int32_t i0, int32_t w1, int32_t hw,
                          float *y, int32_t *argmax) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_conv_fast_isa() != CPU_ISA_NONE) {  // AVX2 (and FMA) or more
        k2_rows_avx2(nch, cs, os, nout, kd, r0, r1, r2, r3, i0, w1, hw, y, argmax);
        return;
    }
#endif
    for (int64_t c = 0; c < nch; c++) {
        const float *const rows[4] = {r0 + c * cs, r1 + c * cs, kd == 2 ? r2 + c * cs : NULL,
                                      kd == 2 ? r3 + c * cs : NULL};
        k2_fwd_tail(0, nout, kd, rows, i0, w1, hw, y + c * os, argmax + c * os);
    }
}

static void max_pool_k2(int64_t planes, const int64_t in[3], const int64_t out[3], int kd, const float *x,
                        float *y, int32_t *argmax) {
    const int64_t H = in[1], W = in[2], ip = in[0] * H * W, op = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (planes * op * 4 * kd >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < planes; q++)
        for (int64_t od = 0; od < out[0]; od++)
            for (int64_t oh = 0; oh < out[1]; oh++) {
                const int64_t o = q * op + (od * out[1] + oh) * out[2];
                const int32_t i0 = (int32_t)((od * kd * H + oh * 2) * W);
                const float *r0 = x + q * ip + i0, *r1 = r0 + W, *r2 = r0 + H * W, *r3 = r2 + W;
                cpu_max_pool_k2_rows(1, 0, 0, out[2], kd, r0, r1, kd == 2 ? r2 : NULL, kd == 2 ? r3 : NULL, i0,
                                     (int32_t)W, (int32_t)(H * W), y + o, argmax + o);
            }
}

// x is (N,C,D,H,W), y and argmax are (N,C,OD,OH,OW); in = {D,H,W}, out = {OD,OH,OW}
void cpu_max_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                          const int s[3], const int p[3], const float *x, float *y, int32_t *argmax) {
    if (max_pool_is_k2(in, out, k, s, p)) {
        max_pool_k2(n * c, in, out, k[0], x, y, argmax);
        return;
    }
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

// argmax and dy are (N,C,OD,OH,OW), dx is (N,C,D,H,W): dx[argmax] += dy, plane by plane. With set,
// dx was not cleared (graph.c): each plane is cleared just before its scatter, in this thread's
// cache, where a separate clearing pass sent all of dx to memory and back.
static void max_pool_scatter(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                             const float *dy, float *dx, bool set) {
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (n * c * (set ? ip : op) >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const int32_t *ap = argmax + q * op;
        const float *dyp = dy + q * op;
        float *dxp = dx + q * ip;
        if (set) memset(dxp, 0, sizeof(float) * (size_t)ip);
        for (int64_t o = 0; o < op; o++) dxp[ap[o]] += dyp[o];
    }
}

void cpu_max_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                           const float *dy, float *dx) {
    max_pool_scatter(n, c, in, out, argmax, dy, dx, false);
}

void cpu_max_pool_backward_set(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3],
                               const int32_t *argmax, const float *dy, float *dx) {
    max_pool_scatter(n, c, in, out, argmax, dy, dx, true);
}

// The gradient g of one pool output through the activation's derivative at its winner y: the bits
// of act_backward_set after the scatter.
static inline float pool_act_grad(float y, float g, bool leaky, float slope) {
    return 0.0f + (y > 0.0f ? g : leaky ? slope * g : 0.0f);
}

// A row of windows of max_pool_k2_backward_act: its 2 kd rows of dx (plane offsets row[r], r <
// 2 kd; dxp: the plane), columns iw0 <= iw < w: the gradient of output iw / 2 where its winner
// is row[r] + iw, else 0.
static inline void k2_rows_tail(int64_t iw0, int64_t w, int nr, const int32_t *row, const int32_t *ar,
                                const float *dyr, const float *yr, bool leaky, float slope, float *dxp) {
    for (int r = 0; r < nr; r++)
        for (int64_t i = iw0; i < w; i++) {
            const float g = 0.0f + dyr[i / 2];
            dxp[row[r] + i] = ar[i / 2] == row[r] + i ? pool_act_grad(yr[i / 2], g, leaky, slope) : 0.0f;
        }
}

// Row of windows wr (od * OH + oh) of a plane: its 2 kd rows' offsets in the input plane into
// row[0 .. 2 kd) ((d, h) = (0,0), (0,1), (1,0), (1,1)); returns its outputs' offset in the plane.
static inline int64_t k2_window_row(int64_t wr, const int64_t in[3], const int64_t out[3], int kd, int32_t row[4]) {
    const int64_t od = wr / out[1], oh = wr % out[1];
    const int32_t i0 = (int32_t)((od * kd * in[1] + oh * 2) * in[2]);
    for (int r = 0; r < 2 * kd; r++) row[r] = i0 + (int32_t)((r >> 1) * in[1] * in[2] + (r & 1) * in[2]);
    return wr * out[2];
}

// The same on AVX2, 8 columns a step: 4 outputs' winners, values and gradients each taken twice,
// their gradient through the activation formed once for the 2 kd rows; the same arithmetic as
// the scalar loop, which takes the columns after. One call per plane: a call per row of dx, each
// loading its windows again, cost 2.3% of cnn3d's step beside the rows' own 4.1% (perf, 2-core
// Xeon).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void k2_plane_avx2(int64_t q, const int64_t in[3], const int64_t out[3], int kd,
                                                          const int32_t *argmax, const float *dy, const float *y,
                                                          bool leaky, float slope, float *dx) {
    const int64_t W = in[2], op = out[0] * out[1] * out[2];
    float *dxp = dx + q * in[0] * in[1] * in[2];
    const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 zero = _mm256_setzero_ps(), sl = _mm256_set1_ps(leaky ? slope : 0.0f);
    for (int64_t wr = 0; wr < out[0] * out[1]; wr++) {
        int32_t row[4];
        const int64_t o = q * op + k2_window_row(wr, in, out, kd, row);
        const int32_t *ar = argmax + o;
        const float *dyr = dy + o, *yr = y + o;
        int64_t iw = 0;
        for (; iw + 8 <= W; iw += 8) {
            const __m128i a4 = _mm_loadu_si128((const void *)(ar + iw / 2));
            const __m128 g4 = _mm_loadu_ps(dyr + iw / 2), y4 = _mm_loadu_ps(yr + iw / 2);
            const __m256i a = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(a4), twice);
            const __m256 g = _mm256_add_ps(zero, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(g4), twice));
            const __m256 yv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(y4), twice);
            // y > 0 ? g : leaky ? slope * g : 0 (slope * g is 0 * g = +-0 when not leaky: masked below)
            __m256 d = _mm256_blendv_ps(leaky ? _mm256_mul_ps(sl, g) : zero, g, _mm256_cmp_ps(yv, zero, _CMP_GT_OQ));
            d = _mm256_add_ps(zero, d);
            for (int r = 0; r < 2 * kd; r++) {
                const __m256i pos = _mm256_add_epi32(_mm256_set1_epi32(row[r] + (int32_t)iw), step);
                _mm256_storeu_ps(dxp + row[r] + iw, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, pos)), d));
            }
        }
        k2_rows_tail(iw, W, 2 * kd, row, ar, dyr, yr, leaky, slope, dxp);
    }
}
#endif

// cpu_max_pool_backward_act for "kernel 2" windows that tile the input (in = 2 out along H and W,
// and along D or D unpooled): each window's 4 (8) gradients written in one pass, the winner's and
// zeros, row by row. Measured on a 2-core Xeon (AVX-512), small CNN at 2 threads: the plane-wise
// clearing and scatter it replaces took 8.6% of the step, this 4.1% (4,760 -> 4,930 samples/s,
// means of 3); the same loop written for the compiler to vectorise took 28%. y is the pool's
// output: the winners' values, read once per window rather than the whole input.
static void max_pool_k2_backward_act(int64_t planes, const int64_t in[3], const int64_t out[3], int kd,
                                     const int32_t *argmax, const float *dy, const float *y, bool leaky, float slope,
                                     float *dx) {
    const bool avx2 = cpu_conv_fast_isa() != CPU_ISA_NONE;  // AVX2 (and FMA) or more, asked once
#pragma omp parallel for schedule(static) if (planes * in[0] * in[1] * in[2] >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < planes; q++) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (avx2) {
            k2_plane_avx2(q, in, out, kd, argmax, dy, y, leaky, slope, dx);
            continue;
        }
#endif
        float *dxp = dx + q * in[0] * in[1] * in[2];
        for (int64_t wr = 0; wr < out[0] * out[1]; wr++) {
            int32_t row[4];
            const int64_t o = q * out[0] * out[1] * out[2] + k2_window_row(wr, in, out, kd, row);
            k2_rows_tail(0, in[2], 2 * kd, row, argmax + o, dy + o, y + o, leaky, slope, dxp);
        }
    }
}

// max_pool_backward_set with the relu-like derivative of the activation before the pool folded
// in (backend.h): y is the pool's output (N,C,OD,OH,OW), each window's winner, an output of the
// activation, which is > 0 exactly where its input is. Windows do not overlap, so each dx gets at
// most one term, which is the term the activation's own pass would have added to 0. Saves that
// pass over dx: 4.3% of the small CNN's step at 2 threads on the 2-core EPYC.
void cpu_max_pool_backward_act(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                               const int s[3], const int p[3], const int32_t *argmax, const float *dy, const float *y,
                               bool leaky, float slope, float *dx) {
    if (max_pool_is_k2(in, out, k, s, p) && in[1] == 2 * out[1] && in[2] == 2 * out[2] &&
        in[0] == k[0] * out[0]) {
        max_pool_k2_backward_act(n * c, in, out, k[0], argmax, dy, y, leaky, slope, dx);
        return;
    }
    const int64_t ip = in[0] * in[1] * in[2], op = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (n * c * ip >= CPU_PAR_MIN_WORK)
    for (int64_t q = 0; q < n * c; q++) {
        const int32_t *ap = argmax + q * op;
        const float *dyp = dy + q * op, *yp = y + q * op;
        float *dxp = dx + q * ip;
        memset(dxp, 0, sizeof(float) * (size_t)ip);
        for (int64_t o = 0; o < op; o++) {
            const float g = 0.0f + dyp[o];  // the pool's own sum into its cleared gradient
            dxp[ap[o]] = pool_act_grad(yp[o], g, leaky, slope);
        }
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
