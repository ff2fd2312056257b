// cpu_kernels.h: the CPU backend's kernels (shapes in each definition's comment).
#ifndef GALLEY_CPU_KERNELS_H
#define GALLEY_CPU_KERNELS_H

#include <stdint.h>

#include "galley/backend.h"

void cpu_dense_forward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *b, float *y);
void cpu_dense_backward(int64_t n, int64_t k, int64_t u, const float *x, const float *w, const float *dy, float *dw,
                        float *db, float *dx);
void cpu_act_forward(gl_act act, float alpha, int64_t n, const float *x, float *y);
void cpu_act_backward(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx);
double cpu_softmax_xent(int64_t n, int64_t c, const float *logits, const int32_t *labels, float *dlogits,
                        int64_t *correct);

// (begin conv region)
// (end conv region)
// (begin pool-norm region)
// (end pool-norm region)

#endif
