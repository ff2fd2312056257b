// cpu_kernels.h: the CPU backend's kernels (shapes in each definition's comment).
#ifndef GALLEY_CPU_KERNELS_H
#define GALLEY_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "galley/backend.h"

// c[M, N] = op(a)[M, K] . op(b)[K, N] + beta * c (row-major, leading dimensions lda, ldb, ldc;
// op transposes when ta/tb). Thread-count independent bit for bit (cpu_gemm.c).
void cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc);
// The same with C's tiles always cut along its rows, whatever its shape: a dense layer's weight
// gradient, so each thread's rows are those its forward tiles read and its optimizer update
// writes (optim_owner).
void cpu_gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                   int64_t ldb, float beta, float *c, int64_t ldc);
// cpu_gemm.c: C = op(a) . op(b) (overwritten) with the depth k cut into cpu_gemm_depth_parts
// parts (a count fixed by the shape: 1 means cpu_gemm_rows), each a serial sgemm, then C = ((P0 +
// P1) + P2) ... in part order: the same bits at any thread count.
int64_t cpu_gemm_depth_parts(int64_t m, int64_t n, int64_t k);
void cpu_gemm_depth(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc);
void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y);
void cpu_dense_forward_res(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b,
                           const float *res, float *y);
void cpu_dense_forward_act(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y,
                           gl_act act, float slope);
