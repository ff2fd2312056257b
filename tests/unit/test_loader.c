// test_loader.c: order and sharding (the same global batches for 1..4 ranks, every sample once
// per epoch), batches independent of the reader thread count, cached epochs equal uncached ones,
// staging copies exactly this rank's files, masks follow their inputs through crop and
// augmentation, and a bad sample mid-run is an error naming it.
#include "testlib.h"

#include <dirent.h>
#include <hdf5.h>
#include <omp.h>
#include <sys/stat.h>

#include "galley/check.h"
#include "galley/h5data.h"
#include "data/source.h"
#include "galley/loader.h"
#include "galley/schema.h"

static char dir[64];

static int setup(void **st) {
    (void)st;
    return tl_tmpdir_make(dir, "ld");
}

static int teardown(void **st) {
    (void)st;
    return tl_tmpdir_remove(dir);
}

// ---- order and sharding --------------------------------------------------------------------

static void test_shards_cover_global_batches_for_any_world(void **st) {
    (void)st;
    enum { N = 103, B = 10 };
    int64_t perm[N];
    for (int64_t epoch = 1; epoch <= 3; epoch++) {
        loader_epoch_order(perm, N, 5, epoch);
        int seen[N] = {0};
        int64_t nb = loader_batches(N, B, false);
        assert_int_equal(nb, 11);
        assert_int_equal(loader_batches(N, B, true), 10);
        for (int64_t b = 0; b < nb; b++) {
            int64_t start = b * B, len = N - start < B ? N - start : B;
            for (int world = 1; world <= 4; world++) {
                int64_t next = 0;
                for (int rank = 0; rank < world; rank++) {
                    int64_t lo, cnt;
                    loader_shard(len, rank, world, &lo, &cnt);
                    assert_int_equal(lo, next);  // contiguous, in rank order: the union is the batch, in order
                    assert_true(cnt >= len / world && cnt <= (len + world - 1) / world);
                    next += cnt;
                    if (world == 3)
                        for (int64_t j = 0; j < cnt; j++) seen[perm[start + lo + j]]++;
                }
                assert_int_equal(next, len);
            }
        }
        for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    }
}

// ---- loaders over real recipes ---------------------------------------------------------------

static void lrecipe(recipe_t *r, const char *data, const char *more) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "seed: 3\ndata:\n%s%s"
             "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\ntrain: {batch_size: 7, epochs: 2}\n",
             data, more);
    tl_recipe(r, yaml, 0, NULL);
}

static gl_loader *open_loader(const recipe_t *r, int split, int rank, int world, int threads) {
    loader_params p;
    loader_default_params(&p);
    p.split = split, p.rank = rank, p.world = world, p.threads = threads;
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

// Everything nbatches batches hold, concatenated: samples, x, targets.
typedef struct {
    int64_t n, *samples;
    float *x, *t;
} stream_t;

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
}

static void stream_free(stream_t *s) { free(s->samples), free(s->x), free(s->t); }

static void assert_streams_equal(const stream_t *a, const stream_t *b, const gl_dataset *d) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->samples, b->samples, (size_t)a->n * sizeof(int64_t));
    assert_memory_equal(a->x, b->x, (size_t)(a->n * d->size) * sizeof(float));
    assert_memory_equal(a->t, b->t, (size_t)(a->n * d->tsize) * sizeof(float));
}

static const char *synth_data = "  synthetic: {kind: shapes2d, size: 8, train_size: 40, val_size: 9}\n";
static const char *synth_aug = "  augment: {flip: true, rotate: true, pad_crop: 2, noise: 0.1}\n";

