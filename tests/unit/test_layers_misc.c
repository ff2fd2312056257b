// test_layers_misc.c: pooling, normalisation, dropout, scale and the shape/merge layers
// (flatten, add, concat, upsample): forward and backward against naive loops in double, 2D and
// 3D maps of odd sizes at batch 3, batch-norm running statistics against PyTorch's convention,
// dropout statistics and keys, finite-difference gradient checks, thread-count independence,
// relu and leaky_relu passes bit for bit against their scalar definitions, and the shape errors
// infer must report.
#include "testlib.h"

#include <omp.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/cpu_isa.h"

#define N 3  // rows run

// ---- small helpers ----------------------------------------------------------------------------

static float *falloc(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    return p;
}

static double *dalloc(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}

static gl_shape shp(int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    gl_shape s = {ndim, {a, b, c, d}};
    return s;
}

// Fails on the first element with |got - want| > atol + rtol * |want|.
static void check_close(const char *what, const float *got, const double *want, int64_t n, double rtol, double atol)
{
    for (int64_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(want[i]);
        if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("%s[%lld] = %.8g, reference %.8g (tolerance %.3g)", what, (long long)i, got[i], want[i], tol);
    }
}

static void check_shape(const gl_shape *got, gl_shape want)
{
    char a[64], b[64];
    shape_format(got, a, sizeof a);
    shape_format(&want, b, sizeof b);
    assert_string_equal(a, b);
}

// x = identity of the model input with a gradient buffer (the model input itself has none).
static const char prefix[] = "    - {type: leaky_relu, name: x, slope: 1.0}\n";

// Builds prefix + layers for batch capacity N, fills the input uniform in [lo, hi) and runs
// forward; the caller tl_model_free()s.
static void build_and_run(tl_model *m, const char *layers, gl_shape input, bool train, float lo, float hi)
{
    char all[2048];
    snprintf(all, sizeof all, "%s%s", prefix, layers);
    tl_model_build(m, all, input, N);
    tl_fill_uniform(m->g.input.data, N * m->g.input.size, lo, hi, 7);
    graph_forward(&m->g, N, train);
}

// Sets dL/dout = R (uniform, stream) and runs backward; returns R (caller frees).
static float *run_backward(tl_model *m, uint64_t stream)
{
    gl_tensor *o = graph_output(&m->g);
    float *r = falloc(N * o->size);
    tl_fill_uniform(r, N * o->size, -1.0f, 1.0f, stream);
    memcpy(o->grad, r, sizeof(float) * (size_t)(N * o->size));
    graph_backward(&m->g, N);
    return r;
}

// ---- naive references ---------------------------------------------------------------------------

// Pooling over nd spatial dims in[0..nd) of x[n, c, in...]: y (and, with dy, the accumulated
// dx) in double. Windows are visited in row-major order; padding adds nothing (avg divides by
// k^nd) and never wins a max; the first maximum wins.
static void naive_pool(int is_max, int nd, int64_t n, int64_t c, const int64_t *in, int k, int s, int p,
                       const float *x, const float *dy, double *y, double *dx)
{
    int64_t out[3], isz = 1, osz = 1, kv = 1;
    for (int d = 0; d < nd; d++) {
        out[d] = (in[d] + 2 * p - k) / s + 1;
        isz *= in[d];
        osz *= out[d];
        kv *= k;
    }
    for (int64_t q = 0; q < n * c; q++)
        for (int64_t o = 0; o < osz; o++) {
            int64_t oc[3], rem = o;
            for (int d = nd - 1; d >= 0; d--) oc[d] = rem % out[d], rem /= out[d];
            double best = -INFINITY, sum = 0.0;
            int64_t bi = -1;
            for (int64_t w = 0; w < kv; w++) {
                int64_t off[3], r2 = w, idx = 0;
                for (int d = nd - 1; d >= 0; d--) off[d] = r2 % k, r2 /= k;
                int inside = 1;
                for (int d = 0; d < nd; d++) {
                    int64_t pos = oc[d] * s - p + off[d];
                    if (pos < 0 || pos >= in[d]) inside = 0;
                    idx = idx * in[d] + pos;
                }
                if (!inside) continue;
                double v = x[q * isz + idx];
                sum += v;
                if (v > best) best = v, bi = idx;
                if (dy && !is_max) dx[q * isz + idx] += (double)dy[q * osz + o] / (double)kv;
            }
            y[q * osz + o] = is_max ? best : sum / (double)kv;
            if (dy && is_max) dx[q * isz + bi] += dy[q * osz + o];
        }
}

// Per channel of x[n, c, s] over (n, s): mean and biased variance.
static void naive_channel_stats(int64_t n, int64_t c, int64_t s, const float *x, double *mean, double *var)
{
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) sum += x[(i * c + ch) * s + j];
        mean[ch] = sum / (double)(n * s);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) sq += pow(x[(i * c + ch) * s + j] - mean[ch], 2);
        var[ch] = sq / (double)(n * s);
    }
}

static void naive_bn(int64_t n, int64_t c, int64_t s, const float *x, const double *mean, const double *var,
                     const float *w, const float *b, double eps, double *y)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t j = 0; j < s; j++) {
                int64_t e = (i * c + ch) * s + j;
                double v = (x[e] - mean[ch]) / sqrt(var[ch] + eps);
                y[e] = w ? v * w[ch] + b[ch] : v;
            }
}

// ---- pooling --------------------------------------------------------------------------------------

typedef struct {
    int k, s, p;  // s as given in the recipe (0 = kernel)
} pool_cfg;

static const pool_cfg pool_cfgs[] = {{2, 0, 0}, {3, 2, 1}, {3, 1, 1}, {2, 3, 1}, {3, 0, 0}, {1, 2, 0}};

// Forward and backward of max_pool / avg_pool on input shape `in` against naive_pool.
static void check_pool(const char *kind, gl_shape in)
{
    for (size_t t = 0; t < sizeof pool_cfgs / sizeof pool_cfgs[0]; t++) {
        pool_cfg pc = pool_cfgs[t];
        int s = pc.s ? pc.s : pc.k;
        char layer[256], what[128];
        snprintf(layer, sizeof layer, "    - {type: %s, kernel: %d, stride: %d, padding: %d}\n", kind, pc.k, pc.s,
                 pc.p);
        snprintf(what, sizeof what, "%s k%d s%d p%d on %dD", kind, pc.k, pc.s, pc.p, in.ndim - 1);
        tl_model m;
        build_and_run(&m, layer, in, true, -2.0f, 2.0f);
        const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
        int nd = in.ndim - 1;
        gl_shape want = in;
        for (int d = 0; d < nd; d++) want.d[1 + d] = (in.d[1 + d] + 2 * pc.p - pc.k) / s + 1;
        check_shape(&y->shape, want);
        float *r = run_backward(&m, 11);
        double *ry = dalloc(N * y->size), *rdx = dalloc(N * x->size);
        naive_pool(!strcmp(kind, "max_pool"), nd, N, in.d[0], &in.d[1], pc.k, s, pc.p, x->data, r, ry, rdx);
        check_close(what, y->data, ry, N * y->size, 1e-6, 1e-6);
        check_close(what, x->grad, rdx, N * x->size, 1e-6, 1e-6);
        free(rdx);
        free(ry);
        free(r);
        tl_model_free(&m);
    }
}

static void test_max_pool_2d_matches_naive(void **state)
{
    (void)state;
    check_pool("max_pool", shp(3, 2, 5, 7, 0));
}

