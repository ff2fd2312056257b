// ytree.h: a YAML document as a plain tree with source positions, built on libyaml.
//
// Anchors and aliases are expanded (each alias use becomes its own copy, so an override of
// one copy never changes another), `<<:` merge keys are applied (explicit keys win, earlier
// merge sources win over later ones), and duplicate keys are an error. Every node keeps the
// file, line and column (1-based) where it was written, so recipe errors can point at it.
#ifndef GALLEY_YTREE_H
#define GALLEY_YTREE_H

#include <stddef.h>

typedef enum { YT_SCALAR, YT_MAP, YT_SEQ } yt_kind;

typedef struct {
    const char *file;  // owned by the yt_doc (or static); never NULL
    int line, col;     // 1-based
} yt_mark;

typedef struct yt_node yt_node;
struct yt_node {
    yt_kind kind;
    yt_mark mark;
    int plain;        // scalar written without quotes (only plain scalars are numbers/bools/null)
    char *text;       // YT_SCALAR: the value ("" for an empty value); NULL otherwise
    int n;            // YT_SEQ: items; YT_MAP: pairs
    yt_node **items;  // YT_SEQ: the items; YT_MAP: the values
    yt_node **keys;   // YT_MAP: the keys (always YT_SCALAR); NULL otherwise
};

typedef struct yt_doc yt_doc;

// Load a file or a string. Returns 0 on success. On failure returns -1, *out is NULL and err
// holds one line "FILE:LINE:COL: error: KEYPATH: what went wrong", KEYPATH being where in the
// document it went wrong (`train.epochs`, `model.layers[2].units`, `seed`; "(recipe)" at the
// root), or "FILE: error: cannot read: reason".
// An empty document loads as an empty mapping. More than one document is an error.
int yt_load_file(const char *path, yt_doc **out, char *err, size_t errlen);
int yt_load_string(const char *text, const char *name, yt_doc **out, char *err, size_t errlen);
// Same as yt_load_string, but err holds only "what went wrong": for a value that is part of
// something else (a command-line override), whose caller says where it is.
int yt_load_value(const char *text, const char *name, yt_doc **out, char *err, size_t errlen);
void yt_doc_free(yt_doc *doc);

yt_node *yt_root(yt_doc *doc);

// Lookup: NULL when map is not a mapping or has no such key.
yt_node *yt_map_get(const yt_node *map, const char *key);
// Index of key in map->keys, or -1.
int yt_map_find(const yt_node *map, const char *key);

// Mutation, for command-line overrides. New nodes are owned by doc.
yt_node *yt_new_scalar(yt_doc *doc, const char *text, int plain, yt_mark mark);
yt_node *yt_new_map(yt_doc *doc, yt_mark mark);
// Replaces the value of key if present, else appends the pair.
void yt_map_set(yt_doc *doc, yt_node *map, const char *key, yt_node *value, yt_mark keymark);
// Replaces item i (0 <= i < seq->n).
void yt_seq_set(yt_node *seq, int i, yt_node *value);
// A string owned by doc (for marks' file names such as "<command line>").
const char *yt_intern(yt_doc *doc, const char *s);

#endif
