// test_cuda_optim.c: the optimizer step on the GPU (backend.h: chunk_sumsq, optim_update) against
// the CPU's loops (src/optim), the reference. Each case builds the same model twice, once on the
// CPU backend and once on the CUDA backend (its arena is managed memory: the host writes and reads
// it only after sync()), starts both from the same parameters and optimizer state, and runs a few
// optim_step calls on the same gradients. Parameters, the (clipped) gradients and the optimizer
// state must agree within RTOL of each tensor's largest value, the returned norms within
// RTOL_NORM, LAMB's trust ratios within RTOL. The update's arithmetic is the CPU's rounding for
// rounding; what may differ is the order of the double sums (norms, LAMB's ||W||, ||U||) and
// LAMB's step lr * ratio (rounded from a float lr on the GPU).
// Without a usable GPU (or in a build without CUDA) it prints why and exits 77: skipped.
#include "testlib.h"

#include "galley/optim.h"

#define RTOL 1e-6
#define RTOL_NORM 1e-9
#define STEPS 4
#define IN 128

// Several tensors, one spread over four chunks (12800 = 3 x 4096 + 512), and 1-D biases for
// optimizer.exclude_1d: 12800 + 100 + 1000 + 10 parameters.
static const char layers[] = "    - {type: dense, units: 100}\n    - {type: dense, units: 10}\n";

// ---- one model and its optimizer on one backend ------------------------------------------------

typedef struct {
    recipe_t r;
    gl_graph g;
    gl_arena a;
    gl_optim o;
    const gl_backend *be;
} side;

static void side_build(side *s, const char *optimizer_yaml, const gl_backend *be)
{
    memset(s, 0, sizeof *s);
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "model:\n  layers:\n%soptimizer:\n%s", layers, optimizer_yaml);
    tl_recipe(&s->r, yaml, 0, NULL);
    if (graph_build(&s->g, &s->r, shape_1d(IN), 1, be, stderr) != 0) fail_msg("graph_build failed");
    arena_init_for(&s->a, s->g.bytes + optim_bytes(&s->r, &s->g), be);  // zeroed; synced
    graph_bind(&s->g, &s->a);
    optim_init(&s->o, &s->r, &s->g, &s->a);
    s->be = be;
}

static void side_free(side *s)
{
    arena_free(&s->a);
    graph_free(&s->g);
    recipe_free(&s->r);
}

// The optimizer's state buffers of a side: velocity, m, v (NULL where the rule has none).
static void side_state(side *s, float *buf[3])
{
    buf[0] = s->o.velocity;
    buf[1] = s->o.m;
    buf[2] = s->o.v;
}

static const char *const state_name[3] = {"velocity", "m", "v"};

// ---- comparison -------------------------------------------------------------------------------

typedef struct {
    int64_t count, bitwise;  // elements compared, of which bitwise equal
    double worst;            // largest |gpu - cpu| / (the tensor's largest |cpu|)
} agreement;

// |gpu[i] - cpu[i]| <= RTOL * max |cpu| for every i (and the same finiteness).
static void expect_close(const char *what, const char *which, int step, const float *gpu, const float *cpu,
                         int64_t n, agreement *ag)
{
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)cpu[i]));
    if (scale == 0.0) scale = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        if (!(d <= RTOL * scale))
            fail_msg("%s, step %d: %s[%lld] = %.9g on the GPU, %.9g on the CPU (difference %.3g > %.3g)", what,
                     step, which, (long long)i, gpu[i], cpu[i], d, RTOL * scale);
        ag->bitwise += !memcmp(&gpu[i], &cpu[i], sizeof(float));
        ag->worst = fmax(ag->worst, d / scale);
    }
    ag->count += n;
}

static void expect_near_rel(const char *what, const char *which, int step, double gpu, double cpu, double rtol)
{
    if (!(fabs(gpu - cpu) <= rtol * fabs(cpu)))
        fail_msg("%s, step %d: %s = %.17g on the GPU, %.17g on the CPU (relative tolerance %.3g)", what, step, which,
                 gpu, cpu, rtol);
}

// What every test gets: the GPU backend.
typedef struct {
    const gl_backend *gpu;
} fixture;

