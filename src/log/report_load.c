// report_load.c: run directories read back for the report: metrics.jsonl records, summary.json
// and recipe.yaml. Tolerant: a missing summary (a run still going, or killed) or a cut last line
// leaves gaps, not errors.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "galley/check.h"
#include "log/json.h"
#include "galley/report.h"
#include "log/report_internal.h"

// The whole file, NUL-terminated (NULL if it cannot be read).
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0;
    char *buf = gl_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            GL_CHECK(nb, "out of memory reading a run file");
            buf = nb;
        }
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

static bool is_run(const char *dir) {
    char p[4200];
    if (snprintf(p, sizeof p, "%s/metrics.jsonl", dir) >= (int)sizeof p) return false;
    return access(p, R_OK) == 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static void add_path(char ***out, int *n, int *cap, const char *p) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        char **nv = realloc(*out, (size_t)*cap * sizeof **out);
        GL_CHECK(nv, "out of memory listing runs");
        *out = nv;
    }
    (*out)[(*n)++] = gl_xstrdup(p);
}

// Runs below dir, depth levels deep at most, in name order.
static void scan(const char *dir, int depth, char ***out, int *n, int *cap) {
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, by_name);
    if (k < 0) return;
    for (int i = 0; i < k; i++) {
        const char *name = ents[i]->d_name;
        char p[4200];
        struct stat st;
        if (name[0] != '.' && snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &st) == 0 &&
            S_ISDIR(st.st_mode)) {
            if (is_run(p)) add_path(out, n, cap, p);
            else if (depth > 1) scan(p, depth - 1, out, n, cap);
        }
        free(ents[i]);
    }
    free(ents);
}

int report_find_runs(char *const *paths, int npaths, char ***out, FILE *err) {
    *out = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < npaths; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s", paths[i]);
        size_t len = strlen(p);
        while (len > 1 && p[len - 1] == '/') p[--len] = 0;
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(err, "galley report: %s: %s\n", p, stat(p, &st) != 0 ? strerror(errno) : "not a directory");
            goto fail;
        }
        int before = n;
        if (is_run(p)) add_path(out, &n, &cap, p);
        else scan(p, 2, out, &n, &cap);
        if (n == before) {
            fprintf(err, "galley report: %s holds no run (a run directory has a metrics.jsonl; give one, or a "
                         "folder of them such as runs/NAME)\n", p);
            goto fail;
        }
    }
    return n;
fail:
    for (int i = 0; i < n; i++) free((*out)[i]);
    free(*out);
    *out = NULL;
    return -1;
}

// ---- records ----

typedef struct {
    rp_set *set;
    rp_point p;
    char kind[16];
} rec_ctx;

static int metric_index(rp_set *s, const char *name) {
    for (int i = 0; i < s->nmetric; i++)
        if (!strcmp(s->metric[i], name)) return i;
    if (s->nmetric == RP_MAX_METRICS) return -1;
    s->metric[s->nmetric] = gl_xstrdup(name);
    return s->nmetric++;
}

static int on_record(void *ctx, const char *path, const jv_leaf *v) {
    rec_ctx *c = ctx;
    if (!strcmp(path, "kind") && v->type == JV_STR) {
        snprintf(c->kind, sizeof c->kind, "%s", v->str);
        return 0;
    }
    if (v->type != JV_NUM) return 0;
    double x = v->num;
    if (!strcmp(path, "step")) c->p.step = x;
    else if (!strcmp(path, "time")) c->p.time = x;
    else if (!strcmp(path, "loss")) c->p.loss = x;
    else if (!strcmp(path, "lr")) c->p.lr = x;
    else if (!strcmp(path, "samples_per_s")) c->p.sps = x;
    else if (!strncmp(path, "metrics.", 8)) {
        int i = metric_index(c->set, path + 8);
        if (i >= 0) c->p.m[i] = x;
    } else if (!strncmp(path, "time_breakdown.", 15)) {
        for (int i = 0; i < PHASE_COUNT; i++)
            if (!strcmp(path + 15, phase_name(i))) c->p.phase[i] = x;
    }
    return 0;
}

static void push_point(rp_point **arr, int *n, int *cap, const rp_point *p) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        rp_point *na = realloc(*arr, (size_t)*cap * sizeof **arr);
        GL_CHECK(na, "out of memory reading metrics.jsonl");
        *arr = na;
    }
    (*arr)[(*n)++] = *p;
}

