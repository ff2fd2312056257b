// scale.c: multiplication by a constant, y = factor * x (e.g. CosmoFlow's tanh output x 1.2).
#include "galley/layer.h"

enum { K_FACTOR };
static const key_spec keys[] = {
    {"factor", KT_FLOAT, KF_REQUIRED, NULL, -1e30, 1e30, NULL, K_FACTOR * sizeof(gl_value), NULL,
     "the constant multiplier"},
    KEY_END,
};

static int scale_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    l->out.shape = l->in[0]->shape;
    l->nparams = 0;
    l->flops = l->in[0]->size;
    return 0;
}

static void scale_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    be->scale(n * l->out.size, (float)l->cfg->v[K_FACTOR].f, l->in[0]->data, l->out.data);
}

static void scale_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    be->axpy(n * l->out.size, (float)l->cfg->v[K_FACTOR].f, l->out.grad, l->in[0]->grad);
}

const layer_kind layer_scale = {
    .name = "scale",
    .doc = "y = factor * x",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = scale_infer,
    .forward = scale_forward,
    .backward = scale_backward,
};
