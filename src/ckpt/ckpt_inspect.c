// ckpt_inspect.c: `galley ckpt inspect FILE`: what a checkpoint holds, every checksum verified.
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_h5.h"
#include "galley/check.h"
#include "galley/ckpt.h"
#include "galley/h5data.h"

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *op) {
    (void)info;
    FILE *out = op;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    H5T_class_t c = H5Tget_class(t);
    if (c == H5T_INTEGER) {
        long long v = 0;
        H5Aread(a, H5T_NATIVE_LLONG, &v);
        fprintf(out, "  %-16s %lld\n", name, v);
    } else if (c == H5T_FLOAT) {
        double v = 0;
        H5Aread(a, H5T_NATIVE_DOUBLE, &v);
        fprintf(out, "  %-16s %.10g\n", name, v);
    } else if (c == H5T_STRING && !H5Tis_variable_str(t) && H5Tget_size(t) < 4096) {
        char buf[4096];
        H5Aread(a, t, buf);
        buf[H5Tget_size(t)] = 0;
        fprintf(out, "  %-16s %s\n", name, buf);
    }
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

typedef struct {
    FILE *out;  // NULL: count only
    int64_t tensors, values, bad;
    char first_bad[256];
} visit;

static herr_t ds_cb(hid_t f, const char *name, const H5O_info_t *info, void *op) {
    visit *v = op;
    if (info->type != H5O_TYPE_DATASET || !strcmp(name, "recipe")) return 0;
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[H5S_MAX_RANK] = {0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(ds);
    gl_shape s = {.ndim = nd};
    int64_t n = 1;
    for (int d = 0; d < nd && d < GL_MAX_DIMS; d++) s.d[d] = (int64_t)dims[d], n *= s.d[d];
    char sh[96];
    shape_format(&s, sh, sizeof sh);
    float *buf = gl_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    int rc = nd <= GL_MAX_DIMS ? ck_read_floats(f, name, &s, buf, NULL, 0) : -1;
    free(buf);
    if (v->out)
        fprintf(v->out, "  %-52s %-20s %10lld  %s\n", name, sh, (long long)n,
                rc == 0 ? "ok" : rc == -2 ? "CHECKSUM MISMATCH" : "UNREADABLE");
    if (rc != 0 && !v->first_bad[0]) snprintf(v->first_bad, sizeof v->first_bad, "%s", name);
    v->tensors++;
    v->values += n;
    v->bad += rc != 0;
    return 0;
}

int ckpt_verify(const char *path, int64_t *step, char *err, size_t errlen) {
    h5_setup(false);
    hid_t f = ck_open(path, err, errlen);
    if (f < 0) return -1;
    visit v = {0};
    int rc = 0;
    if (ck_get_i64(f, "step", step)) {
        snprintf(err, errlen, "%s has no step attribute: not a complete checkpoint", path);
        rc = -1;
    } else if (H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_NATIVE, ds_cb, &v, H5O_INFO_BASIC) < 0 || v.bad) {
        snprintf(err, errlen, "%s is damaged: /%s fails its checksum or cannot be read", path,
                 v.first_bad[0] ? v.first_bad : "(its index)");
        rc = -1;
    } else if (v.tensors == 0) {
        snprintf(err, errlen, "%s holds no tensors: not a complete checkpoint", path);
        rc = -1;
    }
    H5Fclose(f);
    return rc;
}

int ckpt_inspect(const char *path, bool recipe, FILE *out, FILE *err) {
    h5_setup(false);
    char why[1024];
    hid_t f = ck_open(path, why, sizeof why);
    if (f < 0) {
        fprintf(err, "galley: error: %s\n", why);
        return -1;
    }
    fprintf(out, "%s\n", path);
    H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, attr_cb, out);
    fprintf(out, "tensors (path, shape, values, checksum):\n");
    visit v = {.out = out};
    H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_NATIVE, ds_cb, &v, H5O_INFO_BASIC);
    fprintf(out, "%lld tensors, %lld values, %lld damaged\n", (long long)v.tensors, (long long)v.values,
            (long long)v.bad);
    if (recipe && H5Lexists(f, "recipe", H5P_DEFAULT) > 0) {
        hid_t ds = H5Dopen2(f, "recipe", H5P_DEFAULT);
        hid_t t = H5Dget_type(ds);
        size_t n = H5Tget_size(t);
        char *text = gl_xcalloc(n + 1, 1);
        H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text);
        fprintf(out, "recipe:\n%s", text);
        free(text);
        H5Tclose(t);
        H5Dclose(ds);
    }
    H5Fclose(f);
    if (v.bad) {
        fprintf(err, "galley: error: %s: %lld tensors are damaged\n", path, (long long)v.bad);
        return -1;
    }
    return 0;
}
