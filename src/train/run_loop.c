// run_loop.c: the loop. Step (run_step.c), record the progress, checkpoint every N steps or
// minutes, evaluate each epoch or every eval_every steps (run_eval.c), until the last step, the
// target, or a stop (a signal or train.time_limit: a checkpoint, exit 4). A resumed run first
// takes the evaluation its checkpoint lacked (evaluate_missed). Every rank takes the same
// decisions at the same step: train_step sums the stop and checkpoint flags over ranks.
#include <signal.h>

#include "galley/check.h"
#include "galley/prof.h"
#include "train/run.h"
#include "train/run_hang.h"

void run_start(gl_run *u) {
    const gl_ckpt_state *ck = &u->ck;
    train_result *res = u->res;
    u->step = ck->step, u->skipped = ck->skipped, u->seen = 0, u->seen_total = 0, u->best_step = ck->best_step;
    u->eval_step = ck->evaluated ? ck->step : -1;
    u->samples_base = ck->samples;
    u->seconds_base = ck->train_seconds;
    u->epoch = u->step / u->steps_per_epoch + 1;
    res->best = ck->best, res->best_loss = ck->best_loss, res->best_loss_step = ck->best_loss_step;
    res->epochs_run = ck->epochs_run;
    // A checkpoint whose best value meets the target is of a run that reached it (and stopped
    // there, or ended with it): run_loop trains no further, and the run ends reached (exit 0).
    if (res->target_reached == 0 && run_target_met(u->r, res->best)) res->target_reached = 1;
    for (int i = 0; i < PHASE_COUNT; i++) u->ph[i] = 0;
    u->t_start = now_s(), u->t_mark = u->t_start, u->t_now = u->t_start, u->data_mark = 0, u->t_ckpt = u->t_start;
    // The CPU's idle threads spin long only while the cores are not shared and it measures faster (cpu_spin.c).
    cpu_spin_start(&u->spin, u->be->device ? 1 : u->threads, u->t_start);
    u->step_max = 0, u->eval_max = 0, u->ckpt_s = (double)u->g.nparams * 12.0 / 100e6 + 0.05;  // until measured
    u->stopped_by = NULL;
    u->w.t0 = u->t_start;
    metrics_reset(&u->tm);
    run_mllog_start(u);
}

// Cumulative phase times as of `now` (OTHER: the rest of the wall time since t_start).
static void phases_at(double *dst, const double *ph, double t_start, double now) {
    double known = 0;
    for (int i = 0; i < PHASE_OTHER; i++) dst[i] = ph[i], known += ph[i];
    dst[PHASE_OTHER] = (now - t_start) - known;
}

void run_window_log(gl_run *u, double now, bool print) {
    train_window *w = &u->w;
    const double *ph = u->ph;
    int64_t step = u->step;
    double secs = (now - w->t0) - (ph[PHASE_EVAL] - w->eval0);
    gl_logpoint p = {.step = step, .epoch = u->epoch, .time = now - u->t_start,
                     .loss = metrics_value(&w->m, METRIC_LOSS), .lr = lr_at(&u->lr, step - 1),
                     .samples_per_s = secs > 0 ? (double)w->samples / secs : 0};
    metric_set_from(&p.m, &w->m);
    phases_at(p.phase, ph, u->t_start, now);
    runlog_train(&u->lg, &p, print);
    metrics_reset(&w->m);
    w->samples = w->steps = 0;
    w->t0 = runlog_now();
    w->eval0 = ph[PHASE_EVAL];
}

// A metrics record every log.every steps (with a plain line unless on a terminal), at the end,
// and with log.every 0 at each evaluation; a live line on a terminal in between.
static void log_progress(gl_run *u, int due, int last) {
    gl_runlog *lg = &u->lg;
    int logged = lg->every > 0 && u->step % lg->every == 0;
    if (logged || ((last || u->stopped_by || (lg->every == 0 && due)) && u->w.steps > 0)) {
        run_window_log(u, u->t_now, logged);
        u->t_now = u->w.t0;
    } else if (runlog_live_due(lg, u->t_now)) {
        gl_logpoint p = {.step = u->step, .epoch = u->epoch, .epoch_step = (u->step - 1) % u->steps_per_epoch + 1,
                         .epoch_steps = u->steps_per_epoch, .time = u->t_now - u->t_start,
                         .loss = metrics_value(&u->tm, METRIC_LOSS),
                         .samples_per_s = u->t_now > u->t_mark ? (double)u->seen / (u->t_now - u->t_mark) : 0};
        metric_set_from(&p.m, &u->tm);
        runlog_live(lg, &p, u->t_now);
    }
}

// The checkpoint of this step, written by rank 0 (every rank learns the outcome): 0 or -1.
static int save(gl_run *u, int64_t epoch, double *secs) {
    run_ckpt_fill(u, epoch);  // run_hang.c: a hang's checkpoint is filled alike
    prof_push("checkpoint");
    int rc = train_save(&u->c, &u->ck, u->out, u->err, secs);
    prof_pop();
    u->ph[PHASE_CKPT] += *secs;
    return rc;
}

