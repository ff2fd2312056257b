// optim_simd.h: the optimizer's loops over one chunk on the CPU (the sum of squares of the norm,
// SGD's and AdamW's element updates), compiled for AVX-512, AVX2 and the baseline, the best the
// CPU has chosen at run time (optim_simd_get), as the conv kernels and the loader do.
//
// Bits: the updates are element-wise and every path does the same float operations in the same
// order (C11: no contraction into fused multiply-adds), so every path gives the same bits. The
// sum of squares runs over OS_LANES double lanes, element i of the chunk into lane i % OS_LANES in
// order, the lanes then added in a fixed tree: the same sums on every path.
//
// Why: the baseline build (no -march) ran these loops as SSE2, the norm's in two 2-lane chains of
// dependent adds. Measured on a 2-core Xeon (MLP, 2 threads, perf): the norm 3.9% -> 2.2% of the
// samples, but the optimizer phase (12.9% of the MLP's step) only 0.56 -> 0.53-0.54 s over 2000
// steps: the update streams 8 MB a step from L3 (weights, velocity, gradients), and that bounds it.
#ifndef GALLEY_OPTIM_SIMD_H
#define GALLEY_OPTIM_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#include "galley/optim.h"

#define OS_LANES 32

typedef enum { OS_BASE, OS_AVX2, OS_AVX512 } optim_isa;

// SGD's scalars for one chunk (sgd.c): wdc is 0 for a plain tensor; vel NULL without momentum.
typedef struct {
    float m, wdc, step, coef;
    bool nesterov, clip;
} optim_sgd_k;

typedef struct {
    // sum over i < n of (double)x[i]^2, in the lane order above
    double (*sumsq)(const float *x, int64_t n);
    // w, g, vel are (n) at the chunk's offset
    void (*sgd)(const optim_sgd_k *k, int64_t n, float *w, float *g, float *vel);
    // keep: 1 for a plain tensor, else a->decayed (adam.c)
    void (*adamw)(const gl_optim_args *k, float keep, int64_t n, float *w, float *g, float *m, float *v);
} optim_simd;

// The loops of the best instruction set this CPU has (asked once).
const optim_simd *optim_simd_get(void);
// Those of one instruction set; NULL where this build or this CPU lacks it (tests).
const optim_simd *optim_simd_for(optim_isa isa);

#endif
