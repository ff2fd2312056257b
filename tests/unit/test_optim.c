// test_optim.c: SGD against a double-precision transcription of PyTorch's torch.optim.SGD
// (dampening 0, maximize false), for several steps, with momentum, Nesterov, weight decay and
// clip_grad_norm_, configured through a recipe as a user would and run on a real graph's
// parameter block (several tensors; one run spans more than one GL_OPTIM_CHUNK).
#include "testlib.h"

#include <omp.h>

#include "galley/optim.h"
#include "optim/optim_internal.h"

#define STEPS 3

// torch.optim.SGD.step() for one parameter tensor, written out from torch/optim/sgd.py
// (_single_tensor_sgd):
//     d_p = grad + weight_decay * param              (if weight_decay != 0)
//     if momentum != 0:
//         buf = clone(d_p)               on the first step
//         buf = momentum * buf + d_p     afterwards (dampening 0)
//         d_p = d_p + momentum * buf     if nesterov, else d_p = buf
//     param -= lr * d_p
// preceded, when clipping, by torch.nn.utils.clip_grad_norm_(params, max_norm):
//     total = ||all grads||_2; coef = max_norm / (total + 1e-6); if coef < 1: grad *= coef
typedef struct {
    double momentum, wd, clip;  // clip: NAN for none
    int nesterov;
    int started;
    int64_t n;
    double *buf;
} ref_sgd;

// Returns the gradient norm before clipping (as optim_step does).
static double ref_step(ref_sgd *o, double *w, double *grad, double lr)
{
    double total = 0;
    for (int64_t i = 0; i < o->n; i++) total += grad[i] * grad[i];
    total = sqrt(total);
    if (!isnan(o->clip)) {
        double coef = o->clip / (total + 1e-6);
        if (coef < 1)
            for (int64_t i = 0; i < o->n; i++) grad[i] *= coef;
    }
    for (int64_t i = 0; i < o->n; i++) {
        double d = grad[i];
        if (o->wd != 0) d += o->wd * w[i];
        if (o->momentum != 0) {
            o->buf[i] = o->started ? o->momentum * o->buf[i] + d : d;
            d = o->nesterov ? d + o->momentum * o->buf[i] : o->buf[i];
        }
        w[i] -= lr * d;
    }
    o->started = 1;
    return total;
}

// A gradient that depends on the current weights (as a real one does) plus a per-step term:
// g = 2 (w - target) + noise(step).
static void grad_at(const double *w, int64_t n, int step, double *g)
{
    for (int64_t i = 0; i < n; i++) {
        double target = (double)rng_uniform(TL_SEED, RNG_TEST, 1000, (uint64_t)i) * 4.0 - 2.0;
        g[i] = 2.0 * (w[i] - target) + 0.1 * (double)rng_normal(TL_SEED, RNG_TEST, (uint64_t)step, (uint64_t)i);
    }
}

typedef struct {
    const char *optimizer;  // the recipe's optimizer section
    double momentum, wd, clip;
    int nesterov;
    const double *lrs;      // per step; optim_step's lr, not the recipe's
    const char *layers;     // the model whose parameters are updated
} sgd_case;

static const char small_model[] = "    - {type: dense, units: 1}\n";      // [4] input: weight 4 + bias 1
static const char chunked_model[] = "    - {type: dense, units: 1100}\n";  // [4]: 4400 + 1100: two chunks
static const char wide_model[] = "    - {type: dense, units: 3000}\n";     // [4]: 12000 (3 chunks) + 3000 (1)
static const double lr_const[STEPS] = {0.1, 0.1, 0.1};
static const double lr_sched[STEPS] = {0.1, 0.05, 0.025};

