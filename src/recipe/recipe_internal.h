// recipe_internal.h: shared by the recipe module's files only.
#ifndef GALLEY_RECIPE_INTERNAL_H
#define GALLEY_RECIPE_INTERNAL_H

#include <stdio.h>

#include "galley/recipe.h"

typedef struct {
    FILE *err;
    int nerr;
} rctx;

void rctx_error(rctx *c, yt_mark m, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void path_join(char *dst, size_t len, const char *parent, const char *key);
int resolve_value(rctx *c, const key_spec *k, const yt_node *n, void *dst, const char *path);
void resolve_default(rctx *c, const key_spec *k, void *dst);
void resolve_section(rctx *c, const key_spec *keys, const yt_node *node, void *base, const char *path,
                     yt_mark where);
void report_unknown_key(rctx *c, const yt_node *map, int i, const key_spec *keys, const char *const *extra,
                        const char *parent);
void resolve_layers(rctx *c, const yt_node *node, recipe_t *r, const char *path, yt_mark where);
const yt_node *node_at(const yt_node *root, const char *dotted);
int recipe_resolve(recipe_t *r, const yt_node *root, FILE *err);
// Applies "a.b[2].c=value" to the tree; index is the override's 1-based position.
int recipe_override(recipe_t *r, const char *arg, int index, FILE *err);

#endif
