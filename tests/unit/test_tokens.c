// test_tokens.c: the token layers of transformers against independent references: patch_embed
// against the backend's strided convolution on the same weights (forward and backward, 2D and
// 3D), unpatch against the tutorial ViT's head (reshape + einsum nhwpqc->nchpwq) on a hand
// example and at random, layer_norm on tokens against per-token normalisation in double, the
// per-sample layer_norm and flattening dense bitwise as before, pos_embed's class token layout,
// token_pool, drop_path's per-sample draws (keyed by global row, identity in evaluation), the
// trunc_normal init, and the errors infer reports.
#include "testlib.h"

#include <omp.h>

#define N 3  // rows run

static float *falloc(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    assert_non_null(p);
    return p;
}

static void check_close(const char *what, const float *got, const float *want, int64_t n, double tol)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - (double)want[i]) <= tol * (1.0 + fabs((double)want[i]))))
            fail_msg("%s[%lld] = %.8g, reference %.8g", what, (long long)i, got[i], want[i]);
}

static void check_bitwise(const char *what, const float *got, const float *want, int64_t n)
{
    if (memcmp(got, want, sizeof(float) * (size_t)n))
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&got[i], &want[i], sizeof(float)))
                fail_msg("%s[%lld] = %.9g, expected the same bits as %.9g", what, (long long)i, got[i], want[i]);
}

// Runs backward with dL/dout = R (uniform, stream); returns R (caller frees).
static float *backward_with(tl_model *m, int64_t n, uint64_t stream)
{
    gl_tensor *o = graph_output(&m->g);
    float *r = falloc(n * o->size);
    tl_fill_uniform(r, n * o->size, -1.0f, 1.0f, stream);
    memcpy(o->grad, r, sizeof(float) * (size_t)(n * o->size));
    graph_backward(&m->g, n);
    return r;
}

// x = identity of the model input with a gradient buffer (the model input has none).
static const char prefix[] = "    - {type: leaky_relu, name: x, slope: 1.0}\n";

static void build(tl_model *m, const char *layers, gl_shape input)
{
    char all[2048];
    snprintf(all, sizeof all, "%s%s", prefix, layers);
    char *errors = NULL;
    if (tl_model_try_keep(m, all, input, N, backend_cpu(), true, &errors) != 0) {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", errors ? errors : "");
        free(errors);
        fail_msg("model did not build:\n%s", copy);
    }
}

// ---- patch_embed = a Conv with kernel = stride = patch, flattened and transposed -----------------

static void check_patch_embed_as_conv(gl_shape in, int patch, int dim)
{
    const gl_backend *be = backend_cpu();
    char layers[256];
    snprintf(layers, sizeof layers, "    - {type: patch_embed, patch: %d, dim: %d}\n", patch, dim);
    tl_model m;
    build(&m, layers, in);
    gl_graph *g = &m.g;
    const layer_t *pe = &g->layers[1];
    tl_fill_uniform(g->input.data, N * g->input.size, -1.0f, 1.0f, 11);
    tl_fill_uniform(g->params, g->nparams, -0.5f, 0.5f, 12);
    graph_forward(g, N, true);
    float *r = backward_with(&m, N, 13);

    int nd = in.ndim - 1;
    gl_conv_geom cg = {.nd = nd, .n = N, .c = in.d[0], .f = dim, .groups = 1};
    int64_t t = 1;
    for (int j = 0; j < 3; j++) {
        int sp = j - (3 - nd);
        cg.in[j] = sp < 0 ? 1 : in.d[1 + sp];
        cg.k[j] = cg.s[j] = sp < 0 ? 1 : patch;
        cg.d[j] = 1;
        cg.out[j] = cg.in[j] / cg.k[j];
        t *= cg.out[j];
    }
    assert_int_equal(pe->out.shape.tokens, 1);
    assert_int_equal(pe->out.shape.d[0], t);
    assert_int_equal(pe->out.shape.d[1], dim);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(pe->out.shape.grid[j], cg.out[j]);
        assert_int_equal(pe->out.shape.patch[j], cg.k[j]);
    }
    assert_int_equal(pe->params[0].shape.ndim, in.ndim + 1);  // Conv's [dim, C, p, p(, p)]
    int64_t ksz = pe->params[0].size, scratch = (in.d[0] * cg.k[0] * cg.k[1] * cg.k[2] + dim) * t;
    float *y = falloc(N * dim * t), *ws = falloc(scratch), *dw = falloc(ksz), *db = falloc(dim);
    float *dx = falloc(N * g->input.size), *dy = falloc(N * dim * t), *want = falloc(N * dim * t);
    be->conv_forward(&cg, g->input.data, pe->w, pe->w + ksz, y, ws, scratch);
    // conv y[N, dim, T] -> tokens [N, T, dim]
    for (int64_t s = 0; s < N; s++)
        for (int64_t q = 0; q < t; q++)
            for (int64_t f = 0; f < dim; f++) {
                want[(s * t + q) * dim + f] = y[(s * dim + f) * t + q];
                dy[(s * dim + f) * t + q] = r[(s * t + q) * dim + f];
            }
    check_close("patch_embed forward vs conv", pe->out.data, want, N * t * dim, 1e-5);
    be->conv_backward(&cg, g->input.data, pe->w, dy, dw, db, dx, ws, scratch);
    check_close("patch_embed dweight vs conv", pe->dw, dw, ksz, 1e-5);
    check_close("patch_embed dbias vs conv", pe->dw + ksz, db, dim, 1e-5);
    check_close("patch_embed dx vs conv", g->layers[0].out.grad, dx, N * g->input.size, 1e-5);
    free(want), free(dy), free(dx), free(db), free(dw), free(ws), free(y), free(r);
    tl_model_free(&m);
}

