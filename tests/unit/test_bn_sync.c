// test_bn_sync.c: synchronised batch norm (distributed.sync_batchnorm) on the CPU kernels. Two
// "ranks" are two threads, each running the kernel on its half of a batch, with a reducer that
// sums their buffers at a barrier, as MPI_Allreduce would. Their outputs, input gradients and
// running statistics must equal one kernel call on the whole batch; their dgamma/dbeta (each
// rank's own sums, which the gradient allreduce adds) must sum to the whole batch's.
#include <pthread.h>

#include "testlib.h"

enum { N = 6, C = 3, S = 10 };

typedef struct {
    pthread_barrier_t bar;
    double *slot[2];
} fake_world;

typedef struct {
    fake_world *w;
    int rank;
} fake_rank;

// The reducer: both ranks publish, meet, add in rank order, meet again.
static void fake_sum(void *ctx, double *buf, int count) {
    fake_rank *r = ctx;
    r->w->slot[r->rank] = buf;
    pthread_barrier_wait(&r->w->bar);
    double sum[2 * C + 1];
    for (int i = 0; i < count; i++) sum[i] = r->w->slot[0][i] + r->w->slot[1][i];
    pthread_barrier_wait(&r->w->bar);
    memcpy(buf, sum, sizeof(double) * (size_t)count);
}

typedef struct {
    const float *x, *dy, *gamma, *beta;
    float running[2 * C + 1], saved[2 * C + 1];
    float y[N * C * S], dx[N * C * S], dgamma[C], dbeta[C];
    fake_rank rank;
    gl_reducer red;
} half;

static void *run_half(void *arg) {
    half *h = arg;
    const gl_backend *be = backend_cpu();
    const int n = N / 2;
    be->batch_norm_forward(n, C, S, h->x, h->gamma, h->beta, 1e-5f, 1, 0.1f, h->running, h->saved, h->y, &h->red);
    be->batch_norm_backward(n, C, S, h->x, h->dy, h->gamma, h->saved, h->dgamma, h->dbeta, h->dx, &h->red);
    return NULL;
}

static void test_two_ranks_equal_one(void **state) {
    (void)state;
    const gl_backend *be = backend_cpu();
    be->set_threads(1);
    float x[N * C * S], dy[N * C * S], gamma[C] = {1.5f, 0.5f, -1.0f}, beta[C] = {0.1f, -0.2f, 0.3f};
    for (int i = 0; i < N * C * S; i++) x[i] = (float)sin(0.37 * i) * 2 + (float)(i % 7) * 0.1f, dy[i] = (float)cos(0.11 * i);

    // One process, the whole batch.
    float running[2 * C + 1] = {0}, saved[2 * C + 1], y[N * C * S], dx[N * C * S] = {0}, dgamma[C], dbeta[C];
    be->batch_norm_forward(N, C, S, x, gamma, beta, 1e-5f, 1, 0.1f, running, saved, y, NULL);
    be->batch_norm_backward(N, C, S, x, dy, gamma, saved, dgamma, dbeta, dx, NULL);

    // Two ranks, half each.
    fake_world w;
    pthread_barrier_init(&w.bar, NULL, 2);
    half h[2];
    memset(h, 0, sizeof h);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        size_t off = (size_t)r * (N / 2) * C * S;
        h[r].x = x + off, h[r].dy = dy + off, h[r].gamma = gamma, h[r].beta = beta;
        h[r].rank = (fake_rank){&w, r};
        h[r].red = (gl_reducer){fake_sum, &h[r].rank};
        assert_int_equal(pthread_create(&th[r], NULL, run_half, &h[r]), 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&w.bar);

    for (int r = 0; r < 2; r++) {
        size_t off = (size_t)r * (N / 2) * C * S;
        for (int i = 0; i < (N / 2) * C * S; i++) {
            assert_float_equal(h[r].y[i], y[off + i], 1e-5);
            assert_float_equal(h[r].dx[i], dx[off + i], 1e-5);
        }
        for (int i = 0; i < 2 * C + 1; i++) assert_float_equal(h[r].running[i], running[i], 1e-6);
    }
    for (int c = 0; c < C; c++) {
        assert_float_equal(h[0].dgamma[c] + h[1].dgamma[c], dgamma[c], 1e-4);
        assert_float_equal(h[0].dbeta[c] + h[1].dbeta[c], dbeta[c], 1e-4);
        // Each rank's share alone is not the whole: the test would pass vacuously otherwise.
        assert_true(fabsf(h[0].dbeta[c] - dbeta[c]) > 1e-3f);
    }
    // Evaluation ignores the reducer: running statistics normalise.
    float ye[N * C * S], ye2[N * C * S];
    be->batch_norm_forward(N, C, S, x, gamma, beta, 1e-5f, 0, 0.1f, running, saved, ye, NULL);
    be->batch_norm_forward(N, C, S, x, gamma, beta, 1e-5f, 0, 0.1f, running, saved, ye2, &h[0].red);
    assert_memory_equal(ye, ye2, sizeof ye);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_ranks_equal_one)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
