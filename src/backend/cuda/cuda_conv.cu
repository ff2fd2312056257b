// cuda_conv.cu: convolution and transposed convolution on cuDNN (fp32, no TF32).
//
// Geometry. The CPU kernels take the padding before each dimension and the output size; the
// padding after follows from them and may differ ("same" with an even kernel). cuDNN pads both
// sides alike. When cuDNN's symmetric padding gives the same output size, the layer maps onto
// cuDNN directly. Otherwise the input-side tensor is copied into an explicitly zero-padded
// buffer of exactly the extent the windows read, E = (out - 1) * s + d * (k - 1) + 1, and cuDNN
// runs with no padding; gradients of that buffer are cropped back (added into dx).
//
// A transposed convolution is the input gradient of the convolution F -> C that maps its output
// y (F channels, dims out) to its input x (C channels, dims in), so its forward is cuDNN's
// backward-data, its input gradient cuDNN's forward and its weight gradient cuDNN's backward-filter
// of that convolution. Output positions past that convolution's reach (output_padding) get only
// the bias, as on the CPU.
//
// Tensors are NCHW (4-D descriptors) for 2D maps and NCDHW (5-D) for 3D ones. Algorithms: once
// per geometry (cache below), cuDNN's heuristics ranked list, first deterministic one whose
// workspace fits ctx->work_limit (GALLEY_CUDNN_AUTOTUNE=1: cudnnFind* times them instead, as
// PyTorch's cudnn.benchmark). Math: CUDNN_FMA_MATH, so fp32 is fp32 (train.precision tf32 will
// switch to CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION here).
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"

enum { PASS_FWD = 0, PASS_BWD = 1, PASS_TFWD = 2, PASS_TBWD = 3 };

// One geometry's descriptors and algorithms: "conv" is always the convolution cuDNN sees,
// from its input (cin channels, dims ci) to its output (cout channels, dims co).
typedef struct {
    int64_t key[20];
    bool used, padded;
    int nd;                      // spatial dims given to cuDNN (2 or 3)
    int64_t ci[3], co[3], e[3];  // conv input dims, output dims, padded extent
    cudnnTensorDescriptor_t in, out;  // in: the conv input as cuDNN reads it (padded extent when padded)
    cudnnFilterDescriptor_t filt;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filt;
    size_t ws_fwd, ws_data, ws_filt;
    bool have_fwd, have_data, have_filt;
} conv_plan;

// The plans of this process's GPU binding (part of the backend's one context). 256 geometries
// cover a U-Net's every layer at two batch sizes (training and the last, partial batch) and
// evaluation; past that the run stops with a message rather than thrash.
#define PLAN_CAP 256
static conv_plan plans[PLAN_CAP];

static void tensor_desc(cudnnTensorDescriptor_t t, int nd, int64_t n, int64_t c, const int64_t dims[3]) {
    int dim[5], stride[5];
    dim[0] = (int)n, dim[1] = (int)c;
    for (int i = 0; i < nd; i++) dim[2 + i] = (int)dims[3 - nd + i];
    stride[nd + 1] = 1;
    for (int i = nd; i >= 0; i--) stride[i] = stride[i + 1] * dim[i + 1];
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, nd + 2, dim, stride));
}

// Picks the first deterministic algorithm of cuDNN's ranked list whose workspace fits, else the
// first that fits. The three passes differ only in their types, hence the macro.
#define PICK(perf, count, algo_out, ws_out, found)                                                       \
    do {                                                                                                 \
        found = false;                                                                                   \
        for (int pass_ = 0; pass_ < 2 && !found; pass_++)                                                \
            for (int i_ = 0; i_ < count; i_++)                                                           \
                if (perf[i_].status == CUDNN_STATUS_SUCCESS && perf[i_].memory <= c->work_limit &&        \
                    (pass_ == 1 || perf[i_].determinism == CUDNN_DETERMINISTIC)) {                       \
                    algo_out = perf[i_].algo, ws_out = perf[i_].memory, found = true;                    \
                    break;                                                                               \
                }                                                                                        \
    } while (0)

static bool autotune(void) {
    const char *e = getenv("GALLEY_CUDNN_AUTOTUNE");
    return e && *e == '1';
}

