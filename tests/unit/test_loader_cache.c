// test_loader_cache.c: data.loader.cache auto, memory and none, and samples read in runs.
// - loader_cache_decide: auto caches within the share of memory (divided among the node's ranks),
//   not beyond it nor when the memory is unknown; memory always, none never.
// - h5src_read_run gives the bytes, checks and messages of h5src_read sample by sample, through
//   every dtype and layout the reader converts, across file boundaries, and stops at the first bad
//   sample (NaN input, float label 0.5) naming it as the single read does.
// - Loaders with cache none, memory and auto serve the same batches bit for bit (train and
//   validation, 1 and 3 reader threads, batches large enough for runs, per-sample files too), and
//   a bad sample is skipped (data.nonfinite: skip) or reported by name (error) alike.
#include "testlib.h"

#include <hdf5.h>
#include <math.h>

#include "data/h5_internal.h"
#include "galley/check.h"
#include "galley/h5data.h"
#include "galley/loader.h"

static char dir[64];

static int setup(void **st) {
    (void)st;
    return tl_tmpdir_make(dir, "lc");
}

static int teardown(void **st) {
    (void)st;
    return tl_tmpdir_remove(dir);
}

// ---- the decision --------------------------------------------------------------------------------

static void test_decide(void **st) {
    (void)st;
    loader_cache_plan c;
    const uint64_t gib = 1ull << 30;
    loader_cache_decide(DATA_CACHE_AUTO, 0.25, 0.25 * 8 * gib, 8 * gib, 1, &c);
    assert_true(c.on);  // exactly the share fits
    assert_true(c.budget == 2.0 * gib);
    loader_cache_decide(DATA_CACHE_AUTO, 0.25, 0.25 * 8 * gib + 1, 8 * gib, 1, &c);
    assert_false(c.on);
    loader_cache_decide(DATA_CACHE_AUTO, 0.25, 1.0 * gib, 8 * gib, 4, &c);  // 4 ranks: 0.5 GiB each
    assert_false(c.on);
    assert_int_equal(c.node_ranks, 4);
    loader_cache_decide(DATA_CACHE_AUTO, 0.25, 0.5 * gib, 8 * gib, 4, &c);
    assert_true(c.on);
    loader_cache_decide(DATA_CACHE_AUTO, 0.25, 1024, 0, 1, &c);  // memory unknown
    assert_false(c.on);
    loader_cache_decide(DATA_CACHE_MEMORY, 0.25, 100.0 * gib, 8 * gib, 1, &c);
    assert_true(c.on);
    loader_cache_decide(DATA_CACHE_NONE, 0.25, 1024, 8 * gib, 1, &c);
    assert_false(c.on);
}

// ---- files -----------------------------------------------------------------------------------------

static char *path_in(const char *name) {
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static float value_at(int64_t i) { return (float)((i * 37 % 101) - 50) / 8.0f; }

// Variant v's samples first .. first + n - 1 in file name (chunked per sample, or contiguous).
// nan_at / half_at: the sample whose first input is NaN / whose first label is 0.5 (-1: none).
static void write_variant(int v, const char *name, int64_t first, int64_t n, int chunk, int64_t nan_at,
                          int64_t half_at) {
    hid_t f = (hid_t)h5_create_file(path_in(name));
    assert_true(f >= 0);
    uint64_t d[5] = {(uint64_t)n};
    int64_t per = v == 0 ? 2 * 6 * 6 : v == 1 ? 5 * 5 * 2 : v == 2 ? 4 : 6 * 6 * 2;
    void *x = malloc((size_t)(n * per) * 8), *y = malloc((size_t)n * 6 * 6 * 3 * 8);
    for (int64_t j = 0; j < n * per; j++) {
        int64_t i = first * per + j;
        if (v == 0) ((int16_t *)x)[j] = (int16_t)(i * 13 % 3000);
        if (v == 1) ((float *)x)[j] = value_at(i);
        if (v == 2) ((uint16_t *)x)[j] = (uint16_t)(0x3c00 + (i * 7 % 2000));  // float16 around 1..
        if (v == 3) ((uint8_t *)x)[j] = (uint8_t)(i * 11 % 256);
    }
    if (nan_at >= first && nan_at < first + n) ((float *)x)[(nan_at - first) * per] = NAN;
    if (v == 0) {  // int16 [n, 2, 6, 6], values [n, 3]
        d[1] = 2, d[2] = 6, d[3] = 6;
        h5_write_array(f, "x", H5T_STD_I16LE, H5T_NATIVE_INT16, 4, d, x, chunk, 0);
        for (int64_t j = 0; j < 3 * n; j++) ((float *)y)[j] = value_at(first * 3 + j + 7);
        d[1] = 3;
        h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, y, chunk, 0);
    } else if (v == 1) {  // float32 [n, 5, 5, 2] channels last, a mask [n, 5, 5] as float64
        d[1] = 5, d[2] = 5, d[3] = 2;
        h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d, x, chunk, 0);
        for (int64_t j = 0; j < 25 * n; j++) ((double *)y)[j] = (double)((first * 25 + j) % 3);
        if (half_at >= first && half_at < first + n) ((double *)y)[(half_at - first) * 25 + 3] = 0.5;
        h5_write_array(f, "y", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, d, y, chunk, 0);
    } else if (v == 2) {  // float16 [n, 4], class labels int32 [n]
        d[1] = 4;
        hid_t half = h5_float16_type();
        h5_write_array(f, "x", half, half, 2, d, x, chunk, 0);
        H5Tclose(half);
        for (int64_t j = 0; j < n; j++) ((int32_t *)y)[j] = (int32_t)((first + j) % 4);
        h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d, y, chunk, 0);
    } else {  // uint8 [n, 6, 6, 2] channels last, a field target [n, 6, 6, 3] channels last
        d[1] = 6, d[2] = 6, d[3] = 2;
        h5_write_array(f, "x", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, d, x, chunk, 0);
        for (int64_t j = 0; j < 108 * n; j++) ((float *)y)[j] = value_at(first * 108 + j + 3);
        d[3] = 3;
        h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d, y, chunk, 0);
    }
    H5Fclose(f);
    free(x), free(y);
}

