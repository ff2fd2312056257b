// test_optim_fuse.c: optimizer.fuse, the update inside backward (src/optim/optim_fuse.c). Two
// copies of a model start from the same weights and see the same batches; one updates in
// backward, the other in the pass after it: weights, optimizer state and norms must be bitwise
// the same after every step (SGD with momentum, Nesterov, weight decay and plain 1-D tensors;
// AdamW), at 1 and 2 threads, on models where an activation runs a dense layer's backward
// (grad_deferred), where a convolution writes a max pool and where a tensor spans several
// chunks. Then the refusals, the non-finite stop, a cancelled step and a step backward never
// reached.
#include "testlib.h"

#include <omp.h>

#include "galley/optim.h"
#include "optim/optim_internal.h"

#define NB 4      // batch
#define STEPS 4

typedef struct {
    recipe_t r;
    gl_graph g;
    gl_arena a;
    gl_optim o;
} fmodel;

// Builds layers (a model.layers fragment) with the optimizer section opt on input shape in.
static void fmodel_build(fmodel *m, const char *layers, const char *opt, gl_shape in)
{
    memset(m, 0, sizeof *m);
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "model:\n  layers:\n%soptimizer:\n%s", layers, opt);
    tl_recipe(&m->r, yaml, 0, NULL);
    tl_stream s;
    assert_int_equal(graph_build(&m->g, &m->r, in, NB, backend_cpu(), tl_stream_open(&s)), 0);
    free(tl_stream_close(&s));
    size_t ob = optim_bytes(&m->r, &m->g);
    arena_init(&m->a, m->g.bytes + ob);
    graph_bind(&m->g, &m->a);
    optim_init(&m->o, &m->r, &m->g, &m->a);
    graph_init_params(&m->g, 7);
}

static void fmodel_free(fmodel *m)
{
    arena_free(&m->a);
    graph_free(&m->g);
    recipe_free(&m->r);
}

// One training step of m on input x with output gradient r (the loss sum(out * r)); fuse: armed.
static double fmodel_step(fmodel *m, const float *x, const float *r, double lr, bool fuse)
{
    gl_graph *g = &m->g;
    bool armed = optim_fuse_arm(&m->o, g, lr, NULL);
    assert_int_equal(armed, fuse);
    memcpy(g->input.data, x, sizeof(float) * (size_t)(NB * g->input.size));
    graph_forward(g, NB, true);
    gl_tensor *out = graph_output(g);
    memcpy(out->grad, r, sizeof(float) * (size_t)(NB * out->size));
    graph_backward(g, NB);
    return optim_step(&m->o, g, lr);
}

static bool same_floats(const float *a, const float *b, int64_t n)
{
    return (a == NULL) == (b == NULL) && (!a || memcmp(a, b, sizeof(float) * (size_t)n) == 0);
}

// The two copies of one model and optimizer, STEPS steps, at the current thread count.
static void compare(const char *layers, const char *opt, gl_shape in)
{
    fmodel a, b;
    fmodel_build(&a, layers, opt, in);
    fmodel_build(&b, layers, opt, in);
    b.o.fuse.on = false;  // optimizer.fuse: false
    int64_t n = a.g.nparams, nin = NB * a.g.input.size, nout = NB * graph_output(&a.g)->size;
    assert_true(a.o.nchunks > 0 && same_floats(a.g.params, b.g.params, n));
    float *w0 = malloc(sizeof(float) * (size_t)n), *x = malloc(sizeof(float) * (size_t)nin);
    float *r = malloc(sizeof(float) * (size_t)nout);
    assert_true(w0 && x && r);
    memcpy(w0, a.g.params, sizeof(float) * (size_t)n);
    for (int t = 0; t < STEPS; t++) {
        tl_fill_uniform(x, nin, -1.0f, 1.0f, 100 + (uint64_t)t);
        tl_fill_uniform(r, nout, -1.0f, 1.0f, 200 + (uint64_t)t);
        const double lr = 0.05 / (t + 1);
        double na = fmodel_step(&a, x, r, lr, true), nb = fmodel_step(&b, x, r, lr, false);
        if (!(na == nb)) fail_msg("%s step %d: norm %.17g in backward, %.17g after", opt, t + 1, na, nb);
        if (!same_floats(a.g.params, b.g.params, n)) fail_msg("%s step %d: weights differ", opt, t + 1);
        if (!same_floats(a.o.velocity, b.o.velocity, n) || !same_floats(a.o.m, b.o.m, n) ||
            !same_floats(a.o.v, b.o.v, n))
            fail_msg("%s step %d: optimizer state differs", opt, t + 1);
        assert_true(a.g.params_done == NULL);  // the hook goes with the step
    }
    assert_int_equal(a.o.steps, STEPS);
    assert_int_equal(a.o.fuse.steps, STEPS);
    assert_int_equal(b.o.fuse.steps, 0);
    int64_t moved = 0;
    for (int64_t i = 0; i < n; i++) moved += a.g.params[i] != w0[i];
    if (moved < n / 2) fail_msg("%s: only %lld of %lld weights moved", opt, (long long)moved, (long long)n);
    free(r);
    free(x);
    free(w0);
    fmodel_free(&b);
    fmodel_free(&a);
}

