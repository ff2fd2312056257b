// ts_reader.c: one split of a time series stored as yearly HDF5 files (data.source: timeseries).
//
// Each file holds dataset fields [T, C, H, W]; the split's samples are every (file, t) with
// t + lead < T of that file, files in the order listed (a directory's *.h5 by name), t ascending.
// Sample i reads fields[t, channels, 0:H, 0:W] as input and fields[t + lead, ...] as target, one
// hyperslab per run of consecutive channels (any dtype HDF5 converts to float32), and normalises
// both per channel.
// Opening checks what can be checked without reading the data, so a bad data set is exit 2
// before training, naming the recipe key and line, or the file and dataset.
#include <errno.h>
#include <glob.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/h5_internal.h"
#include "data/transform_simd.h"
#include "data/ts_internal.h"
#include "galley/check.h"
#include "galley/h5data.h"

typedef struct {
    char *path;
    int64_t steps, first;  // T of the file, index of its first sample in the split
} tsfile;

struct tssrc {
    tsfile *files;
    int nfiles, cap;
    int64_t n, lead;
    const char *dataset;
    hsize_t dims[4];      // the first file's [T, C, H, W]
    int64_t nch, h, w;    // channels read, rows and columns read
    int64_t *ch;          // their indices
    float *shift, *scale; // per channel read; NULL: not normalised
};

struct tscursor {
    int file;
    hid_t f, d;
    bool nonfinite;
};

// ---- file lists ------------------------------------------------------------------------------

static void add_file(tssrc *s, const char *path) {
    if (s->nfiles == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->files = gl_xrealloc(s->files, (size_t)s->cap * sizeof *s->files);
    }
    s->files[s->nfiles++] = (tsfile){gl_xstrdup(path), 0, 0};
}

// One entry of the list: a directory (its *.h5, sorted by name), a glob, or a path.
static int add_entry(tssrc *s, const char *e, const char *where, FILE *err) {
    struct stat st;
    bool dir = stat(e, &st) == 0 && S_ISDIR(st.st_mode);
    if (!dir && !strpbrk(e, "*?[")) return add_file(s, e), 0;
    char pat[4200];
    snprintf(pat, sizeof pat, dir ? "%s/*.h5" : "%s", e);
    glob_t g;
    int rc = glob(pat, 0, NULL, &g);
    if (rc != 0) {
        if (dir) fprintf(err, "%s: directory %s holds no .h5 files\n", where, e);
        else fprintf(err, "%s: no file matches '%s'\n", where, e);
        if (rc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) add_file(s, g.gl_pathv[i]);  // glob sorts them
    globfree(&g);
    return 0;
}

static int list_files(tssrc *s, const char *spec, const char *where, FILE *err) {
    char *buf = gl_xstrdup(spec), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        size_t n = strlen(tok);
        while (n && tok[n - 1] == ' ') tok[--n] = '\0';
        if (n) rc = add_entry(s, tok, where, err);
    }
    free(buf);
    if (!rc && s->nfiles == 0) {
        fprintf(err, "%s: names no files\n", where);
        rc = -1;
    }
    return rc;
}

// ---- opening ---------------------------------------------------------------------------------

static herr_t name_cb(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    (void)g, (void)info;
    char *buf = op, pn[128];
    size_t n = strlen(buf);
    h5_printable(name, pn, sizeof pn);
    if (n < 200) snprintf(buf + n, 256 - n, "%s%s", n ? ", " : "", pn);
    return 0;
}

static void dims_words(int rank, const hsize_t *d, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %llu" : "%llu", (unsigned long long)d[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

// Opens dataset name of f (path) with a numeric dtype; -1 (printed) when it is missing or
// unusable. key: the recipe key that named it.
static hid_t open_numeric(hid_t f, const char *path, const char *name, const char *key, FILE *err) {
    hid_t d = H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (d < 0) {
        char names[256] = "";
        H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, name_cb, names);
        fprintf(err, "galley: error: %s: no dataset '%s' (%s) in this file; its top level holds: %s\n", path, name,
                key, names[0] ? names : "nothing");
        return -1;
    }
    hid_t t = H5Dget_type(d);
    H5T_class_t c = H5Tget_class(t);
    H5Tclose(t);
    const char *damage = c == H5T_INTEGER || c == H5T_FLOAT ? h5_dataset_damage(d) : "not numbers";
    if (damage) {
        fprintf(err, "galley: error: %s: dataset '%s' (%s) cannot be read as numbers (%s)\n", path, name, key,
                damage);
        H5Dclose(d);
        return -1;
    }
    return d;
}

