// test_synth.c: the synthetic science data sets (shapes2d, cosmo3d, climate2d, nbody3d):
// shapes and ranges, a pure function of (seed, split, sample) whatever the thread count, and
// signals a model can learn (a cheap statistic per kind).
#include "testlib.h"

#include <ctype.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "galley/data.h"
#include "galley/schema.h"
#include "galley/synth.h"

// What each kind must produce, for the recipe sizes used here.
typedef struct {
    const char *kind;
    int size;
    const char *extra;  // more data.synthetic keys
    int ndim;           // input shape: [channels, size...]
    int64_t channels;
    gl_target_kind target;
    int tndim;          // target shape: [tfirst, size...] for 3D values, [size, size] for a mask
    int64_t tfirst;
    int64_t classes;
    float lo, hi;       // input bounds at noise 0.1 (loose; catches garbage, not fine shape)
} kind_info;

enum { K_SHAPES, K_COSMO, K_CLIMATE, K_FIELDS };
static kind_info kinds[] = {
    [K_SHAPES] = {"shapes2d", 16, ", classes: 6", 3, 3, TARGET_CLASS, 1, 1, 6, -2.2f, 2.2f},
    [K_COSMO] = {"cosmo3d", 16, "", 4, 4, TARGET_VALUES, 1, 4, 0, -0.5f, 12.0f},
    [K_CLIMATE] = {"climate2d", 32, "", 3, 16, TARGET_MASK, 2, 0, 3, -12.0f, 12.0f},
    [K_FIELDS] = {"nbody3d", 16, "", 4, 4, TARGET_VALUES, 4, 5, 0, -8.0f, 8.0f},
};

typedef struct {
    recipe_t r;
    gl_arena a;
    gl_dataset d;
} synth;

// Generates a split of kind k with n samples (train_size = val_size = n).
static void synth_make(synth *s, const kind_info *k, uint64_t seed, int64_t n, int split, double noise)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "seed: %llu\n"
             "data:\n"
             "  synthetic: {kind: %s, size: %d, train_size: %lld, val_size: %lld, noise: %g%s}\n"
             "model:\n"
             "  layers:\n"
             "    - {type: relu}\n"
             "optimizer: {lr: 0.1}\n",
             (unsigned long long)seed, k->kind, k->size, (long long)n, (long long)n, noise, k->extra);
    memset(s, 0, sizeof *s);
    tl_recipe(&s->r, yaml, 0, NULL);
    arena_init(&s->a, data_synth_bytes(&s->r, split));
    data_synth_make(&s->r, split, &s->d, &s->a);
}

static void synth_free(synth *s)
{
    arena_free(&s->a);
    recipe_free(&s->r);
}

static size_t target_bytes(const gl_dataset *d, int64_t n)
{
    return (size_t)(n * d->tsize) * (d->target == TARGET_VALUES ? sizeof(float) : sizeof(int32_t));
}

static const void *targets(const gl_dataset *d)
{
    return d->target == TARGET_VALUES ? (const void *)d->values : (const void *)d->labels;
}

// Whether the first n samples of a and b are identical, inputs and targets, byte for byte.
static int same_samples(const gl_dataset *a, const gl_dataset *b, int64_t n)
{
    return a->size == b->size && a->tsize == b->tsize &&
           !memcmp(a->x, b->x, sizeof(float) * (size_t)(n * a->size)) &&
           !memcmp(targets(a), targets(b), target_bytes(a, n));
}

// ---- generic properties, run for every kind -----------------------------------------------------

