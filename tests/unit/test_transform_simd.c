// test_transform_simd.c: the loader's vectorised per-element work (src/data/transform_simd.c)
// against its scalar reference, on every path this CPU has (scalar, AVX2, AVX-512; a path the CPU
// lacks is reported and skipped).
//
// Tolerance: log1p within XF_LOG1P_ULP (2) ulp of libm's log1pf: the polynomial (float32 data) on
// every int16 value and every float16 value as floats and a sweep of about 4 million float32 bit
// patterns; the tables (int16, uint8, float16 data) on all their values, where it must be 0 ulp; after normalisation
// (log1p(x) - shift) * scale the paths agree within |scale| * (2 ulp(log1p x) + 1 ulp(log1p x -
// shift)) + 1 ulp(result): the log1p difference plus each path's own rounding of the subtraction
// and the product. Without log1p they agree bit for bit (conversion and normalisation are exact
// and the same float operations).
#include "testlib.h"

#include <stdint.h>

#include "data/transform_simd.h"

static const xf_isa ISAS[] = {XF_SCALAR, XF_AVX2, XF_AVX512};

static int have(xf_isa isa) {
    if (isa <= xf_isa_best()) return 1;
    print_message("[   SKIP   ] %s: this CPU lacks it\n", xf_isa_name(isa));
    return 0;
}

// Floats in an order where neighbours differ by one: the ulp distance is a difference.
static int64_t ordered(float f) {
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}

static int64_t ulps(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT32_MAX;
    if (isinf(a) || isinf(b)) return a == b ? 0 : INT32_MAX;
    int64_t d = ordered(a) - ordered(b);
    return d < 0 ? -d : d;
}

static float ulp_of(float x) {
    x = fabsf(x);
    return isfinite(x) ? nextafterf(x, INFINITY) - x : 0;
}

// log1p of n values of dtype on every path against log1pf; returns the largest ulp distance.
static int64_t log1p_max_ulps(xf_dtype dt, const void *src, int64_t n, const char *what) {
    float *out = malloc((size_t)n * sizeof *out), *ref = malloc((size_t)n * sizeof *ref);
    xf_params p = {.dtype = dt, .log1p = false, .c = 1, .vol = n};
    assert_int_equal(xf_sample_isa(XF_SCALAR, &p, src, ref, NULL, NULL, NULL), 0);  // the values as floats
    for (int64_t i = 0; i < n; i++) ref[i] = log1pf(ref[i]);
    p.log1p = true;
    int64_t worst = 0;
    for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
        if (!have(ISAS[k])) continue;
        assert_int_equal(xf_sample_isa(ISAS[k], &p, src, out, NULL, NULL, NULL), 0);
        int64_t m = 0, at = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t u = ulps(out[i], ref[i]);
            if (u > m) m = u, at = i;
        }
        print_message("[   INFO   ] log1p %s on %s: max %lld ulp (at element %lld: %.9g vs log1pf %.9g)\n", what,
                      xf_isa_name(ISAS[k]), (long long)m, (long long)at, out[at], ref[at]);
        assert_true(m <= XF_LOG1P_ULP);
        worst = m > worst ? m : worst;
    }
    free(out);
    free(ref);
    return worst;
}

static void test_log1p_every_int16(void **st) {
    (void)st;
    int16_t *v = malloc(65536 * sizeof *v);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++) v[i] = (int16_t)(i - 32768), f[i] = v[i];
    assert_int_equal(log1p_max_ulps(XF_I16, v, 65535, "int16 (table)"), 0);  // 65535: no vector width's multiple
    log1p_max_ulps(XF_F32, f, 65536, "every int16 as float32 (polynomial)");
    free(v);
    free(f);
}

static void test_log1p_every_uint8_and_half(void **st) {
    (void)st;
    uint8_t b[256];
    for (int i = 0; i < 256; i++) b[i] = (uint8_t)i;
    assert_int_equal(log1p_max_ulps(XF_U8, b, 255, "uint8 (table)"), 0);
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i, f[i] = xf_half_to_float(h[i]);  // Inf, NaN too (no check)
    assert_int_equal(log1p_max_ulps(XF_F16, h, 65536, "float16 (table)"), 0);
    log1p_max_ulps(XF_F32, f, 65536, "every float16 as float32 (polynomial)");
    free(h);
    free(f);
}

