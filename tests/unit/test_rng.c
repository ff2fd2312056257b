// test_rng.c: the counter-based generator: a pure function of its key, independent streams per
// key field, and the distributions it promises (bounds are ~5 standard errors or looser).
#include "testlib.h"

#define DRAWS 100000

static void test_same_key_same_value(void **state)
{
    (void)state;
    // A pure function: any call order, any repetition.
    uint64_t first[64];
    for (int i = 0; i < 64; i++) first[i] = rng_u64(7, RNG_TEST, 3, (uint64_t)i);
    for (int i = 63; i >= 0; i--) assert_true(rng_u64(7, RNG_TEST, 3, (uint64_t)i) == first[i]);
    for (int i = 0; i < 64; i++) {
        assert_true(rng_uniform(7, RNG_INIT, 2, (uint64_t)i) == rng_uniform(7, RNG_INIT, 2, (uint64_t)i));
        assert_true(rng_normal(7, RNG_DATA, 0, (uint64_t)i) == rng_normal(7, RNG_DATA, 0, (uint64_t)i));
        assert_true(rng_below(7, RNG_SHUFFLE, 1, (uint64_t)i, 1000) == rng_below(7, RNG_SHUFFLE, 1, (uint64_t)i, 1000));
    }
    // The uniform is derived from the same 64-bit value (its top 24 bits).
    uint64_t v = rng_u64(11, RNG_TEST, 5, 9);
    assert_true(rng_uniform(11, RNG_TEST, 5, 9) == (float)(v >> 40) / 16777216.0f);
}

// Counts equal outputs between the stream keyed by f(i) and the one keyed by h(i).
static int collisions(uint64_t (*a)(uint64_t), uint64_t (*b)(uint64_t))
{
    int same = 0;
    for (uint64_t i = 0; i < 4096; i++) same += a(i) == b(i);
    return same;
}

static uint64_t k_base(uint64_t i) { return rng_u64(1, RNG_TEST, 0, i); }
static uint64_t k_seed(uint64_t i) { return rng_u64(2, RNG_TEST, 0, i); }
static uint64_t k_purpose(uint64_t i) { return rng_u64(1, RNG_INIT, 0, i); }
static uint64_t k_step(uint64_t i) { return rng_u64(1, RNG_TEST, 1, i); }
static uint64_t k_index(uint64_t i) { return rng_u64(1, RNG_TEST, 0, i + 1); }
static uint64_t k_swapped(uint64_t i) { return rng_u64(1, RNG_TEST, i, 0); }  // step and index swapped
static uint64_t k_diag(uint64_t i) { return rng_u64(1, RNG_TEST, i, i); }

static void test_each_key_field_changes_the_value(void **state)
{
    (void)state;
    assert_int_equal(collisions(k_base, k_base), 4096);  // the counter works
    assert_int_equal(collisions(k_base, k_seed), 0);
    assert_int_equal(collisions(k_base, k_purpose), 0);
    assert_int_equal(collisions(k_base, k_step), 0);
    assert_int_equal(collisions(k_base, k_index), 0);  // no shift-by-one overlap within a stream
    // (step=0, index=i) and (step=i, index=0) differ for i > 0; (i, i) differs from (0, i) too.
    assert_int_equal(collisions(k_base, k_swapped), 1);  // only i = 0 is the same key
    assert_int_equal(collisions(k_base, k_diag), 1);
    // Every purpose is its own stream.
    const rng_purpose p[] = {RNG_INIT, RNG_SHUFFLE, RNG_DATA, RNG_DROPOUT, RNG_AUGMENT, RNG_TEST};
    for (size_t a = 0; a < 6; a++)
        for (size_t b = a + 1; b < 6; b++)
            assert_true(rng_u64(42, p[a], 0, 0) != rng_u64(42, p[b], 0, 0));
    // No two of 4096 consecutive indices collide (a 64-bit collision here would be a bug).
    uint64_t *v = malloc(sizeof(uint64_t) * 4096);
    assert_non_null(v);
    for (int i = 0; i < 4096; i++) v[i] = rng_u64(42, RNG_TEST, 0, (uint64_t)i);
    for (int i = 0; i < 4096; i++)
        for (int j = i + 1; j < 4096; j++)
            if (v[i] == v[j]) fail_msg("indices %d and %d give the same value", i, j);
    free(v);
}

static void test_neighbouring_streams_are_uncorrelated(void **state)
{
    (void)state;
    // Pearson correlation of uniforms between adjacent steps, seeds and shifted indices.
    struct {
        uint64_t seed_b, step_b, shift;
    } pairs[] = {{1, 0, 1}, {2, 0, 0}, {1, 1, 0}};
    for (size_t k = 0; k < 3; k++) {
        double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
        for (uint64_t i = 0; i < DRAWS; i++) {
            double a = rng_uniform(1, RNG_TEST, 0, i);
            double b = rng_uniform(pairs[k].seed_b, RNG_TEST, pairs[k].step_b, i + pairs[k].shift);
            sa += a, sb += b, sab += a * b, saa += a * a, sbb += b * b;
        }
        double n = DRAWS, cov = sab / n - (sa / n) * (sb / n);
        double r = cov / sqrt((saa / n - (sa / n) * (sa / n)) * (sbb / n - (sb / n) * (sb / n)));
        if (fabs(r) > 0.02) fail_msg("pair %zu: correlation %.4f", k, r);  // SE ~0.003
    }
}

