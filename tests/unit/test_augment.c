// test_augment.c: the symmetry groups (24 distinct, invertible rotations of a cube; 8 of a
// square), axis walks against a direct formula, shifts as pad + crop, and seeded draws.
#include "testlib.h"

#include "data/augment.h"

enum { S = 4, VOL = S * S * S };

static int same(const float *a, const float *b, int n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

static void test_cube_rotations_are_a_group_of_24(void **st) {
    (void)st;
    gl_axes g[24];
    assert_int_equal(augment_symmetries(3, g), 24);
    assert_true(augment_is_identity(&g[0]));
    int64_t ext[3] = {S, S, S};
    float x[VOL], y[24][VOL], back[VOL];
    for (int i = 0; i < VOL; i++) x[i] = (float)i;  // all distinct: outputs differ iff the maps do
    for (int a = 0; a < 24; a++) augment_axes_f32(&g[a], 1, ext, x, y[a]);
    for (int a = 0; a < 24; a++)
        for (int b = a + 1; b < 24; b++) assert_false(same(y[a], y[b], VOL));
    // Closed and invertible: composing any two gives one of the 24; each has an inverse among them.
    for (int a = 0; a < 24; a++) {
        int inverse = 0;
        for (int b = 0; b < 24; b++) {
            augment_axes_f32(&g[b], 1, ext, y[a], back);
            int found = 0;
            for (int c = 0; c < 24; c++) found |= same(back, y[c], VOL);
            assert_true(found);
            inverse |= same(back, x, VOL);
        }
        assert_true(inverse);
    }
    // Rotations only: no reflection (the mirror image x -> -x is not among them).
    gl_axes mirror = augment_identity(3);
    mirror.flip[2] = 1;
    float m[VOL];
    augment_axes_f32(&mirror, 1, ext, x, m);
    for (int a = 0; a < 24; a++) assert_false(same(m, y[a], VOL));
}

static void test_square_has_8_symmetries(void **st) {
    (void)st;
    gl_axes g[24];
    assert_int_equal(augment_symmetries(2, g), 8);
    int64_t ext[3] = {3, 3, 1};
    float x[9], y[8][9];
    for (int i = 0; i < 9; i++) x[i] = (float)i;
    for (int a = 0; a < 8; a++) augment_axes_f32(&g[a], 1, ext, x, y[a]);
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++) assert_false(same(y[a], y[b], 9));
    // The 90-degree rotation is among them: out[r][c] = in[c][2 - r].
    float rot[9];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) rot[r * 3 + c] = x[c * 3 + 2 - r];
    int found = 0;
    for (int a = 0; a < 8; a++) found |= same(rot, y[a], 9);
    assert_true(found);
}

// The walk equals the definition out[o] = in[i], i[perm[a]] = flip[a] ? e - 1 - o[a] : o[a], on a
// non-cubic volume with 2 channels, and int32 masks move exactly like floats.
static void test_axes_match_definition(void **st) {
    (void)st;
    int64_t ext[3] = {2, 3, 4};
    float in[2 * 24], out[2 * 24];
    int32_t mi[24], mo[24];
    for (int i = 0; i < 48; i++) in[i] = (float)i;
    for (int i = 0; i < 24; i++) mi[i] = i;
    gl_axes t = {3, {2, 0, 1}, {1, 0, 1}};
    augment_axes_f32(&t, 2, ext, in, out);
    augment_axes_i32(&t, 1, ext, mi, mo);
    int64_t oe[3] = {ext[2], ext[0], ext[1]};
    for (int c = 0; c < 2; c++)
        for (int64_t a = 0; a < oe[0]; a++)
            for (int64_t b = 0; b < oe[1]; b++)
                for (int64_t d = 0; d < oe[2]; d++) {
                    int64_t o[3] = {a, b, d}, i[3];
                    for (int k = 0; k < 3; k++) i[t.perm[k]] = t.flip[k] ? ext[t.perm[k]] - 1 - o[k] : o[k];
                    int64_t src = (i[0] * 3 + i[1]) * 4 + i[2], dst = (a * oe[1] + b) * oe[2] + d;
                    assert_true(out[c * 24 + dst] == in[c * 24 + src]);
                    if (c == 0) assert_int_equal(mo[dst], mi[src]);
                }
}

static void test_shift_is_pad_then_crop(void **st) {
    (void)st;
    int64_t ext[3] = {3, 4, 1}, shift[3] = {1, -2, 0};
    float in[12], out[12];
    for (int i = 0; i < 12; i++) in[i] = (float)(i + 1);
    augment_shift_f32(2, 1, ext, shift, in, out);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) {
            int sr = r + 1, sc = c - 2;
            float want = sr >= 0 && sr < 3 && sc >= 0 && sc < 4 ? in[sr * 4 + sc] : 0.0f;
            assert_true(out[r * 4 + c] == want);
        }
}

static void test_draws_are_seeded_and_in_range(void **st) {
    (void)st;
    augment_params p = {.flip = true, .rotate = true, .pad = 2, .crop = 5};
    int64_t full[3] = {9, 9, 9};
    augment_plan a, b;
    int differ = 0;
    for (int64_t s = 0; s < 50; s++) {
        augment_draw(&p, 11, 3, s, 3, full, true, &a);
        augment_draw(&p, 11, 3, s, 3, full, true, &b);
        assert_memory_equal(&a, &b, sizeof a);
        for (int k = 0; k < 3; k++) {
            assert_true(a.crop[k] >= 0 && a.crop[k] <= 4);
            assert_true(a.shift[k] >= -2 && a.shift[k] <= 2);
        }
        augment_draw(&p, 11, 4, s, 3, full, true, &b);  // another epoch: other draws
        differ += memcmp(&a.axes, &b.axes, sizeof a.axes) != 0;
        // Validation: fixed crop offsets, nothing else.
        augment_draw(&p, 11, 3, s, 3, full, false, &b);
        assert_true(augment_is_identity(&b.axes));
        assert_true(b.shift[0] == 0 && b.shift[1] == 0 && b.shift[2] == 0);
    }
    assert_true(differ > 25);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cube_rotations_are_a_group_of_24),
        cmocka_unit_test(test_square_has_8_symmetries),
        cmocka_unit_test(test_axes_match_definition),
        cmocka_unit_test(test_shift_is_pad_then_crop),
        cmocka_unit_test(test_draws_are_seeded_and_in_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