// Thread count does not change a byte; ranks together give the one-rank stream.
static void test_threads_and_ranks_do_not_change_batches(void **st) {
    (void)st;
    recipe_t r;
    lrecipe(&r, synth_data, synth_aug);
    gl_loader *one = open_loader(&r, SPLIT_TRAIN, 0, 1, 1);
    int64_t nb = 2 * loader_batches_per_epoch(one) + 1;  // across an epoch boundary
    stream_t s1, s4;
    take(one, nb, &s1);
    gl_loader *four = open_loader(&r, SPLIT_TRAIN, 0, 1, 4);
    take(four, nb, &s4);
    assert_streams_equal(&s1, &s4, loader_shape(one));
    // Epochs 1 and 2 are different permutations of all 40 samples.
    assert_true(s1.n > 80);
    assert_memory_not_equal(s1.samples, s1.samples + 40, 40 * sizeof(int64_t));
    stream_free(&s4);
    loader_free(four);

    // world = 3: rank streams interleave batch by batch into the one-rank stream.
    gl_loader *rk[3];
    stream_t part[3][16];
    for (int k = 0; k < 3; k++) {
        rk[k] = open_loader(&r, SPLIT_TRAIN, k, 3, 2);
        for (int64_t b = 0; b < nb; b++) take(rk[k], 1, &part[k][b]);
    }
    const gl_dataset *d = loader_shape(one);
    int64_t at = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < 3; k++) {
            stream_t *p = &part[k][b];
            assert_memory_equal(p->samples, s1.samples + at, (size_t)p->n * sizeof(int64_t));
            assert_memory_equal(p->x, s1.x + at * d->size, (size_t)(p->n * d->size) * sizeof(float));
            at += p->n;
            stream_free(p);
        }
    assert_int_equal(at, s1.n);
    for (int k = 0; k < 3; k++) loader_free(rk[k]);
    stream_free(&s1);
    loader_free(one);
    recipe_free(&r);
}

static void test_validation_in_order_and_drop_last(void **st) {
    (void)st;
    recipe_t r;
    lrecipe(&r, synth_data, "  loader: {drop_last: true}\n");
    gl_loader *v = open_loader(&r, SPLIT_VAL, 0, 1, 2);
    assert_int_equal(loader_batches_per_epoch(v), 2);  // 9 samples, batch 7: partial batch kept
    stream_t s;
    take(v, 2, &s);
    assert_int_equal(s.n, 9);
    for (int i = 0; i < 9; i++) assert_int_equal(s.samples[i], i);
    stream_free(&s);
    loader_free(v);
    gl_loader *t = open_loader(&r, SPLIT_TRAIN, 0, 1, 2);
    assert_int_equal(loader_batches_per_epoch(t), 40 / 7);  // dropped
    gl_batch b;
    assert_int_equal(loader_next(t, &b, stderr), 0);
    assert_int_equal(b.n, 7);
    loader_release(t, &b);
    loader_free(t);
    recipe_free(&r);
}

// ---- HDF5: cache, staging, masks ---------------------------------------------------------------

// climate2d per-sample files (DeepCAM layout) and a recipe reading them.
static void climate_files(const char *name, int64_t n) {
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = SYNTH_CLIMATE2D;
    p.n = n;
    p.size = 12;
    p.channels = 3;
    p.per_file = true;
    char out[256];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    assert_int_equal(h5_synth_write(&p, out, stderr), 0);
}

static void climate_recipe(recipe_t *r, const char *name, const char *more) {
    char data[1024];
    snprintf(data, sizeof data,
             "  source: hdf5\n"
             "  train: {files: '%s/%s/sample-*.h5', x: climate/data, y: climate/labels_0}\n"
             "  val: {files: '%s/%s/sample-00000[0-3].h5', x: climate/data, y: climate/labels_0}\n"
             "  samples: per_file\n  layout: channels_last\n  target: mask\n  classes: 3\n  crop: 8\n",
             dir, name, dir, name);
    lrecipe(r, data, more);
}

static void test_cache_equals_uncached(void **st) {
    (void)st;
    climate_files("clim", 12);
    recipe_t a, b;
    climate_recipe(&a, "clim", synth_aug);
    climate_recipe(&b, "clim", "  augment: {flip: true, rotate: true, pad_crop: 2, noise: 0.1}\n  loader: {cache: memory}\n");
    gl_loader *la = open_loader(&a, SPLIT_TRAIN, 0, 1, 3), *lb = open_loader(&b, SPLIT_TRAIN, 0, 1, 3);
    int64_t nb = 3 * loader_batches_per_epoch(la);  // epoch 1 fills the cache, 2 and 3 read it
    stream_t sa, sb;
    take(la, nb, &sa);
    take(lb, nb, &sb);
    assert_streams_equal(&sa, &sb, loader_shape(la));
    stream_free(&sa), stream_free(&sb);
    loader_free(la), loader_free(lb);
    recipe_free(&a), recipe_free(&b);
}

