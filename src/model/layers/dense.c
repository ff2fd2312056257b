// dense.c: fully connected layer. Input is flattened per sample: x[N,K] -> y[N,U], with
// weight [U,K] (PyTorch's nn.Linear layout, so weights load directly) and bias [U]. On tokens
// [T, D] it acts per token, as nn.Linear on a [B, T, D] tensor: [T, D] -> [T, U] with weight
// [U, D], one product over N*T rows; the patch grid is kept (flatten first to mix tokens).
#include <stdio.h>

#include "galley/layer.h"

enum { K_UNITS, K_BIAS, K_INIT };
static const key_spec keys[] = {
    {"units", KT_INT, KF_REQUIRED, NULL, 1, 1e8, NULL, K_UNITS * sizeof(gl_value), NULL, "output features"},
    {"bias", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_BIAS * sizeof(gl_value), NULL, "add a learned bias"},
    {"init", KT_ENUM, KF_DEFAULT, "he_normal", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "weight init (fan-in/fan-out scaled); the bias starts at zero "
     "(pytorch: PyTorch's default, the bias too)"},
    KEY_END,
};

// Rows per sample the product runs over: T on tokens, else 1 (the flattened sample).
static int64_t dense_rows(const layer_t *l) { return l->in[0]->shape.tokens ? l->in[0]->shape.d[0] : 1; }

static int dense_infer(layer_t *l, char *err, size_t errlen) {
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->cfg->v[K_UNITS].i;
    if ((double)k * (double)u > 4e9) {
        snprintf(err, errlen, "weight [%lld, %lld] has more than 4e9 elements", (long long)u, (long long)k);
        return -1;
    }
    if (l->in[0]->shape.tokens) {
        l->out.shape = l->in[0]->shape;  // tokens, grid and patch kept
        l->out.shape.d[1] = u;
    } else {
        l->out.shape = shape_1d(u);
    }
    l->nparams = 0;
    l->params[l->nparams++] = (gl_param){.name = "weight", .shape = {2, {u, k}}, .size = u * k,
                                         .fan_in = (int)k, .fan_out = (int)u};
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] = (gl_param){.name = "bias", .shape = {1, {u}}, .size = u, .fan_in = (int)k,
                                             .fan_out = (int)u};
    l->flops = 2 * t * k * u;
    return 0;
}

static void dense_init(layer_t *l, float *params, uint64_t seed) {
    layer_init_param(&l->params[0], l->cfg->v[K_INIT].e, params + l->params[0].offset, seed, l->index, 0);
    if (l->nparams > 1)  // bias: zeros, or PyTorch's for init: pytorch
        layer_init_bias(&l->params[1], l->cfg->v[K_INIT].e, params + l->params[1].offset, seed, l->index, 1);
}

static void dense_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->out.size / t;
    be->dense_forward(n * t, k, u, l->in[0]->data, l->w, l->nparams > 1 ? l->w + u * k : NULL, l->out.data);
}

static void dense_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->out.size / t;
    be->dense_backward(n * t, k, u, l->in[0]->data, l->w, l->out.grad, l->dw, l->nparams > 1 ? l->dw + u * k : NULL,
                       l->in[0]->grad);
}

const layer_kind layer_dense = {
    .name = "dense",
    .doc = "fully connected: y = x W^T + b over the flattened input, or per token on tokens [T, D] -> "
           "[T, units]; weight [units, in], bias [units]",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = dense_infer,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
};