static void test_max_pool_3d_matches_naive(void **state)
{
    (void)state;
    check_pool("max_pool", shp(4, 2, 3, 5, 7));
}

static void test_avg_pool_2d_matches_naive(void **state)
{
    (void)state;
    check_pool("avg_pool", shp(3, 2, 5, 7, 0));
}

static void test_avg_pool_3d_matches_naive(void **state)
{
    (void)state;
    check_pool("avg_pool", shp(4, 2, 3, 5, 7));
}

// Equal values: the first element of each window takes the whole gradient.
static void test_max_pool_ties_take_the_first(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: leaky_relu, name: x, slope: 1.0}\n    - {type: max_pool}\n", shp(3, 1, 4, 6, 0),
                   N);
    for (int64_t i = 0; i < N * m.g.input.size; i++) m.g.input.data[i] = 0.25f;
    graph_forward(&m.g, N, true);
    gl_tensor *y = graph_output(&m.g);
    for (int64_t i = 0; i < N * y->size; i++) y->grad[i] = 1.0f;
    graph_backward(&m.g, N);
    const float *dx = m.g.layers[0].out.grad;
    for (int64_t i = 0; i < N; i++)
        for (int h = 0; h < 4; h++)
            for (int w = 0; w < 6; w++) {
                float want = (h % 2 == 0 && w % 2 == 0) ? 1.0f : 0.0f;
                if (dx[i * 24 + h * 6 + w] != want)
                    fail_msg("dx[%lld, %d, %d] = %g, want %g", (long long)i, h, w, dx[i * 24 + h * 6 + w], want);
            }
    tl_model_free(&m);
}

// The backend's "kernel 2" max pool (2x2 and 2x2x2 windows at stride 2: vector rows of 8 windows
// where the CPU has AVX2, the rest scalar) against a scan of each window in (d, h, w) order that
// keeps the first of equal values and lets NaN win: maps with rows of 19 windows (16 + 3) and an
// odd column and row left over, values from {-1, -0, 0, 0.5, 1} (ties everywhere, -0 against 0),
// and NaNs; the winners' values and indices bit for bit, at 1 and 3 threads.
static void test_max_pool_k2_matches_a_scan(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    const float vals[5] = {-1.0f, -0.0f, 0.0f, 0.5f, 1.0f};
    const int64_t ins[2][3] = {{1, 9, 39}, {5, 6, 39}};
    const int saved = omp_get_max_threads();
    for (int t = 0; t < 2; t++)
        for (int nt = 1; nt <= 3; nt += 2) {
            omp_set_num_threads(nt);
            const int64_t *in = ins[t], c = 3, kd = t ? 2 : 1;
            const int k[3] = {(int)kd, 2, 2}, p[3] = {0, 0, 0};
            const int64_t out[3] = {in[0] / kd, in[1] / 2, in[2] / 2}, ip = in[0] * in[1] * in[2];
            const int64_t op = out[0] * out[1] * out[2];
            float *x = falloc(N * c * ip), *y = falloc(N * c * op);
            int32_t *am = malloc(sizeof(int32_t) * (size_t)(N * c * op));
            assert_non_null(am);
            uint64_t r = 12345 + (uint64_t)t;
            for (int64_t i = 0; i < N * c * ip; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (r >> 33) % 13 == 0 ? NAN : vals[(r >> 40) % 5];  // windows with two NaNs too
            }
            be->max_pool_forward(N, c, in, out, k, k, p, x, y, am);
            for (int64_t q = 0; q < N * c; q++)
                for (int64_t o = 0; o < op; o++) {
                    const int64_t od = o / (out[1] * out[2]), oh = o / out[2] % out[1], ow = o % out[2];
                    int64_t bi = -1;
                    float best = 0;
                    for (int64_t a = 0; a < kd; a++)
                        for (int64_t b = 0; b < 2; b++)
                            for (int64_t e = 0; e < 2; e++) {
                                const int64_t i = ((od * kd + a) * in[1] + oh * 2 + b) * in[2] + ow * 2 + e;
                                const float v = x[q * ip + i];
                                if (bi < 0 || v > best || isnan(v)) best = v, bi = i;
                            }
                    if (am[q * op + o] != bi || memcmp(&y[q * op + o], &best, sizeof best))
                        fail_msg("%s, %d threads, plane %lld, window %lld: %a at %d, want %a at %lld", t ? "3D" : "2D",
                                 nt, (long long)q, (long long)o, y[q * op + o], am[q * op + o], best, (long long)bi);
                }
            free(am);
            free(y);
            free(x);
        }
    omp_set_num_threads(saved);
}

// Count_include_pad: a corner window with padding 1 averages 4 real values over 9.
static void test_avg_pool_counts_padding(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: avg_pool, kernel: 3, stride: 2, padding: 1}\n", shp(3, 1, 3, 3, 0), 1);
    for (int i = 0; i < 9; i++) m.g.input.data[i] = 1.0f;
    graph_forward(&m.g, 1, true);
    const gl_tensor *y = graph_output(&m.g);
    check_shape(&y->shape, shp(3, 1, 2, 2, 0));
    for (int i = 0; i < 4; i++) assert_true(fabs(y->data[i] - 4.0 / 9.0) < 1e-7);
    tl_model_free(&m);
}

static void check_global_avg_pool(gl_shape in)
{
    tl_model m;
    build_and_run(&m, "    - {type: global_avg_pool}\n", in, true, -2.0f, 2.0f);
    const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
    int64_t c = in.d[0], s = x->size / c;
    check_shape(&y->shape, shp(1, c, 0, 0, 0));
    float *r = run_backward(&m, 12);
    double *ry = dalloc(N * c), *rdx = dalloc(N * x->size);
    for (int64_t q = 0; q < N * c; q++) {
        for (int64_t j = 0; j < s; j++) ry[q] += x->data[q * s + j];
        ry[q] /= (double)s;
        for (int64_t j = 0; j < s; j++) rdx[q * s + j] = r[q] / (double)s;
    }
    check_close("global_avg_pool y", y->data, ry, N * c, 1e-6, 1e-6);
    check_close("global_avg_pool dx", x->grad, rdx, N * x->size, 1e-6, 1e-7);
    free(rdx);
    free(ry);
    free(r);
    tl_model_free(&m);
}

static void test_global_avg_pool_matches_naive(void **state)
{
    (void)state;
    check_global_avg_pool(shp(3, 2, 5, 7, 0));
    check_global_avg_pool(shp(4, 2, 3, 5, 7));
}

// ---- batch norm -----------------------------------------------------------------------------------

