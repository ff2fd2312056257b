// ts_internal.h: the time-series source's parts (data.source: timeseries), shared by
// src/data/ts_*.c, npy.c, source_timeseries.c, synth_weather2d.c and the tests.
//
// The layout (NERSC's SC23 tutorial, FourCastNet): a directory of yearly HDF5 files, each with a
// dataset fields [T, C, H, W]; a sample is (fields[t], fields[t + lead]) of one file, cropped to
// [0:H, 0:W], a subset of channels, both normalised per channel by (x - mean) / std.
#ifndef GALLEY_TS_INTERNAL_H
#define GALLEY_TS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/data.h"
#include "galley/recipe.h"

// ---- .npy files (npy.c) -----------------------------------------------------------------------

enum { NPY_MAX_DIMS = 8 };

typedef struct {
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t n;        // elements
    double *v;        // the values, row-major as stored (free with free())
} npy_array;

// Reads a NumPy .npy file (format 1.0, 2.0 or 3.0) of little-endian float32 or float64 into a as
// doubles. 0, or -1 with what is wrong (naming path) in msg.
int npy_read(const char *path, npy_array *a, char *msg, size_t len);
// Writes v [n] as float32 with shape (format 1.0, header padded to 64 bytes), through a temporary
// file renamed into place. 0, or -1 (errno; path untouched).
int npy_write_f32(const char *path, const float *v, int ndim, const int64_t *shape);
// "[1, 20, 1, 1]".
void npy_shape_words(const npy_array *a, char *buf, size_t len);

// ---- one split of yearly files (ts_reader.c) -------------------------------------------------

typedef struct tssrc tssrc;
typedef struct tscursor tscursor;

// Lists and opens the split's files, checks the dataset (rank 4, C/H/W equal across files,
// T > lead), the channels, the crop and the statistics. 0, or GL_EXIT_USAGE with the reason
// (the recipe key and line, or the file and dataset) on err.
int tssrc_open(tssrc **s, const recipe_t *r, int split, FILE *err);
void tssrc_free(tssrc *s);
// n, shape [C, H, W] (channels read, crop), target VALUES with the same shape.
void tssrc_describe(const tssrc *s, gl_dataset *d);
int tssrc_files(const tssrc *s);
const char *tssrc_file(const tssrc *s, int i);
int tssrc_file_of(const tssrc *s, int64_t i, int64_t *t);
void tssrc_set_path(tssrc *s, int i, const char *path);
// The normalisation applied to channel k (as read): x' = (x - shift) * scale.
void tssrc_norm(const tssrc *s, int64_t k, double *shift, double *scale);

tscursor *tscursor_new(const tssrc *s);
void tscursor_free(tscursor *c);
bool tscursor_nonfinite(const tscursor *c);
// Sample i: x [C, H, W] = fields[t], y [C, H, W] = fields[t + lead], normalised. 0, or -1 with a
// message naming the file, dataset and time step (nonfinite set when a value is NaN or Inf).
int tssrc_read(const tssrc *s, tscursor *c, int64_t i, float *x, float *y, char *msg, size_t len);

// ---- weather2d (synth_weather2d.c) -----------------------------------------------------------

typedef struct {
    uint64_t seed;
    int64_t channels, h, w;
    double noise;  // observation noise added to each snapshot
} weather2d_params;

// Runs series `series` of split for steps time steps, calling out(t, state [C, H, W], ctx) for
// t = 0 .. steps-1 in order (state with its observation noise; valid during the call only). A
// pure function of (seed, split, series, t): the same for any thread count and any steps >= t.
void weather2d_run(const weather2d_params *p, int split, int64_t series, int64_t steps,
                   void (*out)(int64_t t, const float *state, void *ctx), void *ctx);

#endif
