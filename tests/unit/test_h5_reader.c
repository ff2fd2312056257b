// test_h5_reader.c: HDF5 data sets: `galley data synth` files read back equal the in-memory
// generator (after the documented transform); exact values through every dtype, layout and
// transform; crops read as hyperslabs; one sample per file; clear errors for bad files.
#include "testlib.h"

#include <hdf5.h>
#include <sys/stat.h>

#include "data/h5_internal.h"
#include "galley/check.h"
#include "galley/h5data.h"

static char dir[64];

static int setup(void **st) {
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/galley_h5_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    return 0;
}

static int teardown(void **st) {
    (void)st;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

// A recipe reading split files spec (a flow mapping's content) with more data keys (each line
// indented by two spaces).
static void hrecipe(recipe_t *r, const char *spec, const char *extra) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "seed: 7\ndata:\n  source: hdf5\n  train: {%s}\n  val: {%s}\n%s"
             "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\n",
             spec, spec, extra);
    tl_recipe(r, yaml, 0, NULL);
}

static char *path_in(const char *name) {
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

// Opens r's training split, or fails with the messages.
static h5src *open_ok(const recipe_t *r) {
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    h5src *src = NULL;
    int rc = h5src_open(&src, r, SPLIT_TRAIN, err);
    char *msg = tl_stream_close(&s);
    if (rc) fail_msg("h5src_open failed: %s", msg);
    free(msg);
    return src;
}

// Opening must fail with a message containing every one of want[] (NULL-terminated).
static void open_fails(const char *spec, const char *extra, const char *const *want) {
    recipe_t r;
    hrecipe(&r, spec, extra);
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    h5src *src = NULL;
    int rc = h5src_open(&src, &r, SPLIT_TRAIN, err);
    char *msg = tl_stream_close(&s);
    if (rc != GL_EXIT_USAGE) fail_msg("expected exit 2 for %s, got %d (%s)", spec, rc, msg);
    for (int i = 0; want[i]; i++)
        if (!strstr(msg, want[i])) fail_msg("message lacks '%s':\n%s", want[i], msg);
    free(msg);
    recipe_free(&r);
}

// ---- round trip: data synth -> file -> reader == generator --------------------------------------

typedef struct {
    int kind;
    const char *spec, *extra;
} rt_case;

static void round_trip(const rt_case *c, int per_file) {
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = c->kind;
    p.n = 5;
    p.size = 12;
    p.compress = 3;
    p.per_file = per_file;
    p.classes = 3;
    char *out = path_in(per_file ? "rt_dir" : "rt.h5");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", out);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(h5_synth_write(&p, out, stderr), 0);

    recipe_t gen;
    h5_synth_recipe(&p, &gen);
    gl_arena a;
    arena_init(&a, data_synth_bytes(&gen, SPLIT_TRAIN) + 256);
    gl_dataset d;
    data_synth_make(&gen, SPLIT_TRAIN, &d, &a);

    char spec[512], extra[512];
    snprintf(spec, sizeof spec, "files: '%s%s', %s", out, per_file ? "/sample-*.h5" : "", c->spec);
    snprintf(extra, sizeof extra, "%s%s", c->extra, per_file ? "  samples: per_file\n" : "");
    recipe_t r;
    hrecipe(&r, spec, extra);
    h5src *src = open_ok(&r);
    gl_dataset hd;
    h5src_describe(src, &hd);
    assert_int_equal(hd.n, d.n);
    assert_int_equal(hd.size, d.size);
    assert_int_equal(hd.tsize, d.tsize);
    assert_int_equal(hd.target, d.target);
    for (int k = 0; k < d.shape.ndim; k++) assert_int_equal(hd.shape.d[k], d.shape.d[k]);
    h5cursor *cur = h5cursor_new(src);
    float *x = malloc((size_t)d.size * sizeof(float)), *v = malloc((size_t)d.tsize * sizeof(float));
    int32_t *l = malloc((size_t)d.tsize * sizeof(int32_t));
    char msg[512];
    for (int64_t i = 0; i < d.n; i++) {
        int mask = d.target != TARGET_VALUES;
        if (h5src_read(src, cur, i, NULL, x, mask ? l : NULL, mask ? NULL : v, msg, sizeof msg)) fail_msg("%s", msg);
        for (int64_t j = 0; j < d.size; j++) {
            float want = d.x[i * d.size + j];
            if (c->kind == SYNTH_COSMO3D) want = log1pf((float)h5_counts_from_log(want));
            if (x[j] != want) fail_msg("kind %d sample %lld element %lld: %g != %g", c->kind, (long long)i, (long long)j,
                                       x[j], want);
        }
        for (int64_t j = 0; j < d.tsize; j++) {
            if (mask) assert_int_equal(l[j], d.labels[i * d.tsize + j]);
            else assert_true(v[j] == d.values[i * d.tsize + j]);
        }
    }
    free(x), free(v), free(l);
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);
    arena_free(&a);
}

