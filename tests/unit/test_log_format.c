// test_log_format.c: the run log's words: durations, the plain progress line (no control
// characters), metrics records that parse back, and run directory naming.
#include "testlib.h"

#include <sys/stat.h>

#include "log/json.h"
#include "galley/runlog.h"

static void test_durations(void **state) {
    (void)state;
    char b[32];
    format_duration(0.42, b, sizeof b);
    assert_string_equal(b, "0.4s");
    format_duration(12.7, b, sizeof b);
    assert_string_equal(b, "0m12s");
    format_duration(185, b, sizeof b);
    assert_string_equal(b, "3m05s");
    format_duration(3 * 3600 + 120, b, sizeof b);
    assert_string_equal(b, "3h02m");
    format_duration(NAN, b, sizeof b);
    assert_string_equal(b, "?");
}

static gl_logpoint point(void) {
    gl_logpoint p = {.step = 50, .epoch = 2, .time = 1.5, .loss = 0.6931, .lr = 0.1, .samples_per_s = 12345.6};
    p.m.n = 2;
    p.m.id[0] = METRIC_ACCURACY, p.m.v[0] = 0.5;
    p.m.id[1] = METRIC_TOPK, p.m.v[1] = 0.875;
    for (int i = 0; i < PHASE_COUNT; i++) p.phase[i] = 0.1 * i;
    return p;
}

static void test_progress_line(void **state) {
    (void)state;
    gl_runlog lg;
    memset(&lg, 0, sizeof lg);
    lg.info.total_steps = 200;
    lg.info.main_metric = METRIC_ACCURACY;
    gl_logpoint p = point();
    char line[256];
    format_progress(&lg, &p, line, sizeof line);
    assert_string_equal(line, "step     50/200 (epoch 2)  loss 0.6931  acc 0.5000 | lr 0.1 | 12346 samples/s | ETA 4.5s");
    for (const char *c = line; *c; c++) assert_true((unsigned char)*c >= 0x20 && *c != 0x7f);
    lg.info.main_metric = METRIC_TOPK;
    format_progress(&lg, &p, line, sizeof line);
    assert_non_null(strstr(line, "  top_k 0.8750 |"));
    // Below 1 sample/s (a 4,050-token ViT at batch 1 on a CPU) the rate keeps its digits.
    p.samples_per_s = 0.4239;
    format_progress(&lg, &p, line, sizeof line);
    assert_non_null(strstr(line, "| 0.42 samples/s |"));
    char r[32];
    format_rate(12.345, r, sizeof r);
    assert_string_equal(r, "12.3");
    format_rate(99.96, r, sizeof r);
    assert_string_equal(r, "100.0");
    format_rate(150.4, r, sizeof r);
    assert_string_equal(r, "150");
}

typedef struct {
    int seen;
    double breakdown_sum;
    char kind[16];
} rec;

static int check_leaf(void *ctx, const char *path, const jv_leaf *v) {
    rec *r = ctx;
    r->seen++;
    if (!strcmp(path, "kind")) snprintf(r->kind, sizeof r->kind, "%s", v->str);
    if (!strncmp(path, "time_breakdown.", 15)) r->breakdown_sum += v->num;
    if (!strcmp(path, "metrics.accuracy")) assert_true(v->num == 0.5);
    if (!strcmp(path, "metrics.top_k")) assert_true(v->num == 0.875);
    if (!strcmp(path, "step")) assert_true(v->num == 50);
    return 0;
}

static void test_records(void **state) {
    (void)state;
    gl_logpoint p = point();
    char buf[1024];
    size_t n = format_record(&p, "train", 1700000000.25, buf, sizeof buf);
    assert_true(n > 0 && n == strlen(buf));
    assert_null(strchr(buf, '\n'));
    assert_non_null(strstr(buf, "\"wall_time\":1700000000.250"));
    rec r = {0};
    assert_int_equal(json_walk(buf, n, check_leaf, &r, NULL, 0), 0);
    assert_string_equal(r.kind, "train");
    assert_true(fabs(r.breakdown_sum - 2.8) < 1e-9);  // 0.1 * (0 + 1 + ... + 7)
    n = format_record(&p, "eval", 1.0, buf, sizeof buf);
    assert_null(strstr(buf, "time_breakdown"));
    assert_non_null(strstr(buf, "\"seconds\":"));
    p.loss = NAN;
    n = format_record(&p, "eval", 1.0, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"loss\":null"));
    assert_int_equal(format_record(&p, "train", 1.0, buf, 40), 0);  // too small: nothing, not half a record
}

