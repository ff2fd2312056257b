// dist_hang_report.c: a hang report from the records the reporter gathered (dist_hang.h): which
// ranks never entered the collective the others wait for, what it was, the steps each rank had
// finished and its host; and whether a checkpoint can be written first. Pure: no MPI, so the
// unit test gives it records of its own.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_hang.h"
#include "dist/dist_internal.h"
#include "galley/check.h"

// "rank 2 of 3", "ranks 0-1, 3 of 4": the selected ranks, as ranges (the first 12).
static void ranks_words(const bool *sel, int world, char *buf, size_t len) {
    int n = 0, ranges = 0;
    for (int r = 0; r < world; r++) n += sel[r];
    size_t at = (size_t)snprintf(buf, len, "rank%s ", n == 1 ? "" : "s");
    for (int r = 0; r < world && at < len; r++) {
        if (!sel[r] || (r > 0 && sel[r - 1])) continue;
        int e = r;
        while (e + 1 < world && sel[e + 1]) e++;
        if (++ranges > 12) {
            at += (size_t)snprintf(buf + at, len - at, ", ...");
            break;
        }
        const char *sep = ranges > 1 ? ", " : "";
        if (e > r) at += (size_t)snprintf(buf + at, len - at, "%s%d-%d", sep, r, e);
        else at += (size_t)snprintf(buf + at, len - at, "%s%d", sep, r);
    }
    if (at < len) snprintf(buf + at, len - at, " of %d", world);
}

// "host nid001", "hosts nid001, nid002": the selected ranks' distinct hosts (the first 4).
static void hosts_words(const char *hosts, const bool *sel, int world, char *buf, size_t len) {
    const char *seen[4];
    int n = 0, more = 0;
    for (int r = 0; r < world; r++) {
        if (!sel[r]) continue;
        const char *h = hosts ? hosts + (size_t)r * HANG_HOST : "?";
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= !strcmp(seen[i], h);
        if (dup) continue;
        if (n < 4) seen[n++] = h;
        else more++;
    }
    size_t at = (size_t)snprintf(buf, len, "host%s ", n + more == 1 ? "" : "s");
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%.*s", i ? ", " : "", HANG_HOST, seen[i]);
    if (more && at < len) snprintf(buf + at, len - at, " and %d more", more);
}

static void steps_words(int64_t done, bool at_least, char *buf, size_t len) {
    if (done < 0) snprintf(buf, len, "had not started training");
    else snprintf(buf, len, "had finished %s%lld step%s", at_least ? "at least " : "", (long long)done,
                  done == 1 ? "" : "s");
}

// The record of the lowest rank that waits for the lowest collective: what the others wait for.
static const hang_record *first_waiter(const hang_facts *f) {
    const hang_record *k = NULL;
    for (int r = 0; r < f->world; r++)
        if (f->answered[r] && (!k || f->rec[r].waiting < k->waiting)) k = &f->rec[r];
    return k;
}

// The record with the highest collective needing every rank's part that its rank completed
// (the last one before the collective it waits for): every rank entered that one.
static const hang_record *furthest(const hang_facts *f) {
    const hang_record *j = NULL;
    for (int r = 0; r < f->world; r++)
        if (f->answered[r] && (!j || f->rec[r].all_before > j->all_before)) j = &f->rec[r];
    return j;
}

// The ranks that never answered, and what is known of them from the others (dist_hang.h). A
// rank stopped inside a non-blocking collective (a gradient bucket) may have entered #k, and
// another rank completed it: then it is said to be stuck in it.
static void print_silent(const hang_facts *f, const bool *silent, int nsilent, const hang_record *k,
                         const hang_record *j, FILE *out) {
    char who[256], where[320], steps[64];
    ranks_words(silent, f->world, who, sizeof who);
    hosts_words(f->hosts, silent, f->world, where, sizeof where);
    const char *it = nsilent == 1 ? "it" : "they";
    bool inside = j->all_before >= k->waiting, all_k = true, all_j = true;
    for (int r = 0; r < f->world; r++) {
        if (!f->answered[r]) continue;
        all_k &= f->rec[r].waiting == k->waiting;
        all_j &= f->rec[r].all_before >= j->all_before;
    }
    char waiter[48], completer[48];
    snprintf(waiter, sizeof waiter, all_k ? "the others wait" : "rank %d waits", k->rank);
    snprintf(completer, sizeof completer, all_j ? "every other rank" : "rank %d", j->rank);
    fprintf(out, "galley: error: hang: %s (%s) %s #%lld (%s), which %s for: stopped, busy outside MPI or cut off "
                 "(%s did not answer)", who, where, inside ? (nsilent == 1 ? "is stuck in" : "are stuck in") :
                 "never entered", (long long)k->waiting, k->what, waiter, it);
    if (j->all_before > 0) {
        steps_words(j->all_done, inside || j->all_done != k->done, steps, sizeof steps);
        if (j->all_before == k->waiting)
            fprintf(out, "; %s completed it, so %s %s\n", completer, it, steps);
        else
            fprintf(out, "; %s entered #%lld (%s), which %s completed, so %s %s\n", it, (long long)j->all_before,
                    j->before, completer, it, steps);
    } else {
        fprintf(out, "\n");
    }
}

