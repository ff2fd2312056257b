// cuda_conv.cu: convolution and transposed convolution on cuDNN's legacy convolution API.
//
// Framing: every call is one convolution x[N, C, in] -> y[N, F, out] (the geometry of
// backend.h). A transposed convolution C -> F from in to out is the convolution F -> C from
// out to in, as in cpu_conv.c, so its forward is that convolution's BackwardData, its weight
// gradient that convolution's BackwardFilter, and its input gradient that convolution's
// Forward. Below, "x-space" is the convolution's input side, "y-space" its output side.
//
// Padding: cuDNN pads both sides of each dimension by the same amount P; the CPU pads p before
// and, implicitly, pa = (out - 1) * s + span - in - p after (span = (k - 1) * d + 1). cuDNN's
// output size floor((in + 2P - span) / s) + 1 equals out with P = p exactly when
// 0 <= p - pa < s: explicit symmetric padding always, `same` with an even total, and a
// transposed convolution with output_padding < stride. Then x goes to cuDNN as it is.
// Otherwise (`same` with an odd total: pa = p + 1; a transposed convolution with
// output_padding >= stride, allowed when smaller than the dilation: pa < p) x-space goes
// through a staged copy xc: cuDNN pads P = min(p, pa) (at least 0) symmetrically and the rest
// is explicit zeros in xc: x starts at offset ox = p - P inside xc, whose extent
// in + p + pa - 2P makes cuDNN's output exactly `out` (so y-space never needs a copy; pa < 0
// crops x positions the convolution never reads). Inputs are copied in (stage_in); x-space
// results come back out of xc (stage_out): overwritten for the transposed forward (positions
// past the convolution's reach, PyTorch's output_padding, get 0 and then the bias, as on the
// CPU), accumulated for dx. The copy lives in the workspace, ahead of cuDNN's part.
//
// Layout: NCDHW as 5-d descriptors; a 2D map (unit depth, depth-1 kernel) goes as 4-d NCHW,
// where cuDNN's tuned 2D kernels live. cuDNN limits a tensor to 2^31 elements, so larger
// batches run in chunks of samples (dW then sums over the chunks with beta = 1).
//
// Algorithms: chosen once per geometry (chunk size included) and pass. By default
// cuDNN's heuristics (cudnnGet*Algorithm_v7) in their order; with GALLEY_CUDNN_AUTOTUNE=1
// each is timed once on the real tensors (cudnnFind*AlgorithmEx, like cudnn.benchmark): fp32
// and tf32 on galley's arrays, bf16 and fp16 on the real inputs converted into the 16-bit copies
// in the entry's layout (see Precision). Either way the first algorithm that is deterministic,
// runs in FMA math (fp32) and whose workspace fits ctx->work_limit wins; a non-deterministic one
// only when no deterministic one fits, and a plain implicit GEMM (over the limit if need be) when
// nothing fits. Never while a CUDA graph is being recorded (entry_choose drops the recording).
//
// Cache: a fixed table of CONV_CACHE geometries with their descriptors (created once per slot
// and re-set when the slot is reused) and algorithms, in a file-static struct that is part of
// the backend's one context (cuda_ctx): a call after a geometry's first allocates nothing.
// When the table is full the oldest slot is reused (round robin): a model with more distinct
// geometries than slots still runs, it only chooses algorithms again.
//
// Bias: own kernels. The forward adds b per channel and applies a fused relu or leaky_relu
// (bias_act); a 16-bit forward that overwrites y does both in the pass that widens its result
// into y (from_16bit, from_16bit_cl), with the same float operations, so no bit changes and y is
// not read and written again. The gradient sums each channel in double in fixed slices, then the
// slices in order: repeatable bit for bit, no atomics.
//
// Precision (backend.h's set_precision; part of the cache key): fp32 runs FMA math only (the
// same bits every run, deterministic algorithms first). tf32 lets cuDNN use tensor-op math on
// the same fp32 tensors. bf16 and fp16 convert the chunk's fp32 inputs (x or its staged copy,
// w, dy) into 16-bit copies with our own kernel (to_16bit), run cuDNN on 16-bit tensors with fp32
// compute (CUDNN_DATA_FLOAT), and convert the 16-bit results back (from_16bit): overwritten, or
// added into dx and into dW over the chunks, in fp32; bias stays fp32. The copies live in the
// workspace beside the staged copy (work_get), and chunks are cut so that they stay within
// ctx->work_limit, like the staged copy: nothing is allocated per step. Where cuDNN supports no
// 16-bit algorithm for a geometry, that convolution falls back to fp32 and says so once on
// stderr. With GALLEY_CUDNN_AUTOTUNE=1, 16-bit entries are timed on those copies too: the chunk's
// inputs converted first, the pass's result written into the workspace's 16-bit copy on its
// output side (scratch: the run converts its inputs again), never into galley's tensors.
//
// Channels last (16-bit only). The 16-bit copies are written channels-last (N, spatial, C;
// weights F, taps, C/groups) by the same conversion pass, a transpose through shared-memory
// tiles, and described to cuDNN so (NHWC strides, CUDNN_TENSOR_NHWC filters): its tensor-core
// kernels work in that layout, so cuDNN needs no transposes of its own. The results come back
// to galley's channels-first fp32 in the pass that widens them. GALLEY_CUDNN_CHANNELS_LAST=0
// keeps the 16-bit copies channels-first (part of the cache key, so a change applies at once).
// fp32 and tf32 run on galley's own arrays, which stay channels-first.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act.h"
#include "backend/cuda/cuda_half.h"
#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"

enum { PASS_FWD, PASS_DATA, PASS_FILTER, PASS_COUNT };
static const char *const pass_names[PASS_COUNT] = {"forward", "backward-data", "backward-filter"};


// How cuDNN sees the convolution (see the header comment).
typedef struct {
    int64_t pad[3];                               // cuDNN's symmetric padding
    int64_t xc[3];                                // cuDNN's x extent
    int64_t ox[3];                                // where x's first element sits inside it
    bool staged;                                  // x-space goes through the copy xc
    int64_t x_elems, xc_elems, y_elems, w_elems;  // per sample: C*in, C*xc, F*out; the weight's
} cv_layout;

typedef struct {
    int64_t n;     // samples per call (a chunk)
    int64_t prec;  // PRECISION_* in effect when the entry was made
    int64_t cl;    // 16-bit copies channels-last (GALLEY_CUDNN_CHANNELS_LAST, for bf16/fp16 only)
    gl_conv_geom g;  // a convolution x[., C, in] -> y[., F, out] (transposed ones flipped), nd and n 0
} cv_key;

typedef struct {
    cv_key key;
    cv_layout L;
    bool half;  // descriptors are bf16/fp16 (key.prec asks for it and cuDNN supports it)
    bool cl;    // with half: the 16-bit copies are channels-last (key.cl, unless cuDNN had no algorithm so)
    bool said;  // this entry printed the fp32 fallback line
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo[PASS_COUNT];
    size_t ws[PASS_COUNT];  // workspace bytes of the chosen algorithm
    bool chosen[PASS_COUNT];
} cv_entry;

#define CONV_CACHE 128

// Part of the backend's one context (cuda_ctx): the geometries seen so far.
static struct {
    cv_entry e[CONV_CACHE];
    int used;   // slots filled
    int evict;  // the next slot to reuse once all are filled
    int tune;   // 0: not read yet, 1: heuristics, 2: autotune (GALLEY_CUDNN_AUTOTUNE=1)
} cv_cache;

