// resolve_blocks.c: model.blocks, named lists of layers written once, and the items of
// model.layers that repeat one: {block: NAME, repeat: N, name: P} adds N copies named P.0.<layer>
// ... P.<N-1>.<layer>. A block's layers are resolved once from their YAML (so an error in one is
// reported once, at its line in the block); the copies share those values and marks. Inside a
// copy an input names a layer of the same copy, `in` (the copy's input: the previous copy's last
// layer, or the layer before the item), or a layer above the item; P names the last copy's last
// layer. Blocks do not nest.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/layer.h"
#include "recipe/resolve_blocks.h"

#define MAX_REPEAT 1000

static const char *const item_keys[] = {"block", "repeat", "name", NULL};
static const key_spec string_key = {"block", KT_STRING, KF_REQUIRED, NULL, 0, 0, NULL, 0, NULL, "", NULL, NULL};
static const key_spec repeat_key = {"repeat", KT_INT, KF_DEFAULT, "1", 1, MAX_REPEAT, NULL, 0, NULL, "", NULL, NULL};

static int is_empty(const yt_node *n) {
    return n->kind == YT_SCALAR && n->plain && (!n->text[0] || !strcmp(n->text, "~") || !strcmp(n->text, "null"));
}

static const char *kind_word(const yt_node *n) {
    return n->kind == YT_MAP ? "a mapping" : n->kind == YT_SEQ ? "a list" : "a scalar";
}

static int block_local(const block_def *b, int upto, const char *name) {
    for (int k = 0; k < upto; k++)
        if (b->layers[k].name && !strcmp(b->layers[k].name, name)) return k;
    return -1;
}

// A block layer's name: as given (no dots; unique in the block) or <type>_<position>.
static void block_layer_name(rctx *c, block_def *b, int j, const char *lpath, recipe_t *r) {
    const yt_node *item = b->node->items[j], *nm = yt_map_get(item, "name");
    layer_cfg *cfg = &b->layers[j];
    char sub[600], buf[96];
    snprintf(sub, sizeof sub, "%s.name", lpath);
    if (nm && (nm->kind != YT_SCALAR || !layer_name_ok(nm->text, 0)))
        rctx_error(c, nm->mark, sub,
                   "a layer name is 1-63 letters, digits, '_' or '-' (in a block, no '.': the copies are named "
                   "ITEM.N.LAYER), found '%s'", nm->kind == YT_SCALAR ? nm->text : "(not a scalar)");
    else if (nm && !strcmp(nm->text, "input"))
        rctx_error(c, nm->mark, sub, "'input' is reserved for the model input");
    else if (nm && !strcmp(nm->text, BLOCK_INPUT))
        rctx_error(c, nm->mark, sub, "'" BLOCK_INPUT "' is reserved in a block: inputs use it for the copy's input");
    else if (nm)
        cfg->name = nm->text;
    if (!cfg->name) {
        snprintf(buf, sizeof buf, "%s_%d", cfg->kind->name, j);
        cfg->name = yt_intern(r->doc, buf);
    }
    int dup = block_local(b, j, cfg->name);
    if (dup >= 0)
        rctx_error(c, nm ? nm->mark : item->mark, sub, "layer name '%s' is already used by model.blocks.%s[%d]",
                   cfg->name, b->name, dup);
}

// The names a block layer's inputs give that the block itself answers: 'in' and earlier layers of
// the block; a later one is an error; any other name is looked up where the block is used.
static void block_layer_inputs(rctx *c, const block_def *b, int j, const char *lpath) {
    const yt_node *in = yt_map_get(b->node->items[j], "inputs"), *items[GL_MAX_NAMES];
    if (!in) return;
    char sub[600];
    snprintf(sub, sizeof sub, "%s.inputs", lpath);
    int n = layer_inputs_items(c, in, items, sub);
    for (int q = 0; q < n; q++) {
        int at = block_local(b, b->n, items[q]->text);
        if (at >= j)
            rctx_error(c, items[q]->mark, sub,
                       "'%s' is %s; inputs name an earlier layer of the block, '" BLOCK_INPUT
                       "' (the copy's input) or a layer above the block's item in model.layers",
                       items[q]->text, at == j ? "this layer itself" : "a later layer of the block");
    }
}

