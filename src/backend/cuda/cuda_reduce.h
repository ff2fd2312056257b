// cuda_reduce.h: the fixed-order block reduction the CUDA kernels share (losses, norms, metrics),
// and the host side that adds blocks' partials in block order: values repeat bit for bit from
// run to run (they are not the CPU's serial sums).
#ifndef GALLEY_CUDA_REDUCE_H
#define GALLEY_CUDA_REDUCE_H

#include "backend/cuda/cuda_internal.h"

// Sum of v over the block (blockDim a multiple of 32), returned to every thread. Fixed order:
// warp shuffles, then the first warp over the warps' sums.
__device__ static inline double cuda_block_sum(double v) {
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads();  // every thread has read part[0] of a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? part[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) part[0] = v;
    }
    __syncthreads();
    return part[0];
}

// Waits for dev[0, blocks) (from cuda_partials) and adds them on the host in block order.
static inline double cuda_partials_sum(const double *dev, double *host, unsigned blocks) {
    cudaStream_t st = cuda_ctx_get()->stream;
    CU_CHECK(cudaMemcpyAsync(host, dev, sizeof(double) * blocks, cudaMemcpyDeviceToHost, st));
    CU_CHECK(cudaStreamSynchronize(st));
    double total = 0.0;
    for (unsigned b = 0; b < blocks; b++) total += host[b];
    return total;
}

#endif
