// synth_weather2d.c: FourCastNet-like time series: multi-channel fields on a latitude x longitude
// grid (H = size / 2 rows from south to north, W = size columns, periodic in longitude), evolving
// so that x at t + lead is a learnable function of x at t, but not x itself.
//
// One series per (seed, split, series). Channel c plays role c % 4 at level c / 4: 0 temperature
// (warm equator), 1 geopotential, 2 humidity (moist tropics), 3 a wind-like antisymmetric field;
// each has an equilibrium profile q_eq(lat) / (1 + 0.3 level). The state starts at q_eq plus 6
// random large-scale waves per channel and advances one time step in 2 substeps of:
//   advection  every row moves east by u(lat) / 2 cells (semi-Lagrangian, linear interpolation,
//              periodic): u = J (W / 32) (1.2 sin^2(2 lat) - 0.3) (1 + 0.25 level), westerly jets at
//              mid-latitudes, easterlies at the equator and poles; J in [0.8, 1.2] per series;
//   diffusion  q += 0.1 * laplacian(q) (5 points; zero flux across the poles' edges);
//   forcing    q += (0.06 (q_eq - q) + F + 0.03 (q' - q'_eq)) / 2, relaxation to equilibrium,
//              2 travelling waves per channel F = A cos(k lon - w t + phase) exp(-((lat - lat0) / 0.5)^2)
//              (k 1..3, w 0.05..0.3 per step, A 0.05..0.15) and a push from the previous channel's
//              anomaly q' (channel c - 1, cyclically).
// The snapshot at t is the state plus Gaussian observation noise of std `noise` per element.
//
// Randomness: a per-series key k = rng_u64(seed, RNG_DATA, split, series); draws rng_*(k, RNG_DATA,
// stream, j): stream 0 the series' parameters, 1 the initial waves, 2 + t the noise of step t.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/synth_internal.h"
#include "data/ts_internal.h"
#include "galley/check.h"
#include "galley/rng.h"

enum { STREAM_PARAMS = 0, STREAM_WAVES = 1, STREAM_NOISE = 2 };
enum { SUBSTEPS = 2, INIT_WAVES = 6, FORCE_WAVES = 2, ROLES = 4, OWN_CHANNELS = 20 };

#define PI 3.14159265358979

typedef struct {
    float amp, k, omega, phase, lat0;
} force_wave;

typedef struct {
    const weather2d_params *p;
    int64_t c, h, w, area;
    uint64_t key;
    float *q, *tmp, *eq, *lat;  // state, scratch [C, H, W]; equilibrium [C, H]; latitude [H]
    float *wind;                // cells per substep [C, H]
    force_wave *fw;             // [C, FORCE_WAVES]
    float *trig;                // cos and sin of k lon for k = 1..3: [3, 2, W]
} w2d;

static float equilibrium(int role, float lat) {
    float cl = cosf(lat);
    switch (role) {
    case 0: return 1.5f * cl - 0.7f;
    case 1: return 0.8f * cl * cl - 0.4f;
    case 2: return expf(-(lat / 0.4f) * (lat / 0.4f)) - 0.3f;
    default: return 0.6f * sinf(2.0f * lat);
    }
}

