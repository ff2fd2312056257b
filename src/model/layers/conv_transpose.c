// conv_transpose.c: 2D and 3D transposed convolution ("deconvolution", the gradient of conv
// with respect to its input) over [C, H, W] or [C, D, H, W] inputs. Weight [C, filters/groups,
// k, k(, k)] and bias [filters]: PyTorch's ConvTranspose2d/3d layout and names. Output size
// (in - 1) * stride - 2 padding + dilation (kernel - 1) + output_padding + 1, as PyTorch.
#include <stdint.h>
#include <stdio.h>

#include "galley/check.h"
#include "galley/layer.h"

// From conv.c.
const char *conv_dim_name(int nd, int j);
void conv_weight_text(int nd, int64_t a, int64_t b, int64_t k, char *buf, size_t len);
int conv_input_dims(const layer_t *l, int64_t in[3], char *err, size_t errlen);
int64_t conv_scratch_floats(double per_sample, int64_t positions, int64_t batch);

enum { K_FILTERS, K_KERNEL, K_STRIDE, K_PADDING, K_OUTPUT_PADDING, K_DILATION, K_GROUPS, K_BIAS, K_INIT };
static const key_spec keys[] = {
    {"filters", KT_INT, KF_REQUIRED, NULL, 1, 1e8, NULL, K_FILTERS * sizeof(gl_value), NULL, "output channels"},
    {"kernel", KT_INT, KF_DEFAULT, "2", 1, 65536, NULL, K_KERNEL * sizeof(gl_value), NULL,
     "kernel size in every spatial dimension"},
    {"stride", KT_INT, KF_DEFAULT, "1", 1, 65536, NULL, K_STRIDE * sizeof(gl_value), NULL,
     "upsampling factor: step between the outputs of neighbouring inputs"},
    {"padding", KT_INT, KF_DEFAULT, "0", 0, 1e6, NULL, K_PADDING * sizeof(gl_value), NULL,
     "positions cropped from each side of the full output (PyTorch's padding)"},
    {"output_padding", KT_INT, KF_DEFAULT, "0", 0, 65536, NULL, K_OUTPUT_PADDING * sizeof(gl_value), NULL,
     "positions added after the output in every dimension; smaller than stride or dilation"},
    {"dilation", KT_INT, KF_DEFAULT, "1", 1, 65536, NULL, K_DILATION * sizeof(gl_value), NULL,
     "spacing between kernel taps"},
    {"groups", KT_INT, KF_DEFAULT, "1", 1, 1e8, NULL, K_GROUPS * sizeof(gl_value), NULL,
     "channel groups, dividing the input channels and filters"},
    {"bias", KT_BOOL, KF_DEFAULT, "true", 0, 0, NULL, K_BIAS * sizeof(gl_value), NULL, "add a learned bias"},
    {"init", KT_ENUM, KF_DEFAULT, "he_normal", 0, 0, layer_init_choices, K_INIT * sizeof(gl_value), NULL,
     "weight init (fan_in = filters/groups * kernel^d, as PyTorch); the bias starts at zero "
     "(pytorch: PyTorch's default, the bias too)"},
    KEY_END,
};

