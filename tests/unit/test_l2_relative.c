// test_l2_relative.c: the relative L2 loss (train.loss: l2_relative, the NERSC SC23 tutorial's
// mean of ||pred - target||_2 / ||target||_2) and its metric: values and gradients by hand, the
// gradient against finite differences for both reductions (train.l2_relative_per sample and
// channel, through loss_init and loss_compute), a zero target (finite, as documented), thread
// count independence, the validation metric, and the recipe keys' validation.
#include "testlib.h"

#include "galley/loss.h"
#include "galley/runlog.h"  // metric_set_from

// A [C, S] field-to-field data set description (no samples: the loss and metrics read shapes).
static gl_dataset field_set(int64_t c, int64_t s)
{
    gl_dataset d;
    memset(&d, 0, sizeof d);
    d.target = TARGET_VALUES;
    d.tshape = (gl_shape){.ndim = 2, .d = {c, s}};
    d.tsize = c * s;
    return d;
}

static void load_recipe(recipe_t *r, const char *train_keys)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, "model:\n  layers:\n    - {type: dense, units: 4}\noptimizer:\n  lr: 0.1\ntrain:\n%s",
             train_keys);
    tl_recipe(r, yaml, 0, NULL);
}

// Two samples [C 2, S 2]. Sample 0: target [[3, 0], [0, 4]] (channel norms 3 and 4, sample 5),
// error [[0, 0], [0, 2]]. Sample 1: target [[1, 0], [0, 1]] (1 and 1, sample sqrt 2), error
// [[1, 0], [0, 0]].
static const float hand_target[8] = {3, 0, 0, 4, 1, 0, 0, 1};
static const float hand_error[8] = {0, 0, 0, 2, 1, 0, 0, 0};

