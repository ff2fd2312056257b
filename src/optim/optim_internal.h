// optim_internal.h: the per-rule update kernels optim.c dispatches to. Each runs over o->chunks
// in parallel; g is the gradient block, already known to have a finite norm; when clip is set
// every gradient is first multiplied by coef and written back (as clip_grad_norm_ does).
#ifndef GALLEY_OPTIM_INTERNAL_H
#define GALLEY_OPTIM_INTERNAL_H

#include "galley/optim.h"

// w, g, o->velocity are (n)
void sgd_update(gl_optim *o, float *w, float *g, bool clip, float coef, double lr);
// w, g, o->m, o->v are (n); t is the 1-based step for bias correction
void adamw_update(gl_optim *o, float *w, float *g, bool clip, float coef, double lr, int64_t t);
void lamb_update(gl_optim *o, float *w, float *g, bool clip, float coef, double lr, int64_t t);

#endif