static void test_patch_embed_equals_strided_conv(void **state)
{
    (void)state;
    check_patch_embed_as_conv((gl_shape){3, {3, 8, 12}}, 4, 5);
    check_patch_embed_as_conv((gl_shape){3, {2, 6, 3}}, 3, 4);
    check_patch_embed_as_conv((gl_shape){4, {2, 4, 2, 6}}, 2, 3);
}

// ---- unpatch = the tutorial's forward_head ----------------------------------------------------

// The tutorial: x.reshape(B, h, w, D) -> head (Linear, no bias) -> reshape (B, h, w, p, q, c) ->
// einsum("nhwpqc->nchpwq") -> reshape (B, C, h*p, w*q), written as those index loops in double.
static void tutorial_head(int64_t nb, int64_t h, int64_t w, int64_t p, int64_t c, int64_t d, const float *x,
                          const float *wt, float *y)
{
    for (int64_t n = 0; n < nb; n++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t ww = 0; ww < w; ww++)
                for (int64_t pp = 0; pp < p; pp++)
                    for (int64_t qq = 0; qq < p; qq++)
                        for (int64_t cc = 0; cc < c; cc++) {
                            int64_t o = (pp * p + qq) * c + cc;  // the head's output feature (p, q, c)
                            double s = 0.0;
                            for (int64_t k = 0; k < d; k++) s += (double)x[((n * h + hh) * w + ww) * d + k] * wt[o * d + k];
                            y[((n * c + cc) * h * p + hh * p + pp) * w * p + ww * p + qq] = (float)s;
                        }
}

static void test_unpatch_matches_tutorial_head_by_hand(void **state)
{
    (void)state;
    // Input [1, 2, 4], patch 2: two patches; patch_embed (dim 1) reads each patch's top-left pixel,
    // so the tokens are 1 and 10. unpatch (channels 2) has weight[k] = k: token t's head outputs
    // are t * (0..7), read as (p, q, c).
    tl_model m;
    build(&m, "    - {type: patch_embed, patch: 2, dim: 1, bias: false}\n    - {type: unpatch, channels: 2}\n",
          (gl_shape){3, {1, 2, 4}});
    gl_graph *g = &m.g;
    assert_int_equal(g->nparams, 4 + 8);
    memset(g->params, 0, sizeof(float) * 4);
    g->params[0] = 1.0f;
    for (int k = 0; k < 8; k++) g->params[4 + k] = (float)k;
    memset(g->input.data, 0, sizeof(float) * (size_t)(N * 8));
    g->input.data[0] = 1.0f, g->input.data[2] = 10.0f;
    graph_forward(g, 1, false);
    const gl_tensor *o = graph_output(g);
    char sh[64];
    shape_format(&o->shape, sh, sizeof sh);
    assert_string_equal(sh, "[2, 2, 4]");
    // y[c, py, 2 * patch + px] = token[patch] * ((py * 2 + px) * 2 + c)
    static const float want[16] = {0, 2, 0, 20, 4, 6, 40, 60, 1, 3, 10, 30, 5, 7, 50, 70};
    check_bitwise("unpatch by hand", o->data, want, 16);
    tl_model_free(&m);
}

