// test_data_tools.c: `galley data inspect`'s streamed statistics equal a direct computation for
// any block size (blocks cut chunks and axes); data.nonfinite: error names the file, dataset and
// sample, skip serves the next valid sample of the local batch in the bad one's place (full
// batches, the bad sample never served, the same for any thread count, counted); the key is
// refused for synthetic data; loader_bench's three modes serve what they say.
#include "testlib.h"

#include <hdf5.h>

#include "galley/check.h"
#include "galley/h5data.h"
#include "galley/loader.h"

static char dir[64];

static int setup(void **st) {
    (void)st;
    return tl_tmpdir_make(dir, "dt");
}

static int teardown(void **st) {
    (void)st;
    return tl_tmpdir_remove(dir);
}

// ---- inspect statistics ------------------------------------------------------------------------

static void test_stats_streamed_in_any_block_size(void **st) {
    (void)st;
    enum { A = 5, B = 3, C = 7, D = 4, N = A * B * C * D };
    static int16_t v[N];
    double mn = 1e30, mx = -1e30, sum = 0;
    for (int i = 0; i < N; i++) {
        v[i] = (int16_t)((i * 7919) % 1001 - 500);
        mn = v[i] < mn ? v[i] : mn, mx = v[i] > mx ? v[i] : mx, sum += v[i];
    }
    char path[128];
    snprintf(path, sizeof path, "%s/stats.h5", dir);
    hid_t f = (hid_t)h5_create_file(path);
    uint64_t dims[4] = {A, B, C, D};
    assert_int_equal(h5_write_array(f, "g/v", H5T_STD_I16LE, H5T_NATIVE_INT16, 4, dims, v, 2, 3), 0);
    float fv[6] = {1, NAN, -2, INFINITY, 4, 0.5f};
    uint64_t fd[1] = {6};
    assert_int_equal(h5_write_array(f, "w", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, fd, fv, 0, 0), 0);
    H5Fclose(f);
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    size_t budgets[] = {0, 1, 2, 3, 5, 6, 7, 20, 27, 28, 29, 84, 85, 100, 420, 421, 100000};
    for (size_t k = 0; k < sizeof budgets / sizeof *budgets; k++) {
        h5_stats s;
        assert_int_equal(h5_dataset_stats(f, "g/v", budgets[k], &s), 0);
        assert_int_equal(s.count, N);
        assert_int_equal(s.nonfinite, 0);
        assert_true(s.min == mn && s.max == mx);
        assert_true(fabs(s.sum - sum) < 1e-6);
    }
    h5_stats s;
    assert_int_equal(h5_dataset_stats(f, "w", 4, &s), 0);
    assert_int_equal(s.count, 4);
    assert_int_equal(s.nonfinite, 2);
    assert_true(s.min == -2 && s.max == 4 && fabs(s.sum - 3.5) < 1e-12);
    assert_int_equal(h5_dataset_stats(f, "missing", 0, &s), -1);
    H5Fclose(f);

    // The listing: full paths, dtype, chunks, filters, statistics; a non-HDF5 file is exit 2.
    tl_stream o, e;
    FILE *out = tl_stream_open(&o), *err = tl_stream_open(&e);
    assert_int_equal(h5_inspect(path, out, err), GL_EXIT_OK);
    char *text = tl_stream_close(&o), *etext = tl_stream_close(&e);
    assert_non_null(strstr(text, "/g/v\n  shape [5, 3, 7, 4]  dtype int16  chunks [2, 3, 7, 4]  filters shuffle, gzip(3)"));
    assert_non_null(strstr(text, "/w\n  shape [6]  dtype float32  contiguous  filters none"));
    assert_non_null(strstr(text, "non-finite (NaN/Inf) 2"));
    free(text), free(etext);
    out = tl_stream_open(&o), err = tl_stream_open(&e);
    assert_int_equal(h5_inspect("/proc/self/status", out, err), GL_EXIT_USAGE);
    text = tl_stream_close(&o), etext = tl_stream_close(&e);
    assert_non_null(strstr(etext, "not a readable HDF5 file"));
    free(text), free(etext);
}

// ---- data.nonfinite ----------------------------------------------------------------------------

enum { NS = 10, F = 3 };