// The math type of a convolution: fp32 is FMA only, so fp32 stays fp32 and matches the CPU
// (CUDNN_DEFAULT_MATH would let cuDNN use TF32 tensor cores on Ampere and later). tf32, bf16
// and fp16 allow tensor ops (TF32 on fp32 tensors, as PyTorch's allow_tf32 does; 16-bit MMA on
// the 16-bit copies). Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: no silent fp32 -> fp16.
static bool prec_is_half(int64_t prec) { return prec == PRECISION_BF16 || prec == PRECISION_FP16; }

// Whether e computes in exact fp32: fp32 asked for, or a 16-bit entry that fell back.
static bool entry_fp32(const cv_entry *e) {
    return e->key.prec == PRECISION_FP32 || (prec_is_half(e->key.prec) && !e->half);
}

static cudnnMathType_t conv_math_type(const cv_entry *e) { return entry_fp32(e) ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

static const char *prec_name(int64_t prec) {
    return prec == PRECISION_BF16 ? "bf16" : prec == PRECISION_FP16 ? "fp16" : prec == PRECISION_TF32 ? "tf32" : "fp32";
}

// Read at each new entry (cheap beside choosing algorithms), so a test can compare both layouts.
static bool channels_last_on(void) {
    const char *v = getenv("GALLEY_CUDNN_CHANNELS_LAST");
    return !(v && strcmp(v, "0") == 0);
}

static bool autotune_on(void) {
    if (!cv_cache.tune) {
        const char *v = getenv("GALLEY_CUDNN_AUTOTUNE");
        cv_cache.tune = v && strcmp(v, "1") == 0 ? 2 : 1;
    }
    return cv_cache.tune == 2;
}

static int to_int(int64_t v) {
    GL_CHECK(v >= 0 && v <= INT32_MAX, "conv sizes fit cuDNN's int dimensions");
    return (int)v;
}

// The cache's copy of geometry g (backend_types.h; a transposed convolution's flipped): nd and
// n cleared, as they do not change the descriptors (the chunk size is the key's own n).
static gl_conv_geom geom_make(const gl_conv_geom *geo) {
    gl_conv_geom g = *geo;
    g.nd = 0, g.n = 0;
    GL_CHECK(g.groups >= 1 && g.c % g.groups == 0 && g.f % g.groups == 0,
             "conv groups must divide both channel counts");
    return g;
}

static cv_layout layout_of(const gl_conv_geom *g) {
    cv_layout L;
    memset(&L, 0, sizeof L);
    int64_t in_pos = 1, xc_pos = 1, out_pos = 1, taps = 1;
    for (int j = 0; j < 3; j++) {
        int64_t span = (g->k[j] - 1) * g->d[j] + 1, p = g->p[j];
        int64_t after = (g->out[j] - 1) * g->s[j] + span - g->in[j] - p;  // the CPU's padding after
        if (p - after >= 0 && p - after < g->s[j]) {
            L.pad[j] = p, L.ox[j] = 0, L.xc[j] = g->in[j];  // cuDNN's formula gives out as it is
        } else {
            int64_t P = p < after ? p : after;
            if (P < 0) P = 0;
            L.pad[j] = P, L.ox[j] = p - P, L.xc[j] = g->in[j] + p + after - 2 * P;
        }
        GL_CHECK(L.xc[j] >= 1 && g->out[j] >= 1, "conv geometry has a positive extent");
        L.staged = L.staged || L.ox[j] != 0 || L.xc[j] != g->in[j];
        in_pos *= g->in[j], xc_pos *= L.xc[j], out_pos *= g->out[j], taps *= g->k[j];
    }
    L.x_elems = g->c * in_pos, L.xc_elems = g->c * xc_pos, L.y_elems = g->f * out_pos;
    L.w_elems = g->f * (g->c / g->groups) * taps;
    return L;
}

// Bytes of the staged copy of n samples of x-space, rounded to keep cuDNN's part aligned.
static size_t stage_bytes(const cv_layout *L, int64_t n) {
    if (!L->staged) return 0;
    return (sizeof(float) * (size_t)(n * L->xc_elems) + 255) / 256 * 256;
}

// Bytes of n samples' 16-bit copies of one side (x-space: xc_elems, y-space: y_elems), aligned.
static size_t half_bytes(int64_t elems) { return (sizeof(uint16_t) * (size_t)elems + 255) / 256 * 256; }

// Samples per cuDNN call: its tensors hold at most 2^31 elements; a staged copy and the 16-bit
// copies (half: bf16/fp16) also stay within the workspace limit (at least one sample).
static int64_t chunk_samples(const cv_layout *L, int64_t n, bool half) {
    int64_t per = L->xc_elems > L->y_elems ? L->xc_elems : L->y_elems;
    if (per > INT32_MAX)
        gl_die(GL_EXIT_RUNTIME, "use smaller inputs or fewer channels for this layer, or set train.device: cpu",
               "a convolution sample has %lld elements, more than cuDNN's 2^31 per tensor", (long long)per);
    int64_t nb = INT32_MAX / per;
    size_t sample_bytes = (L->staged ? sizeof(float) * (size_t)L->xc_elems : 0) +
                          (half ? sizeof(uint16_t) * (size_t)(L->xc_elems + L->y_elems) : 0);
    if (sample_bytes) {
        int64_t cap = (int64_t)(cuda_ctx_get()->work_limit / sample_bytes);
        if (cap < 1) cap = 1;
        if (nb > cap) nb = cap;
    }
    return nb < n ? nb : n;
}

// ---- descriptors and the cache ----------------------------------------------------------------

// Sets e's descriptors for its key and checks that cuDNN's output size is the caller's.
static void entry_describe(cv_entry *e) {
    const gl_conv_geom *g = &e->key.g;
    const cv_layout *L = &e->L;
    // A 2D map (unit depth, depth-1 kernel, nothing padded in depth) goes as 4-d NCHW.
    int first = L->xc[0] == 1 && g->out[0] == 1 && g->k[0] == 1 && L->pad[0] == 0 ? 1 : 0;
    int sd = 3 - first, nd = sd + 2;
    int xdim[5], ydim[5], wdim[5], xstr[5], ystr[5], pad[3], str[3], dil[3];
    xdim[0] = ydim[0] = to_int(e->key.n);
    xdim[1] = to_int(g->c), ydim[1] = to_int(g->f);
    wdim[0] = to_int(g->f), wdim[1] = to_int(g->c / g->groups);
    for (int j = first; j < 3; j++) {
        int i = j - first;
        xdim[2 + i] = to_int(L->xc[j]), ydim[2 + i] = to_int(g->out[j]), wdim[2 + i] = to_int(g->k[j]);
        pad[i] = to_int(L->pad[j]), str[i] = to_int(g->s[j]), dil[i] = to_int(g->d[j]);
    }
    const bool cl = e->half && e->cl;
    if (!cl) {
        xstr[nd - 1] = ystr[nd - 1] = 1;  // packed
        for (int i = nd - 2; i >= 0; i--) xstr[i] = xstr[i + 1] * xdim[i + 1], ystr[i] = ystr[i + 1] * ydim[i + 1];
    } else {  // channels last: channel stride 1, then the spatial dims innermost first, then N
        xstr[1] = ystr[1] = 1;
        xstr[nd - 1] = xdim[1], ystr[nd - 1] = ydim[1];
        for (int i = nd - 2; i >= 2; i--) xstr[i] = xstr[i + 1] * xdim[i + 1], ystr[i] = ystr[i + 1] * ydim[i + 1];
        xstr[0] = xstr[2] * xdim[2], ystr[0] = ystr[2] * ydim[2];
    }
    // 16-bit tensors with fp32 compute (cuDNN's "pseudo-half" configurations), or fp32 throughout.
    cudnnDataType_t dt = !e->half ? CUDNN_DATA_FLOAT
                         : e->key.prec == PRECISION_BF16 ? CUDNN_DATA_BFLOAT16
                                                         : CUDNN_DATA_HALF;
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(e->xd, dt, nd, xdim, xstr));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(e->yd, dt, nd, ydim, ystr));
    CUDNN_CHECK(cudnnSetFilterNdDescriptor(e->wd, dt, cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd, wdim));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(e->cd, sd, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->cd, to_int(g->groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->cd, conv_math_type(e)));
    int got[5];
    CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(e->cd, e->xd, e->wd, nd, got));
    for (int i = 0; i < nd; i++)
        if (got[i] != ydim[i])
            gl_die(GL_EXIT_RUNTIME, "this is a bug in galley's CUDA convolution; set train.device: cpu meanwhile",
                   "cuDNN's convolution output dimension %d is %d, expected %d (input %lldx%lldx%lld, output "
                   "%lldx%lldx%lld, kernel %lld, stride %lld, dilation %lld, padding %lld)",
                   i, got[i], ydim[i], (long long)g->in[0], (long long)g->in[1], (long long)g->in[2],
                   (long long)g->out[0], (long long)g->out[1], (long long)g->out[2], (long long)g->k[2],
                   (long long)g->s[2], (long long)g->d[2], (long long)g->p[2]);
}