static void test_unpatch_matches_tutorial_head_at_random(void **state)
{
    (void)state;
    tl_model m;  // [3, 6, 8], patch 2: grid 3 x 4, D 5, head 2*2*3 = 12 outputs per token
    build(&m, "    - {type: patch_embed, patch: 2, dim: 5}\n    - {type: unpatch, channels: 3}\n",
          (gl_shape){3, {3, 6, 8}});
    gl_graph *g = &m.g;
    tl_fill_uniform(g->input.data, N * g->input.size, -1.0f, 1.0f, 21);
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 22);
    graph_forward(g, N, false);
    const layer_t *u = &g->layers[2];
    assert_int_equal(u->params[0].shape.d[0], 12);
    assert_int_equal(u->params[0].shape.d[1], 5);
    float *want = falloc(N * u->out.size);
    tutorial_head(N, 3, 4, 2, 3, 5, g->layers[1].out.data, u->w, want);
    check_close("unpatch vs the tutorial's head", u->out.data, want, N * u->out.size, 1e-5);
    free(want);
    tl_model_free(&m);
}

// ---- layer_norm and dense on tokens, and unchanged elsewhere ------------------------------------

static void test_layer_norm_on_tokens_normalises_each_token(void **state)
{
    (void)state;
    const int64_t t = 4, d = 6;
    tl_model m;
    build(&m, "    - {type: layer_norm, eps: 0.001}\n", shape_tokens(t, d));
    gl_graph *g = &m.g;
    const layer_t *ln = &g->layers[1];
    assert_int_equal(ln->params[0].size, d);  // LayerNorm(D): weight and bias [D]
    assert_int_equal(ln->params[1].size, d);
    tl_fill_uniform(g->input.data, N * t * d, -2.0f, 3.0f, 31);
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 32);
    graph_forward(g, N, true);
    float *want = falloc(N * t * d);
    for (int64_t row = 0; row < N * t; row++) {
        const float *x = g->input.data + row * d;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < d; j++) mean += x[j];
        mean /= (double)d;
        for (int64_t j = 0; j < d; j++) var += (x[j] - mean) * (x[j] - mean);
        var /= (double)d;
        for (int64_t j = 0; j < d; j++)
            want[row * d + j] = (float)((x[j] - mean) / sqrt(var + 1e-3) * ln->w[j] + ln->w[d + j]);
    }
    check_close("layer_norm per token", ln->out.data, want, N * t * d, 1e-5);
    assert_int_equal(ln->out.shape.tokens, 1);
    free(want);
    tl_model_free(&m);
}

