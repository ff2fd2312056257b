// train_internal.h: what the training loop's files share: one step's forward, backward and
// reductions across ranks (train_step.c), and checkpoint save and resume (train_ckpt.c).
#ifndef GALLEY_TRAIN_INTERNAL_H
#define GALLEY_TRAIN_INTERNAL_H

#include "galley/arena.h"
#include "galley/ckpt.h"
#include "galley/dist.h"
#include "galley/graph.h"
#include "galley/loader.h"
#include "galley/loss.h"
#include "galley/optim.h"
#include "galley/recipe.h"

// Flags every rank raises for itself; a step sums them over ranks so that all act together.
enum { FLAG_SIGNAL = 0, FLAG_TIME, FLAG_CKPT, FLAG_COUNT };
#define STEP_VEC (GL_METRICS_PACKED + 1 + FLAG_COUNT)  // metrics, non-finite parts, flags

typedef struct {
    const recipe_t *r;
    gl_dist *d;  // the data-parallel group (every rank without tensor parallelism)
    // Tensor parallelism (train_ctx_grid; NULL without): every rank, the grid, the whole model's
    // layout (checkpoints are written and read whole), the optimizer's norm summed over the tensor group.
    gl_dist *world;
    struct gl_grid *grid;
    const gl_graph *full;
    gl_reducer split_sum;
    gl_graph *g;
    const gl_backend *be;
    const gl_loss *loss;
    gl_optim *opt;
    gl_gradsync *sync;
    int parts;          // distributed.deterministic: parts of the global batch; 0: one per rank, reduced by sum
    int local_parts;    // parts this rank computes
    float *part_grads;  // [local_parts, nparams] (deterministic)
    float *all_grads;   // [parts, nparams] (deterministic, more than one rank)
    double *part_vec;   // [local_parts, STEP_VEC]
    double *all_vec;    // [parts or world, STEP_VEC]
    float *state_tmp;   // [state_floats]: layer state kept across the parts that must not update it
    int64_t state_floats;
    gl_metrics lm, sm;  // scratch: one part's metrics; the last step's global metrics
    double comm_s;      // the last step's communication (reductions, gradient waits and sums)
    double bwd_s;       // the last step's backward
    double flags[FLAG_COUNT];  // the last step's flags, summed over ranks
    gl_reducer bn_sum;  // distributed.sync_batchnorm: batch-norm sums over ranks
    int64_t step;       // the step being computed (names collectives in timeout messages)
    gl_loss_scale ls;   // train.precision fp16: the loss gradient's factor (off: 1)
    bool staged;        // the step's batch is already in the model input (input_stage_take)
    struct input_stage *stage;  // the run's input staging (evaluation batches' targets), or NULL
    bool said_later;    // warned that checkpoint.dir holds later checkpoints of this name (train_ckpt.c)
} train_ctx;

// Arena bytes train_ctx_init carves for this recipe, model and rank count.
size_t train_ctx_bytes(const recipe_t *r, const gl_graph *g, const gl_dist *d);
void train_ctx_init(train_ctx *c, const recipe_t *r, gl_dist *d, gl_graph *g, const gl_loss *loss, gl_optim *opt,
                    const gl_dataset *train, gl_arena *a);
// Tensor parallelism: world (every rank), the grid and the whole model's layout (NULL at
// tensor_parallel 1: deterministic tensor_parts alone); the optimizer's norm then sums the
// split tensors over the tensor group.
void train_ctx_grid(train_ctx *c, gl_dist *world, struct gl_grid *grid, const gl_graph *full);
void train_ctx_free(train_ctx *c);
// One global step on this rank's part of batch b: forward, loss, and (when every part's loss
// is finite) backward with the gradients summed over ranks into g->grads. flags: this rank's
// FLAG_* (summed into c->flags). Returns the global mean loss, NAN if any part's was not
// finite (then *bad says whether one of this rank's was, and no backward ran).
double train_step(train_ctx *c, const gl_batch *b, int64_t step, const double *flags, int *bad);
// One evaluation pass over lv into m (global: reduced over ranks).
int train_evaluate(train_ctx *c, gl_loader *lv, gl_metrics *m, int64_t step, FILE *err);
// Copies rank 0's layer state (batch-norm running statistics) to every rank.
void train_share_state(train_ctx *c, int64_t step);

// ---- input staging (input_stage.c): the next batch copied while the current one computes ----

typedef struct input_stage {
    const gl_backend *be;
    gl_graph *g;
    gl_loader *L;
    bool on;
    float *buf[2];      // the model input's two buffers; g->input.data is one of them
    void *tbuf[2];      // device backends (upload_declare): the targets' two buffers, else NULL
    size_t trow;        // bytes of one sample's targets
    bool have, failed;  // a next batch was taken early (and its read failed)
    gl_batch next;
    float *next_buf;    // where its rows went
    void **pinned;      // the page runs of the loader's slots the backend pinned (host_pin)
    int npinned;
    bool targets_pinned;  // the runs cover the slots' targets too (else their inputs only)
    int64_t steps, early;  // batches taken, and of those staged a step ahead
} input_stage;

