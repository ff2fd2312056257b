// cuda_half.h: fp32 <-> bf16 / fp16 conversions of whole arrays, for the kernels that run cuDNN
// on 16-bit copies of galley's fp32 tensors (cuda_conv.cu, cuda_sdpa.cu). Moved out of
// cuda_conv.cu unchanged, so both round the same way (to nearest even; widening is exact).
#ifndef GALLEY_CUDA_HALF_H
#define GALLEY_CUDA_HALF_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_act.h"

// One value to bf16 (bf16 != 0) or fp16 bits, rounded to nearest even, and back (exact).
__device__ static inline uint16_t to16(float v, int bf16) {
    return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}
__device__ static inline float from16(uint16_t h, int bf16) {
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
}

// x[count] fp32 -> h[count] as bf16 (bf16 != 0) or fp16 bits, rounded to nearest even
// (fp16: beyond +-65504 becomes Inf, which fp16's loss scaling detects in the gradients)
__global__ static void to_16bit(int64_t count, int bf16, const float *x, uint16_t *h) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        h[i] = to16(x[i], bf16);
}

// h[count] (bf16 or fp16 bits) -> x[count] fp32 (exact widening), accumulated, or overwritten
// with bias_act's epilogue fused: x = act(v + b[i / P % ch]) (b NULL: no bias, A as act_one's;
// ch and P read only for the bias)
template <int A>
__global__ static void from_16bit(int64_t count, int64_t ch, int64_t P, int bf16, const uint16_t *h, float *x,
                                  int accumulate, const float *b, float slope) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float v = from16(h[i], bf16);
        if (accumulate) {
            x[i] = x[i] + v;
        } else {
            if (b) v += b[i / P % ch];
            x[i] = act_one<A>(v, slope);
        }
    }
}

#endif
