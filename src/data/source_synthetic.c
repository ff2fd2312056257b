// source_synthetic.c: data.source: synthetic. The recipe's synthetic kind (synth.c) generated
// into the loader's arena when it opens, and served from there.
#include <stdlib.h>

#include "data/source.h"
#include "galley/check.h"

typedef struct {
    int split;
    gl_dataset shape;  // as described: n and shapes, no data
    size_t bytes;      // what data_synth_make takes
    gl_dataset mem;    // the split, once loaded
} synthetic;

static int open_split(void **self, const recipe_t *r, int split, FILE *err) {
    (void)err;
    synthetic *s = gl_xcalloc(1, sizeof *s);
    s->split = split;
    data_describe(r, &s->shape);
    s->shape.n = split == SPLIT_TRAIN ? r->data.synthetic.train_size : r->data.synthetic.val_size;
    s->bytes = data_synth_bytes(r, split);
    *self = s;
    return 0;
}

static void free_split(void *self) { free(self); }

static void describe(const void *self, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, int64_t *crop) {
    const synthetic *s = self;
    *d = s->shape;
    *xfull = s->shape.shape, *tfull = s->shape.tshape;
    *crop = 0;
}

static size_t memory_bytes(const void *self) { return ((const synthetic *)self)->bytes; }

static void load(void *self, const recipe_t *r, gl_arena *a) {
    synthetic *s = self;
    data_synth_make(r, s->split, &s->mem, a);
}

static void sample(const void *self, int64_t i, const float **x, const void **target) {
    const gl_dataset *m = &((const synthetic *)self)->mem;
    *x = m->x + i * m->size;
    *target = m->values ? (const void *)(m->values + i * m->tsize) : (const void *)(m->labels + i * m->tsize);
}

const gl_source_ops source_synthetic = {
    .open = open_split,
    .free = free_split,
    .describe = describe,
    .memory_bytes = memory_bytes,
    .load = load,
    .sample = sample,
};
