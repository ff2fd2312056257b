// mllog.h: the MLPerf HPC log (log.mlperf): `:::MLLOG {json}` lines as mlperf_logging's
// compliance checker reads them (usage hpc, ruleset 3.0.0). Rank 0 writes; every line is flushed.
//
// Use: mllog_open (rank 0; a closed log is off and every call does nothing), then the events in
// the run's order: mllog_start (init, keys, run_start), per epoch
// mllog_epoch(.., true) / mllog_epoch(.., false), per evaluation mllog_eval, then
// mllog_run_stop and mllog_close. A resumed run continues the same file: mllog_open drops a
// run_stop at its end (and the epoch it closed, for a resume inside that epoch), and the header,
// init and run_start are not written again.
#ifndef GALLEY_MLLOG_H
#define GALLEY_MLLOG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/recipe.h"

typedef struct {
    FILE *f;            // NULL: off
    double wall_off;    // unix seconds minus runlog_now(): time_ms from the monotonic clock
    bool continued;     // the file already holds this run's run_start (a resume)
    bool in_epoch;      // an epoch_start was written without its epoch_stop
    int64_t epoch;      // the epoch open (in_epoch)
    double t_run_start; // monotonic seconds of run_start (this process, or the continued file's)
    double t_target;    // monotonic seconds the target was reached (NAN: not)
} gl_mllog;

// The file log.mlperf names (RUN_DIR/mlperf.log for `true`; run_dir "" then is an error), opened
// for writing now so that a bad path stops the run before training. resume: continue the file if
// it holds a run_start; open_epoch > 0: the resumed run starts inside that epoch (its checkpoint
// is not at an epoch's end), which continues open. 0, or -1 with the reason in why.
int mllog_open(gl_mllog *m, const char *path, bool resume, int64_t open_epoch, char *why, size_t len);
void mllog_close(gl_mllog *m);
// The resolved path of log.mlperf ("" when off): a file name, or run_dir/mlperf.log for `true`.
const char *mllog_path(const recipe_t *r, const char *run_dir, char *buf, size_t len);

// One line: type "POINT", "INTERVAL_START" or "INTERVAL_END"; value and metadata are JSON text
// (metadata NULL: none). t: monotonic seconds (runlog_now()).
void mllog_line(gl_mllog *m, double t, const char *type, const char *key, const char *value, const char *meta);

// The start of the log: init_start, the submission, system, batch, optimizer and schedule keys,
// staging_start/stop (data.loader.stage), init_stop and run_start; nothing when continued.
typedef struct {
    double t_init, t_stage0, t_stage1, t_start;  // monotonic seconds; staging: t_stage1 > t_stage0
    const char *benchmark;  // cosmoflow, deepcam, ... (the recipe's name when neither)
    const char *platform;
    int nodes, accelerators_per_node;
    int64_t global_batch, train_samples, eval_samples;
    double lr_scaled;  // the learning rate in use after batch scaling
} mllog_facts;
void mllog_start(gl_mllog *m, const recipe_t *r, const mllog_facts *x);
void mllog_epoch(gl_mllog *m, double t, int64_t epoch, bool start);
// eval_start/stop around [t0, t1] and the metric (eval_error for MAE, eval_accuracy otherwise),
// with the samples trained so far (samples_count); reached: the first time is time to train's end.
void mllog_eval(gl_mllog *m, double t0, double t1, int64_t epoch, int64_t samples, int metric, double v,
                bool reached);
// status: "success" (target reached) or "aborted".
void mllog_run_stop(gl_mllog *m, double t, int64_t epoch, const char *status);

#endif