static void test_shapes_and_ranges(void **state)
{
    const kind_info *k = *state;
    synth s;
    synth_make(&s, k, TL_SEED, 8, SPLIT_TRAIN, 0.1);
    const gl_dataset *d = &s.d;
    assert_int_equal(d->n, 8);
    assert_int_equal(d->shape.ndim, k->ndim);
    assert_int_equal(d->shape.d[0], k->channels);
    for (int i = 1; i < k->ndim; i++) assert_int_equal(d->shape.d[i], k->size);
    assert_int_equal(d->target, k->target);
    assert_int_equal(d->tshape.ndim, k->tndim);
    if (k->target == TARGET_MASK)
        for (int i = 0; i < k->tndim; i++) assert_int_equal(d->tshape.d[i], k->size);
    else {
        assert_int_equal(d->tshape.d[0], k->tfirst);
        for (int i = 1; i < k->tndim; i++) assert_int_equal(d->tshape.d[i], k->size);
    }
    if (k->target != TARGET_VALUES) assert_int_equal(d->classes, k->classes);

    double sum2 = 0.0;
    for (int64_t j = 0; j < d->n * d->size; j++) {
        float v = d->x[j];
        if (!isfinite(v) || v < k->lo || v > k->hi)
            fail_msg("%s: x[%lld] = %g, outside [%g, %g]", k->kind, (long long)j, v, k->lo, k->hi);
        sum2 += (double)v * v;
    }
    assert_true(sum2 > 0.01 * (double)(d->n * d->size));  // not left at zero
    if (k->target == TARGET_VALUES) {
        double tsum2 = 0.0;
        for (int64_t j = 0; j < d->n * d->tsize; j++) {
            float v = d->values[j];
            if (!isfinite(v) || v < -1.0f || v > 1.0f)
                fail_msg("%s: values[%lld] = %g, outside [-1, 1]", k->kind, (long long)j, v);
            tsum2 += (double)v * v;
        }
        assert_true(tsum2 > 0.01 * (double)(d->n * d->tsize));
    } else {
        for (int64_t j = 0; j < d->n * d->tsize; j++)
            if (d->labels[j] < 0 || d->labels[j] >= d->classes)
                fail_msg("%s: labels[%lld] = %d, outside [0, %lld)", k->kind, (long long)j, d->labels[j],
                         (long long)d->classes);
    }
    synth_free(&s);
}

static void test_same_seed_same_bytes(void **state)
{
    const kind_info *k = *state;
    synth a, b, c;
    synth_make(&a, k, TL_SEED, 8, SPLIT_TRAIN, 0.1);
    synth_make(&b, k, TL_SEED, 8, SPLIT_TRAIN, 0.1);
    synth_make(&c, k, TL_SEED + 1, 8, SPLIT_TRAIN, 0.1);
    assert_true(same_samples(&a.d, &b.d, 8));
    // Another seed: other inputs in every sample.
    for (int64_t i = 0; i < 8; i++)
        if (!memcmp(a.d.x + i * a.d.size, c.d.x + i * c.d.size, sizeof(float) * (size_t)a.d.size))
            fail_msg("%s: sample %lld is the same for seeds %u and %u", k->kind, (long long)i, TL_SEED, TL_SEED + 1);
    synth_free(&a);
    synth_free(&b);
    synth_free(&c);
}

static void test_splits_differ(void **state)
{
    const kind_info *k = *state;
    synth t, v;
    synth_make(&t, k, TL_SEED, 8, SPLIT_TRAIN, 0.1);
    synth_make(&v, k, TL_SEED, 8, SPLIT_VAL, 0.1);
    for (int64_t i = 0; i < 8; i++)
        for (int64_t j = 0; j < 8; j++)
            if (!memcmp(t.d.x + i * t.d.size, v.d.x + j * v.d.size, sizeof(float) * (size_t)t.d.size))
                fail_msg("%s: train sample %lld equals val sample %lld", k->kind, (long long)i, (long long)j);
    synth_free(&t);
    synth_free(&v);
}

static void test_sample_independent_of_n(void **state)
{
    const kind_info *k = *state;
    synth small, big;
    synth_make(&small, k, TL_SEED, 8, SPLIT_VAL, 0.1);
    synth_make(&big, k, TL_SEED, 16, SPLIT_VAL, 0.1);
    assert_true(same_samples(&small.d, &big.d, 8));
    synth_free(&small);
    synth_free(&big);
}

static void test_thread_count_independent(void **state)
{
    const kind_info *k = *state;
#ifdef _OPENMP
    int keep = omp_get_max_threads();
    synth one, two, three;
    omp_set_num_threads(1);
    synth_make(&one, k, TL_SEED, 12, SPLIT_TRAIN, 0.1);
    omp_set_num_threads(2);
    synth_make(&two, k, TL_SEED, 12, SPLIT_TRAIN, 0.1);
    omp_set_num_threads(3);
    synth_make(&three, k, TL_SEED, 12, SPLIT_TRAIN, 0.1);
    omp_set_num_threads(keep);
    assert_true(same_samples(&one.d, &two.d, 12));
    assert_true(same_samples(&one.d, &three.d, 12));
    synth_free(&one);
    synth_free(&two);
    synth_free(&three);
#else
    (void)k;
    skip();  // built without OpenMP: one thread only
#endif
}

