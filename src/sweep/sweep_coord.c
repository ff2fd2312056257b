// sweep_coord.c: the coordinator, on world rank 0, which also trains in group 0. It owns the
// scheduler and the journal: a group's leader asks for work with its last run's result; the
// coordinator records the result (journal first), then answers run this trial at this rung, or
// stop; a group with nothing to do yet (ASHA waiting for a rung to fill) is answered later. While
// group 0 trains, the coordinator answers between its steps (train_opts.between_steps), so other
// groups wait at most one step of group 0 (or its evaluation or data set-up).
#include <math.h>
#include <string.h>

#include "galley/check.h"
#include "galley/runlog.h"
#include "galley/train.h"
#include "sweep/sweep_run.h"

static double now(void) { return runlog_now(); }

// Seconds left of the sweep's time limit (0: no limit); below 1 s no run starts (a run stops itself in
// time: it gets the rest as its own train.time_limit).
static double time_left(sweep_ctx *x) {
    if (x->s->time_limit <= 0) return 0;
    return x->s->time_limit - (now() - x->t0);
}

static void record_result(sweep_ctx *x, int group, const sweep_msg *m) {
    double t = now();
    sweep_job job = {m->trial, m->rung};
    sched_end(&x->sc, job, m->state, m->metric, m->steps, m->seconds, m->code, m->msg);
    journal_end(&x->j, &x->sc, job, sweep_rung_budget(x->s, job.rung));
    if (m->state == TS_PAUSED && !x->stopping) x->stopping = true, x->stop_code = GL_EXIT_STOPPED;
    results_line(x->s, &x->sc, job, group, false, x->out);
    results_write(x->s, &x->sc, x->s->base_seed, x->err);
    x->overhead += now() - t;
}

// 1: *job to run now (started in the journal); 0: nothing yet; -1: stop (x->final_code says how).
static int assign(sweep_ctx *x, int group, sweep_job *job) {
    if (!x->stopping && (train_signal_pending() || x->signalled)) x->stopping = true, x->stop_code = GL_EXIT_STOPPED;
    if (!x->stopping && x->s->time_limit > 0 && time_left(x) < 1) {
        fprintf(x->out, "sweep: train.time_limit (%.0f s) reached: stopping\n", x->s->time_limit);
        x->stopping = true, x->stop_code = GL_EXIT_STOPPED;
    }
    if (x->stopping) return -1;
    double t = now();
    int r = sched_next(&x->sc, job);
    if (r == 1) {
        sched_start(&x->sc, *job);
        journal_start(&x->j, *job, group, sweep_rung_budget(x->s, job->rung));
        results_line(x->s, &x->sc, *job, group, true, x->out);
        x->assigned++;
    }
    x->overhead += now() - t;
    return r;
}

static void reply_for(sweep_ctx *x, int r, sweep_job job, sweep_msg *m) {
    memset(m, 0, sizeof *m);
    m->kind = r == 1 ? MSG_RUN : MSG_STOP;
    m->trial = job.trial;
    m->rung = job.rung;
    m->time_left = time_left(x);
    m->code = x->stopping ? x->stop_code : sched_best(&x->sc) >= 0 ? GL_EXIT_OK : GL_EXIT_RUNTIME;
}

// Answers every waiting group that can be answered now.
static void dispatch(sweep_ctx *x) {
    for (int g = 1; g < x->groups; g++) {
        if (!x->waiting[g]) continue;
        sweep_job job = {0, 0};
        int r = assign(x, g, &job);
        if (r == 0) continue;
        sweep_msg m;
        reply_for(x, r, job, &m);
        double t = now();
        msg_send(x->world, &m, g * (int)x->s->ranks_per_trial);
        x->overhead += now() - t;
        x->waiting[g] = false;
        if (r < 0) x->stopped++;
    }
}

void coord_poll(sweep_ctx *x) {
    sweep_msg m;
    int from, any = 0;
    while (msg_poll(x->world, &m, &from)) {
        int g = from / (int)x->s->ranks_per_trial;
        if (m.trial >= 0) record_result(x, g, &m);
        if (m.signalled) x->signalled = true;
        x->waiting[g] = true;
        any = 1;
    }
    bool waiting = false;
    for (int g = 1; g < x->groups; g++) waiting |= x->waiting[g];
    if (any || (waiting && (train_signal_pending() || x->signalled || x->s->time_limit > 0))) dispatch(x);
}

void coord_between_steps(void *arg) { coord_poll(arg); }

void coord_self(sweep_ctx *x, const sweep_msg *result, sweep_msg *reply) {
    if (result && result->trial >= 0) {
        record_result(x, 0, result);
        dispatch(x);
    }
    for (;;) {
        sweep_job job = {0, 0};
        int r = assign(x, 0, &job);
        if (r != 0) {
            reply_for(x, r, job, reply);
            return;
        }
        coord_poll(x);
        msg_nap();
    }
}

void coord_finish(sweep_ctx *x) {
    while (x->stopped < x->groups - 1) {
        coord_poll(x);
        dispatch(x);  // a signal or the end reaches the groups still waiting
        msg_nap();
    }
}
