// conv.c: 2D and 3D convolution over [C, H, W] or [C, D, H, W] inputs. Weight [filters,
// C/groups, k, k(, k)] and bias [filters]: PyTorch's Conv2d/Conv3d layout and names, so
// weights load directly. padding: same follows TensorFlow/Keras, as CosmoFlow uses it: output
// = ceil(input / stride), the total padding split with the odd one after.
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/check.h"
#include "galley/layer.h"

enum { K_FILTERS, K_KERNEL, K_STRIDE, K_PADDING, K_DILATION, K_GROUPS, K_BIAS, K_INIT };
static const key_spec keys[] = {
    {"filters", KT_INT, KF_REQUIRED, NULL, 1, 1e8, NULL, K_FILTERS * sizeof(gl_value), NULL, "output channels"},
    {"kernel", KT_INT, KF_DEFAULT, "3", 1, 65536, NULL, K_KERNEL * sizeof(gl_value), NULL,
     "kernel size in every spatial dimension"},
    {"stride", KT_INT, KF_DEFAULT, "1", 1, 65536, NULL, K_STRIDE * sizeof(gl_value), NULL,
     "step between outputs in every spatial dimension"},
    {"padding", KT_PAD, KF_DEFAULT, "0", 0, 1e6, NULL, K_PADDING * sizeof(gl_value), NULL,
     "zeros added on each side, or `same`: output = ceil(input / stride), the odd padding after (TensorFlow)"},
    {"dilation", KT_INT, KF_DEFAULT, "1", 1, 65536, NULL, K_DILATION * sizeof(gl_value), NULL,
     "spacing between kernel taps"},
    {"groups", KT_INT, KF_DEFAULT, "1", 1, 1e8, NULL, K_GROUPS * sizeof(gl_value), NULL,
     "channel groups, dividing the input channels and filters (groups = channels: depthwise)"},
    {"bias", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_BIAS * sizeof(gl_value), NULL, "add a learned bias"},
    {"init", KT_ENUM, KF_DEFAULT, "he_normal", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "weight init (fan_in = C/groups * kernel^d); the bias starts at zero "
     "(pytorch: PyTorch's default, the bias too)"},
    KEY_END,
};

// ---- shared with conv_transpose.c (declared there) ---------------------------------------------

// The im2col column buffer: as many samples of the batch as fit in this, at least one.
#define CONV_SCRATCH_BYTES (64.0 * 1024 * 1024)

// Name of spatial dimension j (0 = D in 3D) of an input with nd spatial dimensions.
const char *conv_dim_name(int nd, int j) {
    static const char *const names[] = {"D", "H", "W"};
    return names[3 - nd + j];
}

// "[a, b, k, k]" or "[a, b, k, k, k]": a weight shape for messages.
void conv_weight_text(int nd, int64_t a, int64_t b, int64_t k, char *buf, size_t len) {
    if (nd == 3)
        snprintf(buf, len, "[%lld, %lld, %lld, %lld, %lld]", (long long)a, (long long)b, (long long)k, (long long)k,
                 (long long)k);
    else
        snprintf(buf, len, "[%lld, %lld, %lld, %lld]", (long long)a, (long long)b, (long long)k, (long long)k);
}

// Checks that the input is [C, H, W] or [C, D, H, W] and writes its spatial sizes as {D, H, W}
// (D = 1 in 2D). Returns the number of spatial dimensions, or -1 with a message.
int conv_input_dims(const layer_t *l, int64_t in[3], char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    if (x->ndim != 3 && x->ndim != 4) {
        char sh[96];
        shape_format(x, sh, sizeof sh);
        snprintf(err, errlen, "%s needs an input of shape [C, H, W] or [C, D, H, W], got %s", l->kind->name, sh);
        return -1;
    }
    for (int j = 0; j < x->ndim; j++)
        if (x->d[j] < 1) {
            char sh[96];
            shape_format(x, sh, sizeof sh);
            snprintf(err, errlen, "%s got an empty input %s", l->kind->name, sh);
            return -1;
        }
    int nd = x->ndim - 1;
    for (int j = 0; j < 3; j++) in[j] = j < 3 - nd ? 1 : x->d[1 + j - (3 - nd)];
    return nd;
}

// Scratch floats for per_sample floats of columns per sample (0: none needed) over positions
// GEMM columns per sample; -1 if even one sample is beyond what the kernels handle.
int64_t conv_scratch_floats(double per_sample, int64_t positions, int64_t batch) {
    if (per_sample <= 0) return 0;
    if (per_sample > 1e14) return -1;
    double cs = floor(CONV_SCRATCH_BYTES / sizeof(float) / per_sample);
    if (cs > (double)batch) cs = (double)batch;
    if (cs > (double)(INT32_MAX / positions)) cs = (double)(INT32_MAX / positions);  // sgemm's int sizes
    if (cs < 1) cs = 1;
    return (int64_t)cs * (int64_t)per_sample;
}

