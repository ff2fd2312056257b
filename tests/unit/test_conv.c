// test_conv.c: the conv and conv_transpose layers and their CPU kernels. Forward against direct
// loops (convolution) and scatter loops (transposed convolution) in double over every variant
// (2D/3D, stride, padding incl. TensorFlow's `same`, dilation, groups, bias, batch, chunking),
// backward against the loops' adjoints, finite-difference gradients through the graph, thread
// count independence, and every configuration infer must refuse.
#include "testlib.h"

#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"

// One configuration. The input is [c, sp[1], sp[2]] (2D) or [c, sp[0], sp[1], sp[2]] (3D).
typedef struct {
    int nd;
    int64_t c, sp[3];
    int64_t f, k, s, p, d, g;  // p: padding, or GL_PAD_SAME
    int bias;
    int64_t op;  // conv_transpose's output_padding
} cv_case;

// The geometry the test expects, from the formulas written out again here ({D, H, W}, 2D: D = 1).
typedef struct {
    int64_t in[3], out[3], k[3], s[3], d[3], p[3];  // p: padding before
    int64_t in_pos, out_pos, taps;
} ref_geom;

static ref_geom ref_geometry(const cv_case *t, int transpose) {
    ref_geom r;
    r.in_pos = r.out_pos = r.taps = 1;
    for (int j = 0; j < 3; j++) {
        int spatial = j >= 3 - t->nd;
        int64_t in = spatial ? t->sp[j] : 1, k = spatial ? t->k : 1, s = spatial ? t->s : 1;
        int64_t d = spatial ? t->d : 1, p = spatial ? t->p : 0, out;
        if (transpose) {
            out = (in - 1) * s - 2 * p + d * (k - 1) + (spatial ? t->op : 0) + 1;
        } else if (p == GL_PAD_SAME) {  // TensorFlow: out = ceil(in / s), odd padding after
            out = (in + s - 1) / s;
            int64_t total = (out - 1) * s + (k - 1) * d + 1 - in;
            p = total > 0 ? total / 2 : 0;
        } else {
            out = (in + 2 * p - (k - 1) * d - 1) / s + 1;
        }
        r.in[j] = in, r.out[j] = out, r.k[j] = k, r.s[j] = s, r.d[j] = d, r.p[j] = p;
        r.in_pos *= in, r.out_pos *= out, r.taps *= k;
    }
    return r;
}

static void case_text(const cv_case *t, int transpose, const char *extra, char *buf, size_t len) {
    char pad[16];
    if (t->p == GL_PAD_SAME) snprintf(pad, sizeof pad, "same");
    else snprintf(pad, sizeof pad, "%lld", (long long)t->p);
    snprintf(buf, len, "%s %dD c=%lld in=[%lld,%lld,%lld] f=%lld k=%lld s=%lld p=%s d=%lld g=%lld bias=%d op=%lld %s",
             transpose ? "conv_transpose" : "conv", t->nd, (long long)t->c, (long long)t->sp[0], (long long)t->sp[1],
             (long long)t->sp[2], (long long)t->f, (long long)t->k, (long long)t->s, pad, (long long)t->d,
             (long long)t->g, t->bias, (long long)t->op, extra);
}

// The recipe line for the layer under test.
static void layer_line(const cv_case *t, int transpose, const char *name, char *buf, size_t len) {
    char pad[16];
    if (t->p == GL_PAD_SAME) snprintf(pad, sizeof pad, "same");
    else snprintf(pad, sizeof pad, "%lld", (long long)t->p);
    if (transpose)
        snprintf(buf, len,
                 "    - {type: conv_transpose, name: %s, filters: %lld, kernel: %lld, stride: %lld, padding: %s, "
                 "output_padding: %lld, dilation: %lld, groups: %lld, bias: %s}\n",
                 name, (long long)t->f, (long long)t->k, (long long)t->s, pad, (long long)t->op, (long long)t->d,
                 (long long)t->g, t->bias ? "true" : "false");
    else
        snprintf(buf, len,
                 "    - {type: conv, name: %s, filters: %lld, kernel: %lld, stride: %lld, padding: %s, dilation: "
                 "%lld, groups: %lld, bias: %s}\n",
                 name, (long long)t->f, (long long)t->k, (long long)t->s, pad, (long long)t->d, (long long)t->g,
                 t->bias ? "true" : "false");
}

static gl_shape input_shape(const cv_case *t) {
    if (t->nd == 2) return (gl_shape){3, {t->c, t->sp[1], t->sp[2]}};
    return (gl_shape){4, {t->c, t->sp[0], t->sp[1], t->sp[2]}};
}

// ---- reference loops --------------------------------------------------------------------------

// Direct convolution. x is (N,C,D,H,W), w is (F,C/G,KD,KH,KW), b is (F) or NULL, y is (N,F,OD,OH,OW).
// Adjoint mode (dy != NULL) instead accumulates dx, dw, db (any may be NULL) from dy.
static void ref_conv(const ref_geom *r, int64_t n, int64_t c, int64_t f, int64_t groups, const float *x,
                     const float *w, const float *b, double *y, const float *dy, double *dx, double *dw, double *db) {
    int64_t cg = c / groups, fg = f / groups;
    for (int64_t s = 0; s < n; s++)
        for (int64_t fo = 0; fo < f; fo++)
            for (int64_t oz = 0; oz < r->out[0]; oz++)
                for (int64_t oy = 0; oy < r->out[1]; oy++)
                    for (int64_t ox = 0; ox < r->out[2]; ox++) {
                        int64_t oi = (s * f + fo) * r->out_pos + (oz * r->out[1] + oy) * r->out[2] + ox;
                        double acc = b ? b[fo] : 0.0, g = dy ? dy[oi] : 0.0;
                        if (dy && db) db[fo] += g;
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t kz = 0; kz < r->k[0]; kz++)
                                for (int64_t ky = 0; ky < r->k[1]; ky++)
                                    for (int64_t kx = 0; kx < r->k[2]; kx++) {
                                        int64_t iz = oz * r->s[0] - r->p[0] + kz * r->d[0];
                                        int64_t iy = oy * r->s[1] - r->p[1] + ky * r->d[1];
                                        int64_t ix = ox * r->s[2] - r->p[2] + kx * r->d[2];
                                        if (iz < 0 || iy < 0 || ix < 0 || iz >= r->in[0] || iy >= r->in[1] ||
                                            ix >= r->in[2])
                                            continue;
                                        int64_t ch = fo / fg * cg + ci;
                                        int64_t xi = (s * c + ch) * r->in_pos + (iz * r->in[1] + iy) * r->in[2] + ix;
                                        int64_t wi = (fo * cg + ci) * r->taps + (kz * r->k[1] + ky) * r->k[2] + kx;
                                        acc += (double)x[xi] * w[wi];
                                        if (dy && dx) dx[xi] += g * w[wi];
                                        if (dy && dw) dw[wi] += g * x[xi];
                                    }
                        if (!dy) y[oi] = acc;
                    }
}

// Transposed convolution by scattering each input: y[i*s - p + k*d] += x[i] * w. x is (N,C,D,H,W),
// w is (C,F/G,KD,KH,KW), b is (F) or NULL, y is (N,F,OD,OH,OW) (r: in = x's sizes, out = y's).
// Adjoint mode (dy != NULL) instead accumulates dx, dw, db (any may be NULL) from dy.
static void ref_convt(const ref_geom *r, int64_t n, int64_t c, int64_t f, int64_t groups, const float *x,
                      const float *w, const float *b, double *y, const float *dy, double *dx, double *dw,
                      double *db) {
    int64_t cg = c / groups, fg = f / groups;
    if (!dy)
        for (int64_t s = 0; s < n; s++)
            for (int64_t fo = 0; fo < f; fo++)
                for (int64_t o = 0; o < r->out_pos; o++) y[(s * f + fo) * r->out_pos + o] = b ? b[fo] : 0.0;
    if (dy && db)
        for (int64_t s = 0; s < n; s++)
            for (int64_t fo = 0; fo < f; fo++)
                for (int64_t o = 0; o < r->out_pos; o++) db[fo] += dy[(s * f + fo) * r->out_pos + o];
    for (int64_t s = 0; s < n; s++)
        for (int64_t ci = 0; ci < c; ci++)
            for (int64_t iz = 0; iz < r->in[0]; iz++)
                for (int64_t iy = 0; iy < r->in[1]; iy++)
                    for (int64_t ix = 0; ix < r->in[2]; ix++) {
                        int64_t xi = (s * c + ci) * r->in_pos + (iz * r->in[1] + iy) * r->in[2] + ix;
                        for (int64_t fo = 0; fo < fg; fo++)
                            for (int64_t kz = 0; kz < r->k[0]; kz++)
                                for (int64_t ky = 0; ky < r->k[1]; ky++)
                                    for (int64_t kx = 0; kx < r->k[2]; kx++) {
                                        int64_t oz = iz * r->s[0] - r->p[0] + kz * r->d[0];
                                        int64_t oy = iy * r->s[1] - r->p[1] + ky * r->d[1];
                                        int64_t ox = ix * r->s[2] - r->p[2] + kx * r->d[2];
                                        if (oz < 0 || oy < 0 || ox < 0 || oz >= r->out[0] || oy >= r->out[1] ||
                                            ox >= r->out[2])
                                            continue;
                                        int64_t ch = ci / cg * fg + fo;
                                        int64_t yi =
                                            (s * f + ch) * r->out_pos + (oz * r->out[1] + oy) * r->out[2] + ox;
                                        int64_t wi = (ci * fg + fo) * r->taps + (kz * r->k[1] + ky) * r->k[2] + kx;
                                        if (!dy) y[yi] += (double)x[xi] * w[wi];
                                        if (dy && dx) dx[xi] += (double)dy[yi] * w[wi];
                                        if (dy && dw) dw[wi] += (double)dy[yi] * x[xi];
                                    }
                    }
}

// Fails with the first element of got that differs from want by more than atol + rtol |want|.
static void expect_close(const char *what, const char *which, const float *got, const double *want, int64_t count,
                         double rtol, double atol) {
    for (int64_t i = 0; i < count; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])))
            fail_msg("%s: %s[%lld] = %.7g, reference %.7g", what, which, (long long)i, got[i], want[i]);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail_msg("out of memory");
    return p;
}

// ---- forward through the graph ----------------------------------------------------------------

