// cuda_probe.h: what the CUDA runtime sees (compiled only when nvcc was found).
#ifndef GALLEY_CUDA_PROBE_H
#define GALLEY_CUDA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
// Writes lines describing the driver, runtime and GPUs into buf; returns the number of GPUs
// (0 when there is none or no driver, with the reason in buf).
int cuda_probe(char *buf, size_t len);
// Why the CUDA backend finds no GPU, in words: no NVIDIA driver, a driver older than the
// runtime, no visible device, or the runtime's own error.
void cuda_no_gpu_reason(char *buf, size_t len);
// For tests without a GPU (cuda_sdpa_graph.cu): loads cuDNN, describes a device by cuDNN's JSON
// of its properties (compute capability as deviceVer, 900 for sm_90; SM count; shared memory; ...)
// and builds cuDNN's fused-attention plans, forward and backward, of (n, t, h, e) in bf16 (else
// fp16) for it. 0 when both finalize; -1 with the reason in msg. *stage says how far the first
// failure got: 0 cuDNN not loaded, 1 device properties, 2 graph, 3 heuristics (no engine takes
// the graph), 4 plan (an engine took it but its kernels could not be built or loaded: with no
// CUDA driver, loading fails), 5 both built. engines: the engines chosen (forward, backward).
int cuda_sdpa_check(const char *devprop_json, int64_t n, int64_t t, int64_t h, int64_t e, int bf16, int *stage,
                    int64_t engines[2], char *msg, size_t len);

// Which attention kernels run (cuda_sdpa.cu), as a pure function of what is known about one call,
// so that tests/unit/test_cuda_sdpa_plan checks the policy without a GPU.
enum { ATTN_GALLEY, ATTN_CUDNN, ATTN_MEASURE, ATTN_FP32 };  // GALLEY_ATTENTION_KERNEL's values
enum {
    SDPA_GALLEY,   // galley's kernels (tensor-core, else fp32)
    SDPA_CUDNN,    // cuDNN's plan
    SDPA_BUILD,    // build cuDNN's plan first, then decide again
    SDPA_MEASURE,  // time both, keep the faster
    SDPA_BREAK     // a pass being recorded meets what must run eagerly: drop the recording
};
typedef struct {
    int mode;       // ATTN_*
    int half;       // train.precision is bf16 or fp16
    int causal;     // the causal mask
    float rate;     // attention dropout
    int fits;       // a head width cuDNN may take
    int state;      // the geometry's plan: 0 not built, 1 built, -1 cuDNN declined it
    int choice;     // the measured choice: -1 none yet, 0 galley's kernels, 1 cuDNN's
    int capturing;  // a pass is being recorded (CUDA graphs)
} sdpa_facts;
int sdpa_decide(const sdpa_facts *f);
#ifdef __cplusplus
}
#endif

#endif
