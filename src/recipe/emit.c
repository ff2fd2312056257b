// emit.c: writes a resolved recipe back as YAML (what `galley check` prints, and what a run
// directory keeps), and the Markdown recipe reference; both walk the same schema tables.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "galley/layer.h"
#include "galley/recipe.h"

static void emit_string(FILE *out, const char *s) {
    // Always double-quoted: a name like "yes" or "1e3" must stay a string when read back.
    fputc('"', out);
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') fprintf(out, "\\%c", ch);
        else if (ch < 0x20) fprintf(out, "\\x%02x", ch);
        else fputc(ch, out);
    }
    fputc('"', out);
}

static void emit_double(FILE *out, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    fputs(buf, out);
}

static void emit_value(FILE *out, const key_spec *k, const void *src) {
    switch (k->type) {
    case KT_INT: fprintf(out, "%lld", (long long)*(const int64_t *)src); break;
    case KT_FLOAT: {
        double v = *(const double *)src;
        if (isnan(v)) fputs("null", out);
        else emit_double(out, v);
        break;
    }
    case KT_BOOL: fputs(*(const bool *)src ? "true" : "false", out); break;
    case KT_PAD: {
        int64_t v = *(const int64_t *)src;
        if (v == GL_PAD_SAME) fputs("same", out);
        else fprintf(out, "%lld", (long long)v);
        break;
    }
    case KT_STRING: {
        const char *s = *(const char *const *)src;
        if (s) emit_string(out, s);
        else fputs("null", out);
        break;
    }
    case KT_ENUM: fputs(k->choices[*(const int *)src], out); break;
    case KT_FLOATS: {
        const gl_floats *f = src;
        fputc('[', out);
        for (int i = 0; i < f->n; i++) {
            if (i) fputs(", ", out);
            emit_double(out, f->v[i]);
        }
        fputc(']', out);
        break;
    }
    default: break;
    }
}

static void emit_layers(FILE *out, const recipe_t *r, int indent) {
    for (int i = 0; i < r->model.nlayers; i++) {
        const layer_cfg *c = &r->model.layers[i];
        fprintf(out, "%*s- type: %s\n", indent, "", c->kind->name);
        fprintf(out, "%*s  name: ", indent, "");
        emit_string(out, c->name);
        fputc('\n', out);
        if (c->inputs.n) {
            fprintf(out, "%*s  inputs: [", indent, "");
            for (int j = 0; j < c->inputs.n; j++) {
                if (j) fputs(", ", out);
                emit_string(out, c->inputs.name[j]);
            }
            fputs("]\n", out);
        }
        for (int j = 0; c->kind->keys && c->kind->keys[j].name; j++) {
            const key_spec *k = &c->kind->keys[j];
            fprintf(out, "%*s  %s: ", indent, "", k->name);
            emit_value(out, k, (const char *)c->v + k->offset);
            fputc('\n', out);
        }
    }
}

static void emit_section(FILE *out, const recipe_t *r, const key_spec *keys, int indent) {
    for (const key_spec *k = keys; k->name; k++) {
        if (k->applies && !k->applies(r)) continue;
        if (k->type == KT_SECTION && !strcmp(k->name, "blocks")) continue;  // model.blocks: written expanded
        fprintf(out, "%*s%s:", indent, "", k->name);
        if (k->type == KT_SECTION) {
            fputc('\n', out);
            emit_section(out, r, k->children, indent + 2);
        } else if (k->type == KT_LAYERS) {
            fputc('\n', out);
            emit_layers(out, r, indent + 2);
        } else {
            fputc(' ', out);
            emit_value(out, k, (const char *)r + k->offset);
            fputc('\n', out);
        }
    }
}

void recipe_emit(const recipe_t *r, FILE *out) { emit_section(out, r, recipe_schema, 0); }

uint64_t recipe_hash(const recipe_t *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return 0;
    recipe_emit(r, m);
    fclose(m);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
    free(buf);
    return h;
}

// ---- reference ----

static void ref_row(FILE *out, const char *path, const key_spec *k) {
    char want[512];
    schema_describe(k, want, sizeof want);
    const char *def = k->flag == KF_REQUIRED ? "**required**" : k->flag == KF_OPTIONAL ? "(unset)" : k->def;
    fprintf(out, "| `%s` | %s | %s%s%s | %s%s%s%s |\n", path, want, k->flag == KF_DEFAULT ? "`" : "", def,
            k->flag == KF_DEFAULT ? "`" : "", k->doc, k->when ? " (only when " : "", k->when ? k->when : "",
            k->when ? ")" : "");
}

static void ref_section(FILE *out, const key_spec *keys, const char *parent) {
    for (const key_spec *k = keys; k->name; k++) {
        char path[256];
        if (*parent) snprintf(path, sizeof path, "%s.%s", parent, k->name);
        else snprintf(path, sizeof path, "%s", k->name);
        if (k->type == KT_SECTION) {
            fprintf(out, "| `%s` | a mapping | %s | %s |\n", path,
                    k->flag == KF_REQUIRED ? "**required**" : k->children[0].name ? "all defaults" : "(none)", k->doc);
            ref_section(out, k->children, path);
        } else {
            ref_row(out, path, k);
        }
    }
}

void recipe_emit_reference(FILE *out) {
    fputs("Every key a recipe may hold; anything else is an error. Types are checked, numbers must lie in "
          "their range, and a key with a default may be left out (`galley check` prints the recipe with every "
          "default filled in).\n\n",
          out);
    fputs("| key | value | default | meaning |\n|---|---|---|---|\n", out);
    ref_section(out, recipe_schema, "");
    fputs("\n#### Layer types\n\n", out);
    fputs("Every item of `model.layers` has `type` (required), `name` (default `<type>_<index>`) and "
          "`inputs` (names of earlier layers or `input`; default: the previous layer), plus the keys of its "
          "type; an item `{block: NAME, repeat: N, name: P}` instead repeats a block of `model.blocks`:\n\n",
          out);
    for (int i = 0; i < layer_kind_count(); i++) {
        const layer_kind *lk = layer_kind_at(i);
        fprintf(out, "- `%s`: %s\n", lk->name, lk->doc);
        for (int j = 0; lk->keys && lk->keys[j].name; j++) {
            const key_spec *k = &lk->keys[j];
            char want[512];
            schema_describe(k, want, sizeof want);
            if (k->flag == KF_REQUIRED)
                fprintf(out, "  - `%s` (%s, **required**): %s\n", k->name, want, k->doc);
            else
                fprintf(out, "  - `%s` (%s, default `%s`): %s\n", k->name, want, k->def ? k->def : "unset", k->doc);
        }
    }
}
