// ckpt.h: checkpoints. One HDF5 file holds everything a run needs to continue bitwise where it
// stopped: every parameter by layer and name, layer state (batch-norm running statistics), the
// optimizer's state, the step, the data position, the best metrics so far and the resolved recipe.
// Layout (format "galley-checkpoint", format_version 1; documented in the README):
//
//   /                          attributes: format, format_version, galley_version, step, epoch,
//                              next_batch, samples, skipped, world_size, parts, threads, seed,
//                              recipe_hash, optimizer, optimizer_steps, created, train_seconds,
//                              best, best_step, best_loss, best_loss_step, epochs_run,
//                              evaluated (0: the evaluation due at this step had not run; absent
//                              in older files, read as 1);
//                              with train.precision fp16 also loss_scale, loss_scale_good,
//                              loss_scale_skipped (absent: a fresh scale on resume)
//   /recipe                    the resolved recipe (YAML text; `galley train` can run it)
//   /params/<layer>/<param>    float32, the parameter's shape (e.g. dense weight [out, in])
//   /state/<layer>/running     float32 [2C + 1]: batch-norm running mean, variance, ready flag
//   /optim/<buffer>/<layer>/<param>   float32, shaped like the parameter; buffer is velocity
//                              (SGD with momentum) or m and v (AdamW, LAMB)
//
// Every dataset carries a crc32c attribute (CRC-32C of its bytes), checked on reading.
// Writing is atomic: a temporary file in the same directory, fsync, rename, fsync of the
// directory; a failure leaves the previous checkpoints as they were.
#ifndef GALLEY_CKPT_H
#define GALLEY_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/graph.h"
#include "galley/optim.h"
#include "galley/recipe.h"

#define GL_CKPT_FORMAT "galley-checkpoint"
#define GL_CKPT_VERSION 1

// The loop's position and records, besides the model and the optimizer.
typedef struct {
    int64_t step;        // optimizer steps done (= training batches consumed)
    int64_t epoch;       // the epoch of the last step
    int64_t samples;     // training samples seen
    int64_t skipped;     // steps skipped (train.nonfinite: skip)
    int world, parts, threads;
    double train_seconds;  // wall time of the training so far, over all runs
    double best, best_loss;
    int64_t best_step, best_loss_step;
    int epochs_run;
    // Whether best and best_loss include the evaluation of this step's weights. A checkpoint is
    // written before the step's evaluation, and a stop at a step due for one skips it: the run
    // that resumes from a checkpoint with false evaluates first (run_loop).
    bool evaluated;
    // fp16's dynamic loss scale (optim.h): written when scaler.on; read back with
    // scaler_saved set when the file has it (older files and other precisions do not).
    gl_loss_scale scaler;
    bool scaler_saved;
} gl_ckpt_state;

// Writes the checkpoint to path atomically. 0, or -1 with the reason in err[errlen] (the
// previous file at path, if any, is untouched).
int ckpt_write(const char *path, const recipe_t *r, const gl_graph *g, const gl_optim *o, const gl_ckpt_state *st,
               char *err, size_t errlen);
// Reads path into a model built from r (names and shapes must match), its optimizer state and
// st. 0; -1 when the file is not a readable, complete checkpoint (truncated, corrupt,
// checksum); -2 when it is fine but does not fit this recipe. The reason is in err.
int ckpt_read(const char *path, const recipe_t *r, gl_graph *g, gl_optim *o, gl_ckpt_state *st, char *err,
              size_t errlen);
// Checks that path is a complete checkpoint: format, version, every tensor's checksum. 0 and
// *step, or -1 with the reason in err.
int ckpt_verify(const char *path, int64_t *step, char *err, size_t errlen);
// Prints what a checkpoint holds (attributes, tensors with shapes, checksums verified) to out.
// 0, or -1 with the reason on err.
int ckpt_inspect(const char *path, bool recipe, FILE *out, FILE *err);

// ---- files in checkpoint.dir ------------------------------------------------------------------

// dir/<name>-step<00000123>.h5, name made safe as the run directory's (rundir_safe_name): a
// name cannot lead a checkpoint out of dir.
void ckpt_path(char *buf, size_t len, const char *dir, const char *name, int64_t step);
// The checkpoints of run `name` in dir, newest (highest step) first: *paths is an array of n
// malloc'ed strings (free with ckpt_list_free). Returns n (0 when dir does not exist). Files
// named with the name as it is (before names were made safe) count too.
int ckpt_list(const char *dir, const char *name, char ***paths, int64_t **steps);
void ckpt_list_free(char **paths, int64_t *steps, int n);
// Deletes all but the newest keep checkpoints of `name` at steps up to upto (the step just
// written), and stale temporary files (ckpt_remove_stale, said on stdout). Checkpoints of later
// steps (another run's of the same name) are left alone: *later (when not NULL) receives the
// highest such step, or -1. Returns the number of checkpoints deleted.
int ckpt_prune(const char *dir, const char *name, int64_t keep, int64_t upto, int64_t *later);
// Creates dir (and parents) and checks that a file can be created in it; removes stale
// temporary files there (ckpt_remove_stale, said on stdout). 0, or -1 with the reason in err.
int ckpt_prepare_dir(const char *dir, char *err, size_t errlen);
// The name of the temporary file a writer on this host with process id pid writes before its
// rename to path: dir/.<file>.tmp.<host>.<pid>.
void ckpt_tmp_path(char *buf, size_t len, const char *path, long pid);
// Removes the temporary checkpoint files in dir (.<file>-stepN.h5.tmp.*, of any run) whose
// writer is gone: written on this host by a process that no longer exists, or, from another
// host or without a host in the name (older galley), not modified for an hour. Says so in one
// line on out (NULL: silent). Returns the number removed.
int ckpt_remove_stale(const char *dir, FILE *out);

#endif