// Builds the layer for t, runs rows [0, n) forward with at most cap samples per chunk (0: as
// many as scratch holds) and compares with the reference loops.
static void check_forward(const cv_case *t, int transpose, int64_t n, int64_t cap) {
    char what[256], extra[64], line[512];
    snprintf(extra, sizeof extra, "n=%lld cap=%lld", (long long)n, (long long)cap);
    case_text(t, transpose, extra, what, sizeof what);
    layer_line(t, transpose, "l", line, sizeof line);
    ref_geom r = ref_geometry(t, transpose);
    tl_model m;
    tl_model_build(&m, line, input_shape(t), n + 1);
    gl_graph *g = &m.g;
    layer_t *l = &g->layers[0];
    // Shape, parameters and FLOPs.
    if (l->out.shape.ndim != t->nd + 1 || l->out.shape.d[0] != t->f) fail_msg("%s: wrong output shape", what);
    for (int j = 0; j < t->nd; j++)
        if (l->out.shape.d[1 + j] != r.out[3 - t->nd + j])
            fail_msg("%s: output dim %d is %lld, want %lld", what, 1 + j, (long long)l->out.shape.d[1 + j],
                     (long long)r.out[3 - t->nd + j]);
    int64_t wsize = (transpose ? t->c * (t->f / t->g) : t->f * (t->c / t->g)) * r.taps;
    assert_int_equal(l->nparams, t->bias ? 2 : 1);
    assert_int_equal(l->params[0].size, wsize);
    if (t->bias) assert_int_equal(l->params[1].size, t->f);
    assert_int_equal(g->nparams, wsize + (t->bias ? t->f : 0));
    int64_t macs = transpose ? r.in_pos * t->c * (t->f / t->g) * r.taps : r.out_pos * t->f * (t->c / t->g) * r.taps;
    assert_int_equal(l->flops, 2 * macs);

    int64_t nx = t->c * r.in_pos, ny = t->f * r.out_pos;
    tl_fill_uniform(g->input.data, n * nx, -1.0f, 1.0f, 100);
    for (int64_t i = n * nx; i < (n + 1) * nx; i++) g->input.data[i] = NAN;  // the spare row: never read
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 101);
    for (int64_t i = 0; i < (n + 1) * ny; i++) l->out.data[i] = 1e30f;  // stale: must be overwritten
    cpu_conv_set_chunk_cap(cap);
    graph_forward(g, n, true);
    cpu_conv_set_chunk_cap(0);

    double *want = xmalloc(sizeof(double) * (size_t)(n * ny));
    const float *w = g->params + l->params[0].offset, *b = t->bias ? g->params + l->params[1].offset : NULL;
    if (transpose) ref_convt(&r, n, t->c, t->f, t->g, g->input.data, w, b, want, NULL, NULL, NULL, NULL);
    else ref_conv(&r, n, t->c, t->f, t->g, g->input.data, w, b, want, NULL, NULL, NULL, NULL);
    expect_close(what, "y", l->out.data, want, n * ny, 1e-5, 2e-6 * (double)(r.taps * t->c + 1));
    for (int64_t i = n * ny; i < (n + 1) * ny; i++)
        if (l->out.data[i] != 1e30f) fail_msg("%s: wrote row %lld past n", what, (long long)n);
    free(want);
    tl_model_free(&m);
}

// Every combination of stride, padding, dilation, groups and bias, each at batch 1 and at
// batch 3 in one chunk, in chunks of 2 + 1 and in chunks of one sample.
static void forward_matrix(int nd, int transpose) {
    static const int64_t strides[] = {1, 2, 3}, pads[] = {0, 1, 2, GL_PAD_SAME}, tpads[] = {0, 1, 2};
    static const int64_t dils[] = {1, 2}, groups[] = {1, 2, 4};
    int count = 0;
    for (size_t si = 0; si < 3; si++)
        for (size_t pi = 0; pi < (transpose ? 3u : 4u); pi++)
            for (size_t di = 0; di < 2; di++)
                for (size_t gi = 0; gi < 3; gi++)
                    for (int bias = 0; bias < 2; bias++) {
                        cv_case t = {.nd = nd, .c = 4, .sp = {5, 6, 7}, .f = 8, .k = 3, .s = strides[si],
                                     .p = transpose ? tpads[pi] : pads[pi], .d = dils[di], .g = groups[gi],
                                     .bias = bias};
                        if (nd == 2) t.sp[1] = 5;  // [4, 5, 7]
                        if (transpose) {
                            t.sp[0] = 4, t.sp[1] = 5, t.sp[2] = 6;  // 2D: [4, 5, 6]
                            t.k = bias ? 3 : 2;  // both an even and an odd kernel
                            t.op = (si + di + gi) % 2 ? (t.s > t.d ? t.s : t.d) - 1 : 0;
                        }
                        check_forward(&t, transpose, 1, 0);
                        check_forward(&t, transpose, 3, 0);
                        check_forward(&t, transpose, 3, 2);
                        check_forward(&t, transpose, 3, 1);
                        count++;
                    }
    assert_true(count >= 72);
}

static void test_conv2d_forward_matches_direct_loops(void **state) {
    (void)state;
    forward_matrix(2, 0);
}

static void test_conv3d_forward_matches_direct_loops(void **state) {
    (void)state;
    forward_matrix(3, 0);
}

static void test_conv_transpose2d_forward_matches_scatter_loops(void **state) {
    (void)state;
    forward_matrix(2, 1);
}

static void test_conv_transpose3d_forward_matches_scatter_loops(void **state) {
    (void)state;
    forward_matrix(3, 1);
}

// Shapes the matrix above does not reach: 1x1 (no im2col), even kernels with `same`, wide
// kernels, odd channel counts, groups that are neither 1 nor depthwise.
static void test_conv_forward_special_shapes(void **state) {
    (void)state;
    const cv_case cases[] = {
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 1},
        {.nd = 3, .c = 3, .sp = {5, 6, 7}, .f = 5, .k = 1, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 0},
        {.nd = 2, .c = 4, .sp = {1, 5, 7}, .f = 6, .k = 1, .s = 1, .p = 0, .d = 3, .g = 2, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 2, .p = 0, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 1, .p = 1, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 2, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1, .bias = 1},
        {.nd = 3, .c = 2, .sp = {5, 6, 7}, .f = 3, .k = 4, .s = 2, .p = GL_PAD_SAME, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 5, .s = 1, .p = 2, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 5, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 0},
        {.nd = 2, .c = 6, .sp = {1, 5, 7}, .f = 9, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 2, .g = 3, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 3, .s = 5, .p = GL_PAD_SAME, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 3, .s = 2, .p = 4, .d = 1, .g = 1, .bias = 1},
        {.nd = 2, .c = 1, .sp = {1, 1, 1}, .f = 2, .k = 1, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 1},
        {.nd = 3, .c = 1, .sp = {1, 1, 1}, .f = 2, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1, .bias = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_forward(&cases[i], 0, 3, 0);
        check_forward(&cases[i], 0, 3, 2);
        check_forward(&cases[i], 0, 1, 0);
    }
    const cv_case tcases[] = {
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 1},  // no col2im
        {.nd = 3, .c = 3, .sp = {3, 4, 5}, .f = 5, .k = 1, .s = 1, .p = 0, .d = 1, .g = 1, .bias = 0},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 1, .p = 0, .d = 2, .g = 1, .bias = 1, .op = 1},
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 5, .k = 1, .s = 3, .p = 0, .d = 1, .g = 1, .bias = 1, .op = 2},
        {.nd = 2, .c = 6, .sp = {1, 5, 7}, .f = 9, .k = 4, .s = 2, .p = 1, .d = 1, .g = 3, .bias = 1},
        {.nd = 3, .c = 2, .sp = {2, 3, 4}, .f = 4, .k = 2, .s = 2, .p = 0, .d = 1, .g = 1, .bias = 1},  // x2 upsampling
        {.nd = 2, .c = 3, .sp = {1, 5, 7}, .f = 2, .k = 3, .s = 1, .p = 2, .d = 2, .g = 1, .bias = 1, .op = 1},
        {.nd = 2, .c = 1, .sp = {1, 1, 1}, .f = 2, .k = 3, .s = 2, .p = 0, .d = 1, .g = 1, .bias = 1},
    };
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        check_forward(&tcases[i], 1, 3, 0);
        check_forward(&tcases[i], 1, 3, 2);
        check_forward(&tcases[i], 1, 1, 0);
    }
}

// ---- the kernels, called directly, against the reference loops and their adjoints ------------

static int is_direct(const ref_geom *r) {
    for (int j = 0; j < 3; j++)
        if (r->k[j] != 1 || r->s[j] != 1 || r->p[j] != 0 || r->in[j] != r->out[j]) return 0;
    return 1;
}

// Calls the backend directly with scratch for ss samples (the documented size): forward (y full
// of garbage: it must be overwritten), then backward with dx prefilled (it must be accumulated
// into), dw and db full of garbage (they must be overwritten).
static void check_kernels(const cv_case *t, int transpose, int64_t n, int64_t ss, int with_dx, int with_db) {
    char what[256], extra[64];
    snprintf(extra, sizeof extra, "n=%lld scratch for %lld dx=%d db=%d", (long long)n, (long long)ss, with_dx,
             with_db);
    case_text(t, transpose, extra, what, sizeof what);
    const gl_backend *be = backend_cpu();
    ref_geom r = ref_geometry(t, transpose);
    gl_conv_geom kg = {.nd = t->nd, .n = n, .c = t->c, .f = t->f, .groups = t->g};  // what the kernels take
    for (int j = 0; j < 3; j++) {
        kg.in[j] = r.in[j], kg.out[j] = r.out[j], kg.k[j] = r.k[j];
        kg.s[j] = r.s[j], kg.d[j] = r.d[j], kg.p[j] = r.p[j];
    }
    int64_t nx = t->c * r.in_pos, ny = t->f * r.out_pos;
    int64_t nw = (transpose ? t->c * (t->f / t->g) : t->f * (t->c / t->g)) * r.taps;
    // Per sample: (C*taps + F) * OD*OH*OW of the convolution the kernel runs.
    int64_t per = transpose ? (t->f * r.taps + t->c) * r.in_pos : (t->c * r.taps + t->f) * r.out_pos;
    int64_t sf = is_direct(&r) ? 0 : ss * per;
    float *x = xmalloc(sizeof(float) * (size_t)(n * nx)), *w = xmalloc(sizeof(float) * (size_t)nw);
    float *dy = xmalloc(sizeof(float) * (size_t)(n * ny)), *dx = xmalloc(sizeof(float) * (size_t)(n * nx));
    float *dw = xmalloc(sizeof(float) * (size_t)nw), *db = xmalloc(sizeof(float) * (size_t)t->f);
    float *scratch = sf ? xmalloc(sizeof(float) * (size_t)sf) : NULL;
    double *rdx = calloc((size_t)(n * nx), sizeof(double)), *rdw = calloc((size_t)nw, sizeof(double));
    double *rdb = calloc((size_t)t->f, sizeof(double));
    assert_true(rdx && rdw && rdb);
    tl_fill_uniform(x, n * nx, -1, 1, 200);
    tl_fill_uniform(w, nw, -1, 1, 201);
    tl_fill_uniform(dy, n * ny, -1, 1, 202);
    float *y = xmalloc(sizeof(float) * (size_t)(n * ny));
    double *ry = xmalloc(sizeof(double) * (size_t)(n * ny));
    float *b = xmalloc(sizeof(float) * (size_t)t->f);
    tl_fill_uniform(b, t->f, -1, 1, 203);
    for (int64_t i = 0; i < n * ny; i++) y[i] = 1e30f;
    if (transpose) {
        be->conv_transpose_forward(&kg, x, w, t->bias ? b : NULL, y, scratch, sf);
        ref_convt(&r, n, t->c, t->f, t->g, x, w, t->bias ? b : NULL, ry, NULL, NULL, NULL, NULL);
    } else {
        be->conv_forward(&kg, x, w, t->bias ? b : NULL, y, scratch, sf);
        ref_conv(&r, n, t->c, t->f, t->g, x, w, t->bias ? b : NULL, ry, NULL, NULL, NULL, NULL);
    }
    expect_close(what, "y", y, ry, n * ny, 1e-5, 2e-6 * (double)(r.taps * t->c + 1));
    free(b), free(ry), free(y);

    for (int64_t i = 0; i < n * nx; i++) dx[i] = 0.25f, rdx[i] = 0.25;
    for (int64_t i = 0; i < nw; i++) dw[i] = 1e30f;
    for (int64_t i = 0; i < t->f; i++) db[i] = 1e30f;
    if (transpose)
        be->conv_transpose_backward(&kg, x, w, dy, dw, with_db ? db : NULL, with_dx ? dx : NULL, scratch, sf);
    else
        be->conv_backward(&kg, x, w, dy, dw, with_db ? db : NULL, with_dx ? dx : NULL, scratch, sf);
    if (transpose) ref_convt(&r, n, t->c, t->f, t->g, x, w, NULL, NULL, dy, rdx, rdw, rdb);
    else ref_conv(&r, n, t->c, t->f, t->g, x, w, NULL, NULL, dy, rdx, rdw, rdb);
    double atol = 1e-6 * (double)(n * (r.out_pos + r.in_pos) + t->f * r.taps);
    expect_close(what, "dw", dw, rdw, nw, 1e-5, atol);
    if (with_db) expect_close(what, "db", db, rdb, t->f, 1e-5, atol);
    else
        for (int64_t i = 0; i < t->f; i++) assert_true(db[i] == 1e30f);
    if (with_dx) expect_close(what, "dx", dx, rdx, n * nx, 1e-5, atol);
    else
        for (int64_t i = 0; i < n * nx; i++) assert_true(dx[i] == 0.25f);
    free(scratch), free(db), free(dw), free(dx), free(dy), free(w), free(x), free(rdx), free(rdw), free(rdb);
}