// The per-sample layer_norm and the flattening dense call the kernels exactly as before the
// token forms: the same bits as the backend ops on the whole sample.
static void test_non_token_layer_norm_and_dense_unchanged(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    tl_model m;
    build(&m, "    - {type: layer_norm, name: ln}\n    - {type: dense, units: 4}\n", (gl_shape){3, {2, 3, 5}});
    gl_graph *g = &m.g;
    const layer_t *ln = &g->layers[1], *de = &g->layers[2];
    assert_int_equal(ln->params[0].size, 30);
    assert_int_equal(de->params[0].size, 4 * 30);
    assert_int_equal(de->out.shape.ndim, 1);
    tl_fill_uniform(g->input.data, N * 30, -2.0f, 2.0f, 41);
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 42);
    graph_forward(g, N, true);
    float *y = falloc(N * 30), *saved = falloc(2 * N), *z = falloc(N * 4);
    be->layer_norm_forward(N, 30, g->input.data, ln->w, ln->w + 30, 1e-5f, saved, y);
    check_bitwise("layer_norm per sample", ln->out.data, y, N * 30);
    be->dense_forward(N, 30, 4, y, de->w, de->w + 120, z);
    check_bitwise("dense flattening", de->out.data, z, N * 4);
    float *r = backward_with(&m, N, 43);
    float *dw = falloc(120), *db = falloc(4), *dy = falloc(N * 30), *dg = falloc(30), *dbt = falloc(30);
    float *dx = falloc(N * 30);
    be->dense_backward(N, 30, 4, y, de->w, r, dw, db, dy);
    check_bitwise("dense dweight", de->dw, dw, 120);
    be->layer_norm_backward(N, 30, g->input.data, dy, ln->w, saved, dg, dbt, dx);
    check_bitwise("layer_norm dweight", ln->dw, dg, 30);
    check_bitwise("layer_norm dx", g->layers[0].out.grad, dx, N * 30);
    free(dx), free(dbt), free(dg), free(dy), free(db), free(dw), free(r), free(z), free(saved), free(y);
    tl_model_free(&m);
}

// layer_norm on AVX2 and AVX-512 (cpu_norm.c; unit/test_tokens_avx2 runs the AVX2 passes on an
// AVX-512 CPU) promises the portable loops' bits: this is those loops (4
// double lanes per row, element j in lane j % 4, then (l0 + l1) + (l2 + l3); dgamma and dbeta
// summed in double over parts of 256 rows, each in row order from 0, the parts then in order).
// Widths with and without a tail of 4, 8 and 16, at 1 to 3 threads; 37 rows (one part), 600
// (three parts) and 1100 (five): summed by parts, or by blocks of columns where the parts are
// fewer than twice the threads and the work is shared (600 x 192 at 2 and 3 threads, 1100 at 3).
static void test_layer_norm_bits_are_the_portable_loops(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    const int64_t widths[] = {192, 30, 19, 16, 12, 3}, rows[] = {37, 600, 1100};
    const int threads = omp_get_max_threads();
    for (int c = 0; c < 54; c++) {
        const int w = c % 6, nt = 1 + c / 6 % 3;
        const int64_t n = rows[c / 18], k = widths[w];
        omp_set_num_threads(nt);
        float *x = falloc(n * k), *dy = falloc(n * k), *gm = falloc(k), *bt = falloc(k), *saved = falloc(2 * n);
        float *y = falloc(n * k), *dx = falloc(n * k), *dg = falloc(k), *db = falloc(k), *want = falloc(n * k + 2 * n);
        tl_fill_uniform(x, n * k, -2.0f, 3.0f, 60 + w);
        tl_fill_uniform(dy, n * k, -1.0f, 1.0f, 70 + w);
        tl_fill_uniform(gm, k, 0.5f, 1.5f, 80 + w);
        tl_fill_uniform(bt, k, -0.5f, 0.5f, 90 + w);
        tl_fill_uniform(dx, n * k, -1.0f, 1.0f, 100 + w);
        be->layer_norm_forward(n, k, x, gm, bt, 1e-5f, saved, y);
        for (int64_t i = 0; i < n; i++) {
            const float *xp = x + i * k;
            double ls[4] = {0}, lq[4] = {0};
            for (int64_t j = 0; j < k; j++) ls[j % 4] += xp[j];
            const double mean = ((ls[0] + ls[1]) + (ls[2] + ls[3])) / (double)k;
            for (int64_t j = 0; j < k; j++) lq[j % 4] += (xp[j] - mean) * (xp[j] - mean);
            const double inv = 1.0 / sqrt(((lq[0] + lq[1]) + (lq[2] + lq[3])) / (double)k + (double)1e-5f);
            const float mu = (float)mean, is = (float)inv;
            want[2 * i] = mu, want[2 * i + 1] = is;
            for (int64_t j = 0; j < k; j++) want[2 * n + i * k + j] = (xp[j] - mu) * is * gm[j] + bt[j];
        }
        for (int64_t i = 0; i < n; i++) {
            check_bitwise("layer_norm mean", &saved[i], &want[2 * i], 1);
            check_bitwise("layer_norm 1/std", &saved[n + i], &want[2 * i + 1], 1);
        }
        check_bitwise("layer_norm y", y, want + 2 * n, n * k);
        memcpy(want, dx, sizeof(float) * (size_t)(n * k));
        be->layer_norm_backward(n, k, x, dy, gm, saved, dg, db, dx);
        for (int64_t i = 0; i < n; i++) {
            const float *xp = x + i * k, *dyp = dy + i * k, mu = saved[i], is = saved[n + i];
            double lg[4] = {0}, lgx[4] = {0};
            for (int64_t j = 0; j < k; j++) {
                const float g = dyp[j] * gm[j];
                lg[j % 4] += g;
                lgx[j % 4] += (double)g * (double)((xp[j] - mu) * is);
            }
            const float a = (float)(((lg[0] + lg[1]) + (lg[2] + lg[3])) / (double)k);
            const float b = (float)(((lgx[0] + lgx[1]) + (lgx[2] + lgx[3])) / (double)k);
            for (int64_t j = 0; j < k; j++) want[i * k + j] += is * (dyp[j] * gm[j] - a - (xp[j] - mu) * is * b);
        }
        check_bitwise("layer_norm dx", dx, want, n * k);
        for (int64_t j = 0; j < k; j++) {
            double tw = 0.0, tb = 0.0;
            for (int64_t i0 = 0; i0 < n; i0 += 256) {
                double sw = 0.0, sb = 0.0;
                for (int64_t i = i0; i < n && i < i0 + 256; i++) {
                    sw += (double)dy[i * k + j] * (double)((x[i * k + j] - saved[i]) * saved[n + i]);
                    sb += dy[i * k + j];
                }
                tw = i0 ? tw + sw : sw, tb = i0 ? tb + sb : sb;
            }
            want[j] = (float)tw, want[k + j] = (float)tb;
        }
        check_bitwise("layer_norm dgamma", dg, want, k);
        check_bitwise("layer_norm dbeta", db, want + k, k);
        be->layer_norm_backward(n, k, x, dy, gm, saved, dg, db, NULL);  // without dx (on the model input)
        check_bitwise("layer_norm dgamma without dx", dg, want, k);
        check_bitwise("layer_norm dbeta without dx", db, want + k, k);
        free(x), free(dy), free(gm), free(bt), free(saved), free(y), free(dx), free(dg), free(db), free(want);
    }
    omp_set_num_threads(threads);
}