// File i: fields [T, C, H, W] with the first file's C, H, W, and T > lead. 0, or -1 (printed).
static int open_one(tssrc *s, const recipe_t *r, int i, const char *where, FILE *err) {
    tsfile *fl = &s->files[i];
    hid_t f = h5_open_read(fl->path);
    if (f < 0) {
        if (access(fl->path, R_OK) != 0) fprintf(err, "%s: cannot open %s: %s\n", where, fl->path, strerror(errno));
        else fprintf(err, "%s: %s is not a readable HDF5 file (truncated or corrupt?)\n", where, fl->path);
        return -1;
    }
    hid_t d = open_numeric(f, fl->path, s->dataset, "data.timeseries.dataset", err);
    int rc = d < 0 ? -1 : 0;
    hsize_t dims[8] = {0};
    char sh[96], first[96];
    if (!rc) {
        hid_t sp = H5Dget_space(d);
        int rank = H5Sget_simple_extent_ndims(sp);
        if (rank >= 1 && rank <= 8) H5Sget_simple_extent_dims(sp, dims, NULL);
        H5Sclose(sp);
        dims_words(rank, dims, sh, sizeof sh);
        if (rank != 4) {
            fprintf(err, "galley: error: %s: dataset '%s' has shape %s; expected a series [T, C, H, W]\n", fl->path,
                    s->dataset, sh);
            rc = -1;
        }
    }
    if (!rc && i == 0) memcpy(s->dims, dims, sizeof s->dims);
    if (!rc && (dims[1] != s->dims[1] || dims[2] != s->dims[2] || dims[3] != s->dims[3])) {
        dims_words(4, s->dims, first, sizeof first);
        fprintf(err, "galley: error: %s: dataset '%s' is %s, but %s's is %s: every file needs the same channels "
                "and grid (C, H, W)\n", fl->path, s->dataset, sh, s->files[0].path, first);
        rc = -1;
    }
    if (!rc && (int64_t)dims[0] <= s->lead) {
        char lw[512];
        recipe_where(r, "data.timeseries.lead", lw, sizeof lw);
        fprintf(err, "%s: %lld is beyond the series of %s: its dataset '%s' holds %llu time steps, and a sample "
                "needs lead + 1 = %lld\n", lw, (long long)s->lead, fl->path, s->dataset, (unsigned long long)dims[0],
                (long long)s->lead + 1);
        rc = -1;
    }
    fl->steps = (int64_t)dims[0];
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    return rc;
}

// The channels and the crop, against the first file's C, H, W. 0, or -1 (printed).
static int pick_channels(tssrc *s, const recipe_t *r, FILE *err) {
    const gl_floats *ch = &r->data.timeseries.channels, *sz = &r->data.timeseries.size;
    int64_t c = (int64_t)s->dims[1];
    s->nch = ch->n ? ch->n : c;
    s->ch = gl_xmalloc((size_t)s->nch * sizeof(int64_t));
    char where[512];
    for (int64_t k = 0; k < s->nch; k++) {
        s->ch[k] = ch->n ? (int64_t)ch->v[k] : k;
        if (s->ch[k] >= c) {
            recipe_where(r, "data.timeseries.channels", where, sizeof where);
            fprintf(err, "%s: channel %lld is out of range: %s's dataset '%s' has %lld channels (indices 0 to %lld)\n",
                    where, (long long)s->ch[k], s->files[0].path, s->dataset, (long long)c, (long long)c - 1);
            return -1;
        }
    }
    s->h = sz->n ? (int64_t)sz->v[0] : (int64_t)s->dims[2];
    s->w = sz->n ? (int64_t)sz->v[1] : (int64_t)s->dims[3];
    if (s->h > (int64_t)s->dims[2] || s->w > (int64_t)s->dims[3]) {
        recipe_where(r, "data.timeseries.size", where, sizeof where);
        fprintf(err, "%s: [%lld, %lld] does not fit the grid of %s's dataset '%s', [%llu, %llu] (rows, columns)\n",
                where, (long long)s->h, (long long)s->w, s->files[0].path, s->dataset,
                (unsigned long long)s->dims[2], (unsigned long long)s->dims[3]);
        return -1;
    }
    return 0;
}

// ---- statistics ------------------------------------------------------------------------------

