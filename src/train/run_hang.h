// run_hang.h: the training loop's side of hang localisation (dist.h): the progress it tells
// dist, and the checkpoint a hang report writes on the reporting rank, with no collective.
#ifndef GALLEY_TRAIN_RUN_HANG_H
#define GALLEY_TRAIN_RUN_HANG_H

#include "train/run.h"

// After run_start: a hang report may checkpoint this run (until run_hang_disarm, before run_close).
void run_hang_arm(gl_run *u);
// The loop's progress (dist_progress) on every communicator of the run: the world, and under
// tensor parallelism the tensor and data groups. steps: finished; in_step: a step is running.
void run_progress(gl_run *u, int64_t steps, bool in_step);
void run_hang_disarm(gl_run *u);
// The loop's position and records into u->ck, for a checkpoint of u->step (epoch: the last step's).
void run_ckpt_fill(gl_run *u, int64_t epoch);
// This rank writes the checkpoint of st->step, with no collective (train_ckpt.c; train_save
// calls it on rank 0). 0, or -1 with the reason printed on err.
int train_ckpt_write(train_ctx *c, const gl_ckpt_state *st, FILE *out, FILE *err);

#endif
