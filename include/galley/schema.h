// schema.h: the recipe schema's vocabulary. One table of key_spec (src/recipe/schema.c, plus
// each layer kind's keys) drives validation, defaults, `galley check` output and the README's
// recipe reference, so they cannot drift apart.
#ifndef GALLEY_SCHEMA_H
#define GALLEY_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KT_INT,      // int64_t
    KT_FLOAT,    // double
    KT_BOOL,     // bool
    KT_STRING,   // const char *
    KT_ENUM,     // int: index into choices
    KT_SECTION,  // nested mapping described by children
    KT_LAYERS,   // model.layers: a list of layer mappings (see layer.h)
    KT_NAMES,    // list of layer names (a single name is accepted too); gl_names
    KT_PAD,      // int64_t: padding >= 0, or the word `same` (stored as GL_PAD_SAME)
    KT_FLOATS,   // gl_floats: a list of numbers, each within [min, max]
} key_type;

#define GL_PAD_SAME (-1)

typedef enum {
    KF_DEFAULT = 0,   // has a default (def), may be omitted
    KF_REQUIRED = 1,  // must be given
    KF_OPTIONAL = 2,  // may be omitted and then has no value (floats: NAN, strings: NULL)
} key_flag;

typedef struct key_spec {
    const char *name;
    key_type type;
    key_flag flag;
    const char *def;               // default, written as YAML (KF_DEFAULT only)
    double min, max;               // inclusive range for KT_INT and KT_FLOAT
    const char *const *choices;    // KT_ENUM: NULL-terminated
    size_t offset;                 // where the value lives in the target struct
    const struct key_spec *children;  // KT_SECTION: NULL-terminated by name == NULL
    const char *doc;               // one line for the reference
    // Keys that make sense only with other settings (momentum only for sgd, ...): given while
    // applies() is false, the key is an error rather than silently ignored, and it is left out of
    // `galley check` output. NULL: always applies. `when` says it in words.
    bool (*applies)(const void *base);
    const char *when;
} key_spec;

// A resolved value slot; layer keys live in an array of these (offset = i * sizeof(gl_value)).
typedef union {
    int64_t i;
    double f;
    bool b;
    const char *s;
    int e;
} gl_value;

#define GL_MAX_NAMES 8
typedef struct {
    int n;
    const char *name[GL_MAX_NAMES];
} gl_names;

#define GL_MAX_FLOATS 64
typedef struct {
    int n;
    double v[GL_MAX_FLOATS];
} gl_floats;

// Helpers to write tables tersely. R(lo, hi) gives a range.
#define GL_INF 1e300
#define KEY_END {0}

// Levenshtein-based suggestion: the closest candidate within a small edit distance, or NULL.
const char *schema_suggest(const char *word, const char *const *candidates, int n);

// Describes a key's expected value in words, e.g. "an integer >= 1" or "one of sgd, adamw".
void schema_describe(const key_spec *k, char *buf, size_t len);

#endif