// The plan for a convolution cin -> cout from dims ci to co (kernel k, stride s, dilation d,
// padding before p) over n samples; built (and its algorithms chosen) on first use.
static conv_plan *plan_get(int pass, int64_t n, int64_t cin, int64_t cout, int64_t groups, const int64_t ci[3],
                           const int64_t co[3], const int64_t k[3], const int64_t s[3], const int64_t d[3],
                           const int64_t p[3]) {
    int64_t key[20] = {pass, n, cin, cout, groups};
    for (int i = 0; i < 3; i++) {
        key[5 + i] = ci[i], key[8 + i] = co[i], key[11 + i] = k[i];
        key[14 + i] = s[i] * 1000003 + d[i];
        key[17 + i] = p[i];
    }
    int slot = -1;
    for (int i = 0; i < PLAN_CAP; i++) {
        if (plans[i].used && !memcmp(plans[i].key, key, sizeof key)) return &plans[i];
        if (!plans[i].used && slot < 0) slot = i;
    }
    if (slot < 0)
        gl_die(GL_EXIT_RUNTIME, "please report this recipe (the number of distinct layer shapes is unusual)",
               "CUDA backend: more than %d distinct convolution geometries", PLAN_CAP);
    conv_plan *pl = &plans[slot];
    memset(pl, 0, sizeof *pl);
    memcpy(pl->key, key, sizeof key);
    pl->used = true;
    pl->nd = (ci[0] == 1 && co[0] == 1 && k[0] == 1) ? 2 : 3;
    int pad[3], str[3], dil[3], fdim[5];
    for (int i = 0; i < 3; i++) {
        pl->ci[i] = ci[i], pl->co[i] = co[i];
        pl->e[i] = (co[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1;
        // cuDNN's output size with the same padding after as before
        int64_t sym = (ci[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
        if (sym != co[i] || ci[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1 < 0) pl->padded = true;
    }
    for (int i = 0; i < pl->nd; i++) {
        int j = 3 - pl->nd + i;
        pad[i] = pl->padded ? 0 : (int)p[j], str[i] = (int)s[j], dil[i] = (int)d[j];
        fdim[2 + i] = (int)k[j];
    }
    fdim[0] = (int)cout, fdim[1] = (int)(cin / groups);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->in));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->out));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&pl->filt));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&pl->conv));
    tensor_desc(pl->in, pl->nd, n, cin, pl->padded ? pl->e : ci);
    tensor_desc(pl->out, pl->nd, n, cout, co);
    CUDNN_CHECK(cudnnSetFilterNdDescriptor(pl->filt, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, pl->nd + 2, fdim));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(pl->conv, pl->nd, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(pl->conv, (int)groups));
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv, CUDNN_FMA_MATH));
    // cuDNN must agree with the layer on the output size, or the descriptors above are wrong.
    int odim[5];
    CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(pl->conv, pl->in, pl->filt, pl->nd + 2, odim));
    for (int i = 0; i < pl->nd; i++)
        GL_CHECK(odim[2 + i] == (int)co[3 - pl->nd + i], "cuDNN computes another convolution output size");
    return pl;
}

// The cuDNN algorithm of one direction, chosen on first use of the plan.
static void plan_fwd(conv_plan *pl, const float *x, const float *w, float *y) {
    if (pl->have_fwd) return;
    cuda_ctx *c = cuda_ctx_get();
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    bool found;
    if (autotune() && x) {
        void *ws = cuda_workspace(c->work_limit);
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(c->cudnn, pl->in, x, pl->filt, w, pl->conv, pl->out, y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, ws,
                                                           c->work_limit));
    } else {
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, pl->in, pl->filt, pl->conv, pl->out,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    }
    PICK(perf, count, pl->fwd, pl->ws_fwd, found);
    GL_CHECK(found, "no cuDNN forward algorithm fits GALLEY_CUDNN_WORKSPACE_MB; raise it");
    CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, pl->in, pl->filt, pl->conv, pl->out, pl->fwd,
                                                        &pl->ws_fwd));
    pl->have_fwd = true;
}

