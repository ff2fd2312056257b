// tp_ops.c: the split products of tensor-parallel layers (tp_ops.h).
//
// Deterministic mode (tp->groups > 0) computes each canonical part on its own: a column part
// is U / G units of every segment, a row part K / G input units. A part's product has the same
// shapes and inputs whatever the layout, so the backend gives the same bits (its sums do not
// depend on the thread count either); the parts' partial sums are gathered over the group and
// added in part order, the order tensor_parallel 1 adds them in. The copies to and from
// contiguous parts cost far less than the products (D x K / G floats against N x D x K / G
// multiply-adds).
#include "model/tp_ops.h"

#include "galley/check.h"

// Canonical parts on this rank (1 when not deterministic).
static int64_t local_groups(const gl_tp *tp) { return tp->groups > 0 ? tp->groups / tp->size : 1; }

int64_t tp_column_work(const gl_tp *tp, int64_t n, int64_t k, int64_t u, int segs) {
    if (tp->groups <= 0) return n * k;  // backward's partial dx
    const int64_t g = local_groups(tp), ug = u / g;
    (void)segs;
    // a part's output (or dy) + every rank's partial dx
    return n * ug + (g + tp->groups) * n * k;
}

int64_t tp_row_work(const gl_tp *tp, int64_t n, int64_t k, int64_t d) {
    if (tp->groups <= 0) return 0;
    const int64_t g = local_groups(tp), kg = k / g;
    // forward: x part, w part, partials (this rank's and all); backward: x, w, dw, dx parts
    const int64_t fwd = n * kg + d * kg + (g + tp->groups) * n * d, bwd = 2 * n * kg + 2 * d * kg;
    return fwd > bwd ? fwd : bwd;
}

// x[N, K] -> y[N, S U]
void tp_column_forward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t u, int segs,
                       const float *x, const float *w, const float *b, float *y, float *work) {
    if (tp->groups <= 0) {  // this rank's units at once: rows of w in y's column order
        be->dense_forward(n, k, segs * u, x, w, b, y);
        return;
    }
    const int64_t g = local_groups(tp), ug = u / g, width = segs * u;
    GL_CHECK(ug * g == u, "canonical parts divide the units (graph_build checked)");
    for (int64_t j = 0; j < g; j++)
        for (int s = 0; s < segs; s++) {
            const int64_t off = s * u + j * ug;
            be->dense_forward(n, k, ug, x, w + off * k, b ? b + off : NULL, work);
            be->copy_rows(n, ug, work, ug, y + off, width, 0);
        }
}

// dy[N, S U] -> dw [S U, K], db [S U], dx[N, K] +=
void tp_column_backward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t u, int segs,
                        const float *x, const float *w, const float *dy, float *dw, float *db, float *dx,
                        float *work) {
    if (tp->groups <= 0) {
        float *part = work;  // this rank's share of dx, summed over the group
        be->zero(part, sizeof(float) * (size_t)(n * k));
        be->dense_backward(n, k, segs * u, x, w, dy, dw, db, part);
        if (!dx) return;
        if (tp->size > 1) tp->sum(tp->ctx, part, n * k, "a column-parallel layer's input gradient");
        be->axpy(n * k, 1.0f, part, dx);
        return;
    }
    const int64_t g = local_groups(tp), ug = u / g, width = segs * u, nk = n * k;
    float *dyp = work, *mine = work + n * ug, *all = tp->size > 1 ? mine + g * nk : mine;
    for (int64_t j = 0; j < g; j++) {
        float *part = mine + j * nk;
        be->zero(part, sizeof(float) * (size_t)nk);
        for (int s = 0; s < segs; s++) {
            const int64_t off = s * u + j * ug;
            be->copy_rows(n, ug, dy + off, width, dyp, ug, 0);
            be->dense_backward(n, k, ug, x, w + off * k, dyp, dw + off * k, db ? db + off : NULL, dx ? part : NULL);
        }
    }
    if (!dx) return;
    if (tp->size > 1) tp->gather(tp->ctx, mine, g * nk, all, "a column-parallel layer's input gradient");
    for (int64_t p = 0; p < tp->groups; p++) be->axpy(nk, 1.0f, all + p * nk, dx);
}

// x[N, K] (this rank's units) -> y[N, D], summed over the group
void tp_row_forward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t d, const float *x,
                    const float *w, const float *b, float *y, float *work) {
    if (tp->groups <= 0) {
        be->dense_forward(n, k, d, x, w, NULL, y);
        if (tp->size > 1) tp->sum(tp->ctx, y, n * d, "a row-parallel layer's output");
        if (b) be->copy_rows(n, d, b, 0, y, d, 1);  // + the (replicated) bias, once
        return;
    }
    const int64_t g = local_groups(tp), kg = k / g, nd = n * d;
    GL_CHECK(kg * g == k, "canonical parts divide the input units (graph_build checked)");
    float *xp = work, *wp = xp + n * kg, *mine = wp + d * kg, *all = tp->size > 1 ? mine + g * nd : mine;
    for (int64_t j = 0; j < g; j++) {
        be->copy_rows(n, kg, x + j * kg, k, xp, kg, 0);
        be->copy_rows(d, kg, w + j * kg, k, wp, kg, 0);
        be->dense_forward(n, kg, d, xp, wp, NULL, mine + j * nd);
    }
    if (tp->size > 1) tp->gather(tp->ctx, mine, g * nd, all, "a row-parallel layer's output");
    if (b) be->copy_rows(n, d, b, 0, y, d, 0);
    else be->zero(y, sizeof(float) * (size_t)nd);
    for (int64_t p = 0; p < tp->groups; p++) be->axpy(nd, 1.0f, all + p * nd, y);
}

// dy[N, D] (the same on every rank) -> dw [D, K], db [D], dx[N, K] +=
void tp_row_backward(const gl_tp *tp, const gl_backend *be, int64_t n, int64_t k, int64_t d, const float *x,
                     const float *w, const float *dy, float *dw, float *db, float *dx, float *work) {
    if (tp->groups <= 0) {
        be->dense_backward(n, k, d, x, w, dy, dw, db, dx);
        return;
    }
    const int64_t g = local_groups(tp), kg = k / g;
    float *xp = work, *wp = xp + n * kg, *dwp = wp + d * kg, *dxp = dwp + d * kg;
    for (int64_t j = 0; j < g; j++) {
        be->copy_rows(n, kg, x + j * kg, k, xp, kg, 0);
        be->copy_rows(d, kg, w + j * kg, k, wp, kg, 0);
        if (dx) be->zero(dxp, sizeof(float) * (size_t)(n * kg));
        be->dense_backward(n, kg, d, xp, wp, dy, dwp, j == 0 ? db : NULL, dx ? dxp : NULL);
        be->copy_rows(d, kg, dwp, kg, dw + j * kg, k, 0);
        if (dx) be->copy_rows(n, kg, dxp, kg, dx + j * kg, k, 1);
    }
}