static void mark_used(block_set *set, const yt_node *name) {
    for (int i = 0; i < set->n; i++)
        if (name->kind == YT_SCALAR && set->b[i].name && !strcmp(set->b[i].name, name->text)) set->b[i].used = 1;
}

static void block_resolve(rctx *c, const yt_node *key, const yt_node *node, block_set *set, block_def *b, recipe_t *r) {
    char path[300], lpath[400];
    snprintf(path, sizeof path, "model.blocks.%s", key->text);
    b->name = key->text, b->key = key, b->node = node;
    int before = c->nerr;
    if (!layer_name_ok(key->text, 0))
        rctx_error(c, key->mark, path, "a block name is 1-63 letters, digits, '_' or '-', found '%s'", key->text);
    if (node->kind != YT_SEQ || node->n == 0) {
        rctx_error(c, node->mark, path, "a block is a non-empty list of layers, found %s",
                   node->kind == YT_SEQ ? "an empty list" : kind_word(node));
        return;
    }
    b->n = node->n;
    b->layers = gl_xcalloc((size_t)b->n, sizeof *b->layers);
    for (int j = 0; j < b->n; j++) {
        const yt_node *item = node->items[j];
        snprintf(lpath, sizeof lpath, "%s[%d]", path, j);
        b->layers[j].mark = item->mark;
        if (item->kind != YT_MAP)
            rctx_error(c, item->mark, lpath, "expected a layer mapping (type: ..., ...), found %s", kind_word(item));
        else if (yt_map_get(item, "block")) {
            mark_used(set, yt_map_get(item, "block"));  // used, in a way refused here: one error is enough
            rctx_error(c, item->mark, lpath, "a block's layers cannot use another block (blocks do not nest): "
                       "write its layers here, or repeat the blocks one after the other in model.layers");
        } else if (layer_resolve_keys(c, item, &b->layers[j], lpath) == 0)
            block_layer_name(c, b, j, lpath, r);
    }
    for (int j = 0; j < b->n; j++) {
        snprintf(lpath, sizeof lpath, "%s[%d]", path, j);
        if (b->layers[j].name) block_layer_inputs(c, b, j, lpath);
    }
    b->ok = c->nerr == before;
}

void blocks_resolve(rctx *c, const yt_node *node, block_set *set, recipe_t *r) {
    if (!node || is_empty(node)) return;
    if (node->kind != YT_MAP) {
        rctx_error(c, node->mark, "model.blocks", "expected a mapping of block names to lists of layers, found %s",
                   kind_word(node));
        return;
    }
    set->n = node->n;
    set->b = gl_xcalloc((size_t)(node->n ? node->n : 1), sizeof *set->b);
    for (int i = 0; i < node->n; i++) set->b[i].name = node->keys[i]->text;  // for mark_used
    for (int i = 0; i < node->n; i++) block_resolve(c, node->keys[i], node->items[i], set, &set->b[i], r);
}

void blocks_finish(rctx *c, block_set *set) {
    for (int i = 0; i < set->n; i++) {
        block_def *b = &set->b[i];
        char path[300];
        snprintf(path, sizeof path, "model.blocks.%s", b->name);
        if (!b->used && !set->skip_unused)
            rctx_error(c, b->key->mark, path,
                       "block '%s' is not used by any item of model.layers: add one ({block: %s, repeat: N}) or "
                       "remove the block", b->name, b->name);
        free(b->layers);
    }
    free(set->b);
    set->b = NULL, set->n = 0;
}

// ---- items of model.layers that repeat a block ----------------------------------------------

typedef struct {
    const block_def *b;
    int index;          // the item's index in model.layers
    const char *name;   // the item's name: the copies' prefix
    int64_t repeat;
    char path[64];      // model.layers[index]
} block_item;

