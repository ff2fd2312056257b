// graph.h: the model as a graph of layers built from recipe.model.layers. Each layer names its
// inputs (default: the previous layer); shapes are inferred and checked at build time, memory
// is planned first and carved from the run's arena afterwards.
#ifndef GALLEY_GRAPH_H
#define GALLEY_GRAPH_H

#include <stdbool.h>
#include <stdio.h>

#include "galley/arena.h"
#include "galley/backend.h"
#include "galley/layer.h"
#include "galley/recipe.h"

typedef struct {
    int nlayers;
    layer_t *layers;
    gl_tensor input;    // the model input, [batch, input shape]
    int64_t batch;      // batch capacity
    int64_t nparams;    // total parameters
    float *params, *grads;
    size_t bytes;       // arena bytes graph_bind will take
    int64_t flops;      // forward flops per sample
    int64_t act_floats; // activation floats per sample: the input, the outputs and grad_floats
    int64_t grad_floats;  // the outputs' gradients' pool, floats per sample (graph_plan.c)
    int64_t work_floats;  // the layers' shared in-call work buffer (layer_t.work), floats
    bool grads_kept;      // graph_keep_grads: every output has a gradient buffer of its own
    float *grad_pool, *work;
    const gl_backend *be;
    uint64_t seed;      // for per-step randomness in layers (dropout)
    int64_t step;       // the optimizer step the next forward belongs to
    int64_t row0;       // the global batch position of row 0 (ranks and parts; keys dropout draws)
    const gl_reducer *reduce;  // distributed.sync_batchnorm: batch statistics summed over ranks (NULL: local)
    const gl_tp *tp;           // tensor parallelism (graph_build_tp; NULL: none): every layer's l->tp
    // Called after each layer's backward (layers run last to first): gradient buckets start
    // their allreduce from here. NULL: none.
    void (*layer_done)(void *ctx, int layer);
    void *layer_done_ctx;
    // The hook only queues GPU work behind the layer's kernels (NCCL on its own stream, ordered
    // by an event), so backward need not wait for the GPU first; false: it reads gradients on
    // the host (MPI), and backward waits for the GPU before each call.
    bool layer_done_on_device;
    // Called with a layer once its parameters' gradients are complete (after its backward, or
    // after the activation's that runs it: grad_by), on the CPU: the optimizer's update in
    // backward (optim_fuse.c), while those gradients are in cache. NULL: none.
    void (*params_done)(void *ctx, int layer);
    void *params_done_ctx;
    struct gl_replay *replay;  // recorded passes (graph_replay_setup); NULL: every pass runs eagerly
} gl_graph;

// Builds layers from the recipe and infers shapes. On error prints
// "FILE:LINE:COL: error: model.layers[i] (name): ..." to err and returns -1.
int graph_build(gl_graph *g, const recipe_t *r, gl_shape input, int64_t batch, const gl_backend *be,
                FILE *err);
// graph_build for one rank of a tensor group (tp.h; NULL: graph_build): attention layers are
// split by heads and MLP pairs (a dense, element-wise layers only, a dense) column then row;
// shapes and parameters are this rank's. tp must outlive g.
int graph_build_tp(gl_graph *g, const recipe_t *r, gl_shape input, int64_t batch, const gl_backend *be,
                   const gl_tp *tp, FILE *err);
// "12 attention (by heads), 12 dense pairs (column, row); replicated: 25 layer_norm, ..." for the
// start banner and `galley check` (graph_tp.c).
void graph_tp_describe(const gl_graph *g, char *buf, size_t len);
// Copies between this rank's parameter block and the whole model's (full: the same recipe built
// with graph_build): to_full false fills local from full, true writes local's slices into full.
// rank: whose slices (0 .. tp size - 1; local is that rank's layout). Optimizer state buffers have the parameters' layout:
// the same call copies them.
void graph_tp_slice(const gl_graph *local, const gl_graph *full, int rank, float *localbuf, float *fullbuf,
                    bool to_full);
// Gives every output a gradient buffer of its own instead of sharing the pool by lifetime
// (graph_plan.c), so that all of them still hold their values after backward: for tests that
// read them. Before graph_bind; g->bytes grows to match.
void graph_keep_grads(gl_graph *g);
// Carves parameters, gradients and activations from the arena (g->bytes of it).
void graph_bind(gl_graph *g, gl_arena *a);
void graph_init_params(gl_graph *g, uint64_t seed);
// Runs rows [0, n) of the batch through the model (g->step and g->seed reach the layers).
void graph_forward(gl_graph *g, int64_t n, bool train);
// Expects graph_output(g)->grad filled; zeroes and fills every other gradient. Outputs'
// gradients share memory by lifetime: afterwards only those of layer 0's output and the
// parameters (g->grads) are sure to hold their values (graph_keep_grads keeps all).
void graph_backward(gl_graph *g, int64_t n);
gl_tensor *graph_output(gl_graph *g);
// train.cuda_graphs on a backend that records (CUDA): from here on graph_forward and
// graph_backward record each pass after its first run with the same input buffer, rows, row0
// and mode, and replay it (src/model/graph_replay.c). Passes that cannot be recorded run
// eagerly, said once on err. Freed by graph_free.
void graph_replay_setup(gl_graph *g, bool on, FILE *err);
// "CUDA graphs: ..." for the end summary (recordings, replays, eager passes), or "" when off.
void graph_replay_describe(const gl_graph *g, char *buf, size_t len);
// Index of the first layer whose output (rows [0,n)) holds a NaN or Inf, or -1; outputs forward
// does not write (graph_out_written) are skipped.
int graph_first_nonfinite(const gl_graph *g, int64_t n);
// Whether forward writes layer i's output: not a producer's that writes the max pool after it
// instead (layer_t.store_pool), nor its activation's, the same buffer.
bool graph_out_written(const gl_graph *g, int i);
// Table: layer, type, output shape, parameters, FLOPs per sample, activation memory.
void graph_summary(const gl_graph *g, FILE *out);
void graph_free(gl_graph *g);

#endif
