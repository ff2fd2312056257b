// token_pool.c: tokens [T, D] -> one vector [D] per sample, for a classification head: mode mean
// averages the tokens; mode class takes token 0, the class token a pos_embed with class_token
// put first. Whether there is one is not known here: without it, class takes the first patch's
// token (a recipe error this layer cannot see).
#include <stdio.h>

#include "galley/layer.h"

enum { K_MODE };
enum { MODE_MEAN, MODE_CLASS };
static const char *const modes[] = {"mean", "class", NULL};
static const key_spec keys[] = {
    {"mode", KT_ENUM, KF_DEFAULT, "mean", 0, 0, modes, K_MODE * sizeof(gl_value), NULL,
     "mean: the average of the tokens; class: token 0 (pos_embed's class token)"},
    KEY_END,
};

static int token_pool_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    l->out.shape = shape_1d(l->in[0]->shape.d[1]);
    l->nparams = 0;
    l->flops = l->cfg->v[K_MODE].e == MODE_MEAN ? l->in[0]->size : 0;
    return 0;
}

// x[N, T, D] -> y[N, D]
static void token_pool_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t t = l->in[0]->shape.d[0], d = l->out.size;
    if (l->cfg->v[K_MODE].e == MODE_MEAN)
        be->row_sum(n, t, d, 1.0f / (float)t, l->in[0]->data, d, l->out.data, 0);
    else
        be->copy_rows(n, d, l->in[0]->data, t * d, l->out.data, d, 0);
}

// dx[N, T, D] += dy[N, D] / T on every token (mean), or on token 0 (class)
static void token_pool_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    int64_t t = l->in[0]->shape.d[0], d = l->out.size;
    if (l->cfg->v[K_MODE].e == MODE_MEAN)
        be->row_spread(n, t, d, 1.0f / (float)t, l->out.grad, l->in[0]->grad, d, 1);
    else
        be->copy_rows(n, d, l->out.grad, d, l->in[0]->grad, t * d, 1);
}

const layer_kind layer_token_pool = {
    .name = "token_pool",
    .doc = "tokens [T, D] -> [D]: their mean (mode mean) or token 0, the class token (mode class)",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_TOKENS,
    .infer = token_pool_infer,
    .forward = token_pool_forward,
    .backward = token_pool_backward,
};
