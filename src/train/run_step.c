// run_step.c: one step of the loop: this rank's stop and checkpoint wishes, the batch, the step
// (train_step.c: forward, loss, backward, sums over ranks), then the optimizer at the scheduled
// learning rate, or what train.nonfinite says when the loss or the gradients are not finite.
// Each phase is timed.
#include <math.h>

#include "galley/check.h"
#include "galley/prof.h"
#include "train/run.h"
#include "train/run_hang.h"

// This rank's stop and checkpoint wishes; the step sums them over ranks.
static void step_flags(const gl_run *u, double t0, double *flags) {
    const recipe_t *r = u->r;
    flags[FLAG_SIGNAL] = train_signal_pending() != 0;
    if (r->train.time_limit > 0) {
        // Stop when one more step, an evaluation and a checkpoint might not fit.
        double need = (t0 - u->t_start) + 2 * u->step_max + u->eval_max + 2 * u->ckpt_s;
        flags[FLAG_TIME] = need > r->train.time_limit;
    }
    flags[FLAG_CKPT] = u->d->rank == 0 && r->checkpoint.every_minutes > 0 &&
                       t0 - u->t_ckpt >= 60.0 * r->checkpoint.every_minutes;
}

// Where this rank's part went non-finite (every rank that has one says): the first layer whose
// output is not finite, else the loss itself. n: this rank's samples in the batch.
static void nonfinite_diagnose(const gl_run *u, int64_t n) {
    const gl_graph *g = &u->g;
    const gl_dist *d = u->d;
    int first = graph_first_nonfinite(g, n);
    char who[64] = "";
    if (d->world > 1) snprintf(who, sizeof who, "rank %d of %d: ", d->rank, d->world);
    // A fused activation overwrites its producer's output (graph_fuse_acts): a NaN that
    // relu turned into 0 hides, so the exact layer needs model.fuse: false.
    bool shared = first >= 0 && first + 1 < g->nlayers &&
                  (g->layers[first + 1].act_done || g->layers[first + 1].act_inplace);
    // A max pool that the convolution before it writes (graph_fuse_pools): that convolution's
    // own output is never written, so a NaN it made first shows at the pool.
    const layer_t *writer = NULL;
    for (int i = 0; first >= 0 && i < first; i++)
        if (g->layers[i].store_pool == &g->layers[first]) writer = &g->layers[i];
    char also[256] = "";
    // An add whose sum that layer stores as its output (graph_fuse_adds).
    const layer_t *sum = NULL;
    for (int i = first + 1; first >= 0 && i < g->nlayers; i++)
        if (g->layers[i].res_by == &g->layers[first]) sum = &g->layers[i];
    if (sum)
        snprintf(also, sizeof also, " or the add '%s' (model.layers[%d]) after it, whose sum it stores as its "
                 "output (model.fuse: false tells them apart)", sum->cfg->name, sum->cfg->index);
    else if (shared)
        snprintf(also, sizeof also, " or the activation after it, which shares its buffer (model.fuse: false tells "
                                    "them apart)");
    else if (writer)
        snprintf(also, sizeof also, " or '%s' (model.layers[%d]) before it, which writes it as it stores its own "
                 "(model.fuse: false tells them apart)", writer->cfg->name, writer->cfg->index);
    if (first >= 0)
        fprintf(u->err, "galley: %sthe first layer whose output is not finite is '%s' (model.layers[%d])%s\n",
                who, g->layers[first].cfg->name, g->layers[first].cfg->index, also);
    else
        fprintf(u->err, "galley: %severy layer's output is finite, so the loss itself overflowed (check "
                        "the targets)\n", who);
}

// The loss l was not finite on some rank (bad: on this one, whose part has n samples):
// skipped (train.nonfinite: skip) or the run fails. GL_EXIT_OK or GL_EXIT_RUNTIME.
static int step_nonfinite(gl_run *u, double l, int bad, int64_t n) {
    if (u->r->train.nonfinite == NONFINITE_SKIP) {
        u->skipped++;
        return GL_EXIT_OK;
    }
    if (bad) nonfinite_diagnose(u, n);
    if (u->d->rank == 0)
        fprintf(u->err, "galley: error: the loss became %g at step %lld (epoch %lld)%s\n"
                        "  hint: lower optimizer.lr, set optimizer.clip_norm, check the data, or set "
                        "train.nonfinite: skip\n",
                l, (long long)u->step, (long long)u->epoch, bad ? "" : " on another rank");
    return GL_EXIT_RUNTIME;
}