// Train-mode forward against batch statistics, the running update, then an eval forward
// against the running statistics, for input shape `in` (1D, 2D or 3D).
static void check_batch_norm(gl_shape in, double momentum)
{
    char layer[128];
    snprintf(layer, sizeof layer, "    - {type: batch_norm, momentum: %g}\n", momentum);
    tl_model m;
    char all[512];
    snprintf(all, sizeof all, "%s%s", prefix, layer);
    tl_model_build(&m, all, in, N);
    gl_graph *g = &m.g;
    graph_init_params(g, 1);
    layer_t *bn = &g->layers[1];
    int64_t c = in.d[0], s = g->input.size / c;
    assert_int_equal(bn->nparams, 2);
    check_shape(&bn->params[0].shape, shp(1, c, 0, 0, 0));
    assert_string_equal(bn->params[0].name, "weight");
    assert_string_equal(bn->params[1].name, "bias");
    for (int64_t ch = 0; ch < c; ch++) assert_true(bn->w[ch] == 1.0f && bn->w[c + ch] == 0.0f);  // init
    tl_fill_uniform(bn->w, 2 * c, -1.5f, 1.5f, 20);
    double *mean = dalloc(c), *var = dalloc(c), *rm = dalloc(c), *rv = dalloc(c), *y = dalloc(N * g->input.size);
    for (int64_t ch = 0; ch < c; ch++) rm[ch] = 0.0, rv[ch] = 1.0;
    const gl_tensor *x = &g->layers[0].out, *out = graph_output(g);
    for (int step = 0; step < 2; step++) {
        tl_fill_uniform(g->input.data, N * g->input.size, -1.0f + step, 3.0f - 2 * step, 30 + (uint64_t)step);
        graph_forward(g, N, true);
        naive_channel_stats(N, c, s, x->data, mean, var);
        naive_bn(N, c, s, x->data, mean, var, bn->w, bn->w + c, 1e-5, y);
        check_close("batch_norm train y", out->data, y, N * x->size, 1e-5, 1e-5);
        double m_ = (double)(N * s);
        for (int64_t ch = 0; ch < c; ch++) {
            rm[ch] = (1 - momentum) * rm[ch] + momentum * mean[ch];
            rv[ch] = (1 - momentum) * rv[ch] + momentum * var[ch] * m_ / (m_ - 1);
        }
        check_close("batch_norm running mean", bn->state, rm, c, 1e-5, 1e-6);
        check_close("batch_norm running var", bn->state + c, rv, c, 1e-5, 1e-6);
    }
    // Eval: running statistics, which the eval forward leaves alone.
    tl_fill_uniform(g->input.data, N * g->input.size, -2.0f, 2.0f, 40);
    graph_forward(g, N, false);
    naive_bn(N, c, s, x->data, rm, rv, bn->w, bn->w + c, 1e-5, y);
    check_close("batch_norm eval y", out->data, y, N * x->size, 1e-5, 1e-5);
    check_close("batch_norm running mean after eval", bn->state, rm, c, 1e-5, 1e-6);
    free(y), free(rv), free(rm), free(var), free(mean);
    tl_model_free(&m);
}

static void test_batch_norm_train_eval_and_running_stats(void **state)
{
    (void)state;
    check_batch_norm(shp(1, 5, 0, 0, 0), 0.1);       // BatchNorm1d: per feature over N
    check_batch_norm(shp(3, 2, 5, 7, 0), 0.1);       // BatchNorm2d
    check_batch_norm(shp(4, 3, 3, 5, 7), 0.3);       // BatchNorm3d, another momentum
}

// PyTorch: BatchNorm1d(1) (momentum 0.1) on x = [1, 2, 3, 4] then [0, 0, 2, 6]:
//   step 1: mean 2.5, unbiased var 5/3: running_mean 0.25, running_var 0.9 + 1/6 = 1.0666667
//   step 2: mean 2, unbiased var 8: running_mean 0.425, running_var 0.96 + 0.8 = 1.76
// then eval on x = 1.425: (1.425 - 0.425) / sqrt(1.76 + 1e-5).
static void test_batch_norm_running_stats_hand_computed(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: batch_norm}\n", shape_1d(1), 4);
    graph_init_params(&m.g, 1);
    const float xs[2][4] = {{1, 2, 3, 4}, {0, 0, 2, 6}};
    const float *st = m.g.layers[0].state;
    memcpy(m.g.input.data, xs[0], sizeof xs[0]);
    graph_forward(&m.g, 4, true);
    assert_true(fabs(st[0] - 0.25) < 1e-6 && fabs(st[1] - 1.0666667) < 1e-6);
    // Normalised with the biased variance 1.25: (1 - 2.5) / sqrt(1.25 + 1e-5)
    assert_true(fabs(graph_output(&m.g)->data[0] - (-1.5 / sqrt(1.25001))) < 1e-6);
    memcpy(m.g.input.data, xs[1], sizeof xs[1]);
    graph_forward(&m.g, 4, true);
    assert_true(fabs(st[0] - 0.425) < 1e-6 && fabs(st[1] - 1.76) < 1e-6);
    m.g.input.data[0] = 1.425f;
    graph_forward(&m.g, 1, false);
    assert_true(fabs(graph_output(&m.g)->data[0] - 1.0 / sqrt(1.76001)) < 1e-6);
    tl_model_free(&m);
}

// Before any training, evaluation uses PyTorch's initial running stats (mean 0, var 1), although
// the arena (and so the state) starts zeroed.
static void test_batch_norm_eval_before_training_uses_var_one(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: batch_norm, affine: false}\n", shp(3, 2, 3, 3, 0), N);
    assert_int_equal(m.g.layers[0].nparams, 0);
    assert_int_equal(m.g.nparams, 0);
    tl_fill_uniform(m.g.input.data, N * 18, -2.0f, 2.0f, 50);
    graph_forward(&m.g, N, false);
    for (int64_t i = 0; i < N * 18; i++)
        assert_true(fabs(graph_output(&m.g)->data[i] - m.g.input.data[i] / sqrt(1.00001)) < 1e-6);
    const float *st = m.g.layers[0].state;
    assert_true(st[0] == 0.0f && st[1] == 0.0f && st[2] == 1.0f && st[3] == 1.0f);
    tl_model_free(&m);
}

// ---- layer norm -----------------------------------------------------------------------------------

static void check_layer_norm(gl_shape in)
{
    tl_model m;
    build_and_run(&m, "    - {type: layer_norm}\n", in, true, -1.0f, 3.0f);
    gl_graph *g = &m.g;
    layer_t *ln = &g->layers[1];
    int64_t k = g->input.size;
    assert_int_equal(ln->nparams, 2);
    check_shape(&ln->params[0].shape, in);
    check_shape(&ln->params[1].shape, in);
    graph_init_params(g, 1);
    for (int64_t j = 0; j < k; j++) assert_true(ln->w[j] == 1.0f && ln->w[k + j] == 0.0f);
    tl_fill_uniform(ln->w, 2 * k, -1.5f, 1.5f, 21);
    graph_forward(g, N, true);
    const gl_tensor *x = &g->layers[0].out;
    double *y = dalloc(N * k);
    for (int64_t i = 0; i < N; i++) {
        double sum = 0.0, sq = 0.0;
        for (int64_t j = 0; j < k; j++) sum += x->data[i * k + j];
        double mean = sum / (double)k;
        for (int64_t j = 0; j < k; j++) sq += pow(x->data[i * k + j] - mean, 2);
        for (int64_t j = 0; j < k; j++)
            y[i * k + j] = (x->data[i * k + j] - mean) / sqrt(sq / (double)k + 1e-5) * ln->w[j] + ln->w[k + j];
    }
    check_close("layer_norm y", graph_output(g)->data, y, N * k, 1e-5, 1e-5);
    free(y);
    tl_model_free(&m);
}

static void test_layer_norm_matches_naive(void **state)
{
    (void)state;
    check_layer_norm(shape_1d(5));
    check_layer_norm(shp(3, 2, 5, 7, 0));
    check_layer_norm(shp(4, 2, 3, 5, 7));
}

// ---- dropout --------------------------------------------------------------------------------------

