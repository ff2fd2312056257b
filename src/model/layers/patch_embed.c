// patch_embed.c: non-overlapping patches of a [C, H, W] or [C, D, H, W] map -> tokens [T, dim],
// the ViT's patch embedding: PyTorch's Conv2d/Conv3d(C, dim, kernel = stride = patch) followed
// by flatten(2).transpose(1, 2), so T = (D/p)(H/p)(W/p) tokens in raster order (d, h, w). Weight
// [dim, C, p, p(, p)] and bias [dim] in the Conv's layout and names, so its weights load.
// Computed as the patches rearranged into rows [N, T, C*p^k] (the backend's patch_rearrange, in
// the layer's work space) times the weight, one dense product over N*T rows; backward recomputes
// the rows. The output carries the patch grid and size (gl_shape.grid, .patch) for unpatch.
#include <stdio.h>

#include "galley/layer.h"

enum { K_PATCH, K_DIM, K_BIAS, K_INIT };
static const key_spec keys[] = {
    {"patch", KT_INT, KF_REQUIRED, NULL, 1, 65536, NULL, K_PATCH * sizeof(gl_value), NULL,
     "patch size in every spatial dimension; must divide each spatial size"},
    {"dim", KT_INT, KF_REQUIRED, NULL, 1, 1e8, NULL, K_DIM * sizeof(gl_value), NULL, "features per token"},
    {"bias", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_BIAS * sizeof(gl_value), NULL, "add a learned bias"},
    {"init", KT_ENUM, KF_DEFAULT, "pytorch", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "weight init (fan_in = C * patch^d); pytorch: Conv's default, the bias too; otherwise the bias starts at zero"},
    KEY_END,
};

// The backend's view of the input: spatial sizes {D, H, W} and patch {pd, ph, pw} (2D: D = pd = 1).
static void patch_geometry(const layer_t *l, int64_t in[3], int p[3]) {
    const gl_shape *x = &l->in[0]->shape;
    int patch = (int)l->cfg->v[K_PATCH].i;
    in[0] = x->ndim == 4 ? x->d[1] : 1;
    in[1] = x->d[x->ndim - 2];
    in[2] = x->d[x->ndim - 1];
    p[0] = x->ndim == 4 ? patch : 1;
    p[1] = p[2] = patch;
}

static int patch_embed_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(err, errlen, "patch_embed needs a [C, H, W] or [C, D, H, W] input, got %d dimension%s", x->ndim,
                 x->ndim == 1 ? "" : "s");
        return -1;
    }
    int64_t in[3], c = x->d[0], dim = l->cfg->v[K_DIM].i;
    int p[3];
    patch_geometry(l, in, p);
    static const char *const names[] = {"D", "H", "W"};
    for (int j = 3 - (x->ndim - 1); j < 3; j++)
        if (in[j] % p[j]) {
            snprintf(err, errlen, "patch %d does not divide %s %lld", p[j], names[j], (long long)in[j]);
            return -1;
        }
    int64_t taps = (int64_t)p[0] * p[1] * p[2], k = c * taps, t = 1;
    if ((double)k * (double)dim > 2e9 || (double)dim * (double)taps > 2e9) {
        snprintf(err, errlen, "weight [%lld, %lld] is too large (fans are ints)", (long long)dim, (long long)k);
        return -1;
    }
    l->out.shape = shape_tokens(0, dim);
    for (int j = 0; j < 3; j++) {
        l->out.shape.grid[j] = in[j] / p[j];
        l->out.shape.patch[j] = p[j];
        t *= in[j] / p[j];
    }
    l->out.shape.d[0] = t;
    gl_param w = {.name = "weight", .size = dim * k, .fan_in = (int)k, .fan_out = (int)(dim * taps)};
    w.shape.ndim = x->ndim + 1;
    w.shape.d[0] = dim;
    w.shape.d[1] = c;
    for (int j = 2; j < w.shape.ndim; j++) w.shape.d[j] = l->cfg->v[K_PATCH].i;
    l->nparams = 0;
    l->params[l->nparams++] = w;
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] =
            (gl_param){.name = "bias", .shape = {1, {dim}}, .size = dim, .fan_in = w.fan_in, .fan_out = w.fan_out};
    l->flops = 2 * t * k * dim;
    l->work_floats = 2 * l->batch * t * k;  // the rows, and in backward their gradient
    return 0;
}

static void patch_embed_init(layer_t *l, float *params, uint64_t seed) {
    layer_init_param(&l->params[0], l->cfg->v[K_INIT].e, params + l->params[0].offset, seed, l->index, 0);
    if (l->nparams > 1)
        layer_init_bias(&l->params[1], l->cfg->v[K_INIT].e, params + l->params[1].offset, seed, l->index, 1);
}

// x[N, C, (D,) H, W] -> rows[N*T, K] (work) -> y[N*T, dim] = rows . W^T + b
static void patch_embed_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t in[3], c = l->in[0]->shape.d[0], t = l->out.shape.d[0], dim = l->out.shape.d[1];
    int p[3];
    patch_geometry(l, in, p);
    int64_t k = l->params[0].size / dim;
    be->patch_rearrange(n, c, in, p, 0, 1, 0, l->in[0]->data, l->work);
    be->dense_forward(n * t, k, dim, l->work, l->w, l->nparams > 1 ? l->w + dim * k : NULL, l->out.data);
}

// dW, db from the rows (recomputed into work); dx += the rows' gradient (zeroed after them in
// work, then rearranged back onto the map).
static void patch_embed_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t in[3], c = l->in[0]->shape.d[0], t = l->out.shape.d[0], dim = l->out.shape.d[1];
    int p[3];
    patch_geometry(l, in, p);
    int64_t k = l->params[0].size / dim;
    float *rows = l->work, *drows = l->in[0]->grad ? l->work + n * t * k : NULL;
    be->patch_rearrange(n, c, in, p, 0, 1, 0, l->in[0]->data, rows);
    if (drows) be->zero(drows, sizeof(float) * (size_t)(n * t * k));
    be->dense_backward(n * t, k, dim, rows, l->w, l->out.grad, l->dw, l->nparams > 1 ? l->dw + dim * k : NULL, drows);
    if (drows) be->patch_rearrange(n, c, in, p, 0, 0, 1, drows, l->in[0]->grad);
}

const layer_kind layer_patch_embed = {
    .name = "patch_embed",
    .doc = "non-overlapping patches of a 2D or 3D map -> tokens [T, dim] (a Conv with kernel = stride = patch, "
           "flattened); weight [dim, C, patch, patch(, patch)], bias [dim]",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = patch_embed_infer,
    .init = patch_embed_init,
    .forward = patch_embed_forward,
    .backward = patch_embed_backward,
};
