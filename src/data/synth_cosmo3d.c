// synth_cosmo3d.c: CosmoFlow-like volumes: a random density field per sample whose statistics
// follow 4 hidden parameters, the regression targets.
//
// x is (n, C, S, S, S), values is (n, 4), each parameter uniform in [-1, 1] (CosmoFlow's
// normalised Omega_m, sigma_8, n_s, H_0 play these roles):
//   1. White noise (unit variance) is smoothed, with periodic boundaries, by a separable kernel
//      whose 1D profile mixes two Gaussians: widths 0.5 L and 1.5 L with L = 1.6 * 2^(p0 / 2)
//      voxels set the correlation length (p0), and the weight of the wide one, 0.5 + 0.4 p2, tilts
//      the spectrum between small and large scales (p2). The result is standardised (mean 0,
//      variance 1 per sample): the linear density contrast delta.
//   2. Channel c is the field at redshift z_c = 3 c / (C - 1): growth D_c = (1 + z_c)^-(0.8 + 0.3 p3)
//      (p3 also sets the mean density below), amplitude a_c = A D_c with A = 0.7 * 2^(0.6 p1) (p1).
//   3. A lognormal density rho = exp(a_c delta - a_c^2 / 2) (mean 1, skewed like late-time
//      structure) becomes particle counts round(nbar * rho) with nbar = 6 * 2^(0.4 p3), and,
//      as CosmoFlow preprocesses its counts, x = log(1 + counts) + Gaussian noise of std
//      data.synthetic.noise.
// Cost: O(S^3 (3 * kernel width + C)) per sample; no FFT.
//
// Randomness: a per-sample key k = rng_u64(seed, RNG_DATA, split, sample); its draws are
// rng_*(k, RNG_DATA, stream, j), one stream each for the parameters, the white noise and the
// observation noise. Channel 0's memory holds delta until the channels are written (last first).
#include <math.h>

#include "data/synth_internal.h"
#include "galley/check.h"
#include "galley/rng.h"

enum { STREAM_PARAMS = 0, STREAM_FIELD = 1, STREAM_NOISE = 2 };
enum { MAX_RADIUS = 32 };

// h[0..2 rad]: (1 - m) * Gaussian(sigma_s) + m * Gaussian(sigma_l), each normalised to sum 1.
static int two_scale_kernel(float h[2 * MAX_RADIUS + 1], double sigma_s, double sigma_l, double m) {
    int rad = (int)ceil(3.0 * sigma_l);
    if (rad > MAX_RADIUS) rad = MAX_RADIUS;
    double gs[2 * MAX_RADIUS + 1], gl[2 * MAX_RADIUS + 1], ss = 0.0, sl = 0.0;
    for (int t = -rad; t <= rad; t++) {
        gs[t + rad] = exp(-0.5 * t * t / (sigma_s * sigma_s));
        gl[t + rad] = exp(-0.5 * t * t / (sigma_l * sigma_l));
        ss += gs[t + rad];
        sl += gl[t + rad];
    }
    for (int t = 0; t <= 2 * rad; t++) h[t] = (float)((1.0 - m) * gs[t] / ss + m * gl[t] / sl);
    return rad;
}

static void synth_cosmo3d(const recipe_t *r, int split, gl_dataset *d) {
    const uint64_t seed = (uint64_t)r->seed;
    const int64_t c_n = d->shape.d[0], s = d->shape.d[1], vol = s * s * s;
    const float noise = (float)r->data.synthetic.noise;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < d->n; i++) {
        const uint64_t key = rng_u64(seed, RNG_DATA, (uint64_t)split, (uint64_t)i);
        float *x = d->x + i * d->size, *p = d->values + i * 4;
        for (int j = 0; j < 4; j++) p[j] = 2.0f * rng_uniform(key, RNG_DATA, STREAM_PARAMS, (uint64_t)j) - 1.0f;

        // 1. delta: smoothed white noise, standardised, in channel 0's memory.
        float *delta = x;
        for (int64_t v = 0; v < vol; v++) delta[v] = synth_gauss4(rng_u64(key, RNG_DATA, STREAM_FIELD, (uint64_t)v));
        double len = 1.6 * exp2(0.5 * p[0]);
        float h[2 * MAX_RADIUS + 1];
        int rad = two_scale_kernel(h, 0.5 * len, 1.5 * len, 0.5 + 0.4 * p[2]);
        synth_blur_axis(delta, 1, s, s * s, h, rad);  // z
        synth_blur_axis(delta, s, s, s, h, rad);      // y
        synth_blur_axis(delta, s * s, s, 1, h, rad);  // x
        double sum = 0.0, sum2 = 0.0;
        for (int64_t v = 0; v < vol; v++) sum += delta[v];
        double mean = sum / (double)vol;
        for (int64_t v = 0; v < vol; v++) sum2 += (delta[v] - mean) * (delta[v] - mean);
        double sd = sqrt(sum2 / (double)vol);
        float shift = (float)mean, scale = (float)(sd > 0.0 ? 1.0 / sd : 0.0);
        for (int64_t v = 0; v < vol; v++) delta[v] = (delta[v] - shift) * scale;

        // 2-3. Channels last to first, so channel 0 (delta itself) is overwritten last.
        double amp = 0.7 * exp2(0.6 * p[1]), growth = 0.8 + 0.3 * p[3], nbar = 6.0 * exp2(0.4 * p[3]);
        for (int64_t c = c_n - 1; c >= 0; c--) {
            double z = c_n > 1 ? 3.0 * (double)c / (double)(c_n - 1) : 0.0;
            float a = (float)(amp * pow(1.0 + z, -growth)), off = -0.5f * a * a + (float)log(nbar);
            float *xc = x + c * vol;
            for (int64_t v = 0; v < vol; v++) {
                // Whole particle counts, as CosmoFlow's histograms hold, within int16 (its file
                // type); log1pf, as the HDF5 reader applies, so a file written by `galley data
                // synth` reads back to exactly these values.
                float counts = rintf(fminf(expf(a * delta[v] + off), 32767.0f));
                uint64_t j = (uint64_t)(c * vol + v);
                xc[v] = log1pf(counts) + noise * synth_gauss4(rng_u64(key, RNG_DATA, STREAM_NOISE, j));
            }
        }
    }
}

// [channels (4), S, S, S] -> the 4 parameters behind each field, each in [-1, 1].
static void describe(const recipe_t *r, gl_dataset *d) {
    const int64_t s = r->data.synthetic.size;
    d->shape = (gl_shape){4, {synth_channels_or(r, 4), s, s, s}};
    d->target = TARGET_VALUES;
    d->tshape = shape_1d(4);
}

const synth_kind synth_kind_cosmo3d = {
    .describe = describe,
    .generate = synth_cosmo3d,
    .keys = SYNTH_KEY_SIZE | SYNTH_KEY_CHANNELS,
    .h5_x = "x",
    .h5_y = "y",
    .h5_store = SYNTH_STORE_LOG_COUNTS,
    .h5_about = "x: int16 particle counts round(expm1(v)); read with log1p (data.transform: log1p)",
};
