// resolve.c: checks a YAML tree against the schema and fills a recipe_t, defaults included.
// Every error names FILE:LINE:COL and the key path, says what was expected and what was found;
// resolution goes on after an error so one run reports all of them (up to a limit).
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/layer.h"
#include "galley/optim.h"  // optim_rule
#include "recipe/recipe_internal.h"

#define MAX_REPORTED 25

void rctx_error(rctx *c, yt_mark m, const char *path, const char *fmt, ...) {
    c->nerr++;
    if (c->nerr > MAX_REPORTED) return;
    fprintf(c->err, "%s:%d:%d: error: %s: ", m.file, m.line, m.col, path && *path ? path : "(recipe)");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(c->err, fmt, ap);
    va_end(ap);
    fputc('\n', c->err);
}

static const char *kind_word(const yt_node *n) {
    return n->kind == YT_MAP ? "a mapping" : n->kind == YT_SEQ ? "a list" : "a scalar";
}

static int is_null(const yt_node *n) {
    return n->kind == YT_SCALAR && n->plain &&
           (!n->text[0] || !strcmp(n->text, "~") || !strcmp(n->text, "null") || !strcmp(n->text, "Null") ||
            !strcmp(n->text, "NULL"));
}

// "found '...'" with quoting noted, so `"10"` is not mistaken for 10.
static void found_word(const yt_node *n, char *buf, size_t len) {
    if (n->kind != YT_SCALAR)
        snprintf(buf, len, "%s", kind_word(n));
    else if (is_null(n))
        snprintf(buf, len, "an empty value");
    else if (!n->plain)
        snprintf(buf, len, "the quoted string '%.60s'", n->text);
    else
        snprintf(buf, len, "'%.60s'", n->text);
}

void path_join(char *dst, size_t len, const char *parent, const char *key) {
    if (parent && *parent)
        snprintf(dst, len, "%s.%s", parent, key);
    else
        snprintf(dst, len, "%s", key);
}

static int parse_int(const char *s, int64_t *out) {
    if (!*s) return -1;
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double *out) {
    if (!*s) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v)) return -1;
    // strtod takes hex and "inf"/"nan"; a recipe number is decimal.
    for (const char *q = s; *q; q++)
        if (!strchr("0123456789+-.eE", *q)) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out) {
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return *out = true, 0;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return *out = false, 0;
    return -1;
}

static void expect_error(rctx *c, const key_spec *k, const yt_node *n, const char *path) {
    char want[256], got[128];
    schema_describe(k, want, sizeof want);
    found_word(n, got, sizeof got);
    rctx_error(c, n->mark, path, "expected %s, found %s", want, got);
}

static void range_error(rctx *c, const key_spec *k, const yt_node *n, const char *path) {
    char want[256];
    schema_describe(k, want, sizeof want);
    rctx_error(c, n->mark, path, "%s is out of range: expected %s", n->text, want);
}

static int resolve_floats(rctx *c, const key_spec *k, const yt_node *n, void *dst, const char *path) {
    gl_floats *f = dst;
    f->n = 0;
    if (n->kind != YT_SEQ || n->n > GL_MAX_FLOATS) {
        char want[256], got[128];
        schema_describe(k, want, sizeof want);
        found_word(n, got, sizeof got);
        if (n->kind == YT_SEQ) snprintf(got, sizeof got, "a list of %d items", n->n);
        rctx_error(c, n->mark, path, "expected %s, found %s", want, got);
        return -1;
    }
    for (int i = 0; i < n->n; i++) {
        const yt_node *it = n->items[i];
        char sub[600];
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        double v;
        if (it->kind != YT_SCALAR || !it->plain || parse_float(it->text, &v)) {
            char got[128];
            found_word(it, got, sizeof got);
            rctx_error(c, it->mark, sub, "expected a number, found %s", got);
            return -1;
        }
        if (v < k->min || v > k->max) return range_error(c, k, it, sub), -1;
        f->v[f->n++] = v;
    }
    return 0;
}

