// test_graph.c: building the layer graph: shape inference and the memory plan, `inputs:` wiring
// (and gradients when one tensor feeds two layers), non-finite detection, the summary table,
// parameter init, and forward against a hand-written composition.
#include <omp.h>

#include "testlib.h"

#include "galley/cpu_isa.h"

#include <stdint.h>

static int aligned(const void *p) { return ((uintptr_t)p % GL_ARENA_ALIGN) == 0; }

static void assert_shape(const gl_shape *s, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    char buf[64];
    shape_format(s, buf, sizeof buf);
    int64_t want[3] = {d0, d1, d2};
    if (s->ndim != ndim) fail_msg("shape %s: want %d dims", buf, ndim);
    for (int i = 0; i < ndim; i++)
        if (s->d[i] != want[i]) fail_msg("shape %s: dim %d should be %lld", buf, i, (long long)want[i]);
}

// ---- shapes and the memory plan ---------------------------------------------------------------

static void test_shape_inference_and_plan(void **state)
{
    (void)state;
    tl_model m;
    // Input [2, 3, 4]: the activation keeps it, dense flattens it (24 features).
    tl_model_build(&m,
                   "    - {type: tanh, name: t}\n"
                   "    - {type: dense, units: 7, name: h}\n"
                   "    - {type: relu, name: r}\n"
                   "    - {type: dense, units: 3, bias: false, name: out}\n",
                   (gl_shape){3, {2, 3, 4}}, 5);
    gl_graph *g = &m.g;
    assert_int_equal(g->nlayers, 4);
    assert_int_equal(g->batch, 5);
    assert_int_equal(g->input.size, 24);
    assert_shape(&g->layers[0].out.shape, 3, 2, 3, 4);
    assert_int_equal(g->layers[0].out.size, 24);
    assert_shape(&g->layers[1].out.shape, 1, 7, 0, 0);
    assert_shape(&g->layers[2].out.shape, 1, 7, 0, 0);
    assert_shape(&g->layers[3].out.shape, 1, 3, 0, 0);
    assert_ptr_equal(graph_output(g), &g->layers[3].out);
    // Default wiring: each layer reads the one before; the first reads the input.
    assert_ptr_equal(g->layers[0].in[0], &g->input);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(g->layers[i].nin, 1);
        assert_ptr_equal(g->layers[i].in[0], &g->layers[i - 1].out);
    }
    // Parameters: h.weight [7, 24], h.bias [7], out.weight [3, 7], laid out in order.
    const layer_t *h = &g->layers[1], *o = &g->layers[3];
    assert_int_equal(h->nparams, 2);
    assert_shape(&h->params[0].shape, 2, 7, 24, 0);
    assert_int_equal(h->params[0].offset, 0);
    assert_int_equal(h->params[1].offset, 168);
    assert_int_equal(o->nparams, 1);
    assert_int_equal(o->params[0].offset, 175);
    assert_int_equal(g->nparams, 175 + 21);
    assert_int_equal(g->flops, 2 * 24 * 7 + 2 * 7 * 3);
    // Input, then data + grad per layer, but r shares h's data buffer (graph_fuse_acts: the dense
    // layer applies it as it stores).
    assert_true(g->layers[2].act_done);
    assert_ptr_equal(g->layers[2].out.data, g->layers[1].out.data);
    // Input, outputs (r's being h's), and the gradients' pool: per sample, in 16-float (64-byte)
    // slots, t's 32 at 0, h's 16 at 32 (live with t's: h's backward writes t's), r's 16 at 0 (t's
    // and r's are never live at once) and out's 16 at 16: 48 floats, where 80 kept each its own.
    assert_int_equal(g->grad_floats, 48);
    assert_int_equal(g->act_floats, 24 + (24 + 7 + 7 + 3) - 7 + 48);
    assert_int_equal(g->layers[0].grad_off, 0);
    assert_int_equal(g->layers[1].grad_off, 32);
    assert_int_equal(g->layers[2].grad_off, 0);
    assert_int_equal(g->layers[3].grad_off, 16);
    assert_true(g->bytes >= (size_t)(2 * g->nparams + g->act_floats * g->batch) * sizeof(float));
    // Bound: every tensor carved, aligned, inside the arena, grads where they belong.
    assert_true(m.a.used <= m.a.cap);
    assert_true(aligned(g->params) && aligned(g->grads) && aligned(g->input.data));
    assert_null(g->input.grad);
    for (int i = 0; i < 4; i++) {
        const layer_t *l = &g->layers[i];
        assert_true(aligned(l->out.data) && aligned(l->out.grad));
        assert_true((uint8_t *)l->out.grad >= m.a.base &&
                    (uint8_t *)(l->out.grad + l->out.size * g->batch) <= m.a.base + m.a.used);
        assert_true(l->out.data + l->out.size * g->batch <= l->out.grad || l->out.grad + l->out.size * g->batch <= l->out.data);
    }
    assert_ptr_equal(h->w, g->params);
    assert_ptr_equal(o->w, g->params + 175);
    assert_ptr_equal(o->dw, g->grads + 175);
    tl_model_free(&m);
}

static void test_build_error_names_the_layer(void **state)
{
    (void)state;
    recipe_t r;
    char path[64];
    char *errors = NULL;
    char *yaml = tl_recipe_text("    - {type: dense, units: 4, name: a}\n"
                                "    - {type: dense, units: 4, name: b, inputs: input}\n"
                                "    - {type: relu, name: both, inputs: [a, b]}\n");
    assert_int_equal(tl_recipe_try(&r, yaml, 0, NULL, &errors, path), 0);
    free(errors);
    free(yaml);
    gl_graph g;
    tl_stream s;
    int rc = graph_build(&g, &r, shape_1d(5), 2, backend_cpu(), tl_stream_open(&s));
    char *e = tl_stream_close(&s);
    char want[256];
    snprintf(want, sizeof want, "%s:5:7: error: model.layers[2] (both): ", path);
    if (rc != -1 || strncmp(e, want, strlen(want)) || !strstr(e, "relu") || !strstr(e, "got 2") ||
        strchr(e, '\n') != e + strlen(e) - 1)
        fail_msg("graph_build returned %d with:\n%s\nwant one line starting '%s' about the relu's 2 inputs", rc, e,
                 want);
    free(e);
    graph_free(&g);
    recipe_free(&r);
}

// ---- wiring and gradients -----------------------------------------------------------------------

#define N 3

typedef struct {
    gl_graph *g;
    const float *r;  // L = sum(out * r)
} wctx;

static double wloss(void *p)
{
    wctx *c = p;
    graph_forward(c->g, N, true);
    const gl_tensor *t = graph_output(c->g);
    double l = 0;
    for (int64_t i = 0; i < N * t->size; i++) l += (double)t->data[i] * c->r[i];
    return l;
}

// Sets the output gradient to c->r and runs graph_backward.
static void backward_with(wctx *c)
{
    wloss(c);
    memcpy(graph_output(c->g)->grad, c->r, sizeof(float) * (size_t)(N * graph_output(c->g)->size));
    graph_backward(c->g, N);
}

// FD check of every parameter of the listed layers against g->grads.
static void check_params(gl_graph *g, wctx *c, const char *const *names, int count)
{
    double num[64];
    for (int q = 0; q < count; q++) {
        const layer_t *l = &g->layers[tl_layer(g, names[q])];
        for (int p = 0; p < l->nparams; p++) {
            const gl_param *pp = &l->params[p];
            assert_true(pp->size <= 64);
            float an[64];
            memcpy(an, g->grads + pp->offset, sizeof(float) * (size_t)pp->size);
            tl_fd_grad(g->params + pp->offset, pp->size, 1e-2f, wloss, c, num);
            char what[128];
            snprintf(what, sizeof what, "%s.%s", names[q], pp->name);
            double mx = tl_check_grad(what, an, num, pp->size, 2e-2, 2e-3);
            if (mx < 1e-3) fail_msg("%s: no dependence on the loss", what);
        }
    }
}

static void test_inputs_wire_non_adjacent_layers(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 6, name: h}\n"
                       "    - {type: relu, name: r}\n"
                       "    - {type: dense, units: 3, name: a, inputs: r}\n"
                       "    - {type: dense, units: 2, name: b, inputs: [r]}\n"
                       "    - {type: dense, units: 4, name: c, inputs: input}\n"
                       "    - {type: sigmoid, name: d, inputs: h}\n"
                       "    - {type: concat, name: e, inputs: [a, b, input, a]}\n",
                   shape_1d(5), N);
    gl_graph *g = &m.g;
    assert_ptr_equal(g->layers[2].in[0], &g->layers[1].out);
    assert_ptr_equal(g->layers[3].in[0], &g->layers[1].out);
    assert_ptr_equal(g->layers[4].in[0], &g->input);
    assert_ptr_equal(g->layers[5].in[0], &g->layers[0].out);
    assert_int_equal(g->layers[3].params[0].shape.d[1], 6);  // b reads r (6), not a (3)
    assert_int_equal(g->layers[4].params[0].shape.d[1], 5);  // c reads the input (5)
    assert_int_equal(g->layers[5].out.size, 6);
    const layer_t *e = &g->layers[6];
    assert_int_equal(e->nin, 4);
    assert_ptr_equal(e->in[0], &g->layers[2].out);
    assert_ptr_equal(e->in[1], &g->layers[3].out);
    assert_ptr_equal(e->in[2], &g->input);
    assert_ptr_equal(e->in[3], &g->layers[2].out);
    assert_shape(&e->out.shape, 1, 3 + 2 + 5 + 3, 0, 0);
    tl_model_free(&m);
}

// A branch that does not reach the output: its stale gradient must not leak into the shared
// tensor (graph_backward clears it), and the live path matches finite differences.
static void test_backward_ignores_a_dead_branch(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 6, name: h}\n"
                       "    - {type: tanh, name: r}\n"
                       "    - {type: dense, units: 3, name: head_a, inputs: r}\n"
                       "    - {type: dense, units: 4, name: head_b, inputs: [r]}\n",
                   shape_1d(5), N);
    gl_graph *g = &m.g;
    tl_fill_uniform(g->input.data, N * 5, -1, 1, 50);
    tl_fill_uniform(g->params, g->nparams, -1, 1, 51);
    float rb[N * 4];
    tl_fill_uniform(rb, N * 4, -1, 1, 52);
    wctx c = {g, rb};
    int a = tl_layer(g, "head_a");
    for (int64_t i = 0; i < N * 3; i++) g->layers[a].out.grad[i] = 1e3f;  // stale
    backward_with(&c);
    for (int64_t i = 0; i < g->layers[a].params[0].size; i++)
        assert_true(g->grads[g->layers[a].params[0].offset + i] == 0.0f);
    const char *const names[] = {"h", "head_b"};
    check_params(g, &c, names, 2);
    tl_model_free(&m);
}

