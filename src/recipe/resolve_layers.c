// resolve_layers.c: model.layers, where each item's keys depend on its type.
#include <string.h>

#include "galley/check.h"
#include "galley/layer.h"
#include "recipe/recipe_internal.h"

static const char *const common_keys[] = {"type", "name", "inputs", NULL};

static int name_ok(const char *s) {
    if (!*s || strlen(s) > 63) return 0;
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || *p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z')))
            return 0;
    return 1;
}

static int kind_has_key(const layer_kind *k, const char *name) {
    for (int j = 0; k->keys && k->keys[j].name; j++)
        if (!strcmp(k->keys[j].name, name)) return 1;
    return 0;
}

static int find_name(const layer_cfg *layers, int upto, const char *name) {
    for (int j = 0; j < upto; j++)
        if (layers[j].name && !strcmp(layers[j].name, name)) return j;  // NULL: that layer had an error
    return -1;
}

static void resolve_inputs(rctx *c, const yt_node *v, layer_cfg *cfg, const layer_cfg *layers, int i,
                           const char *path) {
    const yt_node *items[GL_MAX_NAMES + 1];
    int n = 0;
    if (v->kind == YT_SCALAR) {
        items[n++] = v;
    } else if (v->kind == YT_SEQ && v->n >= 1 && v->n <= GL_MAX_NAMES) {
        for (int j = 0; j < v->n; j++) items[n++] = v->items[j];
    } else {
        rctx_error(c, v->mark, path, "expected a layer name or a list of 1 to %d names, found %s", GL_MAX_NAMES,
                   v->kind == YT_MAP ? "a mapping" : v->n == 0 ? "an empty list" : "a longer list");
        return;
    }
    for (int j = 0; j < n; j++) {
        const yt_node *it = items[j];
        if (it->kind != YT_SCALAR || !it->text[0]) {
            rctx_error(c, it->mark, path, "expected a layer name");
            return;
        }
        if (strcmp(it->text, "input") && find_name(layers, i, it->text) < 0) {
            const char *names[256];
            int k = 0;
            names[k++] = "input";
            for (int q = 0; q < i && k < 256; q++)
                if (layers[q].name) names[k++] = layers[q].name;
            const char *near = schema_suggest(it->text, names, k);
            if (find_name(layers, 0, it->text) < 0 && near)
                rctx_error(c, it->mark, path, "no earlier layer is named '%s' (did you mean '%s'?)", it->text, near);
            else
                rctx_error(c, it->mark, path,
                           "no earlier layer is named '%s'; inputs name 'input' or a layer above this one",
                           it->text);
            return;
        }
        cfg->inputs.name[cfg->inputs.n++] = it->text;
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
    r->model.nlayers = node->n;
    r->model.layers = gl_xcalloc((size_t)node->n, sizeof(layer_cfg));
    const char *kind_names[64];
    int nkinds = layer_kind_count();
    for (int k = 0; k < nkinds && k < 64; k++) kind_names[k] = layer_kind_at(k)->name;

    for (int i = 0; i < node->n; i++) {
        const yt_node *item = node->items[i];
        layer_cfg *cfg = &r->model.layers[i];
        char lpath[512];
        snprintf(lpath, sizeof lpath, "%s[%d]", path, i);
        cfg->index = i;
        cfg->mark = item->mark;
        if (item->kind != YT_MAP) {
            rctx_error(c, item->mark, lpath, "expected a layer mapping (type: ..., ...), found %s",
                       item->kind == YT_SEQ ? "a list" : "a scalar");
            continue;
        }
        char sub[600];
        const yt_node *t = yt_map_get(item, "type");
        snprintf(sub, sizeof sub, "%s.type", lpath);
        if (!t) {
            rctx_error(c, item->mark, sub, "missing required key 'type' (the layer kind, e.g. dense or relu)");
            continue;
        }
        if (t->kind != YT_SCALAR || !(cfg->kind = layer_kind_find(t->text))) {
            const char *near = t->kind == YT_SCALAR ? schema_suggest(t->text, kind_names, nkinds) : NULL;
            char list[1024];
            size_t k = 0;
            for (int j = 0; j < nkinds && k < sizeof list; j++)
                k += (size_t)snprintf(list + k, sizeof list - k, j ? ", %s" : "%s", kind_names[j]);
            if (near)
                rctx_error(c, t->mark, sub, "unknown layer type '%s' (did you mean '%s'?)", t->text, near);
            else
                rctx_error(c, t->mark, sub, "unknown layer type '%s' (known: %s)",
                           t->kind == YT_SCALAR ? t->text : "(not a scalar)", list);
            continue;
        }
        const layer_kind *kind = cfg->kind;
        for (int j = 0; j < item->n; j++) {
            const char *key = item->keys[j]->text;
            int common = !strcmp(key, "type") || !strcmp(key, "name") || !strcmp(key, "inputs");
            if (!common && !kind_has_key(kind, key)) {
                report_unknown_key(c, item, j, kind->keys, common_keys, lpath);
            }
        }
        const yt_node *nm = yt_map_get(item, "name");
        snprintf(sub, sizeof sub, "%s.name", lpath);
        if (nm) {
            if (nm->kind != YT_SCALAR || !name_ok(nm->text)) {
                rctx_error(c, nm->mark, sub, "a layer name is 1-63 letters, digits, '_' or '-', found '%s'",
                           nm->kind == YT_SCALAR ? nm->text : "(not a scalar)");
            } else if (!strcmp(nm->text, "input")) {
                rctx_error(c, nm->mark, sub, "'input' is reserved for the model input");
            } else {
                cfg->name = nm->text;
            }
        }
        if (!cfg->name) {
            char buf[96];
            snprintf(buf, sizeof buf, "%s_%d", kind->name, i);
            cfg->name = yt_intern(r->doc, buf);
        }
        int dup = find_name(r->model.layers, i, cfg->name);
        if (dup >= 0)
            rctx_error(c, nm ? nm->mark : item->mark, sub, "layer name '%s' is already used by model.layers[%d]",
                       cfg->name, dup);
        const yt_node *in = yt_map_get(item, "inputs");
        if (in) {
            snprintf(sub, sizeof sub, "%s.inputs", lpath);
            resolve_inputs(c, in, cfg, r->model.layers, i, sub);
        }
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
                rctx_error(c, item->mark, sub, "missing required key '%s' for a %s layer (%s: %s)", k->name,
                           kind->name, want, k->doc);
            } else {
                resolve_default(c, k, dst);
            }
        }
    }
}
