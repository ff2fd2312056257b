// dist_probe.h: what `galley doctor` asks of MPI beyond dist.h: which transport Open MPI really
// selected, and collectives that report a rank that does not answer instead of ending the job.
//
//   dist_capture *cap = dist_capture_begin();     before dist_init (NULL: nothing to capture)
//   dist_init(&d, ...);  dist_capture_pause(cap);  ... dist_capture_transport(cap, &t) ...
//   dist_capture_resume(cap);  dist_finalize(&d);  dist_capture_end(cap);
//
// Only MPI_Init and MPI_Finalize run captured (Open MPI prints its selection in the one and
// closes its components, verbosely, in the other); in between stderr is the real one, so a
// crash report is never lost in the pipe.
//
// Transport. Open MPI says what it selected only in its verbose output. dist_capture_begin
// raises the verbosity of the pml, mtl and btl frameworks (OMPI_MCA_*_base_verbose, read by
// MPI_Init; values the user set are kept) and points stderr (fd 2) at a pipe that a thread
// reads: Open MPI's selection lines ("select: component ob1 selected", "mca: bml: Using vader
// btl for send to [[job,1],3] on node n2") are kept and parsed, every other line goes on to the
// real stderr as it comes. Every peer is connected in MPI_Init (OMPI_MCA_mpi_add_procs_cutoff
// raised), so the BTL lines name them all.
//
// Bounded collectives: every wait polls and gives up after `timeout` seconds, returning what
// did not arrive; the caller reports it (MPI cannot be trusted after that: end with dist_abort).
#ifndef GALLEY_DIST_PROBE_H
#define GALLEY_DIST_PROBE_H

#include <stdint.h>

#include "galley/dist.h"

typedef struct dist_capture dist_capture;

// What Open MPI's verbose lines said about this process (empty strings: not seen).
typedef struct {
    char library[80];  // MPI_Get_library_version's first line, e.g. "Open MPI v4.1.4"
    char pml[24];      // the PML selected: ob1, cm, ucx
    char mtl[24];      // the MTL (with pml cm): ofi, psm2
    char btl_node[48]; // BTLs used towards peers on this node ("vader"; "self" left out)
    char btl_net[48];  // towards peers on other nodes ("tcp", "tcp,ofi")
    int32_t peers;     // peers the BML lines named (self included)
    char how[96];      // how this was found out, or why it could not be
} dist_transport;

// NULL when no MPI launcher started this process, or this galley has no MPI.
dist_capture *dist_capture_begin(void);
// What was seen so far (thread-safe). c NULL: `how` says why there is nothing.
void dist_capture_transport(dist_capture *c, dist_transport *t);
// Between the two captured stretches: fd 2 back to the real stderr, and again to the pipe.
void dist_capture_pause(dist_capture *c);
void dist_capture_resume(dist_capture *c);
// Restores fd 2, forwards what is left, joins the thread, frees c. NULL: nothing.
void dist_capture_end(dist_capture *c);

// Rank 0 gets every rank's `bytes` at all + r * bytes (its own too); the other ranks send
// theirs. Returns the number of ranks whose part did not arrive within timeout (rank 0 only;
// missing[r] = 1 for each, missing has world entries or is NULL); on other ranks 0, or 1 when
// their own send did not complete.
int dist_probe_gather(gl_dist *d, const void *mine, int bytes, void *all, unsigned char *missing, double timeout);
// A barrier that names who did not come: every rank checks in with rank 0, which then releases
// them all. Rank 0 returns how many ranks did not check in within timeout (missing[r] = 1 for
// each; then it releases no one); the others 0, or 1 when rank 0 did not release them in time.
int dist_probe_meet(gl_dist *d, unsigned char *missing, double timeout);
// Rank 0's buf[bytes] to every rank. 0, or -1 when it did not complete within timeout.
int dist_probe_bcast(gl_dist *d, void *buf, int bytes, double timeout);
// In-place maximum of v[n] over the ranks of d. 0, or -1 on timeout.
int dist_probe_max(gl_dist *d, double *v, int n, double timeout);
// Times `iters` in-place float sums of buf[count] over d, one after another, each bounded by
// timeout. Returns the seconds of the slowest rank per sum (the same on every rank), or -1 when
// one of them did not complete in time.
double dist_probe_allreduce_time(gl_dist *d, float *buf, int64_t count, int iters, double timeout);

#endif
