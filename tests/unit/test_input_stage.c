// test_input_stage.c: the next batch's copy during the current step (src/train/input_stage.c).
// A fake backend defers every upload_async until upload_wait or sync, as a GPU's copy stream
// would, and fails the test if a copy targets the buffer the current step reads. Checked: each
// step sees exactly its batch (against a second loader's plain stream), whether it was staged or
// not; writes into the current buffer between steps (an evaluation) do not reach the next batch;
// a batch taken early and never used is given back; pinning covers the loader's slots, is undone,
// and a refusal gives the note; a read that fails on a batch taken early fails its own step.
// The fake declares targets (upload_declare, as a GPU does): every step's targets, and an
// evaluation batch's, are declared with a copy holding exactly them (class labels and float
// values), and no copy targets the declared buffer while its step is in flight. Pins are page
// runs that never meet; refused ones fall back to the inputs alone, then to none, with a note.
#include "testlib.h"

#include <hdf5.h>

#include "galley/h5data.h"
#include "galley/loader.h"
#include "train/train_internal.h"

// ---- the fake asynchronous backend ----------------------------------------------------------

enum { MAX_PENDING = 8, MAX_PINS = 64 };
static struct {
    gl_backend be;
    const gl_graph *g;  // the graph whose current input buffer no copy may target
    struct {
        void *dst;
        const void *src;
        size_t bytes;
    } pending[MAX_PENDING];
    int npending, copies, waits;
    const void *decl_host, *decl_dev;  // upload_declare's last (NULL: none)
    size_t decl_bytes;
    int declares;
    void *pins[MAX_PINS];
    size_t pin_bytes[MAX_PINS];
    int npins, pin_fail_mask;  // bit k set: pin call k + 1 is refused; 0: none
    int pin_calls;
} fk;

static void fk_flush(void) {
    for (int i = 0; i < fk.npending; i++) memcpy(fk.pending[i].dst, fk.pending[i].src, fk.pending[i].bytes);
    fk.npending = 0;
}
static void fk_upload_async(void *dst, const void *src, size_t bytes) {
    assert_true(fk.npending < MAX_PENDING);
    // The step in flight reads g->input.data: a copy there would race it on a GPU.
    assert_ptr_not_equal(dst, fk.g->input.data);
    assert_ptr_not_equal(dst, fk.decl_dev);  // nor one into the targets it reads
    fk.pending[fk.npending].dst = dst, fk.pending[fk.npending].src = src, fk.pending[fk.npending].bytes = bytes;
    fk.npending++, fk.copies++;
}
static void fk_upload_wait(void) { fk.waits++, fk_flush(); }
// In order with the kernels (the compute stream): it must not land where a pending copy will.
static void fk_upload(void *dst, const void *src, size_t bytes) {
    for (int i = 0; i < fk.npending; i++) {
        const char *a = dst, *b = fk.pending[i].dst;
        assert_true(a + bytes <= b || b + fk.pending[i].bytes <= a);
    }
    memcpy(dst, src, bytes);
}
static void fk_upload_declare(const void *host, size_t bytes, const void *dev) {
    fk.decl_host = host, fk.decl_bytes = bytes, fk.decl_dev = dev;
    fk.declares++;
}
static void fk_sync(void) { fk_flush(); }
static int fk_host_pin(void *p, size_t bytes, char *msg, size_t len) {
    (void)bytes;
    if (fk.pin_fail_mask >> fk.pin_calls++ & 1) {
        snprintf(msg, len, "fake: locked-memory limit");
        return -1;
    }
    assert_true(fk.npins < MAX_PINS);
    // A GPU pins whole pages and refuses a page twice: runs must start and end on pages and not meet.
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p;
    assert_int_equal(a % page, 0);
    assert_int_equal(bytes % page, 0);
    for (int i = 0; i < fk.npins; i++) {
        uintptr_t b = (uintptr_t)fk.pins[i];
        assert_true(a + bytes < b || b + fk.pin_bytes[i] < a);
    }
    fk.pin_bytes[fk.npins] = bytes;
    fk.pins[fk.npins++] = p;
    return 0;
}
static void fk_host_unpin(void *p) {
    for (int i = 0; i < fk.npins; i++)
        if (fk.pins[i] == p) {
            fk.npins--;
            fk.pins[i] = fk.pins[fk.npins], fk.pin_bytes[i] = fk.pin_bytes[fk.npins];
            return;
        }
    fail_msg("unpinned %p, which was not pinned", p);
}

