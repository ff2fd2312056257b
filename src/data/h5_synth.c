// h5_synth.c: `galley data synth`: a synthetic data set written as HDF5 with the conventions of
// h5data.h, and attributes that say how it was made, so it can be regenerated and read back.
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/h5_internal.h"
#include "data/synth_internal.h"
#include "galley/arena.h"
#include "galley/check.h"
#include "galley/h5data.h"

#ifndef GALLEY_VERSION
#define GALLEY_VERSION "dev"
#endif

void h5_synth_default_params(h5_synth_params *p) {
    memset(p, 0, sizeof *p);
    p->kind = SYNTH_SHAPES2D;
    p->split = SPLIT_TRAIN;
    p->n = 256;
    p->size = 32;
    p->seed = 42;
    p->classes = 3;
    p->features = 2;
    p->noise = 0.1;
    p->steps = 64;
    p->years = 2;
    p->val_years = 1;
}

void h5_synth_recipe(const h5_synth_params *p, recipe_t *r) {
    memset(r, 0, sizeof *r);
    r->seed = p->seed;
    r->data.source = DATA_SOURCE_SYNTHETIC;
    r->data.synthetic.kind = p->kind;
    r->data.synthetic.classes = p->classes;
    r->data.synthetic.features = p->features;
    r->data.synthetic.size = p->size;
    r->data.synthetic.channels = p->channels;
    r->data.synthetic.noise = p->noise;
    r->data.synthetic.train_size = p->n;
    r->data.synthetic.val_size = p->n;
    r->data.synthetic.steps = p->steps;
    r->data.synthetic.lead = 1;
}

int16_t h5_counts_from_log(float v) {
    float c = rintf(expm1f(v));
    return (int16_t)(c < 0.0f ? 0.0f : c > 32767.0f ? 32767.0f : c);
}

static void attr_str(hid_t f, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void attr_num(hid_t f, const char *name, double v, int integer) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, integer ? H5T_STD_I64LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int64_t i = (int64_t)v;
    H5Awrite(a, integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, integer ? (const void *)&i : (const void *)&v);
    H5Aclose(a);
    H5Sclose(sp);
}

// What one file holds, and how the reader's recipe keys must be set to read it.
typedef struct {
    const char *x, *y, *layout, *transform, *target;
} naming;

static naming naming_of(const synth_kind *k, const gl_dataset *d) {
    return (naming){k->h5_x, k->h5_y, k->h5_store == SYNTH_STORE_CHANNELS_LAST ? "channels_last" : "channels_first",
                    k->h5_store == SYNTH_STORE_LOG_COUNTS ? "log1p" : "none",
                    d->target == TARGET_CLASS ? "class" : d->target == TARGET_MASK ? "mask" : "values"};
}

static void write_attrs(hid_t f, const h5_synth_params *p, const gl_dataset *d, int64_t first) {
    const synth_kind *k = synth_kind_at(p->kind);
    naming nm = naming_of(k, d);
    attr_str(f, "galley_kind", synth_kind_name(p->kind));
    attr_str(f, "galley_split", p->split == SPLIT_TRAIN ? "train" : "val");
    attr_str(f, "galley_version", GALLEY_VERSION);
    attr_num(f, "galley_seed", (double)p->seed, 1);
    attr_num(f, "galley_samples", (double)d->n, 1);
    attr_num(f, "galley_first_sample", (double)first, 1);
    attr_num(f, "galley_size", (double)p->size, 1);
    attr_num(f, "galley_channels", (double)d->shape.d[0], 1);
    attr_num(f, "galley_classes", (double)d->classes, 1);
    attr_num(f, "galley_noise", p->noise, 0);
    attr_str(f, "galley_x", nm.x);
    attr_str(f, "galley_y", nm.y);
    attr_str(f, "galley_layout", nm.layout);
    attr_str(f, "galley_transform", nm.transform);
    attr_str(f, "galley_target", nm.target);
    attr_str(f, "galley_description", k->h5_about ? k->h5_about : "galley synthetic data set");
}