// Runs Galley's SGD and the reference side by side for STEPS steps.
static void compare(const sgd_case *c)
{
    char *yaml_model = tl_recipe_text(c->layers);
    // Swap the helper's optimizer section for the case's.
    char *cut = strstr(yaml_model, "optimizer:");
    assert_non_null(cut);
    *cut = 0;
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "%soptimizer:\n%s", yaml_model, c->optimizer);
    free(yaml_model);

    tl_model m;
    memset(&m, 0, sizeof m);
    tl_recipe(&m.r, yaml, 0, NULL);
    assert_int_equal(m.r.optimizer.type, OPT_SGD);
    assert_true(m.r.optimizer.momentum == c->momentum);
    assert_true(m.r.optimizer.weight_decay == c->wd);
    assert_int_equal(m.r.optimizer.nesterov, c->nesterov);
    assert_true(isnan(c->clip) ? isnan(m.r.optimizer.clip_norm) : m.r.optimizer.clip_norm == c->clip);
    tl_stream s;
    assert_int_equal(graph_build(&m.g, &m.r, shape_1d(4), 2, backend_cpu(), tl_stream_open(&s)), 0);
    free(tl_stream_close(&s));
    size_t obytes = optim_bytes(&m.r, &m.g);
    arena_init(&m.a, m.g.bytes + obytes);
    graph_bind(&m.g, &m.a);
    size_t used = m.a.used;
    gl_optim o;
    optim_init(&o, &m.r, &m.g, &m.a);
    assert_true(m.a.used - used <= obytes);  // optim_bytes covers what optim_init takes
    int64_t n = m.g.nparams;
    assert_int_equal(o.n, n);
    assert_int_equal(o.steps, 0);
    assert_true(c->momentum > 0 ? o.velocity != NULL : o.velocity == NULL);

    double *w0 = malloc(sizeof(double) * (size_t)n), *rw = malloc(sizeof(double) * (size_t)n);
    double *rg = malloc(sizeof(double) * (size_t)n), *rbuf = calloc((size_t)n, sizeof(double));
    assert_true(w0 && rw && rg && rbuf);
    for (int64_t i = 0; i < n; i++) {
        m.g.params[i] = rng_uniform(TL_SEED, RNG_TEST, 2000, (uint64_t)i) * 2.0f - 1.0f;
        w0[i] = rw[i] = m.g.params[i];
    }
    ref_sgd ref = {.momentum = c->momentum, .wd = c->wd, .clip = c->clip, .nesterov = c->nesterov, .n = n,
                   .buf = rbuf};
    int clipped = 0;
    for (int t = 0; t < STEPS; t++) {
        grad_at(rw, n, t, rg);
        for (int64_t i = 0; i < n; i++) m.g.grads[i] = (float)rg[i];
        for (int64_t i = 0; i < n; i++) rg[i] = m.g.grads[i];  // the reference sees the same float gradient
        double norm = optim_step(&o, &m.g, c->lrs[t]);
        double rnorm = ref_step(&ref, rw, rg, c->lrs[t]);
        if (fabs(norm - rnorm) > 1e-9 * rnorm) fail_msg("step %d: gradient norm %.12g, reference %.12g", t + 1, norm, rnorm);
        clipped += !isnan(c->clip) && o.last_scale < 1.0;
        for (int64_t i = 0; i < n; i++) {
            if (fabs(m.g.params[i] - rw[i]) > 1e-5 * (1.0 + fabs(rw[i])))
                fail_msg("%s step %d: w[%lld] = %.9g, PyTorch reference %.9g", c->optimizer, t + 1, (long long)i,
                         m.g.params[i], rw[i]);
            // Keep both on one trajectory: the next gradient is computed from the float weights.
            rw[i] = m.g.params[i];
        }
    }
    assert_int_equal(o.steps, STEPS);
    if (!isnan(c->clip)) assert_int_equal(clipped, STEPS);  // the case is built so that it clips
    // The weights moved (a no-op update would match the reference only by accident): all of a
    // small model's; a few of a large one's may have had gradients near zero.
    int64_t moved = 0;
    for (int64_t i = 0; i < n; i++) moved += fabs(m.g.params[i] - w0[i]) > 1e-4;
    if (moved < n - n / 100) fail_msg("only %lld of %lld weights moved", (long long)moved, (long long)n);
    free(rbuf);
    free(rg);
    free(rw);
    free(w0);
    tl_model_free(&m);
}