// The ranks that answered, grouped by the collective they wait for and the steps they finished.
static void print_waiting(const hang_facts *f, bool *sel, bool *left, FILE *out) {
    for (int r = 0; r < f->world; r++) left[r] = f->answered[r];
    for (int r = 0; r < f->world; r++) {
        if (!left[r]) continue;
        const hang_record *a = &f->rec[r];
        double waited = 0;
        int n = 0;
        for (int q = 0; q < f->world; q++) {
            const hang_record *b = &f->rec[q];
            sel[q] = left[q] && b->waiting == a->waiting && b->done == a->done;
            if (!sel[q]) continue;
            if (b->waited > waited) waited = b->waited;
            left[q] = false;
            n++;
        }
        char who[256], where[320], steps[64];
        ranks_words(sel, f->world, who, sizeof who);
        hosts_words(f->hosts, sel, f->world, where, sizeof where);
        steps_words(a->done, false, steps, sizeof steps);
        fprintf(out, "galley: hang: %s (%s) %s in #%lld (%s) for %.1f s and %s\n", who, where,
                n == 1 ? "waits" : "wait", (long long)a->waiting, a->what, waited, steps);
    }
}

// Whether the reporter may write the checkpoint of the steps it finished (dist.h): 1, or 0 with
// the reason in v->why. Its finishing them means every rank took part in them; ranks that
// finished one step more (their last bucket completed before the stop) do not change that.
static int can_save(const hang_facts *f, int nsilent, const hang_record *j, hang_verdict *v) {
    const hang_record *me = &f->rec[f->reporter];
    if (nsilent == 0)
        snprintf(v->why, sizeof v->why, "every rank answered, so none is stuck outside MPI: they wait in different "
                 "collectives, or the network between them fails");
    else if (me->done < 0)
        snprintf(v->why, sizeof v->why, "training had not started");
    else if (!f->armed)
        snprintf(v->why, sizeof v->why, "no training loop is running that could write one");
    else if (j->all_before < me->done_seq)  // defensive: the reporter's finishing them says they did
        snprintf(v->why, sizeof v->why, "the ranks that did not answer are not known to have taken part in every "
                 "collective of step %lld", (long long)me->done - 1);
    else
        return 1;
    return 0;
}

void hang_report(const hang_facts *f, FILE *out, hang_verdict *v) {
    memset(v, 0, sizeof *v);
    bool *silent = gl_xcalloc((size_t)f->world, sizeof *silent);
    bool *scratch = gl_xcalloc((size_t)f->world * 2, sizeof *scratch);
    int nsilent = 0;
    for (int r = 0; r < f->world; r++) nsilent += silent[r] = !f->answered[r];
    const hang_record *k = first_waiter(f), *j = furthest(f);  // the reporter's own record at least
    fprintf(out, "galley: error: hang: collective #%lld (%s) made no progress for %.0f s (distributed.timeout)\n",
            (long long)k->waiting, k->what, f->timeout);
    if (nsilent) print_silent(f, silent, nsilent, k, j, out);
    print_waiting(f, scratch, scratch + f->world, out);
    v->save = can_save(f, nsilent, j, v);
    v->steps = f->rec[f->reporter].done;
    if (v->save)
        fprintf(out, "galley: hang: rank %d had finished %lld steps, and every rank took part in all of them\n",
                f->reporter, (long long)v->steps);
    else
        fprintf(out, "galley: hang: no checkpoint: %s; ending the job (exit code %d)\n", v->why, GL_EXIT_RUNTIME);
    free(silent);
    free(scratch);
}
