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
// each is timed once on the real tensors (cudnnFind*AlgorithmEx, like cudnn.benchmark). Either
// way the first algorithm that is deterministic, runs in FMA math and whose workspace fits
// ctx->work_limit wins; a non-deterministic one only when no deterministic one fits, and a
// plain implicit GEMM (over the limit if need be) when nothing fits.
//
// Cache: a fixed table of CONV_CACHE geometries with their descriptors (created once per slot
// and re-set when the slot is reused) and algorithms, in a file-static struct that is part of
// the backend's one context (cuda_ctx): a call after a geometry's first allocates nothing.
// When the table is full the oldest slot is reused (round robin): a model with more distinct
// geometries than slots still runs, it only chooses algorithms again.
//
// Bias: own kernels. The forward adds b per channel; the gradient sums each channel in double
// in fixed slices, then the slices in order: repeatable bit for bit, no atomics.
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"

enum { PASS_FWD, PASS_DATA, PASS_FILTER, PASS_COUNT };
static const char *const pass_names[PASS_COUNT] = {"forward", "backward-data", "backward-filter"};

// A convolution x[., C, in] -> y[., F, out] (backend.h's geometry, transposed ones reframed).
// Only int64_t members: compared with memcmp as the cache key.
typedef struct {
    int64_t c, f, groups;
    int64_t in[3], out[3], k[3], s[3], d[3], p[3];
} cv_geom;

// How cuDNN sees the convolution (see the header comment).
typedef struct {
    int64_t pad[3];                               // cuDNN's symmetric padding
    int64_t xc[3];                                // cuDNN's x extent
    int64_t ox[3];                                // where x's first element sits inside it
    bool staged;                                  // x-space goes through the copy xc
    int64_t x_elems, xc_elems, y_elems, w_elems;  // per sample: C*in, C*xc, F*out; the weight's
} cv_layout;

typedef struct {
    int64_t n;  // samples per call (a chunk)
    cv_geom g;
} cv_key;

