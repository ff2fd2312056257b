// optim.h: optimizers over the model's flat parameter block.
#ifndef GALLEY_OPTIM_H
#define GALLEY_OPTIM_H

#include <stdint.h>

#include "galley/arena.h"
#include "galley/recipe.h"

typedef struct {
    int type;
    double lr, momentum, weight_decay;
    bool nesterov;
    int64_t n;
    float *velocity;  // [n] SGD momentum buffer
    int64_t steps;
} gl_optim;

size_t optim_bytes(const recipe_t *r, int64_t nparams);
void optim_init(gl_optim *o, const recipe_t *r, int64_t nparams, gl_arena *a);
// One update of w[n] from g[n] at learning rate lr.
void optim_step(gl_optim *o, float *w, const float *g, double lr);

#endif
