// dist.c: ranks, bounded collectives and abort over MPI (see dist.h). Without MPI (a build with
// GALLEY_HAVE_MPI=0, or a process started alone) every collective is the identity on one rank.
#include "galley/dist.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_hang.h"
#include "dist/dist_internal.h"
#include "galley/check.h"

double dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Which launcher started us, from the variables each one sets. NULL: none.
static const char *launcher_of(void) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return "mpirun";
    if (getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE"))
        return getenv("SLURM_STEP_ID") ? "srun" : "mpi";
    return NULL;
}

void dist_set_timeout(gl_dist *d, double timeout) { d->timeout = timeout > 0 ? timeout : 300; }

int dist_agree(gl_dist *d, int code, const char *what, FILE *err) {
    if (d->world == 1) return code;
    int v[2] = {code != 0 ? d->world - d->rank : 0, code};  // max: the lowest failing rank, the largest code
    dist_max_ints(d, v, 2, what, 0);
    if (v[0] && code == 0 && d->rank == 0)
        fprintf(err, "galley: error: rank %d of %d failed while %s (its own error says why); every rank stops\n",
                d->world - v[0], d->world, what);
    return v[1];
}

#if GALLEY_HAVE_MPI
#include <mpi.h>

#define COMM(d) (*(MPI_Comm *)(d)->comm)

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

int dist_init(gl_dist *d, double timeout, FILE *err) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
    d->launcher = "none";
    dist_set_timeout(d, timeout);
    const char *l = launcher_of();
    if (!l) {
        // srun without an MPI plugin starts N copies that each think they are alone: N
        // identical runs writing the same files. Refuse rather than do that.
        int ntasks = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
        if (getenv("SLURM_STEP_ID") && getenv("SLURM_PROCID") && ntasks > 1) {
            fprintf(err, "galley: error: started by srun as one of %d tasks, but without MPI: each would train alone\n"
                         "  hint: run `srun --mpi=pmix ...` (see `srun --mpi=list`), or `srun -n 1`\n", ntasks);
            return GL_EXIT_USAGE;
        }
        return 0;
    }
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(err, "galley: error: MPI_Init failed under %s\n", l);
        return GL_EXIT_USAGE;
    }
    d->mpi = true;
    d->launcher = l;
    d->comm = gl_xmalloc(sizeof(MPI_Comm));
    MPI_Comm_dup(MPI_COMM_WORLD, (MPI_Comm *)d->comm);
    MPI_Comm_rank(COMM(d), &d->rank);
    MPI_Comm_size(COMM(d), &d->world);
    MPI_Comm node;
    MPI_Comm_split_type(COMM(d), MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &d->local_rank);
    MPI_Comm_size(node, &d->local_world);
    MPI_Comm_free(&node);
    dist_hang_open(d);  // its host names: collective #1
    return 0;
}

void dist_finalize(gl_dist *d) {
    if (!d->mpi) return;
    dist_hang_close(d);
    MPI_Comm_free((MPI_Comm *)d->comm);
    free(d->comm);
    d->comm = NULL;
    MPI_Finalize();
    d->mpi = false;
}

// `galley sweep` (dist.h): a group of d's ranks as a gl_dist of its own.
void dist_split(gl_dist *d, int color, int key, gl_dist *sub) {
    *sub = *d;
    if (!d->mpi) return;
    sub->comm = gl_xmalloc(sizeof(MPI_Comm));
    MPI_Comm_split(COMM(d), color, key, (MPI_Comm *)sub->comm);
    MPI_Comm_rank(COMM(sub), &sub->rank);
    MPI_Comm_size(COMM(sub), &sub->world);
    sub->hang = NULL;
    dist_hang_open(sub);  // numbered on its own, as a run of its own
}

void dist_split_free(gl_dist *sub) {
    if (!sub->mpi || !sub->comm) return;
    dist_hang_close(sub);
    MPI_Comm_free((MPI_Comm *)sub->comm);
    free(sub->comm);
    sub->comm = NULL;
}

_Noreturn void dist_abort(gl_dist *d, int code) {
    fflush(NULL);  // the run log's streams too
    if (d && d->mpi) MPI_Abort(COMM(d), code);
    exit(code);
}