static void test_run_directories(void **state) {
    (void)state;
    char root[] = "/tmp/galley_rundir_XXXXXX", a[4096], b[4096], err[512];
    assert_non_null(mkdtemp(root));
    assert_int_equal(rundir_make(a, sizeof a, NULL, root, "my run/../x", err, sizeof err), 0);
    char want[4200];
    snprintf(want, sizeof want, "%s/my_run_.._x/", root);
    assert_memory_equal(a, want, strlen(want));  // '/' and ' ' replaced; the dots stay inside one name
    assert_int_equal(rundir_make(b, sizeof b, NULL, root, "my run/../x", err, sizeof err), 0);
    assert_string_not_equal(a, b);  // same second: a -2 suffix, never the same directory
    struct stat st;
    assert_int_equal(stat(b, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    // --run-dir: made with its parents; refused once it holds a run.
    char given[4200], m[4300];
    snprintf(given, sizeof given, "%s/deep/er/run/", root);
    assert_int_equal(rundir_make(a, sizeof a, given, root, "x", err, sizeof err), 0);
    snprintf(want, sizeof want, "%s/deep/er/run", root);
    assert_string_equal(a, want);
    snprintf(m, sizeof m, "%s/metrics.jsonl", a);
    FILE *f = fopen(m, "w");
    fclose(f);
    assert_int_equal(rundir_make(b, sizeof b, given, root, "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "already holds a run"));
    assert_int_equal(rundir_make(b, sizeof b, "/dev/null/x", root, "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot create /dev/null"));
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

// Only rank 0 prints and writes; rank 0's prints reach the terminal and console.log alike.
static void test_rank_gating_and_tee(void **state) {
    (void)state;
    recipe_t r;
    tl_recipe(&r, "model: {layers: [{type: dense, units: 2}]}\noptimizer: {lr: 0.1}\n", 0, NULL);
    char root[] = "/tmp/galley_runlog_XXXXXX", dir[4200], path[4300];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/run", root);
    for (int rank = 1; rank >= 0; rank--) {
        tl_stream out, err;
        gl_runlog lg;
        assert_int_equal(runlog_open(&lg, &r, dir, rank, tl_stream_open(&out), tl_stream_open(&err)), 0);
        assert_false(lg.tty);  // a memory stream is no terminal
        fprintf(lg.out, "hello from rank %d\n", rank);
        fprintf(lg.err, "warning from rank %d\n", rank);
        gl_logpoint p = point();
        lg.info.total_steps = 200;
        runlog_train(&lg, &p, true);
        runlog_eval(&lg, &p);
        assert_int_equal(runlog_close(&lg), 0);
        char *o = tl_stream_close(&out), *e = tl_stream_close(&err);
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        if (rank == 1) {
            assert_string_equal(o, "");                          // nothing printed
            assert_string_equal(e, "warning from rank 1\n");    // but errors still reach stderr
            assert_int_equal(access(dir, F_OK), -1);            // and no run directory
        } else {
            assert_non_null(strstr(o, "hello from rank 0\nstep     50/200 (epoch 2)"));
            assert_string_equal(e, "warning from rank 0\n");
            snprintf(path, sizeof path, "%s/console.log", dir);
            FILE *f = fopen(path, "r");
            assert_non_null(f);
            char text[1024] = "";
            size_t n = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[n] = 0;
            assert_non_null(strstr(text, "hello from rank 0\n"));
            assert_non_null(strstr(text, "warning from rank 0\n"));
            assert_non_null(strstr(text, "step     50/200"));
            snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
            f = fopen(path, "r");
            assert_non_null(f);
            int lines = 0;
            for (int c; (c = fgetc(f)) != EOF;) lines += c == '\n';
            fclose(f);
            assert_int_equal(lines, 2);
        }
        free(o);
        free(e);
    }
    recipe_free(&r);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations), cmocka_unit_test(test_progress_line), cmocka_unit_test(test_records),
        cmocka_unit_test(test_run_directories), cmocka_unit_test(test_rank_gating_and_tee),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
