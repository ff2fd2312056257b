// pool.c: pooling layers. max_pool and avg_pool slide a cubic window over [C, H, W] or
// [C, D, H, W] maps (PyTorch's MaxPool2d/3d and AvgPool2d/3d with ceil_mode off; avg counts
// padding, count_include_pad); global_avg_pool averages each channel to one value.
#include <stdint.h>
#include <stdio.h>

#include "galley/check.h"
#include "galley/layer.h"

extern const layer_kind layer_max_pool, layer_avg_pool, layer_global_avg_pool;

enum { K_KERNEL, K_STRIDE, K_PADDING };
static const key_spec pool_keys[] = {
    {"kernel", KT_INT, KF_DEFAULT, "2", 1, 1024, NULL, K_KERNEL * sizeof(gl_value), NULL,
     "window size in every spatial dimension"},
    {"stride", KT_INT, KF_DEFAULT, "0", 0, 1024, NULL, K_STRIDE * sizeof(gl_value), NULL,
     "step between windows; 0 means the kernel size"},
    {"padding", KT_INT, KF_DEFAULT, "0", 0, 512, NULL, K_PADDING * sizeof(gl_value), NULL,
     "implicit border on each side (max: -inf, avg: zeros counted in the mean); at most kernel / 2"},
    KEY_END,
};
static const key_spec no_keys[] = {KEY_END};

// A pooling window geometry as the backend wants it: 2D maps are D = 1 with a depth kernel of 1.
typedef struct {
    int64_t c, in[3], out[3];
    int k[3], s[3], p[3];
} pool_geom;

// Fills g from the layer's input and keys; returns -1 with a message for impossible ones.
static int pool_geometry(const layer_t *l, pool_geom *g, char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    int k = (int)l->cfg->v[K_KERNEL].i, s = (int)l->cfg->v[K_STRIDE].i, p = (int)l->cfg->v[K_PADDING].i;
    if (s == 0) s = k;
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(err, errlen, "%s needs a [C, H, W] or [C, D, H, W] input, got %d dimension%s", l->kind->name,
                 x->ndim, x->ndim == 1 ? "" : "s");
        return -1;
    }
    if (p > k / 2) {
        snprintf(err, errlen, "padding %d is more than half the kernel %d (padding must be <= kernel / 2)", p, k);
        return -1;
    }
    int nsp = x->ndim - 1;  // spatial dimensions
    g->c = x->d[0];
    for (int j = 0; j < 3; j++) {
        int sp = j - (3 - nsp);  // which spatial dim of x this is; < 0: the unit depth of a 2D map
        int64_t size = sp < 0 ? 1 : x->d[1 + sp];
        g->k[j] = sp < 0 ? 1 : k;
        g->s[j] = sp < 0 ? 1 : s;
        g->p[j] = sp < 0 ? 0 : p;
        g->in[j] = size;
        if (size + 2 * g->p[j] < g->k[j]) {
            snprintf(err, errlen, "kernel %d is larger than the spatial size %lld plus padding %d on each side", k,
                     (long long)size, p);
            return -1;
        }
        g->out[j] = (size + 2 * g->p[j] - g->k[j]) / g->s[j] + 1;
    }
    if (g->in[0] * g->in[1] * g->in[2] > INT32_MAX) {
        snprintf(err, errlen, "a channel of %lld elements is too large to pool (at most %d)",
                 (long long)(g->in[0] * g->in[1] * g->in[2]), INT32_MAX);
        return -1;
    }
    return 0;
}

static int pool_infer(layer_t *l, char *err, size_t errlen) {
    pool_geom g;
    if (pool_geometry(l, &g, err, errlen) != 0) return -1;
    const gl_shape *x = &l->in[0]->shape;
    l->out.shape = *x;
    for (int j = 1; j < x->ndim; j++) l->out.shape.d[j] = g.out[j - x->ndim + 3];
    l->nparams = 0;
    int64_t out = shape_size(&l->out.shape);
    l->flops = out * g.k[0] * g.k[1] * g.k[2];
    // max_pool keeps each output's argmax (int32 in float-sized slots) for backward
    l->scratch_floats = l->kind == &layer_max_pool ? l->batch * out : 0;
    return 0;
}

static pool_geom geometry_of(const layer_t *l) {
    pool_geom g;
    char err[256];
    GL_CHECK(pool_geometry(l, &g, err, sizeof err) == 0, "infer accepted this pooling geometry");
    return g;
}

static void pool_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    if (l->pool_done) return;  // the layer before wrote this output and the argmax (graph_build)
    pool_geom g = geometry_of(l);
    if (l->kind == &layer_max_pool)
        be->max_pool_forward(n, g.c, g.in, g.out, g.k, g.s, g.p, l->in[0]->data, l->out.data, (int32_t *)l->scratch);
    else
        be->avg_pool_forward(n, g.c, g.in, g.out, g.k, g.s, g.p, l->in[0]->data, l->out.data);
}

