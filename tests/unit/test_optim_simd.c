// test_optim_simd.c: the optimizer's per-chunk loops (src/optim/optim_simd.c) on every path this
// CPU has (baseline, AVX2, AVX-512; a path it lacks is reported and skipped) against scalar
// references written here from the definitions, bit for bit: the sum of squares in its lane
// order (optim_simd.h), SGD's and AdamW's updates element by element as sgd.c and adam.c define
// them. Lengths around the lane count and the vector widths, so every tail is met.
#include "testlib.h"

#include <stdint.h>

#include "optim/optim_simd.h"

static const optim_isa ISAS[] = {OS_BASE, OS_AVX2, OS_AVX512};
static const char *const NAMES[] = {"baseline", "AVX2", "AVX-512"};
static const int64_t LENS[] = {0, 1, 7, 8, 15, 31, 32, 33, 63, 64, 100, 4095, 4096, 4097};
enum { NLEN = sizeof LENS / sizeof LENS[0], MAXN = 4097 };

static const optim_simd *path(int k) {
    const optim_simd *os = optim_simd_for(ISAS[k]);
    if (!os) print_message("[   SKIP   ] %s: this CPU or build lacks it\n", NAMES[k]);
    return os;
}

// Values over many magnitudes and both signs (the sums' rounding depends on the order).
static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        float u = rng_normal(seed, RNG_TEST, 0, (uint64_t)i);
        x[i] = scale * u * (float)(1 << (i % 11)) / 64.0f;
    }
}

static double sumsq_ref(const float *x, int64_t n) {
    double lane[OS_LANES] = {0};
    for (int64_t i = 0; i < n; i++) lane[i % OS_LANES] += (double)x[i] * (double)x[i];
    for (int h = OS_LANES / 2; h > 0; h /= 2)
        for (int l = 0; l < h; l++) lane[l] += lane[l + h];
    return lane[0];
}

static void test_sumsq_lane_order(void **state) {
    (void)state;
    static float x[MAXN];
    fill(x, MAXN, 11, 1.0f);
    for (int k = 0; k < 3; k++) {
        const optim_simd *os = path(k);
        if (!os) continue;
        for (int j = 0; j < NLEN; j++) {
            const int64_t n = LENS[j];
            double got = os->sumsq(x, n), want = sumsq_ref(x, n);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%s, n %lld: sum of squares %.17g, the lane order gives %.17g", NAMES[k], (long long)n, got,
                         want);
            long double plain = 0;  // and the sum itself, to double precision
            for (int64_t i = 0; i < n; i++) plain += (long double)x[i] * x[i];
            assert_true(fabsl((long double)got - plain) <= 1e-13L * plain);
        }
        double nan_in = os->sumsq((float[]){1, NAN, 2}, 3);
        assert_true(isnan(nan_in));
    }
}

static void sgd_ref(const optim_sgd_k *k, int64_t n, float *w, float *g, float *vel) {
    for (int64_t i = 0; i < n; i++) {
        if (k->clip) g[i] *= k->coef;
        if (!vel) {
            w[i] -= k->step * (g[i] + k->wdc * w[i]);
        } else if (!k->nesterov) {
            vel[i] = k->m * vel[i] + (g[i] + k->wdc * w[i]);
            w[i] -= k->step * vel[i];
        } else {
            float d = g[i] + k->wdc * w[i];
            vel[i] = k->m * vel[i] + d;
            w[i] -= k->step * (d + k->m * vel[i]);
        }
    }
}

static void expect_same(const char *what, const char *isa, int64_t n, const float *got, const float *want) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s on %s, n %lld: element %lld is %.9g, the reference %.9g", what, isa, (long long)n,
                     (long long)i, got[i], want[i]);
}

