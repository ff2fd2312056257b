// test_device_fits.c: the GPU memory check of the plan before allocation (train_device_fits).
// A fake device backend reports free and total memory; the check must pass what fits, refuse
// what does not with the numbers and the way out, count the ranks of a node that share one GPU,
// and leave host-memory backends to the host check.
#include "testlib.h"

#include "galley/check.h"
#include "train/train_internal.h"

#define GIB ((size_t)1 << 30)

static struct {
    gl_backend be;
    size_t free_b, total, reserve;
    int devices;
} fk;

static void fk_mem_info(size_t *free_b, size_t *total, size_t *reserve, int *devices, char *name, size_t len) {
    *free_b = fk.free_b, *total = fk.total, *reserve = fk.reserve, *devices = fk.devices;
    snprintf(name, len, "GPU 0 (Fake H200)");
}

static const gl_backend *fake_gpu(size_t free_b, size_t reserve, int devices) {
    fk.be = *backend_cpu();
    fk.be.name = "fake-gpu";
    fk.be.device = 1;
    fk.be.mem_info = fk_mem_info;
    fk.free_b = free_b, fk.total = 141 * GIB, fk.reserve = reserve, fk.devices = devices;
    return &fk.be;
}

// Runs the check; *msg gets what it printed (caller frees).
static int check(const recipe_t *r, const gl_backend *be, int local_rank, int local_world, size_t bytes, char **msg) {
    gl_dist d = {.rank = local_rank, .world = local_world, .local_rank = local_rank, .local_world = local_world};
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
    assert_int_equal(check(&r, fake_gpu(10 * GIB, GIB, 1), 0, 1, 3 * GIB, &msg), GL_EXIT_OK);
    assert_string_equal(msg, "");
    free(msg);
    // 3 + 1 GiB in 3.5 GiB free: refused, with the numbers, the GPU and the way out.
    assert_int_equal(check(&r, fake_gpu(7 * GIB / 2, GIB, 1), 0, 1, 3 * GIB, &msg), GL_EXIT_USAGE);
    assert_non_null(strstr(msg, "needs 4.00 GiB of GPU memory"));
    assert_non_null(strstr(msg, "optimizer 3.00 GiB + up to 1.00 GiB"));
    assert_non_null(strstr(msg, "GPU 0 (Fake H200) has 3.50 GiB free of 141.00 GiB"));
    assert_non_null(strstr(msg, "reduce train.batch_size"));
    assert_null(strstr(msg, "ranks of this node"));
    free(msg);
    // Four ranks on two GPUs: local rank 1 shares GPU 1 with local rank 3, so twice the plan.
    assert_int_equal(check(&r, fake_gpu(6 * GIB, GIB, 2), 1, 4, 3 * GIB, &msg), GL_EXIT_USAGE);
    assert_non_null(strstr(msg, "needs 8.00 GiB"));
    assert_non_null(strstr(msg, "for the 2 ranks of this node that share it"));
    assert_non_null(strstr(msg, "(rank 1)"));
    free(msg);
    // Four ranks on four GPUs: one each, and 4 GiB fit in 6.
    assert_int_equal(check(&r, fake_gpu(6 * GIB, GIB, 4), 3, 4, 3 * GIB, &msg), GL_EXIT_OK);
    free(msg);
    // Three ranks on two GPUs: GPU 0 has local ranks 0 and 2, GPU 1 only rank 1.
    assert_int_equal(check(&r, fake_gpu(6 * GIB, GIB, 2), 0, 3, 3 * GIB, &msg), GL_EXIT_USAGE);
    free(msg);
    assert_int_equal(check(&r, fake_gpu(6 * GIB, GIB, 2), 1, 3, 3 * GIB, &msg), GL_EXIT_OK);
    free(msg);
    // Host memory: the training loop's own host check applies, not this one.
    assert_int_equal(check(&r, backend_cpu(), 0, 1, (size_t)1 << 60, &msg), GL_EXIT_OK);
    assert_string_equal(msg, "");
    free(msg);
    recipe_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_plan_fits_or_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
