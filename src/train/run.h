// run.h: one training run as an object, so that train_run (train.c) reads as its story: open
// sets everything up (run_open.c, run_data.c), the banner says what will run (run_banner.c), the
// loop steps, checkpoints and evaluates (run_loop.c, run_step.c, run_eval.c), finish writes the
// summary (run_finish.c), and close frees whatever open set up, a partly opened run too.
#ifndef GALLEY_TRAIN_RUN_H
#define GALLEY_TRAIN_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/cpu_spin.h"  // gl_spin: the CPU's idle threads
#include "galley/grid.h"      // gl_grid: data x tensor parallel ranks
#include "galley/lr.h"        // gl_lr: the learning-rate schedule
#include "galley/mllog.h"     // gl_mllog: the MLPerf HPC log (log.mlperf)
#include "galley/runlog.h"    // gl_runlog: console, metrics and summary of the run directory
#include "galley/train.h"     // train_opts, train_result
#include "train/train_internal.h"  // train_ctx, input_stage, the checkpoint calls

static inline double now_s(void) { return runlog_now(); }

// The training steps since the last metrics record.
typedef struct {
    gl_metrics m;
    int64_t samples, steps;
    double t0, eval0;  // when it started, and the evaluation seconds by then (excluded from its rate)
} train_window;

typedef struct {
    // What was asked.
    const recipe_t *r;
    const train_opts *opts;
    train_result *res;
    FILE *out, *err;  // the caller's streams; once the run log is open, its streams (kept in console.log)
    gl_dist solo;     // the one process's ranks when opts->dist is NULL
    gl_dist *d;       // every rank of the job
    // Tensor parallelism (run_grid.c): the grid, and the data-parallel group (d without it).
    gl_grid grid;
    bool grid_on;
    gl_dist *dp;
    gl_graph full;  // the whole model's layout (tensor parallelism: init and checkpoints)
    bool full_on;

    // Device and checkpoint to continue (run_open.c).
    const gl_backend *be;
    char device[640], device_note[640];  // the banner's device; the line that says why (printed once the log is open)
    int precision;                       // PRECISION_* in effect
    int threads;
    char resume_path[4096];  // the checkpoint to continue or evaluate ("": start fresh)
    int64_t resume_step;

    // Data and model (run_data.c, run_open.c).
    size_t loader_bytes, bytes;  // the loaders' memory; the model's arena (the plan)
    uint64_t host;               // the machine's memory (0: unknown)
    gl_loader *lt, *lv;          // training and validation loaders
    gl_dataset train, val;
    gl_graph g;
    int64_t batch, steps_per_epoch, total_steps, epochs;
    double t_data;  // seconds to open the data
    bool staging;   // the next batch's copy overlaps the step (not distributed.deterministic)
    gl_arena arena;
    gl_optim opt;
    gl_loss loss;
    train_ctx c;
    input_stage stage;
    char stage_note[400];
    gl_ckpt_state ck;  // the checkpoint read (resume) and written
    bool scaler_restored;
    gl_metrics tm, vm;  // training since the last evaluation, validation
    train_window w;
    gl_lr lr;
    gl_runlog lg;
    bool arena_on, ctx_on, stage_on, log_on;  // what run_close frees besides the graph and loaders

    // The loop (run_loop.c).
    int64_t step, epoch, skipped, seen, seen_total, best_step, samples_base;
    int64_t eval_step;  // the step of the newest evaluation the run's records hold (-1: none)
    double seconds_base;
    double ph[PHASE_COUNT];
    double t_start, t_mark, t_now, data_mark, t_ckpt;
    gl_spin spin;
    double step_max, eval_max, ckpt_s;  // the longest step, evaluation and checkpoint (train.time_limit)
    const char *stopped_by;             // a signal or train.time_limit stopped the run (NULL: not)

    // The MLPerf HPC log (run_mllog.c) and its times (monotonic seconds; 0: not yet).
    gl_mllog ml;
    double t_init, t_stage0, t_stage1, t_first_step;  // run_init; data.loader.stage's copy; the first step's end
} gl_run;

// ---- open and close (run_open.c, run_data.c) ----

// Sets u up for train_run's arguments; nothing is allocated.
void run_init(gl_run *u, const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res);
// Everything the run needs: backend, checkpoint to continue, data, model, run log. Every rank
// agrees on the outcome. GL_EXIT_OK, or the GL_EXIT_* code (printed); run_close either way.
int run_open(gl_run *u);
// The loaders and the model graph (part of run_open). GL_EXIT_OK or GL_EXIT_USAGE (printed).
int run_open_data(gl_run *u);
// The steps and the memory plan of the model (part of run_open). GL_EXIT_OK or GL_EXIT_USAGE.
int run_plan(gl_run *u);
// Frees whatever run_open set up.
void run_close(gl_run *u);
// distributed.tensor_parallel (run_grid.c): checks it against the ranks and the recipe (exit 2
// on every rank, rank 0 naming the key), then splits the world into the grid; u->dp is the
// data-parallel group (u->d without tensor parallelism). GL_EXIT_OK or GL_EXIT_USAGE.
int run_grid_open(gl_run *u);
// The tensor view the model is built with (NULL: none).
const gl_tp *run_grid_tp(const gl_run *u);
// After graph_build: the whole model's layout (u->full) where the grid splits it. GL_EXIT_OK or GL_EXIT_USAGE.
int run_grid_full(gl_run *u);
// The first parameters: graph_init_params, or with tensor parallelism the whole model's, sliced.
void run_grid_init_params(gl_run *u);
void run_grid_close(gl_run *u);

// ---- the run (run_banner.c, run_loop.c, run_step.c, run_eval.c, run_finish.c) ----

// What will run: the run log's banner and the lines about ranks, resume and precision.
void run_banner(gl_run *u);
// The loop's counters and clocks, from the checkpoint continued (if any).
void run_start(gl_run *u);
// Trains to the end, the target or a stop; the last checkpoint. A GL_EXIT_* code.
int run_loop(gl_run *u);
// One training step: the batch, forward, backward, the optimizer. GL_EXIT_OK or GL_EXIT_RUNTIME.
int run_step(gl_run *u);
// One evaluation on the validation split, recorded and reported (by `galley eval`, and by the
// loop at each evaluation). GL_EXIT_OK (res->target_reached 1: the loop's target was just
// reached) or GL_EXIT_RUNTIME.
int run_evaluate(gl_run *u);
// The end: notes, the summary in the run log and the result. Returns the exit code (code, or
// GL_EXIT_TARGET when a target was not reached).
int run_finish(gl_run *u, int code);

// A metrics record of the window of steps up to now (print: also a plain progress line).
void run_window_log(gl_run *u, double now, bool print);
// The MLPerf HPC log (run_mllog.c): opened around the run log (GL_EXIT_USAGE when it cannot be
// written), its start (at run_start), each evaluation, and run_stop with the summary's times.
int run_mllog_open(gl_run *u, bool in_run_dir);
void run_mllog_start(gl_run *u);
void run_mllog_eval(gl_run *u, double te, double te2);
void run_mllog_stop(gl_run *u, double t, gl_runsummary *sum);

// "validation accuracy >= 0.9": the recipe's target in words.
const char *run_target_words(const recipe_t *r, char *buf, size_t len);
// Whether v (the target metric's value) meets train.target (NaN: no).
int run_target_met(const recipe_t *r, double v);

#endif
