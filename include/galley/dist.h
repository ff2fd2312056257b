// dist.h: data-parallel ranks over MPI. One process started alone is rank 0 of 1 and never
// touches MPI; under mpirun or `srun --mpi=pmix` rank, local rank and world come from MPI.
//
//   gl_dist d;  if (dist_init(&d, timeout_s, stderr)) return GL_EXIT_USAGE;
//   ... dist_sum_doubles(&d, buf, n, "losses", step) ...        every rank, same order
//   dist_finalize(&d);                                           or dist_abort(&d, code)
//
// Every wait is bounded: a collective that makes no progress for `timeout` seconds (a rank died
// or hangs) ends the whole job (MPI_Abort), so a job never hangs silently, and says which rank
// never entered it (hang localisation, below). Only the main thread calls MPI (MPI_THREAD_FUNNELED).
//
// Gradients (gl_gradsync): the parameter gradient block is cut into buckets of about
// distributed.bucket_mb, from the last layer backwards (the order backward fills them). A
// bucket's non-blocking allreduce starts as soon as backward has passed its first layer, and
// in-flight ones are progressed after every layer, so communication overlaps the rest of backward.
//
// What runs where. On the CPU backend, and on GPUs where NCCL cannot be used, buckets are summed
// by MPI (dist.c) from the host: on a GPU that is managed memory, so backward waits for the GPU
// before each layer hook. With the CUDA backend and every rank on a GPU of its own, NCCL sums
// them in GPU memory (grad_nccl.c decides and bounds the waits; src/backend/cuda/cuda_nccl.cu
// behind galley/devcomm.h makes the calls): each bucket's ncclAllReduce is queued on NCCL's own
// stream behind the compute stream's work so far (an event), with no host wait per layer, and
// gradsync_finish makes the compute stream wait for the last one, then waits on the host,
// bounded by the timeout. Setup gathers every rank's GPU UUID and NCCL state so all ranks choose
// alike; a shared GPU (NCCL refuses one), a rank without libnccl.so.2, a CPU rank or
// GALLEY_NCCL=0 keeps MPI and rank 0 says why. Everything else stays on MPI: the per-step loss
// and metrics reduction, sync_batchnorm, distributed.deterministic's gathers, broadcasts.
#ifndef GALLEY_DIST_H
#define GALLEY_DIST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/graph.h"

typedef struct {
    int rank, world;              // in the job
    int local_rank, local_world;  // on this node (GPU binding, threads)
    bool mpi;                     // MPI_Init was called (a launcher started this process)
    double timeout;               // seconds a collective may wait (distributed.timeout)
    const char *launcher;         // "mpirun", "srun", "mpi" or "none"
    void *comm;                   // MPI_Comm (opaque here; dist.c owns it)
    struct gl_hang *hang;         // hang localisation (dist_hang*.c); NULL on one process
} gl_dist;

// Detects a launcher (Open MPI, PMIx, PMI2, Slurm) and initialises MPI if one started this
// process. Returns 0, or GL_EXIT_USAGE with the reason on err (e.g. srun without an MPI plugin).
int dist_init(gl_dist *d, double timeout, FILE *err);
void dist_finalize(gl_dist *d);
// Ends every rank of the job with code (MPI_Abort); exit(code) on one process.
_Noreturn void dist_abort(gl_dist *d, int code);
// The time limit of collectives (after the recipe is known).
void dist_set_timeout(gl_dist *d, double timeout);
// `galley sweep`: sub becomes an ordinary gl_dist over the ranks of d that pass the same color
// (MPI_Comm_split; ordered by key), so a trial trains data-parallel on its group. Local rank and
// local world stay d's (the node's cores are still shared by all of d's ranks). Without MPI sub
// is a copy of d. Collective over d. dist_split_free frees sub (never dist_finalize it).
void dist_split(gl_dist *d, int color, int key, gl_dist *sub);
void dist_split_free(gl_dist *sub);

