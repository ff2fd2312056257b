// recipe.c: load = parse YAML, apply overrides, resolve against the schema.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "recipe/recipe_internal.h"

int recipe_load(recipe_t *r, const char *file, int noverrides, char *const *overrides, FILE *err_out) {
    memset(r, 0, sizeof *r);
    char msg[1024];
    if (yt_load_file(file, &r->doc, msg, sizeof msg) != 0) {
        fprintf(err_out, "%s\n", msg);
        return -1;
    }
    r->file = yt_intern(r->doc, file);
    int bad = 0;
    for (int i = 0; i < noverrides; i++) bad |= recipe_override(r, overrides[i], i + 1, err_out) != 0;
    if (bad) return -1;
    return recipe_resolve(r, yt_root(r->doc), err_out);
}

void recipe_free(recipe_t *r) {
    free(r->model.layers);
    for (int i = 0; i < r->nodocs; i++) yt_doc_free(r->odocs[i]);
    free(r->odocs);
    if (r->doc) yt_doc_free(r->doc);
    memset(r, 0, sizeof *r);
}
