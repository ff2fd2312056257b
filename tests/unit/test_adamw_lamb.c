// test_adamw_lamb.c: AdamW and LAMB against a double-precision reference written here from the
// formulas (torch.optim.AdamW; You et al. 2019 / apex FusedLAMB), on a dense layer whose two
// parameter tensors (weight, bias) have very different scales; global-norm clipping as
// torch.nn.utils.clip_grad_norm_; and bitwise independence of the thread count.
#include "testlib.h"

#include "galley/optim.h"

// |got - want| <= tol in double (cmocka's assert_float_equal rounds to float first).
static void near_at(double got, double want, double tol, const char *expr, int line)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("line %d: %s = %.12g, expected %.12g (tolerance %.3g)", line, expr, got, want, tol);
}
#define assert_near(got, want, tol) near_at((got), (want), (tol), #got, __LINE__)

// ---- a dense layer and its optimizer, built from a recipe as a user would ---------------------

typedef struct {
    recipe_t r;
    gl_graph g;
    gl_arena a, oa;
    gl_optim o;
} toy;

static void toy_build(toy *t, const char *optimizer_yaml, int64_t in, int64_t units)
{
    memset(t, 0, sizeof *t);
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "model:\n  layers:\n    - {type: dense, units: %lld}\noptimizer:\n%s",
             (long long)units, optimizer_yaml);
    tl_recipe(&t->r, yaml, 0, NULL);
    if (graph_build(&t->g, &t->r, shape_1d(in), 1, backend_cpu(), stderr) != 0) fail_msg("graph_build failed");
    arena_init(&t->a, t->g.bytes);
    graph_bind(&t->g, &t->a);
    // The toy's two tensors, as the reference below assumes them.
    assert_int_equal(t->g.nlayers, 1);
    assert_int_equal(t->g.layers[0].nparams, 2);
    assert_int_equal(t->g.layers[0].params[0].offset, 0);
    assert_int_equal(t->g.layers[0].params[1].offset, units * in);
    assert_int_equal(t->g.nparams, units * in + units);
    size_t bytes = optim_bytes(&t->r, &t->g);
    arena_init(&t->oa, bytes);
    optim_init(&t->o, &t->r, &t->g, &t->oa);
    assert_int_equal(t->oa.used, bytes);  // optim_bytes is exactly what optim_init takes
    assert_int_equal(t->o.ntensors, 2);
}

static void toy_free(toy *t)
{
    arena_free(&t->oa);
    arena_free(&t->a);
    graph_free(&t->g);
    recipe_free(&t->r);
}

// weight ~ U(-1.5, 1.5), bias ~ 0.01 x U(-1, 1): norms two orders of magnitude apart.
static void toy_fill(toy *t, int64_t wsize)
{
    tl_fill_uniform(t->g.params, wsize, -1.5f, 1.5f, 1);
    tl_fill_uniform(t->g.params + wsize, t->g.nparams - wsize, -0.01f, 0.01f, 2);
}

// ---- the reference ----------------------------------------------------------------------------

#define MAXP 64

typedef struct {
    int lamb;  // 0: AdamW, 1: LAMB
    double wd, b1, b2, eps, clip;  // clip: NAN = off
    int t;
    double m[MAXP], v[MAXP];
    double ratio[2];
} ref_opt;

