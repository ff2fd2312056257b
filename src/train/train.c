// train.c: the loop. Plan memory, build the model and data, then step: shuffle at each epoch,
// gather a batch, forward, loss, backward, optimizer at the scheduled learning rate; evaluate
// on the held-out split each epoch (or every eval_every steps) and stop at the target. Each
// phase is timed; the run log (runlog.h) shows progress and keeps the run directory.
#include "galley/train.h"

#include <math.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "galley/arena.h"
#include "galley/check.h"
#include "galley/data.h"
#include "galley/graph.h"
#include "galley/loader.h"
#include "galley/loss.h"
#include "galley/lr.h"
#include "galley/optim.h"
#include "galley/runlog.h"

static double now_s(void) { return runlog_now(); }

int train_threads(const recipe_t *r) {
    if (r->train.threads > 0) return (int)r->train.threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);  // honours Slurm binding
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

// One pass over the validation loader (in order, every sample once).
static int evaluate(gl_graph *g, const gl_loss *loss, gl_loader *lv, gl_metrics *m, FILE *err) {
    metrics_reset(m);
    gl_tensor *o = graph_output(g);
    const int64_t size = g->input.size;
    for (int64_t i = 0, nb = loader_batches_per_epoch(lv); i < nb; i++) {
        gl_batch b;
        if (loader_next(lv, &b, err)) return -1;
        if (b.n > 0) {
            memcpy(g->input.data, b.x, sizeof(float) * (size_t)(b.n * size));
            graph_forward(g, b.n, false);
            double l = loss_compute(loss, g->be, o, b.n, b.labels, b.values, NULL);
            metrics_add(m, o, b.n, b.labels, b.values, l);
        }
        loader_release(lv, &b);
    }
    return 0;
}

static int target_met(const recipe_t *r, double v) {
    if (isnan(v)) return 0;
    if (!isnan(r->train.target.above)) return v >= r->train.target.above;
    return v <= r->train.target.below;
}

static const char *target_words(const recipe_t *r, char *buf, size_t len) {
    const char *m = metrics_name(r->train.target.metric);
    if (!isnan(r->train.target.above)) snprintf(buf, len, "validation %s >= %g", m, r->train.target.above);
    else snprintf(buf, len, "validation %s <= %g", m, r->train.target.below);
    return buf;
}

static const char *task_words(const gl_dataset *d) {
    return d->target == TARGET_CLASS ? "classification" : d->target == TARGET_MASK ? "segmentation" : "regression";
}

// The progress line's metric: the target's, else accuracy (classes, masks) or MAE (values).
static int main_metric(const recipe_t *r, const gl_dataset *d) {
    int t = r->train.target.metric;
    if (t != METRIC_NONE && t != METRIC_LOSS) return t;
    return d->target == TARGET_VALUES ? METRIC_MAE : METRIC_ACCURACY;
}

static const char *synth_words(int kind) {
    static const char *const names[] = {"spirals", "blobs", "shapes2d", "cosmo3d", "climate2d", "nbody3d"};
    return kind >= 0 && kind <= SYNTH_NBODY3D ? names[kind] : "?";
}

// Cumulative phase times as of `now` (OTHER: the rest of the wall time since t_start).
static void phases_at(double *dst, const double *ph, double t_start, double now) {
    double known = 0;
    for (int i = 0; i < PHASE_OTHER; i++) dst[i] = ph[i], known += ph[i];
    dst[PHASE_OTHER] = (now - t_start) - known;
}

// The training steps since the last metrics record.
typedef struct {
    gl_metrics m;
    int64_t samples, steps;
    double t0, eval0;  // when it started, and the evaluation seconds by then (excluded from its rate)
} train_window;