static int is_item_key(const char *key) {
    for (int i = 0; item_keys[i]; i++)
        if (!strcmp(item_keys[i], key)) return 1;
    return 0;
}

static void item_unknown_key(rctx *c, const yt_node *item, int i, const block_item *it) {
    const char *key = item->keys[i]->text, *near = schema_suggest(key, item_keys, 3);
    char sub[600];
    snprintf(sub, sizeof sub, "%s.%s", it->path, key);
    if (near)
        rctx_error(c, item->keys[i]->mark, sub, "unknown key '%s' in %s, a block item (did you mean '%s'?)", key,
                   it->path, near);
    else
        rctx_error(c, item->keys[i]->mark, sub,
                   "unknown key '%s' in %s, a block item: it has block, repeat and name; its layers' keys are "
                   "set in model.blocks.%s", key, it->path, it->b ? it->b->name : "NAME");
}

static const block_def *item_block(rctx *c, const yt_node *v, block_set *set, const char *path) {
    const char *want = NULL;
    if (resolve_value(c, &string_key, v, &want, path) != 0) return NULL;
    const char **names = gl_xcalloc((size_t)set->n + 1, sizeof *names);
    for (int i = 0; i < set->n; i++) {
        names[i] = set->b[i].name;
        if (!strcmp(set->b[i].name, want)) {
            free(names);
            set->b[i].used = 1;
            return &set->b[i];
        }
    }
    const char *near = schema_suggest(want, names, set->n);
    free(names);
    set->skip_unused = 1;
    if (near)
        rctx_error(c, v->mark, path, "unknown block '%s' (did you mean '%s'?)", want, near);
    else if (set->n)
        rctx_error(c, v->mark, path, "unknown block '%s': model.blocks has no block of that name", want);
    else
        rctx_error(c, v->mark, path, "unknown block '%s': the recipe has no model.blocks (a mapping of block names "
                   "to lists of layers, beside model.layers)", want);
    return NULL;
}

// The item's keys: 0 if it can expand.
static int item_keys_resolve(rctx *c, const yt_node *item, block_set *set, block_item *it) {
    int before = c->nerr;
    char sub[600];
    snprintf(sub, sizeof sub, "%s.block", it->path);
    it->b = item_block(c, yt_map_get(item, "block"), set, sub);
    for (int i = 0; i < item->n; i++)
        if (!is_item_key(item->keys[i]->text)) item_unknown_key(c, item, i, it);
    const yt_node *rep = yt_map_get(item, "repeat"), *nm = yt_map_get(item, "name");
    snprintf(sub, sizeof sub, "%s.repeat", it->path);
    it->repeat = 1;
    if (rep) resolve_value(c, &repeat_key, rep, &it->repeat, sub);
    snprintf(sub, sizeof sub, "%s.name", it->path);
    it->name = it->b ? it->b->name : NULL;
    if (nm && resolve_value(c, &string_key, nm, &it->name, sub) == 0) {
        if (!layer_name_ok(it->name, 0))
            rctx_error(c, nm->mark, sub, "a block item's name is 1-63 letters, digits, '_' or '-' (its copies are "
                       "named NAME.N.LAYER), found '%s'", it->name);
        else if (!strcmp(it->name, "input"))
            rctx_error(c, nm->mark, sub, "'input' is reserved for the model input");
    }
    return c->nerr == before && it->b && it->b->ok ? 0 : -1;
}