static const rt_case cases[] = {
    {SYNTH_SPIRALS, "", "  classes: 3\n"},
    {SYNTH_SHAPES2D, "", "  classes: 3\n"},
    {SYNTH_COSMO3D, "", "  target: values\n  transform: log1p\n"},
    {SYNTH_CLIMATE2D, "x: climate/data, y: climate/labels_0", "  target: mask\n  classes: 3\n  layout: channels_last\n"},
    {SYNTH_NBODY3D, "", "  target: values\n"},
};

static void test_synth_round_trip_every_kind(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) round_trip(&cases[i], 0);
}

static void test_synth_per_file_round_trip(void **st) {
    (void)st;
    round_trip(&cases[3], 1);  // DeepCAM: one sample per file, (H, W, C), no sample axis
    round_trip(&cases[1], 1);  // scalar class labels
}

static void test_cosmo_counts_are_int16(void **st) {
    (void)st;
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = SYNTH_COSMO3D;
    p.n = 2;
    p.size = 8;
    char *out = path_in("cosmo.h5");
    assert_int_equal(h5_synth_write(&p, out, stderr), 0);
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "x", H5P_DEFAULT), t = H5Dget_type(d);
    assert_int_equal(H5Tget_class(t), H5T_INTEGER);
    assert_int_equal(H5Tget_size(t), 2);
    H5Tclose(t), H5Dclose(d), H5Fclose(f);
    assert_int_equal(h5_counts_from_log(log1pf(5.0f)), 5);
    assert_int_equal(h5_counts_from_log(-3.0f), 0);
    assert_int_equal(h5_counts_from_log(40.0f), 32767);
    // No temporary file is left next to the output.
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    assert_int_not_equal(system(cmd), 0);
}

// ---- dtypes, layouts, transforms ------------------------------------------------------------

enum { N = 3, C = 2, H = 4, W = 5 };

// Raw value of sample i, channel c, pixel (h, w): small integers, exact in every dtype.
static double raw(int i, int c, int h, int w) { return (double)((i * 7 + c * 5 + h * 3 + w) % 50); }

// Writes x [N, C, H, W] (or [N, H, W, C]) in disk type dt and y labels [N] to name.
static void write_typed(const char *name, hid_t dt, int channels_last) {
    double buf[N * C * H * W];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++) {
                    int at = channels_last ? ((i * H + h) * W + w) * C + c : ((i * C + c) * H + h) * W + w;
                    buf[at] = raw(i, c, h, w);
                }
    hid_t f = (hid_t)h5_create_file(path_in(name));
    uint64_t cf[4] = {N, C, H, W}, cl[4] = {N, H, W, C}, yd[1] = {N};
    assert_int_equal(h5_write_array(f, "g/x", dt, H5T_NATIVE_DOUBLE, 4, channels_last ? cl : cf, buf, 1, 0), 0);
    int32_t y[N] = {0, 1, 1};
    assert_int_equal(h5_write_array(f, "g/y", H5T_STD_U8LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0), 0);
    H5Fclose(f);
}

static void check_typed(const char *name, const char *extra, int channels_last, int tf) {
    char spec[256], ex[512];
    snprintf(spec, sizeof spec, "files: %s, x: g/x, y: g/y", path_in(name));
    snprintf(ex, sizeof ex, "%s%s", channels_last ? "  layout: channels_last\n" : "", extra);
    recipe_t r;
    hrecipe(&r, spec, ex);
    h5src *src = open_ok(&r);
    h5cursor *cur = h5cursor_new(src);
    float x[C * H * W];
    int32_t l;
    char msg[512];
    for (int i = 0; i < N; i++) {
        if (h5src_read(src, cur, i, NULL, x, &l, NULL, msg, sizeof msg)) fail_msg("%s", msg);
        assert_int_equal(l, i == 0 ? 0 : 1);
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++) {
                    float v = (float)raw(i, c, h, w), want = v;
                    if (tf == 1) want = log1pf(v);                                       // log1p
                    if (tf == 2) want = (v - (c ? 10.0f : 0.0f)) * (float)(1.0 / (c ? 40.0 : 50.0));  // minmax
                    if (tf == 3) want = (log1pf(v) - 1.0f) * (float)(1.0 / (c ? 2.0 : 4.0));         // log1p + standard
                    float got = x[(c * H + h) * W + w];
                    if (got != want)
                        fail_msg("%s%s: sample %d (%d,%d,%d): %.9g != %.9g", name, channels_last ? " (last)" : "", i, c,
                                 h, w, got, want);
                }
    }
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);
}