// ---- per kind ----------------------------------------------------------------------------------

// Sample i has class i % classes.
static void test_shapes2d_balanced_classes(void **state)
{
    (void)state;
    kind_info k = kinds[K_SHAPES];
    k.extra = ", classes: 5";
    synth s;
    synth_make(&s, &k, TL_SEED, 23, SPLIT_TRAIN, 0.1);
    int64_t count[5] = {0};
    for (int64_t i = 0; i < s.d.n; i++) {
        assert_int_equal(s.d.labels[i], i % 5);
        count[s.d.labels[i]]++;
    }
    for (int c = 0; c < 5; c++) assert_true(count[c] == 4 || count[c] == 5);
    synth_free(&s);
}

// The generator has 6 shapes; the recipe layer refuses more classes (the generator relies on it).
static void test_shapes2d_more_than_6_classes_refused(void **state)
{
    (void)state;
    recipe_t r;
    char *errors = NULL;
    int rc = tl_recipe_try(&r,
                           "data:\n  synthetic: {kind: shapes2d, classes: 7}\n"
                           "model:\n  layers:\n    - {type: relu}\noptimizer: {lr: 0.1}\n",
                           0, NULL, &errors, NULL);
    int said = errors && strstr(errors, "classes must be <= 6") != NULL;
    free(errors);
    recipe_free(&r);
    assert_int_not_equal(rc, 0);
    assert_true(said);
}

// Without noise, every image shows its shape: somewhere two pixels 2 apart (in a row or a
// column) differ by most of the smallest contrast (0.4), while the background gradient alone
// changes by at most 0.05 over 2 pixels.
static void test_shapes2d_shape_visible(void **state)
{
    (void)state;
    kind_info k = kinds[K_SHAPES];
    k.size = 24;
    synth s;
    synth_make(&s, &k, TL_SEED, 24, SPLIT_TRAIN, 0.0);
    const int64_t sz = k.size, area = sz * sz;
    for (int64_t i = 0; i < s.d.n; i++) {
        double best = 0.0;
        for (int64_t c = 0; c < 3; c++) {
            const float *x = s.d.x + i * s.d.size + c * area;
            for (int64_t y = 0; y < sz; y++)
                for (int64_t xx = 0; xx + 2 < sz; xx++) {
                    best = fmax(best, fabs((double)x[y * sz + xx] - (double)x[y * sz + xx + 2]));
                    best = fmax(best, fabs((double)x[xx * sz + y] - (double)x[(xx + 2) * sz + y]));
                }
        }
        if (!(best > 0.3)) fail_msg("shapes2d: sample %lld shows no shape (largest step %g)", (long long)i, best);
    }
    synth_free(&s);
}

static double pearson(const double *a, const double *b, int n)
{
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < n; i++) ma += a[i], mb += b[i];
    ma /= n, mb /= n;
    for (int i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 0.0;
}