// Inputs and masks go through the same crop, rotation, flips and shift: build files whose mask is
// a function of x (label = x > 0), and check it still holds pixel by pixel after augmentation.
static void test_masks_follow_inputs(void **st) {
    (void)st;
    enum { NS = 6, S = 10 };
    static float x[NS * S * S * 2];
    static int32_t m[NS * S * S];
    for (int i = 0; i < NS * S * S; i++) {
        float v = rng_uniform(9, RNG_TEST, 0, (uint64_t)i) < 0.5f ? 0.0f : 1.0f + (float)(i % 7);
        x[2 * i] = v, x[2 * i + 1] = (float)i;
        m[i] = v > 0;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/masks.h5", dir);
    hid_t f = (hid_t)h5_create_file(path);
    uint64_t xd[4] = {NS, S, S, 2}, md[3] = {NS, S, S};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 3, md, m, 1, 0);
    H5Fclose(f);
    char data[1024];
    snprintf(data, sizeof data,
             "  source: hdf5\n  train: {files: %s}\n  val: {files: %s}\n  layout: channels_last\n  target: mask\n"
             "  classes: 2\n  crop: 7\n  augment: {flip: true, rotate: true, pad_crop: 2}\n", path, path);
    recipe_t r;
    lrecipe(&r, data, "");
    gl_loader *L = open_loader(&r, SPLIT_TRAIN, 0, 1, 2);
    stream_t s;
    take(L, 4 * loader_batches_per_epoch(L), &s);
    int64_t vol = 49, moved = 0;
    for (int64_t i = 0; i < s.n; i++)
        for (int64_t v = 0; v < vol; v++) {
            float xv = s.x[i * 2 * vol + v];
            assert_int_equal((int)s.t[i * vol + v], xv > 0);
            moved += s.x[i * 2 * vol + vol + v] != s.x[i * 2 * vol + vol];  // channel 1 carries positions
        }
    assert_true(moved > 0);
    stream_free(&s);
    loader_free(L);
    recipe_free(&r);
}

static void test_staging_copies_this_ranks_files(void **st) {
    (void)st;
    climate_files("stage_src", 10);
    char stage[256], more[512];
    snprintf(stage, sizeof stage, "%s/stage", dir);
    mkdir(stage, 0755);
    snprintf(more, sizeof more, "  loader: {stage: %s}\n", stage);
    recipe_t r;
    climate_recipe(&r, "stage_src", more);
    loader_params p;
    loader_default_params(&p);
    p.rank = 1, p.world = 4, p.epochs = 1;
    gl_loader *L;
    assert_int_equal(loader_open(&L, &r, &p, stderr), 0);
    // The files of rank 1's samples in epoch 1, and nothing else.
    int64_t perm[10];
    loader_epoch_order(perm, 10, 3, 1);
    int want[10] = {0}, nwant = 0;
    for (int64_t b = 0; b < loader_batches(10, 7, false); b++) {
        int64_t start = b * 7, len = 10 - start < 7 ? 10 - start : 7, lo, cnt;
        loader_shard(len, 1, 4, &lo, &cnt);
        for (int64_t j = 0; j < cnt; j++) nwant += !want[perm[start + lo + j]]++;
    }
    DIR *dd = opendir(loader_stage_dir(L));
    assert_non_null(dd);
    int got = 0;
    for (struct dirent *e; (e = readdir(dd));) {
        if (e->d_name[0] == '.') continue;
        int idx = atoi(e->d_name);
        assert_true(idx >= 0 && idx < 10 && want[idx]);
        assert_non_null(strstr(e->d_name, "sample-"));
        got++;
    }
    closedir(dd);
    assert_int_equal(got, nwant);
    // Batches read from the staged copies equal a plain rank-1 loader's.
    stream_t a, b;
    take(L, 2, &a);
    char *staged = strdup(loader_stage_dir(L));
    loader_free(L);
    struct stat sb;
    assert_int_not_equal(stat(staged, &sb), 0);  // removed at the end
    free(staged);
    recipe_t plain;
    climate_recipe(&plain, "stage_src", "");
    gl_loader *L2 = open_loader(&plain, SPLIT_TRAIN, 1, 4, 1);
    take(L2, 2, &b);
    assert_streams_equal(&a, &b, loader_shape(L2));
    stream_free(&a), stream_free(&b);
    loader_free(L2);
    recipe_free(&plain);
    recipe_free(&r);
}

