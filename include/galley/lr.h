// lr.h: the learning-rate rule of optimizer.schedule, resolved to optimizer steps:
// batch scaling, linear warmup, then constant, multistep, cosine or poly decay.
//
//   base      = lr x s, s = 1 (none), batch/base_batch (linear) or sqrt(batch/base_batch) (sqrt)
//   warmup    lr_at(step) = base * (step + 1) / W for step < W
//   constant  base
//   multistep base * factors[i] for the last milestone i with step >= milestone i
//   cosine    end + (base - end) * (1 + cos(pi * t)) / 2    t = (step - W) / (total - W), in [0, 1]
//   poly      end + (base - end) * (1 - t)^power
// Epoch units (warmup, milestones) become steps as round(x * steps_per_epoch).
#ifndef GALLEY_LR_H
#define GALLEY_LR_H

#include <stddef.h>
#include <stdint.h>

#include "galley/recipe.h"

typedef struct {
    double lr;                // optimizer.lr as written
    double base;              // after batch scaling
    int scaling;              // SCALE_*
    int64_t batch, base_batch;
    int unit;                 // SCHED_UNIT_*: how the recipe counted (for lr_describe)
    int64_t steps_per_epoch, total_steps;
    double warmup_units;      // as written
    int64_t warmup;           // W, in steps
    int decay;                // DECAY_*
    int nmilestones;
    double milestone_units[GL_MAX_FLOATS];  // as written
    int64_t milestones[GL_MAX_FLOATS];      // in steps
    double factors[GL_MAX_FLOATS];
    double end_lr, power;
} gl_lr;

// steps_per_epoch and total_steps let epoch units and cosine/poly horizons resolve to steps.
void lr_init(gl_lr *s, const recipe_t *r, int64_t batch_size, int64_t steps_per_epoch, int64_t total_steps);
// The learning rate of optimizer step `step` (counting from 0). Allocates nothing.
double lr_at(const gl_lr *s, int64_t step);
// One line, e.g. "lr 0.1 = 0.05 x sqrt(256/64); warmup 100 steps from 0.001; then cosine to 0 at
// step 5000".
void lr_describe(const gl_lr *s, char *buf, size_t len);

#endif
