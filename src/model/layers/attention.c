// attention.c: multi-head self-attention over tokens [T, D] -> [T, D], with its projections
// inside, in PyTorch's nn.MultiheadAttention layout and names (a checkpoint's tensors load into
// it): qkv = x in_proj_weight^T + in_proj_bias ([T, 3D]: q, k, v, each H heads of E = D/H),
// o = softmax(q k^T / sqrt(E)) v per head (backend attention_forward: memory linear in T), then
// y = o out_proj.weight^T + out_proj.bias.
//
// Memory: scratch keeps qkv [N, T, 3D], o [N, T, D] and the rows' log-sum-exp [N, H, T] from
// forward to backward; work holds backward's dqkv [N, T, 3D], do [N, T, D] and the kernel's row
// sums [N, H, T]. All linear in T: no T x T buffer exists anywhere.
//
// Attention-probability dropout (training only) draws element (n, h, i, j) of layer l at
// l * 2^40 + ((row0 + n) H + h) T T + i T + j under RNG_DROPOUT, as dropout.c keys its elements by
// the global batch row: the same draws however ranks split the batch; backward draws them again.
// (Under tensor parallelism H and h are this rank's heads: the draws then depend on the layout.)
//
// Tensor parallelism (tp.h): each rank of the group holds H / tp heads: its rows of in_proj (q,
// k and v: column-parallel), its columns of out_proj.weight (row-parallel, the output summed over
// the group); out_proj.bias is replicated. The input [T, D] is the same on every rank.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "galley/layer.h"
#include "model/tp_ops.h"

enum { K_HEADS, K_QKV_BIAS, K_DROPOUT, K_CAUSAL, K_INIT };
static const key_spec keys[] = {
    {"heads", KT_INT, KF_REQUIRED, NULL, 1, 65536, NULL, K_HEADS * sizeof(gl_value), NULL,
     "attention heads; must divide the embedding D (each head has D / heads features)"},
    {"qkv_bias", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_QKV_BIAS * sizeof(gl_value), NULL,
     "a learned bias on q, k and v (in_proj_bias); out_proj.bias is always there"},
    {"dropout", KT_FLOAT, KF_DEFAULT, "0", 0, 1, NULL, K_DROPOUT * sizeof(gl_value), NULL,
     "dropout rate of the attention probabilities in training, below 1"},
    {"causal", KT_BOOL, KF_DEFAULT, "false", 0, 0, NULL, K_CAUSAL * sizeof(gl_value), NULL,
     "token i attends only to tokens j <= i"},
    {"init", KT_ENUM, KF_DEFAULT, "xavier_uniform", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "in_proj_weight's init (xavier_uniform: PyTorch MultiheadAttention's); out_proj.weight starts as "
     "nn.Linear's (pytorch) and the biases at zero, as in PyTorch"},
    KEY_END,
};

#define ATTN_INDEX_BITS 40  // dropout draws per layer in the random stream (as dropout.c)

// t tokens of d features; this rank's h heads of e features, w = h e of them (d without tensor
// parallelism).
typedef struct {
    int64_t t, d, h, e, w;
} attn_dims;

static attn_dims attn_dims_of(const layer_t *l) {
    const int64_t t = l->in[0]->shape.d[0], d = l->in[0]->shape.d[1], heads = l->cfg->v[K_HEADS].i;
    const int64_t h = l->tp_role == GL_TP_HEADS ? heads / l->tp->size : heads;
    return (attn_dims){t, d, h, d / heads, h * (d / heads)};
}

// The split by heads: 0, or -1 with the message.
static int attention_tp_check(const layer_t *l, int64_t heads, char *err, size_t errlen) {
    const gl_tp *tp = l->tp;
    if (l->tp_role != GL_TP_HEADS) return 0;
    if (heads % tp->size || (tp->groups && heads % tp->groups)) {
        snprintf(err, errlen, "heads %lld does not divide over %s %d (attention is split by heads)", (long long)heads,
                 tp->groups && heads % tp->groups ? "distributed.tensor_parts" : "distributed.tensor_parallel",
                 tp->groups && heads % tp->groups ? tp->groups : tp->size);
        return -1;
    }
    return 0;
}

// The work the split products need beyond backward's own temporaries (tp_ops.h).
static int64_t attention_tp_work(const layer_t *l, const attn_dims *a) {
    if (l->tp_role != GL_TP_HEADS) return 0;
    const int64_t rows = l->batch * a->t, c = tp_column_work(l->tp, rows, a->d, a->w, 3),
                  r = tp_row_work(l->tp, rows, a->w, a->d);
    return c > r ? c : r;
}

