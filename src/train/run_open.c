// run_open.c: a run's set-up, in order (the batch's split over ranks, the backend, the checkpoint
// to continue, the checkpoint directory, the data and model, the run log), and run_close, which
// frees whatever of it was done. Every step that can fail on one rank is agreed across ranks,
// so that all stop together.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "galley/arena.h"
#include "galley/check.h"
#include "train/run.h"

void run_init(gl_run *u, const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res) {
    static const train_opts defaults = {0};
    if (!opts) opts = &defaults;
    memset(res, 0, sizeof *res);
    res->target_reached = r->train.target.metric == METRIC_NONE ? -1 : 0;
    res->best = NAN;
    res->best_loss = NAN;
    res->last_loss = NAN;  // until an evaluation runs (a resumed run may have none)
    memset(u, 0, sizeof *u);
    u->r = r;
    u->opts = opts;
    u->res = res;
    u->out = out;
    u->err = err;
    u->solo = (gl_dist){.world = 1, .local_world = 1, .launcher = "none"};
    u->d = opts->dist ? opts->dist : &u->solo;
    u->precision = PRECISION_FP32;
    dist_set_timeout(u->d, r->distributed.timeout);
    u->t_init = now_s();
}

// Checks the batch against the data-parallel ranks d (and parts). GL_EXIT_OK or GL_EXIT_USAGE
// (printed by world rank 0: say).
static int check_split(const recipe_t *r, const gl_dist *d, bool say, FILE *err) {
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
    if (say) fprintf(err, "%s: error: %s\n", r->file, msg);
    return GL_EXIT_USAGE;
}

// The backend for train.device, and its threads.
static int open_backend(gl_run *u) {
    const recipe_t *r = u->r;
    gl_dist *d = u->d;
    u->be = train_pick_backend(r, d, u->device, sizeof u->device, u->device_note, sizeof u->device_note,
                               &u->precision, u->err);
    double ok = u->be != NULL;  // every rank learns whether any failed, so none waits alone
    dist_sum_doubles(d, &ok, 1, "choosing train.device", 0);
    if (ok < d->world) return GL_EXIT_USAGE;
    int threads = train_threads(r);
    // Ranks sharing a node without a CPU binding (srun with task/none, mpirun --bind-to none)
    // would each take every core: give each its share instead.
    if (r->train.threads == 0 && d->local_world > 1) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        if (online > 0 && threads >= online) threads = (int)(online / d->local_world) > 0 ? (int)(online / d->local_world) : 1;
    }
    u->threads = threads;
    u->be->set_threads(threads);
    return GL_EXIT_OK;
}

// Which checkpoint to continue, first: the loaders start at its step. Then a checkpoint
// directory that cannot be written is found now, not after hours of training.
static int open_resume(gl_run *u) {
    const recipe_t *r = u->r;
    const train_opts *opts = u->opts;
    gl_dist *d = u->d;
    int code;
    if (opts->resume && (code = train_resume_pick(r, opts->resume, d, u->resume_path, sizeof u->resume_path,
                                                  &u->resume_step, opts->evaluate, u->out, u->err)))
        return code;
    if (opts->evaluate && !u->resume_path[0]) {
        if (d->rank == 0) fprintf(u->err, "galley eval: error: no checkpoint to evaluate in %s/\n", r->checkpoint.dir);
        return GL_EXIT_USAGE;
    }
    int ok = 1;
    char why[4400];
    if (d->rank == 0 && !opts->evaluate && ckpt_prepare_dir(r->checkpoint.dir, why, sizeof why) != 0) {
        fprintf(u->err, "%s: error: %s\n  hint: set checkpoint.dir to a directory you can write (checkpoints are "
                        "written at the end, every checkpoint.every_steps/every_minutes, and on SIGTERM/SIGUSR1)\n",
                r->file, why);
        ok = 0;
    }
    dist_bcast(d, &ok, sizeof ok, 0, "checking checkpoint.dir", 0);
    return ok ? GL_EXIT_OK : GL_EXIT_USAGE;
}