// One step over tensors [off[k], off[k] + size[k]); g is modified by clipping. Returns ||g||.
static double ref_step(ref_opt *o, double *w, double *g, int n, const int *off, const int *size, double lr)
{
    double sq = 0;
    for (int i = 0; i < n; i++) sq += g[i] * g[i];
    double norm = sqrt(sq);
    if (!isnan(o->clip) && o->clip / (norm + 1e-6) < 1)
        for (int i = 0; i < n; i++) g[i] *= o->clip / (norm + 1e-6);
    o->t++;
    double bc1 = 1 - pow(o->b1, o->t), bc2 = 1 - pow(o->b2, o->t);
    for (int k = 0; k < 2; k++) {
        double u[MAXP], wsq = 0, usq = 0;
        for (int i = off[k]; i < off[k] + size[k]; i++) {
            o->m[i] = o->b1 * o->m[i] + (1 - o->b1) * g[i];
            o->v[i] = o->b2 * o->v[i] + (1 - o->b2) * g[i] * g[i];
            double mhat = o->m[i] / bc1, vhat = o->v[i] / bc2;
            if (!o->lamb) {
                w[i] -= lr * o->wd * w[i];  // decoupled decay first, as torch.optim.AdamW
                w[i] -= lr * mhat / (sqrt(vhat) + o->eps);
            } else {
                u[i] = mhat / (sqrt(vhat) + o->eps) + o->wd * w[i];
                wsq += w[i] * w[i];
                usq += u[i] * u[i];
            }
        }
        if (o->lamb) {
            o->ratio[k] = (wsq > 0 && usq > 0) ? sqrt(wsq) / sqrt(usq) : 1.0;
            for (int i = off[k]; i < off[k] + size[k]; i++) w[i] -= lr * o->ratio[k] * u[i];
        }
    }
    return norm;
}

// g = 2 (w - target) + 0.1 noise(step): depends on the weights, as a real gradient does.
static void grad_at(const double *w, int n, int step, double *g)
{
    for (int i = 0; i < n; i++) {
        double target = 0.5 * sin(1.0 + i);
        g[i] = 2.0 * (w[i] - target) + 0.1 * (double)rng_normal(TL_SEED, RNG_TEST, 100 + (uint64_t)step, (uint64_t)i);
    }
}

#define IN 4
#define UNITS 3
#define NP (IN * UNITS + UNITS)
#define STEPS 4

static void compare(const char *yaml, int lamb, double wd, double clip, const double *lrs)
{
    toy t;
    toy_build(&t, yaml, IN, UNITS);
    assert_int_equal(t.o.type, lamb ? OPT_LAMB : OPT_ADAMW);
    assert_non_null(t.o.m);
    assert_non_null(t.o.v);
    assert_null(t.o.velocity);
    toy_fill(&t, IN * UNITS);
    const int off[2] = {0, IN * UNITS}, size[2] = {IN * UNITS, UNITS};
    ref_opt ref = {.lamb = lamb, .wd = wd, .b1 = t.r.optimizer.beta1, .b2 = t.r.optimizer.beta2,
                   .eps = t.r.optimizer.eps, .clip = clip};
    double rw[NP], rg[NP];
    float w0[NP];
    for (int i = 0; i < NP; i++) rw[i] = w0[i] = t.g.params[i];
    bool clipped = false;
    for (int s = 0; s < STEPS; s++) {
        grad_at(rw, NP, s, rg);
        for (int i = 0; i < NP; i++) t.g.grads[i] = (float)rg[i];
        for (int i = 0; i < NP; i++) rg[i] = t.g.grads[i];  // the reference sees the float gradient
        double norm = optim_step(&t.o, &t.g, lrs[s]);
        double rnorm = ref_step(&ref, rw, rg, NP, off, size, lrs[s]);
        if (fabs(norm - rnorm) > 1e-12 * rnorm) fail_msg("%s step %d: norm %.15g, reference %.15g", yaml, s + 1, norm, rnorm);
        if (t.o.last_scale < 1) clipped = true;
        for (int i = 0; i < NP; i++) {
            if (fabs(t.g.grads[i] - rg[i]) > 1e-6 * (1 + fabs(rg[i])))
                fail_msg("%s step %d: clipped grad[%d] = %.9g, reference %.9g", yaml, s + 1, i, t.g.grads[i], rg[i]);
            if (fabs(t.g.params[i] - rw[i]) > 1e-5 * (1 + fabs(rw[i])))
                fail_msg("%s step %d: w[%d] (%s) = %.9g, reference %.9g", yaml, s + 1, i,
                         i < IN * UNITS ? "weight" : "bias", t.g.params[i], rw[i]);
            rw[i] = t.g.params[i];  // stay on one trajectory
        }
        if (lamb)
            for (int k = 0; k < 2; k++)
                if (fabs(t.o.ratio[k] - ref.ratio[k]) > 1e-5 * ref.ratio[k])
                    fail_msg("%s step %d: trust ratio of tensor %d = %.9g, reference %.9g", yaml, s + 1, k,
                             t.o.ratio[k], ref.ratio[k]);
    }
    assert_int_equal(t.o.steps, STEPS);
    assert_int_equal(clipped, !isnan(clip));  // the clipped cases do clip
    for (int i = 0; i < NP; i++)
        if (!(fabs(t.g.params[i] - w0[i]) > 1e-4)) fail_msg("%s: w[%d] did not move", yaml, i);
    toy_free(&t);
}

