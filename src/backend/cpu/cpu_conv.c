// cpu_conv.c: convolution and transposed convolution as im2col (vol2col) + OpenBLAS sgemm.
//
// Everything is 3D: a 2D map is D = OD = 1 with a kernel of depth 1. The convolution runs one
// sample at a time: its columns [C*KD*KH*KW, P] (P output positions) go to a slot of the layer's
// scratch and its GEMM writes straight into y, with no reordering. With at least as many
// samples (and scratch slots) as threads, samples run in parallel, each GEMM serial (OpenBLAS
// runs serially inside an OpenMP region); otherwise samples go one after another and each GEMM
// uses OpenBLAS's threads. dW sums over samples, in order, in fixed blocks of rows. A 1x1x1
// kernel with stride 1, no padding and equal sizes needs no columns at all: the input is its
// own column matrix. Backward recomputes the columns.
//
// The transposed convolution still goes through in chunks of cs samples: the chunk's columns
// [C*KD*KH*KW, cs*P] and its data in GEMM order [F, cs*P] live in scratch, one sgemm per group
// covering the whole chunk. It is the input gradient of the convolution that maps its output
// shape back to its input shape (weight [C_in, C_out/G, k...] is that convolution's
// [F, C/G, k...]), so its forward is conv's dx and its backward is conv's forward and dW.
//
// Threads: results do not depend on the thread count. Every GEMM is computed in the same tiles
// whichever thread runs it (cpu_gemm.c); im2col, col2im and the copies write every output element
// from one thread in a fixed order.
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/check.h"

// A convolution in the forward direction (x: input, y: output; a transposed one's flipped) and
// the sizes the loops derive from its geometry.
typedef struct {
    gl_conv_geom geo;               // backend_types.h
    int64_t in_pos, out_pos, taps;  // D*H*W, OD*OH*OW, KD*KH*KW
    int64_t cg, fg, kg;             // per group: C/G, F/G, C/G * taps (a column block's rows)
    bool direct;                    // 1x1x1, stride 1, unpadded, equal sizes: x is its own columns
} cv_plan;

static int64_t chunk_cap;  // test hook: at most this many samples per chunk (0: no cap)

void cpu_conv_set_chunk_cap(int64_t samples) { chunk_cap = samples; }

static cv_plan plan_make(const gl_conv_geom *geo) {
    cv_plan g = {.geo = *geo, .in_pos = 1, .out_pos = 1, .taps = 1};
    bool direct = true;
    for (int i = 0; i < 3; i++) {
        g.in_pos *= geo->in[i], g.out_pos *= geo->out[i], g.taps *= geo->k[i];
        direct = direct && geo->k[i] == 1 && geo->s[i] == 1 && geo->p[i] == 0 && geo->in[i] == geo->out[i];
    }
    g.direct = direct;
    const int64_t c = geo->c, f = geo->f, groups = geo->groups;
    GL_CHECK(groups >= 1 && c % groups == 0 && f % groups == 0, "conv groups must divide both channel counts");
    g.cg = c / groups, g.fg = f / groups, g.kg = g.cg * g.taps;
    return g;
}

// Samples per chunk: as many as scratch holds ((C*taps + F) * P floats each), at least one.
static int64_t chunk_samples(const cv_plan *g, int64_t n, int64_t scratch_floats) {
    if (g->direct) return 1;
    int64_t per = (g->geo.c * g->taps + g->geo.f) * g->out_pos;
    GL_CHECK(scratch_floats >= per, "conv scratch must hold one sample's columns (sized by the layer's infer)");
    int64_t cs = scratch_floats / per;
    if (cs > INT32_MAX / g->out_pos) cs = INT32_MAX / g->out_pos;  // sgemm's int dimensions
    if (chunk_cap > 0 && cs > chunk_cap) cs = chunk_cap;
    return cs < n ? cs : n;
}

// c[M,N] = op(a) . op(b) + beta * c, row-major with leading dimensions (cpu_gemm.c: the same
// bits at any thread count, inside a per-sample loop's thread or across the threads).
static void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
    cpu_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

static int64_t ceil_div(int64_t a, int64_t b) { return a > 0 ? (a + b - 1) / b : 0; }