void cpu_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx);
void cpu_dense_backward_set(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx);
void cpu_dense_backward_act(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx, gl_act act, float slope, const float *gate);
void cpu_act_forward(gl_act act, float alpha, int64_t n, const float *x, float *y);
void cpu_act_backward(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
void cpu_act_backward_set(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
// cpu_gelu.c: y = gelu(x); dx (+)= dy * gelu'(x) (set: dx = 0 + the term)
void cpu_gelu_forward(int64_t n, const float *x, float *y);
void cpu_gelu_backward(int64_t n, const float *x, const float *dy, float *dx, int set);
// The same on a given instruction set (cpu_isa.h's numbers; tests: every one gives the same bits)
void cpu_gelu_forward_isa(int isa, int64_t n, const float *x, float *y);
void cpu_gelu_backward_isa(int isa, int64_t n, const float *x, const float *dy, float *dx, int set);
// y = gelu(x) with x overwritten by gelu'(x); dx (+)= dy * d with d that derivative: the bits of
// cpu_gelu_forward and cpu_gelu_backward (backend.h's gelu_forward_keep, gelu_backward_kept)
void cpu_gelu_forward_keep(int64_t n, float *x, float *y);
void cpu_gelu_backward_kept(int64_t n, const float *d, const float *dy, float *dx, int set);
void cpu_gelu_forward_keep_isa(int isa, int64_t n, float *x, float *y);
void cpu_gelu_backward_kept_isa(int isa, int64_t n, const float *d, const float *dy, float *dx, int set);
double cpu_softmax_xent(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                        const float *weights, float *dlogits);
double cpu_regression_loss(int kind, int64_t count, const float *pred, const float *target, float *dpred);
double cpu_l2_relative_loss(int64_t units, int64_t len, const float *pred, const float *target, float *dpred);

// (begin conv region)
void cpu_conv_forward(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y, float *scratch,
                      int64_t scratch_floats);
void cpu_conv_forward_act(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                          float *scratch, int64_t scratch_floats, gl_act act, float slope);
void cpu_conv_forward_pool(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                           float *scratch, int64_t scratch_floats, bool act_on, gl_act act, float slope, int kd,
                           float *pooled, int32_t *argmax);
void cpu_conv_backward(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw, float *db,
                       float *dx, float *scratch, int64_t scratch_floats);
void cpu_conv_backward_set(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw,
                           float *db, float *dx, float *scratch, int64_t scratch_floats);
void cpu_conv_transpose_forward(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                                float *scratch, int64_t scratch_floats);
void cpu_conv_transpose_forward_act(const gl_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                                    float *scratch, int64_t scratch_floats, gl_act act, float slope);
void cpu_conv_transpose_backward(const gl_conv_geom *g, const float *x, const float *w, const float *dy, float *dw,
                                 float *db, float *dx, float *scratch, int64_t scratch_floats);
// Test hook: at most `samples` samples per im2col chunk (0, the default: as many as scratch holds).
void cpu_conv_set_chunk_cap(int64_t samples);
// cpu_conv_fast.c: stride 1, one group, on AVX-512 or AVX2+FMA CPUs (same shapes as cpu_conv_forward, with
// in/out/k/d/p as {D, H, W}). Each returns false, having done nothing, where it does not apply
// (another CPU, geometry or too little scratch); cpu_conv.c then runs im2col + sgemm.
bool cpu_conv_fast_ok(void);
// Which of those kernels this CPU runs: none, AVX2+FMA or AVX-512 (asked once).
enum { CPU_ISA_NONE, CPU_ISA_AVX2, CPU_ISA_AVX512 };
int cpu_conv_fast_isa(void);
// An activation applied to outputs as they are stored (relu, or leaky_relu with its slope), or none:
// the same arithmetic as cpu_act_forward, so y = act(conv(x)) has the bits of the two passes.
typedef struct {
    bool on;
    gl_act act;  // ACT_RELU or ACT_LEAKY_RELU (ACT_GELU: a gate's, below)
    float slope;
    bool stream;  // cpu_conv_fast.c: finished outputs of whole tiles bypass the caches (AVX2 kernels)
    // cpu_gemm_fast only: not the activation but its derivative through gate, an array laid out as
    // c (same ldc): c = 0 + (gate > 0 ? c : leaky ? slope * c : 0), cpu_act_backward_set's bits
    // (a dense layer's input gradient through the relu whose output is that layer's input); with
    // act ACT_GELU, c = 0 + c * gate, gate gelu' as cpu_gelu_forward_keep left it
    // (cpu_gelu_backward_kept's bits).
    const float *gate;
    // cpu_gemm_fast only: an array laid out as c (same ldc) added as c is stored, after the
    // activation or the gate: c = act(c) + res, or gate's derivative of c + res (a dense layer's
    // output and the residual added to it).
    const float *res;
} cpu_store_act;
// A max pool written as the convolution stores its output (NULL: none): windows {kd, 2, 2} (kd 1
// or 2) at stride the window, no padding, over an output whose D, H, W they tile; y (N,F,D/kd,
// H/2,W/2) and argmax as cpu_max_pool_forward writes them. done: set by a kernel that pooled, its
// convolution output then left unwritten; else the caller pools the output the kernel wrote.
typedef struct {
    int kd;
    float *y;
    int32_t *argmax;
    bool done;
} cpu_store_pool;
bool cpu_conv_fast_forward(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                           const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                           const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats,
                           cpu_store_act act, cpu_store_pool *pool);
// dw (F,C,KD,KH,KW) = the weight gradient (overwritten), from x (N,C,D,H,W) and dy (N,F,OD,OH,OW).
bool cpu_conv_fast_weight_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                               const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                               const float *dy, float *dw, float *scratch, int64_t scratch_floats);
// dx (N,C,D,H,W) += the input gradient (acc), or = it (the sums start from 0 rather than from dx:
// the bits of a cleared dx), from w (F,C,KD,KH,KW) and dy (N,F,OD,OH,OW). With dy NULL it only
// says whether it applies.
bool cpu_conv_fast_input_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                              const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *w,
                              const float *dy, float *dx, bool acc, float *scratch, int64_t scratch_floats);
// db (CH) = the sum of dy (N,CH,P) over N and P, in double (overwritten).
bool cpu_conv_fast_bias_grad(int64_t n, int64_t ch, int64_t P, const float *dy, float *db);
// The implicit GEMM's register-tile kernel, for cpu_conv_wino.c: y[rows][cols] (row stride ldy,
// rows <= *mr, cols <= 32) = bias (or 0, or y itself when acc) + sum over k < kk of a[k][i] * b[k][j]
// in k order, a packed [kk][*mr], b [kk][32]; the same bits on AVX2 and AVX-512. NULL: neither.
typedef void (*cpu_conv_tile_fn)(int64_t kk, const float *a, const float *b, float *y, int64_t ldy, int rows,
                                 int cols, const float *bias, bool acc, cpu_store_act act);