// Dataset name of the open file f (path) read whole as doubles into a. 0, or -1 with msg.
static int read_whole(hid_t f, const char *path, const char *name, npy_array *a, char *msg, size_t len) {
    hid_t d = H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, rc = -1;
    hsize_t dims[NPY_MAX_DIMS];
    if (rank < 0 || rank > NPY_MAX_DIMS) {
        snprintf(msg, len, "%s: no dataset '%s' of numbers (rank at most %d) in this file", path, name, NPY_MAX_DIMS);
    } else {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        a->ndim = rank, a->n = 1;
        for (int k = 0; k < rank; k++) {  // saturating: a wrapped product could pass as a few values
            a->shape[k] = dims[k] > INT64_MAX ? INT64_MAX : (int64_t)dims[k];
            a->n = a->shape[k] && a->n > INT64_MAX / a->shape[k] ? INT64_MAX : a->n * a->shape[k];
        }
        a->v = a->n <= (1 << 26) ? gl_xmalloc((size_t)(a->n ? a->n : 1) * sizeof(double)) : NULL;
        rc = a->v && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a->v) >= 0 ? 0 : -1;
        if (!a->v) snprintf(msg, len, "%s: dataset '%s' is too large for statistics", path, name);
        else if (rc) snprintf(msg, len, "%s: reading dataset '%s' as numbers failed", path, name);
    }
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    return rc;
}

// FILE.h5:DATASET read whole as doubles into a. 0, or -1 with msg.
static int h5_stat_read(const char *spec, npy_array *a, char *msg, size_t len) {
    memset(a, 0, sizeof *a);
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1]) {
        snprintf(msg, len, "expected FILE.npy or FILE.h5:DATASET, found '%s'", spec);
        return -1;
    }
    char *path = gl_xstrdup(spec);
    path[colon - spec] = '\0';
    hid_t f = h5_open_read(path);
    int rc = -1;
    if (f < 0) snprintf(msg, len, "%s: cannot open it as an HDF5 file", path);
    else rc = read_whole(f, path, colon + 1, a, msg, len), H5Fclose(f);
    if (rc) free(a->v), a->v = NULL;
    free(path);
    return rc;
}

// Statistic key (data.timeseries.mean or .std) as one value per channel read, into out. 0, or -1.
static int load_stat(const tssrc *s, const recipe_t *r, const char *key, const char *spec, double *out,
                     FILE *err) {
    char where[512], msg[1024], sh[96];
    recipe_where(r, key, where, sizeof where);
    size_t n = strlen(spec);
    npy_array a;
    int rc = n > 4 && !strcmp(spec + n - 4, ".npy") ? npy_read(spec, &a, msg, sizeof msg)
                                                    : h5_stat_read(spec, &a, msg, sizeof msg);
    if (rc) {
        fprintf(err, "%s: %s\n", where, msg);
        return -1;
    }
    int64_t c = (int64_t)s->dims[1];
    if (a.n != s->nch && a.n != c) {
        npy_shape_words(&a, sh, sizeof sh);
        char more[128] = "";
        if (c != s->nch) snprintf(more, sizeof more, " or %lld (one per channel of '%s')", (long long)c, s->dataset);
        fprintf(err, "%s: %s holds shape %s (%lld values); expected C = %lld values (one per channel read)%s\n",
                where, spec, sh, (long long)a.n, (long long)s->nch, more);
        free(a.v);
        return -1;
    }
    // One value per channel of the files is indexed by the channels read, as the tutorial's loader
    // does (means[0, in_channels]), also when as many channels are read in another order.
    for (int64_t k = 0; k < s->nch; k++) out[k] = a.v[a.n == c ? s->ch[k] : k];
    free(a.v);
    bool std = strstr(key, "std") != NULL;
    for (int64_t k = 0; k < s->nch; k++)
        if (!isfinite(out[k]) || (std && !(out[k] > 0))) {
            fprintf(err, "%s: %s: channel %lld has %s %g; it must be finite%s\n", where, spec, (long long)s->ch[k],
                    std ? "std" : "mean", out[k], std ? " and positive" : "");
            return -1;
        }
    return 0;
}

static int load_stats(tssrc *s, const recipe_t *r, FILE *err) {
    if (!r->data.timeseries.mean) return 0;
    double *m = gl_xmalloc((size_t)s->nch * sizeof(double)), *sd = gl_xmalloc((size_t)s->nch * sizeof(double));
    int rc = load_stat(s, r, "data.timeseries.mean", r->data.timeseries.mean, m, err);
    if (!rc) rc = load_stat(s, r, "data.timeseries.std", r->data.timeseries.std, sd, err);
    if (!rc) {
        s->shift = gl_xmalloc((size_t)s->nch * sizeof(float));
        s->scale = gl_xmalloc((size_t)s->nch * sizeof(float));
        for (int64_t k = 0; k < s->nch; k++) s->shift[k] = (float)m[k], s->scale[k] = (float)(1.0 / sd[k]);
    }
    free(m);
    free(sd);
    return rc;
}

