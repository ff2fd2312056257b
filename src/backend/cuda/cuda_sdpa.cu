// cuda_sdpa.cu: attention in bf16 or fp16 through cuDNN's fused kernels (graphs and plans in
// cuda_sdpa_graph.cu), and the choice between them and galley's own (cuda_attention_tc.cu).
//
// GALLEY_ATTENTION_KERNEL picks (read at every call, so a test can switch):
//   galley (or unset) - galley's tensor-core kernels (the fp32 ones where those do not apply): the
//                     default, because they are the path that has run on a GPU (an H200, 2026-12-04)
//                     and they repeat bit for bit, which bitwise resume relies on;
//   cudnn           - cuDNN wherever it applies; a plan cuDNN cannot build for such a geometry
//                     ends the run (exit 1) with cuDNN's reason;
//   measure         - per geometry, the faster of the two, measured: the first pass of a (batch,
//                     tokens, heads, width, precision) runs each path twice and times the second
//                     run (CUDA events), forward and backward apart, and one line on stderr says
//                     what each took and which runs from then on (timings vary, so two runs may
//                     choose differently: for benchmarks and for choosing the default);
//   fp32            - galley's fp32 kernels in every precision.
// cuDNN applies in bf16 and fp16 without attention dropout, without the causal mask, and for
// head widths that are multiples of 8 (its engines take up to 256, its heuristics say the rest);
// elsewhere galley's kernels run whatever the setting. With measure, a geometry cuDNN declines is
// said once and runs galley's kernels.
//
// cuDNN reads and writes 16-bit tensors; galley's are fp32 (backend.h's contract), so each call
// rounds its inputs into the workspace first (qkv; backward also y and dy) and widens the outputs
// after (y; dqkv). lse is fp32 on both sides and cuDNN writes it in place (its stats: the rows'
// log-sum-exp of the scaled scores, galley's lse). cuDNN's backward accumulates dQ with atomics:
// unlike galley's kernels it does not repeat bit for bit.
//
// The workspace a call needs (16-bit copies, cuDNN's own) must fit the cap the memory plan counts
// (GALLEY_CUDNN_WORKSPACE_MB, as for convolutions); a plan over it is declined like one cuDNN
// cannot build. The plans live in a cache beside the convolutions' (part of the backend's one context): built
// at a geometry's first eager pass, never while a pass is being recorded (cuda_graph.cu), which a
// new geometry breaks (the pass then runs eagerly, builds and measures, and the next recording
// takes the choice).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_half.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_sdpa.h"
#include "galley/check.h"

typedef struct {
    sdpa_geom g;
    int backward;
    int state;   // 0: no plan yet; 1: plan built; -1: cuDNN declined (said once in auto mode)
    int choice;  // -1: not measured; 0: galley's kernels; 1: cuDNN's
    sdpa_plan p;
} sd_entry;

#define SDPA_CACHE 32

static struct {
    sd_entry e[SDPA_CACHE];
    int used, evict;
} sd_cache;

int cuda_attention_mode(void) {
    const char *v = getenv("GALLEY_ATTENTION_KERNEL");
    if (!v || !*v || strcmp(v, "galley") == 0) return ATTN_GALLEY;
    if (strcmp(v, "cudnn") == 0) return ATTN_CUDNN;
    if (strcmp(v, "measure") == 0) return ATTN_MEASURE;
    if (strcmp(v, "fp32") == 0) return ATTN_FP32;
    gl_die(GL_EXIT_USAGE, "unset it for galley's kernels",
           "GALLEY_ATTENTION_KERNEL=%s: the values are galley (the default), cudnn, measure and fp32", v);
}

// ---- rounding to and from 16 bits (cuda_half.h's kernels, as the convolutions' copies) ----------

static void sd_narrow(int bf16, int64_t count, const float *x, void *y) {
    to_16bit<<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(count, bf16, x, (uint16_t *)y);
    CU_LAUNCHED();
}

static void sd_widen(int bf16, int64_t count, const void *x, float *y) {
    from_16bit<0><<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        count, 1, 1, bf16, (const uint16_t *)x, y, 0, NULL, 0.0f);
    CU_LAUNCHED();
}

// ---- plans -------------------------------------------------------------------------------------

static sd_entry *sd_find(const sdpa_geom *g, int backward) {
    for (int i = 0; i < sd_cache.used; i++) {
        sd_entry *e = &sd_cache.e[i];
        if (e->backward == backward && e->g.n == g->n && e->g.t == g->t && e->g.h == g->h && e->g.e == g->e &&
            e->g.bf16 == g->bf16 && e->g.scale == g->scale)
            return e;
    }
    return NULL;
}

// The entry of (g, backward), made (without a plan) when new; the oldest goes when all are used.
static sd_entry *sd_entry_get(const sdpa_geom *g, int backward) {
    sd_entry *e = sd_find(g, backward);
    if (e) return e;
    if (sd_cache.used < SDPA_CACHE) e = &sd_cache.e[sd_cache.used++];
    else {
        e = &sd_cache.e[sd_cache.evict];
        sd_cache.evict = (sd_cache.evict + 1) % SDPA_CACHE;
        if (e->state == 1) {
            sdpa_plan_free(&e->p);
            cuda_ctx_get()->mem_gen++;  // a recorded pass may have launched its kernels: record again
        }
    }
    memset(e, 0, sizeof *e);
    e->g = *g, e->backward = backward, e->choice = -1;
    return e;
}

