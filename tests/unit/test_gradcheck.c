// test_gradcheck.c: every registered layer kind's backward against finite differences of its
// forward, the losses' gradients and values, and the dense kernels against naive loops.
//
// The layer check is generic: it walks the registry (layer_kind_count/layer_kind_at), so a new
// kind is checked the moment it is registered. A kind with an entry in `configs` below is
// checked with each of its entries; a kind without one is checked with its defaults on a flat
// [5] input, and if that cannot be built (a required key, several inputs, a spatial input) the
// test fails until someone adds an entry. Stale entries (no such kind) fail too.
//
// Model per configuration:  input -> x: leaky_relu(slope 1) -> <layer(s) under test>
// leaky_relu with slope 1 is the identity, and unlike the model input (whose grad is NULL by
// design) its output has a gradient buffer, so x.grad is what the layers under test hand back.
// L = sum(out * R) for a fixed random R, so dL/dout = R; forward runs in training mode.
#include "testlib.h"

#include <ctype.h>

#define BATCH 3       // rows run
#define CAPACITY 4    // rows planned: the spare row holds NaN and must never be read
#define EPS 1e-2f
#define RTOL 2e-2
#define ATOL 2e-3

typedef struct {
    const char *kind;    // layer kind name
    const char *layers;  // the layers under test (the last one, of this kind, is the model output);
                         // "x" names the identity layer in front of them
    gl_shape input;      // per-sample model input shape; ndim 0: [5]
    float eps;           // finite-difference step; 0: EPS (max_pool needs one below the input spacing)
} gc_config;

#define FLAT {0, {0}}
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
#define S4(a, b, c, d) {4, {a, b, c, d}}
#define TOK(t, f) {.ndim = 2, .d = {t, f}, .tokens = true}  // tokens [T, D]

