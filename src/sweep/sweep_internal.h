// sweep_internal.h: what the sweep's files share: the sweep file as validated (sweep_file.c),
// trial values (sweep_space.c), the scheduler (sweep_sched.c: grid, random, ASHA), the journal
// (sweep_journal.c), results (sweep_results.c), messages between ranks (sweep_msg.c) and the
// driver (sweep_run.c).
#ifndef GALLEY_SWEEP_INTERNAL_H
#define GALLEY_SWEEP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/dist.h"
#include "galley/recipe.h"
#include "galley/sweep.h"

#define SWEEP_MAX_PARAMS 16
#define SWEEP_MAX_CHOICES 64
#define SWEEP_MAX_RUNGS 16
#define SWEEP_MAX_TRIALS 100000
// The longest choice text: a value with its quotes fits the 256-byte buffers sweep_value fills.
#define SWEEP_MAX_VALUE 200
// rng.h purpose of trial values and trial seeds (beyond rng_purpose's values).
#define SWEEP_RNG_PURPOSE 201u

enum { SWEEP_GRID = 0, SWEEP_RANDOM, SWEEP_ASHA };
enum { SP_CHOICE = 0, SP_UNIFORM, SP_LOGUNIFORM, SP_INT };
enum { GOAL_AUTO = 0, GOAL_MAX, GOAL_MIN };
enum { BUDGET_STEPS = 0, BUDGET_EPOCHS };
enum { TRIAL_SEED_BASE = 0, TRIAL_SEED_PER_TRIAL };

// One key of `space`.
typedef struct {
    const char *key;  // the recipe key as written (optimizer.lr, model.layers[0].units)
    int kind;         // SP_*
    double lo, hi;    // uniform, loguniform, int (inclusive)
    int64_t points;   // grid: a uniform or loguniform range taken at this many points (0: none)
    int nchoices;
    const char *choice[SWEEP_MAX_CHOICES];  // choice: the values' YAML text
    bool quoted[SWEEP_MAX_CHOICES];         // written quoted: kept a string
    yt_mark mark;
} sweep_param;

typedef struct {
    // The sweep file's keys (sweep_file.c's schema).
    const char *base, *dir, *metric;
    int method, goal, trial_seed;
    int64_t trials, seed, ranks_per_trial;
    struct {
        int key;  // BUDGET_*
        int64_t min, max, reduction_factor;
    } budget;
    // Derived.
    bool has_budget, maximize;
    sweep_param p[SWEEP_MAX_PARAMS];
    int np;
    int64_t grid_size;                  // grid: the number of points (product of sizes)
    int nrungs;                         // 1 unless ASHA
    int64_t rung_budget[SWEEP_MAX_RUNGS];  // in budget.key's unit; 0: the base recipe's own
    char base_path[4096], dir_path[4096], metric_name[32];
    double time_limit;  // the base recipe's train.time_limit: the sweep's (0: none)
    int64_t base_seed;  // the base recipe's seed
    uint64_t hash;      // of the sweep file, the overrides and the resolved base recipe
    const char *file;
    yt_doc *doc;
    yt_mark mark_rpt;   // where ranks_per_trial was written (the file's start if not)
    int noverrides;
    char *const *overrides;
} sweep_spec;

// Loads and checks the sweep file and its base recipe (every space key tried on it at both ends
// of its range). 0, or -1 with FILE:LINE:COL errors on err. dir: --dir (NULL: the file's).
int sweep_load(sweep_spec *s, const sweep_opts *o, FILE *err);
void sweep_free(sweep_spec *s);
const char *sweep_method_name(int method);

// ---- trial values (sweep_space.c) ----

// Param i's value for trial id, as override text ("0.0123", "adamw", "\"10\"").
void sweep_value(const sweep_spec *s, int64_t trial, int i, char *buf, size_t len);
// The trial's own seed (trial_seed: per_trial) or the base recipe's.
int64_t sweep_trial_seed(const sweep_spec *s, int64_t trial, int64_t base_seed);
// Number of trials the sweep runs (grid: its size, or trials if smaller).
int64_t sweep_ntrials(const sweep_spec *s);
// The overrides for a trial at a rung: the base overrides, the values, the budget, its seed,
// checkpoint.dir=SWEEP_DIR/trials/<id>/ckpt, checkpoint.at_end=true, log.files=true; time_left > 0 adds
// train.time_limit. Strings in *ov (n returned) are malloc'd: sweep_overrides_free.
int sweep_overrides(const sweep_spec *s, int64_t trial, int rung, int64_t base_seed, double time_left, bool for_best,
                    char ***ov);
void sweep_overrides_free(char **ov, int n);

// ---- the scheduler (sweep_sched.c): which trial trains next at which rung ----

