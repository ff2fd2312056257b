// test_device_fits.c: the GPU memory check of the plan before allocation (train_device_fits).
// A fake device backend reports free and total memory; the check must pass what fits, refuse
// what does not with the numbers and the way out, and leave host-memory backends to the host
// check. Ranks sharing a GPU are told by its UUID (train_gpu_sharing), not by device counts: a
// site hook may show each rank only its own GPU.
#include "testlib.h"

#include "galley/check.h"
#include "train/train_internal.h"

#define GIB ((size_t)1 << 30)

static struct {
    gl_backend be;
    size_t free_b, total, reserve;
} fk;

static void fk_mem_info(size_t *free_b, size_t *total, size_t *reserve, unsigned char uuid[16], char *name,
                        size_t len) {
    *free_b = fk.free_b, *total = fk.total, *reserve = fk.reserve;
    memset(uuid, 0xab, 16);
    snprintf(name, len, "GPU 0 (Fake H200)");
}

static const gl_backend *fake_gpu(size_t free_b, size_t reserve) {
    fk.be = *backend_cpu();
    fk.be.name = "fake-gpu";
    fk.be.device = 1;
    fk.be.mem_info = fk_mem_info;
    fk.free_b = free_b, fk.total = 141 * GIB, fk.reserve = reserve;
    return &fk.be;
}

// Runs the check on one process; *msg gets what it printed (caller frees).
static int check(const recipe_t *r, const gl_backend *be, size_t bytes, char **msg) {
    gl_dist d = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    tl_stream s;
    FILE *err = tl_stream_open(&s);
    int rc = train_device_fits(r, be, &d, bytes, err);
    *msg = tl_stream_close(&s);
    return rc;
}

static void test_gpu_plan_fits_or_is_refused(void **st) {
    (void)st;
    recipe_t r;
    tl_recipe(&r, "data:\n  synthetic: {kind: blobs}\nmodel:\n  layers:\n    - {type: dense, units: 2}\n"
                  "optimizer: {lr: 0.1}\n", 0, NULL);
    char *msg;
    // Fits: 3 GiB + 1 GiB of reserve in 10 GiB free. Nothing said.
    assert_int_equal(check(&r, fake_gpu(10 * GIB, GIB), 3 * GIB, &msg), GL_EXIT_OK);
    assert_string_equal(msg, "");
    free(msg);
    // 3 + 1 GiB in 3.5 GiB free: refused, with the numbers, the GPU and the way out.
    assert_int_equal(check(&r, fake_gpu(7 * GIB / 2, GIB), 3 * GIB, &msg), GL_EXIT_USAGE);
    assert_non_null(strstr(msg, "needs 4.00 GiB of GPU memory"));
    assert_non_null(strstr(msg, "optimizer 3.00 GiB + up to 1.00 GiB"));
    assert_non_null(strstr(msg, "GPU 0 (Fake H200) has 3.50 GiB free of 141.00 GiB"));
    assert_non_null(strstr(msg, "reduce train.batch_size"));
    assert_null(strstr(msg, "ranks that share it"));
    free(msg);
    // Host memory: the training loop's own host check applies, not this one.
    assert_int_equal(check(&r, backend_cpu(), (size_t)1 << 60, &msg), GL_EXIT_OK);
    assert_string_equal(msg, "");
    free(msg);
    recipe_free(&r);
}

// Sharing by UUID: four ranks each shown one GPU (CUDA_VISIBLE_DEVICES per rank) on four GPUs
// share nothing; two ranks wrapped onto one GPU share it; CPU ranks share with no one.
static void test_ranks_sharing_a_gpu_are_told_by_uuid(void **st) {
    (void)st;
    train_gpu_id all[6];
    memset(all, 0, sizeof all);
    for (int r = 0; r < 4; r++) all[r].gpu = 1, all[r].uuid[0] = (unsigned char)(r + 1);
    for (int r = 0; r < 4; r++) assert_int_equal(train_gpu_sharing(all, 4, r), 1);
    all[3].uuid[0] = 2;  // rank 3 on rank 1's GPU
    assert_int_equal(train_gpu_sharing(all, 4, 1), 2);
    assert_int_equal(train_gpu_sharing(all, 4, 3), 2);
    assert_int_equal(train_gpu_sharing(all, 4, 0), 1);
    all[4].gpu = 0, all[5].gpu = 0;  // two CPU ranks: all zero UUIDs, but no GPU
    assert_int_equal(train_gpu_sharing(all, 6, 4), 0);
    assert_int_equal(train_gpu_sharing(all, 6, 2), 1);
    memcpy(all[5].uuid, all[2].uuid, 16), all[5].gpu = 1;
    assert_int_equal(train_gpu_sharing(all, 6, 2), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_plan_fits_or_is_refused),
        cmocka_unit_test(test_ranks_sharing_a_gpu_are_told_by_uuid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