// The next batch fails: what loader_next said (malloc'ed).
static char *failed_next(gl_loader *L) {
    gl_batch b;
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    assert_int_equal(loader_next(L, &b, err), -1);
    loader_release(L, &b);
    return tl_stream_close(&s);
}

static void test_bad_sample_mid_run_is_an_error(void **st) {
    (void)st;
    char path[256];
    snprintf(path, sizeof path, "%s/badlabel.h5", dir);
    hid_t f = (hid_t)h5_create_file(path);
    float x[8] = {0};
    int32_t y[8] = {0, 1, 0, 1, 5, 0, 1, 0};
    uint64_t xd[2] = {8, 1}, yd[1] = {8};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
    char data[1024];
    snprintf(data, sizeof data, "  source: hdf5\n  train: {files: %s}\n  val: {files: %s}\n", path, path);
    recipe_t r;
    lrecipe(&r, data, "");
    gl_loader *L = open_loader(&r, SPLIT_VAL, 0, 1, 2);
    char *msg = failed_next(L);  // samples 0..6: sample 4 has label 5
    assert_non_null(strstr(msg, "badlabel.h5"));
    assert_non_null(strstr(msg, "sample 4"));
    free(msg);
    loader_free(L);
    recipe_free(&r);
}

// ---- without readers (data.loader.threads 0) ---------------------------------------------------

// One file of n samples x [2] with labels y (n <= 16), at dir/name.
static void small_file(const char *name, int64_t n, const int32_t *y) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    hid_t f = (hid_t)h5_create_file(path);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)i * 0.5f - 3.0f;
    uint64_t xd[2] = {(uint64_t)n, 2}, yd[1] = {(uint64_t)n};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
}

// The same stream of batches from a loader without readers (made by this thread's OpenMP team)
// as from reader threads: synthetic data with every augmentation, HDF5 through the memory cache
// (filled block by block) and through runs of consecutive samples (no cache); loader_try_next_into
// makes the inputs in the caller's buffer.
static void test_inline_equals_readers(void **st) {
    (void)st;
    char data[1024], more[256];
    climate_files("clim_inline", 12);
    const int32_t y[16] = {0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1};
    small_file("runs.h5", 16, y);
    for (int c = 0; c < 3; c++) {
        recipe_t a, b;
        const char *tail = c == 1   ? "  loader: {cache: memory, threads: 0}\n"
                           : c == 2 ? "  loader: {cache: none, threads: 0}\n"
                                    : "  loader: {threads: 0}\n";
        snprintf(more, sizeof more, "%s%s", c == 2 ? "" : synth_aug, tail);
        if (c == 0) lrecipe(&a, synth_data, more), lrecipe(&b, synth_data, synth_aug);
        if (c == 1) climate_recipe(&a, "clim_inline", more), climate_recipe(&b, "clim_inline", synth_aug);
        if (c == 2) {
            snprintf(data, sizeof data, "  source: hdf5\n  train: {files: %s/runs.h5}\n  val: {files: %s/runs.h5}\n",
                     dir, dir);
            lrecipe(&a, data, more), lrecipe(&b, data, "  loader: {cache: none}\n");
        }
        gl_loader *la = open_loader(&a, SPLIT_TRAIN, 0, 1, 0), *lb = open_loader(&b, SPLIT_TRAIN, 0, 1, 1);
        assert_true(loader_inline(la));
        assert_false(loader_inline(lb));
        int64_t nb = 2 * loader_batches_per_epoch(la) + 1;
        stream_t sa, sb;
        take(la, nb, &sa);
        take(lb, nb, &sb);
        assert_streams_equal(&sa, &sb, loader_shape(la));
        // the next batch straight into a buffer of ours: the same inputs as the readers' slot
        const gl_dataset *d = loader_shape(la);
        float *buf = calloc((size_t)(loader_batch_capacity(la) * d->size), sizeof(float));
        gl_batch ba, bb;
        assert_int_equal(loader_try_next_into(la, &ba, buf, stderr), 0);
        assert_ptr_equal(ba.x, buf);
        assert_int_equal(loader_next(lb, &bb, stderr), 0);
        assert_int_equal(ba.n, bb.n);
        assert_memory_equal(buf, bb.x, (size_t)(bb.n * d->size) * sizeof(float));
        loader_release(la, &ba), loader_release(lb, &bb);
        free(buf);
        stream_free(&sa), stream_free(&sb);
        loader_free(la), loader_free(lb);
        recipe_free(&a), recipe_free(&b);
    }
}