// Two dense heads read the same tensor r and are joined by concat, so the loss depends on r
// through both: r's gradient is the sum of what each head hands back (checked by splitting R),
// and every parameter gradient upstream matches finite differences.
static void test_gradients_from_two_consumers_accumulate(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 6, name: h}\n"
                       "    - {type: tanh, name: r}\n"
                       "    - {type: dense, units: 3, name: head_a, inputs: r}\n"
                       "    - {type: dense, units: 4, name: head_b, inputs: [r]}\n"
                       "    - {type: concat, name: both, inputs: [head_a, head_b]}\n",
                   shape_1d(5), N);
    gl_graph *g = &m.g;
    tl_fill_uniform(g->input.data, N * 5, -1, 1, 60);
    tl_fill_uniform(g->params, g->nparams, -1, 1, 61);
    float r[N * 7], ra[N * 7], rb[N * 7];
    tl_fill_uniform(r, N * 7, -1, 1, 62);
    for (int i = 0; i < N * 7; i++) {  // R = Ra + Rb: Ra covers head_a's columns, Rb head_b's
        ra[i] = i % 7 < 3 ? r[i] : 0.0f;
        rb[i] = i % 7 < 3 ? 0.0f : r[i];
    }
    int ir = tl_layer(g, "r");
    float only_a[N * 6], only_b[N * 6];
    wctx ca = {g, ra}, cb = {g, rb}, c = {g, r};
    backward_with(&ca);
    memcpy(only_a, g->layers[ir].out.grad, sizeof only_a);
    backward_with(&cb);
    memcpy(only_b, g->layers[ir].out.grad, sizeof only_b);
    backward_with(&c);
    double diff = 0;
    for (int i = 0; i < N * 6; i++) {
        if (fabsf(g->layers[ir].out.grad[i] - (only_a[i] + only_b[i])) > 1e-5f)
            fail_msg("r.grad[%d] = %g, but the heads hand back %g + %g", i, g->layers[ir].out.grad[i], only_a[i],
                     only_b[i]);
        diff += fabs(only_a[i]) * fabs(only_b[i]);
    }
    assert_true(diff > 1e-2);  // both heads contribute
    const char *const names[] = {"h", "head_a", "head_b"};
    check_params(g, &c, names, 3);
    tl_model_free(&m);
}

// Layers that write their input's gradient first (activations, max pooling) write it whole
// instead of adding to a cleared buffer (layer.h sets_grad): the same bits as clearing and
// adding, every gradient buffer starting as NaN so that an element left unwritten shows. The
// relu output read by two layers (a residual add) still goes through clearing.
static void fill_grads_nan(gl_graph *g)
{
    for (int64_t i = 0; i < g->nparams; i++) g->grads[i] = __builtin_nanf("");
    for (int i = 0; i < g->nlayers; i++)
        for (int64_t j = 0; j < N * g->layers[i].out.size; j++) g->layers[i].out.grad[j] = __builtin_nanf("");
}

// Random inputs and parameters for a (streams seed, seed + 1), the same for b: two plans of one model.
static void same_start(gl_graph *a, gl_graph *b, uint64_t seed)
{
    tl_fill_uniform(a->input.data, N * a->input.size, -1, 1, seed);
    tl_fill_uniform(a->params, a->nparams, -0.5, 0.5, seed + 1);
    memcpy(b->input.data, a->input.data, sizeof(float) * (size_t)(N * a->input.size));
    memcpy(b->params, a->params, sizeof(float) * (size_t)a->nparams);
}

// same_start(a, b, seed), then backward on both from one random output gradient (3 per sample,
// stream seed + 2), kept in r.
static void backward_both(gl_graph *a, gl_graph *b, uint64_t seed, float r[N * 3])
{
    same_start(a, b, seed);
    tl_fill_uniform(r, N * 3, -1, 1, seed + 2);
    wctx ca = {a, r}, cb = {b, r};
    backward_with(&ca);
    backward_with(&cb);
}

// tl_model_build with every output's gradient kept (graph_keep_grads): for the tests that
// compare every output's gradient after backward.
// The last layer of i's grad_with chain: the one whose gradient buffer i's is.
static int grad_root(const gl_graph *g, int i)
{
    while (g->layers[i].grad_with) i = (int)(g->layers[i].grad_with - g->layers);
    return i;
}

static void build_kept(tl_model *m, const char *layers, gl_shape input)
{
    char *errors = NULL;
    if (tl_model_try_keep(m, layers, input, N, backend_cpu(), true, &errors) != 0) {
        char copy[2048];
        snprintf(copy, sizeof copy, "%s", errors ? errors : "");
        free(errors);
        fail_msg("model did not build:\n%s", copy);
    }
}

static void test_first_writers_write_gradients_whole(void **state)
{
    (void)state;
    tl_model m;
    build_kept(&m, "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: relu, name: r1}\n"
                       "    - {type: max_pool, kernel: 2, name: p1}\n"
                       "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c2}\n"
                       "    - {type: leaky_relu, slope: 0.1, name: r2}\n"
                       "    - {type: add, inputs: [r2, p1], name: res}\n"
                       "    - {type: max_pool, kernel: 2, name: p2}\n"
                       "    - {type: tanh, name: t}\n"
                       "    - {type: flatten, name: fl}\n"
                       "    - {type: dense, units: 3, name: head}\n",
                   (gl_shape){3, {2, 9, 9}});
    gl_graph *g = &m.g;
    tl_fill_uniform(g->input.data, N * g->input.size, -1, 1, 70);
    tl_fill_uniform(g->params, g->nparams, -0.5, 0.5, 71);
    float r[N * 3];
    tl_fill_uniform(r, N * 3, -1, 1, 72);
    wctx c = {g, r};
    const int64_t ng = g->nparams;
    int64_t acts = 0;
    for (int i = 0; i < g->nlayers; i++) acts += N * g->layers[i].out.size;
    float *gw = malloc(sizeof(float) * (size_t)ng), *ga = malloc(sizeof(float) * (size_t)acts);
    // 1: the CPU backend's set kernels
    fill_grads_nan(g);
    backward_with(&c);
    // written whole: the inputs of head (a dense), fl (a flatten), t, p2, r2, p1 and r1 (each its input's last
    // reader), and both of res's: p1's output feeds c2 and res, res (an add) writes it, then c2 adds
    const char *const whole[] = {"head", "fl", "t", "p2", "res", "r2", "p1", "r1"};
    int sets = 0;
    for (int i = 0; i < g->nlayers; i++) sets += g->layers[i].grad_set[0];
    assert_int_equal(sets, 8);
    for (int i = 0; i < 8; i++) assert_true(g->layers[tl_layer(g, whole[i])].grad_set[0]);
    assert_true(g->layers[tl_layer(g, "res")].grad_set[1]);
    memcpy(gw, g->grads, sizeof(float) * (size_t)ng);
    for (int i = 0, o = 0; i < g->nlayers; i++) {
        memcpy(ga + o, g->layers[i].out.grad, sizeof(float) * (size_t)(N * g->layers[i].out.size));
        o += (int)(N * g->layers[i].out.size);
    }
    // 2: without them, the graph clears and the activations, pools and dense add (the add and the flatten
    // copy on any backend: test_set_gradients_equal_added_ones checks both ways)
    gl_backend plain = *backend_cpu();
    plain.act_backward_set = NULL;
    plain.max_pool_backward_set = NULL;
    plain.dense_backward_set = NULL;
    plain.conv_backward_set = NULL;
    g->be = &plain;
    fill_grads_nan(g);
    backward_with(&c);
    for (int i = 0; i < g->nlayers; i++)
        assert_true(g->layers[i].grad_set[0] == (i == tl_layer(g, "res") || i == tl_layer(g, "fl")));
    for (int64_t i = 0; i < ng; i++)
        if (memcmp(&gw[i], &g->grads[i], sizeof(float)) || isnan(gw[i]))
            fail_msg("grads[%lld]: %a written whole, %a cleared and added", (long long)i, gw[i], g->grads[i]);
    assert_true(g->layers[tl_layer(g, "r1")].grad_by == &g->layers[tl_layer(g, "p1")]);
    for (int i = 0, o = 0; i < g->nlayers; i++) {
        // r1's output gradient: nothing writes it where p1 applies r1's derivative (graph_build)
        for (int64_t j = 0; !g->layers[i].grad_by && j < N * g->layers[i].out.size; j++)
            if (memcmp(&ga[o + j], &g->layers[i].out.grad[j], sizeof(float)) || isnan(ga[o + j]))
                fail_msg("%s.grad[%lld]: %a written whole, %a cleared and added", g->layers[i].cfg->name,
                         (long long)j, ga[o + j], g->layers[i].out.grad[j]);
        o += (int)(N * g->layers[i].out.size);
    }
    g->be = backend_cpu();
    free(gw), free(ga);
    tl_model_free(&m);
}

// Each layer kind that can write an input's gradient whole (grad_set) gives the values of adding
// to a cleared one: dx = dy against 0 + dy for the add and the flatten, dx = dy . W written
// against added for the dense and the attention (dense_backward_set), and the convolution's input
// gradient written (conv_backward_set: the implicit GEMM, the im2col path, and F(2,3) forced),
// whatever dx held before (NaN where it is written whole). Equal as floats: a zero's sign may
// differ (dy itself against 0 + dy), nothing else. A vector, a token and a spatial model.
static void check_set_equals_add(gl_graph *g, const char *const *names, int count)
{
    tl_fill_uniform(g->input.data, N * g->input.size, -1, 1, 80);
    tl_fill_uniform(g->params, g->nparams, -0.5, 0.5, 81);
    const int64_t no = N * graph_output(g)->size;
    float *r = malloc(sizeof(float) * (size_t)no);
    tl_fill_uniform(r, no, -1, 1, 82);
    wctx c = {g, r};
    backward_with(&c);
    for (int q = 0; q < count; q++) {
        layer_t *l = &g->layers[tl_layer(g, names[q])];
        assert_true(l->grad_set[0]);
        for (int k = 0; k < l->nin; k++) {
            const int64_t len = N * l->in[k]->size;
            float *set = malloc(sizeof(float) * (size_t)len);
            bool saved[8];
            for (int j = 0; j < l->nin; j++) saved[j] = l->grad_set[j];
            for (int j = 0; j < l->nin; j++) l->grad_set[j] = true;  // written whole over NaN
            for (int64_t i = 0; i < len; i++) l->in[k]->grad[i] = NAN;
            l->kind->backward(l, g->be, N);
            memcpy(set, l->in[k]->grad, sizeof(float) * (size_t)len);
            for (int j = 0; j < l->nin; j++) l->grad_set[j] = false;  // cleared, then added to
            memset(l->in[k]->grad, 0, sizeof(float) * (size_t)len);
            l->kind->backward(l, g->be, N);
            for (int64_t i = 0; i < len; i++)
                if (set[i] != l->in[k]->grad[i] || isnan(set[i]))
                    fail_msg("%s input %d [%lld]: %a written whole, %a added", names[q], k, (long long)i, set[i],
                             l->in[k]->grad[i]);
            for (int j = 0; j < l->nin; j++) l->grad_set[j] = saved[j];
            free(set);
        }
    }
    free(r);
}

