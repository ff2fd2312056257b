// dist_hang.c: numbering the collectives a rank enters, the training loop's progress, and the
// record a rank sends when a hang is reported (see dist_hang.h). No MPI here: the exchange is
// dist_hang_oob.c's.
#include <stdio.h>
#include <string.h>

#include "dist/dist_hang.h"
#include "dist/dist_internal.h"

double hang_grace(double timeout) {
    double g = timeout / 10;
    return g < 1 ? 1 : g > 5 ? 5 : g;
}

int64_t dist_enter(gl_dist *d, const char *what, int64_t step, int kind) {
    struct gl_hang *h = d->hang;
    if (!h) return 0;
    int64_t k = ++h->entered;
    hang_entry *e = &h->ring[k % HANG_RING];
    e->k = k;
    e->done = h->done;
    e->kind = kind;
    // Set-up collectives pass step 0 too: a step is named only once training has started.
    if (h->done >= 0) snprintf(e->what, sizeof e->what, "%s at step %lld", what, (long long)step);
    else snprintf(e->what, sizeof e->what, "%s", what);
    return k;
}

const hang_entry *hang_entry_of(const struct gl_hang *h, int64_t k) {
    const hang_entry *e = &h->ring[k % HANG_RING];
    return k > 0 && e->k == k ? e : NULL;
}

void dist_describe(const gl_dist *d, int64_t k, char *buf, size_t len) {
    const hang_entry *e = d->hang ? hang_entry_of(d->hang, k) : NULL;
    if (e) snprintf(buf, len, "#%lld (%s)", (long long)k, e->what);
    else snprintf(buf, len, "#%lld", (long long)k);
}

void dist_progress(gl_dist *d, int64_t steps, bool in_step) {
    struct gl_hang *h = d->hang;
    if (!h) return;
    if (steps != h->done) h->done_seq = h->entered;
    h->done = steps;
    h->in_step = in_step;
}

void dist_on_hang(gl_dist *d, dist_hang_save save, void *ctx, FILE *err) {
    struct gl_hang *h = d->hang;
    if (!h) return;
    h->save = save;
    h->save_ctx = save ? ctx : NULL;
    h->err = err ? err : stderr;
}

void dist_hang_hold(gl_dist *d, void (*release)(void *), void *arg) {
    struct gl_hang *h = d->hang;
    if (!h) return;
    h->release = release;
    h->release_arg = release ? arg : NULL;
}

void hang_fill(const gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    if (h->mine_set) return;  // it may be in flight to a reporter already: never rewritten
    hang_record *m = &h->mine;
    memset(m, 0, sizeof *m);
    m->rank = d->rank;
    m->in_step = h->in_step;
    m->waiting = k;
    m->entered = h->entered;
    m->done = h->done;
    m->done_seq = h->done_seq;
    m->waited = dist_now() - t0;
    const hang_entry *e = hang_entry_of(h, k);
    snprintf(m->what, sizeof m->what, "%s", e ? e->what : "a collective no longer remembered");
    for (int64_t j = k - 1; j > 0 && j > k - HANG_RING; j--) {
        e = hang_entry_of(h, j);
        if (!e) break;
        if (e->kind != DIST_ALL) continue;
        m->all_before = j;
        m->all_done = e->done;
        snprintf(m->before, sizeof m->before, "%s", e->what);
        break;
    }
    h->mine_set = true;
}