// Waits for n requests of collective #k, polling so that the wait is bounded by the timeout and
// a hang report from another rank is answered. The time counted is the time this rank spent
// polling: a gap between two polls longer than hang_grace means this process did not run (it was
// stopped, or its machine paused), not that the others kept it waiting. A rank stopped by SIGSTOP
// and woken by Open MPI's SIGCONT before its SIGTERM (MPI_Abort after another rank's report) saw
// its whole stop as a wait and printed a second report (e2e/test_dist_hang failed so, under load).
void dist_wait(gl_dist *d, int n, void *reqs, int64_t k) {
    MPI_Request *r = reqs;
    const double t0 = dist_now(), gap = hang_grace(d->timeout);
    double last = t0, waited = 0.0;
    struct timespec nap = {0, 20000};
    for (long spins = 0;; spins++) {
        int done = 0;
        MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (spins > 2000) {  // after the first few milliseconds, stop burning a core
            const double now = dist_now();
            waited += now - last < gap ? now - last : 0.0;
            last = now;
            dist_hang_poll(d, k, now - waited);
            if (waited > d->timeout) dist_hang(d, k, now - waited);
            nanosleep(&nap, NULL);
        }
    }
}

void dist_sum_doubles(gl_dist *d, double *buf, int count, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) return;
    int64_t k = dist_enter(d, what, step, DIST_ALL);
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, COMM(d), &r);
    dist_wait(d, 1, &r, k);
}

void dist_max_ints(gl_dist *d, int *buf, int count, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) return;
    int64_t k = dist_enter(d, what, step, DIST_ALL);
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_INT, MPI_MAX, COMM(d), &r);
    dist_wait(d, 1, &r, k);
}

void dist_gather_doubles(gl_dist *d, const double *mine, int count, double *all, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) {
        memcpy(all, mine, sizeof(double) * (size_t)count);
        return;
    }
    int64_t k = dist_enter(d, what, step, DIST_ALL);
    MPI_Request r;
    MPI_Iallgather(mine, count, MPI_DOUBLE, all, count, MPI_DOUBLE, COMM(d), &r);
    dist_wait(d, 1, &r, k);
}

void dist_gather_bytes(gl_dist *d, const void *mine, int bytes, void *all, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) {
        memcpy(all, mine, (size_t)bytes);
        return;
    }
    int64_t k = dist_enter(d, what, step, DIST_ALL);
    MPI_Request r;
    MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, COMM(d), &r);
    dist_wait(d, 1, &r, k);
}

// Large blocks go in pieces: MPI counts are ints.
#define DIST_PIECE ((int64_t)1 << 26)

void dist_gather_floats(gl_dist *d, const float *mine, int64_t count, float *all, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) {
        memcpy(all, mine, sizeof(float) * (size_t)count);
        return;
    }
    if (count <= DIST_PIECE) {  // the usual case: rank k's block lands at all + k * count directly
        int64_t k = dist_enter(d, what, step, DIST_ALL);
        MPI_Request r;
        MPI_Iallgather(mine, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, COMM(d), &r);
        dist_wait(d, 1, &r, k);
        return;
    }
    // Blocks beyond an int count go a piece at a time through a staging buffer (allocated per
    // call: only models of over 2^26 parameters get here).
    int64_t piece = DIST_PIECE;
    float *tmp = gl_xmalloc(sizeof(float) * (size_t)(piece * d->world));
    for (int64_t off = 0; off < count; off += piece) {
        int len = (int)(count - off < piece ? count - off : piece);
        int64_t k = dist_enter(d, what, step, DIST_ALL);
        MPI_Request r;
        MPI_Iallgather(mine + off, len, MPI_FLOAT, tmp, len, MPI_FLOAT, COMM(d), &r);
        dist_wait(d, 1, &r, k);
        for (int q = 0; q < d->world; q++)
            memcpy(all + (int64_t)q * count + off, tmp + (int64_t)q * len, sizeof(float) * (size_t)len);
    }
    free(tmp);
}

void dist_bcast(gl_dist *d, void *buf, int64_t bytes, int root, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) return;
    for (int64_t off = 0; off < bytes; off += DIST_PIECE) {
        int len = (int)(bytes - off < DIST_PIECE ? bytes - off : DIST_PIECE);
        int64_t k = dist_enter(d, what, step, DIST_ROOTED);
        MPI_Request r;
        MPI_Ibcast((char *)buf + off, len, MPI_BYTE, root, COMM(d), &r);
        dist_wait(d, 1, &r, k);
    }
}