// The cache entry of geometry g for chunks of n samples in the precision in effect (descriptors
// set, algorithms chosen lazily by entry_choose).
static cv_entry *entry_get(const gl_conv_geom *g, const cv_layout *L, int64_t n) {
    cv_key key;
    memset(&key, 0, sizeof key);
    key.n = n, key.prec = cuda_ctx_get()->precision, key.g = *g;
    key.cl = prec_is_half(key.prec) && channels_last_on();
    for (int i = 0; i < cv_cache.used; i++)
        if (memcmp(&cv_cache.e[i].key, &key, sizeof key) == 0) return &cv_cache.e[i];
    cv_entry *e;
    if (cv_cache.used < CONV_CACHE) {
        e = &cv_cache.e[cv_cache.used++];
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->xd));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->yd));
        CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->wd));
        CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->cd));
    } else {
        // Reuse the oldest slot: its descriptors are host state that calls already queued on
        // the stream no longer read, so re-setting them is safe.
        e = &cv_cache.e[cv_cache.evict];
        cv_cache.evict = (cv_cache.evict + 1) % CONV_CACHE;
    }
    e->key = key;
    e->L = *L;
    e->half = prec_is_half(key.prec);
    e->cl = e->half && key.cl;
    e->said = false;
    for (int p = 0; p < PASS_COUNT; p++) e->chosen[p] = false, e->algo[p] = 0, e->ws[p] = 0;
    entry_describe(e);
    return e;
}

// cuDNN supports no 16-bit algorithm for e's geometry: e runs in fp32 from now on (the caller
// re-chooses: entry_rechoose), said once per geometry and precision (other chunk sizes of the
// same layer that fall back too stay quiet).
static void entry_fall_back(cv_entry *e, int pass) {
    bool said = false;
    for (int i = 0; i < cv_cache.used; i++) {
        const cv_entry *o = &cv_cache.e[i];
        if (o->said && o->key.prec == e->key.prec && memcmp(&o->key.g, &e->key.g, sizeof o->key.g) == 0) said = true;
    }
    if (!said) {
        const gl_conv_geom *g = &e->key.g;
        fprintf(stderr, "galley: cuDNN has no %s %s algorithm for the convolution %lld -> %lld channels (groups %lld), "
                        "input %lldx%lldx%lld, output %lldx%lldx%lld, kernel %lldx%lldx%lld: it runs in fp32\n",
                prec_name(e->key.prec), pass_names[pass], (long long)g->c, (long long)g->f, (long long)g->groups,
                (long long)g->in[0], (long long)g->in[1], (long long)g->in[2], (long long)g->out[0],
                (long long)g->out[1], (long long)g->out[2], (long long)g->k[0], (long long)g->k[1], (long long)g->k[2]);
        e->said = true;
    }
    e->half = false;
}

// ---- algorithm choice -------------------------------------------------------------------------