// The outputs o in [*lo, *hi) whose tap at offset off (= kernel index * dilation) reads inside
// an input of size in: 0 <= o*s - p + off < in.
static void valid_range(int64_t in, int64_t out, int64_t s, int64_t p, int64_t off, int64_t *lo, int64_t *hi) {
    int64_t a = ceil_div(p - off, s), b = ceil_div(in + p - off, s);
    if (b > out) b = out;
    if (a > b) a = b;
    *lo = a, *hi = b;
}

// x is (cs,C,D,H,W), col is [C*KD*KH*KW, cs*OD*OH*OW]: col[(c,kz,ky,kx)][(s,oz,oy,ox)] is the input
// element tap (kz,ky,kx) of output (oz,oy,ox) reads, 0 in the padding.
static void im2col(const cv_plan *g, int64_t cs, const float *x, float *col) {
    const int64_t rows = g->geo.c * g->taps, P = g->out_pos, OD = g->geo.out[0], OH = g->geo.out[1], OW = g->geo.out[2];
    const int64_t H = g->geo.in[1], W = g->geo.in[2];
#pragma omp parallel for collapse(4) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t s = 0; s < cs; s++)
            for (int64_t oz = 0; oz < OD; oz++)
                for (int64_t oy = 0; oy < OH; oy++) {
                    int64_t ch = r / g->taps, t = r % g->taps;
                    int64_t kz = t / (g->geo.k[1] * g->geo.k[2]), ky = t / g->geo.k[2] % g->geo.k[1],
                            kx = t % g->geo.k[2];
                    float *dst = col + (r * cs + s) * P + (oz * OH + oy) * OW;
                    int64_t iz = oz * g->geo.s[0] - g->geo.p[0] + kz * g->geo.d[0];
                    int64_t iy = oy * g->geo.s[1] - g->geo.p[1] + ky * g->geo.d[1];
                    if (iz < 0 || iz >= g->geo.in[0] || iy < 0 || iy >= H) {
                        memset(dst, 0, sizeof(float) * (size_t)OW);
                        continue;
                    }
                    const float *src = x + (s * g->geo.c + ch) * g->in_pos + (iz * H + iy) * W;
                    int64_t lo, hi, off = kx * g->geo.d[2] - g->geo.p[2];  // ix = ox * stride + off
                    valid_range(W, OW, g->geo.s[2], g->geo.p[2], kx * g->geo.d[2], &lo, &hi);
                    for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
                    if (g->geo.s[2] == 1 && hi > lo)
                        memcpy(dst + lo, src + lo + off, sizeof(float) * (size_t)(hi - lo));
                    else if (g->geo.s[2] > 1)
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * g->geo.s[2] + off];
                    for (int64_t ox = hi; ox < OW; ox++) dst[ox] = 0.0f;
                }
}

// x's row (s, ch, iz, iy) += its taps' entries of col [C*KD*KH*KW, cs*OD*OH*OW] (as im2col),
// summed in (kz,ky,kx) order.
static inline void col2im_row(const cv_plan *g, int64_t cs, int64_t s, int64_t ch, int64_t iz, int64_t iy,
                              const float *col, float *x) {
    const int64_t P = g->out_pos, OD = g->geo.out[0], OH = g->geo.out[1], OW = g->geo.out[2];
    const int64_t H = g->geo.in[1], W = g->geo.in[2];
    float *row = x + (s * g->geo.c + ch) * g->in_pos + (iz * H + iy) * W;
    for (int64_t kz = 0; kz < g->geo.k[0]; kz++) {
        int64_t nz = iz + g->geo.p[0] - kz * g->geo.d[0];  // = oz * stride
        if (nz < 0 || nz % g->geo.s[0] || nz / g->geo.s[0] >= OD) continue;
        for (int64_t ky = 0; ky < g->geo.k[1]; ky++) {
            int64_t ny = iy + g->geo.p[1] - ky * g->geo.d[1];
            if (ny < 0 || ny % g->geo.s[1] || ny / g->geo.s[1] >= OH) continue;
            int64_t o = (nz / g->geo.s[0] * OH + ny / g->geo.s[1]) * OW;
            for (int64_t kx = 0; kx < g->geo.k[2]; kx++) {
                int64_t r = ch * g->taps + (kz * g->geo.k[1] + ky) * g->geo.k[2] + kx;
                const float *src = col + (r * cs + s) * P + o;
                int64_t lo, hi, off = kx * g->geo.d[2] - g->geo.p[2];  // ix = ox * stride + off
                valid_range(W, OW, g->geo.s[2], g->geo.p[2], kx * g->geo.d[2], &lo, &hi);
                if (g->geo.s[2] == 1) {
                    float *rw = row + off;
#pragma omp simd
                    for (int64_t ox = lo; ox < hi; ox++) rw[ox] += src[ox];
                } else {
                    for (int64_t ox = lo; ox < hi; ox++) row[ox * g->geo.s[2] + off] += src[ox];
                }
            }
        }
    }
}

