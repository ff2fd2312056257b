// npy.c: NumPy .npy files of floats, read and written without NumPy (the tutorial's statistics,
// global_means.npy and global_stds.npy).
//
// The format (numpy/lib/format.py): magic "\x93NUMPY", a major and minor version byte, the
// header's length (uint16 little-endian in 1.0; uint32 in 2.0 and 3.0), then the header, a Python
// dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (1, 20, 1, 1), },
// padded with spaces and a newline; then the data.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/ts_internal.h"
#include "galley/check.h"

enum { MAX_HEADER = 1 << 20 };

// The text after 'key': in header h (NULL when the key is missing).
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

// 'descr' -> element size 4 or 8; 0 for anything else (why in msg).
static int parse_descr(const char *h, const char *path, char *msg, size_t len) {
    const char *v = dict_value(h, "descr");
    char d[16] = "";
    if (v && (*v == '\'' || *v == '"')) {
        const char *e = strchr(v + 1, *v);
        if (e && e - v - 1 < (long)sizeof d) memcpy(d, v + 1, (size_t)(e - v - 1));
    }
    if (!strcmp(d, "<f4")) return 4;
    if (!strcmp(d, "<f8")) return 8;
    snprintf(msg, len, "%s: the .npy array has dtype '%s'; expected little-endian float32 ('<f4') or float64 "
             "('<f8')", path, d[0] ? d : "?");
    return 0;
}

// 'shape': (a, b, ...) into a. 0, or -1.
static int parse_shape(const char *h, npy_array *a) {
    const char *p = dict_value(h, "shape");
    if (!p || *p != '(') return -1;
    p++;
    a->ndim = 0, a->n = 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') return 0;
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || a->ndim == NPY_MAX_DIMS) return -1;
        a->shape[a->ndim++] = d;
        // Saturates rather than wraps (a wrapped product could pass as a few values): the caller
        // refuses anything above its limit, and a zero axis still gives 0.
        a->n = d && a->n > INT64_MAX / d ? INT64_MAX : a->n * d;
        p = end;
        while (*p == 'L') p++;  // Python 2's long literals
    }
}

static int fail(FILE *f, npy_array *a, char *msg, size_t len, const char *path, const char *what) {
    if (f) fclose(f);
    free(a->v);
    a->v = NULL;
    snprintf(msg, len, "%s: %s", path, what);
    return -1;
}

// Reads the magic, version and header of f into h (NUL-terminated, caller frees). 0, or -1.
static int read_header(FILE *f, char **h) {
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) return -1;
    size_t hl;
    if (pre[6] == 1) {
        hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) return -1;
        hl = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        return -1;
    }
    if (hl == 0 || hl > MAX_HEADER) return -1;
    *h = gl_xmalloc(hl + 1);
    if (fread(*h, 1, hl, f) != hl) return free(*h), -1;
    (*h)[hl] = '\0';
    return 0;
}

int npy_read(const char *path, npy_array *a, char *msg, size_t len) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *h = NULL;
    if (read_header(f, &h)) return fail(f, a, msg, len, path, "not a NumPy .npy file (bad magic, version or header)");
    int es = parse_descr(h, path, msg, len);
    const char *fo = dict_value(h, "fortran_order");
    bool fortran = fo && !strncmp(fo, "True", 4);
    int bad_shape = parse_shape(h, a);
    free(h);
    if (!es) return fclose(f), -1;
    if (bad_shape || !fo) return fail(f, a, msg, len, path, "the .npy header has no readable 'shape' or 'fortran_order'");
    int big = 0;
    for (int k = 0; k < a->ndim; k++) big += a->shape[k] > 1;
    if (fortran && big > 1) return fail(f, a, msg, len, path, "a Fortran-order .npy array of more than one axis");
    if (a->n > (1 << 26)) return fail(f, a, msg, len, path, "the .npy array is too large for statistics");
    unsigned char *raw = gl_xmalloc((size_t)a->n * (size_t)es + 1);
    size_t got = fread(raw, (size_t)es, (size_t)a->n, f);
    fclose(f);
    if (got != (size_t)a->n) {
        free(raw);
        return fail(NULL, a, msg, len, path, "the .npy file ends before its data does (truncated?)");
    }
    a->v = gl_xmalloc((size_t)(a->n ? a->n : 1) * sizeof(double));
    for (int64_t i = 0; i < a->n; i++) {  // little-endian bytes, assembled whatever the host's order
        uint64_t u = 0;
        for (int b = es - 1; b >= 0; b--) u = u << 8 | raw[i * es + b];
        if (es == 8) {
            memcpy(&a->v[i], &u, 8);
        } else {
            uint32_t u32 = (uint32_t)u;
            float x;
            memcpy(&x, &u32, 4);
            a->v[i] = x;
        }
    }
    free(raw);
    return 0;
}

void npy_shape_words(const npy_array *a, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < a->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)a->shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

int npy_write_f32(const char *path, const float *v, int ndim, const int64_t *shape) {
    char h[256];
    int n = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t count = 1;
    for (int k = 0; k < ndim; k++) {
        n += snprintf(h + n, sizeof h - (size_t)n, k ? ", %lld" : "%lld", (long long)shape[k]);
        count *= shape[k];
    }
    n += snprintf(h + n, sizeof h - (size_t)n, ndim == 1 ? ",), }" : "), }");  // numpy's own spelling
    int total = ((10 + n + 1 + 63) / 64) * 64;  // magic, version, length, header, newline: 64-aligned
    while (10 + n + 1 < total) h[n++] = ' ';
    h[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    // Written under a temporary name and renamed: a failed write leaves no half file at path.
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int rc = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
    for (int64_t i = 0; i < count && !rc; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        if (fwrite(b, 1, 4, f) != 4) rc = -1;
    }
    if (fclose(f) != 0) rc = -1;
    if (!rc && rename(tmp, path) != 0) rc = -1;
    if (rc) {
        int e = errno;  // the caller reports it
        unlink(tmp);
        errno = e;
    }
    return rc;
}
