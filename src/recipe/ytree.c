// ytree.c: load one YAML document with libyaml into a yt_node tree with source marks.
//
// libyaml's document API does the parsing, after check_depth() has refused too-deep nesting
// from libyaml's events; we then walk its node graph twice. measure() rejects recursive
// aliases, nesting made too deep by aliases and alias "bombs" before anything is copied,
// and build() turns every alias use into its own copy and applies `<<` merge keys. Both
// keep the key path they are at, for errors; libyaml's own syntax errors leave no tree, so
// syntax_path() parses the input again as events to find the path there.
#include "galley/ytree.h"

#include "galley/check.h"  // gl_xmalloc, gl_xcalloc, GL_CHECK

#include <errno.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>  // libyaml 0.2.5: yaml_parser_load and the document API

#define YT_MAX_NODES 1000000  // after alias expansion; "billion laughs" stops here
#define YT_MAX_DEPTH 200      // nesting levels; also bounds the recursion below
#define YT_CHUNK 65536        // bytes per allocator chunk
#define YT_PATH_SHOWN 12      // key path steps shown in a message; deeper paths are shortened

// ---- the doc and its allocator --------------------------------------------------------

// All nodes, strings and arrays of a doc live in chunks that are freed together.
typedef struct yt_chunk yt_chunk;
struct yt_chunk {
    yt_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

typedef struct yt_name yt_name;
struct yt_name {
    yt_name *next;
    const char *s;
};

struct yt_doc {
    yt_chunk *chunks;  // the first one is the one being filled
    yt_name *names;    // interned strings, looked up by value
    yt_node *root;
};

// Zeroed memory owned by doc.
static void *doc_alloc(yt_doc *doc, size_t n)
{
    const size_t align = alignof(max_align_t);
    GL_CHECK(n <= SIZE_MAX / 2, "a YAML allocation this large is a bug in the caller");
    n = n ? (n + align - 1) / align * align : align;
    yt_chunk *c = doc->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > YT_CHUNK ? n : YT_CHUNK;
        c = gl_xmalloc(sizeof *c + cap);
        c->cap = cap;
        c->used = 0;
        if (n > YT_CHUNK / 4 && doc->chunks) {
            // A large one-off block goes behind the current chunk, whose free space stays usable.
            c->next = doc->chunks->next;
            doc->chunks->next = c;
        } else {
            c->next = doc->chunks;
            doc->chunks = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static char *doc_strndup(yt_doc *doc, const char *s, size_t len)
{
    char *p = doc_alloc(doc, len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

// Arrays of a map or sequence hold slots(n) entries, so appending needs no stored capacity:
// an array is full exactly when n == slots(n), and then it grows to slots(n + 1).
static int slots(int n)
{
    if (n == 0) return 0;
    int c = 4;
    while (c < n) c *= 2;
    return c;
}

static yt_node **doc_array(yt_doc *doc, int n)
{
    return n ? doc_alloc(doc, (size_t)slots(n) * sizeof(yt_node *)) : NULL;
}

static void map_append(yt_doc *doc, yt_node *map, yt_node *key, yt_node *value)
{
    if (map->n == slots(map->n)) {
        yt_node **keys = doc_array(doc, map->n + 1);
        yt_node **items = doc_array(doc, map->n + 1);
        if (map->n) {
            memcpy(keys, map->keys, (size_t)map->n * sizeof *keys);
            memcpy(items, map->items, (size_t)map->n * sizeof *items);
        }
        map->keys = keys;  // the old arrays stay in the chunks until yt_doc_free
        map->items = items;
    }
    map->keys[map->n] = key;
    map->items[map->n] = value;
    map->n++;
}

void yt_doc_free(yt_doc *doc)
{
    if (!doc) return;
    yt_chunk *c = doc->chunks;
    while (c) {
        yt_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(doc);
}

yt_node *yt_root(yt_doc *doc)
{
    return doc ? doc->root : NULL;
}

const char *yt_intern(yt_doc *doc, const char *s)
{
    for (yt_name *n = doc->names; n; n = n->next)
        if (strcmp(n->s, s) == 0) return n->s;
    yt_name *n = doc_alloc(doc, sizeof *n);
    n->s = doc_strndup(doc, s, strlen(s));
    n->next = doc->names;
    doc->names = n;
    return n->s;
}

// ---- lookup and mutation --------------------------------------------------------------

int yt_map_find(const yt_node *map, const char *key)
{
    if (!map || map->kind != YT_MAP || !key) return -1;
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->text, key) == 0) return i;
    return -1;
}

yt_node *yt_map_get(const yt_node *map, const char *key)
{
    int i = yt_map_find(map, key);
    return i < 0 ? NULL : map->items[i];
}

yt_node *yt_new_scalar(yt_doc *doc, const char *text, int plain, yt_mark mark)
{
    if (!text) text = "";
    yt_node *n = doc_alloc(doc, sizeof *n);
    n->kind = YT_SCALAR;
    n->mark = mark;
    n->plain = plain ? 1 : 0;
    n->text = doc_strndup(doc, text, strlen(text));
    return n;
}

yt_node *yt_new_map(yt_doc *doc, yt_mark mark)
{
    yt_node *n = doc_alloc(doc, sizeof *n);
    n->kind = YT_MAP;
    n->mark = mark;
    return n;
}

void yt_map_set(yt_doc *doc, yt_node *map, const char *key, yt_node *value, yt_mark keymark)
{
    GL_CHECK(map && map->kind == YT_MAP && key && value, "yt_map_set needs a mapping, a key and a value");
    int i = yt_map_find(map, key);
    if (i >= 0) {
        map->items[i] = value;  // the key keeps the mark where it was first written
        return;
    }
    map_append(doc, map, yt_new_scalar(doc, key, 1, keymark), value);
}

void yt_seq_set(yt_node *seq, int i, yt_node *value)
{
    GL_CHECK(seq && seq->kind == YT_SEQ && i >= 0 && i < seq->n && value,
             "yt_seq_set needs a sequence, an index inside it and a value");
    seq->items[i] = value;
}

// ---- errors and key paths --------------------------------------------------------------

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// One step of a key path: a key (".key", or bare when first) or, when key is NULL, "[index]".
// An index below 0 is a step that shows nothing (a key that is itself a mapping or list).
typedef struct {
    const char *key;
    int index;
} yt_step;

// The path in galley's notation (`model.layers[2].units`), or "(recipe)" when empty. A path
// deeper than YT_PATH_SHOWN steps keeps its first and last steps around "...".
static void path_format(char *buf, size_t len, const yt_step *s, int n)
{
    size_t k = 0;
    int first = 1;
    buf[0] = '\0';
    for (int i = 0; i < n && k < len; i++) {
        if (n > YT_PATH_SHOWN && i == YT_PATH_SHOWN - 2) {
            k += (size_t)snprintf(buf + k, len - k, "...");
            i = n - 2;  // the last two steps follow
            first = 1;  // and a key right after "..." takes no dot
        }
        if (k >= len) break;
        if (s[i].key) {
            k += (size_t)snprintf(buf + k, len - k, "%s%s", first ? "" : ".", s[i].key);
            first = 0;
        } else if (s[i].index >= 0) {
            k += (size_t)snprintf(buf + k, len - k, "[%d]", s[i].index);
            first = 0;
        }
    }
    if (!buf[0]) snprintf(buf, len, "(recipe)");
}

// The loader's state for one document.
typedef struct {
    yt_doc *doc;
    yaml_document_t *ydoc;
    const char *file;  // interned in doc
    char *err;
    size_t errlen;
    int bare;  // messages without "FILE:LINE:COL: error: PATH: " (yt_load_value)
    // Where measure() or build() is: the key path of the node being visited.
    yt_step path[YT_MAX_DEPTH + 2];
    int npath;
    // Per libyaml node (index - 1), filled by measure().
    unsigned char *state;
    int *height;
    int *size;
    int *entry;  // npath when measure() entered the node (read while it is ACTIVE)
} loader;

static void path_push(loader *ld, const char *key, int index)
{
    // measure() stops at YT_MAX_DEPTH levels and every step is one level, so this holds.
    GL_CHECK(ld->npath < (int)(sizeof ld->path / sizeof *ld->path), "YAML key path deeper than the nesting limit");
    ld->path[ld->npath++] = (yt_step){key, index};
}

// "FILE:LINE:COL: error: PATH: MESSAGE" at a libyaml mark (0-based).
static void emit(const loader *ld, yaml_mark_t m, const char *path, const char *msg)
{
    if (!ld->err || ld->errlen == 0) return;
    if (ld->bare)
        set_err(ld->err, ld->errlen, "%s", msg);
    else
        set_err(ld->err, ld->errlen, "%s:%d:%d: error: %s: %s", ld->file, (int)m.line + 1, (int)m.column + 1, path,
                msg);
}

// The error at mark m, with the loader's current key path; returns -1 for `return fail(...)`.
static int fail(loader *ld, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(loader *ld, yaml_mark_t m, const char *fmt, ...)
{
    char msg[512], path[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    path_format(path, sizeof path, ld->path, ld->npath);
    emit(ld, m, path, msg);
    return -1;
}

// ---- where a libyaml error happened ------------------------------------------------------

static int mark_cmp(yaml_mark_t a, yaml_mark_t b)
{
    if (a.line != b.line) return a.line < b.line ? -1 : 1;
    return a.column < b.column ? -1 : a.column > b.column;
}

// The byte offset of a mark. libyaml counts lines and characters, not bytes, and does not
// count a byte order mark.
static size_t mark_offset(const unsigned char *text, size_t len, yaml_mark_t m)
{
    size_t i = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    for (size_t line = 0; line < m.line && i < len; i++) {
        if (text[i] == '\n' || (text[i] == '\r' && (i + 1 >= len || text[i + 1] != '\n'))) line++;
    }
    for (size_t col = 0; col < m.column && i < len && text[i] != '\n' && text[i] != '\r'; col++) {
        i++;
        while (i < len && (text[i] & 0xC0) == 0x80) i++;  // UTF-8 continuation bytes
    }
    return i;
}

// Whether the line of a key that ends at `end` also holds (the start of) its value.
static int value_on_key_line(const unsigned char *text, size_t len, yaml_mark_t end)
{
    size_t i = mark_offset(text, len, end);
    while (i < len && (text[i] == ' ' || text[i] == '\t')) i++;
    if (i < len && text[i] == ':') i++;
    for (;;) {
        while (i < len && (text[i] == ' ' || text[i] == '\t')) i++;
        if (i < len && (text[i] == '&' || text[i] == '!')) {  // an anchor or a tag alone is no value yet
            while (i < len && text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r') i++;
            continue;
        }
        break;
    }
    return i < len && text[i] != '\n' && text[i] != '\r' && text[i] != '#';
}

// An open mapping or list in an event pass.
typedef struct {
    int seq;            // a list; else a mapping
    int n;              // list: items done
    yaml_mark_t after;  // list: where the last item ended (where the list starts, before any)
    enum { KEY_NEXT, IN_KEY, VALUE_NEXT } want;  // mapping: what comes next
    char *key;          // mapping, VALUE_NEXT: the key (NULL for a key that is not a scalar)
    yaml_mark_t key_start, key_end;
} sframe;

// The open mappings and lists of an event pass, outermost first.
typedef struct {
    sframe *st;
    int n, cap;
} walk;

// A node has ended (at end) inside frame f.
static void frame_took_node(sframe *f, yaml_mark_t end)
{
    if (f->seq) {
        f->n++;
        f->after = end;
    } else if (f->want == VALUE_NEXT) {
        free(f->key);
        f->key = NULL;
        f->want = KEY_NEXT;
    } else {
        f->want = VALUE_NEXT;  // a key that was a mapping or a list
    }
}

static void walk_event(walk *w, const yaml_event_t *ev)
{
    sframe *top = w->n ? &w->st[w->n - 1] : NULL;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
    case YAML_ALIAS_EVENT:
        if (top && !top->seq && top->want == KEY_NEXT) {
            top->want = VALUE_NEXT;
            top->key = ev->type == YAML_SCALAR_EVENT ? gl_xstrdup((const char *)ev->data.scalar.value) : NULL;
            top->key_start = ev->start_mark;
            top->key_end = ev->end_mark;
        } else if (top) {
            frame_took_node(top, ev->end_mark);
        }
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (top && !top->seq && top->want == KEY_NEXT) top->want = IN_KEY;
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 16;
            sframe *bigger = gl_xmalloc((size_t)w->cap * sizeof *bigger);
            if (w->n) memcpy(bigger, w->st, (size_t)w->n * sizeof *bigger);
            free(w->st);
            w->st = bigger;
        }
        w->st[w->n++] = (sframe){.seq = ev->type == YAML_SEQUENCE_START_EVENT, .after = ev->start_mark, .want = KEY_NEXT};
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (!w->n) break;
        free(w->st[--w->n].key);
        if (w->n) frame_took_node(&w->st[w->n - 1], ev->end_mark);
        break;
    default:
        break;
    }
}

// The key path of the pass's position, into buf. Every open collection names its pending key
// or item, except the innermost, which names it only when `inside` is set or when it holds
// `at`: a key's value holds `at` when `at` is on the key's line, or when the value starts on
// a later line (`layers:` then a bad line); a key with its value on its own line
// (`type: dense`) is done, and an error on the next line belongs to the mapping around it.
// A list's next item holds `at` when `at` lies after the last item.
static void walk_path(const walk *w, const unsigned char *text, size_t len, yaml_mark_t at, int inside, char *buf,
                      size_t buflen)
{
    yt_step *steps = gl_xmalloc((size_t)(w->n ? w->n : 1) * sizeof *steps);
    int n = 0;
    for (int i = 0; i < w->n; i++) {
        const sframe *f = &w->st[i];
        int inner = i == w->n - 1;
        if (f->seq) {
            if (!inner || inside || mark_cmp(at, f->after) > 0) steps[n++] = (yt_step){NULL, f->n};
        } else if (f->want == VALUE_NEXT && f->key) {
            int holds = mark_cmp(at, f->key_start) >= 0 &&
                        (at.line <= f->key_end.line || !value_on_key_line(text, len, f->key_end));
            if (!inner || inside || holds) steps[n++] = (yt_step){f->key, 0};
        }
    }
    path_format(buf, buflen, steps, n);
    free(steps);
}

static void walk_free(walk *w)
{
    for (int i = 0; i < w->n; i++) free(w->st[i].key);
    free(w->st);
}

// The key path where libyaml stopped, into buf. Its loader gives no partial tree, so this
// parses the input again as events up to the error; or, with stop set, up to the first event
// at or after `at` (for errors that the events do not show: an undefined alias; bytes that
// are not UTF-8, with text cut there). `at` is libyaml's context mark, else its problem mark.
static void syntax_path(const unsigned char *text, size_t len, int stop, yaml_mark_t at, char *buf, size_t buflen)
{
    yaml_parser_t p;
    walk w = {0};
    int inside = 0;
    if (!yaml_parser_initialize(&p)) {
        snprintf(buf, buflen, "(recipe)");
        return;
    }
    yaml_parser_set_input_string(&p, text, len);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break;  // the error: the stack is where it happened
        int node = ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT;
        int end = ev.type == YAML_STREAM_END_EVENT;
        if (stop && mark_cmp(ev.start_mark, at) >= 0) {
            yaml_event_delete(&ev);
            break;
        }
        if (stop && node && mark_cmp(ev.end_mark, at) >= 0) {
            inside = 1;  // the error is in this very node: a key names itself
            sframe *top = w.n ? &w.st[w.n - 1] : NULL;
            if (top && !top->seq && top->want == KEY_NEXT && ev.type == YAML_SCALAR_EVENT) {
                top->key = gl_xstrdup((const char *)ev.data.scalar.value);
                top->want = VALUE_NEXT;
            }
            yaml_event_delete(&ev);
            break;
        }
        walk_event(&w, &ev);
        yaml_event_delete(&ev);
        if (end) break;
    }
    yaml_parser_delete(&p);
    walk_path(&w, text, len, at, inside, buf, buflen);
    walk_free(&w);
}

// Rejects nesting deeper than YT_MAX_DEPTH before libyaml's loader sees it: its scanner takes
// time quadratic in the depth of flow collections, so a deep document would take minutes to
// load only to be refused. Syntax errors are left to the loader, which reports them.
static int check_depth(loader *ld, const unsigned char *text, size_t len)
{
    yaml_parser_t p;
    walk w = {0};
    int rc = 0;
    if (!yaml_parser_initialize(&p)) return 0;  // the loader will say so
    yaml_parser_set_input_string(&p, text, len);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break;
        int node = ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT ||
                   ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT;
        int end = ev.type == YAML_STREAM_END_EVENT;
        if (node && w.n + 1 > YT_MAX_DEPTH) {  // the root is level 1, as in measure()
            char path[256], msg[64];
            walk_path(&w, text, len, ev.start_mark, 1, path, sizeof path);
            snprintf(msg, sizeof msg, "nesting too deep (more than %d levels)", YT_MAX_DEPTH);
            emit(ld, ev.start_mark, path, msg);
            rc = -1;
            end = 1;
        } else {
            walk_event(&w, &ev);
        }
        yaml_event_delete(&ev);
        if (end) break;
    }
    yaml_parser_delete(&p);
    walk_free(&w);
    return rc;
}

// libyaml's own report, at the file and key path like every other recipe error.
static void parser_fail(loader *ld, const yaml_parser_t *p, const unsigned char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR) {
        if (ld->bare)
            set_err(ld->err, ld->errlen, "out of memory while parsing YAML");
        else
            set_err(ld->err, ld->errlen, "%s: error: out of memory while parsing YAML", ld->file);
        return;
    }
    char msg[512], path[256];
    yaml_mark_t m = p->problem_mark;
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_READER_ERROR) {
        // Reader errors (bad encoding) carry a byte offset instead of a mark.
        size_t end = p->problem_offset < len ? p->problem_offset : len;
        m.line = 0;
        m.column = 0;
        for (size_t i = 0; i < end; i++) {
            if (text[i] == '\n') {
                m.line++;
                m.column = 0;
            } else if ((text[i] & 0xC0) != 0x80) {
                m.column++;  // count characters, not UTF-8 continuation bytes
            }
        }
        snprintf(msg, sizeof msg, "%s (the file must be UTF-8 text)", problem);
        syntax_path(text, end, 1, m, path, sizeof path);
    } else if (p->error == YAML_COMPOSER_ERROR) {
        if (p->context && strcmp(problem, "second occurrence") == 0 && strstr(p->context, "duplicate anchor"))
            snprintf(msg, sizeof msg, "duplicate anchor (first at line %d, column %d)", (int)p->context_mark.line + 1,
                     (int)p->context_mark.column + 1);
        else
            snprintf(msg, sizeof msg, "%s", problem);
        syntax_path(text, len, 1, m, path, sizeof path);
    } else {
        int k;
        if (!p->context)
            k = snprintf(msg, sizeof msg, "%s", problem);
        else if (mark_cmp(p->context_mark, m) == 0)
            k = snprintf(msg, sizeof msg, "%s (%s)", problem, p->context);
        else
            k = snprintf(msg, sizeof msg, "%s (%s at line %d, column %d)", problem, p->context,
                         (int)p->context_mark.line + 1, (int)p->context_mark.column + 1);
        size_t at = mark_offset(text, len, m);
        if (k >= 0 && (size_t)k < sizeof msg && at < len && text[at] == '\t')
            snprintf(msg + k, sizeof msg - (size_t)k, "; tab characters cannot indent YAML; use spaces");
        syntax_path(text, len, 0, p->context ? p->context_mark : m, path, sizeof path);
    }
    emit(ld, m, path, msg);
}

// What a node is, for messages: "a mapping", "a list", "a scalar ('x')".
static const char *describe(const yaml_node_t *n, char *buf, size_t len)
{
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default:
        if (n->data.scalar.length == 0) return "an empty value";
        snprintf(buf, len, "a scalar ('%.40s%s')", (const char *)n->data.scalar.value,
                 n->data.scalar.length > 40 ? "..." : "");
        return buf;
    }
}