// The data keys reading variant v from files (a glob or path).
static const char *variant_keys(int v) {
    switch (v) {
    case 0: return "  target: values\n  transform: log1p\n  normalize: standard\n  mean: [1, 2]\n  std: [0.5, 2]\n";
    case 1: return "  layout: channels_last\n  target: mask\n  classes: 3\n  normalize: minmax\n  min: [-6]\n  max: [6]\n";
    case 2: return "  target: class\n  classes: 4\n";
    default: return "  layout: channels_last\n  target: values\n  normalize: minmax\n  min: [0, 10]\n  max: [255, 300]\n";
    }
}

// A recipe over files with variant v's keys and more (train and val read the same files).
static void vrecipe(recipe_t *r, int v, const char *files, const char *more) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "seed: 5\ndata:\n  source: hdf5\n  train: {files: '%s'}\n  val: {files: '%s'}\n%s%s"
             "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\ntrain: {batch_size: 9, epochs: 3}\n",
             files, files, variant_keys(v), more);
    tl_recipe(r, yaml, 0, NULL);
}

// ---- runs against single reads -----------------------------------------------------------------------

typedef struct {
    float *x, *v;
    int32_t *l;
} arrays;

static void arrays_new(arrays *a, int64_t n, int64_t xn, int64_t tn) {
    a->x = calloc((size_t)(n * xn), sizeof(float));
    a->v = calloc((size_t)(n * tn), sizeof(float));
    a->l = calloc((size_t)(n * tn), sizeof(int32_t));
}

static void arrays_free(arrays *a) { free(a->x), free(a->v), free(a->l); }

// Every sample of r's training split read alone and in runs (from each start, lengths 1 to the
// rest) agree byte for byte; a bad sample stops a run where the single read fails, with its message.
static void check_runs(const recipe_t *r) {
    h5src *s;
    assert_int_equal(h5src_open(&s, r, SPLIT_TRAIN, stderr), 0);
    gl_shape xs, ts;
    h5src_full(s, &xs, &ts);
    gl_dataset d;
    h5src_describe(s, &d);
    int64_t n = d.n, xn = shape_size(&xs), tn = shape_size(&ts);
    bool lab = d.target != TARGET_VALUES;
    h5cursor *c1 = h5cursor_new(s), *c2 = h5cursor_new(s);
    arrays one, run;
    arrays_new(&one, n, xn, tn);
    arrays_new(&run, n, xn, tn);
    char (*msg)[512] = calloc((size_t)n, sizeof *msg), got[512];
    int *bad = calloc((size_t)n, sizeof(int));
    bool *nf = calloc((size_t)n, sizeof(bool));
    for (int64_t i = 0; i < n; i++) {
        bad[i] = h5src_read(s, c1, i, NULL, one.x + i * xn, lab ? one.l + i * tn : NULL, lab ? NULL : one.v + i * tn,
                            msg[i], sizeof msg[i]) != 0;
        nf[i] = bad[i] && h5cursor_nonfinite(c1);
    }
    for (int64_t a = 0; a < n; a++)
        for (int64_t m = 1; a + m <= n; m += (m < 3 ? 1 : 4)) {
            got[0] = '\0';
            int64_t k = h5src_read_run(s, c2, a, m, run.x + a * xn, lab ? run.l + a * tn : NULL,
                                       lab ? NULL : run.v + a * tn, got, sizeof got);
            int64_t want = 0;
            while (want < m && !bad[a + want]) want++;
            assert_int_equal(k, want);
            if (k < m) {
                assert_string_equal(got, msg[a + k]);
                assert_int_equal(h5cursor_nonfinite(c2), nf[a + k]);
            }
            for (int64_t i = a; i < a + k; i++) {
                assert_memory_equal(run.x + i * xn, one.x + i * xn, (size_t)xn * sizeof(float));
                if (lab) assert_memory_equal(run.l + i * tn, one.l + i * tn, (size_t)tn * sizeof(int32_t));
                else assert_memory_equal(run.v + i * tn, one.v + i * tn, (size_t)tn * sizeof(float));
            }
        }
    free(msg), free(bad), free(nf);
    arrays_free(&one), arrays_free(&run);
    h5cursor_free(c1), h5cursor_free(c2);
    h5src_free(s);
}

