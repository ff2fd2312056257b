// test_timeseries.c: data.source: timeseries and the weather2d kind. Pairs (x at t, x at t + lead)
// across yearly files, channel subsets and crops read exactly; .npy statistics (format 1.0 and
// 2.0, float32 and float64, the tutorial's [1, C, 1, 1] and per-channel-read lengths) and HDF5
// ones; bad input named (lead beyond a file's series, channel out of range, stats of the wrong
// length, files that disagree, no files, no dataset); the loader's cache and staging serve what
// a plain read does; weather2d in memory equals its yearly files read back, is deterministic,
// and its target is a later state, not the input.
#include "testlib.h"

#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/h5_internal.h"
#include "data/source.h"
#include "data/ts_internal.h"
#include "galley/check.h"
#include "galley/h5data.h"
#include "galley/loader.h"

enum { C = 3, H = 4, W = 6 };

static char dir[64];

static int setup(void **st) {
    (void)st;
    return tl_tmpdir_make(dir, "ts");
}

static int teardown(void **st) {
    (void)st;
    return tl_tmpdir_remove(dir);
}

static char *path_in(const char *name) {
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

// The value the test files hold at (file, t, c, y, x): each place distinct, exact in float32.
static float value_at(int file, int64_t t, int64_t c, int64_t y, int64_t x) {
    return (float)(file * 1000 + t * 100) + (float)(c * 16 + y * 4) * 0.5f + (float)x * 0.0625f;
}

// dir/name with dataset ds [t, c, h, w] of value_at(file, ...), but NaN at flat index nan_at and
// 3e38 at big_at (-1: none).
static void write_series_nan(const char *name, const char *ds, int file, int64_t t, int64_t c, int64_t h, int64_t w,
                             int64_t nan_at, int64_t big_at) {
    float *v = gl_xmalloc((size_t)(t * c * h * w) * sizeof(float));
    for (int64_t a = 0; a < t; a++)
        for (int64_t b = 0; b < c; b++)
            for (int64_t y = 0; y < h; y++)
                for (int64_t x = 0; x < w; x++) v[((a * c + b) * h + y) * w + x] = value_at(file, a, b, y, x);
    if (nan_at >= 0) v[nan_at] = NAN;
    if (big_at >= 0) v[big_at] = 3e38f;
    char sub[256];
    snprintf(sub, sizeof sub, "%s", path_in(name));
    char *slash = strrchr(sub, '/');
    *slash = '\0';
    mkdir(sub, 0755);  // the file's folder, under dir
    hid_t f = (hid_t)h5_create_file(path_in(name));
    assert_true(f >= 0);
    uint64_t dims[4] = {(uint64_t)t, (uint64_t)c, (uint64_t)h, (uint64_t)w};
    assert_int_equal(h5_write_array(f, ds, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dims, v, 1, 0), 0);
    H5Fclose(f);
    free(v);
}

static void write_series(const char *name, const char *ds, int file, int64_t t, int64_t c, int64_t h, int64_t w) {
    write_series_nan(name, ds, file, t, c, h, w, -1, -1);
}

// A timeseries recipe over train (and val) with more data.timeseries keys (flow-mapping items).
static void ts_recipe(recipe_t *r, const char *train, const char *keys) {
    char yaml[8192];
    snprintf(yaml, sizeof yaml,
             "seed: 5\ndata:\n  source: timeseries\n  timeseries: {train: '%s', val: '%s'%s%s}\n"
             "model:\n  layers:\n    - {type: relu}\ntrain: {loss: mse, batch_size: 4}\noptimizer: {lr: 0.1}\n",
             train, train, keys[0] ? ", " : "", keys);
    tl_recipe(r, yaml, 0, NULL);
}

static tssrc *open_ok(const recipe_t *r) {
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    tssrc *src = NULL;
    int rc = tssrc_open(&src, r, SPLIT_TRAIN, err);
    char *msg = tl_stream_close(&s);
    if (rc) fail_msg("tssrc_open failed: %s", msg);
    free(msg);
    return src;
}

// Opening train must fail with exit 2 and a message holding each of want[] (NULL-terminated).
static void open_fails(const char *train, const char *keys, const char *const *want) {
    recipe_t r;
    ts_recipe(&r, train, keys);
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    tssrc *src = NULL;
    int rc = tssrc_open(&src, &r, SPLIT_TRAIN, err);
    char *msg = tl_stream_close(&s);
    if (rc != GL_EXIT_USAGE) fail_msg("expected exit 2 for %s {%s}, got %d (%s)", train, keys, rc, msg);
    for (int i = 0; want[i]; i++)
        if (!strstr(msg, want[i])) fail_msg("message lacks '%s':\n%s", want[i], msg);
    free(msg);
    recipe_free(&r);
}

// ---- pairs -----------------------------------------------------------------------------------

// Two files (T = 5 and 4) with lead 2: 3 + 2 samples in file order, x = fields[t] and
// y = fields[t + 2] of the same file; with channels [2, 0] and size [3, 5], those channels in
// that order and rows 0..2, columns 0..4.
static void test_pairs_across_files_lead_channels_crop(void **state) {
    (void)state;
    write_series("p/1979.h5", "fields", 0, 5, C, H, W);
    write_series("p/1980.h5", "fields", 1, 4, C, H, W);
    static const struct {
        const char *keys;
        int64_t ch[C], nch, h, w;
    } cases[] = {
        {"lead: 2", {0, 1, 2}, 3, H, W},
        {"lead: 2, channels: [2, 0], size: [3, 5]", {2, 0}, 2, 3, 5},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        recipe_t r;
        ts_recipe(&r, path_in("p"), cases[k].keys);
        tssrc *s = open_ok(&r);
        gl_dataset d;
        tssrc_describe(s, &d);
        assert_int_equal(d.n, 5);
        assert_int_equal(d.target, TARGET_VALUES);
        assert_int_equal(d.shape.ndim, 3);
        assert_int_equal(d.shape.d[0], cases[k].nch);
        assert_int_equal(d.shape.d[1], cases[k].h);
        assert_int_equal(d.shape.d[2], cases[k].w);
        assert_true(shape_equal(&d.shape, &d.tshape));
        tscursor *c = tscursor_new(s);
        float *x = gl_xmalloc((size_t)d.size * sizeof(float)), *y = gl_xmalloc((size_t)d.size * sizeof(float));
        char msg[512];
        for (int64_t i = 0; i < d.n; i++) {
            int file = i < 3 ? 0 : 1;
            int64_t t = i < 3 ? i : i - 3, local;
            assert_int_equal(tssrc_file_of(s, i, &local), file);
            assert_int_equal(local, t);
            if (tssrc_read(s, c, i, x, y, msg, sizeof msg)) fail_msg("%s", msg);
            for (int64_t q = 0; q < cases[k].nch; q++)
                for (int64_t yy = 0; yy < cases[k].h; yy++)
                    for (int64_t xx = 0; xx < cases[k].w; xx++) {
                        int64_t at = (q * cases[k].h + yy) * cases[k].w + xx;
                        assert_float_equal(x[at], value_at(file, t, cases[k].ch[q], yy, xx), 0);
                        assert_float_equal(y[at], value_at(file, t + 2, cases[k].ch[q], yy, xx), 0);
                    }
        }
        free(x), free(y);
        tscursor_free(c);
        tssrc_free(s);
        recipe_free(&r);
    }
}

// A glob and a comma list name the same files as the directory, in the same order.
static void test_globs_and_lists(void **state) {
    (void)state;
    write_series("g/a.h5", "fields", 0, 3, C, H, W);
    write_series("g/b.h5", "fields", 1, 4, C, H, W);
    char spec[3][600];
    snprintf(spec[0], sizeof spec[0], "%s", path_in("g"));
    snprintf(spec[1], sizeof spec[1], "%s/*.h5", path_in("g"));
    snprintf(spec[2], sizeof spec[2], "%s/a.h5, %s/b.h5", path_in("g"), path_in("g"));
    for (int k = 0; k < 3; k++) {
        recipe_t r;
        ts_recipe(&r, spec[k], "");
        tssrc *s = open_ok(&r);
        gl_dataset d;
        tssrc_describe(s, &d);
        assert_int_equal(d.n, 2 + 3);
        assert_int_equal(tssrc_files(s), 2);
        assert_non_null(strstr(tssrc_file(s, 1), "b.h5"));
        tssrc_free(s);
        recipe_free(&r);
    }
}

// ---- .npy ------------------------------------------------------------------------------------

// A .npy file written byte by byte: format major (1 or 2), descr, shape text, values as doubles
// stored as float64 (8) or float32 (4).
static void write_npy(const char *path, int major, const char *descr, const char *shape, const double *v, int n,
                      int es) {
    char h[256];
    int hl = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    int pre = major == 1 ? 10 : 12;
    while ((pre + hl + 1) % 64) h[hl++] = ' ';
    h[hl++] = '\n';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY", 1, 6, f);
    unsigned char ver[2] = {(unsigned char)major, 0};
    fwrite(ver, 1, 2, f);
    unsigned char len[4] = {(unsigned char)hl, (unsigned char)(hl >> 8), 0, 0};
    fwrite(len, 1, major == 1 ? 2 : 4, f);
    fwrite(h, 1, (size_t)hl, f);
    for (int i = 0; i < n; i++) {
        unsigned char b[8];
        uint64_t u = 0;
        if (es == 8) memcpy(&u, &v[i], 8);
        else {
            float x = (float)v[i];
            uint32_t u32;
            memcpy(&u32, &x, 4);
            u = u32;
        }
        for (int k = 0; k < es; k++) b[k] = (unsigned char)(u >> (8 * k));
        fwrite(b, 1, (size_t)es, f);
    }
    fclose(f);
}

static void test_npy_versions_and_dtypes(void **state) {
    (void)state;
    const double v[4] = {1.5, -2.25, 3e-3, 1e10};
    npy_array a;
    char msg[512];
    write_npy(path_in("v1.npy"), 1, "<f8", "(1, 4, 1, 1)", v, 4, 8);
    assert_int_equal(npy_read(path_in("v1.npy"), &a, msg, sizeof msg), 0);
    assert_int_equal(a.ndim, 4);
    assert_int_equal(a.shape[1], 4);
    assert_int_equal(a.n, 4);
    for (int i = 0; i < 4; i++) assert_float_equal(a.v[i], v[i], 0);
    free(a.v);
    write_npy(path_in("v2.npy"), 2, "<f4", "(4,)", v, 4, 4);
    assert_int_equal(npy_read(path_in("v2.npy"), &a, msg, sizeof msg), 0);
    assert_int_equal(a.ndim, 1);
    for (int i = 0; i < 4; i++) assert_float_equal(a.v[i], (double)(float)v[i], 0);
    free(a.v);
    float w[3] = {0.5f, 7.0f, -1.0f};
    int64_t shape[4] = {1, 3, 1, 1};
    assert_int_equal(npy_write_f32(path_in("w.npy"), w, 4, shape), 0);
    assert_int_equal(npy_read(path_in("w.npy"), &a, msg, sizeof msg), 0);
    assert_int_equal(a.ndim, 4);
    for (int i = 0; i < 3; i++) assert_float_equal(a.v[i], w[i], 0);
    npy_shape_words(&a, msg, sizeof msg);
    assert_string_equal(msg, "[1, 3, 1, 1]");
    free(a.v);
    struct stat st;  // numpy's alignment: the data starts at a multiple of 64
    assert_int_equal(stat(path_in("w.npy"), &st), 0);
    assert_int_equal(st.st_size, 128 + 12);
}

// A write that fails (here: past RLIMIT_FSIZE, in a child) leaves no half-written .npy at the
// path and no temporary beside it; it left the first 200 bytes, which read back as truncated.
static void test_npy_write_fails_whole(void **state) {
    (void)state;
    const char *path = path_in("cut.npy");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {200, 200};
        setrlimit(RLIMIT_FSIZE, &lim);
        float v[1000] = {0};
        int64_t shape[1] = {1000};
        char tmp[300];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        int ok = npy_write_f32(path, v, 1, shape) == -1 && access(path, F_OK) != 0 && access(tmp, F_OK) != 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_npy_refused(void **state) {
    (void)state;
    const double v[2] = {1, 2};
    npy_array a;
    char msg[512];
    write_npy(path_in("be.npy"), 1, ">f4", "(2,)", v, 2, 4);
    assert_int_equal(npy_read(path_in("be.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "dtype '>f4'"));
    write_npy(path_in("i8.npy"), 1, "<i8", "(2,)", v, 2, 8);
    assert_int_equal(npy_read(path_in("i8.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "little-endian float32"));
    write_npy(path_in("short.npy"), 1, "<f8", "(3,)", v, 2, 8);
    assert_int_equal(npy_read(path_in("short.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "truncated"));
    FILE *f = fopen(path_in("not.npy"), "wb");
    fputs("hello world, no magic here", f);
    fclose(f);
    assert_int_equal(npy_read(path_in("not.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "not a NumPy .npy file"));
    assert_null(a.v);
    // Shapes whose element count overflows int64: refused as too large, not wrapped (5 x
    // 7378697629483820647 wraps to 3, which passed as 3 values; 2 x INT64_MAX wrapped to -2 and
    // reached malloc), and UB-free under UBSan.
    const double three[3] = {1, 2, 3};
    write_npy(path_in("wrap3.npy"), 1, "<f4", "(7378697629483820647, 5)", three, 3, 4);
    assert_int_equal(npy_read(path_in("wrap3.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "too large"));
    write_npy(path_in("wrapneg.npy"), 1, "<f4", "(9223372036854775807, 2)", v, 2, 4);
    assert_int_equal(npy_read(path_in("wrapneg.npy"), &a, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "too large"));
    write_npy(path_in("zero.npy"), 1, "<f4", "(9223372036854775807, 0)", v, 0, 4);  // no elements at all
    assert_int_equal(npy_read(path_in("zero.npy"), &a, msg, sizeof msg), 0);
    assert_int_equal(a.n, 0);
    free(a.v);
}

// ---- statistics ------------------------------------------------------------------------------

// Stats of the full channel count are picked by index (also when every channel is read in
// another order); stats as long as the channels read are taken in order; HDF5 datasets work the
// same; both are applied to input and target.
static void test_stats_npy_and_hdf5(void **state) {
    (void)state;
    write_series("s/1979.h5", "fields", 0, 3, C, H, W);
    const double mean3[3] = {10, 20, 30}, std3[3] = {2, 4, 8}, mean2[2] = {-1, -3}, std2[2] = {0.5, 0.25};
    write_npy(path_in("m3.npy"), 1, "<f4", "(1, 3, 1, 1)", mean3, 3, 4);
    write_npy(path_in("s3.npy"), 2, "<f8", "(1, 3, 1, 1)", std3, 3, 8);
    write_npy(path_in("m2.npy"), 1, "<f8", "(2,)", mean2, 2, 8);
    write_npy(path_in("s2.npy"), 1, "<f8", "(2,)", std2, 2, 8);
    hid_t f = (hid_t)h5_create_file(path_in("stats.h5"));
    uint64_t d3[1] = {3};
    h5_write_array(f, "mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, d3, mean3, 0, 0);
    h5_write_array(f, "std", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, d3, std3, 0, 0);
    H5Fclose(f);
    char keys[4][1024];
    snprintf(keys[0], sizeof keys[0], "channels: [2, 1], mean: %s, std: %s", path_in("m3.npy"), path_in("s3.npy"));
    snprintf(keys[1], sizeof keys[1], "channels: [2, 1], mean: %s, std: %s", path_in("m2.npy"), path_in("s2.npy"));
    snprintf(keys[2], sizeof keys[2], "channels: [2, 1], mean: '%s:mean', std: '%s:std'", path_in("stats.h5"),
             path_in("stats.h5"));
    // Every channel, in another order: the file's stats are still indexed by channel (they were
    // taken in read order, channel 2 normalised with channel 0's mean).
    snprintf(keys[3], sizeof keys[3], "channels: [2, 1, 0], mean: %s, std: %s", path_in("m3.npy"), path_in("s3.npy"));
    const double want_m[4][2] = {{30, 20}, {-1, -3}, {30, 20}, {30, 20}};
    const double want_s[4][2] = {{8, 4}, {0.5, 0.25}, {8, 4}, {8, 4}};
    for (int k = 0; k < 4; k++) {
        recipe_t r;
        ts_recipe(&r, path_in("s"), keys[k]);
        tssrc *s = open_ok(&r);
        tscursor *c = tscursor_new(s);
        float x[C * H * W], y[C * H * W];
        char msg[512];
        if (tssrc_read(s, c, 1, x, y, msg, sizeof msg)) fail_msg("%s", msg);
        for (int q = 0; q < 2; q++) {
            double sh, sc;
            tssrc_norm(s, q, &sh, &sc);
            assert_float_equal(sh, want_m[k][q], 1e-6);
            assert_float_equal(sc, 1.0 / want_s[k][q], 1e-6);
            int64_t ch = q == 0 ? 2 : 1;
            float wx = (value_at(0, 1, ch, 1, 2) - (float)want_m[k][q]) * (float)(1.0 / want_s[k][q]);
            float wy = (value_at(0, 2, ch, 1, 2) - (float)want_m[k][q]) * (float)(1.0 / want_s[k][q]);
            assert_float_equal(x[(q * H + 1) * W + 2], wx, 1e-4);
            assert_float_equal(y[(q * H + 1) * W + 2], wy, 1e-4);
        }
        tscursor_free(c);
        tssrc_free(s);
        recipe_free(&r);
    }
}

// Channels [1, 2, 0] (a run of two read as one hyperslab, then one) cropped to [3, 5], each
// normalised with its file channel's stats: every element the scalar expression (v - mean) * (1 /
// std) in float, bit for bit, on input and target (15 elements a channel: the vector paths' tail).
static void test_channel_runs_normalised_exactly(void **state) {
    (void)state;
    write_series("r/1979.h5", "fields", 0, 4, C, H, W);
    const double mean[3] = {3.5, -20, 100}, sd[3] = {0.75, 3, 1.0 / 3};
    write_npy(path_in("rm.npy"), 1, "<f8", "(1, 3, 1, 1)", mean, 3, 8);
    write_npy(path_in("rs.npy"), 1, "<f8", "(1, 3, 1, 1)", sd, 3, 8);
    char keys[1024];
    snprintf(keys, sizeof keys, "lead: 1, channels: [1, 2, 0], size: [3, 5], mean: %s, std: %s", path_in("rm.npy"),
             path_in("rs.npy"));
    recipe_t r;
    ts_recipe(&r, path_in("r"), keys);
    tssrc *s = open_ok(&r);
    tscursor *c = tscursor_new(s);
    enum { N = 3 * 3 * 5 };
    float x[N], y[N];
    char msg[512];
    const int64_t ch[3] = {1, 2, 0};
    for (int64_t i = 0; i < 3; i++) {
        if (tssrc_read(s, c, i, x, y, msg, sizeof msg)) fail_msg("%s", msg);
        for (int q = 0; q < 3; q++) {
            double sh, sc;
            tssrc_norm(s, q, &sh, &sc);
            assert_float_equal(sh, mean[ch[q]], 1e-6);
            for (int64_t v = 0; v < 15; v++) {
                float wx = (value_at(0, i, ch[q], v / 5, v % 5) - (float)sh) * (float)sc;
                float wy = (value_at(0, i + 1, ch[q], v / 5, v % 5) - (float)sh) * (float)sc;
                assert_memory_equal(&x[q * 15 + v], &wx, sizeof wx);
                assert_memory_equal(&y[q * 15 + v], &wy, sizeof wy);
            }
        }
    }
    tscursor_free(c);
    tssrc_free(s);
    recipe_free(&r);
}

// A NaN in the file: the sample whose input or target step holds it fails, naming the file, the
// step, input or target, the file's channel and the element within the channels read; normalised
// (the check runs in place on the step as read) and not; the samples around it read.
static void test_nonfinite_named(void **state) {
    (void)state;
    // NaN at t = 2, channel 2, row 1, column 3 of [5, 3, 4, 6]
    write_series_nan("nf/1979.h5", "fields", 0, 5, C, H, W, ((2 * C + 2) * H + 1) * W + 3, -1);
    const double mean[3] = {1, 2, 3}, sd[3] = {1, 2, 4};
    write_npy(path_in("nm.npy"), 1, "<f8", "(1, 3, 1, 1)", mean, 3, 8);
    write_npy(path_in("ns.npy"), 1, "<f8", "(1, 3, 1, 1)", sd, 3, 8);
    char keys[2][1024];
    snprintf(keys[0], sizeof keys[0], "lead: 1, channels: [0, 2]");
    snprintf(keys[1], sizeof keys[1], "lead: 1, channels: [0, 2], mean: %s, std: %s", path_in("nm.npy"),
             path_in("ns.npy"));
    for (int k = 0; k < 2; k++) {
        recipe_t r;
        ts_recipe(&r, path_in("nf"), keys[k]);
        tssrc *s = open_ok(&r);
        tscursor *c = tscursor_new(s);
        float x[2 * H * W], y[2 * H * W];
        char msg[512];
        // samples 0..3: sample 1's target and sample 2's input are step 2
        for (int64_t i = 0; i < 4; i++) {
            int rc = tssrc_read(s, c, i, x, y, msg, sizeof msg);
            if (i != 1 && i != 2) {
                if (rc) fail_msg("sample %lld: %s", (long long)i, msg);
                assert_false(tscursor_nonfinite(c));
                continue;
            }
            assert_int_equal(rc, -1);
            assert_true(tscursor_nonfinite(c));
            char want[256];
            snprintf(want, sizeof want,
                     "'fields' time step 2 (sample %lld's %s) holds NaN or Inf at channel 2, element 9", (long long)i,
                     i == 1 ? "target" : "input");
            if (!strstr(msg, want) || !strstr(msg, "1979.h5")) fail_msg("message lacks '%s':\n%s", want, msg);
        }
        tscursor_free(c);
        tssrc_free(s);
        recipe_free(&r);
    }
}

// A finite value that normalising overflows to Inf (3e38 / 0.1) before the stored NaN: the NaN
// is named (channel 2, element 0), on every instruction set (the in-place vector pass would name
// the overflowed element, channel 0, element 5, were the step not searched again as stored).
static void test_nonfinite_after_overflow(void **state) {
    (void)state;
    write_series_nan("ov/1979.h5", "fields", 0, 3, C, H, W, (1 * C + 2) * H * W, (1 * C + 0) * H * W + 5);
    const double mean[3] = {0, 0, 0}, sd[3] = {0.1, 0.1, 0.1};
    write_npy(path_in("om.npy"), 1, "<f8", "(3,)", mean, 3, 8);
    write_npy(path_in("os.npy"), 1, "<f8", "(3,)", sd, 3, 8);
    char keys[1024];
    snprintf(keys, sizeof keys, "lead: 1, mean: %s, std: %s", path_in("om.npy"), path_in("os.npy"));
    recipe_t r;
    ts_recipe(&r, path_in("ov"), keys);
    tssrc *s = open_ok(&r);
    tscursor *c = tscursor_new(s);
    float x[C * H * W], y[C * H * W];
    char msg[512];
    assert_int_equal(tssrc_read(s, c, 1, x, y, msg, sizeof msg), -1);  // step 1 is sample 1's input
    if (!strstr(msg, "holds NaN or Inf at channel 2, element 0")) fail_msg("wrong element named:\n%s", msg);
    tscursor_free(c);
    tssrc_free(s);
    recipe_free(&r);
}

// Stats whose length is neither the channels read nor the file's: exit 2 naming the key, the
// .npy file, its shape and the expected C; a non-positive std too.
static void test_stats_wrong_length(void **state) {
    (void)state;
    write_series("w/1979.h5", "fields", 0, 3, C, H, W);
    const double v4[4] = {1, 2, 3, 4}, z[3] = {1, 0, 1};
    write_npy(path_in("m4.npy"), 1, "<f4", "(1, 4, 1, 1)", v4, 4, 4);
    write_npy(path_in("z.npy"), 1, "<f4", "(3,)", z, 3, 4);
    char keys[1024];
    snprintf(keys, sizeof keys, "channels: [0, 1], mean: %s, std: %s", path_in("m4.npy"), path_in("m4.npy"));
    const char *const want[] = {"error: data.timeseries.mean:", "m4.npy holds shape [1, 4, 1, 1] (4 values)",
                                "expected C = 2 values (one per channel read) or 3 (one per channel of 'fields')",
                                NULL};
    open_fails(path_in("w"), keys, want);
    snprintf(keys, sizeof keys, "mean: %s, std: %s", path_in("z.npy"), path_in("z.npy"));
    const char *const want_z[] = {"error: data.timeseries.std:", "channel 1 has std 0; it must be finite and positive",
                                  NULL};
    open_fails(path_in("w"), keys, want_z);
    snprintf(keys, sizeof keys, "mean: %s, std: %s", path_in("nothere.npy"), path_in("z.npy"));
    const char *const want_m[] = {"error: data.timeseries.mean:", "nothere.npy: cannot open", NULL};
    open_fails(path_in("w"), keys, want_m);
    // An HDF5 statistic of 5 x 7378697629483820647 (sparse, chunked): its element count wrapped to
    // 3 = C, so it passed and H5Dread filled a 3-value buffer from the whole dataset.
    hid_t f = (hid_t)h5_create_file(path_in("wrap.h5"));
    hsize_t dims[2] = {7378697629483820647ull, 5}, chunk[2] = {1, 5};
    hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 2, chunk);
    hid_t d = H5Dcreate2(f, "m", H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d), H5Pclose(pl), H5Sclose(sp), H5Fclose(f);
    snprintf(keys, sizeof keys, "mean: '%s:m', std: %s", path_in("wrap.h5"), path_in("z.npy"));
    const char *const want_w[] = {"error: data.timeseries.mean:", "dataset 'm' is too large for statistics", NULL};
    open_fails(path_in("w"), keys, want_w);
}

// ---- bad input -------------------------------------------------------------------------------

static void test_bad_input_named(void **state) {
    (void)state;
    write_series("e/1979.h5", "fields", 0, 6, C, H, W);
    write_series("e/1980.h5", "fields", 1, 3, C, H, W);
    write_series("c/1979.h5", "fields", 0, 4, C, H, W);
    write_series("c/1980.h5", "fields", 1, 4, C + 1, H, W);
    write_series("n/1979.h5", "other", 0, 4, C, H, W);
    mkdir(path_in("empty"), 0755);
    const char *const lead[] = {"error: data.timeseries.lead: 3 is beyond the series of", "e/1980.h5",
                                "holds 3 time steps, and a sample needs lead + 1 = 4", NULL};
    open_fails(path_in("e"), "lead: 3", lead);
    const char *const chan[] = {"error: data.timeseries.channels: channel 3 is out of range", "1979.h5",
                                "has 3 channels (indices 0 to 2)", NULL};
    open_fails(path_in("e"), "channels: [0, 3]", chan);
    const char *const crop[] = {"error: data.timeseries.size: [5, 6] does not fit the grid", "[4, 6]", NULL};
    open_fails(path_in("e"), "size: [5, 6]", crop);
    const char *const differ[] = {"c/1980.h5: dataset 'fields' is [4, 4, 4, 6], but", "c/1979.h5's is [4, 3, 4, 6]",
                                  NULL};
    open_fails(path_in("c"), "", differ);
    const char *const none[] = {"error: data.timeseries.train: directory", "holds no .h5 files", NULL};
    open_fails(path_in("empty"), "", none);
    char pat[300];
    snprintf(pat, sizeof pat, "%s/*.hdf5", path_in("e"));
    const char *const nomatch[] = {"error: data.timeseries.train: no file matches", "*.hdf5", NULL};
    open_fails(pat, "", nomatch);
    const char *const nods[] = {"n/1979.h5: no dataset 'fields' (data.timeseries.dataset) in this file",
                                "its top level holds: other", NULL};
    open_fails(path_in("n"), "", nods);
}

// Recipe-level checks: whole-number channel indices, [H, W], mean with std.
static void test_recipe_checks(void **state) {
    (void)state;
    static const struct {
        const char *keys, *want;
    } cases[] = {
        {"channels: [0, 1.5]", "data.timeseries.channels: 1.5 is no channel index"},
        {"channels: [-1]", "data.timeseries.channels"},
        {"size: [4]", "data.timeseries.size: expected [H, W]"},
        {"mean: m.npy", "give data.timeseries.mean and data.timeseries.std together"},
        {"lead: 0", "data.timeseries.lead"},
        {"leed: 2", "unknown key 'leed'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char yaml[1024], *errors = NULL;
        snprintf(yaml, sizeof yaml, "data:\n  source: timeseries\n  timeseries: {train: a, val: b, %s}\n"
                 "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\n", cases[k].keys);
        recipe_t r;
        int rc = tl_recipe_try(&r, yaml, 0, NULL, &errors, NULL);
        if (rc == 0 || !strstr(errors, cases[k].want)) fail_msg("%s: rc %d, errors:\n%s", cases[k].keys, rc, errors);
        assert_non_null(strstr(errors, ":3:"));  // the line of the timeseries mapping
        free(errors);
        recipe_free(&r);
    }
}

// ---- the loader ------------------------------------------------------------------------------

// Every batch of two epochs, as values: x then targets, with the samples served.
static void batches(const recipe_t *r, int world, int rank, float *out, int64_t *samples, int64_t per) {
    loader_params p;
    loader_default_params(&p);
    p.world = world, p.rank = rank, p.epochs = 2;
    gl_loader *L;
    assert_int_equal(loader_open(&L, r, &p, stderr), 0);
    int64_t k = 0, bpe = loader_batches_per_epoch(L);
    for (int64_t b = 0; b < 2 * bpe; b++) {
        gl_batch g;
        assert_int_equal(loader_next(L, &g, stderr), 0);
        for (int64_t i = 0; i < g.n; i++, k++) {
            memcpy(out + k * 2 * per, g.x + i * per, (size_t)per * sizeof(float));
            memcpy(out + (k * 2 + 1) * per, g.values + i * per, (size_t)per * sizeof(float));
            samples[k] = g.samples[i];
        }
        loader_release(L, &g);
    }
    loader_free(L);
}

// Cache and staging serve the bytes a plain read does; two ranks together serve one rank's.
static void test_loader_cache_stage_shards(void **state) {
    (void)state;
    write_series("l/1979.h5", "fields", 0, 6, C, H, W);
    write_series("l/1980.h5", "fields", 1, 5, C, H, W);
    mkdir(path_in("stage"), 0755);
    char extra[2][512];
    snprintf(extra[0], sizeof extra[0], "cache: memory, threads: 3");
    snprintf(extra[1], sizeof extra[1], "stage: %s", path_in("stage"));
    const int64_t per = 2 * 3 * 5, n = 5 + 4;
    float *want = gl_xmalloc((size_t)(4 * n * per) * sizeof(float)), *got = gl_xmalloc((size_t)(4 * n * per) * sizeof(float));
    int64_t ws[64], gs[64];
    for (int k = -1; k < 3; k++) {
        char yaml[2048];
        snprintf(yaml, sizeof yaml, "seed: 9\ndata:\n  source: timeseries\n  timeseries: {train: %s, val: %s, "
                 "channels: [1, 2], size: [3, 5]}\n  loader: {%s}\nmodel:\n  layers:\n    - {type: relu}\n"
                 "train: {loss: mse, batch_size: 4}\noptimizer: {lr: 0.1}\n", path_in("l"), path_in("l"),
                 k >= 0 && k < 2 ? extra[k] : "");
        recipe_t r;
        tl_recipe(&r, yaml, 0, NULL);
        if (k < 0) {
            batches(&r, 1, 0, want, ws, per);
        } else if (k < 2) {
            batches(&r, 1, 0, got, gs, per);
            assert_memory_equal(ws, gs, (size_t)(2 * n) * sizeof(int64_t));
            assert_memory_equal(want, got, (size_t)(4 * n * per) * sizeof(float));
        } else {  // ranks 0 and 1 of 2: every sample of both epochs once, with one rank's bytes
            int64_t total = 0;
            for (int rank = 0; rank < 2; rank++) {
                int64_t rs[64] = {0};
                for (int64_t q = 0; q < 2 * n; q++) rs[q] = -1;
                batches(&r, 2, rank, got, rs, per);
                for (int64_t q = 0; q < 2 * n && rs[q] >= 0; q++) {
                    int64_t j = 0;
                    while (ws[j] != rs[q]) j++;
                    assert_memory_equal(got + q * 2 * per, want + j * 2 * per, (size_t)(2 * per) * sizeof(float));
                    gs[total++] = rs[q];
                }
            }
            assert_int_equal(total, 2 * n);
            int64_t count[16] = {0};
            for (int64_t q = 0; q < 2 * n; q++) count[gs[q]]++;
            for (int64_t q = 0; q < n; q++) assert_int_equal(count[q], 2);  // once per epoch
        }
        recipe_free(&r);
    }
    struct stat st;
    assert_int_equal(stat(path_in("stage"), &st), 0);
    free(want), free(got);
}

// ---- weather2d ---------------------------------------------------------------------------------

static void w2d_recipe(recipe_t *r, int64_t train_size) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "seed: 11\ndata:\n  synthetic: {kind: weather2d, size: 16, channels: 5, steps: 7, "
             "lead: 2, noise: 0.05, train_size: %lld, val_size: 5}\nmodel:\n  layers:\n    - {type: relu}\n"
             "train: {loss: mse}\noptimizer: {lr: 0.1}\n", (long long)train_size);
    tl_recipe(r, yaml, 0, NULL);
}

static gl_dataset w2d_make(const recipe_t *r, int split, gl_arena *a) {
    arena_init(a, data_synth_bytes(r, split) + 4 * GL_ARENA_ALIGN);
    gl_dataset d;
    data_synth_make(r, split, &d, a);
    return d;
}

// Shapes [C, size/2, size]; target of sample i is input of sample i + lead in the same series
// (5 samples per series of 7 steps, lead 2); the target is not the input; deterministic; the
// validation split differs; fewer samples are a prefix of more.
static void test_weather2d_pairs(void **state) {
    (void)state;
    recipe_t r, r2;
    w2d_recipe(&r, 10);
    w2d_recipe(&r2, 3);
    gl_arena a, b, v, c;
    gl_dataset d = w2d_make(&r, SPLIT_TRAIN, &a), e = w2d_make(&r, SPLIT_TRAIN, &b);
    gl_dataset dv = w2d_make(&r, SPLIT_VAL, &v), d3 = w2d_make(&r2, SPLIT_TRAIN, &c);
    assert_int_equal(d.shape.d[0], 5);
    assert_int_equal(d.shape.d[1], 8);
    assert_int_equal(d.shape.d[2], 16);
    assert_int_equal(d.target, TARGET_VALUES);
    assert_memory_equal(d.x, e.x, (size_t)(d.n * d.size) * sizeof(float));
    assert_memory_equal(d.values, e.values, (size_t)(d.n * d.size) * sizeof(float));
    assert_memory_equal(d.x, d3.x, (size_t)(3 * d.size) * sizeof(float));
    assert_memory_equal(d.values, d3.values, (size_t)(3 * d.size) * sizeof(float));
    assert_true(memcmp(d.x, dv.x, (size_t)(dv.n * d.size) * sizeof(float)) != 0);
    for (int64_t s = 0; s < 2; s++)
        for (int64_t t = 0; t + 2 < 5; t++) {
            int64_t i = s * 5 + t;
            assert_memory_equal(d.values + i * d.size, d.x + (i + 2) * d.size, (size_t)d.size * sizeof(float));
        }
    double diff = 0, var = 0, mean = 0;
    for (int64_t k = 0; k < d.n * d.size; k++) mean += d.x[k] / (double)(d.n * d.size);
    for (int64_t k = 0; k < d.n * d.size; k++) {
        diff += (d.values[k] - d.x[k]) * (double)(d.values[k] - d.x[k]);
        var += (d.x[k] - mean) * (d.x[k] - mean);
        assert_true(isfinite(d.x[k]) && fabsf(d.x[k]) < 10);
    }
    assert_true(diff > 0.01 * var);  // it moves: the target is not the input
    assert_true(diff < 0.5 * var);   // but slowly: the next state is close to this one
    arena_free(&a), arena_free(&b), arena_free(&v), arena_free(&c);
    recipe_free(&r), recipe_free(&r2);
}

// `galley data synth weather2d` files read back by the timeseries source (no normalisation)
// equal the in-memory pairs of the same seed, size, channels, steps and lead; the stats files
// are [1, C, 1, 1] with each channel's mean and std over the training files.
static void test_weather2d_files_equal_memory(void **state) {
    (void)state;
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = SYNTH_WEATHER2D, p.seed = 11, p.size = 16, p.channels = 5, p.steps = 7, p.noise = 0.05;
    p.years = 2, p.val_years = 1;
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    int rc = h5_synth_write_series(&p, path_in("wx"), err);
    char *msg = tl_stream_close(&s);
    if (rc) fail_msg("%s", msg);
    free(msg);
    recipe_t m, r;
    w2d_recipe(&m, 10);
    char keys[1024];
    snprintf(keys, sizeof keys, "lead: 2");
    ts_recipe(&r, path_in("wx/train"), keys);
    tssrc *src = open_ok(&r);
    gl_arena a;
    gl_dataset d = w2d_make(&m, SPLIT_TRAIN, &a), f;
    tssrc_describe(src, &f);
    assert_int_equal(f.n, d.n);
    assert_true(shape_equal(&f.shape, &d.shape));
    tscursor *c = tscursor_new(src);
    float *x = gl_xmalloc((size_t)f.size * sizeof(float)), *y = gl_xmalloc((size_t)f.size * sizeof(float));
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < f.n; i++) {
        char e[512];
        if (tssrc_read(src, c, i, x, y, e, sizeof e)) fail_msg("%s", e);
        assert_memory_equal(x, d.x + i * d.size, (size_t)f.size * sizeof(float));
        assert_memory_equal(y, d.values + i * d.size, (size_t)f.size * sizeof(float));
    }
    npy_array mn, sd;
    char e[512];
    assert_int_equal(npy_read(path_in("wx/stats/global_means.npy"), &mn, e, sizeof e), 0);
    assert_int_equal(npy_read(path_in("wx/stats/global_stds.npy"), &sd, e, sizeof e), 0);
    assert_int_equal(mn.ndim, 4);
    assert_int_equal(mn.shape[1], 5);
    assert_int_equal(sd.n, 5);
    // channel 0 over the training files: series 0 steps 0..6 are samples 0..4 and targets 3, 4
    int64_t area = 8 * 16;
    for (int64_t sr = 0; sr < 2; sr++)
        for (int64_t t = 0; t < 7; t++) {
            const float *q = t < 5 ? d.x + (sr * 5 + t) * d.size : d.values + (sr * 5 + t - 2) * d.size;
            for (int64_t v = 0; v < area; v++) sum += q[v], sum2 += (double)q[v] * q[v];
        }
    double cnt = 2.0 * 7 * area, mu = sum / cnt;
    assert_float_equal(mn.v[0], mu, 1e-5);
    assert_float_equal(sd.v[0], sqrt(sum2 / cnt - mu * mu), 1e-4);
    free(mn.v), free(sd.v), free(x), free(y);
    tscursor_free(c);
    tssrc_free(src);
    arena_free(&a);
    recipe_free(&m), recipe_free(&r);
}

// lead must be below steps, named at its line.
static void test_weather2d_lead_checked(void **state) {
    (void)state;
    char *errors = NULL;
    recipe_t r;
    int rc = tl_recipe_try(&r, "data:\n  synthetic: {kind: weather2d, steps: 4,\n    lead: 4}\nmodel:\n  layers:\n"
                           "    - {type: relu}\noptimizer: {lr: 0.1}\n", 0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    if (!strstr(errors, ":3:11: error: data.synthetic.lead: 4 is beyond a series of data.synthetic.steps = 4"))
        fail_msg("%s", errors);
    free(errors);
    recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_across_files_lead_channels_crop),
        cmocka_unit_test(test_globs_and_lists),
        cmocka_unit_test(test_npy_versions_and_dtypes),
        cmocka_unit_test(test_npy_write_fails_whole),
        cmocka_unit_test(test_npy_refused),
        cmocka_unit_test(test_stats_npy_and_hdf5),
        cmocka_unit_test(test_channel_runs_normalised_exactly),
        cmocka_unit_test(test_nonfinite_named),
        cmocka_unit_test(test_nonfinite_after_overflow),
        cmocka_unit_test(test_stats_wrong_length),
        cmocka_unit_test(test_bad_input_named),
        cmocka_unit_test(test_recipe_checks),
        cmocka_unit_test(test_loader_cache_stage_shards),
        cmocka_unit_test(test_weather2d_pairs),
        cmocka_unit_test(test_weather2d_files_equal_memory),
        cmocka_unit_test(test_weather2d_lead_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
