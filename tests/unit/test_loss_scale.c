// test_loss_scale.c: train.precision fp16's dynamic loss scale (src/optim/loss_scale.c) and the
// pieces around it that run on the CPU:
//   - the state machine: start at 2^16, halve on a non-finite step (floor 1), double after 2000
//     finite steps in a row (cap 2^24), off = always 1; restore accepts only reachable states;
//   - optim_step_scaled: gradients of a loss scaled by a power of two give bitwise the update,
//     the norm and the clipping of the unscaled gradients (SGD with clipping, AdamW);
//   - checkpoints: the scale, its good-step count and the skipped count round-trip through
//     ckpt_write/ckpt_read; a checkpoint written without (fp32 runs, older files) reads back
//     with scaler_saved false.
#include "testlib.h"

#include <stdint.h>

#include "galley/ckpt.h"
#include "galley/optim.h"

// ---- the state machine --------------------------------------------------------------------------

static void test_fresh_state(void **state) {
    (void)state;
    gl_loss_scale s;
    loss_scale_init(&s, true);
    assert_true(s.on);
    assert_true(s.scale == 65536.0);
    assert_int_equal(s.good, 0);
    assert_int_equal(s.skipped, 0);
    loss_scale_init(&s, false);
    assert_false(s.on);
    assert_true(s.scale == 1.0);
    // Off: nothing ever changes, and every step runs.
    for (int i = 0; i < 5000; i++) assert_int_equal(loss_scale_update(&s, i % 7 != 0), LOSS_SCALE_KEPT);
    assert_true(s.scale == 1.0);
    assert_int_equal(s.skipped, 0);
}

static void test_growth_after_2000_good_steps(void **state) {
    (void)state;
    gl_loss_scale s;
    loss_scale_init(&s, true);
    for (int i = 1; i < GL_LOSS_SCALE_GROWTH; i++) {
        assert_int_equal(loss_scale_update(&s, true), LOSS_SCALE_KEPT);
        assert_int_equal(s.good, i);
    }
    assert_true(s.scale == 65536.0);
    assert_int_equal(loss_scale_update(&s, true), LOSS_SCALE_GREW);  // the 2000th
    assert_true(s.scale == 131072.0);
    assert_int_equal(s.good, 0);
    // An overflow in the middle of a run restarts the count.
    for (int i = 0; i < 1500; i++) loss_scale_update(&s, true);
    assert_int_equal(loss_scale_update(&s, false), LOSS_SCALE_BACKED_OFF);
    assert_true(s.scale == 65536.0);
    for (int i = 1; i < GL_LOSS_SCALE_GROWTH; i++) assert_int_equal(loss_scale_update(&s, true), LOSS_SCALE_KEPT);
    assert_int_equal(loss_scale_update(&s, true), LOSS_SCALE_GREW);
    assert_true(s.scale == 131072.0);
}

static void test_backoff_and_floor(void **state) {
    (void)state;
    gl_loss_scale s;
    loss_scale_init(&s, true);
    for (int i = 0; i < 5; i++) loss_scale_update(&s, true);
    assert_int_equal(loss_scale_update(&s, false), LOSS_SCALE_BACKED_OFF);  // the step is skipped
    assert_true(s.scale == 32768.0);
    assert_int_equal(s.good, 0);
    assert_int_equal(s.skipped, 1);
    // 2^15 -> 2^0 takes 15 more halvings; below that it stays at 1 (still reported as a skip).
    for (int i = 0; i < 15; i++) loss_scale_update(&s, false);
    assert_true(s.scale == 1.0);
    assert_int_equal(loss_scale_update(&s, false), LOSS_SCALE_BACKED_OFF);
    assert_true(s.scale == GL_LOSS_SCALE_MIN);
    assert_int_equal(s.skipped, 17);
}

static void test_cap(void **state) {
    (void)state;
    gl_loss_scale s;
    loss_scale_init(&s, true);
    int grew = 0;
    for (int i = 0; i < 20 * GL_LOSS_SCALE_GROWTH; i++) grew += loss_scale_update(&s, true) == LOSS_SCALE_GREW;
    assert_int_equal(grew, 8);  // 2^16 -> 2^24
    assert_true(s.scale == GL_LOSS_SCALE_MAX);
    assert_true(s.scale == 16777216.0);
}