static void test_dense_on_tokens_acts_per_token(void **state)
{
    (void)state;
    tl_model m;
    build(&m, "    - {type: patch_embed, patch: 2, dim: 3}\n    - {type: dense, units: 4}\n    - {type: flatten}\n",
          (gl_shape){3, {1, 4, 6}});
    gl_graph *g = &m.g;
    const layer_t *de = &g->layers[2], *fl = &g->layers[3];
    char sh[64];
    shape_format(&de->out.shape, sh, sizeof sh);
    assert_string_equal(sh, "[T 6, D 4]");
    assert_int_equal(de->out.shape.grid[1], 2);  // grid and patch carried along
    assert_int_equal(de->out.shape.patch[2], 2);
    assert_int_equal(de->params[0].size, 4 * 3);  // weight [units, D]
    assert_false(fl->out.shape.tokens);
    assert_int_equal(fl->out.shape.ndim, 1);
    assert_int_equal(fl->out.shape.d[0], 24);
    assert_int_equal(fl->out.shape.grid[1], 0);
    tl_fill_uniform(g->input.data, N * g->input.size, -1.0f, 1.0f, 51);
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 52);
    graph_forward(g, N, false);
    const float *x = g->layers[1].out.data;
    for (int64_t row = 0; row < N * 6; row++)
        for (int64_t u = 0; u < 4; u++) {
            double s = de->w[12 + u];
            for (int64_t k = 0; k < 3; k++) s += (double)x[row * 3 + k] * de->w[u * 3 + k];
            assert_true(fabs(de->out.data[row * 4 + u] - s) < 1e-5);
        }
    check_bitwise("flatten of tokens", fl->out.data, de->out.data, N * 24);
    tl_model_free(&m);
}

// ---- pos_embed, token_pool ----------------------------------------------------------------------