// Parameters are uniform in [-1, 1], independent per sample, and the volumes carry them: the
// variance of each channel follows the amplitude p1, the mean follows the density p3, and
// channel 0's autocorrelation at lag 1 (along x) the correlation length p0, at lag 3 the tilt p2.
static void test_cosmo3d_parameters_learnable(void **state)
{
    (void)state;
    enum { N = 64 };
    synth s;
    synth_make(&s, &kinds[K_COSMO], TL_SEED, N, SPLIT_TRAIN, 0.1);
    const int64_t vol = s.d.size / 4;
    double p[4][N], var[4][N], mean0[N], lag1[N], lag3[N];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 4; j++) p[j][i] = s.d.values[i * 4 + j];
        for (int c = 0; c < 4; c++) {
            const float *x = s.d.x + i * s.d.size + c * vol;
            double m = 0, m2 = 0;
            for (int64_t v = 0; v < vol; v++) m += x[v];
            m /= (double)vol;
            for (int64_t v = 0; v < vol; v++) m2 += (x[v] - m) * (x[v] - m);
            var[c][i] = m2 / (double)vol;
            if (c == 0) {
                const int64_t sz = kinds[K_COSMO].size;
                double a1 = 0, a3 = 0;
                for (int64_t v = 0; v < vol; v++) {
                    int64_t row = v - v % sz;
                    a1 += (x[v] - m) * (x[row + (v + 1) % sz] - m);
                    a3 += (x[v] - m) * (x[row + (v + 3) % sz] - m);
                }
                mean0[i] = m;
                lag1[i] = a1 / m2;
                lag3[i] = a3 / m2;
            }
        }
    }
    for (int j = 0; j < 4; j++) {
        double m = 0, lo = 1, hi = -1;
        for (int i = 0; i < N; i++) m += p[j][i] / N, lo = fmin(lo, p[j][i]), hi = fmax(hi, p[j][i]);
        if (fabs(m) > 0.3 || lo > -0.7 || hi < 0.7)
            fail_msg("cosmo3d: parameter %d does not look uniform in [-1, 1]: mean %g, range [%g, %g]", j, m, lo, hi);
        assert_true(fabs(pearson(p[j], p[(j + 1) % 4], N)) < 0.45);  // drawn independently
    }
    for (int c = 0; c < 4; c++) {
        double best = 0.0;
        for (int j = 0; j < 4; j++) best = fmax(best, fabs(pearson(var[c], p[j], N)));
        if (!(best > 0.3)) fail_msg("cosmo3d: channel %d variance correlates with no parameter (best |r| %g)", c, best);
    }
    double r1 = pearson(var[0], p[1], N), r3 = pearson(mean0, p[3], N);
    if (!(r1 > 0.5)) fail_msg("cosmo3d: channel 0 variance vs amplitude p1: r = %g, expected > 0.5", r1);
    if (!(r3 > 0.5)) fail_msg("cosmo3d: channel 0 mean vs density p3: r = %g, expected > 0.5", r3);
    double r0 = pearson(lag1, p[0], N), r2 = pearson(lag3, p[2], N);
    if (!(r0 > 0.4)) fail_msg("cosmo3d: lag-1 autocorrelation vs correlation length p0: r = %g, expected > 0.4", r0);
    if (!(r2 > 0.5)) fail_msg("cosmo3d: lag-3 autocorrelation vs tilt p2: r = %g, expected > 0.5", r2);
    synth_free(&s);
}

// Every class shows up over a few maps, background dominating; inside vortices the pressure
// channel dips and inside bands the water-vapour channel rises.
static void test_climate2d_mask_classes_and_signals(void **state)
{
    (void)state;
    enum { N = 8 };
    synth s;
    synth_make(&s, &kinds[K_CLIMATE], TL_SEED, N, SPLIT_TRAIN, 0.1);
    const int64_t area = s.d.tsize;
    int64_t count[3] = {0};
    double vapour[3] = {0}, pressure[3] = {0};
    for (int64_t i = 0; i < N; i++)
        for (int64_t p = 0; p < area; p++) {
            int32_t c = s.d.labels[i * area + p];
            count[c]++;
            vapour[c] += s.d.x[i * s.d.size + 0 * area + p];
            pressure[c] += s.d.x[i * s.d.size + 3 * area + p];
        }
    for (int c = 0; c < 3; c++) {
        if (count[c] == 0) fail_msg("climate2d: class %d never appears in %d maps", c, N);
        vapour[c] /= (double)count[c];
        pressure[c] /= (double)count[c];
    }
    double bg = (double)count[0] / (double)(N * area);
    if (!(bg > 0.75 && bg < 0.995))
        fail_msg("climate2d: background is %.3f of pixels, expected dominant but not all", bg);
    if (!(pressure[1] < pressure[0] - 0.5))
        fail_msg("climate2d: pressure inside vortices %g, background %g: no dip", pressure[1], pressure[0]);
    if (!(vapour[2] > vapour[0] + 0.5))
        fail_msg("climate2d: water vapour inside bands %g, background %g: no band", vapour[2], vapour[0]);
    synth_free(&s);
}