// The series' parameters, equilibrium and initial state.
static void w2d_init(w2d *m) {
    const uint64_t k = m->key;
    float jet = 0.8f + 0.4f * rng_uniform(k, RNG_DATA, STREAM_PARAMS, 0);
    for (int64_t j = 0; j < m->h; j++) m->lat[j] = (float)(PI * (((double)j + 0.5) / (double)m->h - 0.5));
    for (int64_t kk = 1; kk <= 3; kk++)
        for (int64_t i = 0; i < m->w; i++) {
            double a = 2 * PI * (double)(kk * i) / (double)m->w;
            m->trig[((kk - 1) * 2) * m->w + i] = (float)cos(a);
            m->trig[((kk - 1) * 2 + 1) * m->w + i] = (float)sin(a);
        }
    for (int64_t c = 0; c < m->c; c++) {
        int role = (int)(c % ROLES);
        float level = (float)(c / ROLES), s2;
        for (int64_t j = 0; j < m->h; j++) {
            m->eq[c * m->h + j] = equilibrium(role, m->lat[j]) / (1.0f + 0.3f * level);
            s2 = sinf(2.0f * m->lat[j]);
            m->wind[c * m->h + j] = jet * ((float)m->w / 32.0f) * (1.2f * s2 * s2 - 0.3f) * (1.0f + 0.25f * level) /
                                    (float)SUBSTEPS;
        }
        for (int q = 0; q < FORCE_WAVES; q++) {
            uint64_t b = 1 + (uint64_t)(c * FORCE_WAVES + q) * 5;
            force_wave *f = &m->fw[c * FORCE_WAVES + q];
            f->amp = 0.05f + 0.1f * rng_uniform(k, RNG_DATA, STREAM_PARAMS, b);
            f->k = (float)(1 + rng_below(k, RNG_DATA, STREAM_PARAMS, b + 1, 3));
            f->omega = 0.05f + 0.25f * rng_uniform(k, RNG_DATA, STREAM_PARAMS, b + 2);
            f->phase = (float)(2 * PI) * rng_uniform(k, RNG_DATA, STREAM_PARAMS, b + 3);
            f->lat0 = 2.0f * rng_uniform(k, RNG_DATA, STREAM_PARAMS, b + 4) - 1.0f;
        }
        float *q0 = m->q + c * m->area;
        for (int64_t j = 0; j < m->h; j++)
            for (int64_t i = 0; i < m->w; i++) q0[j * m->w + i] = m->eq[c * m->h + j];
        for (int v = 0; v < INIT_WAVES; v++) {
            uint64_t b = (uint64_t)(c * INIT_WAVES + v) * 4;
            int kx = 1 + (int)rng_below(k, RNG_DATA, STREAM_WAVES, b, 4);
            int ky = 1 + (int)rng_below(k, RNG_DATA, STREAM_WAVES, b + 1, 3);
            float amp = 0.6f * rng_uniform(k, RNG_DATA, STREAM_WAVES, b + 2) / (float)kx;
            float ph = (float)(2 * PI) * rng_uniform(k, RNG_DATA, STREAM_WAVES, b + 3);
            for (int64_t j = 0; j < m->h; j++) {
                float env = amp * sinf((float)ky * (m->lat[j] + (float)(PI / 2)));
                for (int64_t i = 0; i < m->w; i++)
                    q0[j * m->w + i] += env * cosf((float)(2 * PI) * (float)(kx * i) / (float)m->w + ph);
            }
        }
    }
}

// tmp = q moved east by wind cells along each row (periodic, linear interpolation).
static void advect(w2d *m) {
    for (int64_t c = 0; c < m->c; c++)
        for (int64_t j = 0; j < m->h; j++) {
            const float *in = m->q + c * m->area + j * m->w;
            float *out = m->tmp + c * m->area + j * m->w;
            double sh = m->wind[c * m->h + j], fl = floor(sh);
            float f = (float)(sh - fl);
            int64_t s0 = ((int64_t)fl % m->w + m->w) % m->w;
            for (int64_t i = 0; i < m->w; i++) {  // out[i] = in[i - sh]
                int64_t a = (i - s0 + m->w) % m->w, b = (a - 1 + m->w) % m->w;
                out[i] = (1.0f - f) * in[a] + f * in[b];
            }
        }
}

// q = tmp + diffusion + forcing at substep time ts.
static void diffuse_force(w2d *m, float ts) {
    const int64_t h = m->h, w = m->w;
    for (int64_t c = 0; c < m->c; c++) {
        const float *t = m->tmp + c * m->area, *prev = m->tmp + ((c + m->c - 1) % m->c) * m->area;
        const float *eq = m->eq + c * h, *peq = m->eq + ((c + m->c - 1) % m->c) * h;
        float *q = m->q + c * m->area;
        for (int64_t j = 0; j < h; j++) {
            int64_t jn = j + 1 < h ? j + 1 : j, js = j > 0 ? j - 1 : j;
            // cos(k lon - w ts + phase) = cos(k lon) ca - sin(k lon) sa, a = phase - w ts
            float ca[FORCE_WAVES], sa[FORCE_WAVES];
            const float *ck[FORCE_WAVES], *sk[FORCE_WAVES];
            for (int k = 0; k < FORCE_WAVES; k++) {
                const force_wave *f = &m->fw[c * FORCE_WAVES + k];
                float d = (m->lat[j] - f->lat0) / 0.5f, env = f->amp * expf(-d * d), a = f->phase - f->omega * ts;
                ca[k] = env * cosf(a), sa[k] = env * sinf(a);
                ck[k] = m->trig + ((int64_t)(f->k - 1) * 2) * w, sk[k] = ck[k] + w;
            }
            for (int64_t i = 0; i < w; i++) {
                int64_t ie = i + 1 < w ? i + 1 : 0, iw = i > 0 ? i - 1 : w - 1;
                float v = t[j * w + i];
                float lap = t[j * w + ie] + t[j * w + iw] + t[jn * w + i] + t[js * w + i] - 4.0f * v;
                float force = 0.0f;
                for (int k = 0; k < FORCE_WAVES; k++) force += ck[k][i] * ca[k] - sk[k][i] * sa[k];
                float relax = 0.06f * (eq[j] - v) + 0.03f * (prev[j * w + i] - peq[j]);
                q[j * w + i] = v + 0.1f * lap + (relax + force) / (float)SUBSTEPS;
            }
        }
    }
}

