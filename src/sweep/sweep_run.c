// sweep_run.c: `galley sweep`, the driver. Every rank loads the sweep file; the world splits
// into groups of ranks_per_trial (dist_split); each group's leader asks the coordinator (world
// rank 0, sweep_coord.c) for work and passes the answer to its group; the group trains that
// trial as an ordinary run (train_run on the group's gl_dist) in SWEEP_DIR/trials/<id>/run<k>,
// resuming from the trial's checkpoint (a promotion, or a run a signal stopped), and the leader
// reports the metric, or why the run failed. The sweep never dies with a trial: only a signal
// or the time limit stops it (exit 4, with the running trials checkpointed).
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/runlog.h"
#include "galley/train.h"
#include "sweep/sweep_run.h"

// The first line saying "error:" in text, without its prefix; else fallback.
static void first_error(const char *text, const char *fallback, char *buf, size_t len) {
    const char *e = text ? strstr(text, "error: ") : NULL;
    if (!e) {
        snprintf(buf, len, "%s", fallback);
        return;
    }
    e += 7;
    size_t n = strcspn(e, "\n");
    snprintf(buf, len, "%.*s", (int)n, e);
}

// The first run<k> of the trial without a metrics.jsonl (the leader's file system).
static int next_seg(const char *trial_dir) {
    for (int k = 0;; k++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/run%d/metrics.jsonl", trial_dir, k);
        if (access(p, F_OK) != 0) return k;
    }
}

// Trains job (every rank of the group); on the leader, fills res with what to report.
static void run_trial(sweep_ctx *x, const sweep_msg *job, sweep_msg *res) {
    const sweep_spec *s = x->s;
    bool leader = x->group.rank == 0;
    char tdir[4200], rdir[4300];
    snprintf(tdir, sizeof tdir, "%s/trials/%04lld", s->dir_path, (long long)job->trial);
    snprintf(rdir, sizeof rdir, "%s/run%d", tdir, job->seg);
    char **ov;
    int n = sweep_overrides(s, job->trial, job->rung, s->base_seed, job->time_left, false, &ov);
    char *text = NULL;
    size_t len = 0;
    FILE *errs = leader ? open_memstream(&text, &len) : fopen("/dev/null", "w");
    FILE *devnull = fopen("/dev/null", "w");
    GL_CHECK(errs && devnull, "cannot open a stream for the trial's messages");
    double t0 = runlog_now();
    recipe_t r;
    int code = recipe_load(&r, s->base_path, n, ov, errs) ? GL_EXIT_USAGE : GL_EXIT_OK;
    train_result tr;
    memset(&tr, 0, sizeof tr);
    // A signal that came between runs: train_run would forget it (it starts with a clean flag).
    int sig[1] = {train_signal_pending() || x->signalled};
    dist_max_ints(&x->group, sig, 1, "agreeing on a signal before a trial", 0);
    if (code == GL_EXIT_OK && sig[0]) {
        code = GL_EXIT_STOPPED;
    } else if (code == GL_EXIT_OK) {
        train_opts opts = {.run_dir = rdir, .resume = "auto", .dist = &x->group};
        if (x->world->rank == 0) opts.between_steps = coord_between_steps, opts.between_arg = x;
        code = train_run(&r, &opts, devnull, leader ? errs : stderr, &tr);
    }
    recipe_free(&r);
    if (train_signal_pending()) x->signalled = true;  // before the flag is reset
    train_signals_install();  // train_run put the default actions back; the sweep still wants the signals
    sweep_overrides_free(ov, n);
    fclose(devnull);
    fclose(errs);
    memset(res, 0, sizeof *res);
    res->kind = MSG_ASK;
    res->group = x->gid;
    res->trial = job->trial;
    res->rung = job->rung;
    res->code = code;
    res->steps = tr.steps;
    res->seconds = runlog_now() - t0;
    res->metric = NAN;
    if (leader) {
        if (code == GL_EXIT_STOPPED) {
            res->state = TS_PAUSED;
            snprintf(res->msg, sizeof res->msg, "stopped at step %lld", (long long)tr.steps);
        } else if (code == GL_EXIT_OK || code == GL_EXIT_TARGET) {
            res->state = sweep_read_metric(tdir, s->metric_name, &res->metric, res->msg, sizeof res->msg) == 0 &&
                                 isfinite(res->metric) ? TS_DONE : TS_FAILED;
            if (res->state == TS_FAILED && !res->msg[0]) snprintf(res->msg, sizeof res->msg, "the metric is not finite");
        } else {
            res->state = TS_FAILED;
            char fb[64];
            snprintf(fb, sizeof fb, "exit %d", code);
            first_error(text, fb, res->msg, sizeof res->msg);
        }
    }
    free(text);
}