static void test_every_dtype_and_layout_exact(void **st) {
    (void)st;
    hid_t f16 = h5_float16_type();
    struct {
        const char *name;
        hid_t t;
    } types[] = {{"u8", H5T_STD_U8LE}, {"i16", H5T_STD_I16LE}, {"f16", f16}, {"f32", H5T_IEEE_F32LE},
                 {"f64", H5T_IEEE_F64BE}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int last = 0; last < 2; last++) {
            char name[32];
            snprintf(name, sizeof name, "%s%s.h5", types[k].name, last ? "_cl" : "");
            write_typed(name, types[k].t, last);
            check_typed(name, "", last, 0);
            check_typed(name, "  transform: log1p\n", last, 1);
            check_typed(name, "  normalize: minmax\n  min: [0, 10]\n  max: [50, 50]\n", last, 2);
        }
    H5Tclose(f16);
}

static void test_stats_file_standard(void **st) {
    (void)st;
    write_typed("s.h5", H5T_STD_I16LE, 1);
    hid_t f = (hid_t)h5_create_file(path_in("stats.h5"));
    uint64_t two[1] = {2};
    double mean[2] = {1, 1}, sd[2] = {4, 2};
    h5_write_array(f, "mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, two, mean, 0, 0);
    h5_write_array(f, "std", H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, 1, two, sd, 0, 0);
    H5Fclose(f);
    char extra[256];
    snprintf(extra, sizeof extra, "  transform: log1p\n  normalize: standard\n  stats: %s\n", path_in("stats.h5"));
    check_typed("s.h5", extra, 1, 3);
    // Recipe values win over the file: the same numbers given inline.
    check_typed("s.h5", "  transform: log1p\n  normalize: standard\n  mean: [1]\n  std: [4, 2]\n", 1, 3);
}

// ---- crops ---------------------------------------------------------------------------------------

static void test_crop_is_the_hyperslab(void **st) {
    (void)st;
    enum { S = 9, CH = 2, K = 4 };
    static float x[2 * S * S * S * CH];
    static int32_t m[2 * S * S * S];
    for (int i = 0; i < 2; i++)
        for (int z = 0; z < S; z++)
            for (int y = 0; y < S; y++)
                for (int w = 0; w < S; w++) {
                    for (int c = 0; c < CH; c++) x[(((i * S + z) * S + y) * S + w) * CH + c] = (float)(i * 100000 + c * 1000 + z * 100 + y * 10 + w);
                    m[((i * S + z) * S + y) * S + w] = (z + y + w) % 3;
                }
    hid_t f = (hid_t)h5_create_file(path_in("vol.h5"));
    uint64_t xd[5] = {2, S, S, S, CH}, md[4] = {2, S, S, S};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 5, xd, x, 1, 1);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, md, m, 1, 1);
    H5Fclose(f);
    char spec[256];
    snprintf(spec, sizeof spec, "files: %s", path_in("vol.h5"));
    recipe_t r;
    hrecipe(&r, spec, "  layout: channels_last\n  target: mask\n  classes: 3\n  crop: 4\n");
    h5src *src = open_ok(&r);
    gl_dataset d;
    h5src_describe(src, &d);
    assert_int_equal(d.shape.ndim, 4);
    assert_int_equal(d.shape.d[0], CH);
    assert_int_equal(d.shape.d[1], K);
    assert_int_equal(d.tsize, K * K * K);
    h5cursor *cur = h5cursor_new(src);
    float cx[CH * K * K * K];
    int32_t cm[K * K * K];
    char msg[256];
    int64_t offs[3][3] = {{0, 0, 0}, {5, 5, 5}, {1, 3, 2}};
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 3; o++) {
            const int64_t *off = offs[o];
            if (h5src_read(src, cur, i, off, cx, cm, NULL, msg, sizeof msg)) fail_msg("%s", msg);
            for (int c = 0; c < CH; c++)
                for (int z = 0; z < K; z++)
                    for (int y = 0; y < K; y++)
                        for (int w = 0; w < K; w++) {
                            float want = (float)(i * 100000 + c * 1000 + (z + off[0]) * 100 + (y + off[1]) * 10 + w + off[2]);
                            assert_true(cx[((c * K + z) * K + y) * K + w] == want);
                            if (c == 0)
                                assert_int_equal(cm[(z * K + y) * K + w], (z + off[0] + y + off[1] + w + off[2]) % 3);
                        }
        }
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);
}