static const gl_backend *fake_backend(int pin_fail_mask) {
    memset(&fk, 0, sizeof fk);
    fk.be = *backend_cpu();  // memory and the rest from the CPU
    fk.be.name = "fake-async";
    fk.be.upload_async = fk_upload_async;
    fk.be.upload_wait = fk_upload_wait;
    fk.be.upload = fk_upload;
    fk.be.upload_declare = fk_upload_declare;
    fk.be.sync = fk_sync;
    fk.be.host_pin = fk_host_pin;
    fk.be.host_unpin = fk_host_unpin;
    fk.pin_fail_mask = pin_fail_mask;
    return &fk.be;
}

// ---- a loader, a minimal graph (only the input is used) and the stage ------------------------

static void srecipe_with(recipe_t *r, const char *data, const char *loader) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 11\ndata:\n%s  loader: %s\n"
             "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\ntrain: {batch_size: 7, epochs: 4}\n",
             data, loader);
    tl_recipe(r, yaml, 0, NULL);
}

static void srecipe(recipe_t *r, const char *data) { srecipe_with(r, data, "{threads: 2, prefetch: 3}"); }

static gl_loader *open_train(const recipe_t *r) {
    loader_params p;
    loader_default_params(&p);
    gl_loader *L;
    if (loader_open(&L, r, &p, stderr)) fail_msg("loader_open failed");
    return L;
}

typedef struct {
    gl_graph g;
    gl_arena a;
    float *own;  // the input buffer graph_bind would have given
} mini;

static void mini_init(mini *m, const gl_loader *L, const gl_backend *be) {
    memset(m, 0, sizeof *m);
    m->g.input.size = loader_shape(L)->size;
    m->g.batch = loader_batch_capacity(L);
    m->g.be = be;
    m->own = calloc((size_t)(m->g.input.size * m->g.batch), sizeof(float));
    m->g.input.data = m->own;
    arena_init_for(&m->a, input_stage_bytes(&m->g, loader_shape(L), be->upload_declare != NULL), be);
}

static void mini_free(mini *m) {
    arena_free(&m->a);
    free(m->own);
}

// A loader over data (the recipe's training split), the minimal graph on the fake backend.
typedef struct {
    recipe_t r;
    gl_loader *L;
    mini m;
} fixture;

static void fixture_open(fixture *f, const char *data, int pin_fail_mask) {
    srecipe(&f->r, data);
    f->L = open_train(&f->r);
    mini_init(&f->m, f->L, fake_backend(pin_fail_mask));
    fk.g = &f->m.g;
}

static void fixture_close(fixture *f) {
    loader_free(f->L);
    mini_free(&f->m);
    recipe_free(&f->r);
}

// input_stage_ahead until it has taken the next batch (readers get the time a step would give
// them), at most about half a second.
static void ahead_until_taken(input_stage *s, FILE *err) {
    for (int tries = 0; tries < 500 && !s->have; tries++) {
        input_stage_ahead(s, err);
        if (!s->have) usleep(1000);
    }
}

static const char *synth = "  synthetic: {kind: shapes2d, size: 8, train_size: 40, val_size: 9}\n"
                           "  augment: {flip: true, noise: 0.1}\n";
static const char *synth_values = "  synthetic: {kind: cosmo3d, size: 8, train_size: 40, val_size: 9}\n";

// A batch's targets on the host: labels (int32) or values (float), 4 bytes each.
static const void *tgt(const gl_batch *b) { return b->values ? (const void *)b->values : (const void *)b->labels; }