// col is [C*KD*KH*KW, cs*OD*OH*OW] (as im2col), x is (cs,C,D,H,W): x += col folded back. One
// input row per iteration, so no two threads touch the same element.
static void col2im_add(const cv_plan *g, int64_t cs, const float *col, float *x) {
#pragma omp parallel for collapse(4) schedule(static)
    for (int64_t s = 0; s < cs; s++)
        for (int64_t ch = 0; ch < g->geo.c; ch++)
            for (int64_t iz = 0; iz < g->geo.in[0]; iz++)
                for (int64_t iy = 0; iy < g->geo.in[1]; iy++) col2im_row(g, cs, s, ch, iz, iy, col, x);
}

// One sample: col [C*KD*KH*KW, OD*OH*OW], x (C,D,H,W) += col folded back; serial.
static void col2im_one(const cv_plan *g, const float *col, float *x) {
    for (int64_t ch = 0; ch < g->geo.c; ch++)
        for (int64_t iz = 0; iz < g->geo.in[0]; iz++)
            for (int64_t iy = 0; iy < g->geo.in[1]; iy++) col2im_row(g, 1, 0, ch, iz, iy, col, x);
}

// One sample's columns, serially: x is (C,D,H,W), col [C*KD*KH*KW, OD*OH*OW] as im2col's.
static void im2col_one(const cv_plan *g, const float *x, float *col) {
    const int64_t OD = g->geo.out[0], OH = g->geo.out[1], OW = g->geo.out[2], D = g->geo.in[0], H = g->geo.in[1],
                  W = g->geo.in[2];
    float *dst = col;
    for (int64_t ch = 0; ch < g->geo.c; ch++)
        for (int64_t kz = 0; kz < g->geo.k[0]; kz++)
            for (int64_t ky = 0; ky < g->geo.k[1]; ky++)
                for (int64_t kx = 0; kx < g->geo.k[2]; kx++, dst += g->out_pos) {
                    int64_t lo, hi, off = kx * g->geo.d[2] - g->geo.p[2];  // ix = ox * stride + off
                    valid_range(W, OW, g->geo.s[2], g->geo.p[2], kx * g->geo.d[2], &lo, &hi);
                    for (int64_t oz = 0; oz < OD; oz++) {
                        int64_t iz = oz * g->geo.s[0] - g->geo.p[0] + kz * g->geo.d[0];
                        for (int64_t oy = 0; oy < OH; oy++) {
                            float *d = dst + (oz * OH + oy) * OW;
                            int64_t iy = oy * g->geo.s[1] - g->geo.p[1] + ky * g->geo.d[1];
                            if (iz < 0 || iz >= D || iy < 0 || iy >= H) {
                                for (int64_t ox = 0; ox < OW; ox++) d[ox] = 0.0f;
                                continue;
                            }
                            const float *src = x + ch * g->in_pos + (iz * H + iy) * W + off;
                            for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0.0f;
                            if (g->geo.s[2] == 1) {
#pragma omp simd
                                for (int64_t ox = lo; ox < hi; ox++) d[ox] = src[ox];
                            } else {
                                for (int64_t ox = lo; ox < hi; ox++) d[ox] = src[ox * g->geo.s[2]];
                            }
                            for (int64_t ox = hi; ox < OW; ox++) d[ox] = 0.0f;
                        }
                    }
                }
}

// src is (cs,CH,P), dst is [CH, cs*P]: sample-major to GEMM order.
static void to_gemm_order(int64_t cs, int64_t ch, int64_t P, const float *src, float *dst) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t c = 0; c < ch; c++)
        for (int64_t s = 0; s < cs; s++)
            memcpy(dst + (c * cs + s) * P, src + (s * ch + c) * P, sizeof(float) * (size_t)P);
}