static const double lr_const[STEPS] = {0.05, 0.05, 0.05, 0.05};
static const double lr_sched[STEPS] = {0.02, 0.04, 0.06, 0.03};

static void test_adamw_defaults(void **state)
{
    (void)state;
    compare("  type: adamw\n  lr: 0.05\n", 0, 0.0, NAN, lr_const);
}

static void test_adamw_weight_decay_betas_schedule(void **state)
{
    (void)state;
    compare("  type: adamw\n  lr: 0.1\n  weight_decay: 0.1\n  beta1: 0.8\n  beta2: 0.95\n  eps: 0.01\n", 0, 0.1, NAN,
            lr_sched);
}

static void test_adamw_clipped(void **state)
{
    (void)state;
    compare("  type: adamw\n  lr: 0.1\n  weight_decay: 0.01\n  clip_norm: 1.0\n", 0, 0.01, 1.0, lr_const);
}

static void test_lamb_defaults(void **state)
{
    (void)state;
    compare("  type: lamb\n  lr: 0.05\n", 1, 0.0, NAN, lr_const);
}

static void test_lamb_weight_decay_schedule(void **state)
{
    (void)state;
    compare("  type: lamb\n  lr: 0.1\n  weight_decay: 0.05\n  beta1: 0.85\n  beta2: 0.99\n  eps: 0.001\n", 1, 0.05, NAN, lr_sched);
}

static void test_lamb_clipped(void **state)
{
    (void)state;
    compare("  type: lamb\n  lr: 0.1\n  weight_decay: 0.01\n  clip_norm: 0.5\n", 1, 0.01, 0.5, lr_const);
}

// ---- hand-computed single steps -----------------------------------------------------------------

// AdamW step 1: m_hat = g, v_hat = g^2, so w = w (1 - lr wd) - lr g / (|g| + eps).
// w = 1, g = 0.5, lr = 0.1, wd = 0.1: w = 0.99 - 0.1 * 0.5 / 0.50000001 = 0.8900000002.
static void test_adamw_hand_computed(void **state)
{
    (void)state;
    toy t;
    toy_build(&t, "  type: adamw\n  lr: 0.1\n  weight_decay: 0.1\n", 1, 1);
    t.g.params[0] = 1.0f, t.g.params[1] = -2.0f;
    t.g.grads[0] = 0.5f, t.g.grads[1] = -0.25f;
    optim_step(&t.o, &t.g, 0.1);
    assert_near(t.g.params[0], 0.89, 1e-6);
    assert_near(t.g.params[1], -2.0 * 0.99 + 0.1, 1e-6);  // g < 0: moves up by lr
    toy_free(&t);
}

// LAMB step 1 with wd = 0: u = sign(g). Weight w = [3, 4], g = [1, -1]: ||w|| = 5, ||u|| = sqrt 2,
// w -= 0.1 * 5/sqrt 2 * [1, -1] = [2.6464466, 4.3535534]. The bias starts at 0: ratio 1, so it
// moves by a full lr * u = -0.1 * sign(g).
static void test_lamb_hand_computed(void **state)
{
    (void)state;
    toy t;
    toy_build(&t, "  type: lamb\n  lr: 0.1\n", 2, 1);
    float *w = t.g.params, *g = t.g.grads;
    w[0] = 3, w[1] = 4, w[2] = 0;
    g[0] = 1, g[1] = -1, g[2] = 2;
    optim_step(&t.o, &t.g, 0.1);
    assert_near(t.o.ratio[0], 5 / sqrt(2), 1e-5);
    assert_near(t.o.ratio[1], 1.0, 0);
    assert_near(w[0], 3 - 0.5 / sqrt(2), 1e-5);
    assert_near(w[1], 4 + 0.5 / sqrt(2), 1e-5);
    assert_near(w[2], -0.1, 1e-6);
    toy_free(&t);
}

