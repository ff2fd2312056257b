// h5data.h: HDF5 data sets: writing the synthetic kinds (`galley data synth`), and reading a
// recipe's split sample by sample (the loader's source; see loader.h).
//
// On-disk conventions of the files galley writes (attributes on the root group say the same):
//   spirals, blobs  x float32 [N, F]              y int32 [N]            (class labels)
//   shapes2d        x float32 [N, C, S, S]        y int32 [N]            (class labels)
//   cosmo3d         x int16   [N, C, S, S, S]     y float32 [N, 4]       x holds particle counts:
//                   round(expm1(v)) of the generator's log-counts v, clamped to [0, 32767];
//                   readers apply log1p (data.transform: log1p), as CosmoFlow does
//   climate2d       climate/data float32 [N, S, S, C] (channels last, DeepCAM's names and layout)
//                   climate/labels_0 int32 [N, S, S] (0 background, 1 cyclone, 2 river)
//   nbody3d        x float32 [N, 4, S, S, S]     y float32 [N, 5, S, S, S]
//   weather2d      yearly files: fields float32 [T, C, S/2, S] (see h5_synth_write_series)
// Datasets are chunked (one sample per chunk, or spatial blocks of at most 1 MiB for big samples),
// optionally gzip-compressed with the shuffle filter.
#ifndef GALLEY_H5DATA_H
#define GALLEY_H5DATA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/data.h"
#include "galley/recipe.h"

// ---- writing ----------------------------------------------------------------------------------

typedef struct {
    int kind;           // SYNTH_*
    int split;          // SPLIT_TRAIN or SPLIT_VAL
    int64_t n, size, seed, classes, channels, features;
    double noise;
    int compress;       // gzip level 0..9 (0: none)
    bool per_file;      // one file per sample: OUT is a directory of sample-NNNNNN.h5 (no sample axis)
    int64_t steps, years, val_years;  // weather2d: time steps per yearly file, training and validation files
} h5_synth_params;

void h5_synth_default_params(h5_synth_params *p);
// A recipe whose data.synthetic section matches p (for data_synth_make); r is fully owned by the caller.
void h5_synth_recipe(const h5_synth_params *p, recipe_t *r);
// The int16 count stored for a generator log-count v (cosmo3d): round(expm1(v)) in [0, 32767].
int16_t h5_counts_from_log(float v);
// Writes the data set to out atomically (a temporary name, then rename). Returns 0, or -1 with a
// message on err.
int h5_synth_write(const h5_synth_params *p, const char *out, FILE *err);
// weather2d as yearly files (src/data/ts_synth.c): OUT/train/<year>.h5 (p->years files: the
// training split's series 0, 1, ...), OUT/val/<year>.h5 (p->val_years, the validation split's),
// each with fields float32 [steps, C, size/2, size], and OUT/stats/global_means.npy and
// global_stds.npy, float32 [1, C, 1, 1] over the training files (the NERSC tutorial's layout).
// 0, or -1 with a message on err.
int h5_synth_write_series(const h5_synth_params *p, const char *out, FILE *err);

// One dataset written from memory: creates missing groups; dims[0] is the sample axis when
// chunk_samples > 0 (chunks of that many samples, split spatially beyond 1 MiB), contiguous when 0.
// mem_type and disk_type are HDF5 type ids (hid_t passed as int64_t to keep hdf5.h out of here).
int h5_write_array(int64_t file, const char *name, int64_t disk_type, int64_t mem_type, int rank,
                   const uint64_t *dims, const void *data, int chunk_samples, int compress);
// A fresh HDF5 file with galley's access properties (file locking as configured). -1 on failure.
int64_t h5_create_file(const char *path);

// ---- reading ----------------------------------------------------------------------------------

// Global HDF5 setup, idempotent: silences HDF5's own error printing in this thread and sets
// file locking (HDF5_USE_FILE_LOCKING=FALSE unless the environment already says).
void h5_setup(bool file_locking);

typedef struct h5src h5src;          // one split of a recipe's HDF5 data set
typedef struct h5cursor h5cursor;    // a reader thread's open file and scratch memory

// Opens every file of the split, checks that the datasets exist with usable ranks, dtypes and
// shapes that agree across files, and reads the normalisation statistics. Returns 0, or prints
// an error naming the file and dataset and returns GL_EXIT_USAGE.
int h5src_open(h5src **s, const recipe_t *r, int split, FILE *err);
void h5src_free(h5src *s);
// The samples as the model sees them: n, shape (channels first, after data.crop), target, tshape,
// classes. x/labels/values are NULL.
void h5src_describe(const h5src *s, gl_dataset *d);
// Per-sample shapes before the crop (what a cache holds).
void h5src_full(const h5src *s, gl_shape *shape, gl_shape *tshape);
int h5src_files(const h5src *s);
const char *h5src_file(const h5src *s, int i);
// The file holding sample i, and the sample's index inside it.
int h5src_file_of(const h5src *s, int64_t i, int64_t *local);
// Redirects file i to another path (a staged copy with the same contents).
void h5src_set_path(h5src *s, int i, const char *path);
// Spatial crop edge (0: none) and the number of spatial axes (0 for feature vectors).
int64_t h5src_crop(const h5src *s);
int h5src_spatial_dims(const h5src *s);

h5cursor *h5cursor_new(const h5src *s);
void h5cursor_free(h5cursor *c);
// Whether c's last h5src_read failed because the input sample holds NaN or Inf (data.nonfinite).
bool h5cursor_nonfinite(const h5cursor *c);
// Reads sample i into x (shape of h5src_describe, or the full shape when off is NULL and crop
// is set: the caller wants the whole sample) and its target into labels or values; off[d] is
// the crop's start along spatial axis d (read as a hyperslab). Applies transform and
// normalisation. Returns 0, or -1 with a message naming the file, dataset and sample.
int h5src_read(const h5src *s, h5cursor *c, int64_t i, const int64_t *off, float *x, int32_t *labels,
               float *values, char *msg, size_t len);

// ---- inspecting (`galley data inspect`) -------------------------------------------------------

typedef struct {
    double min, max, sum;       // over the finite values
    int64_t count, nonfinite;   // finite values; NaN and Inf
} h5_stats;

// Statistics of a numeric dataset of an open file, streamed in hyperslabs of at most budget
// elements (0: 1 Mi); -1 if it is not numeric or a read fails.
int h5_dataset_stats(int64_t file, const char *name, size_t budget, h5_stats *st);
// Prints every dataset of path (full path, shape, dtype, chunks, filters, min/max/mean) and the
// root's galley_* attributes. GL_EXIT_USAGE for a missing or non-HDF5 file, GL_EXIT_RUNTIME when
// a dataset cannot be read.
int h5_inspect(const char *path, FILE *out, FILE *err);

#endif
