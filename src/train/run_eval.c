// run_eval.c: one evaluation on the held-out split, recorded in the run log and reported: by
// `galley eval` (the checkpoint's weights, once) and by the loop (the progress line of the
// window since the last evaluation, the best values, the target).
#include <math.h>

#include "galley/check.h"
#include "train/run.h"

int run_target_met(const recipe_t *r, double v) {
    if (isnan(v)) return 0;
    if (!isnan(r->train.target.above)) return v >= r->train.target.above;
    return v <= r->train.target.below;
}

const char *run_target_words(const recipe_t *r, char *buf, size_t len) {
    const char *m = metrics_name(r->train.target.metric);
    if (!isnan(r->train.target.above)) snprintf(buf, len, "validation %s >= %g", m, r->train.target.above);
    else snprintf(buf, len, "validation %s <= %g", m, r->train.target.below);
    return buf;
}

// `galley eval`: the evaluation's line; the checkpoint's values are the result.
static void report_eval(gl_run *u, double secs) {
    const recipe_t *r = u->r;
    train_result *res = u->res;
    char vl[160], tw[128];
    metrics_format(&u->vm, vl, sizeof vl);
    fprintf(u->out, "evaluation at step %lld: val %s | %lld samples in %.2f s\n", (long long)u->step, vl,
            (long long)u->val.n, secs);
    res->last_loss = res->best_loss = metrics_value(&u->vm, METRIC_LOSS);
    res->best_loss_step = u->step;
    res->last_acc = metrics_value(&u->vm, METRIC_ACCURACY);
    if (r->train.target.metric != METRIC_NONE) {
        res->last = res->best = metrics_value(&u->vm, r->train.target.metric);
        u->best_step = u->step;
        if (run_target_met(r, res->last)) {
            res->target_reached = 1;
            fprintf(u->out, "target met: %s (%s %.4f)\n", run_target_words(r, tw, sizeof tw),
                    metrics_name(r->train.target.metric), res->last);
        }
    }
}

// The loop's evaluation (from te to te2): the progress line of the window since the last one,
// the best values, the target (reached: res->target_reached 1, the window's record first).
static void report_step(gl_run *u, double te, double te2) {
    const recipe_t *r = u->r;
    train_result *res = u->res;
    int64_t step = u->step, epoch = u->epoch;
    if (te2 - te > u->eval_max) u->eval_max = te2 - te;
    double elapsed = te2 - u->t_mark;
    char tl[160], vl[160], line[256], tw[128];
    metrics_format(&u->tm, tl, sizeof tl);
    metrics_format(&u->vm, vl, sizeof vl);
    if (r->train.eval_every > 0 || r->train.steps > 0)
        snprintf(line, sizeof line, "step %6lld/%lld (epoch %lld)", (long long)step, (long long)u->total_steps,
                 (long long)epoch);
    else
        snprintf(line, sizeof line, "epoch %3lld/%lld", (long long)epoch, (long long)u->epochs);
    // The share of this window's training time spent waiting for data (evaluation excluded).
    double train_s = elapsed - (te2 - te), data_s = u->ph[PHASE_DATA] - u->data_mark;
    char rate[32];
    format_rate((double)u->seen / (elapsed > 0 ? elapsed : 1e-9), rate, sizeof rate);
    if (u->seen == 0)  // no training since the last evaluation (a resumed run's missed one, run_loop.c)
        fprintf(u->out, "%s  val %s  %.2f s\n", line, vl, te2 - te);
    else
        fprintf(u->out, "%s  %s | val %s | lr %.4g | data %.1f%% | %s samples/s  %.2f s\n", line, tl, vl,
                lr_at(&u->lr, step - 1), train_s > 0 ? 100.0 * data_s / train_s : 0.0, rate, elapsed);
    u->data_mark = u->ph[PHASE_DATA];
    fflush(u->out);
    res->epochs_run = (int)epoch;
    res->last_loss = metrics_value(&u->vm, METRIC_LOSS);
    if (isnan(res->best_loss) || res->last_loss < res->best_loss) res->best_loss = res->last_loss, res->best_loss_step = step;
    res->last_acc = metrics_value(&u->vm, METRIC_ACCURACY);
    if (r->train.target.metric != METRIC_NONE) {
        double v = metrics_value(&u->vm, r->train.target.metric);
        int up = !isnan(r->train.target.above);
        if (isnan(res->best) || (up ? v > res->best : v < res->best)) res->best = v, u->best_step = step;
        res->last = v;
        if (res->target_reached == 0 && run_target_met(r, v)) {
            res->target_reached = 1;
            if (u->w.steps > 0) run_window_log(u, now_s(), false);
            fprintf(u->out, "target reached: %s at step %lld, epoch %lld (%s %.4f)\n",
                    run_target_words(r, tw, sizeof tw), (long long)step, (long long)epoch,
                    metrics_name(r->train.target.metric), v);
            return;
        }
    }
    metrics_reset(&u->tm);
    u->seen = 0;
    u->t_mark = u->t_now = now_s();
}

int run_evaluate(gl_run *u) {
    double te = now_s();
    if (train_evaluate(&u->c, u->lv, &u->vm, u->step, u->err)) return GL_EXIT_RUNTIME;
    double te2 = now_s();
    u->ph[PHASE_EVAL] += te2 - te;
    gl_logpoint p = {.step = u->step, .epoch = u->epoch, .time = te2 - u->t_start,
                     .loss = metrics_value(&u->vm, METRIC_LOSS), .seconds = te2 - te};
    metric_set_from(&p.m, &u->vm);
    runlog_eval(&u->lg, &p);
    if (u->opts->evaluate) {
        report_eval(u, te2 - te);
    } else {
        u->eval_step = u->step;
        report_step(u, te, te2);
        run_mllog_eval(u, te, te2);
    }
    return GL_EXIT_OK;
}
