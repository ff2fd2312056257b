// run_finish.c: the end of a run, whatever ended it: notes on skipped samples and steps, the
// summary in the run log (runlog_finish: times per phase, memory, best values), the result,
// and the exit code (GL_EXIT_TARGET when the target was not reached).
#include <math.h>
#include <string.h>
#include <sys/resource.h>

#include "galley/check.h"
#include "train/run.h"

// What was skipped on the way: input samples (data.nonfinite: skip), fp16 steps.
static void finish_notes(gl_run *u) {
    char first[1024];
    int64_t k = loader_skipped(u->lt, first, sizeof first);
    if (k)
        fprintf(u->out, "galley: data.nonfinite: skip replaced %lld input samples holding NaN/Inf (first: %s)\n",
                (long long)k, first);
    if (u->c.ls.on && u->c.ls.skipped > 0)
        fprintf(u->out, "galley: fp16 loss scaling skipped %lld steps with overflowing gradients; the scale ended at "
                        "%g\n", (long long)u->c.ls.skipped, u->c.ls.scale);
}

int run_finish(gl_run *u, int code) {
    const recipe_t *r = u->r;
    train_result *res = u->res;
    finish_notes(u);
    if (code == GL_EXIT_RUNTIME && u->w.steps > 0)  // the steps before the failure, for the record
        run_window_log(u, now_s(), false);
    res->steps = u->step;
    res->seconds = now_s() - u->t_start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double t_train = res->seconds - u->ph[PHASE_EVAL] - u->ph[PHASE_CKPT];
    res->samples_per_s = t_train > 0 ? (double)u->seen_total / t_train : 0;
    gl_runsummary sum = {.exit_code = code, .steps = u->step, .epochs = res->epochs_run, .skipped = u->skipped,
                         .samples = u->seen_total, .wall = res->seconds, .samples_per_s = res->samples_per_s,
                         .peak_host_mib = ru.ru_maxrss / 1024.0, .peak_device_mib = NAN,
                         .on_device = u->be->device != 0,
                         .last_loss = res->last_loss, .best_loss = res->best_loss,
                         .best_loss_step = res->best_loss_step, .best_metric = r->train.target.metric,
                         .best = res->best, .best_step = u->best_step};
    memcpy(sum.phase, u->ph, sizeof u->ph);
    metric_set_from(&sum.last, &u->vm);
    metrics_format_iou(&u->vm, sum.iou, sizeof sum.iou);
    if (!u->be->device) cpu_spin_describe(&u->spin, sum.threads_note, sizeof sum.threads_note);
    input_stage_describe(&u->stage, sum.input_note, sizeof sum.input_note);
    graph_replay_describe(&u->g, sum.replay_note, sizeof sum.replay_note);
    optim_fuse_describe(&u->opt, sum.optim_note, sizeof sum.optim_note);
    if (code == GL_EXIT_OK && res->target_reached == 0) code = GL_EXIT_TARGET;
    sum.exit_code = code;
    run_mllog_stop(u, now_s(), &sum);
    sum.status = code == GL_EXIT_RUNTIME ? "failed" : code == GL_EXIT_STOPPED ? "stopped"
                 : res->target_reached == 1 ? "target reached"
                 : res->target_reached == 0 ? "target not reached" : "finished";
    runlog_finish(&u->lg, &sum);
    char tw[128];
    if (code == GL_EXIT_TARGET)
        fprintf(u->out, "target NOT reached: %s; best %.4f (exit code %d)\n", run_target_words(r, tw, sizeof tw),
                res->best, GL_EXIT_TARGET);
    return code;
}
