// json_read.c: a recursive-descent JSON reader that reports leaves with their dotted paths
// (see json.h). Strict RFC 8259 apart from accepting any depth up to JR_MAX_DEPTH.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "log/json.h"

#define JR_MAX_DEPTH 64
#define JR_PATH 1024

typedef struct {
    const char *s;
    size_t n, i;
    json_leaf_fn fn;
    void *ctx;
    char path[JR_PATH];
    char *str;  // decoded string scratch (as long as the text)
    char *err;
    size_t errlen;
    int stop;   // the callback's non-zero value
} jr;

static int jr_fail(jr *r, const char *what) {
    if (r->err && r->errlen) snprintf(r->err, r->errlen, "byte %zu: %s", r->i + 1, what);
    return -1;
}

static void skip_ws(jr *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int hex4(jr *r, unsigned *out) {
    if (r->i + 4 > r->n) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = r->s[r->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

// Decodes the string at r->i (at the opening quote) into dst; returns its length or -1.
static long parse_string(jr *r, char *dst) {
    size_t k = 0;
    r->i++;  // "
    while (r->i < r->n) {
        unsigned char c = (unsigned char)r->s[r->i++];
        if (c == '"') {
            dst[k] = 0;
            return (long)k;
        }
        if (c < 0x20) return jr_fail(r, "control character in a string");
        if (c != '\\') {
            dst[k++] = (char)c;
            continue;
        }
        if (r->i >= r->n) break;
        char e = r->s[r->i++];
        switch (e) {
        case '"': dst[k++] = '"'; break;
        case '\\': dst[k++] = '\\'; break;
        case '/': dst[k++] = '/'; break;
        case 'b': dst[k++] = '\b'; break;
        case 'f': dst[k++] = '\f'; break;
        case 'n': dst[k++] = '\n'; break;
        case 'r': dst[k++] = '\r'; break;
        case 't': dst[k++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(r, &cp)) return jr_fail(r, "bad \\u escape");
            if (cp >= 0xd800 && cp < 0xdc00) {  // a surrogate pair (6 escaped bytes -> 4 UTF-8 bytes)
                unsigned lo;
                if (r->i + 2 > r->n || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u') return jr_fail(r, "lone surrogate");
                r->i += 2;
                if (hex4(r, &lo) || lo < 0xdc00 || lo > 0xdfff) return jr_fail(r, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            k += utf8(dst + k, cp);  // never longer than its escape
            break;
        }
        default: return jr_fail(r, "bad escape in a string");
        }
    }
    return jr_fail(r, "unterminated string");
}

static int emit(jr *r, const jv_leaf *v) {
    int rc = r->fn ? r->fn(r->ctx, r->path, v) : 0;
    if (rc) r->stop = rc;
    return rc;
}

static int parse_value(jr *r, int depth);

// Appends ".name" (or "name" at the top) to the path; returns the old length to restore.
static int push(jr *r, const char *name, size_t *old) {
    *old = strlen(r->path);
    int n = snprintf(r->path + *old, sizeof r->path - *old, "%s%s", *old ? "." : "", name);
    if (n < 0 || *old + (size_t)n >= sizeof r->path) return jr_fail(r, "key path too long");
    return 0;
}

static int parse_container(jr *r, int depth, char open) {
    char close = open == '{' ? '}' : ']';
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == close) return r->i++, 0;
    for (long index = 0;; index++) {
        skip_ws(r);
        char name[JR_PATH];
        if (open == '{') {
            if (r->i >= r->n || r->s[r->i] != '"') return jr_fail(r, "expected a key in quotes");
            // Keys are short in practice; a key longer than the path buffer is refused.
            size_t start = r->i;
            long len = parse_string(r, r->str);
            if (len < 0) return -1;
            if ((size_t)len >= sizeof name) return r->i = start, jr_fail(r, "key too long");
            memcpy(name, r->str, (size_t)len + 1);
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') return jr_fail(r, "expected ':'");
            r->i++;
        } else {
            snprintf(name, sizeof name, "%ld", index);
        }
        size_t old;
        if (push(r, name, &old)) return -1;
        int rc = parse_value(r, depth + 1);
        r->path[old] = 0;
        if (rc) return rc;
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == close) return r->i++, 0;
        return jr_fail(r, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(jr *r, int depth) {
    if (depth > JR_MAX_DEPTH) return jr_fail(r, "nested too deep");
    skip_ws(r);
    if (r->i >= r->n) return jr_fail(r, "expected a value, found the end");
    char c = r->s[r->i];
    jv_leaf v = {0};
    if (c == '{' || c == '[') return parse_container(r, depth, c);
    if (c == '"') {
        if (parse_string(r, r->str) < 0) return -1;
        v.type = JV_STR, v.str = r->str;
        return emit(r, &v);
    }
    static const struct {
        const char *word;
        jv_type type;
        double num;
    } words[] = {{"true", JV_BOOL, 1}, {"false", JV_BOOL, 0}, {"null", JV_NULL, 0}};
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
        size_t len = strlen(words[w].word);
        if (r->n - r->i >= len && !memcmp(r->s + r->i, words[w].word, len)) {
            r->i += len;
            v.type = words[w].type, v.num = words[w].num;
            return emit(r, &v);
        }
    }
    // A number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    size_t s = r->i, i = r->i;
    if (i < r->n && r->s[i] == '-') i++;
    if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') return jr_fail(r, "expected a value");
    if (r->s[i] == '0') i++;
    else while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    if (i < r->n && r->s[i] == '.') {
        i++;
        if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') return r->i = i, jr_fail(r, "expected a digit");
        while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    }
    if (i < r->n && (r->s[i] == 'e' || r->s[i] == 'E')) {
        i++;
        if (i < r->n && (r->s[i] == '+' || r->s[i] == '-')) i++;
        if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') return r->i = i, jr_fail(r, "expected a digit");
        while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    }
    char num[64];
    if (i - s >= sizeof num) return jr_fail(r, "number too long");
    memcpy(num, r->s + s, i - s);
    num[i - s] = 0;
    r->i = i;
    v.type = JV_NUM, v.num = strtod(num, NULL);
    return emit(r, &v);
}

int json_walk(const char *text, size_t len, json_leaf_fn fn, void *ctx, char *err, size_t errlen) {
    jr r = {.s = text, .n = len, .fn = fn, .ctx = ctx, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    r.str = gl_xmalloc(len + 1);
    int rc = parse_value(&r, 0);
    if (rc == 0) {
        skip_ws(&r);
        if (r.i < r.n) rc = jr_fail(&r, "text after the value");
    }
    free(r.str);
    if (r.stop) return r.stop;
    return rc;
}
