// dist_internal.h: what dist.c shares with grad_sync.c (MPI requests stay opaque outside dist.c).
#ifndef GALLEY_DIST_INTERNAL_H
#define GALLEY_DIST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