static void test_dropout_statistics_and_keys(void **state)
{
    (void)state;
    enum { F = 10000, B = 4 };  // B * F above CPU_PAR_MIN_WORK: the threaded path
    tl_model m;
    tl_model_build(&m, "    - {type: dropout, rate: 0.3}\n    - {type: dropout, name: d2, rate: 0.3, inputs: input}\n",
                   shape_1d(F), B);
    gl_graph *g = &m.g;
    g->seed = 1234;
    g->step = 7;
    for (int64_t i = 0; i < B * F; i++) g->input.data[i] = 1.0f + (float)(i % 5);
    graph_forward(g, B, true);
    const float *y = g->layers[0].out.data;
    const float keep = 1.0f / (1.0f - 0.3f);
    int64_t dropped = 0;
    double sum = 0.0, xsum = 0.0;
    for (int64_t i = 0; i < B * F; i++) {
        float u = rng_uniform(1234, RNG_DROPOUT, 7, (0ull << 40) + (uint64_t)i);
        int drop = u < 0.3f;
        if (drop) {
            assert_true(y[i] == 0.0f);
            dropped++;
        } else if (fabsf(y[i] - g->input.data[i] * keep) > 1e-6f * y[i]) {
            fail_msg("y[%lld] = %g, want x * 1/(1 - rate) = %g", (long long)i, y[i], g->input.data[i] * keep);
        }
        sum += y[i];
        xsum += g->input.data[i];
    }
    double frac = (double)dropped / (B * F);
    if (fabs(frac - 0.3) > 0.03) fail_msg("dropped fraction %.4f, want 0.3 +- 0.03", frac);
    if (fabs(sum / xsum - 1.0) > 0.05) fail_msg("mean ratio y/x %.4f, want 1 +- 0.05 (inverted dropout)", sum / xsum);
    // The second dropout layer (index 1) draws from its own stream: a different mask.
    const float *y2 = g->layers[1].out.data;
    int64_t differ = 0;
    for (int64_t i = 0; i < B * F; i++) {
        float u = rng_uniform(1234, RNG_DROPOUT, 7, (1ull << 40) + (uint64_t)i);
        assert_true((y2[i] == 0.0f) == (u < 0.3f));
        differ += (y2[i] == 0.0f) != (y[i] == 0.0f);
    }
    assert_true(differ > B * F / 10);
    // Same key, same mask, whatever the thread count; another step, another mask.
    float *first = falloc(B * F);
    memcpy(first, y, sizeof(float) * B * F);
    backend_cpu()->set_threads(1);
    graph_forward(g, B, true);
    backend_cpu()->set_threads(4);
    assert_memory_equal(first, y, sizeof(float) * B * F);
    graph_forward(g, B, true);
    assert_memory_equal(first, y, sizeof(float) * B * F);
    g->step = 8;
    graph_forward(g, B, true);
    differ = 0;
    for (int64_t i = 0; i < B * F; i++) differ += (first[i] == 0.0f) != (y[i] == 0.0f);
    assert_true(differ > B * F / 10);
    // Evaluation is the identity.
    graph_forward(g, B, false);
    assert_memory_equal(y, g->input.data, sizeof(float) * B * F);
    free(first);
    tl_model_free(&m);
}

// Backward multiplies by the very mask forward used; rate 0 is the identity even in training.
static void test_dropout_backward_uses_the_mask(void **state)
{
    (void)state;
    tl_model m;
    build_and_run(&m, "    - {type: dropout, rate: 0.4}\n    - {type: dropout, rate: 0.0}\n", shp(3, 2, 5, 7, 0),
                  true, 0.5f, 1.5f);
    const gl_tensor *x = &m.g.layers[0].out, *d = &m.g.layers[1].out, *y = graph_output(&m.g);
    assert_memory_equal(y->data, d->data, sizeof(float) * (size_t)(N * y->size));
    float *r = run_backward(&m, 13);
    int64_t zeros = 0;
    for (int64_t i = 0; i < N * x->size; i++) {
        float mask = d->data[i] / x->data[i];  // 0 or 1/(1 - 0.4)
        zeros += d->data[i] == 0.0f;
        if (fabsf(x->grad[i] - r[i] * mask) > 1e-5f)
            fail_msg("dx[%lld] = %g, want dy * mask = %g", (long long)i, x->grad[i], r[i] * mask);
    }
    assert_true(zeros > 0 && zeros < N * x->size);
    free(r);
    tl_model_free(&m);
}

// ---- scale, flatten, add, concat, upsample ----------------------------------------------------------

static void test_scale_and_flatten(void **state)
{
    (void)state;
    tl_model m;
    build_and_run(&m, "    - {type: scale, factor: 1.2}\n    - {type: flatten}\n", shp(4, 2, 3, 5, 7), true, -2.0f,
                  2.0f);
    const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
    check_shape(&m.g.layers[1].out.shape, shp(4, 2, 3, 5, 7));
    check_shape(&y->shape, shape_1d(210));
    float *r = run_backward(&m, 14);
    for (int64_t i = 0; i < N * 210; i++) {
        assert_true(fabs(y->data[i] - 1.2 * x->data[i]) < 1e-6);
        assert_true(fabs(x->grad[i] - 1.2 * r[i]) < 1e-6);
    }
    free(r);
    tl_model_free(&m);
}

// add of [x, t, x] with t = tanh(x): y = 2x + tanh x; dx gets dy twice plus tanh's share.
static void test_add_sums_and_accumulates(void **state)
{
    (void)state;
    tl_model m;
    build_and_run(&m, "    - {type: tanh, name: t}\n    - {type: add, inputs: [x, t, x]}\n", shp(3, 2, 5, 7, 0), true,
                  -2.0f, 2.0f);
    const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
    check_shape(&y->shape, shp(3, 2, 5, 7, 0));
    float *r = run_backward(&m, 15);
    for (int64_t i = 0; i < N * x->size; i++) {
        double t = tanh(x->data[i]);
        assert_true(fabs(y->data[i] - (2.0 * x->data[i] + t)) < 1e-5);
        assert_true(fabs(x->grad[i] - r[i] * (3.0 - t * t)) < 1e-5);
    }
    free(r);
    tl_model_free(&m);
}

// concat of x with a = 2x, then of [a, b = concat(x, a), x]: channel blocks [2x, x, 2x, x].
static void check_concat(gl_shape in)
{
    tl_model m;
    build_and_run(&m,
                  "    - {type: scale, name: a, factor: 2.0}\n"
                  "    - {type: concat, name: b, inputs: [x, a]}\n"
                  "    - {type: concat, inputs: [a, b, x]}\n",
                  in, true, -2.0f, 2.0f);
    const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
    int64_t c = in.d[0], s = x->size / c;
    gl_shape want = in;
    want.d[0] = 4 * c;  // a (c) + b (2c) + x (c)
    check_shape(&y->shape, want);
    check_shape(&m.g.layers[2].out.shape, shp(in.ndim, 2 * c, in.d[1], in.d[2], in.d[3]));
    float *r = run_backward(&m, 16);
    // Per sample: [2x, x, 2x, x]; dx = 2 r0 + r1 + 2 r2 + r3 over the four channel blocks.
    const double mul[4] = {2, 1, 2, 1};
    for (int64_t i = 0; i < N; i++)
        for (int64_t e = 0; e < c * s; e++) {
            double xv = x->data[i * c * s + e], g = 0.0;
            for (int b = 0; b < 4; b++) {
                assert_true(fabs(y->data[i * 4 * c * s + b * c * s + e] - mul[b] * xv) < 1e-6);
                g += mul[b] * r[i * 4 * c * s + b * c * s + e];
            }
            assert_true(fabs(x->grad[i * c * s + e] - g) < 1e-5);
        }
    free(r);
    tl_model_free(&m);
}

static void test_concat_joins_channels(void **state)
{
    (void)state;
    check_concat(shape_1d(5));
    check_concat(shp(3, 2, 5, 7, 0));
    check_concat(shp(4, 2, 3, 5, 7));
}