// Steps through 20 batches (several epochs, a short last batch each) as train.c does.
static void every_step_sees_its_own_batch(const char *data, gl_target_kind kind) {
    fixture f;
    fixture_open(&f, data, 0);
    assert_int_equal(loader_shape(f.L)->target, kind);
    gl_loader *L = f.L, *ref = open_train(&f.r), *ev = open_train(&f.r);  // ev: "evaluation" batches
    mini *m = &f.m;
    input_stage s;
    char note[256];
    input_stage_init(&s, &fk.be, &m->g, L, true, &m->a, note, sizeof note);
    assert_true(s.on);
    assert_string_equal(note, "");
    // Every slot's inputs and targets lie inside a pinned run (neighbours share runs).
    assert_true(fk.npins >= 1 && fk.npins <= 2 * loader_slots(L));
    assert_true(s.targets_pinned);
    for (int i = 0; i < loader_slots(L); i++) {
        size_t bytes, tbytes;
        const char *x = (const char *)loader_slot_x(L, i, &bytes), *t = loader_slot_targets(L, i, &tbytes);
        assert_true(bytes >= sizeof(float) * (size_t)(m->g.input.size * m->g.batch));
        assert_true(tbytes >= sizeof(int32_t) * (size_t)(loader_shape(L)->tsize * m->g.batch));
        bool found = false, tfound = false;
        for (int j = 0; j < fk.npins; j++) {
            const char *lo = fk.pins[j], *hi = lo + fk.pin_bytes[j];
            found |= x >= lo && x + bytes <= hi, tfound |= t >= lo && t + tbytes <= hi;
        }
        assert_true(found && tfound);
    }
    const int steps = 20;
    const size_t row = sizeof(float) * (size_t)m->g.input.size;
    int staged_steps = 0;
    for (int k = 0; k < steps; k++) {
        gl_batch b, want;
        bool staged;
        assert_int_equal(input_stage_take(&s, &b, &staged, stderr), 0);
        assert_int_equal(loader_next(ref, &want, stderr), 0);
        assert_int_equal(b.n, want.n);
        assert_int_equal(b.epoch, want.epoch);
        assert_int_equal(b.index, want.index);
        if (!staged) memcpy(m->g.input.data, b.x, row * (size_t)b.n);  // what load_rows does
        staged_steps += staged;
        // The step's kernels run after upload_wait: by then the input holds exactly this batch.
        assert_memory_equal(m->g.input.data, want.x, row * (size_t)want.n);
        // Its targets: declared with a copy holding exactly them (staged: made beside the step
        // before; else now), which the loss and metrics read instead of copying them themselves.
        const size_t tbytes = sizeof(int32_t) * (size_t)(want.n * loader_shape(L)->tsize);
        assert_ptr_equal(fk.decl_host, tgt(&b));
        assert_int_equal(fk.decl_bytes, tbytes);
        assert_memory_equal(fk.decl_dev, tgt(&want), tbytes);
        loader_release(ref, &want);
        if (k + 1 < steps) ahead_until_taken(&s, stderr);
        // An evaluation between steps writes the current buffers (inputs, and targets declared
        // for its batches); the next batch is elsewhere.
        memset(m->g.input.data, 0xff, row * (size_t)m->g.batch);
        gl_batch eb;
        assert_int_equal(loader_next(ev, &eb, stderr), 0);
        input_stage_targets(&s, &eb);
        const size_t ebytes = sizeof(int32_t) * (size_t)(eb.n * loader_shape(L)->tsize);
        assert_ptr_equal(fk.decl_host, tgt(&eb));
        assert_int_equal(fk.decl_bytes, ebytes);
        assert_memory_equal(fk.decl_dev, tgt(&eb), ebytes);
        loader_release(ev, &eb);
        loader_release(L, &b);
    }
    assert_true(staged_steps >= steps / 2);  // readers are far ahead of this loop
    assert_int_equal(s.steps, steps);
    assert_int_equal(s.early, staged_steps);
    assert_int_equal(fk.copies, 2 * staged_steps);  // inputs and targets
    char line[256];
    input_stage_describe(&s, line, sizeof line);
    assert_non_null(strstr(line, "batches were ready a step ahead"));
    input_stage_free(&s);
    assert_int_equal(fk.npins, 0);
    loader_free(ref);
    loader_free(ev);
    fixture_close(&f);
}

static void test_every_step_sees_its_own_batch(void **st) {
    (void)st;
    every_step_sees_its_own_batch(synth, TARGET_CLASS);
}

static void test_every_step_sees_its_own_batch_values(void **st) {
    (void)st;
    every_step_sees_its_own_batch(synth_values, TARGET_VALUES);  // float targets (regression)
}