static void test_sgd_every_variant(void **state) {
    (void)state;
    static float w0[MAXN], g0[MAXN], v0[MAXN], w[2][MAXN], g[2][MAXN], v[2][MAXN];
    fill(w0, MAXN, 21, 1.0f), fill(g0, MAXN, 22, 0.3f), fill(v0, MAXN, 23, 0.1f);
    for (int k = 0; k < 3; k++) {
        const optim_simd *os = path(k);
        if (!os) continue;
        for (int variant = 0; variant < 8; variant++) {
            const bool momentum = variant & 1, nesterov = momentum && (variant & 2), clip = variant & 4;
            const optim_sgd_k c = {.m = momentum ? 0.9f : 0.0f, .wdc = variant % 3 ? 1e-3f : 0.0f, .step = 0.05f,
                                   .coef = 0.37f, .nesterov = nesterov, .clip = clip};
            for (int j = 0; j < NLEN; j++) {
                const int64_t n = LENS[j];
                for (int s = 0; s < 2; s++) {
                    memcpy(w[s], w0, sizeof w0), memcpy(g[s], g0, sizeof g0), memcpy(v[s], v0, sizeof v0);
                }
                for (int step = 0; step < 3; step++) {  // the velocity carried over
                    os->sgd(&c, n, w[0], g[0], momentum ? v[0] : NULL);
                    sgd_ref(&c, n, w[1], g[1], momentum ? v[1] : NULL);
                }
                expect_same("SGD's weights", NAMES[k], n, w[0], w[1]);
                expect_same("SGD's gradients", NAMES[k], n, g[0], g[1]);
                expect_same("SGD's velocity", NAMES[k], n, v[0], v[1]);
                assert_true(n == MAXN || w[0][n] == w0[n]);  // nothing past the chunk
            }
        }
    }
}

static void adamw_ref(const gl_optim_args *a, float keep, int64_t n, float *w, float *g, float *m, float *v) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        if (a->clip) g[i] = gi = gi * a->coef;
        m[i] = a->b1 * m[i] + a->one_b1 * gi;
        v[i] = a->b2 * v[i] + a->one_b2 * gi * gi;
        w[i] *= keep;
        w[i] -= a->lr * ((m[i] * a->inv_bc1) / (sqrtf(v[i]) * a->inv_sqrt_bc2 + a->eps));
    }
}

static void test_adamw_every_variant(void **state) {
    (void)state;
    static float w0[MAXN], g0[MAXN], w[2][MAXN], g[2][MAXN], m[2][MAXN], v[2][MAXN];
    fill(w0, MAXN, 31, 1.0f), fill(g0, MAXN, 32, 0.3f);
    for (int i = 0; i < MAXN; i += 5) g0[i] = 0.0f;  // v stays 0 at step 1: sqrt(0) + eps
    const double t = 3, b1 = 0.9, b2 = 0.999;
    gl_optim_args a = {.lr = 3e-4f, .b1 = (float)b1, .b2 = (float)b2, .one_b1 = (float)(1 - b1),
                       .one_b2 = (float)(1 - b2), .eps = 1e-8f, .inv_bc1 = (float)(1 / (1 - pow(b1, t))),
                       .inv_sqrt_bc2 = (float)(1 / sqrt(1 - pow(b2, t))), .coef = 0.61f};
    for (int k = 0; k < 3; k++) {
        const optim_simd *os = path(k);
        if (!os) continue;
        for (int variant = 0; variant < 4; variant++) {
            a.clip = variant & 1;
            const float keep = variant & 2 ? 1.0f : 1.0f - 3e-4f * 0.05f;
            for (int j = 0; j < NLEN; j++) {
                const int64_t n = LENS[j];
                for (int s = 0; s < 2; s++) {
                    memcpy(w[s], w0, sizeof w0), memcpy(g[s], g0, sizeof g0);
                    memset(m[s], 0, sizeof m[s]), memset(v[s], 0, sizeof v[s]);
                }
                for (int step = 0; step < 3; step++) {
                    os->adamw(&a, keep, n, w[0], g[0], m[0], v[0]);
                    adamw_ref(&a, keep, n, w[1], g[1], m[1], v[1]);
                }
                expect_same("AdamW's weights", NAMES[k], n, w[0], w[1]);
                expect_same("AdamW's gradients", NAMES[k], n, g[0], g[1]);
                expect_same("AdamW's m", NAMES[k], n, m[0], m[1]);
                expect_same("AdamW's v", NAMES[k], n, v[0], v[1]);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sumsq_lane_order),
        cmocka_unit_test(test_sgd_every_variant),
        cmocka_unit_test(test_adamw_every_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
