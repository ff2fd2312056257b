// doctor_compute.c: the compute probe: GFLOP/s of a GEMM and of a 3x3 convolution through the
// backend training uses (gl_backend's dense_forward and conv_forward), so a rank on a slow or
// shared core, or a throttled GPU, shows up before the job does.
//
// Each kernel runs in trials of at least 40 ms (100 ms without --quick; longer than the
// scheduler's period, so a core shared with another process shows its share) and the best
// trial counts: a passing disturbance does not flag a rank, a lasting one does.
#include <stdlib.h>

#include "dist/dist_internal.h"
#include "doctor/doctor.h"
#include "galley/check.h"

typedef struct {
    int trials;
    double trial_s;
} probe_plan;

// Fills n floats of backend memory with small values (zeros could take fast paths).
static float *backend_floats(const gl_backend *be, int64_t n) {
    float *dev = be->mem_alloc(sizeof(float) * (size_t)n);
    if (!dev) gl_die(GL_EXIT_RUNTIME, "free memory on this node", "galley doctor: cannot allocate %lld floats for the compute probe", (long long)n);
    float *host = gl_xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) host[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    be->upload(dev, host, sizeof(float) * (size_t)n);
    free(host);
    return dev;
}

typedef void (*kernel_fn)(const gl_backend *be, void *args);

// Best GFLOP/s of `flops` per call over the plan's trials (one untimed call first).
static double best_rate(const gl_backend *be, kernel_fn k, void *args, double flops, const probe_plan *p) {
    k(be, args);
    be->sync();
    double best = 0;
    for (int t = 0; t < p->trials; t++) {
        double t0 = dist_now(), dt = 0;
        int reps = 0;
        do {
            k(be, args);
            be->sync();
            reps++;
            dt = dist_now() - t0;
        } while (dt < p->trial_s);
        double rate = flops * reps / dt / 1e9;
        if (rate > best) best = rate;
    }
    return best;
}

typedef struct {
    int64_t n;
    float *x, *w, *y;
} gemm_args;

// y[N,N] = x[N,N] . w[N,N]^T
static void gemm_call(const gl_backend *be, void *a) {
    gemm_args *g = a;
    be->dense_forward(g->n, g->n, g->n, g->x, g->w, NULL, g->y);
}

typedef struct {
    gl_conv_geom g;
    float *x, *w, *b, *y, *scratch;
    int64_t scratch_floats;
} conv_args;

static void conv_call(const gl_backend *be, void *a) {
    conv_args *c = a;
    be->conv_forward(&c->g, c->x, c->w, c->b, c->y, c->scratch, c->scratch_floats);
}

// A 3x3 convolution, padding 1: [n, 64, s, s] -> [n, 64, s, s].
static gl_conv_geom conv_geom(int64_t n, int64_t s) {
    gl_conv_geom g = {.nd = 2, .n = n, .c = 64, .f = 64, .groups = 1};
    int64_t in[3] = {1, s, s}, k[3] = {1, 3, 3}, p[3] = {0, 1, 1};
    for (int j = 0; j < 3; j++) g.in[j] = g.out[j] = in[j], g.k[j] = k[j], g.s[j] = g.d[j] = 1, g.p[j] = p[j];
    return g;
}

void doctor_compute_probe(const gl_backend *be, int threads, int quick, doctor_rank *me) {
    if (be->set_threads) be->set_threads(threads);
    me->threads = threads;
    probe_plan plan = {quick ? 4 : 5, quick ? 0.04 : 0.1};

    gemm_args g = {.n = quick ? 512 : 1024};
    g.x = backend_floats(be, g.n * g.n), g.w = backend_floats(be, g.n * g.n), g.y = backend_floats(be, g.n * g.n);
    me->gemm = best_rate(be, gemm_call, &g, 2.0 * g.n * g.n * g.n, &plan);
    be->mem_free(g.x), be->mem_free(g.w), be->mem_free(g.y);

    conv_args c = {.g = conv_geom(quick ? 4 : 8, quick ? 32 : 56)};
    const gl_conv_geom *cg = &c.g;
    int64_t plane = cg->out[1] * cg->out[2];
    c.x = backend_floats(be, cg->n * cg->c * plane);
    c.w = backend_floats(be, cg->f * cg->c * 9);
    c.b = backend_floats(be, cg->f);
    c.y = backend_floats(be, cg->n * cg->f * plane);
    c.scratch_floats = be->own_conv_workspace ? 0 : cg->n * (cg->c * 9 + cg->f) * plane;
    c.scratch = c.scratch_floats ? backend_floats(be, c.scratch_floats) : NULL;
    me->conv = best_rate(be, conv_call, &c, 2.0 * cg->n * cg->f * plane * cg->c * 9, &plan);
    be->mem_free(c.x), be->mem_free(c.w), be->mem_free(c.b), be->mem_free(c.y);
    if (c.scratch) be->mem_free(c.scratch);
}
