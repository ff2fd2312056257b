// test_dist_nccl.c: what decides between NCCL and MPI for the gradient buckets, and the per-layer
// wait that only the MPI path needs; both run without a GPU.
//   - gradnccl_choose: NCCL only when every rank is on a GPU of its own with NCCL loadable; each
//     reason to keep MPI is named (a CPU rank, GALLEY_NCCL off, no libnccl, two ranks on one
//     GPU, naming the lowest such pair); an all-CPU job keeps MPI silently;
//   - graph_backward on a device backend waits for the GPU before each layer hook when the hook
//     reads gradients on the host (MPI), and only once at the end when it queues GPU work
//     (layer_done_on_device, NCCL). The "device" is the CPU backend's table with device set and
//     a sync that counts.
//   - devcomm_open without a bound GPU: where libnccl.so.2 loads, every function galley calls
//     is found in it (the table is whole) before it declines for want of a GPU.
// The NCCL calls themselves need a GPU: tests/e2e/test_dist_nccl.sh.
#include "testlib.h"

#include "dist/dist_internal.h"

static gradnccl_rank on_gpu(int id) {
    gradnccl_rank r;
    memset(&r, 0, sizeof r);
    r.state = GRADNCCL_READY;
    r.uuid[0] = (unsigned char)id;
    r.uuid[15] = 0xA5;
    snprintf(r.bus, sizeof r.bus, "0000:%02x:00.0", id);
    return r;
}

static void test_distinct_gpus_use_nccl(void **state) {
    (void)state;
    gradnccl_rank all[4] = {on_gpu(1), on_gpu(2), on_gpu(3), on_gpu(4)};
    char why[256];
    assert_int_equal(gradnccl_choose(all, 4, why, sizeof why), 1);
    assert_string_equal(why, "");
    assert_int_equal(gradnccl_choose(all, 1, why, sizeof why), 1);  // GALLEY_NCCL=force on one rank
}

static void test_shared_gpu_keeps_mpi(void **state) {
    (void)state;
    // ranks 1 and 3 share a GPU, and so do 2 and 4 (sorted by UUID the 2-4 pair comes first)
    gradnccl_rank all[5] = {on_gpu(7), on_gpu(9), on_gpu(5), on_gpu(9), on_gpu(5)};
    char why[256];
    assert_int_equal(gradnccl_choose(all, 5, why, sizeof why), 0);
    assert_non_null(strstr(why, "ranks 1 and 3 share GPU 0000:09:00.0"));
    assert_non_null(strstr(why, "a GPU per rank"));
    // the one-GPU test machine under mpirun -np 2
    gradnccl_rank two[2] = {on_gpu(3), on_gpu(3)};
    assert_int_equal(gradnccl_choose(two, 2, why, sizeof why), 0);
    assert_non_null(strstr(why, "ranks 0 and 1 share GPU 0000:03:00.0"));
}

static void test_each_reason_named(void **state) {
    (void)state;
    char why[256];
    gradnccl_rank all[3] = {on_gpu(1), on_gpu(2), on_gpu(3)};
    all[2].state = GRADNCCL_NO_LIB;
    snprintf(all[2].why, sizeof all[2].why, "cannot load libnccl.so.2 (not found)");
    assert_int_equal(gradnccl_choose(all, 3, why, sizeof why), 0);
    assert_string_equal(why, "rank 2: cannot load libnccl.so.2 (not found)");
    all[1].state = GRADNCCL_OFF;
    assert_int_equal(gradnccl_choose(all, 3, why, sizeof why), 0);
    assert_string_equal(why, "GALLEY_NCCL turns it off on rank 1");
    all[0].state = GRADNCCL_CPU;
    assert_int_equal(gradnccl_choose(all, 3, why, sizeof why), 0);
    assert_string_equal(why, "rank 0 trains on the CPU while 2 ranks on GPUs");
    // a CPU job: MPI without a word
    for (int r = 0; r < 3; r++) all[r].state = GRADNCCL_CPU;
    assert_int_equal(gradnccl_choose(all, 3, why, sizeof why), 0);
    assert_string_equal(why, "");
}

// ---- the per-layer wait of graph_backward ---------------------------------------------------------

static int syncs, hooks, syncs_at_first_hook;

static void counting_sync(void) { syncs++; }

static void count_hook(void *ctx, int layer) {
    (void)ctx, (void)layer;
    if (hooks++ == 0) syncs_at_first_hook = syncs;
}

static void test_backward_waits_only_for_host_hooks(void **state) {
    (void)state;
    gl_backend dev = *backend_cpu();  // host memory, but says device: graph.c's GPU path
    dev.device = 1;
    dev.sync = counting_sync;
    tl_model m;
    char *errors = NULL;
    int rc = tl_model_try_on(&m,
                             "    - {type: dense, units: 6, name: a}\n"
                             "    - {type: dense, units: 5, name: b}\n"
                             "    - {type: dense, units: 3, name: c}\n",
                             (gl_shape){1, {4}}, 2, &dev, &errors);
    assert_int_equal(rc, 0);
    free(errors);
    graph_init_params(&m.g, TL_SEED);
    tl_fill_uniform(m.g.input.data, m.g.input.size * 2, -1, 1, 1);
    graph_forward(&m.g, 2, true);
    gl_tensor *o = graph_output(&m.g);
    tl_fill_uniform(o->grad, o->size * 2, -1, 1, 2);
    m.g.layer_done = count_hook;
    for (int on_device = 0; on_device <= 1; on_device++) {
        m.g.layer_done_on_device = on_device;
        syncs = hooks = syncs_at_first_hook = 0;
        graph_backward(&m.g, 2);
        assert_int_equal(hooks, m.g.nlayers);
        // MPI: a wait before every hook and one at the end; NCCL: the one at the end only
        assert_int_equal(syncs, on_device ? 1 : m.g.nlayers + 1);
        assert_int_equal(syncs_at_first_hook, on_device ? 0 : 1);
    }
    m.g.layer_done = NULL;
    tl_model_free(&m);
}

static void test_nccl_table_loads(void **state) {
    (void)state;
    char msg[512] = "";
    gl_devcomm *c = devcomm_open(msg, sizeof msg);
    assert_null(c);  // no CUDA backend is bound in this test
    print_message("devcomm_open: %s\n", msg);
    if (!GALLEY_HAVE_CUDA) {
        assert_non_null(strstr(msg, "built without CUDA"));
    } else if (!strstr(msg, "cannot load libnccl.so.2")) {
        assert_null(strstr(msg, " has no "));  // a symbol missing from the table
        assert_non_null(strstr(msg, "loaded, but no GPU is bound"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_gpus_use_nccl),
        cmocka_unit_test(test_shared_gpu_keeps_mpi),
        cmocka_unit_test(test_each_reason_named),
        cmocka_unit_test(test_backward_waits_only_for_host_hooks),
        cmocka_unit_test(test_nccl_table_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