static void pool_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (l->grad_deferred || !l->in[0]->grad) return;  // deferred: the activation before runs backward_act
    pool_geom g = geometry_of(l);
    if (l->kind == &layer_max_pool && l->grad_set[0])
        be->max_pool_backward_set(n, g.c, g.in, g.out, (const int32_t *)l->scratch, l->out.grad, l->in[0]->grad);
    else if (l->kind == &layer_max_pool)
        be->max_pool_backward(n, g.c, g.in, g.out, (const int32_t *)l->scratch, l->out.grad, l->in[0]->grad);
    else
        be->avg_pool_backward(n, g.c, g.in, g.out, g.k, g.s, g.p, l->out.grad, l->in[0]->grad);
}

static bool max_pool_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)l, (void)k;
    return be->max_pool_backward_set != NULL;
}

// A relu or leaky_relu before a max_pool whose windows do not overlap (stride >= kernel: each
// input gets at most one output's gradient) can leave its derivative to the pool's scatter.
static bool max_pool_takes_act_grad(const layer_t *l, const gl_backend *be, gl_act act, float slope) {
    if (!be->max_pool_backward_act || !gl_act_storable(act, slope)) return false;
    const pool_geom g = geometry_of(l);
    for (int j = 0; j < 3; j++)
        if (g.s[j] < g.k[j]) return false;
    return true;
}

// dx[argmax] = dy through the activation's derivative, read from its output at the winners: the
// pool's output (an activation after the pool may have rewritten it in place: graph_fuse_acts
// fuses only relu and leaky_relu of slope >= 0, which keep the sign the derivative tests).
static void max_pool_backward_act(layer_t *l, const gl_backend *be, int64_t n, gl_act act, float slope,
                                  const float *gate, float *dx) {
    (void)gate;  // the sign the pool's output keeps (relu and leaky_relu only: max_pool_takes_act_grad)
    const pool_geom g = geometry_of(l);
    be->max_pool_backward_act(n, g.c, g.in, g.out, g.k, g.s, g.p, (const int32_t *)l->scratch, l->out.grad,
                              l->out.data, act == ACT_LEAKY_RELU, slope, dx);
}

// Windows that tile the input: stride the window, no padding, the input a multiple of it.
static bool max_pool_store(const layer_t *l, gl_pool_store *ps) {
    const pool_geom g = geometry_of(l);
    for (int j = 0; j < 3; j++) {
        if (g.s[j] != g.k[j] || g.p[j] || g.in[j] != g.k[j] * g.out[j]) return false;
        ps->k[j] = g.k[j];
    }
    ps->y = l->out.data, ps->argmax = (int32_t *)l->scratch;
    return true;
}

const layer_kind layer_max_pool = {
    .name = "max_pool",
    .doc = "maximum over each kernel^2 (2D) or kernel^3 (3D) window; output size floor((in + 2 padding - "
           "kernel) / stride) + 1",
    .keys = pool_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = pool_infer,
    .forward = pool_forward,
    .backward = pool_backward,
    .sets_grad = max_pool_sets_grad,
    .takes_act_grad = max_pool_takes_act_grad,
    .reads_out = true,  // max_pool_backward_act: the winners' signs
    .backward_act = max_pool_backward_act,
    .pool_store = max_pool_store,
};

const layer_kind layer_avg_pool = {
    .name = "avg_pool",
    .doc = "mean over each kernel^2 (2D) or kernel^3 (3D) window, padding counted as zeros; output size as "
           "max_pool",
    .keys = pool_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = pool_infer,
    .forward = pool_forward,
    .backward = pool_backward,
};

// ---- global average pooling: [C, spatial...] -> [C] ----------------------------------------------

static int gap_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *x = &l->in[0]->shape;
    if (x->ndim < 2) {
        snprintf(err, errlen, "global_avg_pool needs a [C, spatial...] input, got a flat one");
        return -1;
    }
    l->out.shape = shape_1d(x->d[0]);
    l->nparams = 0;
    l->flops = l->in[0]->size;
    return 0;
}

static void gap_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t c = l->out.size;
    be->global_avg_pool_forward(n, c, l->in[0]->size / c, l->in[0]->data, l->out.data);
}

static void gap_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    int64_t c = l->out.size;
    be->global_avg_pool_backward(n, c, l->in[0]->size / c, l->out.grad, l->in[0]->grad);
}

const layer_kind layer_global_avg_pool = {
    .name = "global_avg_pool",
    .doc = "mean of each channel over all spatial positions: [C, ...] -> [C]",
    .keys = no_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_SPATIAL,
    .infer = gap_infer,
    .forward = gap_forward,
    .backward = gap_backward,
};