static void kernel_matrix(int nd, int transpose) {
    static const int64_t strides[] = {1, 2, 3}, pads[] = {0, 1, GL_PAD_SAME}, dils[] = {1, 2}, groups[] = {1, 2, 4};
    for (size_t si = 0; si < 3; si++)
        for (size_t pi = 0; pi < 3; pi++)
            for (size_t di = 0; di < 2; di++)
                for (size_t gi = 0; gi < 3; gi++) {
                    cv_case t = {.nd = nd, .c = 4, .sp = {5, 6, 7}, .f = 8, .k = 3, .s = strides[si], .p = pads[pi],
                                 .d = dils[di], .g = groups[gi], .bias = (int)(si + gi) % 2};
                    if (transpose) {
                        if (t.p == GL_PAD_SAME) t.p = 2;
                        t.sp[0] = 3, t.sp[1] = 4, t.sp[2] = 5;
                        t.op = (si + di) % 2 ? (t.s > t.d ? t.s : t.d) - 1 : 0;
                    }
                    int64_t ss = 1 + (int64_t)((si + pi + gi) % 3);  // scratch for 1, 2 or 3 samples
                    check_kernels(&t, transpose, 3, ss, 1, 1);
                    if (gi == 0 && di == 0) check_kernels(&t, transpose, 1, 1, 0, 1);
                    if (gi == 1 && di == 1) check_kernels(&t, transpose, 3, 2, 1, 0);
                }
    // 1x1, stride 1, unpadded: the no-columns path.
    cv_case one = {.nd = nd, .c = 4, .sp = {3, 5, 7}, .f = 6, .k = 1, .s = 1, .p = 0, .d = 1, .g = 2};
    check_kernels(&one, transpose, 3, 0, 1, 1);
    check_kernels(&one, transpose, 2, 0, 0, 0);
}

static void test_conv_kernels_match_direct_loops(void **state) {
    (void)state;
    kernel_matrix(2, 0);
    kernel_matrix(3, 0);
}

static void test_conv_transpose_kernels_match_scatter_loops(void **state) {
    (void)state;
    kernel_matrix(2, 1);
    kernel_matrix(3, 1);
}

// ---- finite differences through the graph -----------------------------------------------------

typedef struct {
    gl_graph *g;
    const float *r;
    int64_t n;
} fd_ctx;

static double fd_loss(void *p) {
    fd_ctx *c = p;
    graph_forward(c->g, c->n, true);
    const gl_tensor *o = graph_output(c->g);
    double l = 0.0;
    for (int64_t i = 0; i < c->n * o->size; i++) l += (double)o->data[i] * (double)c->r[i];
    return l;
}

// input -> x (leaky_relu slope 1: the identity, with a gradient buffer) -> the layer under test.
// L = sum(out * R); checks dL/dx, dL/dweight and dL/dbias against central differences.
static void gradcheck(const cv_case *t, int transpose, int64_t cap) {
    enum { N = 2 };
    char what[256], extra[32], line[512], layers[640];
    snprintf(extra, sizeof extra, "cap=%lld", (long long)cap);
    case_text(t, transpose, extra, what, sizeof what);
    layer_line(t, transpose, "l", line, sizeof line);
    snprintf(layers, sizeof layers, "    - {type: leaky_relu, name: x, slope: 1.0}\n%s", line);
    tl_model m;
    tl_model_build(&m, layers, input_shape(t), N + 1);
    gl_graph *g = &m.g;
    gl_tensor *x = &g->layers[0].out, *out = graph_output(g);
    layer_t *l = &g->layers[1];
    tl_fill_away_from_zero(g->input.data, N * g->input.size, 0.05f, 1.0f, 300);
    for (int64_t i = N * g->input.size; i < (N + 1) * g->input.size; i++) g->input.data[i] = NAN;
    tl_fill_uniform(g->params, g->nparams, -1, 1, 301);
    float *r = xmalloc(sizeof(float) * (size_t)(N * out->size));
    tl_fill_uniform(r, N * out->size, -1, 1, 302);
    fd_ctx c = {g, r, N};
    cpu_conv_set_chunk_cap(cap);
    double l0 = fd_loss(&c);
    memcpy(out->grad, r, sizeof(float) * (size_t)(N * out->size));
    for (int64_t i = 0; i < g->nparams; i++) g->grads[i] = 1e6f;
    graph_backward(g, N);
    int64_t nx = N * x->size, most = nx > g->nparams ? nx : g->nparams;
    float *dx = xmalloc(sizeof(float) * (size_t)nx), *dp = xmalloc(sizeof(float) * (size_t)g->nparams);
    double *num = xmalloc(sizeof(double) * (size_t)most);
    memcpy(dx, x->grad, sizeof(float) * (size_t)nx);
    memcpy(dp, g->grads, sizeof(float) * (size_t)g->nparams);
    char name[320];
    tl_fd_grad(g->input.data, nx, 1e-2f, fd_loss, &c, num);
    snprintf(name, sizeof name, "%s: dL/dx", what);
    if (tl_check_grad(name, dx, num, nx, 2e-2, 2e-3) < 1e-2) fail_msg("%s: dL/dx is all zero", what);
    for (int p = 0; p < l->nparams; p++) {
        const gl_param *pp = &l->params[p];
        tl_fd_grad(g->params + pp->offset, pp->size, 1e-2f, fd_loss, &c, num);
        snprintf(name, sizeof name, "%s: dL/d%s", what, pp->name);
        if (tl_check_grad(name, dp + pp->offset, num, pp->size, 2e-2, 2e-3) < 1e-2)
            fail_msg("%s: dL/d%s is all zero", what, pp->name);
    }
    assert_true(fabs(fd_loss(&c) - l0) <= 1e-9 * (1 + fabs(l0)));
    cpu_conv_set_chunk_cap(0);
    free(num), free(dp), free(dx), free(r);
    tl_model_free(&m);
}

static void test_conv_gradients_match_finite_differences(void **state) {
    (void)state;
    for (int nd = 2; nd <= 3; nd++) {
        cv_case base = {.nd = nd, .c = 4, .sp = {3, 5, 4}, .f = 4, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1,
                        .bias = 1};
        if (nd == 2) base.sp[1] = 5, base.sp[2] = 7;
        cv_case t = base;
        gradcheck(&t, 0, 0);
        t = base, t.s = 2, t.g = 2, t.bias = 0;  // asymmetric `same`, groups
        gradcheck(&t, 0, 1);
        t = base, t.s = 2, t.p = 1, t.d = 2;  // dilation
        gradcheck(&t, 0, 0);
        t = base, t.k = 2, t.s = 3, t.p = 2, t.g = 4;  // depthwise, stride 3
        gradcheck(&t, 0, 0);
        t = base, t.k = 1, t.p = 0;  // 1x1: no columns
        gradcheck(&t, 0, 0);
    }
}

static void test_conv_transpose_gradients_match_finite_differences(void **state) {
    (void)state;
    for (int nd = 2; nd <= 3; nd++) {
        cv_case base = {.nd = nd, .c = 4, .sp = {2, 3, 4}, .f = 4, .k = 2, .s = 2, .p = 0, .d = 1, .g = 1, .bias = 1};
        if (nd == 2) base.sp[1] = 3, base.sp[2] = 5;
        cv_case t = base;
        gradcheck(&t, 1, 0);
        t = base, t.k = 3, t.p = 1, t.op = 1, t.g = 2, t.bias = 0;
        gradcheck(&t, 1, 1);
        t = base, t.k = 3, t.s = 1, t.p = 1, t.d = 2, t.op = 1;  // output_padding < dilation
        gradcheck(&t, 1, 0);
        t = base, t.k = 3, t.s = 3, t.op = 2, t.g = 4;  // depthwise
        gradcheck(&t, 1, 0);
        t = base, t.k = 1, t.s = 1;  // 1x1: no columns
        gradcheck(&t, 1, 0);
    }
}

// ---- threads ----------------------------------------------------------------------------------

// Forward and backward at 1, 2 and 3 threads give the same bits.
static void check_threads(const cv_case *t, int transpose, int64_t n) {
    char what[256], line[512], layers[640];
    case_text(t, transpose, "threads", what, sizeof what);
    layer_line(t, transpose, "l", line, sizeof line);
    snprintf(layers, sizeof layers, "    - {type: leaky_relu, name: x, slope: 1.0}\n%s", line);
    tl_model m;
    tl_model_build(&m, layers, input_shape(t), n);
    gl_graph *g = &m.g;
    gl_tensor *x = &g->layers[0].out, *out = graph_output(g);
    tl_fill_uniform(g->input.data, n * g->input.size, -1, 1, 400);
    tl_fill_uniform(g->params, g->nparams, -1, 1, 401);
    size_t ny = (size_t)(n * out->size), nx = (size_t)(n * x->size), np = (size_t)g->nparams;
    float *keep = xmalloc(sizeof(float) * (ny + nx + np));
    for (int threads = 1; threads <= 3; threads++) {
        g->be->set_threads(threads);
        graph_forward(g, n, true);
        tl_fill_uniform(out->grad, (int64_t)ny, -1, 1, 402);
        graph_backward(g, n);
        if (threads == 1) {
            memcpy(keep, out->data, sizeof(float) * ny);
            memcpy(keep + ny, x->grad, sizeof(float) * nx);
            memcpy(keep + ny + nx, g->grads, sizeof(float) * np);
        } else {
            if (memcmp(keep, out->data, sizeof(float) * ny))
                fail_msg("%s: the output at %d threads differs from 1 thread's", what, threads);
            if (memcmp(keep + ny, x->grad, sizeof(float) * nx))
                fail_msg("%s: dx at %d threads differs from 1 thread's", what, threads);
            if (memcmp(keep + ny + nx, g->grads, sizeof(float) * np))
                fail_msg("%s: the parameter gradients at %d threads differ from 1 thread's", what, threads);
        }
    }
    free(keep);
    tl_model_free(&m);
}

