// ytree.c: load one YAML document with libyaml into a yt_node tree with source marks.
//
// libyaml's document API does the parsing; we then walk its node graph twice. measure()
// rejects recursive aliases, too-deep nesting and alias "bombs" before anything is copied,
// and build() turns every alias use into its own copy and applies `<<` merge keys.
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

// ---- errors -----------------------------------------------------------------------------

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// The loader's state for one document.
typedef struct {
    yt_doc *doc;
    yaml_document_t *ydoc;
    const char *file;  // interned in doc
    char *err;
    size_t errlen;
    // Per libyaml node (index - 1), filled by measure().
    unsigned char *state;
    int *height;
    int *size;
} loader;

// "FILE:LINE:COL: message" at a libyaml mark (0-based); returns -1 for `return fail(...)`.
static int fail(loader *ld, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(loader *ld, yaml_mark_t m, const char *fmt, ...)
{
    if (!ld->err || ld->errlen == 0) return -1;
    int k = snprintf(ld->err, ld->errlen, "%s:%d:%d: ", ld->file, (int)m.line + 1, (int)m.column + 1);
    if (k >= 0 && (size_t)k < ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + k, ld->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// libyaml's own report, made to point at the file like every other recipe error.
static void parser_fail(loader *ld, const yaml_parser_t *p, const unsigned char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR) {
        set_err(ld->err, ld->errlen, "%s: out of memory while parsing YAML", ld->file);
        return;
    }
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
        fail(ld, m, "%s (the file must be UTF-8 text)", problem);
        return;
    }
    if (p->context)
        fail(ld, m, "%s (%s at line %d, column %d)", problem, p->context, (int)p->context_mark.line + 1,
             (int)p->context_mark.column + 1);
    else
        fail(ld, m, "%s", problem);
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

// Visits node idx at nesting depth (root = 1). Nodes reached again through aliases are
// memoized, so a document of n libyaml nodes costs O(n) here however large its expansion.
static int measure(loader *ld, int idx, int depth)
{
    yaml_node_t *n = yaml_document_get_node(ld->ydoc, idx);
    int i = idx - 1;
    if (ld->state[i] == ACTIVE)
        return fail(ld, n->start_mark, "recursive alias: this anchored node contains an alias to itself");
    int height = ld->state[i] == DONE ? ld->height[i] : 1;
    if (depth + height - 1 > YT_MAX_DEPTH)
        return fail(ld, n->start_mark, "nesting too deep (more than %d levels)", YT_MAX_DEPTH);
    if (ld->state[i] == DONE) return 0;

    ld->state[i] = ACTIVE;
    int size = 1;
    height = 0;
    int kids[2];
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            if (measure(ld, *it, depth + 1)) return -1;
            size += ld->size[*it - 1];
            if (size > YT_MAX_NODES) size = YT_MAX_NODES + 1;  // saturate: sizes never overflow
            if (ld->height[*it - 1] > height) height = ld->height[*it - 1];
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            kids[0] = p->key;
            kids[1] = p->value;
            for (int k = 0; k < 2; k++) {
                if (measure(ld, kids[k], depth + 1)) return -1;
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
    for (int s = 0; s < nsrc; s++) {
        yt_node *from = build(ld, src[s]);
        if (!from) return -1;
        for (int i = 0; i < from->n; i++) {
            yt_node *k = from->keys[i];
            if (!keyset_add(seen, k->text, (yaml_mark_t){0, 0, 0})) map_append(ld->doc, map, k, from->items[i]);
        }
    }
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
                fail(ld, k->start_mark, "duplicate key '%s' (first at line %d, column %d)", dup->key,
                     (int)dup->mark.line + 1, (int)dup->mark.column + 1);
                goto fail;
            }
        }
        if (first) {
            fail(ld, k->start_mark, "duplicate key '<<' (first at line %d, column %d); to merge several mappings write <<: [*a, *b]",
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
        yt_node *value = build(ld, p->value);
        if (!value) goto fail;
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
    for (int i = 0; i < seq->n; i++)
        if (!(seq->items[i] = build(ld, n->data.sequence.items.start[i]))) return NULL;
    return seq;
}

// ---- loading -------------------------------------------------------------------------------

static int convert(loader *ld)
{
    int count = (int)(ld->ydoc->nodes.top - ld->ydoc->nodes.start);
    ld->state = gl_xcalloc((size_t)count, sizeof *ld->state);
    ld->height = gl_xcalloc((size_t)count, sizeof *ld->height);
    ld->size = gl_xcalloc((size_t)count, sizeof *ld->size);
    // The root is node 1 in libyaml's document.
    int rc = measure(ld, 1, 1);
    if (rc == 0) {
        ld->doc->root = build(ld, 1);
        rc = ld->doc->root ? 0 : -1;
    }
    free(ld->state);
    free(ld->height);
    free(ld->size);
    return rc;
}

static int load_bytes(const unsigned char *text, size_t len, const char *name, yt_doc **out, char *err,
                      size_t errlen)
{
    yt_doc *doc = gl_xcalloc(1, sizeof *doc);
    loader ld = {.doc = doc, .file = yt_intern(doc, name), .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t ydoc, extra;
    int have_parser = 0, have_doc = 0, rc = -1;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        set_err(err, errlen, "%s: out of memory starting the YAML parser", ld.file);
        goto done;
    }
    have_parser = 1;
    yaml_parser_set_input_string(&parser, text, len);
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
    return load_bytes((const unsigned char *)text, strlen(text), name ? name : "<string>", out, err, errlen);
}

int yt_load_file(const char *path, yt_doc **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(EISDIR));
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
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(e));
        return -1;
    }
    fclose(f);
    int rc = load_bytes(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}
