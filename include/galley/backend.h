// backend.h: the kernels layers call. A layer never computes on its own; it calls through
// gl_backend so the same layer runs on the CPU (backend/cpu) or a GPU (backend/cuda).
//
// Memory. Every tensor pointer a kernel gets is backend memory, carved from the run's arena
// (arena_init_for), except where a comment says host: the labels, class weights and regression
// targets of the losses, which come straight from the data loader. On the CUDA backend the
// arena is CUDA managed memory on the GPU: kernels run asynchronously on one stream, and host
// code may read or write tensors only after sync() (graph_forward and graph_backward end with
// one; the losses return their value, so they wait for it).
#ifndef GALLEY_BACKEND_H
#define GALLEY_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "galley/backend_types.h"  // PRECISION_*, LOSS_*, OPT_*, gl_conv_geom

#ifdef __cplusplus  // the CUDA backend's files are C++
extern "C" {
#endif

typedef enum { ACT_RELU, ACT_LEAKY_RELU, ACT_TANH, ACT_SIGMOID, ACT_GELU } gl_act;

// The activations a producing layer may apply as it stores its output (the *_forward_act ops):
// relu, and leaky_relu with a slope >= 0, for which y > 0 exactly where x > 0, so the
// activation's backward can read y in place of x.
static inline bool gl_act_storable(gl_act act, float slope) {
    return act == ACT_RELU || (act == ACT_LEAKY_RELU && slope >= 0.0f);
}

// A sum of doubles over ranks, in place (sync_batchnorm); every rank calls it in the same order.
typedef struct {
    void (*sum)(void *ctx, double *buf, int count);
    void *ctx;
} gl_reducer;

// A stretch of one parameter tensor: the optimizer's unit of parallel work and of partial sums
// (src/optim; GL_OPTIM_CHUNK elements at most).
typedef struct {
    int64_t offset, len;  // into the parameter block
    int tensor;           // index into the optimizer's tensors (parameter order, empty ones skipped)
    bool plain;           // optimizer.exclude_1d and a 1-D tensor: no weight decay, LAMB ratio 1
    bool split;           // its tensor is split over the tensor group (tp.h): norms sum it over the group
    int part, parts;      // its place among its tensor's chunks (0 .. parts - 1), for optim_owner
} gl_chunk;

// One optimizer update's scalars, computed on the host by src/optim (rule: OPT_* of backend_types.h).
typedef struct {
    int rule;
    bool clip;            // multiply every gradient by coef first (and keep it in g)
    float coef;
    float lr;             // SGD, AdamW: the learning rate
    float momentum, weight_decay;
    bool nesterov;
    // AdamW, LAMB: as src/optim/adam.c's moments_at
    float b1, b2, one_b1, one_b2, eps, inv_bc1, inv_sqrt_bc2;
    float decayed;        // AdamW: 1 - lr * weight_decay
} gl_optim_args;

typedef struct gl_backend {
    const char *name;
    // ---- memory (src/core/arena.c and the training loop) ----
    int device;  // 1: tensors live on a GPU (see Memory above); 0: host memory
    // 1: the convolution ops keep their own workspace (cuDNN's) and take scratch NULL, 0; the
    // graph then carves no im2col space for them. 0: they need the caller's (the CPU's im2col).
    int own_conv_workspace;
    // The run's arena: `bytes` zeroed bytes aligned to at least 256, or NULL when short.
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p);
    // Waits for every kernel issued so far.
    void (*sync)(void);
    // dst[0, bytes) = 0, in backend memory.
    void (*zero)(void *dst, size_t bytes);
    // Host memory src -> backend memory dst.
    void (*upload)(void *dst, const void *src, size_t bytes);
    // Backend memory src -> host memory dst (waits for the kernels that write src).
    void (*download)(void *dst, const void *src, size_t bytes);
    // Optional (NULL: host memory, which the training loop checks itself): the device's free and
    // total bytes now, the bytes the backend will take beside the arena (workspaces: *reserve),
    // the device's UUID (ranks with the same one share it, whatever each one's
    // CUDA_VISIBLE_DEVICES shows) and a name for messages. The training loop refuses a plan that
    // does not fit before allocating: CUDA managed memory would otherwise accept it and crawl.
    void (*mem_info)(size_t *free_bytes, size_t *total_bytes, size_t *reserve, unsigned char uuid[16],
                     char *name, size_t len);
    // ---- recorded passes (src/model/graph_replay.c; optional, NULL: every pass runs eagerly) ----
    // A whole forward or backward pass is recorded once (CUDA graphs) and replayed in one launch.
    // capture_begin: kernels issued from now on are recorded, not run; 0, or -1 with why in msg.
    int (*capture_begin)(char *msg, size_t len);
    // Ends recording: a replayable handle, or NULL with the reason in msg when something could
    // not be recorded (nothing ran then: the caller runs the pass itself).
    void *(*capture_end)(char *msg, size_t len);
    // Issues the recorded work on the stream, as the recorded calls would have; and frees it.
    void (*replay)(void *rec);
    void (*replay_free)(void *rec);
    // Changes whenever a buffer that recordings may point into (workspaces, partial sums) is
    // reallocated: a recording made in another generation must be made again.
    uint64_t (*capture_generation)(void);
    // The step that recorded dropout draws use when replayed (recorded dropout kernels read it
    // on the device; eager ones take it as an argument).
    void (*replay_step)(uint64_t step);
    // ---- input staging (src/train/input_stage.c; optional, NULL: batches go through upload) ----
    // Page-locks host memory the batches are read from (the loader's slots) so that copies from
    // it are DMA that runs beside the kernels. 0, or -1 with the reason in msg (a locked-memory
    // limit, say): copies then still work, staged through pageable memory.
    int (*host_pin)(void *p, size_t bytes, char *msg, size_t len);
    void (*host_unpin)(void *p);
    // Host src -> backend dst on a copy stream of the backend's own, after every kernel issued
    // so far (which may still read dst): the next batch's copy overlaps the current step.
    // upload_wait makes the kernels issued after it wait for the last upload_async. src must
    // stay unchanged until then. The CPU copies at once (its wait has nothing to wait for).
    void (*upload_async)(void *dst, const void *src, size_t bytes);
    void (*upload_wait)(void);
    // Optional (device backends; NULL on the CPU, whose losses read host memory): host[0, bytes),
    // a batch's labels or targets, already has a copy at dev (an upload_async the step waits
    // for, or an upload), so the loss and metrics read dev instead of copying host again. host
    // NULL: none.
    void (*upload_declare)(const void *host, size_t bytes, const void *dev);

    // ---- optimizer (src/optim uses these when device is set; NULL on the CPU, which runs its
    // own loops). chunks: host memory, the same table on every call of a run (it may be cached).
    // part[c] (host) = the sum of x[i]^2 over chunk c, in double, in a fixed order.
    void (*chunk_sumsq)(int nchunks, const gl_chunk *chunks, const float *x, double *part);
    // One update of w over the chunks as src/optim/sgd.c (s0: velocity or NULL) or adam.c's
    // AdamW (s0 = m, s1 = v). LAMB takes two calls: phase 1 (ratio NULL) updates the moments and
    // writes part[c] (host) = sum of w^2 and part[nchunks + c] = sum of u^2; phase 2 (ratio [tensors],
    // host) applies w -= lr * ratio[tensor] * u.
    void (*optim_update)(int nchunks, const gl_chunk *chunks, const gl_optim_args *a, float *w, float *g,
                         float *s0, float *s1, double *part, const double *ratio);

    // ---- kernels ----
    // y[N,U] = x[N,K] . W[U,K]^T (+ b[U])
    void (*dense_forward)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                          const float *b, float *y);
    // Optional (NULL: no fusion): dense_forward with y = act(x . W^T + b) as it is stored, act
    // relu or leaky_relu with slope >= 0, the same bits as act_forward after dense_forward. The
    // graph fuses a dense layer with the activation that alone reads it (graph_build).
    void (*dense_forward_act)(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b,
                              float *y, gl_act act, float slope);
    // Optional (NULL: no fusion): dense_forward with y = (x . W^T + b) + res as it is stored, res
    // [N,U] laid out as y (not y itself), the same bits as dense_forward and then an add. The graph
    // fuses a dense layer (or attention's output projection) with the residual add that alone
    // reads its output (graph_build).
    void (*dense_forward_res)(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b,
                              const float *res, float *y);
    // dW[U,K] = dy^T . x, db[U] = sum_n dy, dx[N,K] += dy . W (dx may be NULL)
    void (*dense_backward)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                           const float *dy, float *dw, float *db, float *dx);
    // Optional (NULL: the graph clears dx and calls dense_backward): the same with dx = dy . W
    // written, for a dx that this call writes first (not cleared by the graph): the same bits.
    void (*dense_backward_set)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                               const float *dy, float *dw, float *db, float *dx);
    // Optional (NULL: no fusion): dense_backward_set with dx through the derivative of the relu or
    // leaky_relu (slope >= 0) whose output x is, as it is stored: the bits of dense_backward_set
    // and then act_backward_set(act, slope, x, dx, dx); gate is x. With act ACT_GELU, gate is the
    // derivative gelu_forward_keep left: the bits of dense_backward_set and then
    // gelu_backward_kept(gate, dx, dx, set). The graph hands such an activation's derivative to
    // the dense layer that alone reads its output (graph_build).
    void (*dense_backward_act)(int64_t n, int64_t k, int64_t u, const float *x, const float *w,
                               const float *dy, float *dw, float *db, float *dx, gl_act act, float slope,
                               const float *gate);
    // y[i] = act(x[i]) over n elements; alpha is leaky_relu's slope
    void (*act_forward)(gl_act act, float alpha, int64_t n, const float *x, float *y);
    // dx[i] += dy[i] * act'(x[i])
    void (*act_backward)(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
    // Optional (NULL: the graph clears dx and calls act_backward): dx[i] = 0 + the same term, for
    // a dx that this call writes first, which the graph then does not clear: the same bits with
    // two passes over dx fewer (the clearing, and reading it back).
    void (*act_backward_set)(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
    // Optional (NULL: not used): y = gelu(x) with x overwritten by gelu'(x), for a gelu whose input
    // nothing else reads (graph_build: layer_t.keep_deriv); the bits of act_forward(ACT_GELU).
    void (*gelu_forward_keep)(int64_t n, float *x, float *y);
    // dx (+)= dy * d (set: dx = 0 + the term), d = gelu'(x) as gelu_forward_keep left it: the bits
    // of act_backward(ACT_GELU) (act_backward_set with set) on x. A product where the backward
    // computed Phi and phi again.
    void (*gelu_backward_kept)(int64_t n, const float *d, const float *dy, float *dx, int set);
    // Softmax over C channels at each of S positions (S = 1 for classification, H*W for masks):
    // logits (N,C,S), labels (N,S) in [0,C) (host), weights (C) (host) or NULL. Returns
    // sum w[y] * nll / sum w[y] over all N*S positions (the mean when unweighted, as PyTorch's
    // CrossEntropyLoss) and writes its gradient into dlogits (N,C,S) unless NULL.
    double (*softmax_xent)(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                           const float *weights, float *dlogits);
    // Mean squared (LOSS_MSE) or absolute (LOSS_L1) error over count elements (target: host);
    // writes the gradient into dpred unless NULL.
    double (*regression_loss)(int kind, int64_t count, const float *pred, const float *target, float *dpred);
    // Relative L2 error (LOSS_L2_RELATIVE): pred and target (host) are `units` runs of `len`
    // contiguous elements (a sample each, or a sample's channel: [N, C, S] -> N*C units of S);
    // returns the mean over units of ||pred_u - target_u||_2 / max(||target_u||_2, GL_L2_RELATIVE_EPS)
    // and writes its gradient into dpred unless NULL (0 where pred_u == target_u). Each unit's
    // sums are in double in a fixed order, then added in unit order.
    double (*l2_relative_loss)(int64_t units, int64_t len, const float *pred, const float *target, float *dpred);
    // Optional (NULL: src/model/metrics.c reads the output on the host): metrics_add's sums over
    // one part, computed where out lives, so the output never travels to the host. class_like
    // (TARGET_CLASS or TARGET_MASK): out (N,C,S) with labels (N,S) (host, as the loss call just
    // before took them; the CUDA backend reuses that copy): counts[0] = positions whose argmax
    // (the first largest) is the label, counts[1] = positions with fewer than k logits above the
    // label's (TARGET_CLASS only), and with iou (masks, C <= GL_MAX_IOU_CLASSES) counts[2 + j] =
    // |argmax == j and label == j|, counts[2 + C + j] = |argmax == j or label == j|. Exact counts,
    // as the host's. Otherwise (values, host, N*S of them): *abs_sum = sum |out - values| in double
    // (a fixed order, not the host's: equal to rounding).
    void (*metrics_sums)(bool class_like, bool topk, bool iou, int64_t n, int64_t c, int64_t s, int k,
                         const float *out, const int32_t *labels, const float *values, int64_t *counts,
                         double *abs_sum);
    // Sets the number of threads kernels may use.
    void (*set_threads)(int threads);
    // Sets the arithmetic of the GEMM-shaped kernels (dense, conv, conv_transpose) from a
    // PRECISION_* (backend_types.h) (train.precision; auto picks by the device) and returns the one in
    // effect: fp32 exact (the default), tf32 tensor cores, or bf16/fp16 operands with fp32
    // accumulation and fp32 results (every tensor stays fp32 in memory). -1 with the reason in
    // msg when the device cannot do it (e.g. bf16 below compute capability 8.0). NULL on the CPU,
    // which computes in fp32 only. Call before the first kernel; a later call is allowed (tests)
    // and applies from the next kernel on.
    int (*set_precision)(int precision, char *msg, size_t len);

    // ---- convolution family (conv, transposed conv): owned by src/backend/cpu/cpu_conv*.c ----
    // (begin conv region)
    // Convolution x[N, C, D, H, W] -> y[N, F, OD, OH, OW] of geometry g (backend_types.h: N = g->n,
    // C = g->c, F = g->f, in `groups` groups dividing C and F; in, out are {D, H, W}; k, s, d, p the
    // kernel, stride, dilation and padding before, per dimension; the padding after follows from
    // the sizes). w is [F, C/groups, KD, KH, KW], b [F] or NULL (PyTorch's layout). scratch
    // [scratch_floats] holds a chunk of samples' im2col columns, (C*KD*KH*KW + F) * OD*OH*OW floats
    // per sample: at least one sample's, except for a 1x1x1 kernel with stride 1, no padding and
    // out == in, which needs none.
    void (*conv_forward)(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                         float *scratch, int64_t scratch_floats);
    // Optional (NULL: no fusion): conv_forward with y = act(conv(x) + b) as it is stored, act
    // relu or leaky_relu with slope >= 0, the same bits as act_forward after conv_forward. The
    // graph fuses a convolution with the activation that alone reads it (graph_build).
    void (*conv_forward_act)(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                             float *scratch, int64_t scratch_floats, gl_act act, float slope);
    // Optional (NULL: no fusion): conv_forward (act_on: conv_forward_act with act, slope) and then
    // max_pool_forward over its output of windows {kd, 2, 2} (kd 1 or 2: a 2D map is D = 1, kd 1)
    // at stride the window, no padding, the output's D, H, W multiples of the window: pooled
    // [N, F, OD/kd, OH/2, OW/2] and argmax as max_pool_forward writes them, the same bits. y is
    // room the backend may use, undefined after (the fused kernels do not write it). The graph
    // hands a pool to the convolution before it where nothing else reads its output (graph_build).
    void (*conv_forward_pool)(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                              float *scratch, int64_t scratch_floats, bool act_on, gl_act act, float slope, int kd,
                              float *pooled, int32_t *argmax);
    // dw [F, C/groups, KD, KH, KW] and db [F] (may be NULL) overwritten, dx accumulated (may be NULL)
    void (*conv_backward)(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw,
                          float *db, float *dx, float *scratch, int64_t scratch_floats);
    // Optional (NULL: the graph clears dx and calls conv_backward): the same with dx overwritten,
    // for a dx that this call writes first (not cleared by the graph): the bits of clearing and
    // adding but for the sign of a zero.
    void (*conv_backward_set)(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw,
                              float *db, float *dx, float *scratch, int64_t scratch_floats);
    // Transposed convolution x[N, C, D, H, W] -> y[N, F, OD, OH, OW] of geometry g: the input
    // gradient of the convolution F -> C from {OD, OH, OW} to {D, H, W} with the same k, s, d, p
    // (gl_conv_geom_flipped; so y's size past that convolution's reach, PyTorch's output_padding,
    // only gets the bias). w is [C, F/groups, KD, KH, KW], b [F] or NULL (PyTorch's ConvTranspose
    // layout). scratch: (F*KD*KH*KW + C) * D*H*W floats per sample, as for that convolution.
    void (*conv_transpose_forward)(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                                   float *scratch, int64_t scratch_floats);
    // Optional (NULL: no fusion): conv_transpose_forward with y = act(convt(x) + b) as it is
    // stored, as conv_forward_act (relu or leaky_relu with slope >= 0; the bits of act_forward after
    // conv_transpose_forward).
    void (*conv_transpose_forward_act)(const gl_conv_geom *g, const float *x, const float *w, const float *b,
                                       float *y, float *scratch, int64_t scratch_floats, gl_act act, float slope);
    // dw [C, F/groups, KD, KH, KW] and db [F] (may be NULL) overwritten, dx accumulated (may be NULL)
    void (*conv_transpose_backward)(const gl_conv_geom *g, const float *x, const float *w, const float *dy,
                                    float *dw, float *db, float *dx, float *scratch, int64_t scratch_floats);
    // (end conv region)

    // ---- pooling, normalisation, shape and merge layers: src/backend/cpu/cpu_pool*.c, cpu_norm*.c ----
    // (begin pool-norm region)
    // Pooling x[N, C, D, H, W] -> y[N, C, OD, OH, OW] (a 2D map is D = OD = 1 with k[0] = s[0] = 1,
    // p[0] = 0). in, out are {D, H, W}; k, s, p the kernel, stride and padding per dimension.
    // Output o's window covers o*s - p .. o*s - p + k - 1, clipped to the input (callers keep
    // p <= k/2, so every window holds an input element).
    // max: argmax[N, C, OD, OH, OW] gets the winner's index in its D*H*W plane, the first on ties.
    void (*max_pool_forward)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                             const int s[3], const int p[3], const float *x, float *y, int32_t *argmax);
    // dx[argmax] += dy
    void (*max_pool_backward)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3],
                              const int32_t *argmax, const float *dy, float *dx);
    // Optional (NULL: the activation runs its own backward): windows (k, s, p as the forward's)
    // that do not overlap after a relu (leaky: a leaky_relu of slope >= 0); y the pool's output
    // (N,C,OD,OH,OW), each window's winner (or a relu or leaky_relu of slope >= 0 of it, in place:
    // the same sign); dx (not cleared) = 0, then dx[argmax] += y > 0 ? 0 + dy : leaky ? slope *
    // (0 + dy) : 0: the bits of max_pool_backward_set and then act_backward_set.
    void (*max_pool_backward_act)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                                  const int s[3], const int p[3], const int32_t *argmax, const float *dy,
                                  const float *y, bool leaky, float slope, float *dx);
    // Optional, as act_backward_set: dx (not cleared by the graph) = 0, then dx[argmax] += dy.
    void (*max_pool_backward_set)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3],
                                  const int32_t *argmax, const float *dy, float *dx);
    // avg: padding counts as zeros, the divisor is always k[0]*k[1]*k[2] (count_include_pad)
    void (*avg_pool_forward)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                             const int s[3], const int p[3], const float *x, float *y);
    // dx += dy / (k[0]*k[1]*k[2]) over each window
    void (*avg_pool_backward)(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                              const int s[3], const int p[3], const float *dy, float *dx);
    // y[N, C] = mean of x[N, C, S] over S; backward: dx[N, C, S] += dy[N, C] / S
    void (*global_avg_pool_forward)(int64_t n, int64_t c, int64_t s, const float *x, float *y);
    void (*global_avg_pool_backward)(int64_t n, int64_t c, int64_t s, const float *dy, float *dx);
    // Batch norm of x[N, C, S] per channel over (N, S); gamma, beta [C], or NULL without affine.
    // running [2C + 1]: running mean [C], running var [C], and a flag that is 0 until the kernel
    // first sets mean 0, var 1 (PyTorch's initial values; the arena starts zeroed).
    // train: batch statistics (biased variance) normalise, and running = (1 - momentum) * running
    // + momentum * batch with the unbiased variance, as PyTorch. Not train: running stats normalise.
    // saved [2C + 1] receives what backward needs: mean [C], 1/sqrt(var + eps) [C], train (0/1).
    // red: NULL, or (sync_batchnorm) the sum over ranks: then batch statistics cover every rank's
    // rows, as if one process had the whole batch.
    void (*batch_norm_forward)(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                               const float *beta, float eps, int train, float momentum, float *running,
                               float *saved, float *y, const gl_reducer *red);
    // Optional (NULL: no fusion): batch_norm_forward with y = act(normalised x) as it is stored,
    // act relu or leaky_relu with slope >= 0: the bits of act_forward after batch_norm_forward.
    void (*batch_norm_forward_act)(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                                   const float *beta, float eps, int train, float momentum, float *running,
                                   float *saved, float *y, const gl_reducer *red, gl_act act, float slope);
    // dgamma, dbeta [C] overwritten (only with gamma; this rank's rows: the gradient allreduce
    // sums them), dx accumulated (may be NULL). Batch statistics are differentiated through (over
    // every rank's rows with red); running ones are constants.
    void (*batch_norm_backward)(int64_t n, int64_t c, int64_t s, const float *x, const float *dy,
                                const float *gamma, const float *saved, float *dgamma, float *dbeta, float *dx,
                                const gl_reducer *red);
    // Layer norm of each row of x[N, K] over its K elements; gamma, beta [K], or NULL without
    // affine. saved [2N] receives each row's mean [N] and 1/sqrt(var + eps) [N].
    void (*layer_norm_forward)(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta,
                               float eps, float *saved, float *y);
    // dgamma, dbeta [K] overwritten (only with gamma), dx [N, K] accumulated (may be NULL)
    void (*layer_norm_backward)(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                                const float *saved, float *dgamma, float *dbeta, float *dx);
    // Inverted dropout over count elements: in training element i is dropped (mask 0) iff
    // rng_uniform(seed, RNG_DROPOUT, step, base + i) < rate, else kept with mask 1/(1 - rate);
    // not training, mask = 1. y = x * mask. Backward: dx += dy * mask.
    void (*dropout_forward)(int64_t count, float rate, int train, uint64_t seed, uint64_t step, uint64_t base,
                            const float *x, float *mask, float *y);
    void (*dropout_backward)(int64_t count, const float *mask, const float *dy, float *dx);
    // y[i] = a * x[i]
    void (*scale)(int64_t count, float a, const float *x, float *y);
    // y[i] += a * x[i]
    void (*axpy)(int64_t count, float a, const float *x, float *y);
    // dst[r * dst_stride + j] = src[r * src_stride + j] for r < rows, j < len (+= when accumulate)
    void (*copy_rows)(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst,
                      int64_t dst_stride, int accumulate);
    // Nearest upsampling x[N, C, D, H, W] -> y[N, C, D*f[0], H*f[1], W*f[2]]; in is {D, H, W}.
    // Backward: dx += the sum of dy over each f[0] x f[1] x f[2] block.
    void (*upsample_forward)(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *x, float *y);
    void (*upsample_backward)(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *dy,
                              float *dx);
    // (end pool-norm region)

    // ---- attention (transformers): owned by src/backend/cpu/cpu_attention.c ----
    // (begin attention region)
    // Multi-head self-attention, memory-efficient (tiled over keys with an online softmax, as
    // FlashAttention-2: no T x T buffer exists; memory and temporaries grow with T, not T^2).
    // qkv[N, T, 3, H, E]: per token q for all heads, then k, then v (PyTorch's in_proj packing).
    // y[N, T, H, E] = softmax(q k^T * scale) v per (sample, head), keys j > i masked when causal;
    // lse[N, H, T] = each row's log-sum-exp of the scaled (masked) scores, for backward.
    // Attention-probability dropout (rate > 0 only; the layer passes 0 outside training): the
    // probability of query i for key j in head h of sample n is dropped iff
    // rng_uniform(seed, RNG_DROPOUT, step, base + ((n*H + h)*T + i)*T + j) < rate, else scaled by
    // 1 / (1 - rate); lse is that of the undropped softmax. Backward draws the same numbers again:
    // no mask is stored. Results do not depend on the thread count.
    void (*attention_forward)(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                              uint64_t seed, uint64_t step, uint64_t base, const float *qkv, float *y, float *lse);
    // dqkv[N, T, 3, H, E] overwritten with the gradient of y's loss w.r.t. qkv, from dy[N, T, H, E] and
    // what forward took and gave (same n .. base, qkv, y, lse). Probabilities are recomputed tile by
    // tile from qkv and lse. work[N, H, T]: the caller's temporary, the row sums D = rowsum(dy * y)
    // (the kernels' other temporaries are tiles of a fixed size: none grows with T).
    void (*attention_backward)(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                               uint64_t seed, uint64_t step, uint64_t base, const float *qkv, const float *y,
                               const float *lse, const float *dy, float *dqkv, float *work);
    // (end attention region)

    // ---- token ops (patches, position embeddings, pooling, drop path): src/backend/cpu/cpu_tokens.c ----
    // (begin token region)
    // Patches of a map <-> token rows. image[N, C, D, H, W] (in = {D, H, W}; 2D: D = 1, p[0] = 1),
    // rows[N, T, K] with T = (D/p0)(H/p1)(W/p2) patches in raster order (d, h, w) and K = C*p0*p1*p2
    // values per patch, ordered c_last = 0: (c, a, b, e) as a Conv weight [F, C, p0, p1, p2] (the
    // patch embedding is then rows . W^T); c_last = 1: (a, b, e, c) as the tutorial ViT's head
    // (its Linear's outputs, reshaped (p, q, c)). p divides in. to_rows = 1: rows (=|+=) image;
    // 0: image (=|+=) rows, accumulated when accumulate. Every element is written once: a pure
    // permutation, bitwise on every backend.
    void (*patch_rearrange)(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                            int accumulate, const float *src, float *dst);
    // dst[i, j] (=|+=) scale * sum over r < m of src[(i*m + r) * src_stride + j], for i < n, j < len:
    // sums of m consecutive rows (len <= src_stride), in order r = 0, 1, ... (the parameter
    // gradients of pos_embed over the batch: n = 1, m = N; mean pooling over tokens: n = N, m = T).
    void (*row_sum)(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride,
                    float *dst, int accumulate);
    // The adjoint of row_sum: dst[(i*m + r) * dst_stride + j] (=|+=) scale * src[i, j] for i < n,
    // r < m, j < len: each of n rows spread over m consecutive rows (pos_embed's broadcast over the
    // batch: n = 1, m = N; mean pooling's backward: n = N, m = T, scale 1/T).
    void (*row_spread)(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst,
                       int64_t dst_stride, int accumulate);
    // dst[r, j] (=|+=) s[r] * src[r, j] for r < rows, j < len: a scale per row (drop_path's mask).
    // src and dst may alias when not accumulating.
    void (*row_scale)(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate);
    // (end token region)
} gl_backend;

const gl_backend *backend_cpu(void);

// The CUDA backend bound to GPU `ordinal` modulo the GPUs this process sees (callers pass the
// local rank, so CUDA_VISIBLE_DEVICES is honoured). NULL when this binary was built without CUDA,
// there is no driver or GPU, or cuDNN/cuBLAS cannot be loaded: msg says why. On success msg
// names the GPU. The first successful call binds the process; later calls return the same table.
const gl_backend *backend_cuda(int ordinal, char *msg, size_t len);

#ifdef __cplusplus
}
#endif

#endif