// ---- geometry ---------------------------------------------------------------------------------

// Fills g (backend_types.h: what the backend's conv kernels take) from the layer's input and
// keys, batch n = 0 (the calls set it); returns -1 with a message for impossible ones.
static int conv_geometry(const layer_t *l, gl_conv_geom *g, char *err, size_t errlen) {
    const gl_value *v = l->cfg->v;
    int nd = conv_input_dims(l, g->in, err, errlen);
    if (nd < 0) return -1;
    g->nd = nd, g->n = 0;
    g->c = l->in[0]->shape.d[0], g->f = v[K_FILTERS].i, g->groups = v[K_GROUPS].i;
    int64_t k = v[K_KERNEL].i, s = v[K_STRIDE].i, d = v[K_DILATION].i, pad = v[K_PADDING].i;
    if (g->c % g->groups) {
        snprintf(err, errlen, "groups %lld does not divide the %lld input channels", (long long)g->groups,
                 (long long)g->c);
        return -1;
    }
    if (g->f % g->groups) {
        snprintf(err, errlen, "groups %lld does not divide filters %lld", (long long)g->groups, (long long)g->f);
        return -1;
    }
    int64_t span = (k - 1) * d + 1;  // the kernel's extent with dilation (keys are bounded: no overflow)
    for (int j = 0; j < 3; j++) {
        g->k[j] = g->s[j] = g->d[j] = 1, g->p[j] = 0, g->out[j] = 1;
        if (j < 3 - nd) continue;  // the unit depth of a 2D map
        g->k[j] = k, g->s[j] = s, g->d[j] = d;
        int64_t in = g->in[j], before, after;
        if (pad == GL_PAD_SAME) {
            int64_t out = (in + s - 1) / s, total = (out - 1) * s + span - in;
            if (total < 0) total = 0;
            before = total / 2, after = total - before;
        } else {
            before = after = pad;
        }
        if (in + before + after < span) {
            snprintf(err, errlen,
                     "kernel %lld with dilation %lld spans %lld, more than the padded input along %s "
                     "(%lld + %lld + %lld = %lld); use a smaller kernel or dilation, or more padding",
                     (long long)k, (long long)d, (long long)span, conv_dim_name(nd, j - (3 - nd)), (long long)in,
                     (long long)before, (long long)after, (long long)(in + before + after));
            return -1;
        }
        g->p[j] = before;
        g->out[j] = (in + before + after - span) / s + 1;  // >= 1: the kernel fits
    }
    return 0;
}

// The geometry of a call over n samples.
static gl_conv_geom geometry_of(const layer_t *l, int64_t n) {
    gl_conv_geom g;
    char err[512];
    GL_CHECK(conv_geometry(l, &g, err, sizeof err) == 0, "infer accepted this conv geometry");
    g.n = n;
    return g;
}

static int conv_infer(layer_t *l, char *err, size_t errlen) {
    gl_conv_geom g;
    if (conv_geometry(l, &g, err, errlen) != 0) return -1;
    int64_t cg = g.c / g.groups, fg = g.f / g.groups, k = g.k[2];
    double taps = (double)g.k[0] * (double)g.k[1] * (double)g.k[2];
    double positions = (double)g.out[0] * (double)g.out[1] * (double)g.out[2];
    double weights = (double)g.f * (double)cg * taps;
    if (weights > 4e9) {
        char ws[128];
        conv_weight_text(g.nd, g.f, cg, k, ws, sizeof ws);
        snprintf(err, errlen, "weight %s has more than 4e9 elements", ws);
        return -1;
    }
    l->out.shape.ndim = g.nd + 1;
    l->out.shape.d[0] = g.f;
    for (int j = 0; j < g.nd; j++) l->out.shape.d[1 + j] = g.out[3 - g.nd + j];
    // sgemm takes int sizes; fan_in/fan_out are ints; FLOPs an int64_t.
    if (positions > INT32_MAX || (double)g.c * taps > INT32_MAX || (double)fg * taps > INT32_MAX ||
        2.0 * positions * weights > 4e18) {
        char sh[96];
        shape_format(&l->out.shape, sh, sizeof sh);
        snprintf(err, errlen,
                 "the output %s or its %.0f input taps per position exceed 2^31 - 1 per channel, the most the "
                 "GEMM kernels take",
                 sh, (double)g.c * taps);
        return -1;
    }

    int64_t t = (int64_t)taps, wsize = (int64_t)weights;
    gl_param w = {.name = "weight", .size = wsize, .fan_in = (int)(cg * t), .fan_out = (int)(fg * t)};
#if GL_MAX_DIMS >= 5
    w.shape.ndim = 2 + g.nd;
    w.shape.d[0] = g.f, w.shape.d[1] = cg;
    for (int j = 0; j < g.nd; j++) w.shape.d[2 + j] = k;
#else
    // gl_shape holds 4 dimensions: a 3D kernel's last two are folded into one (k*k) until it holds 5.
    w.shape = (gl_shape){4, {g.f, cg, k, g.nd == 3 ? k * k : k}};
#endif
    l->nparams = 0;
    l->params[l->nparams++] = w;
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] = (gl_param){.name = "bias", .shape = {1, {g.f}}, .size = g.f,
                                             .fan_in = w.fan_in, .fan_out = w.fan_out};
    l->flops = (int64_t)(2.0 * positions * (double)g.f * (double)cg * taps);

    bool direct = t == 1 && g.s[0] * g.s[1] * g.s[2] == 1 && !g.p[0] && !g.p[1] && !g.p[2] &&
                  g.out[0] == g.in[0] && g.out[1] == g.in[1] && g.out[2] == g.in[2];
    l->work_floats = conv_scratch_floats(direct ? 0 : ((double)g.c * taps + (double)g.f) * positions,
                                            (int64_t)positions, l->batch);
    if (l->work_floats < 0) {
        snprintf(err, errlen, "the im2col columns of one sample would take %.3g floats; reduce the input size",
                 ((double)g.c * taps + (double)g.f) * positions);
        return -1;
    }
    return 0;
}

