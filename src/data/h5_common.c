// h5_common.c: what galley's HDF5 reading and writing share: library setup (file locking, quiet
// error stack), file access properties, and writing one array as a chunked dataset.
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "data/h5_internal.h"
#include "galley/h5data.h"

static int locking = 0;  // file locking wanted by the recipe (HDF5_USE_FILE_LOCKING wins when set)

void h5_setup(bool file_locking) {
    locking = file_locking;
    // HDF5 reads the variable when it first opens a file; the property below covers later changes.
    if (!file_locking) setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // per thread in thread-safe builds: cursors call it too
}

hid_t h5_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, locking ? 1 : 0, 1);  // ignore "locking disabled" on file systems without it
    return fapl;
}

int64_t h5_create_file(const char *path) {
    hid_t fapl = h5_fapl();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

// Chunk dims for an array whose axis 0 is samples: chunk_samples samples, each sample's trailing
// axes halved (largest first) until a chunk is at most 1 MiB.
static void chunk_dims(int rank, const hsize_t *dims, size_t elem, int chunk_samples, hsize_t *ch) {
    ch[0] = (hsize_t)chunk_samples < dims[0] ? (hsize_t)chunk_samples : dims[0];
    if (ch[0] == 0) ch[0] = 1;
    size_t bytes = elem * ch[0];
    for (int d = 1; d < rank; d++) ch[d] = dims[d] ? dims[d] : 1, bytes *= ch[d];
    while (bytes > (1u << 20)) {
        int big = 1;
        for (int d = 2; d < rank; d++)
            if (ch[d] > ch[big]) big = d;
        if (rank < 2 || ch[big] <= 1) break;
        bytes = bytes / ch[big] * ((ch[big] + 1) / 2);
        ch[big] = (ch[big] + 1) / 2;
    }
}

int h5_write_array(int64_t file, const char *name, int64_t disk_type, int64_t mem_type, int rank, const uint64_t *dims,
                   const void *data, int chunk_samples, int compress) {
    hsize_t hd[H5S_MAX_RANK] = {0}, ch[H5S_MAX_RANK];
    for (int d = 0; d < rank; d++) hd[d] = dims[d];
    hid_t space = rank > 0 ? H5Screate_simple(rank, hd, NULL) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk_samples > 0 && rank > 0 && hd[0] > 0) {
        chunk_dims(rank, hd, H5Tget_size((hid_t)disk_type), chunk_samples, ch);
        H5Pset_chunk(dcpl, rank, ch);
        if (compress > 0) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, (unsigned)compress);
        }
    }
    hid_t ds = H5Dcreate2((hid_t)file, name, (hid_t)disk_type, space, lcpl, dcpl, H5P_DEFAULT);
    int rc = -1;
    if (ds >= 0) {
        rc = H5Dwrite(ds, (hid_t)mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ? -1 : 0;
        H5Dclose(ds);
    }
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(space);
    return rc;
}

hid_t h5_float16_type(void) {
    // IEEE 754 binary16, little endian: what numpy's float16 is on disk (h5py writes this type).
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}
