// optim.h: optimizers over the model's parameter block: SGD, AdamW and LAMB, with optional
// clipping by the global gradient norm. The update rules follow PyTorch (torch.optim.SGD,
// torch.optim.AdamW, torch.nn.utils.clip_grad_norm_) and NVIDIA apex FusedLAMB, so
// hyper-parameters carry over.
//
//   optim_bytes(r, g)           arena bytes for the state (after graph_build)
//   optim_init(o, r, g, a)      carve the state (after graph_bind); moments start at zero
//   norm = optim_step(o, g, lr) one update of g->params from g->grads at learning rate lr
//   optim_step_scaled(..., s)   the same for gradients of a loss multiplied by s (fp16 loss scaling)
//   loss_scale_*                the dynamic loss scale of train.precision fp16 (loss_scale.c)
//
// Work is split into chunks of at most GL_OPTIM_CHUNK elements of one parameter tensor; norms
// are summed per chunk in double and then over chunks in parameter order, so every result is
// bitwise the same for any number of OpenMP threads.
#ifndef GALLEY_OPTIM_H
#define GALLEY_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "galley/arena.h"
#include "galley/graph.h"
#include "galley/recipe.h"

#define GL_OPTIM_CHUNK 4096

// A stretch of one parameter tensor: the unit of parallel work and of partial sums (backend.h,
// so a GPU backend can run the update).
typedef gl_chunk gl_optim_chunk;

typedef struct gl_optim {
    int type;  // OPT_*
    const struct gl_optim_rule *rule;  // optim_rule(type)
    double momentum, weight_decay;
    bool nesterov;
    double beta1, beta2, eps;
    double clip_norm;  // NAN: no clipping
    int64_t n;         // parameters
    int64_t steps;     // updates applied so far (Adam's bias correction uses steps + 1)
    float *velocity;   // [n] SGD momentum buffer (NULL without momentum)
    float *m, *v;      // [n] AdamW and LAMB first and second moments (NULL for SGD)
    int ntensors, nchunks;
    gl_optim_chunk *chunks;  // [nchunks]
    double *partial;         // [3 * nchunks] per-chunk sums of squares
    double *ratio;           // [ntensors] LAMB: the trust ratio each tensor got at the last step
    double last_scale;       // the factor the last step multiplied the gradients by (1: not clipped)
    // Tensor parallelism: sums the split tensors' squares over the tensor group, so the norm (and
    // clip_norm's factor, and the non-finite check) is the whole model's on every rank. NULL: none.
    const gl_reducer *split_sum;
    // The update in backward (optimizer.fuse, optim_fuse.c). Layer i's chunks are
    // [layer_chunk[i], layer_chunk[i + 1]) (chunks follow the layers' parameters in order).
    int *layer_chunk;  // [nlayers + 1]
    struct {
        bool on;          // optimizer.fuse
        bool armed;       // this step's update runs in backward (optim_fuse_arm)
        bool bad;         // a chunk's gradients were not finite: no chunk after it is updated
        gl_optim_args a;  // this step's scalars, fixed when armed
        gl_graph *g;
        uint8_t *seen;    // [nchunks] 0: not yet; 1: its sum of squares taken in backward; 2: and updated
        double seconds;   // spent updating inside this step's backward
        int64_t tried, steps;  // steps this process armed for (optimizer.fuse on), and updated in backward
        const char *why_not;  // why the last step that could not was not (optim_fuse_arm), or NULL
    } fuse;
} gl_optim;

// ---- the registry (optim_registry.c): one entry per rule ---------------------------------------
// A rule is one file (sgd.c, adam.c's adamw and lamb) that defines `const gl_optim_rule
// optim_rule_<name>`, plus its line in GL_OPTIM_RULES (backend_types.h), which gives it its OPT_*
// value; with CUDA, its device update is cuda_optim_<name> (a cuda_rule_fn, in cuda_optim.cu or a
// .cu file of its own), which backend.h's optim_update finds by gl_optim_args.rule.
#define GL_OPTIM_MAX_STATE 2

// Its name (optimizer.type, and the "optimizer" attribute of checkpoints) is its GL_OPTIM_RULES
// line's: optim_name(type).
typedef struct gl_optim_rule {
    // The [n] state buffers it keeps, by their checkpoint dataset names (a gl_optim field each:
    // velocity, m, v), in checkpoint order; NULL past the last.
    const char *state[GL_OPTIM_MAX_STATE];
    bool (*keeps_state)(const recipe_t *r);  // NULL: always; else whether this recipe keeps them
    bool adam;  // its scalars include adam_args' bias corrections
    // One CPU update of w from g over o->chunks (optim_internal.h); lr: the double learning rate.
    void (*step)(gl_optim *o, const gl_optim_args *a, double lr, float *w, float *g);
    // One chunk of step's loop (its update of w from g); NULL where the update of a chunk needs
    // sums over others first (LAMB's trust ratios): such a rule never runs in backward.
    void (*chunk_step)(gl_optim *o, const gl_optim_args *a, const gl_optim_chunk *ch, float *w, float *g);
    // The same through the backend's optim_update (a device's memory); ends before be->sync().
    void (*device_step)(gl_optim *o, const struct gl_backend *be, const gl_optim_args *a, float *w, float *g);
    // Checks beyond the schema: NULL when r is fine, else the message and *key, the key to name.
    const char *(*check)(const recipe_t *r, const char **key);
} gl_optim_rule;