typedef struct {
    cv_key key;
    cv_layout L;
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

// The math type of every convolution: FMA only, so fp32 stays fp32 and matches the CPU.
// (CUDNN_DEFAULT_MATH would let cuDNN use TF32 tensor cores on Ampere and later.) An opt-in
// TF32 mode would return CUDNN_TENSOR_OP_MATH here (or CUDNN_DEFAULT_MATH) and accept the
// tensor-op results in pick(); CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would further allow
// down-conversion to fp16, which training in fp32 does not want.
static cudnnMathType_t conv_math_type(void) { return CUDNN_FMA_MATH; }

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

static cv_geom geom_make(int64_t c, int64_t f, int64_t groups, const int64_t in[3], const int64_t out[3],
                         const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t p[3]) {
    cv_geom g;
    memset(&g, 0, sizeof g);
    g.c = c, g.f = f, g.groups = groups;
    for (int j = 0; j < 3; j++)
        g.in[j] = in[j], g.out[j] = out[j], g.k[j] = k[j], g.s[j] = s[j], g.d[j] = d[j], g.p[j] = p[j];
    GL_CHECK(groups >= 1 && c % groups == 0 && f % groups == 0, "conv groups must divide both channel counts");
    return g;
}

static cv_layout layout_of(const cv_geom *g) {
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

// Samples per cuDNN call: its tensors hold at most 2^31 elements; a staged copy also stays
// within the workspace limit (at least one sample).
static int64_t chunk_samples(const cv_layout *L, int64_t n) {
    int64_t per = L->xc_elems > L->y_elems ? L->xc_elems : L->y_elems;
    if (per > INT32_MAX)
        gl_die(GL_EXIT_RUNTIME, "use smaller inputs or fewer channels for this layer, or set train.device: cpu",
               "a convolution sample has %lld elements, more than cuDNN's 2^31 per tensor", (long long)per);
    int64_t nb = INT32_MAX / per;
    if (L->staged) {
        int64_t cap = (int64_t)(cuda_ctx_get()->work_limit / (sizeof(float) * (size_t)L->xc_elems));
        if (cap < 1) cap = 1;
        if (nb > cap) nb = cap;
    }
    return nb < n ? nb : n;
}

// ---- descriptors and the cache ----------------------------------------------------------------

// Sets e's descriptors for its key and checks that cuDNN's output size is the caller's.
static void entry_describe(cv_entry *e) {
    const cv_geom *g = &e->key.g;
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
    xstr[nd - 1] = ystr[nd - 1] = 1;  // packed
    for (int i = nd - 2; i >= 0; i--) xstr[i] = xstr[i + 1] * xdim[i + 1], ystr[i] = ystr[i + 1] * ydim[i + 1];
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(e->xd, CUDNN_DATA_FLOAT, nd, xdim, xstr));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(e->yd, CUDNN_DATA_FLOAT, nd, ydim, ystr));
    CUDNN_CHECK(cudnnSetFilterNdDescriptor(e->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, nd, wdim));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(e->cd, sd, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->cd, to_int(g->groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->cd, conv_math_type()));
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

// The cache entry of geometry g for chunks of n samples (descriptors set, algorithms chosen
// lazily by entry_choose).
static cv_entry *entry_get(const cv_geom *g, const cv_layout *L, int64_t n) {
    cv_key key;
    memset(&key, 0, sizeof key);
    key.n = n, key.g = *g;
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
    for (int p = 0; p < PASS_COUNT; p++) e->chosen[p] = false, e->algo[p] = 0, e->ws[p] = 0;
    entry_describe(e);
    return e;
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
// supported, uses no tensor-op (TF32) math, and its workspace fits limit; deterministic ones
// first, so repeated runs give the same bits.
template <typename Perf>
static bool pick(cv_entry *e, int pass, const Perf *perf, int got, size_t limit) {
    for (int strict = 1; strict >= 0; strict--)
        for (int i = 0; i < got; i++) {
            const Perf *r = &perf[i];
            if (r->status != CUDNN_STATUS_SUCCESS) continue;
            if (strict && r->determinism != CUDNN_DETERMINISTIC) continue;
            if (r->mathType == CUDNN_TENSOR_OP_MATH || r->mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            size_t bytes = 0;
            if (ws_size(e, pass, (int)r->algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
            e->algo[pass] = (int)r->algo, e->ws[pass] = bytes;
            return true;
        }
    return false;
}

static bool choose_heuristic(cv_entry *e, int pass, size_t limit) {
    cudnnHandle_t h = cuda_ctx_get()->cudnn;
    int got = 0;
    if (pass == PASS_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, e->xd, e->wd, e->cd, e->yd,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        return pick(e, pass, perf, got, limit);
    }
    if (pass == PASS_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->wd, e->yd, e->cd, e->xd,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        return pick(e, pass, perf, got, limit);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->xd, e->yd, e->cd, e->wd,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    return pick(e, pass, perf, got, limit);
}

// One chunk's tensors, for timing: x-space input (NULL for the data pass), the weight and the
// y-space input (NULL for the forward pass). Outputs go to a temporary buffer, so accumulated
// results (dx) are not disturbed.
typedef struct {
    const float *x, *w, *y;
} cv_data;

// GALLEY_CUDNN_AUTOTUNE=1: every algorithm is run once on this chunk's tensors (cudnnFind*Ex,
// host-blocking) in at most min(work_limit, half the free memory) of workspace.
static bool choose_timed(cv_entry *e, int pass, size_t limit, const cv_data *t) {
    cuda_ctx *cx = cuda_ctx_get();
    cudnnHandle_t h = cx->cudnn;
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t tune = limit < free_b / 2 ? limit : free_b / 2, stage = stage_bytes(&e->L, e->key.n);
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

// Chooses e's algorithm for pass once; t: the chunk's tensors (used only when autotuning).
static void entry_choose(cv_entry *e, int pass, const cv_data *t) {
    if (e->chosen[pass]) return;
    size_t limit = cuda_ctx_get()->work_limit;
    bool ok = autotune_on() ? choose_timed(e, pass, limit, t) : choose_heuristic(e, pass, limit);
    if (!ok && !choose_fallback(e, pass)) {
        const cv_geom *g = &e->key.g;
        gl_die(GL_EXIT_RUNTIME, "set train.device: cpu for this model, and please report the recipe",
               "cuDNN has no %s algorithm for the convolution %lld -> %lld channels (groups %lld), input "
               "%lldx%lldx%lld, output %lldx%lldx%lld, kernel %lldx%lldx%lld",
               pass_names[pass], (long long)g->c, (long long)g->f, (long long)g->groups, (long long)g->in[0],
               (long long)g->in[1], (long long)g->in[2], (long long)g->out[0], (long long)g->out[1],
               (long long)g->out[2], (long long)g->k[0], (long long)g->k[1], (long long)g->k[2]);
    }
    e->chosen[pass] = true;
}

// The workspace of one chunk: the staged copy (NULL when none), then cuDNN's part, large
// enough for every pass in `passes` (a bit mask). Valid until the next cuda_workspace call.
typedef struct {
    float *stage;
    void *ws;
} cv_work;

static cv_work work_get(const cv_entry *e, unsigned passes) {
    size_t stage = stage_bytes(&e->L, e->key.n), need = 0;
    for (int p = 0; p < PASS_COUNT; p++)
        if (passes >> p & 1u && e->ws[p] > need) need = e->ws[p];
    char *base = (char *)cuda_workspace(stage + need);
    cv_work w = {e->L.staged ? (float *)base : NULL, base + stage};
    return w;
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

// y[N, CH, P] += b[CH]
__global__ static void bias_add(int64_t total, int64_t ch, int64_t P, const float *b, float *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i / P % ch];
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

// y[N, CH, P] += b[CH]
static void bias_forward(int64_t n, int64_t ch, int64_t P, const float *b, float *y) {
    cuda_ctx *cx = cuda_ctx_get();
    int64_t total = n * ch * P;
    if (total == 0) return;
    bias_add<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cx->stream>>>(total, ch, P, b, y);
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

static int64_t spatial(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

static const float one = 1.0f, zero = 0.0f;

// ---- the backend's entry points (shapes in backend.h; scratch is the CPU's im2col space) -------

// x[N, C, in] -> y[N, F, out] (overwritten) + b[F]
void cuda_conv_forward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3], const int64_t out[3],
                       const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t p[3], const float *x,
                       const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    if (n <= 0) return;
    cuda_ctx *cx = cuda_ctx_get();
    cv_geom g = geom_make(c, f, groups, in, out, k, s, d, p);
    cv_layout L = layout_of(&g);
    int64_t nb = chunk_samples(&L, n);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.x_elems;
        float *ys = y + s0 * L.y_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {xs, w, NULL};
        entry_choose(e, PASS_FWD, &t);
        cv_work wk = work_get(e, 1u << PASS_FWD);
        const float *xin = x_input(e, &wk, xs);
        CUDNN_CHECK(cudnnConvolutionForward(cx->cudnn, &one, e->xd, xin, e->wd, w, e->cd,
                                            (cudnnConvolutionFwdAlgo_t)e->algo[PASS_FWD], wk.ws, e->ws[PASS_FWD], &zero,
                                            e->yd, ys));
    }
    if (b) bias_forward(n, f, spatial(out), b, y);
}

// dw[F, C/G, k] and db[F] (NULL: none) overwritten, dx[N, C, in] accumulated (NULL: none)
void cuda_conv_backward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3], const int64_t out[3],
                        const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t p[3], const float *x,
                        const float *w, const float *dy, float *dw, float *db, float *dx, float *scratch,
                        int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *cx = cuda_ctx_get();
    cv_geom g = geom_make(c, f, groups, in, out, k, s, d, p);
    cv_layout L = layout_of(&g);
    if (db) bias_backward(n, f, spatial(out), dy, db);
    if (n <= 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)L.w_elems, cx->stream));
        return;
    }
    int64_t nb = chunk_samples(&L, n);
    unsigned passes = 1u << PASS_FILTER | (dx ? 1u << PASS_DATA : 0u);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.x_elems, *dys = dy + s0 * L.y_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {xs, w, dys};
        entry_choose(e, PASS_FILTER, &t);
        if (dx) entry_choose(e, PASS_DATA, &t);
        cv_work wk = work_get(e, passes);
        const float *xin = x_input(e, &wk, xs);
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx->cudnn, &one, e->xd, xin, e->yd, dys, e->cd,
                                                   (cudnnConvolutionBwdFilterAlgo_t)e->algo[PASS_FILTER], wk.ws,
                                                   e->ws[PASS_FILTER], s0 ? &one : &zero, e->wd, dw));
        if (!dx) continue;
        float *dxs = dx + s0 * L.x_elems;
        // Staged: cuDNN's dx goes to the copy (the staged x is no longer needed; the stream
        // orders the two), then is added back at x's offset.
        CUDNN_CHECK(cudnnConvolutionBackwardData(
            cx->cudnn, &one, e->wd, w, e->yd, dys, e->cd, (cudnnConvolutionBwdDataAlgo_t)e->algo[PASS_DATA], wk.ws,
            e->ws[PASS_DATA], L.staged ? &zero : &one, e->xd, L.staged ? wk.stage : dxs));
        if (L.staged) x_output(e, &wk, dxs, true);
    }
}