void dist_bcast_floats(gl_dist *d, float *buf, int64_t count, int root, const char *what, int64_t step) {
    dist_bcast(d, buf, count * (int64_t)sizeof(float), root, what, step);
}

void dist_barrier(gl_dist *d, const char *what, int64_t step) {
    if (!d->mpi || d->world == 1) return;
    int64_t k = dist_enter(d, what, step, DIST_ALL);
    MPI_Request r;
    MPI_Ibarrier(COMM(d), &r);
    dist_wait(d, 1, &r, k);
}

void dist_iallreduce_floats(gl_dist *d, float *buf, int64_t count, void *reqs, int *nreq) {
    MPI_Request *r = reqs;
    int k = 0;
    for (int64_t off = 0; off < count; off += DIST_PIECE, k++) {
        int len = (int)(count - off < DIST_PIECE ? count - off : DIST_PIECE);
        MPI_Iallreduce(MPI_IN_PLACE, buf + off, len, MPI_FLOAT, MPI_SUM, COMM(d), &r[k]);
    }
    *nreq = k;
}

int dist_test(gl_dist *d, int n, void *reqs) {
    (void)d;
    int done = 0;
    MPI_Testall(n, (MPI_Request *)reqs, &done, MPI_STATUSES_IGNORE);
    return done;
}

size_t dist_request_size(void) { return sizeof(MPI_Request); }

#else  // no MPI in this build: one rank

int dist_init(gl_dist *d, double timeout, FILE *err) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
    d->launcher = "none";
    dist_set_timeout(d, timeout);
    if (launcher_of()) {
        fprintf(err, "galley: error: started by an MPI launcher, but this galley was built without MPI\n");
        return GL_EXIT_USAGE;
    }
    return 0;
}
void dist_finalize(gl_dist *d) { (void)d; }
void dist_split(gl_dist *d, int color, int key, gl_dist *sub) { (void)color, (void)key, *sub = *d; }
void dist_split_free(gl_dist *sub) { (void)sub; }
_Noreturn void dist_abort(gl_dist *d, int code) {
    (void)d;
    fflush(NULL);
    exit(code);
}
void dist_wait(gl_dist *d, int n, void *reqs, int64_t k) { (void)d, (void)n, (void)reqs, (void)k; }
void dist_sum_doubles(gl_dist *d, double *buf, int count, const char *what, int64_t step) {
    (void)d, (void)buf, (void)count, (void)what, (void)step;
}
void dist_max_ints(gl_dist *d, int *buf, int count, const char *what, int64_t step) {
    (void)d, (void)buf, (void)count, (void)what, (void)step;
}
void dist_gather_doubles(gl_dist *d, const double *mine, int count, double *all, const char *what, int64_t step) {
    (void)d, (void)what, (void)step;
    memcpy(all, mine, sizeof(double) * (size_t)count);
}
void dist_gather_floats(gl_dist *d, const float *mine, int64_t count, float *all, const char *what, int64_t step) {
    (void)d, (void)what, (void)step;
    memcpy(all, mine, sizeof(float) * (size_t)count);
}
void dist_gather_bytes(gl_dist *d, const void *mine, int bytes, void *all, const char *what, int64_t step) {
    (void)d, (void)what, (void)step;
    memcpy(all, mine, (size_t)bytes);
}
void dist_bcast(gl_dist *d, void *buf, int64_t bytes, int root, const char *what, int64_t step) {
    (void)d, (void)buf, (void)bytes, (void)root, (void)what, (void)step;
}
void dist_bcast_floats(gl_dist *d, float *buf, int64_t count, int root, const char *what, int64_t step) {
    (void)d, (void)buf, (void)count, (void)root, (void)what, (void)step;
}
void dist_barrier(gl_dist *d, const char *what, int64_t step) { (void)d, (void)what, (void)step; }
void dist_iallreduce_floats(gl_dist *d, float *buf, int64_t count, void *reqs, int *nreq) {
    (void)d, (void)buf, (void)count, (void)reqs;
    *nreq = 0;
}
int dist_test(gl_dist *d, int n, void *reqs) {
    (void)d, (void)n, (void)reqs;
    return 1;
}
size_t dist_request_size(void) { return sizeof(int); }

#endif
