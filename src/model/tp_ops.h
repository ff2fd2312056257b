// tp_ops.h: the split products of tensor-parallel layers (tp.h), on the backend's dense kernels
// and the tensor group's collectives. Column-parallel: this rank computes its own output units
// from the replicated input; backward sums the input's gradient over the group. Row-parallel:
// this rank's input units give a partial output summed over the group; backward needs no sum.
// With tp->groups (deterministic) every product is one canonical part at a time (tp.h).
#ifndef GALLEY_MODEL_TP_OPS_H
#define GALLEY_MODEL_TP_OPS_H

#include "galley/backend.h"
#include "galley/tp.h"

// Column-parallel, x[N, K] -> y[N, S * U]: `segs` segments of U units each (this rank's; 3 for
// in_proj's q, k, v, else 1), w [S * U, K] and b [S * U] (or NULL) this rank's rows in the same
// order. Backward: dw, db overwritten (db may be NULL), dx [N, K] accumulated with the gradient
// summed over the group (dx NULL: nothing upstream; every rank of the group alike).
void tp_column_forward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t u, int segs,
                       const float *x, const float *w, const float *b, float *y, float *work);
void tp_column_backward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t u, int segs,
                        const float *x, const float *w, const float *dy, float *dw, float *db, float *dx,
                        float *work);
// Row-parallel, x[N, K] (this rank's K input units) -> y[N, D] summed over the group, plus b [D]
// (replicated, or NULL); w [D, K] this rank's columns. Backward: dw [D, K] and db overwritten, dx
// [N, K] accumulated (may be NULL).
void tp_row_forward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t d, const float *x,
                    const float *w, const float *b, float *y, float *work);
void tp_row_backward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t d, const float *x,
                     const float *w, const float *dy, float *dw, float *db, float *dx, float *work);
// The work floats these calls need at n rows (the layer's work buffer: layer_t.work_floats).
int64_t tp_column_work(const gl_tp *tp, int64_t n, int64_t k, int64_t u, int segs);
int64_t tp_row_work(const gl_tp *tp, int64_t n, int64_t k, int64_t d);

#endif