// ---- pass 1: measure the tree as it will be after alias expansion ---------------------

enum { UNSEEN, ACTIVE, DONE };

// Visits node idx at nesting depth (root = 1), at key path ld->path. Nodes reached again
// through aliases are memoized, so a document of n libyaml nodes costs O(n) here however
// large its expansion. An error names the path where the expanded node would land.
static int measure(loader *ld, int idx, int depth)
{
    yaml_node_t *n = yaml_document_get_node(ld->ydoc, idx);
    int i = idx - 1;
    if (ld->state[i] == ACTIVE) {
        ld->npath = ld->entry[i];  // the path of the anchored node, which the mark points at
        return fail(ld, n->start_mark, "recursive alias: this anchored node contains an alias to itself");
    }
    int height = ld->state[i] == DONE ? ld->height[i] : 1;
    if (depth + height - 1 > YT_MAX_DEPTH)
        return fail(ld, n->start_mark, "nesting too deep (more than %d levels)", YT_MAX_DEPTH);
    if (ld->state[i] == DONE) return 0;

    ld->state[i] = ACTIVE;
    ld->entry[i] = ld->npath;
    int size = 1;
    height = 0;
    int kids[2];
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            path_push(ld, NULL, (int)(it - n->data.sequence.items.start));
            if (measure(ld, *it, depth + 1)) return -1;
            ld->npath--;
            size += ld->size[*it - 1];
            if (size > YT_MAX_NODES) size = YT_MAX_NODES + 1;  // saturate: sizes never overflow
            if (ld->height[*it - 1] > height) height = ld->height[*it - 1];
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            kids[0] = p->key;
            kids[1] = p->value;
            const yaml_node_t *key = yaml_document_get_node(ld->ydoc, p->key);
            for (int k = 0; k < 2; k++) {
                // A key is no step of the path; a value is at its key (a non-scalar key shows nothing).
                if (k == 1) {
                    if (key->type == YAML_SCALAR_NODE)
                        path_push(ld, (const char *)key->data.scalar.value, 0);
                    else
                        path_push(ld, NULL, -1);
                }
                if (measure(ld, kids[k], depth + 1)) return -1;
                if (k == 1) ld->npath--;
                size += ld->size[kids[k] - 1];
                if (size > YT_MAX_NODES) size = YT_MAX_NODES + 1;
                if (ld->height[kids[k] - 1] > height) height = ld->height[kids[k] - 1];
            }
        }
    }
    if (size > YT_MAX_NODES)
        return fail(ld, n->start_mark, "document too large after expanding aliases (more than %d nodes)",
                    YT_MAX_NODES);
    ld->size[i] = size;
    ld->height[i] = height + 1;
    ld->state[i] = DONE;
    return 0;
}

