// mllog.c: the MLPerf HPC log (mllog.h). Lines follow mlperf_logging's format: `:::MLLOG ` then
// one JSON object with namespace, time_ms (unix milliseconds), event_type, key, value, metadata.
// Galley's runs are "open" division results: its data and (DeepCAM) network differ from the
// closed reference, so the closed rules' fixed dataset sizes do not apply.
#include "galley/mllog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/runlog.h"

const char *mllog_path(const recipe_t *r, const char *run_dir, char *buf, size_t len) {
    const char *v = r->log.mlperf;
    if (!v || !strcmp(v, "false")) snprintf(buf, len, "%s", "");
    else if (!strcmp(v, "true")) snprintf(buf, len, "%s/mlperf.log", run_dir && run_dir[0] ? run_dir : ".");
    else snprintf(buf, len, "%s", v);
    return buf;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A resume: drops the run_stop lines (the resumed run writes its own, so the run reads as one) and learns
// run_start's time. open_epoch > 0: the resumed run starts inside that epoch, which only the stop's
// run_stop closed (the loop closes an epoch at its last step): the epoch_stop and block_stop at
// the end go too, and the epoch stays open. Returns the open file, or NULL (errno) when it cannot
// be rewritten.
static FILE *continue_file(gl_mllog *m, const char *path, int64_t open_epoch) {
    FILE *in = fopen(path, "r");
    if (!in) return fopen(path, "w");
    char line[4096];
    long keep = 0, closers = -1;  // closers: where the epoch_stop and block_stop at the end begin
    while (fgets(line, sizeof line, in)) {
        if (strstr(line, "\"key\": \"run_stop\"")) continue;  // the resumed run writes its own
        bool closer = strstr(line, "\"key\": \"epoch_stop\"") || strstr(line, "\"key\": \"block_stop\"");
        if (!closer) closers = -1;
        else if (closers < 0) closers = keep;
        keep = ftell(in);
        const char *ts = strstr(line, "\"time_ms\": ");
        if (strstr(line, "\"key\": \"run_start\"") && ts) {
            m->continued = true;
            m->t_run_start = strtod(ts + 11, NULL) / 1000.0 - m->wall_off;
        }
    }
    fclose(in);
    if (!m->continued) return fopen(path, "w");
    if (open_epoch > 0) {
        if (closers >= 0) keep = closers;
        m->in_epoch = true, m->epoch = open_epoch;
    }
    if (truncate(path, keep) != 0) return NULL;
    return fopen(path, "a");
}

int mllog_open(gl_mllog *m, const char *path, bool resume, int64_t open_epoch, char *why, size_t len) {
    memset(m, 0, sizeof *m);
    m->t_run_start = NAN;
    m->t_target = NAN;
    m->wall_off = wall_now() - runlog_now();
    if (!path || !path[0]) return 0;
    m->f = resume ? continue_file(m, path, open_epoch) : fopen(path, "w");
    if (!m->f) {
        snprintf(why, len, "cannot write the MLPerf log %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void mllog_close(gl_mllog *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}

void mllog_line(gl_mllog *m, double t, const char *type, const char *key, const char *value, const char *meta) {
    if (!m->f) return;
    fprintf(m->f, ":::MLLOG {\"namespace\": \"\", \"time_ms\": %.0f, \"event_type\": \"%s\", \"key\": \"%s\", "
                  "\"value\": %s, \"metadata\": {%s}}\n",
            floor((t + m->wall_off) * 1000.0), type, key, value, meta ? meta : "");
    fflush(m->f);
}

// A JSON string of v: quotes, backslashes and control bytes escaped, cut to fit (never inside
// an escape), always closed.
static void point_str(gl_mllog *m, double t, const char *key, const char *v) {
    char q[512];
    size_t k = 0;
    q[k++] = '"';
    for (const unsigned char *c = (const unsigned char *)(v ? v : ""); *c && k + 8 < sizeof q; c++) {
        if (*c == '"' || *c == '\\') q[k++] = '\\', q[k++] = (char)*c;
        else if (*c < 0x20) k += (size_t)snprintf(q + k, sizeof q - k, "\\u%04x", *c);
        else q[k++] = (char)*c;
    }
    q[k++] = '"';
    q[k] = 0;
    mllog_line(m, t, "POINT", key, q, NULL);
}

static void point_num(gl_mllog *m, double t, const char *key, double v) {
    char q[64];
    snprintf(q, sizeof q, "%.10g", v);
    mllog_line(m, t, "POINT", key, q, NULL);
}

static void point_int(gl_mllog *m, double t, const char *key, int64_t v) {
    char q[32];
    snprintf(q, sizeof q, "%lld", (long long)v);
    mllog_line(m, t, "POINT", key, q, NULL);
}

// A JSON list of numbers (milestones, factors); each scaled by mul.
static const char *list(char *buf, size_t len, const gl_floats *f, double mul) {
    size_t p = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < f->n && p < len; i++)
        p += (size_t)snprintf(buf + p, len - p, "%s%.10g", i ? ", " : "", f->v[i] * mul);
    if (p < len) snprintf(buf + p, len - p, "]");
    return buf;
}

// opt_* keys (and DeepCAM's scheduler_* names for LAMB) of the optimizer and schedule in use.
static void header_optim(gl_mllog *m, double t, const recipe_t *r, double lr_scaled) {
    static const char *const names[] = {"SGD", "AdamW", "LAMB"};
    _Static_assert(sizeof names / sizeof names[0] == OPT_COUNT, "an MLPerf opt_name for each optimizer rule");
    const __typeof__(r->optimizer.schedule) *s = &r->optimizer.schedule;
    const char *unit = s->unit == SCHED_UNIT_EPOCHS ? "epochs" : "steps";
    char key[96], buf[1024];
    point_str(m, t, "opt_name", names[r->optimizer.type]);
    point_num(m, t, "opt_base_learning_rate", r->optimizer.lr);
    point_num(m, t, "opt_weight_decay", r->optimizer.weight_decay);
    if (r->optimizer.type == OPT_SGD) point_num(m, t, "opt_momentum", r->optimizer.momentum);
    snprintf(key, sizeof key, "opt_learning_rate_warmup_%s", unit);
    point_num(m, t, key, s->warmup);
    // The learning rate warmup reaches, over optimizer.lr: the batch scaling (galley's warmup starts near 0).
    point_num(m, t, "opt_learning_rate_warmup_factor", lr_scaled / r->optimizer.lr);
    gl_floats none = {0};
    snprintf(key, sizeof key, "opt_learning_rate_decay_boundary_%s", unit);
    mllog_line(m, t, "POINT", key, list(buf, sizeof buf, s->decay == DECAY_MULTISTEP ? &s->milestones : &none, 1), NULL);
    mllog_line(m, t, "POINT", "opt_learning_rate_decay_factor",
               list(buf, sizeof buf, s->decay == DECAY_MULTISTEP ? &s->factors : &none, 1), NULL);
    if (r->optimizer.type == OPT_SGD) return;
    snprintf(buf, sizeof buf, "[%.10g, %.10g]", r->optimizer.beta1, r->optimizer.beta2);
    mllog_line(m, t, "POINT", "opt_betas", buf, NULL);
    point_num(m, t, "opt_eps", r->optimizer.eps);
    if (r->optimizer.type != OPT_LAMB) return;
    point_num(m, t, "opt_lr", lr_scaled);
    static const char *const decays[] = {"constant", "multistep", "cosine_annealing", "poly"};
    point_str(m, t, "scheduler_type", decays[s->decay]);
    if (s->unit == SCHED_UNIT_STEPS) point_num(m, t, "scheduler_lr_warmup_steps", s->warmup);
    if (s->decay == DECAY_MULTISTEP) {
        mllog_line(m, t, "POINT", "scheduler_milestones", list(buf, sizeof buf, &s->milestones, 1), NULL);
        point_num(m, t, "scheduler_decay_rate", s->factors.n ? s->factors.v[0] : 1);
    }
}

void mllog_start(gl_mllog *m, const recipe_t *r, const mllog_facts *x) {
    if (!m->f || m->continued) return;
    double t = x->t_init;
    mllog_line(m, t, "INTERVAL_START", "init_start", "null", NULL);
    point_str(m, t, "submission_benchmark", x->benchmark);
    point_str(m, t, "submission_org", "Galley");
    point_str(m, t, "submission_division", "open");
    point_str(m, t, "submission_status", "research");
    point_str(m, t, "submission_platform", x->platform);
    point_int(m, t, "number_of_nodes", x->nodes);
    point_int(m, t, "accelerators_per_node", x->accelerators_per_node);
    mllog_line(m, t, "POINT", "cache_clear", "false", NULL);  // galley does not drop the page cache
    point_int(m, t, "seed", r->seed);
    point_int(m, t, "global_batch_size", x->global_batch);
    point_int(m, t, "gradient_accumulation_frequency", 1);
    point_int(m, t, "train_samples", x->train_samples);
    point_int(m, t, "eval_samples", x->eval_samples);
    header_optim(m, t, r, x->lr_scaled);
    if (x->t_stage1 > x->t_stage0) {
        mllog_line(m, x->t_stage0, "INTERVAL_START", "staging_start", "null", NULL);
        mllog_line(m, x->t_stage1, "INTERVAL_END", "staging_stop", "null", NULL);
    }
    mllog_line(m, x->t_start, "INTERVAL_END", "init_stop", "null", NULL);
    mllog_line(m, x->t_start, "INTERVAL_START", "run_start", "null", NULL);
    m->t_run_start = x->t_start;
}

void mllog_epoch(gl_mllog *m, double t, int64_t epoch, bool start) {
    if (!m->f || start == m->in_epoch) return;
    char meta[128];
    if (start) {
        snprintf(meta, sizeof meta, "\"first_epoch_num\": %lld, \"epoch_count\": 1", (long long)epoch);
        mllog_line(m, t, "INTERVAL_START", "block_start", "null", meta);
        snprintf(meta, sizeof meta, "\"epoch_num\": %lld", (long long)epoch);
        mllog_line(m, t, "INTERVAL_START", "epoch_start", "null", meta);
        m->epoch = epoch;
    } else {
        snprintf(meta, sizeof meta, "\"epoch_num\": %lld", (long long)m->epoch);
        mllog_line(m, t, "INTERVAL_END", "epoch_stop", "null", meta);
        snprintf(meta, sizeof meta, "\"first_epoch_num\": %lld, \"epoch_count\": 1", (long long)m->epoch);
        mllog_line(m, t, "INTERVAL_END", "block_stop", "null", meta);
    }
    m->in_epoch = start;
}

void mllog_eval(gl_mllog *m, double t0, double t1, int64_t epoch, int64_t samples, int metric, double v,
                bool reached) {
    if (!m->f) return;
    char meta[128], val[64];
    snprintf(meta, sizeof meta, "\"epoch_num\": %lld", (long long)epoch);
    mllog_line(m, t0, "INTERVAL_START", "eval_start", "null", meta);
    snprintf(meta, sizeof meta, "\"epoch_num\": %lld, \"samples_count\": %lld", (long long)epoch, (long long)samples);
    snprintf(val, sizeof val, isfinite(v) ? "%.10g" : "null", v);
    bool error = metric == METRIC_MAE || metric == METRIC_L2_RELATIVE;  // lower is better
    mllog_line(m, t1, "POINT", error ? "eval_error" : "eval_accuracy", val, meta);
    mllog_line(m, t1, "INTERVAL_END", "eval_stop", "null", meta);
    if (reached && isnan(m->t_target)) m->t_target = t1;
}

void mllog_run_stop(gl_mllog *m, double t, int64_t epoch, const char *status) {
    if (!m->f) return;
    mllog_epoch(m, t, epoch, false);
    char meta[128];
    snprintf(meta, sizeof meta, "\"status\": \"%s\"", status);
    mllog_line(m, t, "INTERVAL_END", "run_stop", "null", meta);
}
