// runlog.h: what a training run shows and keeps. Only rank 0 prints and writes (the rank field;
// 0 until runs span processes). It prints the start banner, a progress line (updated in place on
// a terminal, a plain line every log.every steps otherwise) and the end summary with the time
// breakdown, and keeps a run directory:
//
//   <log.dir>/<name>/<YYYYmmdd-HHMMSS>/   (or `galley train --run-dir DIR`)
//     recipe.yaml                       the resolved recipe (recipe_emit)
//     metrics.jsonl                     one JSON object per logged step and per evaluation
//                                       (schema: docs/metrics-schema.json)
//     events.out.tfevents.*             TensorBoard scalars and the recipe as text
//     console.log                       what was printed (plain lines, no control characters)
//     summary.json                      the banner's facts, then the end summary
//
// Use: runlog_open, runlog_banner, then in the loop runlog_live (terminal), runlog_train every
// log.every steps and runlog_eval after each evaluation (print the evaluation line to lg->out),
// then runlog_finish and runlog_close. runlog_open allocates every buffer; the calls in the loop
// allocate nothing.
#ifndef GALLEY_RUNLOG_H
#define GALLEY_RUNLOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/loss.h"
#include "galley/recipe.h"
#include "galley/tfevents.h"

// Where the wall time of the steps goes. OTHER is the rest (logging, bookkeeping).
typedef enum {
    PHASE_DATA,      // waiting for a batch (shuffling at an epoch start, gathering it)
    PHASE_FORWARD,   // forward pass, loss and training metrics
    PHASE_BACKWARD,  // backward pass
    PHASE_COMM,      // exposed gradient communication (0 on one process)
    PHASE_OPTIM,     // optimizer step
    PHASE_CKPT,      // writing checkpoints (none yet)
    PHASE_EVAL,      // evaluation on the validation split
    PHASE_OTHER,
    PHASE_COUNT
} gl_phase;

// "data", "forward", "backward", "communication", "optimizer", "checkpoint", "evaluation", "other"
const char *phase_name(int phase);

#define GL_LOG_MAX_METRICS 4

// The metrics that apply to a run's target, loss aside (accuracy, top_k, mae, mean_iou).
typedef struct {
    int n;
    int id[GL_LOG_MAX_METRICS];  // METRIC_*
    double v[GL_LOG_MAX_METRICS];
} gl_metric_set;

void metric_set_from(gl_metric_set *s, const gl_metrics *m);

// One logged point: a training window (runlog_train, runlog_live) or an evaluation.
typedef struct {
    int64_t step;      // optimizer steps done
    int64_t epoch;     // the epoch of the last step, from 1
    int64_t epoch_step, epoch_steps;  // live line: steps done in this epoch, and per epoch
    double time;       // seconds since training started
    double loss;       // train: mean over the window; eval: validation loss
    gl_metric_set m;
    double lr;                  // train: learning rate of the last step
    double samples_per_s;       // train: over the window
    double phase[PHASE_COUNT];  // train: seconds per phase since training started (sum = time)
    double seconds;             // eval: how long the evaluation took
} gl_logpoint;

// The facts of the start banner (also in summary.json).
typedef struct {
    const char *name, *recipe_file;
    uint64_t hash;
    const char *device;     // "cpu"
    int ranks, threads;
    const char *precision;  // "fp32"
    int64_t global_batch, local_batch;
    int64_t parameters;
    double mflops;          // forward MFLOPs per sample
    char data[256];         // "synthetic spirals, classification, input [2]"
    int64_t train_samples, val_samples;
    double data_seconds;
    int64_t total_steps, steps_per_epoch;
    bool steps_set;         // train.steps replaced train.epochs
    char lr_rule[512];
    char target[128];       // "" without a target
    int main_metric;        // METRIC_*: the progress line's metric
} gl_runinfo;

// The end of a run (printed and written to summary.json).
typedef struct {
    const char *status;     // "target reached", "target not reached", "finished", "failed"
    int exit_code;
    int64_t steps, epochs, skipped, samples;
    double wall;                // seconds of the step loop (evaluation included)
    double phase[PHASE_COUNT];  // OTHER filled in by runlog_finish
    double samples_per_s;       // training samples per second of training (evaluation excluded)
    double peak_host_mib;       // peak resident memory
    double peak_device_mib;     // NAN: not measured (a CPU run, or a device backend that does not count)
    bool on_device;             // trained on a device backend (the done line then says "not measured")
    double last_loss;           // last validation values
    gl_metric_set last;
    double best_loss;
    int64_t best_loss_step;
    int best_metric;            // METRIC_NONE without a target
    double best;
    int64_t best_step;
    char iou[256];              // per-class IoU line, or ""
    char threads_note[256];     // how the CPU's idle threads waited (cpu_spin_describe), or ""
    char input_note[256];       // how many batches were copied a step ahead (input_stage_describe), or ""
    char optim_note[256];       // optimizer.fuse: where the update ran (optim_fuse_describe), or ""
    char replay_note[256];      // CUDA graphs: recordings and replays (graph_replay_describe), or ""
    bool mlperf;                // log.mlperf is on: the two times below are printed
    double time_to_train;       // MLPerf: run_start to the evaluation that reached the target (NAN: not reached)
    double time_to_first_step;  // from the run's start (process set-up included) to the first step's end
} gl_runsummary;