static void test_set_gradients_equal_added_ones(void **state)
{
    (void)state;
    tl_model m;
    build_kept(&m, "    - {type: dense, units: 40, name: d1}\n"
                   "    - {type: tanh, name: t1}\n"
                   "    - {type: dense, units: 40, name: d2}\n"
                   "    - {type: add, inputs: [d2, t1], name: res}\n"
                   "    - {type: flatten, name: fl}\n"
                   "    - {type: dense, units: 33, name: head}\n"
                   "  fuse: false\n",  // else fl and res share their inputs' gradients (graph_share_grads)
               (gl_shape){1, {37}});
    const char *const vec[] = {"res", "fl", "head"};
    check_set_equals_add(&m.g, vec, 3);
    tl_model_free(&m);
    build_kept(&m, "    - {type: dense, units: 32, name: d0}\n"
                   "    - {type: layer_norm, name: ln}\n"
                   "    - {type: attention, heads: 2, name: att}\n"
                   "    - {type: add, inputs: [att, d0], name: res}\n"
                   "    - {type: dense, units: 36, name: fc}\n"
                   "  fuse: false\n",  // else att's gradient is res's (graph_share_grads): res would not write it
               shape_tokens(13, 32));
    const char *const tok[] = {"att", "res", "fc"};
    check_set_equals_add(&m.g, tok, 3);
    tl_model_free(&m);
    const char *const algos[] = {"direct", "winograd"};
    for (int a = 0; a < 2; a++) {
        setenv("GALLEY_CONV_ALGO", algos[a], 1);
        build_kept(&m, "    - {type: conv, filters: 16, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: conv, filters: 16, kernel: 3, padding: 1, name: c2}\n"
                       "    - {type: conv, filters: 6, kernel: 3, stride: 2, name: c3}\n"
                       "    - {type: flatten, name: fl}\n"
                       "    - {type: dense, units: 3, name: head}\n"
                       "  fuse: false\n",  // fl copies (no view)
                   (gl_shape){3, {3, 10, 11}});
        const char *const sp[] = {"c2", "c3", "fl", "head"};
        check_set_equals_add(&m.g, sp, 4);
        tl_model_free(&m);
    }
    unsetenv("GALLEY_CONV_ALGO");
}

// The model of `layers` on `input` built twice: as written (mf) and with model.fuse: false (mu),
// both keeping every buffer for inspection (keep), or with gradients shared by lifetime as in
// training.
static void build_fused_and_not(const char *layers, gl_shape input, tl_model *mf, tl_model *mu, bool keep)
{
    size_t len = strlen(layers) + 32;
    char *unfused = malloc(len);
    assert_non_null(unfused);
    snprintf(unfused, len, "%s  fuse: false\n", layers);  // model.fuse, beside model.layers
    char *errors = NULL;
    assert_int_equal(tl_model_try_keep(mf, layers, input, N, backend_cpu(), keep, &errors), 0);
    assert_int_equal(tl_model_try_keep(mu, unfused, input, N, backend_cpu(), keep, &errors), 0);
    free(unfused);
}

