// synth_vectors.c: 1D classification sets: spirals and blobs.
#include <math.h>

#include "data/synth_internal.h"
#include "galley/rng.h"

// x is (n, f): arm c of k; radius grows with t while the angle turns once, so arms interleave.
static void synth_spirals(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t f = d->size, k = d->classes;
    const double noise = r->data.synthetic.noise;
    for (int64_t i = 0; i < d->n; i++) {
        int32_t c = (int32_t)(i % k);  // balanced classes; the loader shuffles
        float *x = d->x + i * f;
        uint64_t base = (uint64_t)i * (uint64_t)(f + 2);
        d->labels[i] = c;
        double t = rng_uniform(seed, RNG_DATA, (uint64_t)split, base);
        double radius = 0.1 + 0.9 * t;
        double theta = 6.283185307179586 * ((double)c / (double)k + t);
        x[0] = (float)(radius * cos(theta) + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 1));
        x[1] = (float)(radius * sin(theta) + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 2));
        for (int64_t j = 2; j < f; j++)  // distractors the model must learn to ignore
            x[j] = (float)(noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + 1 + (uint64_t)j));
    }
}

// x is (n, f): blob c is a fixed random centre (the same in both splits) plus Gaussian noise.
static void synth_blobs(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t f = d->size, k = d->classes;
    const double noise = r->data.synthetic.noise;
    for (int64_t i = 0; i < d->n; i++) {
        int32_t c = (int32_t)(i % k);
        float *x = d->x + i * f;
        uint64_t base = (uint64_t)i * (uint64_t)(f + 2);
        d->labels[i] = c;
        for (int64_t j = 0; j < f; j++) {
            double centre = rng_normal(seed, RNG_DATA, 1000, (uint64_t)(c * f + j));
            x[j] = (float)(centre + noise * rng_normal(seed, RNG_DATA, (uint64_t)split, base + (uint64_t)j));
        }
    }
}

// [features] -> one class label.
static void describe_vectors(const recipe_t *r, gl_dataset *d) {
    d->shape = shape_1d(r->data.synthetic.features);
    d->target = TARGET_CLASS;
    d->classes = r->data.synthetic.classes;
}

const synth_kind synth_kind_spirals = {
    .describe = describe_vectors,
    .generate = synth_spirals,
    .keys = SYNTH_KEY_CLASSES | SYNTH_KEY_FEATURES,
    .h5_x = "x",
    .h5_y = "y",
};

const synth_kind synth_kind_blobs = {
    .describe = describe_vectors,
    .generate = synth_blobs,
    .keys = SYNTH_KEY_CLASSES | SYNTH_KEY_FEATURES,
    .h5_x = "x",
    .h5_y = "y",
};