static void window_log(gl_runlog *lg, train_window *w, const gl_lr *lr, const double *ph, int64_t step,
                       int64_t epoch, double t_start, double now, bool print) {
    double secs = (now - w->t0) - (ph[PHASE_EVAL] - w->eval0);
    gl_logpoint p = {.step = step, .epoch = epoch, .time = now - t_start, .loss = metrics_value(&w->m, METRIC_LOSS),
                     .lr = lr_at(lr, step - 1), .samples_per_s = secs > 0 ? (double)w->samples / secs : 0};
    metric_set_from(&p.m, &w->m);
    phases_at(p.phase, ph, t_start, now);
    runlog_train(lg, &p, print);
    metrics_reset(&w->m);
    w->samples = w->steps = 0;
    w->t0 = runlog_now();
    w->eval0 = ph[PHASE_EVAL];
}

int train_run(const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res) {
    static const train_opts defaults = {0};
    if (!opts) opts = &defaults;
    memset(res, 0, sizeof *res);
    res->target_reached = r->train.target.metric == METRIC_NONE ? -1 : 0;
    res->best = NAN;
    res->best_loss = NAN;
    const gl_backend *be = backend_cpu();
    int threads = train_threads(r);
    be->set_threads(threads);

    // The data first: its loaders check files and datasets (exit 2 naming them) and give the
    // shapes the model is built for. They own their memory, counted in the plan below.
    loader_params lpt, lpv;
    loader_default_params(&lpt);
    loader_default_params(&lpv);
    lpt.split = SPLIT_TRAIN;
    lpv.split = SPLIT_VAL;
    size_t loader_bytes = loader_plan_bytes(r, &lpt) + loader_plan_bytes(r, &lpv);
    uint64_t host = arena_host_memory();
    if (host && (double)loader_bytes > 0.9 * (double)host) {
        fprintf(err, "%s: error: the data loaders need %.2f GiB of memory but the machine has %.2f GiB; reduce the "
                     "data set, data.loader.prefetch or data.loader.cache\n",
                r->file, loader_bytes / 1073741824.0, host / 1073741824.0);
        return GL_EXIT_USAGE;
    }
    gl_loader *lt = NULL, *lv = NULL;
    const double t_open = now_s();  // synthetic data is generated, HDF5 checked and staged, here
    if (loader_open(&lt, r, &lpt, err) != 0 || loader_open(&lv, r, &lpv, err) != 0) {
        if (lt) loader_free(lt);
        return GL_EXIT_USAGE;
    }
    const double t_data = now_s() - t_open;
    const gl_dataset train = *loader_shape(lt), val = *loader_shape(lv);
    int64_t batch = loader_batch_capacity(lt);
    gl_graph g;
    if (graph_build(&g, r, train.shape, batch > loader_batch_capacity(lv) ? batch : loader_batch_capacity(lv), be,
                    err) != 0 ||
        train_check_model(r, &g, &train, err) != 0) {
        graph_free(&g);
        loader_free(lt);
        loader_free(lv);
        return GL_EXIT_USAGE;
    }
    const int64_t steps_per_epoch = loader_batches_per_epoch(lt);
    const int64_t total_steps = r->train.steps > 0 ? r->train.steps : r->train.epochs * steps_per_epoch;
    const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;

    // Plan every byte of the model first, refuse what cannot fit, then allocate once.
    size_t bytes = g.bytes + optim_bytes(r, &g) + 8 * GL_ARENA_ALIGN;
    if (host && (double)(bytes + loader_bytes) > 0.9 * (double)host) {
        fprintf(err, "%s: error: this run needs %.2f GiB of memory (model %.2f, data %.2f) but the machine has %.2f "
                     "GiB; reduce train.batch_size, the data set or the model\n",
                r->file, (bytes + loader_bytes) / 1073741824.0, bytes / 1073741824.0, loader_bytes / 1073741824.0,
                host / 1073741824.0);
        graph_free(&g);
        loader_free(lt);
        loader_free(lv);
        return GL_EXIT_USAGE;
    }
    gl_arena arena;
    arena_init(&arena, bytes);
    graph_bind(&g, &arena);
    graph_init_params(&g, (uint64_t)r->seed);
    g.seed = (uint64_t)r->seed;
    gl_optim opt;
    optim_init(&opt, r, &g, &arena);
    gl_loss loss;
    loss_init(&loss, r, &train);
    gl_metrics tm, vm;  // training since the last evaluation, validation
    train_window w = {0};
    metrics_init(&tm, &train, (int)r->train.top_k);
    metrics_init(&vm, &val, (int)r->train.top_k);
    metrics_init(&w.m, &train, (int)r->train.top_k);
    gl_lr lr;
    lr_init(&lr, r, batch, steps_per_epoch, total_steps);

    // From here on everything printed is also kept in the run directory's console.log.
    gl_runlog lg;
    int code = runlog_open(&lg, r, opts->run_dir, opts->rank, out, err);
    if (code != GL_EXIT_OK) {
        runlog_close(&lg);
        graph_free(&g);
        arena_free(&arena);
        loader_free(lt);
        loader_free(lv);
        return code;
    }
    snprintf(res->run_dir, sizeof res->run_dir, "%s", lg.dir);
    out = lg.out;
    err = lg.err;

    gl_runinfo info = {.name = r->name, .recipe_file = r->file, .hash = recipe_hash(r), .device = "cpu",
                       .ranks = 1, .threads = threads, .precision = "fp32", .global_batch = batch,
                       .local_batch = batch, .parameters = g.nparams, .mflops = (double)g.flops / 1e6,
                       .train_samples = train.n, .val_samples = val.n, .data_seconds = t_data,
                       .total_steps = total_steps, .steps_per_epoch = steps_per_epoch,
                       .steps_set = r->train.steps > 0, .main_metric = main_metric(r, &train)};
    char tw[128], line[256], shp[64];
    shape_format(&train.shape, shp, sizeof shp);
    if (r->data.source == DATA_SOURCE_HDF5)
        snprintf(info.data, sizeof info.data, "hdf5 %s, %s, input %s", r->data.train.files, task_words(&train), shp);
    else
        snprintf(info.data, sizeof info.data, "synthetic %s, %s, input %s", synth_words(r->data.synthetic.kind),
                 task_words(&train), shp);
    lr_describe(&lr, info.lr_rule, sizeof info.lr_rule);
    if (res->target_reached == 0) target_words(r, info.target, sizeof info.target);
    runlog_banner(&lg, &info);

    int64_t step = 0, skipped = 0, seen = 0, seen_total = 0, best_step = 0, epoch = 1;
    double ph[PHASE_COUNT] = {0};
    double t_start = now_s(), t_mark = t_start, t_now = t_start, data_mark = 0;
    w.t0 = t_start;
    metrics_reset(&tm);
    gl_tensor *o = graph_output(&g);
    gl_logpoint p;
    while (step < total_steps) {
        double t0 = now_s();
        epoch = step / steps_per_epoch + 1;
        gl_batch b;
        if (loader_next(lt, &b, err)) {
            code = GL_EXIT_RUNTIME;
            goto done;
        }
        const int64_t n = b.n;
        memcpy(g.input.data, b.x, sizeof(float) * (size_t)(n * g.input.size));
        double t1 = now_s();
        ph[PHASE_DATA] += t1 - t0;
        g.step = step;
        graph_forward(&g, n, true);
        double l = loss_compute(&loss, be, o, n, b.labels, b.values, o->grad);
        if (!isfinite(l)) {
            t_now = now_s();
            ph[PHASE_FORWARD] += t_now - t1;
            if (r->train.nonfinite == NONFINITE_SKIP) {
                skipped++;
            } else {
                int bad = graph_first_nonfinite(&g, n);
                fprintf(err, "galley: error: the loss became %g at step %lld (epoch %lld); ", l, (long long)step,
                        (long long)epoch);
                if (bad >= 0) fprintf(err, "the first layer whose output is not finite is '%s' (model.layers[%d])\n",
                                      g.layers[bad].cfg->name, bad);
                else fprintf(err, "every layer's output is finite, so the loss itself overflowed\n");
                fprintf(err, "  hint: lower optimizer.lr, set optimizer.clip_norm, check the data, or set "
                             "train.nonfinite: skip\n");
                loader_release(lt, &b);
                code = GL_EXIT_RUNTIME;
                goto done;
            }
        } else {
            metrics_add(&tm, o, n, b.labels, b.values, l);
            metrics_add(&w.m, o, n, b.labels, b.values, l);
            double t2 = now_s();
            ph[PHASE_FORWARD] += t2 - t1;
            graph_backward(&g, n);
            double t3 = now_s();
            ph[PHASE_BACKWARD] += t3 - t2;
            // A non-finite gradient norm leaves the weights untouched (optim_step skips it).
            double norm = optim_step(&opt, &g, lr_at(&lr, step));
            t_now = now_s();
            ph[PHASE_OPTIM] += t_now - t3;
            if (!isfinite(norm)) {
                if (r->train.nonfinite == NONFINITE_SKIP) {
                    skipped++;
                } else {
                    fprintf(err, "galley: error: the gradient norm became %g at step %lld (epoch %lld) while the "
                                 "loss was %g\n  hint: lower optimizer.lr, set optimizer.clip_norm, or set "
                                 "train.nonfinite: skip\n",
                            norm, (long long)step, (long long)epoch, l);
                    loader_release(lt, &b);
                    code = GL_EXIT_RUNTIME;
                    goto done;
                }
            }
        }
        double tr = now_s();
        loader_release(lt, &b);  // hands the slot back to the readers: part of the data phase
        t_now = now_s();
        ph[PHASE_DATA] += t_now - tr;
        step++;
        seen += n;
        seen_total += n;
        w.samples += n;
        w.steps++;
        int epoch_end = step % steps_per_epoch == 0;
        int due = r->train.eval_every > 0 ? step % r->train.eval_every == 0 : epoch_end;
        int last = step >= total_steps;
        // A metrics record every log.every steps (with a plain line unless on a terminal), at the
        // end, and with log.every 0 at each evaluation; a live line on a terminal in between.
        int logged = lg.every > 0 && step % lg.every == 0;
        if (logged || ((last || (lg.every == 0 && due)) && w.steps > 0)) {
            window_log(&lg, &w, &lr, ph, step, epoch, t_start, t_now, logged);
            t_now = w.t0;
        } else if (runlog_live_due(&lg, t_now)) {
            p = (gl_logpoint){.step = step, .epoch = epoch, .epoch_step = (step - 1) % steps_per_epoch + 1,
                              .epoch_steps = steps_per_epoch, .time = t_now - t_start,
                              .loss = metrics_value(&tm, METRIC_LOSS),
                              .samples_per_s = t_now > t_mark ? (double)seen / (t_now - t_mark) : 0};
            metric_set_from(&p.m, &tm);
            runlog_live(&lg, &p, t_now);
        }
        if (!due && !last) continue;

        double te = now_s();
        if (evaluate(&g, &loss, lv, &vm, err)) {
            code = GL_EXIT_RUNTIME;
            goto done;
        }
        double te2 = now_s();
        ph[PHASE_EVAL] += te2 - te;
        p = (gl_logpoint){.step = step, .epoch = epoch, .time = te2 - t_start, .loss = metrics_value(&vm, METRIC_LOSS),
                          .seconds = te2 - te};
        metric_set_from(&p.m, &vm);
        runlog_eval(&lg, &p);
        double elapsed = te2 - t_mark;
        char tl[160], vl[160];
        metrics_format(&tm, tl, sizeof tl);
        metrics_format(&vm, vl, sizeof vl);
        if (r->train.eval_every > 0 || r->train.steps > 0)
            snprintf(line, sizeof line, "step %6lld/%lld (epoch %lld)", (long long)step, (long long)total_steps,
                     (long long)epoch);
        else
            snprintf(line, sizeof line, "epoch %3lld/%lld", (long long)epoch, (long long)epochs);
        // The share of this window's training time spent waiting for data (evaluation excluded).
        double train_s = elapsed - (te2 - te), data_s = ph[PHASE_DATA] - data_mark;
        fprintf(out, "%s  %s | val %s | lr %.4g | data %.1f%% | %.0f samples/s  %.2f s\n", line, tl, vl,
                lr_at(&lr, step - 1), train_s > 0 ? 100.0 * data_s / train_s : 0.0,
                (double)seen / (elapsed > 0 ? elapsed : 1e-9), elapsed);
        data_mark = ph[PHASE_DATA];
        fflush(out);
        res->epochs_run = (int)epoch;
        res->last_loss = metrics_value(&vm, METRIC_LOSS);
        if (isnan(res->best_loss) || res->last_loss < res->best_loss) res->best_loss = res->last_loss, res->best_loss_step = step;
        res->last_acc = metrics_value(&vm, METRIC_ACCURACY);
        if (r->train.target.metric != METRIC_NONE) {
            double v = metrics_value(&vm, r->train.target.metric);
            int up = !isnan(r->train.target.above);
            if (isnan(res->best) || (up ? v > res->best : v < res->best)) res->best = v, best_step = step;
            res->last = v;
            if (res->target_reached == 0 && target_met(r, v)) {
                res->target_reached = 1;
                if (w.steps > 0) window_log(&lg, &w, &lr, ph, step, epoch, t_start, now_s(), false);
                fprintf(out, "target reached: %s at step %lld, epoch %lld (%s %.4f)\n", target_words(r, tw, sizeof tw),
                        (long long)step, (long long)epoch, metrics_name(r->train.target.metric), v);
                break;
            }
        }
        metrics_reset(&tm);
        seen = 0;
        t_mark = t_now = now_s();
    }
done:
    {
        char first[1024];
        int64_t k = loader_skipped(lt, first, sizeof first);
        if (k)
            fprintf(out, "galley: data.nonfinite: skip replaced %lld input samples holding NaN/Inf (first: %s)\n",
                    (long long)k, first);
    }
    if (code == GL_EXIT_RUNTIME && w.steps > 0)  // the steps before the failure, for the record
        window_log(&lg, &w, &lr, ph, step, epoch, t_start, now_s(), false);
    res->steps = step;
    res->seconds = now_s() - t_start;
    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t_train = res->seconds - ph[PHASE_EVAL];
        res->samples_per_s = t_train > 0 ? (double)seen_total / t_train : 0;
        gl_runsummary sum = {.exit_code = code, .steps = step, .epochs = res->epochs_run, .skipped = skipped,
                             .samples = seen_total, .wall = res->seconds, .samples_per_s = res->samples_per_s,
                             .peak_host_mib = ru.ru_maxrss / 1024.0, .peak_device_mib = NAN,
                             .last_loss = res->last_loss, .best_loss = res->best_loss,
                             .best_loss_step = res->best_loss_step, .best_metric = r->train.target.metric,
                             .best = res->best, .best_step = best_step};
        memcpy(sum.phase, ph, sizeof ph);
        metric_set_from(&sum.last, &vm);
        metrics_format_iou(&vm, sum.iou, sizeof sum.iou);
        if (code == GL_EXIT_OK && res->target_reached == 0) code = GL_EXIT_TARGET;
        sum.exit_code = code;
        sum.status = code == GL_EXIT_RUNTIME ? "failed" : res->target_reached == 1 ? "target reached"
                     : res->target_reached == 0 ? "target not reached" : "finished";
        runlog_finish(&lg, &sum);
        if (code == GL_EXIT_TARGET)
            fprintf(out, "target NOT reached: %s; best %.4f (exit code %d)\n", target_words(r, tw, sizeof tw),
                    res->best, GL_EXIT_TARGET);
    }
    runlog_close(&lg);
    graph_free(&g);
    arena_free(&arena);
    loader_free(lt);
    loader_free(lv);
    return code;
}
