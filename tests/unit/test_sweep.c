// test_sweep.c: the sweep's pieces that need no launcher: trial values are a pure function of
// (sweep seed, trial id, key) and stay in their ranges; grid visits every point once; ASHA's
// rungs and its promotions (top 1/eta, failed trials the worst, paused runs first, the end);
// results files hold a quoted choice's text.
#include <math.h>

#include "testlib.h"
#include "sweep/sweep_internal.h"

static const char *base_text =
    "name: t\nseed: 5\n"
    "data: {source: synthetic, synthetic: {kind: spirals, classes: 3, features: 2, train_size: 64, val_size: 32}}\n"
    "model: {layers: [{type: dense, units: 8}, {type: relu}, {type: dense, units: 3}]}\n"
    "train: {steps: 8, batch_size: 8}\noptimizer: {type: sgd, lr: 0.1}\n";

// Loads sweep text (BASE stands for the base recipe's path); the spec must load.
static void load(sweep_spec *s, char base[static 64], const char *text) {
    tl_write_temp(base, base_text);
    char body[4096], file[64];
    const char *b = strstr(text, "BASE");
    snprintf(body, sizeof body, "%.*s%s%s", (int)(b - text), text, base, b + 4);
    tl_write_temp(file, body);
    tl_stream es;
    sweep_opts o = {.file = file, .dir = "/tmp/galley_test_sweep_unused"};
    int rc = sweep_load(s, &o, tl_stream_open(&es));
    char *msg = tl_stream_close(&es);
    unlink(file);
    if (rc) fail_msg("sweep file did not load:\n%s", msg);
    free(msg);
}

static void test_values_pure_and_in_range(void **state) {
    (void)state;
    sweep_spec s;
    char base[64];
    load(&s, base, "base: BASE\nmethod: random\ntrials: 200\nseed: 9\nmetric: loss\nspace:\n"
                   "  optimizer.lr: {loguniform: [0.001, 1]}\n  train.batch_size: {int: [4, 8]}\n"
                   "  optimizer.momentum: {choice: [0.5, 0.9]}\n");
    int seen_int[9] = {0}, seen_choice[2] = {0};
    for (int64_t t = 0; t < 200; t++) {
        char a[64], b[64];
        sweep_value(&s, t, 0, a, sizeof a);
        sweep_value(&s, t, 0, b, sizeof b);
        assert_string_equal(a, b);
        double lr = atof(a);
        assert_true(lr >= 0.001 * 0.99999 && lr <= 1.0);
        sweep_value(&s, t, 1, a, sizeof a);
        int bs = atoi(a);
        assert_true(bs >= 4 && bs <= 8);
        seen_int[bs]++;
        sweep_value(&s, t, 2, a, sizeof a);
        seen_choice[!strcmp(a, "0.9")]++;
    }
    for (int v = 4; v <= 8; v++) assert_true(seen_int[v] > 10);  // both ends included
    assert_true(seen_choice[0] > 50 && seen_choice[1] > 50);
    // Another sweep seed draws other values.
    char a[64], b[64];
    sweep_value(&s, 3, 0, a, sizeof a);
    s.seed = 10;
    sweep_value(&s, 3, 0, b, sizeof b);
    assert_string_not_equal(a, b);
    unlink(base);
    sweep_free(&s);
}

static void test_grid_visits_every_point_once(void **state) {
    (void)state;
    sweep_spec s;
    char base[64];
    load(&s, base, "base: BASE\nmethod: grid\nmetric: loss\nspace:\n  optimizer.lr: {choice: [0.1, 0.2, 0.3]}\n"
                   "  train.batch_size: {int: [4, 5]}\n  optimizer.momentum: {uniform: [0, 0.5], points: 2}\n");
    assert_int_equal(sweep_ntrials(&s), 12);
    char seen[12][128];
    for (int64_t t = 0; t < 12; t++) {
        char v[3][32];
        for (int i = 0; i < 3; i++) sweep_value(&s, t, i, v[i], sizeof v[i]);
        snprintf(seen[t], sizeof seen[t], "%s %s %s", v[0], v[1], v[2]);
        for (int64_t u = 0; u < t; u++) assert_string_not_equal(seen[t], seen[u]);
    }
    assert_string_equal(seen[0], "0.1 4 0");
    assert_string_equal(seen[1], "0.1 4 0.5");  // the last key changes fastest
    assert_string_equal(seen[11], "0.3 5 0.5");
    unlink(base);
    sweep_free(&s);
}