// src is [CH, cs*P], dst is (cs,CH,P), b is (CH) or NULL: dst = src + b, or dst += src when add.
static void from_gemm_order(int64_t cs, int64_t ch, int64_t P, const float *src, const float *b, bool add,
                            float *dst) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t s = 0; s < cs; s++)
        for (int64_t c = 0; c < ch; c++) {
            const float *a = src + (c * cs + s) * P;
            float *y = dst + (s * ch + c) * P, bias = b ? b[c] : 0.0f;
            if (add)
                for (int64_t i = 0; i < P; i++) y[i] += a[i];
            else
                for (int64_t i = 0; i < P; i++) y[i] = a[i] + bias;
        }
}

// y is (cs,CH,P), b is (CH): y += b
static void add_bias(int64_t cs, int64_t ch, int64_t P, const float *b, float *y) {
#pragma omp parallel for collapse(2) schedule(static) if (cs > 1)
    for (int64_t s = 0; s < cs; s++)
        for (int64_t c = 0; c < ch; c++) {
            float *row = y + (s * ch + c) * P;
            for (int64_t i = 0; i < P; i++) row[i] += b[c];
        }
}

// dy is (N,CH,P), db is (CH): db = the sum of dy over N and P (overwritten)
static void bias_grad(int64_t n, int64_t ch, int64_t P, const float *dy, float *db) {
    if (cpu_conv_fast_bias_grad(n, ch, P, dy, db)) return;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < ch; c++) {
        double sum = 0.0;
        for (int64_t s = 0; s < n; s++) {
            const float *row = dy + (s * ch + c) * P;
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < P; i++) sum += row[i];
        }
        db[c] = (float)sum;
    }
}

// The chunk's columns: x itself (direct) or im2col into col. Returns them; *ld is their stride.
static const float *columns(const cv_plan *g, int64_t m, const float *x, float *col, int64_t *ld) {
    *ld = m * g->out_pos;
    if (g->direct) return x;  // m == 1: x[C, P] is the column matrix
    im2col(g, m, x, col);
    return col;
}

// y[F, ld] (+)= W . cols, one GEMM per group; w is (F, C/G * taps), cols [C*taps, ld]
static void gemm_wx(const cv_plan *g, int64_t ld, const float *w, const float *cols, float beta, float *y) {
    for (int64_t gr = 0; gr < g->geo.groups; gr++)
        gemm(false, false, g->fg, ld, g->kg, w + gr * g->fg * g->kg, g->kg, cols + gr * g->kg * ld, ld, beta,
             y + gr * g->fg * ld, ld);
}

// cols[C*taps, ld] (+)= W^T . dy, one GEMM per group; dy is [F, ld]
static void gemm_wtdy(const cv_plan *g, int64_t ld, const float *w, const float *dy, float beta, float *cols) {
    for (int64_t gr = 0; gr < g->geo.groups; gr++)
        gemm(true, false, g->kg, ld, g->fg, w + gr * g->fg * g->kg, g->kg, dy + gr * g->fg * ld, ld, beta,
             cols + gr * g->kg * ld, ld);
}

// dw[F, C/G * taps] += dy . cols^T, one GEMM per group; dy is [F, ld], cols [C*taps, ld]
static void gemm_dw(const cv_plan *g, int64_t ld, const float *dy, const float *cols, float *dw) {
    for (int64_t gr = 0; gr < g->geo.groups; gr++)
        gemm(false, true, g->fg, g->kg, ld, dy + gr * g->fg * ld, ld, cols + gr * g->kg * ld, ld, 1.0f,
             dw + gr * g->fg * g->kg, g->kg);
}

// Per-sample slots of one sample's columns [C*taps, P] in scratch (none needed when direct).
static int64_t sample_slots(const cv_plan *g, int64_t n, int64_t scratch_floats) {
    if (g->direct) return n;
    int64_t per = g->geo.c * g->taps * g->out_pos;
    GL_CHECK(scratch_floats >= per, "conv scratch must hold one sample's columns (sized by the layer's infer)");
    int64_t slots = scratch_floats / per;
    if (chunk_cap > 0 && slots > chunk_cap) slots = chunk_cap;
    return slots < n ? slots : n;
}

