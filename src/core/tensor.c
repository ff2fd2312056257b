// tensor.c: shape helpers.
#include "galley/tensor.h"

#include <stdio.h>

int64_t shape_size(const gl_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

bool shape_equal(const gl_shape *a, const gl_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

void shape_format(const gl_shape *s, char *buf, size_t len) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, len - k, "[");
    for (int i = 0; i < s->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)s->d[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

gl_shape shape_1d(int64_t n) {
    gl_shape s = {.ndim = 1, .d = {n}};
    return s;
}
