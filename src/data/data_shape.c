// data_shape.c: a split's shapes without loading it, for `galley check` and planning.
#include "galley/check.h"
#include "galley/data.h"
#include "galley/h5data.h"

int data_shape(const recipe_t *r, int split, gl_dataset *d, FILE *err) {
    if (r->data.source != DATA_SOURCE_HDF5) {
        data_describe(r, d);
        d->n = split == SPLIT_TRAIN ? r->data.synthetic.train_size : r->data.synthetic.val_size;
        return 0;
    }
    h5src *s = NULL;
    if (h5src_open(&s, r, split, err) != 0) return GL_EXIT_USAGE;
    h5src_describe(s, d);
    h5src_free(s);
    return 0;
}
