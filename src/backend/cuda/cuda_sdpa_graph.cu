// cuda_sdpa_graph.cu: cuDNN's fused attention graphs and plans (cuda_sdpa.h says which graphs).
// Host code only: it runs without a GPU when a plan is built for described device properties,
// which is how tests/unit/test_cuda_sdpa_plan checks, on a machine with cuDNN but no GPU, that
// cuDNN's heuristics find an engine for these graphs on sm_90 and that it compiles them.
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_sdpa.h"
#include "galley/cuda_probe.h"

// Plans for a described device (no GPU) came with cuDNN 9.8; older headers (an older NGC base
// pinned with `./build.sh image --base`) build the rest, and cuda_sdpa_check says why not.
#if CUDNN_VERSION >= 90800
#define SG_DEVICEPROP 1
#else
#define SG_DEVICEPROP 0
#endif

// A graph under construction: every descriptor goes into p->held (destroyed with the plan); the
// first failure is kept and turns every later call into a no-op.
struct sg {
    sdpa_plan *p;
    cudnnBackendDescriptor_t ops[32];
    int nops;
    int64_t uid;  // next virtual tensor's unique id
    cudnnStatus_t st;
    char what[512];
};

static cudnnBackendDescriptor_t sg_make(sg *s, cudnnBackendDescriptorType_t type, const char *what) {
    if (s->st) return NULL;
    if (s->p->nheld == SDPA_HELD) {
        s->st = CUDNN_STATUS_INTERNAL_ERROR;
        snprintf(s->what, sizeof s->what, "more than %d descriptors (%s)", SDPA_HELD, what);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    s->st = cudnnBackendCreateDescriptor(type, &d);
    if (s->st) {
        snprintf(s->what, sizeof s->what, "creating %s", what);
        return NULL;
    }
    s->p->held[s->p->nheld++] = d;
    return d;
}

static void sg_set(sg *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                   int64_t count, const void *v, const char *what) {
    if (s->st) return;
    s->st = cudnnBackendSetAttribute(d, a, t, count, v);
    if (s->st) snprintf(s->what, sizeof s->what, "setting attribute %d of %s", (int)a, what);
}

static void sg_desc(sg *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t v,
                    const char *what) {
    sg_set(s, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

static void sg_final(sg *s, cudnnBackendDescriptor_t d, const char *what) {
    if (s->st) return;
    s->st = cudnnBackendFinalize(d);
    if (s->st) snprintf(s->what, sizeof s->what, "finalizing %s", what);
}

// A 4-d tensor: uid 0 makes a virtual one (fp32 between operations unless dt says otherwise).
static cudnnBackendDescriptor_t sg_tensor(sg *s, int64_t uid, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2,
                                          int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                                          bool by_value = false) {
    const int64_t dim[4] = {d0, d1, d2, d3}, str[4] = {s0, s1, s2, s3}, align = 16;
    const bool virt = uid == 0;
    if (virt) uid = s->uid++;
    else if (s->p->nuids < 16) s->p->uids[s->p->nuids++] = uid;
    cudnnBackendDescriptor_t t = sg_make(s, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "a tensor");
    sg_set(s, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "a tensor");
    if (by_value) sg_set(s, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "a scalar");
    sg_final(s, t, "a tensor");
    return t;
}

static void sg_op(sg *s, cudnnBackendDescriptor_t op, const char *what) {
    sg_final(s, op, what);
    if (!s->st) s->ops[s->nops++] = op;
}

// A finalized descriptor of kind `type` computing in fp32 (attribute prec), with one more setting
// (attribute how_a of type how_t at how) unless how is NULL.
static cudnnBackendDescriptor_t sg_fp32(sg *s, cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t prec,
                                        cudnnBackendAttributeName_t how_a, cudnnBackendAttributeType_t how_t,
                                        const void *how, const char *what) {
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t d = sg_make(s, type, what);
    if (how) sg_set(s, d, how_a, how_t, 1, how, what);
    sg_set(s, d, prec, CUDNN_TYPE_DATA_TYPE, 1, &f, what);
    sg_final(s, d, what);
    return d;
}

// An operation of kind `type` naming its descriptors (an attribute each; a NULL one left unset).
struct sg_named {
    cudnnBackendAttributeName_t a;
    cudnnBackendDescriptor_t d;
};
static void sg_operation(sg *s, cudnnBackendDescriptorType_t type, int n, const sg_named *named, const char *what) {
    cudnnBackendDescriptor_t op = sg_make(s, type, what);
    for (int i = 0; i < n; i++)
        if (named[i].d) sg_desc(s, op, named[i].a, named[i].d, what);
    sg_op(s, op, what);
}

// y = x (mode) b (b NULL for a unary mode), in fp32.
static void sg_pw(sg *s, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw = sg_fp32(s, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MATH_PREC,
                                          CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, "a pointwise mode");
    const sg_named named[] = {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw},
                              {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                              {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
                              {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}};
    sg_operation(s, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 4, named, "a pointwise operation");
}

// c = a b (batched over the first two dimensions), accumulated in fp32.
static void sg_matmul(sg *s, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = sg_fp32(s, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE,
                                          CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, NULL, "a matmul");
    const sg_named named[] = {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
                              {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
                              {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c},
                              {CUDNN_ATTR_OPERATION_MATMUL_DESC, mm}};
    sg_operation(s, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, named, "a matmul operation");
}

// y = the rows of x reduced over its last dimension (add or max), in fp32.
static void sg_reduce(sg *s, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd =
        sg_fp32(s, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_OPERATOR,
                CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &how, "a reduction");
    const sg_named named[] = {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
                              {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
                              {CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd}};
    sg_operation(s, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, named, "a reduction operation");
}

// y = x seen with y's dimensions and strides (a transpose of the last two, here).
static void sg_reshape(sg *s, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const sg_named named[] = {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}};
    sg_operation(s, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, named, "a reshape operation");
}

// The operands every graph reads, in galley's layouts (dims [N, H, rows, cols] as cuDNN wants).
struct sg_io {
    cudnnBackendDescriptor_t q, kt, v, stats, scale;  // v: V [N, H, T, E] forward, V^T [N, H, E, T] backward
};

static sg_io sg_inputs(sg *s, const sdpa_geom *g, cudnnDataType_t io, int backward) {
    const int64_t n = g->n, t = g->t, h = g->h, e = g->e, row = 3 * h * e;  // qkv's token stride
    sg_io x;
    x.q = sg_tensor(s, SDPA_Q, io, n, h, t, e, t * row, e, row, 1);
    x.kt = sg_tensor(s, SDPA_K, io, n, h, e, t, t * row, e, 1, row);  // K^T: [N, H, E, T]
    x.v = backward ? sg_tensor(s, SDPA_V, io, n, h, e, t, t * row, e, 1, row)
                   : sg_tensor(s, SDPA_V, io, n, h, t, e, t * row, e, row, 1);
    x.stats = sg_tensor(s, SDPA_STATS, CUDNN_DATA_FLOAT, n, h, t, 1, h * t, t, 1, 1);
    x.scale = sg_tensor(s, SDPA_SCALE, CUDNN_DATA_FLOAT, 1, 1, 1, 1, 1, 1, 1, 1, true);
    return x;
}

// Virtual tensors of the graphs below (n, t, h in scope): scores [N, H, T, T], row values [N, H, T, 1].
#define SG_TT(dt) sg_tensor(s, 0, dt, n, h, t, t, h * t * t, t * t, t, 1)
#define SG_T1() sg_tensor(s, 0, CUDNN_DATA_FLOAT, n, h, t, 1, h * t, t, 1, 1)

// forward: O = softmax(Q K^T scale) V, stats = the rows' log-sum-exp
static void sg_forward(sg *s, const sdpa_geom *g, cudnnDataType_t io) {
    const int64_t n = g->n, t = g->t, h = g->h, e = g->e;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    sg_io x = sg_inputs(s, g, io, 0);
    cudnnBackendDescriptor_t o = sg_tensor(s, SDPA_O, io, n, h, t, e, t * h * e, e, h * e, 1);
    cudnnBackendDescriptor_t sc = SG_TT(f), ss = SG_TT(f), mx = SG_T1(), sub = SG_TT(f), ex = SG_TT(f), sum = SG_T1(),
                             lg = SG_T1(), p = SG_TT(io);
    sg_matmul(s, x.q, x.kt, sc);              // S = Q K^T
    sg_pw(s, CUDNN_POINTWISE_MUL, sc, x.scale, ss);
    sg_reduce(s, CUDNN_REDUCE_TENSOR_MAX, ss, mx);
    sg_pw(s, CUDNN_POINTWISE_SUB, ss, mx, sub);
    sg_pw(s, CUDNN_POINTWISE_EXP, sub, NULL, ex);
    sg_reduce(s, CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    sg_pw(s, CUDNN_POINTWISE_LOG, sum, NULL, lg);
    sg_pw(s, CUDNN_POINTWISE_ADD, mx, lg, x.stats);  // stats = M + log L
    sg_pw(s, CUDNN_POINTWISE_DIV, ex, sum, p);       // P = E / L, rounded to 16 bits
    sg_matmul(s, p, x.v, o);                         // O = P V
}

// backward: dQ, dK, dV from dO, O and the forward's stats (cuda_sdpa.h)
static void sg_backward(sg *s, const sdpa_geom *g, cudnnDataType_t io) {
    const int64_t n = g->n, t = g->t, h = g->h, e = g->e, row = 3 * h * e;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    sg_io x = sg_inputs(s, g, io, 1);
    cudnnBackendDescriptor_t o = sg_tensor(s, SDPA_O, io, n, h, t, e, t * h * e, e, h * e, 1),
                             dout = sg_tensor(s, SDPA_DO, io, n, h, t, e, t * h * e, e, h * e, 1),
                             dq = sg_tensor(s, SDPA_DQ, io, n, h, t, e, t * row, e, row, 1),
                             dk = sg_tensor(s, SDPA_DK, io, n, h, t, e, t * row, e, row, 1),
                             dv = sg_tensor(s, SDPA_DV, io, n, h, t, e, t * row, e, row, 1),
                             dsum = sg_tensor(s, SDPA_DSUM, f, n, h, t, 1, h * t, t, 1, 1),
                             dq_acc = sg_tensor(s, SDPA_DQ_ACC, f, n, h, t, e, h * t * e, t * e, e, 1),
                             one = sg_tensor(s, SDPA_ONE, f, 1, 1, 1, 1, 1, 1, 1, 1, true),
                             k = sg_tensor(s, 0, io, n, h, t, e, t * row, e, row, 1);  // K, a reshape of K^T
    // Dsum = rowsum(dO * O) (times 1: the pattern's dropout scale)
    cudnnBackendDescriptor_t dod = sg_tensor(s, 0, f, n, h, t, e, h * t * e, t * e, h * e, 1), rs = SG_T1();
    sg_pw(s, CUDNN_POINTWISE_MUL, dout, o, dod);
    sg_reduce(s, CUDNN_REDUCE_TENSOR_ADD, dod, rs);
    sg_pw(s, CUDNN_POINTWISE_MUL, rs, one, dsum);
    // P = e^(Q K^T scale - stats); dV = P^T dO
    cudnnBackendDescriptor_t sc = SG_TT(f), ss = SG_TT(f), sub = SG_TT(f), p = SG_TT(f),
                             pt = sg_tensor(s, 0, io, n, h, t, t, h * t * t, t * t, 1, t);
    sg_matmul(s, x.q, x.kt, sc);
    sg_pw(s, CUDNN_POINTWISE_MUL, sc, x.scale, ss);
    sg_pw(s, CUDNN_POINTWISE_SUB, ss, x.stats, sub);
    sg_pw(s, CUDNN_POINTWISE_EXP, sub, NULL, p);
    sg_reshape(s, p, pt);
    sg_matmul(s, pt, dout, dv);
    // dS = P (dO V^T - Dsum) scale; dK = dS^T Q; dQ = dS K
    cudnnBackendDescriptor_t dp = SG_TT(f), dps = SG_TT(f), ds = SG_TT(f), dss = SG_TT(f),
                             dst = sg_tensor(s, 0, io, n, h, t, t, h * t * t, t * t, 1, t);
    sg_matmul(s, dout, x.v, dp);
    sg_pw(s, CUDNN_POINTWISE_SUB, dp, dsum, dps);
    sg_pw(s, CUDNN_POINTWISE_MUL, dps, p, ds);
    sg_pw(s, CUDNN_POINTWISE_MUL, ds, x.scale, dss);
    sg_reshape(s, dss, dst);
    sg_matmul(s, dst, x.q, dk);
    sg_reshape(s, x.kt, k);
    sg_matmul(s, dss, k, dq_acc);
    sg_pw(s, CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
}
#undef SG_TT
#undef SG_T1

const char *sdpa_geom_unfit(const sdpa_geom *g) {
    if (g->e % 8 != 0 || g->e > 256) return "cuDNN's fused attention takes head widths that are multiples of 8, up to 256";
    return "";
}

void sdpa_plan_free(sdpa_plan *p) {
    for (int i = p->nheld - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->held[i]);
    memset(p, 0, sizeof *p);
}

// The graph, then cuDNN's heuristics (mode A), then the first of their configurations whose plan
// finalizes.
int sdpa_plan_build(const sdpa_geom *g, int backward, cudnnHandle_t handle, cudnnBackendDescriptor_t devprop,
                    sdpa_plan *p, char *msg, size_t len) {
    memset(p, 0, sizeof *p);
    sg s;
    memset(&s, 0, sizeof s);
    s.p = p, s.uid = SDPA_UIDS;
    const cudnnDataType_t io = g->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    if (backward) sg_backward(&s, g, io);
    else sg_forward(&s, g, io);
    cudnnBackendDescriptor_t graph = sg_make(&s, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
    if (handle) sg_set(&s, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "the graph");
    sg_set(&s, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, s.nops, s.ops, "the graph");
    sg_final(&s, graph, "the operation graph");
    cudnnBackendDescriptor_t heur = sg_make(&s, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    sg_desc(&s, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "the heuristics");
    sg_set(&s, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristics");
#if SG_DEVICEPROP
    if (!handle) sg_desc(&s, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, devprop, "the heuristics");
#else
    (void)devprop;
#endif
    sg_final(&s, heur, "the heuristics");
    enum { CFGS = 8 };
    cudnnBackendDescriptor_t cfg[CFGS];
    int64_t ncfg = 0;
    for (int i = 0; i < CFGS; i++) cfg[i] = sg_make(&s, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config");
    if (!s.st) {
        s.st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, CFGS,
                                        &ncfg, cfg);
        if (s.st) snprintf(s.what, sizeof s.what, "reading the heuristics' results");
        else if (ncfg == 0) {
            s.st = CUDNN_STATUS_NOT_SUPPORTED;
            snprintf(s.what, sizeof s.what, "the heuristics: no engine takes the %s graph",
                     backward ? "backward" : "forward");
        }
    }
    char last[256] = "";
    p->engine = -1;
    for (int64_t i = 0; !s.st && i < ncfg && !p->plan; i++) {
        cudnnBackendDescriptor_t plan = sg_make(&s, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "an execution plan");
        if (handle) sg_set(&s, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "a plan");
#if SG_DEVICEPROP
        else sg_desc(&s, plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, devprop, "a plan");
#endif
        sg_desc(&s, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i], "a plan");
        cudnnBackendDescriptor_t eng = sg_make(&s, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "an engine");
        int64_t got = 0;
        if (s.st) break;
        if (cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                     &eng) == CUDNN_STATUS_SUCCESS)
            cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &p->engine);
        const cudnnStatus_t st = cudnnBackendFinalize(plan);
        if (st == CUDNN_STATUS_SUCCESS) {
            p->plan = plan;
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, NULL,
                                     &p->workspace);
        } else {
            char why[200] = "";
            cudnnGetLastErrorString(why, sizeof why);
            snprintf(last, sizeof last, "engine %lld: %s (%s)", (long long)p->engine, cudnnGetErrorString(st), why);
        }
    }
    if (!s.st && !p->plan) {
        s.st = CUDNN_STATUS_NOT_SUPPORTED;
        snprintf(s.what, sizeof s.what, "building a plan from any of the %lld engine configs: %s", (long long)ncfg,
                 last);
    }
    if (s.st) {
        char why[256] = "";
        cudnnGetLastErrorString(why, sizeof why);
        snprintf(msg, len, "cuDNN fused attention (%s, n %lld, t %lld, h %lld, e %lld): %s failed: %s%s%s",
                 backward ? "backward" : "forward", (long long)g->n, (long long)g->t, (long long)g->h, (long long)g->e,
                 s.what, cudnnGetErrorString(s.st), *why ? "; " : "", why);
        int64_t uids[16];
        const int nuids = p->nuids;
        memcpy(uids, p->uids, sizeof uids);
        sdpa_plan_free(p);
        memcpy(p->uids, uids, sizeof uids), p->nuids = nuids;  // what the graph had, for the check
        return -1;
    }
    return 0;
}

#if SG_DEVICEPROP
// 1 when the graph's non-virtual tensors are exactly the variant pack's (cuda_sdpa.h); else 0
// with the difference in msg.
static int sdpa_uids_match(const sdpa_plan *p, int backward, char *msg, size_t len) {
    const int64_t *want = backward ? sdpa_bwd_uids : sdpa_fwd_uids;
    const int nwant = backward ? SDPA_BWD_UIDS : SDPA_FWD_UIDS;
    for (int i = 0; i < nwant; i++) {
        int seen = 0;
        for (int j = 0; j < p->nuids; j++) seen += p->uids[j] == want[i];
        if (seen != 1) {
            snprintf(msg, len, "the %s graph has tensor uid %lld %d times; the variant pack passes it once",
                     backward ? "backward" : "forward", (long long)want[i], seen);
            return 0;
        }
    }
    if (p->nuids != nwant) {
        snprintf(msg, len, "the %s graph has %d non-virtual tensors; the variant pack passes %d",
                 backward ? "backward" : "forward", p->nuids, nwant);
        return 0;
    }
    return 1;
}
#endif

extern "C" int cuda_sdpa_check(const char *devprop_json, int64_t n, int64_t t, int64_t h, int64_t e, int bf16,
                               int *stage, int64_t engines[2], char *msg, size_t len) {
    *stage = 0;
    if (cuda_dl_load(msg, len) < 0) return -1;
    *stage = 1;
#if !SG_DEVICEPROP
    (void)devprop_json, (void)n, (void)t, (void)h, (void)e, (void)bf16, (void)engines;
    snprintf(msg, len, "galley was built with cuDNN %d.%d headers; plans for a described device need 9.8",
             CUDNN_MAJOR, CUDNN_MINOR);
    return -1;
#else
    cudnnBackendDescriptor_t dp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &dp);
    if (!st)
        st = cudnnBackendSetAttribute(dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                      (int64_t)strlen(devprop_json) + 1, devprop_json);
    if (!st) st = cudnnBackendFinalize(dp);
    if (st) {
        char why[256] = "";
        cudnnGetLastErrorString(why, sizeof why);
        snprintf(msg, len, "cuDNN device properties from JSON: %s; %s", cudnnGetErrorString(st), why);
        if (dp) cudnnBackendDestroyDescriptor(dp);
        return -1;
    }
    const sdpa_geom g = {n, t, h, e, bf16, 1.0f / 8.0f};
    // Both directions, each as far as it goes; the lesser stage (and its reason) is reported.
    int rc = 0;
    *stage = 5;
    for (int backward = 0; backward < 2; backward++) {
        sdpa_plan p;
        char why[1024], diff[256];
        engines[backward] = -1;
        const int built = sdpa_plan_build(&g, backward, NULL, dp, &p, why, sizeof why) == 0;
        const int uids_ok = sdpa_uids_match(&p, backward, diff, sizeof diff);
        if (built) engines[backward] = p.engine, sdpa_plan_free(&p);
        if (built && uids_ok) continue;
        int at = 2;
        if (!uids_ok) snprintf(why, sizeof why, "%s", diff);
        else at = strstr(why, "no engine takes") ? 3 : strstr(why, "building a plan") ? 4 : 2;
        if (rc == 0 || at < *stage) {
            *stage = at;
            snprintf(msg, len, "%s", why);
        }
        rc = -1;
    }
    cudnnBackendDestroyDescriptor(dp);
    return rc;
#endif
}
