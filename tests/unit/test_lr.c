// test_lr.c: the learning-rate rule (optimizer.schedule) at chosen steps against values worked
// out by hand: batch scaling, warmup in steps and in epochs, multistep (CosmoFlow's), cosine,
// poly; and the one-line description the trainer prints.
#include "testlib.h"

#include "galley/lr.h"

// |got - want| <= 1e-12 relative (cmocka's assert_float_equal rounds to float first).
static void lr_is_at(const gl_lr *s, int64_t step, double want, int line)
{
    double got = lr_at(s, step);
    if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-15))
        fail_msg("line %d: lr_at(%lld) = %.15g, expected %.15g", line, (long long)step, got, want);
}
#define LR_IS(s, step, want) lr_is_at((s), (step), (want), __LINE__)

// The schedule of an optimizer section, resolved for a batch and a run length.
static void make(gl_lr *s, const char *optimizer_yaml, int64_t batch, int64_t steps_per_epoch, int64_t total)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "model:\n  layers:\n    - {type: dense, units: 2}\noptimizer:\n%s", optimizer_yaml);
    recipe_t r;
    tl_recipe(&r, yaml, 0, NULL);
    lr_init(s, &r, batch, steps_per_epoch, total);
    recipe_free(&r);
}

static void describe_is(const gl_lr *s, const char *want)
{
    char buf[512];
    lr_describe(s, buf, sizeof buf);
    if (strcmp(buf, want)) fail_msg("lr_describe:\n  got      '%s'\n  expected '%s'", buf, want);
}

// The default schedule: the recipe's lr at every step, whatever the batch.
static void test_default_is_constant(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.1\n", 1024, 10, 100);
    LR_IS(&s, 0, 0.1);
    LR_IS(&s, 50, 0.1);
    LR_IS(&s, 1000000, 0.1);
    describe_is(&s, "lr 0.1; constant");
}

static void test_scaling(void **state)
{
    (void)state;
    gl_lr s;
    // linear: 0.05 x 256/64 = 0.2
    make(&s, "  lr: 0.05\n  schedule: {scaling: linear, base_batch: 64}\n", 256, 10, 100);
    LR_IS(&s, 0, 0.2);
    describe_is(&s, "lr 0.2 = 0.05 x 256/64; constant");
    // sqrt: 0.05 x sqrt(256/64) = 0.1
    make(&s, "  lr: 0.05\n  schedule: {scaling: sqrt, base_batch: 64}\n", 256, 10, 100);
    LR_IS(&s, 7, 0.1);
    // sqrt of a ratio below one: 0.04 x sqrt(32/128) = 0.02
    make(&s, "  lr: 0.04\n  schedule: {scaling: sqrt, base_batch: 128}\n", 32, 10, 100);
    LR_IS(&s, 0, 0.02);
    // linear with the default base_batch 64: 0.1 x 32/64 = 0.05
    make(&s, "  lr: 0.1\n  schedule: {scaling: linear}\n", 32, 10, 100);
    LR_IS(&s, 3, 0.05);
}

// warmup 10 steps: base * (step + 1) / 10 for steps 0..9, base from step 10.
static void test_warmup_steps(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.1\n  schedule: {warmup: 10}\n", 64, 7, 1000);
    assert_int_equal(s.warmup, 10);
    LR_IS(&s, 0, 0.01);
    LR_IS(&s, 4, 0.05);
    LR_IS(&s, 9, 0.1);
    LR_IS(&s, 10, 0.1);
    LR_IS(&s, 999, 0.1);
    describe_is(&s, "lr 0.1; warmup 10 steps from 0.01; then constant");
}

// warmup 2.5 epochs of 10 steps = 25 steps; 0.25 epochs = 2.5 steps rounds to 3.
static void test_warmup_epochs(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.1\n  schedule: {unit: epochs, warmup: 2.5}\n", 64, 10, 1000);
    assert_int_equal(s.warmup, 25);
    LR_IS(&s, 0, 0.004);
    LR_IS(&s, 12, 0.052);
    LR_IS(&s, 24, 0.1);
    LR_IS(&s, 25, 0.1);
    describe_is(&s, "lr 0.1; warmup 2.5 epochs = 25 steps from 0.004; then constant");
    make(&s, "  lr: 0.3\n  schedule: {unit: epochs, warmup: 0.25}\n", 64, 10, 1000);
    assert_int_equal(s.warmup, 3);
    LR_IS(&s, 0, 0.1);
    LR_IS(&s, 1, 0.2);
    LR_IS(&s, 2, 0.3);
    make(&s, "  lr: 0.3\n  schedule: {unit: epochs, warmup: 1}\n", 64, 1, 1000);
    describe_is(&s, "lr 0.3; warmup 1 epoch = 1 step from 0.3; then constant");
}