static void test_pos_embed_class_token_layout(void **state)
{
    (void)state;
    const int64_t t = 3, d = 4;
    tl_model m;
    build(&m, "    - {type: pos_embed, class_token: true, name: pe}\n    - {type: token_pool, mode: class}\n",
          shape_tokens(t, d));
    gl_graph *g = &m.g;
    const layer_t *pe = &g->layers[1], *tp = &g->layers[2];
    assert_int_equal(pe->out.shape.d[0], t + 1);
    assert_string_equal(pe->params[0].name, "pos");
    assert_int_equal(pe->params[0].size, (t + 1) * d);
    assert_string_equal(pe->params[1].name, "cls");
    assert_int_equal(pe->params[1].size, d);
    tl_fill_uniform(g->input.data, N * t * d, -1.0f, 1.0f, 61);
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 62);
    graph_forward(g, N, false);
    const float *pos = pe->w, *cls = pe->w + (t + 1) * d;
    for (int64_t s = 0; s < N; s++)
        for (int64_t j = 0; j < d; j++) {
            assert_true(pe->out.data[s * (t + 1) * d + j] == cls[j] + pos[j]);
            assert_true(tp->out.data[s * d + j] == cls[j] + pos[j]);
            for (int64_t q = 0; q < t; q++)
                assert_true(pe->out.data[(s * (t + 1) + 1 + q) * d + j] ==
                            g->input.data[(s * t + q) * d + j] + pos[(1 + q) * d + j]);
        }
    tl_model_free(&m);
}

static void test_token_pool_mean(void **state)
{
    (void)state;
    tl_model m;
    build(&m, "    - {type: token_pool}\n", shape_tokens(5, 3));
    gl_graph *g = &m.g;
    assert_int_equal(graph_output(g)->shape.ndim, 1);
    assert_int_equal(graph_output(g)->size, 3);
    tl_fill_uniform(g->input.data, N * 15, -1.0f, 1.0f, 71);
    graph_forward(g, N, false);
    for (int64_t s = 0; s < N; s++)
        for (int64_t j = 0; j < 3; j++) {
            double mean = 0.0;
            for (int64_t q = 0; q < 5; q++) mean += g->input.data[(s * 5 + q) * 3 + j];
            assert_true(fabs(graph_output(g)->data[s * 3 + j] - mean / 5.0) < 1e-6);
        }
    tl_model_free(&m);
}

// ---- drop_path ----------------------------------------------------------------------------------

static void test_drop_path_drops_whole_samples_keyed_by_global_row(void **state)
{
    (void)state;
    enum { ROWS = 64 };
    const int64_t t = 2, d = 3;
    tl_model m;
    char *errors = NULL;
    assert_int_equal(tl_model_try(&m, "    - {type: drop_path, rate: 0.5}\n", shape_tokens(t, d), ROWS, &errors), 0);
    gl_graph *g = &m.g;
    tl_fill_away_from_zero(g->input.data, ROWS * t * d, 0.1f, 1.0f, 81);
    g->seed = 5, g->step = 7;
    graph_forward(g, ROWS, true);
    float *all = falloc(ROWS * t * d);
    memcpy(all, graph_output(g)->data, sizeof(float) * ROWS * t * d);
    int kept = 0;
    for (int64_t s = 0; s < ROWS; s++) {
        const float *y = all + s * t * d, *x = g->input.data + s * t * d;
        bool keep = y[0] != 0.0f;
        kept += keep;
        for (int64_t j = 0; j < t * d; j++) assert_true(y[j] == (keep ? x[j] * 2.0f : 0.0f));
    }
    assert_in_range(kept, 16, 48);
    // The second half run alone at row0 32 (another rank's share) draws the same masks.
    memmove(g->input.data, g->input.data + 32 * t * d, sizeof(float) * 32 * t * d);
    g->row0 = 32;
    graph_forward(g, 32, true);
    check_bitwise("drop_path keyed by global row", graph_output(g)->data, all + 32 * t * d, 32 * t * d);
    // Another step draws other masks; evaluation is the identity.
    g->step = 8;
    graph_forward(g, 32, true);
    assert_true(memcmp(graph_output(g)->data, all + 32 * t * d, sizeof(float) * 32 * t * d) != 0);
    graph_forward(g, 32, false);
    check_bitwise("drop_path in evaluation", graph_output(g)->data, g->input.data, 32 * t * d);
    free(all);
    tl_model_free(&m);
}

