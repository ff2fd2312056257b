// test_dist_hang.c: the hang report from the records a reporter gathered (dist_hang_report.c),
// without MPI: records made here, as ranks would have sent them.
//   - a rank that never answered, the others waiting for the collective after the last one it
//     entered: named with its host, "never entered #k" with what #k was, what it had entered
//     and the steps it had finished; the ranks that wait, grouped, with theirs; a checkpoint
//     of the reporter's steps;
//   - a rank stopped inside a non-blocking collective another rank completed: "is stuck in
//     #k", "at least" its steps; the reporter still checkpoints the steps it finished;
//   - no checkpoint (exit 1) when every rank answered, before training, when no loop is armed,
//     or when the silent rank is not known to have taken part in the reporter's last step;
//   - rank ranges and hosts: "ranks 0-1, 3 of 8", more than four hosts cut short;
//   - the grace: timeout / 10 within [1, 5] s.
#include "testlib.h"

#include "dist/dist_hang.h"

#define W 8

typedef struct {
    hang_record rec[W];
    bool answered[W];
    char hosts[W * HANG_HOST];
    char *text;
    size_t len;
    hang_verdict v;
} scene;

// Rank r waits for #k at `done` steps; #k - 1, a DIST_ALL collective, was entered at `done` too.
static void waits(scene *s, int r, int64_t k, int64_t done, const char *what) {
    hang_record *x = &s->rec[r];
    memset(x, 0, sizeof *x);
    x->rank = r;
    x->waiting = k;
    x->entered = k;
    x->done = done;
    x->done_seq = k - 3;
    x->all_before = k - 1;
    x->all_done = done;
    x->waited = 3.2;
    snprintf(x->what, sizeof x->what, "%s", what);
    snprintf(x->before, sizeof x->before, "the step's loss and metrics reduction at step %lld", (long long)done);
    s->answered[r] = true;
}

static void host(scene *s, int r, const char *h) { snprintf(s->hosts + r * HANG_HOST, HANG_HOST, "%s", h); }

static void run(scene *s, int world, int reporter, bool armed) {
    hang_facts f = {.world = world, .reporter = reporter, .rec = s->rec, .answered = s->answered,
                    .hosts = s->hosts, .timeout = 3, .armed = armed};
    FILE *out = open_memstream(&s->text, &s->len);
    hang_report(&f, out, &s->v);
    fclose(out);
}

static void has(const scene *s, const char *needle) {
    if (!strstr(s->text, needle)) fail_msg("missing '%s' in:\n%s", needle, s->text);
}

static void test_never_entered(void **state) {
    (void)state;
    scene s = {0};
    host(&s, 0, "nid001"), host(&s, 1, "nid001"), host(&s, 2, "nid002");
    waits(&s, 0, 4711, 1207, "the gradient allreduce (bucket 3 of 5) at step 1207");
    waits(&s, 1, 4711, 1207, "the gradient allreduce (bucket 3 of 5) at step 1207");
    run(&s, 3, 0, true);
    has(&s, "galley: error: hang: collective #4711 (the gradient allreduce (bucket 3 of 5) at step 1207) made no "
            "progress for 3 s (distributed.timeout)\n");
    has(&s, "galley: error: hang: rank 2 of 3 (host nid002) never entered #4711 (the gradient allreduce (bucket 3 "
            "of 5) at step 1207), which the others wait for: stopped, busy outside MPI or cut off (it did not answer); "
            "it "
            "entered #4710 (the step's loss and metrics reduction at step 1207), which every other rank completed, "
            "so it had finished 1207 steps\n");
    has(&s, "galley: hang: ranks 0-1 of 3 (host nid001) wait in #4711 (the gradient allreduce (bucket 3 of 5) at "
            "step 1207) for 3.2 s and had finished 1207 steps\n");
    has(&s, "galley: hang: rank 0 had finished 1207 steps, and every rank took part in all of them\n");
    assert_int_equal(s.v.save, 1);
    assert_int_equal(s.v.steps, 1207);
    free(s.text);
}

