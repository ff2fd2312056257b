// report_internal.h: the report's pieces: runs read back from their directories (report_load.c),
// SVG charts (report_svg.c) and the page (report_html.c).
#ifndef GALLEY_REPORT_INTERNAL_H
#define GALLEY_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/runlog.h"

#define RP_MAX_METRICS 8  // distinct metric names across all runs

// One metrics.jsonl record.
typedef struct {
    double step, time, loss, lr, sps;
    double m[RP_MAX_METRICS];      // by index into rp_set.metric (NAN: absent)
    double phase[PHASE_COUNT];     // train: cumulative seconds (NAN: absent)
} rp_point;

typedef struct {
    char *key;
    char *str;   // string value, or NULL
    double num;  // number value (NAN if a string or null)
} rp_kv;

typedef struct {
    char *dir, *label;
    rp_point *train, *eval;
    int ntrain, neval, cap_train, cap_eval;
    rp_kv *summary;  // summary.json leaves, flattened ("time_breakdown.forward")
    int nsummary, cap_summary;
    char *recipe;    // recipe.yaml, or NULL
    int bad_lines;   // metrics.jsonl lines that did not parse
} rp_run;

typedef struct {
    rp_run *run;
    int nrun;
    char *metric[RP_MAX_METRICS];  // metric names seen (accuracy, mae, ...)
    int nmetric;
} rp_set;

int rp_load(rp_set *s, char *const *dirs, int n, FILE *err);
void rp_free(rp_set *s);
// A summary value by key (NULL if absent).
const rp_kv *rp_get(const rp_run *r, const char *key);

// ---- SVG ----

typedef struct {
    const double *x, *y;  // n points (points with a NAN are skipped)
    int n;
    const char *color;
    bool dashed, markers;
    const char *name;     // for the tooltip
} rp_series;

// A line chart with axes, grid and a key of line styles ("solid|dashed" names, or NULL). With
// log_ok the y axis turns logarithmic when the values span more than 50x (losses do).
void svg_lines(FILE *o, const char *title, const char *xlabel, const char *ylabel, const rp_series *s, int ns,
               const char *key, bool log_ok);
// A horizontal stacked bar per run: each row's phases as shares of its total.
void svg_breakdown(FILE *o, const char *const *labels, const char *const *colors, int nrows,
                   const double (*phase)[PHASE_COUNT]);
// Palette colour i for runs, and for phases.
const char *rp_run_color(int i);
const char *rp_phase_color(int i);
// Writes s with &, <, >, " escaped.
void html_escape(FILE *o, const char *s);

#endif
