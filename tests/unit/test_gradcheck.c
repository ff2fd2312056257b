// test_gradcheck.c: every registered layer kind's backward against finite differences of its
// forward, the softmax cross-entropy loss, and the dense kernels against naive loops.
//
// The layer check is generic: it walks the registry (layer_kind_count/layer_kind_at), so a new
// kind is checked the moment it is registered. A kind whose keys are all optional is checked
// with its defaults; a kind with a required key (or more than one input, or a non-flat input)
// needs an entry in `configs` below, and the test fails until it has one.
//
// Model per configuration:  input -> x: leaky_relu(slope 1) -> <layer(s) under test>
// leaky_relu with slope 1 is the identity, and unlike the model input (whose grad is NULL by
// design) its output has a gradient buffer, so dL/dx is what the layer under test hands back.
// L = sum(out * R) for a fixed random R, so dL/dout = R.
#include "testlib.h"

#define BATCH 3       // rows run
#define CAPACITY 4    // rows planned: the spare row holds NaN and must never be read
#define EPS 1e-2f
#define RTOL 2e-2
#define ATOL 2e-3

typedef struct {
    const char *kind;    // layer kind name
    const char *layers;  // the layers under test (the last one is the model output); input is "x"
    gl_shape input;      // per-sample model input shape; ndim 0: [5]
} gc_config;

// Configurations by kind name. Kinds whose keys all have defaults need no entry (they are
// checked with "{type: <kind>}") but may add some to cover non-default keys.
static const gc_config configs[] = {
    {"dense", "    - {type: dense, units: 7}\n", {0}},
    {"dense", "    - {type: dense, units: 7, bias: false}\n", {0}},
    {"dense", "    - {type: dense, units: 1}\n", {2, {2, 3}}},  // flattens a [2, 3] input
    {"leaky_relu", "    - {type: leaky_relu, slope: 0.2}\n", {0}},
    {"leaky_relu", "    - {type: leaky_relu}\n", {0}},
};
#define NCONFIGS ((int)(sizeof configs / sizeof configs[0]))

static const char prefix[] = "    - {type: leaky_relu, name: x, slope: 1.0}\n";

typedef struct {
    gl_graph *g;
    const float *r;  // [BATCH, out size]
} gc_ctx;

// L = sum(out * R) over rows [0, BATCH), accumulated in double.
static double loss_of(void *p)
{
    gc_ctx *c = p;
    graph_forward(c->g, BATCH, true);
    const gl_tensor *o = graph_output(c->g);
    double l = 0.0;
    for (int64_t i = 0; i < BATCH * o->size; i++) l += (double)o->data[i] * (double)c->r[i];
    return l;
}

static int has_required_key(const layer_kind *k)
{
    for (int j = 0; k->keys && k->keys[j].name; j++)
        if (k->keys[j].flag == KF_REQUIRED) return 1;
    return 0;
}

