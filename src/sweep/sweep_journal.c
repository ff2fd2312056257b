// sweep_journal.c: SWEEP_DIR/journal.jsonl, the sweep's state: a header, then one JSON line per
// event (a run started; a run ended: done with its metric, failed with why, paused by a signal
// or the time limit; the sweep stopped or finished), each appended and fsync'd before the sweep
// goes on, so a sweep killed at any moment resumes from what the journal says. Replaying it
// rebuilds the scheduler; runs that started but never ended are resumed from their checkpoints.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/runlog.h"
#include "log/json.h"
#include "sweep/sweep_internal.h"

#define JOURNAL_VERSION 1

static void put(sweep_journal *j, jbuf *b) {
    if (!j->f || b->truncated) return;
    fprintf(j->f, "%.*s\n", (int)b->len, b->p);
    fflush(j->f);
    fsync(fileno(j->f));  // the event is on disk before the sweep acts on it
}

void journal_start(sweep_journal *j, sweep_job job, int group, int64_t budget) {
    char mem[256];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "event", "start");
    jb_int(&b, "trial", job.trial);
    jb_int(&b, "rung", job.rung);
    jb_int(&b, "budget", budget);
    jb_int(&b, "group", group);
    jb_close(&b);
    put(j, &b);
}

void journal_end(sweep_journal *j, const sweep_sched *sc, sweep_job job, int64_t budget) {
    const sweep_trial *t = &sc->t[job.trial];
    char mem[1024];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "event", "end");
    jb_int(&b, "trial", job.trial);
    jb_int(&b, "rung", job.rung);
    jb_int(&b, "budget", budget);
    jb_str(&b, "state", t->state == TS_DONE ? "done" : t->state == TS_FAILED ? "failed" : "paused");
    jb_num(&b, "metric", t->metric[job.rung]);
    jb_int(&b, "steps", t->steps);
    jb_fix(&b, "seconds", t->seconds, 3);
    jb_int(&b, "code", t->code);
    jb_str(&b, "message", t->msg);
    jb_close(&b);
    put(j, &b);
}

void journal_note(sweep_journal *j, const char *event, int code) {
    char mem[128];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "event", event);
    jb_int(&b, "code", code);
    jb_close(&b);
    put(j, &b);
}

void journal_close(sweep_journal *j) {
    if (j->f) fclose(j->f);
    j->f = NULL;
}

// One journal line's fields.
typedef struct {
    char event[16], state[16], hash[24], message[240];
    double trial, rung, metric, steps, seconds, code;
} jline;

static int take(void *ctx, const char *path, const jv_leaf *v) {
    jline *l = ctx;
    if (v->type == JV_STR) {
        if (!strcmp(path, "event")) snprintf(l->event, sizeof l->event, "%s", v->str);
        else if (!strcmp(path, "state")) snprintf(l->state, sizeof l->state, "%s", v->str);
        else if (!strcmp(path, "hash")) snprintf(l->hash, sizeof l->hash, "%s", v->str);
        else if (!strcmp(path, "message")) snprintf(l->message, sizeof l->message, "%s", v->str);
    } else if (v->type == JV_NUM) {
        double *f = !strcmp(path, "trial") ? &l->trial : !strcmp(path, "rung") ? &l->rung
                  : !strcmp(path, "metric") ? &l->metric : !strcmp(path, "steps") ? &l->steps
                  : !strcmp(path, "seconds") ? &l->seconds : !strcmp(path, "code") ? &l->code : NULL;
        if (f) *f = v->num;
    }
    return 0;
}