// ---- pass 2: build the tree --------------------------------------------------------------

// A string set with the mark of each string's first occurrence (open addressing).
typedef struct {
    const char *key;
    yaml_mark_t mark;
} kslot;

typedef struct {
    kslot *slot;
    size_t cap, n;
} keyset;

static size_t key_hash(const char *s)
{
    uint64_t h = 1469598103934665603u;  // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

static kslot *keyset_probe(kslot *slot, size_t cap, const char *key)
{
    size_t i = key_hash(key) & (cap - 1);
    while (slot[i].key && strcmp(slot[i].key, key) != 0) i = (i + 1) & (cap - 1);
    return &slot[i];
}

// Adds key; returns NULL when it was new, else the slot of its first occurrence.
static const kslot *keyset_add(keyset *s, const char *key, yaml_mark_t mark)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        kslot *slot = gl_xcalloc(cap, sizeof *slot);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i].key) *keyset_probe(slot, cap, s->slot[i].key) = s->slot[i];
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    kslot *k = keyset_probe(s->slot, s->cap, key);
    if (k->key) return k;
    k->key = key;
    k->mark = mark;
    s->n++;
    return NULL;
}

static yt_mark mark_of(loader *ld, yaml_mark_t m)
{
    return (yt_mark){ld->file, (int)m.line + 1, (int)m.column + 1};
}