// Copy k's inputs of block layer j (the copy's layers start at s->layers[base]); errors are
// reported for copy 0 only: every copy has the same inputs, and copy 0 sees the fewest layers.
static void copy_inputs(rctx *c, const block_item *it, int j, int k, int base, layer_list *s) {
    const yt_node *in = yt_map_get(it->b->node->items[j], "inputs"), *items[GL_MAX_NAMES];
    if (!in) return;
    layer_cfg *cfg = &s->layers[s->n - 1];
    rctx quiet = {.err = c->err, .nerr = 0};
    rctx *e = k == 0 ? c : &quiet;
    char sub[600];
    snprintf(sub, sizeof sub, "%s (%s).inputs", it->path, cfg->name);
    int n = layer_inputs_items(e, in, items, sub);
    for (int q = 0; q < n; q++) {
        const char *want = items[q]->text, *name = NULL;
        int at = block_local(it->b, j, want);
        if (at >= 0) name = s->layers[base + at].name;
        else if (!strcmp(want, BLOCK_INPUT)) name = base ? s->layers[base - 1].name : "input";
        else {
            s->n--;  // the layer itself is not an input of itself
            name = layer_list_find(s, want);
            if (!name && k == 0) {
                const char **local = gl_xcalloc((size_t)j + 1, sizeof *local);
                local[0] = BLOCK_INPUT;
                for (int p = 0; p < j; p++) local[p + 1] = it->b->layers[p].name;
                layer_list_unknown(c, s, items[q], sub, local, j + 1);
                free(local);
            }
            s->n++;
        }
        if (!name || !*name) return;  // reported (or an earlier error made the name unknown)
        cfg->inputs.name[cfg->inputs.n++] = name;
    }
}

// Copy k of the block: its layers, named it->name.k.LAYER.
static void expand_copy(rctx *c, const block_item *it, int k, layer_list *s, recipe_t *r) {
    int base = s->n;
    for (int j = 0; j < it->b->n; j++) {
        char name[160], who[160], sub[300];
        snprintf(name, sizeof name, "%s.%d.%s", it->name, k, it->b->layers[j].name);
        layer_cfg *cfg = layer_list_push(s);
        *cfg = it->b->layers[j];
        cfg->index = it->index;
        cfg->inputs.n = 0;
        if (layer_list_holder(s, name, who, sizeof who)) {
            snprintf(sub, sizeof sub, "%s (%s)", it->path, name);
            rctx_error(c, cfg->mark, sub, "layer name '%s' is already used by %s", name, who);
        }
        cfg->name = yt_intern(r->doc, name);
        copy_inputs(c, it, j, k, base, s);
    }
}

void blocks_expand_item(rctx *c, const yt_node *item, int index, block_set *set, layer_list *s, recipe_t *r) {
    block_item it = {.index = index};
    snprintf(it.path, sizeof it.path, "model.layers[%d]", index);
    int ok = item_keys_resolve(c, item, set, &it) == 0;
    const yt_node *nm = yt_map_get(item, "name");
    yt_mark at = nm ? nm->mark : item->mark;
    char sub[300], who[160];
    snprintf(sub, sizeof sub, "%s.name", it.path);
    for (int j = 0; ok && j < it.b->n; j++) {
        char longest[200];
        snprintf(longest, sizeof longest, "%s.%lld.%s", it.name, (long long)it.repeat - 1, it.b->layers[j].name);
        if (strlen(longest) > 63) {
            rctx_error(c, at, sub, "the copies' layer names would be longer than 63 characters ('%s'): shorten the "
                       "item's name or the layer's name in model.blocks.%s", longest, it.b->name);
            ok = 0;
        }
    }
    if (it.name && layer_name_ok(it.name, 0) && layer_list_holder(s, it.name, who, sizeof who)) {
        rctx_error(c, at, sub, "name '%s' is already used by %s; give the block item a name of its own (name: ...)",
                   it.name, who);
        ok = 0;
    }
    for (int k = 0; ok && k < it.repeat; k++) expand_copy(c, &it, k, s, r);
    if (!it.name || !layer_name_ok(it.name, 0)) return;
    if (s->nalias == s->calias) {
        s->calias = s->calias ? 2 * s->calias : 8;
        s->alias = realloc(s->alias, (size_t)s->calias * sizeof *s->alias);
        GL_CHECK(s->alias, "out of memory for the model's block items");
    }
    // The item's name stands for its last layer; "" when it did not expand (already reported).
    s->alias[s->nalias].name = it.name;
    s->alias[s->nalias].target = ok && s->n ? s->layers[s->n - 1].name : "";
    s->alias[s->nalias++].index = index;
}
