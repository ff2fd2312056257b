// dist_hang_oob.c: the exchange that localises a hang (see dist.h and dist_hang.h), on a
// communicator of its own, point to point, every send non-blocking and every wait bounded, so
// that it works while a rank is stopped or busy outside MPI.
//
// Two messages: RECORD (a rank's hang_record) and QUERY (a reporter asking for records). A rank
// whose wait for #k times out (an accuser) sends its record to rank 0 and waits hang_grace
// seconds for a query back; without one it tries rank 1, then ranks 2-3, 4-7, ... below itself,
// and reports itself when none answers. A rank that receives a record while it waits (for a
// collective, or as an accuser) becomes the reporter: it queries every rank it has not heard
// from and waits hang_grace for their records; the ranks that stay silent are the ones stuck
// outside MPI. A rank that receives a query answers and stands by: it waits for the reporter to
// end the job, and ends it itself (exit 1) if that has not happened within the grace, the
// timeout (the reporter's checkpoint) and the grace again. Two reporters at once (a rank slow to
// answer): the higher one steps down when it is queried by the lower one.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_hang.h"
#include "dist/dist_internal.h"
#include "galley/check.h"

#if GALLEY_HAVE_MPI
#include <mpi.h>

#define HCOMM(h) (*(MPI_Comm *)(h)->comm)
enum { TAG_RECORD = 7301, TAG_QUERY = 7302 };

static void nap_ms(void) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
}

static void send_record(gl_dist *d, int to) {
    MPI_Request r;
    MPI_Isend(&d->hang->mine, (int)sizeof d->hang->mine, MPI_BYTE, to, TAG_RECORD, HCOMM(d->hang), &r);
    MPI_Request_free(&r);  // completes on its own; the buffer lives until the job ends
}

static void keep_record(gl_dist *d, int from, const hang_record *rec) {
    struct gl_hang *h = d->hang;
    if (!h->rec) {
        h->rec = gl_xcalloc((size_t)d->world, sizeof *h->rec);
        h->got = gl_xcalloc((size_t)d->world, sizeof *h->got);
    }
    h->rec[from] = *rec;
    h->rec[from].rank = from;
    h->got[from] = true;
}

// A query from `from`: this rank's record goes to it, and this rank stands by (unless its own
// queries are out and `from` is above it: that one steps down when it sees this rank's query).
static void on_query(gl_dist *d, int from, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    if (h->role == HANG_REPORTING && from > d->rank) return;
    hang_fill(d, k, t0);
    send_record(d, from);
    h->role = HANG_STANDING_BY;
    if (h->lead < 0 || from < h->lead) h->lead = from;
}

// Takes every message that has arrived: records are kept (and make an idle or accusing rank the
// reporter), queries answered.
static void take_messages(gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, HCOMM(h), &flag, &m, &st);
        if (!flag) return;
        if (st.MPI_TAG == TAG_RECORD) {
            hang_record rec;
            MPI_Mrecv(&rec, (int)sizeof rec, MPI_BYTE, &m, MPI_STATUS_IGNORE);
            keep_record(d, st.MPI_SOURCE, &rec);
            h->told = true;
        } else {
            int32_t who;
            MPI_Mrecv(&who, 1, MPI_INT32_T, &m, MPI_STATUS_IGNORE);
            on_query(d, st.MPI_SOURCE, k, t0);
        }
    }
}

static _Noreturn void report(gl_dist *d, int64_t k, double t0);

// Answered a query: wait for the reporter to end the job, bounded.
static _Noreturn void stand_by(gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    double g = hang_grace(d->timeout), end = dist_now() + 2 * g + d->timeout;
    while (dist_now() < end) {
        take_messages(d, k, t0);  // later queries (another reporter) are answered too
        nap_ms();
    }
    fprintf(h->err, "galley: error: rank %d of %d: rank %d reported a hang but has not ended the job within %.0f s; "
                    "ending it (exit code %d)\n", d->rank, d->world, h->lead, 2 * g + d->timeout, GL_EXIT_RUNTIME);
    if (h->release) h->release(h->release_arg);
    dist_abort(d, GL_EXIT_RUNTIME);
}

// After take_messages: a rank asked for its record stands by, one told of a hang reports it.
static void follow_role(gl_dist *d, int64_t k, double t0) {
    if (d->hang->role == HANG_STANDING_BY) stand_by(d, k, t0);
    if (d->hang->told) report(d, k, t0);
}

void dist_hang_poll(gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    if (!h) return;
    double now = dist_now();
    if (now - h->last_poll < 1e-3) return;
    h->last_poll = now;
    take_messages(d, k, t0);
    follow_role(d, k, t0);
}

// Waits up to g seconds for this rank's role to change (a query, or a record).
static void await_role(gl_dist *d, int64_t k, double t0, double g) {
    double end = dist_now() + g;
    while (dist_now() < end) {
        take_messages(d, k, t0);
        follow_role(d, k, t0);
        nap_ms();
    }
}