static int is_merge_key(const yaml_node_t *k)
{
    return k->type == YAML_SCALAR_NODE && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           strcmp((const char *)k->data.scalar.value, "<<") == 0;
}

static yt_node *build(loader *ld, int idx);

// Applies `<<: value` to map: the pairs of each source mapping whose keys are not yet in
// seen (explicit keys, then earlier sources) are appended, keeping their own marks.
static int merge_into(loader *ld, yt_node *map, keyset *seen, const yaml_node_t *key, int value)
{
    const yaml_node_t *v = yaml_document_get_node(ld->ydoc, value);
    const int *src = &value;
    int nsrc = 1;
    char buf[64];
    if (v->type == YAML_SEQUENCE_NODE) {
        src = v->data.sequence.items.start;
        nsrc = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
        for (int i = 0; i < nsrc; i++) {
            const yaml_node_t *item = yaml_document_get_node(ld->ydoc, src[i]);
            if (item->type != YAML_MAPPING_NODE)
                return fail(ld, key->start_mark,
                            "merge key '<<' expects a mapping or a list of mappings, found a list whose item %d is %s",
                            i + 1, describe(item, buf, sizeof buf));
        }
    } else if (v->type != YAML_MAPPING_NODE) {
        return fail(ld, key->start_mark, "merge key '<<' expects a mapping or a list of mappings, found %s",
                    describe(v, buf, sizeof buf));
    }
    path_push(ld, "<<", 0);  // a merge source's own errors are at MAP.<< or MAP.<<[i]
    for (int s = 0; s < nsrc; s++) {
        if (v->type == YAML_SEQUENCE_NODE) path_push(ld, NULL, s);
        yt_node *from = build(ld, src[s]);
        if (!from) return -1;
        if (v->type == YAML_SEQUENCE_NODE) ld->npath--;
        for (int i = 0; i < from->n; i++) {
            yt_node *k = from->keys[i];
            if (!keyset_add(seen, k->text, (yaml_mark_t){0, 0, 0})) map_append(ld->doc, map, k, from->items[i]);
        }
    }
    ld->npath--;
    return 0;
}