// Writes samples [first, first + count) of d to file f; stacked adds the sample axis.
static int write_samples(hid_t f, const h5_synth_params *p, const gl_dataset *d, int64_t first, int64_t count,
                         bool stacked) {
    const synth_kind *kind = synth_kind_at(p->kind);
    naming nm = naming_of(kind, d);
    uint64_t dims[GL_MAX_DIMS + 1];
    int rank = 0, rc = 0;
    if (stacked) dims[rank++] = (uint64_t)count;
    const float *x = d->x + first * d->size;
    int chunk = stacked ? 1 : 0;
    if (kind->h5_store == SYNTH_STORE_CHANNELS_LAST) {  // channels last: [.., S, S, C]
        int64_t c_n = d->shape.d[0], area = d->shape.d[1] * d->shape.d[2];
        float *t = gl_xmalloc((size_t)(count * d->size) * sizeof(float));
        for (int64_t i = 0; i < count; i++)
            for (int64_t c = 0; c < c_n; c++)
                for (int64_t v = 0; v < area; v++) t[i * d->size + v * c_n + c] = x[i * d->size + c * area + v];
        dims[rank] = (uint64_t)d->shape.d[1], dims[rank + 1] = (uint64_t)d->shape.d[2], dims[rank + 2] = (uint64_t)c_n;
        rc |= h5_write_array(f, nm.x, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank + 3, dims, t, chunk, p->compress);
        free(t);
    } else {
        for (int k = 0; k < d->shape.ndim; k++) dims[rank + k] = (uint64_t)d->shape.d[k];
        if (kind->h5_store == SYNTH_STORE_LOG_COUNTS) {
            int16_t *t = gl_xmalloc((size_t)(count * d->size) * sizeof(int16_t));
            for (int64_t j = 0; j < count * d->size; j++) t[j] = h5_counts_from_log(x[j]);
            rc |= h5_write_array(f, nm.x, H5T_STD_I16LE, H5T_NATIVE_INT16, rank + d->shape.ndim, dims, t, chunk,
                                 p->compress);
            free(t);
        } else {
            rc |= h5_write_array(f, nm.x, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank + d->shape.ndim, dims, x, chunk,
                                 p->compress);
        }
    }
    if (d->target == TARGET_CLASS) {
        rc |= h5_write_array(f, nm.y, H5T_STD_I32LE, H5T_NATIVE_INT32, stacked ? 1 : 0, dims, d->labels + first,
                             chunk ? 4096 : 0, p->compress);
    } else {
        for (int k = 0; k < d->tshape.ndim; k++) dims[rank + k] = (uint64_t)d->tshape.d[k];
        if (d->target == TARGET_MASK)
            rc |= h5_write_array(f, nm.y, H5T_STD_I32LE, H5T_NATIVE_INT32, rank + d->tshape.ndim, dims,
                                 d->labels + first * d->tsize, chunk, p->compress);
        else
            rc |= h5_write_array(f, nm.y, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank + d->tshape.ndim, dims,
                                 d->values + first * d->tsize, chunk, p->compress);
    }
    write_attrs(f, p, d, first);
    return rc;
}

static int write_file(const char *path, const h5_synth_params *p, const gl_dataset *d, int64_t first, int64_t count,
                      bool stacked, FILE *err) {
    hid_t f = (hid_t)h5_create_file(path);
    if (f < 0) {
        fprintf(err, "galley: error: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = write_samples(f, p, d, first, count, stacked);
    if (H5Fclose(f) < 0) rc = -1;
    if (rc) fprintf(err, "galley: error: writing %s failed (disk full?)\n", path);
    return rc;
}

static void remove_tree(const char *dir, int64_t n) {
    char path[4200];
    for (int64_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/sample-%06lld.h5", dir, (long long)i);
        unlink(path);
    }
    rmdir(dir);
}

int h5_synth_write(const h5_synth_params *p, const char *out, FILE *err) {
    h5_setup(false);
    recipe_t r;
    h5_synth_recipe(p, &r);
    gl_arena a;
    arena_init(&a, data_synth_bytes(&r, p->split) + 4 * GL_ARENA_ALIGN);
    gl_dataset d;
    data_synth_make(&r, p->split, &d, &a);

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    int rc = 0;
    if (!p->per_file) {
        rc = write_file(tmp, p, &d, 0, d.n, true, err);
        if (rc) unlink(tmp);
    } else {
        if (mkdir(tmp, 0777) != 0) {
            fprintf(err, "galley: error: cannot create directory %s: %s\n", tmp, strerror(errno));
            rc = -1;
        }
        for (int64_t i = 0; i < d.n && !rc; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/sample-%06lld.h5", tmp, (long long)i);
            rc = write_file(path, p, &d, i, 1, false, err);
        }
        if (rc) remove_tree(tmp, d.n);
    }
    if (!rc && rename(tmp, out) != 0) {
        fprintf(err, "galley: error: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        if (p->per_file) remove_tree(tmp, d.n);
        else unlink(tmp);
        rc = -1;
    }
    arena_free(&a);
    return rc;
}