// The last checkpoint: at the end (checkpoint.at_end), and always when stopped early.
static int save_last(gl_run *u) {
    const char *stopped_by = u->stopped_by;
    int64_t step = u->step;
    bool trained = step > u->ck.step;
    // A run that only took the evaluation its checkpoint lacked writes that checkpoint again with
    // it (no new file, whatever checkpoint.at_end says): the next resume has nothing left to do.
    bool completed = !trained && u->eval_step == step && !u->ck.evaluated;
    if (!stopped_by && !completed && !(u->r->checkpoint.at_end && trained)) return GL_EXIT_OK;
    double secs;
    if (save(u, step > 0 ? (step - 1) / u->steps_per_epoch + 1 : 1, &secs)) return GL_EXIT_RUNTIME;
    if (!stopped_by) return GL_EXIT_OK;
    int sig = train_signal_pending();
    const char *why = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : stopped_by;
    fprintf(u->out, "stopped by %s at step %lld (epoch %lld) with a checkpoint; to continue, run the same "
                    "command with --resume auto (exit code %d)\n",
            why, (long long)step, (long long)u->epoch, GL_EXIT_STOPPED);
    return GL_EXIT_STOPPED;
}

// Whether the loop evaluates after step: every train.eval_every steps, else at each epoch's end.
static int eval_due(const gl_run *u, int64_t step) {
    int64_t every = u->r->train.eval_every > 0 ? u->r->train.eval_every : u->steps_per_epoch;
    return step % every == 0;
}

// The evaluation a resumed checkpoint lacks: the run that wrote it stopped (a signal,
// train.time_limit, a hang, a crash) after a step due for one and before it ran, the last step's
// included. It runs first, so the records hold it as the uninterrupted run's do.
static int evaluate_missed(gl_run *u, bool *done) {
    *done = false;
    if (u->step == 0 || u->eval_step == u->step || !(eval_due(u, u->step) || u->step >= u->total_steps))
        return GL_EXIT_OK;
    fprintf(u->out, "evaluating step %lld first: the run that wrote the checkpoint stopped before its evaluation\n",
            (long long)u->step);
    *done = true;
    u->epoch = (u->step - 1) / u->steps_per_epoch + 1;  // the step's epoch, as the loop evaluates it (not the next)
    return run_evaluate(u);
}

int run_loop(gl_run *u) {
    const recipe_t *r = u->r;
    bool missed;
    int code = evaluate_missed(u, &missed);
    if (code != GL_EXIT_OK) return code;
    if (u->res->target_reached == 1 && missed) return save_last(u);  // reached at that evaluation
    if (u->res->target_reached == 1) {
        char tw[128];
        fprintf(u->out, "nothing to train: the checkpoint's run reached its target (%s: %s %.4f at step %lld)\n",
                run_target_words(r, tw, sizeof tw), metrics_name(r->train.target.metric), u->res->best,
                (long long)u->best_step);
        return save_last(u);
    }
    if (u->step >= u->total_steps && !missed)
        fprintf(u->out, "nothing to train: the checkpoint is at step %lld and the run has %lld steps; raise "
                        "train.steps or train.epochs to go on\n", (long long)u->step, (long long)u->total_steps);
    while (u->step < u->total_steps) {
        mllog_epoch(&u->ml, now_s(), u->step / u->steps_per_epoch + 1, true);
        if ((code = run_step(u)) != GL_EXIT_OK) return code;
        if (u->opts->between_steps) u->opts->between_steps(u->opts->between_arg);  // galley sweep's coordinator
        int epoch_end = u->step % u->steps_per_epoch == 0;
        if (epoch_end) mllog_epoch(&u->ml, u->t_now, u->epoch, false);
        int due = eval_due(u, u->step);
        int last = u->step >= u->total_steps;
        if (u->c.flags[FLAG_SIGNAL] > 0) u->stopped_by = "a signal";
        else if (u->c.flags[FLAG_TIME] > 0) u->stopped_by = "train.time_limit";
        log_progress(u, due, last);
        if (u->stopped_by) break;
        int every = (r->checkpoint.every_steps > 0 && u->step % r->checkpoint.every_steps == 0) ||
                    u->c.flags[FLAG_CKPT] > 0;
        if (every && !last) {
            double secs;
            int rc = save(u, u->epoch, &secs);
            u->t_ckpt = now_s();
            if (secs > u->ckpt_s) u->ckpt_s = secs;
            if (rc) return GL_EXIT_RUNTIME;
        }
        if (!due && !last) continue;
        if ((code = run_evaluate(u)) != GL_EXIT_OK) return code;
        if (u->res->target_reached == 1) break;  // reached at this evaluation (it can be reached only once)
    }
    return save_last(u);
}
