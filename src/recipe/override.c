// override.c: command-line overrides "a.b.c=value" (list items as a.b[2].c or a.b.2.c), applied
// to the YAML tree before validation so they are checked exactly like recipe text. Their
// errors point at "command line:N:COL", N being the override's position.
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "recipe/recipe_internal.h"

#define CMDLINE "command line"

static void shift_marks(yt_node *n, int line, int col0) {
    n->mark.line = line;
    n->mark.col += col0;
    for (int i = 0; i < n->n; i++) {
        if (n->keys) shift_marks(n->keys[i], line, col0);
        shift_marks(n->items[i], line, col0);
    }
}

// Splits "a.b[2].c" into segments; returns the count or -1.
static int split_path(char *path, char **seg, int max) {
    int n = 0;
    for (char *p = path; *p;) {
        if (n == max) return -2;
        if (*p == '[') {
            char *close = strchr(p, ']');
            if (!close) return -1;
            *close = 0;
            seg[n++] = p + 1;
            p = close + 1;
            if (*p == '.') p++;
            else if (*p && *p != '[') return -1;  // "a[0]b" is a typo for "a[0].b"
            continue;
        }
        seg[n++] = p;
        while (*p && *p != '.' && *p != '[') p++;
        if (*p == '.') *p++ = 0;
        else if (*p == '[') {
            // "b[2]": end this segment here without losing the bracket.
            memmove(p + 1, p, strlen(p) + 1);
            *p = 0;
            p++;
        }
    }
    for (int i = 0; i < n; i++)
        if (!*seg[i]) return -1;
    return n;
}

static int is_index(const char *s) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

int recipe_override(recipe_t *r, const char *arg, int index, FILE *err) {
    rctx c = {.err = err};
    const char *file = yt_intern(r->doc, CMDLINE);
    const char *eq = strchr(arg, '=');
    yt_mark m0 = {file, index, 1};
    if (!eq || eq == arg) {
        rctx_error(&c, m0, arg, "an override is KEY=VALUE with KEY a dotted path such as train.epochs");
        return -1;
    }
    char path[512];
    if ((size_t)(eq - arg) >= sizeof path) {
        rctx_error(&c, m0, "(override)", "key path is too long");
        return -1;
    }
    memcpy(path, arg, (size_t)(eq - arg));
    path[eq - arg] = 0;
    char shown[512];
    snprintf(shown, sizeof shown, "%s", path);
    size_t plen = strlen(path);
    if (path[0] == '.' || path[plen - 1] == '.' || strstr(path, "..") || strstr(path, ".[") || strstr(path, "[]")) {
        rctx_error(&c, m0, shown, "cannot read the key path; write it as a.b.c or a.b[2].c");
        return -1;
    }
    char *seg[32];
    char work[1100];
    snprintf(work, sizeof work, "%s", path);
    int nseg = split_path(work, seg, 32);
    if (nseg == -2) {
        rctx_error(&c, m0, shown, "the key path has more than 32 parts");
        return -1;
    }
    if (nseg <= 0) {
        rctx_error(&c, m0, shown, "cannot read the key path; write it as a.b.c or a.b[2].c");
        return -1;
    }
    // Parse the value as YAML, so "[a, b]" is a list and '"10"' a string, as in a file.
    yt_doc *vdoc = NULL;
    char msg[512];
    int vcol = (int)(eq - arg) + 2;
    // yt_load_value's message has no position: the override's own is what the user needs.
    if (yt_load_value(eq + 1, CMDLINE, &vdoc, msg, sizeof msg) != 0) {
        rctx_error(&c, (yt_mark){file, index, vcol}, shown, "cannot parse the value as YAML: %s", msg);
        return -1;
    }
    r->odocs = realloc(r->odocs, sizeof(yt_doc *) * (size_t)(r->nodocs + 1));
    GL_CHECK(r->odocs, "out of memory");
    r->odocs[r->nodocs++] = vdoc;
    yt_node *value = yt_root(vdoc);
    if (value->kind == YT_MAP && value->n == 0 && !strchr(eq + 1, '{')) {
        // An empty value ("key=") is an empty scalar, as "key:" is in a file.
        value = yt_new_scalar(vdoc, "", 1, (yt_mark){file, index, 1});  // shifted to vcol below
    }
    shift_marks(value, index, vcol - 1);

    yt_node *cur = yt_root(r->doc);
    char walked[512] = "";
    for (int i = 0; i < nseg; i++) {
        int last = i == nseg - 1;
        yt_mark km = {file, index, 1};
        if (cur->kind == YT_SEQ) {
            if (!is_index(seg[i])) {
                rctx_error(&c, km, shown, "'%s' is a list; index it with a number, e.g. %s[0]", walked, walked);
                return -1;
            }
            long k = strtol(seg[i], NULL, 10);
            if (k >= cur->n) {
                rctx_error(&c, km, shown, "'%s' has %d items; index %ld is out of range", walked, cur->n, k);
                return -1;
            }
            size_t wl = strlen(walked);
            snprintf(walked + wl, sizeof walked - wl, "[%ld]", k);
            if (last) yt_seq_set(cur, (int)k, value);
            else cur = cur->items[k];
        } else if (cur->kind == YT_MAP) {
            char tmp[512];
            path_join(tmp, sizeof tmp, walked, seg[i]);
            snprintf(walked, sizeof walked, "%s", tmp);
            if (last) {
                yt_map_set(r->doc, cur, seg[i], value, km);
            } else {
                yt_node *next = yt_map_get(cur, seg[i]);
                if (!next) {
                    next = yt_new_map(r->doc, km);
                    yt_map_set(r->doc, cur, seg[i], next, km);
                }
                cur = next;
            }
        } else {
            rctx_error(&c, km, shown, "'%s' is a single value, so it has no key '%s'", walked, seg[i]);
            return -1;
        }
    }
    return 0;
}