_Noreturn void dist_hang(gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    if (!h) {  // defensive: a gl_dist without the state (never made by dist_init under MPI)
        fprintf(stderr, "galley: error: rank %d of %d: collective made no progress for %.0f s; ending the job "
                        "(distributed.timeout)\n", d->rank, d->world, d->timeout);
        dist_abort(d, GL_EXIT_RUNTIME);
    }
    take_messages(d, k, t0);
    follow_role(d, k, t0);
    hang_fill(d, k, t0);
    h->role = HANG_ACCUSING;
    double g = hang_grace(d->timeout);
    // Rank 0, then 1, 2-3, 4-7, ... below this rank: the first group with a rank that answers.
    for (int lo = 0, hi = 1; lo < d->rank; lo = hi, hi = hi * 2 < d->rank ? hi * 2 : d->rank) {
        for (int r = lo; r < hi; r++) send_record(d, r);
        await_role(d, k, t0, g);
    }
    report(d, k, t0);
}

// The reporter: every other rank is queried (an accuser too: the query is what tells it to stand
// by); the answers are awaited for the grace; then the report, the checkpoint when it can be
// written, and the end of the job.
static _Noreturn void report(gl_dist *d, int64_t k, double t0) {
    struct gl_hang *h = d->hang;
    h->role = HANG_REPORTING;
    hang_fill(d, k, t0);
    keep_record(d, d->rank, &h->mine);
    h->me = d->rank;
    for (int r = 0; r < d->world; r++) {
        if (r == d->rank) continue;
        MPI_Request q;
        MPI_Isend(&h->me, 1, MPI_INT32_T, r, TAG_QUERY, HCOMM(h), &q);
        MPI_Request_free(&q);
    }
    double g = hang_grace(d->timeout), end = dist_now() + g;
    for (int n = 0; n < d->world && dist_now() < end;) {
        take_messages(d, k, t0);
        if (h->role == HANG_STANDING_BY) stand_by(d, k, t0);  // a lower rank reports
        n = 0;
        for (int r = 0; r < d->world; r++) n += h->got[r];
        if (n < d->world) nap_ms();
    }
    hang_facts f = {.world = d->world, .reporter = d->rank, .rec = h->rec, .answered = h->got,
                    .hosts = h->hosts, .timeout = d->timeout, .armed = h->save != NULL};
    hang_verdict v;
    hang_report(&f, h->err, &v);
    fflush(h->err);
    if (h->release) h->release(h->release_arg);  // NCCL's kernels stop spinning before the GPU is read
    int code = GL_EXIT_RUNTIME;
    if (v.save) {
        // Bounded: the ranks standing by end the job after the timeout; alone, SIGALRM does.
        signal(SIGALRM, SIG_DFL);
        alarm((unsigned)(d->timeout + g) + 1);
        if (h->save(h->save_ctx, v.steps, h->in_step, v.why, sizeof v.why) == 0) {
            fprintf(h->err, "galley: stopped by a hang at step %lld with a checkpoint; to continue, run the same "
                            "command with --resume auto (exit code %d)\n", (long long)v.steps, GL_EXIT_STOPPED);
            code = GL_EXIT_STOPPED;
        } else {
            fprintf(h->err, "galley: hang: no checkpoint: %s; ending the job (exit code %d)\n", v.why, code);
        }
    }
    dist_abort(d, code);
}

void dist_hang_open(gl_dist *d) {
    struct gl_hang *h = gl_xcalloc(1, sizeof *h);
    h->done = -1;
    h->lead = -1;
    h->err = stderr;
    h->comm = gl_xmalloc(sizeof(MPI_Comm));
    MPI_Comm_dup(*(MPI_Comm *)d->comm, (MPI_Comm *)h->comm);
    h->hosts = gl_xcalloc((size_t)d->world, HANG_HOST);
    d->hang = h;
    char mine[HANG_HOST] = "";
    if (gethostname(mine, sizeof mine - 1) != 0) snprintf(mine, sizeof mine, "?");
    dist_gather_bytes(d, mine, HANG_HOST, h->hosts, "gathering the host names", 0);
}

void dist_hang_close(gl_dist *d) {
    struct gl_hang *h = d->hang;
    if (!h) return;
    MPI_Comm_free((MPI_Comm *)h->comm);
    free(h->comm);
    free(h->hosts);
    free(h->rec);
    free(h->got);
    free(h);
    d->hang = NULL;
}

#else  // no MPI: one process, whose waits never time out

void dist_hang_poll(gl_dist *d, int64_t k, double t0) { (void)d, (void)k, (void)t0; }
_Noreturn void dist_hang(gl_dist *d, int64_t k, double t0) {
    (void)k, (void)t0;
    dist_abort(d, GL_EXIT_RUNTIME);
}
void dist_hang_open(gl_dist *d) { (void)d; }
void dist_hang_close(gl_dist *d) { (void)d; }

#endif