// A finite loss l: the step's metrics, then the optimizer (t3: when the step ended). A
// non-finite gradient norm leaves the weights untouched (optim_step skips it), but for the
// layers an update in backward reached first (optimizer.fuse): it is armed only with
// train.nonfinite: stop, so such a run ends here, saving nothing. GL_EXIT_OK or GL_EXIT_RUNTIME.
static int step_update(gl_run *u, double l, double t3) {
    train_ctx *c = &u->c;
    double v[GL_METRICS_PACKED];
    metrics_pack(&c->sm, v);
    metrics_add_packed(&u->tm, v);
    metrics_add_packed(&u->w.m, v);
    prof_push("optimizer");
    double norm = optim_step_scaled(&u->opt, &u->g, lr_at(&u->lr, u->step), c->ls.scale);
    prof_pop();
    u->t_now = now_s();
    // What ran inside backward (optim_fuse.c) counts as the optimizer's.
    u->ph[PHASE_OPTIM] += u->t_now - t3 + u->opt.fuse.seconds;
    u->ph[PHASE_BACKWARD] -= u->opt.fuse.seconds;
    u->opt.fuse.seconds = 0.0;
    if (c->ls.on && (isfinite(norm) || c->ls.scale > GL_LOSS_SCALE_MIN)) {
        // fp16: an overflow above the floor is the scale's fault, not the model's.
        if (loss_scale_update(&c->ls, isfinite(norm)) == LOSS_SCALE_BACKED_OFF && u->d->rank == 0)
            fprintf(u->err, "galley: fp16 gradients overflowed at step %lld: step skipped, loss scale now %g\n",
                    (long long)u->step, c->ls.scale);
    } else if (!isfinite(norm)) {
        if (c->ls.on) c->ls.good = 0;  // at the floor of 1: a real non-finite gradient
        if (u->r->train.nonfinite == NONFINITE_SKIP) {
            u->skipped++;
        } else {
            fprintf(u->err, "galley: error: the gradient norm became %g at step %lld (epoch %lld) while the "
                            "loss was %g\n  hint: lower optimizer.lr, set optimizer.clip_norm, or set "
                            "train.nonfinite: skip\n",
                    norm, (long long)u->step, (long long)u->epoch, l);
            return GL_EXIT_RUNTIME;
        }
    }
    return GL_EXIT_OK;
}

int run_step(gl_run *u) {
    const recipe_t *r = u->r;
    gl_dist *d = u->d;
    double t0 = now_s();
    u->epoch = u->step / u->steps_per_epoch + 1;
    double flags[FLAG_COUNT] = {0};
    step_flags(u, t0, flags);
    run_progress(u, u->step, true);  // hang localisation (dist.h): this step's forward may move layer state
    if (prof_window(u->step, r->train.profile.start_step, r->train.profile.stop_step) && d->rank == 0)
        fprintf(u->out, "profiler %s before step %lld (train.profile)\n",
                u->step == r->train.profile.start_step ? "started" : "stopped", (long long)u->step);
    gl_batch b;
    bool staged;
    prof_push("data");
    int got = input_stage_take(&u->stage, &b, &staged, u->err);
    // The next batch's copy, if its readers are done, runs beside this step.
    if (!got && u->step + 1 < u->total_steps) input_stage_ahead(&u->stage, u->err);
    prof_pop();
    if (got) {
        if (d->world > 1) {
            fprintf(u->err, "galley: error: rank %d of %d: a training batch could not be read (above); ending the "
                            "job\n", d->rank, d->world);
            dist_abort(d, GL_EXIT_RUNTIME);
        }
        return GL_EXIT_RUNTIME;
    }
    const int64_t n = b.global_n;
    double t1 = now_s();
    u->ph[PHASE_DATA] += t1 - t0;
    int bad = 0;
    u->c.staged = staged;
    // optimizer.fuse: the update in backward, where nothing after backward changes or undoes it
    const char *no_fuse = d->world > 1                              ? "more than one process"
                          : u->c.parts                               ? "distributed.deterministic sums parts"
                          : u->c.ls.on                               ? "fp16 loss scaling"
                          : r->train.nonfinite != NONFINITE_STOP     ? "train.nonfinite is skip"
                                                                     : NULL;
    optim_fuse_arm(&u->opt, &u->g, lr_at(&u->lr, u->step), no_fuse);
    double l = train_step(&u->c, &b, u->step, flags, &bad);
    if (!isfinite(l)) optim_fuse_cancel(&u->opt);  // no backward ran
    u->c.staged = false;
    // A second chance for readers that were not done before the step.
    if (u->step + 1 < u->total_steps) input_stage_ahead(&u->stage, u->err);
    double t3 = now_s();
    // train_step times its forward, backward and communication; the rest of it (copying
    // rows in, the loss) goes with the forward.
    u->ph[PHASE_COMM] += u->c.comm_s;
    u->ph[PHASE_BACKWARD] += u->c.bwd_s;
    u->ph[PHASE_FORWARD] += (t3 - t1) - u->c.comm_s - u->c.bwd_s;
    int code = isfinite(l) ? step_update(u, l, t3) : step_nonfinite(u, l, bad, b.n);
    double tr = now_s();
    loader_release(u->lt, &b);  // hands the slot back to the readers: part of the data phase
    if (code != GL_EXIT_OK) return code;
    u->t_now = now_s();
    u->ph[PHASE_DATA] += u->t_now - tr;
    if (u->t_now - t0 > u->step_max) u->step_max = u->t_now - t0;
    cpu_spin_step(&u->spin, u->t_now, u->t_now - t0, (double)n);  // nothing unless galley manages the spin
    if (!u->t_first_step) u->t_first_step = u->t_now;
    u->step++;
    run_progress(u, u->step, false);
    u->seen += n;
    u->seen_total += n;
    u->w.samples += n;
    u->w.steps++;
    return GL_EXIT_OK;
}