// Targets are the documented local functions of the clean inputs: the speed target is
// 2 tanh(0.6 |v|) - 1 of channels 1..3 at the same voxel, the compression target tanh(-0.8 div v)
// with central differences; and the gas density follows the log density.
static void test_nbody3d_targets_follow_inputs(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, &kinds[K_FIELDS], TL_SEED, 3, SPLIT_TRAIN, 0.0);
    const int64_t sz = kinds[K_FIELDS].size, vol = sz * sz * sz;
    for (int64_t i = 0; i < s.d.n; i++) {
        const float *x = s.d.x + i * s.d.size, *t = s.d.values + i * s.d.tsize;
        const float *vx = x + vol, *vy = x + 2 * vol, *vz = x + 3 * vol;
        double a[4096], b[4096];
        int m = 0;
        for (int64_t z = 0; z < sz; z++)
            for (int64_t y = 0; y < sz; y++)
                for (int64_t xx = 0; xx < sz; xx++) {
                    int64_t v = (z * sz + y) * sz + xx;
#define AT(f, dz, dy, dx) f[(((z + (dz) + sz) % sz) * sz + (y + (dy) + sz) % sz) * sz + (xx + (dx) + sz) % sz]
                    double speed = sqrt((double)vx[v] * vx[v] + (double)vy[v] * vy[v] + (double)vz[v] * vz[v]);
                    double want = 2.0 * tanh(0.6 * speed) - 1.0;
                    if (fabs(t[2 * vol + v] - want) > 1e-4)
                        fail_msg("nbody3d: sample %lld voxel %lld: speed target %g, expected %g", (long long)i,
                                 (long long)v, t[2 * vol + v], want);
                    double div = 0.5 * ((AT(vx, 0, 0, 1) - AT(vx, 0, 0, -1)) + (AT(vy, 0, 1, 0) - AT(vy, 0, -1, 0)) +
                                        (AT(vz, 1, 0, 0) - AT(vz, -1, 0, 0)));
#undef AT
                    want = tanh(-0.8 * div);
                    if (fabs(t[4 * vol + v] - want) > 1e-4)
                        fail_msg("nbody3d: sample %lld voxel %lld: compression target %g, expected %g", (long long)i,
                                 (long long)v, t[4 * vol + v], want);
                    if (m < 4096) a[m] = x[v], b[m] = t[v], m++;
                }
        double r = pearson(a, b, m);
        if (!(r > 0.7))
            fail_msg("nbody3d: sample %lld: gas density vs log density r = %g, expected > 0.7", (long long)i, r);
    }
    synth_free(&s);
}

// ---- the registry (src/data/synth_registry.c) ------------------------------------------------

// Every kind's name and id round-trip, and the first ids are recipe.h's SYNTH_*.
static void test_registry_names_round_trip(void **state)
{
    (void)state;
    assert_true(synth_kind_count() >= 6);
    for (int i = 0; i < synth_kind_count(); i++) {
        assert_non_null(synth_kind_choices[i]);
        assert_int_equal(synth_kind_find(synth_kind_name(i)), i);
    }
    assert_null(synth_kind_choices[synth_kind_count()]);
    assert_int_equal(synth_kind_find("nosuch"), -1);
    assert_string_equal(synth_kind_name(-1), "?");
    assert_string_equal(synth_kind_name(synth_kind_count()), "?");
    assert_int_equal(synth_kind_find("spirals"), SYNTH_SPIRALS);
    assert_int_equal(synth_kind_find("blobs"), SYNTH_BLOBS);
    assert_int_equal(synth_kind_find("shapes2d"), SYNTH_SHAPES2D);
    assert_int_equal(synth_kind_find("cosmo3d"), SYNTH_COSMO3D);
    assert_int_equal(synth_kind_find("climate2d"), SYNTH_CLIMATE2D);
    assert_int_equal(synth_kind_find("nbody3d"), SYNTH_NBODY3D);
    assert_int_equal(synth_kind_find("weather2d"), SYNTH_WEATHER2D);
    char list[512];
    synth_kind_list(list, sizeof list, ", ");
    assert_string_equal(list, "spirals, blobs, shapes2d, cosmo3d, climate2d, nbody3d, weather2d");
}