cpu_conv_tile_fn cpu_conv_fast_tile(int *mr);
// The weight gradient's tile kernel, likewise: dwt[rows][cols] (row stride ldw, rows <= *mr, cols <=
// 32) = (init ? 0 : dwt) + sum over j < cnt (<= 256), in j order, of panel[i * ldp + j] * dyt[j *
// lddy + col]; reads *mr rows of panel whatever rows is.
typedef void (*cpu_conv_dw_tile_fn)(int64_t cnt, const float *panel, int64_t ldp, const float *dyt, int64_t lddy,
                                    float *dwt, int64_t ldw, int rows, int cols, bool init);
cpu_conv_dw_tile_fn cpu_conv_fast_dw_tile(int *mr);
// cpu_gemm_fast.c: c[M, N] = init + op(a)[M, K] . op(b)[K, N] (row-major; init c itself when acc,
// else bias[j] per column, or 0 without bias), act applied as c is stored; split into tasks along
// C's rows (by_rows) or columns. Each element one fmaf chain in k order: the same bits at any
// thread count and on either instruction set. false, having done nothing: no AVX2+FMA, or M < 12
// or N < 32. _isa: on the kernels of `isa` (CPU_ISA_*; tests run AVX2 on an AVX-512 CPU).
bool cpu_gemm_fast(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                   int64_t ldb, bool acc, const float *bias, cpu_store_act act, float *c, int64_t ldc, bool by_rows);
bool cpu_gemm_fast_isa(int isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, bool acc, const float *bias, cpu_store_act act, float *c,
                       int64_t ldc, bool by_rows);
// cpu_conv_wino.c: 3x3(x3) stride-1 convolutions by Winograd F(2,3) (kernel 3 along W, and 3 or
// 1 along D and H; padding 0..2), forward and input gradient, the same arguments as the
// cpu_conv_fast_* ones. false, having done nothing: it does not apply, GALLEY_CONV_ALGO=direct,
// cpu_conv_wino_worth says no, or too little scratch (input_grad with dy NULL: only says).
// Whether F(2,3) is worth it on kernels of `isa` (CPU_ISA_*), for one pass of a convolution of
// `dims` transformed axes (2 or 3) reading c channels into f, n samples of `tiles` tiles each.
typedef enum { CPU_CONV_FORWARD, CPU_CONV_INPUT_GRAD, CPU_CONV_WEIGHT_GRAD } cpu_conv_pass;
bool cpu_conv_wino_worth(int isa, cpu_conv_pass pass, int dims, int64_t n, int64_t c, int64_t f, int64_t tiles);
bool cpu_conv_wino_forward(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                           const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                           const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats,
                           cpu_store_act act, cpu_store_pool *pool);
// dw (F,C,taps) = the weight gradient (overwritten), as cpu_conv_fast_weight_grad.
bool cpu_conv_wino_weight_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                               const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                               const float *dy, float *dw, float *scratch, int64_t scratch_floats);
// The least scratch cpu_conv_wino_weight_grad takes (one thread, one sample at a time); 0: none.
int64_t cpu_conv_wino_weight_grad_floats(int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                                         const int64_t k[3], const int64_t p[3]);
// acc as cpu_conv_fast_input_grad's (without it, but for the sign of a zero, a cleared dx's bits).
bool cpu_conv_wino_input_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                              const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *w,
                              const float *dy, float *dx, bool acc, float *scratch, int64_t scratch_floats);
// (end conv region)
// (begin pool-norm region)
// Below this much work (elements touched) a pool-norm kernel runs on one thread: starting a
// parallel region costs more. Results are the same either way.
#define CPU_PAR_MIN_WORK 32768
// cpu_pool.c
// Rows of max_pool_forward's "kernel 2" windows ({kd, 2, 2} at stride the window, no padding),
// one per channel c < nch: outputs ow < nout of rows r0, r1 (h, h + 1 of a plane) and, with kd =
// 2, r2, r3 (h, h + 1 of the next plane), each c * cs floats on; y[c * os + ow] the winner (the
// first of equal values; NaN wins), argmax[c * os + ow] = i0 + 2 ow + its offset (w1 to the next
// row, hw to the next plane). The fused convolutions pool with it too.
void cpu_max_pool_k2_rows(int64_t nch, int64_t cs, int64_t os, int64_t nout, int kd, const float *r0,
                          const float *r1, const float *r2, const float *r3, int32_t i0, int32_t w1, int32_t hw,
                          float *y, int32_t *argmax);