// Arena bytes of the second input buffer, and with targets (a device backend: upload_declare)
// of the targets' two buffers (d: the training split's shapes).
size_t input_stage_bytes(const gl_graph *g, const gl_dataset *d, bool targets);
// on: stage batches (false: each step copies its own, as distributed.deterministic's parts do).
// note gets a line for the log when the GPU cannot pin the loader's slots (else empty).
void input_stage_init(input_stage *s, const gl_backend *be, gl_graph *g, gl_loader *L, bool on, gl_arena *a,
                      char *note, size_t len);
// This step's batch, as loader_next. *staged: its rows are already in g->input.data (a copy
// the step's kernels wait for), so the step must not copy them again.
int input_stage_take(input_stage *s, gl_batch *b, bool *staged, FILE *err);
// A batch not staged (taken at its step, or an evaluation batch): its targets are copied now,
// in order with the kernels, into the target buffer beside the current input, and declared, so
// that no loss copies them into a buffer of its own. Nothing where targets are not staged.
void input_stage_targets(input_stage *s, const gl_batch *b);
// Takes the next batch if the loader has it ready and starts copying it to the other buffer.
// Call only when another step will follow.
void input_stage_ahead(input_stage *s, FILE *err);
// One line for the end summary: how many batches were staged ahead ("" when staging is off).
void input_stage_describe(const input_stage *s, char *buf, size_t len);
// Waits for a copy in flight, gives back a batch taken early, unpins the slots. Before loader_free.
void input_stage_free(input_stage *s);

// ---- device (train_device.c) ----

// The backend for train.device on this rank (auto: its local rank's GPU, else the CPU), set to
// train.precision. desc names it for the banner; note gets the line that says why auto chose
// the CPU (rank 0 only, else empty; it names an explicit train.precision the CPU cannot honour),
// printed once the run log is open; *precision the PRECISION_* in effect (auto resolved). NULL,
// with the error printed, when train.device is cuda and no GPU can be used, or the GPU cannot
// do the precision asked for.
const gl_backend *train_pick_backend(const recipe_t *r, const gl_dist *d, char *desc, size_t len, char *note,
                                     size_t note_len, int *precision, FILE *err);

// One rank's GPU for the memory check: gpu 0 on the CPU.
typedef struct {
    unsigned char uuid[16];
    int32_t gpu;
} train_gpu_id;
// The ranks of all[world] on rank's GPU (rank included; 0 when rank is on the CPU).
int train_gpu_sharing(const train_gpu_id *all, int world, int rank);
// GL_EXIT_OK when `bytes` of arena (the whole plan) fits the device of a device backend (or the
// backend cannot tell), times the ranks that share its GPU (by UUID); else prints the numbers
// and the way out, and returns GL_EXIT_USAGE. Every rank calls it (they gather GPU identities
// and agree on the verdict, so all stop together).
int train_device_fits(const recipe_t *r, const gl_backend *be, gl_dist *d, size_t bytes, FILE *err);

// ---- checkpoints (train_ckpt.c) ----

// Picks what `--resume` names (a file, or "auto": the newest good checkpoint of this run in
// checkpoint.dir, falling back past damaged ones). path[0] = 0: start fresh. *step: its step.
// Rank 0 decides and tells the others. quiet_fresh: say nothing when none is found (the caller
// reports it). Returns GL_EXIT_OK or GL_EXIT_USAGE (printed).
int train_resume_pick(const recipe_t *r, const char *resume, gl_dist *d, char *path, size_t len, int64_t *step,
                      bool quiet_fresh, FILE *out, FILE *err);
// Rank 0 reads path into the model, optimizer and st; every rank gets the same. GL_EXIT_OK, or
// GL_EXIT_USAGE / GL_EXIT_RUNTIME (printed).
int train_resume_load(train_ctx *c, const char *path, gl_ckpt_state *st, FILE *err);
// Rank 0 writes the checkpoint of st->step; every rank learns the outcome. 0, or -1 (printed).
int train_save(train_ctx *c, const gl_ckpt_state *st, FILE *out, FILE *err, double *seconds);
// Tensor parallelism (train_ckpt_whole.c; c->full set). The tensor group of data rank 0 gathers
// the whole model (parameters and optimizer state, bufs[4]) onto its tensor rank 0, which gets
// the views wg, wo over them and a return of 1 (others 0; free bufs with train_whole_free).
int train_whole_gather(train_ctx *c, float *bufs[4], gl_graph *wg, gl_optim *wo, int64_t step);
void train_whole_free(float *bufs[4]);
// World rank 0 reads path whole; every rank takes its slices. GL_EXIT_OK or the exit code (printed).
int train_whole_load(train_ctx *c, const char *path, gl_ckpt_state *st, FILE *err);

#endif