// A relu or leaky_relu that alone reads a layer's output shares its buffer (graph_fuse_acts): a
// convolution applies it as it stores (fast kernels at stride 1, im2col at stride 2), and so do
// a transposed convolution, batch norm and a dense layer; after an add it runs in place. Forward and backward
// give the bits of the graph built with model.fuse: false, with fewer activation buffers; the
// convolution whose output two layers read is not fused.
static void test_activation_fusion_keeps_the_bits(void **state)
{
    (void)state;
    const char *layers = "    - {type: conv, filters: 5, kernel: 3, padding: 1, name: c1}\n"
                         "    - {type: relu, name: r1}\n"
                         "    - {type: max_pool, kernel: 2, name: p1}\n"
                         "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c2}\n"
                         "    - {type: leaky_relu, slope: 0.2, name: r2}\n"
                         "    - {type: batch_norm, name: bn}\n"
                         "    - {type: leaky_relu, slope: 0.05, name: rb}\n"
                         "    - {type: conv_transpose, filters: 3, kernel: 2, stride: 2, name: ct}\n"
                         "    - {type: leaky_relu, slope: 0.1, name: rt}\n"
                         "    - {type: conv, filters: 6, kernel: 3, stride: 2, name: c3}\n"
                         "    - {type: relu, name: r3}\n"
                         "    - {type: conv, filters: 6, kernel: 1, name: c4}\n"
                         "    - {type: relu, name: r4}\n"
                         "    - {type: add, inputs: [r4, c4], name: both}\n"
                         "    - {type: relu, name: ra}\n"
                         "    - {type: flatten}\n"
                         "    - {type: dense, units: 7, name: d1}\n"
                         "    - {type: relu, name: rd}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    tl_model mf, mu;
    build_fused_and_not(layers, (gl_shape){3, {2, 12, 12}}, &mf, &mu, true);
    gl_graph *f = &mf.g, *u = &mu.g;
    const char *const stored[] = {"r1", "r2", "rb", "rt", "r3", "rd"}, *const in_place[] = {"ra"};
    for (int i = 0; i < 6; i++) assert_true(f->layers[tl_layer(f, stored[i])].act_done);
    for (int i = 0; i < 1; i++) {
        assert_true(f->layers[tl_layer(f, in_place[i])].act_inplace);
        assert_false(f->layers[tl_layer(f, in_place[i])].act_done);
    }
    const layer_t *r4 = &f->layers[tl_layer(f, "r4")];
    assert_false(r4->act_done || r4->act_inplace);  // c4's output is read by `both` too
    assert_true(f->layers[tl_layer(f, "c1")].store_pool == &f->layers[tl_layer(f, "p1")]);  // graph_fuse_pools
    for (int i = 0; i < u->nlayers; i++) assert_false(u->layers[i].act_done || u->layers[i].act_inplace);
    assert_true(f->act_floats < u->act_floats);
    assert_true(f->bytes < u->bytes);
    float r[N * 3];
    backward_both(f, u, 80, r);
    for (int i = 0; i < f->nlayers; i++) {
        const layer_t *lf = &f->layers[i], *lu = &u->layers[i];
        // A producer's buffer holds its activation's output: checked at the activation. One
        // that writes the pool after it instead leaves it unwritten: checked at the pool.
        bool shared = i + 1 < f->nlayers && (f->layers[i + 1].act_done || f->layers[i + 1].act_inplace);
        shared = shared || !graph_out_written(f, i);
        for (int64_t j = 0; !shared && j < N * lf->out.size; j++)
            if (memcmp(&lf->out.data[j], &lu->out.data[j], sizeof(float)))
                fail_msg("%s.out[%lld]: fused %a, unfused %a", lf->cfg->name, (long long)j, lf->out.data[j],
                         lu->out.data[j]);
        // An activation whose derivative the pool after it applies (grad_by) leaves its own
        // output gradient unwritten: compared at the layer before it.
        for (int64_t j = 0; !lf->grad_by && j < N * lf->out.size; j++)
            if (memcmp(&lf->out.grad[j], &lu->out.grad[j], sizeof(float)))
                fail_msg("%s.grad[%lld]: fused %a, unfused %a", lf->cfg->name, (long long)j, lf->out.grad[j],
                         lu->out.grad[j]);
    }
    for (int64_t j = 0; j < f->nparams; j++)
        if (memcmp(&f->grads[j], &u->grads[j], sizeof(float)))
            fail_msg("grads[%lld]: fused %a, unfused %a", (long long)j, f->grads[j], u->grads[j]);
    // The running statistics the training pass left, then an evaluation pass that normalises with them.
    const layer_t *bf = &f->layers[tl_layer(f, "bn")], *bu = &u->layers[tl_layer(u, "bn")];
    assert_memory_equal(bf->state, bu->state, sizeof(float) * (size_t)bf->state_floats);
    graph_forward(f, N, false);
    graph_forward(u, N, false);
    const gl_tensor *of = graph_output(f), *ou = graph_output(u);
    assert_memory_equal(of->data, ou->data, sizeof(float) * (size_t)(N * of->size));
    const char *const producers[] = {"c2", "bn", "ct", "d1"};  // the activations had both signs to work on
    for (int k = 0; k < 4; k++) {
        const layer_t *p = &u->layers[tl_layer(u, producers[k])];
        int positive = 0, negative = 0;
        for (int64_t j = 0; j < N * p->out.size; j++) positive += p->out.data[j] > 0, negative += p->out.data[j] < 0;
        if (!(positive > 0 && negative > 0)) fail_msg("%s: %d positive, %d negative", producers[k], positive, negative);
    }
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// A flatten whose input it alone reads is a view of it (graph_fuse_views): the same value and
// gradient buffers, a view of a view too, one activation buffer less each; a flatten whose input
// another layer also reads still copies, and its gradient is the add's after it, which alone reads
// it (graph_share_grads), while the add's other input keeps its own. Forward and backward give the bits of model.fuse:
// false (every gradient kept, then shared by lifetime as training plans them), at 1 and 2 threads.
static void test_flatten_is_a_view(void **state)
{
    (void)state;
    const char *layers = "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                         "    - {type: max_pool, kernel: 2, name: p1}\n"
                         "    - {type: flatten, name: fl}\n"
                         "    - {type: flatten, name: fl3}\n"
                         "    - {type: dense, units: 300, name: d1}\n"
                         "    - {type: tanh, name: t}\n"
                         "    - {type: flatten, inputs: [t], name: fl2}\n"
                         "    - {type: add, inputs: [fl2, t], name: sum}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    for (int keep = 1; keep >= 0; keep--)
        for (int nt = 1; nt <= 2; nt++) {
            omp_set_num_threads(nt);
            tl_model mf, mu;
            build_fused_and_not(layers, (gl_shape){3, {2, 8, 8}}, &mf, &mu, keep);
            gl_graph *f = &mf.g, *u = &mu.g;
            const layer_t *p1 = &f->layers[tl_layer(f, "p1")], *fl = &f->layers[tl_layer(f, "fl")],
                          *fl3 = &f->layers[tl_layer(f, "fl3")], *fl2 = &f->layers[tl_layer(f, "fl2")];
            assert_true(fl->view && fl3->view);
            assert_false(fl2->view);  // t is read by sum too
            for (int i = 0; i < u->nlayers; i++) assert_false(u->layers[i].view);
            assert_ptr_equal(fl->out.data, p1->out.data);
            assert_ptr_equal(fl3->out.data, p1->out.data);
            assert_ptr_equal(fl->out.grad, p1->out.grad);
            assert_ptr_equal(fl3->out.grad, p1->out.grad);
            assert_true(fl2->out.data != f->layers[tl_layer(f, "t")].out.data);
            // two outputs less; kept, two output gradients less
            assert_int_equal((u->act_floats - u->grad_floats) - (f->act_floats - f->grad_floats), 2 * fl->out.size);
            // fl2's gradient is sum's (graph_share_grads: sum alone reads it), t's its own
            const layer_t *sum = &f->layers[tl_layer(f, "sum")];
            assert_ptr_equal(fl2->grad_with, sum);
            assert_true(sum->grad_shared[0] && !sum->grad_shared[1]);
            assert_ptr_equal(fl2->out.grad, sum->out.grad);
            if (keep)
                assert_int_equal(u->grad_floats - f->grad_floats,
                                 2 * ((fl->out.size + 15) / 16 * 16) + (fl2->out.size + 15) / 16 * 16);
            // d1 writes the views' gradient, p1's, as it reads its own: they must not meet (p1's
            // lifetime reaches up to d1's turn, graph_plan_grads; d1's, the largest, goes first,
            // and p1's would go beside c1's, over it, were p1's to end at fl)
            const layer_t *d1 = &f->layers[tl_layer(f, "d1")];
            const int64_t np = N * p1->out.size, nd = N * d1->out.size;
            if (!(p1->out.grad + np <= d1->out.grad || d1->out.grad + nd <= p1->out.grad))
                fail_msg("keep %d: p1's gradient meets d1's", keep);
            fill_grads_nan(f);
            fill_grads_nan(u);
            float r[N * 3];
            backward_both(f, u, 95, r);
            assert_memory_equal(graph_output(f)->data, graph_output(u)->data, sizeof(float) * N * 3);
            for (int64_t j = 0; j < f->nparams; j++)
                if (memcmp(&f->grads[j], &u->grads[j], sizeof(float)) || isnan(f->grads[j]))
                    fail_msg("%d threads, keep %d: grads[%lld]: view %a, copy %a", nt, keep, (long long)j, f->grads[j],
                             u->grads[j]);
            const gl_tensor *c1f = &f->layers[0].out, *c1u = &u->layers[0].out;  // the last gradient written
            for (int64_t j = 0; j < N * c1f->size; j++)
                if (memcmp(&c1f->grad[j], &c1u->grad[j], sizeof(float)) || isnan(c1f->grad[j]))
                    fail_msg("%d threads, keep %d: c1.grad[%lld]: view %a, copy %a", nt, keep, (long long)j,
                             c1f->grad[j], c1u->grad[j]);
            tl_model_free(&mf);
            tl_model_free(&mu);
        }
    omp_set_num_threads(1);
}

// One pool-fusion case at nt threads: the activations `fused` hand their derivative to the
// pool after them (`pools`, in the same order), `unfused` do not; every parameter gradient and
// the producers' output gradients have the bits of model.fuse: false; the pooled maxima had
// both signs, so the mask and the slope mattered.
static void check_pool_fusion(const char *layers, gl_shape input, int nt, const char *const fused[2],
                              const char *const pools[2], const char *unfused, const char *const producers[3])
{
    omp_set_num_threads(nt);
    tl_model mf, mu;
    build_fused_and_not(layers, input, &mf, &mu, true);
    gl_graph *f = &mf.g, *u = &mu.g;
    for (int k = 0; k < 2; k++) {
        assert_true(f->layers[tl_layer(f, fused[k])].grad_by == &f->layers[tl_layer(f, pools[k])]);
        assert_true(f->layers[tl_layer(f, pools[k])].grad_deferred);
    }
    assert_null(f->layers[tl_layer(f, unfused)].grad_by);
    for (int i = 0; i < u->nlayers; i++) assert_null(u->layers[i].grad_by);
    float r[N * 3];
    backward_both(f, u, 90, r);
    for (int64_t j = 0; j < f->nparams; j++)
        if (memcmp(&f->grads[j], &u->grads[j], sizeof(float)))
            fail_msg("%d threads: grads[%lld]: fused %a, unfused %a", nt, (long long)j, f->grads[j], u->grads[j]);
    for (int k = 0; k < 3; k++) {
        const layer_t *lf = &f->layers[tl_layer(f, producers[k])], *lu = &u->layers[tl_layer(u, producers[k])];
        assert_memory_equal(lf->out.grad, lu->out.grad, sizeof(float) * (size_t)(N * lf->out.size));
    }
    for (int k = 0; k < 2; k++) {
        const layer_t *p = &u->layers[tl_layer(u, pools[k])];
        int positive = 0, other = 0;
        for (int64_t j = 0; j < N * p->out.size; j++) positive += p->out.data[j] > 0, other += !(p->out.data[j] > 0);
        if (!(positive > 0 && other > 0)) fail_msg("%s: %d positive, %d not", pools[k], positive, other);
    }
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// The same models with gradients shared by lifetime, as training builds them: a pool that runs at
// its activation's turn (grad_by) reads its output gradient while writing the activation's input
// gradient, so the two must not share memory (graph_plan.c); the parameter gradients are the
// bits of the unfused model's. (The first version planned the pool's gradient as dead after the
// pool's own turn: on conv -> relu -> max_pool -> conv it lay on the conv's output gradient,
// which the scatter clears, and training at 2 threads gave a different loss on every run.)
static void check_pool_fusion_shared(const char *layers, gl_shape input, int nt)
{
    omp_set_num_threads(nt);
    tl_model mf, mu;
    build_fused_and_not(layers, input, &mf, &mu, false);
    gl_graph *f = &mf.g, *u = &mu.g;
    int deferred = 0;
    for (int i = 0; i < f->nlayers; i++) {
        const layer_t *a = &f->layers[i], *p = a->grad_by;
        if (!p) continue;
        deferred++;
        const float *dy = p->out.grad, *dx = a->in[0]->grad;
        const int64_t ny = N * p->out.size, nx = N * a->in[0]->size;
        if (!(dy + ny <= dx || dx + nx <= dy))
            fail_msg("%s's output gradient and %s's input gradient share memory", p->cfg->name, a->cfg->name);
    }
    assert_int_equal(deferred, 2);
    fill_grads_nan(f);
    fill_grads_nan(u);
    float r[N * 3];
    backward_both(f, u, 90, r);
    for (int64_t j = 0; j < f->nparams; j++)
        if (memcmp(&f->grads[j], &u->grads[j], sizeof(float)) || isnan(f->grads[j]))
            fail_msg("%d threads, shared gradients: grads[%lld]: fused %a, unfused %a", nt, (long long)j, f->grads[j],
                     u->grads[j]);
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// A relu or leaky_relu that alone reads its input and whose output a max_pool of non-overlapping
// windows alone reads leaves its derivative to the pool's scatter (graph_fuse_act_grads,
// max_pool_backward_act): not before an overlapping pool, nor where its input feeds another
// layer too. 2D and 3D, at 1 and 3 threads; windows of 2 that tile the map, and strides larger
// than the kernel. The pools' outputs, which hold the winners the derivative reads, are
// rewritten in place by a relu and a leaky_relu after p1 (q1): the sign they keep is all it reads.
// A relu or leaky_relu whose output a dense layer alone reads leaves its derivative to that
// layer's input gradient (graph_fuse_act_grads, dense_backward_act): per-token layers, so the rows
// (batch x tokens) and widths take galley's product with the gate in its store, on 1 and 3
// threads. The gradients are the bits of the graph built with model.fuse: false; an activation
// before a token pool keeps its own backward.
// Layer lf's output gradient (fused) against lu's (unfused) bit for bit, unless lf hands its
// derivative to the layer after it (grad_by), which then writes lf's input gradient instead.
static void check_out_grad(const layer_t *lf, const layer_t *lu, int nt)
{
    for (int64_t j = 0; !lf->grad_by && j < N * lf->out.size; j++)
        if (memcmp(&lf->out.grad[j], &lu->out.grad[j], sizeof(float)))
            fail_msg("%d threads: %s.grad[%lld]: fused %a, unfused %a", nt, lf->cfg->name, (long long)j,
                     lf->out.grad[j], lu->out.grad[j]);
}

// After backward_both: every layer's output but those a later layer reuses (a fused add's producer
// holds the sum; a relu running in place or a gelu keeping its derivative overwrites its input),
// every output gradient and the parameter gradients have the unfused graph's bits.
static void check_fused_bits(const gl_graph *f, const gl_graph *u, int nt)
{
    for (int i = 0; i < f->nlayers; i++) {
        const layer_t *lf = &f->layers[i], *lu = &u->layers[i];
        bool other = lf->store_res;
        for (int j = i + 1; j < f->nlayers; j++)
            other |= f->layers[j].in[0] == &lf->out && (f->layers[j].act_inplace || f->layers[j].keep_deriv);
        for (int64_t j = 0; !other && j < N * lf->out.size; j++)
            if (memcmp(&lf->out.data[j], &lu->out.data[j], sizeof(float)))
                fail_msg("%d threads: %s.out[%lld]: fused %a, unfused %a", nt, lf->cfg->name, (long long)j,
                         lf->out.data[j], lu->out.data[j]);
        check_out_grad(lf, lu, nt);
    }
    assert_memory_equal(f->grads, u->grads, sizeof(float) * (size_t)f->nparams);
}

// Builds `layers` on 16 tokens of 40 features fused and with model.fuse: false, keeping every
// buffer, and runs `check` on the two graphs at 1 and at 3 threads.
static void at_1_and_3_threads(const char *layers, void (*check)(gl_graph *f, gl_graph *u, int nt))
{
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt += 2) {
        omp_set_num_threads(nt);
        tl_model mf, mu;
        build_fused_and_not(layers, shape_tokens(16, 40), &mf, &mu, true);
        check(&mf.g, &mu.g, nt);
        tl_model_free(&mf);
        tl_model_free(&mu);
    }
    omp_set_num_threads(saved);
}

// The checks of the relu and leaky_relu cases below on the fused (f) and unfused (u) graphs.
static void check_dense_derivative(gl_graph *f, gl_graph *u, int nt)
{
    assert_true(f->layers[tl_layer(f, "r1")].grad_by == &f->layers[tl_layer(f, "d2")]);
    assert_true(f->layers[tl_layer(f, "r2")].grad_by == &f->layers[tl_layer(f, "d3")]);
    assert_null(f->layers[tl_layer(f, "r3")].grad_by);
    assert_null(u->layers[tl_layer(u, "r1")].grad_by);
    float r[N * 3];
    backward_both(f, u, 91, r);
    for (int i = 0; i < f->nlayers; i++) check_out_grad(&f->layers[i], &u->layers[i], nt);  // r1, r2: their dense's
    assert_memory_equal(f->grads, u->grads, sizeof(float) * (size_t)f->nparams);
}

static void test_dense_applies_the_activation_derivative(void **state)
{
    (void)state;
    const char *layers = "    - {type: dense, units: 40, name: d1}\n"
                         "    - {type: relu, name: r1}\n"
                         "    - {type: dense, units: 36, name: d2}\n"
                         "    - {type: leaky_relu, slope: 0.1, name: r2}\n"
                         "    - {type: dense, units: 33, name: d3}\n"
                         "    - {type: relu, name: r3}\n"
                         "    - {type: token_pool, mode: mean, name: pool}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    at_1_and_3_threads(layers, check_dense_derivative);
}

// The checks of the gelu cases below on the fused (f) and unfused (u) graphs at nt threads.
static void check_gelu_derivative(gl_graph *f, gl_graph *u, int nt)
{
    const char *const kept[] = {"g1", "g2", "g3", "g6"}, *const not_kept[] = {"g0", "g4", "g5"};
    const char *const producers[] = {"d1", "d2", "d3", "both"}, *const by[] = {"d2", "d3", "d4", NULL};
    for (int k = 0; k < 4; k++) {
        const layer_t *a = &f->layers[tl_layer(f, kept[k])];
        assert_true(a->keep_deriv);
        assert_false(u->layers[tl_layer(u, kept[k])].keep_deriv);
        assert_true(a->grad_by == (by[k] ? &f->layers[tl_layer(f, by[k])] : NULL));
    }
    for (int k = 0; k < 3; k++) assert_false(f->layers[tl_layer(f, not_kept[k])].keep_deriv);
    float r[N * 3];
    backward_both(f, u, 93, r);
    check_fused_bits(f, u, nt);  // the producers hold the derivatives; g1, g2, g3's gradients are their dense's
    graph_forward(f, N, false);
    graph_forward(u, N, false);
    for (int k = 0; k < 4; k++) {
        const layer_t *pf = &f->layers[tl_layer(f, producers[k])], *pu = &u->layers[tl_layer(u, producers[k])];
        assert_memory_equal(pf->out.data, pu->out.data, sizeof(float) * (size_t)(N * pf->out.size));
    }
    assert_memory_equal(graph_output(f)->data, graph_output(u)->data, sizeof(float) * (size_t)(N * 3));
    // Backward after that evaluation pass (a gradient check's): the gelus take x, as unfused.
    memcpy(graph_output(f)->grad, r, sizeof r), memcpy(graph_output(u)->grad, r, sizeof r);
    graph_backward(f, N), graph_backward(u, N);
    assert_memory_equal(f->grads, u->grads, sizeof(float) * (size_t)f->nparams);
}

// A gelu whose input it alone reads keeps its derivative there in training (graph_keep_derivs):
// the dense layer after it applies it as its product stores the input gradient (g1 and g3, 40
// and 36 wide: the gate in galley's store; g2, 20 wide: the product, then the derivative pass),
// or, before a token pool, its own backward multiplies by it (g6, after an add). Not on the model
// input (g0), nor where its input feeds another layer too (g4, with `both`), nor after a reshape
// (g5), after a max_pool or an activation (ga, gb below). At 1 and 3 threads every output
// gradient, parameter gradient and output but the producers' (which hold the derivatives) has the
// bits of model.fuse: false; an evaluation pass then leaves the producers' outputs, and the
// model's, as the unfused graph's, and a backward after it (x, not the derivative, in place) its
// gradients.
static void test_gelu_keeps_its_derivative(void **state)
{
    (void)state;
    const char *layers = "    - {type: gelu, name: g0}\n"
                         "    - {type: dense, units: 40, name: d1}\n"
                         "    - {type: gelu, name: g1}\n"
                         "    - {type: dense, units: 20, name: d2}\n"
                         "    - {type: gelu, name: g2}\n"
                         "    - {type: dense, units: 36, name: d3}\n"
                         "    - {type: gelu, name: g3}\n"
                         "    - {type: dense, units: 36, name: d4}\n"
                         "    - {type: gelu, name: g4}\n"
                         "    - {type: add, inputs: [d4, g4], name: both}\n"
                         "    - {type: gelu, name: g6}\n"
                         "    - {type: token_pool, mode: mean, name: pool}\n"
                         "    - {type: flatten, name: flat}\n"
                         "    - {type: gelu, name: g5}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    at_1_and_3_threads(layers, check_gelu_derivative);
    // Not after a max_pool whose backward reads its output (ga: the relu before it hands the pool
    // its derivative, read from the winners' signs) nor after an activation sharing its
    // producer's buffer (gb: the relu's backward reads it): the bits of model.fuse: false.
    const char *maps = "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: relu, name: r1}\n"
                       "    - {type: max_pool, kernel: 2, name: p1}\n"
                       "    - {type: gelu, name: ga}\n"
                       "    - {type: flatten, name: fl}\n"
                       "    - {type: dense, units: 40, name: d1}\n"
                       "    - {type: relu, name: r2}\n"
                       "    - {type: gelu, name: gb}\n"
                       "    - {type: dense, units: 3, name: head}\n";
    tl_model mf, mu;
    build_fused_and_not(maps, (gl_shape){3, {2, 8, 8}}, &mf, &mu, true);
    gl_graph *f = &mf.g, *u = &mu.g;
    assert_false(f->layers[tl_layer(f, "ga")].keep_deriv);
    assert_false(f->layers[tl_layer(f, "gb")].keep_deriv);
    assert_true(f->layers[tl_layer(f, "r1")].grad_by == &f->layers[tl_layer(f, "p1")]);
    assert_true(f->layers[tl_layer(f, "r2")].act_done);
    float r[N * 3];
    backward_both(f, u, 97, r);
    assert_memory_equal(f->grads, u->grads, sizeof(float) * (size_t)f->nparams);
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// The checks of the residual adds below on the fused (f) and unfused (u) graphs at nt threads.
static void check_residual_fusion(gl_graph *f, gl_graph *u, int nt)
{
    const char *const adds[] = {"r1", "r2", "r3", "r5", "r7"}, *const by[] = {"at", "d1", "d3", "d6", "d8"};
    for (int k = 0; k < 5; k++) {
        const layer_t *a = &f->layers[tl_layer(f, adds[k])], *p = &f->layers[tl_layer(f, by[k])];
        assert_ptr_equal(a->res_by, p);
        assert_ptr_equal(a->out.data, p->out.data);
        assert_null(u->layers[tl_layer(u, adds[k])].res_by);
    }
    assert_ptr_equal(f->layers[tl_layer(f, "d1")].store_res, &f->layers[tl_layer(f, "r1")].out);
    assert_ptr_equal(f->layers[tl_layer(f, "d6")].store_res, &f->layers[tl_layer(f, "d5")].out);
    assert_null(f->layers[tl_layer(f, "d5")].store_res);
    assert_null(f->layers[tl_layer(f, "r6")].res_by);  // d7 is read by d8 too; r5 is an add's
    assert_true(f->layers[tl_layer(f, "ra")].act_inplace);
    assert_true(f->layers[tl_layer(f, "g7")].keep_deriv);
    // one output buffer less per fused add (the gradients' pool is planned apart)
    // (and the in-place relu's)
    assert_true(f->act_floats - f->grad_floats + 6 * 16 * 40 == u->act_floats - u->grad_floats);
    float r[N * 3];
    backward_both(f, u, 101, r);
    check_fused_bits(f, u, nt);
    graph_forward(f, N, false);
    graph_forward(u, N, false);
    assert_memory_equal(graph_output(f)->data, graph_output(u)->data, sizeof(float) * (size_t)(N * 3));
}

// A residual add of two inputs is fused with the producer of one (graph_fuse_adds) where that
// producer (a dense layer, attention's output projection) can add the other as it stores and its
// output feeds the add alone: attention adding the model input (r1), a dense layer adding an add's
// output (r2: the sum lies in attention's buffer), a dense layer adding an input that another
// layer also reads (r3); of two dense layers over one input, the later one, whose residual is
// then made (r5: the earlier one would read a residual not yet computed); none where the
// producer's output is read twice (r6). A fused add's output (the producer's buffer) may then be
// shared again: a relu runs in place on it (ra), a gelu keeps its derivative there (g7). Forward
// and backward give the bits of model.fuse: false at 1 and 3 threads, an evaluation pass too, with
// one buffer less per fused add.
static void test_residual_add_fusion_keeps_the_bits(void **state)
{
    (void)state;
    const char *layers = "    - {type: layer_norm, name: n1}\n"
                         "    - {type: attention, heads: 2, name: at}\n"
                         "    - {type: add, inputs: [at, input], name: r1}\n"
                         "    - {type: dense, units: 40, name: d1}\n"
                         "    - {type: add, inputs: [r1, d1], name: r2}\n"
                         "    - {type: relu, name: ra}\n"
                         "    - {type: dense, units: 40, name: d2}\n"
                         "    - {type: gelu, name: g}\n"
                         "    - {type: dense, units: 40, name: d3}\n"
                         "    - {type: add, inputs: [d3, d2], name: r3}\n"
                         "    - {type: dense, units: 40, name: d5, inputs: [r3]}\n"
                         "    - {type: dense, units: 40, name: d6, inputs: [r3]}\n"
                         "    - {type: add, inputs: [d5, d6], name: r5}\n"
                         "    - {type: dense, units: 40, name: d7}\n"
                         "    - {type: add, inputs: [d7, r5], name: r6}\n"
                         "    - {type: dense, units: 40, name: d8, inputs: [d7]}\n"
                         "    - {type: add, inputs: [d8, r6], name: r7}\n"
                         "    - {type: gelu, name: g7}\n"
                         "    - {type: token_pool, mode: mean, name: pool}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    at_1_and_3_threads(layers, check_residual_fusion);
}

static void test_pool_applies_the_activation_derivative(void **state)
{
    (void)state;
    const char *maps = "    - {type: conv, filters: 5, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: relu, name: r1}\n"
                       "    - {type: max_pool, kernel: 2, name: p1}\n"
                       "    - {type: relu, name: q1}\n"
                       "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c2}\n"
                       "    - {type: leaky_relu, slope: 0.2, name: r2}\n"
                       "    - {type: max_pool, kernel: 2, stride: 3, name: p2}\n"
                       "    - {type: conv, filters: 4, kernel: 1, name: c3}\n"
                       "    - {type: relu, name: r3}\n"
                       "    - {type: max_pool, kernel: 3, stride: 1, padding: 1, name: p3}\n"
                       "    - {type: leaky_relu, slope: 0.1, inputs: [c3], name: r4}\n"
                       "    - {type: max_pool, kernel: 2, name: p4}\n"
                       "    - {type: flatten, inputs: [p3], name: f3}\n"
                       "    - {type: flatten, inputs: [p4], name: f4}\n"
                       "    - {type: concat, inputs: [f3, f4], name: cat}\n"
                       "    - {type: dense, units: 3, name: head}\n";
    const char *volumes = "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                          "    - {type: leaky_relu, slope: 0.3, name: r1}\n"
                          "    - {type: max_pool, kernel: 2, name: p1}\n"
                          "    - {type: leaky_relu, slope: 0.05, name: q1}\n"
                          "    - {type: conv, filters: 3, kernel: 3, padding: 1, name: c2}\n"
                          "    - {type: relu, name: r2}\n"
                          "    - {type: max_pool, kernel: 1, stride: 2, name: p2}\n"
                          "    - {type: conv, filters: 3, kernel: 1, name: c3}\n"
                          "    - {type: relu, name: r3}\n"
                          "    - {type: flatten}\n"
                          "    - {type: dense, units: 3, name: head}\n";
    const char *const fused[2] = {"r1", "r2"}, *const pools[2] = {"p1", "p2"};
    const char *const producers[3] = {"c1", "c2", "c3"};
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt += 2) {
        check_pool_fusion(maps, (gl_shape){3, {2, 12, 12}}, nt, fused, pools, "r3", producers);  // p3 overlaps
        check_pool_fusion(volumes, (gl_shape){4, {2, 4, 4, 6}}, nt, fused, pools, "r3", producers);  // r3: no pool
        check_pool_fusion_shared(maps, (gl_shape){3, {2, 12, 12}}, nt);
        check_pool_fusion_shared(volumes, (gl_shape){4, {2, 4, 4, 6}}, nt);
    }
    omp_set_num_threads(saved);
    // 2D: r4 reads c3 with r3 (not alone). (3D p2: 1-wide windows 2 apart on 2 x 2 x 3 maps.)
    tl_model mf, mu;
    build_fused_and_not(maps, (gl_shape){3, {2, 12, 12}}, &mf, &mu, true);
    assert_null(mf.g.layers[tl_layer(&mf.g, "r4")].grad_by);
    assert_true(mf.g.layers[tl_layer(&mf.g, "q1")].act_inplace);  // p1's output rewritten in place
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// One conv-pool fusion case (GALLEY_CONV_ALGO set by the caller, nt threads): `fused` pools are
// written by the convolution before them (store_pool, pool_done), `kept` run themselves; every
// output starts as NaN, and nleft of the fused producers' (those whose kernel pools as it
// stores) stay so; every written output, each pool's argmax, every output gradient backward
// writes and every parameter gradient have the bits of model.fuse: false.
static void check_conv_pool_fusion(const char *layers, gl_shape input, int nt, const char *const fused[],
                                   const char *const producers[], int nf, const char *const kept[], int nk, int nleft)
{
    omp_set_num_threads(nt);
    tl_model mf, mu;
    build_fused_and_not(layers, input, &mf, &mu, true);
    gl_graph *f = &mf.g, *u = &mu.g;
    for (int k = 0; k < nf; k++) {
        const layer_t *p = &f->layers[tl_layer(f, fused[k])], *c = &f->layers[tl_layer(f, producers[k])];
        if (c->store_pool != p || !p->pool_done) fail_msg("%s does not write %s", producers[k], fused[k]);
    }
    for (int k = 0; k < nk; k++) assert_false(f->layers[tl_layer(f, kept[k])].pool_done);
    for (int i = 0; i < u->nlayers; i++) assert_false(u->layers[i].pool_done || u->layers[i].store_pool);
    for (int i = 0; i < f->nlayers; i++)
        for (int64_t j = 0; j < N * f->layers[i].out.size; j++) f->layers[i].out.data[j] = NAN;
    float r[N * 3];
    backward_both(f, u, 95, r);
    int untouched = 0;  // fused producers whose output the kernels left as it was
    for (int i = 0; i < f->nlayers; i++) {
        const layer_t *lf = &f->layers[i], *lu = &u->layers[i];
        const bool written = graph_out_written(f, i);
        // a producer's buffer holding its activation's output: checked at the activation
        const bool shared = written && i + 1 < f->nlayers && f->layers[i + 1].act_done;
        int64_t nans = 0;
        for (int64_t j = 0; !written && lf->store_pool && j < N * lf->out.size; j++) nans += isnan(lf->out.data[j]);
        untouched += !written && lf->store_pool && nans == N * lf->out.size;
        for (int64_t j = 0; written && !shared && j < N * lf->out.size; j++)
            if (memcmp(&lf->out.data[j], &lu->out.data[j], sizeof(float)))
                fail_msg("%d threads: %s.out[%lld]: fused %a, unfused %a", nt, lf->cfg->name, (long long)j,
                         lf->out.data[j], lu->out.data[j]);
        if (lf->pool_done) assert_memory_equal(lf->scratch, lu->scratch, sizeof(float) * (size_t)lf->scratch_floats);
        for (int64_t j = 0; !lf->grad_by && j < N * lf->out.size; j++)
            if (memcmp(&lf->out.grad[j], &lu->out.grad[j], sizeof(float)))
                fail_msg("%d threads: %s.grad[%lld]: fused %a, unfused %a", nt, lf->cfg->name, (long long)j,
                         lf->out.grad[j], lu->out.grad[j]);
    }
    for (int64_t j = 0; j < f->nparams; j++)
        if (memcmp(&f->grads[j], &u->grads[j], sizeof(float)))
            fail_msg("%d threads: grads[%lld]: fused %a, unfused %a", nt, (long long)j, f->grads[j], u->grads[j]);
    if (untouched != nleft) fail_msg("%d threads: %d fused producers' outputs left unwritten, not %d", nt, untouched, nleft);
    tl_model_free(&mf);
    tl_model_free(&mu);
}

// A max pool of windows that tile its input, after a convolution (through the relu or leaky_relu
// it stores, or directly), is written by that convolution (graph_fuse_pools, conv_forward_pool):
// on the implicit GEMM (direct) and on F(2,3) (winograd), 2D and 3D, rows of windows narrower and
// wider than a tile, without padding and with a dilated kernel (the padded input the direct
// kernel reads in place: ig_direct), at 1 and 3 threads; a strided convolution (im2col) writes
// its output and pools it after. Not fused: a pool over an odd size (the last row dropped) or with stride 3, and
// a convolution whose output another layer reads too.
static void test_conv_writes_the_pool_after_it(void **state)
{
    (void)state;
    const char *maps = "    - {type: conv, filters: 5, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: relu, name: r1}\n"
                       "    - {type: max_pool, kernel: 2, name: p1}\n"
                       "    - {type: conv, filters: 16, kernel: 3, padding: 1, name: c2}\n"
                       "    - {type: max_pool, kernel: 2, name: p2}\n"
                       "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c3}\n"
                       "    - {type: leaky_relu, slope: 0.1, name: r3}\n"
                       "    - {type: max_pool, kernel: 2, name: p3}\n"
                       "    - {type: flatten}\n"
                       "    - {type: dense, units: 3, name: head}\n";
    const char *wide = "    - {type: conv, filters: 6, kernel: 3, padding: 1, name: c1}\n"
                       "    - {type: leaky_relu, slope: 0.2, name: r1}\n"
                       "    - {type: max_pool, kernel: 2, name: p1}\n"
                       "    - {type: conv, filters: 4, kernel: 3, stride: 2, padding: 1, name: c2}\n"
                       "    - {type: relu, name: r2}\n"
                       "    - {type: max_pool, kernel: 2, name: p2}\n"
                       "    - {type: conv, filters: 4, kernel: 1, name: c3}\n"
                       "    - {type: relu, name: r3}\n"
                       "    - {type: max_pool, kernel: 1, stride: 3, name: p3}\n"
                       "    - {type: flatten}\n"
                       "    - {type: dense, units: 3, name: head}\n";
    const char *volumes = "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                          "    - {type: relu, name: r1}\n"
                          "    - {type: max_pool, kernel: 2, name: p1}\n"
                          "    - {type: conv, filters: 16, kernel: 3, padding: 1, name: c2}\n"
                          "    - {type: leaky_relu, slope: 0.3, name: r2}\n"
                          "    - {type: max_pool, kernel: 2, name: p2}\n"
                          "    - {type: conv, filters: 3, kernel: 1, inputs: [p1], name: c3}\n"
                          "    - {type: max_pool, kernel: 2, name: p3}\n"
                          "    - {type: flatten, inputs: [c3], name: f3}\n"
                          "    - {type: flatten, inputs: [p2], name: f2}\n"
                          "    - {type: flatten, inputs: [p3], name: fp}\n"
                          "    - {type: concat, inputs: [f2, f3, fp], name: cat}\n"
                          "    - {type: dense, units: 3, name: head}\n";
    // no padding, then a dilated kernel: the padded input's geometry (ig_direct) other than "same" 3x3
    const char *valid = "    - {type: conv, filters: 5, kernel: 3, name: c1}\n"
                        "    - {type: relu, name: r1}\n"
                        "    - {type: max_pool, kernel: 2, name: p1}\n"
                        "    - {type: conv, filters: 6, kernel: 3, dilation: 2, padding: 2, name: c2}\n"
                        "    - {type: max_pool, kernel: 2, name: p2}\n"
                        "    - {type: flatten}\n"
                        "    - {type: dense, units: 3, name: head}\n";
    const char *const mf[] = {"p1", "p2"}, *const mp[] = {"c1", "c2"}, *const mk[] = {"p3"};
    const char *const wf[] = {"p1", "p2"}, *const wp[] = {"c1", "c2"}, *const wk[] = {"p3"};
    const char *const vf[] = {"p1", "p2"}, *const vp[] = {"c1", "c2"}, *const vk[] = {"p3"};
    const char *const algos[] = {"direct", "winograd"};
    const int saved = omp_get_max_threads();
    // Without AVX2+FMA (GALLEY_CPU_ISA=none) no kernel pools as it stores: the fallback writes
    // every producer's output and pools it after, so none stays unwritten.
    const int kernels = cpu_isa_best() != 0;
    for (int a = 0; a < 2; a++) {
        setenv("GALLEY_CONV_ALGO", algos[a], 1);
        for (int nt = 1; nt <= 3; nt += 2) {
            check_conv_pool_fusion(maps, (gl_shape){3, {3, 16, 20}}, nt, mf, mp, 2, mk, 1, 2 * kernels);  // p3: 5 -> 2
            // p3: stride 3; c2 (stride 2) writes its output and pools it after
            check_conv_pool_fusion(wide, (gl_shape){3, {2, 6, 40}}, nt, wf, wp, 2, wk, 1, kernels);
            check_conv_pool_fusion(volumes, (gl_shape){4, {2, 4, 8, 20}}, nt, vf, vp, 2, vk, 1, 2 * kernels);  // c3 read twice
            check_conv_pool_fusion(valid, (gl_shape){3, {2, 18, 22}}, nt, mf, mp, 2, NULL, 0, 2 * kernels);
        }
    }
    unsetenv("GALLEY_CONV_ALGO");
    omp_set_num_threads(saved);
    // A NaN the convolution makes shows first at the pool it writes (its own output is not looked at).
    tl_model m;
    build_kept(&m, maps, (gl_shape){3, {3, 16, 20}});
    tl_fill_uniform(m.g.input.data, N * m.g.input.size, -1, 1, 96);
    tl_fill_uniform(m.g.params, m.g.nparams, -0.5, 0.5, 97);
    graph_forward(&m.g, N, false);
    assert_int_equal(graph_first_nonfinite(&m.g, N), -1);
    m.g.params[m.g.layers[tl_layer(&m.g, "c2")].params[0].offset] = NAN;
    graph_forward(&m.g, N, false);
    assert_int_equal(graph_first_nonfinite(&m.g, N), tl_layer(&m.g, "p2"));
    tl_model_free(&m);
}

// ---- non-finite detection -----------------------------------------------------------------------

// Backward's gradients share memory by lifetime (graph_plan.c): an output's gradient lives from
// its last reader's backward (the loss's, for the model's output) down to its own layer's. On a
// model with skips, concatenation, a residual add, a tensor read twice by one layer and a dead
// branch: no two gradients live at once overlap (spans derived here from the wiring), the pool
// is smaller than one buffer each, and forward and backward give the bits of the same model with
// every gradient kept: parameter gradients, the output, and layer 0's output gradient (the last
// one backward writes).
static void test_gradients_share_memory_by_lifetime(void **state)
{
    (void)state;
    const char *layers = "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c1}\n"
                         "    - {type: relu, name: a1}\n"
                         "    - {type: max_pool, kernel: 2, name: p1}\n"
                         "    - {type: conv, filters: 6, kernel: 3, padding: 1, name: c2}\n"
                         "    - {type: batch_norm, name: bn}\n"
                         "    - {type: leaky_relu, slope: 0.1, name: a2}\n"
                         "    - {type: tanh, inputs: [a2], name: dead}\n"
                         "    - {type: add, inputs: [a2, a2], name: twice}\n"
                         "    - {type: conv_transpose, filters: 4, kernel: 2, stride: 2, inputs: [twice], name: up}\n"
                         "    - {type: concat, inputs: [up, a1], name: cat}\n"
                         "    - {type: conv, filters: 4, kernel: 3, padding: 1, name: c3}\n"
                         "    - {type: add, inputs: [c3, a1], name: res}\n"
                         "    - {type: flatten}\n"
                         "    - {type: dense, units: 3, name: head}\n";
    const gl_shape in = {3, {2, 8, 8}};
    tl_model mp, mk;
    char *errors = NULL;
    if (tl_model_try_keep(&mp, layers, in, N, backend_cpu(), false, &errors) != 0) fail_msg("%s", errors);
    build_kept(&mk, layers, in);
    gl_graph *p = &mp.g, *k = &mk.g;
    assert_false(p->grads_kept);
    assert_true(k->grads_kept);
    // The plan: spans from the wiring, then every pair live at once checked for overlap.
    const int n = p->nlayers;
    int64_t kept = 0;
    for (int i = 0; i < n; i++) {
        const layer_t *li = &p->layers[i];
        int top = i == n - 1 ? n : i;
        for (int j = i + 1; j < n; j++)
            for (int q = 0; q < p->layers[j].nin; q++)
                if (p->layers[j].in[q] == &li->out) top = j;
        kept += li->grad_with ? 0 : (li->out.size + 15) / 16 * 16;  // another's gradient (graph_share_grads)
        assert_true(li->grad_off % 16 == 0);
        assert_true(li->grad_off + li->out.size <= p->grad_floats);
        for (int j = 0; j < i; j++) {
            const layer_t *lj = &p->layers[j];
            int topj = j == n - 1 ? n : j;
            for (int jj = j + 1; jj < n; jj++)
                for (int q = 0; q < p->layers[jj].nin; q++)
                    if (p->layers[jj].in[q] == &lj->out) topj = jj;
            // an add's or a flatten's gradient and its input's are one on purpose (graph_share_grads)
            bool live_together = j <= top && i <= topj && grad_root(p, i) != grad_root(p, j);
            bool apart = lj->out.grad + N * lj->out.size <= li->out.grad || li->out.grad + N * li->out.size <= lj->out.grad;
            if (live_together && !apart)
                fail_msg("%s's gradient (live %d..%d) and %s's (live %d..%d) overlap", li->cfg->name, top, i,
                         lj->cfg->name, topj, j);
        }
    }
    assert_int_equal(k->grad_floats, kept);
    assert_true(p->grad_floats < k->grad_floats);
    assert_int_equal(p->act_floats - p->grad_floats, k->act_floats - k->grad_floats);
    assert_true(p->bytes < k->bytes);
    // The same bits as with every gradient kept.
    fill_grads_nan(p);
    fill_grads_nan(k);
    float r[N * 3];
    backward_both(p, k, 90, r);
    const gl_tensor *op = graph_output(p), *ok = graph_output(k);
    assert_memory_equal(op->data, ok->data, sizeof(float) * (size_t)(N * op->size));
    for (int64_t j = 0; j < p->nparams; j++)
        if (memcmp(&p->grads[j], &k->grads[j], sizeof(float)) || isnan(p->grads[j]))
            fail_msg("grads[%lld]: shared %a, kept %a", (long long)j, p->grads[j], k->grads[j]);
    const gl_tensor *g0p = &p->layers[0].out, *g0k = &k->layers[0].out;
    for (int64_t j = 0; j < N * g0p->size; j++)
        if (memcmp(&g0p->grad[j], &g0k->grad[j], sizeof(float)) || isnan(g0p->grad[j]))
            fail_msg("c1.grad[%lld]: shared %a, kept %a", (long long)j, g0p->grad[j], g0k->grad[j]);
    tl_model_free(&mp);
    tl_model_free(&mk);
}

// The same on random wirings: dense, relu, tanh, add and concat layers reading any earlier
// tensors (some read twice, some by nobody), 40 models: the shared pool gives the bits of the
// kept one, and layer 0's gradient too.
static void test_gradient_sharing_on_random_graphs(void **state)
{
    (void)state;
    uint64_t z = 0x9e3779b97f4a7c15ull;
    for (int model = 0; model < 40; model++) {
        char text[8192];
        size_t k = 0;
        int wide[32];  // whether tensor i is a concat's (2W wide); index 0 is layer t0
        int nl = 6 + model % 20;
        k += (size_t)snprintf(text + k, sizeof text - k, "    - {type: dense, units: 4, name: t0}\n");
        wide[0] = 0;
        for (int i = 1; i < nl; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            int kind = (int)((z >> 33) % 5), a = (int)((z >> 40) % (uint64_t)i), b = (int)((z >> 50) % (uint64_t)i);
            if (wide[a]) kind = 0;  // only a dense layer takes a concat's width back to 4
            if (kind >= 3 && wide[b]) b = a;
            wide[i] = kind == 4;
            const char *type = kind == 0 ? "dense, units: 4" : kind == 1 ? "relu" : kind == 2 ? "tanh"
                               : kind == 3 ? "add" : "concat";
            if (kind >= 3)
                k += (size_t)snprintf(text + k, sizeof text - k, "    - {type: %s, inputs: [t%d, t%d], name: t%d}\n",
                                      type, a, b, i);
            else
                k += (size_t)snprintf(text + k, sizeof text - k, "    - {type: %s, inputs: [t%d], name: t%d}\n", type,
                                      a, i);
        }
        k += (size_t)snprintf(text + k, sizeof text - k, "    - {type: dense, units: 3, inputs: [t%d], name: head}\n",
                              nl - 1);
        tl_model mp, mk;
        char *errors = NULL;
        if (tl_model_try_keep(&mp, text, shape_1d(5), N, backend_cpu(), false, &errors) != 0)
            fail_msg("model %d did not build:\n%s\n%s", model, errors, text);
        build_kept(&mk, text, shape_1d(5));
        gl_graph *p = &mp.g, *q = &mk.g;
        assert_true(p->grad_floats <= q->grad_floats);
        same_start(p, q, 100 + 2 * (uint64_t)model);
        float r[N * 3];
        tl_fill_uniform(r, N * 3, -1, 1, 300 + (uint64_t)model);
        wctx cp = {p, r}, cq = {q, r};
        fill_grads_nan(p);
        fill_grads_nan(q);
        backward_with(&cp);
        backward_with(&cq);
        if (memcmp(graph_output(p)->data, graph_output(q)->data, sizeof(float) * N * 3))
            fail_msg("model %d: outputs differ:\n%s", model, text);
        if (memcmp(p->grads, q->grads, sizeof(float) * (size_t)p->nparams))
            fail_msg("model %d: parameter gradients differ between the shared and the kept plan:\n%s", model, text);
        if (memcmp(p->layers[0].out.grad, q->layers[0].out.grad, sizeof(float) * N * 4))
            fail_msg("model %d: t0's gradient differs:\n%s", model, text);
        for (int64_t j = 0; j < p->nparams; j++)
            if (isnan(p->grads[j])) fail_msg("model %d: grads[%lld] is NaN (never written)", model, (long long)j);
        tl_model_free(&mp);
        tl_model_free(&mk);
    }
}

static void test_first_nonfinite(void **state)
{
    (void)state;
    tl_model m;
    // model.fuse: false keeps the relu's own buffer, so each layer's output can be told apart.
    tl_model_build(&m, "    - {type: dense, units: 4}\n    - {type: relu}\n    - {type: dense, units: 3}\n  fuse: false\n",
                   shape_1d(5), 4);
    gl_graph *g = &m.g;
    assert_false(g->layers[1].act_inplace);
    tl_fill_uniform(g->input.data, 4 * 5, -1, 1, 70);
    tl_fill_uniform(g->params, g->nparams, -1, 1, 71);
    graph_forward(g, 3, false);
    assert_int_equal(graph_first_nonfinite(g, 3), -1);
    float *o2 = g->layers[2].out.data, *o1 = g->layers[1].out.data;
    o2[3 * 2 + 1] = NAN;  // last row, layer 2
    assert_int_equal(graph_first_nonfinite(g, 3), 2);
    o1[4] = INFINITY;
    assert_int_equal(graph_first_nonfinite(g, 3), 1);  // the first such layer
    o1[4] = -INFINITY;
    assert_int_equal(graph_first_nonfinite(g, 3), 1);
    o1[4] = 0;
    o2[7] = 0;
    assert_int_equal(graph_first_nonfinite(g, 3), -1);
    o2[3 * 3] = NAN;  // row 3 is beyond n = 3: not looked at
    assert_int_equal(graph_first_nonfinite(g, 3), -1);
    assert_int_equal(graph_first_nonfinite(g, 4), 2);
    // A NaN parameter propagates from the layer that holds it.
    g->params[g->layers[2].params[0].offset] = NAN;
    graph_forward(g, 3, false);
    assert_int_equal(graph_first_nonfinite(g, 3), 2);
    g->params[0] = NAN;
    graph_forward(g, 3, false);
    assert_int_equal(graph_first_nonfinite(g, 3), 0);
    tl_model_free(&m);
}

// ---- summary ------------------------------------------------------------------------------------

static void test_summary_lists_every_layer(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 7, name: hidden_one}\n"
                       "    - {type: gelu, name: act}\n"
                       "    - {type: dense, units: 3, name: logits}\n"
                       "    - {type: leaky_relu}\n",
                   shape_1d(5), 8);
    tl_stream s;
    graph_summary(&m.g, tl_stream_open(&s));
    char *t = tl_stream_close(&s);
    const char *rows[][3] = {{"hidden_one", "dense", "[7]"}, {"act", "gelu", "[7]"}, {"logits", "dense", "[3]"},
                             {"leaky_relu_3", "leaky_relu", "[3]"}};
    // Each layer has a row "INDEX NAME TYPE SHAPE ..." with the name in full.
    int found[4] = {0};
    char *copy = strdup(t);
    assert_non_null(copy);
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int idx;
        char name[80], type[40], shape[40];
        if (sscanf(line, "%d %79s %39s %39s", &idx, name, type, shape) != 4 || idx < 0 || idx >= 4) continue;
        if (strcmp(name, rows[idx][0]) || strcmp(type, rows[idx][1]) || strcmp(shape, rows[idx][2]))
            fail_msg("summary row '%s': want name %s, type %s, shape %s", line, rows[idx][0], rows[idx][1],
                     rows[idx][2]);
        found[idx]++;
    }
    free(copy);
    for (int i = 0; i < 4; i++)
        if (found[i] != 1) fail_msg("%d summary rows for layer %d (%s) in:\n%s", found[i], i, rows[i][0], t);
    assert_non_null(strstr(t, "input"));
    char want[64];
    snprintf(want, sizeof want, "total: %lld parameters", (long long)m.g.nparams);
    assert_int_equal(m.g.nparams, 5 * 7 + 7 + 7 * 3 + 3);
    if (!strstr(t, want)) fail_msg("'%s' not in:\n%s", want, t);
    free(t);
    tl_model_free(&m);
}