static void check_upsample(gl_shape in, int f)
{
    char layer[128];
    snprintf(layer, sizeof layer, "    - {type: upsample, factor: %d}\n", f);
    tl_model m;
    build_and_run(&m, layer, in, true, -2.0f, 2.0f);
    const gl_tensor *x = &m.g.layers[0].out, *y = graph_output(&m.g);
    int nd = in.ndim - 1;
    gl_shape want = in;
    for (int d = 1; d <= nd; d++) want.d[d] *= f;
    check_shape(&y->shape, want);
    float *r = run_backward(&m, 17);
    int64_t isz = x->size / in.d[0], osz = y->size / in.d[0];
    double *ry = dalloc(N * y->size), *rdx = dalloc(N * x->size);
    for (int64_t q = 0; q < N * in.d[0]; q++)
        for (int64_t o = 0; o < osz; o++) {
            int64_t rem = o, idx = 0, mulv = 1;
            for (int d = nd; d >= 1; d--) {
                int64_t pos = rem % want.d[d];
                rem /= want.d[d];
                idx += (pos / f) * mulv;
                mulv *= in.d[d];
            }
            ry[q * osz + o] = x->data[q * isz + idx];
            rdx[q * isz + idx] += r[q * osz + o];
        }
    check_close("upsample y", y->data, ry, N * y->size, 0, 0);
    check_close("upsample dx", x->grad, rdx, N * x->size, 1e-6, 1e-6);
    free(rdx);
    free(ry);
    free(r);
    tl_model_free(&m);
}

static void test_upsample_matches_naive(void **state)
{
    (void)state;
    check_upsample(shp(3, 2, 5, 7, 0), 2);
    check_upsample(shp(3, 2, 5, 7, 0), 3);
    check_upsample(shp(4, 2, 3, 5, 7), 2);
    check_upsample(shp(3, 1, 2, 3, 0), 1);
}

// ---- gradient checks ----------------------------------------------------------------------------

#define EPS 1e-2f
#define RTOL 2e-2
#define ATOL 2e-3

typedef struct {
    gl_graph *g;
    const float *r;
    bool train;
} gc_ctx;

static double gc_loss(void *p)
{
    gc_ctx *c = p;
    graph_forward(c->g, N, c->train);
    const gl_tensor *o = graph_output(c->g);
    double l = 0.0;
    for (int64_t i = 0; i < N * o->size; i++) l += (double)o->data[i] * (double)c->r[i];
    return l;
}

static int cmp_key(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x > y) - (x < y);
}

// x[i]: a random permutation of distinct values 0.05 apart (no max-pool ties within EPS).
static void fill_distinct(float *x, int64_t n)
{
    double *kv = dalloc(2 * n);
    for (int64_t i = 0; i < n; i++) {
        kv[2 * i] = rng_uniform(TL_SEED, RNG_TEST, 60, (uint64_t)i);
        kv[2 * i + 1] = (double)i;
    }
    qsort(kv, (size_t)n, 2 * sizeof(double), cmp_key);
    for (int64_t r = 0; r < n; r++) x[(int64_t)kv[2 * r + 1]] = 0.05f * (float)(r - n / 2);
    free(kv);
}

typedef void (*gc_setup)(gl_graph *g);

// Finite differences of L = sum(out * R) against backward, for the layer input and every
// parameter, in training or evaluation mode. A spare NaN row checks rows beyond n are not read.
static void gradcheck(const char *what, const char *layers, gl_shape input, bool train, bool distinct,
                      gc_setup setup)
{
    char all[2048];
    snprintf(all, sizeof all, "%s%s", prefix, layers);
    tl_model m;
    tl_model_build(&m, all, input, N + 1);
    gl_graph *g = &m.g;
    g->seed = 99;
    g->step = 3;
    int64_t nin = g->input.size;
    if (distinct)
        fill_distinct(g->input.data, N * nin);
    else
        tl_fill_away_from_zero(g->input.data, N * nin, 0.05f, 1.0f, 61);
    for (int64_t i = N * nin; i < (N + 1) * nin; i++) g->input.data[i] = NAN;
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 62);
    if (setup) setup(g);
    gl_tensor *x = &g->layers[0].out, *out = graph_output(g);
    float *r = falloc(N * out->size);
    tl_fill_uniform(r, N * out->size, -1.0f, 1.0f, 63);
    gc_ctx c = {g, r, train};
    double l0 = gc_loss(&c);
    if (!isfinite(l0) || graph_first_nonfinite(g, N) >= 0) fail_msg("%s: non-finite forward", what);
    memcpy(out->grad, r, sizeof(float) * (size_t)(N * out->size));
    for (int64_t i = 0; i < g->nparams; i++) g->grads[i] = 1e6f;  // must be overwritten
    graph_backward(g, N);
    int64_t nx = N * x->size;
    float *dx = falloc(nx), *dp = falloc(g->nparams);
    double *num = dalloc(nx > g->nparams ? nx : g->nparams);
    memcpy(dx, x->grad, sizeof(float) * (size_t)nx);
    memcpy(dp, g->grads, sizeof(float) * (size_t)g->nparams);
    char name[256];
    tl_fd_grad(g->input.data, nx, EPS, gc_loss, &c, num);
    snprintf(name, sizeof name, "%s: dL/dx", what);
    if (tl_check_grad(name, dx, num, nx, RTOL, ATOL) < 1e-3) fail_msg("%s: loss does not depend on x", what);
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            const gl_param *pp = &l->params[p];
            tl_fd_grad(g->params + pp->offset, pp->size, EPS, gc_loss, &c, num);
            snprintf(name, sizeof name, "%s: %s.%s", what, l->cfg->name, pp->name);
            if (tl_check_grad(name, dp + pp->offset, num, pp->size, RTOL, ATOL) < 1e-3)
                fail_msg("%s: loss does not depend on it", name);
        }
    }
    free(num);
    free(dp);
    free(dx);
    free(r);
    tl_model_free(&m);
}

static void test_gradcheck_pooling(void **state)
{
    (void)state;
    gl_shape s2 = shp(3, 2, 5, 7, 0), s3 = shp(4, 2, 3, 5, 7);
    gradcheck("max_pool 2D k3 s2 p1", "    - {type: max_pool, kernel: 3, stride: 2, padding: 1}\n", s2, true, true,
              NULL);
    gradcheck("max_pool 3D k2", "    - {type: max_pool}\n", s3, true, true, NULL);
    gradcheck("avg_pool 2D k3 s2 p1", "    - {type: avg_pool, kernel: 3, stride: 2, padding: 1}\n", s2, true, false,
              NULL);
    gradcheck("avg_pool 3D k2 s1", "    - {type: avg_pool, stride: 1}\n", s3, true, false, NULL);
    gradcheck("global_avg_pool 2D", "    - {type: global_avg_pool}\n", s2, true, false, NULL);
    gradcheck("global_avg_pool 3D", "    - {type: global_avg_pool}\n", s3, true, false, NULL);
}

// Nontrivial running statistics for evaluation-mode checks.
static void set_running_stats(gl_graph *g)
{
    layer_t *l = &g->layers[1];
    int64_t c = (l->state_floats - 1) / 2;
    for (int64_t ch = 0; ch < c; ch++) {
        l->state[ch] = 0.3f * (float)ch - 0.2f;
        l->state[c + ch] = 0.5f + 0.25f * (float)ch;
    }
    l->state[2 * c] = 1.0f;
}