static void test_uniform_moments_and_range(void **state)
{
    (void)state;
    double s = 0, s2 = 0;
    float lo = 1, hi = 0;
    int bins[10] = {0};
    for (uint64_t i = 0; i < DRAWS; i++) {
        float u = rng_uniform(3, RNG_TEST, 0, i);
        if (!(u >= 0.0f && u < 1.0f)) fail_msg("draw %llu = %.9g is outside [0, 1)", (unsigned long long)i, u);
        lo = fminf(lo, u), hi = fmaxf(hi, u);
        s += u, s2 += (double)u * u;
        bins[(int)(u * 10)]++;
    }
    double mean = s / DRAWS, var = s2 / DRAWS - mean * mean;
    if (fabs(mean - 0.5) > 0.005) fail_msg("mean %.5f, want 0.5", mean);                  // SE 0.0009
    if (fabs(var - 1.0 / 12) > 0.002) fail_msg("variance %.5f, want %.5f", var, 1.0 / 12);  // SE 0.0003
    assert_true(lo < 1e-3f && hi > 1.0f - 1e-3f);                                           // covers the range
    double chi = 0;
    for (int b = 0; b < 10; b++) chi += (bins[b] - DRAWS / 10.0) * (bins[b] - DRAWS / 10.0) / (DRAWS / 10.0);
    if (chi > 40) fail_msg("chi-square %.1f over 10 bins (9 dof)", chi);
    // 24 bits: every value is k / 2^24, exactly.
    for (uint64_t i = 0; i < 1000; i++) {
        float u = rng_uniform(3, RNG_TEST, 0, i);
        float k = u * 16777216.0f;
        assert_true(k == floorf(k));
    }
}

static void test_normal_moments(void **state)
{
    (void)state;
    double s = 0, s2 = 0, s4 = 0;
    int within1 = 0;
    for (uint64_t i = 0; i < DRAWS; i++) {
        double z = rng_normal(5, RNG_TEST, 0, i);
        if (!isfinite(z)) fail_msg("draw %llu is not finite", (unsigned long long)i);
        s += z, s2 += z * z, s4 += z * z * z * z;
        within1 += fabs(z) < 1.0;
    }
    double mean = s / DRAWS, var = s2 / DRAWS - mean * mean, kurt = s4 / DRAWS;
    if (fabs(mean) > 0.02) fail_msg("mean %.5f, want 0", mean);         // SE 0.003
    if (fabs(var - 1.0) > 0.03) fail_msg("variance %.5f, want 1", var);  // SE 0.0045
    if (fabs(kurt - 3.0) > 0.2) fail_msg("E[z^4] %.4f, want 3", kurt);   // SE 0.03: Gaussian tails
    double frac = (double)within1 / DRAWS;
    if (fabs(frac - 0.682689) > 0.01) fail_msg("P(|z| < 1) = %.4f, want 0.6827", frac);
}

static void test_below_range_and_uniformity(void **state)
{
    (void)state;
    for (uint64_t i = 0; i < 1000; i++) assert_true(rng_below(9, RNG_TEST, 0, i, 1) == 0);
    const uint64_t ns[] = {2, 7, 10, 1000003, UINT64_C(1) << 40, UINT64_MAX};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (uint64_t i = 0; i < 10000; i++)
            if (rng_below(9, RNG_TEST, k, i, ns[k]) >= ns[k])
                fail_msg("rng_below(n=%llu) gave an out-of-range value", (unsigned long long)ns[k]);
    // Chi-square over n = 7 and n = 10 buckets (6 and 9 degrees of freedom).
    const uint64_t bn[] = {7, 10};
    for (size_t k = 0; k < 2; k++) {
        int64_t count[10] = {0};
        for (uint64_t i = 0; i < DRAWS; i++) count[rng_below(13, RNG_TEST, k, i, bn[k])]++;
        double e = (double)DRAWS / (double)bn[k], chi = 0;
        for (uint64_t b = 0; b < bn[k]; b++) {
            assert_true(count[b] > 0);
            chi += (count[b] - e) * (count[b] - e) / e;
        }
        if (chi > 40) fail_msg("n=%llu: chi-square %.1f", (unsigned long long)bn[k], chi);
    }
    // Large n: the top half of the range is hit half of the time.
    int top = 0;
    for (uint64_t i = 0; i < DRAWS; i++) top += rng_below(13, RNG_TEST, 9, i, UINT64_C(1) << 62) >= UINT64_C(1) << 61;
    assert_true(fabs(top / (double)DRAWS - 0.5) < 0.01);
}

static void test_u64_bits_are_balanced(void **state)
{
    (void)state;
    int ones[64] = {0};
    for (uint64_t i = 0; i < DRAWS; i++) {
        uint64_t v = rng_u64(17, RNG_TEST, 0, i);
        for (int b = 0; b < 64; b++) ones[b] += (int)((v >> b) & 1);
    }
    for (int b = 0; b < 64; b++)
        if (fabs(ones[b] / (double)DRAWS - 0.5) > 0.01) fail_msg("bit %d is set in %d of %d draws", b, ones[b], DRAWS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_key_same_value),
        cmocka_unit_test(test_each_key_field_changes_the_value),
        cmocka_unit_test(test_neighbouring_streams_are_uncorrelated),
        cmocka_unit_test(test_uniform_moments_and_range),
        cmocka_unit_test(test_normal_moments),
        cmocka_unit_test(test_below_range_and_uniformity),
        cmocka_unit_test(test_u64_bits_are_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
