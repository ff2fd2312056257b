// sweep_run.h: the running sweep, shared by the driver (sweep_run.c) and the coordinator
// (sweep_coord.c).
#ifndef GALLEY_SWEEP_RUN_H
#define GALLEY_SWEEP_RUN_H

#include "sweep/sweep_internal.h"

typedef struct {
    sweep_spec *s;
    gl_dist *world, group;
    int groups, gid;
    double t0;  // the sweep's start on this rank (train.time_limit counts from it)
    FILE *out, *err;
    bool signalled;  // a signal arrived (train_run's handlers and the sweep's between runs)
    // The coordinator's (world rank 0).
    sweep_sched sc;
    sweep_journal j;
    bool *waiting;  // groups waiting for an answer
    int stopped;    // groups told to stop
    bool stopping;  // a signal, a paused run or the time limit: no new runs
    int stop_code;
    int64_t assigned;  // runs handed out
    double overhead;   // seconds the coordinator spent deciding, journaling and answering
} sweep_ctx;

// Polls the other groups' messages and answers them (the hook between group 0's steps).
void coord_poll(sweep_ctx *x);
void coord_between_steps(void *arg);
// Group 0's own request: records result (if a run ended), then waits until there is an answer.
void coord_self(sweep_ctx *x, const sweep_msg *result, sweep_msg *reply);
// After group 0 was told to stop: answers the others until each was told to stop.
void coord_finish(sweep_ctx *x);

#endif