static void plan_data(conv_plan *pl, const float *w, const float *dy, float *dx) {
    if (pl->have_data) return;
    cuda_ctx *c = cuda_ctx_get();
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    bool found;
    if (autotune() && dx) {
        void *ws = cuda_workspace(c->work_limit);
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(c->cudnn, pl->filt, w, pl->out, dy, pl->conv, pl->in,
                                                                dx, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                                                perf, ws, c->work_limit));
    } else {
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->cudnn, pl->filt, pl->out, pl->conv, pl->in,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    }
    PICK(perf, count, pl->bwd_data, pl->ws_data, found);
    GL_CHECK(found, "no cuDNN backward-data algorithm fits GALLEY_CUDNN_WORKSPACE_MB; raise it");
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(c->cudnn, pl->filt, pl->out, pl->conv, pl->in,
                                                             pl->bwd_data, &pl->ws_data));
    pl->have_data = true;
}

static void plan_filt(conv_plan *pl, const float *x, const float *dy, float *dw) {
    if (pl->have_filt) return;
    cuda_ctx *c = cuda_ctx_get();
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    bool found;
    if (autotune() && x) {
        void *ws = cuda_workspace(c->work_limit);
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(c->cudnn, pl->in, x, pl->out, dy, pl->conv,
                                                                  pl->filt, dw,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                                                                  perf, ws, c->work_limit));
    } else {
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->cudnn, pl->in, pl->out, pl->conv, pl->filt,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                                                                  perf));
    }
    PICK(perf, count, pl->bwd_filt, pl->ws_filt, found);
    GL_CHECK(found, "no cuDNN backward-filter algorithm fits GALLEY_CUDNN_WORKSPACE_MB; raise it");
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->cudnn, pl->in, pl->out, pl->conv, pl->filt,
                                                               pl->bwd_filt, &pl->ws_filt));
    pl->have_filt = true;
}

// ---- small kernels ------------------------------------------------------------------------------

typedef struct {
    int64_t d[3];
} dims3;

// dst[R, T] (+)= src[R, S] shifted: dst[r, t] = src[r, t + off] where t + off lies inside S, else 0
// (t, off per dimension). Pads (off = -p), crops (off = +p) and crops-and-adds.
__global__ static void window_copy(int64_t rows, dims3 S, dims3 T, dims3 off, const float *src, float *dst,
                                   int accumulate) {
    const int64_t tsz = T.d[0] * T.d[1] * T.d[2], ssz = S.d[0] * S.d[1] * S.d[2], total = rows * tsz;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / tsz, t = i % tsz;
        int64_t tz = t / (T.d[1] * T.d[2]), ty = t / T.d[2] % T.d[1], tx = t % T.d[2];
        int64_t sz = tz + off.d[0], sy = ty + off.d[1], sx = tx + off.d[2];
        float v = 0.0f;
        if (sz >= 0 && sz < S.d[0] && sy >= 0 && sy < S.d[1] && sx >= 0 && sx < S.d[2])
            v = src[r * ssz + (sz * S.d[1] + sy) * S.d[2] + sx];
        dst[i] = accumulate ? dst[i] + v : v;
    }
}

// y[N, F, P] += b[F]
__global__ static void bias_add(int64_t total, int64_t f, int64_t P, const float *b, float *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i / P % f];
}

// db[F] = sum over n and positions of dy[N, F, P]: one block per channel, double partials, a
// fixed tree order (repeatable, unlike atomics).
__global__ static void bias_grad(int64_t n, int64_t f, int64_t P, const float *dy, float *db) {
    __shared__ double part[GL_BLOCK];
    const int64_t ch = blockIdx.x;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n * P; i += blockDim.x) s += dy[(i / P * f + ch) * P + i % P];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = GL_BLOCK / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[ch] = (float)part[0];
}

