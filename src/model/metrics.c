// metrics.c: validation metrics from the model output: accuracy (per sample or per pixel),
// top-5, loss, mean absolute error, relative L2 error, per-class and mean IoU. Sums are exact
// integer counts or accumulated in sample order, so they do not depend on threads or batch
// boundaries (the relative L2 error's to rounding: each batch adds its mean times its ratios).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "galley/backend.h"
#include "galley/loss.h"

void metrics_init(gl_metrics *m, const gl_dataset *d, int k) {
    memset(m, 0, sizeof *m);
    m->k = k;
    m->target = d->target;
    m->classes = d->classes;
    m->tsize = d->tsize;
}

void metrics_init_run(gl_metrics *m, const gl_dataset *d, const recipe_t *r) {
    metrics_init(m, d, (int)r->train.top_k);
    bool rel = r->train.loss == LOSS_L2_RELATIVE || r->train.target.metric == METRIC_L2_RELATIVE;
    if (rel && d->target == TARGET_VALUES) m->rel_units = loss_l2_relative_units(r, d);
}

void metrics_reset(gl_metrics *m) {
    gl_metrics keep = *m;
    memset(m, 0, sizeof *m);
    m->target = keep.target, m->classes = keep.classes, m->tsize = keep.tsize, m->k = keep.k;
    m->rel_units = keep.rel_units;
}

// z points at the C logits of one position, stride s apart.
static int64_t argmax(const float *z, int64_t c, int64_t s) {
    int64_t a = 0;
    for (int64_t j = 1; j < c; j++)
        if (z[j * s] > z[a * s]) a = j;
    return a;
}

void metrics_pack(const gl_metrics *m, double *v) {
    v[0] = m->loss_sum, v[1] = (double)m->samples, v[2] = (double)m->hits, v[3] = (double)m->hitsk;
    v[4] = (double)m->positions, v[5] = m->abs_sum, v[6] = (double)m->values;
    for (int k = 0; k < GL_MAX_IOU_CLASSES; k++) v[7 + k] = (double)m->inter[k], v[7 + GL_MAX_IOU_CLASSES + k] = (double)m->uni[k];
    v[7 + 2 * GL_MAX_IOU_CLASSES] = m->rel_sum, v[8 + 2 * GL_MAX_IOU_CLASSES] = (double)m->rel_count;
}

void metrics_add_packed(gl_metrics *m, const double *v) {
    m->loss_sum += v[0], m->samples += (int64_t)v[1], m->hits += (int64_t)v[2], m->hitsk += (int64_t)v[3];
    m->positions += (int64_t)v[4], m->abs_sum += v[5], m->values += (int64_t)v[6];
    for (int k = 0; k < GL_MAX_IOU_CLASSES; k++)
        m->inter[k] += (int64_t)v[7 + k], m->uni[k] += (int64_t)v[7 + GL_MAX_IOU_CLASSES + k];
    m->rel_sum += v[7 + 2 * GL_MAX_IOU_CLASSES], m->rel_count += (int64_t)v[8 + 2 * GL_MAX_IOU_CLASSES];
}

// The relative L2 error's ratios over rows [0, n): the loss kernel without a gradient, where out
// lives (be with its own metrics_sums: a GPU), else on the host.
static void add_l2_relative(gl_metrics *m, const gl_backend *be, const gl_tensor *out, int64_t n,
                            const float *values) {
    if (!m->rel_units || n <= 0) return;
    const gl_backend *on = be && be->metrics_sums ? be : backend_cpu();
    const int64_t units = n * m->rel_units;
    m->rel_sum += on->l2_relative_loss(units, m->tsize / m->rel_units, out->data, values, NULL) * (double)units;
    m->rel_count += units;
}

// The backend's metrics_sums: the output stays where it is (on a GPU, reading it here would
// migrate every page of it to the host and back, each step).
static void add_on_backend(gl_metrics *m, const gl_backend *be, const gl_tensor *out, int64_t n,
                           const int32_t *labels, const float *values) {
    if (m->target == TARGET_VALUES) {
        double abs_sum = 0;
        be->metrics_sums(false, false, false, n, 1, m->tsize, 0, out->data, NULL, values, NULL, &abs_sum);
        m->abs_sum += abs_sum;
        m->values += n * m->tsize;
        return;
    }
    const int64_t c = m->classes, s = m->target == TARGET_MASK ? m->tsize : 1;
    const bool topk = m->target == TARGET_CLASS, iou = m->target == TARGET_MASK && c <= GL_MAX_IOU_CLASSES;
    int64_t counts[2 + 2 * GL_MAX_IOU_CLASSES] = {0};
    be->metrics_sums(true, topk, iou, n, c, s, m->k, out->data, labels, NULL, counts, NULL);
    m->hits += counts[0];
    m->positions += n * s;
    if (topk) m->hitsk += counts[1];
    for (int64_t k = 0; iou && k < c; k++) m->inter[k] += counts[2 + k], m->uni[k] += counts[2 + c + k];
}