static int attention_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *in = &l->in[0]->shape;
    const int64_t heads = l->cfg->v[K_HEADS].i;
    if (in->ndim != 2) {
        snprintf(err, errlen, "takes tokens [T, D]");
        return -1;
    }
    if (in->d[1] % heads != 0) {
        snprintf(err, errlen, "heads %lld does not divide the embedding D %lld", (long long)heads, (long long)in->d[1]);
        return -1;
    }
    if (attention_tp_check(l, heads, err, errlen) != 0) return -1;
    const attn_dims a = attn_dims_of(l);
    const int heads_split = l->tp_role == GL_TP_HEADS;
    const double rate = l->cfg->v[K_DROPOUT].f;
    if (rate >= 1.0) {
        snprintf(err, errlen, "dropout %g would drop every attention probability; use a rate below 1", rate);
        return -1;
    }
    if (rate > 0 && (double)l->batch * a.h * a.t * a.t >= (double)(1ull << ATTN_INDEX_BITS)) {
        snprintf(err, errlen, "a batch of %lld samples has more than 2^%d attention probabilities for dropout",
                 (long long)l->batch, ATTN_INDEX_BITS);
        return -1;
    }
    l->out.shape = *in;  // tokens, with the patch grid carried along
    l->nparams = 0;
    const int fi = (int)a.d;
    const int rows_split = heads_split ? GL_SPLIT_ROWS : GL_SPLIT_NONE;
    l->params[l->nparams++] = (gl_param){.name = "in_proj_weight", .shape = {2, {3 * a.w, a.d}}, .size = 3 * a.w * a.d,
                                         .fan_in = fi, .fan_out = 3 * fi, .split = rows_split, .segments = 3};
    if (l->cfg->v[K_QKV_BIAS].b)
        l->params[l->nparams++] = (gl_param){.name = "in_proj_bias", .shape = {1, {3 * a.w}}, .size = 3 * a.w,
                                             .fan_in = fi, .fan_out = 3 * fi, .split = rows_split, .segments = 3};
    l->params[l->nparams++] = (gl_param){.name = "out_proj.weight", .shape = {2, {a.d, a.w}}, .size = a.d * a.w,
                                         .fan_in = fi, .fan_out = fi,
                                         .split = heads_split ? GL_SPLIT_COLS : GL_SPLIT_NONE, .segments = 1};
    l->params[l->nparams++] = (gl_param){.name = "out_proj.bias", .shape = {1, {a.d}}, .size = a.d, .fan_in = fi,
                                         .fan_out = fi, .segments = 1};
    // projections (3W + D outputs of D and W inputs per token), then q k^T and p v per head
    // (causal too: the masked half is counted too)
    l->flops = 2 * a.t * a.d * 4 * a.w + 2 * 2 * a.t * a.t * a.e * a.h;
    const int64_t rows = l->batch * a.t;
    l->scratch_floats = rows * 4 * a.w + l->batch * a.h * a.t;  // qkv, o, lse
    // dqkv, do, the kernel's row sums; then the split products' own (tensor parallelism)
    l->work_floats = rows * 4 * a.w + l->batch * a.h * a.t + attention_tp_work(l, &a);
    return 0;
}

// The parameter tensor named `name` in block base (l->w or l->dw); NULL when absent.
static float *attn_param(const layer_t *l, float *base, const char *name) {
    for (int p = 0; p < l->nparams; p++)
        if (!strcmp(l->params[p].name, name)) return base + (l->params[p].offset - l->params[0].offset);
    return NULL;
}

static int init_choice(const char *name) {
    for (int i = 0; layer_init_choices[i]; i++)
        if (!strcmp(layer_init_choices[i], name)) return i;
    return 0;
}

static void attention_init(layer_t *l, float *params, uint64_t seed) {
    for (int p = 0; p < l->nparams; p++) {
        const gl_param *pp = &l->params[p];
        float *dst = params + pp->offset;
        if (!strcmp(pp->name, "in_proj_weight")) layer_init_param(pp, l->cfg->v[K_INIT].e, dst, seed, l->index, p);
        else if (!strcmp(pp->name, "out_proj.weight")) layer_init_param(pp, init_choice("pytorch"), dst, seed, l->index, p);
        else memset(dst, 0, sizeof(float) * (size_t)pp->size);
    }
}

// Scratch and work, carved: qkv [N T, 3D], o [N T, D], lse [N, H, T] (and their gradients).
static void attn_buffers(const layer_t *l, const attn_dims *a, float *base, float **qkv, float **o, float **lse) {
    const int64_t rows = l->batch * a->t;
    *qkv = base, *o = base + rows * 3 * a->w, *lse = base + rows * 4 * a->w;
}

// Past backward's temporaries in the work buffer: the split products' own.
static float *attn_tp_work(const layer_t *l, const attn_dims *a) {
    return l->work + l->batch * a->t * 4 * a->w + l->batch * a->h * a->t;
}

static uint64_t attn_base(const layer_t *l, const attn_dims *a) {
    return ((uint64_t)l->index << ATTN_INDEX_BITS) + (uint64_t)l->row0 * (uint64_t)(a->h * a->t * a->t);
}

