// resolve_layers.c: model.layers, where each item's keys depend on its type. An item that names
// a block ({block: ..., repeat: ...}) expands into copies of it (resolve_blocks.c).
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/layer.h"
#include "recipe/resolve_blocks.h"

static const char *const common_keys[] = {"type", "name", "inputs", NULL};

// 1-63 letters, digits, '_' or '-'; with dots, also '.' between such parts (how the layers of a
// block's copies are named, and written back by `galley check`: enc.3.fc).
int layer_name_ok(const char *s, int dots) {
    if (!*s || strlen(s) > 63) return 0;
    for (const char *p = s; *p; p++) {
        if (*p == '.' && dots && p > s && p[1] && p[1] != '.') continue;
        if (!(*p == '_' || *p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z')))
            return 0;
    }
    return 1;
}

static int kind_has_key(const layer_kind *k, const char *name) {
    for (int j = 0; k->keys && k->keys[j].name; j++)
        if (!strcmp(k->keys[j].name, name)) return 1;
    return 0;
}

layer_cfg *layer_list_push(layer_list *s) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->layers = realloc(s->layers, (size_t)s->cap * sizeof *s->layers);
        GL_CHECK(s->layers, "out of memory for the model's layers");
    }
    layer_cfg *cfg = &s->layers[s->n++];
    memset(cfg, 0, sizeof *cfg);
    return cfg;
}

const char *layer_list_find(const layer_list *s, const char *name) {
    if (!strcmp(name, "input")) return "input";
    for (int j = 0; j < s->n; j++)
        if (s->layers[j].name && !strcmp(s->layers[j].name, name)) return s->layers[j].name;  // NULL: an error
    for (int j = 0; j < s->nalias; j++)
        if (!strcmp(s->alias[j].name, name)) return s->alias[j].target;
    return NULL;
}

int layer_list_holder(const layer_list *s, const char *name, char *buf, size_t len) {
    for (int j = 0; j < s->n; j++) {
        const layer_cfg *l = &s->layers[j];
        if (!l->name || strcmp(l->name, name)) continue;
        if (strchr(l->name, '.'))  // a copy of a block (or one written out by galley check)
            snprintf(buf, len, "model.layers[%d] (%s)", l->index, l->name);
        else
            snprintf(buf, len, "model.layers[%d]", l->index);
        return 1;
    }
    for (int j = 0; j < s->nalias; j++)
        if (!strcmp(s->alias[j].name, name))
            return snprintf(buf, len, "model.layers[%d] (a block item)", s->alias[j].index), 1;
    return 0;
}

void layer_list_unknown(rctx *c, const layer_list *s, const yt_node *it, const char *path,
                        const char *const *extra, int nextra) {
    const char **names = gl_xcalloc((size_t)(1 + s->n + s->nalias + nextra), sizeof *names);
    int k = 0;
    names[k++] = "input";
    for (int q = 0; q < s->n; q++)
        if (s->layers[q].name) names[k++] = s->layers[q].name;
    for (int q = 0; q < s->nalias; q++) names[k++] = s->alias[q].name;
    for (int q = 0; q < nextra; q++) names[k++] = extra[q];
    const char *near = schema_suggest(it->text, names, k);
    if (near)
        rctx_error(c, it->mark, path, "no earlier layer is named '%s' (did you mean '%s'?)", it->text, near);
    else
        rctx_error(c, it->mark, path, "no earlier layer is named '%s'; inputs name 'input' or a layer above this one",
                   it->text);
    free(names);
}

int layer_inputs_items(rctx *c, const yt_node *v, const yt_node **items, const char *path) {
    int n = 0;
    if (v->kind == YT_SCALAR) {
        items[n++] = v;
    } else if (v->kind == YT_SEQ && v->n >= 1 && v->n <= GL_MAX_NAMES) {
        for (int j = 0; j < v->n; j++) items[n++] = v->items[j];
    } else {
        rctx_error(c, v->mark, path, "expected a layer name or a list of 1 to %d names, found %s", GL_MAX_NAMES,
                   v->kind == YT_MAP ? "a mapping" : v->n == 0 ? "an empty list" : "a longer list");
        return -1;
    }
    for (int j = 0; j < n; j++)
        if (items[j]->kind != YT_SCALAR || !items[j]->text[0]) {
            rctx_error(c, items[j]->mark, path, "expected a layer name");
            return -1;
        }
    return n;
}

static void resolve_inputs(rctx *c, const yt_node *v, layer_cfg *cfg, const layer_list *s, const char *path) {
    const yt_node *items[GL_MAX_NAMES];
    int n = layer_inputs_items(c, v, items, path);
    for (int j = 0; j < n; j++) {
        const char *name = layer_list_find(s, items[j]->text);
        if (!name) {
            layer_list_unknown(c, s, items[j], path, NULL, 0);
            return;
        }
        cfg->inputs.name[cfg->inputs.n++] = name;
    }
}

static void unknown_type(rctx *c, const yt_node *t, const char *path) {
    const char *kind_names[64];
    int nkinds = layer_kind_count();
    for (int k = 0; k < nkinds && k < 64; k++) kind_names[k] = layer_kind_at(k)->name;
    const char *near = t->kind == YT_SCALAR ? schema_suggest(t->text, kind_names, nkinds < 64 ? nkinds : 64) : NULL;
    char list[1024];
    size_t k = 0;
    for (int j = 0; j < nkinds && j < 64 && k < sizeof list; j++)
        k += (size_t)snprintf(list + k, sizeof list - k, j ? ", %s" : "%s", kind_names[j]);
    if (near)
        rctx_error(c, t->mark, path, "unknown layer type '%s' (did you mean '%s'?)", t->text, near);
    else
        rctx_error(c, t->mark, path, "unknown layer type '%s' (known: %s)", t->kind == YT_SCALAR ? t->text : "(not a scalar)",
                   list);
}

