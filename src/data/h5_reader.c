// h5_reader.c: one split of a recipe's HDF5 data set, read sample by sample.
//
// Opening checks everything that can be checked without reading the data (files exist and are
// HDF5, datasets exist, ranks, dtypes, shapes agree across files, statistics are complete), so a
// bad data set is a usage error (exit 2) before training starts. Reading a sample reads crops as
// hyperslabs (or, from a contiguous dataset, directly: direct_crop), then converts x to float32,
// checks it is finite, applies log1p and the per-channel normalisation and turns channels-last
// into channels-first in one vectorised pass (transform_simd.c; int16, uint8 and half are read as
// stored, other dtypes HDF5 converts to float32); labels are checked to be in range. Targets are
// never transformed.
//
// Per-sample ranks of x (after the sample axis, if any): 1 = feature vector [F]; 2 = one-channel
// image [H, W]; 3 = [C, H, W] or [H, W, C]; 4 = [C, D, H, W] or [D, H, W, C] (data.layout).
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/h5_internal.h"
#include "data/transform_simd.h"
#include "galley/check.h"
#include "galley/h5data.h"

typedef struct {
    char *path;
    int64_t n, first;  // samples in the file, index of its first sample in the split
} h5file;

struct h5src {
    const char *xname, *yname;
    int per_file, layout, target, transform, normalize;
    int64_t classes, crop;
    h5file *files;
    int nfiles;
    int64_t n;
    int xrank;            // per-sample rank of x on disk
    hsize_t xdims[4];     // per-sample dims of x on disk
    int sd;               // spatial axes (0: feature vectors)
    int64_t c, sp[3];     // channels, spatial extents (full)
    int yrank;
    hsize_t ydims[4];     // per-sample dims of y on disk
    int yfield;           // values with x's spatial shape and layout: cropped and augmented like x
    int yfloat;           // class labels or a mask stored as floats: each must be a whole number
    int64_t yc;           // field target channels
    gl_shape xfull, tfull;
    double *shift, *scale;  // per channel: x' = (t(x) - shift) * scale
    float *fshift, *fscale;  // the same as floats, as applied; NULL without data.normalize
};

struct h5cursor {
    int file;
    hid_t f, dx, dy;
    int fd;            // the same file for direct crop reads (-1: none)
    int64_t xat, yat;  // file offset of x's and y's raw data for direct crop reads; -1: through HDF5
    char *span;        // one plane's rows of a crop, read directly
    size_t span_len;
    float *scratch;  // one full sample (x or field target) as read, before xf_sample
    xf_dtype xdt;    // x as read: int16, uint8 and half as stored (converted by xf_sample), else float32
    hid_t xmem;      // its HDF5 memory type
    hid_t half;      // an IEEE half memory type (made once)
    int32_t *iscratch;
    double *dscratch;  // one sample's labels or mask as stored floats (yfloat)
    bool nonfinite;  // the last read failed because x holds NaN or Inf
    void *runx, *runy;         // a run's x and y as stored, where they need converting (h5src_read_run)
    size_t runx_len, runy_len;
};

// ---- file lists ------------------------------------------------------------------------------

static int add_file(h5src *s, int *cap, const char *path) {
    if (s->nfiles == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        h5file *nf = realloc(s->files, (size_t)*cap * sizeof *nf);
        GL_CHECK(nf, "out of memory listing files");
        s->files = nf;
    }
    s->files[s->nfiles++] = (h5file){gl_xstrdup(path), 0, 0};
    return 0;
}

static int has_glob(const char *p) { return strpbrk(p, "*?[") != NULL; }

// `where`: "FILE:LINE:COL: error: KEY" of the recipe key that named the files (recipe_mark),
// the start of every message about them.
static int add_pattern(h5src *s, int *cap, const char *pat, const char *where, FILE *err) {
    if (!has_glob(pat)) return add_file(s, cap, pat);
    glob_t g;
    int rc = glob(pat, 0, NULL, &g);
    if (rc != 0) {
        fprintf(err, "%s: no file matches '%s'\n", where, pat);
        if (rc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) add_file(s, cap, g.gl_pathv[i]);  // glob sorts them
    globfree(&g);
    return 0;
}

static char *trim(char *t) {
    while (*t == ' ' || *t == '\t') t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\n' || t[n - 1] == '\r')) t[--n] = 0;
    return t;
}

static int list_files(h5src *s, const char *spec, const char *where, FILE *err) {
    int cap = 0;
    char *buf = gl_xstrdup(spec), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        if (!*tok) continue;
        if (tok[0] != '@') {
            rc = add_pattern(s, &cap, tok, where, err);
            continue;
        }
        FILE *lf = fopen(tok + 1, "r");
        if (!lf) {
            fprintf(err, "%s: cannot read the file list %s: %s\n", where, tok + 1, strerror(errno));
            rc = -1;
            break;
        }
        char line[4096];
        while (!rc && fgets(line, sizeof line, lf)) {
            char *l = trim(line);
            if (*l && *l != '#') rc = add_pattern(s, &cap, l, where, err);
        }
        fclose(lf);
    }
    free(buf);
    if (!rc && s->nfiles == 0) {
        fprintf(err, "%s: names no files\n", where);
        rc = -1;
    }
    return rc;
}

// ---- checks ------------------------------------------------------------------------------------

static const char *class_word(H5T_class_t c) {
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    default: return "unsupported";
    }
}

static void type_word(hid_t t, char *buf, size_t len) {
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER)
        snprintf(buf, len, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", 8 * sz);
    else if (c == H5T_FLOAT)
        snprintf(buf, len, "float%zu", 8 * sz);
    else
        snprintf(buf, len, "%s", class_word(c));
}

// Names at the file's top level (for "no such dataset" errors).
static herr_t name_cb(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    (void)g, (void)info;
    char *buf = op, pn[128];
    size_t n = strlen(buf);
    h5_printable(name, pn, sizeof pn);
    if (n < 200) snprintf(buf + n, 256 - n, "%s%s", n ? ", " : "", pn);
    return 0;
}

// Whether the top level lists the name op points to (stops the walk when it does).
static herr_t has_name_cb(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    (void)g, (void)info;
    return strcmp(name, (const char *)op) == 0;
}

