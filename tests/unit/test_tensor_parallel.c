// test_tensor_parallel.c: tensor parallelism's layers against the whole model, in one process: a
// tensor group of 2 is two threads with an in-process group (sum and gather over a barrier),
// each building its rank's model (graph_build_tp) with its slices of the whole model's weights.
// A pre-norm transformer block (layer_norm, attention by heads, dense pair column/row) and a
// flattened MLP pair: forward outputs equal the whole model's, and every parameter gradient,
// written back whole (graph_tp_slice), equals the whole model's: within 2e-6 relative, and
// bitwise in the deterministic mode against tensor_parallel 1 with the same canonical parts.
// Also: which layers are split, slice round trips, and the errors at the recipe line.
#include <pthread.h>

#include "testlib.h"

#define TP 2

typedef struct {
    pthread_barrier_t bar;
    float *slot[TP];
} group;

typedef struct {
    group *grp;
    int rank;
} member;

static void grp_sum(void *ctx, float *buf, int64_t count, const char *what) {
    (void)what;
    member *m = ctx;
    group *g = m->grp;
    g->slot[m->rank] = buf;
    pthread_barrier_wait(&g->bar);
    float *t = malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++) t[i] = g->slot[0][i] + g->slot[1][i];  // rank order, both ranks alike
    pthread_barrier_wait(&g->bar);
    memcpy(buf, t, sizeof(float) * (size_t)count);
    free(t);
}

static void grp_gather(void *ctx, const float *mine, int64_t count, float *all, const char *what) {
    (void)what;
    member *m = ctx;
    group *g = m->grp;
    g->slot[m->rank] = (float *)mine;
    pthread_barrier_wait(&g->bar);
    for (int r = 0; r < TP; r++) memcpy(all + r * count, g->slot[r], sizeof(float) * (size_t)count);
    pthread_barrier_wait(&g->bar);
}

static const char block[] = "    - {type: layer_norm, name: n1}\n"
                            "    - {type: attention, heads: 4, name: att}\n"
                            "    - {type: add, name: r1, inputs: [att, input]}\n"
                            "    - {type: layer_norm, name: n2}\n"
                            "    - {type: dense, units: 16, name: fc1}\n"
                            "    - {type: gelu, name: act}\n"
                            "    - {type: dense, units: 8, name: fc2}\n"
                            "    - {type: add, name: out, inputs: [fc2, r1]}\n";
static const char mlp[] = "    - {type: flatten, name: f}\n"
                          "    - {type: dense, units: 12, name: fc1}\n"
                          "    - {type: relu, name: act}\n"
                          "    - {type: dense, units: 3, name: fc2}\n";

typedef struct {
    recipe_t r;
    gl_graph g;
    gl_arena a;
    gl_tp tp;
    member me;
} rank_model;

static void build(rank_model *m, const char *layers, gl_shape in, const gl_tp *tp) {
    char *yaml = tl_recipe_text(layers);
    tl_recipe(&m->r, yaml, 0, NULL);
    free(yaml);
    assert_int_equal(graph_build_tp(&m->g, &m->r, in, 3, backend_cpu(), tp, stderr), 0);
    arena_init(&m->a, m->g.bytes);
    graph_bind(&m->g, &m->a);
}

static void drop(rank_model *m) {
    graph_free(&m->g);
    arena_free(&m->a);
    recipe_free(&m->r);
}

typedef struct {
    rank_model *m;
    const float *x, *dy;
} pass;

// Forward and backward of 3 samples: input x, output gradient dy.
static void *run_pass(void *arg) {
    pass *p = arg;
    gl_graph *g = &p->m->g;
    memcpy(g->input.data, p->x, sizeof(float) * (size_t)(3 * g->input.size));
    graph_forward(g, 3, true);
    gl_tensor *o = graph_output(g);
    memcpy(o->grad, p->dy, sizeof(float) * (size_t)(3 * o->size));
    graph_backward(g, 3);
    return NULL;
}

static void compare(const float *want, const float *got, int64_t n, double tol, const char *what) {
    double scale = 1e-30;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        if (tol == 0 ? memcmp(&want[i], &got[i], sizeof(float)) != 0 : fabs(want[i] - got[i]) > tol * scale)
            fail_msg("%s[%lld]: %.9g against %.9g (tolerance %g of %g)", what, (long long)i, (double)got[i],
                     (double)want[i], tol, scale);
    }
}

