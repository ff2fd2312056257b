// sweep_msg.c: the few messages of a sweep, over MPI point to point: a group's leader asks world
// rank 0 (the coordinator) for work, carrying its last run's result; the coordinator answers run
// this trial at this rung, or stop. Collectives in dist.c are bounded by distributed.timeout, but
// a group may rightly wait for work as long as another trial trains (ASHA waiting for a rung), so
// these waits poll and sleep instead, without a timeout: a dead rank still ends the job through
// the launcher. Only this file (and dist.c) touch MPI.
#include <string.h>
#include <time.h>

#include "sweep/sweep_internal.h"

#define SWEEP_TAG 7301

static void nap(void) {
    struct timespec ts = {0, 1000000};  // 1 ms: cheap next to a training step, idle for the CPU
    nanosleep(&ts, NULL);
}

#if GALLEY_HAVE_MPI
#include <mpi.h>

#define COMM(d) (*(MPI_Comm *)(d)->comm)

// Polls: a few hundred tests first (a small message is usually through in microseconds), then
// naps of 50 us growing to 1 ms, so a long wait costs no CPU and a short one no latency.
static void wait_req(MPI_Request *r) {
    long ns = 50000;
    for (int done = 0, i = 0;; i++) {
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (i < 300) continue;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 1000000) ns *= 2;
    }
}

void msg_send(gl_dist *world, const sweep_msg *m, int to) {
    MPI_Request r;
    MPI_Isend(m, (int)sizeof *m, MPI_BYTE, to, SWEEP_TAG, COMM(world), &r);
    wait_req(&r);
}

void msg_recv(gl_dist *world, sweep_msg *m, int from) {
    MPI_Request r;
    MPI_Irecv(m, (int)sizeof *m, MPI_BYTE, from, SWEEP_TAG, COMM(world), &r);
    wait_req(&r);
}

int msg_poll(gl_dist *world, sweep_msg *m, int *from) {
    if (!world->mpi || world->world == 1) return 0;
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, SWEEP_TAG, COMM(world), &flag, &st);
    if (!flag) return 0;
    *from = st.MPI_SOURCE;
    MPI_Recv(m, (int)sizeof *m, MPI_BYTE, st.MPI_SOURCE, SWEEP_TAG, COMM(world), MPI_STATUS_IGNORE);
    return 1;
}

void msg_group_bcast(gl_dist *g, sweep_msg *m) {
    if (!g->mpi || g->world == 1) return;
    MPI_Request r;
    MPI_Ibcast(m, (int)sizeof *m, MPI_BYTE, 0, COMM(g), &r);
    wait_req(&r);
}

#else  // one process: the coordinator is the only group, and nobody else to talk to

void msg_send(gl_dist *world, const sweep_msg *m, int to) { (void)world, (void)m, (void)to; }
void msg_recv(gl_dist *world, sweep_msg *m, int from) { (void)world, (void)from, memset(m, 0, sizeof *m); }
int msg_poll(gl_dist *world, sweep_msg *m, int *from) { return (void)world, (void)m, (void)from, 0; }
void msg_group_bcast(gl_dist *g, sweep_msg *m) { (void)g, (void)m; }

#endif

void msg_nap(void) { nap(); }