// The workspace algo needs for pass on e's descriptors. Not wrapped in CUDNN_CHECK: a failure
// is cuDNN's answer that the algorithm does not support this geometry.
static cudnnStatus_t ws_size(const cv_entry *e, int pass, int algo, size_t *bytes) {
    cudnnHandle_t h = cuda_ctx_get()->cudnn;
    if (pass == PASS_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, e->xd, e->wd, e->cd, e->yd, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    if (pass == PASS_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->wd, e->yd, e->cd, e->xd,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->xd, e->yd, e->cd, e->wd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

// The first usable result in cuDNN's order (heuristic rank or measured time): it ran or is
// supported, uses no tensor-op math in fp32 (TF32) and never down-converts fp32, and its
// workspace fits limit; deterministic ones first, so repeated runs give the same bits.
template <typename Perf>
static bool pick(cv_entry *e, int pass, const Perf *perf, int got, size_t limit) {
    bool fp32 = entry_fp32(e);
    for (int strict = 1; strict >= 0; strict--)
        for (int i = 0; i < got; i++) {
            const Perf *r = &perf[i];
            if (r->status != CUDNN_STATUS_SUCCESS) continue;
            if (strict && r->determinism != CUDNN_DETERMINISTIC) continue;
            if (r->mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            if (fp32 && r->mathType == CUDNN_TENSOR_OP_MATH) continue;
            size_t bytes = 0;
            if (ws_size(e, pass, (int)r->algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
            e->algo[pass] = (int)r->algo, e->ws[pass] = bytes;
            return true;
        }
    return false;
}

// A heuristic query's status: fatal in fp32 and tf32; with 16-bit descriptors a failure (e.g.
// CUDNN_STATUS_NOT_SUPPORTED) means "not in 16 bits", and the caller falls back to fp32.
#define DNN_QUERY(e, call)                                                     \
    do {                                                                       \
        cudnnStatus_t st_ = (call);                                            \
        if (st_ != CUDNN_STATUS_SUCCESS && (e)->half) return false;            \
        cuda_check_dnn_at(st_, #call, __FILE__, __LINE__);                     \
    } while (0)

static bool choose_heuristic(cv_entry *e, int pass, size_t limit) {
    cudnnHandle_t h = cuda_ctx_get()->cudnn;
    int got = 0;
    if (pass == PASS_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_QUERY(e, cudnnGetConvolutionForwardAlgorithm_v7(h, e->xd, e->wd, e->cd, e->yd,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        return pick(e, pass, perf, got, limit);
    }
    if (pass == PASS_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_QUERY(e, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->wd, e->yd, e->cd, e->xd,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        return pick(e, pass, perf, got, limit);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DNN_QUERY(e, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->xd, e->yd, e->cd, e->wd,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    return pick(e, pass, perf, got, limit);
}

// One chunk's tensors, for timing: x-space input (NULL for the data pass), the weight and the
// y-space input (NULL for the forward pass). Outputs go to a temporary buffer (fp32) or to the
// workspace's 16-bit copies (bf16, fp16), so galley's tensors (dx accumulated) are not disturbed.
typedef struct {
    const float *x, *w, *y;
} cv_data;

// Whether t holds every tensor pass reads: a pass chosen again by entry_rechoose for another
// call may lack one (a transposed convolution whose geometry is also a convolution's), and is
// then chosen by heuristics.
static bool data_has(const cv_data *t, int pass) {
    return (pass == PASS_FILTER || t->w) && (pass == PASS_DATA || t->x) && (pass == PASS_FWD || t->y);
}

// cuDNN's part of the workspace while timing, beside `copies` bytes of copies ahead of it: at
// most limit, and little enough that the grown workspace (which cuda_workspace rounds up by a
// quarter, after releasing the old one) stays within 3/4 of the memory then free; half of what
// is left, so the timing run's output buffer and the rest of the step still fit.
static size_t tune_bytes(size_t limit, size_t copies) {
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t budget = (free_b + cuda_workspace_bytes()) / 5 * 3;  // 3/4, less the 1/4 rounding
    size_t spare = budget > copies ? (budget - copies) / 2 : 0;
    return limit < spare ? limit : spare;
}

// GALLEY_CUDNN_AUTOTUNE=1: every algorithm is run once on this chunk's tensors (cudnnFind*Ex,
// host-blocking) within tune_bytes of workspace.
static bool choose_timed(cv_entry *e, int pass, size_t limit, const cv_data *t) {
    cuda_ctx *cx = cuda_ctx_get();
    cudnnHandle_t h = cx->cudnn;
    size_t stage = stage_bytes(&e->L, e->key.n), tune = tune_bytes(limit, stage);
    char *base = (char *)cuda_workspace(stage + tune);
    void *ws = base + stage;
    const float *xin = t->x;
    if (e->L.staged) {  // the staged input's values do not matter for timing; zeros keep it tame
        CU_CHECK(cudaMemsetAsync(base, 0, stage, cx->stream));
        xin = (const float *)base;
    }
    int64_t out_elems = pass == PASS_FWD    ? e->key.n * e->L.y_elems
                        : pass == PASS_DATA ? e->key.n * e->L.xc_elems
                                            : e->L.w_elems;
    void *out = NULL;
    CU_CHECK(cudaMalloc(&out, sizeof(float) * (size_t)out_elems));
    int got = 0;
    bool ok;
    if (pass == PASS_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, e->xd, xin, e->wd, t->w, e->cd, e->yd, out,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, ws, tune));
        ok = pick(e, pass, perf, got, tune);
    } else if (pass == PASS_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, e->wd, t->w, e->yd, t->y, e->cd, e->xd, out,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf, ws,
                                                                tune));
        ok = pick(e, pass, perf, got, tune);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, e->xd, xin, e->yd, t->y, e->cd, e->wd, out,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf,
                                                                  ws, tune));
        ok = pick(e, pass, perf, got, tune);
    }
    CU_CHECK(cudaFree(out));  // waits for the device: nothing queued still uses it
    return ok;
}

// When nothing fits the limit: the plain algorithms, deterministic first, whatever their
// workspace (running over the limit beats not running).
static bool choose_fallback(cv_entry *e, int pass) {
    static const int fwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, -1};
    static const int data[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, -1};
    static const int filt[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, -1};
    const int *list = pass == PASS_FWD ? fwd : pass == PASS_DATA ? data : filt;
    for (int i = 0; list[i] >= 0; i++) {
        size_t bytes = 0;
        if (ws_size(e, pass, list[i], &bytes) != CUDNN_STATUS_SUCCESS) continue;
        e->algo[pass] = list[i], e->ws[pass] = bytes;
        return true;
    }
    return false;
}

static bool choose_timed_16(cv_entry *e, int pass, size_t limit, const cv_data *t);  // beside the conversions

// One choice for pass on e's descriptors as they are: timed (autotune; 16-bit entries on their
// 16-bit copies) or heuristic.
static bool choose_one(cv_entry *e, int pass, const cv_data *t) {
    size_t limit = cuda_ctx_get()->work_limit;
    if (!autotune_on() || !data_has(t, pass)) return choose_heuristic(e, pass, limit);
    return e->half ? choose_timed_16(e, pass, limit, t) : choose_timed(e, pass, limit, t);
}

static void entry_choose(cv_entry *e, int pass, const cv_data *t);

// e's setup changed (layout or precision): descriptors re-set, the passes chosen before chosen
// again in it, then pass. Whether pass got an algorithm.
static bool entry_rechoose(cv_entry *e, int pass, const cv_data *t) {
    bool had[PASS_COUNT];
    memcpy(had, e->chosen, sizeof had);
    for (int p = 0; p < PASS_COUNT; p++) e->chosen[p] = false, e->algo[p] = 0, e->ws[p] = 0;
    entry_describe(e);
    for (int p = 0; p < PASS_COUNT; p++)
        if (had[p] && p != pass) entry_choose(e, p, t);
    return choose_one(e, pass, t);
}

// Chooses e's algorithm for pass once; t: the chunk's fp32 tensors (used only when autotuning;
// 16-bit entries convert them into their copies first). A 16-bit channels-last entry without any
// algorithm for pass tries channels-first, then falls back to fp32 and chooses again (fixed
// algorithms are the last resort of fp32 only).
static void entry_choose(cv_entry *e, int pass, const cv_data *t) {
    if (e->chosen[pass]) return;
    // Choosing needs queries, timing and allocations a recording cannot hold: the recording is
    // dropped (cuda_graph.cu) and the eager run chooses.
    if (cuda_ctx_get()->capturing) {
        cuda_capture_break("a convolution algorithm had to be chosen");
        return;
    }
    bool ok = choose_one(e, pass, t);
    // 16-bit without a heuristic pick goes to fp32 rather than to a fixed algorithm: a workspace
    // query may accept a 16-bit setup that the convolution itself then refuses. Channels-last
    // first tries channels-first (cuDNN's NHWC kernels want, say, C/groups % 8 == 0).
    if (!ok && e->half && e->cl) {
        e->cl = false;
        ok = entry_rechoose(e, pass, t);
    }
    if (!ok && e->half) {
        entry_fall_back(e, pass);
        ok = entry_rechoose(e, pass, t);
    }
    if (!ok && !choose_fallback(e, pass)) {
        const gl_conv_geom *g = &e->key.g;
        gl_die(GL_EXIT_RUNTIME, "set train.device: cpu for this model, and please report the recipe",
               "cuDNN has no %s algorithm for the convolution %lld -> %lld channels (groups %lld), input "
               "%lldx%lldx%lld, output %lldx%lldx%lld, kernel %lldx%lldx%lld",
               pass_names[pass], (long long)g->c, (long long)g->f, (long long)g->groups, (long long)g->in[0],
               (long long)g->in[1], (long long)g->in[2], (long long)g->out[0], (long long)g->out[1],
               (long long)g->out[2], (long long)g->k[0], (long long)g->k[1], (long long)g->k[2]);
    }
    e->chosen[pass] = true;
}

// The workspace of one chunk: the staged copy (NULL when none), the 16-bit copies (NULL unless
// e->half): x-space x16 [n, C, xc], y-space y16 [n, F, out], the weight w16 and its gradient
// dw16; then cuDNN's part. Valid until the next cuda_workspace call.
typedef struct {
    float *stage;
    uint16_t *x16, *y16, *w16, *dw16;
    void *ws;
} cv_work;

// Bytes of the workspace ahead of cuDNN's part: the staged copy and the 16-bit copies.
static size_t work_copies(const cv_entry *e) {
    size_t stage = stage_bytes(&e->L, e->key.n);
    if (!e->half) return stage;
    return stage + half_bytes(e->key.n * e->L.xc_elems) + half_bytes(e->key.n * e->L.y_elems) +
           2 * half_bytes(e->L.w_elems);
}

// The workspace with `need` bytes for cuDNN (grown if need be: never while recording).
static cv_work work_at(const cv_entry *e, size_t need) {
    size_t stage = stage_bytes(&e->L, e->key.n);
    size_t hx = e->half ? half_bytes(e->key.n * e->L.xc_elems) : 0, hy = e->half ? half_bytes(e->key.n * e->L.y_elems) : 0;
    size_t hw = e->half ? half_bytes(e->L.w_elems) : 0;
    char *base = (char *)cuda_workspace(work_copies(e) + need);
    cv_work w;
    memset(&w, 0, sizeof w);
    w.stage = e->L.staged ? (float *)base : NULL;
    if (e->half) {
        w.x16 = (uint16_t *)(base + stage);
        w.y16 = (uint16_t *)(base + stage + hx);
        w.w16 = (uint16_t *)(base + stage + hx + hy);
        w.dw16 = (uint16_t *)(base + stage + hx + hy + hw);
    }
    w.ws = base + stage + hx + hy + 2 * hw;
    return w;
}

// The workspace for running the passes in `passes` (a bit mask): cuDNN's part fits each.
static cv_work work_get(const cv_entry *e, unsigned passes) {
    size_t need = 0;
    for (int p = 0; p < PASS_COUNT; p++)
        if (passes >> p & 1u && e->ws[p] > need) need = e->ws[p];
    return work_at(e, need);
}

// ---- kernels ------------------------------------------------------------------------------------

typedef struct {
    int64_t in[3], xc[3], ox[3];
} stage_map;

static stage_map stage_map_of(const cv_entry *e) {
    stage_map m;
    for (int j = 0; j < 3; j++) m.in[j] = e->key.g.in[j], m.xc[j] = e->L.xc[j], m.ox[j] = e->L.ox[j];
    return m;
}

// x[NC, D, H, W] -> xc[NC, XD, XH, XW]: x placed at offset ox, zeros around (total = NC*XD*XH*XW)
__global__ static void stage_in(int64_t total, stage_map m, const float *x, float *xc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i, w = t % m.xc[2];
        t /= m.xc[2];
        int64_t h = t % m.xc[1];
        t /= m.xc[1];
        int64_t z = t % m.xc[0], plane = t / m.xc[0];
        int64_t sz = z - m.ox[0], sh = h - m.ox[1], sw = w - m.ox[2];
        float v = 0.0f;
        if (sz >= 0 && sz < m.in[0] && sh >= 0 && sh < m.in[1] && sw >= 0 && sw < m.in[2])
            v = x[((plane * m.in[0] + sz) * m.in[1] + sh) * m.in[2] + sw];
        xc[i] = v;
    }
}

// xc[NC, XD, XH, XW] -> x[NC, D, H, W]: x = (or +=) xc at offset ox; positions past xc's
// extent (never reached by the convolution) get 0 (total = NC*D*H*W)
__global__ static void stage_out(int64_t total, stage_map m, const float *xc, float *x, int accumulate) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i, w = t % m.in[2];
        t /= m.in[2];
        int64_t h = t % m.in[1];
        t /= m.in[1];
        int64_t z = t % m.in[0], plane = t / m.in[0];
        int64_t cz = z + m.ox[0], ch = h + m.ox[1], cw = w + m.ox[2];  // ox >= 0: never below 0
        float v = 0.0f;
        if (cz < m.xc[0] && ch < m.xc[1] && cw < m.xc[2])
            v = xc[((plane * m.xc[0] + cz) * m.xc[1] + ch) * m.xc[2] + cw];
        if (accumulate)
            x[i] += v;
        else
            x[i] = v;
    }
}

// The epilogue of the forward passes, one pass over y[N, CH, P]: y = act(y + b[CH]), b NULL for
// none, A as act_one's. The same float operations as a bias pass and then cuda_act_forward.
template <int A>
__global__ static void bias_act(int64_t total, int64_t ch, int64_t P, const float *b, float slope, float *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = y[i];
        if (b) v += b[i / P % ch];
        y[i] = act_one<A>(v, slope);
    }
}

// dy[N, CH, P] -> part[CH, Q]: block (c, q) sums slice q of Q equal slices of channel c's N*P
// values (sample-major), in double, then a fixed tree in shared memory. blockDim = GL_BLOCK,
// gridDim = CH*Q.
__global__ static void bias_partials(int64_t n, int64_t ch, int64_t P, int64_t Q, const float *dy, double *part) {
    __shared__ double acc[GL_BLOCK];
    int64_t c = blockIdx.x / Q, q = blockIdx.x % Q;
    int64_t total = n * P, len = (total + Q - 1) / Q, j0 = q * len, j1 = j0 + len < total ? j0 + len : total;
    double s = 0.0;
    int64_t j = j0 + threadIdx.x, smp = j / P, pos = j - smp * P;  // j's sample and position
    for (; j < j1; j += blockDim.x) {
        s += dy[(smp * ch + c) * P + pos];
        pos += blockDim.x;
        if (pos >= P) {  // wrap into the next samples (a division only when crossing one)
            int64_t k = pos / P;
            smp += k, pos -= k * P;
        }
    }
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) acc[threadIdx.x] += acc[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = acc[0];
}

// part[CH, Q] -> db[CH]: each channel's slices summed in order (overwrites db)
__global__ static void bias_finish(int64_t ch, int64_t Q, const double *part, float *db) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < ch; c += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t q = 0; q < Q; q++) s += part[c * Q + q];
        db[c] = (float)s;
    }
}