// A batch with two bad samples, made by two threads without readers: the error names the first in
// the batch's order whichever thread met it.
static void test_inline_error_names_the_first_bad_sample(void **st) {
    (void)st;
    const int32_t y[16] = {0, 1, 0, 1, 0, 7, 0, 0, 1, 0, 0, 1, 9, 1, 0, 0};
    small_file("two_bad.h5", 16, y);
    char data[1024];
    snprintf(data, sizeof data, "  source: hdf5\n  train: {files: %s/two_bad.h5}\n  val: {files: %s/two_bad.h5}\n",
             dir, dir);
    for (int cache = 0; cache < 2; cache++) {
        recipe_t r;
        lrecipe(&r, data, cache ? "  loader: {threads: 0, cache: memory}\n" : "  loader: {threads: 0, cache: none}\n");
        r.train.batch_size = 16;
        int saved = omp_get_max_threads();
        omp_set_num_threads(2);
        gl_loader *L = open_loader(&r, SPLIT_VAL, 0, 1, 0);
        omp_set_num_threads(saved);
        char *msg = failed_next(L);
        assert_non_null(strstr(msg, "two_bad.h5"));
        assert_non_null(strstr(msg, "sample 5"));
        free(msg);
        loader_free(L);
        recipe_free(&r);
    }
}

// ---- the data-source registry (src/data/source_registry.c) -----------------------------------

// Every source's name and id round-trip, the first ids are recipe.h's DATA_SOURCE_*, the
// schema's data.source choices are the registry's, and each source is complete: held in memory
// (memory_bytes, load, sample) or read (cursor_new, cursor_free, read), with its files hooks all
// or none.
static void test_source_registry(void **state) {
    (void)state;
    assert_true(data_source_count() >= 2);
    assert_string_equal(data_source_name(DATA_SOURCE_SYNTHETIC), "synthetic");
    assert_string_equal(data_source_name(DATA_SOURCE_HDF5), "hdf5");
    assert_string_equal(data_source_name(-1), "?");
    assert_string_equal(data_source_name(data_source_count()), "?");
    assert_null(data_source_choices[data_source_count()]);
    const key_spec *source = NULL;
    for (const key_spec *k = recipe_schema; k->name; k++)
        if (!strcmp(k->name, "data"))
            for (const key_spec *c = k->children; c->name; c++)
                if (!strcmp(c->name, "source")) source = c;
    assert_non_null(source);
    assert_ptr_equal(source->choices, data_source_choices);
    for (int id = 0; id < data_source_count(); id++) {
        const gl_source_ops *o = source_ops(id);
        assert_non_null(o->open);
        assert_non_null(o->free);
        assert_non_null(o->describe);
        bool memory = o->memory_bytes && o->load && o->sample;
        bool reads = o->cursor_new && o->cursor_free && o->read;
        if (memory == reads) fail_msg("data source %s must be held in memory or read, not %s", data_source_name(id),
                                      memory ? "both" : "neither");
        bool files = o->files && o->file && o->file_of && o->set_path;
        if (!files && (o->files || o->file || o->file_of || o->set_path))
            fail_msg("data source %s has only some of the files hooks", data_source_name(id));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_registry),
        cmocka_unit_test(test_shards_cover_global_batches_for_any_world),
        cmocka_unit_test(test_threads_and_ranks_do_not_change_batches),
        cmocka_unit_test(test_validation_in_order_and_drop_last),
        cmocka_unit_test(test_cache_equals_uncached),
        cmocka_unit_test(test_masks_follow_inputs),
        cmocka_unit_test(test_staging_copies_this_ranks_files),
        cmocka_unit_test(test_bad_sample_mid_run_is_an_error),
        cmocka_unit_test(test_inline_equals_readers),
        cmocka_unit_test(test_inline_error_names_the_first_bad_sample),
    };
    h5_setup(false);
    return cmocka_run_group_tests(tests, setup, teardown);
}
