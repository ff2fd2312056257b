// synth.c: built-in synthetic classification data, generated in memory from the seed, so a
// recipe trains without any files. Each value is keyed by (seed, split, sample, feature).
#include <math.h>
#include <string.h>

#include "galley/data.h"
#include "galley/rng.h"

static int64_t split_size(const recipe_t *r, int split) {
    return split == SPLIT_TRAIN ? r->data.synthetic.train_size : r->data.synthetic.val_size;
}

size_t data_synth_bytes(const recipe_t *r, int split) {
    int64_t n = split_size(r, split), f = r->data.synthetic.features;
    return arena_round((size_t)(n * f) * sizeof(float)) + arena_round((size_t)n * sizeof(int32_t));
}

void data_synth_make(const recipe_t *r, int split, gl_dataset *d, gl_arena *a) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t n = split_size(r, split), f = r->data.synthetic.features, k = r->data.synthetic.classes;
    const double noise = r->data.synthetic.noise;
    d->n = n;
    d->shape = shape_1d(f);
    d->size = f;
    d->classes = k;
    d->x = arena_floats(a, n * f);
    d->y = arena_alloc(a, (size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        int32_t c = (int32_t)(i % k);  // balanced classes; the loader shuffles
        float *x = d->x + i * f;
        uint64_t base = (uint64_t)i * (uint64_t)(f + 2);
        d->y[i] = c;
        if (r->data.synthetic.kind == SYNTH_SPIRALS) {
            // Arm c: radius grows with t while the angle turns once; arms interleave.
            double t = rng_uniform(seed, RNG_DATA, (uint64_t)split, base);
            double radius = 0.1 + 0.9 * t;
            double theta = 6.283185307179586 * ((double)c / (double)k + t);
            x[0] = (float)(radius * cos(theta) + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 1));
            x[1] = (float)(radius * sin(theta) + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 2));
            for (int64_t j = 2; j < f; j++)  // distractors the model must learn to ignore
                x[j] = (float)(noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 1 + (uint64_t)j));
        } else {
            // Blob c: a fixed random centre (the same for both splits) plus Gaussian noise.
            for (int64_t j = 0; j < f; j++) {
                double centre = rng_normal(seed, RNG_DATA, 1000, (uint64_t)(c * f + j));
                x[j] = (float)(centre + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + (uint64_t)j));
            }
        }
    }
}

void data_gather(const gl_dataset *d, const int64_t *idx, int64_t n, float *x, int32_t *y) {
    for (int64_t i = 0; i < n; i++) {
        memcpy(x + i * d->size, d->x + idx[i] * d->size, sizeof(float) * (size_t)d->size);
        y[i] = d->y[idx[i]];
    }
}