static const char mlp[] = "    - {type: dense, units: 40}\n    - {type: relu}\n    - {type: dense, units: 3000}\n"
                          "    - {type: relu}\n    - {type: dense, units: 10}\n";  // 3000 x 40: 30 chunks
static const char cnn[] = "    - {type: conv, filters: 8, kernel: 3, padding: 1}\n    - {type: relu}\n"
                          "    - {type: max_pool, kernel: 2}\n    - {type: flatten}\n    - {type: dense, units: 5}\n";
static const char sgd_all[] = "  lr: 0.1\n  momentum: 0.9\n  nesterov: true\n  weight_decay: 0.01\n"
                              "  exclude_1d: true\n";
static const char sgd_plain[] = "  lr: 0.1\n  momentum: 0\n  weight_decay: 0.001\n";
static const char adamw[] = "  type: adamw\n  lr: 0.001\n  weight_decay: 0.05\n  exclude_1d: true\n";

static void test_same_bits_as_one_pass(void **state)
{
    (void)state;
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        const char *opts[] = {sgd_all, sgd_plain, adamw};
        for (int k = 0; k < 3; k++) {
            compare(mlp, opts[k], shape_1d(24));
            compare(cnn, opts[k], (gl_shape){3, {3, 8, 8}});
        }
    }
    omp_set_num_threads(saved);
}

// The models above take the paths they are meant to: an activation runs a dense layer's
// backward, and a convolution writes its pool (so hooks come from other layers' backward).
static void test_models_take_the_fused_paths(void **state)
{
    (void)state;
    fmodel m;
    fmodel_build(&m, mlp, sgd_all, shape_1d(24));
    int deferred = 0;
    for (int i = 0; i < m.g.nlayers; i++) deferred += m.g.layers[i].grad_deferred;
    assert_true(deferred >= 1);
    assert_true(m.o.layer_chunk[m.g.nlayers] == m.o.nchunks);
    assert_true(m.o.layer_chunk[3] - m.o.layer_chunk[2] >= 30);  // the 3000-unit layer's chunks
    fmodel_free(&m);
    fmodel_build(&m, cnn, sgd_all, (gl_shape){3, {3, 8, 8}});
    int pooled = 0;
    for (int i = 0; i < m.g.nlayers; i++) pooled += m.g.layers[i].store_pool != NULL;
    assert_true(pooled >= 1);
    fmodel_free(&m);
}

// Where the update cannot run in backward it is not armed, and the summary says why.
static void test_refusals(void **state)
{
    (void)state;
    fmodel m;
    char line[256];
    fmodel_build(&m, mlp, "  lr: 0.1\n  clip_norm: 1\n", shape_1d(24));
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    assert_null(m.g.params_done);
    optim_fuse_describe(&m.o, line, sizeof line);
    assert_non_null(strstr(line, "clip_norm"));
    fmodel_free(&m);
    fmodel_build(&m, mlp, "  type: lamb\n  lr: 0.1\n", shape_1d(24));
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    optim_fuse_describe(&m.o, line, sizeof line);
    assert_non_null(strstr(line, "needs every gradient"));
    fmodel_free(&m);
    fmodel_build(&m, mlp, sgd_all, shape_1d(24));
    gl_backend dev = *backend_cpu();  // a device backend: the update stays one pass, said nowhere
    dev.device = 1;
    const gl_backend *cpu = m.g.be;
    m.g.be = &dev;
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    optim_fuse_describe(&m.o, line, sizeof line);
    assert_string_equal(line, "");
    m.g.be = cpu;
    fmodel_free(&m);
    fmodel_build(&m, mlp, sgd_all, shape_1d(24));
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, "more than one process"));
    optim_fuse_describe(&m.o, line, sizeof line);
    assert_non_null(strstr(line, "more than one process"));
    m.g.layer_done = (void (*)(void *, int))abort;  // gradient buckets handed to MPI
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    m.g.layer_done = NULL;
    assert_true(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    optim_fuse_cancel(&m.o);  // the loss was not finite: nothing ran
    assert_null(m.g.params_done);
    assert_false(m.o.fuse.armed);
    m.o.fuse.on = false;
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    fmodel_free(&m);
    fmodel_build(&m, mlp, "  lr: 0.1\n  fuse: false\n", shape_1d(24));
    assert_false(m.o.fuse.on);
    assert_false(optim_fuse_arm(&m.o, &m.g, 0.1, NULL));
    optim_fuse_describe(&m.o, line, sizeof line);
    assert_string_equal(line, "");
    fmodel_free(&m);
}