int tssrc_open(tssrc **out, const recipe_t *r, int split, FILE *err) {
    *out = NULL;
    h5_setup(r->data.file_locking);
    tssrc *s = gl_xcalloc(1, sizeof *s);
    s->dataset = r->data.timeseries.dataset;
    s->lead = r->data.timeseries.lead;
    const char *key = split == SPLIT_TRAIN ? "data.timeseries.train" : "data.timeseries.val";
    char where[512];
    recipe_where(r, key, where, sizeof where);
    int rc = list_files(s, split == SPLIT_TRAIN ? r->data.timeseries.train : r->data.timeseries.val, where, err);
    for (int i = 0; i < s->nfiles && !rc; i++) {
        rc = open_one(s, r, i, where, err);
        s->files[i].first = s->n;
        s->n += s->files[i].steps - s->lead;
    }
    if (!rc) rc = pick_channels(s, r, err);
    if (!rc) rc = load_stats(s, r, err);
    if (rc) {
        tssrc_free(s);
        return GL_EXIT_USAGE;
    }
    *out = s;
    return 0;
}

void tssrc_free(tssrc *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) free(s->files[i].path);
    free(s->files);
    free(s->ch);
    free(s->shift);
    free(s->scale);
    free(s);
}

void tssrc_describe(const tssrc *s, gl_dataset *d) {
    memset(d, 0, sizeof *d);
    d->n = s->n;
    d->shape = (gl_shape){3, {s->nch, s->h, s->w}};
    d->tshape = d->shape;
    d->target = TARGET_VALUES;
    d->size = d->tsize = shape_size(&d->shape);
}

int tssrc_files(const tssrc *s) { return s->nfiles; }
const char *tssrc_file(const tssrc *s, int i) { return s->files[i].path; }

void tssrc_set_path(tssrc *s, int i, const char *path) {
    free(s->files[i].path);
    s->files[i].path = gl_xstrdup(path);
}

void tssrc_norm(const tssrc *s, int64_t k, double *shift, double *scale) {
    *shift = s->shift ? s->shift[k] : 0.0;
    *scale = s->scale ? s->scale[k] : 1.0;
}

