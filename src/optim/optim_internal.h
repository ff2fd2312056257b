// optim_internal.h: the per-rule update kernels optim.c dispatches to on the CPU, and the pieces
// it shares with a GPU backend's update (backend.h: chunk_sumsq, optim_update). Each kernel runs
// over o->chunks in parallel; g is the gradient block, already known to have a finite norm; when
// a->clip is set every gradient is first multiplied by a->coef and written back (as
// clip_grad_norm_ does). Both paths take their scalars from one gl_optim_args, so the CPU and the
// GPU compute with the same floats.
#ifndef GALLEY_OPTIM_INTERNAL_H
#define GALLEY_OPTIM_INTERNAL_H

#include "galley/optim.h"

// The thread (of nt) that updates chunk ch on the CPU, the same at every step and in every pass
// (the norm, each rule's loops). A tensor of at least nt chunks is cut into nt runs of
// consecutive chunks, thread t taking the t-th: the rows cpu_gemm's static tiles give thread t
// (a dense layer's forward columns, weight-gradient rows), so the update reads gradients and
// writes weights this core already holds. Smaller tensors go whole to thread (tensor % nt).
// Measured on the 2-core EPYC, where a line another core wrote costs 5x an own one: chunks
// dealt out by index made the MLP's SGD update 2x slower at 2 threads than at 1.
// The sums stay per chunk and are added in chunk order, so no result depends on the owner.
static inline int optim_owner(const gl_optim_chunk *ch, int nt) {
    return ch->parts >= nt ? (int)((int64_t)ch->part * nt / ch->parts) : ch->tensor % nt;
}

// optim.c: the update's scalars for step t (clip: multiply the gradients by coef first).
gl_optim_args optim_args(const gl_optim *o, bool clip, float coef, double lr, int64_t t);
// optim.c: o->partial[c] = chunk c's sum of squares of g, for every chunk but those skip marks
// (skip NULL: all), on the CPU in parallel (each chunk by its optim_owner).
void optim_partials(gl_optim *o, const float *g, const uint8_t *skip);
// optim.c: the global norm from o->partial (in chunk order; the tensor group's sum of split tensors).
double optim_norm_of_partials(gl_optim *o);
// optim_fuse.c: optim_step of an armed step: the norm, then the chunks backward did not update.
double optim_fuse_finish(gl_optim *o, gl_graph *g, double lr);

// adam.c: a->b1 .. a->inv_sqrt_bc2 (bias corrections of the 1-based step t) and a->decayed
// for learning rate lr.
void adam_args(const gl_optim *o, double lr, int64_t t, gl_optim_args *a);
// adam.c: o->ratio[tensor] = ||W|| / ||U|| (1 when either is 0 or the tensor is plain) from the
// per-chunk sums wsq[c] of w^2 and usq[c] of u^2, added per tensor in chunk order.
void lamb_ratios(gl_optim *o, const double *wsq, const double *usq);

// The rules' CPU updates and device drivers live in their files (sgd.c, adam.c) and reach
// optim.c only through their gl_optim_rule entries (optim.h).

#endif
