// synth_nbody3d.c: field-to-field volumes, like emulating hydrodynamics from an N-body run:
// 4 dark-matter-like input fields, 5 gas-like output fields that are local nonlinear functions
// of (smoothed) inputs, so a U-Net can learn the map exactly up to the input noise.
//
// x is (n, 4, S, S, S), values is (n, 5, S, S, S); all periodic. Per sample:
//   inputs  phi = white noise smoothed by a Gaussian of 2.5 voxels, standardised (a potential);
//           v = -grad phi (central differences) as channels 1..3 (v_x, v_y, v_z along the
//           last, middle and first spatial axis), scaled to unit variance together;
//           delta = 0.9 * standardised(-div v) + 0.44 * g, g an independent field smoothed by
//           1 voxel (small-scale structure linear theory misses), and channel 0 is the log
//           density log(rho) = 0.8 delta - 0.32 of a lognormal rho with mean 1.
//   targets, from the clean inputs, each tanh-squashed into (-1, 1) (the U-Net's output layer):
//           with ls = channel 0 smoothed by a Gaussian of 1 voxel (pressure smoothing) and
//           dv = div v (central differences):
//           0 gas density      tanh(0.7 ls)
//           1 temperature      tanh(0.6 ls + 0.8 max(0, -dv) - 0.2)  (T ~ rho^0.6, shock heating)
//           2 speed            2 tanh(0.6 |v|) - 1
//           3 dense gas        tanh(3 (ls - 0.6))                     (a soft threshold)
//           4 compression      tanh(-0.8 dv)
//   finally the inputs get Gaussian noise of std data.synthetic.noise.
// Scratch lives in the sample's own target memory (channels are computed in an order that
// overwrites each scratch field after its last use).
//
// Randomness: a per-sample key k = rng_u64(seed, RNG_DATA, split, sample); its draws are
// rng_*(k, RNG_DATA, stream, j), one stream per white-noise field and one for input noise.
#include <math.h>

#include "data/synth_internal.h"
#include "galley/check.h"
#include "galley/rng.h"

enum { STREAM_PHI = 0, STREAM_SMALL = 1, STREAM_NOISE = 2 };
enum { MAX_RADIUS = 32 };

// Smooths the (s, s, s) volume f in place by a Gaussian of sigma voxels, periodically.
static void blur3(float *f, int64_t s, double sigma) {
    int rad = (int)ceil(3.0 * sigma);
    float h[2 * MAX_RADIUS + 1];
    double g[2 * MAX_RADIUS + 1], sum = 0.0;
    for (int t = -rad; t <= rad; t++) sum += g[t + rad] = exp(-0.5 * t * t / (sigma * sigma));
    for (int t = 0; t <= 2 * rad; t++) h[t] = (float)(g[t] / sum);
    synth_blur_axis(f, 1, s, s * s, h, rad);
    synth_blur_axis(f, s, s, s, h, rad);
    synth_blur_axis(f, s * s, s, 1, h, rad);
}

// 1 / the root mean square of f[0..n) about mean (0 for a constant field).
static float inv_rms(const float *f, int64_t n, double mean) {
    double sum2 = 0.0;
    for (int64_t v = 0; v < n; v++) sum2 += (f[v] - mean) * (f[v] - mean);
    return sum2 > 0.0 ? (float)(1.0 / sqrt(sum2 / (double)n)) : 0.0f;
}

static void standardise(float *f, int64_t n) {
    double sum = 0.0;
    for (int64_t v = 0; v < n; v++) sum += f[v];
    double mean = sum / (double)n;
    float scale = inv_rms(f, n, mean), shift = (float)mean;
    for (int64_t v = 0; v < n; v++) f[v] = (f[v] - shift) * scale;
}

// tanh through expf (glibc's tanhf is several times slower); absolute error ~1e-7.
static float squash(float x) {
    if (x > 15.0f) return 1.0f;
    if (x < -15.0f) return -1.0f;
    return 1.0f - 2.0f / (expf(2.0f * x) + 1.0f);
}

// i in [-1, s] wrapped into [0, s).
static int64_t wrap(int64_t i, int64_t s) { return i < 0 ? i + s : i >= s ? i - s : i; }

// out = -(central-difference gradient of f) along axis a (0 = x, last; 1 = y; 2 = z, first).
static void neg_gradient(const float *f, float *out, int64_t s, int a) {
    for (int64_t z = 0; z < s; z++)
        for (int64_t y = 0; y < s; y++)
            for (int64_t x = 0; x < s; x++) {
                float hi, lo;
                if (a == 0) hi = f[(z * s + y) * s + wrap(x + 1, s)], lo = f[(z * s + y) * s + wrap(x - 1, s)];
                else if (a == 1) hi = f[(z * s + wrap(y + 1, s)) * s + x], lo = f[(z * s + wrap(y - 1, s)) * s + x];
                else hi = f[(wrap(z + 1, s) * s + y) * s + x], lo = f[(wrap(z - 1, s) * s + y) * s + x];
                out[(z * s + y) * s + x] = -0.5f * (hi - lo);
            }
}