static void shape_words(int rank, const hsize_t *d, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && k < len; i++) k += (size_t)snprintf(buf + k, len - k, i ? ", %llu" : "%llu", (unsigned long long)d[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

// where: as for add_pattern.
static hid_t open_file(const char *path, const char *where, FILE *err) {
    hid_t f = h5_open_read(path);
    if (f < 0 && err) {
        if (access(path, R_OK) != 0)
            fprintf(err, "%s: cannot open %s: %s\n", where, path, strerror(errno));
        else
            fprintf(err, "%s: %s is not a readable HDF5 file (truncated or corrupt?)\n", where, path);
    }
    return f;
}

// Opens dataset name of f and returns its dims (the whole dataset); checks the dtype.
static hid_t open_dataset(hid_t f, const char *path, const char *name, const char *key, int *rank, hsize_t *dims,
                          FILE *err) {
    htri_t there = H5Lexists(f, name, H5P_DEFAULT);
    bool linked = there > 0;
    hid_t d = linked ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    // A top-level name whose lookup fails, or that the top level lists but the lookup misses.
    if (!strchr(name, '/') && (there < 0 || (there == 0 && H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL,
                                                                       has_name_cb, (void *)name) > 0))) {
        fprintf(err, "galley: error: %s: looking up '%s' (%s) failed: a damaged file (truncated or corrupt?)\n", path,
                name, key);
        return -1;
    }
    if (d < 0 && linked) {  // the name is there, what it points to is not a readable dataset
        fprintf(err, "galley: error: %s: '%s' (%s) is there but cannot be opened as a dataset (a group, or a "
                     "damaged object: truncated or corrupt file?)\n", path, name, key);
        return -1;
    }
    if (d < 0) {
        char names[256] = "";
        H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, name_cb, names);
        fprintf(err, "galley: error: %s: no dataset '%s' (%s) in this file; its top level holds: %s\n", path, name,
                key, names[0] ? names : "nothing");
        return -1;
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    int ok = (c == H5T_INTEGER && (sz == 1 || sz == 2 || sz == 4 || sz == 8)) ||
             (c == H5T_FLOAT && (sz == 2 || sz == 4 || sz == 8));
    *rank = H5Sget_simple_extent_ndims(sp);
    if (*rank > 0 && *rank <= 6) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    if (!ok || *rank < 0 || *rank > 6) {
        char tw[32];
        type_word(t, tw, sizeof tw);
        fprintf(err, "galley: error: %s: dataset '%s' (%s) has dtype %s; expected integers (uint8, int16, ...) or "
                     "floats (float16, float32, float64)\n", path, name, key, tw);
        H5Tclose(t);
        H5Dclose(d);
        return -1;
    }
    H5Tclose(t);
    const char *damage = h5_dataset_damage(d);
    if (damage) {
        fprintf(err, "galley: error: %s: dataset '%s' (%s) is damaged (%s): truncated or corrupt file?\n", path, name,
                key, damage);
        H5Dclose(d);
        return -1;
    }
    return d;
}

// Class labels and masks are whole numbers in [0, data.classes): an integer dataset, or floats
// that hold whole numbers exactly (numpy users often save labels as float64); 0.5 is no class.
// 0 for a label, 1 for a value that is not a whole number, 2 for one out of range.
static int label_bad(double v, int64_t classes) {
    if (!(v == floor(v))) return 1;  // NaN and Inf too
    return v < 0 || v >= (double)classes ? 2 : 0;
}

static void label_message(char *msg, size_t len, const h5src *s, const char *path, int64_t i, int64_t j, int64_t v,
                          double val) {
    if (label_bad(val, s->classes) == 1)
        snprintf(msg, len, "%s: '%s' sample %lld (index %lld in the file) has label %.17g at element %lld: not a "
                 "whole number; class labels and masks must be integers (an integer dataset, or floats that hold "
                 "whole numbers)", path, s->yname, (long long)i, (long long)j, val, (long long)v);
    else
        snprintf(msg, len, "%s: '%s' sample %lld (index %lld in the file) has label %.17g at element %lld; "
                 "data.classes is %lld, so labels must be in [0, %lld)", path, s->yname, (long long)i, (long long)j,
                 val, (long long)v, (long long)s->classes, (long long)s->classes);
}

// Float labels in file fi, checked before training: every class label of the file, or a mask's
// first sample in the first file (the rest are checked as they are read). 0, or -1 (printed).
static int check_float_labels(const h5src *s, int fi, FILE *err) {
    if (s->target == DATA_TARGET_MASK && fi > 0) return 0;
    const char *path = s->files[fi].path;
    int64_t per = shape_size(&s->tfull), n = s->target == DATA_TARGET_MASK ? 1 : s->files[fi].n;
    int64_t block = per >= 65536 ? 1 : 65536 / per;
    hid_t f = h5_open_read(path);
    hid_t d = f >= 0 ? H5Dopen2(f, s->yname, H5P_DEFAULT) : -1;
    double *buf = gl_xmalloc((size_t)(block * per) * sizeof *buf);
    int rc = 0;
    for (int64_t j0 = 0; j0 < n && rc == 0; j0 += block) {
        int64_t nb = n - j0 < block ? n - j0 : block;
        herr_t r = -1;
        if (d >= 0 && s->per_file) {
            r = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
        } else if (d >= 0) {
            hsize_t st[8] = {(hsize_t)j0}, ct[8] = {(hsize_t)nb};
            for (int k = 0; k < s->yrank; k++) st[1 + k] = 0, ct[1 + k] = s->ydims[k];
            hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1 + s->yrank, ct, NULL);
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL);
            r = H5Dread(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf);
            H5Sclose(ms);
            H5Sclose(fs);
        }
        if (r < 0) {
            fprintf(err, "galley: error: %s: reading '%s' failed: truncated or corrupt file?\n", path, s->yname);
            rc = -1;
        }
        for (int64_t q = 0; rc == 0 && q < nb * per; q++)
            if (label_bad(buf[q], s->classes)) {
                char m[512];
                int64_t j = j0 + q / per;
                label_message(m, sizeof m, s, path, s->files[fi].first + j, j, q % per, buf[q]);
                fprintf(err, "galley: error: %s\n", m);
                rc = -1;
            }
    }
    free(buf);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    return rc;
}

