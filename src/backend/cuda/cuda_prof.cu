// cuda_prof.cu: the CUDA profiler window of train.profile (see galley/prof.h).
#include <cuda_profiler_api.h>

#include "galley/prof.h"

extern "C" int prof_window(int64_t step, int64_t start_step, int64_t stop_step) {
    if (stop_step <= 0) return 0;
    if (step == start_step) return cudaProfilerStart() == cudaSuccess;
    if (step == stop_step) return cudaProfilerStop() == cudaSuccess;
    return 0;
}
