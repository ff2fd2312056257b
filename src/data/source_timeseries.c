// source_timeseries.c: data.source: timeseries. Yearly files of a field's time series
// (ts_reader.c) as a source: samples (x at t, x at t + lead) read on the reader threads, cached
// and staged like the hdf5 source's.
#include "data/source.h"
#include "data/ts_internal.h"

static int open_split(void **self, const recipe_t *r, int split, FILE *err) {
    tssrc *s = NULL;
    int rc = tssrc_open(&s, r, split, err);
    *self = s;
    return rc;
}

static void free_split(void *self) { tssrc_free(self); }

// The crop (data.timeseries.size) is taken by the reader: the loader sees whole samples.
static void describe(const void *self, gl_dataset *d, gl_shape *xfull, gl_shape *tfull, int64_t *crop) {
    tssrc_describe(self, d);
    *xfull = d->shape, *tfull = d->tshape;
    *crop = 0;
}

static void *cursor_new(const void *self) { return tscursor_new(self); }
static void cursor_free(void *cursor) { tscursor_free(cursor); }
static bool nonfinite(const void *cursor) { return tscursor_nonfinite(cursor); }

// Field targets only: labels is never asked for; off is NULL (no loader crop).
static int read_sample(const void *self, void *cursor, int64_t i, const int64_t *off, float *x, int32_t *labels,
                       float *values, char *msg, size_t len) {
    (void)off, (void)labels;
    return tssrc_read(self, cursor, i, x, values, msg, len);
}

static int files(const void *self) { return tssrc_files(self); }
static const char *file(const void *self, int i) { return tssrc_file(self, i); }
static int file_of(const void *self, int64_t i, int64_t *local) { return tssrc_file_of(self, i, local); }
static void set_path(void *self, int i, const char *path) { tssrc_set_path(self, i, path); }

const gl_source_ops source_timeseries = {
    .open = open_split,
    .free = free_split,
    .describe = describe,
    .cursor_new = cursor_new,
    .cursor_free = cursor_free,
    .read = read_sample,
    .nonfinite = nonfinite,
    .files = files,
    .file = file,
    .file_of = file_of,
    .set_path = set_path,
};
