// data.h: data sets held in memory, and the built-in synthetic ones.
#ifndef GALLEY_DATA_H
#define GALLEY_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "galley/arena.h"
#include "galley/recipe.h"
#include "galley/tensor.h"

enum { SPLIT_TRAIN = 0, SPLIT_VAL = 1 };

// What a sample's target is.
typedef enum {
    TARGET_CLASS,   // one class label per sample: labels[n]
    TARGET_MASK,    // one class label per pixel/voxel: labels[n, tsize], tshape = spatial dims
    TARGET_VALUES,  // floats per sample (regression, field-to-field): values[n, tsize]
} gl_target_kind;

typedef struct {
    int64_t n;             // samples
    gl_shape shape;        // per-sample input shape (channels first)
    int64_t size;          // input elements per sample
    gl_target_kind target;
    gl_shape tshape;       // per-sample target shape: [1] for CLASS, spatial dims for MASK
    int64_t tsize;         // target elements per sample
    int64_t classes;       // CLASS, MASK: number of classes
    float *x;              // [n, size]
    int32_t *labels;       // CLASS, MASK: [n, tsize] in [0, classes)
    float *values;         // VALUES: [n, tsize]
} gl_dataset;

// The shapes a recipe's data will have, without generating anything (for planning and checks).
void data_describe(const recipe_t *r, gl_dataset *d);
// The shapes of a split of the recipe's data, synthetic or HDF5 (opening the files to read their
// metadata): 0, or GL_EXIT_USAGE with the reason (file, dataset) printed to err.
int data_shape(const recipe_t *r, int split, gl_dataset *d, FILE *err);
// data.source's choices, the sources of src/data/source_registry.c in id order (DATA_SOURCE_*),
// NULL-terminated; the name of id ("?" for none).
extern const char *const data_source_choices[];
int data_source_count(void);
const char *data_source_name(int id);
// Arena bytes data_synth_make needs for one split.
size_t data_synth_bytes(const recipe_t *r, int split);
// Generates a split of the recipe's synthetic data set; a pure function of (seed, split),
// independent of the thread count.
void data_synth_make(const recipe_t *r, int split, gl_dataset *d, gl_arena *a);

#endif
