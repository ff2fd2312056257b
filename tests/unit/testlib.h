// testlib.h: helpers shared by the unit tests (header-only; every function is static inline so
// a test that uses only some of them still compiles without warnings).
//
//   tl_write_temp      a temp file "/tmp/galley_test_XXXXXX.yaml" holding some text
//   tl_tmpdir_*        a fresh temp directory, and its removal
//   tl_recipe_try      recipe_load on YAML text, errors captured as a string
//   tl_recipe          same, but the recipe must load (the test fails with the messages otherwise)
//   tl_model_*         recipe -> graph_build -> arena -> graph_bind, and the matching frees
//   tl_fill_*          deterministic test data from rng (purpose RNG_TEST)
//   tl_fd_grad         central-difference gradient of a scalar function w.r.t. a float buffer
//   tl_check_grad      analytic vs numeric gradient, failing with the first bad element
//   tl_guarded         a float buffer against a page no one may read (kernels' bounds), and its release
#ifndef GALLEY_TESTLIB_H
#define GALLEY_TESTLIB_H

#include <setjmp.h>  // cmocka needs these three before its header
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "galley/arena.h"
#include "galley/backend.h"
#include "galley/graph.h"
#include "galley/layer.h"
#include "galley/recipe.h"
#include "galley/rng.h"

#define TL_SEED 20240611u

// ---- files and recipes ------------------------------------------------------------------------

// Writes text to a fresh temp file ending in .yaml; path receives its name (caller unlinks it).
static inline void tl_write_temp(char path[static 64], const char *text)
{
    snprintf(path, 64, "/tmp/galley_test_XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    if (fd < 0) fail_msg("mkstemps failed");
    size_t len = strlen(text);
    ssize_t wrote = write(fd, text, len);
    close(fd);
    if (wrote != (ssize_t)len) fail_msg("short write to %s", path);
}

// A fresh directory "/tmp/galley_TAG_XXXXXX" in dir (0, or -1), and its removal with everything in it.
static inline int tl_tmpdir_make(char dir[static 64], const char *tag)
{
    snprintf(dir, 64, "/tmp/galley_%s_XXXXXX", tag);
    return mkdtemp(dir) ? 0 : -1;
}

static inline int tl_tmpdir_remove(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

// A string stream (open_memstream); tl_stream_close returns the text (caller frees).
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
} tl_stream;

static inline FILE *tl_stream_open(tl_stream *s)
{
    s->buf = NULL;
    s->len = 0;
    s->f = open_memstream(&s->buf, &s->len);
    if (!s->f) fail_msg("open_memstream failed");
    return s->f;
}

static inline char *tl_stream_close(tl_stream *s)
{
    fclose(s->f);
    s->f = NULL;
    return s->buf;
}

// Loads YAML text (written to a temp file, removed afterwards). Returns recipe_load's result;
// *errors gets everything it wrote to its error stream (caller frees) and, when path is not
// NULL, path gets the temp file's name (as the messages show it). The caller recipe_free()s r
// whatever the result.
static inline int tl_recipe_try(recipe_t *r, const char *yaml, int nov, char *const *ov, char **errors,
                                char *path)
{
    char tmp[64];
    tl_write_temp(tmp, yaml);
    tl_stream s;
    int rc = recipe_load(r, tmp, nov, ov, tl_stream_open(&s));
    char *text = tl_stream_close(&s);
    unlink(tmp);
    if (path) memcpy(path, tmp, sizeof tmp);
    if (errors) *errors = text;
    else free(text);
    return rc;
}

// Loads YAML text that must be a valid recipe.
static inline void tl_recipe(recipe_t *r, const char *yaml, int nov, char *const *ov)
{
    char *errors = NULL;
    if (tl_recipe_try(r, yaml, nov, ov, &errors, NULL) != 0) {
        char copy[2048];
        snprintf(copy, sizeof copy, "%s", errors);
        free(errors);
        recipe_free(r);
        fail_msg("recipe did not load:\n%s\n--- recipe ---\n%s", copy, yaml);
    }
    free(errors);
}

// A minimal valid recipe around a model.layers fragment: each line "    - {type: ...}\n".
static inline char *tl_recipe_text(const char *layers)
{
    static const char head[] = "model:\n  layers:\n";
    static const char tail[] = "optimizer:\n  lr: 0.1\n";
    size_t n = strlen(head) + strlen(layers) + strlen(tail) + 1;
    char *s = malloc(n);
    if (!s) abort();  // (fail_msg is not noreturn, and the compiler would see a NULL write)
    snprintf(s, n, "%s%s%s", head, layers, tail);
    return s;
}

// ---- models -----------------------------------------------------------------------------------

typedef struct {
    recipe_t r;
    gl_graph g;
    gl_arena a;
} tl_model;

// Builds and binds the model of a model.layers fragment for the given input shape and batch, on
// backend be; keep_grads: every output keeps its own gradient (graph_keep_grads), for tests that
// read them after backward. Returns 0, or -1 with the recipe or graph_build messages in *errors
// (caller frees; NULL: not wanted) and nothing left to free.
static inline int tl_model_try_keep(tl_model *m, const char *layers, gl_shape input, int64_t batch,
                                    const gl_backend *be, bool keep_grads, char **errors)
{
    memset(m, 0, sizeof *m);
    char *yaml = tl_recipe_text(layers);
    char *text = NULL;
    int rc = tl_recipe_try(&m->r, yaml, 0, NULL, &text, NULL);
    free(yaml);
    if (rc == 0) {
        free(text);
        tl_stream s;
        rc = graph_build(&m->g, &m->r, input, batch, be, tl_stream_open(&s));
        text = tl_stream_close(&s);
        if (rc != 0) graph_free(&m->g);
    }
    if (rc != 0) {
        recipe_free(&m->r);
        if (errors) *errors = text;
        else free(text);
        return -1;
    }
    free(text);
    if (errors) *errors = NULL;
    if (keep_grads) graph_keep_grads(&m->g);
    arena_init(&m->a, m->g.bytes);
    graph_bind(&m->g, &m->a);
    return 0;
}

// tl_model_try_keep with the gradients shared by lifetime, as in training.
static inline int tl_model_try_on(tl_model *m, const char *layers, gl_shape input, int64_t batch,
                                  const gl_backend *be, char **errors)
{
    return tl_model_try_keep(m, layers, input, batch, be, false, errors);
}

// tl_model_try_on the CPU backend.
static inline int tl_model_try(tl_model *m, const char *layers, gl_shape input, int64_t batch, char **errors)
{
    return tl_model_try_on(m, layers, input, batch, backend_cpu(), errors);
}

// Same, for a model that must build (the test fails with the messages otherwise).
static inline void tl_model_build(tl_model *m, const char *layers, gl_shape input, int64_t batch)
{
    char *errors = NULL;
    if (tl_model_try(m, layers, input, batch, &errors) != 0) {
        char copy[2048];
        snprintf(copy, sizeof copy, "%s", errors);
        free(errors);
        fail_msg("model did not build:\n%s\n--- layers ---\n%s", copy, layers);
    }
}

static inline void tl_model_free(tl_model *m)
{
    arena_free(&m->a);
    graph_free(&m->g);
    recipe_free(&m->r);
}

// Index of the layer named name (fails the test if there is none).
static inline int tl_layer(const gl_graph *g, const char *name)
{
    for (int i = 0; i < g->nlayers; i++)
        if (!strcmp(g->layers[i].cfg->name, name)) return i;
    fail_msg("no layer named '%s'", name);
    return -1;
}

// ---- test data --------------------------------------------------------------------------------

// x[i] uniform in [lo, hi), a pure function of (stream, i).
static inline void tl_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t stream)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * rng_uniform(TL_SEED, RNG_TEST, stream, (uint64_t)i);
}

