// ckpt_h5.h: what the checkpoint writer, reader and inspector share: opening and checking a
// file, attributes, checksummed float datasets, the optimizer's buffers and name.
#ifndef GALLEY_CKPT_H5_H
#define GALLEY_CKPT_H5_H

#include <hdf5.h>
#include <stdint.h>

#include "galley/optim.h"
#include "galley/tensor.h"

// Opens a checkpoint read-only and checks its format attributes. The file id, or -1 with the
// reason in err (missing, a directory, not HDF5, not a checkpoint, a newer format).
hid_t ck_open(const char *path, char *err, size_t errlen);
// The whole-file seal (ckpt_seal.c): the first CK_SEAL_BYTES of a checkpoint (an HDF5 user block)
// hold the CRC-32C and length of the rest. ck_seal writes it into a file image of size bytes;
// ck_check_seal returns 0 when it matches or the file has none (older checkpoints), else -1
// with the reason in err. ck_open checks it before HDF5 reads the file.
#define CK_SEAL_BYTES 512
void ck_seal(char *image, size_t size);
int ck_check_seal(const char *path, char *err, size_t errlen);
// The state buffers this optimizer has ("velocity"; "m", "v") into names/bufs[3]; their count.
int ck_optim_buffers(const gl_optim *o, const char **names, float **bufs);
// "sgd", "adamw" or "lamb", as the recipe writes optimizer.type.
const char *ck_optim_name(int type);

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
