// train.h: the training loop.
#ifndef GALLEY_TRAIN_H
#define GALLEY_TRAIN_H

#include <stdio.h>

#include "galley/data.h"
#include "galley/dist.h"
#include "galley/graph.h"
#include "galley/recipe.h"

// How to run, beyond the recipe.
typedef struct {
    const char *run_dir;  // `--run-dir`: the run directory itself (NULL: log.dir/<name>/<timestamp>)
    const char *resume;   // `--resume`: a checkpoint file, "auto" (newest good one in checkpoint.dir), or NULL
    gl_dist *dist;        // ranks (NULL: one process); only rank 0 prints and writes files
    bool evaluate;        // `galley eval`: load `resume`, evaluate on the validation split, stop
    // `galley sweep` (src/sweep/): called on every rank after each training step (NULL: never), so
    // the sweep's coordinator answers the other groups while its own group trains. It must not
    // call collectives of this run.
    void (*between_steps)(void *arg);
    void *between_arg;
} train_opts;

typedef struct {
    double best, last;            // the target metric: best and last validation value (NAN if none)
    double last_loss, last_acc;   // last validation loss and accuracy (NAN where it does not apply)
    double best_loss;             // lowest validation loss, and the step it was seen at
    int64_t best_loss_step;
    int epochs_run;
    int64_t steps;
    int target_reached;  // 1 reached, 0 not reached, -1 no target
    double seconds;
    double samples_per_s;  // training samples per second, evaluation excluded
    char run_dir[4096];    // the run directory written ("" when none)
} train_result;

// Trains the recipe; progress to out, errors to err (both copied into the run directory's
// console.log). opts may be NULL (defaults). Returns a GL_EXIT_* code.
int train_run(const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res);

// Checks that the model's output fits the loss and the data (printed as FILE:LINE:COL errors).
// data: the training split's shapes (data_shape or the loader's).
int train_check_model(const recipe_t *r, gl_graph *g, const gl_dataset *data, FILE *err);
// Checks that the validation split has the training split's input and target shapes, target
// kind and classes: the model built for one evaluates the other (a FILE:LINE:COL error naming
// both splits' files otherwise).
int train_check_splits(const recipe_t *r, const gl_dataset *train, const gl_dataset *val, FILE *err);

// The run's one arena, in bytes, planned before anything is allocated (train_plan.c): what
// train checks against the host's or the GPU's memory, and what `galley check` prints.
typedef struct {
    size_t model;   // parameters and their gradients
    size_t optim;   // the optimizer's state
    size_t acts;    // the input, every layer's output and the gradients' pool (graph.h act_floats)
    size_t input;   // staged input: the second input buffer, on a GPU the targets' two buffers
    size_t other;   // layer state and scratch, the CPU's im2col space, step buffers, alignment
    size_t total;
} train_plan;
// For graph g built for the recipe and the training split `train`, one of d->world ranks;
// staging: input staging (a backend with upload_async, and not distributed.deterministic);
// targets: a device backend's staged targets (gl_backend.upload_declare).
void train_plan_of(const recipe_t *r, const gl_graph *g, const gl_dataset *train, const gl_dist *d, bool staging,
                   bool targets, train_plan *p);

// SIGTERM, SIGUSR1, SIGINT: stop at the next step boundary (train_signal_pending says which).
void train_signals_install(void);
void train_signals_restore(void);
int train_signal_pending(void);

// Threads to use for train.threads (0 = the cores this process may run on).
int train_threads(const recipe_t *r);

#endif
