// synth_climate2d.c: DeepCAM-like weather maps with a segmentation mask: background,
// cyclone-like vortices (class 1) and atmospheric-river-like bands (class 2).
//
// x is (n, C, S, S) on a latitude (rows) x longitude (columns, periodic) grid; labels is
// (n, S, S). Per sample:
//   features  0..3 vortices: a centre (rows 15..85% of S), a radius R = (0.05..0.09) S (at least
//             1.5 pixels), a strength 0.8..1.5 and a spin set by the hemisphere (the sign of the
//             Coriolis force). Each has a core profile exp(-r^2 / 2R^2), a tangential wind peaking
//             at r = R and an eyewall ring of rain around r = R. Mask: r < 1.5 R.
//             0..2 bands: a centre, a direction 15..60 degrees from the longitude axis (mirrored
//             in the southern hemisphere), a length (0.4..0.8) S, a half-width (0.025..0.045) S
//             (at least 1 pixel) and a sinusoidal meander across the direction. Intensity:
//             exp(-e^2 / 2w^2) * max(0, 1 - (2a / length)^2) at distance e from the meandering
//             centre line, a along it. Mask: intensity > 0.5. Vortices win where both apply.
//   channels  channel c plays role c % 8 at level c / 8 (feature signals scaled by 1 / (1 + level)):
//             0 water vapour (+core, +1.5 band), 1 and 2 wind u and v (vortex rotation, flow along
//             the band), 3 sea-level pressure (-1.5 core), 4 temperature (+0.5 warm core),
//             5 precipitation (+1.5 eyewall, +0.7 band), 6 geopotential (-0.5 core), 7 humidity
//             (+0.6 core, +0.8 band); each on its own smooth background: a latitude profile by
//             role plus 6 random large-scale waves (wavenumbers up to 3, amplitude ~0.5 / |k|),
//             and Gaussian noise of std data.synthetic.noise per pixel.
// Background dominates the mask (a few % of pixels per feature), as in DeepCAM.
//
// Randomness: a per-sample key k = rng_u64(seed, RNG_DATA, split, sample); its draws are
// rng_*(k, RNG_DATA, stream, j), one stream each for the features, the waves and pixel noise.
#include <math.h>

#include "data/synth_internal.h"
#include "galley/check.h"
#include "galley/rng.h"

enum { STREAM_FEATURES = 0, STREAM_WAVES = 1, STREAM_NOISE = 2 };
enum { MAX_VORTICES = 3, MAX_BANDS = 2, WAVES = 6, ROLES = 8, MAX_SIZE = 4096, MAX_CHANNELS = 64 };
enum { F_VORTEX = 8, F_BAND = 64 };  // feature draws: vortex k at F_VORTEX + 8k + q, band k at F_BAND + 16k + q

#define TWO_PI 6.283185307179586

typedef struct {
    float cx, cy, radius, strength, spin;
} vortex;

typedef struct {
    float cx, cy, cos_t, sin_t, half_len, width, meander, wavenumber, phase, strength;
} band;

typedef struct {
    int kx, ky;
    float cos_p, sin_p, amp;  // amp * cos(2 pi (kx x + ky y) / S + phase)
} wave;

// Everything the channels need at one pixel.
typedef struct {
    float core, u, v, ring;  // vortices
    float river, ru, rv;     // bands
} signals;

// x offset wrapped to the nearest periodic image.
static float wrap_dx(float dx, float s) { return dx > 0.5f * s ? dx - s : dx < -0.5f * s ? dx + s : dx; }

// Latitude profile of each role at lat in [-0.5, 0.5] (equator 0).
static float latitude(int role, float lat) {
    switch (role) {
    case 0: return 0.8f * cosf(3.1415927f * lat) - 0.4f;  // moist tropics
    case 1: return 0.5f * sinf(6.2831853f * lat);         // jets of opposite sign
    case 4: return cosf(3.1415927f * lat) - 0.5f;         // warm equator
    case 6: return 0.4f * cosf(3.1415927f * lat) - 0.2f;
    default: return 0.0f;
    }
}