// Threads for a loop over `items` independent items: no more than there are.
static int loop_threads(int64_t items) {
    int t = omp_get_max_threads();
    return items < t ? (int)(items > 1 ? items : 1) : t;
}

// Whether a loop over `items` samples gives every thread one (their GEMMs then run serially in
// the threads); else the loop is serial and each sample's GEMM, im2col and col2im use the
// threads. Either way the same GEMM tiles run, so the bits are the same.
static bool per_sample_threads(int64_t items) { return items >= omp_get_max_threads(); }

// One sample's columns: serially inside a per-sample loop, else with the threads.
static void im2col_sample(const cv_plan *g, bool in_loop, const float *x, float *col) {
    if (in_loop)
        im2col_one(g, x, col);
    else
        im2col(g, 1, x, col);
}

// Whether cpu_conv_fast.c may take the convolution: stride 1 everywhere, one group.
static bool fast_applies(const cv_plan *g) {
    return g->geo.groups == 1 && g->geo.s[0] == 1 && g->geo.s[1] == 1 && g->geo.s[2] == 1;
}

static void conv_bwd_gemm(const cv_plan *g, int64_t n, const float *x, const float *w, const float *dy, float *dw,
                          float *dx, float *scratch, int64_t scratch_floats);

// Rows of dW one task computes in the backward pass: a fixed split (not one per thread), so the
// GEMM calls, and the sums, are the same at any thread count.
#define DW_ROW_BLOCK 64

// The convolution's forward, one sample at a time: x is (N,C,D,H,W), w is (F,C/G,KD,KH,KW), b is
// (F) or NULL, y is (N,F,OD,OH,OW) (overwritten). Each sample's columns stay in cache and its
// GEMM writes straight into y; samples run in parallel, each GEMM single-threaded (OpenBLAS
// runs serially inside an OpenMP region), so both cores work even on small maps. act (when on)
// is applied to y as it is stored (the fast kernels) or to each sample's outputs after its bias.
static void conv_fwd(const cv_plan *g, int64_t n, const float *x, const float *w, const float *b, float *y,
                     float *scratch, int64_t scratch_floats, cpu_store_act act, cpu_store_pool *pool) {
    if (n <= 0) return;
    if (fast_applies(g) && (cpu_conv_wino_forward(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d,
                                                   g->geo.p, x, w, b, y, scratch, scratch_floats, act, pool) ||
                            cpu_conv_fast_forward(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d,
                                                  g->geo.p, x, w, b, y, scratch, scratch_floats, act, pool)))
        return;
    const int64_t P = g->out_pos, slot = g->geo.c * g->taps * P;
    int64_t slots = sample_slots(g, n, scratch_floats);
    const bool par = per_sample_threads(slots);
#pragma omp parallel for schedule(static) num_threads(loop_threads(slots)) if (par)
    for (int64_t s = 0; s < n; s++) {
        const float *xs = x + s * g->geo.c * g->in_pos, *cols = xs;
        if (!g->direct) {
            float *col = scratch + omp_get_thread_num() * slot;
            im2col_sample(g, par, xs, col);
            cols = col;
        }
        float *ys = y + s * g->geo.f * P;
        gemm_wx(g, P, w, cols, 0.0f, ys);
        if (b) add_bias(1, g->geo.f, P, b, ys);
        if (act.on) cpu_act_forward(act.act, act.slope, g->geo.f * P, ys, ys);  // in place, element-wise
    }
}