// out = divergence of (vx, vy, vz) by central differences.
static void divergence(const float *vx, const float *vy, const float *vz, float *out, int64_t s) {
    for (int64_t z = 0; z < s; z++)
        for (int64_t y = 0; y < s; y++)
            for (int64_t x = 0; x < s; x++) {
                int64_t v = (z * s + y) * s + x;
                float dx = vx[(z * s + y) * s + wrap(x + 1, s)] - vx[(z * s + y) * s + wrap(x - 1, s)];
                float dy = vy[(z * s + wrap(y + 1, s)) * s + x] - vy[(z * s + wrap(y - 1, s)) * s + x];
                float dz = vz[(wrap(z + 1, s) * s + y) * s + x] - vz[(wrap(z - 1, s) * s + y) * s + x];
                out[v] = 0.5f * (dx + dy + dz);
            }
}

static void synth_nbody3d(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t s = d->shape.d[1], vol = s * s * s;
    const float noise = (float)r->data.synthetic.noise;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < d->n; i++) {
        const uint64_t key = rng_u64(seed, RNG_DATA, (uint64_t)split, (uint64_t)i);
        float *x[4], *t[5];
        for (int c = 0; c < 4; c++) x[c] = d->x + i * d->size + c * vol;
        for (int c = 0; c < 5; c++) t[c] = d->values + i * d->tsize + c * vol;

        // Inputs. Scratch: t0 = phi, t1 = small-scale g, t2 = -div v.
        for (int64_t v = 0; v < vol; v++) t[0][v] = synth_gauss4(rng_u64(key, RNG_DATA, STREAM_PHI, (uint64_t)v));
        for (int64_t v = 0; v < vol; v++) t[1][v] = synth_gauss4(rng_u64(key, RNG_DATA, STREAM_SMALL, (uint64_t)v));
        blur3(t[0], s, 2.5);
        blur3(t[1], s, 1.0);
        standardise(t[0], vol);
        standardise(t[1], vol);
        for (int a = 0; a < 3; a++) neg_gradient(t[0], x[1 + a], s, a);
        double sum2 = 0.0;
        for (int a = 0; a < 3; a++)
            for (int64_t v = 0; v < vol; v++) sum2 += (double)x[1 + a][v] * x[1 + a][v];
        float vscale = sum2 > 0.0 ? (float)sqrt(3.0 * (double)vol / sum2) : 0.0f;
        for (int a = 0; a < 3; a++)
            for (int64_t v = 0; v < vol; v++) x[1 + a][v] *= vscale;
        divergence(x[1], x[2], x[3], t[2], s);
        standardise(t[2], vol);
        for (int64_t v = 0; v < vol; v++) x[0][v] = 0.8f * (-0.9f * t[2][v] + 0.44f * t[1][v]) - 0.32f;

        // Targets from the clean inputs: t0 = ls (smoothed log density), t4 = div v.
        for (int64_t v = 0; v < vol; v++) t[0][v] = x[0][v];
        blur3(t[0], s, 1.0);
        divergence(x[1], x[2], x[3], t[4], s);
        for (int64_t v = 0; v < vol; v++) {
            float ls = t[0][v], dv = t[4][v];
            float speed2 = x[1][v] * x[1][v] + x[2][v] * x[2][v] + x[3][v] * x[3][v];
            t[1][v] = squash(0.6f * ls + 0.8f * fmaxf(0.0f, -dv) - 0.2f);
            t[2][v] = 2.0f * squash(0.6f * sqrtf(speed2)) - 1.0f;
            t[3][v] = squash(3.0f * (ls - 0.6f));
            t[4][v] = squash(-0.8f * dv);
            t[0][v] = squash(0.7f * ls);
        }

        for (int c = 0; c < 4; c++)
            for (int64_t v = 0; v < vol; v++)
                x[c][v] += noise * synth_gauss4(rng_u64(key, RNG_DATA, STREAM_NOISE, (uint64_t)(c * vol + v)));
    }
}

// [4, S, S, S] -> [5, S, S, S] (channels are the task's own).
static void describe(const recipe_t *r, gl_dataset *d) {
    const int64_t s = r->data.synthetic.size;
    d->shape = (gl_shape){4, {4, s, s, s}};
    d->target = TARGET_VALUES;
    d->tshape = (gl_shape){4, {5, s, s, s}};
}

const synth_kind synth_kind_nbody3d = {
    .describe = describe,
    .generate = synth_nbody3d,
    .keys = SYNTH_KEY_SIZE,
    .h5_x = "x",
    .h5_y = "y",
};