// Crops of a contiguous, unfiltered dataset are read directly (one pread per plane, h5_reader.c
// direct_crop); of a chunked one through HDF5. Both give the hyperslab, for float32 and int16 x
// (with log1p) and a field target, at the corners and inside.
static void test_crop_direct_equals_hyperslab(void **st) {
    (void)st;
    enum { S = 9, CH = 2, YC = 3, K = 4 };
    static float x[2 * CH * S * S * S], y[2 * YC * S * S * S];
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < YC; c++)
            for (int z = 0; z < S; z++)
                for (int h = 0; h < S; h++)
                    for (int w = 0; w < S; w++) {
                        float v = (float)(i * 1000 + c * 300 + z * 31 + h * 7 + w) / 8;  // exact in int16 when whole
                        if (c < CH) x[(((i * CH + c) * S + z) * S + h) * S + w] = floorf(v);
                        y[(((i * YC + c) * S + z) * S + h) * S + w] = v;
                    }
    uint64_t xd[5] = {2, CH, S, S, S}, yd[5] = {2, YC, S, S, S};
    static const struct {
        const char *name;
        int chunk, i16;
    } files[] = {{"contig.h5", 0, 0}, {"chunked.h5", 1, 0}, {"contig16.h5", 0, 1}};
    for (size_t k = 0; k < 3; k++) {
        hid_t f = (hid_t)h5_create_file(path_in(files[k].name));
        h5_write_array(f, "x", files[k].i16 ? H5T_STD_I16LE : H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 5, xd, x,
                       files[k].chunk, 0);
        h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 5, yd, y, files[k].chunk, 0);
        H5Fclose(f);
        char spec[256];
        snprintf(spec, sizeof spec, "files: %s", path_in(files[k].name));
        recipe_t r;
        hrecipe(&r, spec, files[k].i16 ? "  target: values\n  crop: 4\n  transform: log1p\n"
                                       : "  target: values\n  crop: 4\n");
        h5src *src = open_ok(&r);
        h5cursor *cur = h5cursor_new(src);
        float cx[CH * K * K * K], cy[YC * K * K * K];
        char msg[256];
        int64_t offs[3][3] = {{0, 0, 0}, {5, 5, 5}, {1, 3, 2}};
        for (int i = 0; i < 2; i++)
            for (int o = 0; o < 3; o++) {
                const int64_t *off = offs[o];
                if (h5src_read(src, cur, i, off, cx, NULL, cy, msg, sizeof msg)) fail_msg("%s", msg);
                for (int c = 0; c < YC; c++)
                    for (int z = 0; z < K; z++)
                        for (int h = 0; h < K; h++)
                            for (int w = 0; w < K; w++) {
                                int64_t at = (((i * YC + c) * S + z + off[0]) * S + h + off[1]) * S + w + off[2];
                                int64_t in = ((c * K + z) * K + h) * K + w;
                                if (cy[in] != y[at])
                                    fail_msg("%s: y sample %d channel %d (%d,%d,%d) at offset %d: %g != %g",
                                             files[k].name, i, c, z, h, w, o, cy[in], y[at]);
                                if (c >= CH) continue;
                                float xv = floorf(y[at]), want = files[k].i16 ? log1pf(xv) : xv;
                                if (cx[in] != want)
                                    fail_msg("%s: x sample %d channel %d (%d,%d,%d) at offset %d: %g != %g",
                                             files[k].name, i, c, z, h, w, o, cx[in], want);
                            }
            }
        h5cursor_free(cur);
        h5src_free(src);
        recipe_free(&r);
    }
}

// ---- errors --------------------------------------------------------------------------------------

