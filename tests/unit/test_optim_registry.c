// test_optim_registry.c: the optimizer registry (src/optim/optim_registry.c, GL_OPTIM_RULES in
// backend_types.h) keeps what recipes and checkpoints store: the OPT_* values, the names and
// the state buffers each rule saves, and every rule has a CPU step and a device driver.
#include "testlib.h"

#include <string.h>

#include "galley/optim.h"

static void test_values_and_names_unchanged(void **state) {
    (void)state;
    assert_int_equal(OPT_SGD, 0);
    assert_int_equal(OPT_ADAMW, 1);
    assert_int_equal(OPT_LAMB, 2);
    assert_int_equal(OPT_COUNT, 3);
    assert_string_equal(optim_name(OPT_SGD), "sgd");
    assert_string_equal(optim_name(OPT_ADAMW), "adamw");
    assert_string_equal(optim_name(OPT_LAMB), "lamb");
    assert_string_equal(optim_name(OPT_COUNT), "?");
    assert_string_equal(optim_name(-1), "?");
    assert_null(optim_names[OPT_COUNT]);
    assert_null(optim_rule(OPT_COUNT));
}

static void test_state_buffers_unchanged(void **state) {
    (void)state;
    const gl_optim_rule *sgd = optim_rule(OPT_SGD), *adamw = optim_rule(OPT_ADAMW), *lamb = optim_rule(OPT_LAMB);
    assert_string_equal(sgd->state[0], "velocity");
    assert_null(sgd->state[1]);
    assert_non_null(sgd->keeps_state);  // only with momentum
    assert_false(sgd->adam);
    for (int i = 0; i < 2; i++) {
        const gl_optim_rule *r = i ? lamb : adamw;
        assert_string_equal(r->state[0], "m");
        assert_string_equal(r->state[1], "v");
        assert_null(r->keeps_state);
        assert_true(r->adam);
    }
}

static void test_every_rule_complete(void **state) {
    (void)state;
    for (int t = 0; t < OPT_COUNT; t++) {
        const gl_optim_rule *r = optim_rule(t);
        assert_non_null(r);
        assert_non_null(r->step);
        assert_non_null(r->device_step);
        assert_non_null(optim_names[t]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_names_unchanged),
        cmocka_unit_test(test_state_buffers_unchanged),
        cmocka_unit_test(test_every_rule_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