// ---- parameters and forward ---------------------------------------------------------------------

static void test_init_params(void **state)
{
    (void)state;
    tl_model m, m2;
    const char *layers = "    - {type: dense, units: 64}\n    - {type: relu}\n"
                         "    - {type: dense, units: 50, init: xavier_uniform}\n    - {type: dense, units: 3, init: zeros}\n";
    tl_model_build(&m, layers, shape_1d(100), 2);
    tl_model_build(&m2, layers, shape_1d(100), 2);
    gl_graph *g = &m.g;
    for (int64_t i = 0; i < g->nparams; i++) g->params[i] = 7.0f;  // init overwrites everything
    graph_init_params(g, 5);
    graph_init_params(&m2.g, 5);
    assert_memory_equal(g->params, m2.g.params, sizeof(float) * (size_t)g->nparams);
    graph_init_params(&m2.g, 6);
    assert_memory_not_equal(g->params, m2.g.params, sizeof(float) * 64 * 100);
    const layer_t *d0 = &g->layers[0], *d2 = &g->layers[2], *d3 = &g->layers[3];
    // he_normal: mean 0, std sqrt(2 / fan_in); bias zero.
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < d0->params[0].size; i++) {
        double w = g->params[d0->params[0].offset + i];
        s += w, s2 += w * w;
    }
    double n = (double)d0->params[0].size, mean = s / n, sd = sqrt(s2 / n - mean * mean);
    if (fabs(mean) > 0.01 || fabs(sd / sqrt(2.0 / 100) - 1) > 0.05) fail_msg("he_normal: mean %g, std %g", mean, sd);
    for (int64_t i = 0; i < d0->params[1].size; i++) assert_true(g->params[d0->params[1].offset + i] == 0.0f);
    // xavier_uniform: |w| <= sqrt(6 / (fan_in + fan_out)), and it fills that range.
    double bound = sqrt(6.0 / (64 + 50)), mx = 0;
    for (int64_t i = 0; i < d2->params[0].size; i++) mx = fmax(mx, fabs(g->params[d2->params[0].offset + i]));
    if (!(mx <= bound * (1 + 1e-6) && mx > 0.95 * bound)) fail_msg("xavier_uniform: max |w| %g, bound %g", mx, bound);
    for (int p = 0; p < d3->nparams; p++)
        for (int64_t i = 0; i < d3->params[p].size; i++) assert_true(g->params[d3->params[p].offset + i] == 0.0f);
    tl_model_free(&m2);
    tl_model_free(&m);
}