static void resolve_kind_keys(rctx *c, const yt_node *item, layer_cfg *cfg, const char *lpath) {
    const layer_kind *kind = cfg->kind;
    char sub[600];
    for (int j = 0; kind->keys && kind->keys[j].name; j++) {
        const key_spec *k = &kind->keys[j];
        GL_CHECK(j < GL_MAX_LAYER_KEYS, "layer kind has too many keys");
        snprintf(sub, sizeof sub, "%s.%s", lpath, k->name);
        const yt_node *v = yt_map_get(item, k->name);
        void *dst = (char *)cfg->v + k->offset;
        if (v) {
            resolve_value(c, k, v, dst, sub);
        } else if (k->flag == KF_REQUIRED) {
            char want[256];
            schema_describe(k, want, sizeof want);
            rctx_error(c, item->mark, sub, "missing required key '%s' for a %s layer (%s: %s)", k->name, kind->name,
                       want, k->doc);
        } else {
            resolve_default(c, k, dst);
        }
    }
}

int layer_resolve_keys(rctx *c, const yt_node *item, layer_cfg *cfg, const char *lpath) {
    char sub[600];
    const yt_node *t = yt_map_get(item, "type");
    snprintf(sub, sizeof sub, "%s.type", lpath);
    if (!t) {
        rctx_error(c, item->mark, sub, "missing required key 'type' (the layer kind, e.g. dense or relu)");
        return -1;
    }
    if (t->kind != YT_SCALAR || !(cfg->kind = layer_kind_find(t->text))) {
        unknown_type(c, t, sub);
        return -1;
    }
    for (int j = 0; j < item->n; j++) {
        const char *key = item->keys[j]->text;
        int common = !strcmp(key, "type") || !strcmp(key, "name") || !strcmp(key, "inputs");
        if (!common && !kind_has_key(cfg->kind, key)) report_unknown_key(c, item, j, cfg->kind->keys, common_keys, lpath);
    }
    resolve_kind_keys(c, item, cfg, lpath);
    return 0;
}

// An item of model.layers that is a layer.
static void resolve_plain(rctx *c, const yt_node *item, int i, layer_list *s, recipe_t *r, const char *lpath) {
    layer_cfg *cfg = layer_list_push(s);
    cfg->index = i;
    cfg->mark = item->mark;
    if (item->kind != YT_MAP) {
        rctx_error(c, item->mark, lpath, "expected a layer mapping (type: ..., ...), found %s",
                   item->kind == YT_SEQ ? "a list" : "a scalar");
        return;
    }
    if (layer_resolve_keys(c, item, cfg, lpath) != 0) return;
    char sub[600], buf[96], who[160];
    const yt_node *nm = yt_map_get(item, "name");
    const char *name = NULL;
    snprintf(sub, sizeof sub, "%s.name", lpath);
    if (nm) {
        if (nm->kind != YT_SCALAR || !layer_name_ok(nm->text, 1))
            rctx_error(c, nm->mark, sub, "a layer name is 1-63 letters, digits, '_' or '-', found '%s'",
                       nm->kind == YT_SCALAR ? nm->text : "(not a scalar)");
        else if (!strcmp(nm->text, "input"))
            rctx_error(c, nm->mark, sub, "'input' is reserved for the model input");
        else
            name = nm->text;
    }
    if (!name) {
        snprintf(buf, sizeof buf, "%s_%d", cfg->kind->name, i);
        name = yt_intern(r->doc, buf);
    }
    if (layer_list_holder(s, name, who, sizeof who))
        rctx_error(c, nm ? nm->mark : item->mark, sub, "layer name '%s' is already used by %s", name, who);
    cfg->name = name;
    const yt_node *in = yt_map_get(item, "inputs");
    if (in) {
        snprintf(sub, sizeof sub, "%s.inputs", lpath);
        s->n--;  // an input names an earlier layer, never this one
        resolve_inputs(c, in, cfg, s, sub);
        s->n++;
    }
}

void resolve_layers(rctx *c, const yt_node *node, recipe_t *r, const char *path, yt_mark where) {
    if (!node) {
        rctx_error(c, where, path, "missing required key 'layers' (a list of layers)");
        return;
    }
    if (node->kind != YT_SEQ || node->n == 0) {
        rctx_error(c, node->mark, path, "expected a non-empty list of layers, found %s",
                   node->kind == YT_SEQ ? "an empty list" : node->kind == YT_MAP ? "a mapping" : "a scalar");
        return;
    }
    // model.blocks sits beside model.layers (resolve_section skips it: it is read here).
    block_set blocks = {0};
    blocks_resolve(c, node_at(yt_root(r->doc), "model.blocks"), &blocks, r);
    layer_list s = {0};
    for (int i = 0; i < node->n; i++) {
        const yt_node *item = node->items[i];
        char lpath[512];
        snprintf(lpath, sizeof lpath, "%s[%d]", path, i);
        if (item->kind == YT_MAP && yt_map_get(item, "block"))
            blocks_expand_item(c, item, i, &blocks, &s, r);
        else
            resolve_plain(c, item, i, &s, r, lpath);
    }
    blocks_finish(c, &blocks);
    free(s.alias);
    r->model.layers = s.layers;
    r->model.nlayers = s.n;
}