// y[N, CH, P] = act(y + b[CH]); act < 0: none (then b is not NULL); slope: leaky_relu's
static void bias_act_forward(int64_t n, int64_t ch, int64_t P, const float *b, int act, float slope, float *y) {
    cuda_ctx *cx = cuda_ctx_get();
    int64_t total = n * ch * P;
    if (total == 0 || (!b && act < 0)) return;
    unsigned g = cuda_grid(total, GL_BLOCK);
    if (act == ACT_RELU) bias_act<ACT_RELU + 1><<<g, GL_BLOCK, 0, cx->stream>>>(total, ch, P, b, slope, y);
    else if (act == ACT_LEAKY_RELU) bias_act<ACT_LEAKY_RELU + 1><<<g, GL_BLOCK, 0, cx->stream>>>(total, ch, P, b, slope, y);
    else bias_act<0><<<g, GL_BLOCK, 0, cx->stream>>>(total, ch, P, b, slope, y);
    CU_LAUNCHED();
}

// dy[N, CH, P] -> db[CH] (overwritten), the sum over N and P. The slices per channel depend
// only on the sizes, so the sums are the same bits every run.
static void bias_backward(int64_t n, int64_t ch, int64_t P, const float *dy, float *db) {
    cuda_ctx *cx = cuda_ctx_get();
    if (ch == 0) return;
    if (n == 0 || P == 0) {
        CU_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * (size_t)ch, cx->stream));
        return;
    }
    int64_t total = n * P, Q = (total + 16383) / 16384, qmax = 4096 / ch;  // ~16K values a block, <= ~4K blocks
    if (Q > qmax) Q = qmax;
    if (Q < 1) Q = 1;
    double *part = cuda_partials(ch * Q, NULL);
    bias_partials<<<(unsigned)(ch * Q), GL_BLOCK, 0, cx->stream>>>(n, ch, P, Q, dy, part);
    CU_LAUNCHED();
    bias_finish<<<cuda_grid(ch, GL_BLOCK), GL_BLOCK, 0, cx->stream>>>(ch, Q, part, db);
    CU_LAUNCHED();
}