static yt_node *build_scalar(loader *ld, const yaml_node_t *n)
{
    yt_node *s = doc_alloc(ld->doc, sizeof *s);
    s->kind = YT_SCALAR;
    s->mark = mark_of(ld, n->start_mark);
    s->plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    s->text = doc_strndup(ld->doc, (const char *)n->data.scalar.value, n->data.scalar.length);
    return s;
}

static yt_node *build_map(loader *ld, const yaml_node_t *n)
{
    yt_node *map = yt_new_map(ld->doc, mark_of(ld, n->start_mark));
    yaml_node_pair_t *start = n->data.mapping.pairs.start, *top = n->data.mapping.pairs.top;
    const yaml_node_t *merge = NULL;
    keyset seen = {0};
    char buf[64];

    // First every explicit key, so that they win over merged ones wherever `<<` stands.
    for (yaml_node_pair_t *p = start; p < top; p++) {
        const yaml_node_t *k = yaml_document_get_node(ld->ydoc, p->key);
        if (k->type != YAML_SCALAR_NODE) {
            fail(ld, k->start_mark, "mapping keys must be plain strings, found %s", describe(k, buf, sizeof buf));
            goto fail;
        }
        const yaml_node_t *first = NULL;
        if (is_merge_key(k)) {
            first = merge;
            merge = merge ? merge : k;
        } else {
            const kslot *dup = keyset_add(&seen, (const char *)k->data.scalar.value, k->start_mark);
            if (dup) {
                path_push(ld, dup->key, 0);
                fail(ld, k->start_mark, "duplicate key '%s' (first at line %d, column %d)", dup->key,
                     (int)dup->mark.line + 1, (int)dup->mark.column + 1);
                goto fail;
            }
        }
        if (first) {
            fail(ld, k->start_mark,
                 "duplicate key '<<' (first at line %d, column %d); to merge several mappings write <<: [*a, *b]",
                 (int)first->start_mark.line + 1, (int)first->start_mark.column + 1);
            goto fail;
        }
    }
    for (yaml_node_pair_t *p = start; p < top; p++) {
        const yaml_node_t *k = yaml_document_get_node(ld->ydoc, p->key);
        if (is_merge_key(k)) {
            if (merge_into(ld, map, &seen, k, p->value)) goto fail;
            continue;
        }
        path_push(ld, (const char *)k->data.scalar.value, 0);
        yt_node *value = build(ld, p->value);
        if (!value) goto fail;
        ld->npath--;
        map_append(ld->doc, map, build_scalar(ld, k), value);
    }
    free(seen.slot);
    return map;
fail:
    free(seen.slot);
    return NULL;
}