// Collectives, each bounded by the timeout; `what` and `step` name it in the message.
void dist_sum_doubles(gl_dist *d, double *buf, int count, const char *what, int64_t step);
void dist_max_ints(gl_dist *d, int *buf, int count, const char *what, int64_t step);
// all[world * count] = every rank's mine[count], in rank order.
void dist_gather_doubles(gl_dist *d, const double *mine, int count, double *all, const char *what, int64_t step);
void dist_gather_floats(gl_dist *d, const float *mine, int64_t count, float *all, const char *what, int64_t step);
void dist_gather_bytes(gl_dist *d, const void *mine, int bytes, void *all, const char *what, int64_t step);
// bytes of buf from rank root to all.
void dist_bcast(gl_dist *d, void *buf, int64_t bytes, int root, const char *what, int64_t step);
void dist_bcast_floats(gl_dist *d, float *buf, int64_t count, int root, const char *what, int64_t step);
void dist_barrier(gl_dist *d, const char *what, int64_t step);
// Set-up agreement: every rank passes its own exit code (0: fine; a failing rank has already
// said why). Returns 0 when all are 0, else the largest code, on every rank, so that all stop
// together rather than wait for a rank that has left. Rank 0, when fine itself, names the
// lowest failing rank and `what` it was doing ("opening the data").
int dist_agree(gl_dist *d, int code, const char *what, FILE *err);

// ---- hang localisation (dist_hang*.c) ------------------------------------------------------------
//
// Every collective above and every gradient bucket (MPI or NCCL) is numbered on each rank as it
// enters it, with what it is and the step ("collective #4711: the gradient allreduce (bucket 3
// of 5) at step 1207"); host names are gathered at dist_init. When a wait for #k makes no
// progress for the timeout, the ranks that wait send what they know, point to point on a
// communicator of their own and bounded (a stopped rank cannot block it), to rank 0, or to the
// lowest rank that answers when rank 0 does not. That rank asks every other rank, waits
// hang_grace seconds (timeout / 10, 1 to 5), and prints the report: the ranks that never
// entered #k (or are stuck in it) and what it was, the steps each rank had finished, their
// hosts. A rank that does not answer is known to have entered the last collective before #k
// that needs every rank's part, because another rank completed it. The reporter's having
// finished its steps shows every rank took part in them, so it writes their checkpoint first
// (the save armed by dist_on_hang, which may decline; no collective) and the job ends with
// GL_EXIT_STOPPED, so a requeue continues; otherwise (no rank silent, before training, nothing
// armed) with GL_EXIT_RUNTIME. The ranks standing by end the job themselves (exit 1) if the
// reporter has not within twice the grace and the timeout.

// The training loop's progress: steps finished; in_step while a step's forward and backward run.
void dist_progress(gl_dist *d, int64_t steps, bool in_step);
// Writes the checkpoint of `steps` on the reporting rank, with no collective (the other ranks
// are stuck or standing by). 0: written (and said); else why not, in why.
typedef int (*dist_hang_save)(void *ctx, int64_t steps, bool in_step, char *why, size_t len);
// Arms the checkpoint on a hang (save NULL: disarms it); the report is printed on err (stderr
// until set).
void dist_on_hang(gl_dist *d, dist_hang_save save, void *ctx, FILE *err);

// ---- gradient allreduce in buckets, overlapped with backward ------------------------------------

typedef struct gl_gradsync gl_gradsync;

// Plans buckets over g's gradient block; overlap false starts them all after backward.
gl_gradsync *gradsync_new(gl_dist *d, gl_graph *g, double bucket_mb, bool overlap);
void gradsync_free(gl_gradsync *s);
int gradsync_buckets(const gl_gradsync *s);
// Before backward: installs the per-layer hook on g for this step.
void gradsync_begin(gl_gradsync *s, int64_t step);
// After backward: starts what is left and waits for all. Returns the seconds spent waiting
// (the communication backward did not hide).
double gradsync_finish(gl_gradsync *s);

#endif
