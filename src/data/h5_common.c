// h5_common.c: what galley's HDF5 reading and writing share: library setup (file locking, quiet
// error stack), file access properties, and writing one array as a chunked dataset.
#include <hdf5.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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

hid_t h5_open_read(const char *path) {
    hid_t fapl = h5_fapl();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

// Bytes in the well-formed UTF-8 sequence that starts at s (2 to 4), or 0 if none does
// (Unicode's table 3-7: no overlong forms, surrogates or code points past U+10FFFF).
static int utf8_len(const unsigned char *s) {
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

void h5_printable(const char *in, char *out, size_t len) {
    if (!len) return;
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)in; *s && k + 5 < len;) {
        int n = *s >= 0x80 ? utf8_len(s) : (*s < 0x20 || *s == 0x7f) ? 0 : 1;
        if (n) {
            memcpy(out + k, s, (size_t)n);
            k += (size_t)n, s += n;
        } else {
            k += (size_t)snprintf(out + k, len - k, "\\x%02x", *s++);
        }
    }
    out[k] = '\0';
}

// A dataset whose header contradicts itself is a damaged file, and HDF5 1.10 reads such files
// past its own buffers or for hours (both found by fuzzing galley with damaged files):
// - a dimension beyond its maximum (a damaged dataspace: reads of a made-up size);
// - an unfiltered chunked dataset whose chunks' stored bytes are not whole chunks: HDF5 stores
//   such chunks whole, so their bytes are a multiple of one chunk's, none past the chunk count.
//   Up to 65536 chunks the whole index is summed (H5Dget_storage_size walks it once); beyond,
//   the first and last chunks' records are checked, so opening a file with millions of chunks
//   stays cheap.
const char *h5_dataset_damage(hid_t d) {
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK];
    hid_t sp = H5Dget_space(d);
    int r = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, maxd) : -1;
    if (sp >= 0) H5Sclose(sp);
    if (r < 0) return "its dataspace cannot be read";
    for (int k = 0; k < r; k++)
        if (maxd[k] != H5S_UNLIMITED && dims[k] > maxd[k]) return "a dimension exceeds its own maximum";
    // Only fixed-size numbers: a variable-length type's memory size is not what a chunk stores.
    hid_t t = H5Dget_type(d);
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    double bytes = t >= 0 ? (double)H5Tget_size(t) : 0;
    if (t >= 0) H5Tclose(t);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) return NULL;
    hid_t pl = H5Dget_create_plist(d);
    const char *why = NULL;
    if (pl >= 0 && H5Pget_layout(pl) == H5D_CHUNKED && H5Pget_nfilters(pl) == 0) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(pl, H5S_MAX_RANK, cd);
        double chunks = 1;
        for (int k = 0; k < cr && k < r; k++) {
            bytes *= (double)cd[k];
            chunks *= cd[k] ? ceil((double)dims[k] / (double)cd[k]) : 0;
        }
        bool ok;
        if (cr != r || cr <= 0 || !(bytes > 0)) {
            ok = false;
        } else if (chunks <= 65536) {
            double st = (double)H5Dget_storage_size(d);
            ok = fmod(st, bytes) == 0 && st <= chunks * bytes;
        } else {
            // The record's own size (H5Dget_chunk_storage_size answers the nominal size in 1.10).
            hsize_t off[H5S_MAX_RANK], nb = 0;
            unsigned mask = 0;
            haddr_t addr = HADDR_UNDEF;
            ok = true;
            for (int end = 0; end < 2 && ok; end++) {
                for (int k = 0; k < r; k++) off[k] = end && dims[k] ? (dims[k] - 1) / cd[k] * cd[k] : 0;
                // an unallocated chunk (no address) is fine: it reads as the fill value
                if (H5Dget_chunk_info_by_coord(d, off, &mask, &addr, &nb) >= 0 && addr != HADDR_UNDEF)
                    ok = (double)nb == bytes;
            }
        }
        if (!ok) why = "its chunk index does not fit its chunk shape";
    }
    if (pl >= 0) H5Pclose(pl);
    return why;
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
