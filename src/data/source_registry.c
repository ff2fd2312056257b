// source_registry.c: the list of data sources (data.source). Adding one is one file
// (source_<name>.c, defining its gl_source_ops) plus one line here.
#include "data/source.h"

#include "galley/check.h"

// One line per source: its data.source name and its ops. The order gives the ids recipes resolve
// to (recipe.h's DATA_SOURCE_* name the first ones): append new sources.
#define DATA_SOURCES(X)                 \
    X("synthetic", source_synthetic)    \
    X("hdf5", source_hdf5)              \
    X("timeseries", source_timeseries)

#define DECLARE(name, ops) extern const gl_source_ops ops;
#define NAME(name, ops) name,
#define ENTRY(name, ops) &ops,
DATA_SOURCES(DECLARE)
const char *const data_source_choices[] = {DATA_SOURCES(NAME) NULL};
static const gl_source_ops *const sources[] = {DATA_SOURCES(ENTRY)};

enum { COUNT = (int)(sizeof sources / sizeof sources[0]) };

int data_source_count(void) { return COUNT; }

const char *data_source_name(int id) { return id >= 0 && id < COUNT ? data_source_choices[id] : "?"; }

const gl_source_ops *source_ops(int id) {
    GL_CHECK(id >= 0 && id < COUNT, "unknown data source");
    return sources[id];
}

int source_shape(const recipe_t *r, int split, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, FILE *err) {
    const gl_source_ops *ops = source_ops(r->data.source);
    void *self = NULL;
    if (ops->open(&self, r, split, err) != 0) return GL_EXIT_USAGE;
    int64_t crop;
    gl_shape xf, tf;
    ops->describe(self, d, xfull ? xfull : &xf, tfull ? tfull : &tf, &crop);
    ops->free(self);
    return 0;
}
