// schema.c: the recipe schema, in one place. Every key a recipe may hold is here (layer kinds
// add their own keys in src/model/layers/); nothing outside this table is accepted.
#include <stdbool.h>
#include <stddef.h>

#include "galley/recipe.h"

#define OFF(field) offsetof(recipe_t, field)
#define R(b) ((const recipe_t *)(b))

static int kind_of(const void *b) { return R(b)->data.synthetic.kind; }
static bool has_classes(const void *b) { return kind_of(b) <= SYNTH_SHAPES2D; }
static bool is_vector_kind(const void *b) { return kind_of(b) == SYNTH_SPIRALS || kind_of(b) == SYNTH_BLOBS; }
static bool is_field_kind(const void *b) { return kind_of(b) >= SYNTH_SHAPES2D; }
static bool has_channels(const void *b) { return kind_of(b) >= SYNTH_SHAPES2D && kind_of(b) <= SYNTH_CLIMATE2D; }
static bool is_xent(const void *b) { return R(b)->train.loss == LOSS_SOFTMAX_XENT; }
static bool is_sgd(const void *b) { return R(b)->optimizer.type == OPT_SGD; }
static bool is_adam_like(const void *b) { return R(b)->optimizer.type != OPT_SGD; }
static bool is_multistep(const void *b) { return R(b)->optimizer.schedule.decay == DECAY_MULTISTEP; }
static bool is_annealing(const void *b) {
    return R(b)->optimizer.schedule.decay == DECAY_COSINE || R(b)->optimizer.schedule.decay == DECAY_POLY;
}
static bool is_poly(const void *b) { return R(b)->optimizer.schedule.decay == DECAY_POLY; }
static bool is_scaled(const void *b) { return R(b)->optimizer.schedule.scaling != SCALE_NONE; }
static bool has_target(const void *b) { return R(b)->train.target.metric != METRIC_NONE; }
#define NO_RANGE 0, 0

static const char *const source_choices[] = {"synthetic", NULL};
static const char *const synth_choices[] = {"spirals", "blobs", "shapes2d", "cosmo3d", "climate2d", "fields3d", NULL};
static const char *const loss_choices[] = {"softmax_cross_entropy", "mse", "l1", NULL};
static const char *const nonfinite_choices[] = {"stop", "skip", NULL};
static const char *const opt_choices[] = {"sgd", "adamw", "lamb", NULL};
static const char *const unit_choices[] = {"steps", "epochs", NULL};
static const char *const decay_choices[] = {"constant", "multistep", "cosine", "poly", NULL};
static const char *const scaling_choices[] = {"none", "linear", "sqrt", NULL};
static const char *const metric_choices[] = {"none", "accuracy", "top_k", "loss", "mae", "mean_iou", NULL};

static const key_spec synthetic_keys[] = {
    {"kind", KT_ENUM, KF_DEFAULT, "spirals", NO_RANGE, synth_choices, OFF(data.synthetic.kind), NULL,
     "spirals: interleaved 2D spiral arms, one per class (extra features are noise); "
     "blobs: one Gaussian cluster per class; shapes2d: images of geometric shapes, one class per shape; "
     "cosmo3d: 3D Gaussian random fields whose power spectrum depends on 4 parameters to regress "
     "(CosmoFlow-like, log1p-scaled counts); climate2d: multi-channel 2D fields with cyclone-like vortices "
     "and river-like bands, a 3-class mask per pixel (DeepCAM-like); fields3d: 4-channel 3D fields to map "
     "to 5 derived channels (the SC22 U-Net's Nbody to Hydro task)"},
    {"classes", KT_INT, KF_DEFAULT, "3", 2, 1000, NULL, OFF(data.synthetic.classes), NULL,
     "number of classes (shapes2d: at most 6)", has_classes, "data.synthetic.kind is spirals, blobs or shapes2d"},
    {"features", KT_INT, KF_DEFAULT, "2", 2, 1e6, NULL, OFF(data.synthetic.features), NULL,
     "input features per sample", is_vector_kind, "data.synthetic.kind is spirals or blobs"},
    {"size", KT_INT, KF_DEFAULT, "32", 4, 4096, NULL, OFF(data.synthetic.size), NULL,
     "edge length of each image or volume (CosmoFlow's full size is 128)", is_field_kind,
     "data.synthetic.kind is shapes2d, cosmo3d, climate2d or fields3d"},
    {"channels", KT_INT, KF_DEFAULT, "0", 0, 64, NULL, OFF(data.synthetic.channels), NULL,
     "input channels; 0 means the kind's own (shapes2d 3, cosmo3d 4, climate2d 16)", has_channels,
     "data.synthetic.kind is shapes2d, cosmo3d or climate2d"},
    {"train_size", KT_INT, KF_DEFAULT, "4096", 1, 1e9, NULL, OFF(data.synthetic.train_size), NULL,
     "training samples, generated in memory from the seed"},
    {"val_size", KT_INT, KF_DEFAULT, "1024", 1, 1e9, NULL, OFF(data.synthetic.val_size), NULL,
     "held-out validation samples, drawn independently of the training ones"},
    {"noise", KT_FLOAT, KF_DEFAULT, "0.1", 0, 10, NULL, OFF(data.synthetic.noise), NULL,
     "standard deviation of the Gaussian noise added to each sample"},
    KEY_END,
};

