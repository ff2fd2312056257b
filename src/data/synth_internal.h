// synth_internal.h: one generator per synthetic kind. data_describe() has already set d's
// shapes and n, and d->x and d->labels or d->values point at zeroed memory of those sizes.
// Each value must be a pure function of (seed, split, sample, element): the same data for any
// thread count, and a sample does not depend on how many samples were asked for.
#ifndef GALLEY_SYNTH_INTERNAL_H
#define GALLEY_SYNTH_INTERNAL_H

#include "galley/data.h"

void synth_spirals(const recipe_t *r, int split, gl_dataset *d);
void synth_blobs(const recipe_t *r, int split, gl_dataset *d);
void synth_shapes2d(const recipe_t *r, int split, gl_dataset *d);
void synth_cosmo3d(const recipe_t *r, int split, gl_dataset *d);
void synth_climate2d(const recipe_t *r, int split, gl_dataset *d);
void synth_fields3d(const recipe_t *r, int split, gl_dataset *d);

#endif
