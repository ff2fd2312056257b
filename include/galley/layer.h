// layer.h: what a layer kind provides. A layer kind is one file under src/model/layers/ that
// declares its recipe keys, infers its output shape, initialises its parameters and runs
// forward and backward through the backend; layer_registry.c lists the kinds.
#ifndef GALLEY_LAYER_H
#define GALLEY_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "galley/backend.h"
#include "galley/recipe.h"
#include "galley/schema.h"
#include "galley/tensor.h"
#include "galley/tp.h"

#define GL_MAX_INPUTS GL_MAX_NAMES
#define GL_MAX_PARAM_TENSORS 4

typedef struct layer layer_t;

// One named parameter tensor of a layer (e.g. "weight" [U, K]); a slice of the model's block.
typedef struct {
    const char *name;
    gl_shape shape;
    int64_t size;
    int64_t offset;  // into the model's parameter block
    int fan_in, fan_out;
    // Tensor parallelism (tp.h): how this rank's tensor is cut from the whole one (GL_SPLIT_*),
    // and along rows, the segments each cut separately (1; 3 for in_proj's q, k, v). `shape` and
    // `size` are this rank's; checkpoints hold the whole tensor.
    int split, segments;
} gl_param;

// What a kind's inputs must be (checked by graph_build before infer, so a misplaced layer is
// named with its recipe line): anything, maps and vectors [C, spatial...] (not tokens), or
// tokens [T, D] (transformer layers: a patch_embed makes them).
typedef enum { GL_TAKES_ANY = 0, GL_TAKES_SPATIAL, GL_TAKES_TOKENS } gl_takes;

// A max pool's window and where its forward writes (layer_kind.pool_store).
typedef struct {
    int k[3];
    float *y;
    int32_t *argmax;
} gl_pool_store;

typedef struct layer_kind {
    const char *name;
    const char *doc;
    const key_spec *keys;  // NULL-terminated; offsets are i * sizeof(gl_value)
    int min_inputs, max_inputs;
    gl_takes takes;
    // work (layer_t.work_floats) is the CPU's im2col columns, which a backend with its own
    // convolution workspace (cuDNN) does not need: the graph then gives this kind none. Kinds
    // without it keep their work on every backend (attention's backward temporaries).
    bool im2col_work;
    // Output element i depends on input element i alone, deterministically (the activations):
    // such layers may sit between the two dense layers of a tensor-parallel MLP pair (tp.h).
    bool elementwise;
    // Its output is its input's values in the same order, only the shape differs (flatten): the
    // graph may hand it its input's buffers, value and gradient (layer_t.view), and its forward and
    // backward then do nothing.
    bool reshape_only;
    // Each input's gradient is the output's, dx_k += dy (add; a reshape_only kind too): the graph
    // may give an input that this layer alone reads this layer's output gradient buffer as its
    // own (layer_t.grad_shared), and backward then leaves that input's gradient alone.
    bool grad_is_dy;
    // Its output is the element-wise sum of its inputs (add): with two inputs, the graph may have
    // the producer of one add the other as it stores (takes_res, layer_t.store_res).
    bool sums_inputs;
    // Optional: what its scratch keeps from forward to backward and how it grows, for the memory
    // plan `galley check` prints (e.g. attention: "linear in T: no T x T matrix").
    const char *scratch_doc;
    // Sets l->out.shape, l->params[] (shapes, sizes), l->flops; returns 0, or -1 with a
    // message in err that names the shapes (the caller adds the layer and its recipe line).
    int (*infer)(layer_t *l, char *err, size_t errlen);
    // Fills this layer's parameters (optional; default: zeros).
    void (*init)(layer_t *l, float *params, uint64_t seed);
    void (*forward)(layer_t *l, const gl_backend *be, int64_t n, bool train);
    void (*backward)(layer_t *l, const gl_backend *be, int64_t n);
    // Optional: whether backward can write input k's gradient whole rather than add to it, when
    // it is the first to write it (the graph then skips clearing it and sets l->grad_set[k]).
    bool (*sets_grad)(const layer_t *l, const gl_backend *be, int k);
    // Optional, activation fusion (graph_build): an element-wise layer whose derivative its output
    // gives says which activation it is (act_of); a producer says whether it can apply that
    // activation as it stores its output on this backend (takes_act).
    bool (*act_of)(const layer_t *l, gl_act *act, float *slope);
    bool (*takes_act)(const layer_t *l, const gl_backend *be, gl_act act, float slope);
    // Optional, the other side of it (graph_build): a consumer whose backward can apply the
    // activation's derivative as it writes its input gradient says so (takes_act_grad), and
    // backward_act then writes dx, the activation's input gradient, whole (never adding to it).
    // gate: the activation's output (relu, leaky_relu), or for gelu the derivative its forward
    // kept (keep_deriv), laid out as the consumer's input.
    bool (*takes_act_grad)(const layer_t *l, const gl_backend *be, gl_act act, float slope);
    void (*backward_act)(layer_t *l, const gl_backend *be, int64_t n, gl_act act, float slope, const float *gate,
                         float *dx);
    // Its backward (or backward_act) reads its own output: a gelu after it does not keep its
    // derivative in that buffer (graph_build, layer_t.keep_deriv).
    bool reads_out;
    // Optional, pool fusion (graph_build): a max pool whose windows tile its input (stride the
    // window, no padding, the input a multiple of it) says its window {D, H, W} and, once bound,
    // where its output and argmax go (pool_store; false: not such a pool); a producer says whether
    // it can write those on this backend instead of its own output (takes_pool).
    bool (*pool_store)(const layer_t *l, gl_pool_store *ps);
    bool (*takes_pool)(const layer_t *l, const gl_backend *be, const int k[3]);
    // Optional, residual fusion (graph_build): a producer says whether it can add a tensor laid
    // out as its output as it stores that output, on this backend (layer_t.store_res).
    bool (*takes_res)(const layer_t *l, const gl_backend *be);
} layer_kind;