static const key_spec data_keys[] = {
    {"source", KT_ENUM, KF_DEFAULT, "synthetic", NO_RANGE, source_choices, OFF(data.source), NULL,
     "where samples come from: synthetic (built in, generated in memory from the seed)"},
    {"synthetic", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, synthetic_keys,
     "the built-in data set (data.source: synthetic)"},
    KEY_END,
};

static const key_spec model_keys[] = {
    {"layers", KT_LAYERS, KF_REQUIRED, NULL, NO_RANGE, NULL, OFF(model.layers), NULL,
     "the layers in order; each has a type, an optional name and optional inputs "
     "(names of earlier layers; default: the previous layer)"},
    KEY_END,
};

static const key_spec target_keys[] = {
    {"metric", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, metric_choices, OFF(train.target.metric), NULL,
     "validation metric that ends training once it passes the threshold (none: no target): accuracy "
     "(per sample or per pixel), top_k (classification; k is train.top_k), loss, mae (regression), mean_iou (segmentation)"},
    {"above", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.above), NULL,
     "stop when the metric is >= this (accuracy, top_k, mean_iou); give above or below, not both",
     has_target, "train.target.metric is set"},
    {"below", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.below), NULL,
     "stop when the metric is <= this (loss, mae)",
     has_target, "train.target.metric is set"},
    KEY_END,
};

static const key_spec train_keys[] = {
    {"steps", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.steps), NULL,
     "optimizer steps to run; when > 0 it replaces train.epochs (the start banner says so), e.g. for a "
     "short trial run of a long recipe"},
    {"epochs", KT_INT, KF_DEFAULT, "10", 1, 1e9, NULL, OFF(train.epochs), NULL,
     "passes over the training data (unless train.steps > 0)"},
    {"batch_size", KT_INT, KF_DEFAULT, "64", 1, 1e8, NULL, OFF(train.batch_size), NULL,
     "samples per optimizer step; the last, partial batch of an epoch is kept"},
    {"threads", KT_INT, KF_DEFAULT, "0", 0, 4096, NULL, OFF(train.threads), NULL,
     "compute threads; 0 means one per available core"},
    {"loss", KT_ENUM, KF_DEFAULT, "softmax_cross_entropy", NO_RANGE, loss_choices, OFF(train.loss), NULL,
     "softmax_cross_entropy (class labels, per sample or per pixel: softmax over the output's channels), "
     "mse or l1 (regression and field-to-field targets; mean over all elements)"},
    {"class_weights", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e6, NULL, OFF(train.class_weights), NULL,
     "one weight per class (as PyTorch's CrossEntropyLoss weight; DeepCAM uses frequency^-0.125); [] for none",
     is_xent, "train.loss is softmax_cross_entropy"},
    {"top_k", KT_INT, KF_DEFAULT, "5", 1, 1000, NULL, OFF(train.top_k), NULL,
     "k of the top-k accuracy metric, shown for classification with more than k classes"},
    {"eval_every", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.eval_every), NULL,
     "evaluate on the validation split every this many steps (and at the end); 0 means after each epoch"},
    {"nonfinite", KT_ENUM, KF_DEFAULT, "stop", NO_RANGE, nonfinite_choices, OFF(train.nonfinite), NULL,
     "a NaN/Inf loss: stop (exit 1, naming the step and the first layer whose output went non-finite) or "
     "skip the step (counted and reported)"},
    {"target", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, target_keys,
     "quality target, checked at each evaluation; training stops when it is reached, and if it is not "
     "reached by the end galley exits with code 3"},
    KEY_END,
};