// The feature signal of a role (before its level's gain).
static float feature(int role, const signals *f) {
    switch (role) {
    case 0: return f->core + 1.5f * f->river;
    case 1: return f->u + f->ru;
    case 2: return f->v + f->rv;
    case 3: return -1.5f * f->core;
    case 4: return 0.5f * f->core;
    case 5: return 1.5f * f->ring + 0.7f * f->river;
    case 6: return -0.5f * f->core;
    default: return 0.6f * f->core + 0.8f * f->river;
    }
}

static void synth_climate2d(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t c_n = d->shape.d[0], s = d->shape.d[1], area = s * s;
    const float noise = (float)r->data.synthetic.noise, sf = (float)s;
    GL_CHECK(s <= MAX_SIZE && c_n <= MAX_CHANNELS, "climate2d maps are at most 4096 pixels a side, 64 channels");
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < d->n; i++) {
        const uint64_t key = rng_u64(seed, RNG_DATA, (uint64_t)split, (uint64_t)i);
        float *x = d->x + i * d->size;
        int32_t *mask = d->labels + i * d->tsize;
#define U(j) rng_uniform(key, RNG_DATA, STREAM_FEATURES, (uint64_t)(j))

        vortex vs[MAX_VORTICES];
        int nv = (int)rng_below(key, RNG_DATA, STREAM_FEATURES, 0, MAX_VORTICES + 1);
        for (int k = 0; k < nv; k++) {
            int j = F_VORTEX + 8 * k;
            vs[k].cx = sf * U(j);
            vs[k].cy = sf * (0.15f + 0.7f * U(j + 1));
            vs[k].radius = fmaxf(1.5f, sf * (0.05f + 0.04f * U(j + 2)));
            vs[k].strength = 0.8f + 0.7f * U(j + 3);
            vs[k].spin = vs[k].cy < 0.5f * sf ? 1.0f : -1.0f;
        }
        band bs[MAX_BANDS];
        int nb = (int)rng_below(key, RNG_DATA, STREAM_FEATURES, 1, MAX_BANDS + 1);
        for (int k = 0; k < nb; k++) {
            int j = F_BAND + 16 * k;
            band *b = &bs[k];
            b->cx = sf * U(j);
            b->cy = sf * (0.1f + 0.8f * U(j + 1));
            float angle = (float)(TWO_PI / 360.0) * (15.0f + 45.0f * U(j + 2));
            if (b->cy > 0.5f * sf) angle = -angle;  // rows grow southwards: mirror in the south
            b->cos_t = cosf(angle);
            b->sin_t = sinf(angle);
            b->half_len = 0.5f * sf * (0.4f + 0.4f * U(j + 3));
            b->width = fmaxf(1.0f, sf * (0.025f + 0.02f * U(j + 4)));
            b->meander = b->width * (0.5f + 1.5f * U(j + 5));
            b->wavenumber = (float)TWO_PI / (b->half_len * (1.2f + 1.2f * U(j + 6)));
            b->phase = (float)TWO_PI * U(j + 7);
            b->strength = 0.8f + 0.6f * U(j + 8);
        }
#undef U

        wave ws[MAX_CHANNELS][WAVES];  // each channel's background waves
        for (int64_t c = 0; c < c_n; c++)
            for (int m = 0; m < WAVES; m++) {
                uint64_t j = (uint64_t)(c * WAVES + m) * 4;
                wave *w = &ws[c][m];
                w->kx = (int)rng_below(key, RNG_DATA, STREAM_WAVES, j, 4);
                w->ky = (int)rng_below(key, RNG_DATA, STREAM_WAVES, j + 1, 7) - 3;
                if (w->kx == 0 && w->ky == 0) w->kx = 1;
                float phase = (float)TWO_PI * rng_uniform(key, RNG_DATA, STREAM_WAVES, j + 2);
                w->cos_p = cosf(phase);
                w->sin_p = sinf(phase);
                w->amp = 0.5f * rng_uniform(key, RNG_DATA, STREAM_WAVES, j + 3) /
                         sqrtf((float)(w->kx * w->kx + w->ky * w->ky));
            }

        float cos_tab[MAX_SIZE], sin_tab[MAX_SIZE];  // cos, sin of 2 pi j / S
        for (int64_t j = 0; j < s; j++) {
            cos_tab[j] = (float)cos(TWO_PI * (double)j / (double)s);
            sin_tab[j] = (float)sin(TWO_PI * (double)j / (double)s);
        }

        for (int64_t py = 0; py < s; py++)
            for (int64_t px = 0; px < s; px++) {
                float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
                signals f = {0};
                int32_t cls = 0;
                for (int k = 0; k < nb; k++) {
                    const band *b = &bs[k];
                    float dx = wrap_dx(fx - b->cx, sf), dy = fy - b->cy;
                    float a = dx * b->cos_t + dy * b->sin_t, e = -dx * b->sin_t + dy * b->cos_t;
                    float taper = 1.0f - (a / b->half_len) * (a / b->half_len);
                    if (taper <= 0.0f) continue;
                    e -= b->meander * sinf(b->wavenumber * a + b->phase);
                    float in = taper * expf(-0.5f * (e / b->width) * (e / b->width));
                    f.river += b->strength * in;
                    f.ru += b->strength * in * b->cos_t;
                    f.rv += b->strength * in * b->sin_t;
                    if (in > 0.5f) cls = 2;
                }
                for (int k = 0; k < nv; k++) {
                    const vortex *v = &vs[k];
                    float dx = wrap_dx(fx - v->cx, sf), dy = fy - v->cy;
                    float q = (dx * dx + dy * dy) / (v->radius * v->radius), rr = sqrtf(q);
                    float core = expf(-0.5f * q);
                    float wind = v->strength * expf(0.5f) * core;  // v_t = wind * r / R: peak strength at r = R
                    f.core += v->strength * core;
                    f.u += -v->spin * wind * dy / v->radius;
                    f.v += v->spin * wind * dx / v->radius;
                    f.ring += v->strength * expf(-0.5f * (rr - 1.0f) * (rr - 1.0f) / 0.16f);
                    if (rr < 1.5f) cls = 1;
                }
                mask[py * s + px] = cls;

                float lat = fy / sf - 0.5f;
                for (int64_t c = 0; c < c_n; c++) {
                    int role = (int)(c % ROLES);
                    float gain = 1.0f / (float)(1 + c / ROLES);
                    float val = latitude(role, lat) + gain * feature(role, &f);
                    const wave *w = ws[c];
                    for (int m = 0; m < WAVES; m++) {  // cos(2 pi (kx x + ky y) / S + phase)
                        int64_t idx = ((w[m].kx * px + w[m].ky * py) % s + s) % s;
                        val += w[m].amp * (cos_tab[idx] * w[m].cos_p - sin_tab[idx] * w[m].sin_p);
                    }
                    uint64_t j = (uint64_t)(c * area + py * s + px);
                    x[c * area + py * s + px] = val + noise * synth_gauss4(rng_u64(key, RNG_DATA, STREAM_NOISE, j));
                }
            }
    }
}

// [channels (16), S, S] -> a class per pixel: background, cyclone, river (DeepCAM's classes).
static void describe(const recipe_t *r, gl_dataset *d) {
    const int64_t s = r->data.synthetic.size;
    d->shape = (gl_shape){3, {synth_channels_or(r, 16), s, s}};
    d->target = TARGET_MASK;
    d->tshape = (gl_shape){2, {s, s}};
    d->classes = 3;
}

const synth_kind synth_kind_climate2d = {
    .describe = describe,
    .generate = synth_climate2d,
    .keys = SYNTH_KEY_SIZE | SYNTH_KEY_CHANNELS,
    .h5_x = "climate/data",
    .h5_y = "climate/labels_0",
    .h5_store = SYNTH_STORE_CHANNELS_LAST,
    .h5_about = "DeepCAM layout: climate/data (H, W, C), climate/labels_0 (H, W)",
};