static void conv_init(layer_t *l, float *params, uint64_t seed) {
    layer_init_param(&l->params[0], l->cfg->v[K_INIT].e, params + l->params[0].offset, seed, l->index, 0);
    if (l->nparams > 1)  // bias: zeros, or PyTorch's for init: pytorch
        layer_init_bias(&l->params[1], l->cfg->v[K_INIT].e, params + l->params[1].offset, seed, l->index, 1);
}

static void conv_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    gl_conv_geom g = geometry_of(l, n);
    const float *b = l->nparams > 1 ? l->w + l->params[0].size : NULL;
    gl_pool_store ps;
    if (l->store_pool && l->store_pool->kind->pool_store(l->store_pool, &ps))  // the max pool after it (graph_build)
        be->conv_forward_pool(&g, l->in[0]->data, l->w, b, l->out.data, l->work, l->work_room, l->store_act_on,
                              l->store_act, l->store_slope, ps.k[0], ps.y, ps.argmax);
    else if (l->store_act_on)  // y = act(conv(x) + b): the activation after this layer, fused (graph_build)
        be->conv_forward_act(&g, l->in[0]->data, l->w, b, l->out.data, l->work, l->work_room, l->store_act,
                             l->store_slope);
    else
        be->conv_forward(&g, l->in[0]->data, l->w, b, l->out.data, l->work, l->work_room);
}

static bool conv_takes_act(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    (void)l;
    return be->conv_forward_act && gl_act_storable(act, slope);
}

// A max pool of windows {1 or 2, 2, 2} that tile the output (a 2D map's D is 1: window 1 there).
static bool conv_takes_pool(const layer_t *l, const gl_backend *be, const int k[3]) {
    if (!be->conv_forward_pool || k[1] != 2 || k[2] != 2 || (k[0] != 1 && k[0] != 2)) return false;
    const gl_conv_geom g = geometry_of(l, 1);
    return g.out[0] % k[0] == 0 && g.out[1] % 2 == 0 && g.out[2] % 2 == 0;
}

static void conv_backward(layer_t *l, const gl_backend *be, int64_t n) {
    gl_conv_geom g = geometry_of(l, n);
    float *db = l->nparams > 1 ? l->dw + l->params[0].size : NULL;
    if (l->grad_set[0])  // this layer writes dx first (conv_sets_grad): no clearing pass
        be->conv_backward_set(&g, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad, l->work,
                              l->work_room);
    else
        be->conv_backward(&g, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad, l->work, l->work_room);
}

static bool conv_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)l, (void)k;
    return be->conv_backward_set != NULL;
}

const layer_kind layer_conv = {
    .name = "conv",
    .doc = "2D ([C, H, W]) or 3D ([C, D, H, W]) convolution; output size floor((in + 2 padding - dilation "
           "(kernel - 1) - 1) / stride) + 1; weight [filters, C/groups, kernel...], bias [filters]",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .im2col_work = true,
    .infer = conv_infer,
    .init = conv_init,
    .forward = conv_forward,
    .backward = conv_backward,
    .sets_grad = conv_sets_grad,
    .takes_act = conv_takes_act,
    .takes_pool = conv_takes_pool,
};
