// pos_embed.c: a learned position embedding added to tokens [T, D]: y = x + pos, pos [T, D]
// (the tutorial ViT's pos_embed). With class_token, a learned token cls [D] is put before the
// others first, as timm's ViT does: y = cat(cls, x) + pos with pos [T + 1, D] covering the class
// token's position too, so y is [T + 1, D]. The patch grid is kept (unpatch refuses T + 1
// tokens). Both start from init (trunc_normal: the tutorial's trunc_normal_(std=.02)).
#include <stdio.h>

#include "galley/layer.h"

enum { K_CLASS_TOKEN, K_INIT };
static const key_spec keys[] = {
    {"class_token", KT_BOOL, KF_DEFAULT, "false", 0, 0, NULL, K_CLASS_TOKEN * sizeof(gl_value), NULL,
     "put a learned class token before the tokens (output [T + 1, D]; token_pool mode: class reads it)"},
    {"init", KT_ENUM, KF_DEFAULT, "trunc_normal", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "init of pos and of the class token (fan_in = D)"},
    KEY_END,
};

static int pos_embed_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const gl_shape *x = &l->in[0]->shape;
    int64_t d = x->d[1], t = x->d[0] + (l->cfg->v[K_CLASS_TOKEN].b ? 1 : 0);
    l->out.shape = *x;
    l->out.shape.d[0] = t;
    l->nparams = 0;
    l->params[l->nparams++] =
        (gl_param){.name = "pos", .shape = {2, {t, d}}, .size = t * d, .fan_in = (int)d, .fan_out = (int)d};
    if (l->cfg->v[K_CLASS_TOKEN].b)
        l->params[l->nparams++] =
            (gl_param){.name = "cls", .shape = {1, {d}}, .size = d, .fan_in = (int)d, .fan_out = (int)d};
    l->flops = t * d;
    return 0;
}

static void pos_embed_init(layer_t *l, float *params, uint64_t seed) {
    for (int p = 0; p < l->nparams; p++)
        layer_init_param(&l->params[p], l->cfg->v[K_INIT].e, params + l->params[p].offset, seed, l->index, p);
}

// x[N, T, D] -> y[N, T', D] = (cls,) x + pos; T' = T (+ 1)
static void pos_embed_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t d = l->out.shape.d[1], to = l->out.shape.d[0] * d, ti = l->in[0]->size;
    if (l->nparams > 1) {
        be->copy_rows(n, d, l->w + to, 0, l->out.data, to, 0);  // cls (stride 0: the same row each time)
        be->copy_rows(n, ti, l->in[0]->data, ti, l->out.data + d, to, 0);
    } else {
        be->copy_rows(n, ti, l->in[0]->data, ti, l->out.data, ti, 0);  // a row a sample: in parallel
    }
    be->row_spread(1, n, to, 1.0f, l->w, l->out.data, to, 1);
}

// dpos = sum of dy over the batch, dcls = the same over the first tokens; dx += dy past cls.
static void pos_embed_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t d = l->out.shape.d[1], to = l->out.shape.d[0] * d, ti = l->in[0]->size;
    bool cls = l->nparams > 1;
    be->row_sum(1, n, to, 1.0f, l->out.grad, to, l->dw, 0);
    if (cls) be->row_sum(1, n, d, 1.0f, l->out.grad, to, l->dw + to, 0);
    if (l->in[0]->grad) be->copy_rows(n, ti, l->out.grad + (cls ? d : 0), to, l->in[0]->grad, ti, 1);
}

const layer_kind layer_pos_embed = {
    .name = "pos_embed",
    .doc = "adds a learned position embedding pos [T, D] to tokens; class_token: a learned token cls [D] first "
           "(output [T + 1, D], pos [T + 1, D])",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_TOKENS,
    .infer = pos_embed_infer,
    .init = pos_embed_init,
    .forward = pos_embed_forward,
    .backward = pos_embed_backward,
};