// ---- trunc_normal init ----------------------------------------------------------------------

static void test_trunc_normal_init_is_the_tutorials(void **state)
{
    (void)state;
    tl_model m;
    build(&m, "    - {type: pos_embed}\n", shape_tokens(50, 40));  // init: trunc_normal by default
    graph_init_params(&m.g, 9);
    const layer_t *pe = &m.g.layers[1];
    double s = 0.0, s2 = 0.0, mx = 0.0;
    for (int64_t i = 0; i < 2000; i++) {
        double v = pe->w[i];
        s += v, s2 += v * v;
        if (fabs(v) > mx) mx = fabs(v);
    }
    double mean = s / 2000, sd = sqrt(s2 / 2000 - mean * mean);
    assert_true(fabs(mean) < 0.002);
    assert_true(fabs(sd - 0.02) < 0.002);
    assert_true(mx < 0.1 && mx > 0.04);
    tl_model_free(&m);
}

// ---- the backend ops at sizes that run threaded -------------------------------------------------

// image -> rows -> image is the identity, bit for bit, with 1 thread and with 4 (the same rows),
// and the way back with accumulate adds.
static void check_rearrange_round_trip(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last)
{
    const gl_backend *be = backend_cpu();
    int64_t size = n * c * in[0] * in[1] * in[2];
    float *img = falloc(size), *rows1 = falloc(size), *rows4 = falloc(size), *back = falloc(size);
    tl_fill_uniform(img, size, -1.0f, 1.0f, 91);
    be->set_threads(1);
    be->patch_rearrange(n, c, in, p, c_last, 1, 0, img, rows1);
    be->set_threads(4);
    be->patch_rearrange(n, c, in, p, c_last, 1, 0, img, rows4);
    check_bitwise("patch rows, 4 threads vs 1", rows4, rows1, size);
    be->patch_rearrange(n, c, in, p, c_last, 0, 0, rows4, back);
    check_bitwise("patch rows back to the map", back, img, size);
    be->patch_rearrange(n, c, in, p, c_last, 0, 1, rows4, back);
    for (int64_t i = 0; i < size; i++) assert_true(back[i] == 2.0f * img[i]);
    // Row 1 (the second patch of sample 0) starts at the map's (0, 0, p2) in either order.
    int64_t k = c * p[0] * p[1] * p[2];
    assert_true(rows1[k] == img[p[2]]);
    free(back), free(rows4), free(rows1), free(img);
}

static void test_patch_rearrange_round_trip_threaded(void **state)
{
    (void)state;
    const int64_t in2[3] = {1, 48, 72}, in3[3] = {8, 12, 8};
    const int p2[3] = {1, 8, 6}, p3[3] = {4, 4, 4};
    for (int c_last = 0; c_last < 2; c_last++) {
        check_rearrange_round_trip(3, 5, in2, p2, c_last);
        check_rearrange_round_trip(2, 3, in3, p3, c_last);
    }
    backend_cpu()->set_threads(1);
}

