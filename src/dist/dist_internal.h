// dist_internal.h: what dist.c and grad_nccl.c share with grad_sync.c (MPI requests stay opaque
// outside dist.c, NCCL outside src/backend/cuda/cuda_nccl.cu).
#ifndef GALLEY_DIST_INTERNAL_H
#define GALLEY_DIST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "galley/devcomm.h"
#include "galley/dist.h"

double dist_now(void);
size_t dist_request_size(void);
// Starts an in-place float sum of buf[count] over ranks; fills reqs (room for count / 2^26 + 1
// requests) and *nreq.
void dist_iallreduce_floats(gl_dist *d, float *buf, int64_t count, void *reqs, int *nreq);
// 1 when all n requests are complete (progresses them either way).
int dist_test(gl_dist *d, int n, void *reqs);
// Waits for n requests of collective #k, bounded by d->timeout (then dist_hang).
void dist_wait(gl_dist *d, int n, void *reqs, int64_t k);

// ---- numbering and hangs (dist_hang*.c) ------------------------------------------------------------

enum { DIST_ALL, DIST_ROOTED };  // needs every rank's part (allreduce, allgather, barrier); from a root (bcast)
// Numbers the collective this rank enters now, described by what (and " at step N" once training
// has started). Returns its number (0 on one process).
int64_t dist_enter(gl_dist *d, const char *what, int64_t step, int kind);
// "#4711 (the gradient allreduce (bucket 3 of 5) at step 1207)" into buf (DIST_DESCRIBED bytes hold it).
#define DIST_DESCRIBED 160
void dist_describe(const gl_dist *d, int64_t k, char *buf, size_t len);
// Inside a bounded wait for #k begun at t0, every millisecond or so: answers a hang report
// (a rank asked for its record stands by and never returns; one told of a hang reports it).
void dist_hang_poll(gl_dist *d, int64_t k, double t0);
// The wait for #k begun at t0 made no progress for the timeout: the report, a checkpoint when
// it can be written, and the end of the job (dist.h). Never returns.
_Noreturn void dist_hang(gl_dist *d, int64_t k, double t0);
// What holds the device while this rank waits (NCCL's communicator): released before a
// checkpoint is written or the job ends. release NULL: nothing.
void dist_hang_hold(gl_dist *d, void (*release)(void *), void *arg);
// Set-up and end of the state (dist.c): host names gathered (a collective), the report's
// communicator duplicated from d's.
void dist_hang_open(gl_dist *d);
void dist_hang_close(gl_dist *d);

// ---- NCCL for the gradient buckets (grad_nccl.c) -------------------------------------------------

// What one rank brings to the choice between NCCL and MPI; every rank's is gathered (as bytes),
// so all ranks decide alike.
enum { GRADNCCL_READY, GRADNCCL_CPU, GRADNCCL_OFF, GRADNCCL_NO_LIB };
typedef struct {
    int32_t state;           // GRADNCCL_*
    unsigned char uuid[16];  // the GPU's (READY, OFF, NO_LIB)
    char bus[20];            // its PCI bus id, for messages
    char why[152];           // NO_LIB: why libnccl.so.2 cannot be used here
} gradnccl_rank;             // 192 bytes

// 1: NCCL can sum the gradients of these `world` ranks. 0: MPI, with the reason in why ("" when
// no rank trains on a GPU: MPI is then simply the way, nothing to say).
int gradnccl_choose(const gradnccl_rank *all, int world, char *why, size_t len);
// When the backend is on a GPU and there are several ranks (or GALLEY_NCCL=force): every rank
// takes part in the choice; if NCCL is chosen, the communicator is made (bounded wait) and
// returned. NULL: the buckets go through MPI (rank 0 printed why, if there is a reason).
gl_devcomm *gradnccl_open(gl_dist *d, const gl_graph *g);
// Queues one bucket's sum (collective #k, dist_enter) on NCCL's stream (no host wait unless NCCL
// is still connecting).
void gradnccl_allreduce(gl_dist *d, gl_devcomm *c, float *buf, int64_t count, int64_t k);
// Makes the compute stream wait for every queued sum, and waits for them on the host, bounded
// by the timeout (then dist_hang on #k, the first of them). Returns the seconds waited.
double gradnccl_wait(gl_dist *d, gl_devcomm *c, int64_t k);
// Destroys the communicator (finalised first, bounded; aborted if that fails). NULL: nothing.
void gradnccl_close(gl_dist *d, gl_devcomm *c);

#endif