static void test_hand_computed_values_and_gradients(void **state)
{
    (void)state;
    float pred[8], d[8];
    for (int i = 0; i < 8; i++) pred[i] = hand_target[i] + hand_error[i];
    const gl_backend *be = backend_cpu();
    // Per sample: (2/5 + 1/sqrt 2) / 2; d = e / (||e|| ||t|| units).
    double l = be->l2_relative_loss(2, 4, pred, hand_target, d);
    assert_true(fabs(l - (0.4 + 1.0 / sqrt(2.0)) / 2.0) < 1e-12);
    const float want_s[8] = {0, 0, 0, 0.1f, (float)(1.0 / (1.0 * sqrt(2.0) * 2.0)), 0, 0, 0};
    for (int i = 0; i < 8; i++)
        if (fabsf(d[i] - want_s[i]) > 1e-7f) fail_msg("per sample: d[%d] = %g, want %g", i, d[i], want_s[i]);
    // Per channel: (0/3 + 2/4 + 1/1 + 0/1) / 4; unit (0, 1): 2 / (2 * 4 * 4); unit (1, 0): 1 / (1 * 1 * 4).
    l = be->l2_relative_loss(4, 2, pred, hand_target, d);
    assert_true(fabs(l - 0.375) < 1e-12);
    const float want_c[8] = {0, 0, 0, 1.0f / 16, 0.25f, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        if (fabsf(d[i] - want_c[i]) > 1e-7f) fail_msg("per channel: d[%d] = %g, want %g", i, d[i], want_c[i]);
    // Without dpred: the same value.
    assert_true(be->l2_relative_loss(4, 2, pred, hand_target, NULL) == l);
}

typedef struct {
    const gl_loss *loss;
    gl_tensor *out;
    int64_t n;
    const float *target;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    return loss_compute(c->loss, backend_cpu(), c->out, c->n, NULL, c->target, NULL);
}

// Finite differences of loss_compute through loss_init: the recipe's reduction reaches the kernel.
static void check_fd(const char *per, double want_units)
{
    enum { N = 3, C = 2, S = 5, M = N * C * S };
    recipe_t r;
    char keys[128];
    snprintf(keys, sizeof keys, "  loss: l2_relative\n  l2_relative_per: %s\n", per);
    load_recipe(&r, keys);
    gl_dataset d = field_set(C, S);
    gl_loss loss;
    loss_init(&loss, &r, &d);
    assert_int_equal(loss.rel_units, (int64_t)want_units);
    float pred[M], target[M], g[M];
    double num[M];
    tl_fill_uniform(target, M, -1, 1, 301);
    tl_fill_uniform(pred, M, -1, 1, 302);
    gl_tensor out = {.shape = d.tshape, .size = C * S, .data = pred, .grad = g};
    double l = loss_compute(&loss, backend_cpu(), &out, N, NULL, target, g);
    assert_true(isfinite(l) && l > 0.1);
    fd_ctx c = {&loss, &out, N, target};
    tl_fd_grad(pred, M, 1e-3f, fd_loss, &c, num);
    double mx = tl_check_grad(per, g, num, M, 5e-3, 1e-5);
    assert_true(mx > 1e-3);  // not vacuous
    recipe_free(&r);
}

static void test_gradient_matches_finite_differences_per_sample(void **state)
{
    (void)state;
    check_fd("sample", 1);
}

static void test_gradient_matches_finite_differences_per_channel(void **state)
{
    (void)state;
    check_fd("channel", 2);
}

// A target of norm 0 divides by GL_L2_RELATIVE_EPS: finite, never NaN; a zero error has gradient 0.
static void test_zero_target_is_finite(void **state)
{
    (void)state;
    const gl_backend *be = backend_cpu();
    const float zero[4] = {0, 0, 0, 0}, pred[4] = {3e-12f, 0, 0, 4e-12f};
    float d[4] = {9, 9, 9, 9};
    double l = be->l2_relative_loss(1, 4, pred, zero, d);
    // ||pred|| = 5e-12 (floats: to rounding), over the floor 1e-12.
    assert_true(isfinite(l) && fabs(l - 5.0) < 1e-6);
    for (int i = 0; i < 4; i++) assert_true(isfinite(d[i]));
    assert_true(fabsf(d[0] - (float)(3e-12 / (5e-12 * 1e-12))) < 1e-6f * 6e11f);
    // pred == target == 0: ratio 0, gradient 0.
    l = be->l2_relative_loss(2, 2, zero, zero, d);
    assert_true(l == 0.0);
    for (int i = 0; i < 4; i++) assert_true(d[i] == 0.0f);
    // A zero channel next to a normal one: only its own ratio is large.
    const float t[4] = {0, 0, 3, 4}, p[4] = {0, 0, 3, 5};
    l = be->l2_relative_loss(2, 2, p, t, d);
    assert_true(fabs(l - 0.1) < 1e-12);  // (0 + 1/5) / 2
}

// The ratios are reduced in unit order: the same bits for any thread count.
static void test_same_bits_for_any_thread_count(void **state)
{
    (void)state;
    enum { U = 37, L = 301, M = U * L };
    float *p = malloc(sizeof(float) * M), *t = malloc(sizeof(float) * M), *d1 = malloc(sizeof(float) * M),
          *d4 = malloc(sizeof(float) * M);
    tl_fill_uniform(t, M, -2, 2, 311);
    tl_fill_uniform(p, M, -2, 2, 312);
    const gl_backend *be = backend_cpu();
    be->set_threads(1);
    double a = be->l2_relative_loss(U, L, p, t, d1);
    be->set_threads(4);
    double b = be->l2_relative_loss(U, L, p, t, d4);
    be->set_threads(0);
    assert_true(a == b);
    assert_memory_equal(d1, d4, sizeof(float) * M);
    free(p), free(t), free(d1), free(d4);
}

// The metric: tracked when the loss or the target names l2_relative, reduced like the loss,
// summed across parts (packed) and shown in the evaluation line; not tracked otherwise.
static void test_metric_follows_the_recipe(void **state)
{
    (void)state;
    float pred[8];
    for (int i = 0; i < 8; i++) pred[i] = hand_target[i] + hand_error[i];
    gl_dataset d = field_set(2, 2);
    gl_tensor out = {.shape = d.tshape, .size = 4, .data = pred};
    const char *cases[] = {"  loss: l2_relative\n", "  loss: l2_relative\n  l2_relative_per: channel\n",
                           "  loss: mse\n  target: {metric: l2_relative, below: 0.1}\n", "  loss: mse\n"};
    const double want[] = {(0.4 + 1.0 / sqrt(2.0)) / 2.0, 0.375, (0.4 + 1.0 / sqrt(2.0)) / 2.0, NAN};
    for (int k = 0; k < 4; k++) {
        recipe_t r;
        load_recipe(&r, cases[k]);
        gl_metrics m, sum;
        metrics_init_run(&m, &d, &r);
        metrics_init_run(&sum, &d, &r);
        // One sample at a time, on the backend and on the host: the mean over both.
        metrics_add(&m, backend_cpu(), &out, 1, NULL, hand_target, 0.0);
        gl_tensor second = out;
        second.data = pred + 4;
        metrics_add(&m, NULL, &second, 1, NULL, hand_target + 4, 0.0);
        double v[GL_METRICS_PACKED];
        metrics_pack(&m, v);
        metrics_add_packed(&sum, v);
        double got = metrics_value(&sum, METRIC_L2_RELATIVE);
        char line[128];
        metrics_format(&sum, line, sizeof line);
        if (isnan(want[k])) {
            assert_true(isnan(got));
            assert_null(strstr(line, "l2rel"));
        } else {
            if (!(fabs(got - want[k]) < 1e-12)) fail_msg("case %d: metric %.15g, want %.15g", k, got, want[k]);
            assert_non_null(strstr(line, "l2rel"));
        }
        gl_metric_set set;
        metric_set_from(&set, &sum);
        int shown = 0;
        for (int i = 0; i < set.n; i++) shown += set.id[i] == METRIC_L2_RELATIVE;
        assert_int_equal(shown, isnan(want[k]) ? 0 : 1);
        recipe_free(&r);
    }
    assert_string_equal(metrics_name(METRIC_L2_RELATIVE), "l2_relative");
    assert_true(metrics_applies(TARGET_VALUES, METRIC_L2_RELATIVE));
    assert_false(metrics_applies(TARGET_CLASS, METRIC_L2_RELATIVE));
}

// Strict keys: the reduction with another loss, and the target's direction.
static void test_recipe_keys_are_checked(void **state)
{
    (void)state;
    recipe_t r;
    char *errors = NULL, path[64];
    const char *bad = "model:\n  layers:\n    - {type: dense, units: 4}\noptimizer:\n  lr: 0.1\n"
                      "train:\n  loss: mse\n  l2_relative_per: channel\n";
    assert_int_equal(tl_recipe_try(&r, bad, 0, NULL, &errors, path), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:8:20: error: train.l2_relative_per", path);
    if (!strstr(errors, want) || !strstr(errors, "train.loss is l2_relative"))
        fail_msg("want '%s' and the condition in:\n%s", want, errors);
    free(errors);
    recipe_free(&r);
    const char *up = "model:\n  layers:\n    - {type: dense, units: 4}\noptimizer:\n  lr: 0.1\n"
                     "train:\n  loss: l2_relative\n  target: {metric: l2_relative, above: 0.1}\n";
    assert_int_equal(tl_recipe_try(&r, up, 0, NULL, &errors, NULL), -1);
    if (!strstr(errors, "l2_relative improves downwards")) fail_msg("unexpected errors:\n%s", errors);
    free(errors);
    recipe_free(&r);
    load_recipe(&r, "  loss: l2_relative\n  l2_relative_per: channel\n");
    assert_int_equal(r.train.loss, LOSS_L2_RELATIVE);
    assert_int_equal(r.train.l2_relative_per, L2REL_PER_CHANNEL);
    recipe_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed_values_and_gradients),
        cmocka_unit_test(test_gradient_matches_finite_differences_per_sample),
        cmocka_unit_test(test_gradient_matches_finite_differences_per_channel),
        cmocka_unit_test(test_zero_target_is_finite),
        cmocka_unit_test(test_same_bits_for_any_thread_count),
        cmocka_unit_test(test_metric_follows_the_recipe),
        cmocka_unit_test(test_recipe_keys_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