static void attention_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    const attn_dims a = attn_dims_of(l);
    float *qkv, *o, *lse;
    attn_buffers(l, &a, l->scratch, &qkv, &o, &lse);
    const float rate = train ? (float)l->cfg->v[K_DROPOUT].f : 0.0f;
    const float *win = attn_param(l, l->w, "in_proj_weight"), *bin = attn_param(l, l->w, "in_proj_bias");
    const float *wout = attn_param(l, l->w, "out_proj.weight"), *bout = attn_param(l, l->w, "out_proj.bias");
    if (l->tp_role == GL_TP_HEADS)
        tp_column_forward(l->tp, be, n * a.t, a.d, a.w, 3, l->in[0]->data, win, bin, qkv, attn_tp_work(l, &a));
    else
        be->dense_forward(n * a.t, a.d, 3 * a.d, l->in[0]->data, win, bin, qkv);
    be->attention_forward(n, a.t, a.h, a.e, 1.0f / sqrtf((float)a.e), l->cfg->v[K_CAUSAL].b, rate, l->seed,
                          (uint64_t)l->step, attn_base(l, &a), qkv, o, lse);
    if (l->tp_role == GL_TP_HEADS)
        tp_row_forward(l->tp, be, n * a.t, a.w, a.d, o, wout, bout, l->out.data, attn_tp_work(l, &a));
    else if (l->store_res)  // + the residual add after this layer, fused (graph_build)
        be->dense_forward_res(n * a.t, a.d, a.d, o, wout, bout, l->store_res->data, l->out.data);
    else
        be->dense_forward(n * a.t, a.d, a.d, o, wout, bout, l->out.data);
}

// Whether the residual add after it can be applied as the output projection stores: on a backend
// that does, without tensor parallelism (whose parts are summed after the product).
static bool attention_takes_res(const layer_t *l, const gl_backend *be) {
    return l->tp_role != GL_TP_HEADS && be->dense_forward_res;
}

// Backward replays forward's draws: the graph keeps l->seed, step and row0 of the forward it follows.
static void attention_backward(layer_t *l, const gl_backend *be, int64_t n) {
    const attn_dims a = attn_dims_of(l);
    float *qkv, *o, *lse, *dqkv, *dout, *dsum;
    attn_buffers(l, &a, l->scratch, &qkv, &o, &lse);
    attn_buffers(l, &a, l->work, &dqkv, &dout, &dsum);
    const float rate = (float)l->cfg->v[K_DROPOUT].f;  // backward follows a training forward
    const float *win = attn_param(l, l->w, "in_proj_weight"), *wout = attn_param(l, l->w, "out_proj.weight");
    float *dwin = attn_param(l, l->dw, "in_proj_weight"), *dbin = attn_param(l, l->dw, "in_proj_bias");
    float *dwout = attn_param(l, l->dw, "out_proj.weight"), *dbout = attn_param(l, l->dw, "out_proj.bias");
    if (l->tp_role == GL_TP_HEADS) {
        be->zero(dout, sizeof(float) * (size_t)(n * a.t * a.w));  // tp_row_backward adds into dx
        tp_row_backward(l->tp, be, n * a.t, a.w, a.d, o, wout, l->out.grad, dwout, dbout, dout, attn_tp_work(l, &a));
    } else if (be->dense_backward_set) {  // written, not cleared and added to: the same bits
        be->dense_backward_set(n * a.t, a.d, a.d, o, wout, l->out.grad, dwout, dbout, dout);
    } else {
        be->zero(dout, sizeof(float) * (size_t)(n * a.t * a.w));
        be->dense_backward(n * a.t, a.d, a.d, o, wout, l->out.grad, dwout, dbout, dout);
    }
    be->attention_backward(n, a.t, a.h, a.e, 1.0f / sqrtf((float)a.e), l->cfg->v[K_CAUSAL].b, rate, l->seed,
                           (uint64_t)l->step, attn_base(l, &a), qkv, o, lse, dout, dqkv, dsum);
    if (l->tp_role == GL_TP_HEADS)
        tp_column_backward(l->tp, be, n * a.t, a.d, a.w, 3, l->in[0]->data, win, dqkv, dwin, dbin, l->in[0]->grad,
                           attn_tp_work(l, &a));
    else if (l->grad_set[0])  // this layer writes dx first (attention_sets_grad)
        be->dense_backward_set(n * a.t, a.d, 3 * a.d, l->in[0]->data, win, dqkv, dwin, dbin, l->in[0]->grad);
    else
        be->dense_backward(n * a.t, a.d, 3 * a.d, l->in[0]->data, win, dqkv, dwin, dbin, l->in[0]->grad);
}

// Whether backward can write its input's gradient whole: through dense_backward_set, without
// tensor parallelism (whose parts are summed into dx).
static bool attention_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)k;
    return l->tp_role != GL_TP_HEADS && be->dense_backward_set;
}

const layer_kind layer_attention = {
    .name = "attention",
    .doc = "multi-head self-attention over tokens [T, D] -> [T, D] with q/k/v and output projections "
           "(PyTorch nn.MultiheadAttention's parameters: in_proj_weight [3D, D], in_proj_bias [3D], "
           "out_proj.weight [D, D], out_proj.bias [D]); memory linear in T",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_TOKENS,
    .scratch_doc = "q, k, v, output and row log-sum-exp: T x (4D + H) floats a sample, linear in T, no T x T matrix",
    .infer = attention_infer,
    .init = attention_init,
    .forward = attention_forward,
    .backward = attention_backward,
    .sets_grad = attention_sets_grad,
    .takes_res = attention_takes_res,
};
