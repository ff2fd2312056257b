// data_shape.c: a split's shapes without loading it, for `galley check` and planning.
#include "data/source.h"
#include "galley/data.h"

int data_shape(const recipe_t *r, int split, gl_dataset *d, FILE *err) {
    return source_shape(r, split, d, NULL, NULL, err);
}
