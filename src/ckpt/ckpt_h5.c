// ckpt_h5.c: attributes, checksummed float datasets and the optimizer's buffers, for checkpoints.
#include "ckpt/ckpt_h5.h"

#include <stdio.h>
#include <string.h>

#include "data/h5_internal.h"  // h5_dataset_damage
#include "galley/check.h"
#include "galley/tfevents.h"  // crc32c

static int attr_write(hid_t obj, const char *name, hid_t type, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, type, v) >= 0 ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int ck_attr_i64(hid_t obj, const char *name, int64_t v) { return attr_write(obj, name, H5T_NATIVE_INT64, &v); }
int ck_attr_f64(hid_t obj, const char *name, double v) { return attr_write(obj, name, H5T_NATIVE_DOUBLE, &v); }

int ck_attr_str(hid_t obj, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = attr_write(obj, name, t, v);
    H5Tclose(t);
    return rc;
}

static int attr_read(hid_t obj, const char *name, hid_t type, void *v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t ft = H5Aget_type(a);
    int ok = H5Tget_class(ft) == H5Tget_class(type);
    H5Tclose(ft);
    int rc = ok && H5Aread(a, type, v) >= 0 ? 0 : -1;
    H5Aclose(a);
    return rc;
}

int ck_get_i64(hid_t obj, const char *name, int64_t *v) { return attr_read(obj, name, H5T_NATIVE_INT64, v); }
int ck_get_f64(hid_t obj, const char *name, double *v) { return attr_read(obj, name, H5T_NATIVE_DOUBLE, v); }

int ck_get_str(hid_t obj, const char *name, char *buf, size_t len) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t ft = H5Aget_type(a);
    int rc = -1;
    if (H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t n = H5Tget_size(ft);
        char tmp[4096];
        if (n <= sizeof tmp && H5Aread(a, ft, tmp) >= 0) {
            tmp[n < sizeof tmp ? n : sizeof tmp - 1] = 0;
            snprintf(buf, len, "%s", tmp);
            rc = 0;
        }
    }
    H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

int ck_write_floats(hid_t f, const char *path, const gl_shape *shape, const float *data) {
    hsize_t dims[GL_MAX_DIMS];
    int64_t n = 1;
    for (int d = 0; d < shape->ndim; d++) dims[d] = (hsize_t)shape->d[d], n *= shape->d[d];
    hid_t sp = shape->ndim ? H5Screate_simple(shape->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(f, path, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int rc = -1;
    if (ds >= 0) {
        rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
        if (rc == 0) rc = ck_attr_i64(ds, "crc32c", crc32c(0, data, sizeof(float) * (size_t)n));
        H5Dclose(ds);
    }
    H5Pclose(lcpl);
    H5Sclose(sp);
    return rc;
}

int ck_read_floats(hid_t f, const char *path, const gl_shape *shape, float *data, char *found, size_t foundlen) {
    if (found && foundlen) found[0] = 0;
    if (H5Lexists(f, path, H5P_DEFAULT) <= 0) return -1;
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    if (h5_dataset_damage(ds)) {  // a damaged header: unreadable
        H5Dclose(ds);
        return -1;
    }
    hid_t sp = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (nd > 0) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    int same = nd == shape->ndim;
    int64_t n = 1;
    for (int d = 0; d < nd && d < H5S_MAX_RANK; d++) {
        if (same && (int64_t)dims[d] != shape->d[d]) same = 0;
        n *= (int64_t)dims[d];
    }
    if (!same) {
        if (found) {
            size_t o = (size_t)snprintf(found, foundlen, "[");
            for (int d = 0; d < nd && o < foundlen; d++)
                o += (size_t)snprintf(found + o, foundlen - o, d ? ", %llu" : "%llu", (unsigned long long)dims[d]);
            if (o < foundlen) snprintf(found + o, foundlen - o, "]");
        }
        H5Dclose(ds);
        return -3;
    }
    int rc = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
    int64_t want;
    if (rc == 0 && (ck_get_i64(ds, "crc32c", &want) || (uint32_t)want != crc32c(0, data, sizeof(float) * (size_t)n)))
        rc = -2;
    H5Dclose(ds);
    return rc;
}

int ck_optim_buffers(const gl_optim *o, const char **names, float **bufs) {
    int n = 0;
    if (o->velocity) names[n] = "velocity", bufs[n++] = o->velocity;
    if (o->m) names[n] = "m", bufs[n++] = o->m;
    if (o->v) names[n] = "v", bufs[n++] = o->v;
    return n;
}

const char *ck_optim_name(int type) { return optim_name(type); }  // the registry's (optim.h)