static void test_sgd_momentum(void **state)
{
    (void)state;
    compare(&(sgd_case){"  type: sgd\n  lr: 0.1\n  momentum: 0.9\n", 0.9, 0.0, NAN, 0, lr_const, small_model});
}

static void test_sgd_nesterov_weight_decay(void **state)
{
    (void)state;
    compare(&(sgd_case){"  lr: 0.1\n  momentum: 0.9\n  nesterov: true\n  weight_decay: 0.01\n", 0.9, 0.01, NAN, 1,
                        lr_const, small_model});
}

static void test_sgd_momentum_weight_decay_schedule(void **state)
{
    (void)state;
    compare(&(sgd_case){"  lr: 0.5\n  momentum: 0.8\n  weight_decay: 0.1\n", 0.8, 0.1, NAN, 0, lr_sched,
                        small_model});
}

static void test_sgd_nesterov_across_chunks(void **state)
{
    (void)state;
    compare(&(sgd_case){"  lr: 0.5\n  momentum: 0.5\n  nesterov: true\n  weight_decay: 0.001\n", 0.5, 0.001, NAN,
                        1, lr_sched, chunked_model});
}

static void test_plain_sgd_weight_decay(void **state)
{
    (void)state;
    compare(&(sgd_case){"  lr: 0.1\n  momentum: 0\n  weight_decay: 0.1\n", 0.0, 0.1, NAN, 0, lr_const, small_model});
}

static void test_sgd_clip_norm(void **state)
{
    (void)state;
    // Gradients are O(1) per element: a max norm of 0.5 clips every step.
    compare(&(sgd_case){"  lr: 0.1\n  momentum: 0.9\n  nesterov: true\n  clip_norm: 0.5\n", 0.9, 0.0, 0.5, 1,
                        lr_const, small_model});
    compare(&(sgd_case){"  lr: 0.1\n  momentum: 0.9\n  clip_norm: 3.0\n", 0.9, 0.0, 3.0, 0, lr_sched,
                        chunked_model});
}

// The defaults are PyTorch's too, except momentum, which the schema sets to 0.9.
static void test_defaults(void **state)
{
    (void)state;
    recipe_t r;
    tl_recipe(&r, "model:\n  layers: [{type: dense, units: 2}]\noptimizer:\n  lr: 0.01\n", 0, NULL);
    assert_int_equal(r.optimizer.type, OPT_SGD);
    assert_true(r.optimizer.lr == 0.01);
    assert_true(r.optimizer.momentum == 0.9);
    assert_false(r.optimizer.nesterov);
    assert_true(r.optimizer.weight_decay == 0.0);
    assert_true(isnan(r.optimizer.clip_norm));
    recipe_free(&r);
}

