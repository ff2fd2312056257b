// train_ckpt.c: checkpoints from the loop's side: rank 0 reads and writes the files, every rank
// learns the outcome (and, on resume, the weights), so all ranks act together.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "galley/check.h"
#include "galley/runlog.h"
#include "train/run_hang.h"  // train_ckpt_write
#include "train/train_internal.h"

int train_resume_pick(const recipe_t *r, const char *resume, gl_dist *d, char *path, size_t len, int64_t *step,
                      bool quiet_fresh, FILE *out, FILE *err) {
    int status[2] = {GL_EXIT_OK, 0};  // exit code, path length
    path[0] = 0;
    *step = 0;
    if (d->rank == 0) {
        char why[1024];
        if (strcmp(resume, "auto") != 0) {
            if (ckpt_verify(resume, step, why, sizeof why) != 0) {
                fprintf(err, "galley: error: --resume %s: %s\n  hint: `galley ckpt inspect FILE` shows what it holds; "
                             "--resume auto picks the newest good checkpoint in checkpoint.dir\n", resume, why);
                status[0] = GL_EXIT_USAGE;
            } else {
                snprintf(path, len, "%s", resume);
            }
        } else {
            char **p;
            int64_t *s;
            int n = ckpt_list(r->checkpoint.dir, r->name, &p, &s);
            for (int i = 0; i < n && !path[0]; i++) {
                if (ckpt_verify(p[i], step, why, sizeof why) == 0) snprintf(path, len, "%s", p[i]);
                else fprintf(out, "galley: --resume auto: skipping %s: %s; trying the previous one\n", p[i], why);
            }
            if (!path[0] && !quiet_fresh)
                fprintf(out, "galley: --resume auto: %s in %s/, starting from scratch\n",
                        n ? "no good checkpoint" : "no checkpoint", r->checkpoint.dir);
            ckpt_list_free(p, s, n);
        }
        status[1] = (int)strlen(path);
    }
    dist_bcast(d, status, sizeof status, 0, "choosing the checkpoint to resume", 0);
    if (status[0] != GL_EXIT_OK) return status[0];
    dist_bcast(d, path, status[1] + 1, 0, "choosing the checkpoint to resume", 0);
    dist_bcast(d, step, sizeof *step, 0, "choosing the checkpoint to resume", 0);
    return GL_EXIT_OK;
}

int train_resume_load(train_ctx *c, const char *path, gl_ckpt_state *st, FILE *err) {
    if (c->full) return train_whole_load(c, path, st, err);  // tensor parallelism
    int code = GL_EXIT_OK;
    if (c->d->rank == 0) {
        char why[1024];
        int rc = ckpt_read(path, c->r, c->g, c->opt, st, why, sizeof why);
        if (rc != 0) {
            fprintf(err, "galley: error: cannot resume: %s\n", why);
            code = rc == -2 ? GL_EXIT_USAGE : GL_EXIT_RUNTIME;
        }
    }
    dist_bcast(c->d, &code, sizeof code, 0, "reading the checkpoint", 0);
    if (code != GL_EXIT_OK || c->d->world == 1) return code;
    gl_graph *g = c->g;
    gl_optim *o = c->opt;
    dist_bcast(c->d, st, sizeof *st, 0, "sharing the checkpoint", 0);
    dist_bcast(c->d, &o->steps, sizeof o->steps, 0, "sharing the checkpoint", 0);
    dist_bcast_floats(c->d, g->params, g->nparams, 0, "sharing the checkpoint's parameters", 0);
    float *bufs[3] = {o->velocity, o->m, o->v};
    for (int b = 0; b < 3; b++)
        if (bufs[b]) dist_bcast_floats(c->d, bufs[b], o->n, 0, "sharing the checkpoint's optimizer state", 0);
    train_share_state(c, 0);
    return GL_EXIT_OK;
}

// Writes st's checkpoint of the model g and optimizer o (this rank's, or the whole model gathered).
static int ckpt_write_as(train_ctx *c, const gl_graph *g, const gl_optim *o, const gl_ckpt_state *st, FILE *out,
                         FILE *err) {
    double t0 = runlog_now();
    char path[4200], why[4400];
    ckpt_path(path, sizeof path, c->r->checkpoint.dir, c->r->name, st->step);
    if (ckpt_prepare_dir(c->r->checkpoint.dir, why, sizeof why) != 0 ||
        ckpt_write(path, c->r, g, o, st, why, sizeof why) != 0) {
        fprintf(err, "galley: error: checkpoint at step %lld not written: %s\n"
                     "  hint: free space or fix checkpoint.dir, then resume from the last checkpoint with "
                     "--resume auto\n", (long long)st->step, why);
        return -1;
    }
    struct stat sb;
    double mib = stat(path, &sb) == 0 ? (double)sb.st_size / 1048576.0 : NAN;
    int64_t later;
    ckpt_prune(c->r->checkpoint.dir, c->r->name, c->r->checkpoint.keep, st->step, &later);
    fprintf(out, "checkpoint: %s (step %lld, %.2f MiB, %.2f s)\n", path, (long long)st->step, mib,
            runlog_now() - t0);
    // A fresh run in a directory holding a longer run of the same name: pruning by step alone
    // deleted this run's checkpoints as soon as they were written.
    if (later >= 0 && !c->said_later) {
        fprintf(err, "galley: warning: %s/ holds checkpoints of '%s' up to step %lld, later than this run's: they "
                     "are kept, and checkpoint.keep counts this run's alone, but --resume auto would pick them\n"
                     "  hint: give this run another name or checkpoint.dir\n",
                c->r->checkpoint.dir, c->r->name, (long long)later);
        c->said_later = true;
    }
    fflush(out);
    return 0;
}

int train_ckpt_write(train_ctx *c, const gl_ckpt_state *st, FILE *out, FILE *err) {
    return ckpt_write_as(c, c->g, c->opt, st, out, err);
}

int train_save(train_ctx *c, const gl_ckpt_state *st, FILE *out, FILE *err, double *seconds) {
    double t0 = runlog_now();
    int ok = 1;
    if (c->full) {  // tensor parallelism: the whole model gathered onto world rank 0 first
        float *bufs[4] = {0};
        gl_graph wg;
        gl_optim wo;
        if (train_whole_gather(c, bufs, &wg, &wo, st->step)) ok = ckpt_write_as(c, &wg, &wo, st, out, err) == 0;
        train_whole_free(bufs);
    } else {
        ok = c->d->rank != 0 || train_ckpt_write(c, st, out, err) == 0;
    }
    dist_bcast(c->world ? c->world : c->d, &ok, sizeof ok, 0, "waiting for rank 0's checkpoint", st->step);
    *seconds = runlog_now() - t0;
    return ok ? 0 : -1;
}