static void test_restore(void **state) {
    (void)state;
    gl_loss_scale s;
    loss_scale_init(&s, true);
    assert_int_equal(loss_scale_restore(&s, 1024.0, 1999, 7), 0);
    assert_true(s.scale == 1024.0);
    assert_int_equal(s.good, 1999);
    assert_int_equal(s.skipped, 7);
    assert_int_equal(loss_scale_update(&s, true), LOSS_SCALE_GREW);  // continues where it was saved
    assert_true(s.scale == 2048.0);
    // States no update can reach are refused, leaving a fresh scale.
    const double bad_scales[] = {0.0, 0.5, 3.0, 1000.0, 33554432.0, NAN, INFINITY, -2.0};
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        loss_scale_init(&s, true);
        s.scale = 2.0;
        assert_int_equal(loss_scale_restore(&s, bad_scales[i], 0, 0), -1);
        assert_true(s.scale == 65536.0);
    }
    assert_int_equal(loss_scale_restore(&s, 1024.0, -1, 0), -1);
    assert_int_equal(loss_scale_restore(&s, 1024.0, GL_LOSS_SCALE_GROWTH, 0), -1);
    assert_int_equal(loss_scale_restore(&s, 1024.0, 0, -3), -1);
    // Off: nothing to restore.
    loss_scale_init(&s, false);
    assert_int_equal(loss_scale_restore(&s, 1024.0, 3, 0), 0);
    assert_true(s.scale == 1.0);
}

// ---- optim_step_scaled ------------------------------------------------------------------------------

static void build(tl_model *m, const char *optimizer, gl_optim *o) {
    char *text = tl_recipe_text("    - {type: dense, units: 1100}\n");  // [4]: 4400 + 1100, two chunks
    char *cut = strstr(text, "optimizer:");
    assert_non_null(cut);
    *cut = 0;
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "%soptimizer:\n%s", text, optimizer);
    free(text);
    memset(m, 0, sizeof *m);
    tl_recipe(&m->r, yaml, 0, NULL);
    tl_stream s;
    assert_int_equal(graph_build(&m->g, &m->r, shape_1d(4), 2, backend_cpu(), tl_stream_open(&s)), 0);
    free(tl_stream_close(&s));
    arena_init(&m->a, m->g.bytes + optim_bytes(&m->r, &m->g));
    graph_bind(&m->g, &m->a);
    optim_init(o, &m->r, &m->g, &m->a);
    tl_fill_uniform(m->g.params, m->g.nparams, -1, 1, 300);
}

// Two copies of one model and optimizer: one steps on gradients g, the other on g * scale
// through optim_step_scaled. Weights, state, norms and clip factors must be bitwise equal.
static void check_scaled(const char *optimizer) {
    tl_model a, b;
    gl_optim oa, ob;
    build(&a, optimizer, &oa);
    build(&b, optimizer, &ob);
    const int64_t n = a.g.nparams;
    const double scale = 65536.0;
    for (int t = 0; t < 4; t++) {
        tl_fill_uniform(a.g.grads, n, -3, 3, 310 + (uint64_t)t);
        for (int64_t i = 0; i < n; i++) b.g.grads[i] = a.g.grads[i] * (float)scale;  // exact: a power of two
        double na = optim_step(&oa, &a.g, 0.01), nb = optim_step_scaled(&ob, &b.g, 0.01, scale);
        if (memcmp(&na, &nb, sizeof na) != 0) fail_msg("%s step %d: norm %.17g, scaled %.17g", optimizer, t, na, nb);
        assert_true(oa.last_scale == ob.last_scale);
        if (memcmp(a.g.params, b.g.params, sizeof(float) * (size_t)n) != 0)
            fail_msg("%s step %d: the scaled run's weights differ", optimizer, t);
        if (memcmp(a.g.grads, b.g.grads, sizeof(float) * (size_t)n) != 0)
            fail_msg("%s step %d: the scaled run's gradients are not unscaled (and clipped) in place", optimizer, t);
    }
    float *sa[] = {oa.velocity, oa.m, oa.v}, *sb[] = {ob.velocity, ob.m, ob.v};
    for (int k = 0; k < 3; k++)
        if (sa[k] && memcmp(sa[k], sb[k], sizeof(float) * (size_t)n) != 0) fail_msg("%s: state %d differs", optimizer, k);
    tl_model_free(&a);
    tl_model_free(&b);
}

