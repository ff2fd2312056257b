// lr.c: the learning-rate rule (formulas in include/galley/lr.h). Warmup and cosine follow
// PyTorch's LinearLR(start_factor=1/W) and CosineAnnealingLR(T_max=total-W, eta_min=end_lr),
// multistep MultiStepLR with per-milestone factors (as CosmoFlow's reference writes them).
#include "galley/lr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "galley/check.h"

static const double PI = 3.14159265358979323846;

static int64_t to_steps(const gl_lr *s, double units) {
    double steps = s->unit == SCHED_UNIT_EPOCHS ? units * (double)s->steps_per_epoch : units;
    return (int64_t)llround(steps);
}

void lr_init(gl_lr *s, const recipe_t *r, int64_t batch_size, int64_t steps_per_epoch, int64_t total_steps) {
    memset(s, 0, sizeof *s);
    s->lr = r->optimizer.lr;
    s->scaling = r->optimizer.schedule.scaling;
    s->batch = batch_size;
    s->base_batch = r->optimizer.schedule.base_batch;
    s->unit = r->optimizer.schedule.unit;
    s->steps_per_epoch = steps_per_epoch;
    s->total_steps = total_steps;
    GL_CHECK(s->unit != SCHED_UNIT_EPOCHS || steps_per_epoch > 0, "epoch units need steps_per_epoch > 0");
    double ratio = s->base_batch > 0 ? (double)batch_size / (double)s->base_batch : 1.0;
    s->base = s->lr * (s->scaling == SCALE_LINEAR ? ratio : s->scaling == SCALE_SQRT ? sqrt(ratio) : 1.0);
    s->warmup_units = r->optimizer.schedule.warmup;
    s->warmup = to_steps(s, r->optimizer.schedule.warmup);
    s->decay = r->optimizer.schedule.decay;
    if (s->decay == DECAY_MULTISTEP) {
        // The recipe checked one factor per milestone, increasing milestones.
        const gl_floats *ms = &r->optimizer.schedule.milestones, *fs = &r->optimizer.schedule.factors;
        s->nmilestones = ms->n < fs->n ? ms->n : fs->n;
        for (int i = 0; i < s->nmilestones; i++) {
            s->milestone_units[i] = ms->v[i];
            s->milestones[i] = to_steps(s, ms->v[i]);
            s->factors[i] = fs->v[i];
        }
    }
    s->end_lr = r->optimizer.schedule.end_lr;
    s->power = r->optimizer.schedule.power;
}

double lr_at(const gl_lr *s, int64_t step) {
    if (step < 0) step = 0;
    if (step < s->warmup) return s->base * (double)(step + 1) / (double)s->warmup;
    switch (s->decay) {
    case DECAY_MULTISTEP: {
        double f = 1.0;
        for (int i = 0; i < s->nmilestones && step >= s->milestones[i]; i++) f = s->factors[i];
        return s->base * f;
    }
    case DECAY_COSINE:
    case DECAY_POLY: {
        int64_t span = s->total_steps - s->warmup;
        double t = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
        if (t > 1.0) t = 1.0;
        double shape = s->decay == DECAY_COSINE ? 0.5 * (1.0 + cos(PI * t)) : pow(1.0 - t, s->power);
        return s->end_lr + (s->base - s->end_lr) * shape;
    }
    default:
        return s->base;
    }
}

// Appends to buf at *pos, never past len (the line is cut short rather than overflowing).
static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...) {
    if (*pos >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *pos, len - *pos, fmt, ap);
    va_end(ap);
    if (k > 0) *pos += (size_t)k < len - *pos ? (size_t)k : len - *pos - 1;
}

void lr_describe(const gl_lr *s, char *buf, size_t len) {
    if (!buf || len == 0) return;
    buf[0] = '\0';
    size_t p = 0;
    const bool epochs = s->unit == SCHED_UNIT_EPOCHS;
    put(buf, len, &p, "lr %g", s->base);
    if (s->scaling == SCALE_LINEAR)
        put(buf, len, &p, " = %g x %lld/%lld", s->lr, (long long)s->batch, (long long)s->base_batch);
    else if (s->scaling == SCALE_SQRT)
        put(buf, len, &p, " = %g x sqrt(%lld/%lld)", s->lr, (long long)s->batch, (long long)s->base_batch);
    if (s->warmup > 0) {
        if (epochs)
            put(buf, len, &p, "; warmup %g epoch%s = %lld step%s", s->warmup_units, s->warmup_units == 1 ? "" : "s",
                (long long)s->warmup, s->warmup == 1 ? "" : "s");
        else put(buf, len, &p, "; warmup %lld step%s", (long long)s->warmup, s->warmup == 1 ? "" : "s");
        put(buf, len, &p, " from %g", lr_at(s, 0));
    }
    put(buf, len, &p, s->warmup > 0 ? "; then " : "; ");
    switch (s->decay) {
    case DECAY_MULTISTEP:
        for (int i = 0; i < s->nmilestones; i++) {
            put(buf, len, &p, "%sx%g = %g at step %lld", i ? ", " : "", s->factors[i], s->base * s->factors[i],
                (long long)s->milestones[i]);
            if (epochs) put(buf, len, &p, " (epoch %g)", s->milestone_units[i]);
        }
        break;
    case DECAY_COSINE:
        put(buf, len, &p, "cosine to %g at step %lld", s->end_lr, (long long)s->total_steps);
        break;
    case DECAY_POLY:
        put(buf, len, &p, "poly power %g to %g at step %lld", s->power, s->end_lr, (long long)s->total_steps);
        break;
    default:
        put(buf, len, &p, "constant");
        break;
    }
}
