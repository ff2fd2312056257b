// synth.c: the built-in synthetic data sets: their shapes, their memory, and dispatch to one
// generator per kind (synth_<kind>.c), so a recipe trains without any files.
#include <string.h>

#include "data/synth_internal.h"
#include "galley/check.h"

static int64_t split_size(const recipe_t *r, int split) {
    return split == SPLIT_TRAIN ? r->data.synthetic.train_size : r->data.synthetic.val_size;
}

static int64_t channels_or(const recipe_t *r, int64_t own) {
    return r->data.synthetic.channels > 0 ? r->data.synthetic.channels : own;
}

void data_describe(const recipe_t *r, gl_dataset *d) {
    memset(d, 0, sizeof *d);
    const int64_t s = r->data.synthetic.size;
    switch (r->data.synthetic.kind) {
    case SYNTH_SPIRALS:
    case SYNTH_BLOBS:
        d->shape = shape_1d(r->data.synthetic.features);
        d->target = TARGET_CLASS;
        d->classes = r->data.synthetic.classes;
        break;
    case SYNTH_SHAPES2D:
        d->shape = (gl_shape){3, {channels_or(r, 3), s, s}};
        d->target = TARGET_CLASS;
        d->classes = r->data.synthetic.classes;
        break;
    case SYNTH_COSMO3D:
        d->shape = (gl_shape){4, {channels_or(r, 4), s, s, s}};
        d->target = TARGET_VALUES;
        d->tshape = shape_1d(4);  // the 4 parameters behind each field, each in [-1, 1]
        break;
    case SYNTH_CLIMATE2D:
        d->shape = (gl_shape){3, {channels_or(r, 16), s, s}};
        d->target = TARGET_MASK;
        d->tshape = (gl_shape){2, {s, s}};
        d->classes = 3;  // background, cyclone, river (DeepCAM's classes)
        break;
    case SYNTH_NBODY3D:
        d->shape = (gl_shape){4, {4, s, s, s}};
        d->target = TARGET_VALUES;
        d->tshape = (gl_shape){4, {5, s, s, s}};
        break;
    default: GL_CHECK(0, "unknown synthetic kind");
    }
    if (d->target == TARGET_CLASS) d->tshape = shape_1d(1);
    d->size = shape_size(&d->shape);
    d->tsize = shape_size(&d->tshape);
}

size_t data_synth_bytes(const recipe_t *r, int split) {
    gl_dataset d;
    data_describe(r, &d);
    int64_t n = split_size(r, split);
    size_t target = d.target == TARGET_VALUES ? sizeof(float) : sizeof(int32_t);
    return arena_round((size_t)(n * d.size) * sizeof(float)) + arena_round((size_t)(n * d.tsize) * target);
}

void data_synth_make(const recipe_t *r, int split, gl_dataset *d, gl_arena *a) {
    data_describe(r, d);
    d->n = split_size(r, split);
    d->x = arena_floats(a, d->n * d->size);
    if (d->target == TARGET_VALUES) d->values = arena_floats(a, d->n * d->tsize);
    else d->labels = arena_alloc(a, (size_t)(d->n * d->tsize) * sizeof(int32_t));
    switch (r->data.synthetic.kind) {
    case SYNTH_SPIRALS: synth_spirals(r, split, d); break;
    case SYNTH_BLOBS: synth_blobs(r, split, d); break;
    case SYNTH_SHAPES2D: synth_shapes2d(r, split, d); break;
    case SYNTH_COSMO3D: synth_cosmo3d(r, split, d); break;
    case SYNTH_CLIMATE2D: synth_climate2d(r, split, d); break;
    case SYNTH_NBODY3D: synth_nbody3d(r, split, d); break;
    default: GL_CHECK(0, "unknown synthetic kind");
    }
}