// NS samples of F features; x[i] = i everywhere except sample bad (NaN) and sample inf (Inf).
static void write_bad(const char *path, int bad, int inf) {
    float x[NS * F];
    int32_t y[NS];
    for (int i = 0; i < NS; i++) {
        for (int k = 0; k < F; k++) x[i * F + k] = (float)i;
        y[i] = i % 2;
    }
    x[bad * F + 1] = NAN;
    if (inf >= 0) x[inf * F + 2] = -INFINITY;
    hid_t f = (hid_t)h5_create_file(path);
    uint64_t xd[2] = {NS, F}, yd[1] = {NS};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
}

static void nrecipe(recipe_t *r, const char *path, const char *nonfinite, int64_t batch) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 9\ndata:\n  source: hdf5\n  train: {files: %s}\n  val: {files: %s}\n%s"
             "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\ntrain: {batch_size: %lld, epochs: 3}\n",
             path, path, nonfinite, (long long)batch);
    tl_recipe(r, yaml, 0, NULL);
}

static gl_loader *nopen(const recipe_t *r, int split, int threads) {
    loader_params p;
    loader_default_params(&p);
    p.split = split, p.threads = threads;
    gl_loader *L;
    if (loader_open(&L, r, &p, stderr)) fail_msg("loader_open failed");
    return L;
}

static void test_nonfinite_error_names_file_dataset_sample(void **st) {
    (void)st;
    char path[128];
    snprintf(path, sizeof path, "%s/nan.h5", dir);
    write_bad(path, 6, -1);
    recipe_t r;
    nrecipe(&r, path, "", 4);  // the default is error
    assert_int_equal(r.data.nonfinite, DATA_NONFINITE_ERROR);
    gl_loader *L = nopen(&r, SPLIT_VAL, 2);
    gl_batch b;
    assert_int_equal(loader_next(L, &b, stderr), 0);  // samples 0-3
    loader_release(L, &b);
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    assert_int_equal(loader_next(L, &b, err), -1);  // samples 4-7
    char *msg = tl_stream_close(&s);
    assert_non_null(strstr(msg, "nan.h5"));
    assert_non_null(strstr(msg, "'x' sample 6"));
    assert_non_null(strstr(msg, "nan"));
    free(msg);
    loader_release(L, &b);
    loader_free(L);
    recipe_free(&r);
}

// Every sample served in nb batches, concatenated with their first feature.
static void serve(gl_loader *L, int64_t nb, int64_t *samples, float *x0, int64_t *n) {
    *n = 0;
    for (int64_t k = 0; k < nb; k++) {
        gl_batch b;
        if (loader_next(L, &b, stderr)) fail_msg("loader_next failed");
        for (int64_t j = 0; j < b.n; j++) samples[*n] = b.samples[j], x0[*n] = b.x[j * F], ++*n;
        loader_release(L, &b);
    }
}

static void test_nonfinite_skip_serves_the_next_valid_sample(void **st) {
    (void)st;
    char path[128];
    snprintf(path, sizeof path, "%s/skip.h5", dir);
    write_bad(path, 6, 7);
    recipe_t r;
    nrecipe(&r, path, "  nonfinite: skip\n", 4);
    // Validation, in order: batches [0-3], [4-7], [8-9]; 6 and 7 are bad, so 6 and 7 take 4's
    // place after wrapping: 6 -> 7 (bad) -> 4, 7 -> 4.
    gl_loader *L = nopen(&r, SPLIT_VAL, 3);
    int64_t samples[64], n;
    float x0[64];
    serve(L, 3, samples, x0, &n);
    assert_int_equal(n, NS);
    int64_t want[NS] = {0, 1, 2, 3, 4, 5, 4, 4, 8, 9};
    for (int i = 0; i < NS; i++) {
        assert_int_equal(samples[i], want[i]);
        assert_true(x0[i] == (float)want[i]);
    }
    char first[1024];
    assert_int_equal(loader_skipped(L, first, sizeof first), 2);
    assert_non_null(strstr(first, "skip.h5"));
    assert_non_null(strstr(first, "'x' sample 6"));
    loader_free(L);

    // Training, shuffled: 3 epochs of full batches, no bad sample served, the same for 1 and 4 threads.
    int64_t s1[64], s4[64], n1, n4;
    float a1[64], a4[64];
    L = nopen(&r, SPLIT_TRAIN, 1);
    int64_t nb = 3 * loader_batches_per_epoch(L);
    serve(L, nb, s1, a1, &n1);
    assert_int_equal(loader_skipped(L, NULL, 0), 6);  // two bad samples, three epochs
    loader_free(L);
    L = nopen(&r, SPLIT_TRAIN, 4);
    serve(L, nb, s4, a4, &n4);
    loader_free(L);
    assert_int_equal(n1, 3 * NS);
    assert_int_equal(n4, n1);
    for (int64_t i = 0; i < n1; i++) {
        assert_true(s1[i] != 6 && s1[i] != 7);
        assert_int_equal(s1[i], s4[i]);
        assert_true(a1[i] == (float)s1[i] && a4[i] == a1[i]);
    }
    recipe_free(&r);

    // A local batch of bad samples only: an error, never a loop.
    write_bad(path, 9, 8);
    nrecipe(&r, path, "  nonfinite: skip\n", 4);
    L = nopen(&r, SPLIT_VAL, 2);
    gl_batch b;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(loader_next(L, &b, stderr), 0);
        loader_release(L, &b);
    }
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    assert_int_equal(loader_next(L, &b, err), -1);  // samples 8, 9
    char *msg = tl_stream_close(&s);
    assert_non_null(strstr(msg, "every sample of a local batch"));
    free(msg);
    loader_release(L, &b);
    loader_free(L);
    recipe_free(&r);
}

