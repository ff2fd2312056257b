// train.c: the loop. Plan memory, build the model and data, then step: shuffle at each epoch,
// gather a batch, forward, loss, backward, optimizer at the scheduled learning rate; evaluate
// on the held-out split each epoch (or every eval_every steps) and stop at the target. Each
// phase is timed; the run log (runlog.h) shows progress and keeps the run directory.
// Across ranks (dist.h) every rank runs this loop on its part of each batch; train_step sums
// gradients, losses, metrics and the stop flags, so every rank takes the same decisions at the
// same step. Checkpoints: every N steps or minutes, at the end, and when a signal or
// train.time_limit stops the run (exit 4); --resume continues one bitwise.
#include "galley/train.h"

#include <math.h>
#include <signal.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "galley/arena.h"
#include "galley/prof.h"
#include "galley/check.h"
#include "galley/cpu_spin.h"
#include "galley/data.h"
#include "galley/graph.h"
#include "galley/loader.h"
#include "galley/loss.h"
#include "galley/lr.h"
#include "galley/optim.h"
#include "galley/runlog.h"
#include "train/train_internal.h"

static double now_s(void) { return runlog_now(); }

int train_threads(const recipe_t *r) {
    if (r->train.threads > 0) return (int)r->train.threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);  // honours Slurm binding
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
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

// Checks the batch against the ranks (and parts). GL_EXIT_OK or GL_EXIT_USAGE (printed by rank 0).
static int check_split(const recipe_t *r, const gl_dist *d, FILE *err) {
    int64_t b = r->train.batch_size, w = d->world, p = r->distributed.parts;
    const char *msg = NULL;
    char buf[512];
    if (b % w != 0) {
        snprintf(buf, sizeof buf, "train.batch_size %lld (the global batch) does not divide over %lld ranks; use a "
                 "multiple of %lld, e.g. %lld", (long long)b, (long long)w, (long long)w, (long long)((b / w + 1) * w));
        msg = buf;
    } else if (r->distributed.deterministic && p > 0 && p % w != 0) {
        snprintf(buf, sizeof buf, "distributed.parts %lld is not a multiple of the %lld ranks; each rank computes "
                 "parts / ranks of them", (long long)p, (long long)w);
        msg = buf;
    } else if (r->distributed.deterministic && p > 0 && b % p != 0) {
        snprintf(buf, sizeof buf, "train.batch_size %lld does not divide into distributed.parts %lld equal parts",
                 (long long)b, (long long)p);
        msg = buf;
    }
    if (!msg) return GL_EXIT_OK;
    if (d->rank == 0) fprintf(err, "%s: error: %s\n", r->file, msg);
    return GL_EXIT_USAGE;
}

