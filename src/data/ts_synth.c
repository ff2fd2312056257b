// ts_synth.c: `galley data synth weather2d OUT`: the weather2d series as the NERSC tutorial's
// yearly files (OUT/train/<year>.h5, OUT/val/<year>.h5, dataset fields [T, C, H, W]) and its
// statistics (OUT/stats/global_means.npy, global_stds.npy, [1, C, 1, 1] over the training files),
// so a recipe with data.source: timeseries reads them as the tutorial's loader does.
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/h5_internal.h"
#include "data/ts_internal.h"
#include "galley/check.h"
#include "galley/h5data.h"

enum { FIRST_YEAR = 1979 };

typedef struct {
    hid_t d, fs, ms;
    int64_t c, area;
    double *sum, *sum2;  // per channel (NULL: not counted)
    int failed;
} year_ctx;

// Time step t of the series into fields[t].
static void write_step(int64_t t, const float *state, void *ctx) {
    year_ctx *y = ctx;
    hsize_t st[4] = {(hsize_t)t, 0, 0, 0}, ct[4];
    H5Sget_simple_extent_dims(y->fs, ct, NULL);  // [T, C, H, W]: one time step of it
    ct[0] = 1;
    H5Sselect_hyperslab(y->fs, H5S_SELECT_SET, st, NULL, ct, NULL);
    if (H5Dwrite(y->d, H5T_NATIVE_FLOAT, y->ms, y->fs, H5P_DEFAULT, state) < 0) y->failed = 1;
    if (y->sum)
        for (int64_t c = 0; c < y->c; c++)
            for (int64_t v = 0; v < y->area; v++) {
                double x = state[c * y->area + v];
                y->sum[c] += x, y->sum2[c] += x * x;
            }
}

static void attr_text(hid_t f, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void attr_int(hid_t f, const char *name, int64_t v) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

// One year file: series `series` of split, written to a temporary name and renamed. 0, or -1.
static int write_year(const h5_synth_params *p, const weather2d_params *w, int split, int64_t series,
                      const char *path, double *sum, double *sum2, FILE *err) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    hid_t f = (hid_t)h5_create_file(tmp);
    if (f < 0) {
        fprintf(err, "galley: error: cannot create %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    hsize_t dims[4] = {(hsize_t)p->steps, (hsize_t)w->channels, (hsize_t)w->h, (hsize_t)w->w};
    hsize_t chunk[4] = {1, 1, dims[2], dims[3]}, mdims[4] = {1, dims[1], dims[2], dims[3]};
    while (chunk[2] > 1 && chunk[2] * chunk[3] * 4 > (1u << 20)) chunk[2] = (chunk[2] + 1) / 2;  // <= 1 MiB
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 4, chunk);
    if (p->compress > 0) H5Pset_shuffle(pl), H5Pset_deflate(pl, (unsigned)p->compress);
    year_ctx y = {.c = w->channels, .area = w->h * w->w, .sum = sum, .sum2 = sum2};
    y.fs = H5Screate_simple(4, dims, NULL);
    // the memory space has the time step's own shape: a flat one sends HDF5 element by element
    // (ts_reader.c's read_raw says what that cost)
    y.ms = H5Screate_simple(4, mdims, NULL);
    y.d = H5Dcreate2(f, "fields", H5T_IEEE_F32LE, y.fs, H5P_DEFAULT, pl, H5P_DEFAULT);
    y.failed = y.d < 0;
    if (!y.failed) weather2d_run(w, split, series, p->steps, write_step, &y);
    attr_text(f, "galley_kind", "weather2d");
    attr_text(f, "galley_split", split == SPLIT_TRAIN ? "train" : "val");
    attr_int(f, "galley_seed", p->seed);
    attr_int(f, "galley_series", series);
    if (y.d >= 0) H5Dclose(y.d);
    H5Sclose(y.fs), H5Sclose(y.ms), H5Pclose(pl);
    if (H5Fclose(f) < 0) y.failed = 1;
    if (!y.failed && rename(tmp, path) != 0) y.failed = 1;
    if (y.failed) {
        fprintf(err, "galley: error: writing %s failed (disk full?)\n", path);
        unlink(tmp);
    }
    return y.failed ? -1 : 0;
}

static int make_dir(const char *path, FILE *err) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) return 0;
    fprintf(err, "galley: error: cannot create directory %s: %s\n", path, strerror(errno));
    return -1;
}

// OUT/stats/global_means.npy and global_stds.npy from the training files' sums (count values each).
static int write_stats(const char *out, int64_t c, const double *sum, const double *sum2, double count, FILE *err) {
    float *m = gl_xmalloc((size_t)c * sizeof(float)), *s = gl_xmalloc((size_t)c * sizeof(float));
    for (int64_t k = 0; k < c; k++) {
        double mean = sum[k] / count, var = sum2[k] / count - mean * mean;
        m[k] = (float)mean;
        s[k] = (float)sqrt(var > 1e-12 ? var : 1e-12);
    }
    int64_t shape[4] = {1, c, 1, 1};
    char path[4200];
    int rc = 0;
    for (int which = 0; which < 2 && !rc; which++) {
        snprintf(path, sizeof path, "%s/stats/%s", out, which ? "global_stds.npy" : "global_means.npy");
        rc = npy_write_f32(path, which ? s : m, 4, shape);
        if (rc) fprintf(err, "galley: error: writing %s failed: %s\n", path, strerror(errno));
    }
    free(m);
    free(s);
    return rc;
}

int h5_synth_write_series(const h5_synth_params *p, const char *out, FILE *err) {
    h5_setup(false);
    weather2d_params w = {(uint64_t)p->seed, p->channels > 0 ? p->channels : 20, p->size / 2, p->size, p->noise};
    char path[4200];
    int rc = make_dir(out, err);
    static const char *const sub[] = {"train", "val", "stats"};
    for (int k = 0; k < 3 && !rc; k++) {
        snprintf(path, sizeof path, "%s/%s", out, sub[k]);
        rc = make_dir(path, err);
    }
    double *sum = gl_xcalloc((size_t)w.channels, sizeof(double)), *sum2 = gl_xcalloc((size_t)w.channels, sizeof(double));
    for (int64_t y = 0; y < p->years + p->val_years && !rc; y++) {
        bool train = y < p->years;
        snprintf(path, sizeof path, "%s/%s/%lld.h5", out, train ? "train" : "val", (long long)(FIRST_YEAR + y));
        rc = write_year(p, &w, train ? SPLIT_TRAIN : SPLIT_VAL, train ? y : y - p->years, path, train ? sum : NULL,
                        train ? sum2 : NULL, err);
    }
    if (!rc) rc = write_stats(out, w.channels, sum, sum2, (double)(p->years * p->steps * w.h * w.w), err);
    free(sum);
    free(sum2);
    return rc;
}
