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
// Waits for n requests, bounded by d->timeout (then ends the job naming what and step).
void dist_wait(gl_dist *d, int n, void *reqs, const char *what, int64_t step);

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
// Queues one bucket's sum on NCCL's stream (no host wait unless NCCL is still connecting).
void gradnccl_allreduce(gl_dist *d, gl_devcomm *c, float *buf, int64_t count, const char *what, int64_t step);
// Makes the compute stream wait for every queued sum, and waits for them on the host, bounded
// by the timeout (then ends the job naming what and step). Returns the seconds waited.
double gradnccl_wait(gl_dist *d, gl_devcomm *c, const char *what, int64_t step);
// Destroys the communicator (finalised first, bounded; aborted if that fails). NULL: nothing.
void gradnccl_close(gl_dist *d, gl_devcomm *c);

#endif
