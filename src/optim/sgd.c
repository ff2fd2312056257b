// sgd.c: SGD with momentum, Nesterov and coupled weight decay, as torch.optim.SGD with
// dampening 0 (_single_tensor_sgd), so hyper-parameters carry over:
//     d = g + wd * w
//     v = m * v + d                  (PyTorch starts v at the first d; a zeroed v gives the same)
//     d = nesterov ? d + m * v : v   (only with momentum m > 0)
//     w -= lr * d
#include "optim/optim_internal.h"

// w, g, o->velocity are (n)
void sgd_update(gl_optim *o, float *w, float *g, bool clip, float coef, double lr) {
    const float m = (float)o->momentum, wd = (float)o->weight_decay, step = (float)lr;
    const bool nesterov = o->nesterov;
    float *vel = o->velocity;
    const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < o->nchunks; c++) {
        int64_t end = ch[c].offset + ch[c].len;
        const float wdc = ch[c].plain ? 0.0f : wd;
        for (int64_t i = ch[c].offset; i < end; i++) {
            float gi = g[i];
            if (clip) g[i] = gi = gi * coef;
            float d = gi + wdc * w[i];
            if (vel) {
                vel[i] = m * vel[i] + d;
                d = nesterov ? d + m * vel[i] : vel[i];
            }
            w[i] -= step * d;
        }
    }
}