// Configurations by kind name: odd sizes, non-default keys, 2D and 3D maps.
static const gc_config configs[] = {
    {"dense", "    - {type: dense, units: 7}\n", FLAT, 0},
    {"dense", "    - {type: dense, units: 7, bias: false}\n", FLAT, 0},
    {"dense", "    - {type: dense, units: 1}\n", S2(2, 3), 0},  // flattens its input
    {"relu", "    - {type: relu}\n", S3(2, 3, 4), 0},
    {"leaky_relu", "    - {type: leaky_relu, slope: 0.2}\n", FLAT, 0},
    {"leaky_relu", "    - {type: leaky_relu}\n", FLAT, 0},
    {"tanh", "    - {type: tanh}\n", FLAT, 0},
    {"sigmoid", "    - {type: sigmoid}\n", FLAT, 0},
    {"gelu", "    - {type: gelu}\n", FLAT, 0},
    {"max_pool", "    - {type: max_pool}\n", S3(2, 5, 4), 1e-3f},
    {"max_pool", "    - {type: max_pool, kernel: 3, stride: 2, padding: 1}\n", S3(3, 5, 5), 1e-3f},
    {"max_pool", "    - {type: max_pool, kernel: 2, stride: 1}\n", S4(2, 3, 3, 4), 1e-3f},
    {"avg_pool", "    - {type: avg_pool, kernel: 3, stride: 2, padding: 1}\n", S3(2, 5, 4), 0},
    {"avg_pool", "    - {type: avg_pool}\n", S4(2, 3, 4, 5), 0},
    {"global_avg_pool", "    - {type: global_avg_pool}\n", S3(3, 2, 5), 0},
    {"global_avg_pool", "    - {type: global_avg_pool}\n", S4(2, 3, 2, 3), 0},
    {"batch_norm", "    - {type: batch_norm}\n", S1(3), 0},
    {"batch_norm", "    - {type: batch_norm}\n", S3(3, 2, 5), 0},
    {"batch_norm", "    - {type: batch_norm, affine: false, eps: 0.001}\n", S3(2, 3, 4), 0},
    {"batch_norm", "    - {type: batch_norm, momentum: 0.5}\n", S4(2, 2, 3, 2), 0},
    {"layer_norm", "    - {type: layer_norm}\n", FLAT, 0},
    {"layer_norm", "    - {type: layer_norm}\n", S3(2, 3, 4), 0},
    {"layer_norm", "    - {type: layer_norm, affine: false}\n", S1(7), 0},
    {"dropout", "    - {type: dropout, rate: 0.3}\n", FLAT, 0},
    {"dropout", "    - {type: dropout}\n", S3(2, 3, 4), 0},
    {"scale", "    - {type: scale, factor: -1.5}\n", FLAT, 0},
    {"flatten", "    - {type: flatten}\n", S3(2, 3, 4), 0},
    {"add", "    - {type: dense, units: 5, name: y, inputs: x}\n    - {type: add, inputs: [x, y, x]}\n", FLAT, 0},
    {"add", "    - {type: conv, filters: 2, padding: same, name: y, inputs: x}\n    - {type: add, inputs: [x, y]}\n",
     S3(2, 3, 4), 0},
    {"concat", "    - {type: tanh, name: y, inputs: x}\n    - {type: concat, inputs: [y, x, y]}\n", FLAT, 0},
    {"concat", "    - {type: conv, filters: 3, kernel: 1, name: y, inputs: x}\n    - {type: concat, inputs: [x, y]}\n",
     S3(2, 3, 4), 0},
    {"upsample", "    - {type: upsample}\n", S3(2, 3, 4), 0},
    {"upsample", "    - {type: upsample, factor: 3}\n", S4(2, 2, 1, 2), 0},
    {"conv", "    - {type: conv, filters: 4}\n", S3(3, 6, 5), 0},
    {"conv", "    - {type: conv, filters: 2, stride: 2, padding: same, bias: false}\n", S3(3, 7, 5), 0},
    {"conv", "    - {type: conv, filters: 6, kernel: 2, dilation: 2, groups: 2, padding: 1}\n", S3(4, 5, 5), 0},
    {"conv", "    - {type: conv, filters: 3, kernel: 2, stride: 2, padding: 1}\n", S4(2, 3, 4, 5), 0},
    {"conv_transpose", "    - {type: conv_transpose, filters: 2, kernel: 3, stride: 2, padding: 1, output_padding: 1}\n",
     S3(3, 3, 4), 0},
    {"conv_transpose", "    - {type: conv_transpose, filters: 4, groups: 2, bias: false}\n", S3(2, 3, 3), 0},
    {"conv_transpose", "    - {type: conv_transpose, filters: 3, kernel: 2, dilation: 2}\n", S3(2, 3, 3), 0},
    {"conv_transpose", "    - {type: conv_transpose, filters: 2, kernel: 2, stride: 2}\n", S4(2, 2, 3, 2), 0},
    // token layers (transformers)
    {"patch_embed", "    - {type: patch_embed, patch: 2, dim: 3}\n", S3(2, 4, 6), 0},
    {"patch_embed", "    - {type: patch_embed, patch: 3, dim: 2, bias: false}\n", S3(1, 3, 6), 0},
    {"patch_embed", "    - {type: patch_embed, patch: 2, dim: 4}\n", S4(2, 2, 4, 2), 0},
    {"pos_embed", "    - {type: pos_embed}\n", TOK(4, 3), 0},
    {"pos_embed", "    - {type: pos_embed, class_token: true}\n", TOK(3, 5), 0},
    {"pos_embed", "    - {type: patch_embed, patch: 2, dim: 3}\n    - {type: pos_embed, class_token: true}\n",
     S4(1, 2, 2, 4), 0},
    {"layer_norm", "    - {type: layer_norm}\n", TOK(4, 5), 0},
    {"layer_norm", "    - {type: layer_norm, affine: false}\n", TOK(3, 4), 0},
    {"dense", "    - {type: dense, units: 5}\n", TOK(4, 3), 0},
    {"dense", "    - {type: dense, units: 2, bias: false}\n", TOK(3, 4), 0},
    {"flatten", "    - {type: flatten}\n", TOK(3, 4), 0},
    {"drop_path", "    - {type: drop_path, rate: 0.4}\n", TOK(3, 4), 0},  // seed 0, step 0: drops and keeps
    {"drop_path", "    - {type: drop_path, rate: 0.25}\n", S3(2, 3, 2), 0},
    {"token_pool", "    - {type: token_pool}\n", TOK(4, 3), 0},
    {"token_pool", "    - {type: token_pool, mode: class}\n", TOK(3, 4), 0},
    {"token_pool", "    - {type: pos_embed, class_token: true}\n    - {type: token_pool}\n", TOK(3, 4), 0},
    {"unpatch",
     "    - {type: patch_embed, patch: 2, dim: 4}\n    - {type: dense, units: 3}\n"
     "    - {type: unpatch, channels: 2}\n",
     S3(2, 4, 6), 0},
    {"unpatch", "    - {type: patch_embed, patch: 2, dim: 3}\n    - {type: unpatch, channels: 3, bias: true}\n",
     S4(1, 4, 2, 2), 0},
    {"attention", "    - {type: attention, heads: 2}\n", {2, {5, 4}, .tokens = true}, 0},
    {"attention", "    - {type: attention, heads: 3, qkv_bias: false, causal: true}\n", {2, {7, 6}, .tokens = true}, 0},
    {"attention", "    - {type: attention, heads: 1, dropout: 0.3, causal: true, init: pytorch}\n",
     {2, {6, 3}, .tokens = true}, 0},
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

// Magnitudes evenly spaced over [0.05, 1] in random order, with random signs: away from the kinks
// of relu-like functions, and no two values closer than 0.95 / (n - 1), so a max_pool window's
// winner does not change under a small enough step.
static void fill_distinct(float *x, int64_t n, uint64_t stream)
{
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
    assert_non_null(perm);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(TL_SEED, RNG_TEST, stream, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) {
        float mag = 0.05f + 0.95f * (float)perm[i] / (float)(n > 1 ? n - 1 : 1);
        x[i] = rng_uniform(TL_SEED, RNG_TEST, stream + 1, (uint64_t)i) < 0.5f ? -mag : mag;
    }
    free(perm);
}

// Copies s to dst with every whole word `from` (not part of a longer name) replaced by `to`.
static void replace_word(char *dst, size_t len, const char *s, const char *from, const char *to)
{
    size_t k = 0, fl = strlen(from);
    dst[0] = 0;
    for (const char *p = s; *p && k + 1 < len;) {
        int word = !strncmp(p, from, fl) && (p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
                   !(isalnum((unsigned char)p[fl]) || p[fl] == '_');
        if (word) {
            k += (size_t)snprintf(dst + k, len - k, "%s", to);
            p += fl;
        } else {
            dst[k++] = *p++;
            dst[k] = 0;
        }
    }
}

// Checks one configuration of kind k; what names it in failure messages. direct: without the
// identity layer, so the layers under test read the model input (whose grad is NULL) instead of
// x; only the parameter gradients are checked then.
static void gradcheck_config(const layer_kind *k, const char *layers_under_test, gl_shape input, float eps,
                             const char *what, int direct)
{
    char layers[1024];
    if (direct) replace_word(layers, sizeof layers, layers_under_test, "x", "input");
    else snprintf(layers, sizeof layers, "%s%s", prefix, layers_under_test);
    if (input.ndim == 0) input = shape_1d(5);
    if (eps == 0) eps = EPS;
    tl_model m;
    char *errors = NULL;
    // Every output keeps its own gradient: shared by lifetime, x's would be the model output's
    // when two or more layers follow it, and the garbage written below would overwrite R (a
    // view's is its input's all the same: R is written after the garbage).
    if (tl_model_try_keep(&m, layers, input, CAPACITY, backend_cpu(), true, &errors) != 0) {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", errors);
        free(errors);
        fail_msg("%s: the gradient-check model does not build; add or fix an entry for '%s' in "
                 "test_gradcheck.c's configs[]:\n%s",
                 what, k->name, copy);
    }
    gl_graph *g = &m.g;
    if (!direct) assert_int_equal(tl_layer(g, "x"), 0);
    if (g->layers[g->nlayers - 1].kind != k) fail_msg("%s: the last layer is not a %s", what, k->name);
    gl_tensor *x = direct ? &g->input : &g->layers[0].out;
    gl_tensor *out = graph_output(g);

    // Data: distinct inputs away from kinks, spare row NaN; params uniform in [-1, 1).
    fill_distinct(g->input.data, BATCH * g->input.size, 1);
    for (int64_t i = BATCH * g->input.size; i < CAPACITY * g->input.size; i++) g->input.data[i] = NAN;
    tl_fill_uniform(g->params, g->nparams, -1.0f, 1.0f, 3);
    float *r = malloc(sizeof(float) * (size_t)(BATCH * out->size));
    assert_non_null(r);
    tl_fill_uniform(r, BATCH * out->size, -1.0f, 1.0f, 4);
    gc_ctx c = {g, r};

    // Analytic: forward, out.grad = R, backward.
    double l0 = loss_of(&c);
    if (!isfinite(l0) || graph_first_nonfinite(g, BATCH) >= 0)
        fail_msg("%s: non-finite forward (did the spare row beyond n leak into rows [0, n)?)", what);
    // Garbage in every gradient a layer must overwrite or that graph_backward must clear, then R
    // (a view's input gradient is its output's: graph_fuse_views).
    for (int64_t i = 0; i < g->nparams; i++) g->grads[i] = 1e6f;
    for (int i = 0; i < g->nlayers - 1; i++)
        for (int64_t j = 0; j < BATCH * g->layers[i].out.size; j++) g->layers[i].out.grad[j] = -1e6f;
    memcpy(out->grad, r, sizeof(float) * (size_t)(BATCH * out->size));
    graph_backward(g, BATCH);

    int64_t nx = BATCH * x->size;
    float *dx = malloc(sizeof(float) * (size_t)nx);
    float *dp = malloc(sizeof(float) * (size_t)(g->nparams ? g->nparams : 1));
    double *num = malloc(sizeof(double) * (size_t)(nx > g->nparams ? nx : g->nparams));
    assert_true(dx && dp && num);
    memcpy(dp, g->grads, sizeof(float) * (size_t)g->nparams);
    char name[256];
    double mx;
    if (direct) {
        assert_null(g->input.grad);
    } else {
        // dL/dx: x is the identity of the input, so perturbing the input perturbs x exactly.
        memcpy(dx, x->grad, sizeof(float) * (size_t)nx);
        tl_fd_grad(g->input.data, nx, eps, loss_of, &c, num);
        snprintf(name, sizeof name, "%s: dL/dx", what);
        mx = tl_check_grad(name, dx, num, nx, RTOL, ATOL);
        if (mx < 1e-3) fail_msg("%s: the loss does not depend on the layers' input (max |dL/dx| = %g)", what, mx);
    }

    // Every parameter tensor of every layer (x has none).
    int64_t seen = 0;
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            const gl_param *pp = &l->params[p];
            assert_true(pp->offset >= 0 && pp->offset + pp->size <= g->nparams);
            tl_fd_grad(g->params + pp->offset, pp->size, eps, loss_of, &c, num);
            snprintf(name, sizeof name, "%s: %s.%s", what, l->cfg->name, pp->name);
            mx = tl_check_grad(name, dp + pp->offset, num, pp->size, RTOL, ATOL);
            if (mx < 1e-3) fail_msg("%s: the loss does not depend on it", name);
            seen += pp->size;
        }
    }
    assert_int_equal(seen, g->nparams);
    // The finite differences left the state as it was: the same loss again.
    if (!(fabs(loss_of(&c) - l0) <= 1e-9 * (1.0 + fabs(l0)))) fail_msg("%s: forward is not repeatable", what);

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
            gradcheck_config(k, configs[e].layers, configs[e].input, configs[e].eps, what, 0);
            snprintf(what, sizeof what, "%s (configs[%d], reading the model input)", k->name, e);
            gradcheck_config(k, configs[e].layers, configs[e].input, configs[e].eps, what, 1);
            n++;
        }
        if (n == 0) {
            char layer[128], what[128];
            snprintf(layer, sizeof layer, "    - {type: %s}\n", k->name);
            snprintf(what, sizeof what, "%s (no configs[] entry: defaults on a [5] input)", k->name);
            gradcheck_config(k, layer, (gl_shape){0, {0}}, 0, what, 0);
            gradcheck_config(k, layer, (gl_shape){0, {0}}, 0, what, 1);
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

// ---- losses ---------------------------------------------------------------------------------

typedef struct {
    int64_t n, c, s;
    float *logits;
    const int32_t *labels;
    const float *weights;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *x = p;
    return backend_cpu()->softmax_xent(x->n, x->c, x->s, x->logits, x->labels, x->weights, NULL);
}

// Gradient check of one softmax_xent configuration; logits (n, c, s) random in [-3, 3).
static void check_xent(int64_t n, int64_t c, int64_t s, const int32_t *labels, const float *weights)
{
    int64_t count = n * c * s;
    float *logits = malloc(sizeof(float) * (size_t)count), *d = malloc(sizeof(float) * (size_t)count);
    double *num = malloc(sizeof(double) * (size_t)count);
    assert_true(logits && d && num);
    tl_fill_uniform(logits, count, -3.0f, 3.0f, (uint64_t)(10 + s));
    for (int64_t i = 0; i < count; i++) d[i] = NAN;  // must be overwritten
    double l = backend_cpu()->softmax_xent(n, c, s, logits, labels, weights, d);
    assert_true(isfinite(l) && l > 0.0);
    xent_ctx x = {n, c, s, logits, labels, weights};
    assert_true(fabs(xent_loss(&x) - l) < 1e-12);  // dlogits NULL gives the same loss
    tl_fd_grad(logits, count, 1e-3f, xent_loss, &x, num);
    char what[64];
    snprintf(what, sizeof what, "dL/dlogits (n=%lld c=%lld s=%lld%s)", (long long)n, (long long)c, (long long)s,
             weights ? ", weighted" : "");
    double mx = tl_check_grad(what, d, num, count, 5e-3, 1e-5);
    assert_true(mx > 1e-2);
    // At each position the gradient over the channels sums to zero.
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < s; p++) {
            double sum = 0.0;
            for (int64_t j = 0; j < c; j++) sum += d[(i * c + j) * s + p];
            assert_true(fabs(sum) < 1e-6);
        }
    free(num);
    free(d);
    free(logits);
}