// ---- the cases --------------------------------------------------------------------------------

typedef struct {
    const char *what;
    const char *optimizer;  // the recipe's optimizer section
    double lrs[STEPS];
    bool clips;             // every step must clip (the gradients' norm is about 68)
} optim_case;

// Runs the case on both backends from the same start and compares after every step.
static void compare(const gl_backend *gpu, const optim_case *k)
{
    side c, g;
    side_build(&c, k->optimizer, backend_cpu());
    side_build(&g, k->optimizer, gpu);
    const int64_t n = c.g.nparams;
    const size_t bytes = sizeof(float) * (size_t)n;
    assert_int_equal(g.g.nparams, n);
    assert_int_equal(g.o.nchunks, c.o.nchunks);
    assert_true(c.o.nchunks >= 7);  // the 4-chunk weight and three more tensors
    float *cs[3], *gs[3];
    side_state(&c, cs);
    side_state(&g, gs);

    // The same start on both: parameters, and nonzero optimizer state (so the first step already
    // exercises every term); v >= 0 as a second moment is.
    tl_fill_uniform(c.g.params, n, -1.0f, 1.0f, 1);
    for (int b = 0; b < 3; b++)
        if (cs[b]) tl_fill_uniform(cs[b], n, b == 2 ? 0.0f : -0.1f, b == 2 ? 0.01f : 0.1f, 2 + (uint64_t)b);
    gpu->sync();
    memcpy(g.g.params, c.g.params, bytes);
    for (int b = 0; b < 3; b++)
        if (cs[b]) memcpy(gs[b], cs[b], bytes);

    agreement ag = {0, 0, 0.0};
    for (int s = 0; s < STEPS; s++) {
        tl_fill_uniform(c.g.grads, n, -1.0f, 1.0f, 10 + (uint64_t)s);
        gpu->sync();
        memcpy(g.g.grads, c.g.grads, bytes);
        double nc = optim_step(&c.o, &c.g, k->lrs[s]);
        double ng = optim_step(&g.o, &g.g, k->lrs[s]);
        gpu->sync();  // (optim_step syncs on the device already; the contract is what counts here)
        expect_near_rel(k->what, "gradient norm", s + 1, ng, nc, RTOL_NORM);
        expect_near_rel(k->what, "clip scale", s + 1, g.o.last_scale, c.o.last_scale, RTOL);
        if (k->clips && !(c.o.last_scale < 1.0)) fail_msg("%s: step %d did not clip", k->what, s + 1);
        expect_close(k->what, "w", s + 1, g.g.params, c.g.params, n, &ag);
        expect_close(k->what, "g (clipped)", s + 1, g.g.grads, c.g.grads, n, &ag);
        for (int b = 0; b < 3; b++) {
            assert_true((cs[b] == NULL) == (gs[b] == NULL));
            if (cs[b]) expect_close(k->what, state_name[b], s + 1, gs[b], cs[b], n, &ag);
        }
        if (c.o.type == OPT_LAMB)
            for (int t = 0; t < c.o.ntensors; t++) {
                char which[32];
                snprintf(which, sizeof which, "trust ratio %d", t);
                expect_near_rel(k->what, which, s + 1, g.o.ratio[t], c.o.ratio[t], RTOL);
            }
    }
    assert_int_equal(g.o.steps, STEPS);
    printf("    %s: %lld of %lld values bitwise the CPU's, worst difference %.3g of the tensor's scale\n", k->what,
           (long long)ag.bitwise, (long long)ag.count, ag.worst);
    side_free(&g);
    side_free(&c);
}