// Checks one configuration; what names it in failure messages.
static void gradcheck_config(const char *layers_under_test, gl_shape input, const char *what)
{
    char layers[1024];
    snprintf(layers, sizeof layers, "%s%s", prefix, layers_under_test);
    if (input.ndim == 0) input = shape_1d(5);
    tl_model m;
    tl_model_build(&m, layers, input, CAPACITY);
    gl_graph *g = &m.g;
    int ix = tl_layer(g, "x");
    assert_int_equal(ix, 0);
    gl_tensor *x = &g->layers[ix].out;
    gl_tensor *out = graph_output(g);
    assert_true(g->nlayers >= 2);

    // Data: inputs away from kinks, spare row NaN; params uniform in [-1, 1).
    tl_fill_away_from_zero(g->input.data, BATCH * g->input.size, 0.05f, 1.0f, 1);
    for (int64_t i = BATCH * g->input.size; i < CAPACITY * g->input.size; i++) g->input.data[i] = NAN;
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 2);
    float *r = malloc(sizeof(float) * (size_t)(BATCH * out->size));
    assert_non_null(r);
    tl_fill_uniform(r, BATCH * out->size, -1.0f, 1.0f, 3);
    gc_ctx c = {g, r};

    // Analytic: forward, out.grad = R, backward.
    double l0 = loss_of(&c);
    if (!isfinite(l0) || graph_first_nonfinite(g, BATCH) >= 0)
        fail_msg("%s: non-finite forward (the spare row beyond n leaked into rows [0, n)?)", what);
    memcpy(out->grad, r, sizeof(float) * (size_t)(BATCH * out->size));
    // Garbage in every gradient a layer must overwrite or that graph_backward must clear.
    for (int64_t i = 0; i < g->nparams; i++) g->grads[i] = 1e6f;
    for (int i = 0; i < g->nlayers - 1; i++)
        for (int64_t j = 0; j < BATCH * g->layers[i].out.size; j++) g->layers[i].out.grad[j] = -1e6f;
    graph_backward(g, BATCH);

    int64_t nx = BATCH * x->size;
    float *dx = malloc(sizeof(float) * (size_t)nx);
    float *dp = malloc(sizeof(float) * (size_t)(g->nparams ? g->nparams : 1));
    double *num = malloc(sizeof(double) * (size_t)(nx > g->nparams ? nx : g->nparams));
    assert_true(dx && dp && num);
    memcpy(dx, x->grad, sizeof(float) * (size_t)nx);
    memcpy(dp, g->grads, sizeof(float) * (size_t)g->nparams);

    // dL/dx: x is the identity of the input, so perturbing the input perturbs x exactly.
    tl_fd_grad(g->input.data, nx, EPS, loss_of, &c, num);
    char name[256];
    snprintf(name, sizeof name, "%s: dL/d(layer input)", what);
    double mx = tl_check_grad(name, dx, num, nx, RTOL, ATOL);
    if (mx < 1e-3) fail_msg("%s: the loss does not depend on the layer's input (max |dL/dx| = %g)", what, mx);

    // Every parameter tensor of every layer (x has none).
    int64_t seen = 0;
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            const gl_param *pp = &l->params[p];
            assert_true(pp->offset >= 0 && pp->offset + pp->size <= g->nparams);
            tl_fd_grad(g->params + pp->offset, pp->size, EPS, loss_of, &c, num);
            snprintf(name, sizeof name, "%s: %s.%s", what, l->cfg->name, pp->name);
            mx = tl_check_grad(name, dp + pp->offset, num, pp->size, RTOL, ATOL);
            if (mx < 1e-3) fail_msg("%s: the loss does not depend on it", name);
            seen += pp->size;
        }
    }
    assert_int_equal(seen, g->nparams);
    // The finite differences must not have disturbed the state: the same loss again.
    assert_true(fabs(loss_of(&c) - l0) <= 1e-9 * (1.0 + fabs(l0)));

    free(num);
    free(dp);
    free(dx);
    free(r);
    tl_model_free(&m);
}

static void test_every_layer_kind_passes_gradcheck(void **state)
{
    (void)state;
    assert_true(layer_kind_count() > 0);
    // Every entry names a registered kind (a stale entry would silently check nothing).
    for (int e = 0; e < NCONFIGS; e++)
        if (!layer_kind_find(configs[e].kind))
            fail_msg("configs[%d] names '%s', which is not a registered layer kind", e, configs[e].kind);
    int checked = 0;
    for (int i = 0; i < layer_kind_count(); i++) {
        const layer_kind *k = layer_kind_at(i);
        assert_non_null(k);
        assert_non_null(k->name);
        assert_ptr_equal(layer_kind_find(k->name), k);
        int n = 0;
        for (int e = 0; e < NCONFIGS; e++) {
            if (strcmp(configs[e].kind, k->name)) continue;
            char what[128];
            snprintf(what, sizeof what, "%s (configs[%d])", k->name, e);
            gradcheck_config(configs[e].layers, configs[e].input, what);
            n++;
        }
        if (n == 0) {
            if (has_required_key(k) || k->min_inputs > 1)
                fail_msg("layer kind '%s' has a required key or several inputs but no entry in "
                         "test_gradcheck.c's configs[]: add one so its backward is checked",
                         k->name);
            char layer[128];
            snprintf(layer, sizeof layer, "    - {type: %s}\n", k->name);
            char what[128];
            snprintf(what, sizeof what, "%s (defaults)", k->name);
            gradcheck_config(layer, (gl_shape){0}, what);
            n++;
        }
        checked += n;
    }
    assert_true(checked >= layer_kind_count());
}

// Dense bias: false really has no bias parameter (else the configuration above tests nothing new).
static void test_dense_bias_false_has_only_a_weight(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 7, bias: false}\n    - {type: dense, units: 2}\n", shape_1d(5), 3);
    assert_int_equal(m.g.layers[0].nparams, 1);
    assert_string_equal(m.g.layers[0].params[0].name, "weight");
    assert_int_equal(m.g.layers[0].params[0].size, 35);
    assert_int_equal(m.g.layers[1].nparams, 2);
    assert_int_equal(m.g.nparams, 35 + 7 * 2 + 2);
    tl_model_free(&m);
}

// ---- softmax cross-entropy ------------------------------------------------------------------

typedef struct {
    int64_t n, c;
    float *logits;
    const int32_t *labels;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *x = p;
    return backend_cpu()->softmax_xent(x->n, x->c, x->logits, x->labels, NULL, NULL);
}

