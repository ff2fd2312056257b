// sweep_file.c: the sweep file, validated as strictly as a recipe (the recipe module's own
// resolver and messages: FILE:LINE:COL, the key path, did-you-mean), and its base recipe, on
// which every key of the search space is tried at both ends of its range so a bad key or value
// fails here with the sweep file's line rather than in the middle of the sweep.
#include <libgen.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/loss.h"  // metrics_name
#include "recipe/recipe_internal.h"  // rctx, resolve_section, node_at: the recipe's own checker
#include "sweep/sweep_internal.h"

static const char *const methods[] = {"grid", "random", "asha", NULL};
static const char *const goals[] = {"auto", "max", "min", NULL};
static const char *const budget_keys[] = {"train.steps", "train.epochs", NULL};
static const char *const seed_modes[] = {"base", "per_trial", NULL};

const char *sweep_method_name(int method) { return methods[method]; }

#define OFF(f) offsetof(sweep_spec, f)
static const key_spec budget_keys_spec[] = {
    {"key", KT_ENUM, KF_DEFAULT, "train.steps", 0, 0, budget_keys, OFF(budget.key), NULL,
     "the recipe key that is the budget: train.steps or train.epochs (the base recipe must set it)", NULL, NULL},
    {"min", KT_INT, KF_DEFAULT, "0", 0, 1e15, NULL, OFF(budget.min), NULL,
     "asha: the first rung's budget (every trial trains this much)", NULL, NULL},
    {"max", KT_INT, KF_DEFAULT, "0", 0, 1e15, NULL, OFF(budget.max), NULL,
     "the most a trial trains (grid, random: every trial's budget)", NULL, NULL},
    {"reduction_factor", KT_INT, KF_DEFAULT, "3", 2, 1000, NULL, OFF(budget.reduction_factor), NULL,
     "asha: each rung's budget is this times the last; the top 1/this of a rung is promoted", NULL, NULL},
    KEY_END,
};

static const key_spec sweep_schema[] = {
    {"base", KT_STRING, KF_REQUIRED, NULL, 0, 0, NULL, OFF(base), NULL,
     "the base recipe (relative to the sweep file)", NULL, NULL},
    {"method", KT_ENUM, KF_REQUIRED, NULL, 0, 0, methods, OFF(method), NULL, "grid, random or asha", NULL, NULL},
    {"trials", KT_INT, KF_DEFAULT, "0", 0, SWEEP_MAX_TRIALS, NULL, OFF(trials), NULL,
     "random, asha: how many configurations to draw; grid: at most this many (0: all)", NULL, NULL},
    {"seed", KT_INT, KF_DEFAULT, "0", 0, 9.2e18, NULL, OFF(seed), NULL,
     "draws the trials' values (and their seeds with trial_seed: per_trial)", NULL, NULL},
    {"ranks_per_trial", KT_INT, KF_DEFAULT, "1", 1, 1e6, NULL, OFF(ranks_per_trial), NULL,
     "ranks that train one trial together; must divide the launch's ranks", NULL, NULL},
    {"metric", KT_STRING, KF_REQUIRED, NULL, 0, 0, NULL, OFF(metric), NULL,
     "the validation metric to optimise: loss, accuracy, top_k, mae, mean_iou, or target (train.target's)", NULL,
     NULL},
    {"goal", KT_ENUM, KF_DEFAULT, "auto", 0, 0, goals, OFF(goal), NULL,
     "max or min (auto: min for loss and mae, max otherwise)", NULL, NULL},
    {"trial_seed", KT_ENUM, KF_DEFAULT, "base", 0, 0, seed_modes, OFF(trial_seed), NULL,
     "base: every trial uses the base recipe's seed; per_trial: a seed drawn from the sweep seed and the trial id",
     NULL, NULL},
    {"dir", KT_STRING, KF_OPTIONAL, NULL, 0, 0, NULL, OFF(dir), NULL,
     "the sweep directory (default: sweeps/<sweep file name>); --dir overrides it", NULL, NULL},
    {"budget", KT_SECTION, KF_OPTIONAL, NULL, 0, 0, NULL, 0, budget_keys_spec, "the training budget", NULL, NULL},
    KEY_END,
};

// int bounds: whole numbers a double holds exactly, so hi - lo + 1 (the value count) fits int64_t.
#define SWEEP_INT_LIMIT 9007199254740992.0