// Resolves one scalar-like key from node n (never NULL) into dst.
int resolve_value(rctx *c, const key_spec *k, const yt_node *n, void *dst, const char *path) {
    if (k->flag == KF_OPTIONAL && is_null(n)) {
        if (k->type == KT_FLOAT) *(double *)dst = NAN;
        if (k->type == KT_STRING) *(const char **)dst = NULL;
        if (k->type == KT_FLOATS) ((gl_floats *)dst)->n = 0;
        return 0;
    }
    if (k->type == KT_FLOATS) return resolve_floats(c, k, n, dst, path);
    if (n->kind != YT_SCALAR || (k->type != KT_STRING && is_null(n))) return expect_error(c, k, n, path), -1;
    switch (k->type) {
    case KT_INT: {
        int64_t v;
        if (!n->plain || parse_int(n->text, &v)) return expect_error(c, k, n, path), -1;
        if ((double)v < k->min || (double)v > k->max) return range_error(c, k, n, path), -1;
        *(int64_t *)dst = v;
        return 0;
    }
    case KT_FLOAT: {
        double v;
        if (!n->plain || parse_float(n->text, &v)) return expect_error(c, k, n, path), -1;
        if (v < k->min || v > k->max) return range_error(c, k, n, path), -1;
        *(double *)dst = v;
        return 0;
    }
    case KT_PAD: {
        int64_t v;
        if (n->plain && !strcmp(n->text, "same")) return *(int64_t *)dst = GL_PAD_SAME, 0;
        if (!n->plain || parse_int(n->text, &v)) return expect_error(c, k, n, path), -1;
        if ((double)v < k->min || (double)v > k->max) return range_error(c, k, n, path), -1;
        *(int64_t *)dst = v;
        return 0;
    }
    case KT_BOOL: {
        bool v;
        if (!n->plain || parse_bool(n->text, &v)) return expect_error(c, k, n, path), -1;
        *(bool *)dst = v;
        return 0;
    }
    case KT_STRING:
        if (is_null(n) && n->plain) {
            rctx_error(c, n->mark, path, "expected a string, found an empty value");
            return -1;
        }
        *(const char **)dst = n->text;
        return 0;
    case KT_ENUM: {
        int count = 0;
        for (int i = 0; k->choices[i]; i++, count++)
            if (!strcmp(n->text, k->choices[i])) return *(int *)dst = i, 0;
        const char *near = schema_suggest(n->text, k->choices, count);
        char want[512], got[128];
        schema_describe(k, want, sizeof want);
        found_word(n, got, sizeof got);
        if (near)
            rctx_error(c, n->mark, path, "expected %s; found %s (did you mean '%s'?)", want, got, near);
        else
            rctx_error(c, n->mark, path, "expected %s; found %s", want, got);
        return -1;
    }
    default: GL_CHECK(0, "resolve_value called on a container key");
    }
    return -1;
}

// Fills dst with k's default (parsed by the same rules as recipe text, so they cannot differ).
void resolve_default(rctx *c, const key_spec *k, void *dst) {
    if (k->flag == KF_OPTIONAL) {
        if (k->type == KT_FLOAT) *(double *)dst = NAN;
        if (k->type == KT_STRING) *(const char **)dst = NULL;
        if (k->type == KT_FLOATS) ((gl_floats *)dst)->n = 0;
        return;
    }
    GL_CHECK(k->def, "a key with a default must have def");
    if (k->type == KT_FLOATS) {
        // Defaults of lists are written as flow YAML ("[]", "[1, 2]"): parse them like text.
        yt_doc *d = NULL;
        char msg[256];
        GL_CHECK(yt_load_string(k->def, "<schema default>", &d, msg, sizeof msg) == 0, "bad list default");
        int before = c->nerr;
        resolve_floats(c, k, yt_root(d), dst, k->name);
        yt_doc_free(d);
        GL_CHECK(c->nerr == before, "schema default does not validate");
        return;
    }
    yt_node n = {.kind = YT_SCALAR, .mark = {"<schema default>", 0, 0}, .plain = 1, .text = (char *)k->def};
    int before = c->nerr;
    resolve_value(c, k, &n, dst, k->name);
    GL_CHECK(c->nerr == before, "schema default does not validate");
}