// The rule of an OPT_* value, or NULL for none.
const gl_optim_rule *optim_rule(int type);
// "sgd", "adamw", ... for an OPT_* value ("?" for none): recipes and checkpoints store these.
const char *optim_name(int type);
// Every rule's name in OPT_* order, then NULL: optimizer.type's choices (schema.c).
extern const char *const optim_names[];

// Arena bytes optim_init will take for this recipe's optimizer over g's parameters.
size_t optim_bytes(const recipe_t *r, const gl_graph *g);
void optim_init(gl_optim *o, const recipe_t *r, const gl_graph *g, gl_arena *a);
// Clips the gradients (if optimizer.clip_norm is set) and updates g->params from g->grads at
// learning rate lr. Returns the global gradient L2 norm before clipping. A NaN or Inf norm
// leaves parameters, gradients and state untouched (the step is skipped): the caller should
// stop and report it.
double optim_step(gl_optim *o, gl_graph *g, double lr);
// optim_step for gradients of a loss multiplied by scale (a power of two): they are divided by
// it first, in the same multiply that clipping uses, so the norm returned and compared with
// optimizer.clip_norm is the unscaled one. scale 1 is optim_step exactly.
double optim_step_scaled(gl_optim *o, gl_graph *g, double lr, double scale);

// optimizer.fuse (optim_fuse.c): arms this step's update to run inside backward, each layer's
// parameters as soon as backward is done with them (g's params_done hook), with the bits of the
// pass after backward. refuse: NULL where the caller's conditions hold (one process, no
// distributed.deterministic parts, no loss scale, train.nonfinite stop: nothing after backward
// changes the update or undoes it), else why not, in words; it also needs optimizer.fuse, the
// CPU, no clip_norm, no tensor group and a rule with chunk_step. lr: this step's learning rate,
// which optim_step must then be given. Returns whether it armed; optim_step finishes an armed
// step (the norm, and the chunks backward did not reach). Where a chunk's gradients are not
// finite, it and the layers backward reaches after it are not updated and optim_step returns the
// non-finite norm, but the layers before it were: the caller stops the run (train.nonfinite:
// stop) and must not save these weights.
bool optim_fuse_arm(gl_optim *o, gl_graph *g, double lr, const char *refuse);
// Disarms an armed step whose backward did not run (its loss was not finite): nothing updated.
void optim_fuse_cancel(gl_optim *o);
// The run summary's line on it ("" where optimizer.fuse is false or no step was trained).
void optim_fuse_describe(const gl_optim *o, char *buf, size_t len);

// ---- dynamic loss scaling (train.precision fp16; loss_scale.c) ----------------------------------
// fp16 keeps 5 exponent bits, so small gradients flush to zero: the loss gradient is multiplied
// by `scale` before backward and the gradients divided by it before clipping and the update. A
// step whose gradients hold a NaN or Inf (the scale was too large) is skipped and the scale
// halves; after GL_LOSS_SCALE_GROWTH consecutive finite steps it doubles. Powers of two only,
// so scaling and unscaling are exact. Pure host logic: the training loop feeds it each step's
// outcome and saves its state in checkpoints.
#define GL_LOSS_SCALE_INIT 65536.0   // 2^16
#define GL_LOSS_SCALE_MIN 1.0
#define GL_LOSS_SCALE_MAX 16777216.0  // 2^24
#define GL_LOSS_SCALE_GROWTH 2000     // finite steps in a row before the scale doubles

typedef struct {
    bool on;          // off (every precision but fp16): scale stays 1 and update always says step
    double scale;     // the factor of the loss gradient
    int64_t good;     // finite steps since the scale last changed
    int64_t skipped;  // steps skipped for non-finite gradients, over the run (and its resumes)
} gl_loss_scale;

enum { LOSS_SCALE_KEPT = 0, LOSS_SCALE_GREW = 1, LOSS_SCALE_BACKED_OFF = -1 };

// Fresh state: scale GL_LOSS_SCALE_INIT when on, else 1.
void loss_scale_init(gl_loss_scale *s, bool on);
// One step's outcome (finite: every gradient finite). Non-finite: the step must be skipped, the
// scale halves (not below GL_LOSS_SCALE_MIN) and LOSS_SCALE_BACKED_OFF is returned; finite: the
// step runs, and after GL_LOSS_SCALE_GROWTH in a row the scale doubles (not above
// GL_LOSS_SCALE_MAX): LOSS_SCALE_GREW. Off: always LOSS_SCALE_KEPT.
int loss_scale_update(gl_loss_scale *s, bool finite);
// Restores saved state (a checkpoint's). 0; -1 when it is not a state update could have made
// (scale not a power of two in [MIN, MAX], counts negative): s is then fresh.
int loss_scale_restore(gl_loss_scale *s, double scale, int64_t good, int64_t skipped);

#endif