static const char *const metric_names[] = {"loss", "accuracy", "top_k", "mae", "mean_iou", "target", NULL};

static int parse_num(const yt_node *n, double *v) {
    if (!n || n->kind != YT_SCALAR || !n->plain) return -1;
    char *end;
    *v = strtod(n->text, &end);
    return *n->text && !*end && isfinite(*v) ? 0 : -1;
}

// {uniform|loguniform|int: [lo, hi]} (+ points for grid)
static void parse_range(rctx *c, sweep_param *p, const yt_node *v, const char *path, const char *word) {
    char sub[512];
    snprintf(sub, sizeof sub, "%.400s.%s", path, word);
    if (v->kind != YT_SEQ || v->n != 2 || parse_num(v->items[0], &p->lo) || parse_num(v->items[1], &p->hi)) {
        rctx_error(c, v->mark, sub, "expected [low, high], two numbers");
        return;
    }
    if (p->kind == SP_INT && (p->lo != floor(p->lo) || p->hi != floor(p->hi)))
        rctx_error(c, v->mark, sub, "int takes two integers; found [%g, %g]", p->lo, p->hi);
    else if (p->kind == SP_INT && (fabs(p->lo) > SWEEP_INT_LIMIT || fabs(p->hi) > SWEEP_INT_LIMIT))
        rctx_error(c, v->mark, sub, "int takes integers within +-2^53 (%.0f); found [%g, %g]", SWEEP_INT_LIMIT, p->lo,
                   p->hi);
    else if (p->kind == SP_INT ? p->lo > p->hi : p->lo >= p->hi)
        rctx_error(c, v->mark, sub, "empty range [%g, %g]: the low end must be below the high end", p->lo, p->hi);
    else if (p->kind == SP_LOGUNIFORM && p->lo <= 0)
        rctx_error(c, v->mark, sub, "loguniform needs bounds > 0; found [%g, %g] (use uniform for a range through 0)",
                   p->lo, p->hi);
}

static void parse_choice(rctx *c, sweep_param *p, const yt_node *v, const char *path) {
    char sub[512];
    snprintf(sub, sizeof sub, "%.400s.choice", path);
    if (v->kind != YT_SEQ) { rctx_error(c, v->mark, sub, "expected a list of values"); return; }
    if (v->n == 0) { rctx_error(c, v->mark, sub, "empty choice: give at least one value"); return; }
    if (v->n > SWEEP_MAX_CHOICES) { rctx_error(c, v->mark, sub, "at most %d values", SWEEP_MAX_CHOICES); return; }
    for (int i = 0; i < v->n; i++) {
        if (v->items[i]->kind != YT_SCALAR) { rctx_error(c, v->items[i]->mark, sub, "choices must be scalars"); return; }
        if (strlen(v->items[i]->text) > SWEEP_MAX_VALUE) {
            rctx_error(c, v->items[i]->mark, sub, "a choice is at most %d characters; this one has %zu",
                       SWEEP_MAX_VALUE, strlen(v->items[i]->text));
            return;
        }
        p->choice[i] = v->items[i]->text;
        p->quoted[i] = !v->items[i]->plain;
    }
    p->nchoices = v->n;
}