// The convolution's gradients: x is (N,C,D,H,W), dy is (N,F,OD,OH,OW); dw (F,C/G,KD,KH,KW) and
// db (F) (NULL: none) overwritten, dx (N,C,D,H,W) accumulated (NULL: skipped), or with set
// overwritten (the fast kernels' sums start from 0 rather than from a cleared dx; the im2col path
// clears it here). Per chunk of samples: their columns (in parallel), dW += dy . cols^T in fixed
// blocks of rows, each summing the samples in order, then each sample's dx (in parallel).
static void conv_bwd(const cv_plan *g, int64_t n, const float *x, const float *w, const float *dy, float *dw,
                     float *db, float *dx, float *scratch, int64_t scratch_floats, bool set) {
    memset(dw, 0, sizeof(float) * (size_t)(g->geo.f * g->kg));
    if (db) bias_grad(n, g->geo.f, g->out_pos, dy, db);
    if (n <= 0) return;
    // The fast kernels where they apply; dx last, as it reuses the scratch of dW's columns.
    bool fast = fast_applies(g);
    bool dw_done = fast && (cpu_conv_wino_weight_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k,
                                                      g->geo.d, g->geo.p, x, dy, dw, scratch, scratch_floats) ||
                            cpu_conv_fast_weight_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d,
                                                      g->geo.p, x, dy, dw, scratch, scratch_floats));
    float *dx_fast = NULL, *dx_wino = NULL;
    if (dx && fast &&
        cpu_conv_wino_input_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d, g->geo.p, w, NULL,
                                 NULL, true, scratch, scratch_floats))
        dx_wino = dx, dx = NULL;
    if (dx && fast &&
        cpu_conv_fast_input_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d, g->geo.p, w, NULL,
                                 NULL, true, scratch, scratch_floats))
        dx_fast = dx, dx = NULL;
    if (dx && set) memset(dx, 0, sizeof(float) * (size_t)(n * g->geo.c * g->in_pos));
    if (!dw_done || dx) conv_bwd_gemm(g, n, x, w, dy, dw_done ? NULL : dw, dx, scratch, scratch_floats);
    if (dx_wino)
        GL_CHECK(cpu_conv_wino_input_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d, g->geo.p,
                                          w, dy, dx_wino, !set, scratch, scratch_floats),
                 "the Winograd input gradient said it would apply");
    if (dx_fast)
        cpu_conv_fast_input_grad(n, g->geo.c, g->geo.f, g->geo.in, g->geo.out, g->geo.k, g->geo.d, g->geo.p, w, dy,
                                 dx_fast, !set, scratch, scratch_floats);
}

// conv_bwd by im2col + sgemm: dw (NULL: skipped) += the weight gradient, dx (NULL: skipped) +=
// the input gradient.
static void conv_bwd_gemm(const cv_plan *g, int64_t n, const float *x, const float *w, const float *dy, float *dw,
                          float *dx, float *scratch, int64_t scratch_floats) {
    const int64_t P = g->out_pos, slot = g->geo.c * g->taps * P, in_size = g->geo.c * g->in_pos;
    const int64_t cs = sample_slots(g, n, scratch_floats);
    const int64_t fblocks = (g->fg + DW_ROW_BLOCK - 1) / DW_ROW_BLOCK, tasks = g->geo.groups * fblocks;
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        const int64_t m = n - s0 < cs ? n - s0 : cs;
        // cols(i): sample s0 + i's columns
#define COLS(i) (g->direct ? x + (s0 + (i)) * in_size : scratch + (i) * slot)
        if (!g->direct && dw) {
            const bool par = per_sample_threads(m);
#pragma omp parallel for schedule(static) num_threads(loop_threads(m)) if (par)
            for (int64_t i = 0; i < m; i++) im2col_sample(g, par, x + (s0 + i) * in_size, scratch + i * slot);
        }
#pragma omp parallel for schedule(static) num_threads(loop_threads(tasks)) if (dw)
        for (int64_t t = 0; t < (dw ? tasks : 0); t++) {
            int64_t gr = t / fblocks, f0 = t % fblocks * DW_ROW_BLOCK;
            int64_t rows = g->fg - f0 < DW_ROW_BLOCK ? g->fg - f0 : DW_ROW_BLOCK;
            for (int64_t i = 0; i < m; i++)
                gemm(false, true, rows, g->kg, P, dy + ((s0 + i) * g->geo.f + gr * g->fg + f0) * P, P,
                     COLS(i) + gr * g->kg * P, P, 1.0f, dw + (gr * g->fg + f0) * g->kg, g->kg);
        }
        if (!dx) continue;
        const bool par = per_sample_threads(m);
#pragma omp parallel for schedule(static) num_threads(loop_threads(m)) if (par)
        for (int64_t i = 0; i < m; i++) {
            const float *dys = dy + (s0 + i) * g->geo.f * P;
            float *dxs = dx + (s0 + i) * in_size;
            if (g->direct) {
                gemm_wtdy(g, P, w, dys, 1.0f, dxs);  // the columns are dx itself
            } else {
                float *col = scratch + i * slot;  // its columns are no longer needed
                gemm_wtdy(g, P, w, dys, 0.0f, col);
                if (par)
                    col2im_one(g, col, dxs);
                else
                    col2im_add(g, 1, col, dxs);
            }
        }
#undef COLS
    }
}

