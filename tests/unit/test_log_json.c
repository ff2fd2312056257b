// test_log_json.c: the JSON writer (escapes, null for non-finite numbers, truncation never
// overruns) and the leaf walker (paths, escapes, surrogate pairs, malformed text).
#include "testlib.h"

#include "log/json.h"

static void test_writer(void **state) {
    (void)state;
    char mem[256];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "kind", "train");
    jb_int(&b, "step", 50);
    jb_num(&b, "loss", 0.25);
    jb_num(&b, "nan", NAN);
    jb_num(&b, "inf", -INFINITY);
    jb_fix(&b, "t", 1.23456, 2);
    jb_open(&b, "m", '{');
    jb_close(&b);
    jb_open(&b, "a", '[');
    jb_num(&b, NULL, 1);
    jb_bool(&b, NULL, true);
    jb_null(&b, NULL);
    jb_close(&b);
    jb_str(&b, "s", "q\"b\\n\n\t\x01");
    jb_close(&b);
    assert_false(b.truncated);
    assert_string_equal(mem, "{\"kind\":\"train\",\"step\":50,\"loss\":0.25,\"nan\":null,\"inf\":null,\"t\":1.23,"
                             "\"m\":{},\"a\":[1,true,null],\"s\":\"q\\\"b\\\\n\\n\\t\\u0001\"}");
}

static void test_writer_truncates_safely(void **state) {
    (void)state;
    char mem[16];
    memset(mem, 'x', sizeof mem);
    jbuf b;
    jb_init(&b, mem, 12);
    jb_open(&b, NULL, '{');
    jb_str(&b, "a-long-key", "a long value");
    jb_close(&b);
    assert_true(b.truncated);
    assert_true(b.len < 12);
    assert_int_equal(mem[12], 'x');  // never past cap
    assert_int_equal(mem[b.len], 0);
    jb_reset(&b);
    assert_false(b.truncated);
    jb_open(&b, NULL, '[');
    jb_close(&b);
    assert_string_equal(mem, "[]");
}

typedef struct {
    char text[1024];
    size_t len;
} leaves;

static int collect(void *ctx, const char *path, const jv_leaf *v) {
    leaves *l = ctx;
    char val[256];
    switch (v->type) {
    case JV_NULL: snprintf(val, sizeof val, "null"); break;
    case JV_BOOL: snprintf(val, sizeof val, "%s", v->num ? "true" : "false"); break;
    case JV_NUM: snprintf(val, sizeof val, "%g", v->num); break;
    case JV_STR: snprintf(val, sizeof val, "'%s'", v->str); break;
    }
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s=%s;", path, val);
    return 0;
}

static const char *walk(const char *text, leaves *l, int *rc, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    *rc = json_walk(text, strlen(text), collect, l, err, errlen);
    return l->text;
}

static void test_walker_paths(void **state) {
    (void)state;
    leaves l;
    char err[128];
    int rc;
    walk(" {\"kind\":\"eval\",\"step\":3,\"metrics\":{\"accuracy\":0.5,\"iou\":[0.1,2e-3]},\"x\":null,"
         "\"ok\":true,\"e\":{},\"neg\":-1.5E2} \n",
         &l, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_string_equal(l.text, "kind='eval';step=3;metrics.accuracy=0.5;metrics.iou.0=0.1;metrics.iou.1=0.002;"
                                "x=null;ok=true;neg=-150;");
    walk("\"caf\\u00e9 \\ud83d\\ude00 \\/\\\"\"", &l, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_string_equal(l.text, "='caf\xc3\xa9 \xf0\x9f\x98\x80 /\"';");
}

static void test_walker_round_trips_the_writer(void **state) {
    (void)state;
    char mem[256];
    jbuf b;
    jb_init(&b, mem, sizeof mem);
    jb_open(&b, NULL, '{');
    jb_str(&b, "name", "we\"ird\n\x02");
    jb_num(&b, "v", 0.123456789);
    jb_close(&b);
    leaves l;
    char err[128];
    int rc;
    walk(mem, &l, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_string_equal(l.text, "name='we\"ird\n\x02';v=0.123457;");
}

static void test_walker_errors(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",          "{",          "{\"a\" 1}",     "{\"a\":1,}", "[1 2]",  "01",  "1.",  "-",
        "\"abc",     "\"\\x\"",    "\"\\ud800\"",  "tru",         "{} {}",  "{a:1}", "[1,]", "\"a\nb\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        leaves l;
        char err[128] = "";
        int rc;
        walk(bad[i], &l, &rc, err, sizeof err);
        if (rc != -1) fail_msg("'%s' was accepted", bad[i]);
        assert_non_null(strstr(err, "byte "));
    }
    // Deep nesting is refused, not a stack overflow.
    char deep[400];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    leaves l;
    char err[128];
    int rc;
    walk(deep, &l, &rc, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "nested too deep"));
}

static int stop_at_second(void *ctx, const char *path, const jv_leaf *v) {
    (void)path, (void)v;
    return ++*(int *)ctx == 2 ? 7 : 0;
}

static void test_walker_stops(void **state) {
    (void)state;
    int count = 0;
    assert_int_equal(json_walk("[1,2,3]", 7, stop_at_second, &count, NULL, 0), 7);
    assert_int_equal(count, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer),       cmocka_unit_test(test_writer_truncates_safely),
        cmocka_unit_test(test_walker_paths), cmocka_unit_test(test_walker_round_trips_the_writer),
        cmocka_unit_test(test_walker_errors), cmocka_unit_test(test_walker_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
