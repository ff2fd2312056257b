// tensor.h: shapes and activation tensors. Layout is channels-first (NCHW / NCDHW): a
// per-sample shape lists C, then the spatial dimensions; the batch dimension N comes first
// in memory and is not part of gl_shape.
// Token tensors (transformers) are [T, D]: T tokens of D features each, token-major (a token's
// D features are contiguous), marked tokens = true. A [T, D] token tensor and a [C, L] map
// have the same memory size but not the same meaning: layers say which they take (layer.h).
#ifndef GALLEY_TENSOR_H
#define GALLEY_TENSOR_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define GL_MAX_DIMS 5  // per-sample C + up to 3 spatial dims; 3D conv weights [F, C, k, k, k]

typedef struct {
    int ndim;
    int64_t d[GL_MAX_DIMS];
    bool tokens;  // [T, D] tokens x features (ndim 2); false: [C, spatial...] or flat [K]
    // Tokens made from patches (patch_embed): the patch grid {D, H, W} (2D: {1, h, w}) and the
    // patch size {pd, ph, pw}, which per-token layers carry along and unpatch reads back;
    // zeros otherwise. Not compared by shape_equal.
    int64_t grid[3], patch[3];
} gl_shape;

typedef struct {
    gl_shape shape;  // per sample
    int64_t size;    // elements per sample
    float *data;     // [N, size] for N up to the graph's batch capacity
    float *grad;     // same layout; NULL where no gradient is needed (the model input)
} gl_tensor;

int64_t shape_size(const gl_shape *s);
// Same number of dimensions and the same extents.
bool shape_equal(const gl_shape *a, const gl_shape *b);
// "[3, 32, 32]"; tokens "[T 64, D 192]"
void shape_format(const gl_shape *s, char *buf, size_t len);
gl_shape shape_1d(int64_t n);
// [t, d] tokens.
gl_shape shape_tokens(int64_t t, int64_t d);

#endif