// xs (n samples of x) -> the staged copy when e stages, else xs itself.
static const float *x_input(const cv_entry *e, const cv_work *w, const float *xs) {
    if (!e->L.staged) return xs;
    int64_t total = e->key.n * e->L.xc_elems;
    stage_in<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(total, stage_map_of(e), xs, w->stage);
    CU_LAUNCHED();
    return w->stage;
}

// The staged x-space result in w->stage -> dst (n samples), overwritten or accumulated.
static void x_output(const cv_entry *e, const cv_work *w, float *dst, bool accumulate) {
    int64_t total = e->key.n * e->L.x_elems;
    stage_out<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(total, stage_map_of(e), w->stage,
                                                                                   dst, accumulate ? 1 : 0);
    CU_LAUNCHED();
}

// x[N, C, S] fp32 -> h[N, S, C] 16-bit (channels last), as to_16bit element by element: 32x32
// tiles through shared memory, so the reads (along S) and the writes (along C) are both
// coalesced. Block (32, 8); grid (S / 32, C / 32, samples), looping over the samples past it.
__global__ static void to_16bit_cl(int64_t n, int64_t c, int64_t s, int bf16, const float *x, uint16_t *h) {
    __shared__ float t[32][33];  // +1: no bank conflicts down a column
    const int64_t s0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;
    for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
        const float *xi = x + i * c * s;
        uint16_t *hi = h + i * c * s;
        for (int r = threadIdx.y; r < 32; r += blockDim.y) {
            const int64_t cc = c0 + r, ss = s0 + threadIdx.x;
            if (cc < c && ss < s) t[r][threadIdx.x] = xi[cc * s + ss];
        }
        __syncthreads();
        for (int r = threadIdx.y; r < 32; r += blockDim.y) {
            const int64_t ss = s0 + r, cc = c0 + threadIdx.x;
            if (cc < c && ss < s) hi[ss * c + cc] = to16(t[threadIdx.x][r], bf16);
        }
        __syncthreads();  // the tile is read before the next sample overwrites it
    }
}

// h[N, S, C] 16-bit -> x[N, C, S] fp32, accumulated, or overwritten with the epilogue fused:
// from_16bit's values, moved back to channels first through the same tiles. Block (32, 8); grid
// as to_16bit_cl's.
template <int A>
__global__ static void from_16bit_cl(int64_t n, int64_t c, int64_t s, int bf16, const uint16_t *h, float *x,
                                     int accumulate, const float *b, float slope) {
    __shared__ float t[32][33];
    const int64_t s0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;
    for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
        const uint16_t *hi = h + i * c * s;
        float *xi = x + i * c * s;
        for (int r = threadIdx.y; r < 32; r += blockDim.y) {
            const int64_t ss = s0 + r, cc = c0 + threadIdx.x;
            if (cc < c && ss < s) t[r][threadIdx.x] = from16(hi[ss * c + cc], bf16);
        }
        __syncthreads();
        for (int r = threadIdx.y; r < 32; r += blockDim.y) {
            const int64_t cc = c0 + r, ss = s0 + threadIdx.x;  // cc: the channel
            if (cc < c && ss < s) {
                float v = t[threadIdx.x][r];
                if (accumulate) {
                    xi[cc * s + ss] = xi[cc * s + ss] + v;
                } else {
                    if (b) v += b[cc];
                    xi[cc * s + ss] = act_one<A>(v, slope);
                }
            }
        }
        __syncthreads();
    }
}

static dim3 cl_grid(int64_t n, int64_t c, int64_t s) {
    return dim3((unsigned)((s + 31) / 32), (unsigned)((c + 31) / 32), (unsigned)(n < 65535 ? n : 65535));
}

