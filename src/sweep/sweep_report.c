// sweep_report.c: `galley report SWEEP_DIR`: one self-contained HTML page (inline SVG, no
// script) with every trial (values, budget, steps, metric, state), the metric against each
// hyperparameter (a log axis where the values span over 20x and are positive; failed trials
// drawn at the top edge in red, stopped ones grey), and a link to curves.html: the ordinary run report
// (report.h) of all the trials' runs, overlaid.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/report.h"
#include "galley/sweep.h"
#include "log/json.h"
#include "log/report_internal.h"
#include "sweep/sweep_internal.h"

#define MAXP SWEEP_MAX_PARAMS

// One results.jsonl line: the trial's values (NAN and a string for a string choice).
typedef struct {
    double v[MAXP];
    char *sv[MAXP];  // string choices only (NULL: a number, printed from v)
    double metric;
    char state[12];
    long long trial, budget, steps;
} row;

// Every trial of the sweep (up to SWEEP_MAX_TRIALS: rows grow as results.jsonl is read).
typedef struct {
    char key[MAXP][128];
    int np, n, cap;
    row *r;
    char metric_name[32];
    int unread;  // lines of results.jsonl that were not a JSON object (said on the page and on stdout)
} table;

int sweep_dir_is_sweep(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/journal.jsonl", dir);
    return access(p, F_OK) == 0;
}

// The column of key (a sweep has at most SWEEP_MAX_PARAMS keys: -1 beyond, a file not a sweep's).
static int param_of(table *t, const char *key) {
    for (int i = 0; i < t->np; i++)
        if (!strcmp(t->key[i], key)) return i;
    if (t->np == MAXP) return -1;
    snprintf(t->key[t->np], sizeof t->key[0], "%s", key);
    return t->np++;
}

static int take(void *ctx, const char *path, const jv_leaf *v) {
    table *t = ctx;
    row *r = &t->r[t->n];
    if (!strncmp(path, "values.", 7)) {
        int i = param_of(t, path + 7);
        if (i < 0) return 1;
        r->v[i] = v->type == JV_NUM ? v->num : NAN;
        if (v->type == JV_STR) {
            free(r->sv[i]);
            r->sv[i] = strdup(v->str);
            GL_CHECK(r->sv[i], "out of memory");
        }
    } else if (!strcmp(path, "trial")) r->trial = (long long)v->num;
    else if (!strcmp(path, "budget")) r->budget = (long long)v->num;
    else if (!strcmp(path, "steps")) r->steps = (long long)v->num;
    else if (!strcmp(path, "state") && v->type == JV_STR) snprintf(r->state, sizeof r->state, "%s", v->str);
    else if (strcmp(path, "rung") && strcmp(path, "seconds") && strcmp(path, "message")) {
        snprintf(t->metric_name, sizeof t->metric_name, "%s", path);  // the one other key: the metric
        r->metric = v->type == JV_NUM ? v->num : NAN;
    }
    return 0;
}

static void table_free(table *t) {
    for (int k = 0; k < t->n; k++)
        for (int i = 0; i < MAXP; i++) free(t->r[k].sv[i]);
    free(t->r);
    free(t);
}

static int load(table *t, const char *dir, FILE *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s/results.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f) return fprintf(err, "galley report: error: %s: no results.jsonl yet (the sweep has not ended a trial)\n", dir), -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 256;
            t->r = realloc(t->r, sizeof(row) * (size_t)t->cap);
            GL_CHECK(t->r, "out of memory");
        }
        row *r = &t->r[t->n];
        memset(r, 0, sizeof *r);
        r->metric = NAN;
        for (int i = 0; i < MAXP; i++) r->v[i] = NAN;
        char why[128];
        if (json_walk(line, (size_t)len, take, t, why, sizeof why) == 0) {
            t->n++;
        } else {  // a torn last line, or not a sweep's file
            for (int i = 0; i < MAXP; i++) free(r->sv[i]);
            t->unread++;
        }
    }
    free(line);
    fclose(f);
    return 0;
}

// Trial k's value of parameter i as text ("" where the trial has none).
static void value_text(const row *r, int i, char *buf, size_t len) {
    if (r->sv[i]) snprintf(buf, len, "%s", r->sv[i]);
    else if (!isnan(r->v[i])) snprintf(buf, len, "%.6g", r->v[i]);
    else buf[0] = 0;
}