// Per TENSOR, not global and not per layer: the tiny bias gets a ratio ~100x smaller than the
// weight, and each tensor moves by about lr * its own norm (relative step lr * ||u||/||u||).
static void test_lamb_trust_ratio_per_tensor(void **state)
{
    (void)state;
    toy t;
    toy_build(&t, "  type: lamb\n  lr: 0.01\n", IN, UNITS);
    toy_fill(&t, IN * UNITS);
    for (int i = 0; i < NP; i++) t.g.grads[i] = (float)rng_normal(TL_SEED, RNG_TEST, 7, (uint64_t)i);
    double wn[2] = {0, 0}, dn[2] = {0, 0};
    float before[NP];
    memcpy(before, t.g.params, sizeof before);
    for (int i = 0; i < NP; i++) wn[i >= IN * UNITS] += (double)before[i] * before[i];
    optim_step(&t.o, &t.g, 0.01);
    for (int i = 0; i < NP; i++) {
        double d = (double)t.g.params[i] - before[i];
        dn[i >= IN * UNITS] += d * d;
    }
    if (!(t.o.ratio[0] > 50 * t.o.ratio[1]))
        fail_msg("trust ratios weight %.6g, bias %.6g: expected very different", t.o.ratio[0], t.o.ratio[1]);
    for (int k = 0; k < 2; k++)  // ||delta W|| = lr * ratio * ||U|| = lr * ||W||
        assert_near(sqrt(dn[k]), 0.01 * sqrt(wn[k]), 1e-4 * sqrt(wn[k]));
    toy_free(&t);
}

// ---- clipping -----------------------------------------------------------------------------------

// Plain SGD (momentum 0) so w = -lr * (clipped g) shows the scaling directly.
// g = [1, 2, 2, 4] (weight [1, 3] then bias [1]) has norm 5.
static void run_clip(const char *yaml, double expect_scale)
{
    toy t;
    toy_build(&t, yaml, 3, 1);
    const float g0[4] = {1, 2, 2, 4};
    memcpy(t.g.grads, g0, sizeof g0);
    double norm = optim_step(&t.o, &t.g, 0.5);
    assert_near(norm, 5.0, 1e-12);
    assert_near(t.o.last_scale, expect_scale, 1e-7);
    for (int i = 0; i < 4; i++) {
        assert_near(t.g.grads[i], g0[i] * expect_scale, 1e-6);
        assert_near(t.g.params[i], -0.5 * g0[i] * expect_scale, 1e-6);
    }
    toy_free(&t);
}

static void test_clip_scales_to_norm(void **state)
{
    (void)state;
    run_clip("  lr: 0.5\n  momentum: 0\n  clip_norm: 1.0\n", 1.0 / (5.0 + 1e-6));
    run_clip("  lr: 0.5\n  momentum: 0\n  clip_norm: 2.5\n", 2.5 / (5.0 + 1e-6));
}

static void test_clip_leaves_small_gradients(void **state)
{
    (void)state;
    run_clip("  lr: 0.5\n  momentum: 0\n  clip_norm: 5.5\n", 1.0);
    run_clip("  lr: 0.5\n  momentum: 0\n", 1.0);  // unset: never clips
}

// A norm over many chunks (and both tensors) is the plain L2 norm of the whole block.
static void test_norm_over_chunks(void **state)
{
    (void)state;
    toy t;
    toy_build(&t, "  lr: 0.1\n  momentum: 0\n", 100, 90);  // 9090 parameters: 3 chunks + 1
    assert_int_equal(t.o.nchunks, 4);
    tl_fill_uniform(t.g.grads, t.g.nparams, -1, 1, 3);
    double sq = 0;
    for (int64_t i = 0; i < t.g.nparams; i++) sq += (double)t.g.grads[i] * t.g.grads[i];
    assert_near(optim_step(&t.o, &t.g, 0.1), sqrt(sq), 1e-12 * sqrt(sq));
    toy_free(&t);
}