void weather2d_run(const weather2d_params *p, int split, int64_t series, int64_t steps,
                   void (*out)(int64_t t, const float *state, void *ctx), void *ctx) {
    w2d m = {.p = p, .c = p->channels, .h = p->h, .w = p->w, .area = p->h * p->w};
    m.key = rng_u64(p->seed, RNG_DATA, (uint64_t)split, (uint64_t)series);
    const int64_t n = m.c * m.area;
    m.q = gl_xmalloc((size_t)n * sizeof(float));
    m.tmp = gl_xmalloc((size_t)n * sizeof(float));
    float *snap = gl_xmalloc((size_t)n * sizeof(float));
    m.eq = gl_xmalloc((size_t)(m.c * m.h) * sizeof(float));
    m.wind = gl_xmalloc((size_t)(m.c * m.h) * sizeof(float));
    m.lat = gl_xmalloc((size_t)m.h * sizeof(float));
    m.fw = gl_xmalloc((size_t)(m.c * FORCE_WAVES) * sizeof(force_wave));
    m.trig = gl_xmalloc((size_t)(6 * m.w) * sizeof(float));
    w2d_init(&m);
    const float noise = (float)p->noise;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t v = 0; v < n; v++)
            snap[v] = m.q[v] + noise * synth_gauss4(rng_u64(m.key, RNG_DATA, STREAM_NOISE + (uint64_t)t, (uint64_t)v));
        out(t, snap, ctx);
        if (t + 1 == steps) break;
        for (int s = 0; s < SUBSTEPS; s++) {
            advect(&m);
            diffuse_force(&m, (float)t + (float)s / (float)SUBSTEPS);
        }
    }
    free(m.q), free(m.tmp), free(snap), free(m.eq), free(m.wind), free(m.lat), free(m.fw), free(m.trig);
}

// ---- the kind: pairs (x at t, x at t + lead) in memory ----------------------------------------

typedef struct {
    gl_dataset *d;
    int64_t first, per, lead;  // the series' first sample, samples per series
} pair_ctx;

// Snapshot t is sample first + t's input and sample first + t - lead's target.
static void take_pair(int64_t t, const float *state, void *ctx) {
    pair_ctx *c = ctx;
    gl_dataset *d = c->d;
    int64_t i = c->first + t, j = c->first + t - c->lead;
    if (t < c->per && i < d->n) memcpy(d->x + i * d->size, state, (size_t)d->size * sizeof(float));
    if (t >= c->lead && j < d->n) memcpy(d->values + j * d->tsize, state, (size_t)d->tsize * sizeof(float));
}

// Sample i is series i / (steps - lead) at t = i % (steps - lead).
static void synth_weather2d(const recipe_t *r, int split, gl_dataset *d) {
    const int64_t lead = r->data.synthetic.lead, per = r->data.synthetic.steps - lead;
    GL_CHECK(per > 0, "data.synthetic.lead must be below data.synthetic.steps");
    weather2d_params p = {(uint64_t)r->seed, d->shape.d[0], d->shape.d[1], d->shape.d[2], r->data.synthetic.noise};
    const int64_t nseries = (d->n + per - 1) / per;
#pragma omp parallel for schedule(dynamic)
    for (int64_t s = 0; s < nseries; s++) {
        pair_ctx c = {d, s * per, per, lead};
        int64_t need = d->n - s * per < per ? d->n - s * per : per;  // the last series may be cut short
        weather2d_run(&p, split, s, need + lead, take_pair, &c);
    }
}

// [C (20), size / 2, size] -> the same fields lead steps later.
static void describe(const recipe_t *r, gl_dataset *d) {
    const int64_t s = r->data.synthetic.size;
    d->shape = (gl_shape){3, {synth_channels_or(r, OWN_CHANNELS), s / 2, s}};
    d->target = TARGET_VALUES;
    d->tshape = d->shape;
}

const synth_kind synth_kind_weather2d = {
    .describe = describe,
    .generate = synth_weather2d,
    .keys = SYNTH_KEY_SIZE | SYNTH_KEY_CHANNELS | SYNTH_KEY_STEPS,
    .h5_x = "fields",
    .h5_y = "fields",
    .h5_about = "yearly files: fields [T, C, H, W] (the NERSC tutorial's and FourCastNet's layout)",
};