// n items of [c, s] fp32 values of x -> e's 16-bit type in h: channels last ([s, c]) when e says
// so (x-space: c = C; y-space: F; weights: n = F, c = C/groups, s = taps), else as they are.
static void half_in(const cv_entry *e, int64_t n, int64_t c, int64_t s, const float *x, uint16_t *h) {
    const int64_t count = n * c * s;
    if (count <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    const int bf16 = e->key.prec == PRECISION_BF16;
    if (e->cl && c > 1 && s > 1) {  // with one channel or one position both layouts are the same bytes
        GL_CHECK(c / 32 < 65535, "a channel count fits the transposing conversion's grid");
        to_16bit_cl<<<cl_grid(n, c, s), dim3(32, 8), 0, st>>>(n, c, s, bf16, x, h);
    } else {
        to_16bit<<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, st>>>(count, bf16, x, h);
    }
    CU_LAUNCHED();
}

// The forward epilogue y = act(y + b[channel]) as bias_act_forward takes it: b NULL for no bias,
// act < 0 for none, slope leaky_relu's.
typedef struct {
    const float *b;
    int act;
    float slope;
} cv_epi;

// half_out with the activation A (act_one's) as a template argument.
template <int A>
static void half_out_as(const cv_entry *e, int64_t n, int64_t c, int64_t s, const uint16_t *h, float *x,
                        int accumulate, const float *b, float slope) {
    const int64_t count = n * c * s;
    cudaStream_t st = cuda_ctx_get()->stream;
    const int bf16 = e->key.prec == PRECISION_BF16;
    if (e->cl && c > 1 && s > 1) {
        GL_CHECK(c / 32 < 65535, "a channel count fits the transposing conversion's grid");
        from_16bit_cl<A><<<cl_grid(n, c, s), dim3(32, 8), 0, st>>>(n, c, s, bf16, h, x, accumulate, b, slope);
    } else {
        // With one channel or one position the channels-last bytes are [n, c, s] too, so the
        // channel of element i is i / s % c either way.
        from_16bit<A><<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, st>>>(count, c, s, bf16, h, x, accumulate, b, slope);
    }
    CU_LAUNCHED();
}

// The 16-bit results of h (laid out as half_in made them) -> fp32 x [n, c, s], overwritten or
// accumulated; ep (NULL: none; overwriting only): the forward epilogue, c being the channels.
static void half_out(const cv_entry *e, int64_t n, int64_t c, int64_t s, const uint16_t *h, float *x,
                     bool accumulate, const cv_epi *ep) {
    if (n * c * s <= 0) return;
    const float *b = ep ? ep->b : NULL;
    const int act = ep ? ep->act : -1;
    const float slope = ep ? ep->slope : 0.0f;
    GL_CHECK(!accumulate || (!b && act < 0), "an accumulated 16-bit result takes no bias or activation");
    const int acc = accumulate ? 1 : 0;
    if (act == ACT_RELU) half_out_as<ACT_RELU + 1>(e, n, c, s, h, x, acc, b, slope);
    else if (act == ACT_LEAKY_RELU) half_out_as<ACT_LEAKY_RELU + 1>(e, n, c, s, h, x, acc, b, slope);
    else half_out_as<0>(e, n, c, s, h, x, acc, b, slope);
}

// Per-item shapes of the three 16-bit copies: x-space (staged extent xc or x's own), y-space, weight.
static int64_t spatial(const int64_t v[3]) { return v[0] * v[1] * v[2]; }
static int64_t taps_of(const cv_entry *e) { return spatial(e->key.g.k); }

static void half_x_in(const cv_entry *e, const float *xin, uint16_t *h) {
    half_in(e, e->key.n, e->key.g.c, spatial(e->L.xc), xin, h);
}
static void half_y_in(const cv_entry *e, const float *ys, uint16_t *h) {
    half_in(e, e->key.n, e->key.g.f, spatial(e->key.g.out), ys, h);
}
static void half_w_in(const cv_entry *e, const float *w, uint16_t *h) {
    half_in(e, e->key.g.f, e->key.g.c / e->key.g.groups, taps_of(e), w, h);
}

// A 16-bit x-space result in w->x16 (n samples of xc) -> dst (n samples of x): through the
// staged copy when e stages, overwritten or accumulated. ep (NULL: none) is applied only where
// the widening writes dst itself (not staged: stage_out's zeros past the reach need the bias
// too); whether it was.
static bool half_x_output(const cv_entry *e, const cv_work *w, float *dst, bool accumulate, const cv_epi *ep) {
    if (!e->L.staged) {
        half_out(e, e->key.n, e->key.g.c, spatial(e->key.g.in), w->x16, dst, accumulate, ep);
        return true;
    }
    // Widened into the staged copy (its input is no longer needed), then copied out at x's offset.
    half_out(e, e->key.n, e->key.g.c, spatial(e->L.xc), w->x16, w->stage, false, NULL);
    x_output(e, w, dst, accumulate);
    return false;
}

// GALLEY_CUDNN_AUTOTUNE=1 for a 16-bit entry: choose_timed on 16-bit tensors laid out as e
// describes them. The chunk's inputs are converted into the workspace's copies as the run does
// (x through the staged copy); the pass's result goes into the copy on its output side (y16,
// x16 or dw16: scratch, as the run converts its inputs anew). The workspace is made large enough
// here: the copies (within work_limit by chunk_samples) and cuDNN's part (tune_bytes), so the
// run grows nothing. A failed query means "not in 16
// bits", as in choose_heuristic.
static bool choose_timed_16(cv_entry *e, int pass, size_t limit, const cv_data *t) {
    cudnnHandle_t h = cuda_ctx_get()->cudnn;
    size_t tune = tune_bytes(limit, work_copies(e));
    cv_work wk = work_at(e, tune);
    if (pass != PASS_DATA) half_x_in(e, x_input(e, &wk, t->x), wk.x16);
    if (pass != PASS_FILTER) half_w_in(e, t->w, wk.w16);
    if (pass != PASS_FWD) half_y_in(e, t->y, wk.y16);
    int got = 0;
    if (pass == PASS_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_QUERY(e, cudnnFindConvolutionForwardAlgorithmEx(h, e->xd, wk.x16, e->wd, wk.w16, e->cd, e->yd, wk.y16,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, wk.ws, tune));
        return pick(e, pass, perf, got, tune);
    }
    if (pass == PASS_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_QUERY(e, cudnnFindConvolutionBackwardDataAlgorithmEx(h, e->wd, wk.w16, e->yd, wk.y16, e->cd, e->xd, wk.x16,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf,
                                                                 wk.ws, tune));
        return pick(e, pass, perf, got, tune);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DNN_QUERY(e, cudnnFindConvolutionBackwardFilterAlgorithmEx(h, e->xd, wk.x16, e->yd, wk.y16, e->cd, e->wd, wk.dw16,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf,
                                                               wk.ws, tune));
    return pick(e, pass, perf, got, tune);
}

static const float one = 1.0f, zero = 0.0f;

// ---- one chunk's cuDNN calls, in fp32 (or tf32) or on 16-bit copies ----------------------------

// Forward of the convolution: x-space xin (fp32, staged if need be) and w -> y-space ys,
// overwritten or accumulated. ep (NULL: none; overwriting only): the epilogue, applied when the
// 16-bit result is widened into ys; whether it was (fp32: never, the caller runs bias_act).
// have_x: x16 already holds xin (run_filter just made it), so it is not converted again.
static bool run_forward(const cv_entry *e, const cv_work *wk, const float *xin, const float *w, float *ys,
                        bool accumulate, const cv_epi *ep, bool have_x) {
    cuda_ctx *cx = cuda_ctx_get();
    cudnnConvolutionFwdAlgo_t algo = (cudnnConvolutionFwdAlgo_t)e->algo[PASS_FWD];
    if (!e->half) {
        CUDNN_CHECK(cudnnConvolutionForward(cx->cudnn, &one, e->xd, xin, e->wd, w, e->cd, algo, wk->ws,
                                            e->ws[PASS_FWD], accumulate ? &one : &zero, e->yd, ys));
        return false;
    }
    if (!have_x) half_x_in(e, xin, wk->x16);
    half_w_in(e, w, wk->w16);
    CUDNN_CHECK(cudnnConvolutionForward(cx->cudnn, &one, e->xd, wk->x16, e->wd, wk->w16, e->cd, algo, wk->ws,
                                        e->ws[PASS_FWD], &zero, e->yd, wk->y16));
    half_out(e, e->key.n, e->key.g.f, spatial(e->key.g.out), wk->y16, ys, accumulate, ep);
    return true;
}

// Weight gradient: x-space xin and y-space dys -> dw, overwritten (first chunk) or accumulated.
// 16-bit: the x16 and y16 copies are made here and left for run_data.
static void run_filter(const cv_entry *e, const cv_work *wk, const float *xin, const float *dys, float *dw,
                       bool accumulate) {
    cuda_ctx *cx = cuda_ctx_get();
    cudnnConvolutionBwdFilterAlgo_t algo = (cudnnConvolutionBwdFilterAlgo_t)e->algo[PASS_FILTER];
    if (!e->half) {
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx->cudnn, &one, e->xd, xin, e->yd, dys, e->cd, algo, wk->ws,
                                                   e->ws[PASS_FILTER], accumulate ? &one : &zero, e->wd, dw));
        return;
    }
    half_x_in(e, xin, wk->x16);
    half_y_in(e, dys, wk->y16);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx->cudnn, &one, e->xd, wk->x16, e->yd, wk->y16, e->cd, algo, wk->ws,
                                               e->ws[PASS_FILTER], &zero, e->wd, wk->dw16));
    // Chunks add in fp32.
    half_out(e, e->key.g.f, e->key.g.c / e->key.g.groups, taps_of(e), wk->dw16, dw, accumulate, NULL);
}

// Input gradient of the convolution: w and y-space dys -> x-space dxs (n samples of x),
// overwritten or accumulated, through the staged copy when e stages. 16-bit: y16 must already
// hold dys (run_filter, or have_dy false to make it here); the result goes through x16. ep
// (NULL: none; overwriting only): the epilogue, applied when the 16-bit result is widened
// straight into dxs; whether it was (fp32 or staged: not, the caller runs bias_act).
static bool run_data(const cv_entry *e, const cv_work *wk, const float *w, const float *dys, float *dxs,
                     bool accumulate, bool have_dy, const cv_epi *ep) {
    cuda_ctx *cx = cuda_ctx_get();
    cudnnConvolutionBwdDataAlgo_t algo = (cudnnConvolutionBwdDataAlgo_t)e->algo[PASS_DATA];
    if (!e->half) {
        // Staged: cuDNN's result goes to the copy (the staged x is no longer needed; the stream
        // orders the two), then is added back or copied out at x's offset.
        bool direct = !e->L.staged;
        CUDNN_CHECK(cudnnConvolutionBackwardData(cx->cudnn, &one, e->wd, w, e->yd, dys, e->cd, algo, wk->ws,
                                                 e->ws[PASS_DATA], direct && accumulate ? &one : &zero, e->xd,
                                                 direct ? dxs : wk->stage));
        if (!direct) x_output(e, wk, dxs, accumulate);
        return false;
    }
    if (!have_dy) half_y_in(e, dys, wk->y16);
    half_w_in(e, w, wk->w16);
    CUDNN_CHECK(cudnnConvolutionBackwardData(cx->cudnn, &one, e->wd, wk->w16, e->yd, wk->y16, e->cd, algo, wk->ws,
                                             e->ws[PASS_DATA], &zero, e->xd, wk->x16));
    return half_x_output(e, wk, dxs, accumulate, ep);
}

