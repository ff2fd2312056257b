// cuda_act.h: the relu/leaky_relu that a producing kernel applies as it stores its output (the
// graph's fused activations: convolutions, transposed convolutions, batch norm).
#ifndef GALLEY_CUDA_ACT_H
#define GALLEY_CUDA_ACT_H

#include "galley/backend.h"

// The activation on one value; A: 0 none, else ACT_RELU + 1 or ACT_LEAKY_RELU + 1 (slope >= 0).
// cuda_act_forward's expressions, so fusing changes no bit.
template <int A>
__device__ static inline float act_one(float v, float slope) {
    if (A == ACT_RELU + 1) v = v > 0.0f ? v : 0.0f;
    if (A == ACT_LEAKY_RELU + 1) v = v > 0.0f ? v : slope * v;
    return v;
}

#endif