// row_spread is row_sum's adjoint: <row_sum(x), y> = <x, row_spread(y)>; both thread-independent.
static void test_row_sum_and_spread_are_adjoint(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    const int64_t n = 3, m = 40, len = 300, stride = 310;
    float *x = falloc(n * m * stride), *y = falloc(n * len), *sx1 = falloc(n * len), *sx4 = falloc(n * len);
    float *ty1 = falloc(n * m * stride), *ty4 = falloc(n * m * stride);
    tl_fill_uniform(x, n * m * stride, -1.0f, 1.0f, 95);
    tl_fill_uniform(y, n * len, -1.0f, 1.0f, 96);
    be->set_threads(1);
    be->row_sum(n, m, len, 0.25f, x, stride, sx1, 0);
    be->row_spread(n, m, len, 0.25f, y, ty1, stride, 0);
    be->set_threads(4);
    be->row_sum(n, m, len, 0.25f, x, stride, sx4, 0);
    be->row_spread(n, m, len, 0.25f, y, ty4, stride, 0);
    be->set_threads(1);
    check_bitwise("row_sum, 4 threads vs 1", sx4, sx1, n * len);
    check_bitwise("row_spread, 4 threads vs 1", ty4, ty1, n * m * stride);
    double a = 0.0, b = 0.0;
    for (int64_t i = 0; i < n * len; i++) a += (double)sx1[i] * y[i];
    for (int64_t r = 0; r < n * m; r++)
        for (int64_t j = 0; j < len; j++) b += (double)x[r * stride + j] * ty1[r * stride + j];
    assert_true(fabs(a - b) <= 1e-4 * (1.0 + fabs(a)));
    // The gaps between rows (len..stride) are left alone; accumulate adds.
    assert_true(ty1[len] == 0.0f);
    be->row_sum(n, m, len, 0.25f, x, stride, sx1, 1);
    for (int64_t i = 0; i < n * len; i++) assert_true(sx1[i] == 2.0f * sx4[i]);
    free(ty4), free(ty1), free(sx4), free(sx1), free(y), free(x);
}

// ---- errors -------------------------------------------------------------------------------------

static void expect_error(const char *layers, gl_shape input, const char *needle)
{
    tl_model m;
    char *errors = NULL;
    assert_int_not_equal(tl_model_try(&m, layers, input, N, &errors), 0);
    if (!errors || !strstr(errors, needle)) {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", errors ? errors : "(none)");
        free(errors);
        fail_msg("expected an error with \"%s\", got:\n%s", needle, copy);
    }
    free(errors);
}

static void test_bad_token_inputs_are_named(void **state)
{
    (void)state;
    expect_error("    - {type: patch_embed, patch: 8, dim: 4}\n", (gl_shape){3, {3, 32, 30}}, "patch 8 does not divide W 30");
    expect_error("    - {type: patch_embed, patch: 3, dim: 4}\n", (gl_shape){4, {1, 4, 6, 6}}, "patch 3 does not divide D 4");
    expect_error("    - {type: patch_embed, patch: 2, dim: 4}\n", shape_1d(8), "[C, H, W] or [C, D, H, W]");
    expect_error("    - {type: unpatch, channels: 2}\n", shape_tokens(4, 3), "unpatch needs tokens from a patch_embed");
    expect_error("    - {type: patch_embed, patch: 2, dim: 4}\n    - {type: pos_embed, class_token: true}\n"
                 "    - {type: unpatch, channels: 2}\n",
                 (gl_shape){3, {1, 4, 4}}, "5 tokens for a 1 x 2 x 2 patch grid");
    expect_error("    - {type: token_pool}\n", (gl_shape){3, {1, 4, 4}}, "put a patch_embed before it");
    expect_error("    - {type: patch_embed, patch: 2, dim: 4}\n    - {type: conv, filters: 2}\n", (gl_shape){3, {1, 4, 4}},
                 "got tokens");
    expect_error("    - {type: drop_path, rate: 1}\n", shape_1d(4), "rate 1 would drop every sample");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patch_embed_equals_strided_conv),
        cmocka_unit_test(test_unpatch_matches_tutorial_head_by_hand),
        cmocka_unit_test(test_unpatch_matches_tutorial_head_at_random),
        cmocka_unit_test(test_layer_norm_on_tokens_normalises_each_token),
        cmocka_unit_test(test_layer_norm_bits_are_the_portable_loops),
        cmocka_unit_test(test_non_token_layer_norm_and_dense_unchanged),
        cmocka_unit_test(test_dense_on_tokens_acts_per_token),
        cmocka_unit_test(test_pos_embed_class_token_layout),
        cmocka_unit_test(test_token_pool_mean),
        cmocka_unit_test(test_drop_path_drops_whole_samples_keyed_by_global_row),
        cmocka_unit_test(test_trunc_normal_init_is_the_tutorials),
        cmocka_unit_test(test_patch_rearrange_round_trip_threaded),
        cmocka_unit_test(test_row_sum_and_spread_are_adjoint),
        cmocka_unit_test(test_bad_token_inputs_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