void cpu_max_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                          const int s[3], const int p[3], const float *x, float *y, int32_t *argmax);
void cpu_max_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                           const float *dy, float *dx);
void cpu_max_pool_backward_act(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                               const int s[3], const int p[3], const int32_t *argmax, const float *dy, const float *y,
                               bool leaky, float slope, float *dx);
void cpu_max_pool_backward_set(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                               const float *dy, float *dx);
void cpu_avg_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                          const int s[3], const int p[3], const float *x, float *y);
void cpu_avg_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *dy, float *dx);
void cpu_global_avg_pool_forward(int64_t n, int64_t c, int64_t s, const float *x, float *y);
void cpu_global_avg_pool_backward(int64_t n, int64_t c, int64_t s, const float *dy, float *dx);
// cpu_norm.c
void cpu_batch_norm_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                            float eps, int train, float momentum, float *running, float *saved, float *y,
                            const gl_reducer *red);
void cpu_batch_norm_forward_act(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                                const float *beta, float eps, int train, float momentum, float *running, float *saved,
                                float *y, const gl_reducer *red, gl_act act, float slope);
void cpu_batch_norm_backward(int64_t n, int64_t c, int64_t s, const float *x, const float *dy, const float *gamma,
                             const float *saved, float *dgamma, float *dbeta, float *dx, const gl_reducer *red);
void cpu_layer_norm_forward(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta, float eps,
                            float *saved, float *y);
void cpu_layer_norm_backward(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                             const float *saved, float *dgamma, float *dbeta, float *dx);
// cpu_misc.c
void cpu_dropout_forward(int64_t count, float rate, int train, uint64_t seed, uint64_t step, uint64_t base,
                         const float *x, float *mask, float *y);
void cpu_dropout_backward(int64_t count, const float *mask, const float *dy, float *dx);
void cpu_scale(int64_t count, float a, const float *x, float *y);
void cpu_axpy(int64_t count, float a, const float *x, float *y);
void cpu_copy_rows(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                   int accumulate);
void cpu_upsample_forward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *x, float *y);
void cpu_upsample_backward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *dy, float *dx);
// (end pool-norm region)

// (begin token region)
// cpu_tokens.c
void cpu_patch_rearrange(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                         int accumulate, const float *src, float *dst);
void cpu_row_sum(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride, float *dst,
                 int accumulate);
void cpu_row_spread(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst, int64_t dst_stride,
                    int accumulate);
void cpu_row_scale(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate);
// (end token region)
// (begin attention region)
// cpu_attention.c (backend.h's contract)
void cpu_attention_forward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                           uint64_t seed, uint64_t step, uint64_t base, const float *qkv, float *y, float *lse);
void cpu_attention_backward(int64_t n, int64_t t, int64_t h, int64_t e, float scale, int causal, float rate,
                            uint64_t seed, uint64_t step, uint64_t base, const float *qkv, const float *y,
                            const float *lse, const float *dy, float *dqkv, float *work);
// Test hook: isa -1 the best this CPU has, 0 scalar, 1 AVX2+FMA, 2 AVX-512 (a set the CPU lacks
// falls back to the best it has); split -1 by thread count, 0 backward by whole (sample, head)
// pairs, 1 in two passes over tiles. Returns the instruction set now in effect.
int cpu_attention_force(int isa, int split);
// Test hook: cpu_attention.c's whole-tile kernels off (0) or on (1, the default).
void cpu_attention_force_tiles(int on);
// Test hook: the exponential row of instruction set isa (capped at the best; as
// cpu_attention_force): x[j] = e^(x[j] scale - sub), returns their sum.
float cpu_attention_exp_row(int isa, float *x, int64_t cnt, float scale, float sub);
// (end attention region)

#endif
