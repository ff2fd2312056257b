// progress.c: the words and numbers of a run's log: progress lines, metrics.jsonl records, the
// names of phases and metrics. Pure formatting into caller buffers; nothing allocates.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "log/json.h"
#include "galley/runlog.h"

const char *phase_name(int phase) {
    static const char *const names[PHASE_COUNT] = {"data",      "forward",    "backward",   "communication",
                                                   "optimizer", "checkpoint", "evaluation", "other"};
    return phase >= 0 && phase < PHASE_COUNT ? names[phase] : "?";
}

const char *metric_short(int metric) {
    switch (metric) {
    case METRIC_ACCURACY: return "acc";
    case METRIC_TOPK: return "top_k";
    case METRIC_MAE: return "mae";
    case METRIC_MEAN_IOU: return "miou";
    case METRIC_L2_RELATIVE: return "l2rel";
    case METRIC_LOSS: return "loss";
    default: return "?";
    }
}

void metric_set_from(gl_metric_set *s, const gl_metrics *m) {
    static const int order[] = {METRIC_ACCURACY, METRIC_TOPK, METRIC_MAE, METRIC_MEAN_IOU, METRIC_L2_RELATIVE};
    s->n = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order && s->n < GL_LOG_MAX_METRICS; i++) {
        int id = order[i];
        if (!metrics_applies(m->target, id)) continue;
        if (id == METRIC_TOPK && m->classes <= m->k) continue;  // always 1: not worth a column
        if (id == METRIC_L2_RELATIVE && !m->rel_units) continue;  // tracked when the recipe names it
        s->id[s->n] = id;
        s->v[s->n++] = metrics_value(m, id);
    }
}

void format_duration(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0) snprintf(buf, len, "?");
    else if (s < 10) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else if (s < 360000) snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else snprintf(buf, len, "%.0fh", s / 3600);
}

// The value of the run's main metric in a set (NAN if absent).
static double metric_in(const gl_metric_set *s, int id) {
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return s->v[i];
    return NAN;
}

void format_rate(double v, char *buf, size_t len) {
    snprintf(buf, len, v < 10 ? "%.2f" : v < 100 ? "%.1f" : "%.0f", v);
}

void format_progress(const gl_runlog *lg, const gl_logpoint *p, char *buf, size_t len) {
    const gl_runinfo *in = &lg->info;
    char eta[32], metric[48] = "", rate[32];
    double left = p->step > 0 ? p->time / (double)p->step * (double)(in->total_steps - p->step) : NAN;
    format_duration(left, eta, sizeof eta);
    format_rate(p->samples_per_s, rate, sizeof rate);
    int mm = in->main_metric;
    if (mm != METRIC_NONE && mm != METRIC_LOSS) snprintf(metric, sizeof metric, "  %s %.4f", metric_short(mm), metric_in(&p->m, mm));
    snprintf(buf, len, "step %6lld/%lld (epoch %lld)  loss %.4f%s | lr %.4g | %s samples/s | ETA %s",
             (long long)p->step, (long long)in->total_steps, (long long)p->epoch, p->loss, metric, p->lr, rate, eta);
}

size_t format_record(const gl_logpoint *p, const char *kind, double wall_time, char *buf, size_t len) {
    jbuf b;
    jb_init(&b, buf, len);
    jb_open(&b, NULL, '{');
    jb_str(&b, "kind", kind);
    jb_int(&b, "step", p->step);
    jb_int(&b, "epoch", p->epoch);
    jb_fix(&b, "time", p->time, 4);
    jb_fix(&b, "wall_time", wall_time, 3);
    jb_num(&b, "loss", p->loss);
    jb_open(&b, "metrics", '{');
    for (int i = 0; i < p->m.n; i++) jb_num(&b, metrics_name(p->m.id[i]), p->m.v[i]);
    jb_close(&b);
    if (!strcmp(kind, "train")) {
        jb_num(&b, "lr", p->lr);
        jb_num(&b, "samples_per_s", p->samples_per_s);
        jb_open(&b, "time_breakdown", '{');
        for (int i = 0; i < PHASE_COUNT; i++) jb_fix(&b, phase_name(i), p->phase[i], 4);
        jb_close(&b);
    } else {
        jb_fix(&b, "seconds", p->seconds, 4);
    }
    jb_close(&b);
    return b.truncated ? 0 : b.len;
}