static void test_errors_name_file_and_dataset(void **st) {
    (void)st;
    write_typed("good.h5", H5T_IEEE_F32LE, 0);
    char spec[512], g[256];
    snprintf(g, sizeof g, "%s", path_in("good.h5"));

    snprintf(spec, sizeof spec, "files: %s/missing.h5, x: g/x, y: g/y", dir);
    // File errors start at the recipe key that named the files: "FILE:LINE:COL: error: data.train.files: ..."
    open_fails(spec, "", (const char *const[]){"missing.h5", "No such file", ": error: data.train.files: cannot open", NULL});

    snprintf(spec, sizeof spec, "files: '%s/nomatch-*.h5'", dir);
    open_fails(spec, "", (const char *const[]){"error: data.train.files: no file matches", "nomatch-*.h5", NULL});

    snprintf(spec, sizeof spec, "files: %s, x: g/nope, y: g/y", g);
    open_fails(spec, "", (const char *const[]){"good.h5", "no dataset 'g/nope'", "g", NULL});

    // A name that is there but is not a dataset (here a group; also a damaged object header).
    snprintf(spec, sizeof spec, "files: %s, x: g, y: g/y", g);
    open_fails(spec, "", (const char *const[]){"good.h5", "'g' (the inputs, x) is there but cannot be opened as a dataset",
                                               NULL});

    snprintf(spec, sizeof spec, "files: %s, x: g/x, y: g/y", g);
    open_fails(spec, "  target: mask\n", (const char *const[]){"good.h5", "'g/y'", "mask", NULL});

    // Wrong rank: 5 axes per sample.
    hid_t f = (hid_t)h5_create_file(path_in("rank.h5"));
    static float big[2 * 2 * 2 * 2 * 2 * 2];
    uint64_t d6[6] = {2, 2, 2, 2, 2, 2}, d1[1] = {2};
    int32_t y2[2] = {0, 1};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 6, d6, big, 0, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, y2, 0, 0);
    H5Fclose(f);
    snprintf(spec, sizeof spec, "files: %s", path_in("rank.h5"));
    open_fails(spec, "", (const char *const[]){"rank.h5", "'x'", "rank 5", NULL});

    // Unsupported dtype: strings.
    f = (hid_t)h5_create_file(path_in("str.h5"));
    hid_t st8 = H5Tcopy(H5T_C_S1);
    H5Tset_size(st8, 8);
    char strs[2][8] = {"a", "b"};
    h5_write_array(f, "x", st8, st8, 1, d1, strs, 0, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, y2, 0, 0);
    H5Tclose(st8);
    H5Fclose(f);
    snprintf(spec, sizeof spec, "files: %s", path_in("str.h5"));
    open_fails(spec, "", (const char *const[]){"str.h5", "'x'", "dtype string", NULL});

    // Inconsistent shapes across files.
    f = (hid_t)h5_create_file(path_in("other.h5"));
    static float o[3 * 2 * 4 * 6];
    uint64_t od[4] = {3, 2, 4, 6}, oy[1] = {3};
    int32_t y3[3] = {0, 0, 0};
    h5_write_array(f, "g/x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, od, o, 1, 0);
    h5_write_array(f, "g/y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, oy, y3, 0, 0);
    H5Fclose(f);
    snprintf(spec, sizeof spec, "files: '%s, %s', x: g/x, y: g/y", g, path_in("other.h5"));
    open_fails(spec, "", (const char *const[]){"inconsistent", "good.h5", "other.h5", "[2, 4, 5]", "[2, 4, 6]", NULL});

    // Sample counts of x and y disagree.
    f = (hid_t)h5_create_file(path_in("count.h5"));
    h5_write_array(f, "g/x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, od, o, 1, 0);
    h5_write_array(f, "g/y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, y2, 0, 0);
    H5Fclose(f);
    snprintf(spec, sizeof spec, "files: %s, x: g/x, y: g/y", path_in("count.h5"));
    open_fails(spec, "", (const char *const[]){"count.h5", "3 samples", "2", NULL});

    // Truncated file: not readable as HDF5.
    char cmd[512];
    snprintf(cmd, sizeof cmd, "head -c 1000 %s > %s", g, path_in("trunc.h5"));
    assert_int_equal(system(cmd), 0);
    snprintf(spec, sizeof spec, "files: %s, x: g/x, y: g/y", path_in("trunc.h5"));
    open_fails(spec, "", (const char *const[]){"error: data.train.files: ", "trunc.h5", "not a readable HDF5 file", NULL});

    // Crop larger than the samples; normalisation without values.
    snprintf(spec, sizeof spec, "files: %s, x: g/x, y: g/y", g);
    // Recipe values that do not fit the data: FILE:LINE:COL of the key.
    open_fails(spec, "  crop: 5\n", (const char *const[]){":6:9: error: data.crop: 5, but", "only 4", NULL});
    open_fails(spec, "  normalize: standard\n", (const char *const[]){"error: data.normalize: standard, but data.mean",
                                                                     "data.stats", NULL});
    open_fails(spec, "  normalize: minmax\n  min: [0, 1, 2]\n  max: [1]\n",
               (const char *const[]){":7:8: error: data.min: 3 values", NULL});
    open_fails(spec, "  normalize: minmax\n  min: [0]\n  max: [1, 0]\n",
               (const char *const[]){"error: data.max: channel 1: max is not above min", NULL});
}

// Names and strings from a damaged file print as valid UTF-8, other bytes as \xNN.
static void test_printable_names(void **st) {
    (void)st;
    char out[64];
    h5_printable("x", out, sizeof out);
    assert_string_equal(out, "x");
    h5_printable("temp\xc3\xa9rature/\xe2\x82\xac", out, sizeof out);  // UTF-8 stays
    assert_string_equal(out, "temp\xc3\xa9rature/\xe2\x82\xac");
    h5_printable("y\xca", out, sizeof out);  // a lone lead byte (what a damaged link name showed)
    assert_string_equal(out, "y\\xca");
    h5_printable("a\nb\x7f\xc3", out, sizeof out);  // control bytes; a sequence cut short
    assert_string_equal(out, "a\\x0ab\\x7f\\xc3");
    h5_printable("\xc0\x80\xf5\x80\x80\x80", out, sizeof out);  // overlong and out-of-range leads
    assert_string_equal(out, "\\xc0\\x80\\xf5\\x80\\x80\\x80");
    h5_printable("\xe0\x80\x80\xed\xa0\x80\xf4\x90\x80\x80", out, sizeof out);  // overlong, surrogate, > U+10FFFF
    assert_string_equal(out, "\\xe0\\x80\\x80\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80");
    h5_printable("\xf0\x9f\x99\x82\xf4\x8f\xbf\xbf", out, sizeof out);  // U+1F642, U+10FFFF stay
    assert_string_equal(out, "\xf0\x9f\x99\x82\xf4\x8f\xbf\xbf");
    char small[8];
    h5_printable("\x01\x02\x03", small, sizeof small);  // cut, never past the buffer
    assert_string_equal(small, "\\x01");
}

// An unfiltered chunked dataset of n int8 values in chunks of ch, chunks [first, last) written
// (the rest left unallocated); a chunk index record of `bad_bytes` (0: none) written whole at
// chunk `bad` with H5Dwrite_chunk, which HDF5 1.10 does not check: a damaged chunk index.
static hid_t chunked_file(const char *name, hsize_t n, hsize_t ch, hsize_t first, hsize_t last, hsize_t bad,
                          size_t bad_bytes) {
    hid_t f = (hid_t)h5_create_file(path_in(name));
    hid_t sp = H5Screate_simple(1, &n, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 1, &ch);
    hid_t d = H5Dcreate2(f, "x", H5T_STD_I8LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    int8_t *v = calloc(n, 1);
    hsize_t start = first * ch, count = (last - first) * ch > n - start ? n - start : (last - first) * ch;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (count) assert_true(H5Dwrite(d, H5T_NATIVE_INT8, ms, sp, H5P_DEFAULT, v) >= 0);
    if (bad_bytes) {
        hsize_t off = bad * ch;
        assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, bad_bytes, v) >= 0);
    }
    free(v);
    H5Sclose(ms), H5Sclose(sp), H5Pclose(pl);
    H5Dclose(d);
    H5Fclose(f);
    // Read back as a reader would: a fresh open (the writer's chunk cache still knows the old size).
    f = H5Fopen(path_in(name), H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "x", H5P_DEFAULT);
    H5Fclose(f);  // the dataset keeps the file open until it is closed
    return d;
}

static bool fits_and_close(hid_t d) {
    assert_true(d >= 0);
    bool ok = h5_dataset_damage(d) == NULL;
    H5Dclose(d);
    return ok;
}

// A damaged chunk index (a chunk record of another size than the chunk shape) is caught when the
// file is opened, where HDF5 1.10 would read past its own buffers (found by fuzzing): 8 chunks
// summed whole, 70000 chunks by their first and last; sound files
// pass, also partly allocated.
static void test_damaged_chunk_index(void **st) {
    (void)st;
    assert_true(fits_and_close(chunked_file("c1.h5", 64, 8, 0, 8, 0, 0)));
    assert_true(fits_and_close(chunked_file("c2.h5", 60, 8, 2, 5, 0, 0)));  // partial; edge chunk stored whole
    assert_false(fits_and_close(chunked_file("c3.h5", 64, 8, 0, 8, 3, 4)));
    assert_false(fits_and_close(chunked_file("c4.h5", 64, 8, 0, 2, 5, 9)));  // an allocated chunk past the rest
    assert_true(fits_and_close(chunked_file("c5.h5", 280000, 4, 0, 70000, 0, 0)));
    assert_true(fits_and_close(chunked_file("c6.h5", 280000, 4, 0, 100, 0, 0)));
    assert_false(fits_and_close(chunked_file("c7.h5", 280000, 4, 1, 70000, 0, 2)));  // the first chunk
    assert_false(fits_and_close(chunked_file("c8.h5", 280000, 4, 0, 69999, 69999, 3)));  // the last

    // Training data: exit 2 at open, naming the file and the dataset.
    hid_t f = (hid_t)h5_create_file(path_in("dmg.h5"));
    hsize_t dims[2] = {8, 2}, ch[2] = {1, 2}, yd = 8;
    hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 2, ch);
    hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    float v[16] = {0};
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    hsize_t off[2] = {3, 0};
    assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, 4, v) >= 0);  // 4 bytes for an 8-byte chunk
    H5Dclose(d), H5Sclose(sp), H5Pclose(pl);
    int32_t y[8] = {0};
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, (uint64_t[]){yd}, y, 0, 0);
    H5Fclose(f);
    char spec[512];
    snprintf(spec, sizeof spec, "files: %s", path_in("dmg.h5"));
    open_fails(spec, "", (const char *const[]){"dmg.h5", "'x' (the inputs, x) is damaged (its chunk index does not fit its chunk shape)", NULL});
}