struct gl_runlog;
// A stream that prints to the terminal and keeps a copy in console.log.
typedef struct {
    struct gl_runlog *lg;
    FILE *term;  // NULL: not printed
    bool keep;   // copied into console.log
} gl_runlog_tee;

typedef struct gl_runlog {
    int rank;
    bool active;             // rank 0
    FILE *out, *err;         // print here: the caller's streams, teed into console.log
    FILE *term, *term_err;   // the caller's streams themselves
    bool tty;                // term is a terminal: live progress line
    int width;               // its width in columns
    int64_t every;           // log.every
    bool live_shown;         // a live line is on screen (cleared before anything else prints)
    double live_at;          // when it was drawn (seconds, monotonic)
    char dir[4096];          // the run directory ("" when none)
    FILE *console, *jsonl;
    gl_tfevents tb;
    bool tb_open;
    char *line, *json, *iobuf;  // preallocated: one line, one record, stdio buffers
    size_t line_cap, json_cap;
    double wall0;            // Unix time when the run started
    gl_runinfo info;
    gl_runlog_tee tee_out, tee_err;
    bool write_failed;
} gl_runlog;

// Opens the run log. With files (run_dir given, or log.files) it makes the run directory and
// writes recipe.yaml; messages go to err. Returns a GL_EXIT_* code (0 on success); call
// runlog_close whatever it returns.
int runlog_open(gl_runlog *lg, const recipe_t *r, const char *run_dir, int rank, FILE *out, FILE *err);
// Prints the start banner and writes summary.json (status "running").
void runlog_banner(gl_runlog *lg, const gl_runinfo *info);
// Seconds on a monotonic clock.
double runlog_now(void);
// Whether a live line is due (a terminal, and 0.2 s since the last one).
static inline bool runlog_live_due(const gl_runlog *lg, double now) { return lg->tty && now - lg->live_at >= 0.2; }
// Redraws the live progress line (terminal only).
void runlog_live(gl_runlog *lg, const gl_logpoint *p, double now);
// A training window: a metrics.jsonl record and TensorBoard scalars, and with print the plain
// progress line (on the terminal unless it is one; always in console.log).
void runlog_train(gl_runlog *lg, const gl_logpoint *p, bool print);
// An evaluation: a metrics.jsonl record and TensorBoard scalars.
void runlog_eval(gl_runlog *lg, const gl_logpoint *p);
// Prints the end summary (time breakdown, throughput, memory, best and last metrics) and
// writes summary.json.
void runlog_finish(gl_runlog *lg, gl_runsummary *s);
// Closes the files. Returns -1 (after saying so on err) if a write failed.
int runlog_close(gl_runlog *lg);

// The pieces, for tests and the report.
// Makes the run directory: dir itself when given (created with its parents; refused if it
// already holds a metrics.jsonl), else root/name/YYYYmmdd-HHMMSS (then -2, -3, ... if taken).
// Writes the path to out. Returns 0, or -1 with a message in err.
int rundir_make(char *out, size_t len, const char *dir, const char *root, const char *name, char *err,
                size_t errlen);
// A run name as a file or directory name: [A-Za-z0-9._-] (others become _), no leading dot,
// never empty ("run"): "../../etc/x" is "_._.._etc_x". Run directories and checkpoints use it.
void rundir_safe_name(char *out, size_t len, const char *name);
// "1h02m", "3m05s", "12s", "0.4s".
void format_duration(double s, char *buf, size_t len);
// A rate for a progress line: "0.42" below 10, "12.3" below 100, whole numbers above (a 4,050-
// token ViT at batch 1 on a CPU runs well under 1 sample/s, which "%.0f" showed as 0).
void format_rate(double v, char *buf, size_t len);
// The plain progress line, e.g.
// "step     50/1000 (epoch 1)  loss 0.6931  acc 0.5000 | lr 0.1 | 12345 samples/s | ETA 1m02s".
void format_progress(const gl_runlog *lg, const gl_logpoint *p, char *buf, size_t len);
// A metrics.jsonl record (no newline) into buf; kind is "train" or "eval". Returns its length, 0
// if it did not fit.
size_t format_record(const gl_logpoint *p, const char *kind, double wall_time, char *buf, size_t len);
// Short names of metrics on the terminal: acc, top_k, mae, miou.
const char *metric_short(int metric);

#endif