// A fresh copy of node idx and everything under it: an alias used twice is built twice.
static yt_node *build(loader *ld, int idx)
{
    const yaml_node_t *n = yaml_document_get_node(ld->ydoc, idx);
    if (n->type == YAML_SCALAR_NODE) return build_scalar(ld, n);
    if (n->type == YAML_MAPPING_NODE) return build_map(ld, n);

    yt_node *seq = doc_alloc(ld->doc, sizeof *seq);
    seq->kind = YT_SEQ;
    seq->mark = mark_of(ld, n->start_mark);
    seq->n = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    seq->items = doc_array(ld->doc, seq->n);
    for (int i = 0; i < seq->n; i++) {
        path_push(ld, NULL, i);
        if (!(seq->items[i] = build(ld, n->data.sequence.items.start[i]))) return NULL;
        ld->npath--;
    }
    return seq;
}

// ---- loading -------------------------------------------------------------------------------

static int convert(loader *ld)
{
    int count = (int)(ld->ydoc->nodes.top - ld->ydoc->nodes.start);
    ld->state = gl_xcalloc((size_t)count, sizeof *ld->state);
    ld->height = gl_xcalloc((size_t)count, sizeof *ld->height);
    ld->size = gl_xcalloc((size_t)count, sizeof *ld->size);
    ld->entry = gl_xcalloc((size_t)count, sizeof *ld->entry);
    // The root is node 1 in libyaml's document.
    int rc = measure(ld, 1, 1);
    if (rc == 0) {
        ld->doc->root = build(ld, 1);
        rc = ld->doc->root ? 0 : -1;
    }
    free(ld->state);
    free(ld->height);
    free(ld->size);
    free(ld->entry);
    return rc;
}

