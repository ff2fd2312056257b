// grad_nccl.c: whether the gradient buckets are summed by NCCL or MPI, and every NCCL wait,
// each bounded by distributed.timeout (see dist.h; the NCCL calls are in galley/devcomm.h).
//
// NCCL is used when every rank trains on a GPU of its own and can load libnccl.so.2. It refuses
// two ranks on one GPU ("Duplicate GPU detected"), and a rank without the library could not
// join, so both keep the MPI path, which works anywhere; every rank's GPU UUID and NCCL state
// are gathered first so that all ranks make the same choice, and rank 0 says why once.
//
// GALLEY_NCCL (environment): unset or `auto` as above; `0` or `off` keeps MPI; `force` uses NCCL
// even on one rank, a test switch: NCCL's sum over one rank is the identity, so a run must give
// the same losses with and without it, while the enqueue, join and wait path runs on one GPU
// (tests/e2e/test_dist_nccl.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"
#include "galley/check.h"

enum { MODE_AUTO, MODE_OFF, MODE_FORCE };

static int nccl_mode(void) {
    const char *v = getenv("GALLEY_NCCL");
    if (!v) return MODE_AUTO;
    if (!strcmp(v, "0") || !strcmp(v, "off")) return MODE_OFF;
    if (!strcmp(v, "force")) return MODE_FORCE;
    return MODE_AUTO;
}

// ---- the choice ----------------------------------------------------------------------------------

typedef struct {
    const unsigned char *uuid;
    int rank;
} gpu_of;

