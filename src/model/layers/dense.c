// dense.c: fully connected layer. Input is flattened per sample: x[N,K] -> y[N,U], with
// weight [U,K] (PyTorch's nn.Linear layout, so weights load directly) and bias [U]. On tokens
// [T, D] it acts per token, as nn.Linear on a [B, T, D] tensor: [T, D] -> [T, U] with weight
// [U, D], one product over N*T rows; the patch grid is kept (flatten first to mix tokens).
// Under tensor parallelism (tp.h) the first dense of an MLP pair is column-parallel (this rank's
// units, rows of weight and bias) and the second row-parallel (this rank's input units, columns
// of weight; the bias replicated), as graph_build marks them.
#include <stdio.h>

#include "galley/layer.h"
#include "model/tp_ops.h"

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

// The split of a column- or row-parallel dense: units (column) or input units (row) over the
// group and its canonical parts. 0, or -1 with the message.
static int dense_tp_check(const layer_t *l, int64_t k, int64_t u, char *err, size_t errlen) {
    const gl_tp *tp = l->tp;
    if (l->tp_role == GL_TP_COLUMN && (u % tp->size || (tp->groups && u % tp->groups))) {
        snprintf(err, errlen, "units %lld does not divide over distributed.tensor_parallel %d%s (the MLP's first "
                 "dense is split column-parallel by units)", (long long)u, tp->size,
                 tp->groups ? " and its distributed.tensor_parts" : "");
        return -1;
    }
    if (l->tp_role == GL_TP_ROW && tp->groups && k % (tp->groups / tp->size)) {
        snprintf(err, errlen, "its %lld input units per tensor rank do not divide into distributed.tensor_parts "
                 "%d", (long long)k, tp->groups);
        return -1;
    }
    return 0;
}

static int dense_infer(layer_t *l, char *err, size_t errlen) {
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->cfg->v[K_UNITS].i;
    if (dense_tp_check(l, k, u, err, errlen) != 0) return -1;
    const bool col = l->tp_role == GL_TP_COLUMN, row = l->tp_role == GL_TP_ROW;
    if (col) u /= l->tp->size;  // this rank's units
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
                                         .fan_in = (int)k, .fan_out = (int)u,
                                         .split = col ? GL_SPLIT_ROWS : row ? GL_SPLIT_COLS : GL_SPLIT_NONE,
                                         .segments = 1};
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] = (gl_param){.name = "bias", .shape = {1, {u}}, .size = u, .fan_in = (int)k,
                                             .fan_out = (int)u, .split = col ? GL_SPLIT_ROWS : GL_SPLIT_NONE,
                                             .segments = 1};
    l->flops = 2 * t * k * u;
    if (col) l->work_floats = tp_column_work(l->tp, l->batch * t, k, u, 1);
    if (row) l->work_floats = tp_row_work(l->tp, l->batch * t, k, u);
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
    const float *b = l->nparams > 1 ? l->w + u * k : NULL;
    if (l->tp_role == GL_TP_COLUMN) tp_column_forward(l->tp, be, n * t, k, u, 1, l->in[0]->data, l->w, b, l->out.data, l->work);
    else if (l->tp_role == GL_TP_ROW) tp_row_forward(l->tp, be, n * t, k, u, l->in[0]->data, l->w, b, l->out.data, l->work);
    else if (l->store_act_on)  // y = act(x W^T + b): the activation after this layer, fused (graph_build)
        be->dense_forward_act(n * t, k, u, l->in[0]->data, l->w, b, l->out.data, l->store_act, l->store_slope);
    else if (l->store_res)  // y = (x W^T + b) + res: the residual add after this layer, fused (graph_build)
        be->dense_forward_res(n * t, k, u, l->in[0]->data, l->w, b, l->store_res->data, l->out.data);
    else be->dense_forward(n * t, k, u, l->in[0]->data, l->w, b, l->out.data);
}

// Whether the residual add after it can be applied as the output is stored: on a backend that
// does, without tensor parallelism (as dense_takes_act). A fused activation is never there: it
// reads this output, which the add must read alone.
static bool dense_takes_res(const layer_t *l, const gl_backend *be) {
    return l->tp_role == GL_TP_NONE && be->dense_forward_res;
}

// Whether the activation after it can be applied as the output is stored: on a backend that
// does (the CPU's), without tensor parallelism (whose parts are summed after the product).
static bool dense_takes_act(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    return l->tp_role == GL_TP_NONE && be->dense_forward_act && gl_act_storable(act, slope);
}

static void dense_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (l->grad_deferred) return;  // the activation before runs backward_act (graph_build)
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->out.size / t;
    float *db = l->nparams > 1 ? l->dw + u * k : NULL;
    if (l->tp_role == GL_TP_COLUMN)
        tp_column_backward(l->tp, be, n * t, k, u, 1, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad,
                           l->work);
    else if (l->tp_role == GL_TP_ROW)
        tp_row_backward(l->tp, be, n * t, k, u, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad, l->work);
    else if (l->grad_set[0])  // this layer writes dx first (dense_sets_grad): no clearing pass
        be->dense_backward_set(n * t, k, u, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad);
    else be->dense_backward(n * t, k, u, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad);
}

static bool dense_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)k;
    return l->tp_role == GL_TP_NONE && be->dense_backward_set;
}

// The relu or leaky_relu whose output this layer alone reads can leave its derivative to this
// layer's input gradient, applied as the product stores it (its input: the activation's output),
// and so can a gelu that kept its derivative (layer_t.keep_deriv: then the gate).
static bool dense_takes_act_grad(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    return l->tp_role == GL_TP_NONE && be->dense_backward_act &&
           (gl_act_storable(act, slope) || (act == ACT_GELU && be->gelu_backward_kept));
}

// This layer's backward with dx, the activation's input gradient, written whole through its derivative.
static void dense_backward_act(layer_t *l, const gl_backend *be, int64_t n, gl_act act, float slope,
                               const float *gate, float *dx) {
    int64_t t = dense_rows(l), k = l->in[0]->size / t, u = l->out.size / t;
    float *db = l->nparams > 1 ? l->dw + u * k : NULL;
    be->dense_backward_act(n * t, k, u, l->in[0]->data, l->w, l->out.grad, l->dw, db, dx, act, slope, gate);
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
    .sets_grad = dense_sets_grad,
    .takes_act = dense_takes_act,
    .takes_res = dense_takes_res,
    .takes_act_grad = dense_takes_act_grad,
    .backward_act = dense_backward_act,
};