// The transposed convolution's forward, i.e. the input gradient of convolution g: x is
// (N,F,OD,OH,OW), w is (F,C/G,KD,KH,KW), b is (C) or NULL, y is (N,C,D,H,W) (overwritten); act
// (when on) is applied to each chunk's outputs after their bias, while they are in cache.
static void convt_fwd(const cv_plan *g, int64_t n, const float *x, const float *w, const float *b, float *y,
                      float *scratch, int64_t scratch_floats, cpu_store_act act) {
    if (n <= 0) return;
    int64_t cs = chunk_samples(g, n, scratch_floats), P = g->out_pos;
    float *col = scratch, *tmp = g->direct ? NULL : scratch + g->geo.c * g->taps * cs * P;
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        int64_t m = n - s0 < cs ? n - s0 : cs, ld = m * P;
        const float *xs = x + s0 * g->geo.f * P;
        float *ys = y + s0 * g->geo.c * g->in_pos;
        if (m > 1) {
            to_gemm_order(m, g->geo.f, P, xs, tmp);
            xs = tmp;
        }
        if (g->direct) {
            gemm_wtdy(g, ld, w, xs, 0.0f, ys);
        } else {
            gemm_wtdy(g, ld, w, xs, 0.0f, col);
            memset(ys, 0, sizeof(float) * (size_t)(m * g->geo.c * g->in_pos));
            col2im_add(g, m, col, ys);
        }
        if (b) add_bias(m, g->geo.c, g->in_pos, b, ys);
        if (act.on) cpu_act_forward(act.act, act.slope, m * g->geo.c * g->in_pos, ys, ys);  // in place, element-wise
    }
}

// The transposed convolution's gradients, i.e. convolution g run forward on dy: x is
// (N,F,OD,OH,OW), dy is (N,C,D,H,W); dw (F,C/G,KD,KH,KW) and db (C) (NULL: none) overwritten,
// dx (N,F,OD,OH,OW) accumulated (NULL: skipped)
static void convt_bwd(const cv_plan *g, int64_t n, const float *x, const float *w, const float *dy, float *dw,
                      float *db, float *dx, float *scratch, int64_t scratch_floats) {
    memset(dw, 0, sizeof(float) * (size_t)(g->geo.f * g->kg));
    if (db) bias_grad(n, g->geo.c, g->in_pos, dy, db);
    if (n <= 0) return;
    int64_t cs = chunk_samples(g, n, scratch_floats), P = g->out_pos;
    float *col = scratch, *tmp = g->direct ? NULL : scratch + g->geo.c * g->taps * cs * P;
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        int64_t m = n - s0 < cs ? n - s0 : cs, ld;
        const float *cols = columns(g, m, dy + s0 * g->geo.c * g->in_pos, col, &ld);
        const float *xs = x + s0 * g->geo.f * P;
        if (m > 1) {
            to_gemm_order(m, g->geo.f, P, xs, tmp);
            xs = tmp;
        }
        gemm_dw(g, ld, xs, cols, dw);
        if (!dx) continue;
        float *dxs = dx + s0 * g->geo.f * P;
        if (m == 1) {
            gemm_wx(g, ld, w, cols, 1.0f, dxs);
        } else {
            gemm_wx(g, ld, w, cols, 0.0f, tmp);  // x in GEMM order is no longer needed
            from_gemm_order(m, g->geo.f, P, tmp, NULL, true, dxs);
        }
    }
}

// ---- the backend's entry points (shapes in backend.h) ------------------------------------------

void cpu_conv_forward(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y, float *scratch,
                      int64_t scratch_floats) {
    cv_plan g = plan_make(geo);
    conv_fwd(&g, geo->n, x, w, b, y, scratch, scratch_floats, (cpu_store_act){0}, NULL);
}

