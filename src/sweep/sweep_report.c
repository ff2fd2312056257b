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

#define MAXP 16
#define MAXT 4096

typedef struct {
    char key[MAXP][128];
    int np;
    int n;
    double v[MAXT][MAXP];  // numeric values (NAN: a string choice)
    char sv[MAXT][MAXP][48];
    double metric[MAXT];
    char state[MAXT][12], metric_name[32];
    long long trial[MAXT], budget[MAXT], steps[MAXT];
} table;

int sweep_dir_is_sweep(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/journal.jsonl", dir);
    return access(p, F_OK) == 0;
}

static int param_of(table *t, const char *key) {
    for (int i = 0; i < t->np; i++)
        if (!strcmp(t->key[i], key)) return i;
    if (t->np == MAXP) return -1;
    snprintf(t->key[t->np], sizeof t->key[0], "%s", key);
    return t->np++;
}

static int take(void *ctx, const char *path, const jv_leaf *v) {
    table *t = ctx;
    int r = t->n;
    if (!strncmp(path, "values.", 7)) {
        int i = param_of(t, path + 7);
        if (i < 0) return 0;
        t->v[r][i] = v->type == JV_NUM ? v->num : NAN;
        if (v->type == JV_STR) snprintf(t->sv[r][i], sizeof t->sv[r][i], "%s", v->str);
        else snprintf(t->sv[r][i], sizeof t->sv[r][i], "%.6g", v->num);
    } else if (!strcmp(path, "trial")) t->trial[r] = (long long)v->num;
    else if (!strcmp(path, "budget")) t->budget[r] = (long long)v->num;
    else if (!strcmp(path, "steps")) t->steps[r] = (long long)v->num;
    else if (!strcmp(path, "state") && v->type == JV_STR) snprintf(t->state[r], sizeof t->state[r], "%s", v->str);
    else if (strcmp(path, "rung") && strcmp(path, "seconds") && strcmp(path, "message")) {
        snprintf(t->metric_name, sizeof t->metric_name, "%s", path);  // the one other key: the metric
        t->metric[r] = v->type == JV_NUM ? v->num : NAN;
    }
    return 0;
}

static int load(table *t, const char *dir, FILE *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s/results.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f) return fprintf(err, "galley report: error: %s: no results.jsonl yet (the sweep has not ended a trial)\n", dir), -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (t->n < MAXT && (len = getline(&line, &cap, f)) > 0) {
        char why[128];
        t->metric[t->n] = NAN;
        for (int i = 0; i < MAXP; i++) t->v[t->n][i] = NAN;
        if (json_walk(line, (size_t)len, take, t, why, sizeof why) == 0) t->n++;
    }
    free(line);
    fclose(f);
    return 0;
}

// One scatter: the metric against parameter i.
static void scatter(FILE *o, const table *t, int i) {
    const double W = 360, H = 220, L = 60, B = 30;
    double lo = INFINITY, hi = -INFINITY, mlo = INFINITY, mhi = -INFINITY;
    for (int r = 0; r < t->n; r++) {
        if (!isnan(t->v[r][i])) lo = fmin(lo, t->v[r][i]), hi = fmax(hi, t->v[r][i]);
        if (isfinite(t->metric[r]) && strcmp(t->state[r], "failed"))
            mlo = fmin(mlo, t->metric[r]), mhi = fmax(mhi, t->metric[r]);
    }
    if (!(lo <= hi) || !(mlo <= mhi)) return;
    bool lg = lo > 0 && hi / lo > 20;
    double a = lg ? log10(lo) : lo, b = lg ? log10(hi) : hi;
    if (b - a < 1e-12) a -= 0.5, b += 0.5;
    if (mhi - mlo < 1e-12) mlo -= 0.5, mhi += 0.5;
    fprintf(o, "<figure><svg width='%g' height='%g' viewBox='0 0 %g %g'><rect x='%g' y='0' width='%g' height='%g' "
               "fill='none' stroke='#999'/>", W + L, H + B, W + L, H + B, L, W, H);
    for (int r = 0; r < t->n; r++) {
        if (isnan(t->v[r][i])) continue;
        double x = L + 8 + (W - 16) * ((lg ? log10(t->v[r][i]) : t->v[r][i]) - a) / (b - a);
        bool ok = isfinite(t->metric[r]) && strcmp(t->state[r], "failed");
        double y = ok ? 8 + (H - 16) * (mhi - t->metric[r]) / (mhi - mlo) : 4;
        fprintf(o, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>trial %lld: %s</title></circle>", x, y,
                ok ? (!strcmp(t->state[r], "done") ? "#1f77b4" : "#aaa") : "#d62728", t->trial[r], t->state[r]);
    }
    fprintf(o, "<text x='%g' y='%g' font-size='11'>%.4g</text><text x='%g' y='%g' font-size='11' "
               "text-anchor='end'>%.4g</text><text x='4' y='12' font-size='11'>%.4g</text><text x='4' y='%g' "
               "font-size='11'>%.4g</text></svg><figcaption>%s against %s%s</figcaption></figure>\n",
            L, H + 16, lo, L + W, H + 16, hi, mhi, H, mlo, t->metric_name, t->key[i], lg ? " (log axis)" : "");
}

static void page(FILE *o, const table *t, const char *dir, bool curves) {
    fprintf(o, "<!doctype html><html><head><meta charset='utf-8'><title>sweep %s</title><style>body{font-family:"
               "sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid "
               "#ddd;text-align:right}figure{display:inline-block;margin:8px}</style></head><body>\n"
               "<h1>Sweep %s</h1><p>%d trials; %s. %s</p>\n", dir, dir, t->n, t->metric_name,
            curves ? "Every trial's curves: <a href='curves.html'>curves.html</a>." : "No trial has run yet.");
    for (int i = 0; i < t->np; i++) scatter(o, t, i);
    fprintf(o, "<table><tr><th>trial</th>");
    for (int i = 0; i < t->np; i++) fprintf(o, "<th>%s</th>", t->key[i]);
    fprintf(o, "<th>budget</th><th>steps</th><th>%s</th><th>state</th></tr>\n", t->metric_name);
    for (int r = 0; r < t->n; r++) {
        fprintf(o, "<tr><td>%lld</td>", t->trial[r]);
        for (int i = 0; i < t->np; i++) fprintf(o, "<td>%s</td>", t->sv[r][i]);
        char m[32] = "-";
        if (isfinite(t->metric[r]) && strcmp(t->state[r], "failed")) snprintf(m, sizeof m, "%.6g", t->metric[r]);
        fprintf(o, "<td>%lld</td><td>%lld</td><td>%s</td><td>%s</td></tr>\n", t->budget[r], t->steps[r], m,
                t->state[r]);
    }
    fprintf(o, "</table></body></html>\n");
}

int sweep_report(const char *dir, const char *out_path, FILE *out, FILE *err) {
    table *t = calloc(1, sizeof *t);
    GL_CHECK(t, "out of memory");
    if (load(t, dir, err) != 0) return free(t), GL_EXIT_USAGE;
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
        free(t);
        return GL_EXIT_RUNTIME;
    }
    page(o, t, dir, nruns > 0 && code == GL_EXIT_OK);
    if (fclose(o) != 0) code = GL_EXIT_RUNTIME;
    if (code == GL_EXIT_OK)
        fprintf(out, "galley report: sweep of %d trials -> %s (curves of %d runs: %s)\n", t->n, out_path, nruns > 0 ? nruns : 0,
                curves);
    free(t);
    return code;
}
