// test_graph_replay.c: train.cuda_graphs' bookkeeping (src/model/graph_replay.c) on a fake
// recording backend. The fake's "recording" runs the pass (the CPU cannot defer kernels) and its
// replay runs the recorded pass again: for a model without state (dense, relu, conv) running a
// pass twice gives the same bits, so outputs and gradients can be checked against a model that
// never records. What is checked: the first run of each key (input buffer, rows, mode) is eager,
// the second records, later ones replay; both input buffers and evaluation get their own; a new
// buffer generation records again; a recording that fails is retried once, then the key stays
// eager and a line says so; sync_batchnorm keeps training passes eager (evaluation is recorded)
// and backward hooks keep backward eager; beyond the slots the least recently used key goes;
// off is off.
#include "testlib.h"

#include "galley/check.h"
#include "model/graph_internal.h"

enum { N = 4 };

typedef struct {
    gl_graph *g;
    int64_t n;
    bool train, backward;
} fake_rec;

static struct {
    gl_backend be;
    gl_graph *g;  // the graph being recorded: its pass is what replay runs again
    bool recording;
    int begins, ends, replays, frees, fail_ends;  // fail_ends: the next so many recordings fail
    uint64_t gen, step;
    int64_t rec_n;
    bool rec_train, rec_backward;
} fk;

static int fk_begin(char *msg, size_t len) {
    (void)msg, (void)len;
    assert_false(fk.recording);
    fk.recording = true;
    fk.begins++;
    return 0;
}
static void *fk_end(char *msg, size_t len) {
    assert_true(fk.recording);
    fk.recording = false;
    fk.ends++;
    if (fk.fail_ends > 0) {
        fk.fail_ends--;
        snprintf(msg, len, "fake: not recordable");
        return NULL;
    }
    fake_rec *r = gl_xcalloc(1, sizeof *r);
    *r = (fake_rec){fk.g, fk.rec_n, fk.rec_train, fk.rec_backward};
    return r;
}
static void fk_replay(void *p) {
    const fake_rec *r = p;
    assert_int_equal(fk.step, (uint64_t)r->g->step);  // replay_step came first, with this step
    if (r->backward) graph_run_backward(r->g, r->n);
    else graph_run_forward(r->g, r->n, r->train);
    fk.replays++;
}
static void fk_free(void *p) {
    free(p);
    fk.frees++;
}
static uint64_t fk_gen(void) { return fk.gen; }
static void fk_step(uint64_t step) { fk.step = step; }

// The CPU backend with recording; rec_* say what the recording in progress is of (set by the
// test's pass wrappers below, as graph_replay_pass runs the pass between begin and end).
static const gl_backend *fake_backend(void) {
    memset(&fk, 0, sizeof fk);
    fk.be = *backend_cpu();
    fk.be.name = "fake-recording";
    fk.be.capture_begin = fk_begin;
    fk.be.capture_end = fk_end;
    fk.be.replay = fk_replay;
    fk.be.replay_free = fk_free;
    fk.be.capture_generation = fk_gen;
    fk.be.replay_step = fk_step;
    return &fk.be;
}

static const char *layers = "    - {type: conv, filters: 3, kernel: 3, padding: 1}\n"
                            "    - {type: relu}\n"
                            "    - {type: flatten}\n"
                            "    - {type: dense, units: 5}\n";

// One training step's passes on g with input buffer x, and the same on the eager reference.
static void step_both(gl_graph *g, gl_graph *ref, float *x, int64_t n, const float *dy, int64_t step) {
    g->input.data = x;
    g->step = ref->step = step;
    memcpy(ref->input.data, x, sizeof(float) * (size_t)(n * g->input.size));
    fk.g = g, fk.rec_n = n, fk.rec_train = true, fk.rec_backward = false;
    graph_forward(g, n, true);
    graph_forward(ref, n, true);
    const int64_t out = graph_output(g)->size;
    memcpy(graph_output(g)->grad, dy, sizeof(float) * (size_t)(n * out));
    memcpy(graph_output(ref)->grad, dy, sizeof(float) * (size_t)(n * out));
    fk.rec_backward = true;
    graph_backward(g, n);
    graph_backward(ref, n);
    assert_memory_equal(graph_output(g)->data, graph_output(ref)->data, sizeof(float) * (size_t)(n * out));
    assert_memory_equal(g->grads, ref->grads, sizeof(float) * (size_t)g->nparams);
}

// The model on the fake recording backend (m) and, with the same parameters, on the CPU (r).
// Each output keeps its own gradient: the fake runs a recorded backward twice, which the pool
// would not survive (the first run overwrites the output's gradient where the pool shares it;
// a real recording runs nothing).
static void models_open(tl_model *m, tl_model *r, uint64_t stream) {
    char *errors = NULL;
    const gl_shape in = {3, {2, 6, 6}};
    assert_int_equal(tl_model_try_keep(m, layers, in, N, fake_backend(), true, &errors), 0);
    assert_int_equal(tl_model_try_keep(r, layers, in, N, backend_cpu(), true, &errors), 0);
    tl_fill_uniform(m->g.params, m->g.nparams, -0.5, 0.5, stream);
    memcpy(r->g.params, m->g.params, sizeof(float) * (size_t)m->g.nparams);
}