void cpu_conv_forward_act(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                          float *scratch, int64_t scratch_floats, gl_act act, float slope) {
    GL_CHECK(gl_act_storable(act, slope),
             "conv_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    cv_plan g = plan_make(geo);
    conv_fwd(&g, geo->n, x, w, b, y, scratch, scratch_floats, (cpu_store_act){.on = true, .act = act, .slope = slope},
             NULL);
}

// The convolution (and its activation) with the max pool after it (backend.h): the kernel that
// computes the convolution pools as it stores where it can (F(2,3)'s tiles are the windows; the
// implicit GEMM computes a row of windows at a time into a small buffer), so y is neither
// written nor read back; else the pool runs over the y it wrote. Measured on a 2-core Xeon: see
// graph_fuse_pools.
void cpu_conv_forward_pool(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                           float *scratch, int64_t scratch_floats, bool act_on, gl_act act, float slope, int kd,
                           float *pooled, int32_t *argmax) {
    GL_CHECK(!act_on || gl_act_storable(act, slope),
             "conv_forward_pool takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    GL_CHECK((kd == 1 || kd == 2) && geo->out[0] % kd == 0 && geo->out[1] % 2 == 0 && geo->out[2] % 2 == 0,
             "conv_forward_pool's windows tile the output (graph_fuse_pools checks)");
    cv_plan g = plan_make(geo);
    cpu_store_pool pool = {.kd = kd, .y = pooled, .argmax = argmax};
    conv_fwd(&g, geo->n, x, w, b, y, scratch, scratch_floats,
             (cpu_store_act){.on = act_on, .act = act, .slope = act_on ? slope : 0.0f}, &pool);
    if (pool.done) return;
    const int64_t out[3] = {geo->out[0] / kd, geo->out[1] / 2, geo->out[2] / 2};
    const int k[3] = {kd, 2, 2}, p[3] = {0, 0, 0};
    cpu_max_pool_forward(geo->n, geo->f, geo->out, out, k, k, p, y, pooled, argmax);
}

void cpu_conv_backward(const gl_conv_geom *geo, const float *x, const float *w, const float *dy, float *dw, float *db,
                       float *dx, float *scratch, int64_t scratch_floats) {
    cv_plan g = plan_make(geo);
    conv_bwd(&g, geo->n, x, w, dy, dw, db, dx, scratch, scratch_floats, false);
}

// As cpu_conv_backward with dx overwritten (a dx the graph did not clear): one pass over dx fewer
// and, in the fast kernels, no reading it back. Measured on a 2-core Xeon (3D CNN, 2 threads, 40
// steps, 3 alternating runs): the 16 -> 32 layer's backward (dx 4 MiB) 0.829-0.851 -> 0.817-0.819
// s, the 32 -> 64 one's 0.328-0.346 -> 0.320-0.328 s; the small CNN's (dx 2 MiB) within noise.
void cpu_conv_backward_set(const gl_conv_geom *geo, const float *x, const float *w, const float *dy, float *dw,
                           float *db, float *dx, float *scratch, int64_t scratch_floats) {
    cv_plan g = plan_make(geo);
    conv_bwd(&g, geo->n, x, w, dy, dw, db, dx, scratch, scratch_floats, true);
}

// A transposed convolution C -> F from in to out is convolution F -> C from out to in.
void cpu_conv_transpose_forward(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                                float *scratch, int64_t scratch_floats) {
    const gl_conv_geom fl = gl_conv_geom_flipped(geo);
    cv_plan g = plan_make(&fl);
    convt_fwd(&g, geo->n, x, w, b, y, scratch, scratch_floats, (cpu_store_act){0});
}

void cpu_conv_transpose_forward_act(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                                    float *scratch, int64_t scratch_floats, gl_act act, float slope) {
    GL_CHECK(gl_act_storable(act, slope),
             "conv_transpose_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    const gl_conv_geom fl = gl_conv_geom_flipped(geo);
    cv_plan g = plan_make(&fl);
    convt_fwd(&g, geo->n, x, w, b, y, scratch, scratch_floats, (cpu_store_act){.on = true, .act = act, .slope = slope});
}

void cpu_conv_transpose_backward(const gl_conv_geom *geo, const float *x, const float *w, const float *dy, float *dw,
                                 float *db, float *dx, float *scratch, int64_t scratch_floats) {
    const gl_conv_geom fl = gl_conv_geom_flipped(geo);
    cv_plan g = plan_make(&fl);
    convt_bwd(&g, geo->n, x, w, dy, dw, db, dx, scratch, scratch_floats);
}
