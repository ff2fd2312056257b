// resolve_blocks.h: shared by resolve_layers.c and resolve_blocks.c only. model.layers is
// resolved into a growing list of layers; an item {block: NAME, repeat: N, name: P} of it adds N
// copies of the block model.blocks.NAME, named P.0.<layer> ... P.<N-1>.<layer>.
#ifndef GALLEY_RESOLVE_BLOCKS_H
#define GALLEY_RESOLVE_BLOCKS_H

#include "recipe/recipe_internal.h"

#define BLOCK_INPUT "in"  // in a block's inputs: the copy's input

// The layers resolved so far, and the names block items stand for (an item's name is its last
// copy's last layer): everything an input may name.
typedef struct {
    layer_cfg *layers;  // becomes r->model.layers
    int n, cap;
    struct {
        const char *name, *target;  // target: an expanded layer's name
        int index;                  // the item's index in model.layers
    } *alias;
    int nalias, calias;
} layer_list;

// One entry of model.blocks, its layers resolved once (names as written in the block).
typedef struct {
    const char *name;
    const yt_node *key;  // the block's name in the recipe (for its marks)
    const yt_node *node;
    layer_cfg *layers;
    int n;
    int ok;    // resolved without errors: items using it expand
    int used;  // some item of model.layers names it
} block_def;

typedef struct {
    block_def *b;
    int n;
    int skip_unused;  // a block was named where none can be used: no "not used" errors
} block_set;

// resolve_layers.c
int layer_name_ok(const char *s, int dots);
// Resolves an item's type and its kind's keys into cfg (not name or inputs); -1 if the type is
// unknown (cfg->kind stays NULL), else 0 (key errors are reported and counted in c).
int layer_resolve_keys(rctx *c, const yt_node *item, layer_cfg *cfg, const char *lpath);
// The items of an inputs value (a name or a list of 1..GL_MAX_NAMES names): their count, or -1
// after an error.
int layer_inputs_items(rctx *c, const yt_node *v, const yt_node **items, const char *path);
// What NAME denotes among the layers so far ("input", a layer, or a block item's name): the
// layer's name to store, or NULL.
const char *layer_list_find(const layer_list *s, const char *name);
// The error for an input NAME that layer_list_find did not find; extra: more candidates.
void layer_list_unknown(rctx *c, const layer_list *s, const yt_node *it, const char *path,
                        const char *const *extra, int nextra);
// Who already holds NAME ("model.layers[2]", "model.layers[1] (enc.0.fc)"), or 0 if nobody.
int layer_list_holder(const layer_list *s, const char *name, char *buf, size_t len);
layer_cfg *layer_list_push(layer_list *s);

// resolve_blocks.c
void blocks_resolve(rctx *c, const yt_node *blocks, block_set *set, recipe_t *r);
void blocks_expand_item(rctx *c, const yt_node *item, int index, block_set *set, layer_list *s, recipe_t *r);
void blocks_finish(rctx *c, block_set *set);

#endif
