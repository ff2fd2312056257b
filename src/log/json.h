// json.h: a little JSON, both ways. jbuf writes one document into a fixed buffer and never
// allocates (the training loop writes metrics.jsonl with it); json_walk reads a document back
// as (dotted path, value) leaves, which is all `galley report` needs.
//
//   char mem[512]; jbuf b; jb_init(&b, mem, sizeof mem);
//   jb_open(&b, NULL, '{'); jb_int(&b, "step", 50); jb_open(&b, "metrics", '{');
//   jb_num(&b, "accuracy", 0.93); jb_close(&b); jb_close(&b);   // mem: {"step":50,"metrics":{...}}
#ifndef GALLEY_JSON_H
#define GALLEY_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JB_MAX_DEPTH 16

typedef struct {
    char *p;
    size_t len, cap;
    bool truncated;  // something did not fit: the text is cut and must not be written
    int depth;
    bool comma[JB_MAX_DEPTH];  // the next member at this depth needs a comma
    char closer[JB_MAX_DEPTH];
} jbuf;

void jb_init(jbuf *b, char *mem, size_t cap);
void jb_reset(jbuf *b);
// Opens an object ('{') or array ('['); key is NULL at the top level and inside arrays.
void jb_open(jbuf *b, const char *key, char kind);
void jb_close(jbuf *b);
void jb_num(jbuf *b, const char *key, double v);  // %.9g; NaN and infinities become null
void jb_fix(jbuf *b, const char *key, double v, int decimals);  // fixed point, e.g. seconds
void jb_int(jbuf *b, const char *key, int64_t v);
void jb_str(jbuf *b, const char *key, const char *s);
void jb_bool(jbuf *b, const char *key, bool v);
void jb_null(jbuf *b, const char *key);

// ---- reading ----

typedef enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR } jv_type;

typedef struct {
    jv_type type;
    double num;       // JV_NUM (and JV_BOOL as 0/1)
    const char *str;  // JV_STR: decoded, NUL-terminated; valid during the callback only
} jv_leaf;

// Called for every leaf with its path: object keys and array indices joined by '.', e.g.
// "metrics.accuracy", "iou.2". Empty objects and arrays produce no leaf. Return non-zero to stop.
typedef int (*json_leaf_fn)(void *ctx, const char *path, const jv_leaf *v);

// Walks one JSON document (whitespace around it allowed). Returns 0, the callback's non-zero
// value, or -1 for malformed text with a message in err ("column 12: expected ':'").
int json_walk(const char *text, size_t len, json_leaf_fn fn, void *ctx, char *err, size_t errlen);

#endif