// The run ends with a batch taken early: its copy lands, its slot goes back (loader_free then
// joins the readers; a slot never released would not stop it, but the copy must not be lost mid-air).
static void test_a_batch_taken_early_is_given_back(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f, synth, 0);
    gl_loader *L = f.L;
    input_stage s;
    input_stage_init(&s, &fk.be, &f.m.g, L, true, &f.m.a, NULL, 0);
    gl_batch b;
    bool staged;
    assert_int_equal(input_stage_take(&s, &b, &staged, stderr), 0);
    assert_false(staged);
    ahead_until_taken(&s, stderr);
    assert_true(s.have);
    assert_int_equal(fk.npending, 2);  // its inputs and targets
    loader_release(L, &b);
    input_stage_free(&s);
    assert_int_equal(fk.npending, 0);  // waited for
    assert_false(s.have);
    // Both slots are back: the stream goes on from batch 2.
    gl_batch c;
    assert_int_equal(loader_next(L, &c, stderr), 0);
    assert_int_equal(c.index, 2);
    loader_release(L, &c);
    fixture_close(&f);
}

// Without readers (data.loader.threads 0) on a host backend, the next batch is made in the input
// buffer the step in flight does not read: its inputs are never copied, only its targets.
static void test_inline_batches_are_made_in_the_input(void **st) {
    (void)st;
    recipe_t r, rr;
    srecipe_with(&r, synth, "{threads: 0, prefetch: 2}");
    srecipe(&rr, synth);
    gl_loader *L = open_train(&r), *ref = open_train(&rr);
    mini m;
    mini_init(&m, L, fake_backend(0));
    fk.g = &m.g;
    input_stage s;
    input_stage_init(&s, &fk.be, &m.g, L, true, &m.a, NULL, 0);
    const int steps = 12;
    const size_t row = sizeof(float) * (size_t)m.g.input.size;
    for (int k = 0; k < steps; k++) {
        gl_batch b, want;
        bool staged;
        assert_int_equal(input_stage_take(&s, &b, &staged, stderr), 0);
        assert_true(staged == (k > 0));
        if (!staged) memcpy(m.g.input.data, b.x, row * (size_t)b.n);
        else assert_ptr_equal(b.x, m.g.input.data);
        assert_int_equal(loader_next(ref, &want, stderr), 0);
        assert_int_equal(b.n, want.n);
        assert_memory_equal(m.g.input.data, want.x, row * (size_t)want.n);
        loader_release(ref, &want);
        if (k + 1 < steps) {
            input_stage_ahead(&s, stderr);
            assert_true(s.have);  // made now, not by a reader later
            assert_true(s.next_buf != m.g.input.data && s.next.x == s.next_buf);
        }
        loader_release(L, &b);
    }
    assert_int_equal(s.early, steps - 1);
    assert_int_equal(fk.copies, steps - 1);  // the targets alone
    char line[256];
    input_stage_describe(&s, line, sizeof line);
    assert_non_null(strstr(line, "made a step ahead by the training threads"));
    input_stage_free(&s);
    mini_free(&m);
    loader_free(L), loader_free(ref);
    recipe_free(&r), recipe_free(&rr);
}