void report_unknown_key(rctx *c, const yt_node *map, int i, const key_spec *keys, const char *const *extra,
                        const char *parent) {
    const char *names[96];
    int n = 0;
    for (int e = 0; extra && extra[e] && n < 96; e++) names[n++] = extra[e];
    for (int j = 0; keys && keys[j].name && n < 96; j++) names[n++] = keys[j].name;
    const char *key = map->keys[i]->text;
    char path[512];
    path_join(path, sizeof path, parent, key);
    const char *near = schema_suggest(key, names, n);
    const char *where = parent && *parent ? parent : "the recipe's top level";
    if (near) {
        rctx_error(c, map->keys[i]->mark, path, "unknown key '%s' in %s (did you mean '%s'?)", key, where, near);
    } else {
        char list[1024];
        size_t k = 0;
        list[0] = 0;
        for (int j = 0; j < n && k < sizeof list; j++)
            k += (size_t)snprintf(list + k, sizeof list - k, j ? ", %s" : "%s", names[j]);
        rctx_error(c, map->keys[i]->mark, path, "unknown key '%s' in %s (known keys: %s)", key, where, list);
    }
}

static int spec_has(const key_spec *keys, const char *name) {
    for (int j = 0; keys[j].name; j++)
        if (!strcmp(keys[j].name, name)) return 1;
    return 0;
}

// Resolves a mapping (or its absence: node == NULL) against keys into base.
void resolve_section(rctx *c, const key_spec *keys, const yt_node *node, void *base, const char *path,
                     yt_mark where) {
    if (node && node->kind != YT_MAP) {
        if (is_null(node)) {
            node = NULL;  // "train:" with nothing under it: all defaults
        } else {
            rctx_error(c, node->mark, path, "expected a mapping, found %s", kind_word(node));
            return;
        }
    }
    if (node) {
        for (int i = 0; i < node->n; i++)
            if (!spec_has(keys, node->keys[i]->text)) report_unknown_key(c, node, i, keys, NULL, path);
        where = node->mark;
    }
    for (const key_spec *k = keys; k->name; k++) {
        char sub[512];
        path_join(sub, sizeof sub, path, k->name);
        const yt_node *v = node ? yt_map_get(node, k->name) : NULL;
        void *dst = (char *)base + k->offset;
        if (!strcmp(sub, "model.blocks")) continue;  // read with model.layers (resolve_blocks.c)
        if (k->applies && !k->applies(base)) {
            // An explicit null says "not set", which is no conflict (it lets an override switch
            // a section off: data.synthetic=null with data.source=hdf5).
            if (v && !is_null(v))
                rctx_error(c, v->mark, sub, "applies only when %s; remove it", k->when);
            if (k->type != KT_SECTION && k->type != KT_LAYERS) resolve_default(c, k, dst);
            continue;
        }
        if (k->type == KT_SECTION) {
            if (!v && k->flag == KF_REQUIRED) {
                rctx_error(c, where, sub, "missing required key '%s' (%s)", k->name, k->doc);
                continue;
            }
            resolve_section(c, k->children, v, base, sub, v ? v->mark : where);
        } else if (k->type == KT_LAYERS) {
            resolve_layers(c, v, (recipe_t *)base, sub, where);
        } else if (!v) {
            if (k->flag == KF_REQUIRED) {
                char want[256];
                schema_describe(k, want, sizeof want);
                rctx_error(c, where, sub, "missing required key '%s' (%s: %s)", k->name, want, k->doc);
            } else {
                resolve_default(c, k, dst);
            }
        } else {
            resolve_value(c, k, v, dst, sub);
        }
    }
}

yt_mark recipe_mark(const recipe_t *r, const char *dotted) {
    const yt_node *root = yt_root(r->doc), *n = node_at(root, dotted);
    return n ? n->mark : root->mark;
}

void recipe_where(const recipe_t *r, const char *dotted, char *buf, size_t len) {
    yt_mark m = recipe_mark(r, dotted);
    snprintf(buf, len, "%s:%d:%d: error: %s", m.file, m.line, m.col, dotted);
}