static void test_gradcheck_batch_norm(void **state)
{
    (void)state;
    const char *bn = "    - {type: batch_norm}\n";
    gradcheck("batch_norm 1D train", bn, shape_1d(5), true, false, NULL);
    gradcheck("batch_norm 2D train", bn, shp(3, 2, 5, 7, 0), true, false, NULL);
    gradcheck("batch_norm 3D train", bn, shp(4, 2, 3, 5, 7), true, false, NULL);
    gradcheck("batch_norm 2D eval", bn, shp(3, 2, 5, 7, 0), false, false, set_running_stats);
    gradcheck("batch_norm 3D eval", bn, shp(4, 2, 3, 5, 7), false, false, set_running_stats);
    gradcheck("batch_norm no affine", "    - {type: batch_norm, affine: false}\n    - {type: scale, factor: 2}\n",
              shp(3, 2, 5, 7, 0), true, false, NULL);
}

static void test_gradcheck_layer_norm(void **state)
{
    (void)state;
    const char *ln = "    - {type: layer_norm}\n";
    gradcheck("layer_norm 1D", ln, shape_1d(5), true, false, NULL);
    gradcheck("layer_norm 2D", ln, shp(3, 2, 5, 7, 0), true, false, NULL);
    gradcheck("layer_norm 3D", ln, shp(4, 2, 3, 5, 7), true, false, NULL);
    gradcheck("layer_norm no affine", "    - {type: layer_norm, affine: false}\n", shp(3, 2, 5, 7, 0), true, false,
              NULL);
}

static void test_gradcheck_shape_and_merge_layers(void **state)
{
    (void)state;
    gl_shape s2 = shp(3, 2, 5, 7, 0), s3 = shp(4, 2, 3, 5, 7);
    gradcheck("dropout train (mask fixed by the key)", "    - {type: dropout, rate: 0.3}\n", s2, true, false, NULL);
    gradcheck("dropout eval", "    - {type: dropout}\n", s2, false, false, NULL);
    gradcheck("scale", "    - {type: scale, factor: -1.2}\n", s3, true, false, NULL);
    gradcheck("flatten", "    - {type: flatten}\n", s3, true, false, NULL);
    gradcheck("add", "    - {type: tanh, name: t}\n    - {type: add, inputs: [x, t]}\n", s2, true, false, NULL);
    gradcheck("concat", "    - {type: tanh, name: t}\n    - {type: concat, inputs: [t, x]}\n", s3, true, false, NULL);
    gradcheck("upsample 2D", "    - {type: upsample, factor: 3}\n", s2, true, false, NULL);
    gradcheck("upsample 3D", "    - {type: upsample}\n", s3, true, false, NULL);
}

// ---- thread-count independence --------------------------------------------------------------------

// Output, every gradient and the running stats of a model, bitwise, at 1 and at 4 threads.
static void test_results_do_not_depend_on_threads(void **state)
{
    (void)state;
    const char *layers = "    - {type: batch_norm}\n"
                         "    - {type: max_pool, kernel: 3, stride: 2, padding: 1, name: mp}\n"
                         "    - {type: upsample, name: up}\n"
                         "    - {type: avg_pool, kernel: 3, stride: 1, padding: 1}\n"
                         "    - {type: layer_norm}\n"
                         "    - {type: dropout, rate: 0.2}\n"
                         "    - {type: concat, inputs: [dropout_6, up]}\n"
                         "    - {type: global_avg_pool}\n";
    float *keep[2] = {NULL, NULL};
    int64_t len = 0;
    for (int t = 0; t < 2; t++) {
        tl_model m;
        char all[2048];
        snprintf(all, sizeof all, "%s%s", prefix, layers);
        tl_model_build(&m, all, shp(4, 3, 17, 19, 21), N);  // above CPU_PAR_MIN_WORK
        gl_graph *g = &m.g;
        g->seed = 5;
        g->step = 1;
        tl_fill_uniform(g->input.data, N * g->input.size, -2.0f, 2.0f, 70);
        tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 71);
        backend_cpu()->set_threads(t == 0 ? 1 : 4);
        graph_forward(g, N, true);
        gl_tensor *o = graph_output(g);
        tl_fill_uniform(o->grad, N * o->size, -1.0f, 1.0f, 72);
        graph_backward(g, N);
        int64_t nx = N * g->layers[0].out.size;
        len = N * o->size + nx + g->nparams + g->layers[1].state_floats;
        keep[t] = falloc(len);
        memcpy(keep[t], o->data, sizeof(float) * (size_t)(N * o->size));
        memcpy(keep[t] + N * o->size, g->layers[0].out.grad, sizeof(float) * (size_t)nx);
        memcpy(keep[t] + N * o->size + nx, g->grads, sizeof(float) * (size_t)g->nparams);
        memcpy(keep[t] + N * o->size + nx + g->nparams, g->layers[1].state,
               sizeof(float) * (size_t)g->layers[1].state_floats);
        tl_model_free(&m);
    }
    backend_cpu()->set_threads(omp_get_num_procs());
    assert_memory_equal(keep[0], keep[1], sizeof(float) * (size_t)len);
    free(keep[0]);
    free(keep[1]);
}

// ---- shape errors ---------------------------------------------------------------------------------

// graph_build must refuse `layers` on `input` with a message holding want1 (and want2 unless NULL).
static void expect_infer_error(const char *layers, gl_shape input, const char *want1, const char *want2)
{
    recipe_t r;
    char *yaml = tl_recipe_text(layers);
    tl_recipe(&r, yaml, 0, NULL);
    free(yaml);
    gl_graph g;
    tl_stream s;
    int rc = graph_build(&g, &r, input, 4, backend_cpu(), tl_stream_open(&s));
    char *errors = tl_stream_close(&s);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", errors);
    free(errors);
    graph_free(&g);
    recipe_free(&r);
    if (rc != -1) fail_msg("graph_build accepted:\n%s", layers);
    if (!strstr(copy, want1)) fail_msg("error '%s' does not mention '%s'", copy, want1);
    if (want2 && !strstr(copy, want2)) fail_msg("error '%s' does not mention '%s'", copy, want2);
}

static void test_infer_errors_name_the_shapes(void **state)
{
    (void)state;
    expect_infer_error("    - {type: dense, units: 4, name: a}\n    - {type: add, inputs: [input, a]}\n", shape_1d(5),
                       "add needs inputs of one shape, got [5], [4]", NULL);
    expect_infer_error("    - {type: max_pool, name: a}\n    - {type: concat, inputs: [input, a]}\n",
                       shp(3, 2, 6, 6, 0), "needs the other dimensions equal, got [2, 6, 6], [2, 3, 3]", NULL);
    expect_infer_error("    - {type: flatten, name: a}\n    - {type: concat, inputs: [a, input]}\n", shp(3, 2, 6, 6, 0),
                       "got [72], [2, 6, 6]", NULL);
    // Tokens join along T: the message says so (it said "channels").
    gl_shape tok = {2, {6, 8}};
    tok.tokens = true;
    expect_infer_error("    - {type: dense, units: 4, name: a}\n    - {type: concat, inputs: [input, a]}\n", tok,
                       "concat joins along tokens (the first dimension)", "[T 6, D 8]");
    expect_infer_error("    - {type: max_pool, kernel: 5}\n", shp(3, 2, 4, 9, 0),
                       "kernel 5 is larger than the spatial size 4 plus padding 0", "input shape [2, 4, 9]");
    expect_infer_error("    - {type: avg_pool, kernel: 4, padding: 1}\n", shp(4, 1, 1, 9, 9),
                       "kernel 4 is larger than the spatial size 1 plus padding 1", NULL);
    expect_infer_error("    - {type: avg_pool, kernel: 3, padding: 2}\n", shp(3, 2, 9, 9, 0),
                       "padding 2 is more than half the kernel 3", NULL);
    expect_infer_error("    - {type: max_pool}\n", shape_1d(5), "max_pool needs a [C, H, W] or [C, D, H, W] input",
                       "input shape [5]");
    expect_infer_error("    - {type: upsample}\n", shape_1d(5), "upsample needs a [C, H, W] or [C, D, H, W] input",
                       NULL);
    expect_infer_error("    - {type: global_avg_pool}\n", shape_1d(5), "global_avg_pool needs a [C, spatial...] input",
                       NULL);
    expect_infer_error("    - {type: dropout, rate: 1.0}\n", shape_1d(5), "rate 1 would zero every element", NULL);
    expect_infer_error("    - {type: add, inputs: [input]}\n", shape_1d(5), "takes 2 to 8 inputs, got 1", NULL);
}