static const key_spec schedule_keys[] = {
    {"unit", KT_ENUM, KF_DEFAULT, "steps", NO_RANGE, unit_choices, OFF(optimizer.schedule.unit), NULL,
     "unit of warmup and milestones: optimizer steps or epochs (fractions allowed)"},
    {"warmup", KT_FLOAT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(optimizer.schedule.warmup), NULL,
     "linear warmup from lr/warmup-steps to lr over this many units (0: none)"},
    {"decay", KT_ENUM, KF_DEFAULT, "constant", NO_RANGE, decay_choices, OFF(optimizer.schedule.decay), NULL,
     "after warmup: constant; multistep (factors at milestones); cosine or poly from lr to end_lr over the "
     "rest of the run"},
    {"milestones", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e12, NULL, OFF(optimizer.schedule.milestones), NULL,
     "increasing points (in unit) where the factor changes",
     is_multistep, "schedule.decay is multistep"},
    {"factors", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e6, NULL, OFF(optimizer.schedule.factors), NULL,
     "lr multiplier from each milestone on (same length as milestones), e.g. [0.25, 0.125]",
     is_multistep, "schedule.decay is multistep"},
    {"end_lr", KT_FLOAT, KF_DEFAULT, "0", 0, 1e6, NULL, OFF(optimizer.schedule.end_lr), NULL,
     "the learning rate the decay reaches at the end of the run (not scaled by batch)",
     is_annealing, "schedule.decay is cosine or poly"},
    {"power", KT_FLOAT, KF_DEFAULT, "1", 0, 100, NULL, OFF(optimizer.schedule.power), NULL, "exponent",
     is_poly, "schedule.decay is poly"},
    {"scaling", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, scaling_choices, OFF(optimizer.schedule.scaling), NULL,
     "scale lr by (batch_size / base_batch) (linear) or its square root (sqrt), as the NERSC tutorial does"},
    {"base_batch", KT_INT, KF_DEFAULT, "64", 1, 1e8, NULL, OFF(optimizer.schedule.base_batch), NULL,
     "the batch size lr was tuned for",
     is_scaled, "schedule.scaling is linear or sqrt"},
    KEY_END,
};

static const key_spec optimizer_keys[] = {
    {"type", KT_ENUM, KF_DEFAULT, "sgd", NO_RANGE, opt_choices, OFF(optimizer.type), NULL,
     "sgd (momentum, Nesterov), adamw (decoupled weight decay) or lamb (layer-wise trust ratio, for large "
     "batches)"},
    {"lr", KT_FLOAT, KF_REQUIRED, NULL, 0, 1e6, NULL, OFF(optimizer.lr), NULL,
     "peak learning rate (before batch scaling)"},
    {"momentum", KT_FLOAT, KF_DEFAULT, "0.9", 0, 1, NULL, OFF(optimizer.momentum), NULL,
     "momentum factor (PyTorch convention: v = m*v + g; w -= lr*v)",
     is_sgd, "optimizer.type is sgd"},
    {"nesterov", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(optimizer.nesterov), NULL,
     "Nesterov momentum",
     is_sgd, "optimizer.type is sgd"},
    {"weight_decay", KT_FLOAT, KF_DEFAULT, "0", 0, 1, NULL, OFF(optimizer.weight_decay), NULL,
     "sgd: L2 penalty added to the gradient (coupled); adamw, lamb: decoupled decay"},
    {"beta1", KT_FLOAT, KF_DEFAULT, "0.9", 0, 0.999999, NULL, OFF(optimizer.beta1), NULL,
     "first-moment decay",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"beta2", KT_FLOAT, KF_DEFAULT, "0.999", 0, 0.999999999, NULL, OFF(optimizer.beta2), NULL,
     "second-moment decay",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"eps", KT_FLOAT, KF_DEFAULT, "1e-8", 0, 1, NULL, OFF(optimizer.eps), NULL,
     "added to the root of the second moment",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"exclude_1d", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(optimizer.exclude_1d), NULL,
     "biases and normalisation weights (1-D tensors) get no weight decay and, with lamb, a trust ratio of 1 "
     "(the no-decay group of apex/timm; LAMB barely moves zero-initialised biases otherwise)"},
    {"clip_norm", KT_FLOAT, KF_OPTIONAL, NULL, 1e-12, 1e12, NULL, OFF(optimizer.clip_norm), NULL,
     "clip gradients to this global L2 norm before the update (unset: no clipping)"},
    {"schedule", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, schedule_keys,
     "learning-rate rule: batch scaling, warmup, then decay"},
    KEY_END,
};

const key_spec recipe_schema[] = {
    {"name", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(name), NULL,
     "run name (default: the recipe's file name without .yaml)"},
    {"seed", KT_INT, KF_DEFAULT, "42", 0, 9.2e18, NULL, OFF(seed), NULL,
     "seed of every random number: init, data order, synthetic data"},
    {"data", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, data_keys, "training and validation data"},
    {"model", KT_SECTION, KF_REQUIRED, NULL, NO_RANGE, NULL, 0, model_keys, "the network"},
    {"train", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, train_keys, "the training loop"},
    {"optimizer", KT_SECTION, KF_REQUIRED, NULL, NO_RANGE, NULL, 0, optimizer_keys, "the optimizer"},
    KEY_END,
};
