// merge.c: layers that join several inputs (named by the recipe's `inputs: [a, b, ...]`):
// add (element-wise sum of same-shaped inputs, residual connections) and concat (along the
// channel dimension, dim 0 of the per-sample shape, as torch.cat(dim=1) on batched tensors).
#include <stdio.h>

#include "galley/layer.h"

static const key_spec no_keys[] = {KEY_END};

// "[3, 4, 4], [5, 4, 4]" for the error messages.
static void format_inputs(const layer_t *l, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int j = 0; j < l->nin && k < len; j++) {
        char one[64];
        shape_format(&l->in[j]->shape, one, sizeof one);
        k += (size_t)snprintf(buf + k, len - k, j ? ", %s" : "%s", one);
    }
}

// ---- add --------------------------------------------------------------------------------------------

static int add_infer(layer_t *l, char *err, size_t errlen) {
    for (int j = 1; j < l->nin; j++)
        if (!shape_equal(&l->in[j]->shape, &l->in[0]->shape)) {
            char shapes[256];
            format_inputs(l, shapes, sizeof shapes);
            snprintf(err, errlen, "add needs inputs of one shape, got %s", shapes);
            return -1;
        }
    l->out.shape = l->in[0]->shape;
    l->nparams = 0;
    l->flops = (l->nin - 1) * l->in[0]->size;
    return 0;
}

static void add_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    if (l->res_by) return;  // the producer of one input added the other as it stored (graph_build)
    int64_t count = n * l->out.size, len = l->out.size;
    // One row a sample: the CPU's copy_rows runs rows in parallel (a single row of the whole
    // batch was one thread's memcpy).
    be->copy_rows(n, len, l->in[0]->data, len, l->out.data, len, 0);
    for (int j = 1; j < l->nin; j++) be->axpy(count, 1.0f, l->in[j]->data, l->out.data);
}

// dx_j += dy, or dx_j = dy where the graph lets this layer write the gradient first (grad_set:
// no clearing pass before it, and one pass instead of a read-add-write). Each element is then
// dy itself rather than 0 + dy: the same value (but for the sign of a zero). Measured on a 2-core
// Xeon (vit-tiny's 12 adds, 2 threads, 30 steps, 3 alternating runs), with the forward's copy
// in parallel and the CPU's axpy vectorised: forward 0.258-0.282 -> 0.135-0.143 s, backward
// 0.247-0.277 -> 0.093-0.101 s (of 13-15 s).
static void add_backward(layer_t *l, const gl_backend *be, int64_t n) {
    for (int j = 0; j < l->nin; j++) {
        if (!l->in[j]->grad || l->grad_shared[j]) continue;  // the same buffer (graph_share_grads)
        if (l->grad_set[j])
            be->copy_rows(n, l->out.size, l->out.grad, l->out.size, l->in[j]->grad, l->out.size, 0);
        else
            be->axpy(n * l->out.size, 1.0f, l->out.grad, l->in[j]->grad);
    }
}

static bool add_sets_grad(const layer_t *l, const gl_backend *be, int k) {
    (void)l, (void)be, (void)k;
    return true;
}

const layer_kind layer_add = {
    .name = "add",
    .doc = "element-wise sum of 2 to 8 inputs of one shape (e.g. a residual connection)",
    .keys = no_keys,
    .min_inputs = 2,
    .max_inputs = 8,
    .grad_is_dy = true,
    .sums_inputs = true,
    .infer = add_infer,
    .forward = add_forward,
    .backward = add_backward,
    .sets_grad = add_sets_grad,
};

// ---- concat -----------------------------------------------------------------------------------------

static int concat_infer(layer_t *l, char *err, size_t errlen) {
    const gl_shape *a = &l->in[0]->shape;
    gl_shape out = *a;
    for (int j = 1; j < l->nin; j++) {
        const gl_shape *b = &l->in[j]->shape;
        int ok = b->ndim == a->ndim;
        for (int d = 1; ok && d < a->ndim; d++) ok = b->d[d] == a->d[d];
        if (!ok) {
            char shapes[256];
            format_inputs(l, shapes, sizeof shapes);
            snprintf(err, errlen, "concat joins along %s (the first dimension) and needs the other dimensions equal, got %s",
                     a->tokens ? "tokens" : "channels", shapes);
            return -1;
        }
        out.d[0] += b->d[0];
    }
    l->out.shape = out;
    l->nparams = 0;
    l->flops = 0;
    return 0;
}

static void concat_forward(layer_t *l, const gl_backend *be, int64_t n, bool train) {
    (void)train;
    int64_t off = 0;
    for (int j = 0; j < l->nin; j++) {
        int64_t size = l->in[j]->size;
        be->copy_rows(n, size, l->in[j]->data, size, l->out.data + off, l->out.size, 0);
        off += size;
    }
}

static void concat_backward(layer_t *l, const gl_backend *be, int64_t n) {
    int64_t off = 0;
    for (int j = 0; j < l->nin; j++) {
        int64_t size = l->in[j]->size;
        if (l->in[j]->grad) be->copy_rows(n, size, l->out.grad + off, l->out.size, l->in[j]->grad, size, 1);
        off += size;
    }
}

const layer_kind layer_concat = {
    .name = "concat",
    .doc = "joins 2 to 8 inputs along the first dimension (channels of maps, tokens of [T, D] tokens); the other "
           "dimensions must match",
    .keys = no_keys,
    .min_inputs = 2,
    .max_inputs = 8,
    .infer = concat_infer,
    .forward = concat_forward,
    .backward = concat_backward,
};
