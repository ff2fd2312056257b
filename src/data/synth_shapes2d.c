// synth_shapes2d.c: images of one geometric shape each, the class being the shape.
//
// x is (n, C, S, S), labels is (n): sample i shows shape i % classes (balanced; the loader
// shuffles). Shapes, in class order: filled circle, square, triangle, ring, cross, diagonal bar.
// Each image draws, from its own keys: a background level per channel plus a gentle linear
// gradient, a shape colour per channel (a contrast of 0.4..1 of either sign against the
// background), a centre, a size (radius 15..35% of S, at least 1.5 pixels) and a rotation
// (+-20 degrees; the bar leans at 45 or 135 degrees +-20). Edges are anti-aliased over one
// pixel from a signed distance, and every pixel gets Gaussian noise of std data.synthetic.noise.
// Classes beyond 6 reuse shapes (class % 6): the recipe layer is expected to refuse them.
//
// Randomness: a per-sample key k = rng_u64(seed, RNG_DATA, split, sample); its draws are
// rng_*(k, RNG_DATA, stream, j) with one stream for the layout and one for the pixel noise.
#include <math.h>

#include "data/synth_internal.h"
#include "galley/rng.h"

enum { SHAPE_KINDS = 6, STREAM_LAYOUT = 0, STREAM_NOISE = 1 };
enum { L_CX, L_CY, L_SIZE, L_ROT, L_LEAN, L_GRADX, L_GRADY, L_CHAN };  // layout draws; L_CHAN + 2c, +2c+1 per channel

static float maxf(float a, float b) { return a > b ? a : b; }
static float minf(float a, float b) { return a < b ? a : b; }

// Signed distance (in units of the shape radius, negative inside) of point (u, v), already in
// the shape's own rotated frame, to shape k.
static float shape_distance(int k, float u, float v) {
    float au = fabsf(u), av = fabsf(v);
    switch (k) {
    case 0: return sqrtf(u * u + v * v) - 1.0f;  // circle
    case 1: return maxf(au, av) - 0.8f;  // square, about the circle's area
    case 2: {  // equilateral triangle (three half-planes), inradius 0.5, circumradius 1
        float a = -v;
        float b = 0.8660254f * u + 0.5f * v;
        float c = -0.8660254f * u + 0.5f * v;
        return maxf(a, maxf(b, c)) - 0.5f;
    }
    case 3: return fabsf(sqrtf(u * u + v * v) - 0.72f) - 0.28f;  // ring
    case 4: return minf(maxf(au - 1.0f, av - 0.28f), maxf(au - 0.28f, av - 1.0f));  // cross
    default: {  // bar along the 45-degree diagonal (the lean adds 90 degrees half the time)
        float p = 0.70710678f * (u + v), q = 0.70710678f * (v - u);
        return maxf(fabsf(p) - 1.0f, fabsf(q) - 0.25f);
    }
    }
}

static void synth_shapes2d(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t c_n = d->shape.d[0], s = d->shape.d[1], k_n = d->classes;
    const float noise = (float)r->data.synthetic.noise;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < d->n; i++) {
        const uint64_t key = rng_u64(seed, RNG_DATA, (uint64_t)split, (uint64_t)i);
        const int32_t cls = (int32_t)(i % k_n);
        const int shape = (int)(cls % SHAPE_KINDS);
        float *x = d->x + i * d->size;
        d->labels[i] = cls;

        const float sf = (float)s;
        float radius = maxf(1.5f, sf * (0.15f + 0.20f * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_SIZE)));
        float lo = minf(radius, 0.5f * sf), span = maxf(sf - 2.0f * lo, 0.0f);  // keep it inside
        float cx = lo + span * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_CX);
        float cy = lo + span * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_CY);
        float rot = 0.34906585f * (2.0f * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_ROT) - 1.0f);
        if (shape == 5 && rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_LEAN) < 0.5f) rot += 1.5707963f;
        float cr = cosf(rot), sr = sinf(rot), inv = 1.0f / radius;
        float gx = 0.3f * (2.0f * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_GRADX) - 1.0f) / sf;
        float gy = 0.3f * (2.0f * rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_GRADY) - 1.0f) / sf;

        for (int64_t c = 0; c < c_n; c++) {
            float back = rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_CHAN + 2 * (uint64_t)c) - 0.5f;
            float u01 = rng_uniform(key, RNG_DATA, STREAM_LAYOUT, L_CHAN + 2 * (uint64_t)c + 1);
            float contrast = u01 < 0.5f ? -(0.4f + 1.2f * u01) : 0.4f + 1.2f * (u01 - 0.5f);
            float *xc = x + c * s * s;
            for (int64_t py = 0; py < s; py++)
                for (int64_t px = 0; px < s; px++) {
                    float dx = (float)px + 0.5f - cx, dy = (float)py + 0.5f - cy;
                    float u = (cr * dx + sr * dy) * inv, v = (-sr * dx + cr * dy) * inv;
                    float cover = minf(1.0f, maxf(0.0f, 0.5f - shape_distance(shape, u, v) * radius));
                    uint64_t j = (uint64_t)((c * s + py) * s + px);
                    xc[py * s + px] = back + gx * (float)(px - s / 2) + gy * (float)(py - s / 2) + cover * contrast +
                                      noise * synth_gauss4(rng_u64(key, RNG_DATA, STREAM_NOISE, j));
                }
        }
    }
}

// [channels (3), S, S] -> one class label.
static void describe(const recipe_t *r, gl_dataset *d) {
    const int64_t s = r->data.synthetic.size;
    d->shape = (gl_shape){3, {synth_channels_or(r, 3), s, s}};
    d->target = TARGET_CLASS;
    d->classes = r->data.synthetic.classes;
}

const synth_kind synth_kind_shapes2d = {
    .describe = describe,
    .generate = synth_shapes2d,
    .keys = SYNTH_KEY_CLASSES | SYNTH_KEY_SIZE | SYNTH_KEY_CHANNELS,
    .max_classes = 6,  // the shapes it draws
    .h5_x = "x",
    .h5_y = "y",
};