static void test_runs_equal_single_reads(void **st) {
    (void)st;
    for (int v = 0; v < 4; v++) {
        char a[32], b[32], glob[128];
        snprintf(a, sizeof a, "run%d-a.h5", v);
        snprintf(b, sizeof b, "run%d-b.h5", v);
        write_variant(v, a, 0, 7, 1, -1, -1);  // chunked per sample, as galley writes
        write_variant(v, b, 7, 6, 0, -1, -1);  // contiguous, as h5py writes
        snprintf(glob, sizeof glob, "%s/run%d-*.h5", dir, v);
        recipe_t r;
        vrecipe(&r, v, glob, "");
        check_runs(&r);
        recipe_free(&r);
    }
}

static void test_runs_stop_at_bad_samples(void **st) {
    (void)st;
    write_variant(1, "nan-a.h5", 0, 9, 1, 4, 7);  // x NaN at sample 4, a mask label 0.5 at sample 7
    write_variant(1, "nan-b.h5", 9, 5, 1, 10, -1);
    recipe_t r;
    char glob[128];
    snprintf(glob, sizeof glob, "%s/nan-*.h5", dir);
    vrecipe(&r, 1, glob, "");
    check_runs(&r);  // the single reads fail at 4, 7 and 10; the runs stop there with their messages
    h5src *s;
    assert_int_equal(h5src_open(&s, &r, SPLIT_TRAIN, stderr), 0);
    h5cursor *c = h5cursor_new(s);
    float x[14 * 50];
    int32_t l[14 * 25];
    char msg[512];
    assert_int_equal(h5src_read_run(s, c, 0, 14, x, l, NULL, msg, sizeof msg), 4);
    assert_non_null(strstr(msg, "nan-a.h5: 'x' sample 4 (index 4 in the file) holds nan"));
    assert_true(h5cursor_nonfinite(c));
    assert_int_equal(h5src_read_run(s, c, 5, 9, x, l, NULL, msg, sizeof msg), 2);
    assert_non_null(strstr(msg, "'y' sample 7 (index 7 in the file) has label 0.5"));
    assert_false(h5cursor_nonfinite(c));
    h5cursor_free(c);
    h5src_free(s);
    recipe_free(&r);
}

// ---- loaders: none, memory and auto serve the same batches ---------------------------------------

typedef struct {
    int64_t n, *samples;
    float *x, *t;
    int64_t skipped;
} stream_t;

static gl_loader *open_loader(const recipe_t *r, int split, int threads) {
    loader_params p;
    loader_default_params(&p);
    p.split = split, p.threads = threads;
    gl_loader *L;
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    int rc = loader_open(&L, r, &p, err);
    char *msg = tl_stream_close(&s);
    if (rc) fail_msg("loader_open: %s", msg);
    free(msg);
    assert_true(loader_plan_bytes(r, &p) > 0);
    return L;
}

static void take(gl_loader *L, int64_t nbatches, stream_t *out) {
    const gl_dataset *d = loader_shape(L);
    memset(out, 0, sizeof *out);
    int64_t cap = nbatches * loader_batch_capacity(L);
    out->samples = malloc((size_t)cap * sizeof(int64_t));
    out->x = malloc((size_t)(cap * d->size) * sizeof(float));
    out->t = malloc((size_t)(cap * d->tsize) * sizeof(float));
    for (int64_t k = 0; k < nbatches; k++) {
        gl_batch b;
        if (loader_next(L, &b, stderr)) fail_msg("loader_next failed");
        memcpy(out->samples + out->n, b.samples, (size_t)b.n * sizeof(int64_t));
        memcpy(out->x + out->n * d->size, b.x, (size_t)(b.n * d->size) * sizeof(float));
        for (int64_t j = 0; j < b.n * d->tsize; j++)
            out->t[out->n * d->tsize + j] = b.values ? b.values[j] : (float)b.labels[j];
        out->n += b.n;
        loader_release(L, &b);
    }
    out->skipped = loader_skipped(L, NULL, 0);
}