static void test_stopped_inside(void **state) {
    (void)state;
    scene s = {0};
    host(&s, 0, "a"), host(&s, 1, "b"), host(&s, 2, "c");
    waits(&s, 0, 100, 50, "the gradient allreduce (bucket 1 of 1) at step 50");
    waits(&s, 2, 101, 51, "the step's loss and metrics reduction at step 51");  // completed #100 (#1 stopped in it)
    s.rec[2].all_done = 50;
    run(&s, 3, 0, true);
    has(&s, "rank 1 of 3 (host b) is stuck in #100 (the gradient allreduce (bucket 1 of 1) at step 50), which "
            "rank 0 waits for: stopped, busy outside MPI or cut off (it did not answer); rank 2 completed it, so it "
            "had finished at least 50 steps\n");
    has(&s, "galley: hang: rank 0 of 3 (host a) waits in #100");
    has(&s, "galley: hang: rank 2 of 3 (host c) waits in #101 (the step's loss and metrics reduction at step 51) for "
            "3.2 s and had finished 51 steps\n");
    assert_int_equal(s.v.save, 1);  // rank 0's 50 steps: every rank took part in them
    assert_int_equal(s.v.steps, 50);
    free(s.text);
}

static void test_no_checkpoint(void **state) {
    (void)state;
    scene s = {0};
    for (int r = 0; r < 2; r++) waits(&s, r, 9, 3, "the step's loss and metrics reduction at step 3");
    run(&s, 2, 0, true);  // every rank answered: not a stopped rank
    assert_int_equal(s.v.save, 0);
    has(&s, "galley: hang: no checkpoint: every rank answered, so none is stuck outside MPI");
    has(&s, "ending the job (exit code 1)\n");
    free(s.text);

    memset(&s, 0, sizeof s);
    waits(&s, 1, 9, 3, "x");
    run(&s, 2, 1, false);  // `galley eval`, or a collective outside the loop
    assert_int_equal(s.v.save, 0);
    has(&s, "no checkpoint: no training loop is running that could write one");
    has(&s, "rank 0 of 2 (host ");
    has(&s, ") never entered #9 (x)");
    free(s.text);

    memset(&s, 0, sizeof s);
    waits(&s, 0, 2, -1, "choosing the checkpoint to resume");
    s.rec[0].all_done = -1;
    run(&s, 2, 0, true);  // set-up
    assert_int_equal(s.v.save, 0);
    has(&s, "so it had not started training");
    has(&s, "no checkpoint: training had not started");
    free(s.text);

    memset(&s, 0, sizeof s);
    waits(&s, 0, 20, 7, "x");
    s.rec[0].all_before = 0;  // nothing remembered before #20
    s.rec[0].done_seq = 17;
    run(&s, 2, 0, true);
    assert_int_equal(s.v.save, 0);
    has(&s, "not known to have taken part in every collective of step 6");
    free(s.text);
}

static void test_ranks_and_hosts(void **state) {
    (void)state;
    scene s = {0};
    const char *hosts[W] = {"n0", "n0", "n1", "n2", "n3", "n4", "n5", "n6"};
    for (int r = 0; r < W; r++) host(&s, r, hosts[r]);
    for (int r = 2; r < W; r++)
        if (r != 3) waits(&s, r, 30, 12, "the evaluation's metrics reduction at step 12");
    run(&s, W, 2, true);  // ranks 0, 1 and 3 stopped: rank 2 reports
    has(&s, "galley: error: hang: ranks 0-1, 3 of 8 (hosts n0, n2) never entered #30");
    has(&s, "so they had finished 12 steps");
    has(&s, "galley: hang: ranks 2, 4-7 of 8 (hosts n1, n3, n4, n5 and 1 more) wait in #30");
    assert_int_equal(s.v.save, 1);
    free(s.text);
}

static void test_grace(void **state) {
    (void)state;
    assert_true(hang_grace(3) == 1);
    assert_true(hang_grace(30) == 3);
    assert_true(hang_grace(300) == 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_entered),
        cmocka_unit_test(test_stopped_inside),
        cmocka_unit_test(test_no_checkpoint),
        cmocka_unit_test(test_ranks_and_hosts),
        cmocka_unit_test(test_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