// Fills g (backend_types.h: what the backend's conv_transpose kernels take; out includes
// output_padding) from the layer's input and keys, batch n = 0 (the calls set it); returns -1
// with a message for impossible ones.
static int convt_geometry(const layer_t *l, gl_conv_geom *g, char *err, size_t errlen) {
    const gl_value *v = l->cfg->v;
    int nd = conv_input_dims(l, g->in, err, errlen);
    if (nd < 0) return -1;
    g->nd = nd, g->n = 0;
    g->c = l->in[0]->shape.d[0], g->f = v[K_FILTERS].i, g->groups = v[K_GROUPS].i;
    int64_t k = v[K_KERNEL].i, s = v[K_STRIDE].i, d = v[K_DILATION].i, pad = v[K_PADDING].i;
    int64_t op = v[K_OUTPUT_PADDING].i;
    if (g->c % g->groups) {
        snprintf(err, errlen, "groups %lld does not divide the %lld input channels", (long long)g->groups,
                 (long long)g->c);
        return -1;
    }
    if (g->f % g->groups) {
        snprintf(err, errlen, "groups %lld does not divide filters %lld", (long long)g->groups, (long long)g->f);
        return -1;
    }
    if (op >= s && op >= d) {
        snprintf(err, errlen, "output_padding %lld must be smaller than stride %lld or dilation %lld (as PyTorch)",
                 (long long)op, (long long)s, (long long)d);
        return -1;
    }
    for (int j = 0; j < 3; j++) {
        g->k[j] = g->s[j] = g->d[j] = 1, g->p[j] = 0, g->out[j] = 1;
        if (j < 3 - nd) continue;  // the unit depth of a 2D map
        g->k[j] = k, g->s[j] = s, g->d[j] = d, g->p[j] = pad;
        int64_t in = g->in[j];  // keys are bounded and in fits a tensor: no overflow below
        int64_t out = (in - 1) * s - 2 * pad + d * (k - 1) + op + 1;
        if (out < 1) {
            snprintf(err, errlen,
                     "the output along %s would have size (%lld - 1) * stride %lld - 2 * padding %lld + dilation "
                     "%lld * (kernel %lld - 1) + output_padding %lld + 1 = %lld; reduce the padding",
                     conv_dim_name(nd, j - (3 - nd)), (long long)in, (long long)s, (long long)pad, (long long)d,
                     (long long)k, (long long)op, (long long)out);
            return -1;
        }
        g->out[j] = out;
    }
    return 0;
}

// The geometry of a call over n samples.
static gl_conv_geom geometry_of(const layer_t *l, int64_t n) {
    gl_conv_geom g;
    char err[512];
    GL_CHECK(convt_geometry(l, &g, err, sizeof err) == 0, "infer accepted this conv_transpose geometry");
    g.n = n;
    return g;
}

