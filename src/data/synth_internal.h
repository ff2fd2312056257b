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
void synth_nbody3d(const recipe_t *r, int split, gl_dataset *d);

// Approximately standard normal from one 64-bit draw (Irwin-Hall of four 16-bit uniforms).
float synth_gauss4(uint64_t u);
// f is (outer, len, inner): convolves every line along the middle axis, periodically, with
// h[0..2 rad] centred at h[rad].
void synth_blur_axis(float *f, int64_t outer, int64_t len, int64_t inner, const float *h, int rad);

#endif