// One scatter: the metric against parameter i.
static void scatter(FILE *o, const table *t, int i) {
    const double W = 360, H = 220, L = 60, B = 30;
    double lo = INFINITY, hi = -INFINITY, mlo = INFINITY, mhi = -INFINITY;
    for (int k = 0; k < t->n; k++) {
        const row *r = &t->r[k];
        if (!isnan(r->v[i])) lo = fmin(lo, r->v[i]), hi = fmax(hi, r->v[i]);
        if (isfinite(r->metric) && strcmp(r->state, "failed")) mlo = fmin(mlo, r->metric), mhi = fmax(mhi, r->metric);
    }
    if (!(lo <= hi) || !(mlo <= mhi)) return;
    bool lg = lo > 0 && hi / lo > 20;
    double a = lg ? log10(lo) : lo, b = lg ? log10(hi) : hi;
    if (b - a < 1e-12) a -= 0.5, b += 0.5;
    if (mhi - mlo < 1e-12) mlo -= 0.5, mhi += 0.5;
    fprintf(o, "<figure><svg width='%g' height='%g' viewBox='0 0 %g %g'><rect x='%g' y='0' width='%g' height='%g' "
               "fill='none' stroke='#999'/>", W + L, H + B, W + L, H + B, L, W, H);
    for (int k = 0; k < t->n; k++) {
        const row *r = &t->r[k];
        if (isnan(r->v[i])) continue;
        double x = L + 8 + (W - 16) * ((lg ? log10(r->v[i]) : r->v[i]) - a) / (b - a);
        bool ok = isfinite(r->metric) && strcmp(r->state, "failed");
        double y = ok ? 8 + (H - 16) * (mhi - r->metric) / (mhi - mlo) : 4;
        fprintf(o, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>trial %lld: ", x, y,
                ok ? (!strcmp(r->state, "done") ? "#1f77b4" : "#aaa") : "#d62728", r->trial);
        html_escape(o, r->state);
        fprintf(o, "</title></circle>");
    }
    fprintf(o, "<text x='%g' y='%g' font-size='11'>%.4g</text><text x='%g' y='%g' font-size='11' "
               "text-anchor='end'>%.4g</text><text x='4' y='12' font-size='11'>%.4g</text><text x='4' y='%g' "
               "font-size='11'>%.4g</text></svg><figcaption>",
            L, H + 16, lo, L + W, H + 16, hi, mhi, H, mlo);
    html_escape(o, t->metric_name);
    fprintf(o, " against ");
    html_escape(o, t->key[i]);
    fprintf(o, "%s</figcaption></figure>\n", lg ? " (log axis)" : "");
}

// <td>TEXT</td>, TEXT escaped.
static void cell(FILE *o, const char *text) {
    fprintf(o, "<td>");
    html_escape(o, text);
    fprintf(o, "</td>");
}

static void page(FILE *o, const table *t, const char *dir, bool curves) {
    fprintf(o, "<!doctype html><html><head><meta charset='utf-8'><title>sweep ");
    html_escape(o, dir);
    fprintf(o, "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:"
               "2px 8px;border-bottom:1px solid #ddd;text-align:right}figure{display:inline-block;margin:8px}</style>"
               "</head><body>\n<h1>Sweep ");
    html_escape(o, dir);
    fprintf(o, "</h1><p>%d trials; ", t->n);
    html_escape(o, t->metric_name);
    fprintf(o, ". %s</p>\n", curves ? "Every trial's curves: <a href='curves.html'>curves.html</a>." : "No trial has run yet.");
    if (t->unread)
        fprintf(o, "<p>%d line%s of results.jsonl could not be read (not a trial's result) and %s not shown.</p>\n",
                t->unread, t->unread == 1 ? "" : "s", t->unread == 1 ? "is" : "are");
    for (int i = 0; i < t->np; i++) scatter(o, t, i);
    fprintf(o, "<table><tr><th>trial</th>");
    for (int i = 0; i < t->np; i++) {
        fprintf(o, "<th>");
        html_escape(o, t->key[i]);
        fprintf(o, "</th>");
    }
    fprintf(o, "<th>budget</th><th>steps</th><th>");
    html_escape(o, t->metric_name);
    fprintf(o, "</th><th>state</th></tr>\n");
    for (int k = 0; k < t->n; k++) {
        const row *r = &t->r[k];
        fprintf(o, "<tr><td>%lld</td>", r->trial);
        for (int i = 0; i < t->np; i++) {
            char v[SWEEP_MAX_VALUE + 64];
            value_text(r, i, v, sizeof v);
            cell(o, v);
        }
        char m[32] = "-";
        if (isfinite(r->metric) && strcmp(r->state, "failed")) snprintf(m, sizeof m, "%.6g", r->metric);
        fprintf(o, "<td>%lld</td><td>%lld</td><td>%s</td>", r->budget, r->steps, m);
        cell(o, r->state);
        fprintf(o, "</tr>\n");
    }
    fprintf(o, "</table></body></html>\n");
}

int sweep_report(const char *dir, const char *out_path, FILE *out, FILE *err) {
    table *t = calloc(1, sizeof *t);
    GL_CHECK(t, "out of memory");
    if (load(t, dir, err) != 0) return table_free(t), GL_EXIT_USAGE;
    char trials[4200], curves[4200], path[4200];
    snprintf(trials, sizeof trials, "%s/trials", dir);
    snprintf(curves, sizeof curves, "%s/curves.html", dir);
    char *paths[1] = {trials}, **runs = NULL;
    FILE *quiet = fopen("/dev/null", "w");
    int nruns = report_find_runs(paths, 1, &runs, quiet ? quiet : err);
    if (quiet) fclose(quiet);
    int code = nruns > 0 ? report_write(runs, nruns, curves, err) : GL_EXIT_OK;
    for (int i = 0; i < nruns; i++) free(runs[i]);
    free(runs);
    if (!out_path) snprintf(path, sizeof path, "%s/report.html", dir), out_path = path;
    FILE *o = fopen(out_path, "w");
    if (!o) {
        fprintf(err, "galley report: error: cannot write %s\n", out_path);
        table_free(t);
        return GL_EXIT_RUNTIME;
    }
    page(o, t, dir, nruns > 0 && code == GL_EXIT_OK);
    if (fclose(o) != 0) code = GL_EXIT_RUNTIME;
    if (code == GL_EXIT_OK)
        fprintf(out, "galley report: sweep of %d trials -> %s (curves of %d runs: %s)\n", t->n, out_path, nruns > 0 ? nruns : 0,
                curves);
    if (code == GL_EXIT_OK && t->unread)
        fprintf(out, "galley report: %d line%s of %s/results.jsonl could not be read and %s not shown\n", t->unread,
                t->unread == 1 ? "" : "s", dir, t->unread == 1 ? "is" : "are");
    table_free(t);
    return code;
}