static void test_conv_results_do_not_depend_on_threads(void **state) {
    (void)state;
    // Reductions longer than one sgemm K block (128) in every GEMM: C/G * taps = 216 (forward),
    // C_in/G = 160 (conv_transpose forward), positions (dW).
    cv_case t2 = {.nd = 2, .c = 24, .sp = {1, 33, 35}, .f = 16, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1,
                  .bias = 1};
    cv_case t3 = {.nd = 3, .c = 4, .sp = {12, 13, 14}, .f = 8, .k = 3, .s = 2, .p = GL_PAD_SAME, .d = 1, .g = 2,
                  .bias = 1};
    cv_case u2 = {.nd = 2, .c = 160, .sp = {1, 9, 11}, .f = 16, .k = 3, .s = 2, .p = 1, .d = 1, .g = 1, .bias = 1,
                  .op = 1};
    cv_case u3 = {.nd = 3, .c = 8, .sp = {6, 7, 8}, .f = 4, .k = 2, .s = 2, .p = 0, .d = 1, .g = 1, .bias = 1};
    // A first layer (3 input channels, 32 filters): the AVX-512 path splits its weight gradient
    // over groups of filters instead of rows.
    cv_case f2 = {.nd = 2, .c = 3, .sp = {1, 32, 32}, .f = 32, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1,
                  .bias = 1};
    check_threads(&t2, 0, 3);
    check_threads(&f2, 0, 3);
    check_threads(&t3, 0, 3);
    check_threads(&u2, 1, 3);
    check_threads(&u3, 1, 3);
    backend_cpu()->set_threads(2);
}

// ---- the fast kernels' order of summation -------------------------------------------------------
//
// cpu_conv_fast.c promises the same bits on its AVX-512 and AVX2 paths (and at any thread count):
// each output is its bias (0 without; dx: its old value), then one fmaf per tap in (channel, kz,
// ky, kx) order, taps in the padding adding w * 0; dW starts at 0 and takes one fmaf per sample
// and position, in order; db sums in 32 double lanes and a fixed tree. These scalar models of
// that order must match bit for bit on whichever path the machine has, so both paths match each
// other. Every buffer ends (or starts) at a page no one may read, which also proves that no
// vector reads past them.

typedef struct {
    int64_t c, f, in[3], k[3], d[3], p[3];
} fast_case;

// The input element a tap reads (0 in the padding): map (c, in) at output position o (out) and
// tap (kz, ky, kx), padding p before.
static float tap_value(const float *map, const int64_t in[3], const int64_t o[3], const int64_t t[3],
                       const int64_t d[3], const int64_t p[3]) {
    int64_t i[3];
    for (int j = 0; j < 3; j++) {
        i[j] = o[j] - p[j] + t[j] * d[j];
        if (i[j] < 0 || i[j] >= in[j]) return 0.0f;
    }
    return map[(i[0] * in[1] + i[1]) * in[2] + i[2]];
}