static int same_dims(int r1, const hsize_t *a, int r2, const hsize_t *b) {
    if (r1 != r2) return 0;
    for (int i = 0; i < r1; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

// Interprets x's per-sample dims (first file) into channels and spatial axes.
static int shape_x(h5src *s, const char *path, FILE *err) {
    const hsize_t *d = s->xdims;
    switch (s->xrank) {
    case 1: s->sd = 0, s->c = (int64_t)d[0]; break;
    case 2: s->sd = 2, s->c = 1, s->sp[0] = (int64_t)d[0], s->sp[1] = (int64_t)d[1]; break;
    case 3:
    case 4:
        s->sd = s->xrank - 1;
        s->c = (int64_t)(s->layout == DATA_LAYOUT_CHANNELS_FIRST ? d[0] : d[s->sd]);
        for (int k = 0; k < s->sd; k++) s->sp[k] = (int64_t)d[k + (s->layout == DATA_LAYOUT_CHANNELS_FIRST)];
        break;
    default: {
        char sh[96];
        shape_words(s->xrank, d, sh, sizeof sh);
        fprintf(err, "galley: error: %s: dataset '%s' has per-sample shape %s (rank %d); expected rank 1 (features), "
                     "2 (H, W), 3 (C, H, W) or 4 (C, D, H, W)%s\n", path, s->xname, sh, s->xrank,
                s->per_file ? "" : " after the sample axis");
        return -1;
    }
    }
    s->xfull.ndim = 1 + s->sd;
    s->xfull.d[0] = s->c;
    for (int k = 0; k < s->sd; k++) s->xfull.d[1 + k] = s->sp[k];
    return 0;
}

static int shape_y(h5src *s, const char *path, FILE *err) {
    char sh[96], want[96];
    shape_words(s->yrank, s->ydims, sh, sizeof sh);
    if (s->target == DATA_TARGET_CLASS) {
        if (s->yrank == 0 || (s->yrank == 1 && s->ydims[0] == 1)) {
            s->tfull = shape_1d(1);
            return 0;
        }
        fprintf(err, "galley: error: %s: dataset '%s' has per-sample shape %s; class labels (data.target: class) "
                     "need one integer per sample\n", path, s->yname, sh);
        return -1;
    }
    if (s->target == DATA_TARGET_MASK) {
        hsize_t sp[3];
        for (int k = 0; k < s->sd; k++) sp[k] = (hsize_t)s->sp[k];
        if (s->sd > 0 && same_dims(s->yrank, s->ydims, s->sd, sp)) {
            s->tfull.ndim = s->sd;
            for (int k = 0; k < s->sd; k++) s->tfull.d[k] = s->sp[k];
            return 0;
        }
        shape_words(s->sd, sp, want, sizeof want);
        fprintf(err, "galley: error: %s: dataset '%s' has per-sample shape %s; a mask (data.target: mask) needs x's "
                     "spatial shape %s\n", path, s->yname, sh, want);
        return -1;
    }
    // values: a field shaped like x (any channels), or a vector/array of numbers.
    if (s->sd > 0 && s->yrank == s->xrank && s->xrank >= 3) {
        int cf = s->layout == DATA_LAYOUT_CHANNELS_FIRST, match = 1;
        for (int k = 0; k < s->sd; k++) match &= s->ydims[k + cf] == (hsize_t)s->sp[k];
        if (match) {
            s->yfield = 1;
            s->yc = (int64_t)(cf ? s->ydims[0] : s->ydims[s->sd]);
            s->tfull.ndim = 1 + s->sd;
            s->tfull.d[0] = s->yc;
            for (int k = 0; k < s->sd; k++) s->tfull.d[1 + k] = s->sp[k];
            return 0;
        }
    }
    if (s->yrank > GL_MAX_DIMS) {
        fprintf(err, "galley: error: %s: dataset '%s' has per-sample shape %s: too many axes\n", path, s->yname, sh);
        return -1;
    }
    if (s->yrank == 0) s->tfull = shape_1d(1);
    s->tfull.ndim = s->yrank ? s->yrank : 1;
    for (int k = 0; k < s->yrank; k++) s->tfull.d[k] = (int64_t)s->ydims[k];
    if (s->crop > 0 && s->sd > 0 && s->yrank >= 2)
        fprintf(err, "galley: warning: %s: '%s' is not shaped like x's samples, so data.crop leaves it whole\n", path,
                s->yname);
    return 0;
}

// Reads a per-channel statistic from the stats file: the first of names that exists.
static int read_stat(hid_t f, const char *path, const char *const *names, int64_t c, double *out, FILE *err) {
    for (int i = 0; names[i]; i++) {
        if (H5Lexists(f, names[i], H5P_DEFAULT) <= 0) continue;
        hid_t d = H5Dopen2(f, names[i], H5P_DEFAULT);
        if (d < 0 || h5_dataset_damage(d)) {
            fprintf(err, "galley: error: %s: '%s' is there but cannot be read as a dataset (a group, or a damaged "
                         "object: truncated or corrupt file?)\n", path, names[i]);
            if (d >= 0) H5Dclose(d);
            return -1;
        }
        hid_t sp = H5Dget_space(d);
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        H5Sclose(sp);
        if (n != c && n != 1) {
            fprintf(err, "galley: error: %s: '%s' has %lld values; expected one per channel (%lld)\n", path, names[i],
                    (long long)n, (long long)c);
            H5Dclose(d);
            return -1;
        }
        double *v = gl_xmalloc((size_t)n * sizeof(double));
        herr_t rc = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        H5Dclose(d);
        for (int64_t k = 0; k < c; k++) out[k] = v[n == 1 ? 0 : k];
        free(v);
        if (rc < 0) fprintf(err, "galley: error: %s: cannot read '%s'\n", path, names[i]);
        return rc < 0 ? -1 : 0;
    }
    fprintf(err, "galley: error: %s: no dataset '%s' for the normalisation statistics\n", path, names[0]);
    return -1;
}

static int from_recipe(const recipe_t *r, const gl_floats *f, int64_t c, double *out, const char *key, FILE *err) {
    if (f->n != 1 && f->n != c) {
        char where[512];
        recipe_where(r, key, where, sizeof where);
        fprintf(err, "%s: %d values; give one, or one per channel (the data has %lld)\n", where, f->n, (long long)c);
        return -1;
    }
    for (int64_t k = 0; k < c; k++) out[k] = f->v[f->n == 1 ? 0 : k];
    return 0;
}

static int load_stats(h5src *s, const recipe_t *r, FILE *err) {
    int64_t c = s->c;
    s->shift = gl_xcalloc((size_t)c, sizeof(double));
    s->scale = gl_xcalloc((size_t)c, sizeof(double));
    for (int64_t k = 0; k < c; k++) s->scale[k] = 1.0;
    if (s->normalize == DATA_NORM_NONE) return 0;
    int std = s->normalize == DATA_NORM_STANDARD;
    const gl_floats *a = std ? &r->data.mean : &r->data.min, *b = std ? &r->data.std : &r->data.max;
    double *lo = gl_xcalloc((size_t)c, sizeof(double)), *hi = gl_xcalloc((size_t)c, sizeof(double));
    int rc = 0;
    if (a->n == 0 || b->n == 0) {
        if (!r->data.stats) {
            char where[512];
            recipe_where(r, "data.normalize", where, sizeof where);
            fprintf(err, "%s: %s, but data.%s/%s are not given and data.stats names no file\n", where,
                    std ? "standard" : "minmax", std ? "mean" : "min", std ? "std" : "max");
            rc = -1;
        } else {
            char where[512];
            recipe_where(r, "data.stats", where, sizeof where);
            hid_t f = open_file(r->data.stats, where, err);
            if (f < 0) {
                rc = -1;
            } else {
                static const char *const mean_n[] = {"mean", NULL}, *const std_n[] = {"std", NULL};
                static const char *const min_n[] = {"min", "climate/minval", NULL};
                static const char *const max_n[] = {"max", "climate/maxval", NULL};
                if (a->n == 0) rc |= read_stat(f, r->data.stats, std ? mean_n : min_n, c, lo, err);
                if (b->n == 0) rc |= read_stat(f, r->data.stats, std ? std_n : max_n, c, hi, err);
                H5Fclose(f);
            }
        }
    }
    if (a->n) rc |= from_recipe(r, a, c, lo, std ? "data.mean" : "data.min", err);
    if (b->n) rc |= from_recipe(r, b, c, hi, std ? "data.std" : "data.max", err);
    for (int64_t k = 0; k < c && !rc; k++) {
        double span = std ? hi[k] : hi[k] - lo[k];
        if (!(span > 0) || !isfinite(span)) {
            char where[512];  // the recipe's values, or data.stats' file
            recipe_where(r, (std ? b : a)->n ? (std ? "data.std" : "data.max") : "data.stats", where, sizeof where);
            fprintf(err, "%s: channel %lld: %s; normalising would divide by %g\n", where, (long long)k,
                    std ? "std is not positive" : "max is not above min", span);
            rc = -1;
        }
        s->shift[k] = lo[k];
        s->scale[k] = 1.0 / span;
    }
    free(lo);
    free(hi);
    return rc;
}

// ---- opening -----------------------------------------------------------------------------------

// Opens file i of s: its x and y datasets, their sample count and per-sample shapes (the first
// file sets them, the others must match), and float class labels checked. 0, or -1 (printed).
static int open_one_file(h5src *s, int i, const char *where, FILE *err) {
    const char *path = s->files[i].path;
    hid_t f = open_file(path, where, err);
    if (f < 0) return -1;
    int xr, yr;
    hsize_t xd[8], yd[8];
    hid_t dx = open_dataset(f, path, s->xname, "the inputs, x", &xr, xd, err);
    hid_t dy = dx < 0 ? -1 : open_dataset(f, path, s->yname, "the targets, y", &yr, yd, err);
    int yf = 0;  // class labels or a mask stored as floats: checked below
    if (dy >= 0 && s->target != DATA_TARGET_VALUES) {
        hid_t t = H5Dget_type(dy);
        yf = H5Tget_class(t) == H5T_FLOAT;
        H5Tclose(t);
        s->yfloat |= yf;
    }
    if (dx >= 0) H5Dclose(dx);
    if (dy >= 0) H5Dclose(dy);
    H5Fclose(f);
    if (dx < 0 || dy < 0) return -1;
    int64_t n = 1;
    const hsize_t *xs = xd, *ys = yd;
    if (!s->per_file) {
        if (xr < 1 || yr < 1) {
            fprintf(err, "galley: error: %s: '%s' has no sample axis (rank %d); with data.samples: stacked the first "
                         "axis of x and y indexes samples (per_file: one sample per file)\n",
                    path, xr < 1 ? s->xname : s->yname, xr < 1 ? xr : yr);
            return -1;
        }
        if (xd[0] != yd[0]) {
            fprintf(err, "galley: error: %s: '%s' holds %llu samples but '%s' holds %llu\n", path, s->xname,
                    (unsigned long long)xd[0], s->yname, (unsigned long long)yd[0]);
            return -1;
        }
        n = (int64_t)xd[0], xr--, yr--, xs++, ys++;
    }
    if (i == 0) {
        s->xrank = xr, s->yrank = yr;
        memcpy(s->xdims, xs, sizeof(hsize_t) * (size_t)(xr > 4 ? 4 : xr));
        memcpy(s->ydims, ys, sizeof(hsize_t) * (size_t)(yr > 4 ? 4 : yr));
        if (yr > 4) {
            fprintf(err, "galley: error: %s: '%s' has too many axes (%d per sample)\n", path, s->yname, yr);
            return -1;
        }
        if (shape_x(s, path, err) || shape_y(s, path, err)) return -1;
    } else if (!same_dims(xr, xs, s->xrank, s->xdims) || !same_dims(yr, ys, s->yrank, s->ydims)) {
        int bad_x = !same_dims(xr, xs, s->xrank, s->xdims);
        char a[96], b[96];
        shape_words(bad_x ? s->xrank : s->yrank, bad_x ? s->xdims : s->ydims, a, sizeof a);
        shape_words(bad_x ? xr : yr, bad_x ? xs : ys, b, sizeof b);
        fprintf(err, "galley: error: inconsistent files: '%s' has per-sample shape %s in %s but %s in %s\n",
                bad_x ? s->xname : s->yname, a, s->files[0].path, b, path);
        return -1;
    }
    s->files[i].n = n;
    s->files[i].first = s->n;
    s->n += n;
    if (yf && check_float_labels(s, i, err)) return -1;
    return 0;
}

int h5src_open(h5src **out, const recipe_t *r, int split, FILE *err) {
    *out = NULL;
    h5_setup(r->data.file_locking);
    h5src *s = gl_xcalloc(1, sizeof *s);
    const char *files = split == SPLIT_TRAIN ? r->data.train.files : r->data.val.files;
    const char *key = split == SPLIT_TRAIN ? "data.train.files" : "data.val.files";
    s->xname = split == SPLIT_TRAIN ? r->data.train.x : r->data.val.x;
    s->yname = split == SPLIT_TRAIN ? r->data.train.y : r->data.val.y;
    s->per_file = r->data.samples == DATA_SAMPLES_PER_FILE;
    s->layout = r->data.layout;
    s->target = r->data.target;
    s->transform = r->data.transform;
    s->normalize = r->data.normalize;
    s->classes = r->data.target == DATA_TARGET_VALUES ? 0 : r->data.classes;
    s->crop = r->data.crop;
    char where[512];
    recipe_where(r, key, where, sizeof where);
    if (!files || list_files(s, files, where, err) != 0) goto fail;

    for (int i = 0; i < s->nfiles; i++)
        if (open_one_file(s, i, where, err)) goto fail;
    if (s->n == 0) {
        fprintf(err, "%s: the files hold no samples\n", where);
        goto fail;
    }
    if (s->crop > 0) {
        char cw[512];
        recipe_where(r, "data.crop", cw, sizeof cw);
        if (s->sd == 0) {
            fprintf(err, "%s: %lld, but the samples are feature vectors (no spatial axes)\n", cw, (long long)s->crop);
            goto fail;
        }
        for (int k = 0; k < s->sd; k++)
            if (s->crop > s->sp[k]) {
                fprintf(err, "%s: %lld, but spatial axis %d of the samples in %s is only %lld\n", cw,
                        (long long)s->crop, k, s->files[0].path, (long long)s->sp[k]);
                goto fail;
            }
    }
    if (load_stats(s, r, err)) goto fail;
    if (s->normalize != DATA_NORM_NONE) {
        s->fshift = gl_xmalloc((size_t)s->c * sizeof(float));
        s->fscale = gl_xmalloc((size_t)s->c * sizeof(float));
        for (int64_t k = 0; k < s->c; k++) s->fshift[k] = (float)s->shift[k], s->fscale[k] = (float)s->scale[k];
    }
    *out = s;
    return 0;
fail:
    h5src_free(s);
    return GL_EXIT_USAGE;
}

void h5src_free(h5src *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) free(s->files[i].path);
    free(s->files);
    free(s->shift);
    free(s->scale);
    free(s->fshift);
    free(s->fscale);
    free(s);
}

void h5src_full(const h5src *s, gl_shape *shape, gl_shape *tshape) {
    *shape = s->xfull;
    *tshape = s->tfull;
}

void h5src_describe(const h5src *s, gl_dataset *d) {
    memset(d, 0, sizeof *d);
    d->n = s->n;
    d->shape = s->xfull;
    d->tshape = s->tfull;
    if (s->crop > 0) {
        for (int k = 0; k < s->sd; k++) d->shape.d[1 + k] = s->crop;
        if (s->target == DATA_TARGET_MASK)
            for (int k = 0; k < s->sd; k++) d->tshape.d[k] = s->crop;
        if (s->yfield)
            for (int k = 0; k < s->sd; k++) d->tshape.d[1 + k] = s->crop;
    }
    d->target = s->target == DATA_TARGET_CLASS ? TARGET_CLASS : s->target == DATA_TARGET_MASK ? TARGET_MASK : TARGET_VALUES;
    d->classes = s->classes;
    d->size = shape_size(&d->shape);
    d->tsize = shape_size(&d->tshape);
}

int h5src_files(const h5src *s) { return s->nfiles; }
const char *h5src_file(const h5src *s, int i) { return s->files[i].path; }
int64_t h5src_crop(const h5src *s) { return s->crop; }
int h5src_spatial_dims(const h5src *s) { return s->sd; }

void h5src_set_path(h5src *s, int i, const char *path) {
    free(s->files[i].path);
    s->files[i].path = gl_xstrdup(path);
}

int h5src_file_of(const h5src *s, int64_t i, int64_t *local) {
    int lo = 0, hi = s->nfiles - 1;
    while (lo < hi) {  // last file whose first sample is <= i
        int mid = (lo + hi + 1) / 2;
        if (s->files[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    *local = i - s->files[lo].first;
    return lo;
}

// ---- reading -----------------------------------------------------------------------------------

h5cursor *h5cursor_new(const h5src *s) {
    h5cursor *c = gl_xcalloc(1, sizeof *c);
    c->file = -1;
    c->f = c->dx = c->dy = -1;
    c->fd = -1;
    c->xat = c->yat = -1;
    c->half = H5Tcopy(H5T_IEEE_F32LE);  // as h5py makes numpy's float16
    H5Tset_fields(c->half, 15, 10, 5, 0, 10);
    H5Tset_size(c->half, 2);
    H5Tset_ebias(c->half, 15);
    int64_t big = shape_size(&s->xfull), t = shape_size(&s->tfull);
    c->scratch = gl_xmalloc((size_t)(big > t ? big : t) * sizeof(float));
    c->iscratch = gl_xmalloc((size_t)t * sizeof(int32_t));
    if (s->yfloat) c->dscratch = gl_xmalloc((size_t)t * sizeof(double));
    return c;
}

static void cursor_close(h5cursor *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->xat = c->yat = -1;
    if (c->dx >= 0) H5Dclose(c->dx);
    if (c->dy >= 0) H5Dclose(c->dy);
    if (c->f >= 0) H5Fclose(c->f);
    c->f = c->dx = c->dy = -1;
    c->file = -1;
}

bool h5cursor_nonfinite(const h5cursor *c) { return c->nonfinite; }

void h5cursor_free(h5cursor *c) {
    if (!c) return;
    cursor_close(c);
    if (c->half >= 0) H5Tclose(c->half);
    free(c->scratch);
    free(c->span);
    free(c->iscratch);
    free(c->dscratch);
    free(c->runx);
    free(c->runy);
    free(c);
}

// Reads the hyperslab of dataset d: the sample axis (stacked: index j), then per-sample axes
// with start[k] and count[k] (rank r). type: memory type.
static herr_t read_slab(hid_t d, const h5src *s, int64_t j, int r, const hsize_t *start, const hsize_t *count,
                        hid_t type, void *buf) {
    hsize_t st[8], ct[8];
    int k = 0;
    if (!s->per_file) st[k] = (hsize_t)j, ct[k] = 1, k++;
    for (int q = 0; q < r; q++, k++) st[k] = start[q], ct[k] = count[q];
    hid_t fs = H5Dget_space(d);
    herr_t rc;
    if (k == 0) {
        rc = H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    } else {
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL);
        hid_t ms = H5Screate_simple(k, ct, NULL);
        rc = H5Dread(d, type, ms, fs, H5P_DEFAULT, buf);
        H5Sclose(ms);
    }
    H5Sclose(fs);
    return rc;
}

// x's stored dtype: int16, uint8 and IEEE half are read as stored and converted by xf_sample
// (HDF5's own conversion is element by element); anything else HDF5 converts to float32.
static void cursor_pick_xtype(h5cursor *c) {
    hid_t t = H5Dget_type(c->dx);
    H5T_class_t cl = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    c->xdt = XF_F32, c->xmem = H5T_NATIVE_FLOAT;
    if (cl == H5T_INTEGER && sz == 2 && H5Tget_sign(t) == H5T_SGN_2) {
        c->xdt = XF_I16, c->xmem = H5T_NATIVE_SHORT;
    } else if (cl == H5T_INTEGER && sz == 1 && H5Tget_sign(t) == H5T_SGN_NONE) {
        c->xdt = XF_U8, c->xmem = H5T_NATIVE_UCHAR;
    } else if (cl == H5T_FLOAT && sz == 2 && c->half >= 0) {
        size_t sp, ep, es, mp, ms;
        if (H5Tget_fields(t, &sp, &ep, &es, &mp, &ms) >= 0 && sp == 15 && ep == 10 && es == 5 && mp == 0 &&
            ms == 10 && H5Tget_ebias(t) == 15)
            c->xdt = XF_F16, c->xmem = c->half;
    }
    H5Tclose(t);
}

// pread of exactly len bytes: a signal (EINTR) or a short count (Lustre, NFS) reads on, as
// HDF5's own file driver does. 0, or -1 at the end of the file or on an error.
static int pread_full(int fd, char *buf, size_t len, off_t at) {
    while (len > 0) {
        ssize_t got = pread(fd, buf, len, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        buf += got, len -= (size_t)got, at += got;
    }
    return 0;
}

// Crops by HDF5 hyperslab move one row at a time and read whole planes (the SC22 U-Net's 64^3
// of a 128^3 volume: 4x the bytes, one copy per row). Where a dataset's raw data lies in the
// file as one block (contiguous layout, no filters, stored as the memory type), a channels-first
// crop is read directly instead: one pread per plane of the rows it covers. The offset HDF5 gives
// is checked once against an HDF5 read of the first elements; -1: read through HDF5.
static int64_t direct_offset(h5cursor *c, hid_t d, hid_t mtype, const char *path) {
    hid_t pl = H5Dget_create_plist(d), t = H5Dget_type(d), sp = H5Dget_space(d);
    bool ok = pl >= 0 && H5Pget_layout(pl) == H5D_CONTIGUOUS && H5Pget_nfilters(pl) == 0 &&
              H5Pget_external_count(pl) == 0 && H5Tequal(t, mtype) > 0;
    haddr_t at = ok ? H5Dget_offset(d) : HADDR_UNDEF;
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    size_t es = H5Tget_size(mtype);
    int64_t rc = -1;
    int rank = H5Sget_simple_extent_ndims(sp);
    if (at != HADDR_UNDEF && n > 0 && rank >= 1 && rank <= 8) {
        if (c->fd < 0) c->fd = open(path, O_RDONLY | O_CLOEXEC);
        hsize_t dims[8], st[8] = {0}, ct[8];
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int i = 0; i < rank; i++) ct[i] = 1;
        ct[rank - 1] = dims[rank - 1] < 256 / es ? dims[rank - 1] : 256 / es;  // the first elements stored
        size_t len = ct[rank - 1] * es;
        unsigned char a[256], b[256];
        hid_t ms = H5Screate_simple(1, &ct[rank - 1], NULL), fs = H5Scopy(sp);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL);
        if (c->fd >= 0 && H5Dread(d, mtype, ms, fs, H5P_DEFAULT, a) >= 0 &&
            pread(c->fd, b, len, (off_t)at) == (ssize_t)len && memcmp(a, b, len) == 0)
            rc = (int64_t)at;
        H5Sclose(ms);
        H5Sclose(fs);
    }
    H5Sclose(sp);
    H5Tclose(t);
    if (pl >= 0) H5Pclose(pl);
    return rc;
}

// The crop at off (spatial axes, channels first) of sample j of a dataset whose raw data starts at
// file offset at, into out [ch, crop...]. es: element size. 0, or -1 (a short read).
static int direct_crop(const h5src *s, h5cursor *c, int64_t at, int64_t j, int64_t ch, const int64_t *off, size_t es,
                       void *out) {
    int64_t e[3] = {1, 1, 1}, o[3] = {0, 0, 0}, n[3] = {1, 1, 1};
    for (int k = 0; k < s->sd; k++) e[3 - s->sd + k] = s->sp[k], o[3 - s->sd + k] = off[k], n[3 - s->sd + k] = s->crop;
    size_t len = (size_t)((n[1] - 1) * e[2] + n[2]) * es;  // one plane's rows of the crop
    if (c->span_len < len) {
        free(c->span);
        c->span = gl_xmalloc(len);
        c->span_len = len;
    }
    int64_t sample = s->per_file ? 0 : j;
    char *dst = out;
    for (int64_t q = 0; q < ch; q++)
        for (int64_t z = 0; z < n[0]; z++) {
            int64_t first = (((sample * ch + q) * e[0] + o[0] + z) * e[1] + o[1]) * e[2] + o[2];
            if (pread_full(c->fd, c->span, len, (off_t)(at + first * (int64_t)es)) != 0) return -1;
            for (int64_t y = 0; y < n[1]; y++, dst += (size_t)n[2] * es)
                memcpy(dst, c->span + (size_t)(y * e[2]) * es, (size_t)n[2] * es);
        }
    return 0;
}

// Reads a channels-first or channels-last array (x, or a field target with ch channels) of
// memory type mtype, cropped at off (NULL: whole), into the cursor's scratch, then xf_sample with
// p (dtype, transform, normalisation; c, vol and layout are set here) lands it in out, channels
// first. A float32 channels-first array with nothing to change is read straight into out.
// 0; -1: the read failed; -2: p->check found NaN or Inf, named by bad_c, bad_v, bad.
static int read_field(const h5src *s, h5cursor *c, hid_t d, int64_t j, int64_t ch, const int64_t *off, hid_t mtype,
                      xf_params *p, float *out, int64_t *bad_c, int64_t *bad_v, float *bad) {
    hsize_t start[4] = {0}, count[4];
    int cf = s->layout == DATA_LAYOUT_CHANNELS_FIRST || s->sd == 0 || s->xrank == 2;
    int r = s->xrank, ax = cf && s->xrank >= 3 ? 1 : 0;  // first spatial axis on disk
    int64_t vol = 1;
    if (s->xrank == 1) {
        count[0] = (hsize_t)ch;
    } else {
        if (s->xrank >= 3) count[cf ? 0 : s->sd] = (hsize_t)ch;
        for (int k = 0; k < s->sd; k++) {
            int64_t e = off && s->crop > 0 ? s->crop : s->sp[k];
            start[ax + k] = off && s->crop > 0 ? (hsize_t)off[k] : 0;
            count[ax + k] = (hsize_t)e;
            vol *= e;
        }
    }
    p->c = ch, p->vol = vol, p->channels_last = !cf;
    // float32 channels first without log1p or normalisation: read into out, then (x) only checked there
    bool inplace = p->dtype == XF_F32 && cf && !p->log1p && !p->shift && !p->scale;
    void *buf = inplace ? (void *)out : (void *)c->scratch;
    int64_t at = d == c->dx ? c->xat : d == c->dy ? c->yat : -1;
    if (cf && s->sd >= 2 && off && s->crop > 0 && at >= 0) {
        if (direct_crop(s, c, at, j, ch, off, H5Tget_size(mtype), buf) < 0) return -1;
    } else if (read_slab(d, s, j, r, start, count, mtype, buf) < 0) {
        return -1;
    }
    if (inplace && !p->check) return 0;
    return xf_sample(p, buf, out, bad_c, bad_v, bad) ? -2 : 0;
}

// x of sample i (index j in path) holds bad, a NaN or Inf, at channel bq, element bv.
static void nonfinite_message(char *msg, size_t len, const h5src *s, h5cursor *c, const char *path, int64_t i,
                              int64_t j, int64_t bq, int64_t bv, float bad) {
    snprintf(msg, len, "%s: '%s' sample %lld (index %lld in the file) holds %g at channel %lld, element %lld", path,
             s->xname, (long long)i, (long long)j, bad, (long long)bq, (long long)bv);
    c->nonfinite = true;
}

// Makes file fi the cursor's open file (its datasets, x's dtype, direct crop offsets). 0, or -1
// with msg naming the file.
static int cursor_open(const h5src *s, h5cursor *c, int fi, char *msg, size_t len) {
    if (c->file == fi) return 0;
    const char *path = s->files[fi].path;
    cursor_close(c);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    c->f = h5_open_read(path);
    c->dx = c->f >= 0 ? H5Dopen2(c->f, s->xname, H5P_DEFAULT) : -1;
    c->dy = c->f >= 0 ? H5Dopen2(c->f, s->yname, H5P_DEFAULT) : -1;
    if (c->dx < 0 || c->dy < 0) {
        snprintf(msg, len, "%s: cannot open the file or its datasets '%s', '%s' (changed since the start?)", path,
                 s->xname, s->yname);
        cursor_close(c);
        return -1;
    }
    c->file = fi;
    cursor_pick_xtype(c);
    if (s->crop > 0 && s->sd >= 2 && (s->layout == DATA_LAYOUT_CHANNELS_FIRST || s->xrank == 2)) {
        c->xat = direct_offset(c, c->dx, c->xmem, path);
        if (s->yfield) c->yat = direct_offset(c, c->dy, H5T_NATIVE_FLOAT, path);
    }
    return 0;
}

int h5src_read(const h5src *s, h5cursor *c, int64_t i, const int64_t *off, float *x, int32_t *labels, float *values,
               char *msg, size_t len) {
    int64_t j;
    int fi = h5src_file_of(s, i, &j);
    c->nonfinite = false;
    const char *path = s->files[fi].path;
    if (cursor_open(s, c, fi, msg, len)) return -1;
    int crop = off && s->crop > 0;
    int64_t vol = 1;
    for (int k = 0; k < s->sd; k++) vol *= crop ? s->crop : s->sp[k];
    // x: converted to float32, checked (finite), log1p, normalised, channels first: one pass
    xf_params xp = {.dtype = c->xdt, .log1p = s->transform == DATA_TRANSFORM_LOG1P, .check = true,
                    .shift = s->fshift, .scale = s->fscale};
    int64_t bq = 0, bv = 0;
    float bad = 0;
    int xr = read_field(s, c, c->dx, j, s->c, off, c->xmem, &xp, x, &bq, &bv, &bad);
    if (xr == -1) {
        snprintf(msg, len, "%s: reading '%s' sample %lld (index %lld in the file) failed: truncated or corrupt file?",
                 path, s->xname, (long long)i, (long long)j);
        return -1;
    }
    if (xr == -2) {
        nonfinite_message(msg, len, s, c, path, i, j, bq, bv, bad);
        return -1;
    }

    herr_t rc = 0;
    int64_t tn = 1;
    // float labels are read as doubles and must hold whole numbers (HDF5 would truncate 0.5 to 0)
    hid_t lt = s->yfloat ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT32;
    void *lb = s->yfloat ? (void *)c->dscratch : (void *)labels;
    if (s->target == DATA_TARGET_CLASS) {
        hsize_t z[1] = {0}, one[1] = {1};
        rc = read_slab(c->dy, s, j, s->yrank, z, one, lt, lb);
    } else if (s->target == DATA_TARGET_MASK) {
        hsize_t start[3], count[3];
        for (int k = 0; k < s->sd; k++) {
            start[k] = crop ? (hsize_t)off[k] : 0;
            count[k] = (hsize_t)(crop ? s->crop : s->sp[k]);
        }
        tn = vol;
        rc = read_slab(c->dy, s, j, s->yrank, start, count, lt, lb);
    } else if (s->yfield) {
        xf_params yp = {.dtype = XF_F32};  // targets: only turned channels first
        rc = read_field(s, c, c->dy, j, s->yc, off, H5T_NATIVE_FLOAT, &yp, values, NULL, NULL, NULL);
    } else {
        hsize_t start[4] = {0};
        rc = read_slab(c->dy, s, j, s->yrank, start, s->ydims, H5T_NATIVE_FLOAT, values);
    }
    if (rc < 0) {
        snprintf(msg, len, "%s: reading '%s' sample %lld (index %lld in the file) failed: truncated or corrupt file?",
                 path, s->yname, (long long)i, (long long)j);
        return -1;
    }
    if (s->target != DATA_TARGET_VALUES)
        for (int64_t v = 0; v < tn; v++) {
            double val = s->yfloat ? c->dscratch[v] : labels[v];
            if (label_bad(val, s->classes)) {
                label_message(msg, len, s, path, i, j, v, val);
                return -1;
            }
            labels[v] = (int32_t)val;
        }
    return 0;
}

// ---- reading runs ------------------------------------------------------------------------------

// *buf with room for len bytes (grown as needed; the cursor keeps it).
static void *grow(void **buf, size_t *cap, size_t len) {
    if (*cap < len) {
        free(*buf);
        *buf = gl_xmalloc(len);
        *cap = len;
    }
    return *buf;
}

// Samples [j, j + m) of stacked dataset d, whole (r per-sample axes of extents dims), as type into
// buf: one hyperslab, one HDF5 read.
static herr_t read_samples(hid_t d, int64_t j, int64_t m, int r, const hsize_t *dims, hid_t type, void *buf) {
    hsize_t st[8] = {(hsize_t)j}, ct[8] = {(hsize_t)m};
    for (int k = 0; k < r; k++) st[1 + k] = 0, ct[1 + k] = dims[k];
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1 + r, ct, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL);
    herr_t rc = H5Dread(d, type, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc;
}

// Samples [i, i + m), [j, j + m) of the cursor's open file, as h5src_read gives them one by one
// (off NULL): x and y read as one hyperslab each, then converted and checked sample by sample.
// m, or the count valid before sample i + k, which msg names; -1 when HDF5 could not read the
// run (the caller reads it sample by sample, and each read says what is wrong).
static int64_t run_in_file(const h5src *s, h5cursor *c, int64_t i, int64_t j, int64_t m, float *x, int32_t *labels,
                           float *values, char *msg, size_t len) {
    const char *path = s->files[c->file].path;
    int64_t vol = 1, xn, yn = shape_size(&s->tfull);
    for (int k = 0; k < s->sd; k++) vol *= s->sp[k];
    xn = s->c * vol;
    int cf = s->layout == DATA_LAYOUT_CHANNELS_FIRST || s->sd == 0 || s->xrank == 2;
    xf_params xp = {.dtype = c->xdt, .channels_last = !cf, .log1p = s->transform == DATA_TRANSFORM_LOG1P,
                    .check = true, .c = s->c, .vol = vol, .shift = s->fshift, .scale = s->fscale};
    size_t es = H5Tget_size(c->xmem);
    bool xin = xp.dtype == XF_F32 && cf && !xp.log1p && !xp.shift && !xp.scale;  // read in place, then checked
    void *xb = xin ? (void *)x : grow(&c->runx, &c->runx_len, (size_t)(m * xn) * es);
    // y as stored where it is converted: float labels as doubles, channels-last fields as floats
    bool lab = s->target != DATA_TARGET_VALUES, ycl = s->yfield && !cf;
    hid_t yt = lab ? (s->yfloat ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT32) : H5T_NATIVE_FLOAT;
    void *yb = lab && s->yfloat ? grow(&c->runy, &c->runy_len, (size_t)(m * yn) * sizeof(double))
               : ycl            ? grow(&c->runy, &c->runy_len, (size_t)(m * yn) * sizeof(float))
               : lab            ? (void *)labels
                                : (void *)values;
    if (read_samples(c->dx, j, m, s->xrank, s->xdims, c->xmem, xb) < 0 ||
        read_samples(c->dy, j, m, s->yrank, s->ydims, yt, yb) < 0)
        return -1;
    for (int64_t q = 0; q < m; q++) {
        int64_t bq = 0, bv = 0;
        float bad = 0;
        if (xf_sample(&xp, (const char *)xb + (size_t)(q * xn) * es, x + q * xn, &bq, &bv, &bad)) {
            nonfinite_message(msg, len, s, c, path, i + q, j + q, bq, bv, bad);
            return q;
        }
        if (ycl) {
            xf_params yp = {.dtype = XF_F32, .channels_last = true, .c = s->yc, .vol = vol};
            xf_sample(&yp, (const float *)yb + q * yn, values + q * yn, NULL, NULL, NULL);
        }
        for (int64_t v = 0; lab && v < yn; v++) {
            double val = s->yfloat ? ((const double *)yb)[q * yn + v] : labels[q * yn + v];
            if (label_bad(val, s->classes)) {
                label_message(msg, len, s, path, i + q, j + q, v, val);
                return q;
            }
            labels[q * yn + v] = (int32_t)val;
        }
    }
    return m;
}

int64_t h5src_read_run(const h5src *s, h5cursor *c, int64_t i, int64_t n, float *x, int32_t *labels, float *values,
                       char *msg, size_t len) {
    int64_t xn = shape_size(&s->xfull), tn = shape_size(&s->tfull), done = 0;
    while (done < n) {
        int64_t at = i + done, j;
        int fi = h5src_file_of(s, at, &j);
        int64_t m = n - done < s->files[fi].n - j ? n - done : s->files[fi].n - j, k = -1;
        float *xo = x + done * xn, *vo = values ? values + done * tn : NULL;
        int32_t *lo = labels ? labels + done * tn : NULL;
        c->nonfinite = false;
        if (m > 1 && !s->per_file && cursor_open(s, c, fi, msg, len) == 0) k = run_in_file(s, c, at, j, m, xo, lo, vo, msg, len);
        if (k < 0)  // one sample at a time: a run of one, or one HDF5 could not read as a whole
            for (k = 0; k < m; k++)
                if (h5src_read(s, c, at + k, NULL, xo + k * xn, lo ? lo + k * tn : NULL, vo ? vo + k * tn : NULL, msg,
                               len))
                    break;
        done += k;
        if (k < m) return done;
    }
    return n;
}