static void load_metrics(rp_set *s, rp_run *r, const char *text) {
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len) {
            rec_ctx c = {.set = s};
            c.p.step = c.p.time = c.p.loss = c.p.lr = c.p.sps = NAN;
            for (int i = 0; i < RP_MAX_METRICS; i++) c.p.m[i] = NAN;
            for (int i = 0; i < PHASE_COUNT; i++) c.p.phase[i] = NAN;
            char msg[128];
            if (json_walk(line, len, on_record, &c, msg, sizeof msg) != 0 || isnan(c.p.step)) r->bad_lines++;
            else if (!strcmp(c.kind, "train")) push_point(&r->train, &r->ntrain, &r->cap_train, &c.p);
            else if (!strcmp(c.kind, "eval")) push_point(&r->eval, &r->neval, &r->cap_eval, &c.p);
        }
        line += len + (end ? 1 : 0);
    }
}

// ---- summary ----

static int on_summary(void *ctx, const char *path, const jv_leaf *v) {
    rp_run *r = ctx;
    if (r->nsummary == r->cap_summary) {
        r->cap_summary = r->cap_summary ? 2 * r->cap_summary : 64;
        rp_kv *nk = realloc(r->summary, (size_t)r->cap_summary * sizeof *nk);
        GL_CHECK(nk, "out of memory reading summary.json");
        r->summary = nk;
    }
    rp_kv *kv = &r->summary[r->nsummary++];
    kv->key = gl_xstrdup(path);
    kv->str = v->type == JV_STR ? gl_xstrdup(v->str) : NULL;
    kv->num = v->type == JV_NUM || v->type == JV_BOOL ? v->num : NAN;
    return 0;
}

const rp_kv *rp_get(const rp_run *r, const char *key) {
    for (int i = 0; i < r->nsummary; i++)
        if (!strcmp(r->summary[i].key, key)) return &r->summary[i];
    return NULL;
}

// "quickstart/20240611-120000": the last two path components.
static char *make_label(const char *dir) {
    const char *end = dir + strlen(dir), *p = end;
    int slashes = 0;
    while (p > dir) {
        if (p[-1] == '/' && ++slashes == 2) break;
        p--;
    }
    return gl_xstrdup(*p ? p : dir);
}

int rp_load(rp_set *s, char *const *dirs, int n, FILE *err) {
    memset(s, 0, sizeof *s);
    s->run = gl_xcalloc((size_t)n, sizeof *s->run);
    s->nrun = n;
    for (int i = 0; i < n; i++) {
        rp_run *r = &s->run[i];
        r->dir = gl_xstrdup(dirs[i]);
        r->label = make_label(dirs[i]);
        for (int j = 0; j < i; j++)  // same label twice (runs/a/x and other/a/x): use the paths
            if (!strcmp(s->run[j].label, r->label)) {
                free(r->label);
                r->label = gl_xstrdup(dirs[i]);
            }
        char p[4200];
        snprintf(p, sizeof p, "%s/metrics.jsonl", r->dir);
        char *text = slurp(p, NULL);
        if (!text) {
            fprintf(err, "galley report: cannot read %s: %s\n", p, strerror(errno));
            return -1;
        }
        load_metrics(s, r, text);
        free(text);
        if (r->bad_lines)
            fprintf(err, "galley report: warning: %s: %d line%s did not parse (a run cut short?); skipped\n", p,
                    r->bad_lines, r->bad_lines == 1 ? "" : "s");
        size_t len;
        snprintf(p, sizeof p, "%s/summary.json", r->dir);
        if ((text = slurp(p, &len))) {
            char msg[128];
            if (json_walk(text, len, on_summary, r, msg, sizeof msg) < 0)
                fprintf(err, "galley report: warning: %s: %s; summary skipped\n", p, msg);
            free(text);
        }
        snprintf(p, sizeof p, "%s/recipe.yaml", r->dir);
        r->recipe = slurp(p, NULL);
    }
    return 0;
}

void rp_free(rp_set *s) {
    for (int i = 0; i < s->nrun; i++) {
        rp_run *r = &s->run[i];
        free(r->dir);
        free(r->label);
        free(r->train);
        free(r->eval);
        for (int k = 0; k < r->nsummary; k++) free(r->summary[k].key), free(r->summary[k].str);
        free(r->summary);
        free(r->recipe);
    }
    free(s->run);
    for (int i = 0; i < s->nmetric; i++) free(s->metric[i]);
    memset(s, 0, sizeof *s);
}