// A group's loop: ask, train, report, until told to stop. Returns the sweep's exit code.
static int group_loop(sweep_ctx *x) {
    sweep_msg result = {.kind = MSG_ASK, .trial = -1}, reply;
    for (;;) {
        memset(&reply, 0, sizeof reply);
        if (x->group.rank == 0) {
            result.group = x->gid;
            result.signalled = train_signal_pending() || x->signalled;
            if (x->world->rank == 0) {
                coord_self(x, &result, &reply);
            } else {
                msg_send(x->world, &result, 0);
                msg_recv(x->world, &reply, 0);
            }
            if (reply.kind == MSG_RUN) {
                char tdir[4200];
                snprintf(tdir, sizeof tdir, "%s/trials/%04lld", x->s->dir_path, (long long)reply.trial);
                reply.seg = next_seg(tdir);
            }
        }
        msg_group_bcast(&x->group, &reply);
        if (reply.kind != MSG_RUN) return reply.code;
        run_trial(x, &reply, &result);
    }
}

// Loads the sweep file on every rank; only rank 0 prints its errors (all would print the same).
static int load_quietly(sweep_spec *s, const sweep_opts *o, const gl_dist *d, FILE *err) {
    int saved = -1;
    if (d->rank != 0) {
        fflush(err);
        saved = dup(2);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) dup2(null, 2), close(null);
    }
    int rc = sweep_load(s, o, err);
    if (saved >= 0) fflush(err), dup2(saved, 2), close(saved);
    return rc;
}

static int check_groups(const sweep_spec *s, const gl_dist *d, FILE *err) {
    if (d->world % s->ranks_per_trial == 0) return 0;
    if (d->rank == 0)
        fprintf(err, "%s:%d:%d: error: ranks_per_trial: %lld does not divide the %d ranks of this launch; start a "
                     "multiple of %lld ranks (mpirun -np, srun -n)\n", s->mark_rpt.file, s->mark_rpt.line,
                s->mark_rpt.col, (long long)s->ranks_per_trial, d->world, (long long)s->ranks_per_trial);
    return -1;
}

// Rank 0 at the end: the journal's last word, results, best.yaml, the table, the overhead.
static void finish(sweep_ctx *x, int code) {
    journal_note(&x->j, code == GL_EXIT_STOPPED ? "stop" : "finish", code);
    journal_close(&x->j);
    results_write(x->s, &x->sc, x->s->base_seed, x->err);
    int best_ok = results_best_yaml(x->s, &x->sc, x->s->base_seed, x->err) == 0;
    results_table(x->s, &x->sc, x->out);
    double wall = runlog_now() - x->t0;
    fprintf(x->out, "sweep: %lld runs in %.1f s; coordinator %.2f ms per run (deciding, journal fsync, answering)\n",
            (long long)x->assigned, wall, x->assigned ? 1e3 * x->overhead / (double)x->assigned : 0.0);
    if (code == GL_EXIT_STOPPED)
        fprintf(x->out, "sweep: stopped with the running trials checkpointed; to continue, run the same command with "
                        "--resume auto (exit code %d)\n", GL_EXIT_STOPPED);
    else if (!best_ok)
        fprintf(x->out, "sweep: no trial finished with a finite %s\n", x->s->metric_name);
    fflush(x->out);
}

static int sweep_go(sweep_ctx *x, const sweep_opts *o) {
    sweep_spec *s = x->s;
    gl_dist *d = x->world;
    x->groups = d->world / (int)s->ranks_per_trial;
    x->gid = d->rank / (int)s->ranks_per_trial;
    int code = 0;
    if (d->rank == 0) {
        sched_init(&x->sc, s);
        x->waiting = calloc((size_t)x->groups, sizeof(bool));
        GL_CHECK(x->waiting, "out of memory");
        code = journal_open(&x->j, s, &x->sc, o->resume != NULL, x->groups, x->out, x->err) ? GL_EXIT_USAGE : 0;
    }
    if ((code = dist_agree(d, code, "opening the sweep directory", x->err)) != 0) return code;
    if (d->rank == 0)
        fprintf(x->out, "galley sweep: %s, %lld trials%s, %d group%s of %lld rank%s, %s (%s), in %s\n",
                sweep_method_name(s->method), (long long)sweep_ntrials(s),
                s->method == SWEEP_ASHA ? " (asha rungs)" : "", x->groups, x->groups == 1 ? "" : "s",
                (long long)s->ranks_per_trial, s->ranks_per_trial == 1 ? "" : "s", s->metric_name,
                s->maximize ? "max" : "min", s->dir_path);
    dist_split(d, x->gid, d->rank, &x->group);
    train_signals_install();
    code = group_loop(x);
    if (d->rank == 0) {
        coord_finish(x);
        finish(x, code);
    }
    train_signals_restore();
    dist_split_free(&x->group);
    return code;
}

int sweep_main(const sweep_opts *o, FILE *out, FILE *err) {
    gl_dist world;
    if (dist_init(&world, 0, err) != 0) return GL_EXIT_USAGE;
    sweep_spec s;
    int code = GL_EXIT_USAGE;
    if (load_quietly(&s, o, &world, err) == 0 && check_groups(&s, &world, err) == 0) {
        sweep_ctx x;
        memset(&x, 0, sizeof x);
        x.s = &s, x.world = &world, x.out = out, x.err = err, x.t0 = runlog_now();
        code = sweep_go(&x, o);
        if (world.rank == 0) sched_free(&x.sc);
        free(x.waiting);
    }
    sweep_free(&s);
    dist_finalize(&world);
    return code;
}
