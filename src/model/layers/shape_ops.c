// shape_ops.c: layers that rearrange values without learning anything: flatten ([C, ...] ->
// [size], PyTorch's Flatten on the per-sample shape; tokens [T, D] -> a plain [T * D] vector,
// token-major, the patch grid dropped) and upsample (nearest neighbour, each value
// repeated factor times along every spatial dimension of [C, H, W] or [C, D, H, W]).
#include <stdio.h>

#include "galley/layer.h"

// ---- flatten --------------------------------------------------------------------------------------

static const key_spec no_keys[] = {KEY_END};

static int flatten_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    l->out.shape = shape_1d(l->in[0]->size);  // not tokens, no grid: a plain vector
    l->nparams = 0;
    l->flops = 0;
    return 0;
}

// A copy, one row a sample (the CPU's copy_rows runs rows in parallel); nothing for a view
// (layer_t.view: the output is the input's buffer).
static void flatten_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    if (l->view) return;
    const int64_t len = l->out.size;
    be->copy_rows(n, len, l->in[0]->data, len, l->out.data, len, 0);
}

// dx += dy, or dx = dy where this layer writes dx first (grad_set: no clearing pass before).
static void flatten_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad || l->grad_shared[0]) return;  // the same buffer (graph_share_grads)
    const int64_t len = l->out.size;
    if (l->grad_set[0])
        be->copy_rows(n, len, l->out.grad, len, l->in[0]->grad, len, 0);
    else
        be->axpy(n * len, 1.0f, l->out.grad, l->in[0]->grad);
}

static bool flatten_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)l, (void)be, (void)k;
    return true;
}

const layer_kind layer_flatten = {
    .name = "flatten",
    .doc = "reshapes each sample to one dimension: [C, ...] -> [C * ...], tokens [T, D] -> [T * D]",
    .keys = no_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reshape_only = true,
    .grad_is_dy = true,
    .infer = flatten_infer,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .sets_grad = flatten_sets_grad,
};

// ---- upsample -------------------------------------------------------------------------------------

enum { K_FACTOR };
static const key_spec upsample_keys[] = {
    {"factor", KT_INT, KF_DEFAULT, "2", 1, 1024, NULL, K_FACTOR * sizeof(gl_value), NULL,
     "repeats of each value along every spatial dimension"},
    KEY_END,
};

// The backend's view: {D, H, W} (2D: D = 1) and per-dimension factors.
static void upsample_geometry(const layer_t *l, int64_t in[3], int f[3]) {
    const gl_shape *x = &l->in[0]->shape;
    int factor = (int)l->cfg->v[K_FACTOR].i;
    in[0] = x->ndim == 4 ? x->d[1] : 1;
    in[1] = x->d[x->ndim - 2];
    in[2] = x->d[x->ndim - 1];
    f[0] = x->ndim == 4 ? factor : 1;
    f[1] = f[2] = factor;
}

static int upsample_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(err, errlen, "upsample needs a [C, H, W] or [C, D, H, W] input, got %d dimension%s", x->ndim,
                 x->ndim == 1 ? "" : "s");
        return -1;
    }
    int64_t f = l->cfg->v[K_FACTOR].i;
    double grow = 1.0;
    l->out.shape = *x;
    for (int j = 1; j < x->ndim; j++) {
        l->out.shape.d[j] = x->d[j] * f;
        grow *= (double)f;
    }
    if ((double)l->in[0]->size * grow > 4e12) {
        snprintf(err, errlen, "factor %lld makes %.3g elements per sample", (long long)f,
                 (double)l->in[0]->size * grow);
        return -1;
    }
    l->nparams = 0;
    l->flops = 0;
    return 0;
}

static void upsample_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t in[3];
    int f[3];
    upsample_geometry(l, in, f);
    be->upsample_forward(n, l->in[0]->shape.d[0], in, f, l->in[0]->data, l->out.data);
}

static void upsample_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    int64_t in[3];
    int f[3];
    upsample_geometry(l, in, f);
    be->upsample_backward(n, l->in[0]->shape.d[0], in, f, l->out.grad, l->in[0]->grad);
}

const layer_kind layer_upsample = {
    .name = "upsample",
    .doc = "nearest-neighbour upsampling of [C, H, W] or [C, D, H, W]: every spatial size times factor",
    .keys = upsample_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = upsample_infer,
    .forward = upsample_forward,
    .backward = upsample_backward,
};
