// augment.h: seeded data augmentation on channels-first samples: axis permutations with flips
// (the 8 symmetries of a square, the 24 rotations of a cube), shifts with zero fill (pad + crop)
// and Gaussian noise. Every draw is a pure function of (seed, epoch, sample), so a sample is
// augmented the same way whichever thread or rank handles it; targets shaped like the sample
// (masks, fields) get the same geometric change.
#ifndef GALLEY_AUGMENT_H
#define GALLEY_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

// A signed axis permutation of nd spatial axes: output axis a walks input axis perm[a],
// backwards when flip[a]. Output extent a is input extent perm[a].
typedef struct {
    int nd;
    int perm[3];
    int flip[3];
} gl_axes;

gl_axes augment_identity(int nd);
// The 8 symmetries of a square (nd = 2: rotations and reflections) or the 24 rotations of a
// cube (nd = 3: determinant +1), identity first. Returns the count (1 for other nd).
int augment_symmetries(int nd, gl_axes *out);
bool augment_is_identity(const gl_axes *t);

// out[c, o...] = in[c, i...] under t; ext: input spatial extents. in and out must not overlap.
void augment_axes_f32(const gl_axes *t, int64_t ch, const int64_t *ext, const float *in, float *out);
void augment_axes_i32(const gl_axes *t, int64_t ch, const int64_t *ext, const int32_t *in, int32_t *out);
// out[c, o] = in[c, o + shift] inside the sample, 0 outside: padding by |shift| then cropping.
void augment_shift_f32(int nd, int64_t ch, const int64_t *ext, const int64_t *shift, const float *in, float *out);
void augment_shift_i32(int nd, int64_t ch, const int64_t *ext, const int64_t *shift, const int32_t *in, int32_t *out);

// One sample's draws.
typedef struct {
    int64_t crop[3];   // crop offsets (when crop > 0)
    gl_axes axes;      // flips and rotation
    int64_t shift[3];  // pad_crop shift, each in [-pad, pad]
    uint64_t key;      // noise key
} augment_plan;

typedef struct {
    bool flip, rotate;
    int64_t pad;      // pad_crop
    double noise;
    int64_t crop;     // crop edge (0: none); full: the spatial extents it is taken from
} augment_params;

// Draws sample's plan for epoch (epoch 0: validation; only crop offsets are drawn then, the
// rest is identity); nd spatial axes, full the extents before the crop.
void augment_draw(const augment_params *p, uint64_t seed, int64_t epoch, int64_t sample, int nd, const int64_t *full,
                  bool train, augment_plan *plan);
// Adds noise of std to x[0..n), keyed by the plan.
void augment_noise(const augment_plan *plan, float std, float *x, int64_t n);

#endif
