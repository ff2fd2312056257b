// cuda_sdpa.h: cuDNN's fused scaled-dot-product attention as cuDNN 9 backend-API graphs, for
// cuda_sdpa.cu (which runs them) and for checking them without a GPU (cuda_sdpa_check).
//
// The graphs are the "composite" SDPA pattern cuDNN's fused-attention engines recognise (the one
// NVIDIA's cudnn-frontend builds for its sdpa() and sdpa_backward() nodes), written here against the
// backend API because galley's CUDA code is C-callable and loads cuDNN at run time (cuda_dl.h):
//   forward:  S = Q K^T * scale; M = rowmax S; E = e^(S - M); L = rowsum E;
//             stats = M + log L (galley's lse); O = (E / L) V
//   backward: Dsum = rowsum(dO * O); P = e^(Q K^T * scale - stats); dV = P^T dO;
//             dS = P (dO V^T - Dsum) * scale; dK = dS^T Q; dQ = dS K (through an fp32 dQ_acc)
// Operands in 16 bits (bf16 or fp16), everything between them fp32. No mask and no dropout:
// causal attention and attention dropout stay with galley's kernels (cuda_attention*.cu).
// Layouts are galley's (backend.h): q, k, v interleaved in qkv[N, T, 3, H, E], o and do in
// [N, T, H, E], stats (lse) in [N, H, T]; dQ, dK, dV into a [N, T, 3, H, E] 16-bit buffer.
#ifndef GALLEY_CUDA_SDPA_H
#define GALLEY_CUDA_SDPA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_dl.h"

typedef struct {
    int64_t n, t, h, e;  // batch, tokens, heads, head width
    int bf16;            // 1: bfloat16 operands; 0: IEEE half
    float scale;         // applied to q k^T
} sdpa_geom;

// The tensors a plan reads and writes (their unique ids in the graph and the variant pack).
enum {
    SDPA_Q = 1, SDPA_K, SDPA_V, SDPA_O, SDPA_STATS, SDPA_SCALE,  // forward
    SDPA_DO, SDPA_DQ, SDPA_DK, SDPA_DV, SDPA_DSUM, SDPA_DQ_ACC, SDPA_ONE,  // backward adds these
    SDPA_UIDS  // first uid of the virtual tensors
};

// The non-virtual tensors of each graph: the variant pack's uids, in the order cuda_sdpa.cu
// passes their pointers (cuda_sdpa_check verifies each graph has exactly these).
static const int64_t sdpa_fwd_uids[] = {SDPA_Q, SDPA_K, SDPA_V, SDPA_O, SDPA_STATS, SDPA_SCALE};
static const int64_t sdpa_bwd_uids[] = {SDPA_Q,  SDPA_K,  SDPA_V,  SDPA_O,    SDPA_STATS,  SDPA_SCALE, SDPA_DO,
                                        SDPA_DQ, SDPA_DK, SDPA_DV, SDPA_DSUM, SDPA_DQ_ACC, SDPA_ONE};
#define SDPA_FWD_UIDS (int)(sizeof sdpa_fwd_uids / sizeof sdpa_fwd_uids[0])
#define SDPA_BWD_UIDS (int)(sizeof sdpa_bwd_uids / sizeof sdpa_bwd_uids[0])

#define SDPA_HELD 128  // descriptors one graph and its plan keep alive (the backward: 26 tensors, 33 for
                       // its operations, graph, heuristics, 8 configs, a plan and an engine per config tried: 85)

typedef struct {
    cudnnBackendDescriptor_t held[SDPA_HELD];  // tensors, operations, graph, heuristics, configs, plan
    int nheld;
    cudnnBackendDescriptor_t plan;
    int64_t workspace;  // bytes cuDNN's plan asks for (cuda_sdpa.cu adds its 16-bit copies, dsum and dQ_acc)
    int64_t engine;     // the engine the heuristics chose (for the log)
    int64_t uids[16];   // the graph's non-virtual tensors, in the order they were made
    int nuids;
} sdpa_plan;

// Why the cuDNN path cannot take a geometry ("" when it can): its head width.
const char *sdpa_geom_unfit(const sdpa_geom *g);

// Builds the forward (backward 0) or backward graph of g and an execution plan for it: for the
// GPU behind handle, or (handle NULL) for the device devprop describes, without a GPU. The first
// engine configuration of cuDNN's heuristics (mode A) that finalizes is kept. 0, or -1 with
// cuDNN's reason in msg (the plan then holds no descriptor, only the graph's uids).
int sdpa_plan_build(const sdpa_geom *g, int backward, cudnnHandle_t handle, cudnnBackendDescriptor_t devprop,
                    sdpa_plan *p, char *msg, size_t len);
void sdpa_plan_free(sdpa_plan *p);

// cuda_sdpa_check (galley/cuda_probe.h) builds both plans for a described device, without a GPU.

#endif
