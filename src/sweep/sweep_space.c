// sweep_space.c: a trial's values and overrides. A value is a pure function of the sweep seed,
// the trial id and the key's place in `space` (the counter-based generator, rng.h), so the same
// sweep file gives the same trials on any number of groups, in any order, after any resume.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/rng.h"
#include "sweep/sweep_internal.h"

// Uniform in [0, 1) with 53 random bits.
static double u01(const sweep_spec *s, int64_t trial, int i) {
    return (double)(rng_u64((uint64_t)s->seed, SWEEP_RNG_PURPOSE, (uint64_t)trial, (uint64_t)i) >> 11) * 0x1p-53;
}

static int64_t param_size(const sweep_param *p) {
    return p->kind == SP_CHOICE ? p->nchoices : p->kind == SP_INT ? (int64_t)(p->hi - p->lo) + 1 : p->points;
}

// Grid: trial id as a mixed-radix number, the last key changing fastest.
static int64_t grid_index(const sweep_spec *s, int64_t trial, int i) {
    for (int j = s->np - 1; j > i; j--) trial /= param_size(&s->p[j]);
    return trial % param_size(&s->p[i]);
}

static void format_num(const sweep_param *p, double v, char *buf, size_t len) {
    if (p->kind == SP_INT) snprintf(buf, len, "%lld", (long long)llround(v));
    else snprintf(buf, len, "%.6g", v);
}

void sweep_value(const sweep_spec *s, int64_t trial, int i, char *buf, size_t len) {
    const sweep_param *p = &s->p[i];
    int64_t k = -1;  // the index among finitely many values (choice, int, points)
    double u = 0;
    if (s->method == SWEEP_GRID) k = grid_index(s, trial, i);
    else u = u01(s, trial, i);
    if (p->kind == SP_CHOICE) {
        if (k < 0) k = (int64_t)(u * p->nchoices);
        if (p->quoted[k]) snprintf(buf, len, "\"%s\"", p->choice[k]);
        else snprintf(buf, len, "%s", p->choice[k]);
        return;
    }
    if (p->kind == SP_INT) {
        int64_t n = (int64_t)(p->hi - p->lo) + 1;
        if (k < 0) k = (int64_t)(u * (double)n);
        format_num(p, p->lo + (double)k, buf, len);
        return;
    }
    if (k >= 0) u = (double)k / (double)(p->points - 1);  // grid: the points, both ends included
    double v = p->kind == SP_LOGUNIFORM ? exp(log(p->lo) + u * (log(p->hi) - log(p->lo))) : p->lo + u * (p->hi - p->lo);
    format_num(p, v, buf, len);
}

int64_t sweep_trial_seed(const sweep_spec *s, int64_t trial, int64_t base_seed) {
    if (s->trial_seed == TRIAL_SEED_BASE) return base_seed;
    return (int64_t)(rng_u64((uint64_t)s->seed, SWEEP_RNG_PURPOSE, (uint64_t)trial, 1000) >> 33);
}

int64_t sweep_ntrials(const sweep_spec *s) {
    if (s->method != SWEEP_GRID) return s->trials;
    return s->trials > 0 && s->trials < s->grid_size ? s->trials : s->grid_size;
}

int64_t sweep_rung_budget(const sweep_spec *s, int rung) { return s->rung_budget[rung]; }

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *p = NULL;
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    GL_CHECK(n >= 0, "out of memory");
    return p;
}

int sweep_overrides(const sweep_spec *s, int64_t trial, int rung, int64_t base_seed, double time_left, bool for_best,
                    char ***ov) {
    char **a = gl_xmalloc(sizeof(char *) * (size_t)(s->noverrides + s->np + 7));
    int n = 0;
    for (int i = 0; i < s->noverrides; i++) a[n++] = xprintf("%s", s->overrides[i]);
    for (int i = 0; i < s->np; i++) {
        char v[256];
        sweep_value(s, trial, i, v, sizeof v);
        a[n++] = xprintf("%s=%s", s->p[i].key, v);
    }
    if (sweep_rung_budget(s, rung) > 0)
        a[n++] = xprintf("%s=%lld", s->budget.key == BUDGET_STEPS ? "train.steps" : "train.epochs",
                         (long long)sweep_rung_budget(s, rung));
    if (s->trial_seed == TRIAL_SEED_PER_TRIAL)
        a[n++] = xprintf("seed=%lld", (long long)sweep_trial_seed(s, trial, base_seed));
    if (!for_best) {
        a[n++] = xprintf("checkpoint.dir=%s/trials/%04lld/ckpt", s->dir_path, (long long)trial);
        a[n++] = xprintf("checkpoint.at_end=true");
        a[n++] = xprintf("log.files=true");  // the trial's result is read back from its metrics.jsonl
        if (time_left > 0) a[n++] = xprintf("train.time_limit=%.3f", time_left);
    }
    *ov = a;
    return n;
}

void sweep_overrides_free(char **ov, int n) {
    for (int i = 0; i < n; i++) free(ov[i]);
    free(ov);
}
