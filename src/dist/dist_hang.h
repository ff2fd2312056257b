// dist_hang.h: hang localisation's state and its pieces (see dist.h, "hang localisation").
//
//   dist_hang.c         numbering: every collective a rank enters gets the next number and a
//                       description in a ring; the loop's progress; the record a rank sends
//   dist_hang_oob.c     the exchange on a communicator of its own (MPI point to point, bounded)
//   dist_hang_report.c  from the records: the report's lines and whether to checkpoint
//
// Why one rank's silence can be told apart from the others' waiting: every rank enters the same
// collectives in the same order, and waits for them in that order. A rank waiting for #k has
// completed every collective before it; a collective that needs every rank's part (an
// allreduce, an allgather, a barrier: DIST_ALL) completes nowhere until every rank entered it.
// So if the ranks that answer all wait for #k, a rank that does not answer entered the last
// DIST_ALL collective before #k (#j) but never entered #k: it is stopped, or busy outside MPI.
// What #j was, and the steps finished when it was entered, are the same on every rank.
#ifndef GALLEY_DIST_HANG_H
#define GALLEY_DIST_HANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/dist.h"

#define HANG_RING 512  // collectives remembered (more than a step's buckets in flight)
#define HANG_WHAT 112  // a collective's description ("the gradient allreduce (bucket 3 of 5) at step 1207")
#define HANG_HOST 64   // a host name

typedef struct {
    int64_t k;     // its number (0: the slot is empty)
    int64_t done;  // steps finished when it was entered (-1: training had not started)
    int32_t kind;  // DIST_ALL or DIST_ROOTED
    char what[HANG_WHAT];
} hang_entry;

// What one rank tells the reporter (sent as bytes: every rank runs the same build).
typedef struct {
    int32_t rank;
    int32_t in_step;     // a step's forward and backward were running
    int64_t waiting;     // #k: the collective it waits for
    int64_t entered;     // collectives it had entered
    int64_t done;        // steps it had finished (-1: training had not started)
    int64_t done_seq;    // collectives it had entered when it finished them
    int64_t all_before;  // #j: the last DIST_ALL collective before #k (0: none remembered)
    int64_t all_done;    // steps finished when #j was entered
    double waited;       // seconds it had waited for #k
    char what[HANG_WHAT];    // #k described
    char before[HANG_WHAT];  // #j described
} hang_record;

// HANG_REPORTING: its queries are out. A rank told of a hang (a record) that is also queried
// (a rank woken after others began, say by the SIGCONT of a launcher's kill) stands by.
enum { HANG_IDLE, HANG_ACCUSING, HANG_REPORTING, HANG_STANDING_BY };

struct gl_hang {
    // Numbering (dist_hang.c).
    int64_t entered;
    hang_entry ring[HANG_RING];
    int64_t done, done_seq;
    bool in_step;
    // What a report does (dist_on_hang); where it goes.
    dist_hang_save save;
    void *save_ctx;
    FILE *err;
    void (*release)(void *);  // what holds the device while waiting (NCCL's communicator)
    void *release_arg;
    // The exchange (dist_hang_oob.c).
    char *hosts;  // [world * HANG_HOST], gathered at set-up
    void *comm;   // MPI_Comm of its own (a duplicate): reports never mix with collectives
    int role;     // HANG_*
    bool told;    // a record arrived: this rank is to report (unless it is queried first)
    int lead;     // the lowest rank that asked for this rank's record (standing by); -1: none
    double last_poll;
    bool mine_set;
    hang_record mine;  // this rank's record, filled once (the buffer of every send of it)
    int32_t me;        // the query's payload
    hang_record *rec;  // [world] what arrived (allocated at the first report)
    bool *got;         // [world]
};

// Seconds a reporter waits for answers, an accuser for a reporter: timeout / 10 in [1, 5].
double hang_grace(double timeout);
// The entry of #k, or NULL when it is no longer remembered.
const hang_entry *hang_entry_of(const struct gl_hang *h, int64_t k);
// Fills this rank's record for a wait for #k begun at t0 (once; later calls keep the first).
void hang_fill(const gl_dist *d, int64_t k, double t0);

// ---- the report (dist_hang_report.c) ----

typedef struct {
    int world, reporter;
    const hang_record *rec;  // [world]: rec[r] is valid where answered[r]
    const bool *answered;    // [world]
    const char *hosts;       // [world * HANG_HOST], or NULL (unknown)
    double timeout;
    bool armed;  // a checkpoint can be written (dist_on_hang)
} hang_facts;

typedef struct {
    int save;       // 1: write the checkpoint of `steps`, then exit GL_EXIT_STOPPED
    int64_t steps;  // the steps every rank had finished
    char why[320];  // save 0: why there is no checkpoint
} hang_verdict;

// Prints the report (which ranks never entered which collective, what each had finished, on
// which host) to out and decides whether a checkpoint can be written.
void hang_report(const hang_facts *f, FILE *out, hang_verdict *v);

#endif