struct layer {
    const layer_kind *kind;
    const layer_cfg *cfg;
    int index;
    int nin;
    gl_tensor *in[GL_MAX_INPUTS];
    gl_tensor out;
    int nparams;
    gl_param params[GL_MAX_PARAM_TENSORS];
    float *w, *dw;   // this layer's slice of the parameter and gradient blocks
    int64_t flops;   // forward multiply-adds x 2 per sample

    // Set by the graph before infer: the batch capacity (to size scratch).
    int64_t batch;
    // Sized by infer, carved by graph_bind from the arena:
    int64_t state_floats;    // persistent non-trainable state (e.g. batch-norm running stats)
    int64_t scratch_floats;  // per-step memory kept from forward to backward (e.g. argmax, dropout's mask)
    float *state, *scratch;
    // Sized by infer: memory used only inside one forward or backward call (the CPU's im2col
    // columns, attention's backward temporaries). Every layer's is the same buffer, as large as
    // the largest (graph_bind); none for im2col_work kinds where the backend keeps its own
    // (gl_backend.own_conv_workspace: work_floats is then 0).
    int64_t work_floats;
    float *work;
    // Floats at work (graph_bind): the shared buffer's whole size, at least work_floats. Layers
    // run one at a time, so a convolution may use all of it: the CPU's fast kernels need room for
    // packed weights that the im2col sizing does not count (without it CosmoFlow's 256 -> 512
    // layer on 2^3 maps fell back to im2col + sgemm).
    int64_t work_room;
    // Set by graph_build: where this output's gradient lies in the gradients' pool, in floats
    // per sample (graph_plan.c; times the batch capacity once bound).
    int64_t grad_off;
    // Set by the graph before each forward: for per-step randomness (dropout) keyed by
    // (seed, RNG_DROPOUT, step, index).
    uint64_t seed;
    int64_t step;
    int64_t row0;  // the global batch position of row 0, so draws do not depend on how ranks split it
    const gl_reducer *reduce;  // sync_batchnorm across ranks: the sum over ranks (NULL: local statistics)
    // Set by graph_build before infer: the tensor group (NULL: no tensor parallelism) and this
    // layer's part in it (GL_TP_*: split by heads, column- or row-parallel; none: replicated).
    const gl_tp *tp;
    int tp_role;
    // Set by the graph before each backward: input k's gradient was not cleared, and backward
    // writes it whole (only where kind->sets_grad said it can).
    bool grad_set[GL_MAX_INPUTS];
    // Set by graph_build where it fuses a producer with the activation after it: the producer
    // applies store_act (with store_slope) as it stores its output, and the activation layer
    // (act_done) computes nothing forward, its output being the producer's buffer. Where the
    // producer cannot apply it, the activation still shares the producer's buffer and computes
    // in place (act_inplace): no layer's backward reads its own output.
    bool store_act_on, act_done, act_inplace;
    gl_act store_act;
    float store_slope;
    // Set by graph_build where the layer that alone reads an activation's output applies the
    // activation's derivative in its own backward (a max_pool of windows that do not overlap, a dense layer):
    // the activation's backward runs grad_by's backward_act into its input gradient, and
    // grad_by's own backward (grad_deferred) does nothing. One pass over the maps less.
    layer_t *grad_by;
    bool grad_deferred;
    // Set by graph_build on a gelu whose input it alone reads, on a backend that keeps the
    // derivative (gelu_forward_keep): training forward leaves gelu'(x) in its input's buffer in
    // place of x (which no backward reads), and backward multiplies by it (gelu_backward_kept, or
    // grad_by's store) instead of computing Phi and phi again.
    bool keep_deriv;
    bool deriv_live;  // set by its forward: a training one left the derivative (else x is there)
    // Set by graph_build where a producer writes the max pool after it (store_pool: through its
    // activation, act_done, or directly): the producer computes the pool's output and argmax as
    // it stores, its own output (and the activation's, the same buffer) left unwritten; the
    // pool's forward (pool_done) does nothing. Nothing else reads that output, and no backward
    // does: the activation's derivative is the pool's (grad_by), read from the pool's output.
    layer_t *store_pool;
    bool pool_done;
    // Set by graph_build for a reshape_only kind whose input it alone reads (graph_fuse_views):
    // its output is its input's buffer, so forward does nothing (and backward neither: grad_shared).
    bool view;
    // Set by graph_build for a grad_is_dy kind (graph_share_grads): input k's gradient is this
    // layer's output gradient, the same buffer, so backward does not write it; that input's
    // producer has grad_with set to this layer (graph_plan.c places the two as one).
    bool grad_shared[GL_MAX_INPUTS];
    layer_t *grad_with;
    // Set by graph_build where a sums_inputs layer (add) of two inputs is fused with the producer
    // of one (graph_fuse_adds): the producer adds store_res, the other input, as it stores its
    // output, which the add (res_by: that producer) then has as its own: its forward does nothing.
    const gl_tensor *store_res;
    layer_t *res_by;
};

// Value of the layer's key named `key` (a bug if the kind has no such key).
const gl_value *layer_key(const layer_t *l, const char *key);

// Registry.
const layer_kind *layer_kind_find(const char *name);
int layer_kind_count(void);
const layer_kind *layer_kind_at(int i);

// Init helpers shared by kinds. Keys: uniform/normal x he/xavier, zeros, pytorch (PyTorch's
// default: kaiming_uniform with a = sqrt(5)), trunc_normal (std 0.02, timm's trunc_normal_ as
// the NERSC tutorial's ViT calls it).
extern const char *const layer_init_choices[];
void layer_init_param(const gl_param *p, int init_choice, float *dst, uint64_t seed, int layer_index,
                      int param_index);
// A bias under the weight's init choice: zeros (left as they are), or for pytorch uniform in
// +-1/sqrt(fan_in), the weight's fan_in (p->fan_in), as PyTorch's layers draw it.
void layer_init_bias(const gl_param *p, int init_choice, float *dst, uint64_t seed, int layer_index,
                     int param_index);

#endif