const yt_node *node_at(const yt_node *root, const char *dotted) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", dotted);
    const yt_node *n = root;
    for (char *save = NULL, *seg = strtok_r(buf, ".", &save); seg && n; seg = strtok_r(NULL, ".", &save))
        n = yt_map_get(n, seg);
    return n;
}

static void cross_schedule(rctx *c, recipe_t *r, const yt_node *root) {
    const yt_node *s = node_at(root, "optimizer.schedule");
    yt_mark m = s ? s->mark : root->mark;
    const gl_floats *ms = &r->optimizer.schedule.milestones, *fs = &r->optimizer.schedule.factors;
    if (r->optimizer.schedule.decay == DECAY_MULTISTEP) {
        if (ms->n == 0)
            rctx_error(c, m, "optimizer.schedule.milestones", "multistep decay needs at least one milestone");
        else if (ms->n != fs->n)
            rctx_error(c, m, "optimizer.schedule.factors", "give one factor per milestone: %d milestones, %d factors",
                       ms->n, fs->n);
        for (int i = 1; i < ms->n; i++)
            if (ms->v[i] <= ms->v[i - 1]) {
                rctx_error(c, m, "optimizer.schedule.milestones", "milestones must increase: %g comes after %g",
                           ms->v[i], ms->v[i - 1]);
                break;
            }
    }
    const gl_optim_rule *rule = optim_rule(r->optimizer.type);  // its own checks (the registry, optim.h)
    const char *key = NULL, *why = rule && rule->check ? rule->check(r, &key) : NULL;
    if (why) {
        const yt_node *o = node_at(root, "optimizer");
        rctx_error(c, o ? o->mark : root->mark, key, "%s", why);
    }
}

static yt_mark mark_of(const yt_node *root, const char *key) {
    const yt_node *k = node_at(root, key);
    return k ? k->mark : root->mark;
}

// data.timeseries' lists hold whole numbers (channel indices, [H, W]); mean and std come together.
// data.synthetic.lead of weather2d lies inside a series.
static void cross_timeseries(rctx *c, recipe_t *r, const yt_node *root) {
    if (r->data.source == DATA_SOURCE_TIMESERIES) {
        const char *ck = "data.timeseries.channels", *sk = "data.timeseries.size";
        const gl_floats *ch = &r->data.timeseries.channels, *sz = &r->data.timeseries.size;
        for (int i = 0; i < ch->n; i++)
            if (ch->v[i] != floor(ch->v[i]))
                rctx_error(c, mark_of(root, ck), ck, "%g is no channel index (a whole number >= 0)", ch->v[i]);
        if (sz->n != 0 && sz->n != 2)
            rctx_error(c, mark_of(root, sk), sk, "expected [H, W] (or [] for the whole grid), found %d values", sz->n);
        for (int i = 0; i < sz->n; i++)
            if (sz->v[i] != floor(sz->v[i]))
                rctx_error(c, mark_of(root, sk), sk, "expected whole numbers of rows and columns, found %g", sz->v[i]);
        if (!r->data.timeseries.mean != !r->data.timeseries.std) {
            const char *k = r->data.timeseries.mean ? "data.timeseries.mean" : "data.timeseries.std";
            rctx_error(c, mark_of(root, k), k, "give data.timeseries.mean and data.timeseries.std together (or "
                       "neither: no normalisation)");
        }
    }
    if (r->data.source == DATA_SOURCE_SYNTHETIC && r->data.synthetic.kind == SYNTH_WEATHER2D &&
        r->data.synthetic.lead >= r->data.synthetic.steps) {
        const char *k = "data.synthetic.lead";
        rctx_error(c, mark_of(root, k), k, "%lld is beyond a series of data.synthetic.steps = %lld time steps: "
                   "pairs (x at t, x at t + lead) need lead < steps", (long long)r->data.synthetic.lead,
                   (long long)r->data.synthetic.steps);
    }
}