static void test_log1p_float_sweep(void **st) {
    (void)st;
    int64_t n = 0, cap = (1ll << 32) / 1021 + 64;
    float *f = malloc((size_t)cap * sizeof *f);
    for (uint64_t b = 0; b < (1ull << 32); b += 1021) {  // every sign, exponent, many mantissas
        uint32_t u = (uint32_t)b;
        memcpy(&f[n++], &u, 4);
    }
    static const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 0x1p-24f, 0x1p-25f, 0.41421356f, -0.29289323f,
                                 -1.0f, -0.99999994f, 1.0f, 3.4028235e38f, 1e-45f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) f[n++] = edge[i];
    log1p_max_ulps(XF_F32, f, n, "float32 sweep");
    free(f);
}

static void test_half_conversion_exact(void **st) {
    (void)st;
    for (int i = 0; i < 65536; i++) {
        int e = (i >> 10) & 31, m = i & 1023;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        if (i & 0x8000) want = -want;
        float got = xf_half_to_float((uint16_t)i);
        if (isnan(want)) assert_true(isnan(got));
        else assert_true(got == (float)want && !signbit(got) == !signbit(want));
    }
}

// Random samples of every dtype, layout, channel count and a length that is no multiple of a
// vector width (and one longer than a tile), with and without log1p and normalisation: each path
// against the scalar one.
static void test_paths_agree_on_every_layout(void **st) {
    (void)st;
    static const xf_dtype dts[] = {XF_F32, XF_I16, XF_U8, XF_F16};
    static const int64_t chans[] = {1, 3, 4, 8, 16, 17, 24};  // 8, 16, 24: the 8 x 8 transpose
    static const int64_t vols[] = {1, 7, 13, 100, 1029, 4099};
    uint64_t ri = 0;  // the next random index
    int64_t cases = 0;
    double worst = 0;  // in units of the stated tolerance
    for (size_t di = 0; di < 4; di++)
        for (size_t ci = 0; ci < 7; ci++)
            for (size_t vi = 0; vi < 6; vi++)
                for (int cl = 0; cl < 2; cl++)
                    for (int mode = 0; mode < 4; mode++) {  // bit 0: log1p, bit 1: normalise
                        int64_t c = chans[ci], vol = vols[vi], n = c * vol;
                        xf_dtype dt = dts[di];
                        void *src = malloc((size_t)n * 4);
                        for (int64_t i = 0; i < n; i++) {
                            double u = rng_uniform(TL_SEED, RNG_TEST, 0, ri++);
                            if (dt == XF_F32) ((float *)src)[i] = (float)(-0.9 + 1000 * u * u);
                            else if (dt == XF_I16) ((int16_t *)src)[i] = (int16_t)(u < 0.05 ? -3 : 5000 * u * u);
                            else if (dt == XF_U8) ((uint8_t *)src)[i] = (uint8_t)(256 * u);
                            else ((uint16_t *)src)[i] = (uint16_t)(rng_u64(TL_SEED, RNG_TEST, 1, ri++) & 0xfbff);  // no Inf/NaN
                        }
                        float shift[24], scale[24];
                        for (int64_t q = 0; q < c; q++)
                            shift[q] = rng_uniform(TL_SEED, RNG_TEST, 2, ri++) - 0.5f,
                            scale[q] = 0.1f + 3 * rng_uniform(TL_SEED, RNG_TEST, 2, ri++);
                        xf_params p = {.dtype = dt, .channels_last = cl, .log1p = mode & 1, .check = true, .c = c,
                                       .vol = vol, .shift = mode & 2 ? shift : NULL, .scale = mode & 2 ? scale : NULL};
                        float *ref = malloc((size_t)n * 4), *out = malloc((size_t)n * 4), *a = malloc((size_t)n * 4);
                        assert_int_equal(xf_sample_isa(XF_SCALAR, &p, src, ref, NULL, NULL, NULL), 0);
                        xf_params pa = p;  // the log1p input of each element, channels first
                        pa.log1p = false, pa.shift = pa.scale = NULL;
                        assert_int_equal(xf_sample_isa(XF_SCALAR, &pa, src, a, NULL, NULL, NULL), 0);
                        for (size_t k = 1; k < 3; k++) {
                            if (ISAS[k] > xf_isa_best()) continue;
                            memset(out, 0xff, (size_t)n * 4);
                            assert_int_equal(xf_sample_isa(ISAS[k], &p, src, out, NULL, NULL, NULL), 0);
                            for (int64_t i = 0; i < n; i++) {
                                if (!(mode & 1)) {
                                    assert_memory_equal(&out[i], &ref[i], 4);
                                    continue;
                                }
                                float sc = mode & 2 ? scale[i / vol] : 1.0f, sh = mode & 2 ? shift[i / vol] : 0.0f;
                                if (isnan(ref[i])) {
                                    assert_true(isnan(out[i]));
                                    continue;
                                }
                                float l = log1pf(a[i]);
                                double tol = fabsf(sc) * (XF_LOG1P_ULP * ulp_of(l) + ulp_of(l - sh)) + ulp_of(ref[i]);
                                double err = fabs((double)out[i] - ref[i]);
                                if (err > tol)
                                    fail_msg("%s dtype %d c %lld vol %lld %s mode %d element %lld: %.9g vs %.9g (x %.9g, tol %g)",
                                             xf_isa_name(ISAS[k]), (int)dt, (long long)c, (long long)vol,
                                             cl ? "channels_last" : "channels_first", mode, (long long)i, out[i],
                                             ref[i], a[i], tol);
                                if (tol > 0 && err / tol > worst) worst = err / tol;
                            }
                            cases++;
                        }
                        free(src);
                        free(ref);
                        free(out);
                        free(a);
                    }
    print_message("[   INFO   ] %lld vector cases; worst error %.3f of the tolerance\n", (long long)cases, worst);
}

