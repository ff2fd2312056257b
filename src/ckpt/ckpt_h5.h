// ckpt_h5.h: small HDF5 helpers the checkpoint reader and writer share (attributes, checked
// float datasets).
#ifndef GALLEY_CKPT_H5_H
#define GALLEY_CKPT_H5_H

#include <hdf5.h>
#include <stdint.h>

#include "galley/tensor.h"

int ck_attr_i64(hid_t obj, const char *name, int64_t v);
int ck_attr_f64(hid_t obj, const char *name, double v);
int ck_attr_str(hid_t obj, const char *name, const char *v);
// 0 and *v, or -1 when missing or of another kind.
int ck_get_i64(hid_t obj, const char *name, int64_t *v);
int ck_get_f64(hid_t obj, const char *name, double *v);
int ck_get_str(hid_t obj, const char *name, char *buf, size_t len);

// Writes float data[shape] as dataset path (parents created) with its crc32c attribute.
int ck_write_floats(hid_t f, const char *path, const gl_shape *shape, const float *data);
// Reads dataset path into data: its shape must be `shape` (NULL: any, *count elements up to
// cap) and its crc32c must match. 0; -1 missing or unreadable; -2 checksum mismatch; -3 shape
// mismatch (the found shape in found, "[a, b]").
int ck_read_floats(hid_t f, const char *path, const gl_shape *shape, float *data, char *found, size_t foundlen);

#endif
