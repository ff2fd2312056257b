// loss.c: the recipe's loss, dispatched to the backend's kernels.
#include "galley/loss.h"

#include <string.h>

#include "galley/check.h"

void loss_init(gl_loss *l, const recipe_t *r, const gl_dataset *d) {
    memset(l, 0, sizeof *l);
    l->kind = r->train.loss;
    l->classes = d->classes;
    l->positions = d->target == TARGET_MASK ? d->tsize : 1;
    l->tsize = d->tsize;
    l->rel_units = loss_l2_relative_units(r, d);
    const gl_floats *w = &r->train.class_weights;
    if (l->kind == LOSS_SOFTMAX_XENT && w->n > 0) {
        for (int i = 0; i < w->n; i++) l->weight_buf[i] = (float)w->v[i];
        l->weights = l->weight_buf;
    }
}

int64_t loss_l2_relative_units(const recipe_t *r, const gl_dataset *d) {
    if (r->train.l2_relative_per != L2REL_PER_CHANNEL || d->tshape.ndim < 1) return 1;
    return d->tshape.d[0];
}

double loss_compute(const gl_loss *l, const gl_backend *be, const gl_tensor *out, int64_t n, const int32_t *labels,
                    const float *values, float *dout) {
    if (l->kind == LOSS_SOFTMAX_XENT)
        return be->softmax_xent(n, l->classes, l->positions, out->data, labels, l->weights, dout);
    GL_CHECK(values, "regression loss without float targets");
    if (l->kind == LOSS_L2_RELATIVE)
        return be->l2_relative_loss(n * l->rel_units, l->tsize / l->rel_units, out->data, values, dout);
    return be->regression_loss(l->kind, n * l->tsize, out->data, values, dout);
}
