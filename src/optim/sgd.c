// sgd.c: SGD with momentum, Nesterov and coupled weight decay, as torch.optim.SGD with
// dampening 0 (_single_tensor_sgd), so hyper-parameters carry over:
//     d = g + wd * w
//     v = m * v + d                  (PyTorch starts v at the first d; a zeroed v gives the same)
//     d = nesterov ? d + m * v : v   (only with momentum m > 0)
//     w -= lr * d
#include <omp.h>

#include "galley/backend.h"
#include "optim/optim_internal.h"
#include "optim/optim_simd.h"

// Chunk ch of w, g and o->velocity (all (n)), by optim_simd's loop (the same arithmetic per
// element on every instruction set).
static void sgd_chunk(gl_optim *o, const gl_optim_args *a, const gl_optim_chunk *ch, float *w, float *g) {
    const optim_sgd_k k = {.m = a->momentum, .wdc = ch->plain ? 0.0f : a->weight_decay, .step = a->lr,
                           .coef = a->coef, .nesterov = a->nesterov, .clip = a->clip};
    const int64_t lo = ch->offset;
    optim_simd_get()->sgd(&k, ch->len, w + lo, g + lo, o->velocity ? o->velocity + lo : NULL);
}

// Every chunk, each by its owner thread (a->lr: the learning rate as a float).
static void sgd_update(gl_optim *o, const gl_optim_args *a, double lr, float *w, float *g) {
    (void)lr;
    const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel
    for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++)
        if (optim_owner(&ch[c], nt) == me) sgd_chunk(o, a, &ch[c], w, g);
}

// The same on the backend's device (s0: the velocity, or NULL without momentum).
static void sgd_device(gl_optim *o, const gl_backend *be, const gl_optim_args *a, float *w, float *g) {
    be->optim_update(o->nchunks, o->chunks, a, w, g, o->velocity, o->v, NULL, NULL);
}

// Momentum needs its velocity; plain SGD keeps no state.
static bool sgd_keeps_state(const recipe_t *r) { return r->optimizer.momentum > 0; }

static const char *sgd_check(const recipe_t *r, const char **key) {
    *key = "optimizer.nesterov";
    return r->optimizer.nesterov && r->optimizer.momentum <= 0 ? "Nesterov momentum needs momentum > 0" : NULL;
}

const gl_optim_rule optim_rule_sgd = {
    .state = {"velocity"},
    .keeps_state = sgd_keeps_state,
    .step = sgd_update,
    .chunk_step = sgd_chunk,
    .device_step = sgd_device,
    .check = sgd_check,
};
