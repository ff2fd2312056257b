// json_write.c: JSON into a fixed buffer (see json.h). Numbers use %.9g (floats and doubles read
// back to what was logged at the precision anyone plots); strings are escaped per RFC 8259.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log/json.h"

void jb_init(jbuf *b, char *mem, size_t cap) {
    b->p = mem;
    b->cap = cap;
    jb_reset(b);
}

void jb_reset(jbuf *b) {
    b->len = 0;
    b->truncated = b->cap == 0;
    b->depth = 0;
    b->comma[0] = false;
    if (b->cap) b->p[0] = 0;
}

static void put(jbuf *b, const char *s, size_t n) {
    if (b->truncated || b->len + n + 1 > b->cap) {
        b->truncated = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void putf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(jbuf *b, const char *fmt, ...) {
    if (b->truncated) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
        b->truncated = true;
        b->p[b->len] = 0;
        return;
    }
    b->len += (size_t)n;
}

static void put_string(jbuf *b, const char *s) {
    put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': put(b, "\\\"", 2); break;
        case '\\': put(b, "\\\\", 2); break;
        case '\n': put(b, "\\n", 2); break;
        case '\r': put(b, "\\r", 2); break;
        case '\t': put(b, "\\t", 2); break;
        default:
            if (*c < 0x20) putf(b, "\\u%04x", *c);
            else put(b, (const char *)c, 1);
        }
    }
    put(b, "\"", 1);
}

// The comma and "key": before a member.
static void member(jbuf *b, const char *key) {
    if (b->comma[b->depth]) put(b, ",", 1);
    b->comma[b->depth] = true;
    if (key) {
        put_string(b, key);
        put(b, ":", 1);
    }
}

void jb_open(jbuf *b, const char *key, char kind) {
    if (b->depth + 1 >= JB_MAX_DEPTH) {
        b->truncated = true;
        return;
    }
    member(b, key);
    put(b, kind == '[' ? "[" : "{", 1);
    b->closer[++b->depth] = kind == '[' ? ']' : '}';
    b->comma[b->depth] = false;
}

void jb_close(jbuf *b) {
    if (b->depth == 0) {
        b->truncated = true;
        return;
    }
    put(b, &b->closer[b->depth], 1);
    b->depth--;
}

void jb_num(jbuf *b, const char *key, double v) {
    member(b, key);
    if (!isfinite(v)) put(b, "null", 4);
    else if (v == floor(v) && fabs(v) < 1e15) putf(b, "%.0f", v);
    else putf(b, "%.9g", v);
}

void jb_fix(jbuf *b, const char *key, double v, int decimals) {
    member(b, key);
    if (!isfinite(v)) put(b, "null", 4);
    else putf(b, "%.*f", decimals, v);
}

void jb_int(jbuf *b, const char *key, int64_t v) {
    member(b, key);
    putf(b, "%lld", (long long)v);
}

void jb_str(jbuf *b, const char *key, const char *s) {
    member(b, key);
    if (s) put_string(b, s);
    else put(b, "null", 4);
}

void jb_bool(jbuf *b, const char *key, bool v) {
    member(b, key);
    put(b, v ? "true" : "false", v ? 4 : 5);
}

void jb_null(jbuf *b, const char *key) {
    member(b, key);
    put(b, "null", 4);
}