static int load_bytes(const unsigned char *text, size_t len, const char *name, int bare, yt_doc **out, char *err,
                      size_t errlen)
{
    yt_doc *doc = gl_xcalloc(1, sizeof *doc);
    loader ld = {.doc = doc, .file = yt_intern(doc, name), .err = err, .errlen = errlen, .bare = bare};
    yaml_parser_t parser;
    yaml_document_t ydoc, extra;
    int have_parser = 0, have_doc = 0, rc = -1;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        if (bare)
            set_err(err, errlen, "out of memory starting the YAML parser");
        else
            set_err(err, errlen, "%s: error: out of memory starting the YAML parser", ld.file);
        goto done;
    }
    have_parser = 1;
    yaml_parser_set_input_string(&parser, text, len);
    if (check_depth(&ld, text, len)) goto done;
    if (!yaml_parser_load(&parser, &ydoc)) {  // on failure libyaml has freed ydoc itself
        parser_fail(&ld, &parser, text, len);
        goto done;
    }
    have_doc = 1;
    ld.ydoc = &ydoc;

    yaml_node_t *root = yaml_document_get_root_node(&ydoc);
    if (root) {
        // Without a first document the stream has ended; otherwise look for a second one.
        if (!yaml_parser_load(&parser, &extra)) {
            parser_fail(&ld, &parser, text, len);
            goto done;
        }
        int second = yaml_document_get_root_node(&extra) != NULL;
        yaml_mark_t at = extra.start_mark;
        yaml_document_delete(&extra);
        if (second) {
            fail(&ld, at, "only one YAML document is allowed per recipe");
            goto done;
        }
    }
    if (!root || (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0 &&
                  root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)) {
        // No document, or only "---": an empty recipe, which is an empty mapping.
        yaml_mark_t at = root ? root->start_mark : (yaml_mark_t){0, 0, 0};
        doc->root = yt_new_map(doc, mark_of(&ld, at));
    } else if (convert(&ld)) {
        goto done;
    }
    rc = 0;