static void test_softmax_xent_gradient(void **state)
{
    (void)state;
    enum { N = 3, C = 5 };
    float logits[N * C], d[N * C];
    double num[N * C];
    const int32_t labels[N] = {0, 4, 2};
    tl_fill_uniform(logits, N * C, -3.0f, 3.0f, 10);
    for (int i = 0; i < N * C; i++) d[i] = NAN;  // must be overwritten
    int64_t correct = -1;
    double l = backend_cpu()->softmax_xent(N, C, logits, labels, d, &correct);
    assert_true(isfinite(l) && l > 0.0);
    assert_true(correct >= 0 && correct <= N);
    xent_ctx c = {N, C, logits, labels};
    assert_true(fabs(xent_loss(&c) - l) < 1e-12);  // dlogits NULL gives the same loss
    tl_fd_grad(logits, N * C, 1e-3f, xent_loss, &c, num);
    double mx = tl_check_grad("dL/dlogits", d, num, N * C, 5e-3, 1e-5);
    assert_true(mx > 1e-2);
    // Each row of (p - onehot) / N sums to zero.
    for (int i = 0; i < N; i++) {
        double s = 0.0;
        for (int j = 0; j < C; j++) s += d[i * C + j];
        assert_true(fabs(s) < 1e-6);
    }
}

static void test_softmax_xent_hand_computed(void **state)
{
    (void)state;
    // Row 0: logits (1, 2, 3), label 2: loss = log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2)
    //        p = (0.09003057317038046, 0.24472847105479767, 0.6652409557748219); argmax 2: a hit.
    // Row 1: logits (2, 0, 0), label 1: loss = log(e^2 + 2) = 2.2395447662218846
    //        p = (0.7869860421615985, 0.10650697891920075, 0.10650697891920075); argmax 0: a miss.
    const float logits[6] = {1, 2, 3, 2, 0, 0};
    const int32_t labels[2] = {2, 1};
    float d[6];
    int64_t correct = -1;
    double l = backend_cpu()->softmax_xent(2, 3, logits, labels, d, &correct);
    const double l0 = 0.4076059644443804, l1 = 2.2395447662218846;
    assert_true(fabs(l - (l0 + l1) / 2.0) < 1e-9);
    assert_int_equal(correct, 1);
    const double want[6] = {0.09003057317038046 / 2,        0.24472847105479767 / 2,
                            (0.6652409557748219 - 1.0) / 2, 0.7869860421615985 / 2,
                            (0.10650697891920075 - 1.0) / 2, 0.10650697891920075 / 2};
    for (int i = 0; i < 6; i++)
        if (fabs(d[i] - want[i]) > 1e-6) fail_msg("dlogits[%d] = %.9g, want %.9g", i, d[i], want[i]);
    // One row alone: the mean over N = 1.
    assert_true(fabs(backend_cpu()->softmax_xent(1, 3, logits, labels, NULL, NULL) - l0) < 1e-9);
}

static void test_softmax_xent_large_logits_stay_finite(void **state)
{
    (void)state;
    const float logits[6] = {1000, 0, -1000, -1000, 0, 1000};
    const int32_t labels[2] = {0, 1};
    float d[6];
    int64_t correct = 0;
    double l = backend_cpu()->softmax_xent(2, 3, logits, labels, d, &correct);
    // Row 0 is certain and right (loss 0); row 1 is certain and wrong by 1000.
    assert_true(fabs(l - 500.0) < 1e-6);
    assert_int_equal(correct, 1);
    for (int i = 0; i < 6; i++) assert_true(isfinite(d[i]));
    assert_true(fabs(d[0]) < 1e-6 && fabs(d[4] + 0.5) < 1e-6 && fabs(d[5] - 0.5) < 1e-6);
}

// ---- dense kernels against naive loops -------------------------------------------------------

static void naive_dense(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, double *y)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < u; j++) {
            double s = b ? b[j] : 0.0;
            for (int64_t q = 0; q < k; q++) s += (double)x[i * k + q] * (double)w[j * k + q];
            y[i * u + j] = s;
        }
}