// One parameter by hand: w = 1, g = 0.5, wd = 0.1, m = 0.9, nesterov, lr = 0.1:
//   d = 0.5 + 0.1 * 1 = 0.6; buf = 0.6; d = 0.6 + 0.9 * 0.6 = 1.14; w = 1 - 0.114 = 0.886.
// Step 2 with g = 0.5: d = 0.5 + 0.0886 = 0.5886; buf = 0.9 * 0.6 + 0.5886 = 1.1286;
//   d = 0.5886 + 0.9 * 1.1286 = 1.60434; w = 0.886 - 0.160434 = 0.725566.
static void test_hand_computed_nesterov(void **state)
{
    (void)state;
    tl_model m;
    memset(&m, 0, sizeof m);
    tl_recipe(&m.r,
              "model:\n  layers: [{type: dense, units: 1, bias: false}]\n"
              "optimizer: {lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.1}\n",
              0, NULL);
    tl_stream s;
    assert_int_equal(graph_build(&m.g, &m.r, shape_1d(1), 1, backend_cpu(), tl_stream_open(&s)), 0);
    free(tl_stream_close(&s));
    assert_int_equal(m.g.nparams, 1);
    arena_init(&m.a, m.g.bytes + optim_bytes(&m.r, &m.g));
    graph_bind(&m.g, &m.a);
    gl_optim o;
    optim_init(&o, &m.r, &m.g, &m.a);
    m.g.params[0] = 1.0f;
    m.g.grads[0] = 0.5f;
    assert_true(fabs(optim_step(&o, &m.g, 0.1) - 0.5) < 1e-12);
    assert_true(fabsf(m.g.params[0] - 0.886f) < 1e-6f);
    assert_true(m.g.grads[0] == 0.5f);  // the gradient is left as it was (no clipping)
    optim_step(&o, &m.g, 0.1);
    assert_true(fabsf(m.g.params[0] - 0.725566f) < 1e-6f);
    // A non-finite gradient skips the step and leaves the state alone.
    float w = m.g.params[0], v = o.velocity[0];
    m.g.grads[0] = NAN;
    assert_true(isnan(optim_step(&o, &m.g, 0.1)));
    assert_true(m.g.params[0] == w && o.velocity[0] == v);
    assert_int_equal(o.steps, 2);
    tl_model_free(&m);
}

// optim_owner: every chunk has one thread of nt; a tensor of at least nt chunks gives each thread
// one non-empty run of consecutive chunks, in thread order (the rows cpu_gemm's static tiles give
// it); a smaller one goes whole to thread tensor % nt.
static void test_owner_splits_tensors(void **state)
{
    (void)state;
    for (int nt = 1; nt <= 5; nt++)
        for (int parts = 1; parts <= 9; parts++)
            for (int tensor = 0; tensor < 3; tensor++) {
                int first[8], last[8], prev = 0;
                for (int t = 0; t < nt; t++) first[t] = -1, last[t] = -1;
                for (int p = 0; p < parts; p++) {
                    const gl_optim_chunk ch = {.tensor = tensor, .part = p, .parts = parts};
                    int t = optim_owner(&ch, nt);
                    assert_in_range(t, 0, nt - 1);
                    if (parts < nt) assert_int_equal(t, tensor % nt);
                    assert_true(t >= prev);  // runs in thread order
                    if (first[t] < 0) first[t] = p;
                    else assert_int_equal(last[t], p - 1);  // consecutive
                    last[t] = p;
                    prev = t;
                }
                if (parts >= nt)
                    for (int t = 0; t < nt; t++) assert_true(first[t] >= 0);  // nobody idle
            }
}

// The update and the norm at 1, 2 and 3 threads: each chunk updated once whoever owns it (the
// reference checks every weight), with clipping (the norm's pass) and without.
static void test_threads_share_tensors(void **state)
{
    (void)state;
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt++) {
        omp_set_num_threads(nt);
        compare(&(sgd_case){"  lr: 0.5\n  momentum: 0.5\n  nesterov: true\n  weight_decay: 0.001\n", 0.5, 0.001,
                            NAN, 1, lr_sched, wide_model});
        compare(&(sgd_case){"  lr: 0.5\n  momentum: 0.9\n  clip_norm: 20\n", 0.9, 0.0, 20.0, 0, lr_const,
                            wide_model});
    }
    omp_set_num_threads(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov_weight_decay),
        cmocka_unit_test(test_sgd_momentum_weight_decay_schedule),
        cmocka_unit_test(test_sgd_nesterov_across_chunks),
        cmocka_unit_test(test_plain_sgd_weight_decay),
        cmocka_unit_test(test_sgd_clip_norm),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_hand_computed_nesterov),
        cmocka_unit_test(test_owner_splits_tensors),
        cmocka_unit_test(test_threads_share_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
