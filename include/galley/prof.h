// prof.h: profiler marks. NVTX ranges name the phases of a step (data, forward, backward,
// allreduce, optimizer, checkpoint) for Nsight Systems; they cost a few nanoseconds when no
// profiler is attached and compile to nothing in builds without CUDA (NVTX is header-only).
// prof_window starts and stops the CUDA profiler around train.profile's steps, so
// `nsys profile --capture-range=cudaProfilerApi` records exactly those.
#ifndef GALLEY_PROF_H
#define GALLEY_PROF_H

#include <stdint.h>

#if GALLEY_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#define prof_push(name) nvtxRangePushA(name)
#define prof_pop() nvtxRangePop()
#else
#define prof_push(name) ((void)(name))
#define prof_pop() ((void)0)
#endif

#ifdef __cplusplus
extern "C" {
#endif
// Called before each step: cudaProfilerStart at start_step, cudaProfilerStop at stop_step
// (stop_step 0: never). Returns 1 when it started or stopped the profiler at this step.
int prof_window(int64_t step, int64_t start_step, int64_t stop_step);
#ifdef __cplusplus
}
#endif

#endif
