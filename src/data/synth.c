// synth.c: the built-in synthetic data sets: their shapes, their memory, and dispatch to the
// kind's generator (synth_<kind>.c, listed in synth_registry.c), so a recipe trains without files.
#include <string.h>

#include "data/synth_internal.h"
#include "galley/check.h"

static int64_t split_size(const recipe_t *r, int split) {
    return split == SPLIT_TRAIN ? r->data.synthetic.train_size : r->data.synthetic.val_size;
}

static const synth_kind *kind_of(const recipe_t *r) {
    const synth_kind *k = synth_kind_at(r->data.synthetic.kind);
    GL_CHECK(k != NULL, "unknown synthetic kind");
    return k;
}

void data_describe(const recipe_t *r, gl_dataset *d) {
    memset(d, 0, sizeof *d);
    kind_of(r)->describe(r, d);
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
    kind_of(r)->generate(r, split, d);
}