// x[N, C, in] -> y[N, F, out] (overwritten) + b[F]: BackwardData of the convolution F -> C
// from out to in, whose x-space is y and whose y-space is x.
void cuda_conv_transpose_forward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3],
                                 const int64_t out[3], const int64_t k[3], const int64_t s[3], const int64_t d[3],
                                 const int64_t p[3], const float *x, const float *w, const float *b, float *y,
                                 float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    if (n <= 0) return;
    cuda_ctx *cx = cuda_ctx_get();
    cv_geom g = geom_make(f, c, groups, out, in, k, s, d, p);
    cv_layout L = layout_of(&g);
    int64_t nb = chunk_samples(&L, n);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t m = n - s0 < nb ? n - s0 : nb;
        const float *xs = x + s0 * L.y_elems;
        float *ys = y + s0 * L.x_elems;
        cv_entry *e = entry_get(&g, &L, m);
        cv_data t = {NULL, w, xs};
        entry_choose(e, PASS_DATA, &t);
        cv_work wk = work_get(e, 1u << PASS_DATA);
        // Positions past the convolution's reach (output_padding) come out as 0, then get the bias.
        CUDNN_CHECK(cudnnConvolutionBackwardData(cx->cudnn, &one, e->wd, w, e->yd, xs, e->cd,
                                                 (cudnnConvolutionBwdDataAlgo_t)e->algo[PASS_DATA], wk.ws,
                                                 e->ws[PASS_DATA], &zero, e->xd, L.staged ? wk.stage : ys));
        if (L.staged) x_output(e, &wk, ys, false);
    }
    if (b) bias_forward(n, f, spatial(out), b, y);
}

