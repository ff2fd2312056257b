// activation.c: element-wise activation layers (relu, leaky_relu, tanh, sigmoid, gelu).
// Output shape = input shape; backward needs the input, which the graph keeps anyway.
#include "galley/layer.h"

extern const layer_kind layer_relu, layer_leaky_relu, layer_tanh, layer_sigmoid, layer_gelu;

enum { K_SLOPE };
static const key_spec no_keys[] = {KEY_END};
static const key_spec leaky_keys[] = {
    {"slope", KT_FLOAT, KF_DEFAULT, "0.01", 0, 1, NULL, K_SLOPE * sizeof(gl_value), NULL,
     "slope for negative inputs"},
    KEY_END,
};

static gl_act act_of(const layer_t *l) {
    if (l->kind == &layer_relu) return ACT_RELU;
    if (l->kind == &layer_leaky_relu) return ACT_LEAKY_RELU;
    if (l->kind == &layer_tanh) return ACT_TANH;
    if (l->kind == &layer_sigmoid) return ACT_SIGMOID;
    return ACT_GELU;
}

static float slope_of(const layer_t *l) { return l->kind == &layer_leaky_relu ? (float)l->cfg->v[K_SLOPE].f : 0.0f; }

static int act_infer(layer_t *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    l->out.shape = l->in[0]->shape;
    l->nparams = 0;
    l->flops = 0;
    return 0;
}

static void act_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    if (l->act_done) return;  // the layer before applied it as it stored its output, which is this one's
    l->deriv_live = l->keep_deriv && train;
    if (l->deriv_live) {  // gelu: x becomes gelu'(x), which backward reads (graph_build)
        be->gelu_forward_keep(n * l->out.size, l->in[0]->data, l->out.data);
        return;
    }
    // act_inplace: in[0]->data == out.data, the producer's buffer (graph_fuse_acts)
    be->act_forward(act_of(l), slope_of(l), n * l->out.size, l->in[0]->data, l->out.data);
}

// backend.h's gl_act_storable: backward's test on its input reads the same from the fused
// output (act_done: the input buffer holds y).
static bool act_fusable(const layer_t *l, gl_act *act, float *slope) {
    *act = act_of(l), *slope = slope_of(l);
    return gl_act_storable(*act, *slope);
}

static void act_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    layer_t *by = l->grad_by;  // the layer that alone reads this output applies the derivative (graph_build)
    // A kept gelu after an evaluation forward (a gradient check's) has x, not its derivative:
    // by's own backward, then this layer's from x.
    const bool stale = l->keep_deriv && !l->deriv_live;
    if (by && l->grad_set[0] && !stale) {  // through the output's sign, or the derivative kept
        const float *gate = l->keep_deriv ? l->in[0]->data : l->out.data;
        by->kind->backward_act(by, be, n, act_of(l), slope_of(l), gate, l->in[0]->grad);
        return;
    }
    if (by) {  // a gradient to add to (a backend without the set kernels), or stale: by's own backward first
        by->grad_deferred = false;
        by->kind->backward(by, be, n);
        by->grad_deferred = true;
    }
    if (l->deriv_live)
        be->gelu_backward_kept(n * l->out.size, l->in[0]->data, l->out.grad, l->in[0]->grad, l->grad_set[0]);
    else if (l->grad_set[0])
        be->act_backward_set(act_of(l), slope_of(l), n * l->out.size, l->in[0]->data, l->out.grad, l->in[0]->grad);
    else
        be->act_backward(act_of(l), slope_of(l), n * l->out.size, l->in[0]->data, l->out.grad, l->in[0]->grad);
}

static bool act_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)l, (void)k;
    return be->act_backward_set != NULL;
}

#define ACT_KIND(sym, nm, ks, d)                                                                       \
    const layer_kind sym = {.name = nm, .doc = d, .keys = ks, .min_inputs = 1, .max_inputs = 1,        \
                            .infer = act_infer, .forward = act_forward, .backward = act_backward,      \
                            .sets_grad = act_sets_grad, .act_of = act_fusable, .elementwise = true}

ACT_KIND(layer_relu, "relu", no_keys, "max(0, x)");
ACT_KIND(layer_leaky_relu, "leaky_relu", leaky_keys, "x for x > 0, slope * x otherwise");
ACT_KIND(layer_tanh, "tanh", no_keys, "hyperbolic tangent");
ACT_KIND(layer_sigmoid, "sigmoid", no_keys, "1 / (1 + exp(-x))");
ACT_KIND(layer_gelu, "gelu", no_keys, "x * Phi(x), the exact (erf) form");
