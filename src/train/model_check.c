// model_check.c: the checks that tie the model to the data and the loss, shared by
// `galley check` and `galley train`, so a recipe that checks clean also starts training.
#include <stdio.h>

#include "galley/loss.h"
#include "galley/train.h"

static void say(FILE *err, yt_mark m, const char *path, const char *msg, const char *shape) {
    fprintf(err, "%s:%d:%d: error: %s: %s%s\n", m.file, m.line, m.col, path, msg, shape ? shape : "");
}

int train_check_model(const recipe_t *r, gl_graph *g, const gl_dataset *data, FILE *err) {
    const gl_dataset d = *data;
    const gl_tensor *o = graph_output(g);
    const layer_cfg *last = g->layers[g->nlayers - 1].cfg;
    char got[64], want[64], msg[512];
    shape_format(&o->shape, got, sizeof got);
    int bad = 0;

    // The loss must fit the data's targets, and the output must fit the loss.
    gl_shape expect = d.tshape;
    if (r->train.loss == LOSS_SOFTMAX_XENT) {
        if (d.target == TARGET_VALUES) {
            say(err, recipe_mark(r, "train.loss"), "train.loss",
                "softmax_cross_entropy needs class labels, but this data set has real-valued targets; use mse, l1 "
                "or l2_relative",
                NULL);
            return -1;
        }
        expect = d.target == TARGET_CLASS ? shape_1d(d.classes) : (gl_shape){d.tshape.ndim + 1, {d.classes}};
        for (int i = 0; d.target == TARGET_MASK && i < d.tshape.ndim; i++) expect.d[i + 1] = d.tshape.d[i];
        if (r->train.class_weights.n && r->train.class_weights.n != d.classes) {
            snprintf(msg, sizeof msg, "give one weight per class: %d weights for %lld classes",
                     r->train.class_weights.n, (long long)d.classes);
            say(err, recipe_mark(r, "train.class_weights"), "train.class_weights", msg, NULL);
            bad = 1;
        }
        if (d.target == TARGET_MASK && d.classes > GL_MAX_IOU_CLASSES) {
            snprintf(msg, sizeof msg, "segmentation supports at most %d classes, found %lld", GL_MAX_IOU_CLASSES,
                     (long long)d.classes);
            say(err, recipe_mark(r, "data"), "data", msg, NULL);
            bad = 1;
        }
    } else if (d.target != TARGET_VALUES) {
        say(err, recipe_mark(r, "train.loss"), "train.loss",
            "mse, l1 and l2_relative need real-valued targets, but this data set has class labels; use "
            "softmax_cross_entropy",
            NULL);
        return -1;
    }
    shape_format(&expect, want, sizeof want);
    int same = expect.ndim == o->shape.ndim;
    for (int i = 0; same && i < expect.ndim; i++) same = expect.d[i] == o->shape.d[i];
    if (!same) {
        fprintf(err,
                "%s:%d:%d: error: model.layers[%d] (%s): the model's output shape %s does not fit the loss: %s on "
                "this data wants %s\n",
                last->mark.file, last->mark.line, last->mark.col, last->index, last->name, got,
                r->train.loss == LOSS_SOFTMAX_XENT ? "softmax_cross_entropy" : r->train.loss == LOSS_MSE ? "mse"
                : r->train.loss == LOSS_L1 ? "l1" : "l2_relative",
                want);
        bad = 1;
    }
    int metric = r->train.target.metric;
    if (metric != METRIC_NONE && !metrics_applies(d.target, metric)) {
        snprintf(msg, sizeof msg, "%s does not apply to this data set's targets (%s)", metrics_name(metric),
                 d.target == TARGET_CLASS ? "class labels: use accuracy, top_k or loss"
                 : d.target == TARGET_MASK ? "per-pixel classes: use accuracy, mean_iou or loss"
                                           : "real values: use mae, l2_relative or loss");
        say(err, recipe_mark(r, "train.target.metric"), "train.target.metric", msg, NULL);
        bad = 1;
    }
    return bad ? -1 : 0;
}

int train_check_splits(const recipe_t *r, const gl_dataset *t, const gl_dataset *v, FILE *err) {
    char a[64] = "", b[64] = "", msg[768];
    const char *what = NULL;
    if (!shape_equal(&t->shape, &v->shape)) {
        what = "inputs of shape";
        shape_format(&t->shape, a, sizeof a), shape_format(&v->shape, b, sizeof b);
    } else if (t->target != v->target || !shape_equal(&t->tshape, &v->tshape)) {
        what = "targets of shape";
        shape_format(&t->tshape, a, sizeof a), shape_format(&v->tshape, b, sizeof b);
        if (t->target != v->target) what = "another kind of targets:";
    } else if (t->classes != v->classes) {
        what = "a class count of";
        snprintf(a, sizeof a, "%lld", (long long)t->classes), snprintf(b, sizeof b, "%lld", (long long)v->classes);
    }
    if (!what) return 0;
    const bool h5 = r->data.source == DATA_SOURCE_HDF5, ts = r->data.source == DATA_SOURCE_TIMESERIES;
    const char *vf = h5 ? r->data.val.files : ts ? r->data.timeseries.val : "synthetic";
    const char *tf = h5 ? r->data.train.files : ts ? r->data.timeseries.train : "synthetic";
    snprintf(msg, sizeof msg, "the validation split (%s) has %s %s per sample, the training split (%s) %s; the model "
                              "built for one evaluates the other, so both need the same shapes",
             vf, what, b, tf, a);
    const char *key = h5 ? "data.val" : ts ? "data.timeseries.val" : "data";
    say(err, recipe_mark(r, h5 ? "data.val.files" : key), key, msg, NULL);
    return -1;
}