done:
    if (have_doc) yaml_document_delete(&ydoc);
    if (have_parser) yaml_parser_delete(&parser);
    if (rc == 0) {
        *out = doc;
    } else {
        yt_doc_free(doc);
    }
    return rc;
}

int yt_load_string(const char *text, const char *name, yt_doc **out, char *err, size_t errlen)
{
    if (!text) text = "";
    return load_bytes((const unsigned char *)text, strlen(text), name ? name : "<string>", 0, out, err, errlen);
}

int yt_load_value(const char *text, const char *name, yt_doc **out, char *err, size_t errlen)
{
    if (!text) text = "";
    return load_bytes((const unsigned char *)text, strlen(text), name ? name : "<string>", 1, out, err, errlen);
}

int yt_load_file(const char *path, yt_doc **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "%s: error: cannot read: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        set_err(err, errlen, "%s: error: cannot read: %s", path, strerror(EISDIR));
        return -1;
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, len = 0;
    unsigned char *buf = gl_xmalloc(cap);
    for (;;) {
        if (len == cap) {
            unsigned char *bigger = gl_xmalloc(cap * 2);
            memcpy(bigger, buf, len);
            free(buf);
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        free(buf);
        fclose(f);
        set_err(err, errlen, "%s: error: cannot read: %s", path, strerror(e));
        return -1;
    }
    fclose(f);
    int rc = load_bytes(buf, len, path, 0, out, err, errlen);
    free(buf);
    return rc;
}
