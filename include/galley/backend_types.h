// backend_types.h: the values the backend's kernels take that recipes also name: the arithmetic
// (PRECISION_*), the regression losses (LOSS_*), the optimizer rules (OPT_*) and a convolution's
// geometry. The backend owns them; recipe.h includes this header, so the lowest layer needs
// nothing from the highest. Plain C, also read by the CUDA backend's C++.
#ifndef GALLEY_BACKEND_TYPES_H
#define GALLEY_BACKEND_TYPES_H

#include <stdint.h>

// train.precision, in the order of its choices in schema.c.
enum { PRECISION_AUTO = 0, PRECISION_FP32, PRECISION_TF32, PRECISION_BF16, PRECISION_FP16 };
// "auto", "fp32", ... for a PRECISION_* (inline: the CUDA backend's C++ uses it too).
static inline const char *recipe_precision_name(int p) {
    static const char *const names[] = {"auto", "fp32", "tf32", "bf16", "fp16"};
    return p >= PRECISION_AUTO && p <= PRECISION_FP16 ? names[p] : "?";
}

// train.loss, in the order of its choices in schema.c.
enum { LOSS_SOFTMAX_XENT = 0, LOSS_MSE = 1, LOSS_L1 = 2, LOSS_L2_RELATIVE = 3 };
// l2_relative's floor on a target's norm (backend.h's l2_relative_loss): an all-zero target
// divides by this, not by 0, so its term is finite (and huge: such data needs another loss).
#define GL_L2_RELATIVE_EPS 1e-12

// The most classes mean_iou counts (backend.h's metrics_sums; loss.h's metrics).
#define GL_MAX_IOU_CLASSES 64

// The optimizer rules, one line each: X(ENUM, name). This list is the optimizer registry
// (src/optim/optim_registry.c builds its table from it; each rule's file defines
// optim_rule_<name>, and with CUDA its kernels' cuda_optim_<name>). A line's position is its
// OPT_* value and its name is what recipes and checkpoints store: add lines at the end.
#define GL_OPTIM_RULES(X) \
    X(SGD, sgd)           \
    X(ADAMW, adamw)       \
    X(LAMB, lamb)

#define GL_OPTIM_ENUM_(E, name) OPT_##E,
enum { GL_OPTIM_RULES(GL_OPTIM_ENUM_) OPT_COUNT };
#undef GL_OPTIM_ENUM_

// One convolution or transposed convolution, as the layers (src/model/layers/conv*.c) fill it
// and the backends' kernels read it. Everything is 3D: a 2D map is D = OD = 1 with k[0] = s[0] =
// d[0] = 1, p[0] = 0. Only int64_t members, so a copy compares with memcmp (the CUDA backend's
// cache keys).
typedef struct {
    int64_t nd;             // spatial dimensions of the layer's input: 2 or 3
    int64_t n;              // samples in the call (the batch)
    int64_t c, f, groups;   // input channels, output channels (filters), groups dividing both
    int64_t in[3], out[3];  // {D, H, W} of x and of y (a transposed one's out includes output_padding)
    int64_t k[3], s[3], d[3], p[3];  // kernel, stride, dilation, padding before (after: from the sizes)
} gl_conv_geom;

// The convolution F -> C from out to in whose input gradient transposed convolution g is (the
// same n, k, s, d, p): how both backends run a transposed convolution.
static inline gl_conv_geom gl_conv_geom_flipped(const gl_conv_geom *g) {
    gl_conv_geom t = *g;
    t.c = g->f, t.f = g->c;
    for (int j = 0; j < 3; j++) t.in[j] = g->out[j], t.out[j] = g->in[j];
    return t;
}

#endif