static void test_nonfinite_key_only_for_hdf5(void **st) {
    (void)st;
    recipe_t r;
    char *errors = NULL;
    int rc = tl_recipe_try(&r, "data: {source: synthetic, nonfinite: skip}\nmodel: {layers: [{type: relu}]}\n"
                               "optimizer: {lr: 0.1}\n", 0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "nonfinite"));
    free(errors);
    recipe_free(&r);
    errors = NULL;
    rc = tl_recipe_try(&r, "data: {source: hdf5, train: {files: a.h5}, val: {files: a.h5}, nonfinite: drop}\n"
                           "model: {layers: [{type: relu}]}\noptimizer: {lr: 0.1}\n", 0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "skip"));
    free(errors);
    recipe_free(&r);
}

// ---- bench -------------------------------------------------------------------------------------

static void test_bench_modes(void **st) {
    (void)st;
    char path[128];
    snprintf(path, sizeof path, "%s/bench.h5", dir);
    write_bad(path, 6, -1);
    recipe_t r;
    nrecipe(&r, path, "  nonfinite: skip\n  normalize: standard\n  mean: [1]\n  std: [2]\n", 4);
    loader_bench_result res;
    for (int m = LOADER_BENCH_READ; m <= LOADER_BENCH_SERVE; m++) {
        assert_int_equal(loader_bench(&r, m, 5, &res, stderr), GL_EXIT_OK);
        assert_int_equal(res.batches, 5);
        assert_int_equal(res.samples, 4 + 4 + 2 + 4 + 4);
        assert_true(res.sample_bytes == (F + 1) * 4);
        if (m == LOADER_BENCH_SERVE) assert_int_equal(res.skipped, 0);
        else assert_true(res.skipped >= 1);  // epoch 1 serves sample 6's place once; epoch 2 may too
    }
    recipe_free(&r);
    tl_recipe(&r, "data: {synthetic: {kind: blobs, train_size: 50}}\nmodel: {layers: [{type: relu}]}\n"
                  "optimizer: {lr: 0.1}\ntrain: {batch_size: 8}\n", 0, NULL);
    assert_int_equal(loader_bench(&r, LOADER_BENCH_READ, 0, &res, stderr), GL_EXIT_OK);
    assert_int_equal(res.samples, 50);  // generation: the whole split
    assert_int_equal(loader_bench(&r, LOADER_BENCH_FULL, 0, &res, stderr), GL_EXIT_OK);
    assert_int_equal(res.batches, 7);
    assert_int_equal(res.samples, 50);
    recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_streamed_in_any_block_size),
        cmocka_unit_test(test_nonfinite_error_names_file_dataset_sample),
        cmocka_unit_test(test_nonfinite_skip_serves_the_next_valid_sample),
        cmocka_unit_test(test_nonfinite_key_only_for_hdf5),
        cmocka_unit_test(test_bench_modes),
    };
    h5_setup(false);
    return cmocka_run_group_tests(tests, setup, teardown);
}