// A recipe without scale's required factor, or with a bad key value, is refused at load.
static void test_recipe_keys_are_checked(void **state)
{
    (void)state;
    const char *bad[] = {
        "    - {type: scale}\n",
        "    - {type: max_pool, kernel: 0}\n",
        "    - {type: batch_norm, momentum: 1.5}\n",
        "    - {type: upsample, factor: 0}\n",
        "    - {type: dropout, rate: -0.1}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        recipe_t r;
        char *yaml = tl_recipe_text(bad[i]);
        char *errors = NULL;
        int rc = tl_recipe_try(&r, yaml, 0, NULL, &errors, NULL);
        free(yaml);
        free(errors);
        recipe_free(&r);
        if (rc != -1) fail_msg("recipe accepted: %s", bad[i]);
    }
}

// ---- relu and leaky_relu passes ----------------------------------------------------------------

// The backend's relu and leaky_relu passes (4-float vector blocks, a scalar tail, threads above
// 65,536 elements) equal their scalar definitions bit for bit: NaN, -0, infinities and
// subnormals among x and dy, sizes that end inside a block, 1 to 3 threads, accumulating into
// dx (-0 included) or setting it.
static uint32_t bits_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static void test_relu_passes_equal_the_scalar_definitions(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    const float special[] = {0.0f, -0.0f, 1.5f, -2.25f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f, 3.0f};
    const int64_t sizes[] = {1, 3, 4, 7, 65536 + 5, 200003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        float *x = falloc(n), *dy = falloc(n), *dx0 = falloc(n), *got = falloc(n), *want = falloc(n);
        for (int64_t i = 0; i < n; i++) {
            x[i] = special[(i * 7 + 3) % 11];
            dy[i] = special[(i * 5 + 1) % 11];
            dx0[i] = i % 13 == 0 ? -0.0f : special[(i * 3) % 11];
        }
        for (int threads = 1; threads <= 3; threads++) {
            be->set_threads(threads);
            for (int leaky = 0; leaky <= 1; leaky++) {
                const gl_act a = leaky ? ACT_LEAKY_RELU : ACT_RELU;
                const float s = leaky ? 0.3f : 0.0f;
                be->act_forward(a, s, n, x, got);
                for (int64_t i = 0; i < n; i++) want[i] = x[i] > 0.0f ? x[i] : leaky ? s * x[i] : 0.0f;
                for (int64_t i = 0; i < n; i++)
                    if (bits_of(got[i]) != bits_of(want[i]))
                        fail_msg("%s forward n=%lld threads %d: element %lld is %08x, want %08x", leaky ? "leaky" : "relu",
                                 (long long)n, threads, (long long)i, bits_of(got[i]), bits_of(want[i]));
                for (int set = 0; set <= 1; set++) {
                    memcpy(got, dx0, sizeof(float) * (size_t)n);
                    if (set) be->act_backward_set(a, s, n, x, dy, got);
                    else be->act_backward(a, s, n, x, dy, got);
                    for (int64_t i = 0; i < n; i++)
                        want[i] = (set ? 0.0f : dx0[i]) + (x[i] > 0.0f ? dy[i] : leaky ? s * dy[i] : 0.0f);
                    for (int64_t i = 0; i < n; i++)
                        if (bits_of(got[i]) != bits_of(want[i]))
                            fail_msg("%s backward%s n=%lld threads %d: element %lld is %08x, want %08x",
                                     leaky ? "leaky" : "relu", set ? " (set)" : "", (long long)n, threads, (long long)i,
                                     bits_of(got[i]), bits_of(want[i]));
                }
            }
        }
        free(x), free(dy), free(dx0), free(got), free(want);
    }
    be->set_threads(2);
}

// GELU (cpu_gelu.c: galley's Phi and exp, 16 or 8 lanes at a time) against the erf formula in
// double, forward and backward; an element's bits depend only on its value (not on its place in a
// vector block or the scalar tail) and not on the thread count.
static void test_gelu_matches_the_erf_formula(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    enum { NG = 70001 };  // blocks of 16 and of 8, and a tail
    float *x = malloc(sizeof(float) * NG), *y = malloc(sizeof(float) * NG), *dy = malloc(sizeof(float) * NG);
    float *dx = malloc(sizeof(float) * NG), *y2 = malloc(sizeof(float) * NG), *dx2 = malloc(sizeof(float) * NG);
    tl_fill_uniform(x, NG, -7.0f, 7.0f, 301);
    tl_fill_uniform(dy, NG, -1.0f, 1.0f, 302);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 20.0f, x[3] = -20.0f;
    for (int t = 1; t <= 2; t++) {
        be->set_threads(t);
        float *yt = t == 1 ? y : y2, *dxt = t == 1 ? dx : dx2;
        be->act_forward(ACT_GELU, 0.0f, NG, x, yt);
        for (int i = 0; i < NG; i++) dxt[i] = 0.25f;
        be->act_backward(ACT_GELU, 0.0f, NG, x, dy, dxt);
    }
    be->set_threads(2);
    assert_memory_equal(y, y2, sizeof(float) * NG);
    assert_memory_equal(dx, dx2, sizeof(float) * NG);
    for (int i = 0; i < NG; i++) {
        const double v = x[i], cdf = 0.5 * (1.0 + erf(v / sqrt(2.0))), pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
        const double ry = v * cdf, rdx = 0.25 + dy[i] * (cdf + v * pdf);
        if (!(fabs(y[i] - ry) <= 2e-6 * fmax(1.0, fabs(v))))
            fail_msg("gelu(%.9g) = %.9g, the formula gives %.9g", v, y[i], ry);
        if (!(fabs(dx[i] - rdx) <= 2e-6 * fmax(1.0, fabs(v))))
            fail_msg("gelu backward at %.9g: %.9g, the formula gives %.9g", v, dx[i], rdx);
    }
    // The same values 5 places on (other block positions, another tail): the same bits.
    be->act_forward(ACT_GELU, 0.0f, NG - 5, x, y2 + 5);
    assert_memory_equal(y + 5, y2 + 5 + 5, sizeof(float) * (NG - 10));
    free(x), free(y), free(dy), free(dx), free(y2), free(dx2);
}

