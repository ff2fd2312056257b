// sweep_sched.c: which trial trains next, at which rung. Grid and random: every trial once at
// the one budget. ASHA (asynchronous successive halving, Li et al. 2018): a free group first
// takes a promotion, from the highest rung down: a trial among the top 1/eta of the trials
// finished at its rung (failed ones count, as the worst) that has not gone on yet trains on to
// the next rung's budget from its checkpoint; with no promotion due, a new trial starts at the
// first rung. A run stopped by a signal or the time limit (paused) is always taken first.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "sweep/sweep_internal.h"

void sched_init(sweep_sched *sc, const sweep_spec *s) {
    memset(sc, 0, sizeof *sc);
    sc->s = s;
    sc->n = sweep_ntrials(s);
    sc->t = gl_xmalloc(sizeof(sweep_trial) * (size_t)sc->n);
    memset(sc->t, 0, sizeof(sweep_trial) * (size_t)sc->n);
    for (int64_t i = 0; i < sc->n; i++)
        for (int k = 0; k < SWEEP_MAX_RUNGS; k++) sc->t[i].metric[k] = NAN;
}

void sched_free(sweep_sched *sc) {
    free(sc->t);
    sc->t = NULL;
}

bool sched_better(const sweep_spec *s, double a, double b) {
    if (isnan(a)) return false;
    if (isnan(b)) return true;
    return s->maximize ? a > b : a < b;
}

// Trials that finished rung k (failed ones too: a diverged trial is the worst at its rung).
static int64_t rung_members(const sweep_sched *sc, int k, int64_t *ids) {
    int64_t n = 0;
    for (int64_t i = 0; i < sc->n; i++) {
        const sweep_trial *t = &sc->t[i];
        if (!isnan(t->metric[k]) || (t->state == TS_FAILED && t->rung == k)) ids[n++] = i;
    }
    // Best first; ties by id (a stable, deterministic order). Insertion sort: rungs are small.
    for (int64_t i = 1; i < n; i++) {
        int64_t x = ids[i], j = i;
        while (j > 0) {
            int64_t y = ids[j - 1];
            double mx = sc->t[x].metric[k], my = sc->t[y].metric[k];
            if (!(sched_better(sc->s, mx, my) || (!sched_better(sc->s, my, mx) && x < y))) break;
            ids[j] = y, j--;
        }
        ids[j] = x;
    }
    return n;
}

static int asha_promotion(const sweep_sched *sc, sweep_job *job) {
    const sweep_spec *s = sc->s;
    int64_t *ids = gl_xmalloc(sizeof(int64_t) * (size_t)(sc->n + 1));
    int found = 0;
    for (int k = s->nrungs - 2; k >= 0 && !found; k--) {
        int64_t n = rung_members(sc, k, ids), top = n / s->budget.reduction_factor;
        for (int64_t i = 0; i < top && !found; i++) {
            const sweep_trial *t = &sc->t[ids[i]];
            if (t->state == TS_DONE && t->rung == k) job->trial = ids[i], job->rung = k + 1, found = 1;
        }
    }
    free(ids);
    return found;
}

int sched_next(sweep_sched *sc, sweep_job *job) {
    for (int64_t i = 0; i < sc->n; i++)
        if (sc->t[i].state == TS_PAUSED) return job->trial = i, job->rung = sc->t[i].rung, 1;
    if (sc->s->method == SWEEP_ASHA && asha_promotion(sc, job)) return 1;
    if (sc->next < sc->n) return job->trial = sc->next, job->rung = 0, 1;
    for (int64_t i = 0; i < sc->n; i++)
        if (sc->t[i].state == TS_RUNNING) return 0;
    return -1;
}

void sched_start(sweep_sched *sc, sweep_job job) {
    sweep_trial *t = &sc->t[job.trial];
    t->state = TS_RUNNING;
    t->rung = job.rung;
    if (job.trial >= sc->next) sc->next = job.trial + 1;
}

void sched_end(sweep_sched *sc, sweep_job job, int state, double metric, int64_t steps, double seconds, int code,
               const char *msg) {
    sweep_trial *t = &sc->t[job.trial];
    t->state = state;
    t->rung = job.rung;
    t->code = code;
    if (steps > t->steps) t->steps = steps;
    t->seconds += seconds;
    if (state == TS_DONE) t->metric[job.rung] = metric;
    snprintf(t->msg, sizeof t->msg, "%s", msg ? msg : "");
}

void sched_pause_running(sweep_sched *sc) {
    for (int64_t i = 0; i < sc->n; i++)
        if (sc->t[i].state == TS_RUNNING) sc->t[i].state = TS_PAUSED;
}

const char *sched_state_name(const sweep_sched *sc, int64_t trial) {
    const sweep_trial *t = &sc->t[trial];
    switch (t->state) {
    case TS_PENDING: return "pending";
    case TS_RUNNING: return "running";
    case TS_PAUSED: return "paused";
    case TS_FAILED: return "failed";
    default: return t->rung == sc->s->nrungs - 1 ? "done" : "stopped";
    }
}

double sched_metric(const sweep_sched *sc, int64_t trial, int *rung) {
    const sweep_trial *t = &sc->t[trial];
    for (int k = SWEEP_MAX_RUNGS - 1; k >= 0; k--)
        if (!isnan(t->metric[k])) return *rung = k, t->metric[k];
    return *rung = -1, NAN;
}

int64_t sched_best(const sweep_sched *sc) {
    int64_t best = -1;
    int best_rung = -1;
    for (int64_t i = 0; i < sc->n; i++) {
        int k;
        double m = sched_metric(sc, i, &k);
        if (k < 0) continue;
        if (k > best_rung || (k == best_rung && sched_better(sc->s, m, sc->t[best].metric[k])))
            best = i, best_rung = k;
    }
    return best;
}
