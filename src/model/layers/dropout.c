// dropout.c: inverted dropout. In training each element is zeroed with probability rate and the
// survivors are scaled by 1 / (1 - rate); evaluation is the identity. The draw for element e of
// row r is rng_uniform(seed, RNG_DROPOUT, step, layer_index * 2^40 + (row0 + r) * size + e), row0
// being the row's place in the global batch: reproducible, and independent of the thread count
// and of how many ranks share the batch. The mask (0 or the scale) is kept in l->scratch.
#include <stdio.h>

#include "galley/layer.h"

enum { K_RATE };
static const key_spec keys[] = {
    {"rate", KT_FLOAT, KF_DEFAULT, "0.5", 0, 1, NULL, K_RATE * sizeof(gl_value), NULL,
     "probability of zeroing an element in training, below 1"},
    KEY_END,
};

#define DROPOUT_INDEX_BITS 40  // element indices per layer in the random stream

static int dropout_infer(layer_t *l, char *err, size_t errlen) {
    double rate = l->cfg->v[K_RATE].f;
    if (rate >= 1.0) {
        snprintf(err, errlen, "rate %g would zero every element; use a rate below 1", rate);
        return -1;
    }
    if ((double)l->batch * (double)l->in[0]->size >= (double)(1ull << DROPOUT_INDEX_BITS)) {
        snprintf(err, errlen, "a batch of %lld samples has more than 2^%d elements for the dropout mask",
                 (long long)l->batch, DROPOUT_INDEX_BITS);
        return -1;
    }
    l->out.shape = l->in[0]->shape;
    l->nparams = 0;
    l->flops = l->in[0]->size;
    l->scratch_floats = l->batch * l->in[0]->size;  // the mask
    return 0;
}

static void dropout_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    be->dropout_forward(n * l->out.size, (float)l->cfg->v[K_RATE].f, train, l->seed, (uint64_t)l->step,
                        ((uint64_t)l->index << DROPOUT_INDEX_BITS) + (uint64_t)(l->row0 * l->out.size), l->in[0]->data, l->scratch, l->out.data);
}

static void dropout_backward(layer_t *l, const gl_backend *be, int64_t n) {
    if (!l->in[0]->grad) return;
    be->dropout_backward(n * l->out.size, l->scratch, l->out.grad, l->in[0]->grad);
}

const layer_kind layer_dropout = {
    .name = "dropout",
    .doc = "training: zeroes each element with probability rate and scales the rest by 1 / (1 - rate); "
           "evaluation: identity",
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = dropout_infer,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