static void test_sgd(void **state)
{
    const gl_backend *gpu = ((const fixture *)*state)->gpu;
    static const optim_case cases[] = {
        {"sgd plain, weight decay", "  type: sgd\n  lr: 0.1\n  momentum: 0\n  weight_decay: 0.01\n",
         {0.1, 0.1, 0.05, 0.02}, false},
        {"sgd momentum, weight decay, exclude_1d",
         "  type: sgd\n  lr: 0.1\n  momentum: 0.9\n  weight_decay: 0.05\n  exclude_1d: true\n",
         {0.1, 0.05, 0.05, 0.02}, false},
        {"sgd nesterov, weight decay, clip",
         "  type: sgd\n  lr: 0.1\n  momentum: 0.8\n  nesterov: true\n  weight_decay: 0.01\n  clip_norm: 5\n",
         {0.1, 0.2, 0.1, 0.05}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(gpu, &cases[i]);
}

static void test_adamw(void **state)
{
    const gl_backend *gpu = ((const fixture *)*state)->gpu;
    static const optim_case cases[] = {
        {"adamw", "  type: adamw\n  lr: 0.01\n  weight_decay: 0.1\n  beta1: 0.8\n  beta2: 0.95\n",
         {0.01, 0.02, 0.01, 0.005}, false},
        {"adamw, exclude_1d, clip",
         "  type: adamw\n  lr: 0.01\n  weight_decay: 0.05\n  exclude_1d: true\n  clip_norm: 2\n",
         {0.01, 0.01, 0.02, 0.01}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(gpu, &cases[i]);
}

static void test_lamb(void **state)
{
    const gl_backend *gpu = ((const fixture *)*state)->gpu;
    // The same model twice in a row with only exclude_1d changed: the backend's cached chunk
    // table must follow (same count, likely the same address, different plain flags).
    static const optim_case cases[] = {
        {"lamb, weight decay", "  type: lamb\n  lr: 0.01\n  weight_decay: 0.01\n  eps: 0.001\n",
         {0.01, 0.02, 0.01, 0.005}, false},
        {"lamb, weight decay, exclude_1d, clip",
         "  type: lamb\n  lr: 0.01\n  weight_decay: 0.01\n  exclude_1d: true\n  clip_norm: 3\n",
         {0.01, 0.01, 0.02, 0.01}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(gpu, &cases[i]);
}

// A non-finite gradient norm on the device: returned, and nothing is touched.
static void test_nonfinite_skips(void **state)
{
    const gl_backend *gpu = ((const fixture *)*state)->gpu;
    side g;
    side_build(&g, "  type: lamb\n  lr: 0.01\n  clip_norm: 1\n", gpu);
    const int64_t n = g.g.nparams;
    tl_fill_uniform(g.g.params, n, -1.0f, 1.0f, 1);
    tl_fill_uniform(g.g.grads, n, -1.0f, 1.0f, 2);
    g.g.grads[n / 2] = INFINITY;
    const size_t bytes = sizeof(float) * (size_t)n;
    float *w = malloc(bytes), *dw = malloc(bytes);
    assert_true(w && dw);
    memcpy(w, g.g.params, bytes);
    memcpy(dw, g.g.grads, bytes);
    assert_false(isfinite(optim_step(&g.o, &g.g, 0.01)));
    gpu->sync();
    assert_memory_equal(g.g.params, w, bytes);
    assert_memory_equal(g.g.grads, dw, bytes);  // not clipped either
    assert_int_equal(g.o.steps, 0);
    for (int64_t i = 0; i < n; i++) assert_true(g.o.m[i] == 0.0f && g.o.v[i] == 0.0f);
    free(dw);
    free(w);
    side_free(&g);
}

int main(void)
{
    char msg[256] = "built without CUDA (GALLEY_HAVE_CUDA=0)";
    const gl_backend *gpu = NULL;
#if GALLEY_HAVE_CUDA
    gpu = backend_cuda(0, msg, sizeof msg);
#endif
    if (!gpu) {
        printf("test_cuda_optim: skipped: %s\n", msg);
        return 77;  // ctest: skipped
    }
    printf("test_cuda_optim: %s\n", msg);
    if (!gpu->chunk_sumsq || !gpu->optim_update) {
        // Without them optim_step would run the CPU loops on managed memory and this test would
        // compare the CPU with itself.
        printf("test_cuda_optim: the CUDA backend does not set chunk_sumsq and optim_update\n");
        return 1;
    }
    fixture fx = {gpu};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_sgd, &fx),
        cmocka_unit_test_prestate(test_adamw, &fx),
        cmocka_unit_test_prestate(test_lamb, &fx),
        cmocka_unit_test_prestate(test_nonfinite_skips, &fx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