// A NaN or Inf is found, and named by the first one in channels-first order, on every path.
static void test_nonfinite_named_alike(void **st) {
    (void)st;
    enum { C = 5, V = 37 };
    float x[C * V];
    uint16_t h[C * V];
    for (int i = 0; i < C * V; i++) x[i] = (float)i, h[i] = 0x3c00;  // 1.0
    x[30 * C + 3] = NAN;  // channels-last: position 30 of channel 3,
    x[12 * C + 4] = INFINITY;  // position 12 of channel 4: channel 3 comes first
    h[20 * C + 2] = 0x7c00;
    float out[C * V];
    for (size_t k = 0; k < 3; k++) {
        if (!have(ISAS[k])) continue;
        xf_params p = {.dtype = XF_F32, .channels_last = true, .log1p = true, .check = true, .c = C, .vol = V};
        int64_t bc = -1, bv = -1;
        float bad = 0;
        assert_int_equal(xf_sample_isa(ISAS[k], &p, x, out, &bc, &bv, &bad), -1);
        assert_int_equal(bc, 3);
        assert_int_equal(bv, 30);
        assert_true(isnan(bad));
        p.dtype = XF_F16;
        assert_int_equal(xf_sample_isa(ISAS[k], &p, h, out, &bc, &bv, &bad), -1);
        assert_int_equal(bc, 2);
        assert_int_equal(bv, 20);
        assert_true(isinf(bad));
        p.check = false;  // unchecked: no error, Inf flows through
        assert_int_equal(xf_sample_isa(ISAS[k], &p, h, out, NULL, NULL, NULL), 0);
        assert_true(isinf(out[2 * V + 20]));
    }
}

int main(void) {
    print_message("[   INFO   ] best path on this CPU: %s\n", xf_isa_name(xf_isa_best()));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log1p_every_int16),
        cmocka_unit_test(test_log1p_every_uint8_and_half),
        cmocka_unit_test(test_log1p_float_sweep),
        cmocka_unit_test(test_half_conversion_exact),
        cmocka_unit_test(test_paths_agree_on_every_layout),
        cmocka_unit_test(test_nonfinite_named_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