// Checks that involve more than one key.
static void resolve_cross(rctx *c, recipe_t *r, const yt_node *root) {
    cross_schedule(c, r, root);
    cross_timeseries(c, r, root);
    const yt_node *t = node_at(root, "train.target");
    yt_mark m = t ? t->mark : root->mark;
    bool above = !isnan(r->train.target.above), below = !isnan(r->train.target.below);
    if (r->train.target.metric == METRIC_NONE) {
        // above/below without a metric were already refused (they apply only with one)
    } else if (above == below) {
        rctx_error(c, m, "train.target", "give exactly one of 'above' or 'below' for the target metric");
    } else {
        int m_ = r->train.target.metric;
        int downward = m_ == METRIC_LOSS || m_ == METRIC_MAE || m_ == METRIC_L2_RELATIVE;
        const char *name = m_ == METRIC_ACCURACY ? "accuracy" : m_ == METRIC_TOPK ? "top_k" : m_ == METRIC_LOSS ? "loss"
                           : m_ == METRIC_MAE ? "mae" : m_ == METRIC_L2_RELATIVE ? "l2_relative" : "mean_iou";
        if (downward && above)
            rctx_error(c, m, "train.target.above", "%s improves downwards: use 'below'", name);
        else if (!downward && below)
            rctx_error(c, m, "train.target.below", "%s improves upwards: use 'above'", name);
    }
    if (r->distributed.deterministic && r->distributed.sync_batchnorm) {
        const yt_node *k = node_at(root, "distributed.sync_batchnorm");
        rctx_error(c, k ? k->mark : root->mark, "distributed.sync_batchnorm",
                   "cannot be combined with distributed.deterministic (its parts are computed one after another, "
                   "so no part sees the others' statistics); turn one of them off");
    }
    if (r->train.profile.stop_step > 0 && r->train.profile.stop_step <= r->train.profile.start_step) {
        const yt_node *k = node_at(root, "train.profile.stop_step");
        rctx_error(c, k ? k->mark : root->mark, "train.profile.stop_step",
                   "must be after train.profile.start_step (%lld): the window is steps [start_step, stop_step)",
                   (long long)r->train.profile.start_step);
    }
    // The CPU backend computes in fp32 only; asking for less there is a mistake, not a hint.
    if (r->train.device == DEVICE_CPU && r->train.precision > PRECISION_FP32) {
        const yt_node *k = node_at(root, "train.precision");
        rctx_error(c, k ? k->mark : root->mark, "train.precision",
                   "%s applies on GPUs only, and train.device is cpu (the CPU trains in fp32); set "
                   "train.precision: fp32 (or auto), or train.device: cuda or auto",
                   recipe_precision_name(r->train.precision));
    }
    if (r->data.synthetic.kind == SYNTH_SHAPES2D && r->data.synthetic.classes > 6) {
        const yt_node *k = node_at(root, "data.synthetic.classes");
        rctx_error(c, k ? k->mark : root->mark, "data.synthetic.classes",
                   "shapes2d draws 6 kinds of shape: classes must be <= 6, found %lld",
                   (long long)r->data.synthetic.classes);
    }
}

static const char *default_name(recipe_t *r, const char *file) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".yaml")) n -= 5;
    else if (n > 4 && !strcmp(base + n - 4, ".yml")) n -= 4;
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 200 ? n : 200), base);
    return yt_intern(r->doc, buf);
}

int recipe_resolve(recipe_t *r, const yt_node *root, FILE *err) {
    rctx c = {.err = err, .nerr = 0};
    if (root->kind != YT_MAP) {
        rctx_error(&c, root->mark, "(recipe)", "a recipe is a mapping of sections (model, train, ...), found %s",
                   kind_word(root));
        return -1;
    }
    resolve_section(&c, recipe_schema, root, r, "", root->mark);
    if (!c.nerr) resolve_cross(&c, r, root);
    if (!c.nerr && !r->name) r->name = default_name(r, r->file);
    if (c.nerr > MAX_REPORTED) fprintf(err, "... and %d more errors\n", c.nerr - MAX_REPORTED);
    return c.nerr ? -1 : 0;
}