// A NaN gradient: the norm says so and nothing is touched.
static void test_nonfinite_norm_skips_step(void **state)
{
    (void)state;
    toy t;
    toy_build(&t, "  type: lamb\n  lr: 0.1\n  clip_norm: 1\n", 3, 1);
    float w[4] = {1, 2, 3, 4}, g[4] = {0.5f, NAN, 1, 1};
    memcpy(t.g.params, w, sizeof w);
    memcpy(t.g.grads, g, sizeof g);
    assert_true(isnan(optim_step(&t.o, &t.g, 0.1)));
    assert_memory_equal(t.g.params, w, sizeof w);
    assert_near(t.g.grads[0], 0.5, 0);
    assert_int_equal(t.o.steps, 0);
    for (int i = 0; i < 4; i++) assert_true(t.o.m[i] == 0 && t.o.v[i] == 0);
    toy_free(&t);
}

// ---- threads ------------------------------------------------------------------------------------

// The same three steps with 1 and with 2 threads give the same bits: params, state, norms, ratios.
static void threads_bitwise(const char *yaml)
{
    const gl_backend *be = backend_cpu();
    toy a, b;
    toy_build(&a, yaml, 200, 300);  // 60300 parameters: 15 + 1 chunks
    toy_build(&b, yaml, 200, 300);
    int64_t n = a.g.nparams;
    tl_fill_uniform(a.g.params, n, -1, 1, 4);
    memcpy(b.g.params, a.g.params, (size_t)n * sizeof(float));
    for (int s = 0; s < 3; s++) {
        tl_fill_uniform(a.g.grads, n, -0.1f, 0.1f, 10 + (uint64_t)s);
        memcpy(b.g.grads, a.g.grads, (size_t)n * sizeof(float));
        be->set_threads(1);
        double na = optim_step(&a.o, &a.g, 0.01);
        be->set_threads(2);
        double nb = optim_step(&b.o, &b.g, 0.01);
        if (memcmp(&na, &nb, sizeof na)) fail_msg("%s step %d: norm %.17g with 1 thread, %.17g with 2", yaml, s, na, nb);
        assert_memory_equal(a.g.params, b.g.params, (size_t)n * sizeof(float));
        assert_memory_equal(a.g.grads, b.g.grads, (size_t)n * sizeof(float));
        if (a.o.m) assert_memory_equal(a.o.m, b.o.m, (size_t)n * sizeof(float));
        if (a.o.v) assert_memory_equal(a.o.v, b.o.v, (size_t)n * sizeof(float));
        if (a.o.velocity) assert_memory_equal(a.o.velocity, b.o.velocity, (size_t)n * sizeof(float));
        assert_memory_equal(a.o.ratio, b.o.ratio, (size_t)a.o.ntensors * sizeof(double));
    }
    be->set_threads(1);
    toy_free(&a);
    toy_free(&b);
}

static void test_threads_bitwise(void **state)
{
    (void)state;
    threads_bitwise("  type: lamb\n  lr: 0.01\n  weight_decay: 0.01\n  clip_norm: 1\n");
    threads_bitwise("  type: adamw\n  lr: 0.01\n  weight_decay: 0.01\n  clip_norm: 1\n");
    threads_bitwise("  lr: 0.01\n  nesterov: true\n  clip_norm: 1\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_defaults),
        cmocka_unit_test(test_adamw_weight_decay_betas_schedule),
        cmocka_unit_test(test_adamw_clipped),
        cmocka_unit_test(test_lamb_defaults),
        cmocka_unit_test(test_lamb_weight_decay_schedule),
        cmocka_unit_test(test_lamb_clipped),
        cmocka_unit_test(test_adamw_hand_computed),
        cmocka_unit_test(test_lamb_hand_computed),
        cmocka_unit_test(test_lamb_trust_ratio_per_tensor),
        cmocka_unit_test(test_clip_scales_to_norm),
        cmocka_unit_test(test_clip_leaves_small_gradients),
        cmocka_unit_test(test_norm_over_chunks),
        cmocka_unit_test(test_nonfinite_norm_skips_step),
        cmocka_unit_test(test_threads_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
