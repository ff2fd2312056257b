// unpatch.c: tokens [T, D] back to a map [C, H, W] (or [C, D, H, W]) through a per-patch linear
// head, the tutorial ViT's forward_head: each token goes through Linear(D, p*p*C) and its outputs,
// read as (p, q, c), fill its patch: x.reshape(B, h, w, p, q, c), einsum nhwpqc->nchpwq,
// reshape [B, C, h*p, w*q]. Weight [p*p*C, D] with row ((py * p) + px) * C + c (3D: ((pz * p +
// py) * p + px) * C + c) and bias [p*p*C], the head's layout and names, so its weights load. The
// patch grid and size come from the tokens (gl_shape.grid, .patch, set by patch_embed); a 3D
// input with depth and patch 1 comes back as a 2D map. Computed as one dense product over N*T
// rows into the work space, then the backend's patch_rearrange (c last) onto the map.
#include <stdio.h>

#include "galley/layer.h"

enum { K_CHANNELS, K_BIAS, K_INIT };
static const key_spec keys[] = {
    {"channels", KT_INT, KF_REQUIRED, NULL, 1, 1e8, NULL, K_CHANNELS * sizeof(gl_value), NULL,
     "channels of the output map"},
    {"bias", KT_BOOL, KF_DEFAULT, "false", 0, 0, NULL, K_BIAS * sizeof(gl_value), NULL,
     "add a learned bias (the tutorial's head has none)"},
    {"init", KT_ENUM, KF_DEFAULT, "pytorch", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "weight init (fan_in = D); pytorch: Linear's default, the bias too; otherwise the bias starts at zero"},
    KEY_END,
};

// The map's {D, H, W} and the patch {pd, ph, pw} from the tokens' grid.
static void unpatch_geometry(const layer_t *l, int64_t in[3], int p[3]) {
    const gl_shape *x = &l->in[0]->shape;
    for (int j = 0; j < 3; j++) {
        in[j] = x->grid[j] * x->patch[j];
        p[j] = (int)x->patch[j];
    }
}

static int unpatch_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    const int64_t *g = x->grid, *ps = x->patch;
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || ps[0] < 1 || ps[1] < 1 || ps[2] < 1) {
        snprintf(err, errlen, "unpatch needs tokens from a patch_embed (these carry no patch grid)");
        return -1;
    }
    if (x->d[0] != g[0] * g[1] * g[2]) {
        snprintf(err, errlen,
                 "unpatch needs one token per patch: %lld tokens for a %lld x %lld x %lld patch grid "
                 "(a class token? pool it or leave it out before unpatch)",
                 (long long)x->d[0], (long long)g[0], (long long)g[1], (long long)g[2]);
        return -1;
    }
    int64_t c = l->cfg->v[K_CHANNELS].i, d = x->d[1], t = x->d[0], pc = c * ps[0] * ps[1] * ps[2];
    if ((double)pc * (double)d > 2e9) {
        snprintf(err, errlen, "weight [%lld, %lld] is too large", (long long)pc, (long long)d);
        return -1;
    }
    bool three = g[0] > 1 || ps[0] > 1;
    l->out.shape = (gl_shape){.ndim = three ? 4 : 3, .d = {c}};
    for (int j = three ? 0 : 1; j < 3; j++) l->out.shape.d[l->out.shape.ndim - 3 + j] = g[j] * ps[j];
    l->nparams = 0;
    l->params[l->nparams++] =
        (gl_param){.name = "weight", .shape = {2, {pc, d}}, .size = pc * d, .fan_in = (int)d, .fan_out = (int)pc};
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] =
            (gl_param){.name = "bias", .shape = {1, {pc}}, .size = pc, .fan_in = (int)d, .fan_out = (int)pc};
    l->flops = 2 * t * d * pc;
    l->work_floats = l->batch * t * pc;  // the head's output rows [N, T, p^k * C]
    return 0;
}

static void unpatch_init(layer_t *l, float *params, uint64_t seed) {
    layer_init_param(&l->params[0], l->cfg->v[K_INIT].e, params + l->params[0].offset, seed, l->index, 0);
    if (l->nparams > 1)
        layer_init_bias(&l->params[1], l->cfg->v[K_INIT].e, params + l->params[1].offset, seed, l->index, 1);
}

// x[N*T, D] -> rows[N*T, P*C] = x . W^T + b (work) -> y[N, C, (D,) H, W]
static void unpatch_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t in[3], c = l->out.shape.d[0], t = l->in[0]->shape.d[0], d = l->in[0]->shape.d[1];
    int p[3];
    unpatch_geometry(l, in, p);
    int64_t pc = l->params[0].size / d;
    be->dense_forward(n * t, d, pc, l->in[0]->data, l->w, l->nparams > 1 ? l->w + pc * d : NULL, l->work);
    be->patch_rearrange(n, c, in, p, 1, 0, 0, l->work, l->out.data);
}

// dy map -> its rows (work) -> dW, db, and dx += rows . W
static void unpatch_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t in[3], c = l->out.shape.d[0], t = l->in[0]->shape.d[0], d = l->in[0]->shape.d[1];
    int p[3];
    unpatch_geometry(l, in, p);
    int64_t pc = l->params[0].size / d;
    be->patch_rearrange(n, c, in, p, 1, 1, 0, l->out.grad, l->work);
    be->dense_backward(n * t, d, pc, l->in[0]->data, l->w, l->work, l->dw, l->nparams > 1 ? l->dw + pc * d : NULL,
                       l->in[0]->grad);
}

const layer_kind layer_unpatch = {
    .name = "unpatch",
    .doc = "tokens [T, D] from a patch_embed -> a map [channels, H, W] (or 3D): a per-token Linear(D, p^k * "
           "channels) whose outputs fill each patch (the tutorial ViT's head); weight [p^k * channels, D]",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_TOKENS,
    .infer = unpatch_infer,
    .init = unpatch_init,
    .forward = unpatch_forward,
    .backward = unpatch_backward,
};