void metrics_add(gl_metrics *m, const gl_backend *be, const gl_tensor *out, int64_t n, const int32_t *labels,
                 const float *values, double loss) {
    m->loss_sum += loss * (double)n;
    m->samples += n;
    if (m->target == TARGET_VALUES) add_l2_relative(m, be, out, n, values);
    if (n > 0 && be && be->metrics_sums) {
        add_on_backend(m, be, out, n, labels, values);
        return;
    }
    if (m->target == TARGET_VALUES) {
        for (int64_t i = 0; i < n * m->tsize; i++) m->abs_sum += fabs((double)out->data[i] - (double)values[i]);
        m->values += n * m->tsize;
        return;
    }
    const int64_t c = m->classes, s = m->target == TARGET_MASK ? m->tsize : 1;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t p = 0; p < s; p++) {
            const float *z = out->data + i * c * s + p;
            int32_t y = labels[i * s + p];
            int64_t a = argmax(z, c, s);
            m->hits += a == y;
            m->positions++;
            if (m->target == TARGET_CLASS) {
                int64_t higher = 0;  // the label is in the top k if fewer than k logits beat it
                for (int64_t j = 0; j < c; j++) higher += z[j * s] > z[y * s];
                m->hitsk += higher < m->k;
            } else if (c <= GL_MAX_IOU_CLASSES) {
                for (int64_t k = 0; k < c; k++) {
                    int pk = a == k, yk = y == k;
                    m->inter[k] += pk && yk;
                    m->uni[k] += pk || yk;
                }
            }
        }
    }
}

int metrics_applies(gl_target_kind target, int metric) {
    switch (metric) {
    case METRIC_LOSS: return 1;
    case METRIC_ACCURACY: return target != TARGET_VALUES;
    case METRIC_TOPK: return target == TARGET_CLASS;
    case METRIC_MAE: return target == TARGET_VALUES;
    case METRIC_MEAN_IOU: return target == TARGET_MASK;
    case METRIC_L2_RELATIVE: return target == TARGET_VALUES;
    default: return 0;
    }
}

const char *metrics_name(int metric) {
    static const char *const names[] = {"none", "accuracy", "top_k", "loss", "mae", "mean_iou", "l2_relative"};
    return metric >= 0 && metric <= METRIC_L2_RELATIVE ? names[metric] : "?";
}

double metrics_value(const gl_metrics *m, int metric) {
    if (!metrics_applies(m->target, metric)) return NAN;
    switch (metric) {
    case METRIC_LOSS: return m->samples ? m->loss_sum / (double)m->samples : NAN;
    case METRIC_ACCURACY: return m->positions ? (double)m->hits / (double)m->positions : NAN;
    case METRIC_TOPK: return m->positions ? (double)m->hitsk / (double)m->positions : NAN;
    case METRIC_MAE: return m->values ? m->abs_sum / (double)m->values : NAN;
    case METRIC_L2_RELATIVE: return m->rel_count ? m->rel_sum / (double)m->rel_count : NAN;
    case METRIC_MEAN_IOU: {
        double sum = 0;
        int k = 0;
        for (int64_t c = 0; c < m->classes && c < GL_MAX_IOU_CLASSES; c++)
            if (m->uni[c]) sum += (double)m->inter[c] / (double)m->uni[c], k++;
        return k ? sum / k : NAN;
    }
    default: return NAN;
    }
}

void metrics_format(const gl_metrics *m, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "loss %.4f", metrics_value(m, METRIC_LOSS));
    if (m->target == TARGET_VALUES) {
        k += (size_t)snprintf(buf + k, len - k, "  mae %.4f", metrics_value(m, METRIC_MAE));
        if (m->rel_units && k < len) snprintf(buf + k, len - k, "  l2rel %.4f", metrics_value(m, METRIC_L2_RELATIVE));
    } else {
        k += (size_t)snprintf(buf + k, len - k, "  acc %.4f", metrics_value(m, METRIC_ACCURACY));
        if (m->target == TARGET_CLASS && m->classes > m->k && k < len)
            snprintf(buf + k, len - k, "  top%d %.4f", m->k, metrics_value(m, METRIC_TOPK));
        if (m->target == TARGET_MASK && k < len)
            snprintf(buf + k, len - k, "  miou %.4f", metrics_value(m, METRIC_MEAN_IOU));
    }
}

void metrics_format_iou(const gl_metrics *m, char *buf, size_t len) {
    buf[0] = 0;
    if (m->target != TARGET_MASK) return;
    size_t k = (size_t)snprintf(buf, len, "per-class IoU:");
    for (int64_t c = 0; c < m->classes && c < GL_MAX_IOU_CLASSES && k < len; c++)
        k += (size_t)snprintf(buf + k, len - k, " %.4f", m->uni[c] ? (double)m->inter[c] / (double)m->uni[c] : 0.0);
}
