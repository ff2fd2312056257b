// drop_path.c: stochastic depth (timm's DropPath, as the tutorial ViT uses it on its residual
// branches): in training each sample is kept with probability 1 - rate and scaled by
// 1 / (1 - rate), or zeroed whole; evaluation is the identity. Sample r's draw is
// rng_uniform(seed, RNG_DROPOUT, step, layer_index * 2^40 + row0 + r), row0 being its place in
// the global batch (the keying of dropout.c), so draws do not depend on how ranks split the
// batch. The backend's dropout op draws the per-sample mask into l->scratch (its y goes to a
// spare half), and row_scale applies it.
#include <stdio.h>

#include "galley/layer.h"

enum { K_RATE };
static const key_spec keys[] = {
    {"rate", KT_FLOAT, KF_REQUIRED, NULL, 0, 1, NULL, K_RATE * sizeof(gl_value), NULL,
     "probability of dropping a whole sample in training, below 1"},
    KEY_END,
};

#define DROP_PATH_INDEX_BITS 40  // sample indices per layer in the random stream (as dropout.c)

static int drop_path_infer(layer_t *l, char *err, size_t errlen) {
    double rate = l->cfg->v[K_RATE].f;
    if (rate >= 1.0) {
        snprintf(err, errlen, "rate %g would drop every sample; use a rate below 1", rate);
        return -1;
    }
    l->out.shape = l->in[0]->shape;
    l->nparams = 0;
    l->flops = l->in[0]->size;
    l->scratch_floats = 2 * l->batch;  // the mask [N], and the dropout op's unused y [N]
    return 0;
}

// x[N, S] -> y[N, S] = mask[n] * x[n]: mask 0 or 1 / (1 - rate) in training, 1 in evaluation
static void drop_path_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    uint64_t base = ((uint64_t)l->index << DROP_PATH_INDEX_BITS) + (uint64_t)l->row0;
    // The op reads n values of x only to write its y, which this layer does not use.
    be->dropout_forward(n, (float)l->cfg->v[K_RATE].f, train, l->seed, (uint64_t)l->step, base, l->in[0]->data,
                        l->scratch, l->scratch + l->batch);
    be->row_scale(n, l->out.size, l->scratch, l->in[0]->data, l->out.data, 0);
}

static void drop_path_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    be->row_scale(n, l->out.size, l->scratch, l->out.grad, l->in[0]->grad, 1);
}

const layer_kind layer_drop_path = {
    .name = "drop_path",
    .doc = "stochastic depth: training drops whole samples with probability rate and scales the rest by "
           "1 / (1 - rate); evaluation: identity",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .takes = GL_TAKES_ANY,
    .infer = drop_path_infer,
    .forward = drop_path_forward,
    .backward = drop_path_backward,
};
