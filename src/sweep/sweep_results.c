// sweep_results.c: what a sweep shows: a line per event and a table on the console, and in
// SWEEP_DIR results.csv, results.jsonl (every trial: values, budget, steps, metric, state) and
// best.yaml, the winning trial's resolved recipe, trainable as is with `galley train`. The files
// hold nothing that depends on timing or on which group ran what, so a sweep stopped and resumed
// writes the same results.csv as one that ran straight through (seconds are in results.jsonl).
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "log/json.h"
#include "sweep/sweep_internal.h"

// The key's last part ("optimizer.lr" -> "lr", "model.layers[0].units" -> "units").
static const char *short_key(const char *key) {
    const char *d = strrchr(key, '.');
    return d ? d + 1 : key;
}

void results_values(const sweep_spec *s, int64_t trial, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->np && k < len; i++) {
        char v[256];
        sweep_value(s, trial, i, v, sizeof v);
        k += (size_t)snprintf(buf + k, len - k, "%s%s=%s", i ? " " : "", short_key(s->p[i].key), v);
    }
}

// The budget a rung trains to, in words: "8 steps".
static void budget_words(const sweep_spec *s, int rung, char *buf, size_t len) {
    int64_t b = sweep_rung_budget(s, rung);
    if (b > 0) snprintf(buf, len, "%lld %s", (long long)b, s->budget.key == BUDGET_STEPS ? "steps" : "epochs");
    else snprintf(buf, len, "the base budget");
}

void results_line(const sweep_spec *s, const sweep_sched *sc, sweep_job job, int group, bool start, FILE *out) {
    char vals[1024], bw[64];
    results_values(s, job.trial, vals, sizeof vals);
    budget_words(s, job.rung, bw, sizeof bw);
    const sweep_trial *t = &sc->t[job.trial];
    if (start) {
        fprintf(out, "sweep: trial %lld [%s] -> group %d, to %s%s\n", (long long)job.trial, vals, group, bw,
                job.rung > 0 ? " (promoted)" : "");
    } else if (t->state == TS_DONE) {
        fprintf(out, "sweep: trial %lld [%s] %s: %s %.6g at step %lld (%.2f s)\n", (long long)job.trial, vals, bw,
                s->metric_name, t->metric[job.rung], (long long)t->steps, t->seconds);
    } else {
        fprintf(out, "sweep: trial %lld [%s] %s: %s%s%s\n", (long long)job.trial, vals, bw,
                t->state == TS_FAILED ? "failed" : "paused", t->msg[0] ? ": " : "", t->msg);
    }
    fflush(out);
}

void results_table(const sweep_spec *s, const sweep_sched *sc, FILE *out) {
    int64_t best = sched_best(sc);
    fprintf(out, "\n  trial  %-44s %8s %8s %12s  state\n", "values", "budget", "steps", s->metric_name);
    for (int64_t i = 0; i < sc->n; i++) {
        char vals[1024], m[32];
        int rung;
        results_values(s, i, vals, sizeof vals);
        double v = sched_metric(sc, i, &rung);
        if (isnan(v)) snprintf(m, sizeof m, "-");
        else snprintf(m, sizeof m, "%.6g", v);
        const sweep_trial *t = &sc->t[i];
        int64_t b = sweep_rung_budget(s, t->rung);
        fprintf(out, "%s %5lld  %-44s %8lld %8lld %12s  %s%s%.60s\n", i == best ? "*" : " ", (long long)i, vals,
                (long long)b, (long long)t->steps, m, sched_state_name(sc, i), t->msg[0] ? ": " : "", t->msg);
    }
    if (best >= 0) fprintf(out, "  * best: trial %lld (%s/best.yaml)\n", (long long)best, s->dir_path);
    fflush(out);
}

// A value as data: a quoted choice's text without its quotes ("\"10\"" -> 10), in place.
static const char *value_text(char *v) {
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v[n - 1] = 0;
        return v + 1;
    }
    return v;
}

static void csv_text(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('"', f);
}

// Writes path.tmp with fn, then renames it to path: readers never see half a file.
static void write_atomic(const char *path, void (*fn)(FILE *, const sweep_spec *, const sweep_sched *),
                         const sweep_spec *s, const sweep_sched *sc, FILE *err) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(err, "galley sweep: warning: cannot write %s: %s\n", tmp, strerror(errno));
        return;
    }
    fn(f, s, sc);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(err, "galley sweep: warning: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
}

