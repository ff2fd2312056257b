// data.h: data sets held in memory, and the built-in synthetic ones.
#ifndef GALLEY_DATA_H
#define GALLEY_DATA_H

#include <stdint.h>

#include "galley/arena.h"
#include "galley/recipe.h"
#include "galley/tensor.h"

enum { SPLIT_TRAIN = 0, SPLIT_VAL = 1 };

typedef struct {
    int64_t n;        // samples
    gl_shape shape;   // per-sample input shape
    int64_t size;     // elements per sample
    int64_t classes;
    float *x;         // [n, size]
    int32_t *y;       // [n] class labels
} gl_dataset;

// Arena bytes data_synth_make needs for one split.
size_t data_synth_bytes(const recipe_t *r, int split);
// Generates a split of the recipe's synthetic data set; a pure function of (seed, split).
void data_synth_make(const recipe_t *r, int split, gl_dataset *d, gl_arena *a);
// Copies rows idx[0..n) into x[n, size] and y[n].
void data_gather(const gl_dataset *d, const int64_t *idx, int64_t n, float *x, int32_t *y);

#endif
