// loss.h: the recipe's loss on the model output, and the validation metrics.
#ifndef GALLEY_LOSS_H
#define GALLEY_LOSS_H

#include <stdio.h>

#include "galley/backend.h"
#include "galley/data.h"
#include "galley/recipe.h"
#include "galley/tensor.h"

typedef struct {
    int kind;             // LOSS_*
    int64_t classes;      // softmax_cross_entropy: channels of the output
    int64_t positions;    // softmax_cross_entropy: positions per sample (1, or the mask's pixels)
    int64_t tsize;        // target elements per sample
    const float *weights; // class weights or NULL
    int64_t rel_units;    // l2_relative: ratios per sample (1, or the target's channels: train.l2_relative_per)
    float weight_buf[GL_MAX_FLOATS];
} gl_loss;

void loss_init(gl_loss *l, const recipe_t *r, const gl_dataset *d);
// The relative L2 error's ratios per sample under train.l2_relative_per: 1 (sample), or the
// target's channels (channel: its first axis; a flat [K] target has K channels of one value).
int64_t loss_l2_relative_units(const recipe_t *r, const gl_dataset *d);
// Loss of rows [0, n) of out against the targets; writes d(loss)/d(out) into dout unless NULL.
double loss_compute(const gl_loss *l, const gl_backend *be, const gl_tensor *out, int64_t n, const int32_t *labels,
                    const float *values, float *dout);

#define GL_MAX_IOU_CLASSES 64

// Running sums over an evaluation pass.
typedef struct {
    gl_target_kind target;
    int64_t classes, tsize;
    double loss_sum;
    int64_t samples;
    int k;                            // top-k accuracy's k
    int64_t hits, hitsk, positions;   // argmax == label (per sample or per pixel), label in top k
    double abs_sum;                   // regression
    int64_t values;
    int64_t inter[GL_MAX_IOU_CLASSES], uni[GL_MAX_IOU_CLASSES];
    int64_t rel_units;                // l2_relative: ratios per sample (loss.h's rel_units); 0: not tracked
    double rel_sum;                   // l2_relative: the sum of the ratios
    int64_t rel_count;
} gl_metrics;

// k: the k of top-k accuracy (train.top_k).
void metrics_init(gl_metrics *m, const gl_dataset *d, int k);
// metrics_init for a run: k is train.top_k, and the relative L2 error is tracked (reduced as
// train.l2_relative_per) when train.loss or train.target.metric is l2_relative.
void metrics_init_run(gl_metrics *m, const gl_dataset *d, const recipe_t *r);
void metrics_reset(gl_metrics *m);
// Adds rows [0, n) of out; loss is their mean loss. be: where out lives (its metrics_sums does
// the counting when it has one; NULL or none: here, on the host).
void metrics_add(gl_metrics *m, const gl_backend *be, const gl_tensor *out, int64_t n, const int32_t *labels,
                 const float *values, double loss);
// The value of METRIC_* (accuracy, top_k, loss, mae, mean_iou, l2_relative); NAN where it does not
// apply (l2_relative: also where it is not tracked).
double metrics_value(const gl_metrics *m, int metric);
// Whether METRIC_* applies to this kind of target.
int metrics_applies(gl_target_kind target, int metric);
const char *metrics_name(int metric);
// "loss 0.1234  acc 0.9500" with the metrics that apply to the target.
void metrics_format(const gl_metrics *m, char *buf, size_t len);
// Running sums as doubles (counts are exact below 2^53), to reduce them across ranks and parts.
#define GL_METRICS_PACKED (9 + 2 * GL_MAX_IOU_CLASSES)
void metrics_pack(const gl_metrics *m, double *v);
// Adds packed sums v into m.
void metrics_add_packed(gl_metrics *m, const double *v);
// Per-class IoU line for segmentation ("iou 0.91 0.42 0.30"); empty otherwise.
void metrics_format_iou(const gl_metrics *m, char *buf, size_t len);

#endif