static void csv_of(FILE *f, const sweep_spec *s, const sweep_sched *sc) {
    fprintf(f, "trial");
    for (int i = 0; i < s->np; i++) fprintf(f, ",%s", s->p[i].key);
    fprintf(f, ",budget,steps,%s,state,message\n", s->metric_name);
    for (int64_t i = 0; i < sc->n; i++) {
        fprintf(f, "%lld", (long long)i);
        for (int p = 0; p < s->np; p++) {
            char v[256];
            sweep_value(s, i, p, v, sizeof v);
            fputc(',', f);
            csv_text(f, value_text(v));
        }
        int rung;
        double m = sched_metric(sc, i, &rung);
        const sweep_trial *t = &sc->t[i];
        fprintf(f, ",%lld,%lld,", (long long)sweep_rung_budget(s, t->rung), (long long)t->steps);
        if (!isnan(m)) fprintf(f, "%.9g", m);
        fprintf(f, ",%s,", sched_state_name(sc, i));
        csv_text(f, t->msg);
        fputc('\n', f);
    }
}

static void jsonl_of(FILE *f, const sweep_spec *s, const sweep_sched *sc) {
    // A line's bound: 16 keys and values of at most 255 bytes, a message of 239, each at most 6x
    // escaped (\u00XX), is under 40 KiB: every trial gets its line (4 KiB had dropped the lines of
    // sweeps with long choices).
    enum { LINE_MAX_BYTES = 65536 };
    char *mem = malloc(LINE_MAX_BYTES);
    GL_CHECK(mem, "out of memory");
    for (int64_t i = 0; i < sc->n; i++) {
        jbuf b;
        jb_init(&b, mem, LINE_MAX_BYTES);
        jb_open(&b, NULL, '{');
        jb_int(&b, "trial", i);
        jb_open(&b, "values", '{');
        for (int p = 0; p < s->np; p++) {
            char v[256], *end;
            sweep_value(s, i, p, v, sizeof v);
            double x = strtod(v, &end);
            if (*v && !*end && s->p[p].kind != SP_CHOICE) jb_num(&b, s->p[p].key, x);
            else jb_str(&b, s->p[p].key, value_text(v));
        }
        jb_close(&b);
        const sweep_trial *t = &sc->t[i];
        int rung;
        double m = sched_metric(sc, i, &rung);
        jb_int(&b, "rung", t->rung);
        jb_int(&b, "budget", sweep_rung_budget(s, t->rung));
        jb_int(&b, "steps", t->steps);
        jb_num(&b, s->metric_name, m);
        jb_str(&b, "state", sched_state_name(sc, i));
        jb_fix(&b, "seconds", t->seconds, 3);
        jb_str(&b, "message", t->msg);
        jb_close(&b);
        GL_CHECK(!b.truncated, "a results.jsonl line fits LINE_MAX_BYTES");
        fprintf(f, "%.*s\n", (int)b.len, b.p);
    }
    free(mem);
}

void results_write(const sweep_spec *s, const sweep_sched *sc, int64_t base_seed, FILE *err) {
    (void)base_seed;
    char path[4200];
    snprintf(path, sizeof path, "%s/results.csv", s->dir_path);
    write_atomic(path, csv_of, s, sc, err);
    snprintf(path, sizeof path, "%s/results.jsonl", s->dir_path);
    write_atomic(path, jsonl_of, s, sc, err);
}

int results_best_yaml(const sweep_spec *s, const sweep_sched *sc, int64_t base_seed, FILE *err) {
    int64_t best = sched_best(sc);
    if (best < 0) return -1;
    char **ov;
    int n = sweep_overrides(s, best, sc->t[best].rung, base_seed, 0, true, &ov);
    recipe_t r;
    int rc = recipe_load(&r, s->base_path, n, ov, err);
    sweep_overrides_free(ov, n);
    if (rc == 0) {
        char path[4200], tmp[4300];
        snprintf(path, sizeof path, "%s/best.yaml", s->dir_path);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f) {
            int rung;
            double m = sched_metric(sc, best, &rung);
            fprintf(f, "# best.yaml: trial %lld of the sweep %s (%s %.9g); train it with `galley train best.yaml`\n",
                    (long long)best, s->file, s->metric_name, m);
            recipe_emit(&r, f);
            rc = fclose(f) != 0 || rename(tmp, path) != 0;
        } else {
            rc = -1;
        }
        if (rc) fprintf(err, "galley sweep: warning: cannot write %s: %s\n", path, strerror(errno)), unlink(tmp);
    }
    recipe_free(&r);
    return rc;
}