static int convt_infer(layer_t *l, char *err, size_t errlen) {
    gl_conv_geom g;
    if (convt_geometry(l, &g, err, errlen) != 0) return -1;
    int64_t cg = g.c / g.groups, fg = g.f / g.groups, k = g.k[2];
    double taps = (double)g.k[0] * (double)g.k[1] * (double)g.k[2];
    double in_pos = (double)g.in[0] * (double)g.in[1] * (double)g.in[2];
    double out_pos = (double)g.out[0] * (double)g.out[1] * (double)g.out[2];
    double weights = (double)g.c * (double)fg * taps;
    if (weights > 4e9) {
        char ws[128];
        conv_weight_text(g.nd, g.c, fg, k, ws, sizeof ws);
        snprintf(err, errlen, "weight %s has more than 4e9 elements", ws);
        return -1;
    }
    l->out.shape.ndim = g.nd + 1;
    l->out.shape.d[0] = g.f;
    for (int j = 0; j < g.nd; j++) l->out.shape.d[1 + j] = g.out[3 - g.nd + j];
    // The kernels run the convolution that maps the output back onto the input: GEMM columns are
    // input positions, rows output channels x taps.
    // sgemm takes int sizes; fan_in/fan_out are ints; FLOPs an int64_t.
    if (in_pos > INT32_MAX || out_pos > INT32_MAX || (double)g.f * taps > INT32_MAX ||
        (double)cg * taps > INT32_MAX || 2.0 * in_pos * weights > 4e18) {
        char sh[96];
        shape_format(&l->out.shape, sh, sizeof sh);
        snprintf(err, errlen,
                 "the output %s or its %.0f taps per input position exceed 2^31 - 1 per channel, the most the "
                 "GEMM kernels take",
                 sh, (double)g.f * taps);
        return -1;
    }

    int64_t t = (int64_t)taps;
    // PyTorch's fans for ConvTranspose: fan_in from weight.shape[1], fan_out from weight.shape[0].
    gl_param w = {.name = "weight", .size = (int64_t)weights, .fan_in = (int)(fg * t), .fan_out = (int)(cg * t)};
#if GL_MAX_DIMS >= 5
    w.shape.ndim = 2 + g.nd;
    w.shape.d[0] = g.c, w.shape.d[1] = fg;
    for (int j = 0; j < g.nd; j++) w.shape.d[2 + j] = k;
#else
    // gl_shape holds 4 dimensions: a 3D kernel's last two are folded into one (k*k) until it holds 5.
    w.shape = (gl_shape){4, {g.c, fg, k, g.nd == 3 ? k * k : k}};
#endif
    l->nparams = 0;
    l->params[l->nparams++] = w;
    if (l->cfg->v[K_BIAS].b)
        l->params[l->nparams++] = (gl_param){.name = "bias", .shape = {1, {g.f}}, .size = g.f,
                                             .fan_in = w.fan_in, .fan_out = w.fan_out};
    l->flops = (int64_t)(2.0 * in_pos * (double)g.c * (double)fg * taps);

    bool direct = t == 1 && g.s[0] * g.s[1] * g.s[2] == 1 && !g.p[0] && !g.p[1] && !g.p[2] &&
                  g.out[0] == g.in[0] && g.out[1] == g.in[1] && g.out[2] == g.in[2];
    double per_sample = ((double)g.f * taps + (double)g.c) * in_pos;
    l->work_floats = conv_scratch_floats(direct ? 0 : per_sample, (int64_t)in_pos, l->batch);
    if (l->work_floats < 0) {
        snprintf(err, errlen, "the col2im columns of one sample would take %.3g floats; reduce the input size",
                 per_sample);
        return -1;
    }
    return 0;
}

static void convt_init(layer_t *l, float *params, uint64_t seed) {
    layer_init_param(&l->params[0], l->cfg->v[K_INIT].e, params + l->params[0].offset, seed, l->index, 0);
    if (l->nparams > 1)  // bias: zeros, or PyTorch's for init: pytorch
        layer_init_bias(&l->params[1], l->cfg->v[K_INIT].e, params + l->params[1].offset, seed, l->index, 1);
}

static void convt_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    gl_conv_geom g = geometry_of(l, n);
    const float *b = l->nparams > 1 ? l->w + l->params[0].size : NULL;
    if (l->store_act_on)  // y = act(convt(x) + b): the activation after this layer, fused (graph_build)
        be->conv_transpose_forward_act(&g, l->in[0]->data, l->w, b, l->out.data, l->work, l->work_room,
                                       l->store_act, l->store_slope);
    else
        be->conv_transpose_forward(&g, l->in[0]->data, l->w, b, l->out.data, l->work, l->work_room);
}

static bool convt_takes_act(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    (void)l;
    return be->conv_transpose_forward_act && gl_act_storable(act, slope);
}

static void convt_backward(layer_t *l, const gl_backend *be, int64_t n) {
    gl_conv_geom g = geometry_of(l, n);
    float *db = l->nparams > 1 ? l->dw + l->params[0].size : NULL;
    be->conv_transpose_backward(&g, l->in[0]->data, l->w, l->out.grad, l->dw, db, l->in[0]->grad, l->work,
                                l->work_room);
}

const layer_kind layer_conv_transpose = {
    .name = "conv_transpose",
    .doc = "2D or 3D transposed convolution (learned upsampling); output size (in - 1) stride - 2 padding + "
           "dilation (kernel - 1) + output_padding + 1; weight [C, filters/groups, kernel...], bias [filters]",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .im2col_work = true,
    .infer = convt_infer,
    .init = convt_init,
    .forward = convt_forward,
    .backward = convt_backward,
    .takes_act = convt_takes_act,
};
