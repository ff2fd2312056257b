// schema.c: the recipe schema, in one place. Every key a recipe may hold is here (layer kinds
// add their own keys in src/model/layers/); nothing outside this table is accepted.
#include <stddef.h>

#include "galley/recipe.h"

#define OFF(field) offsetof(recipe_t, field)
#define NO_RANGE 0, 0

static const char *const source_choices[] = {"synthetic", NULL};
static const char *const synth_choices[] = {"spirals", "blobs", NULL};
static const char *const loss_choices[] = {"softmax_cross_entropy", NULL};
static const char *const opt_choices[] = {"sgd", NULL};
static const char *const metric_choices[] = {"none", "accuracy", "loss", NULL};

static const key_spec synthetic_keys[] = {
    {"kind", KT_ENUM, KF_DEFAULT, "spirals", NO_RANGE, synth_choices, OFF(data.synthetic.kind), NULL,
     "spirals: interleaved 2D spiral arms, one per class (extra features are noise); "
     "blobs: one Gaussian cluster per class"},
    {"classes", KT_INT, KF_DEFAULT, "3", 2, 1000, NULL, OFF(data.synthetic.classes), NULL,
     "number of classes"},
    {"features", KT_INT, KF_DEFAULT, "2", 2, 1e6, NULL, OFF(data.synthetic.features), NULL,
     "input features per sample"},
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
     "validation metric that ends training once it passes the threshold (none: train all epochs)"},
    {"above", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.above), NULL,
     "stop when the metric is >= this (accuracy); give above or below, not both"},
    {"below", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.below), NULL,
     "stop when the metric is <= this (loss)"},
    KEY_END,
};

static const key_spec train_keys[] = {
    {"epochs", KT_INT, KF_DEFAULT, "10", 1, 1e9, NULL, OFF(train.epochs), NULL,
     "passes over the training data"},
    {"batch_size", KT_INT, KF_DEFAULT, "64", 1, 1e8, NULL, OFF(train.batch_size), NULL,
     "samples per optimizer step; the last, partial batch of an epoch is kept"},
    {"threads", KT_INT, KF_DEFAULT, "0", 0, 4096, NULL, OFF(train.threads), NULL,
     "compute threads; 0 means one per available core"},
    {"loss", KT_ENUM, KF_DEFAULT, "softmax_cross_entropy", NO_RANGE, loss_choices, OFF(train.loss), NULL,
     "loss on the model output: softmax_cross_entropy (integer class labels)"},
    {"target", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, target_keys,
     "quality target, checked on the validation split after each epoch; if set and not reached "
     "by the end, galley exits with code 3"},
    KEY_END,
};

static const key_spec optimizer_keys[] = {
    {"type", KT_ENUM, KF_DEFAULT, "sgd", NO_RANGE, opt_choices, OFF(optimizer.type), NULL,
     "sgd: stochastic gradient descent with momentum"},
    {"lr", KT_FLOAT, KF_REQUIRED, NULL, 0, 1e6, NULL, OFF(optimizer.lr), NULL, "learning rate"},
    {"momentum", KT_FLOAT, KF_DEFAULT, "0.9", 0, 1, NULL, OFF(optimizer.momentum), NULL,
     "momentum factor (PyTorch convention: v = m*v + g; w -= lr*v)"},
    {"nesterov", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(optimizer.nesterov), NULL,
     "use Nesterov momentum"},
    {"weight_decay", KT_FLOAT, KF_DEFAULT, "0", 0, 1, NULL, OFF(optimizer.weight_decay), NULL,
     "L2 penalty added to the gradient (coupled, as PyTorch SGD)"},
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