static void test_record_then_replay(void **st) {
    (void)st;
    tl_model m, r;
    models_open(&m, &r, 90);
    gl_graph *g = &m.g, *ref = &r.g;
    const int64_t sz = N * g->input.size;
    float *xa = malloc(sizeof(float) * (size_t)sz), *xb = malloc(sizeof(float) * (size_t)sz);
    float dy[N * 5];
    tl_fill_uniform(dy, N * 5, -1, 1, 91);
    tl_stream es;
    FILE *err = tl_stream_open(&es);
    graph_replay_setup(g, true, err);
    assert_non_null(g->replay);
    // Steps alternate two input buffers, as input_stage.c does: each buffer's first forward and
    // backward are eager, the second record, then all replay.
    for (int64_t k = 0; k < 8; k++) {
        float *x = k % 2 ? xb : xa;
        tl_fill_uniform(x, sz, -1, 1, 100 + (uint64_t)k);
        step_both(g, ref, x, N, dy, k);
        const int per_buffer = (int)(k / 2);  // runs of this buffer before this one
        if (per_buffer == 0) assert_int_equal(fk.begins, 0);
    }
    assert_int_equal(fk.begins, 4);  // forward and backward of each buffer, once
    assert_int_equal(fk.ends, 4);
    assert_int_equal(fk.replays, 12);  // steps 2..7: forward and backward each
    // Evaluation (not training) and a short last batch are keys of their own.
    fk.rec_train = false, fk.rec_backward = false;
    for (int i = 0; i < 3; i++) graph_forward(g, N, false);
    assert_int_equal(fk.begins, 5);
    assert_int_equal(fk.replays, 14);
    // Buffers moved (a workspace grew): the next run records again, then replays.
    fk.gen++;
    step_both(g, ref, xa, N, dy, 8);
    assert_int_equal(fk.begins, 7);
    assert_int_equal(fk.frees, 2);
    char line[256];
    graph_replay_describe(g, line, sizeof line);
    assert_non_null(strstr(line, "CUDA graphs: 16 passes replayed from 7 recordings"));
    char *msg = tl_stream_close(&es);
    assert_string_equal(msg, "");  // nothing refused, nothing failed
    free(msg);
    free(xa), free(xb);
    tl_model_free(&m);  // frees the recordings
    assert_int_equal(fk.frees, 7);
    tl_model_free(&r);
}

static void count_hook(void *ctx, int layer) {
    (void)layer;
    (*(int *)ctx)++;
}

static void test_failures_and_refusals(void **st) {
    (void)st;
    tl_model m, r;
    models_open(&m, &r, 92);
    gl_graph *g = &m.g, *ref = &r.g;
    float *x = malloc(sizeof(float) * (size_t)(N * g->input.size)), dy[N * 5];
    tl_fill_uniform(x, N * g->input.size, -1, 1, 93);
    tl_fill_uniform(dy, N * 5, -1, 1, 94);
    tl_stream es;
    FILE *err = tl_stream_open(&es);
    graph_replay_setup(g, true, err);
    // Every recording fails: each key tries twice (after an eager run each time), then stays eager.
    fk.fail_ends = 100;
    for (int64_t k = 0; k < 8; k++) step_both(g, ref, x, N, dy, k);
    assert_int_equal(fk.ends, 4);  // forward twice, backward twice
    assert_int_equal(fk.replays, 0);
    // A backward with a per-layer hook (gradient buckets) stays eager, its forward is recorded.
    fk.fail_ends = 0;
    graph_replay_setup(g, true, err);  // afresh
    int hooked = 0;
    g->layer_done = count_hook, g->layer_done_ctx = &hooked;
    ref->layer_done = count_hook, ref->layer_done_ctx = &hooked;
    for (int64_t k = 0; k < 3; k++) step_both(g, ref, x, N, dy, 20 + k);
    assert_int_equal(fk.begins, 5);  // the forward only
    assert_int_equal(fk.replays, 2);  // steps 2 and 3
    assert_int_equal(hooked, 2 * 3 * g->nlayers);  // every backward ran its layers eagerly, on both
    g->layer_done = ref->layer_done = NULL;
    // sync_batchnorm (sums over ranks on the host inside the pass): nothing recorded.
    graph_replay_setup(g, true, err);
    gl_reducer red = {NULL, NULL};
    g->reduce = &red;
    for (int i = 0; i < 3; i++) graph_forward(g, N, true);
    assert_int_equal(fk.begins, 5);
    fk.rec_train = false;
    for (int i = 0; i < 3; i++) graph_forward(g, N, false);  // evaluation: running statistics, recorded
    assert_int_equal(fk.begins, 6);
    g->reduce = NULL;
    // More keys than slots (row offsets, as many parts would give): the least recently used go.
    graph_replay_setup(g, true, err);
    const int frees = fk.frees;
    fk.rec_train = true;
    for (int64_t r0 = 0; r0 < 34; r0++) {
        g->row0 = r0;
        graph_forward(g, N, true);  // eager
        graph_forward(g, N, true);  // recorded, replayed
    }
    assert_int_equal(fk.begins, 6 + 34);
    assert_int_equal(fk.frees, frees + 2);  // row offsets 0 and 1 gave way
    g->row0 = 33;
    graph_forward(g, N, true);
    assert_int_equal(fk.begins, 6 + 34);  // still there: replayed
    g->row0 = 0;
    graph_forward(g, N, true);
    assert_int_equal(fk.begins, 6 + 34);  // evicted: a warm-up run again, nothing recorded yet
    g->row0 = 0;
    char *msg = tl_stream_close(&es);
    assert_non_null(strstr(msg, "could not be recorded (fake: not recordable); it runs eagerly"));
    assert_non_null(strstr(msg, "backward passes run eagerly: gradient buckets"));
    assert_non_null(strstr(msg, "sync_batchnorm"));
    free(msg);
    // Off: no recording at all.
    graph_replay_setup(g, false, NULL);
    assert_null(g->replay);
    for (int64_t k = 0; k < 3; k++) step_both(g, ref, x, N, dy, 10 + k);
    assert_int_equal(fk.begins, 6 + 34);
    free(x);
    tl_model_free(&m);
    tl_model_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_then_replay),
        cmocka_unit_test(test_failures_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