// dense -> relu -> dense (no bias) against loops over the parameters at their offsets.
static void test_forward_matches_manual_composition(void **state)
{
    (void)state;
    tl_model m;
    tl_model_build(&m, "    - {type: dense, units: 7}\n    - {type: relu}\n    - {type: dense, units: 3, bias: false}\n",
                   shape_1d(5), 4);
    gl_graph *g = &m.g;
    tl_fill_uniform(g->input.data, 4 * 5, -1, 1, 80);
    tl_fill_uniform(g->params, g->nparams, -1, 1, 81);
    graph_forward(g, 4, false);
    const float *w1 = g->params + g->layers[0].params[0].offset, *b1 = g->params + g->layers[0].params[1].offset;
    const float *w2 = g->params + g->layers[2].params[0].offset;
    int positive = 0;
    for (int i = 0; i < 4; i++) {
        double h[7];
        for (int u = 0; u < 7; u++) {
            double z = b1[u];
            for (int k = 0; k < 5; k++) z += (double)g->input.data[i * 5 + k] * w1[u * 5 + k];
            h[u] = z > 0 ? z : 0;
            positive += z > 0;
        }
        for (int u = 0; u < 3; u++) {
            double y = 0;
            for (int k = 0; k < 7; k++) y += h[k] * w2[u * 7 + k];
            if (fabs(graph_output(g)->data[i * 3 + u] - y) > 1e-5)
                fail_msg("row %d unit %d: %.7g, want %.7g", i, u, graph_output(g)->data[i * 3 + u], y);
        }
    }
    assert_true(positive > 0 && positive < 28);  // relu is doing something
    tl_model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_inference_and_plan),
        cmocka_unit_test(test_build_error_names_the_layer),
        cmocka_unit_test(test_inputs_wire_non_adjacent_layers),
        cmocka_unit_test(test_backward_ignores_a_dead_branch),
        cmocka_unit_test(test_gradients_from_two_consumers_accumulate),
        cmocka_unit_test(test_first_writers_write_gradients_whole),
        cmocka_unit_test(test_set_gradients_equal_added_ones),
        cmocka_unit_test(test_activation_fusion_keeps_the_bits),
        cmocka_unit_test(test_flatten_is_a_view),
        cmocka_unit_test(test_pool_applies_the_activation_derivative),
        cmocka_unit_test(test_dense_applies_the_activation_derivative),
        cmocka_unit_test(test_gelu_keeps_its_derivative),
        cmocka_unit_test(test_residual_add_fusion_keeps_the_bits),
        cmocka_unit_test(test_conv_writes_the_pool_after_it),
        cmocka_unit_test(test_gradients_share_memory_by_lifetime),
        cmocka_unit_test(test_gradient_sharing_on_random_graphs),
        cmocka_unit_test(test_first_nonfinite),
        cmocka_unit_test(test_summary_lists_every_layer),
        cmocka_unit_test(test_init_params),
        cmocka_unit_test(test_forward_matches_manual_composition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