static void stream_free(stream_t *s) { free(s->samples), free(s->x), free(s->t); }

static void assert_streams_equal(const stream_t *a, const stream_t *b, const gl_dataset *d) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->skipped, b->skipped);
    assert_memory_equal(a->samples, b->samples, (size_t)a->n * sizeof(int64_t));
    assert_memory_equal(a->x, b->x, (size_t)(a->n * d->size) * sizeof(float));
    assert_memory_equal(a->t, b->t, (size_t)(a->n * d->tsize) * sizeof(float));
}

// Three epochs of both splits with each cache setting and thread count equal the first's; auto
// caches (the files are tiny) unless the share is too small.
static void check_caches_agree(int v, const char *files, const char *more) {
    static const char *const caches[] = {"none", "memory", "auto", "auto, cache_share: 1e-9"};
    stream_t ref[2];
    for (int c = 0; c < 4; c++)
        for (int threads = 1; threads <= 3; threads += 2)
            for (int split = SPLIT_TRAIN; split <= SPLIT_VAL; split++) {
                char extra[512];
                snprintf(extra, sizeof extra, "%s  loader: {cache: %s}\n", more, caches[c]);
                recipe_t r;
                vrecipe(&r, v, files, extra);
                gl_loader *L = open_loader(&r, split, threads);
                assert_int_equal(loader_cache(L)->on, c == 1 || c == 2);
                assert_int_equal(loader_cache(L)->mode, c == 0 ? DATA_CACHE_NONE : c == 1 ? DATA_CACHE_MEMORY : DATA_CACHE_AUTO);
                stream_t s;
                take(L, 3 * loader_batches_per_epoch(L), &s);
                int k = split == SPLIT_TRAIN ? 0 : 1;
                if (c == 0 && threads == 1) ref[k] = s;
                else {
                    assert_streams_equal(&ref[k], &s, loader_shape(L));
                    stream_free(&s);
                }
                loader_free(L);
                recipe_free(&r);
            }
    stream_free(&ref[0]), stream_free(&ref[1]);
}

static void test_caches_serve_the_same_batches(void **st) {
    (void)st;
    for (int v = 0; v < 4; v++) {
        char glob[128];
        snprintf(glob, sizeof glob, "%s/run%d-*.h5", dir, v);  // written by test_runs_equal_single_reads
        check_caches_agree(v, glob, "");
    }
    // augmented, cropped (no runs: a crop reads less as a hyperslab), one sample per file
    check_caches_agree(1, path_in("run1-*.h5"), "  augment: {flip: true, rotate: true, pad_crop: 1, noise: 0.1}\n");
    check_caches_agree(1, path_in("run1-*.h5"), "  crop: 4\n  augment: {flip: true, rotate: true}\n");
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = SYNTH_SHAPES2D, p.n = 11, p.size = 6, p.per_file = true;
    assert_int_equal(h5_synth_write(&p, path_in("pf"), stderr), 0);
    check_caches_agree(2, path_in("pf/sample-*.h5"), "  samples: per_file\n");
}

// A NaN input with data.nonfinite skip: the same replacements and count whatever the cache; with
// error (the default) the batch holding it fails naming it, cached or not.
static void test_bad_samples_with_a_cache(void **st) {
    (void)st;
    char glob[128];
    write_variant(1, "skip-a.h5", 0, 9, 1, 4, -1);
    write_variant(1, "skip-b.h5", 9, 5, 1, 10, -1);
    snprintf(glob, sizeof glob, "%s/skip-*.h5", dir);
    check_caches_agree(1, glob, "  nonfinite: skip\n");
    static const char *const caches[] = {"none", "memory", "auto"};
    for (int c = 0; c < 3; c++) {
        char extra[128];
        snprintf(extra, sizeof extra, "  loader: {cache: %s}\n", caches[c]);
        recipe_t r;
        vrecipe(&r, 1, glob, extra);
        gl_loader *L = open_loader(&r, SPLIT_VAL, 2);  // in order: batch 0 is samples 0..8
        gl_batch b;
        tl_stream s;
        FILE *err = tl_stream_open(&s);
        assert_int_equal(loader_next(L, &b, err), -1);
        loader_release(L, &b);
        char *msg = tl_stream_close(&s);
        if (!strstr(msg, "skip-a.h5: 'x' sample 4 (index 4 in the file) holds nan"))
            fail_msg("cache %s: the error does not name sample 4: %s", caches[c], msg);
        free(msg);
        loader_free(L);
        recipe_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_runs_equal_single_reads),
        cmocka_unit_test(test_runs_stop_at_bad_samples),
        cmocka_unit_test(test_caches_serve_the_same_batches),
        cmocka_unit_test(test_bad_samples_with_a_cache),
    };
    h5_setup(false);
    return cmocka_run_group_tests(tests, setup, teardown);
}