// dw[C, F/G, k] and db[F] (NULL: none) overwritten, dx[N, C, in] accumulated (NULL: none): the
// convolution F -> C from out to in run on dy (its x-space): BackwardFilter for dw, Forward
// (beta = 1) for dx.
void cuda_conv_transpose_backward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3],
                                  const int64_t out[3], const int64_t k[3], const int64_t s[3], const int64_t d[3],
                                  const int64_t p[3], const float *x, const float *w, const float *dy, float *dw,
                                  float *db, float *dx, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *cx = cuda_ctx_get();
    cv_geom g = geom_make(f, c, groups, out, in, k, s, d, p);
    cv_layout L = layout_of(&g);
    if (db) bias_backward(n, f, spatial(out), dy, db);
    if (n <= 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)L.w_elems, cx->stream));
        return;
    }
    int64_t nb = chunk_samples(&L, n);
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
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx->cudnn, &one, e->xd, din, e->yd, xs, e->cd,
                                                   (cudnnConvolutionBwdFilterAlgo_t)e->algo[PASS_FILTER], wk.ws,
                                                   e->ws[PASS_FILTER], s0 ? &one : &zero, e->wd, dw));
        if (dx)
            CUDNN_CHECK(cudnnConvolutionForward(cx->cudnn, &one, e->xd, din, e->wd, w, e->cd,
                                                (cudnnConvolutionFwdAlgo_t)e->algo[PASS_FWD], wk.ws, e->ws[PASS_FWD],
                                                &one, e->yd, dx + s0 * L.y_elems));
    }
}