static void test_softmax_xent_gradient(void **state)
{
    (void)state;
    const int32_t labels[3] = {0, 4, 2};
    check_xent(3, 5, 1, labels, NULL);
    // Masks: (N, C, S) logits, (N, S) labels, class weights.
    const int32_t mask[2 * 5] = {0, 1, 2, 2, 1, 0, 0, 2, 1, 1};
    const float w[3] = {0.5f, 2.0f, 1.0f};
    check_xent(2, 3, 5, mask, NULL);
    check_xent(2, 3, 5, mask, w);
}

static void test_softmax_xent_hand_computed(void **state)
{
    (void)state;
    // Row 0: logits (1, 2, 3), label 2: loss = log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2)
    //        p = (0.09003057317038046, 0.24472847105479767, 0.6652409557748219)
    // Row 1: logits (2, 0, 0), label 1: loss = log(e^2 + 2) = 2.2395447662218846
    //        p = (0.7869860421615985, 0.10650697891920075, 0.10650697891920075)
    const float logits[6] = {1, 2, 3, 2, 0, 0};
    const int32_t labels[2] = {2, 1};
    const double l0 = 0.4076059644443804, l1 = 2.2395447662218846;
    const double p[6] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219,
                         0.7869860421615985,  0.10650697891920075, 0.10650697891920075};
    float d[6];
    double l = backend_cpu()->softmax_xent(2, 3, 1, logits, labels, NULL, d);
    assert_true(fabs(l - (l0 + l1) / 2.0) < 1e-9);
    for (int i = 0; i < 6; i++) {
        double want = (p[i] - (i == 2 || i == 4 ? 1.0 : 0.0)) / 2.0;  // (p - onehot) / N
        if (fabs(d[i] - want) > 1e-6) fail_msg("dlogits[%d] = %.9g, want %.9g", i, d[i], want);
    }
    // One row alone: the mean over N = 1.
    assert_true(fabs(backend_cpu()->softmax_xent(1, 3, 1, logits, labels, NULL, NULL) - l0) < 1e-9);
    // Class weights w = (1, 3, 1): sum w[y] nll / sum w[y] = (1 l0 + 3 l1) / 4 (PyTorch's
    // CrossEntropyLoss(weight=w)); the gradient is w[y] (p - onehot) / sum w[y].
    const float w[3] = {1, 3, 1};
    l = backend_cpu()->softmax_xent(2, 3, 1, logits, labels, w, d);
    assert_true(fabs(l - (l0 + 3 * l1) / 4.0) < 1e-9);
    for (int i = 0; i < 6; i++) {
        double wy = i < 3 ? 1.0 : 3.0;
        double want = wy * (p[i] - (i == 2 || i == 4 ? 1.0 : 0.0)) / 4.0;
        if (fabs(d[i] - want) > 1e-6) fail_msg("weighted dlogits[%d] = %.9g, want %.9g", i, d[i], want);
    }
    // The same two rows as one sample with S = 2 positions: channels are strided by S.
    const float spatial[6] = {1, 2, 2, 0, 3, 0};  // (C=3, S=2): position 0 is row 0, position 1 row 1
    assert_true(fabs(backend_cpu()->softmax_xent(1, 3, 2, spatial, labels, NULL, d) - (l0 + l1) / 2.0) < 1e-9);
    assert_true(fabs(d[4] - (p[2] - 1.0) / 2.0) < 1e-6 && fabs(d[3] - (p[4] - 1.0) / 2.0) < 1e-6);
}