// y (n, f, out) = the fmaf chain over (c, t) of w (f, c, taps) and x (n, c, in), from init
// (b[o], or 0 without b; y's own value when acc). flip: the weight of tap t is w[...][taps-1-t]
// and w is (c, f, taps) (the input gradient's kernel).
static void fast_model_conv(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                            const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                            const float *w, const float *b, int acc, int flip, float *y) {
    int64_t taps = k[0] * k[1] * k[2], in_pos = in[0] * in[1] * in[2], out_pos = out[0] * out[1] * out[2];
    for (int64_t s = 0; s < n; s++)
        for (int64_t fo = 0; fo < f; fo++)
            for (int64_t q = 0; q < out_pos; q++) {
                int64_t o[3] = {q / (out[1] * out[2]), q / out[2] % out[1], q % out[2]};
                float *yp = y + (s * f + fo) * out_pos + q, a = acc ? *yp : b ? b[fo] : 0.0f;
                for (int64_t ci = 0; ci < c; ci++)
                    for (int64_t t = 0; t < taps; t++) {
                        int64_t tt[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
                        float v = tap_value(x + (s * c + ci) * in_pos, in, o, tt, d, p);
                        float wt = flip ? w[(ci * f + fo) * taps + taps - 1 - t] : w[(fo * c + ci) * taps + t];
                        a = fmaf(wt, v, a);
                    }
                *yp = a;
            }
}

// Where a weight gradient of at most 16384 floats is cut into chunks (cpu_conv_fast.c's
// dw_chunks): Q = min(16, tiles), tiles being 32 positions of a sample, or as many whole samples
// as 32 positions hold where a sample has fewer than 16; 0: not cut.
static int64_t fast_dw_chunks(int64_t n, int64_t c, int64_t f, int64_t taps, int64_t out_pos, int64_t *tiles,
                              int64_t *spt) {
    *spt = out_pos >= 16 ? 1 : 32 / out_pos;
    *tiles = *spt > 1 ? (n + *spt - 1) / *spt : n * ((out_pos + 31) / 32);
    if (c * taps * f > 16384) return 0;
    return *tiles < 16 ? *tiles : 16;
}

// The position (sample * out_pos + position) where tile T starts.
static int64_t fast_tile_start(int64_t T, int64_t n, int64_t out_pos, int64_t spt) {
    if (spt > 1) return (T * spt < n ? T * spt : n) * out_pos;
    const int64_t tps = (out_pos + 31) / 32;
    return T / tps * out_pos + T % tps * 32;
}

// dw (f, c, taps) = the fmaf chain over samples, then positions, of x's tap value times dy; or,
// cut into Q chunks of tiles, each chunk's chain from 0, then the chunks' sums added in order.
static void fast_model_dw(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                          const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                          const float *dy, float *dw) {
    int64_t taps = k[0] * k[1] * k[2], in_pos = in[0] * in[1] * in[2], out_pos = out[0] * out[1] * out[2];
    int64_t tiles, spt, q = fast_dw_chunks(n, c, f, taps, out_pos, &tiles, &spt);
    if (q == 0) q = 1, tiles = 1, spt = n;  // one chunk: all positions
    for (int64_t fo = 0; fo < f; fo++)
        for (int64_t ci = 0; ci < c; ci++)
            for (int64_t t = 0; t < taps; t++) {
                int64_t tt[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
                float sum = 0.0f;
                for (int64_t r = 0; r < q; r++) {
                    const int64_t a0 = fast_tile_start(tiles * r / q, n, out_pos, spt);
                    const int64_t a1 = fast_tile_start(tiles * (r + 1) / q, n, out_pos, spt);
                    float a = 0.0f;
                    for (int64_t i = a0; i < a1; i++) {
                        const int64_t s = i / out_pos, qq = i % out_pos;
                        int64_t o[3] = {qq / (out[1] * out[2]), qq / out[2] % out[1], qq % out[2]};
                        float v = tap_value(x + (s * c + ci) * in_pos, in, o, tt, d, p);
                        a = fmaf(v, dy[(s * f + fo) * out_pos + qq], a);
                    }
                    sum = r == 0 ? a : sum + a;
                }
                dw[(fo * c + ci) * taps + t] = sum;
            }
}

// db (ch) from dy (n, ch, P): per sample, element i of each block of 32 goes to lane i (a tail
// under 32 to lanes 0-7, 8 at a time, lanes past P adding 0); then lanes l + 8j (j = 0..3) as
// (l + (l+8)) + ((l+16) + (l+24)), and those 8 as ((0+4) + (2+6)) + ((1+5) + (3+7)).
static void fast_model_db(int64_t n, int64_t ch, int64_t P, const float *dy, float *db) {
    for (int64_t c = 0; c < ch; c++) {
        double lane[32] = {0}, e[8];
        for (int64_t s = 0; s < n; s++) {
            const float *row = dy + (s * ch + c) * P;
            int64_t i = 0;
            for (; i + 32 <= P; i += 32)
                for (int l = 0; l < 32; l++) lane[l] += row[i + l];
            for (; i < P; i += 8)
                for (int l = 0; l < 8; l++) lane[l] += i + l < P ? row[i + l] : 0.0;
        }
        for (int l = 0; l < 8; l++) e[l] = (lane[l] + lane[l + 8]) + (lane[l + 16] + lane[l + 24]);
        db[c] = (float)(((e[0] + e[4]) + (e[2] + e[6])) + ((e[1] + e[5]) + (e[3] + e[7])));
    }
}

static void expect_same_bits(const char *what, const char *which, const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            fail_msg("%s: %s[%lld] = %a, the documented order gives %a", what, which, (long long)i, got[i], want[i]);
}

// db of dy as small integers with pairs of +-2^60 in each channel against the documented order:
// sums of floats in double rarely round differently, but here the small terms added while a 2^60
// is in a partial sum are lost, and which those are depends on the grouping. db: (f) scratch.
static void check_db_wide_terms(const char *at, int64_t n, int64_t f, int64_t out_pos, const float *dy, float *db) {
    const int64_t ny = n * f * out_pos;
    float *dyw = xmalloc(sizeof(float) * (size_t)ny), *rdbw = xmalloc(sizeof(float) * (size_t)f);
    for (int64_t i = 0; i < ny; i++) dyw[i] = (float)(int)(dy[i] * 4.0f);
    uint32_t h = 12345u;
    for (int64_t s0 = 0; s0 < n; s0++)
        for (int64_t fo = 0; fo < f; fo++)
            for (int pair = 0; pair < 6; pair++) {
                float *row = dyw + (s0 * f + fo) * out_pos, *row1 = dyw + (((s0 + pair) % n) * f + fo) * out_pos;
                h = h * 1664525u + 1013904223u;
                row[h % out_pos] = 0x1p60f;
                h = h * 1664525u + 1013904223u;
                row1[h % out_pos] = -0x1p60f;
            }
    fast_model_db(n, f, out_pos, dyw, rdbw);
    assert_true(cpu_conv_fast_bias_grad(n, f, out_pos, dyw, db));
    expect_same_bits(at, "db (wide terms)", db, rdbw, f);
    free(dyw), free(rdbw);
}

// dW of one case with scratch of room[0] floats (a tile at a time), room[1] (tiles in groups) and
// room[2] (also the padded input the direct form reads), against the model rdw; dw poisoned and
// scratch NaN-filled first: the first group of tiles must write dW's sums, not add to them.
static void check_fast_dw(const char *at, const fast_case *fc, int64_t n, const int64_t out[3], const float *x,
                          const float *dy, float *dw, const float *rdw, float *scratch, int64_t ns,
                          const int64_t room[3]) {
    static const char *const which[3] = {"dw", "dw (tiles in groups)", "dw (read from the padded input)"};
    const int64_t nw = fc->f * fc->c * fc->k[0] * fc->k[1] * fc->k[2];
    for (int r = 0; r < 3; r++) {
        for (int64_t i = 0; i < nw; i++) dw[i] = 1e30f;
        for (int64_t i = 0; i < ns; i++) scratch[i] = __builtin_nanf("");
        assert_true(cpu_conv_fast_weight_grad(n, fc->c, fc->f, fc->in, out, fc->k, fc->d, fc->p, x, dy, dw, scratch,
                                              room[r]));
        expect_same_bits(at, which[r], dw, rdw, nw);
    }
}

// One case through the four fast kernels at 1, 2 and 3 threads, buffers against guard pages.
static void check_fast_order(const fast_case *fc, int64_t n, int at_start) {
    char what[200];
    int64_t out[3], pf[3], in_pos = 1, out_pos = 1, taps = 1;
    for (int j = 0; j < 3; j++) {
        out[j] = fc->in[j] + 2 * fc->p[j] - (fc->k[j] - 1) * fc->d[j];
        pf[j] = (fc->k[j] - 1) * fc->d[j] - fc->p[j];
        in_pos *= fc->in[j], out_pos *= out[j], taps *= fc->k[j];
    }
    snprintf(what, sizeof what, "fast c=%lld f=%lld in=[%lld,%lld,%lld] k=[%lld,%lld,%lld] d=%lld p=%lld n=%lld%s",
             (long long)fc->c, (long long)fc->f, (long long)fc->in[0], (long long)fc->in[1], (long long)fc->in[2],
             (long long)fc->k[0], (long long)fc->k[1], (long long)fc->k[2], (long long)fc->d[2],
             (long long)fc->p[2], (long long)n, at_start ? " (guards before)" : "");
    const int64_t c = fc->c, f = fc->f, nx = n * c * in_pos, ny = n * f * out_pos, nw = f * c * taps;
    // Scratch for 3 threads of every kernel: packed weights and, per thread, a panel and a tile's
    // outputs (forward: kk = c * taps, input gradient: kk = f * taps), or dW transposed and a panel
    // and dy transposed per thread; rows padded for both instruction sets' row blocks (8 and 6).
#define PAD86(v) ((v) + 7) / 8 * 8 > ((v) + 5) / 6 * 6 ? ((v) + 7) / 8 * 8 : ((v) + 5) / 6 * 6
    int64_t kf = c * taps, kb = f * taps, kfp = PAD86(kf), fp = PAD86(f), cp = PAD86(c);
#undef PAD86
    int64_t sf = fp * kf + 3 * (kf + fp) * 32;
    // dW (with the chunks' partial sums where it is cut: fast_dw_chunks) and per thread a tile's
    // panel and dy, or groups of 8 tiles
    int64_t tiles_, spt_, parts = 1 + fast_dw_chunks(n, c, f, taps, out_pos, &tiles_, &spt_);
    int64_t sb = cp * kb + 3 * (kb + cp) * 32, sw = kfp * f * parts + 3 * (kfp * 32 + 32 * f);
    int64_t swg = kfp * f * parts + 3 * 8 * (kfp * 32 + 32 * f);
    // and, at its end, the padded input the direct weight gradient reads (AVX-512: dw_direct) and
    // its rows' offsets (int64)
    int64_t padded = n * c;
    for (int j = 0; j < 3; j++) padded *= fc->in[j] + 2 * fc->p[j];
    int64_t swx = swg + padded + 2 * kfp + 1;
    int64_t ns = sf > sb ? sf : sb;
    ns = ns > swx ? ns : swx;
    tl_guard gm[9];
    float *x = tl_guarded((size_t)nx, at_start, &gm[0]), *w = tl_guarded((size_t)nw, at_start, &gm[1]);
    float *b = tl_guarded((size_t)f, at_start, &gm[2]), *dy = tl_guarded((size_t)ny, at_start, &gm[3]);
    float *y = tl_guarded((size_t)ny, at_start, &gm[4]), *dx = tl_guarded((size_t)nx, at_start, &gm[5]);
    float *dw = tl_guarded((size_t)nw, at_start, &gm[6]), *db = tl_guarded((size_t)f, at_start, &gm[7]);
    float *scratch = tl_guarded((size_t)ns, at_start, &gm[8]);
    float *ry = xmalloc(sizeof(float) * (size_t)ny), *rdx = xmalloc(sizeof(float) * (size_t)nx);
    float *rdw = xmalloc(sizeof(float) * (size_t)nw), *rdb = xmalloc(sizeof(float) * (size_t)f);
    tl_fill_uniform(x, nx, -1, 1, 600);
    tl_fill_uniform(w, nw, -1, 1, 601);
    tl_fill_uniform(b, f, -1, 1, 602);
    tl_fill_uniform(dy, ny, -1, 1, 603);
    tl_fill_uniform(rdx, nx, -1, 1, 604);
    fast_model_conv(n, c, f, fc->in, out, fc->k, fc->d, fc->p, x, w, b, 0, 0, ry);
    fast_model_conv(n, f, c, out, fc->in, fc->k, fc->d, pf, dy, w, NULL, 1, 1, rdx);
    fast_model_dw(n, c, f, fc->in, out, fc->k, fc->d, fc->p, x, dy, rdw);
    fast_model_db(n, f, out_pos, dy, rdb);
    for (int threads = 1; threads <= 3; threads++) {
        backend_cpu()->set_threads(threads);
        char at[240];
        snprintf(at, sizeof at, "%s, %d threads", what, threads);
        for (int64_t i = 0; i < ny; i++) y[i] = 1e30f;
        tl_fill_uniform(dx, nx, -1, 1, 604);
        assert_true(cpu_conv_fast_forward(n, c, f, fc->in, out, fc->k, fc->d, fc->p, x, w, b, y, scratch, sf,
                                          (cpu_store_act){0}, NULL));
        expect_same_bits(at, "y", y, ry, ny);
        assert_true(cpu_conv_fast_input_grad(n, c, f, fc->in, out, fc->k, fc->d, fc->p, w, NULL, NULL,
                true, scratch, sb));
        assert_true(cpu_conv_fast_input_grad(n, c, f, fc->in, out, fc->k, fc->d, fc->p, w, dy, dx,
                true, scratch, sb));
        expect_same_bits(at, "dx", dx, rdx, nx);
        check_fast_dw(at, fc, n, out, x, dy, dw, rdw, scratch, ns, (const int64_t[3]){sw, swg, swx});
        assert_true(cpu_conv_fast_bias_grad(n, f, out_pos, dy, db));
        expect_same_bits(at, "db", db, rdb, f);
        check_db_wide_terms(at, n, f, out_pos, dy, db);
    }
    backend_cpu()->set_threads(2);
    for (int i = 0; i < 9; i++) tl_guard_free(&gm[i]);
    free(ry), free(rdx), free(rdw), free(rdb);
}

static void test_conv_fast_kernels_sum_in_the_documented_order(void **state) {
    (void)state;
    if (!cpu_conv_fast_ok()) {
        int64_t one[3] = {1, 1, 1}, sp[3] = {1, 8, 8};
        assert_false(cpu_conv_fast_forward(1, 1, 1, sp, sp, one, one, (int64_t[3]){0, 0, 0}, NULL, NULL, NULL, NULL,
                                           NULL, 0, (cpu_store_act){0}, NULL));
        print_message("no AVX-512 or AVX2+FMA here: the fast kernels are not used\n");
        return;
    }
    const fast_case cases[] = {
        // A first layer: 3 channels, 32 filters, a full tile per row (dW split by filters).
        {.c = 3, .f = 32, .in = {1, 32, 32}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        // Rows of 7: runs that start inside vectors and cross the panel row's end; 63 positions
        // (a last tile of 31); 13 filters (a last row block of 5, dW columns ending inside a vector).
        {.c = 5, .f = 13, .in = {1, 9, 7}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        // 3D, dilated: input rows reach past both ends of x.
        {.c = 4, .f = 8, .in = {5, 6, 7}, .k = {3, 3, 3}, .d = {2, 2, 2}, .p = {1, 1, 1}},
        // Dilated with rows of 8+ outputs (the AVX-512 weight gradient reads the padded input):
        // 2D padded past the kernel's reach, 3D.
        {.c = 3, .f = 10, .in = {1, 12, 14}, .k = {1, 3, 3}, .d = {1, 2, 2}, .p = {0, 3, 2}},
        {.c = 2, .f = 5, .in = {6, 9, 11}, .k = {3, 3, 3}, .d = {2, 2, 2}, .p = {1, 1, 1}},
        // Maps of 16 positions (every tile an edge tile), more channels than filters.
        {.c = 16, .f = 20, .in = {1, 4, 4}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        // Padding 2 with a 3x3 kernel (outputs past the input), an even kernel, 1x1.
        {.c = 2, .f = 3, .in = {1, 6, 10}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 2, 2}},
        {.c = 2, .f = 9, .in = {1, 6, 10}, .k = {1, 2, 2}, .d = {1, 1, 1}, .p = {0, 0, 1}},
        {.c = 7, .f = 9, .in = {1, 5, 5}, .k = {1, 1, 1}, .d = {1, 1, 1}, .p = {0, 0, 0}},
        // Wide rows (two tiles per row, 40 filters: 32 + 8).
        {.c = 9, .f = 40, .in = {1, 3, 64}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        // Small maps, several samples to a tile: 2x2x2 (4 a tile), 3x3 (3 a tile), 1x1 (32 a tile).
        {.c = 6, .f = 11, .in = {2, 2, 2}, .k = {3, 3, 3}, .d = {1, 1, 1}, .p = {1, 1, 1}},
        {.c = 5, .f = 7, .in = {1, 3, 3}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        {.c = 3, .f = 14, .in = {1, 1, 1}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
        // A deep layer on 2x2x2 maps: one or two tiles, so ig_run splits each tile's 9 row blocks
        // (50 filters; the last block of 2) between tasks, each copying only its channels.
        {.c = 40, .f = 50, .in = {2, 2, 2}, .k = {3, 3, 3}, .d = {1, 1, 1}, .p = {1, 1, 1}},
        // One input channel, 32 filters on 32x32 maps: at batch 64 an 8 MiB output, which ig_run
        // stores past the caches (non-temporal).
        {.c = 1, .f = 32, .in = {1, 32, 32}, .k = {1, 3, 3}, .d = {1, 1, 1}, .p = {0, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_fast_order(&cases[i], 3, 0);
        check_fast_order(&cases[i], 2, 1);
    }
    // Tiles of 4, 4 and 1 samples; of 3, 3 and 1.
    check_fast_order(&cases[8], 9, 0);
    check_fast_order(&cases[9], 7, 1);
    check_fast_order(&cases[12], 64, 0);
}

// ---- Winograd F(2,3) (cpu_conv_wino.c) ----------------------------------------------------------
//
// Not the direct sums bit for bit: F(2,3) rounds differently. Each output must be within 1e-6 of
// the exact (double) sum's scale, sum |w x| + |b| (about 8 float ulps of it; the worst seen on a
// Zen 3 EPYC was 1.4e-7, and the message prints each case's; dW: of the tensor's largest such
// sum), the same bits at 1, 2 and 3 threads and on both instruction sets (additions and the tile
// kernels), and really the transformed path (not the direct bits everywhere). The weight gradient
// also runs in the least scratch it takes (one sample a chunk, the padded dy ending scratch).

// y (n, f, out) in double: bias + sum over (c, taps), and mag = bias + sum |terms|. flip as
// fast_model_conv; acc adds to y0.
static void wino_model(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3], const int64_t k[3],
                       const int64_t p[3], const float *x, const float *w, const float *b, const float *y0, int flip,
                       double *y, double *mag) {
    const int64_t one[3] = {1, 1, 1}, taps = k[0] * k[1] * k[2], in_pos = in[0] * in[1] * in[2];
    const int64_t out_pos = out[0] * out[1] * out[2];
    for (int64_t s = 0; s < n; s++)
        for (int64_t fo = 0; fo < f; fo++)
            for (int64_t q = 0; q < out_pos; q++) {
                int64_t o[3] = {q / (out[1] * out[2]), q / out[2] % out[1], q % out[2]}, i = (s * f + fo) * out_pos + q;
                double a = y0 ? y0[i] : b ? b[fo] : 0.0, m = fabs(a);
                for (int64_t ci = 0; ci < c; ci++)
                    for (int64_t t = 0; t < taps; t++) {
                        int64_t tt[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
                        double v = tap_value(x + (s * c + ci) * in_pos, in, o, tt, one, p);
                        double wt = flip ? w[(ci * f + fo) * taps + taps - 1 - t] : w[(fo * c + ci) * taps + t];
                        a += wt * v, m += fabs(wt * v);
                    }
                y[i] = a, mag[i] = m;
            }
}

// dw (f, c, taps) in double: the sum over samples and positions of dy * the tap's input, and mag
// the sum of the terms' magnitudes.
static void wino_model_dw(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                          const int64_t k[3], const int64_t p[3], const float *x, const float *dy, double *dw,
                          double *mag) {
    const int64_t one[3] = {1, 1, 1}, taps = k[0] * k[1] * k[2], in_pos = in[0] * in[1] * in[2];
    const int64_t out_pos = out[0] * out[1] * out[2];
    for (int64_t fo = 0; fo < f; fo++)
        for (int64_t ci = 0; ci < c; ci++)
            for (int64_t t = 0; t < taps; t++) {
                int64_t tt[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
                double a = 0, m = 0;
                for (int64_t s = 0; s < n; s++)
                    for (int64_t q = 0; q < out_pos; q++) {
                        int64_t o[3] = {q / (out[1] * out[2]), q / out[2] % out[1], q % out[2]};
                        double v = tap_value(x + (s * c + ci) * in_pos, in, o, tt, one, p);
                        double g = dy[(s * f + fo) * out_pos + q];
                        a += g * v, m += fabs(g * v);
                    }
                dw[(fo * c + ci) * taps + t] = a, mag[(fo * c + ci) * taps + t] = m;
            }
}

static void wino_expect_near(const char *at, const char *what, const float *got, const double *want,
                             const double *mag, int64_t n, cpu_store_act act) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = want[i];
        if (act.on) w = w > 0 ? w : act.act == ACT_RELU ? 0.0 : act.slope * w;
        double e = fabs((double)got[i] - w) / (mag[i] > 1e-30 ? mag[i] : 1e-30);
        if (!(e <= 1e-6)) fail_msg("%s: %s[%lld] = %.9g, exact %.9g (scale %.3g): off by %.3g of the scale", at, what,
                                   (long long)i, (double)got[i], w, mag[i], e);
        worst = e > worst ? e : worst;
    }
    print_message("  %s: %s worst %.2g of the scale\n", at, what, worst);
}

typedef struct {
    int64_t c, f, in[3], k[3], p[3], n;
} wino_case;

// One case's buffers (x, w, b, dy: inputs; dx0: dx before the input gradient adds to it).
typedef struct {
    const wino_case *wc;
    cpu_store_act act;
    int64_t out[3], nx, ny, nw, ns;
    float *x, *w, *b, *dy, *dx0, *y, *dx, *dw, *scratch;
} wino_bufs;

// The three passes at `threads` threads into y, dx (from dx0) and dw; the weight gradient at 2
// threads in the least scratch it takes (the last sample's padded dy then ends scratch).
static void wino_passes(const wino_bufs *r, int threads) {
    const wino_case *wc = r->wc;
    const int64_t n = wc->n, c = wc->c, f = wc->f, *out = r->out, d1[3] = {1, 1, 1};
    backend_cpu()->set_threads(threads);
    for (int64_t i = 0; i < r->ny; i++) r->y[i] = 1e30f;
    for (int64_t i = 0; i < r->ns; i++) r->scratch[i] = __builtin_nanf("");
    assert_true(cpu_conv_wino_forward(n, c, f, wc->in, out, wc->k, d1, wc->p, r->x, r->w, r->b, r->y, r->scratch, r->ns,
                                      r->act, NULL));
    memcpy(r->dx, r->dx0, sizeof(float) * (size_t)r->nx);
    assert_true(cpu_conv_wino_input_grad(n, c, f, wc->in, out, wc->k, d1, wc->p, r->w, NULL, NULL,
            true, r->scratch, r->ns));
    assert_true(cpu_conv_wino_input_grad(n, c, f, wc->in, out, wc->k, d1, wc->p, r->w, r->dy, r->dx,
            true, r->scratch, r->ns));
    for (int64_t i = 0; i < r->ns; i++) r->scratch[i] = __builtin_nanf("");
    for (int64_t i = 0; i < r->nw; i++) r->dw[i] = 1e30f;
    const int64_t sdw = threads == 2 ? cpu_conv_wino_weight_grad_floats(c, f, wc->in, out, wc->k, wc->p) : r->ns;
    assert_true(cpu_conv_wino_weight_grad(n, c, f, wc->in, out, wc->k, d1, wc->p, r->x, r->dy, r->dw,
                                          r->scratch + r->ns - sdw, sdw));
}

// Too little scratch: each pass returns false and leaves its output untouched.
static void wino_short_scratch(const wino_bufs *r) {
    const wino_case *wc = r->wc;
    const int64_t n = wc->n, c = wc->c, f = wc->f, *out = r->out, d1[3] = {1, 1, 1};
    for (int64_t i = 0; i < r->ny; i++) r->y[i] = 7.0f;
    assert_false(cpu_conv_wino_forward(n, c, f, wc->in, out, wc->k, d1, wc->p, r->x, r->w, r->b, r->y, r->scratch, 64,
                                       r->act, NULL));
    assert_false(cpu_conv_wino_input_grad(n, c, f, wc->in, out, wc->k, d1, wc->p, r->w, NULL, NULL,
            true, r->scratch, 64));
    const int64_t least = cpu_conv_wino_weight_grad_floats(c, f, wc->in, out, wc->k, wc->p);
    for (int64_t i = 0; i < r->nw; i++) r->dw[i] = 7.0f;
    assert_false(cpu_conv_wino_weight_grad(n, c, f, wc->in, out, wc->k, d1, wc->p, r->x, r->dy, r->dw, r->scratch,
                                           least - 1));
    for (int64_t i = 0; i < r->nw; i++) assert_true(r->dw[i] == 7.0f);
    for (int64_t i = 0; i < r->ny; i++) assert_true(r->y[i] == 7.0f);
}

static void check_wino(const wino_case *wc, cpu_store_act act) {
    char at[200];
    int64_t out[3], pf[3], in_pos = 1, out_pos = 1, taps = 1;
    for (int j = 0; j < 3; j++) {
        out[j] = wc->in[j] + 2 * wc->p[j] - (wc->k[j] - 1);
        pf[j] = wc->k[j] - 1 - wc->p[j];
        in_pos *= wc->in[j], out_pos *= out[j], taps *= wc->k[j];
    }
    snprintf(at, sizeof at, "winograd c=%lld f=%lld in=[%lld,%lld,%lld] k=%lld p=%lld n=%lld act=%d", (long long)wc->c,
             (long long)wc->f, (long long)wc->in[0], (long long)wc->in[1], (long long)wc->in[2], (long long)wc->k[2],
             (long long)wc->p[2], (long long)wc->n, act.on ? (int)act.act : -1);
    const int64_t n = wc->n, c = wc->c, f = wc->f, nx = n * c * in_pos, ny = n * f * out_pos, nw = f * c * taps;
    const int64_t ns = 1 << 22;
    tl_guard gm[7];
    float *x = tl_guarded((size_t)nx, 0, &gm[0]), *w = tl_guarded((size_t)nw, 1, &gm[1]), *b = tl_guarded((size_t)f, 0, &gm[2]);
    float *dy = tl_guarded((size_t)ny, 1, &gm[3]), *y = tl_guarded((size_t)ny, 0, &gm[4]);
    float *dx = tl_guarded((size_t)nx, 1, &gm[5]);
    float *scratch = tl_guarded((size_t)ns, 0, &gm[6]);
    float *y1 = xmalloc(sizeof(float) * (size_t)ny), *dx1 = xmalloc(sizeof(float) * (size_t)nx);
    float *dx0 = xmalloc(sizeof(float) * (size_t)nx);
    double *ry = xmalloc(sizeof(double) * (size_t)ny), *my = xmalloc(sizeof(double) * (size_t)ny);
    double *rdx = xmalloc(sizeof(double) * (size_t)nx), *mdx = xmalloc(sizeof(double) * (size_t)nx);
    double *rdw = xmalloc(sizeof(double) * (size_t)nw), *mdw = xmalloc(sizeof(double) * (size_t)nw);
    float *dw = xmalloc(sizeof(float) * (size_t)nw), *dw1 = xmalloc(sizeof(float) * (size_t)nw);
    tl_fill_uniform(x, nx, -1, 1, 700);
    tl_fill_uniform(w, nw, -1, 1, 701);
    tl_fill_uniform(b, f, -1, 1, 702);
    tl_fill_uniform(dy, ny, -1, 1, 703);
    tl_fill_uniform(dx0, nx, -1, 1, 704);
    wino_model(n, c, f, wc->in, out, wc->k, wc->p, x, w, b, NULL, 0, ry, my);
    wino_model(n, f, c, out, wc->in, wc->k, pf, dy, w, NULL, dx0, 1, rdx, mdx);
    wino_model_dw(n, c, f, wc->in, out, wc->k, wc->p, x, dy, rdw, mdw);
    const int64_t d1[3] = {1, 1, 1};
    const wino_bufs r = {wc, act, {out[0], out[1], out[2]}, nx, ny, nw, ns, x, w, b, dy, dx0, y, dx, dw, scratch};
    for (int threads = 1; threads <= 3; threads++) {
        char at_t[240];
        snprintf(at_t, sizeof at_t, "%s, %d threads", at, threads);
        wino_passes(&r, threads);
        if (threads == 1) {
            wino_expect_near(at_t, "y", y, ry, my, ny, act);
            wino_expect_near(at_t, "dx", dx, rdx, mdx, nx, (cpu_store_act){0});
            // dw: of the tensor's scale (its largest sum of |terms|). A tap that only one position
            // reaches (a 2x2 map's corner) is a single product, but F(2,3) sums it from the whole
            // patch's products and cancels the rest: 2.8e-6 of that product, 2e-7 of the largest.
            double top = 0;
            for (int64_t i = 0; i < nw; i++) top = mdw[i] > top ? mdw[i] : top;
            for (int64_t i = 0; i < nw; i++) mdw[i] = top;
            wino_expect_near(at_t, "dw", dw, rdw, mdw, nw, (cpu_store_act){0});
            memcpy(y1, y, sizeof(float) * (size_t)ny), memcpy(dx1, dx, sizeof(float) * (size_t)nx);
            memcpy(dw1, dw, sizeof(float) * (size_t)nw);
        } else {
            expect_same_bits(at_t, "y (against 1 thread)", y, y1, ny);
            expect_same_bits(at_t, "dx (against 1 thread)", dx, dx1, nx);
            expect_same_bits(at_t, "dw (against 1 thread)", dw, dw1, nw);
        }
    }
    // really F(2,3): the implicit GEMM's bits differ somewhere
    if (!act.on) {
        assert_true(cpu_conv_fast_forward(n, c, f, wc->in, out, wc->k, d1, wc->p, x, w, b, y, scratch, ns, act, NULL));
        assert_true(memcmp(y, y1, sizeof(float) * (size_t)ny) != 0);
    }
    wino_short_scratch(&r);
    backend_cpu()->set_threads(2);
    for (int i = 0; i < 7; i++) tl_guard_free(&gm[i]);
    free(y1), free(dx1), free(dx0), free(ry), free(my), free(rdx), free(mdx), free(rdw), free(mdw), free(dw), free(dw1);
}

static void test_conv_winograd_matches_exact_sums(void **state) {
    (void)state;
    int64_t sp[3] = {1, 8, 8}, k3[3] = {1, 3, 3}, p1[3] = {0, 1, 1}, d1[3] = {1, 1, 1};
    if (!cpu_conv_fast_ok()) {
        assert_false(cpu_conv_wino_forward(1, 16, 16, sp, sp, k3, d1, p1, NULL, NULL, NULL, NULL, NULL, 1 << 20,
                                           (cpu_store_act){0}, NULL));
        print_message("no AVX-512 or AVX2+FMA here: Winograd is not used\n");
        return;
    }
    setenv("GALLEY_CONV_ALGO", "winograd", 1);
    const wino_case cases[] = {
        // small_cnn's second layer at batch 2 (64 tiles), CosmoFlow-like 3D, odd sizes (last tiles
        // cut), padding 0 and 2, a 1D (W only) and a 3x3-in-D-and-W-only one, more lanes than tiles.
        {.c = 32, .f = 64, .in = {1, 16, 16}, .k = {1, 3, 3}, .p = {0, 1, 1}, .n = 2},
        {.c = 8, .f = 13, .in = {6, 6, 6}, .k = {3, 3, 3}, .p = {1, 1, 1}, .n = 2},
        {.c = 5, .f = 7, .in = {5, 7, 3}, .k = {3, 3, 3}, .p = {1, 1, 1}, .n = 3},
        {.c = 3, .f = 4, .in = {1, 9, 11}, .k = {1, 3, 3}, .p = {0, 0, 0}, .n = 2},
        {.c = 3, .f = 4, .in = {1, 5, 6}, .k = {1, 3, 3}, .p = {0, 2, 2}, .n = 1},
        {.c = 6, .f = 9, .in = {1, 1, 37}, .k = {1, 1, 3}, .p = {0, 0, 1}, .n = 2},
        {.c = 4, .f = 5, .in = {5, 3, 6}, .k = {3, 1, 3}, .p = {1, 0, 1}, .n = 1},
        {.c = 2, .f = 3, .in = {1, 2, 2}, .k = {1, 3, 3}, .p = {0, 1, 1}, .n = 1},
        // 399 tiles a sample: the weight gradient's chunks of 256 tiles, one ending mid-batch
        {.c = 3, .f = 5, .in = {1, 42, 38}, .k = {1, 3, 3}, .p = {0, 1, 1}, .n = 2},
        // samples enough to go a sample a thread (wg_run) at 2 and 3 threads, against 1 thread's
        // shared batches: 20 tiles a sample (a part-empty batch each), 3D with 24, and 72 (two
        // whole batches a sample and a part-empty one)
        {.c = 3, .f = 4, .in = {1, 9, 11}, .k = {1, 3, 3}, .p = {0, 0, 0}, .n = 6},
        {.c = 5, .f = 7, .in = {5, 7, 3}, .k = {3, 3, 3}, .p = {1, 1, 1}, .n = 6},
        {.c = 3, .f = 4, .in = {1, 16, 18}, .k = {1, 3, 3}, .p = {0, 1, 1}, .n = 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_wino(&cases[i], (cpu_store_act){0});
    check_wino(&cases[0], (cpu_store_act){.on = true, .act = ACT_RELU});
    check_wino(&cases[1], (cpu_store_act){.on = true, .act = ACT_LEAKY_RELU, .slope = 0.3f});
    // Where it does not apply: stride/dilation 2 (the caller's), kernel 5, kernel 3 in H only, and
    // GALLEY_CONV_ALGO=direct; and where auto finds it not worth it (3 input channels).
    int64_t k5[3] = {1, 5, 5}, d2[3] = {1, 2, 2}, kh[3] = {1, 3, 1}, p10[3] = {0, 1, 0}, p2[3] = {0, 2, 2};
    assert_false(cpu_conv_wino_forward(1, 16, 16, sp, sp, k5, d1, p2, NULL, NULL, NULL, NULL, NULL, 1 << 20,
                                       (cpu_store_act){0}, NULL));
    assert_false(cpu_conv_wino_forward(1, 16, 16, sp, (int64_t[3]){1, 6, 6}, k3, d2, p1, NULL, NULL, NULL, NULL, NULL,
                                       1 << 20, (cpu_store_act){0}, NULL));
    assert_false(cpu_conv_wino_forward(1, 16, 16, sp, sp, kh, d1, p10, NULL, NULL, NULL, NULL, NULL, 1 << 20,
                                       (cpu_store_act){0}, NULL));
    setenv("GALLEY_CONV_ALGO", "direct", 1);
    assert_false(cpu_conv_wino_input_grad(4, 32, 32, sp, sp, k3, d1, p1, NULL, NULL, NULL, true, NULL, 1 << 20));
    setenv("GALLEY_CONV_ALGO", "auto", 1);
    // 64 channels both sides: worth it on both ISAs (AVX-512 takes 2D forward and input gradient
    // with 32+ channels one side and 64+ the other); 3 input channels: on neither.
    assert_true(cpu_conv_wino_input_grad(4, 64, 64, sp, sp, k3, d1, p1, NULL, NULL, NULL, true, NULL, 1 << 20));
    assert_false(cpu_conv_wino_input_grad(4, 64, 3, sp, sp, k3, d1, p1, NULL, NULL, NULL, true, NULL, 1 << 20));
    unsetenv("GALLEY_CONV_ALGO");
}

// The choice of F(2,3) against the implicit GEMM, per ISA and pass (the measurements are in
// cpu_conv_wino.c): the table of each ISA, whatever this CPU runs.
static void test_conv_winograd_worth(void **state) {
    (void)state;
    const int isas[2] = {CPU_ISA_AVX2, CPU_ISA_AVX512};
    const cpu_conv_pass passes[3] = {CPU_CONV_FORWARD, CPU_CONV_INPUT_GRAD, CPU_CONV_WEIGHT_GRAD};
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < 3; p++) {
            const int isa = isas[i];
            const cpu_conv_pass pass = passes[p];
            // Both ISAs: 3 input channels, one tile a sample (2^3 maps), too few tiles in all: no.
            assert_false(cpu_conv_wino_worth(isa, pass, 2, 64, 3, 32, 64));
            assert_false(cpu_conv_wino_worth(isa, pass, 3, 8, 256, 512, 1));
            assert_false(cpu_conv_wino_worth(isa, pass, 3, 1, 64, 64, 27));
            // CosmoFlow's 2nd layer (32 -> 64 on 16^3): all passes on AVX2; AVX-512 leaves dW direct.
            assert_true(cpu_conv_wino_worth(isa, pass, 3, 8, 32, 64, 512) ==
                        (isa == CPU_ISA_AVX2 || pass != CPU_CONV_WEIGHT_GRAD));
            // The small CNN's 2nd layer (32 -> 64 on 16x16, either way round): all on AVX2, the
            // forward and the input gradient on AVX-512; 32 -> 32 and 32 -> 48: none on AVX-512.
            assert_true(cpu_conv_wino_worth(isa, pass, 2, 64, 32, 64, 64) ==
                        (isa == CPU_ISA_AVX2 || pass != CPU_CONV_WEIGHT_GRAD));
            assert_true(cpu_conv_wino_worth(isa, pass, 2, 64, 64, 32, 64) ==
                        (isa == CPU_ISA_AVX2 || pass != CPU_CONV_WEIGHT_GRAD));
            assert_true(cpu_conv_wino_worth(isa, pass, 2, 64, 32, 32, 64) == (isa == CPU_ISA_AVX2));
            assert_true(cpu_conv_wino_worth(isa, pass, 2, 64, 32, 48, 64) == (isa == CPU_ISA_AVX2));
            // 2D 64 -> 128 on 8x8: AVX-512 forward and input gradient only.
            assert_true(cpu_conv_wino_worth(isa, pass, 2, 64, 64, 128, 16) ==
                        (isa == CPU_ISA_AVX2 || pass != CPU_CONV_WEIGHT_GRAD));
            // 3D 128 -> 256 on 4^3 (8 tiles a sample): AVX-512 the weight gradient only.
            assert_true(cpu_conv_wino_worth(isa, pass, 3, 8, 128, 256, 8) ==
                        (isa == CPU_ISA_AVX2 || pass == CPU_CONV_WEIGHT_GRAD));
            // 3D 16 -> 32 on 20^3: AVX-512 forward and input gradient (the weight gradient needs 64).
            assert_true(cpu_conv_wino_worth(isa, pass, 3, 8, 16, 32, 1000) ==
                        (isa == CPU_ISA_AVX2 || pass != CPU_CONV_WEIGHT_GRAD));
        }
    const int isa = cpu_conv_fast_isa();
    assert_true(isa == CPU_ISA_NONE || isa == CPU_ISA_AVX2 || isa == CPU_ISA_AVX512);
    assert_true((isa != CPU_ISA_NONE) == cpu_conv_fast_ok());
}

// Through the layer, with F(2,3) forced: the gradients of a 2D and a 3D convolution (and bias)
// match central differences, as the direct kernels' do.
static void test_conv_winograd_gradients_match_finite_differences(void **state) {
    (void)state;
    setenv("GALLEY_CONV_ALGO", "winograd", 1);
    for (int nd = 2; nd <= 3; nd++) {
        cv_case t = {.nd = nd, .c = 4, .sp = {3, 5, 4}, .f = 5, .k = 3, .s = 1, .p = GL_PAD_SAME, .d = 1, .g = 1,
                     .bias = 1};
        if (nd == 2) t.sp[1] = 5, t.sp[2] = 7;
        gradcheck(&t, 0, 0);
    }
    unsetenv("GALLEY_CONV_ALGO");
}

// ---- parameters and the scratch plan -----------------------------------------------------------

static void test_conv_parameters_follow_pytorch(void **state) {
    (void)state;
    tl_model m;
    tl_model_build(&m,
                   "    - {type: conv, name: a, filters: 6, kernel: 3, groups: 2}\n"
                   "    - {type: conv_transpose, name: b, filters: 4, kernel: 2, stride: 2, groups: 2, bias: false}\n",
                   (gl_shape){3, {4, 9, 10}}, 2);
    const layer_t *a = &m.g.layers[0], *b = &m.g.layers[1];
    assert_string_equal(a->params[0].name, "weight");
    assert_string_equal(a->params[1].name, "bias");
    assert_int_equal(a->params[0].shape.ndim, 4);
    assert_int_equal(a->params[0].shape.d[0], 6);
    assert_int_equal(a->params[0].shape.d[1], 2);
    assert_int_equal(a->params[0].shape.d[2], 3);
    assert_int_equal(a->params[0].shape.d[3], 3);
    assert_int_equal(a->params[0].fan_in, 2 * 9);
    assert_int_equal(a->params[0].fan_out, 3 * 9);
    assert_int_equal(a->params[1].shape.ndim, 1);
    assert_int_equal(a->params[1].shape.d[0], 6);
    assert_int_equal(a->out.shape.d[1], 7);  // padding 0: 9 - 2
    assert_int_equal(a->out.shape.d[2], 8);
    assert_int_equal(b->nparams, 1);
    assert_int_equal(b->params[0].shape.d[0], 6);  // [C_in, filters / groups, k, k]
    assert_int_equal(b->params[0].shape.d[1], 2);
    assert_int_equal(b->params[0].fan_in, 2 * 4);
    assert_int_equal(b->out.shape.d[0], 4);
    assert_int_equal(b->out.shape.d[1], 14);
    assert_int_equal(b->out.shape.d[2], 16);
    // Scratch: the whole batch of columns fits in 64 MiB here.
    assert_int_equal(a->work_floats, 2 * (4 * 9 + 6) * 7 * 8);
    assert_int_equal(b->work_floats, 2 * (4 * 4 + 6) * 7 * 8);
    // Used only inside each call: one buffer for both, as large as the larger.
    assert_int_equal(m.g.work_floats, a->work_floats);
    assert_non_null(m.g.work);
    assert_ptr_equal(a->work, m.g.work);
    assert_ptr_equal(b->work, m.g.work);
    tl_model_free(&m);

    // 3D: [filters, C/groups, k, k, k] (folded to 4 dimensions while gl_shape holds 4).
    tl_model_build(&m, "    - {type: conv, filters: 5, kernel: 3, padding: same}\n", (gl_shape){4, {2, 4, 5, 6}}, 1);
    const gl_param *w = &m.g.layers[0].params[0];
    assert_int_equal(w->size, 5 * 2 * 27);
    assert_int_equal(w->fan_in, 2 * 27);
    assert_int_equal(w->shape.d[0], 5);
    assert_int_equal(w->shape.d[1], 2);
#if GL_MAX_DIMS >= 5
    assert_int_equal(w->shape.ndim, 5);
    assert_int_equal(w->shape.d[4], 3);
#else
    assert_int_equal(w->shape.ndim, 4);
    assert_int_equal(w->shape.d[3], 9);
#endif
    int64_t prod = 1;
    for (int j = 0; j < w->shape.ndim; j++) prod *= w->shape.d[j];
    assert_int_equal(prod, w->size);
    assert_int_equal(m.g.layers[0].out.shape.ndim, 4);
    assert_int_equal(m.g.layers[0].out.shape.d[1], 4);
    tl_model_free(&m);

    // 1x1 stride 1 unpadded: no scratch at all; a huge sample: one sample of scratch.
    tl_model_build(&m, "    - {type: conv, filters: 5, kernel: 1}\n", (gl_shape){3, {3, 8, 8}}, 4);
    assert_int_equal(m.g.layers[0].work_floats, 0);
    tl_model_free(&m);
    recipe_t rr;
    char *yaml = tl_recipe_text("    - {type: conv, filters: 8, kernel: 3, padding: same}\n");
    tl_recipe(&rr, yaml, 0, NULL);
    gl_graph g;
    assert_int_equal(graph_build(&g, &rr, (gl_shape){4, {4, 64, 64, 64}}, 16, backend_cpu(), stderr), 0);
    assert_int_equal(g.layers[0].work_floats, (4 * 27 + 8) * 64 * 64 * 64);  // 122 MB > 64 MiB: one sample
    graph_free(&g);
    recipe_free(&rr);
    free(yaml);
}

// He init scales with fan_in = C/groups * k^d.
static void test_conv_init_uses_fan_in(void **state) {
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: conv, filters: 64, kernel: 3, init: he_normal}\n", (gl_shape){3, {16, 5, 5}}, 1);
    graph_init_params(&m.g, 7);
    const gl_param *w = &m.g.layers[0].params[0];
    double ss = 0;
    for (int64_t i = 0; i < w->size; i++) ss += (double)m.g.params[w->offset + i] * m.g.params[w->offset + i];
    double var = ss / (double)w->size, want = 2.0 / (16 * 9);
    if (fabs(var / want - 1.0) > 0.1) fail_msg("weight variance %g, want 2 / fan_in = %g", var, want);
    for (int64_t i = 0; i < 64; i++) assert_true(m.g.params[m.g.layers[0].params[1].offset + i] == 0.0f);
    tl_model_free(&m);
}

// ---- configurations infer must refuse ----------------------------------------------------------

// graph_build must fail with a message holding every one of want[] (NULL-terminated).
static void expect_build_error(const char *layers, gl_shape input, const char *const *want) {
    recipe_t r;
    char *yaml = tl_recipe_text(layers);
    tl_recipe(&r, yaml, 0, NULL);
    gl_graph g;
    tl_stream s;
    int rc = graph_build(&g, &r, input, 4, backend_cpu(), tl_stream_open(&s));
    char *text = tl_stream_close(&s);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", text);
    free(text);
    graph_free(&g);
    recipe_free(&r);
    free(yaml);
    if (rc != -1) fail_msg("graph_build accepted:\n%s", layers);
    for (int i = 0; want[i]; i++)
        if (!strstr(copy, want[i])) fail_msg("the error\n  %s\ndoes not say '%s'", copy, want[i]);
}

#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_conv_infer_errors_name_the_shapes(void **state) {
    (void)state;
    gl_shape img = {3, {4, 5, 7}}, vol = {4, {2, 3, 8, 8}};
    expect_build_error("    - {type: conv, filters: 4}\n", shape_1d(5),
                       WANT("conv needs an input of shape [C, H, W] or [C, D, H, W], got [5]"));
    expect_build_error("    - {type: conv, filters: 4}\n", (gl_shape){3, {2, 0, 5}},
                       WANT("conv got an empty input [2, 0, 5]"));
    expect_build_error("    - {type: conv, filters: 6, groups: 3}\n", img,
                       WANT("groups 3 does not divide the 4 input channels", "input shape [4, 5, 7]"));
    expect_build_error("    - {type: conv, filters: 5, groups: 2}\n", img,
                       WANT("groups 2 does not divide filters 5", "[4, 5, 7]"));
    expect_build_error("    - {type: conv, filters: 4, kernel: 7}\n", img,
                       WANT("kernel 7 with dilation 1 spans 7, more than the padded input along H (5 + 0 + 0 = 5)",
                            "[4, 5, 7]"));
    expect_build_error("    - {type: conv, filters: 4, kernel: 3, dilation: 4, padding: 1}\n", img,
                       WANT("kernel 3 with dilation 4 spans 9, more than the padded input along H (5 + 1 + 1 = 7)"));
    expect_build_error("    - {type: conv, filters: 4, kernel: 4}\n", vol,
                       WANT("spans 4, more than the padded input along D (3 + 0 + 0 = 3)", "input shape [2, 3, 8, 8]"));
    expect_build_error("    - {type: conv, filters: 1000000, kernel: 3, padding: same}\n", (gl_shape){3, {1000, 5, 5}},
                       WANT("weight [1000000, 1000, 3, 3] has more than 4e9 elements", "[1000, 5, 5]"));
    expect_build_error("    - {type: conv, filters: 1000000, kernel: 3, padding: same}\n",
                       (gl_shape){4, {1000, 5, 5, 5}},
                       WANT("weight [1000000, 1000, 3, 3, 3] has more than 4e9 elements"));
    expect_build_error("    - {type: conv, filters: 2, kernel: 1}\n", (gl_shape){4, {1, 2048, 2048, 1024}},
                       WANT("the output [2, 2048, 2048, 1024]", "exceed 2^31 - 1",
                            "input shape [1, 2048, 2048, 1024]"));
}

static void test_conv_transpose_infer_errors_name_the_shapes(void **state) {
    (void)state;
    gl_shape img = {3, {4, 5, 7}};
    expect_build_error("    - {type: conv_transpose, filters: 4}\n", (gl_shape){2, {3, 8}},
                       WANT("conv_transpose needs an input of shape [C, H, W] or [C, D, H, W], got [3, 8]"));
    expect_build_error("    - {type: conv_transpose, filters: 6, groups: 3}\n", img,
                       WANT("groups 3 does not divide the 4 input channels", "[4, 5, 7]"));
    expect_build_error("    - {type: conv_transpose, filters: 5, groups: 2}\n", img,
                       WANT("groups 2 does not divide filters 5"));
    expect_build_error("    - {type: conv_transpose, filters: 4, stride: 2, output_padding: 2}\n", img,
                       WANT("output_padding 2 must be smaller than stride 2 or dilation 1"));
    expect_build_error("    - {type: conv_transpose, filters: 4, kernel: 1, output_padding: 1}\n", img,
                       WANT("output_padding 1 must be smaller than stride 1 or dilation 1"));
    expect_build_error("    - {type: conv_transpose, filters: 4, kernel: 1, padding: 1}\n", (gl_shape){3, {2, 1, 6}},
                       WANT("the output along H would have size (1 - 1) * stride 1 - 2 * padding 1 + dilation 1 * "
                            "(kernel 1 - 1) + output_padding 0 + 1 = -1",
                            "input shape [2, 1, 6]"));
    expect_build_error("    - {type: conv_transpose, filters: 1000000, kernel: 3}\n", (gl_shape){3, {1000, 5, 5}},
                       WANT("weight [1000, 1000000, 3, 3] has more than 4e9 elements"));
    expect_build_error("    - {type: conv_transpose, filters: 1, kernel: 2, stride: 2}\n",
                       (gl_shape){4, {1, 1024, 1024, 1024}}, WANT("exceed 2^31 - 1", "[1, 2048, 2048, 2048]"));
}

// conv_transpose's padding is an integer: `same` is a recipe error, not a crash.
static void test_conv_transpose_rejects_padding_same(void **state) {
    (void)state;
    recipe_t r;
    char *yaml = tl_recipe_text("    - {type: conv_transpose, filters: 4, padding: same}\n");
    char *errors = NULL;
    int rc = tl_recipe_try(&r, yaml, 0, NULL, &errors, NULL);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(errors, "padding"));
    free(errors);
    recipe_free(&r);
    free(yaml);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_forward_matches_direct_loops),
        cmocka_unit_test(test_conv3d_forward_matches_direct_loops),
        cmocka_unit_test(test_conv_forward_special_shapes),
        cmocka_unit_test(test_conv_transpose2d_forward_matches_scatter_loops),
        cmocka_unit_test(test_conv_transpose3d_forward_matches_scatter_loops),
        cmocka_unit_test(test_conv_kernels_match_direct_loops),
        cmocka_unit_test(test_conv_transpose_kernels_match_scatter_loops),
        cmocka_unit_test(test_conv_gradients_match_finite_differences),
        cmocka_unit_test(test_conv_transpose_gradients_match_finite_differences),
        cmocka_unit_test(test_conv_results_do_not_depend_on_threads),
        cmocka_unit_test(test_conv_fast_kernels_sum_in_the_documented_order),
        cmocka_unit_test(test_conv_winograd_matches_exact_sums),
        cmocka_unit_test(test_conv_winograd_worth),
        cmocka_unit_test(test_conv_winograd_gradients_match_finite_differences),
        cmocka_unit_test(test_conv_parameters_follow_pytorch),
        cmocka_unit_test(test_conv_init_uses_fan_in),
        cmocka_unit_test(test_conv_infer_errors_name_the_shapes),
        cmocka_unit_test(test_conv_transpose_infer_errors_name_the_shapes),
        cmocka_unit_test(test_conv_transpose_rejects_padding_same),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