// |x[i]| uniform in [min_abs, max_abs) with a random sign: keeps values away from the kink of
// relu-like functions, so a finite difference of size < min_abs never crosses it.
static inline void tl_fill_away_from_zero(float *x, int64_t n, float min_abs, float max_abs, uint64_t stream)
{
    for (int64_t i = 0; i < n; i++) {
        float mag = min_abs + (max_abs - min_abs) * rng_uniform(TL_SEED, RNG_TEST, stream, 2 * (uint64_t)i);
        x[i] = rng_uniform(TL_SEED, RNG_TEST, stream, 2 * (uint64_t)i + 1) < 0.5f ? -mag : mag;
    }
}

// ---- gradients --------------------------------------------------------------------------------

typedef double (*tl_loss_fn)(void *ctx);

// numeric[i] = (f(x + e_i h) - f(x - e_i h)) / (actual step), for i < n, restoring x.
static inline void tl_fd_grad(float *x, int64_t n, float eps, tl_loss_fn f, void *ctx, double *numeric)
{
    for (int64_t i = 0; i < n; i++) {
        float keep = x[i];
        float hi = keep + eps, lo = keep - eps;
        x[i] = hi;
        double fp = f(ctx);
        x[i] = lo;
        double fm = f(ctx);
        x[i] = keep;
        numeric[i] = (fp - fm) / ((double)hi - (double)lo);  // the step floats actually took
    }
}

// Fails on the first i with |analytic - numeric| > atol + rtol * max(|analytic|, |numeric|).
// Returns max |numeric| so callers can check the comparison was not vacuous (all zeros).
static inline double tl_check_grad(const char *what, const float *analytic, const double *numeric, int64_t n,
                                   double rtol, double atol)
{
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double a = analytic[i], d = numeric[i];
        double tol = atol + rtol * fmax(fabs(a), fabs(d));
        if (!(fabs(a - d) <= tol))
            fail_msg("%s[%lld]: analytic gradient %.7g, finite difference %.7g (difference %.3g > tolerance %.3g)",
                     what, (long long)i, a, d, fabs(a - d), tol);
        if (fabs(d) > mx) mx = fabs(d);
    }
    return mx;
}

// ---- guarded buffers ----------------------------------------------------------------------------

// A buffer of n floats in its own mapping, with an inaccessible page right after it (at_start:
// right before it): a kernel that reads or writes past it faults.
typedef struct {
    void *map;
    size_t len;
} tl_guard;

static inline float *tl_guarded(size_t n, int at_start, tl_guard *gm)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (n * sizeof(float) + page - 1) / page * page;
    gm->len = bytes + 2 * page;
    char *m = mmap(NULL, gm->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    gm->map = m;
    assert_int_equal(mprotect(m, page, PROT_NONE), 0);
    assert_int_equal(mprotect(m + page + bytes, page, PROT_NONE), 0);
    return (float *)(at_start ? m + page : m + page + bytes - n * sizeof(float));
}

static inline void tl_guard_free(tl_guard *gm) { munmap(gm->map, gm->len); }

#endif
