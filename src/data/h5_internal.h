// h5_internal.h: HDF5 helpers shared by src/data/h5_*.c and the tests (they need hdf5.h).
#ifndef GALLEY_H5_INTERNAL_H
#define GALLEY_H5_INTERNAL_H

#include <hdf5.h>

// File access properties with galley's file-locking choice (see h5_setup). Close with H5Pclose.
hid_t h5_fapl(void);
// IEEE binary16 (numpy float16) as an HDF5 type; close with H5Tclose.
hid_t h5_float16_type(void);

#endif
