// run_mllog.c: the run's MLPerf HPC log (log.mlperf, mllog.h) at its phases: opened with the run
// log (a path that cannot be written stops the run before training), its start at run_start,
// epochs around the steps, each evaluation, run_stop at the end; and the two times the summary
// gives with it: time to train (run_start to the evaluation that reached the target) and time
// to the first step (from the process's start).
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/mllog.h"
#include "train/run.h"

// A resume with `true` gets a new run directory: the log continues the one in the newest earlier
// run directory beside it (log.dir/<name>/<timestamp>/) that has one, copied to path.
static void carry_previous(const char *run_dir, const char *path) {
    char parent[4096], best[256] = "", from[4400];
    snprintf(parent, sizeof parent, "%s", run_dir);
    char *slash = strrchr(parent, '/');
    if (!slash) return;
    *slash = 0;
    const char *self = slash + 1;
    DIR *dir = opendir(parent);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        snprintf(from, sizeof from, "%s/%s/mlperf.log", parent, e->d_name);
        if (e->d_name[0] != '.' && strcmp(e->d_name, self) < 0 && strcmp(e->d_name, best) > 0 &&
            access(from, R_OK) == 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    if (dir) closedir(dir);
    snprintf(from, sizeof from, "%s/%s/mlperf.log", parent, best);
    FILE *in = best[0] ? fopen(from, "rb") : NULL, *out = in ? fopen(path, "wb") : NULL;
    char buf[65536];
    size_t n;
    while (out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (out) fclose(out);
    if (in) fclose(in);
}

// Opens the log before the run directory is made (a file name; `true` without a run directory is
// an error) or just after it (in_run_dir: `true`, RUN_DIR/mlperf.log).
int run_mllog_open(gl_run *u, bool in_run_dir) {
    const recipe_t *r = u->r;
    char path[4200], why[4400], where[512];
    int ok = 1;
    mllog_path(r, u->lg.dir, path, sizeof path);
    bool is_true = path[0] && !strcmp(r->log.mlperf, "true");
    if (u->d->rank == 0 && path[0] && !u->opts->evaluate) {
        recipe_where(r, "log.mlperf", where, sizeof where);
        if (!in_run_dir && is_true && !r->log.files && !u->opts->run_dir) {
            fprintf(u->err, "%s: true writes RUN_DIR/mlperf.log but this run has no run directory (log.files is "
                            "false); give log.mlperf a file name\n", where);
            ok = 0;
        } else if (is_true == in_run_dir) {
            if (is_true && u->resume_path[0] && !u->opts->run_dir) carry_previous(u->lg.dir, path);
            // A checkpoint inside an epoch: the resumed run goes on in the epoch the stop's run_stop closed.
            int64_t step = u->ck.step, spe = u->steps_per_epoch;
            int64_t open_epoch = step > 0 && spe > 0 && step % spe != 0 ? step / spe + 1 : 0;
            if (mllog_open(&u->ml, path, u->resume_path[0] != 0, open_epoch, why, sizeof why) != 0) {
                fprintf(u->err, "%s: %s\n  hint: give log.mlperf a file in a directory you can write\n", where, why);
                ok = 0;
            }
        }
    }
    dist_bcast(u->d, &ok, sizeof ok, 0, "opening log.mlperf", 0);
    return ok ? GL_EXIT_OK : GL_EXIT_USAGE;
}

void run_mllog_start(gl_run *u) {
    const recipe_t *r = u->r;
    int m = r->train.target.metric;
    const char *bench = m == METRIC_MEAN_IOU ? "deepcam" : m == METRIC_MAE ? "cosmoflow" : r->name;
    char platform[800];
    snprintf(platform, sizeof platform, "galley %s", u->device);
    mllog_facts x = {.t_init = u->t_init, .t_stage0 = u->t_stage0, .t_stage1 = u->t_stage1, .t_start = u->t_start,
                     .benchmark = bench, .platform = platform,
                     .nodes = u->d->world / (u->d->local_world > 0 ? u->d->local_world : 1),
                     .accelerators_per_node = u->be->device ? u->d->local_world : 0,
                     .global_batch = r->train.batch_size, .train_samples = u->train.n, .eval_samples = u->val.n,
                     .lr_scaled = u->lr.base};
    mllog_start(&u->ml, r, &x);
}

// The metric the MLPerf log reports: the target's, else MAE (values) or accuracy.
static int mllog_metric(const gl_run *u) {
    int m = u->r->train.target.metric;
    if (m != METRIC_NONE && m != METRIC_LOSS) return m;
    return u->train.target == TARGET_VALUES ? METRIC_MAE : METRIC_ACCURACY;
}

void run_mllog_eval(gl_run *u, double te, double te2) {
    int m = mllog_metric(u);
    mllog_eval(&u->ml, te, te2, u->epoch, u->samples_base + u->seen_total, m, metrics_value(&u->vm, m),
               u->res->target_reached == 1);
}

void run_mllog_stop(gl_run *u, double t, gl_runsummary *sum) {
    sum->time_to_train = sum->time_to_first_step = NAN;
    if (!u->ml.f) return;
    mllog_run_stop(&u->ml, t, u->epoch, u->res->target_reached == 1 ? "success" : "aborted");
    sum->mlperf = true;
    if (!isnan(u->ml.t_target) && !isnan(u->ml.t_run_start)) sum->time_to_train = u->ml.t_target - u->ml.t_run_start;
    if (u->t_first_step > 0) sum->time_to_first_step = u->t_first_step - u->t_init;
}