static void test_read_errors_name_sample(void **st) {
    (void)st;
    // Label out of range and a NaN input: found when the sample is read.
    hid_t f = (hid_t)h5_create_file(path_in("bad.h5"));
    float x[3 * 2] = {1, 2, 3, NAN, 5, 6};
    int32_t y[3] = {0, 7, 1};
    uint64_t xd[2] = {3, 2}, yd[1] = {3};
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
    char spec[256];
    snprintf(spec, sizeof spec, "files: %s", path_in("bad.h5"));
    recipe_t r;
    hrecipe(&r, spec, "  classes: 3\n");
    h5src *src = open_ok(&r);
    h5cursor *cur = h5cursor_new(src);
    float out[2];
    int32_t l;
    char msg[512];
    assert_int_equal(h5src_read(src, cur, 0, NULL, out, &l, NULL, msg, sizeof msg), 0);
    assert_int_equal(h5src_read(src, cur, 1, NULL, out, &l, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "bad.h5"));
    assert_non_null(strstr(msg, "'x' sample 1"));
    assert_non_null(strstr(msg, "nan"));
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);

    x[3] = 4;
    f = (hid_t)h5_create_file(path_in("bad.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd, y, 0, 0);
    H5Fclose(f);
    hrecipe(&r, spec, "  classes: 3\n");
    src = open_ok(&r);
    cur = h5cursor_new(src);
    assert_int_equal(h5src_read(src, cur, 1, NULL, out, &l, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "'y' sample 1"));
    assert_non_null(strstr(msg, "label 7"));
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);
}