static dims3 dims_of(const int64_t v[3]) { return dims3{{v[0], v[1], v[2]}}; }
static int64_t prod3(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

static void launch_window(int64_t rows, const int64_t S[3], const int64_t T[3], const int64_t off[3], const float *src,
                          float *dst, int accumulate) {
    cuda_ctx *c = cuda_ctx_get();
    int64_t total = rows * prod3(T);
    if (total == 0) return;
    window_copy<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, c->stream>>>(rows, dims_of(S), dims_of(T), dims_of(off), src,
                                                                        dst, accumulate);
    CU_LAUNCHED();
}

static void launch_bias_add(int64_t n, int64_t f, int64_t P, const float *b, float *y) {
    cuda_ctx *c = cuda_ctx_get();
    if (!b || n * f * P == 0) return;
    bias_add<<<cuda_grid(n * f * P, GL_BLOCK), GL_BLOCK, 0, c->stream>>>(n * f * P, f, P, b, y);
    CU_LAUNCHED();
}

static void launch_bias_grad(int64_t n, int64_t f, int64_t P, const float *dy, float *db) {
    cuda_ctx *c = cuda_ctx_get();
    if (!db || f == 0) return;
    bias_grad<<<(unsigned)f, GL_BLOCK, 0, c->stream>>>(n, f, P, dy, db);
    CU_LAUNCHED();
}

// Device memory for a padded tensor of `floats` followed by `ws` bytes of cuDNN workspace.
static float *scratch_for(size_t floats, size_t ws, void **work) {
    size_t head = (floats * sizeof(float) + 255) & ~(size_t)255;
    char *base = (char *)cuda_workspace(head + ws + 256);
    *work = base + head;
    return (float *)base;
}

// ---- the four entry points ------------------------------------------------------------------------

void cuda_conv_forward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3], const int64_t out[3],
                       const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t p[3], const float *x,
                       const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;  // the CPU's im2col columns
    if (n == 0) return;
    cuda_ctx *ctx = cuda_ctx_get();
    conv_plan *pl = plan_get(PASS_FWD, n, c, f, groups, in, out, k, s, d, p);
    const float one = 1.0f, zero = 0.0f;
    plan_fwd(pl, pl->padded ? NULL : x, w, y);  // (autotuning writes y: it is overwritten below)
    void *ws;
    float *xp = scratch_for(pl->padded ? (size_t)(n * c * prod3(pl->e)) : 0, pl->ws_fwd, &ws);
    const float *src = x;
    if (pl->padded) {
        const int64_t off[3] = {-p[0], -p[1], -p[2]};
        launch_window(n * c, in, pl->e, off, x, xp, 0);
        src = xp;
    }
    CUDNN_CHECK(cudnnConvolutionForward(ctx->cudnn, &one, pl->in, src, pl->filt, w, pl->conv, pl->fwd, ws, pl->ws_fwd,
                                        &zero, pl->out, y));
    launch_bias_add(n, f, prod3(out), b, y);
}

void cuda_conv_backward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3], const int64_t out[3],
                        const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t p[3], const float *x,
                        const float *w, const float *dy, float *dw, float *db, float *dx, float *scratch,
                        int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *ctx = cuda_ctx_get();
    if (n == 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)(f * (c / groups) * prod3(k)), ctx->stream));
        if (db) CU_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * (size_t)f, ctx->stream));
        return;
    }
    conv_plan *pl = plan_get(PASS_BWD, n, c, f, groups, in, out, k, s, d, p);
    const float one = 1.0f, zero = 0.0f;
    const size_t pfl = pl->padded ? (size_t)(n * c * prod3(pl->e)) : 0;
    const int64_t neg[3] = {-p[0], -p[1], -p[2]};
    // Algorithms first: choosing one may grow (and move) the workspace that holds padded copies.
    // Autotuning writes its output: dw is overwritten anyway; dx accumulates, so its algorithm
    // always comes from the heuristics.
    plan_filt(pl, pl->padded ? NULL : x, dy, dw);
    if (dx) plan_data(pl, w, dy, NULL);
    void *ws;
    float *xp = scratch_for(pfl, pl->ws_filt > pl->ws_data ? pl->ws_filt : pl->ws_data, &ws);
    const float *src = x;
    if (pl->padded) {
        launch_window(n * c, in, pl->e, neg, x, xp, 0);
        src = xp;
    }
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, pl->in, src, pl->out, dy, pl->conv, pl->bwd_filt, ws,
                                               pl->ws_filt, &zero, pl->filt, dw));
    launch_bias_grad(n, f, prod3(out), dy, db);
    if (!dx) return;
    // Input gradient: accumulated into dx directly, or through the padded buffer (x's copy is
    // no longer needed) and cropped.
    if (!pl->padded) {
        CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &one, pl->filt, w, pl->out, dy, pl->conv, pl->bwd_data, ws,
                                                 pl->ws_data, &one, pl->in, dx));
        return;
    }
    float *dxp = xp;
    CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &one, pl->filt, w, pl->out, dy, pl->conv, pl->bwd_data, ws,
                                             pl->ws_data, &zero, pl->in, dxp));
    launch_window(n * c, pl->e, in, p, dxp, dx, 1);
}