// CosmoFlow: lr 0.001 x 256/64 = 0.004, 4 warmup epochs, x0.25 from epoch 32, x0.125 from 64;
// 100 steps per epoch: milestones at steps 3200 and 6400.
static void test_multistep_cosmoflow(void **state)
{
    (void)state;
    gl_lr s;
    make(&s,
         "  lr: 0.001\n  schedule: {unit: epochs, warmup: 4, decay: multistep, milestones: [32, 64], "
         "factors: [0.25, 0.125], scaling: linear, base_batch: 64}\n",
         256, 100, 12800);
    assert_int_equal(s.warmup, 400);
    LR_IS(&s, 0, 0.004 / 400);
    LR_IS(&s, 199, 0.002);
    LR_IS(&s, 400, 0.004);
    LR_IS(&s, 3199, 0.004);
    LR_IS(&s, 3200, 0.001);
    LR_IS(&s, 6399, 0.001);
    LR_IS(&s, 6400, 0.0005);
    LR_IS(&s, 12799, 0.0005);
    describe_is(&s, "lr 0.004 = 0.001 x 256/64; warmup 4 epochs = 400 steps from 1e-05; then x0.25 = 0.001 at "
                    "step 3200 (epoch 32), x0.125 = 0.0005 at step 6400 (epoch 64)");
}

// Milestones in steps, no warmup: the factor holds from its milestone on.
static void test_multistep_steps(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 1.0\n  schedule: {decay: multistep, milestones: [5, 8], factors: [0.5, 0.1]}\n", 64, 3, 20);
    LR_IS(&s, 4, 1.0);
    LR_IS(&s, 5, 0.5);
    LR_IS(&s, 7, 0.5);
    LR_IS(&s, 8, 0.1);
    describe_is(&s, "lr 1; x0.5 = 0.5 at step 5, x0.1 = 0.1 at step 8");
}

// cosine over steps 10..110 from 0.1 to 0.001: t = (step - 10) / 100.
static void test_cosine(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.1\n  schedule: {warmup: 10, decay: cosine, end_lr: 0.001}\n", 64, 10, 110);
    LR_IS(&s, 9, 0.1);
    LR_IS(&s, 10, 0.1);                                         // t = 0
    LR_IS(&s, 35, 0.001 + 0.099 * (1 + sqrt(0.5)) / 2);        // t = 1/4: 0.0855017857...
    LR_IS(&s, 60, 0.0505);                                      // midpoint
    LR_IS(&s, 85, 0.001 + 0.099 * (1 - sqrt(0.5)) / 2);        // t = 3/4
    LR_IS(&s, 110, 0.001);                                      // end point
    LR_IS(&s, 500, 0.001);                                      // held after the end
    describe_is(&s, "lr 0.1; warmup 10 steps from 0.01; then cosine to 0.001 at step 110");
}

// The example the trainer's description follows.
static void test_describe_sqrt_warmup_cosine(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.05\n  schedule: {scaling: sqrt, base_batch: 64, warmup: 100, decay: cosine}\n", 256, 50, 5000);
    LR_IS(&s, 0, 0.001);
    LR_IS(&s, 2550, 0.05);  // midpoint of 100..5000, to 0
    LR_IS(&s, 5000, 0.0);
    describe_is(&s, "lr 0.1 = 0.05 x sqrt(256/64); warmup 100 steps from 0.001; then cosine to 0 at step 5000");
}

// poly power 2 from 0.2 over 100 steps: 0.2 (1 - t)^2, and with end_lr 0.01: 0.01 + 0.19 (1 - t)^2.
static void test_poly(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.2\n  schedule: {decay: poly, power: 2}\n", 64, 10, 100);
    LR_IS(&s, 0, 0.2);
    LR_IS(&s, 50, 0.05);
    LR_IS(&s, 90, 0.002);
    LR_IS(&s, 100, 0.0);
    describe_is(&s, "lr 0.2; poly power 2 to 0 at step 100");
    make(&s, "  lr: 0.2\n  schedule: {decay: poly, power: 2, end_lr: 0.01, unit: epochs, warmup: 1}\n", 64, 20, 120);
    LR_IS(&s, 19, 0.2);
    LR_IS(&s, 20, 0.2);
    LR_IS(&s, 70, 0.01 + 0.19 * 0.25);
    LR_IS(&s, 120, 0.01);
    // power 1 (the default) is linear decay
    make(&s, "  lr: 0.2\n  schedule: {decay: poly}\n", 64, 10, 100);
    LR_IS(&s, 25, 0.15);
}

// A short buffer gets a cut, terminated line.
static void test_describe_truncates(void **state)
{
    (void)state;
    gl_lr s;
    make(&s, "  lr: 0.05\n  schedule: {scaling: sqrt, base_batch: 64, warmup: 100, decay: cosine}\n", 256, 50, 5000);
    char buf[12];
    memset(buf, 'x', sizeof buf);
    lr_describe(&s, buf, sizeof buf);
    assert_string_equal(buf, "lr 0.1 = 0.");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_constant),
        cmocka_unit_test(test_scaling),
        cmocka_unit_test(test_warmup_steps),
        cmocka_unit_test(test_warmup_epochs),
        cmocka_unit_test(test_multistep_cosmoflow),
        cmocka_unit_test(test_multistep_steps),
        cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_describe_sqrt_warmup_cosine),
        cmocka_unit_test(test_poly),
        cmocka_unit_test(test_describe_truncates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