int tssrc_file_of(const tssrc *s, int64_t i, int64_t *t) {
    int lo = 0, hi = s->nfiles - 1;
    while (lo < hi) {  // the last file whose first sample is <= i
        int mid = (lo + hi + 1) / 2;
        if (s->files[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    *t = i - s->files[lo].first;
    return lo;
}

// ---- reading ---------------------------------------------------------------------------------

tscursor *tscursor_new(const tssrc *s) {
    (void)s;
    tscursor *c = gl_xcalloc(1, sizeof *c);
    c->file = -1;
    c->f = c->d = -1;
    return c;
}

static void cursor_close(tscursor *c) {
    if (c->d >= 0) H5Dclose(c->d);
    if (c->f >= 0) H5Fclose(c->f);
    c->f = c->d = -1;
    c->file = -1;
}

void tscursor_free(tscursor *c) {
    if (!c) return;
    cursor_close(c);
    free(c);
}

bool tscursor_nonfinite(const tscursor *c) { return c->nonfinite; }

// out [nch, h, w] = fields[t, ch, 0:h, 0:w] as stored (converted to float32). 0, or -1: a read failed.
//
// Each run of consecutive channels is one H5Dread of a [1, run, h, w] hyperslab into a memory
// space of that same shape. A flat [run h w] memory space, as before, sent HDF5 down its
// element-by-element mapping (H5S_select_iterate, H5D__chunk_mem_cb: 80% of the time): the
// tutorial's layout (20 x 360 x 720 float32, a chunk per field) read at 3.7-4.1 samples/s with 2
// threads of a 2-core EPYC, against 35-37 for a PyTorch DataLoader with h5py and 2 workers
// (tests/bench/loader_bench.sh, era5); same-shape spaces 121-125, and 147-171 with open_fields
// (4.8x the DataLoader). Contiguous files 200 -> 244, gzip-4 chunks 23.5 -> 89.
static int read_raw(const tssrc *s, tscursor *c, int64_t t, float *out) {
    const int64_t area = s->h * s->w;
    hid_t fs = H5Dget_space(c->d);
    int rc = fs < 0 ? -1 : 0;
    for (int64_t k = 0, run; k < s->nch && !rc; k += run) {
        for (run = 1; k + run < s->nch && s->ch[k + run] == s->ch[k] + run;) run++;
        hsize_t st[4] = {(hsize_t)t, (hsize_t)s->ch[k], 0, 0};
        hsize_t ct[4] = {1, (hsize_t)run, (hsize_t)s->h, (hsize_t)s->w};
        hid_t ms = H5Screate_simple(4, ct, NULL);
        if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL) < 0 ||
            H5Dread(c->d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out + k * area) < 0)
            rc = -1;
        if (ms >= 0) H5Sclose(ms);
    }
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

// out [nch, h, w] = fields[t, ch, 0:h, 0:w] normalised. 0; -1: a read failed; -2: NaN or Inf at
// channel *bad_c (as read), element *bad_v. xf_sample normalises and checks the step in place
// (its vector paths, chosen at run time); where it finds a NaN or Inf, the step is read again and
// searched as stored, since normalising in place may have turned a finite value before it into
// Inf (the vector paths would then name that one, the scalar path the stored NaN).
static int read_step(const tssrc *s, tscursor *c, int64_t t, float *out, int64_t *bad_c, int64_t *bad_v) {
    if (read_raw(s, c, t, out)) return -1;
    const int64_t area = s->h * s->w;
    const xf_params p = {
        .dtype = XF_F32, .check = true, .c = s->nch, .vol = area, .shift = s->shift, .scale = s->scale};
    int64_t q = 0, v = 0;
    if (xf_sample(&p, out, out, &q, &v, NULL) == 0) return 0;
    const xf_params stored = {.dtype = XF_F32, .check = true, .c = s->nch, .vol = area};
    if (read_raw(s, c, t, out)) return -1;
    xf_sample(&stored, out, out, &q, &v, NULL);
    *bad_c = s->ch[q], *bad_v = v;
    return -2;
}

// The dataset, without HDF5's chunk cache where that is faster: uncompressed chunks as wide as
// the grid, read whole-width (no column crop), so that each channel's rows in a chunk are one
// contiguous piece in the file and in the sample. HDF5 then reads them straight into the caller's
// buffer instead of through the cache and a copy: the tutorial's layout (one 1 MB chunk per
// field) 121-125 -> 147-171 samples/s (2 threads, 2-core EPYC), chunks of 8 steps 3x faster.
// Elsewhere the cache stays: without it every piece is its own pread (a review measured chunks of
// [1, 1, 32, 32] 10x slower, h5py's default chunks for 20 x 360 x 720 4x, a column crop of whole
// fields 7x), and compressed chunks can serve several steps from it.
static hid_t open_fields(const tssrc *s, hid_t f) {
    hid_t d = H5Dopen2(f, s->dataset, H5P_DEFAULT), dcpl = d >= 0 ? H5Dget_create_plist(d) : -1;
    hsize_t chunk[4] = {0};
    const bool direct = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_nfilters(dcpl) == 0 &&
                        H5Pget_chunk(dcpl, 4, chunk) == 4 && chunk[3] == s->dims[3] && (hsize_t)s->w == s->dims[3];
    if (dcpl >= 0) H5Pclose(dcpl);
    if (!direct) return d;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    H5Dclose(d);
    d = H5Dopen2(f, s->dataset, dapl);
    H5Pclose(dapl);
    return d;
}

int tssrc_read(const tssrc *s, tscursor *c, int64_t i, float *x, float *y, char *msg, size_t len) {
    int64_t t;
    int fi = tssrc_file_of(s, i, &t);
    const char *path = s->files[fi].path;
    c->nonfinite = false;
    if (c->file != fi) {
        cursor_close(c);
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        c->f = h5_open_read(path);
        c->d = c->f >= 0 ? open_fields(s, c->f) : -1;
        if (c->d < 0) {
            snprintf(msg, len, "%s: cannot open the file or its dataset '%s' (changed since the start?)", path,
                     s->dataset);
            cursor_close(c);
            return -1;
        }
        c->file = fi;
    }
    for (int which = 0; which < 2; which++) {
        int64_t step = t + (which ? s->lead : 0), bc = 0, bv = 0;
        int rc = read_step(s, c, step, which ? y : x, &bc, &bv);
        if (rc == -1)
            snprintf(msg, len, "%s: reading '%s' time step %lld (sample %lld) failed: truncated or corrupt file?",
                     path, s->dataset, (long long)step, (long long)i);
        if (rc == -2) {
            snprintf(msg, len, "%s: '%s' time step %lld (sample %lld's %s) holds NaN or Inf at channel %lld, element "
                     "%lld", path, s->dataset, (long long)step, (long long)i, which ? "target" : "input",
                     (long long)bc, (long long)bv);
            c->nonfinite = true;
        }
        if (rc) return -1;
    }
    return 0;
}
