// synth_util.c: helpers the synthetic generators share.
#include "data/synth_internal.h"
#include "galley/check.h"

enum { LINE_FLOATS = 8192, BLOCK = 16 };

int64_t synth_channels_or(const recipe_t *r, int64_t own) {
    return r->data.synthetic.channels > 0 ? r->data.synthetic.channels : own;
}

// Approximately standard normal from one 64-bit draw: four 16-bit uniforms (Irwin-Hall),
// centred and scaled to unit variance.
float synth_gauss4(uint64_t u) {
    float s = (float)(u & 0xffff) + (float)((u >> 16) & 0xffff) + (float)((u >> 32) & 0xffff) + (float)(u >> 48);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

// f is (outer, len, inner): convolves every line along the middle axis, periodically, with
// h[0..2 rad] centred at h[rad]. Lines are copied BLOCK at a time (contiguous in inner) into
// a stack buffer, so strided axes read whole cache lines.
void synth_blur_axis(float *f, int64_t outer, int64_t len, int64_t inner, const float *h, int rad) {
    float buf[LINE_FLOATS];
    int64_t padded = len + 2 * rad;
    GL_CHECK(padded <= LINE_FLOATS, "synthetic volumes are at most 4096 voxels on a side");
    int64_t block = inner < BLOCK ? inner : BLOCK;
    if (block * padded > LINE_FLOATS) block = LINE_FLOATS / padded;
    for (int64_t o = 0; o < outer; o++) {
        float *fo = f + o * len * inner;
        for (int64_t j0 = 0; j0 < inner; j0 += block) {
            int64_t b = inner - j0 < block ? inner - j0 : block;
            for (int64_t t = 0; t < padded; t++) {
                int64_t src = ((t - rad) % len + len) % len;
                for (int64_t jj = 0; jj < b; jj++) buf[t * b + jj] = fo[src * inner + j0 + jj];
            }
            for (int64_t t = 0; t < len; t++) {
                float acc[BLOCK];
                for (int64_t jj = 0; jj < b; jj++) acc[jj] = 0.0f;
                for (int q = 0; q <= 2 * rad; q++)
                    for (int64_t jj = 0; jj < b; jj++) acc[jj] += h[q] * buf[(t + q) * b + jj];
                for (int64_t jj = 0; jj < b; jj++) fo[t * inner + j0 + jj] = acc[jj];
            }
        }
    }
}
