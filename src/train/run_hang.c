// run_hang.c: the checkpoint a hang report writes (dist.h, "hang localisation"). dist decides
// that every rank took part in the steps this rank finished; here the run says whether its own
// state is that of those steps exactly, and writes it with the loop's own checkpoint code.
//
// Data parallelism keeps the parameters and the optimizer's state alike on every rank, so any
// rank that answered can write them. Layer state is another matter: batch-norm running
// statistics are rank 0's (each rank's follow its own part of the batch until an evaluation
// shares rank 0's), and a step's forward has already moved them when the step waits in a
// collective. A model with layer state is checkpointed only by rank 0, between steps.
#include <stdio.h>

#include "galley/check.h"
#include "train/run_hang.h"

void run_ckpt_fill(gl_run *u, int64_t epoch) {
    gl_ckpt_state *ck = &u->ck;
    const train_result *res = u->res;
    ck->step = u->step, ck->epoch = epoch, ck->samples = u->samples_base + u->seen_total, ck->skipped = u->skipped;
    ck->best = res->best, ck->best_step = u->best_step, ck->best_loss = res->best_loss;
    ck->best_loss_step = res->best_loss_step, ck->epochs_run = res->epochs_run;
    ck->evaluated = u->eval_step == u->step;
    ck->train_seconds = u->seconds_base + (now_s() - u->t_start);
    ck->scaler = u->c.ls;
}

// dist_hang_save: the checkpoint of `steps` on this rank (in_step: a step's forward had begun).
static int save_on_hang(void *ctx, int64_t steps, bool in_step, char *why, size_t len) {
    gl_run *u = ctx;
    if (steps != u->step) {  // defensive: dist's count and the loop's agree
        snprintf(why, len, "rank %d is at step %lld, not %lld", u->d->rank, (long long)u->step, (long long)steps);
        return -1;
    }
    if (u->grid_on && u->grid.tp > 1) {  // the whole model is spread over each tensor group
        snprintf(why, len, "under tensor parallelism each rank holds a share of the model, and gathering it would "
                 "need the rank that does not answer");
        return -1;
    }
    if (u->c.state_floats > 0 && u->d->rank != 0) {
        snprintf(why, len, "the model's layer state (batch-norm running statistics) is rank 0's, and rank 0 did not "
                 "answer");
        return -1;
    }
    if (u->c.state_floats > 0 && in_step) {
        snprintf(why, len, "the forward of the step after step %lld had already moved the model's layer state "
                 "(batch-norm running statistics)", (long long)steps);
        return -1;
    }
    run_ckpt_fill(u, steps > 0 ? (steps - 1) / u->steps_per_epoch + 1 : 1);
    if (train_ckpt_write(&u->c, &u->ck, u->err, u->err) != 0) {
        snprintf(why, len, "the checkpoint could not be written (above)");
        return -1;
    }
    return 0;
}

void run_progress(gl_run *u, int64_t steps, bool in_step) {
    dist_progress(u->d, steps, in_step);
    if (u->grid_on) {  // the tensor and data groups number their collectives on their own
        dist_progress(&u->grid.tpd, steps, in_step);
        dist_progress(&u->grid.dpd, steps, in_step);
    }
}

void run_hang_arm(gl_run *u) {
    run_progress(u, u->step, false);
    dist_on_hang(u->d, save_on_hang, u, u->err);
    if (u->grid_on) {  // a hang in a group's collective: the same save (which declines under tp > 1)
        dist_on_hang(&u->grid.tpd, save_on_hang, u, u->err);
        dist_on_hang(&u->grid.dpd, save_on_hang, u, u->err);
    }
}

// Before run_close: the run's streams and state are about to go.
void run_hang_disarm(gl_run *u) {
    dist_on_hang(u->d, NULL, NULL, NULL);
    if (u->grid_on) dist_on_hang(&u->grid.tpd, NULL, NULL, NULL), dist_on_hang(&u->grid.dpd, NULL, NULL, NULL);
    run_progress(u, -1, false);
}