static void test_unscaled_update_sgd_clipped(void **state) {
    (void)state;
    check_scaled("  type: sgd\n  lr: 0.1\n  momentum: 0.9\n  clip_norm: 1.0\n");  // clips every step
}

static void test_unscaled_update_adamw(void **state) {
    (void)state;
    check_scaled("  type: adamw\n  lr: 0.001\n  weight_decay: 0.01\n");
}

static void test_nonfinite_scaled_gradient_skips(void **state) {
    (void)state;
    tl_model m;
    gl_optim o;
    build(&m, "  type: sgd\n  lr: 0.1\n", &o);
    tl_fill_uniform(m.g.grads, m.g.nparams, -1, 1, 320);
    m.g.grads[17] = INFINITY;
    float *before = malloc(sizeof(float) * (size_t)m.g.nparams);
    assert_non_null(before);
    memcpy(before, m.g.params, sizeof(float) * (size_t)m.g.nparams);
    assert_false(isfinite(optim_step_scaled(&o, &m.g, 0.1, 65536.0)));
    assert_memory_equal(before, m.g.params, sizeof(float) * (size_t)m.g.nparams);
    assert_int_equal(o.steps, 0);
    free(before);
    tl_model_free(&m);
}

// ---- checkpoints ------------------------------------------------------------------------------------

static void ckpt_roundtrip(bool on) {
    tl_model m;
    gl_optim o;
    build(&m, "  type: sgd\n  lr: 0.1\n", &o);
    char dir[] = "/tmp/galley_test_ls_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], why[1024];
    snprintf(path, sizeof path, "%s/ls.h5", dir);
    gl_ckpt_state st = {.step = 12, .epoch = 1, .samples = 24, .world = 1, .parts = 0, .threads = 1,
                        .best = NAN, .best_loss = NAN};
    loss_scale_init(&st.scaler, on);
    if (on) assert_int_equal(loss_scale_restore(&st.scaler, 4096.0, 1234, 5), 0);
    if (ckpt_write(path, &m.r, &m.g, &o, &st, why, sizeof why) != 0) fail_msg("ckpt_write: %s", why);
    gl_ckpt_state back;
    if (ckpt_read(path, &m.r, &m.g, &o, &back, why, sizeof why) != 0) fail_msg("ckpt_read: %s", why);
    assert_int_equal(back.step, 12);
    if (on) {
        assert_true(back.scaler_saved);
        assert_true(back.scaler.scale == 4096.0);
        assert_int_equal(back.scaler.good, 1234);
        assert_int_equal(back.scaler.skipped, 5);
        // What the training loop does with it.
        gl_loss_scale s;
        loss_scale_init(&s, true);
        assert_int_equal(loss_scale_restore(&s, back.scaler.scale, back.scaler.good, back.scaler.skipped), 0);
        assert_true(s.scale == 4096.0);
    } else {
        assert_false(back.scaler_saved);  // an fp16 run resuming it starts a fresh scale
    }
    unlink(path);
    rmdir(dir);
    tl_model_free(&m);
}

static void test_ckpt_roundtrip_fp16(void **state) {
    (void)state;
    ckpt_roundtrip(true);
}

static void test_ckpt_without_scaler(void **state) {
    (void)state;
    ckpt_roundtrip(false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_state),
        cmocka_unit_test(test_growth_after_2000_good_steps),
        cmocka_unit_test(test_backoff_and_floor),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_unscaled_update_sgd_clipped),
        cmocka_unit_test(test_unscaled_update_adamw),
        cmocka_unit_test(test_nonfinite_scaled_gradient_skips),
        cmocka_unit_test(test_ckpt_roundtrip_fp16),
        cmocka_unit_test(test_ckpt_without_scaler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