static void test_asha_rungs(void **state) {
    (void)state;
    sweep_spec s;
    char base[64];
    load(&s, base, "base: BASE\nmethod: asha\ntrials: 4\nmetric: loss\n"
                   "budget: {key: train.steps, min: 1, max: 10, reduction_factor: 3}\n"
                   "space:\n  optimizer.lr: {loguniform: [0.01, 1]}\n");
    assert_int_equal(s.nrungs, 4);
    int64_t want[] = {1, 3, 9, 10};
    for (int k = 0; k < 4; k++) assert_int_equal(sweep_rung_budget(&s, k), want[k]);
    unlink(base);
    sweep_free(&s);
}

// One group: the order ASHA hands out runs, given each trial's loss.
static void test_asha_promotions(void **state) {
    (void)state;
    sweep_spec s;
    char base[64];
    load(&s, base, "base: BASE\nmethod: asha\ntrials: 4\nmetric: loss\n"
                   "budget: {key: train.steps, min: 2, max: 8, reduction_factor: 2}\n"
                   "space:\n  optimizer.lr: {loguniform: [0.01, 1]}\n");
    sweep_sched sc;
    sched_init(&sc, &s);
    double loss[4] = {0.5, 0.3, NAN, 0.4};  // trial 2 fails
    sweep_job j;
    char order[256] = "";
    for (int guard = 0; guard < 20; guard++) {
        int r = sched_next(&sc, &j);
        if (r < 0) break;
        assert_int_equal(r, 1);
        sched_start(&sc, j);
        // trial 1 at rung 1 is paused once (a signal), then resumed before anything else
        bool pause = j.trial == 1 && j.rung == 1 && !strstr(order, "P");
        snprintf(order + strlen(order), sizeof order - strlen(order), "%s%lld@%d ", pause ? "P" : "",
                 (long long)j.trial, j.rung);
        if (pause) sched_end(&sc, j, TS_PAUSED, NAN, 0, 0, 4, "");
        else if (isnan(loss[j.trial])) sched_end(&sc, j, TS_FAILED, NAN, 1, 0, 1, "the loss became nan");
        else sched_end(&sc, j, TS_DONE, loss[j.trial] / (j.rung + 1), 2, 0, 0, "");
    }
    // 0: alone at rung 0, no promotion (1 / 2 = 0); 1 better: promoted; then paused and resumed;
    // 1 alone at rung 1 (top 0); new 2 fails (counts at rung 0: 3 members, top 1 is trial 1, taken);
    // new 3: rung 0 has 4 (top 2: trials 1 and 3): 3 promoted; rung 1 has 1, 3: top 1 (trial 1) to 8.
    assert_string_equal(order, "0@0 1@0 P1@1 1@1 2@0 3@0 3@1 1@2 ");
    assert_string_equal(sched_state_name(&sc, 0), "stopped");
    assert_string_equal(sched_state_name(&sc, 1), "done");
    assert_string_equal(sched_state_name(&sc, 2), "failed");
    assert_int_equal(sched_best(&sc), 1);
    sched_free(&sc);
    unlink(base);
    sweep_free(&s);
}

// A whole file's text (the caller frees it).
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

// results.csv and results.jsonl hold a quoted choice's text: "10" was written 10" (the closing
// quote kept) to the CSV and "\"10\"" to the JSON.
static void test_results_quoted_choice(void **state) {
    (void)state;
    sweep_spec s;
    char base[64], dir[] = "/tmp/galley_test_sweep_XXXXXX";
    load(&s, base, "base: BASE\nmethod: grid\nmetric: loss\nspace:\n  name: {choice: [\"10\", plain]}\n");
    assert_non_null(mkdtemp(dir));
    snprintf(s.dir_path, sizeof s.dir_path, "%s", dir);
    sweep_sched sc;
    sched_init(&sc, &s);
    results_write(&s, &sc, 5, stderr);
    char path[256], *text;
    snprintf(path, sizeof path, "%s/results.csv", dir);
    text = read_text(path);
    assert_non_null(strstr(text, "\n0,\"10\","));
    assert_non_null(strstr(text, "\n1,\"plain\","));
    free(text);
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    text = read_text(path);
    assert_non_null(strstr(text, "\"values\":{\"name\":\"10\"}"));
    free(text);
    sched_free(&sc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(base);
    sweep_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_pure_and_in_range),
        cmocka_unit_test(test_grid_visits_every_point_once),
        cmocka_unit_test(test_asha_rungs),
        cmocka_unit_test(test_asha_promotions),
        cmocka_unit_test(test_results_quoted_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