enum { TS_PENDING = 0, TS_RUNNING, TS_PAUSED, TS_DONE, TS_FAILED };
typedef struct {
    int state;    // TS_*
    int rung;     // the rung running or last finished
    double metric[SWEEP_MAX_RUNGS];  // at each rung finished (NAN: not)
    int64_t steps;   // the trial's step count so far
    double seconds;  // training time over all its runs
    int code;        // the last run's exit code
    char msg[240];   // failed: why
} sweep_trial;

typedef struct {
    const sweep_spec *s;
    int64_t n, next;  // trials; the next new one
    sweep_trial *t;
} sweep_sched;

typedef struct {
    int64_t trial;
    int rung;
} sweep_job;

void sched_init(sweep_sched *sc, const sweep_spec *s);
void sched_free(sweep_sched *sc);
// 1: *job is next (a paused run first, then an ASHA promotion, then a new trial); 0: nothing yet
// (wait for a running trial); -1: the sweep is over.
int sched_next(sweep_sched *sc, sweep_job *job);
void sched_start(sweep_sched *sc, sweep_job job);
// A run ended: state TS_DONE (metric at its rung), TS_FAILED (msg) or TS_PAUSED (stopped, to resume).
void sched_end(sweep_sched *sc, sweep_job job, int state, double metric, int64_t steps, double seconds, int code,
               const char *msg);
// After replaying a journal: runs that started but never ended are paused.
void sched_pause_running(sweep_sched *sc);
// "done" (reached the last rung), "stopped" (ASHA did not promote it), "failed", "running", ...
const char *sched_state_name(const sweep_sched *sc, int64_t trial);
// The best trial: the best metric among trials at the highest rung any finished; -1 if none.
int64_t sched_best(const sweep_sched *sc);
// The trial's latest metric (NAN if none) and the rung it is from.
double sched_metric(const sweep_sched *sc, int64_t trial, int *rung);
// a better than b under the sweep's goal (NAN is worst).
bool sched_better(const sweep_spec *s, double a, double b);

// ---- the journal (sweep_journal.c) ----

typedef struct {
    FILE *f;
    char path[4200];
} sweep_journal;

// Creates SWEEP_DIR/journal.jsonl with its header, or (resume) replays it into sc. 0, or -1
// with the reason on err (GL_EXIT_USAGE).
int journal_open(sweep_journal *j, const sweep_spec *s, sweep_sched *sc, bool resume, int groups, FILE *out,
                 FILE *err);
void journal_start(sweep_journal *j, sweep_job job, int group, int64_t budget);
void journal_end(sweep_journal *j, const sweep_sched *sc, sweep_job job, int64_t budget);
void journal_note(sweep_journal *j, const char *event, int code);
void journal_close(sweep_journal *j);

// ---- results (sweep_results.c) ----

// results.csv and results.jsonl (written whole, then renamed into place), and best.yaml.
void results_write(const sweep_spec *s, const sweep_sched *sc, int64_t base_seed, FILE *err);
int results_best_yaml(const sweep_spec *s, const sweep_sched *sc, int64_t base_seed, FILE *err);
// One line per event on the console, and the whole table.
void results_line(const sweep_spec *s, const sweep_sched *sc, sweep_job job, int group, bool start, FILE *out);
void results_table(const sweep_spec *s, const sweep_sched *sc, FILE *out);
// "lr=0.0123 batch_size=32": the trial's values, short key names.
void results_values(const sweep_spec *s, int64_t trial, char *buf, size_t len);
// The budget of a rung as a number in budget.key's unit (the base recipe's own when 0).
int64_t sweep_rung_budget(const sweep_spec *s, int rung);

// ---- messages between ranks (sweep_msg.c) ----

enum { MSG_ASK = 1, MSG_RUN, MSG_STOP };
typedef struct {
    int32_t kind, group, rung, code, seg, state;  // state: TS_* of the run that ended (ASK)
    int32_t signalled, pad;                       // ASK: a signal reached the leader
    int64_t trial, steps;
    double metric, seconds, time_left;
    char msg[240];
} sweep_msg;

// World messages: group leaders to the coordinator (world rank 0) and back. Waits poll and sleep
// (a group may wait for the coordinator for as long as a trial trains): no timeout.
void msg_send(gl_dist *world, const sweep_msg *m, int to);
void msg_recv(gl_dist *world, sweep_msg *m, int from);
// A waiting message from any rank: 1 (into *m, *from), or 0.
int msg_poll(gl_dist *world, sweep_msg *m, int *from);
// The leader's message to its group (rank 0 of g to all), waiting without a timeout.
void msg_group_bcast(gl_dist *g, sweep_msg *m);
// A short idle wait (1 ms) between polls.
void msg_nap(void);

// ---- a trial's metric ----

// The last validation record of the trial's newest run that has one: metric value into *v.
// 0, or -1 with why in msg.
int sweep_read_metric(const char *trial_dir, const char *metric, double *v, char *msg, size_t len);

#endif