// The whole model (tp1: NULL, or a group of 1 with canonical parts) against a group of 2.
static void check_group(const char *layers, gl_shape in, int groups) {
    group grp;
    pthread_barrier_init(&grp.bar, NULL, TP);
    rank_model whole, one, ranks[TP];
    build(&whole, layers, in, NULL);  // the layout and the weights
    // every parameter random, the biases (zero at init) too
    tl_fill_uniform(whole.g.params, whole.g.nparams, -0.5f, 0.5f, 3);
    one.tp = (gl_tp){.size = 1, .rank = 0, .groups = groups};
    build(&one, layers, in, groups ? &one.tp : NULL);
    memcpy(one.g.params, whole.g.params, sizeof(float) * (size_t)whole.g.nparams);
    const int64_t nx = 3 * whole.g.input.size, ny = 3 * graph_output(&whole.g)->size;
    float *x = malloc(sizeof(float) * (size_t)nx), *dy = malloc(sizeof(float) * (size_t)ny);
    tl_fill_uniform(x, nx, -1.0f, 1.0f, 1);
    tl_fill_uniform(dy, ny, -1.0f, 1.0f, 2);
    pass ref = {&one, x, dy};
    run_pass(&ref);
    pthread_t th[TP];
    pass ps[TP];
    for (int r = 0; r < TP; r++) {
        rank_model *m = &ranks[r];
        m->me = (member){&grp, r};
        m->tp = (gl_tp){.size = TP, .rank = r, .groups = groups, .sum = grp_sum, .gather = grp_gather, .ctx = &m->me};
        build(m, layers, in, &m->tp);
        graph_tp_slice(&m->g, &whole.g, r, m->g.params, whole.g.params, false);
        ps[r] = (pass){m, x, dy};
        pthread_create(&th[r], NULL, run_pass, &ps[r]);
    }
    for (int r = 0; r < TP; r++) pthread_join(th[r], NULL);
    const double tol = groups ? 0 : 2e-6;
    for (int r = 0; r < TP; r++) {
        rank_model *m = &ranks[r];
        compare(graph_output(&one.g)->data, graph_output(&m->g)->data, ny, tol, "output");
        // the whole model's gradients cut to this rank's layout, tensor by tensor
        float *want = calloc((size_t)m->g.nparams, sizeof(float));
        graph_tp_slice(&m->g, &whole.g, r, want, one.g.grads, false);
        for (int i = 0; i < m->g.nlayers; i++)
            for (int q = 0; q < m->g.layers[i].nparams; q++) {
                const gl_param *lp = &m->g.layers[i].params[q];
                char what[128];
                snprintf(what, sizeof what, "rank %d %s.%s gradient", r, m->g.layers[i].cfg->name, lp->name);
                compare(want + lp->offset, m->g.grads + lp->offset, lp->size, tol, what);
            }
        free(want);
    }
    free(x), free(dy);
    for (int r = 0; r < TP; r++) drop(&ranks[r]);
    drop(&one);
    drop(&whole);
    pthread_barrier_destroy(&grp.bar);
}

static void test_block_matches_whole(void **state) {
    (void)state;
    check_group(block, shape_tokens(5, 8), 0);
}

static void test_block_bitwise_in_parts(void **state) {
    (void)state;
    check_group(block, shape_tokens(5, 8), 4);
}

static void test_flat_mlp_pair(void **state) {
    (void)state;
    check_group(mlp, (gl_shape){3, {2, 3, 3}}, 0);
    check_group(mlp, (gl_shape){3, {2, 3, 3}}, 2);
}

// Which layers are split, and the slices: whole -> rank -> whole gives the whole back.
static void test_plan_and_slices(void **state) {
    (void)state;
    rank_model whole, r0, r1;
    gl_tp t0 = {.size = 2, .rank = 0}, t1 = {.size = 2, .rank = 1};
    build(&whole, block, shape_tokens(5, 8), NULL);
    build(&r0, block, shape_tokens(5, 8), &t0);
    build(&r1, block, shape_tokens(5, 8), &t1);
    const int want[] = {GL_TP_NONE, GL_TP_HEADS, GL_TP_NONE, GL_TP_NONE, GL_TP_COLUMN, GL_TP_NONE, GL_TP_ROW, GL_TP_NONE};
    for (int i = 0; i < 8; i++) assert_int_equal(r0.g.layers[i].tp_role, want[i]);
    char what[512];
    graph_tp_describe(&r0.g, what, sizeof what);
    assert_non_null(strstr(what, "split: 1 attention (by heads), 1 MLP pair (dense column, dense row)"));
    assert_non_null(strstr(what, "2 layer_norm"));
    graph_init_params(&whole.g, TL_SEED);
    float *back = calloc((size_t)whole.g.nparams, sizeof(float));
    graph_tp_slice(&r0.g, &whole.g, 0, r0.g.params, whole.g.params, false);
    graph_tp_slice(&r1.g, &whole.g, 1, r1.g.params, whole.g.params, false);
    graph_tp_slice(&r0.g, &whole.g, 0, r0.g.params, back, true);
    graph_tp_slice(&r1.g, &whole.g, 1, r1.g.params, back, true);
    assert_memory_equal(back, whole.g.params, sizeof(float) * (size_t)whole.g.nparams);
    assert_true(r0.g.nparams < whole.g.nparams);
    free(back);
    drop(&r0), drop(&r1), drop(&whole);
}

// Splits that do not divide, a pair broken by dropout (not split), nothing to split.
static void test_errors(void **state) {
    (void)state;
    gl_tp t3 = {.size = 3};
    recipe_t r;
    gl_graph g;
    char *yaml = tl_recipe_text(block);
    tl_recipe(&r, yaml, 0, NULL);
    free(yaml);
    tl_stream s;
    assert_int_equal(graph_build_tp(&g, &r, shape_tokens(5, 12), 2, backend_cpu(), &t3, tl_stream_open(&s)), -1);
    char *text = tl_stream_close(&s);
    assert_non_null(strstr(text, "heads 4 does not divide over distributed.tensor_parallel 3"));
    free(text);
    graph_free(&g);
    recipe_free(&r);
    gl_tp t2 = {.size = 2};
    yaml = tl_recipe_text("    - {type: dense, units: 6}\n    - {type: dropout, rate: 0.1}\n    - {type: dense, units: 2}\n");
    tl_recipe(&r, yaml, 0, NULL);
    free(yaml);
    assert_int_equal(graph_build_tp(&g, &r, shape_1d(4), 2, backend_cpu(), &t2, tl_stream_open(&s)), -1);
    text = tl_stream_close(&s);
    assert_non_null(strstr(text, "distributed.tensor_parallel: 2, but this model has no layer to split"));
    free(text);
    graph_free(&g);
    recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_matches_whole), cmocka_unit_test(test_block_bitwise_in_parts),
        cmocka_unit_test(test_flat_mlp_pair),       cmocka_unit_test(test_plan_and_slices),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
