// sgd.c: SGD with momentum, Nesterov and coupled weight decay, in PyTorch's convention so
// hyper-parameters carry over: g += wd*w; v = m*v + g; step = nesterov ? g + m*v : v; w -= lr*step.
#include "galley/optim.h"

#include <string.h>

size_t optim_bytes(const recipe_t *r, int64_t nparams) {
    return r->optimizer.momentum > 0 ? arena_round((size_t)nparams * sizeof(float)) : 0;
}

void optim_init(gl_optim *o, const recipe_t *r, int64_t nparams, gl_arena *a) {
    memset(o, 0, sizeof *o);
    o->type = r->optimizer.type;
    o->lr = r->optimizer.lr;
    o->momentum = r->optimizer.momentum;
    o->weight_decay = r->optimizer.weight_decay;
    o->nesterov = r->optimizer.nesterov;
    o->n = nparams;
    o->velocity = o->momentum > 0 ? arena_floats(a, nparams) : NULL;
}

// w, g, velocity are (n)
void optim_step(gl_optim *o, float *w, const float *g, double lr) {
    const float m = (float)o->momentum, wd = (float)o->weight_decay, step = (float)lr;
    float *v = o->velocity;
    for (int64_t i = 0; i < o->n; i++) {
        float gi = g[i] + wd * w[i];
        if (v) {
            // PyTorch starts the buffer at the first gradient; a zeroed buffer gives the same.
            v[i] = m * v[i] + gi;
            gi = o->nesterov ? gi + m * v[i] : v[i];
        }
        w[i] -= step * gi;
    }
    o->steps++;
}