// One `space` entry: KEY: {choice: [...]} | {uniform: [lo, hi]} | {loguniform: [lo, hi]} | {int: [lo, hi]},
// with `points: N` beside uniform and loguniform for grid.
static void parse_param(rctx *c, sweep_param *p, const yt_node *key, const yt_node *v) {
    static const char *const kinds[] = {"choice", "uniform", "loguniform", "int", "points"};
    char path[512];
    snprintf(path, sizeof path, "space.%s", key->text);
    p->key = key->text;
    p->mark = key->mark;
    p->kind = -1;
    if (v->kind != YT_MAP || v->n == 0)
        { rctx_error(c, v->mark, path, "expected {choice: [...]}, {uniform: [lo, hi]}, {loguniform: [lo, hi]} "
                                            "or {int: [lo, hi]}"); return; }
    for (int i = 0; i < v->n; i++) {
        int k = -1;
        for (int j = 0; j < 5; j++)
            if (!strcmp(v->keys[i]->text, kinds[j])) k = j;
        if (k < 0) {
            report_unknown_key(c, v, i, NULL, kinds, path);
        } else if (k == 4) {
            double pts;
            if (parse_num(v->items[i], &pts) || pts < 2 || pts != floor(pts) || pts > SWEEP_MAX_CHOICES)
                rctx_error(c, v->items[i]->mark, path, "points: expected an integer in [2, %d]", SWEEP_MAX_CHOICES);
            else
                p->points = (int64_t)pts;
        } else if (p->kind >= 0) {
            rctx_error(c, v->keys[i]->mark, path, "give one of choice, uniform, loguniform, int; found both %s and %s",
                       kinds[p->kind], kinds[k]);
        } else {
            p->kind = k;
            if (k == SP_CHOICE) parse_choice(c, p, v->items[i], path);
            else parse_range(c, p, v->items[i], path, kinds[k]);
        }
    }
    if (p->kind < 0) rctx_error(c, v->mark, path, "missing the distribution: choice, uniform, loguniform or int");
    if (p->points && p->kind != SP_UNIFORM && p->kind != SP_LOGUNIFORM)
        rctx_error(c, v->mark, path, "points applies only to uniform and loguniform (for grid)");
}

static void parse_space(rctx *c, sweep_spec *s, const yt_node *root) {
    const yt_node *sp = yt_map_get(root, "space");
    if (!sp) { rctx_error(c, root->mark, "space", "missing required key 'space' (the keys to search)"); return; }
    if (sp->kind != YT_MAP || sp->n == 0)
        { rctx_error(c, sp->mark, "space", "expected a mapping of recipe keys to distributions"); return; }
    if (sp->n > SWEEP_MAX_PARAMS) { rctx_error(c, sp->mark, "space", "at most %d keys", SWEEP_MAX_PARAMS); return; }
    s->np = sp->n;
    for (int i = 0; i < sp->n; i++) parse_param(c, &s->p[i], sp->keys[i], sp->items[i]);
}

// The rungs: ASHA's budgets min, min*eta, ... up to max (max itself the last); otherwise one.
static void plan_rungs(rctx *c, sweep_spec *s, const yt_node *root) {
    const yt_node *b = yt_map_get(root, "budget");
    yt_mark m = b ? b->mark : root->mark;
    s->nrungs = 1;
    s->rung_budget[0] = s->budget.max;
    if (s->method != SWEEP_ASHA) {
        if (b && s->budget.min) rctx_error(c, m, "budget.min", "applies only when method is asha; remove it");
        if (b && s->budget.max <= 0) rctx_error(c, m, "budget.max", "give the budget every trial trains (> 0)");
        return;
    }
    if (!b) { rctx_error(c, root->mark, "budget", "asha needs a budget: {key: train.steps, min: N, max: M}"); return; }
    if (s->budget.min <= 0 || s->budget.max <= s->budget.min) {
        rctx_error(c, m, "budget", "asha needs 0 < min < max; found min %lld, max %lld", (long long)s->budget.min,
                   (long long)s->budget.max);
        return;
    }
    s->nrungs = 0;
    for (int64_t v = s->budget.min; v < s->budget.max && s->nrungs < SWEEP_MAX_RUNGS - 1; v *= s->budget.reduction_factor)
        s->rung_budget[s->nrungs++] = v;
    s->rung_budget[s->nrungs++] = s->budget.max;
}

// Grid: every key must have finitely many values.
static void plan_grid(rctx *c, sweep_spec *s) {
    s->grid_size = 1;
    for (int i = 0; i < s->np; i++) {
        const sweep_param *p = &s->p[i];
        int64_t k = p->kind == SP_CHOICE ? p->nchoices : p->kind == SP_INT ? (int64_t)(p->hi - p->lo) + 1 : p->points;
        if (k <= 0) {
            rctx_error(c, p->mark, p->key, "grid needs a finite set: give %s a `points: N` beside it, or use choice",
                       p->kind == SP_UNIFORM ? "uniform" : "loguniform");
            continue;
        }
        if (s->grid_size > SWEEP_MAX_TRIALS / k) {
            rctx_error(c, p->mark, p->key, "the grid has more than %d points", SWEEP_MAX_TRIALS);
            return;
        }
        s->grid_size *= k;
    }
}

