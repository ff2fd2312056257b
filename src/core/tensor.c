// tensor.c: shape helpers.
#include "galley/tensor.h"

#include <stdio.h>

int64_t shape_size(const gl_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

bool shape_equal(const gl_shape *a, const gl_shape *b) {
    if (a->ndim != b->ndim || a->tokens != b->tokens) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

// "[3, 32, 32]"; tokens "[T 64, D 192]".
void shape_format(const gl_shape *s, char *buf, size_t len) {
    if (s->tokens && s->ndim == 2) {
        snprintf(buf, len, "[T %lld, D %lld]", (long long)s->d[0], (long long)s->d[1]);
        return;
    }
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

gl_shape shape_tokens(int64_t t, int64_t d) {
    gl_shape s = {.ndim = 2, .d = {t, d}, .tokens = true};
    return s;
}