static void check_dense_forward(int64_t n, int64_t k, int64_t u, int with_bias)
{
    float *x = malloc(sizeof(float) * (size_t)(n * k)), *w = malloc(sizeof(float) * (size_t)(u * k));
    float *b = malloc(sizeof(float) * (size_t)u), *y = malloc(sizeof(float) * (size_t)(n * u));
    double *ref = malloc(sizeof(double) * (size_t)(n * u));
    assert_true(x && w && b && y && ref);
    tl_fill_uniform(x, n * k, -1, 1, 20);
    tl_fill_uniform(w, u * k, -1, 1, 21);
    tl_fill_uniform(b, u, -1, 1, 22);
    for (int64_t i = 0; i < n * u; i++) y[i] = 1e30f;  // stale output must be overwritten, not added to
    backend_cpu()->dense_forward(n, k, u, x, w, with_bias ? b : NULL, y);
    naive_dense(n, k, u, x, w, with_bias ? b : NULL, ref);
    for (int64_t i = 0; i < n * u; i++) {
        double tol = 1e-5 * (1.0 + sqrt((double)k));
        if (!(fabs(y[i] - ref[i]) <= tol))
            fail_msg("dense_forward n=%lld k=%lld u=%lld bias=%d: y[%lld] = %.7g, naive %.7g", (long long)n,
                     (long long)k, (long long)u, with_bias, (long long)i, y[i], ref[i]);
    }
    free(ref);
    free(y);
    free(b);
    free(w);
    free(x);
}

static void test_dense_forward_matches_naive_loops(void **state)
{
    (void)state;
    check_dense_forward(3, 5, 7, 1);
    check_dense_forward(3, 5, 7, 0);
    check_dense_forward(1, 1, 1, 1);
    check_dense_forward(33, 65, 17, 1);  // past BLAS's small-matrix paths
    check_dense_forward(33, 65, 17, 0);
}

// The backward contract the graph relies on: dW and db overwritten, dx accumulated.
static void test_dense_backward_overwrites_dw_and_accumulates_dx(void **state)
{
    (void)state;
    enum { N = 3, K = 5, U = 7 };
    float x[N * K], w[U * K], dy[N * U], dw[U * K], db[U], dx[N * K];
    tl_fill_uniform(x, N * K, -1, 1, 30);
    tl_fill_uniform(w, U * K, -1, 1, 31);
    tl_fill_uniform(dy, N * U, -1, 1, 32);
    for (int i = 0; i < U * K; i++) dw[i] = 1e30f;
    for (int i = 0; i < U; i++) db[i] = 1e30f;
    for (int i = 0; i < N * K; i++) dx[i] = 0.5f;
    backend_cpu()->dense_backward(N, K, U, x, w, dy, dw, db, dx);
    for (int j = 0; j < U; j++) {
        double sb = 0.0;
        for (int i = 0; i < N; i++) sb += dy[i * U + j];
        assert_true(fabs(db[j] - sb) < 1e-5);
        for (int q = 0; q < K; q++) {
            double s = 0.0;
            for (int i = 0; i < N; i++) s += (double)dy[i * U + j] * x[i * K + q];
            assert_true(fabs(dw[j * K + q] - s) < 1e-5);
        }
    }
    for (int i = 0; i < N; i++)
        for (int q = 0; q < K; q++) {
            double s = 0.5;
            for (int j = 0; j < U; j++) s += (double)dy[i * U + j] * w[j * K + q];
            assert_true(fabs(dx[i * K + q] - s) < 1e-5);
        }
    // dx NULL (the layer reads the model input) is allowed; dW is the same.
    float dw2[U * K];
    backend_cpu()->dense_backward(N, K, U, x, w, dy, dw2, NULL, NULL);
    assert_memory_equal(dw, dw2, sizeof dw);
}

static void test_act_backward_accumulates(void **state)
{
    (void)state;
    const gl_act acts[] = {ACT_RELU, ACT_LEAKY_RELU, ACT_TANH, ACT_SIGMOID, ACT_GELU};
    float x[9], dy[9], a[9], b[9];
    tl_fill_away_from_zero(x, 9, 0.05f, 2.0f, 40);
    tl_fill_uniform(dy, 9, -1, 1, 41);
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        for (int i = 0; i < 9; i++) a[i] = 0.0f, b[i] = 3.0f;
        backend_cpu()->act_backward(acts[k], 0.3f, 9, x, dy, a);
        backend_cpu()->act_backward(acts[k], 0.3f, 9, x, dy, b);
        for (int i = 0; i < 9; i++)
            if (fabsf(b[i] - (a[i] + 3.0f)) > 1e-6f) fail_msg("act %d: dx[%d] not accumulated", (int)k, i);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_layer_kind_passes_gradcheck),
        cmocka_unit_test(test_dense_bias_false_has_only_a_weight),
        cmocka_unit_test(test_softmax_xent_gradient),
        cmocka_unit_test(test_softmax_xent_hand_computed),
        cmocka_unit_test(test_softmax_xent_large_logits_stay_finite),
        cmocka_unit_test(test_dense_forward_matches_naive_loops),
        cmocka_unit_test(test_dense_backward_overwrites_dw_and_accumulates_dx),
        cmocka_unit_test(test_act_backward_accumulates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