static size_t sd_up(size_t b) { return (b + 255) & ~(size_t)255; }

// Where a call's pieces lie in the workspace (byte offsets): the 16-bit qkv and o (forward), and
// for the backward also do and dqkv, then the fp32 dsum [N, H, T] and dQ_acc [N, H, T, E];
// cuDNN's own workspace at w. all: the bytes in total.
typedef struct {
    size_t q, o, d, dq, s, a, w, all;
} sd_layout;

static sd_layout sd_layout_of(const sd_entry *e) {
    const sdpa_geom *g = &e->g;
    const size_t he = (size_t)(g->h * g->e), nqkv = (size_t)(g->n * g->t) * 3 * he, no = (size_t)(g->n * g->t) * he,
                 rows = (size_t)(g->n * g->h * g->t), b16 = 2;
    sd_layout L;
    L.q = 0, L.o = L.q + sd_up(nqkv * b16);
    if (!e->backward) {
        L.d = L.dq = L.s = L.a = 0;
        L.w = L.o + sd_up(no * b16);
    } else {
        L.d = L.o + sd_up(no * b16), L.dq = L.d + sd_up(no * b16), L.s = L.dq + sd_up(nqkv * b16);
        L.a = L.s + sd_up(rows * sizeof(float)), L.w = L.a + sd_up(rows * (size_t)g->e * sizeof(float));
    }
    L.all = L.w + (size_t)e->p.workspace;
    return L;
}

// cuDNN's plan on the stream: the uids and pointers of its tensors, the workspace after them.
static void sd_execute(const sd_entry *e, int count, const int64_t *uids, void *const *ptrs, void *work) {
    cudnnBackendDescriptor_t vp = NULL;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &work));
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnBackendExecute(cuda_ctx_get()->cudnn, e->p.plan, vp));
    cudnnBackendDestroyDescriptor(vp);
}

// Builds e's plan once; 1 when it has one. Declining: said once (measure), or the end of the run (cudnn).
static int sd_ready(sd_entry *e, int mode) {
    if (e->state) return e->state == 1;
    char msg[1024];
    const size_t cap = cuda_ctx_get()->work_limit;
    if (sdpa_plan_build(&e->g, e->backward, cuda_ctx_get()->cudnn, NULL, &e->p, msg, sizeof msg) == 0) {
        const size_t need = sd_layout_of(e).all;
        if (need <= cap) {
            e->state = 1;
            return 1;
        }
        // The memory plan counts the workspace up to the cap: beyond it the run could fail mid-way.
        snprintf(msg, sizeof msg,
                 "cuDNN fused attention (%s, n %lld, t %lld, h %lld, e %lld) needs %.0f MiB of workspace (its 16-bit "
                 "copies and its own), over the %.0f MiB cap (GALLEY_CUDNN_WORKSPACE_MB)",
                 e->backward ? "backward" : "forward", (long long)e->g.n, (long long)e->g.t, (long long)e->g.h,
                 (long long)e->g.e, need / 1048576.0, cap / 1048576.0);
        sdpa_plan_free(&e->p);
    }
    e->state = -1, e->choice = 0;
    if (mode == ATTN_CUDNN)
        gl_die(GL_EXIT_RUNTIME,
               "unset GALLEY_ATTENTION_KERNEL to run galley's kernels here (or raise GALLEY_CUDNN_WORKSPACE_MB where the "
               "workspace is the reason)",
               "GALLEY_ATTENTION_KERNEL=cudnn: %s", msg);
    fprintf(stderr, "galley: %s; galley's attention kernels run it\n", msg);
    return 0;
}

// ---- running a plan ------------------------------------------------------------------------------

// qkv -> y, lse through e's forward plan.
static void sd_forward(const sd_entry *e, const sdpa_call *c) {
    const sdpa_geom *g = &e->g;
    const int64_t he = g->h * g->e, nqkv = g->n * g->t * 3 * he, no = g->n * g->t * he;
    const sd_layout L = sd_layout_of(e);
    char *ws = (char *)cuda_workspace(L.all), *q = ws + L.q, *o = ws + L.o;
    sd_narrow(g->bf16, nqkv, c->qkv, q);
    float scale = g->scale;
    const size_t b16 = 2;
    void *const ptrs[SDPA_FWD_UIDS] = {q, q + he * b16, q + 2 * he * b16, o, c->lse, &scale};  // sdpa_fwd_uids
    sd_execute(e, SDPA_FWD_UIDS, sdpa_fwd_uids, ptrs, ws + L.w);
    sd_widen(g->bf16, no, o, c->y);
}

