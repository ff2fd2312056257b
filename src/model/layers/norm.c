// norm.c: normalisation layers, PyTorch-compatible in parameters, state and arithmetic.
//   batch_norm: per channel over (batch, spatial) of [C], [C, L], [C, H, W] or [C, D, H, W]
//     (BatchNorm1d/2d/3d). weight [C] = 1, bias [C] = 0. l->state is [2C + 1]: running mean [C],
//     running var [C], and a ready flag: the arena starts zeroed, so the kernel sets the running
//     var to 1 (PyTorch's start) on the first forward and raises the flag. A checkpoint can save
//     and restore the state block as is. Training normalises with the batch statistics (biased
//     variance) and updates running = (1 - momentum) * running + momentum * batch (unbiased
//     variance); evaluation normalises with the running statistics.
//   layer_norm: each sample over all its elements (LayerNorm(normalized_shape = the per-sample
//     shape)); weight and bias have the per-sample shape. On tokens [T, D]: each token over its D
//     features (LayerNorm(D), as in a transformer block), weight and bias [D].
#include <stdio.h>

#include "galley/layer.h"

extern const layer_kind layer_batch_norm, layer_layer_norm;

enum { K_MOMENTUM, K_EPS, K_BN_AFFINE };
static const key_spec bn_keys[] = {
    {"momentum", KT_FLOAT, KF_DEFAULT, "0.1", 0, 1, NULL, K_MOMENTUM * sizeof(gl_value), NULL,
     "running-statistics update (PyTorch convention: running = (1 - momentum) * running + momentum * batch)"},
    {"eps", KT_FLOAT, KF_DEFAULT, "1e-5", 1e-12, 1, NULL, K_EPS * sizeof(gl_value), NULL,
     "added to the variance before the square root"},
    {"affine", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_BN_AFFINE * sizeof(gl_value), NULL,
     "learn a per-channel weight (starts at 1) and bias (starts at 0)"},
    KEY_END,
};

enum { K_LN_EPS, K_LN_AFFINE };
static const key_spec ln_keys[] = {
    {"eps", KT_FLOAT, KF_DEFAULT, "1e-5", 1e-12, 1, NULL, K_LN_EPS * sizeof(gl_value), NULL,
     "added to the variance before the square root"},
    {"affine", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_LN_AFFINE * sizeof(gl_value), NULL,
     "learn an element-wise weight (starts at 1) and bias (starts at 0) of the per-sample shape"},
    KEY_END,
};

// Adds weight and bias of the given shape (not matrices: no fans).
static void add_affine_params(layer_t *l, gl_shape shape) {
    int64_t size = shape_size(&shape);
    l->params[l->nparams++] = (gl_param){.name = "weight", .shape = shape, .size = size};
    l->params[l->nparams++] = (gl_param){.name = "bias", .shape = shape, .size = size};
}

// weight = 1; the bias stays at the zeros graph_init_params starts from.
static void affine_init(layer_t *l, float *params, uint64_t seed) {
    (void)seed;
    if (l->nparams == 0) return;
    float *w = params + l->params[0].offset;
    for (int64_t i = 0; i < l->params[0].size; i++) w[i] = 1.0f;
}

// Slices of the weight block (or NULL without affine): weight then bias.
static float *weight_of(const layer_t *l, float *block) { return l->nparams ? block : NULL; }
static float *bias_of(const layer_t *l, float *block) {
    return l->nparams ? block + (l->params[1].offset - l->params[0].offset) : NULL;
}

// ---- batch_norm ---------------------------------------------------------------------------------

static int bn_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const gl_shape *x = &l->in[0]->shape;
    int64_t c = x->d[0];
    l->out.shape = *x;
    l->nparams = 0;
    if (l->cfg->v[K_BN_AFFINE].b) add_affine_params(l, shape_1d(c));
    l->flops = 7 * l->in[0]->size;  // statistics (4 ops) and the affine normalisation (3) per element
    l->state_floats = 2 * c + 1;    // running mean, running var, ready flag
    l->scratch_floats = 2 * c + 1;  // mean, 1/std, and whether they were batch statistics
    return 0;
}

static void bn_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    int64_t c = l->in[0]->shape.d[0];
    if (l->store_act_on)  // y = act(bn(x)): the activation after this layer, fused (graph_build)
        be->batch_norm_forward_act(n, c, l->in[0]->size / c, l->in[0]->data, weight_of(l, l->w), bias_of(l, l->w),
                                   (float)l->cfg->v[K_EPS].f, train, (float)l->cfg->v[K_MOMENTUM].f, l->state,
                                   l->scratch, l->out.data, train ? l->reduce : NULL, l->store_act, l->store_slope);
    else
        be->batch_norm_forward(n, c, l->in[0]->size / c, l->in[0]->data, weight_of(l, l->w), bias_of(l, l->w),
                               (float)l->cfg->v[K_EPS].f, train, (float)l->cfg->v[K_MOMENTUM].f, l->state,
                               l->scratch, l->out.data, train ? l->reduce : NULL);
}

static bool bn_takes_act(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    (void)l;
    return be->batch_norm_forward_act && gl_act_storable(act, slope);
}

static void bn_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t c = l->in[0]->shape.d[0];
    be->batch_norm_backward(n, c, l->in[0]->size / c, l->in[0]->data, l->out.grad, weight_of(l, l->w), l->scratch,
                            weight_of(l, l->dw), bias_of(l, l->dw), l->in[0]->grad, l->reduce);
}

const layer_kind layer_batch_norm = {
    .name = "batch_norm",
    .doc = "per-channel normalisation over the batch and spatial positions, with running statistics for "
           "evaluation; weight [C], bias [C]",
    .keys = bn_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = bn_infer,
    .init = affine_init,
    .forward = bn_forward,
    .backward = bn_backward,
    .takes_act = bn_takes_act,
};

// ---- layer_norm ---------------------------------------------------------------------------------

// Rows per sample normalised apart: T on tokens, else 1 (the whole sample).
static int64_t ln_rows(const layer_t *l) { return l->in[0]->shape.tokens ? l->in[0]->shape.d[0] : 1; }

static int ln_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const gl_shape *x = &l->in[0]->shape;
    l->out.shape = *x;
    l->nparams = 0;
    if (l->cfg->v[K_LN_AFFINE].b) add_affine_params(l, x->tokens ? shape_1d(x->d[1]) : *x);
    l->flops = 7 * l->in[0]->size;
    l->scratch_floats = 2 * l->batch * ln_rows(l);  // mean and 1/std per sample (per token)
    return 0;
}

static void ln_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t t = ln_rows(l);
    be->layer_norm_forward(n * t, l->in[0]->size / t, l->in[0]->data, weight_of(l, l->w), bias_of(l, l->w),
                           (float)l->cfg->v[K_LN_EPS].f, l->scratch, l->out.data);
}

static void ln_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t t = ln_rows(l);
    be->layer_norm_backward(n * t, l->in[0]->size / t, l->in[0]->data, l->out.grad, weight_of(l, l->w), l->scratch,
                            weight_of(l, l->dw), bias_of(l, l->dw), l->in[0]->grad);
}

const layer_kind layer_layer_norm = {
    .name = "layer_norm",
    .doc = "normalises each sample over all its elements (weight and bias of the per-sample shape), or each "
           "token of [T, D] over its D features (weight and bias [D])",
    .keys = ln_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = ln_infer,
    .init = affine_init,
    .forward = ln_forward,
    .backward = ln_backward,
};