static int gpu_cmp(const void *a, const void *b) {
    const gpu_of *x = a, *y = b;
    int c = memcmp(x->uuid, y->uuid, 16);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int gradnccl_choose(const gradnccl_rank *all, int world, char *why, size_t len) {
    why[0] = '\0';
    int gpus = 0;
    for (int r = 0; r < world; r++) gpus += all[r].state != GRADNCCL_CPU;
    if (gpus == 0) return 0;  // a CPU run: MPI is the only way, nothing to say
    // The first reason found, in the order a user would fix them.
    for (int r = 0; r < world; r++)
        if (all[r].state == GRADNCCL_CPU) {
            snprintf(why, len, "rank %d trains on the CPU while %d rank%s on GPUs", r, gpus, gpus == 1 ? "" : "s");
            return 0;
        }
    for (int r = 0; r < world; r++)
        if (all[r].state == GRADNCCL_OFF) {
            snprintf(why, len, "GALLEY_NCCL turns it off on rank %d", r);
            return 0;
        }
    for (int r = 0; r < world; r++)
        if (all[r].state == GRADNCCL_NO_LIB) {
            snprintf(why, len, "rank %d: %.*s", r, (int)sizeof all[r].why, all[r].why);
            return 0;
        }
    // Two ranks on one GPU: sorted by UUID, they are neighbours (the lowest two ranks are named).
    gpu_of *s = gl_xmalloc(sizeof *s * (size_t)world);
    for (int r = 0; r < world; r++) s[r] = (gpu_of){all[r].uuid, r};
    qsort(s, (size_t)world, sizeof *s, gpu_cmp);
    int a = -1, b = -1;
    for (int k = 1; k < world; k++)
        if (!memcmp(s[k - 1].uuid, s[k].uuid, 16) && (a < 0 || s[k - 1].rank < a))
            a = s[k - 1].rank, b = s[k].rank;
    free(s);
    if (a >= 0) {
        snprintf(why, len, "ranks %d and %d share GPU %.*s (NCCL needs a GPU per rank: start as many ranks per node "
                           "as it has GPUs)", a, b, (int)sizeof all[a].bus, all[a].bus);
        return 0;
    }
    return 1;
}

// ---- bounded waits ---------------------------------------------------------------------------------

// What a hang report releases before it reads the GPU or ends the job (dist_hang_hold): NCCL's
// kernels are aborted so that this process can leave even while they spin for a stuck peer.
static void release_comm(void *c) { devcomm_close(c, 1); }

// Ends the job: msg is NCCL's or CUDA's failure on collective #k; NULL: #k timed out, a hang
// (dist_hang names the ranks that never entered it, and releases the communicator).
static _Noreturn void nccl_fail(gl_dist *d, gl_devcomm *c, int64_t k, const char *msg) {
    if (!msg) dist_hang(d, k, dist_now() - d->timeout);
    char what[DIST_DESCRIBED];
    dist_describe(d, k, what, sizeof what);
    fprintf(stderr, "galley: error: rank %d of %d: collective %s failed: %s; ending the job\n"
                    "  hint: NCCL_DEBUG=WARN (or INFO) shows NCCL's side; GALLEY_NCCL=0 sums gradients by MPI\n",
            d->rank, d->world, what, msg);
    dist_hang_hold(d, NULL, NULL);
    devcomm_close(c, 1);
    dist_abort(d, GL_EXIT_RUNTIME);
}

// Polls poll(c) until it is no longer DEVCOMM_BUSY, spinning for the first few milliseconds
// (a sum that is nearly done) and napping after, so a long wait does not burn a core, and
// answering hang reports (collective #k). Returns DEVCOMM_DONE, DEVCOMM_FAILED (msg) or
// DEVCOMM_BUSY after the timeout.
static int poll_bounded(gl_dist *d, gl_devcomm *c, int64_t k, int state, int (*poll)(gl_devcomm *, char *, size_t),
                        char *msg, size_t len) {
    double t0 = dist_now();
    struct timespec nap = {0, 20000};
    for (long spins = 0; state == DEVCOMM_BUSY; spins++) {
        if (spins > 2000) {
            dist_hang_poll(d, k, t0);
            if (dist_now() - t0 > d->timeout) return DEVCOMM_BUSY;
            nanosleep(&nap, NULL);
        }
        state = poll(c, msg, len);
    }
    return state;
}

// The communicator's pending operation (creation, a collective connecting peers) to its end.
static void settle(gl_dist *d, gl_devcomm *c, int state, char *msg, size_t len, int64_t k) {
    state = poll_bounded(d, c, k, state, devcomm_state, msg, len);
    if (state != DEVCOMM_DONE) nccl_fail(d, c, k, state == DEVCOMM_FAILED ? msg : NULL);
}

// ---- the communicator --------------------------------------------------------------------------------

gl_devcomm *gradnccl_open(gl_dist *d, const gl_graph *g) {
    int mode = nccl_mode();
    // With several ranks a CPU rank takes part too: others may be on GPUs, and all choose alike.
    if (d->world == 1 && !(g->be->device && mode == MODE_FORCE)) return NULL;
    gradnccl_rank me;
    memset(&me, 0, sizeof me);
    char msg[512] = "";
    gl_devcomm *c = NULL;
    if (!g->be->device || devcomm_gpu_identity(me.uuid, me.bus, sizeof me.bus) != 0) {
        me.state = GRADNCCL_CPU;
    } else if (mode == MODE_OFF) {
        me.state = GRADNCCL_OFF;
    } else if (!(c = devcomm_open(msg, sizeof msg))) {
        me.state = GRADNCCL_NO_LIB;
        snprintf(me.why, sizeof me.why, "%.*s", (int)sizeof me.why - 1, msg);  // cut to fit
    }
    gradnccl_rank *all = gl_xmalloc(sizeof *all * (size_t)d->world);
    dist_gather_bytes(d, &me, (int)sizeof me, all, "choosing NCCL or MPI for the gradients", 0);
    char why[384];
    int use = gradnccl_choose(all, d->world, why, sizeof why);
    free(all);
    // Rank 0 makes NCCL's id; if it cannot (no network interface for NCCL's bootstrap, say),
    // every rank learns so from the same broadcast and keeps MPI.
    struct {
        int32_t ok;
        unsigned char id[DEVCOMM_ID_BYTES];
    } u;
    memset(&u, 0, sizeof u);
    if (use) {
        if (d->rank == 0) {
            u.ok = devcomm_unique_id(c, u.id, msg, sizeof msg) == DEVCOMM_DONE;
            if (!u.ok) snprintf(why, sizeof why, "rank 0: %.360s", msg);
        }
        dist_bcast(d, &u, (int64_t)sizeof u, 0, "sharing NCCL's unique id", 0);
        use = u.ok;
    }
    if (!use) {
        if (d->rank == 0 && why[0]) fprintf(stderr, "galley: gradients summed by MPI, not NCCL: %s\n", why);
        devcomm_close(c, 0);
        return NULL;
    }
    dist_hang_hold(d, release_comm, c);
    int64_t k = dist_enter(d, "creating the NCCL communicator", 0, DIST_ALL);
    settle(d, c, devcomm_connect(c, u.id, d->rank, d->world, msg, sizeof msg), msg, sizeof msg, k);
    if (d->rank == 0)
        fprintf(stderr, "galley: gradients summed by %s on the GPUs (%d rank%s%s), on a stream of their own\n",
                devcomm_version(c), d->world, d->world == 1 ? "" : "s", mode == MODE_FORCE ? ", GALLEY_NCCL=force" : "");
    return c;
}

void gradnccl_allreduce(gl_dist *d, gl_devcomm *c, float *buf, int64_t count, int64_t k) {
    char msg[512] = "";
    int state = devcomm_allreduce(c, buf, count, msg, sizeof msg);
    // BUSY: NCCL is still connecting peers (the first sums); it takes no other call until done.
    if (state != DEVCOMM_DONE) settle(d, c, state, msg, sizeof msg, k);
}

double gradnccl_wait(gl_dist *d, gl_devcomm *c, int64_t k) {
    double t0 = dist_now();
    char msg[512] = "";
    devcomm_join(c);
    int state = poll_bounded(d, c, k, DEVCOMM_BUSY, devcomm_joined, msg, sizeof msg);
    if (state != DEVCOMM_DONE) nccl_fail(d, c, k, state == DEVCOMM_FAILED ? msg : NULL);
    return dist_now() - t0;
}

void gradnccl_close(gl_dist *d, gl_devcomm *c) {
    if (!c) return;
    char msg[512] = "";
    int64_t k = dist_enter(d, "closing the NCCL communicator", 0, DIST_ALL);
    int state = poll_bounded(d, c, k, devcomm_finalize(c, msg, sizeof msg), devcomm_state, msg, sizeof msg);
    dist_hang_hold(d, NULL, NULL);
    // The run's work is done: a communicator that will not close is aborted, not the job.
    if (state != DEVCOMM_DONE)
        fprintf(stderr, "galley: warning: rank %d of %d: closing the NCCL communicator %s; aborted it\n", d->rank,
                d->world, state == DEVCOMM_FAILED ? msg : "made no progress within distributed.timeout");
    devcomm_close(c, state != DEVCOMM_DONE);
}