// The model's one arena and what lives in it, then the checkpoint's weights (resume).
static int open_model(gl_run *u) {
    const recipe_t *r = u->r;
    arena_init_for(&u->arena, u->bytes, u->be);
    u->arena_on = true;
    graph_bind(&u->g, &u->arena);
    run_grid_init_params(u);
    u->g.seed = (uint64_t)r->seed;
    optim_init(&u->opt, r, &u->g, &u->arena);
    loss_init(&u->loss, r, &u->train);
    train_ctx_init(&u->c, r, u->dp, &u->g, &u->loss, &u->opt, &u->train, &u->arena);
    u->ctx_on = true;
    if (u->grid_on) {  // the tensor group's sums, and the whole model's layout for checkpoints
        train_ctx_grid(&u->c, u->d, &u->grid, u->full_on ? &u->full : NULL);
        grid_bind(&u->grid, &u->g, &u->c.step);
    }
    input_stage_init(&u->stage, u->be, &u->g, u->lt, u->staging, &u->arena, u->stage_note, sizeof u->stage_note);
    u->stage_on = true;
    u->c.stage = &u->stage;
    loss_scale_init(&u->c.ls, u->precision == PRECISION_FP16);
    u->ck = (gl_ckpt_state){.best = NAN, .best_loss = NAN, .world = u->dp->world, .parts = u->c.parts,
                            .threads = u->threads};
    int code;
    if (u->resume_path[0] && (code = train_resume_load(&u->c, u->resume_path, &u->ck, u->err)) != GL_EXIT_OK)
        return code;
    // fp16's loss scale continues from the checkpoint when it has one (not: older files, other precisions).
    u->scaler_restored = u->ck.scaler_saved && u->c.ls.on &&
                         loss_scale_restore(&u->c.ls, u->ck.scaler.scale, u->ck.scaler.good, u->ck.scaler.skipped) == 0;
    metrics_init_run(&u->tm, &u->train, r);
    metrics_init_run(&u->vm, &u->val, r);
    metrics_init_run(&u->w.m, &u->train, r);
    lr_init(&u->lr, r, r->train.batch_size < u->train.n ? r->train.batch_size : u->train.n, u->steps_per_epoch,
            u->total_steps);
    return GL_EXIT_OK;
}

// From here on everything printed is also kept in the run directory's console.log.
static int open_log(gl_run *u) {
    gl_dist *d = u->d;
    // Only rank 0 writes the run directory: the others learn here whether it could.
    int code = runlog_open(&u->lg, u->r, u->opts->run_dir, d->rank, u->out, u->err);
    u->log_on = true;
    code = dist_agree(d, code, "opening the run directory", u->err);
    if (code == GL_EXIT_OK) code = run_mllog_open(u, true);
    if (code != GL_EXIT_OK) return code;
    // Launchers hand rank 0 a pseudo-terminal that ends in a log file: no in-place line there.
    if (d->mpi) u->lg.tty = false;
    snprintf(u->res->run_dir, sizeof u->res->run_dir, "%s", u->lg.dir);
    u->out = u->lg.out;
    u->err = u->lg.err;
    if (u->device_note[0]) fputs(u->device_note, u->out);
    if (u->stage_note[0]) fprintf(u->out, "galley: note: %s\n", u->stage_note);
    graph_replay_setup(&u->g, u->r->train.cuda_graphs, u->err);
    return GL_EXIT_OK;
}

int run_open(gl_run *u) {
    int code = run_grid_open(u);  // distributed.tensor_parallel: u->dp, the data-parallel group
    if (code == GL_EXIT_OK) code = check_split(u->r, u->dp, u->d->rank == 0, u->err);
    if (code == GL_EXIT_OK) code = open_backend(u);
    if (code == GL_EXIT_OK) code = open_resume(u);
    if (code != GL_EXIT_OK) return code;
    // A rank whose data or plan fails says why and goes on to the agreement (dist_agree) with
    // its code, so that every rank stops there at once instead of the others waiting in their
    // first collective until distributed.timeout: a rank alone may lack a file, a stage
    // directory or memory on its node. The GPU check gathers every rank's GPU: it runs on every
    // rank that got this far.
    int setup = run_open_data(u);
    if (setup == GL_EXIT_OK) setup = run_plan(u);
    if ((setup = dist_agree(u->d, setup, "opening the data and planning the model", u->err)) == GL_EXIT_OK)
        setup = train_device_fits(u->r, u->be, u->d, u->bytes, u->err);
    if (setup != GL_EXIT_OK) return setup;
    code = open_model(u);
    if (code == GL_EXIT_OK) code = run_mllog_open(u, false);  // a file name: before the run directory
    if (code == GL_EXIT_OK) code = open_log(u);
    return code;
}

void run_close(gl_run *u) {
    if (u->log_on) runlog_close(&u->lg);
    mllog_close(&u->ml);
    if (u->stage_on) input_stage_free(&u->stage);
    if (u->ctx_on) train_ctx_free(&u->c);
    graph_free(&u->g);
    run_grid_close(u);
    if (u->arena_on) arena_free(&u->arena);
    if (u->lt) loader_free(u->lt);
    if (u->lv) loader_free(u->lv);
}