int train_run(const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res) {
    static const train_opts defaults = {0};
    if (!opts) opts = &defaults;
    memset(res, 0, sizeof *res);
    res->target_reached = r->train.target.metric == METRIC_NONE ? -1 : 0;
    res->best = NAN;
    res->best_loss = NAN;
    gl_dist solo = {.world = 1, .local_world = 1, .launcher = "none"};
    gl_dist *d = opts->dist ? opts->dist : &solo;
    dist_set_timeout(d, r->distributed.timeout);
    train_signals_install();  // from here a signal stops the run at its next step (the first, if need be)
    int code = check_split(r, d, err);
    if (code != GL_EXIT_OK) goto early;
    char device[640], device_note[640];
    int precision = PRECISION_FP32;
    const gl_backend *be =
        train_pick_backend(r, d, device, sizeof device, device_note, sizeof device_note, &precision, err);
    {
        double ok = be != NULL;  // every rank learns whether any failed, so none waits alone
        dist_sum_doubles(d, &ok, 1, "choosing train.device", 0);
        if (ok < d->world) {
            code = GL_EXIT_USAGE;
            goto early;
        }
    }
    int threads = train_threads(r);
    // Ranks sharing a node without a CPU binding (srun with task/none, mpirun --bind-to none)
    // would each take every core: give each its share instead.
    if (r->train.threads == 0 && d->local_world > 1) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        if (online > 0 && threads >= online) threads = (int)(online / d->local_world) > 0 ? (int)(online / d->local_world) : 1;
    }
    be->set_threads(threads);

    // Which checkpoint to continue, first: the loaders start at its step.
    char resume_path[4096] = "";
    int64_t resume_step = 0;
    if (opts->resume &&
        (code = train_resume_pick(r, opts->resume, d, resume_path, sizeof resume_path, &resume_step, opts->evaluate,
                                 out, err)))
        goto early;
    if (opts->evaluate && !resume_path[0]) {
        if (d->rank == 0) fprintf(err, "galley eval: error: no checkpoint to evaluate in %s/\n", r->checkpoint.dir);
        code = GL_EXIT_USAGE;
        goto early;
    }

    // A checkpoint directory that cannot be written is found now, not after hours of training.
    {
        int ok = 1;
        char why[4400];
        if (d->rank == 0 && !opts->evaluate && ckpt_prepare_dir(r->checkpoint.dir, why, sizeof why) != 0) {
            fprintf(err, "%s: error: %s\n  hint: set checkpoint.dir to a directory you can write (checkpoints are "
                         "written at the end, every checkpoint.every_steps/every_minutes, and on SIGTERM/SIGUSR1)\n",
                    r->file, why);
            ok = 0;
        }
        dist_bcast(d, &ok, sizeof ok, 0, "checking checkpoint.dir", 0);
        if (!ok) {
            code = GL_EXIT_USAGE;
            goto early;
        }
    }

    // The data first: its loaders check files and datasets (exit 2 naming them) and give the
    // shapes the model is built for. They own their memory, counted in the plan below.
    // A rank whose set-up fails says why and goes on to the agreement below (dist_agree) with
    // its code, so that every rank stops there at once instead of the others waiting in their
    // first collective until distributed.timeout: a rank alone may lack a file, a stage
    // directory or memory on its node.
    loader_params lpt, lpv;
    loader_default_params(&lpt);
    loader_default_params(&lpv);
    lpt.split = SPLIT_TRAIN;
    lpv.split = SPLIT_VAL;
    lpt.rank = lpv.rank = d->rank;
    lpt.world = lpv.world = d->world;
    lpt.start = resume_step;
    size_t loader_bytes = loader_plan_bytes(r, &lpt) + loader_plan_bytes(r, &lpv);
    uint64_t host = arena_host_memory();
    gl_loader *lt = NULL, *lv = NULL;
    gl_graph g = {0};
    gl_dataset train = {0}, val = {0};
    int64_t batch = 0, steps_per_epoch = 0, total_steps = 0, epochs = 0;
    size_t bytes = 0;
    double t_data = 0;
    const bool staging = !r->distributed.deterministic;
    int setup = GL_EXIT_OK;  // this rank's set-up; the first failure skips the rest
    if (host && (double)loader_bytes > 0.9 * (double)host) {
        fprintf(err, "%s: error: the data loaders need %.2f GiB of memory but the machine has %.2f GiB; reduce the "
                     "data set, data.loader.prefetch or data.loader.cache\n",
                r->file, loader_bytes / 1073741824.0, host / 1073741824.0);
        setup = GL_EXIT_USAGE;
    }
    if (setup == GL_EXIT_OK) {
        const double t_open = now_s();  // synthetic data is generated, HDF5 checked and staged, here
        if (loader_open(&lt, r, &lpt, err) != 0 || loader_open(&lv, r, &lpv, err) != 0) setup = GL_EXIT_USAGE;
        t_data = now_s() - t_open;
    }
    if (setup == GL_EXIT_OK) {
        train = *loader_shape(lt), val = *loader_shape(lv);
        batch = loader_batch_capacity(lt);
        if (train_check_splits(r, &train, &val, err) != 0 ||
            graph_build(&g, r, train.shape, batch > loader_batch_capacity(lv) ? batch : loader_batch_capacity(lv), be,
                        err) != 0 ||
            train_check_model(r, &g, &train, err) != 0)
            setup = GL_EXIT_USAGE;
    }
    if (setup == GL_EXIT_OK) {
        // Synchronised batch norm needs every rank in every batch (each joins the statistics' sum).
        int64_t tail =
            r->data.loader.drop_last ? 0 : train.n % (r->train.batch_size < train.n ? r->train.batch_size : train.n);
        if (r->distributed.sync_batchnorm && d->world > 1 && tail > 0 && tail < d->world) {
            if (d->rank == 0)
                fprintf(err, "%s: error: distributed.sync_batchnorm: the last batch of each epoch has %lld samples, "
                             "fewer than the %d ranks; set data.loader.drop_last: true or change train.batch_size\n",
                        r->file, (long long)tail, d->world);
            setup = GL_EXIT_USAGE;
        }
    }
    if (setup == GL_EXIT_OK) {
        steps_per_epoch = loader_batches_per_epoch(lt);
        total_steps = r->train.steps > 0 ? r->train.steps : r->train.epochs * steps_per_epoch;
        epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
        // Plan every byte of the model first, refuse what cannot fit, then allocate once.
        // The next batch's copy overlaps the step (input_stage.c), except for deterministic parts.
        train_plan plan;
        train_plan_of(r, &g, &train, d, staging && be->upload_async, be->upload_declare != NULL, &plan);
        bytes = plan.total;
        // (On a GPU the model's arena is the GPU's memory: cudaMallocManaged reports a shortfall.)
        if (host && (double)((be->device ? 0 : bytes) + loader_bytes) > 0.9 * (double)host) {
            fprintf(err, "%s: error: this run needs %.2f GiB of memory (model %.2f, data %.2f) but the machine has "
                         "%.2f GiB; reduce train.batch_size, the data set or the model\n",
                    r->file, (bytes + loader_bytes) / 1073741824.0, bytes / 1073741824.0,
                    loader_bytes / 1073741824.0, host / 1073741824.0);
            setup = GL_EXIT_USAGE;
        }
    }
    // The GPU check gathers every rank's GPU: it runs on every rank that got this far.
    if ((setup = dist_agree(d, setup, "opening the data and planning the model", err)) == GL_EXIT_OK)
        setup = train_device_fits(r, be, d, bytes, err);
    if (setup != GL_EXIT_OK) {
        graph_free(&g);
        if (lt) loader_free(lt);
        if (lv) loader_free(lv);
        code = setup;
        goto early;
    }
    gl_arena arena;
    arena_init_for(&arena, bytes, be);
    graph_bind(&g, &arena);
    graph_init_params(&g, (uint64_t)r->seed);
    g.seed = (uint64_t)r->seed;
    gl_optim opt;
    optim_init(&opt, r, &g, &arena);
    gl_loss loss;
    loss_init(&loss, r, &train);
    train_ctx c;
    train_ctx_init(&c, r, d, &g, &loss, &opt, &train, &arena);
    input_stage stage;
    char stage_note[400];
    input_stage_init(&stage, be, &g, lt, staging, &arena, stage_note, sizeof stage_note);
    c.stage = &stage;
    loss_scale_init(&c.ls, precision == PRECISION_FP16);
    gl_ckpt_state ck = {.best = NAN, .best_loss = NAN, .world = d->world, .parts = c.parts, .threads = threads};
    if (resume_path[0] && (code = train_resume_load(&c, resume_path, &ck, err)) != GL_EXIT_OK) {
        input_stage_free(&stage);
        train_ctx_free(&c);
        graph_free(&g);
        arena_free(&arena);
        loader_free(lt);
        loader_free(lv);
        goto early;
    }
    // fp16's loss scale continues from the checkpoint when it has one (not: older files, other precisions).
    bool scaler_restored = ck.scaler_saved && c.ls.on &&
                           loss_scale_restore(&c.ls, ck.scaler.scale, ck.scaler.good, ck.scaler.skipped) == 0;
    gl_metrics tm, vm;  // training since the last evaluation, validation
    train_window w = {0};
    metrics_init(&tm, &train, (int)r->train.top_k);
    metrics_init(&vm, &val, (int)r->train.top_k);
    metrics_init(&w.m, &train, (int)r->train.top_k);
    gl_lr lr;
    lr_init(&lr, r, r->train.batch_size < train.n ? r->train.batch_size : train.n, steps_per_epoch, total_steps);

    // From here on everything printed is also kept in the run directory's console.log.
    gl_runlog lg;
    // Only rank 0 writes the run directory: the others learn here whether it could.
    code = dist_agree(d, runlog_open(&lg, r, opts->run_dir, d->rank, out, err), "opening the run directory", err);
    if (code != GL_EXIT_OK) {
        runlog_close(&lg);
        input_stage_free(&stage);
        train_ctx_free(&c);
        graph_free(&g);
        arena_free(&arena);
        loader_free(lt);
        loader_free(lv);
        goto early;
    }
    // Launchers hand rank 0 a pseudo-terminal that ends in a log file: no in-place line there.
    if (d->mpi) lg.tty = false;
    snprintf(res->run_dir, sizeof res->run_dir, "%s", lg.dir);
    out = lg.out;
    err = lg.err;
    if (device_note[0]) fputs(device_note, out);
    if (stage_note[0]) fprintf(out, "galley: note: %s\n", stage_note);
    graph_replay_setup(&g, r->train.cuda_graphs, err);

    gl_runinfo info = {.name = r->name, .recipe_file = r->file, .hash = recipe_hash(r), .device = device,
                       .ranks = d->world, .threads = threads, .precision = recipe_precision_name(precision),
                       .global_batch = r->train.batch_size < train.n ? r->train.batch_size : train.n,
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
    if (d->world > 1)
        fprintf(out, "  ranks: %d (launched by %s, %d on this node) | %s\n", d->world, d->launcher, d->local_world,
                c.parts ? "deterministic: gradients gathered and summed in part order"
                        : "gradients summed by allreduce in buckets during backward");
    if (c.parts)
        fprintf(out, "  deterministic: the global batch is computed as %d parts (%d per rank), summed in a fixed "
                     "order\n", c.parts, c.local_parts);
    if (opts->evaluate)
        fprintf(out, "  evaluation only (galley eval): the weights of %s, step %lld; nothing is trained\n",
                resume_path[0] ? resume_path : "(none)", (long long)ck.step);
    else if (resume_path[0])
        fprintf(out, "  resumed from %s at step %lld (epoch %lld)%s\n", resume_path, (long long)ck.step,
                (long long)(ck.step / steps_per_epoch + 1),
                ck.world != d->world ? " (written by a run with another number of ranks)" : "");
    if (c.ls.on && !opts->evaluate)
        fprintf(out, "  fp16: dynamic loss scaling, scale %g%s (halved on a non-finite gradient, the step skipped; "
                     "doubled after %d finite steps)\n",
                c.ls.scale,
                scaler_restored  ? " from the checkpoint"
                : ck.scaler_saved ? " (the checkpoint's scale is not one scaling can reach: starting afresh)"
                : resume_path[0]  ? " (the checkpoint has none)"
                                  : "",
                GL_LOSS_SCALE_GROWTH);
    if (resume_path[0] && c.parts && ck.parts != c.parts)
        fprintf(out, "  note: the checkpoint was written with distributed.parts %d, this run uses %d: it continues, "
                     "but not bitwise as the original run would have\n", ck.parts, c.parts);

    int64_t step = ck.step, skipped = ck.skipped, seen = 0, seen_total = 0, best_step = ck.best_step;
    const int64_t samples_base = ck.samples;
    const double seconds_base = ck.train_seconds;
    int64_t epoch = step / steps_per_epoch + 1;
    res->best = ck.best, res->best_loss = ck.best_loss, res->best_loss_step = ck.best_loss_step;
    res->epochs_run = ck.epochs_run;
    double ph[PHASE_COUNT] = {0};
    double t_start = now_s(), t_mark = t_start, t_now = t_start, data_mark = 0, t_ckpt = t_start;
    // The CPU's idle threads spin long only while the cores are not shared (cpu_spin.c).
    gl_spin spin;
    cpu_spin_start(&spin, be->device ? 1 : threads, t_start);
    double step_max = 0, eval_max = 0, ckpt_s = (double)g.nparams * 12.0 / 100e6 + 0.05;  // until measured
    const char *stopped_by = NULL;
    w.t0 = t_start;
    metrics_reset(&tm);
    gl_logpoint p;
    if (opts->evaluate) {
        // `galley eval`: one pass over the validation split with the checkpoint's weights.
        double te = now_s();
        if (train_evaluate(&c, lv, &vm, step, err)) {
            code = GL_EXIT_RUNTIME;
            goto done;
        }
        double te2 = now_s();
        ph[PHASE_EVAL] += te2 - te;
        p = (gl_logpoint){.step = step, .epoch = epoch, .time = te2 - t_start, .loss = metrics_value(&vm, METRIC_LOSS),
                          .seconds = te2 - te};
        metric_set_from(&p.m, &vm);
        runlog_eval(&lg, &p);
        char vl[160];
        metrics_format(&vm, vl, sizeof vl);
        fprintf(out, "evaluation at step %lld: val %s | %lld samples in %.2f s\n", (long long)step, vl,
                (long long)val.n, te2 - te);
        res->last_loss = res->best_loss = metrics_value(&vm, METRIC_LOSS);
        res->best_loss_step = step;
        res->last_acc = metrics_value(&vm, METRIC_ACCURACY);
        if (r->train.target.metric != METRIC_NONE) {
            res->last = res->best = metrics_value(&vm, r->train.target.metric);
            best_step = step;
            if (target_met(r, res->last)) {
                res->target_reached = 1;
                fprintf(out, "target met: %s (%s %.4f)\n", target_words(r, tw, sizeof tw),
                        metrics_name(r->train.target.metric), res->last);
            }
        }
        goto done;
    }
    if (step >= total_steps)
        fprintf(out, "nothing to train: the checkpoint is at step %lld and the run has %lld steps; raise "
                     "train.steps or train.epochs to go on\n", (long long)step, (long long)total_steps);
    while (step < total_steps) {
        double t0 = now_s();
        epoch = step / steps_per_epoch + 1;
        // This rank's stop and checkpoint wishes; the step sums them over ranks.
        double flags[FLAG_COUNT] = {0};
        flags[FLAG_SIGNAL] = train_signal_pending() != 0;
        if (r->train.time_limit > 0) {
            // Stop when one more step, an evaluation and a checkpoint might not fit.
            double need = (t0 - t_start) + 2 * step_max + eval_max + 2 * ckpt_s;
            flags[FLAG_TIME] = need > r->train.time_limit;
        }
        flags[FLAG_CKPT] = d->rank == 0 && r->checkpoint.every_minutes > 0 &&
                           t0 - t_ckpt >= 60.0 * r->checkpoint.every_minutes;
        if (prof_window(step, r->train.profile.start_step, r->train.profile.stop_step) && d->rank == 0)
            fprintf(out, "profiler %s before step %lld (train.profile)\n",
                    step == r->train.profile.start_step ? "started" : "stopped", (long long)step);
        gl_batch b;
        bool staged;
        prof_push("data");
        int got = input_stage_take(&stage, &b, &staged, err);
        // The next batch's copy, if its readers are done, runs beside this step.
        if (!got && step + 1 < total_steps) input_stage_ahead(&stage, err);
        prof_pop();
        if (got) {
            if (d->world > 1) {
                fprintf(err, "galley: error: rank %d of %d: a training batch could not be read (above); ending the "
                             "job\n", d->rank, d->world);
                dist_abort(d, GL_EXIT_RUNTIME);
            }
            code = GL_EXIT_RUNTIME;
            goto done;
        }
        const int64_t n = b.global_n;
        double t1 = now_s();
        ph[PHASE_DATA] += t1 - t0;
        int bad = 0;
        c.staged = staged;
        double l = train_step(&c, &b, step, flags, &bad);
        c.staged = false;
        // A second chance for readers that were not done before the step.
        if (step + 1 < total_steps) input_stage_ahead(&stage, err);
        double t3 = now_s();
        // train_step times its forward, backward and communication; the rest of it (copying
        // rows in, the loss) goes with the forward.
        ph[PHASE_COMM] += c.comm_s;
        ph[PHASE_BACKWARD] += c.bwd_s;
        ph[PHASE_FORWARD] += (t3 - t1) - c.comm_s - c.bwd_s;
        if (!isfinite(l)) {
            if (r->train.nonfinite == NONFINITE_SKIP) {
                skipped++;
            } else {
                if (bad) {  // this rank's part went non-finite: say where (every rank that has one does)
                    int first = graph_first_nonfinite(&g, b.n);
                    char who[64] = "";
                    if (d->world > 1) snprintf(who, sizeof who, "rank %d of %d: ", d->rank, d->world);
                    // A fused activation overwrites its producer's output (graph_fuse_acts): a NaN that
                    // relu turned into 0 hides, so the exact layer needs model.fuse: false.
                    bool shared = first >= 0 && first + 1 < g.nlayers &&
                                  (g.layers[first + 1].act_done || g.layers[first + 1].act_inplace);
                    if (first >= 0)
                        fprintf(err, "galley: %sthe first layer whose output is not finite is '%s' (model.layers[%d])%s\n",
                                who, g.layers[first].cfg->name, first,
                                shared ? " or the activation after it, which shares its buffer (model.fuse: false "
                                         "tells them apart)" : "");
                    else
                        fprintf(err, "galley: %severy layer's output is finite, so the loss itself overflowed (check "
                                     "the targets)\n", who);
                }
                if (d->rank == 0)
                    fprintf(err, "galley: error: the loss became %g at step %lld (epoch %lld)%s\n"
                                 "  hint: lower optimizer.lr, set optimizer.clip_norm, check the data, or set "
                                 "train.nonfinite: skip\n",
                            l, (long long)step, (long long)epoch, bad ? "" : " on another rank");
                loader_release(lt, &b);
                code = GL_EXIT_RUNTIME;
                goto done;
            }
        } else {
            double v[GL_METRICS_PACKED];
            metrics_pack(&c.sm, v);
            metrics_add_packed(&tm, v);
            metrics_add_packed(&w.m, v);
            // A non-finite gradient norm leaves the weights untouched (optim_step skips it).
            prof_push("optimizer");
            double norm = optim_step_scaled(&opt, &g, lr_at(&lr, step), c.ls.scale);
            prof_pop();
            t_now = now_s();
            ph[PHASE_OPTIM] += t_now - t3;
            if (c.ls.on && (isfinite(norm) || c.ls.scale > GL_LOSS_SCALE_MIN)) {
                // fp16: an overflow above the floor is the scale's fault, not the model's.
                if (loss_scale_update(&c.ls, isfinite(norm)) == LOSS_SCALE_BACKED_OFF && d->rank == 0)
                    fprintf(err, "galley: fp16 gradients overflowed at step %lld: step skipped, loss scale now %g\n",
                            (long long)step, c.ls.scale);
            } else if (!isfinite(norm)) {
                if (c.ls.on) c.ls.good = 0;  // at the floor of 1: a real non-finite gradient
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
        if (t_now - t0 > step_max) step_max = t_now - t0;
        cpu_spin_step(&spin, t_now);  // nothing unless cpu_spin_start chose to manage
        step++;
        seen += n;
        seen_total += n;
        w.samples += n;
        w.steps++;
        int epoch_end = step % steps_per_epoch == 0;
        int due = r->train.eval_every > 0 ? step % r->train.eval_every == 0 : epoch_end;
        int last = step >= total_steps;
        if (c.flags[FLAG_SIGNAL] > 0) stopped_by = "a signal";
        else if (c.flags[FLAG_TIME] > 0) stopped_by = "train.time_limit";
        // A metrics record every log.every steps (with a plain line unless on a terminal), at the
        // end, and with log.every 0 at each evaluation; a live line on a terminal in between.
        int logged = lg.every > 0 && step % lg.every == 0;
        if (logged || ((last || stopped_by || (lg.every == 0 && due)) && w.steps > 0)) {
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
        if (stopped_by) break;
        int save = (r->checkpoint.every_steps > 0 && step % r->checkpoint.every_steps == 0) || c.flags[FLAG_CKPT] > 0;
        if (save && !last) {
            ck.step = step, ck.epoch = epoch, ck.samples = samples_base + seen_total, ck.skipped = skipped;
            ck.best = res->best, ck.best_step = best_step, ck.best_loss = res->best_loss;
            ck.best_loss_step = res->best_loss_step, ck.epochs_run = res->epochs_run;
            ck.train_seconds = seconds_base + (now_s() - t_start);
            ck.scaler = c.ls;
            double secs;
            prof_push("checkpoint");
            int rc = train_save(&c, &ck, out, err, &secs);
            prof_pop();
            ph[PHASE_CKPT] += secs;
            t_ckpt = now_s();
            if (secs > ckpt_s) ckpt_s = secs;
            if (rc) {
                code = GL_EXIT_RUNTIME;
                goto done;
            }
        }
        if (!due && !last) continue;

        double te = now_s();
        if (train_evaluate(&c, lv, &vm, step, err)) {
            code = GL_EXIT_RUNTIME;
            goto done;
        }
        double te2 = now_s();
        ph[PHASE_EVAL] += te2 - te;
        if (te2 - te > eval_max) eval_max = te2 - te;
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
    // The last checkpoint: at the end (checkpoint.at_end), and always when stopped early.
    if (stopped_by || (r->checkpoint.at_end && step > ck.step)) {
        ck.step = step, ck.epoch = step > 0 ? (step - 1) / steps_per_epoch + 1 : 1, ck.samples = samples_base + seen_total;
        ck.skipped = skipped, ck.best = res->best, ck.best_step = best_step, ck.best_loss = res->best_loss;
        ck.best_loss_step = res->best_loss_step, ck.epochs_run = res->epochs_run;
        ck.train_seconds = seconds_base + (now_s() - t_start);
        ck.scaler = c.ls;
        double secs;
        prof_push("checkpoint");
        int rc = train_save(&c, &ck, out, err, &secs);
        prof_pop();
        ph[PHASE_CKPT] += secs;
        if (rc) code = GL_EXIT_RUNTIME;
        else if (stopped_by) {
            int sig = train_signal_pending();
            const char *why = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT"
                              : stopped_by;
            fprintf(out, "stopped by %s at step %lld (epoch %lld) with a checkpoint; to continue, run the same "
                         "command with --resume auto (exit code %d)\n",
                    why, (long long)step, (long long)epoch, GL_EXIT_STOPPED);
            code = GL_EXIT_STOPPED;
        }
    } else if (stopped_by) {
        code = GL_EXIT_STOPPED;
    }
done:
    {
        char first[1024];
        int64_t k = loader_skipped(lt, first, sizeof first);
        if (k)
            fprintf(out, "galley: data.nonfinite: skip replaced %lld input samples holding NaN/Inf (first: %s)\n",
                    (long long)k, first);
        if (c.ls.on && c.ls.skipped > 0)
            fprintf(out, "galley: fp16 loss scaling skipped %lld steps with overflowing gradients; the scale ended at "
                         "%g\n", (long long)c.ls.skipped, c.ls.scale);
    }
    if (code == GL_EXIT_RUNTIME && w.steps > 0)  // the steps before the failure, for the record
        window_log(&lg, &w, &lr, ph, step, epoch, t_start, now_s(), false);
    res->steps = step;
    res->seconds = now_s() - t_start;
    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t_train = res->seconds - ph[PHASE_EVAL] - ph[PHASE_CKPT];
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
        if (!be->device) cpu_spin_describe(&spin, sum.threads_note, sizeof sum.threads_note);
        input_stage_describe(&stage, sum.input_note, sizeof sum.input_note);
        graph_replay_describe(&g, sum.replay_note, sizeof sum.replay_note);
        if (code == GL_EXIT_OK && res->target_reached == 0) code = GL_EXIT_TARGET;
        sum.exit_code = code;
        sum.status = code == GL_EXIT_RUNTIME ? "failed" : code == GL_EXIT_STOPPED ? "stopped"
                     : res->target_reached == 1 ? "target reached"
                     : res->target_reached == 0 ? "target not reached" : "finished";
        runlog_finish(&lg, &sum);
        if (code == GL_EXIT_TARGET)
            fprintf(out, "target NOT reached: %s; best %.4f (exit code %d)\n", target_words(r, tw, sizeof tw),
                    res->best, GL_EXIT_TARGET);
    }
    runlog_close(&lg);
    input_stage_free(&stage);
    train_ctx_free(&c);
    graph_free(&g);
    arena_free(&arena);
    loader_free(lt);
    loader_free(lv);
early:
    train_signals_restore();
    return code;
}