// Transposed: x [N, C, in] -> y [N, F, out] is the input gradient of the convolution F -> C from
// out to in (w [C, F/groups, k]: cuDNN's filter of that convolution).
void cuda_conv_transpose_forward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3],
                                 const int64_t out[3], const int64_t k[3], const int64_t s[3], const int64_t d[3],
                                 const int64_t p[3], const float *x, const float *w, const float *b, float *y,
                                 float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    if (n == 0) return;
    cuda_ctx *ctx = cuda_ctx_get();
    conv_plan *pl = plan_get(PASS_TFWD, n, f, c, groups, out, in, k, s, d, p);
    const float one = 1.0f, zero = 0.0f;
    const size_t pfl = pl->padded ? (size_t)(n * f * prod3(pl->e)) : 0;
    plan_data(pl, w, x, pl->padded ? NULL : y);  // (autotuning writes y: it is overwritten below)
    void *ws;
    float *yp = scratch_for(pfl, pl->ws_data, &ws);
    if (!pl->padded) {
        CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &one, pl->filt, w, pl->out, x, pl->conv, pl->bwd_data, ws,
                                                 pl->ws_data, &zero, pl->in, y));
    } else {
        CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &one, pl->filt, w, pl->out, x, pl->conv, pl->bwd_data, ws,
                                                 pl->ws_data, &zero, pl->in, yp));
        launch_window(n * f, pl->e, out, p, yp, y, 0);  // positions past the reach: 0
    }
    launch_bias_add(n, f, prod3(out), b, y);
}

void cuda_conv_transpose_backward(int64_t n, int64_t c, int64_t f, int64_t groups, const int64_t in[3],
                                  const int64_t out[3], const int64_t k[3], const int64_t s[3], const int64_t d[3],
                                  const int64_t p[3], const float *x, const float *w, const float *dy, float *dw,
                                  float *db, float *dx, float *scratch, int64_t scratch_floats) {
    (void)scratch, (void)scratch_floats;
    cuda_ctx *ctx = cuda_ctx_get();
    if (n == 0) {
        CU_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)(c * (f / groups) * prod3(k)), ctx->stream));
        if (db) CU_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * (size_t)f, ctx->stream));
        return;
    }
    conv_plan *pl = plan_get(PASS_TBWD, n, f, c, groups, out, in, k, s, d, p);
    const float one = 1.0f, zero = 0.0f;
    const size_t pfl = pl->padded ? (size_t)(n * f * prod3(pl->e)) : 0;
    const int64_t neg[3] = {-p[0], -p[1], -p[2]};
    launch_bias_grad(n, f, prod3(out), dy, db);
    // dy in the convolution's input layout (padded when needed) serves both gradients.
    plan_filt(pl, pl->padded ? NULL : dy, x, dw);  // (autotuning writes dw: overwritten below)
    if (dx) plan_fwd(pl, NULL, w, NULL);           // dx accumulates: heuristics only
    else pl->ws_fwd = 0;
    size_t ws_need = pl->ws_filt > pl->ws_fwd ? pl->ws_filt : pl->ws_fwd;
    void *ws;
    float *dyp = scratch_for(pfl, ws_need, &ws);
    const float *src = dy;
    if (pl->padded) {
        launch_window(n * f, out, pl->e, neg, dy, dyp, 0);
        src = dyp;
    }
    // dw [C, F/groups, k]: the weight gradient of the convolution, whose output gradient is x
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, pl->in, src, pl->out, x, pl->conv, pl->bwd_filt, ws,
                                               pl->ws_filt, &zero, pl->filt, dw));
    // dx += the convolution of dy: its output has exactly x's size
    if (dx)
        CUDNN_CHECK(cudnnConvolutionForward(ctx->cudnn, &one, pl->in, src, pl->filt, w, pl->conv, pl->fwd, ws,
                                            pl->ws_fwd, &one, pl->out, dx));
}