static const key_spec *child(const key_spec *keys, const char *name)
{
    for (int i = 0; keys[i].name; i++)
        if (!strcmp(keys[i].name, name)) return &keys[i];
    fail_msg("no key %s", name);
    return NULL;
}

// Whether word appears in text as a whole word.
static bool has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        bool start = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool end = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (start && end) return true;
    }
    return false;
}

// The schema's data.synthetic.kind choices are the registry's, its reference names every kind,
// and each key that only some kinds read applies, and says it applies, to exactly those kinds.
static void test_registry_is_the_schema(void **state)
{
    (void)state;
    const key_spec *keys = child(child(recipe_schema, "data")->children, "synthetic")->children;
    const key_spec *kind = child(keys, "kind");
    assert_ptr_equal(kind->choices, synth_kind_choices);
    recipe_t r;
    for (int id = 0; id < synth_kind_count(); id++) {
        char named[64];
        snprintf(named, sizeof named, "%s:", synth_kind_name(id));
        if (!strstr(kind->doc, named)) fail_msg("data.synthetic.kind's reference does not describe %s", named);
        memset(&r, 0, sizeof r);
        r.data.synthetic.kind = id;
        for (int k = 0; keys[k].name; k++) {
            if (!keys[k].applies) continue;
            bool applies = keys[k].applies(&r), said = has_word(keys[k].when, synth_kind_name(id));
            if (applies != said)
                fail_msg("data.synthetic.%s %s to %s, but its `when` says \"%s\"", keys[k].name,
                         applies ? "applies" : "does not apply", synth_kind_name(id), keys[k].when);
        }
    }
}

// Every kind describes a sample of the shapes it says, at the schema's default sizes.
static void test_registry_every_kind_describes(void **state)
{
    (void)state;
    for (int id = 0; id < synth_kind_count(); id++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml,
                 "data:\n  synthetic: {kind: %s%s}\nmodel:\n  layers:\n    - {type: relu}\n"
                 "optimizer: {lr: 0.1}\n",
                 synth_kind_name(id), synth_kind_reads(id, SYNTH_KEY_SIZE) ? ", size: 8" : "");
        recipe_t r;
        tl_recipe(&r, yaml, 0, NULL);
        gl_dataset d;
        data_describe(&r, &d);
        assert_true(d.size > 0 && d.tsize > 0);
        assert_int_equal(d.size, shape_size(&d.shape));
        if (d.target != TARGET_VALUES) assert_true(d.classes >= 2);
        if (synth_kind_max_classes(id) > 0) assert_true(d.classes <= synth_kind_max_classes(id));
        recipe_free(&r);
    }
}

// The generic tests once per kind, named "<kind>: <test>".
#define KIND_TEST(fn, k, name) {name ": " #fn, fn, NULL, NULL, &kinds[k]}
#define KIND_TESTS(k, name)                                                                             \
    KIND_TEST(test_shapes_and_ranges, k, name), KIND_TEST(test_same_seed_same_bytes, k, name),           \
        KIND_TEST(test_splits_differ, k, name), KIND_TEST(test_sample_independent_of_n, k, name),        \
        KIND_TEST(test_thread_count_independent, k, name)

int main(void)
{
    const struct CMUnitTest tests[] = {
        KIND_TESTS(K_SHAPES, "shapes2d"),
        KIND_TESTS(K_COSMO, "cosmo3d"),
        KIND_TESTS(K_CLIMATE, "climate2d"),
        KIND_TESTS(K_FIELDS, "nbody3d"),
        cmocka_unit_test(test_shapes2d_balanced_classes),
        cmocka_unit_test(test_shapes2d_more_than_6_classes_refused),
        cmocka_unit_test(test_shapes2d_shape_visible),
        cmocka_unit_test(test_cosmo3d_parameters_learnable),
        cmocka_unit_test(test_climate2d_mask_classes_and_signals),
        cmocka_unit_test(test_nbody3d_targets_follow_inputs),
        cmocka_unit_test(test_registry_names_round_trip),
        cmocka_unit_test(test_registry_is_the_schema),
        cmocka_unit_test(test_registry_every_kind_describes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
