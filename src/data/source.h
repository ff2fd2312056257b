// source.h: where a split's samples come from. One ops table per data.source (source_<name>.c),
// listed in source_registry.c; the loader, `galley check` and `galley data bench` call through it.
//
// A source either holds the split in memory (synthetic: memory_bytes, load and sample set) or
// reads samples on the loader's reader threads (hdf5: cursor_new, read and the rest set). The
// loader crops, augments and caches (data.loader.cache) around either.
#ifndef GALLEY_DATA_SOURCE_H
#define GALLEY_DATA_SOURCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/arena.h"
#include "galley/data.h"
#include "galley/recipe.h"

typedef struct {
    // Opens split (SPLIT_*) of r into *self: what can be checked without reading samples is
    // checked. r is read here and in load only. 0, or GL_EXIT_USAGE with the reason on err.
    int (*open)(void **self, const recipe_t *r, int split, FILE *err);
    void (*free)(void *self);
    // The samples as served (n, shapes after any crop, target, tshape, classes; no data), the
    // per-sample shapes before the crop, and the crop edge (0: none).
    void (*describe)(const void *self, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, int64_t *crop);

    // In memory: the arena bytes the split takes, filling them, and sample i's input and target
    // (int32 labels or float values, full shapes). NULL for a source that reads.
    size_t (*memory_bytes)(const void *self);
    void (*load)(void *self, const recipe_t *r, gl_arena *a);
    void (*sample)(const void *self, int64_t i, const float **x, const void **target);

    // Reading: a cursor per reader thread; read as h5src_read (off: the crop's start, NULL for
    // the full sample; -1 with msg naming file, dataset and sample); nonfinite: whether the
    // cursor's last read failed because the input holds NaN or Inf (data.nonfinite: skip).
    void *(*cursor_new)(const void *self);
    void (*cursor_free)(void *cursor);
    int (*read)(const void *self, void *cursor, int64_t i, const int64_t *off, float *x, int32_t *labels,
                float *values, char *msg, size_t len);
    bool (*nonfinite)(const void *cursor);
    // Optional: samples [i, i + n) whole (off NULL) into x [n, ...], labels or values [n, ...] as n
    // reads would give them, consecutive samples in one call each (h5src_read_run): n, or k < n
    // with sample i + k the first that failed (msg, nonfinite as read says). NULL: read alone.
    int64_t (*read_run)(const void *self, void *cursor, int64_t i, int64_t n, float *x, int32_t *labels,
                        float *values, char *msg, size_t len);

    // Files, for data.loader.stage (NULL: the source has none): how many, file i's path, the file
    // holding sample i, and redirecting file i to a copy.
    int (*files)(const void *self);
    const char *(*file)(const void *self, int i);
    int (*file_of)(const void *self, int64_t i, int64_t *local);
    void (*set_path)(void *self, int i, const char *path);
} gl_source_ops;

// The ops of data.source id (DATA_SOURCE_*); aborts on an id the schema cannot produce.
const gl_source_ops *source_ops(int id);

// Opens r's split through its source's ops and describes it; the source is freed again
// (planning and checks). 0, or GL_EXIT_USAGE with the reason on err.
int source_shape(const recipe_t *r, int split, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, FILE *err);

#endif