// A non-finite gradient in a layer: the layers backward reached before it are updated, its
// non-finite chunk and the layers after it are not, and optim_step returns the non-finite norm
// without counting a step.
static void test_nonfinite_stops_the_updates(void **state)
{
    (void)state;
    fmodel m;
    fmodel_build(&m, mlp, sgd_all, shape_1d(24));
    gl_graph *g = &m.g;
    const int64_t n = g->nparams;
    float *w0 = malloc(sizeof(float) * (size_t)n);
    assert_non_null(w0);
    memcpy(w0, g->params, sizeof(float) * (size_t)n);
    tl_fill_uniform(g->grads, n, -1.0f, 1.0f, 300);
    const gl_optim_chunk *bad = &m.o.chunks[m.o.layer_chunk[2] + 5];  // in the 3000-unit layer's weight
    g->grads[bad->offset + 3] = NAN;
    const int last = g->nlayers - 1;
    assert_true(optim_fuse_arm(&m.o, g, 0.1, NULL));
    for (int i = last; i >= 0; i--) g->params_done(g->params_done_ctx, i);  // backward's order
    double norm = optim_step(&m.o, g, 0.1);
    assert_true(isnan(norm));
    assert_int_equal(m.o.steps, 0);
    const gl_optim_chunk *l1 = &m.o.chunks[m.o.layer_chunk[1] - 1];  // the first layer's last chunk
    assert_memory_equal(g->params, w0, sizeof(float) * (size_t)(l1->offset + l1->len));
    assert_memory_equal(g->params + bad->offset, w0 + bad->offset, sizeof(float) * (size_t)bad->len);
    const int64_t top = m.o.chunks[m.o.layer_chunk[last]].offset;
    int64_t moved = 0;
    for (int64_t i = top; i < n; i++) moved += g->params[i] != w0[i];
    assert_true(moved > (n - top) / 2);  // the last layer, which backward reached first, was updated
    // An Inf in the last layer, the first backward reaches: no other layer is updated.
    memcpy(g->params, w0, sizeof(float) * (size_t)n);
    tl_fill_uniform(g->grads, n, -1.0f, 1.0f, 301);
    g->grads[m.o.chunks[m.o.layer_chunk[last]].offset] = INFINITY;
    assert_true(optim_fuse_arm(&m.o, g, 0.1, NULL));
    for (int i = last; i >= 0; i--) g->params_done(g->params_done_ctx, i);
    assert_false(isfinite(optim_step(&m.o, g, 0.1)));
    assert_memory_equal(g->params, w0, sizeof(float) * (size_t)top);
    free(w0);
    fmodel_free(&m);
}

// A step whose backward reached no layer (its hook never ran: a batch of no samples): optim_step
// does the whole update, with the bits of the pass after backward.
static void test_step_backward_did_not_reach(void **state)
{
    (void)state;
    fmodel a, b;
    fmodel_build(&a, mlp, sgd_all, shape_1d(24));
    fmodel_build(&b, mlp, sgd_all, shape_1d(24));
    const int64_t n = a.g.nparams;
    tl_fill_uniform(a.g.grads, n, -1.0f, 1.0f, 400);
    memcpy(b.g.grads, a.g.grads, sizeof(float) * (size_t)n);
    assert_true(optim_fuse_arm(&a.o, &a.g, 0.1, NULL));
    // Half the layers reached (the last ones), the rest not.
    for (int i = a.g.nlayers - 1; i >= 2; i--) a.g.params_done(a.g.params_done_ctx, i);
    double na = optim_step(&a.o, &a.g, 0.1), nb = optim_step(&b.o, &b.g, 0.1);
    assert_true(na == nb);
    assert_memory_equal(a.g.params, b.g.params, sizeof(float) * (size_t)n);
    assert_memory_equal(a.o.velocity, b.o.velocity, sizeof(float) * (size_t)n);
    assert_int_equal(a.o.steps, 1);
    fmodel_free(&b);
    fmodel_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits_as_one_pass),
        cmocka_unit_test(test_models_take_the_fused_paths),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nonfinite_stops_the_updates),
        cmocka_unit_test(test_step_backward_did_not_reach),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