// cpu_gelu.c's accuracy, as its header states: Phi within 2.5e-7 absolute over [-16, 16] and, for
// x < 0, within 5e-6 relative while Phi(x) >= 1e-30 (read from gelu(x) / x and from the backward
// term); and the same bits on every instruction set this CPU has and in the scalar code, also for
// 0, -0, the cut at |x| = 12.65, infinities and NaN.
static void test_gelu_phi_accuracy_and_isa_bits(void **state)
{
    (void)state;
    enum { NP = 1 << 18 };
    float *x = malloc(sizeof(float) * NP), *y[3], *dx[3], *dy = malloc(sizeof(float) * NP);
    for (int i = 0; i < NP; i++) x[i] = -16.0f + 32.0f * (float)i / (float)NP, dy[i] = 1.0f;
    const float special[] = {0.0f, -0.0f, 12.6f, -12.6f, 12.7f, -12.7f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++) x[NP - 1 - i] = special[i];
    const int best = cpu_isa_best();
    for (int isa = 0; isa <= best; isa++) {
        y[isa] = malloc(sizeof(float) * NP), dx[isa] = malloc(sizeof(float) * NP);
        cpu_gelu_forward_isa(isa, NP, x, y[isa]);
        cpu_gelu_backward_isa(isa, NP, x, dy, dx[isa], 1);
        if (isa == 0) continue;
        for (int i = 0; i < NP; i++)
            if (memcmp(&y[isa][i], &y[0][i], sizeof(float)) || memcmp(&dx[isa][i], &dx[0][i], sizeof(float)))
                fail_msg("gelu at %.9g: instruction set %d gives %.9g and %.9g, the scalar code %.9g and %.9g", x[i],
                         isa, y[isa][i], dx[isa][i], y[0][i], dx[0][i]);
    }
    for (int i = 0; i < NP - 16; i++) {
        const double v = x[i], cdf = 0.5 * erfc(-v / sqrt(2.0)), pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
        if (v == 0.0) continue;
        const double phi = (double)y[0][i] / v;  // x Phi(x) / x: a division's rounding at most
        if (!(fabs(phi - cdf) <= 2.5e-7 + 1e-7 * cdf))
            fail_msg("Phi(%.9g) = %.9g from gelu, erfc gives %.9g", v, phi, cdf);
        if (v < 0 && cdf >= 1e-30 && !(fabs(phi - cdf) <= 5e-6 * cdf))
            fail_msg("Phi(%.9g) = %.9g from gelu, erfc gives %.9g: more than 5e-6 relative", v, phi, cdf);
        const double d = cdf + v * pdf;
        if (!(fabs(dx[0][i] - d) <= 5e-7 * fmax(1.0, fabs(v))))
            fail_msg("gelu'(%.9g) = %.9g, erfc and exp give %.9g", v, dx[0][i], d);
    }
    // the special values: gelu(+-0) = 0, the cut, gelu(inf) = inf, gelu(-inf) = -inf * 0 (NaN, as
    // x * 0.5 * (1 + erf(x / sqrt 2)) gives), NaN stays NaN
    const float *ys = y[0] + NP - 1;
    assert_true(ys[0] == 0.0f && ys[-1] == 0.0f);
    assert_true(fabs(ys[-2] - 12.6f) <= 1e-6f && fabs(ys[-3]) < 1e-30f && ys[-4] == 12.7f && ys[-5] == -0.0f);
    assert_true(ys[-6] == INFINITY && isnan(ys[-7]) && isnan(ys[-8]));
    for (int isa = 0; isa <= best; isa++) free(y[isa]), free(dx[isa]);
    free(x), free(dy);
}

// The derivative kept (cpu_gelu_forward_keep: y, and x overwritten by gelu'(x)), then the backward
// by it (cpu_gelu_backward_kept), written (set) and added to: the bits of cpu_gelu_forward and
// cpu_gelu_backward on every instruction set this CPU has, at a length that leaves a scalar
// tail, with the special values of test_gelu_phi_accuracy_and_isa_bits and dy of both signs.
static void test_gelu_kept_derivative_has_the_bits(void **state)
{
    (void)state;
    enum { NK = 40003 };
    float *x = malloc(sizeof(float) * NK), *dy = malloc(sizeof(float) * NK), *d = malloc(sizeof(float) * NK);
    float *y = malloc(sizeof(float) * NK), *yk = malloc(sizeof(float) * NK);
    float *dx = malloc(sizeof(float) * NK), *dxk = malloc(sizeof(float) * NK);
    tl_fill_uniform(x, NK, -14.0f, 14.0f, 311);
    tl_fill_uniform(dy, NK, -2.0f, 2.0f, 312);
    const float special[] = {0.0f, -0.0f, 12.6f, -12.6f, 12.7f, -12.7f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++) x[NK - 1 - i] = x[100 + 7 * i] = special[i];
    for (int isa = 0; isa <= cpu_isa_best(); isa++)
        for (int set = 0; set <= 1; set++) {
            memcpy(d, x, sizeof(float) * NK);
            cpu_gelu_forward_isa(isa, NK, x, y);
            cpu_gelu_forward_keep_isa(isa, NK, d, yk);
            assert_memory_equal(y, yk, sizeof(float) * NK);
            for (int i = 0; i < NK; i++) dx[i] = dxk[i] = set ? NAN : 0.125f * (float)(i % 9) - 0.5f;
            cpu_gelu_backward_isa(isa, NK, x, dy, dx, set);
            cpu_gelu_backward_kept_isa(isa, NK, d, dy, dxk, set);
            for (int i = 0; i < NK; i++)
                if (memcmp(&dx[i], &dxk[i], sizeof(float)))
                    fail_msg("isa %d, set %d: gelu backward at %.9g: %a, by the kept derivative %a", isa, set, x[i],
                             dx[i], dxk[i]);
        }
    free(x), free(dy), free(d), free(y), free(yk), free(dx), free(dxk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_matches_the_erf_formula),
        cmocka_unit_test(test_gelu_phi_accuracy_and_isa_bits),
        cmocka_unit_test(test_gelu_kept_derivative_has_the_bits),
        cmocka_unit_test(test_max_pool_2d_matches_naive),
        cmocka_unit_test(test_max_pool_3d_matches_naive),
        cmocka_unit_test(test_avg_pool_2d_matches_naive),
        cmocka_unit_test(test_avg_pool_3d_matches_naive),
        cmocka_unit_test(test_max_pool_ties_take_the_first),
        cmocka_unit_test(test_max_pool_k2_matches_a_scan),
        cmocka_unit_test(test_avg_pool_counts_padding),
        cmocka_unit_test(test_global_avg_pool_matches_naive),
        cmocka_unit_test(test_batch_norm_train_eval_and_running_stats),
        cmocka_unit_test(test_batch_norm_running_stats_hand_computed),
        cmocka_unit_test(test_batch_norm_eval_before_training_uses_var_one),
        cmocka_unit_test(test_layer_norm_matches_naive),
        cmocka_unit_test(test_dropout_statistics_and_keys),
        cmocka_unit_test(test_dropout_backward_uses_the_mask),
        cmocka_unit_test(test_scale_and_flatten),
        cmocka_unit_test(test_add_sums_and_accumulates),
        cmocka_unit_test(test_concat_joins_channels),
        cmocka_unit_test(test_upsample_matches_naive),
        cmocka_unit_test(test_gradcheck_pooling),
        cmocka_unit_test(test_gradcheck_batch_norm),
        cmocka_unit_test(test_gradcheck_layer_norm),
        cmocka_unit_test(test_gradcheck_shape_and_merge_layers),
        cmocka_unit_test(test_results_do_not_depend_on_threads),
        cmocka_unit_test(test_relu_passes_equal_the_scalar_definitions),
        cmocka_unit_test(test_infer_errors_name_the_shapes),
        cmocka_unit_test(test_recipe_keys_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
