// sweep_metric.c: a trial's result, read back from its runs' metrics.jsonl (the run directory
// galley train wrote): the last validation record of the newest run that has one. A promoted
// or resumed trial is a new run in the same trial directory (run0, run1, ...); a run that had
// nothing left to train (its checkpoint was already at the budget) leaves the previous run's
// record as the result.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log/json.h"
#include "sweep/sweep_internal.h"

typedef struct {
    const char *want;  // "loss" or "metrics.<name>"
    bool eval;
    double v;
} pick;

static int take(void *ctx, const char *path, const jv_leaf *v) {
    pick *p = ctx;
    if (!strcmp(path, "kind") && v->type == JV_STR) p->eval = !strcmp(v->str, "eval");
    if (!strcmp(path, p->want)) p->v = v->type == JV_NUM ? v->num : NAN;
    return 0;
}

// The metric of the last eval record in file: 1 found (*v, NAN for null), 0 none, -1 unreadable.
static int last_eval(const char *file, const char *want, double *v) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int found = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (strncmp(line, "{\"kind\":\"eval\"", 14) != 0) continue;
        pick p = {want, false, NAN};
        bool has = strstr(line, strrchr(want, '.') ? strrchr(want, '.') + 1 : want) != NULL;
        char err[128];
        if (json_walk(line, (size_t)n, take, &p, err, sizeof err) == 0 && p.eval && has) *v = p.v, found = 1;
        else if (p.eval && !has) found = found ? found : 2;  // eval records without this metric
    }
    free(line);
    fclose(f);
    return found;
}

int sweep_read_metric(const char *trial_dir, const char *metric, double *v, char *msg, size_t len) {
    char want[64], path[4300];
    if (!strcmp(metric, "loss")) snprintf(want, sizeof want, "loss");
    else snprintf(want, sizeof want, "metrics.%s", metric);
    int newest = -1;
    for (int k = 0; k < 10000; k++) {
        snprintf(path, sizeof path, "%s/run%d/metrics.jsonl", trial_dir, k);
        FILE *f = fopen(path, "r");
        if (!f) break;
        fclose(f);
        newest = k;
    }
    for (int k = newest; k >= 0; k--) {
        snprintf(path, sizeof path, "%s/run%d/metrics.jsonl", trial_dir, k);
        int rc = last_eval(path, want, v);
        if (rc == 1) return 0;
        if (rc == 2)
            return snprintf(msg, len, "its validation records have no %s (this recipe's data and loss do not give "
                                      "it)", metric), -1;
    }
    return snprintf(msg, len, "no validation record in %s/run*/metrics.jsonl", trial_dir), -1;
}
