// cuda_graph.cu: recorded passes (backend.h's capture_*/replay*): a forward or backward pass is
// captured from the compute stream into a CUDA graph once, then replayed with one launch, so a
// step costs a few launches instead of one per kernel.
//
// What can be recorded: kernels, cuDNN and cuBLAS calls, memsets and device copies on the
// stream, with pointers into memory that stays put (the arena; the workspace, stage and partial
// sums until they grow: capture_generation tells). What cannot: host waits and allocations.
// While recording, a failed check or a buffer that would have to grow marks the recording broken
// (cuda_backend.cu) instead of ending the run: nothing has run yet, so the caller (src/model/
// graph_replay.c) simply runs that pass eagerly, and a genuine error then ends the run as ever.
//
// Per-step values: kernel arguments are frozen at recording. The only one a pass takes per step
// is dropout's step number; recorded dropout kernels read it from ctx.step_dev, which
// replay_step sets with a one-thread kernel ahead of each replay (in stream order).
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

void cuda_capture_break(const char *why) {
    cuda_ctx *c = cuda_ctx_get();
    if (!c->capture_broken) snprintf(c->capture_msg, sizeof c->capture_msg, "%s", why);
    c->capture_broken = true;
}

int cuda_capture_begin(char *msg, size_t len) {
    cuda_ctx *c = cuda_ctx_get();
    c->capture_broken = false;
    c->capture_msg[0] = '\0';
    // Thread-local mode: this thread's unsafe calls (allocation, synchronisation) fail while
    // recording instead of silently serialising; other threads (the data loader's) are free.
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        snprintf(msg, len, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    c->capturing = true;
    return 0;
}

void *cuda_capture_end(char *msg, size_t len) {
    cuda_ctx *c = cuda_ctx_get();
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = false;
    if (e != cudaSuccess || c->capture_broken || !graph) {
        snprintf(msg, len, "%s", c->capture_broken ? c->capture_msg
                                 : e != cudaSuccess  ? cudaGetErrorString(e)
                                                     : "nothing was recorded");
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable keeps what it needs
    if (e != cudaSuccess) {
        snprintf(msg, len, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return (void *)exec;
}

void cuda_replay(void *rec) { CU_CHECK(cudaGraphLaunch((cudaGraphExec_t)rec, cuda_ctx_get()->stream)); }

void cuda_replay_free(void *rec) {
    CU_CHECK(cudaStreamSynchronize(cuda_ctx_get()->stream));  // a replay in flight still uses it
    CU_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)rec));
}

uint64_t cuda_capture_generation(void) { return cuda_ctx_get()->mem_gen; }

__global__ static void set_step_k(uint64_t *dst, uint64_t step) { *dst = step; }

void cuda_replay_step(uint64_t step) {
    cuda_ctx *c = cuda_ctx_get();
    set_step_k<<<1, 1, 0, c->stream>>>(c->step_dev, step);
    CU_LAUNCHED();
}
