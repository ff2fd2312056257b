// check.c: fatal errors with a location and a hint, and allocation that never returns NULL.
#include "galley/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gl_die_at(const char *file, int line, int code, const char *hint, const char *fmt, ...) {
    fflush(stdout);  // keep the order of what the user already saw
    va_list ap;
    va_start(ap, fmt);
    fputs("galley: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    if (hint && *hint) fprintf(stderr, "  hint: %s\n", hint);
    exit(code);
}

void *gl_xmalloc_at(const char *file, int line, size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) gl_die_at(file, line, GL_EXIT_RUNTIME, "free memory or reduce the batch or model size",
                      "out of memory allocating %zu bytes", n);
    return p;
}

void *gl_xrealloc_at(const char *file, int line, void *old, size_t n) {
    void *p = realloc(old, n ? n : 1);
    if (!p) gl_die_at(file, line, GL_EXIT_RUNTIME, "free memory or reduce the batch or model size",
                      "out of memory allocating %zu bytes", n);
    return p;
}

void *gl_xcalloc_at(const char *file, int line, size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) gl_die_at(file, line, GL_EXIT_RUNTIME, "free memory or reduce the batch or model size",
                      "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

char *gl_xstrdup_at(const char *file, int line, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = gl_xmalloc_at(file, line, n);
    memcpy(p, s, n);
    return p;
}
