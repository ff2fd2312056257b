// optim.h: optimizers over the model's parameter block: SGD, AdamW and LAMB, with optional
// clipping by the global gradient norm. The update rules follow PyTorch (torch.optim.SGD,
// torch.optim.AdamW, torch.nn.utils.clip_grad_norm_) and NVIDIA apex FusedLAMB, so
// hyper-parameters carry over.
//
//   optim_bytes(r, g)           arena bytes for the state (after graph_build)
//   optim_init(o, r, g, a)      carve the state (after graph_bind); moments start at zero
//   norm = optim_step(o, g, lr) one update of g->params from g->grads at learning rate lr
//
// Work is split into chunks of at most GL_OPTIM_CHUNK elements of one parameter tensor; norms
// are summed per chunk in double and then over chunks in parameter order, so every result is
// bitwise the same for any number of OpenMP threads.
#ifndef GALLEY_OPTIM_H
#define GALLEY_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "galley/arena.h"
#include "galley/graph.h"
#include "galley/recipe.h"

#define GL_OPTIM_CHUNK 4096

// A stretch of one parameter tensor: the unit of parallel work and of partial sums (backend.h,
// so a GPU backend can run the update).
typedef gl_chunk gl_optim_chunk;

typedef struct {
    int type;  // OPT_*
    double momentum, weight_decay;
    bool nesterov;
    double beta1, beta2, eps;
    double clip_norm;  // NAN: no clipping
    int64_t n;         // parameters
    int64_t steps;     // updates applied so far (Adam's bias correction uses steps + 1)
    float *velocity;   // [n] SGD momentum buffer (NULL without momentum)
    float *m, *v;      // [n] AdamW and LAMB first and second moments (NULL for SGD)
    int ntensors, nchunks;
    gl_optim_chunk *chunks;  // [nchunks]
    double *partial;         // [3 * nchunks] per-chunk sums of squares
    double *ratio;           // [ntensors] LAMB: the trust ratio each tensor got at the last step
    double last_scale;       // the factor the last step multiplied the gradients by (1: not clipped)
} gl_optim;

// Arena bytes optim_init will take for this recipe's optimizer over g's parameters.
size_t optim_bytes(const recipe_t *r, const gl_graph *g);
void optim_init(gl_optim *o, const recipe_t *r, const gl_graph *g, gl_arena *a);
// Clips the gradients (if optimizer.clip_norm is set) and updates g->params from g->grads at
// learning rate lr. Returns the global gradient L2 norm before clipping. A NaN or Inf norm
// leaves parameters, gradients and state untouched (the step is skipped): the caller should
// stop and report it.
double optim_step(gl_optim *o, gl_graph *g, double lr);

#endif
