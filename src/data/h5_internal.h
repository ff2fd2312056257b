// h5_internal.h: HDF5 helpers shared by src/data/h5_*.c and the tests (they need hdf5.h).
#ifndef GALLEY_H5_INTERNAL_H
#define GALLEY_H5_INTERNAL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

#include "galley/h5data.h"  // h5src, h5cursor

// File access properties with galley's file-locking choice (see h5_setup). Close with H5Pclose.
hid_t h5_fapl(void);
// path opened read-only with h5_fapl's locking choice; a negative id on failure.
hid_t h5_open_read(const char *path);
// IEEE binary16 (numpy float16) as an HDF5 type; close with H5Tclose.
hid_t h5_float16_type(void);

// NULL for a dataset whose header is consistent; else what is damaged ("a dimension exceeds its
// own maximum", ...): a damaged file, which HDF5 1.10 would read past its own buffers.
const char *h5_dataset_damage(hid_t d);
// A name or string read from a file, fit to print: valid UTF-8 as it is, other bytes and
// control characters as \xNN (a damaged file's names can hold anything). out has len bytes.
void h5_printable(const char *in, char *out, size_t len);

// Reads samples [i, i + n) of the split whole (as h5src_read with off NULL) into x [n, full shape]
// and labels or values [n, full target shape], with one HDF5 read per dataset and file the run
// touches (a hyperslab of consecutive samples) instead of one per sample: the same bytes, checks
// and messages as n h5src_read calls. Returns n, or k < n: samples i .. i + k - 1 are valid and
// sample i + k failed, msg naming its file, dataset and sample (h5cursor_nonfinite: whether it
// holds NaN or Inf); the samples after it are not read.
int64_t h5src_read_run(const h5src *s, h5cursor *c, int64_t i, int64_t n, float *x, int32_t *labels, float *values,
                       char *msg, size_t len);

#endif
