// source_hdf5.c: data.source: hdf5. The h5src reader (h5_reader.c) as a source: files opened and
// checked at open, samples read on the reader threads (consecutive ones in one call), files
// staged on request.
#include "data/h5_internal.h"  // h5src_read_run
#include "data/source.h"
#include "galley/h5data.h"

static int open_split(void **self, const recipe_t *r, int split, FILE *err) {
    h5src *s = NULL;
    int rc = h5src_open(&s, r, split, err);
    *self = s;
    return rc;
}

static void free_split(void *self) { h5src_free(self); }

static void describe(const void *self, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, int64_t *crop) {
    h5src_describe(self, d);
    h5src_full(self, xfull, tfull);
    *crop = h5src_crop(self);
}

static void *cursor_new(const void *self) { return h5cursor_new(self); }
static void cursor_free(void *cursor) { h5cursor_free(cursor); }
static bool nonfinite(const void *cursor) { return h5cursor_nonfinite(cursor); }

static int read_sample(const void *self, void *cursor, int64_t i, const int64_t *off, float *x, int32_t *labels,
                       float *values, char *msg, size_t len) {
    return h5src_read(self, cursor, i, off, x, labels, values, msg, len);
}

static int64_t read_run(const void *self, void *cursor, int64_t i, int64_t n, float *x, int32_t *labels, float *values,
                        char *msg, size_t len) {
    return h5src_read_run(self, cursor, i, n, x, labels, values, msg, len);
}

static int files(const void *self) { return h5src_files(self); }
static const char *file(const void *self, int i) { return h5src_file(self, i); }
static int file_of(const void *self, int64_t i, int64_t *local) { return h5src_file_of(self, i, local); }
static void set_path(void *self, int i, const char *path) { h5src_set_path(self, i, path); }

const gl_source_ops source_hdf5 = {
    .open = open_split,
    .free = free_split,
    .describe = describe,
    .cursor_new = cursor_new,
    .cursor_free = cursor_free,
    .read = read_sample,
    .nonfinite = nonfinite,
    .read_run = read_run,
    .files = files,
    .file = file,
    .file_of = file_of,
    .set_path = set_path,
};