// qkv, y, lse, dy -> dqkv through e's backward plan.
static void sd_backward(const sd_entry *e, const sdpa_call *c) {
    const sdpa_geom *g = &e->g;
    const int64_t he = g->h * g->e, nqkv = g->n * g->t * 3 * he, no = g->n * g->t * he, rows = g->n * g->h * g->t;
    const sd_layout L = sd_layout_of(e);
    char *ws = (char *)cuda_workspace(L.all), *q = ws + L.q, *o = ws + L.o, *dout = ws + L.d, *dq = ws + L.dq;
    sd_narrow(g->bf16, nqkv, c->qkv, q);
    sd_narrow(g->bf16, no, c->y, o);
    sd_narrow(g->bf16, no, c->dy, dout);
    CU_CHECK(cudaMemsetAsync(ws + L.a, 0, rows * g->e * sizeof(float), cuda_ctx_get()->stream));  // dQ_acc
    float scale = g->scale, one = 1.0f;
    const size_t b16 = 2;
    void *const ptrs[SDPA_BWD_UIDS] = {q,  q + he * b16,  q + 2 * he * b16,  o,        c->lse,   &scale, dout,
                                       dq, dq + he * b16, dq + 2 * he * b16, ws + L.s, ws + L.a, &one};  // sdpa_bwd_uids
    sd_execute(e, SDPA_BWD_UIDS, sdpa_bwd_uids, ptrs, ws + L.w);
    sd_widen(g->bf16, nqkv, dq, c->dqkv);
}

static void sd_run(const sd_entry *e, const sdpa_call *c) {
    if (e->backward) sd_backward(e, c);
    else sd_forward(e, c);
}

// Milliseconds of one run of f (after one untimed run: first launches load modules).
template <typename F>
static float sd_time(F f) {
    cudaStream_t st = cuda_ctx_get()->stream;
    cudaEvent_t a, b;
    CU_CHECK(cudaEventCreate(&a));
    CU_CHECK(cudaEventCreate(&b));
    f();
    CU_CHECK(cudaEventRecord(a, st));
    f();
    CU_CHECK(cudaEventRecord(b, st));
    CU_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CU_CHECK(cudaEventElapsedTime(&ms, a, b));
    CU_CHECK(cudaEventDestroy(a));
    CU_CHECK(cudaEventDestroy(b));
    return ms;
}

int sdpa_decide(const sdpa_facts *f) {
    if ((f->mode != ATTN_CUDNN && f->mode != ATTN_MEASURE) || !f->half || f->causal || f->rate > 0.0f || !f->fits ||
        f->state < 0)
        return SDPA_GALLEY;
    const bool settled = f->state == 1 && (f->mode == ATTN_CUDNN || f->choice >= 0);
    if (!settled && f->capturing) return SDPA_BREAK;  // plans and timings run eagerly
    if (f->state == 0) return SDPA_BUILD;
    if (f->mode == ATTN_CUDNN) return SDPA_CUDNN;
    if (f->choice < 0) return SDPA_MEASURE;
    return f->choice ? SDPA_CUDNN : SDPA_GALLEY;
}

int cuda_sdpa_run(int backward, const sdpa_call *c, void (*galley)(const sdpa_call *)) {
    cuda_ctx *x = cuda_ctx_get();
    const int half = x->precision == PRECISION_BF16 || x->precision == PRECISION_FP16;
    const sdpa_geom g = {c->n, c->t, c->h, c->e, x->precision == PRECISION_BF16, c->scale};
    const int fits = !*sdpa_geom_unfit(&g) && c->n > 0 && c->t > 0;
    sdpa_facts f = {cuda_attention_mode(), half, c->causal, c->rate, fits, 0, -1, x->capturing};
    sd_entry *e = NULL;
    if (sdpa_decide(&f) != SDPA_GALLEY) {  // only then does the geometry get an entry
        e = sd_entry_get(&g, backward);
        f.state = e->state, f.choice = e->choice;
    }
    switch (sdpa_decide(&f)) {
    case SDPA_BREAK:
        cuda_capture_break("attention: a geometry cuDNN's plans have not seen yet");
        return 0;
    case SDPA_BUILD:
        if (!sd_ready(e, f.mode)) return 0;
        f.state = 1;
        break;
    default:
        break;
    }
    switch (sdpa_decide(&f)) {
    case SDPA_CUDNN:
        sd_run(e, c);
        return 1;
    case SDPA_MEASURE: {
        const float ms_galley = sd_time([&] { galley(c); }), ms_cudnn = sd_time([&] { sd_run(e, c); });
        e->choice = ms_cudnn < ms_galley;
        fprintf(stderr,
                "galley: attention %s, batch %lld, %lld tokens, %lld heads of %lld, %s: cuDNN (engine %lld) %.3f "
                "ms, galley's kernels %.3f ms: %s from now on\n",
                backward ? "backward" : "forward", (long long)g.n, (long long)g.t, (long long)g.h, (long long)g.e,
                g.bf16 ? "bf16" : "fp16", (long long)e->p.engine, ms_cudnn, ms_galley,
                e->choice ? "cuDNN" : "galley's kernels");
        if (!e->choice) galley(c);  // cuDNN ran last: run galley's again so the outputs are the chosen path's
        return 1;
    }
    default:
        return 0;
    }
}
