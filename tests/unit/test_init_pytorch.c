// test_init_pytorch.c: init: pytorch draws what PyTorch's nn.Linear, nn.Conv2d and
// nn.ConvTranspose2d draw by default: weight ~ U(-b, b), b = gain * sqrt(3 / fan_in) with gain =
// sqrt(2 / (1 + a^2)), a = sqrt(5) (torch.nn.init.kaiming_uniform_), fan_in = weight.shape[1] *
// kernel taps (so filters/groups for a transposed conv), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
// Checked on big layers: every value within the bound, the largest near it, the mean near 0 and
// the variance near b^2 / 3. The default init (he_normal, zero bias) is unchanged.
#include "testlib.h"

#include <math.h>

#include "galley/graph.h"

typedef struct {
    double min, max, mean, var;
} stats;

static stats stats_of(const float *x, int64_t n) {
    stats s = {INFINITY, -INFINITY, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        s.min = fmin(s.min, x[i]), s.max = fmax(s.max, x[i]);
        s.mean += x[i];
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) s.var += (x[i] - s.mean) * (x[i] - s.mean);
    s.var /= (double)(n - 1);
    return s;
}

// PyTorch's fan_in of a weight: shape[1] times the product of the kernel dims.
static double torch_fan_in(const gl_param *p) {
    double f = (double)p->shape.d[1];
    for (int k = 2; k < p->shape.ndim; k++) f *= (double)p->shape.d[k];
    return f;
}

// x holds n draws of U(-b, b): all inside, the extremes near b, mean and variance as uniform's.
static void check_uniform(const char *what, const float *x, int64_t n, double b) {
    stats s = stats_of(x, n);
    double tol = 6.0 * b / sqrt(3.0 * (double)n);  // six standard errors of the mean
    if (s.min < -b * (1 + 1e-6) || s.max > b * (1 + 1e-6))
        fail_msg("%s: values in [%g, %g], outside +-%g", what, s.min, s.max, b);
    if (s.max < b * (1 - 20.0 / (double)n) || s.min > -b * (1 - 20.0 / (double)n))
        fail_msg("%s: values in [%g, %g], expected to reach near +-%g (n = %lld)", what, s.min, s.max, b,
                 (long long)n);
    if (fabs(s.mean) > tol) fail_msg("%s: mean %g, expected 0 +- %g", what, s.mean, tol);
    // the sample variance of U(-b, b) has relative standard error 3 sqrt(4 / 45 / n)
    double want = b * b / 3.0, rel = 6.0 * 3.0 * sqrt(4.0 / 45.0 / (double)n);
    if (fabs(s.var / want - 1.0) > rel)
        fail_msg("%s: variance %g, expected %g (b^2/3) within %.1f%%", what, s.var, want, 100 * rel);
}

static void test_pytorch_init_matches_torch_formula(void **state) {
    (void)state;
    tl_model m;
    tl_model_build(&m,
                   "    - {type: conv, name: c, filters: 64, kernel: 5, groups: 2, init: pytorch}\n"
                   "    - {type: conv_transpose, name: t, filters: 48, kernel: 4, groups: 4, init: pytorch}\n"
                   "    - {type: dense, name: d, units: 300, init: pytorch}\n"
                   "    - {type: dense, name: he, units: 200}\n",
                   (gl_shape){3, {32, 8, 8}}, 2);
    graph_init_params(&m.g, 42);
    const struct {
        const char *name;
        double fan_in;  // PyTorch's, worked out by hand
    } want[] = {{"c", 16 * 5 * 5}, {"t", 12 * 4 * 4}, {"d", 48 * 7 * 7}};
    for (int w = 0; w < 3; w++) {
        const layer_t *l = &m.g.layers[tl_layer(&m.g, want[w].name)];
        const gl_param *p = &l->params[0], *bias = &l->params[1];
        assert_int_equal(l->nparams, 2);
        if (torch_fan_in(p) != want[w].fan_in) fail_msg("%s: fan_in %g", want[w].name, torch_fan_in(p));
        double a = sqrt(5.0), gain = sqrt(2.0 / (1.0 + a * a));
        char what[64];
        snprintf(what, sizeof what, "%s weight (fan_in %g)", want[w].name, want[w].fan_in);
        check_uniform(what, m.g.params + p->offset, p->size, gain * sqrt(3.0 / want[w].fan_in));
        // the bias: bounds only (a few dozen values)
        double bb = 1.0 / sqrt(want[w].fan_in);
        stats s = stats_of(m.g.params + bias->offset, bias->size);
        if (s.min < -bb * (1 + 1e-6) || s.max > bb * (1 + 1e-6) || s.max < 0.5 * bb || s.min > -0.5 * bb)
            fail_msg("%s bias in [%g, %g], expected spread over +-%g", want[w].name, s.min, s.max, bb);
    }
    // conv_transpose's fan_in is filters/groups * taps (PyTorch's weight dim 1), not C/groups * taps:
    // its weights reach past the other bound.
    const layer_t *t = &m.g.layers[tl_layer(&m.g, "t")];
    stats st = stats_of(m.g.params + t->params[0].offset, t->params[0].size);
    assert_true(st.max > 1.05 / sqrt(16.0 * 16.0));

    // the default stays he_normal with a zero bias
    const layer_t *he = &m.g.layers[tl_layer(&m.g, "he")];
    stats sh = stats_of(m.g.params + he->params[0].offset, he->params[0].size);
    assert_true(fabs(sh.var / (2.0 / 300.0) - 1.0) < 0.05);
    stats sb = stats_of(m.g.params + he->params[1].offset, he->params[1].size);
    assert_true(sb.min == 0 && sb.max == 0);
    tl_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_init_matches_torch_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