// A refused pin (a locked-memory limit) leaves copies working and says so; off means off.
static void test_pin_refused_and_off(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f, synth, 0x3);  // the inputs with their targets refused, then the inputs alone
    gl_loader *L = f.L;
    mini *m = &f.m;
    input_stage s;
    char note[400];
    input_stage_init(&s, &fk.be, &m->g, L, true, &m->a, note, sizeof note);
    assert_true(s.on);
    assert_int_equal(fk.npins, 0);  // none pinned: all or none
    assert_int_equal(s.npinned, 0);
    assert_non_null(strstr(note, "input copies are not overlapped with compute (fake: locked-memory limit)"));
    assert_non_null(strstr(note, "ulimit -l"));
    input_stage_free(&s);
    assert_int_equal(fk.npins, 0);
    // Only the first attempt (inputs and targets) refused: the inputs alone are pinned, and said.
    fk.pin_calls = 0, fk.pin_fail_mask = 0x1;
    m->a.used = 0;  // the arena carves the stage's buffers afresh
    input_stage_init(&s, &fk.be, &m->g, L, true, &m->a, note, sizeof note);
    assert_true(fk.npins >= 1);
    assert_int_equal(s.npinned, fk.npins);
    assert_non_null(strstr(note, "the targets' copies are made from pageable memory (fake: locked-memory limit)"));
    assert_false(s.targets_pinned);
    for (int i = 0; i < loader_slots(L); i++) {
        size_t bytes;
        const char *x = (const char *)loader_slot_x(L, i, &bytes);
        bool found = false;
        for (int j = 0; j < fk.npins; j++) {
            const char *lo = fk.pins[j], *hi = lo + fk.pin_bytes[j];
            found |= x >= lo && x + bytes <= hi;
        }
        assert_true(found);
    }
    input_stage_free(&s);
    assert_int_equal(fk.npins, 0);
    fixture_close(&f);
    // Field targets larger than the inputs (a U-Net's): without them, each slot's inputs are a
    // page run of their own. Refuse the first attempt (inputs and targets, one run), pin the
    // first slot's inputs, refuse the second's: the first is unpinned again (all or none).
    fixture_open(&f, "  synthetic: {kind: nbody3d, size: 16, train_size: 20, val_size: 4}\n", 0x1 | 0x4);
    input_stage_init(&s, &fk.be, &f.m.g, f.L, true, &f.m.a, note, sizeof note);
    assert_int_equal(fk.pin_calls, 3);  // the merged run; slot 0's inputs (pinned); slot 1's (refused)
    assert_int_equal(fk.npins, 0);      // slot 0's was undone
    assert_int_equal(s.npinned, 0);
    assert_non_null(strstr(note, "input copies are not overlapped with compute (fake: locked-memory limit)"));
    input_stage_free(&s);
    assert_int_equal(fk.npins, 0);
    fixture_close(&f);
    fixture_open(&f, synth, 0);
    L = f.L, m = &f.m;
    // Off (distributed.deterministic): nothing pinned, every take is a plain loader_next.
    input_stage_init(&s, &fk.be, &m->g, L, false, &m->a, note, sizeof note);
    assert_false(s.on);
    assert_int_equal(fk.npins, 0);
    gl_batch b;
    bool staged;
    assert_int_equal(input_stage_take(&s, &b, &staged, stderr), 0);
    input_stage_ahead(&s, stderr);
    assert_false(s.have);
    assert_false(staged);
    loader_release(L, &b);
    input_stage_free(&s);
    fixture_close(&f);
}

// A read that fails in a batch taken early is that batch's step's failure, named as ever.
static void test_failed_read_taken_early_fails_its_step(void **st) {
    (void)st;
    char dir[64] = "/tmp/galley_is_XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/badlabel.h5", dir);
    hid_t f = (hid_t)h5_create_file(path);
    float x[16] = {0};
    int32_t y[16] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    int64_t perm[16];
    loader_epoch_order(perm, 16, 11, 1);  // the recipe's seed, epoch 1
    y[perm[14]] = 5;  // position 14 of the epoch: in its third batch of 7
    uint64_t xd[2] = {16, 1}, yd[1] = {16};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
    char data[512];
    snprintf(data, sizeof data, "  source: hdf5\n  train: {files: %s}\n  val: {files: %s}\n", path, path);
    fixture fx;
    fixture_open(&fx, data, 0);
    gl_loader *L = fx.L;
    input_stage s;
    input_stage_init(&s, &fk.be, &fx.m.g, L, true, &fx.m.a, NULL, 0);
    tl_stream ts;
    FILE *err = tl_stream_open(&ts);
    int failed_at = -1;
    for (int k = 0; k < 3 && failed_at < 0; k++) {
        gl_batch b;
        bool staged;
        int rc = input_stage_take(&s, &b, &staged, err);
        if (rc) failed_at = k;
        if (!rc && k + 1 < 3) ahead_until_taken(&s, err);
        loader_release(L, &b);
    }
    char *msg = tl_stream_close(&ts);
    assert_int_equal(failed_at, 2);
    assert_true(s.failed);  // the failing batch was the one taken early
    assert_int_equal(s.early, 1);
    assert_non_null(strstr(msg, "badlabel.h5"));
    free(msg);
    input_stage_free(&s);
    fixture_close(&fx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_step_sees_its_own_batch),
        cmocka_unit_test(test_every_step_sees_its_own_batch_values),
        cmocka_unit_test(test_a_batch_taken_early_is_given_back),
        cmocka_unit_test(test_pin_refused_and_off),
        cmocka_unit_test(test_inline_batches_are_made_in_the_input),
        cmocka_unit_test(test_failed_read_taken_early_fails_its_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