static void test_softmax_xent_large_logits_stay_finite(void **state)
{
    (void)state;
    const float logits[6] = {1000, 0, -1000, -1000, 0, 1000};
    const int32_t labels[2] = {0, 1};
    float d[6];
    double l = backend_cpu()->softmax_xent(2, 3, 1, logits, labels, NULL, d);
    // Row 0 is certain and right (loss 0); row 1 is certain and wrong by 1000.
    assert_true(fabs(l - 500.0) < 1e-6);
    for (int i = 0; i < 6; i++) assert_true(isfinite(d[i]));
    assert_true(fabs(d[0]) < 1e-6 && fabs(d[4] + 0.5) < 1e-6 && fabs(d[5] - 0.5) < 1e-6);
}

typedef struct {
    int kind;
    int64_t count;
    float *pred;
    const float *target;
} reg_ctx;

static double reg_loss(void *p)
{
    reg_ctx *r = p;
    return backend_cpu()->regression_loss(r->kind, r->count, r->pred, r->target, NULL);
}

static void test_regression_losses(void **state)
{
    (void)state;
    // By hand: pred (1, 2, 3), target (0, 2, 5): errors (1, 0, -2).
    const float pred[3] = {1, 2, 3}, target[3] = {0, 2, 5};
    float d[3];
    assert_true(fabs(backend_cpu()->regression_loss(LOSS_MSE, 3, pred, target, d) - 5.0 / 3.0) < 1e-12);
    assert_true(fabsf(d[0] - 2.0f / 3.0f) < 1e-7f && d[1] == 0.0f && fabsf(d[2] + 4.0f / 3.0f) < 1e-7f);
    assert_true(fabs(backend_cpu()->regression_loss(LOSS_L1, 3, pred, target, d) - 1.0) < 1e-12);
    assert_true(fabsf(d[0] - 1.0f / 3.0f) < 1e-7f && d[1] == 0.0f && fabsf(d[2] + 1.0f / 3.0f) < 1e-7f);
    // Finite differences, with errors kept away from L1's kink.
    enum { M = 11 };
    float p[M], t[M], g[M];
    double num[M];
    tl_fill_uniform(t, M, -1, 1, 90);
    tl_fill_away_from_zero(p, M, 0.05f, 1.0f, 91);
    for (int i = 0; i < M; i++) p[i] += t[i];
    const int kinds[2] = {LOSS_MSE, LOSS_L1};
    for (int k = 0; k < 2; k++) {
        backend_cpu()->regression_loss(kinds[k], M, p, t, g);
        reg_ctx r = {kinds[k], M, p, t};
        tl_fd_grad(p, M, 1e-3f, reg_loss, &r, num);
        tl_check_grad(k ? "L1 dpred" : "MSE dpred", g, num, M, 5e-3, 1e-5);
    }
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
        cmocka_unit_test(test_regression_losses),
        cmocka_unit_test(test_dense_forward_matches_naive_loops),
        cmocka_unit_test(test_dense_backward_overwrites_dw_and_accumulates_dx),
        cmocka_unit_test(test_act_backward_accumulates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