// Applies one event; -1 (with why) when it does not fit this sweep.
static int apply(sweep_sched *sc, const jline *l, const char *want_hash, char *why, size_t len) {
    if (!strcmp(l->event, "sweep")) {
        if (strcmp(l->hash, want_hash))
            return snprintf(why, len, "it was started with another sweep file, base recipe or overrides (hash %s, "
                                      "now %s); give a new --dir, or restore them", l->hash, want_hash), -1;
        return 0;
    }
    if (strcmp(l->event, "start") && strcmp(l->event, "end")) return 0;  // stop, finish: notes
    if (l->trial < 0 || l->trial >= (double)sc->n || l->rung < 0 || l->rung >= sc->s->nrungs)
        return snprintf(why, len, "trial %g at rung %g is not in this sweep", l->trial, l->rung), -1;
    sweep_job job = {(int64_t)l->trial, (int)l->rung};
    if (!strcmp(l->event, "start")) {
        sched_start(sc, job);
        return 0;
    }
    int st = !strcmp(l->state, "done") ? TS_DONE : !strcmp(l->state, "failed") ? TS_FAILED : TS_PAUSED;
    sched_end(sc, job, st, l->metric, (int64_t)l->steps, 0, (int)l->code, l->message);
    sc->t[job.trial].seconds = l->seconds;  // the journal holds the trial's total
    return 0;
}

static int replay(sweep_journal *j, sweep_sched *sc, const char *hash, FILE *out, FILE *err) {
    FILE *f = fopen(j->path, "r");
    if (!f) return fprintf(err, "galley sweep: error: cannot read %s: %s\n", j->path, strerror(errno)), -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, rc = 0, events = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) > 0) {
        lineno++;
        jline l;
        memset(&l, 0, sizeof l);
        l.metric = NAN;
        char why[512];
        if (json_walk(line, (size_t)n, take, &l, why, sizeof why) != 0 || line[n - 1] != '\n') {
            if (fgetc(f) == EOF) {  // a torn last line: the event was never acted on
                fprintf(out, "galley sweep: %s:%d: ignoring a partly written last event\n", j->path, lineno);
                break;
            }
            fprintf(err, "galley sweep: error: %s:%d: not a journal event (%s)\n", j->path, lineno, why);
            rc = -1;
        } else if (lineno == 1 && strcmp(l.event, "sweep")) {
            fprintf(err, "galley sweep: error: %s does not start with a sweep header\n", j->path);
            rc = -1;
        } else if (apply(sc, &l, hash, why, sizeof why) != 0) {
            fprintf(err, "galley sweep: error: cannot resume %s: %s\n", j->path, why);
            rc = -1;
        }
        events++;
    }
    free(line);
    fclose(f);
    if (rc == 0) sched_pause_running(sc);
    return rc;
}

int journal_open(sweep_journal *j, const sweep_spec *s, sweep_sched *sc, bool resume, int groups, FILE *out,
                 FILE *err) {
    memset(j, 0, sizeof *j);
    char why[512], dir[4096];
    snprintf(j->path, sizeof j->path, "%s/journal.jsonl", s->dir_path);
    if (rundir_make(dir, sizeof dir, s->dir_path, NULL, NULL, why, sizeof why) != 0)
        return fprintf(err, "galley sweep: error: %s\n", why), -1;
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)s->hash);
    bool exists = access(j->path, F_OK) == 0;
    if (exists && !resume)
        return fprintf(err, "galley sweep: error: %s already holds a sweep (journal.jsonl)\n  hint: continue it with "
                            "--resume auto, or give another --dir\n", s->dir_path), -1;
    if (exists && replay(j, sc, hash, out, err) != 0) return -1;
    j->f = fopen(j->path, "a");
    if (!j->f) return fprintf(err, "galley sweep: error: cannot write %s: %s\n", j->path, strerror(errno)), -1;
    char mem[512];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "event", exists ? "resume" : "sweep");
    jb_int(&b, "version", JOURNAL_VERSION);
    jb_str(&b, "hash", hash);
    jb_str(&b, "method", sweep_method_name(s->method));
    jb_int(&b, "trials", sc->n);
    jb_int(&b, "groups", groups);
    jb_close(&b);
    put(j, &b);
    return 0;
}