// ---- the backend's entry points (shapes in backend.h; scratch is the CPU's im2col space) -------

// x[N, C, in] -> y[N, F, out] = act(conv + b[F]) (overwritten); act < 0: none
static void conv_forward_then(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                              int act, float slope) {
    const int64_t n = geo->n, f = geo->f;
    if (n <= 0) return;
    gl_conv_geom g = geom_make(geo);
    cv_layout L = layout_of(&g);
    int64_t nb = chunk_samples(&L, n, cuda_is_half()), P = spatial(geo->out);
    const cv_epi ep = {b, act, slope};
    int64_t pend = 0;  // samples [pend, s0) still need the epilogue pass (fp32 chunks)
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.x_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {xs, w, NULL};
        entry_choose(e, PASS_FWD, &t);
        cv_work wk = work_get(e, 1u << PASS_FWD);
        if (run_forward(e, &wk, x_input(e, &wk, xs), w, y + s0 * L.y_elems, false, &ep, false)) {
            // 16 bits: this chunk's epilogue is done; the fp32 chunks before it get theirs.
            bias_act_forward(s0 - pend, f, P, b, act, slope, y + pend * L.y_elems);
            pend = s0 + m;
        }
    }
    bias_act_forward(n - pend, f, P, b, act, slope, y + pend * L.y_elems);  // all of y when all ran in fp32
}

void cuda_conv_forward(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                       float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    conv_forward_then(geo, x, w, b, y, -1, 0.0f);
}

// The graph fuses a convolution with the relu or leaky_relu that alone reads it (graph_build):
// the activation rides on the bias pass (16 bits: on the widening pass), and its buffer is the
// convolution's.
void cuda_conv_forward_act(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                           float *scratch, int64_t scratch_floats, gl_act act, float slope) {
    (void)scratch, (void)scratch_floats;
    GL_CHECK(gl_act_storable(act, slope),
             "conv_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    conv_forward_then(geo, x, w, b, y, (int)act, slope);
}

// dw[F, C/G, k] and db[F] (NULL: none) overwritten, dx[N, C, in] accumulated (NULL: none)
void cuda_conv_backward(const gl_conv_geom *geo, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *cx = cuda_ctx_get();
    const int64_t n = geo->n;
    gl_conv_geom g = geom_make(geo);
    cv_layout L = layout_of(&g);
    if (db) bias_backward(n, geo->f, spatial(geo->out), dy, db);
    if (n <= 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)L.w_elems, cx->stream));
        return;
    }
    int64_t nb = chunk_samples(&L, n, cuda_is_half());
    unsigned passes = 1u << PASS_FILTER | (dx ? 1u << PASS_DATA : 0u);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.x_elems, *dys = dy + s0 * L.y_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {xs, w, dys};
        entry_choose(e, PASS_FILTER, &t);
        if (dx) entry_choose(e, PASS_DATA, &t);
        cv_work wk = work_get(e, passes);
        run_filter(e, &wk, x_input(e, &wk, xs), dys, dw, s0 > 0);
        if (dx) run_data(e, &wk, w, dys, dx + s0 * L.x_elems, true, true, NULL);
    }
}

// x[N, C, in] -> y[N, F, out] (overwritten) + b[F]: BackwardData of the convolution F -> C
// from out to in, whose x-space is y and whose y-space is x.
// act < 0: none; otherwise y = act(convt(x) + b) (cuda_conv_transpose_forward_act).
static void convt_forward_then(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                               int act, float slope) {
    const int64_t n = geo->n, f = geo->f;
    if (n <= 0) return;
    const gl_conv_geom fl = gl_conv_geom_flipped(geo);
    gl_conv_geom g = geom_make(&fl);
    cv_layout L = layout_of(&g);
    int64_t nb = chunk_samples(&L, n, cuda_is_half()), P = spatial(geo->out);
    const cv_epi ep = {b, act, slope};
    int64_t pend = 0;  // samples [pend, s0) still need the epilogue pass (fp32 or staged chunks)
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.y_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {NULL, w, xs};
        entry_choose(e, PASS_DATA, &t);
        cv_work wk = work_get(e, 1u << PASS_DATA);
        // Positions past the convolution's reach (output_padding) come out as 0, then get the bias.
        if (run_data(e, &wk, w, xs, y + s0 * L.x_elems, false, false, &ep)) {
            bias_act_forward(s0 - pend, f, P, b, act, slope, y + pend * L.x_elems);
            pend = s0 + m;
        }
    }
    bias_act_forward(n - pend, f, P, b, act, slope, y + pend * L.x_elems);
}

void cuda_conv_transpose_forward(const gl_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                                 float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    convt_forward_then(geo, x, w, b, y, -1, 0.0f);
}

// As cuda_conv_forward_act: the activation rides on the pass that adds the bias (the 16-bit
// widening, or bias_act), and the graph gives the activation this layer's buffer.
void cuda_conv_transpose_forward_act(const gl_conv_geom *geo, const float *x, const float *w, const float *b,
                                     float *y, float *scratch, int64_t scratch_floats, gl_act act, float slope) {
    (void)scratch, (void)scratch_floats;
    GL_CHECK(gl_act_storable(act, slope),
             "conv_transpose_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    convt_forward_then(geo, x, w, b, y, (int)act, slope);
}

// dw[C, F/G, k] and db[F] (NULL: none) overwritten, dx[N, C, in] accumulated (NULL: none): the
// convolution F -> C from out to in run on dy (its x-space): BackwardFilter for dw, Forward
// (accumulating) for dx.
void cuda_conv_transpose_backward(const gl_conv_geom *geo, const float *x, const float *w, const float *dy,
                                  float *dw, float *db, float *dx, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *cx = cuda_ctx_get();
    const int64_t n = geo->n;
    const gl_conv_geom fl = gl_conv_geom_flipped(geo);
    gl_conv_geom g = geom_make(&fl);
    cv_layout L = layout_of(&g);
    if (db) bias_backward(n, geo->f, spatial(geo->out), dy, db);
    if (n <= 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)L.w_elems, cx->stream));
        return;
    }
    int64_t nb = chunk_samples(&L, n, cuda_is_half());
    unsigned passes = 1u << PASS_FILTER | (dx ? 1u << PASS_FWD : 0u);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *dys = dy + s0 * L.x_elems, *xs = x + s0 * L.y_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {dys, w, xs};
        entry_choose(e, PASS_FILTER, &t);
        if (dx) entry_choose(e, PASS_FWD, &t);
        cv_work wk = work_get(e, passes);
        const float *din = x_input(e, &wk, dys);
        run_filter(e, &wk, din, xs, dw, s0 > 0);
        // 16-bit: run_filter left din's copy in x16 (the same entry, so the same layout).
        if (dx) run_forward(e, &wk, din, w, dx + s0 * L.y_elems, true, NULL, true);
    }
}