// Class labels and masks stored as floats: whole numbers are read as labels; 0.5 is refused,
// naming file, dataset and sample: class labels at open (exit 2), a mask's first sample at open
// and the others as they are read (HDF5 alone would truncate 0.5 to class 0 without a word).
static void test_float_labels_must_be_whole(void **st) {
    (void)st;
    float x[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t xd[2] = {4, 2}, yd[1] = {4};
    char spec[256];
    snprintf(spec, sizeof spec, "files: %s", path_in("fl.h5"));
    float bad[4] = {0.5f, 1.5f, 0, 1};
    hid_t f = (hid_t)h5_create_file(path_in("fl.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, yd, bad, 0, 0);
    H5Fclose(f);
    open_fails(spec, "  classes: 3\n",
               (const char *const[]){"fl.h5: 'y' sample 0", "label 0.5 at element 0: not a whole number", NULL});
    bad[0] = 0;  // found past the first label too
    f = (hid_t)h5_create_file(path_in("fl.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, yd, bad, 0, 0);
    H5Fclose(f);
    open_fails(spec, "  classes: 3\n", (const char *const[]){"'y' sample 1", "label 1.5", NULL});
    bad[1] = 7;  // a whole number out of range is found at open too
    f = (hid_t)h5_create_file(path_in("fl.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, yd, bad, 0, 0);
    H5Fclose(f);
    open_fails(spec, "  classes: 3\n", (const char *const[]){"'y' sample 1", "label 7", "[0, 3)", NULL});

    double whole[4] = {0, 2, 1, 2};  // float64 whole numbers: labels
    f = (hid_t)h5_create_file(path_in("fl.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd, x, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, yd, whole, 0, 0);
    H5Fclose(f);
    recipe_t r;
    hrecipe(&r, spec, "  classes: 3\n");
    h5src *src = open_ok(&r);
    h5cursor *cur = h5cursor_new(src);
    float out[2];
    char msg[512];
    for (int i = 0; i < 4; i++) {
        int32_t l = -1;
        assert_int_equal(h5src_read(src, cur, i, NULL, out, &l, NULL, msg, sizeof msg), 0);
        assert_int_equal(l, (int32_t)whole[i]);
    }
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);

    // a mask [2, 2, 2]: the first sample whole, the second holds 1.25 at element 3
    float mx[2 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, my[2 * 2 * 2] = {0, 1, 1, 0, 1, 0, 0, 1.25f};
    uint64_t md[3] = {2, 2, 2};
    f = (hid_t)h5_create_file(path_in("fm.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, md, mx, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, md, my, 1, 0);
    H5Fclose(f);
    snprintf(spec, sizeof spec, "files: %s", path_in("fm.h5"));
    hrecipe(&r, spec, "  target: mask\n  classes: 2\n");
    src = open_ok(&r);
    cur = h5cursor_new(src);
    int32_t m[4];
    float mo[4];
    assert_int_equal(h5src_read(src, cur, 0, NULL, mo, m, NULL, msg, sizeof msg), 0);
    assert_int_equal(m[1], 1);
    assert_int_equal(h5src_read(src, cur, 1, NULL, mo, m, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "fm.h5: 'y' sample 1 (index 1 in the file) has label 1.25 at element 3: not a whole"));
    h5cursor_free(cur);
    h5src_free(src);
    recipe_free(&r);
    my[1] = 0.5f;  // in the first sample: refused at open
    f = (hid_t)h5_create_file(path_in("fm.h5"));
    h5_write_array(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, md, mx, 1, 0);
    h5_write_array(f, "y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, md, my, 1, 0);
    H5Fclose(f);
    open_fails(spec, "  target: mask\n  classes: 2\n",
               (const char *const[]){"'y' sample 0", "label 0.5 at element 1", NULL});
}

static void test_recipe_keys_apply_by_source(void **st) {
    (void)st;
    recipe_t r;
    char *errors = NULL;
    // Synthetic keys are refused with hdf5, hdf5 keys with synthetic.
    int rc = tl_recipe_try(&r, "data:\n  source: hdf5\n  train: {files: a.h5}\n  val: {files: b.h5}\n"
                               "  synthetic: {kind: blobs}\nmodel: {layers: [{type: relu}]}\noptimizer: {lr: 0.1}\n",
                           0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "data.synthetic"));
    assert_non_null(strstr(errors, "data.source is synthetic"));
    free(errors);
    recipe_free(&r);
    rc = tl_recipe_try(&r, "data:\n  crop: 4\nmodel: {layers: [{type: relu}]}\noptimizer: {lr: 0.1}\n", 0, NULL,
                       &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "data.crop"));
    assert_non_null(strstr(errors, "data.source is hdf5"));
    free(errors);
    recipe_free(&r);
    rc = tl_recipe_try(&r, "data:\n  source: hdf5\n  train: {files: a.h5}\n  val: {files: b.h5}\n  mean: [1]\n"
                           "model: {layers: [{type: relu}]}\noptimizer: {lr: 0.1}\n", 0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "data.normalize is standard"));
    free(errors);
    recipe_free(&r);
    rc = tl_recipe_try(&r, "data:\n  source: hdf5\n  val: {files: b.h5}\nmodel: {layers: [{type: relu}]}\n"
                           "optimizer: {lr: 0.1}\n", 0, NULL, &errors, NULL);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(errors, "data.train.files"));
    free(errors);
    recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth_round_trip_every_kind),
        cmocka_unit_test(test_synth_per_file_round_trip),
        cmocka_unit_test(test_cosmo_counts_are_int16),
        cmocka_unit_test(test_every_dtype_and_layout_exact),
        cmocka_unit_test(test_stats_file_standard),
        cmocka_unit_test(test_crop_is_the_hyperslab),
        cmocka_unit_test(test_crop_direct_equals_hyperslab),
        cmocka_unit_test(test_errors_name_file_and_dataset),
        cmocka_unit_test(test_printable_names),
        cmocka_unit_test(test_damaged_chunk_index),
        cmocka_unit_test(test_read_errors_name_sample),
        cmocka_unit_test(test_float_labels_must_be_whole),
        cmocka_unit_test(test_recipe_keys_apply_by_source),
    };
    h5_setup(false);
    return cmocka_run_group_tests(tests, setup, teardown);
}