static void check_metric(rctx *c, sweep_spec *s, const yt_node *root, const recipe_t *r) {
    const yt_node *n = yt_map_get(root, "metric");
    yt_mark m = n ? n->mark : root->mark;
    int k = -1;
    for (int i = 0; metric_names[i]; i++)
        if (!strcmp(s->metric, metric_names[i])) k = i;
    if (k < 0) {
        const char *near = schema_suggest(s->metric, metric_names, 6);
        rctx_error(c, m, "metric", "unknown metric '%s'%s%s%s (one of loss, accuracy, top_k, mae, mean_iou, target)",
                   s->metric, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
        return;
    }
    snprintf(s->metric_name, sizeof s->metric_name, "%s", s->metric);
    bool max = strcmp(s->metric, "loss") != 0 && strcmp(s->metric, "mae") != 0;
    if (!strcmp(s->metric, "target")) {
        if (r->train.target.metric == METRIC_NONE)
            { rctx_error(c, m, "metric", "'target' needs train.target in the base recipe %s", s->base_path); return; }
        snprintf(s->metric_name, sizeof s->metric_name, "%s", metrics_name(r->train.target.metric));
        max = !isnan(r->train.target.above);
    }
    s->maximize = s->goal == GOAL_AUTO ? max : s->goal == GOAL_MAX;
}

// Strips "command line:N:COL: error: " from a recipe message so it can carry the sweep file's place.
static const char *message_of(const char *line) {
    const char *e = strstr(line, "error: ");
    return e ? e + 7 : line;
}

// Loads the base recipe with one more override; errors become the sweep file's, at key's mark.
static int try_value(rctx *c, const sweep_spec *s, const sweep_param *p, const char *value) {
    int n = s->noverrides;
    char *ov[n + 1], text[1024];
    for (int i = 0; i < n; i++) ov[i] = s->overrides[i];
    snprintf(text, sizeof text, "%s=%s", p->key, value);
    ov[n] = text;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    recipe_t r;
    int rc = recipe_load(&r, s->base_path, n + 1, ov, mem);
    recipe_free(&r);
    fclose(mem);
    if (rc) {
        char *nl = strchr(buf, '\n');
        if (nl) *nl = 0;
        char path[512];
        snprintf(path, sizeof path, "space.%s", p->key);
        rctx_error(c, p->mark, path, "%s = %s does not fit the base recipe %s: %s", p->key, value, s->base_path,
                   message_of(buf));
    }
    free(buf);
    return rc;
}

static void check_space_keys(rctx *c, const sweep_spec *s) {
    for (int i = 0; i < s->np; i++) {
        const sweep_param *p = &s->p[i];
        if (p->kind < 0) continue;
        char v[256];
        if (p->kind == SP_CHOICE) {
            for (int k = 0; k < p->nchoices; k++) {
                if (p->quoted[k]) snprintf(v, sizeof v, "\"%s\"", p->choice[k]);
                else snprintf(v, sizeof v, "%s", p->choice[k]);
                if (try_value(c, s, p, v)) break;
            }
        } else {
            snprintf(v, sizeof v, p->kind == SP_INT ? "%.0f" : "%.6g", p->lo);
            if (try_value(c, s, p, v)) continue;
            snprintf(v, sizeof v, p->kind == SP_INT ? "%.0f" : "%.6g", p->hi);
            try_value(c, s, p, v);
        }
    }
}

// The budget key must be written in the base recipe (train.steps replaces train.epochs).
static void check_budget_key(rctx *c, const sweep_spec *s, const yt_node *root, const recipe_t *r) {
    if (!s->has_budget) return;
    const yt_node *k = node_at(root, "budget.key");
    yt_mark m = k ? k->mark : yt_map_get(root, "budget")->mark;
    const char *key = budget_keys[s->budget.key];
    if (!node_at(yt_root(r->doc), key))
        rctx_error(c, m, "budget.key", "the base recipe %s does not set %s: write it there (the budget replaces "
                                       "its value)", s->base_path, key);
    else if (s->budget.key == BUDGET_EPOCHS && r->train.steps > 0)
        rctx_error(c, m, "budget.key", "the base recipe %s sets train.steps, which replaces train.epochs: use "
                                       "key: train.steps", s->base_path);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_file(const char *path, uint64_t h) {
    FILE *f = fopen(path, "rb");
    if (!f) return h;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(h, buf, n);
    fclose(f);
    return h;
}

static void paths_of(sweep_spec *s, const sweep_opts *o) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", o->file);
    const char *dir = dirname(tmp);
    if (s->base[0] == '/' || !strcmp(dir, ".")) snprintf(s->base_path, sizeof s->base_path, "%s", s->base);
    else snprintf(s->base_path, sizeof s->base_path, "%s/%s", dir, s->base);
    if (o->dir || s->dir) {
        snprintf(s->dir_path, sizeof s->dir_path, "%s", o->dir ? o->dir : s->dir);
        return;
    }
    snprintf(tmp, sizeof tmp, "%s", o->file);
    char *name = basename(tmp), *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = 0;
    snprintf(s->dir_path, sizeof s->dir_path, "sweeps/%s", name);
}

// Everything that needs the base recipe.
static void check_base(rctx *c, sweep_spec *s, const yt_node *root) {
    recipe_t r;
    if (recipe_load(&r, s->base_path, s->noverrides, s->overrides, c->err) != 0) {
        c->nerr++;
        const yt_node *b = yt_map_get(root, "base");
        rctx_error(c, b ? b->mark : root->mark, "base", "the base recipe %s has errors (above)", s->base_path);
        recipe_free(&r);
        return;
    }
    s->time_limit = r.train.time_limit;
    s->base_seed = r.seed;
    if (!s->has_budget) {  // every trial trains the base recipe's own budget: say which in the results
        s->budget.key = r.train.steps > 0 ? BUDGET_STEPS : BUDGET_EPOCHS;
        s->rung_budget[0] = r.train.steps > 0 ? r.train.steps : r.train.epochs;
    }
    check_metric(c, s, root, &r);
    check_budget_key(c, s, root, &r);
    uint64_t h = hash_file(s->file, 1469598103934665603ull);
    for (int i = 0; i < s->noverrides; i++) h = fnv(h, s->overrides[i], strlen(s->overrides[i]) + 1);
    uint64_t rh = recipe_hash(&r);
    s->hash = fnv(h, &rh, sizeof rh);
    recipe_free(&r);
    if (c->nerr == 0) check_space_keys(c, s);
}

int sweep_load(sweep_spec *s, const sweep_opts *o, FILE *err) {
    memset(s, 0, sizeof *s);
    char msg[1024];
    if (yt_load_file(o->file, &s->doc, msg, sizeof msg) != 0) {
        fprintf(err, "%s\n", msg);
        return -1;
    }
    s->file = yt_intern(s->doc, o->file);
    s->noverrides = o->noverrides;
    s->overrides = o->overrides;
    const yt_node *root = yt_root(s->doc);
    rctx c = {.err = err};
    if (root->kind != YT_MAP) {
        rctx_error(&c, root->mark, NULL, "a sweep file is a mapping (base, method, metric, space, ...)");
        return -1;
    }
    // The keys other than `space` go through the recipe's resolver with the sweep's own schema.
    yt_node top = *root;
    yt_node *keys[root->n + 1], *items[root->n + 1];
    top.n = 0, top.keys = keys, top.items = items;
    for (int i = 0; i < root->n; i++)
        if (strcmp(root->keys[i]->text, "space")) keys[top.n] = root->keys[i], items[top.n++] = root->items[i];
    resolve_section(&c, sweep_schema, &top, s, "", root->mark);
    parse_space(&c, s, root);
    s->has_budget = yt_map_get(root, "budget") != NULL;
    const yt_node *rpt = yt_map_get(root, "ranks_per_trial");
    s->mark_rpt = rpt ? rpt->mark : root->mark;
    if (c.nerr) return -1;
    if (s->method != SWEEP_GRID && s->trials < 1)
        rctx_error(&c, root->mark, "trials", "%s needs trials >= 1 (how many configurations to draw)",
                   methods[s->method]);
    plan_rungs(&c, s, root);
    if (s->method == SWEEP_GRID) plan_grid(&c, s);
    paths_of(s, o);
    if (c.nerr == 0) check_base(&c, s, root);
    return c.nerr ? -1 : 0;
}

void sweep_free(sweep_spec *s) {
    if (s->doc) yt_doc_free(s->doc);
    memset(s, 0, sizeof *s);
}
