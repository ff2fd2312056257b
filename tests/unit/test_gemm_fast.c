// test_gemm_fast.c: galley's own matrix product (cpu_gemm_fast.c) and the dense layer on it.
//
// cpu_gemm_fast promises each element of C as one fmaf chain in k order from its init (c when
// acc, else bias[j] or 0), the activation applied last (then a residual added, where given), on
// either instruction set and at any
// thread count. A scalar model of that chain must match bit for bit, for every transpose
// combination, shapes with partial tiles (the last row tile and column block moved back over
// their neighbours), depths across the K blocks (256), at 1 and 2 threads, on AVX-512 and AVX2
// where the CPU has them. Every operand sits against a page no one may read (after it, or
// before it), so no vector reads past an operand, and C's padding columns must stay untouched.
#include "testlib.h"

#include <cblas.h>
#include <omp.h>
#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"

static void fill(float *x, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(key, RNG_TEST, 0, i) - 1.0f;
}

typedef struct {
    bool ta, tb, acc, bias;
    int act;  // 0 none, 1 relu, 2 leaky_relu (slope 0.01)
    bool res;  // a residual laid out as c added as it is stored (cpu_store_act.res)
    int64_t m, n, k;
} gemm_case;

// The chain cpu_gemm_fast documents, element by element.
static void model(const gemm_case *g, const float *a, int64_t lda, const float *b, int64_t ldb, const float *bias,
                  const float *res, float *c, int64_t ldc) {
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float s = g->acc ? c[i * ldc + j] : g->bias ? bias[j] : 0.0f;
            for (int64_t q = 0; q < g->k; q++) {
                const float av = g->ta ? a[q * lda + i] : a[i * lda + q], bv = g->tb ? b[j * ldb + q] : b[q * ldb + j];
                s = fmaf(av, bv, s);
            }
            if (g->act == 1) s = s > 0.0f ? s : 0.0f;
            if (g->act == 2) s = s > 0.0f ? s : 0.01f * s;
            if (g->res) s += res[i * ldc + j];
            c[i * ldc + j] = s;
        }
}

// One case on one instruction set at `threads` threads: bitwise against the model, C's padding
// untouched. Returns whether cpu_gemm_fast took it.
static bool run_case(int isa, const gemm_case *g, int threads, int at_start, uint64_t key) {
    const int64_t lda = (g->ta ? g->m : g->k) + 3, ldb = (g->tb ? g->k : g->n) + 5, ldc = g->n + 2;
    const int64_t na = (g->ta ? g->k : g->m) * lda - 3, nb = (g->tb ? g->n : g->k) * ldb - 5, nc = g->m * ldc;
    // the residual's last row ends at the last column (no padding after it): against the guard page
    const int64_t nr = g->m * ldc - 2;
    tl_guard gm[5];
    float *a = tl_guarded((size_t)na, at_start, &gm[0]), *b = tl_guarded((size_t)nb, at_start, &gm[1]);
    float *bias = tl_guarded((size_t)g->n, at_start, &gm[2]), *c = tl_guarded((size_t)nc, at_start, &gm[3]);
    float *res = tl_guarded((size_t)nr, at_start, &gm[4]);
    float *want = malloc(sizeof(float) * (size_t)nc);
    fill(a, (size_t)na, key), fill(b, (size_t)nb, key + 1);
    fill(bias, (size_t)g->n, key + 2), fill(c, (size_t)nc, key + 3), fill(res, (size_t)nr, key + 4);
    memcpy(want, c, sizeof(float) * (size_t)nc);
    model(g, a, lda, b, ldb, bias, res, want, ldc);
    const cpu_store_act act = {.on = g->act != 0, .act = g->act == 2 ? ACT_LEAKY_RELU : ACT_RELU, .slope = 0.01f,
                               .res = g->res ? res : NULL};
    omp_set_num_threads(threads);
    const bool took = cpu_gemm_fast_isa(isa, g->ta, g->tb, g->m, g->n, g->k, a, lda, b, ldb, g->acc,
                                        g->bias ? bias : NULL, act, c, ldc, (g->m + g->k) % 2 == 0);
    omp_set_num_threads(2);
    if (took) {
        for (int64_t e = 0; e < nc; e++)
            if (memcmp(&c[e], &want[e], sizeof(float)) != 0)
                fail_msg("isa %d, ta %d tb %d acc %d bias %d act %d res %d, %ld x %ld x %ld, %d threads: c[%ld][%ld] = "
                         "%.9g, the chain gives %.9g",
                         isa, g->ta, g->tb, g->acc, g->bias, g->act, g->res, (long)g->m, (long)g->n, (long)g->k, threads,
                         (long)(e / ldc), (long)(e % ldc), (double)c[e], (double)want[e]);
    }
    free(want);
    for (int i = 0; i < 5; i++) tl_guard_free(&gm[i]);
    return took;
}

static void test_gemm_fast_sums_in_the_documented_order(void **state) {
    (void)state;
    const int isa_here = cpu_conv_fast_isa();
    if (isa_here == CPU_ISA_NONE) {
        print_message("no AVX-512 or AVX2+FMA here: cpu_gemm_fast is not used\n");
        gemm_case g = {.m = 64, .n = 64, .k = 64};
        assert_false(run_case(CPU_ISA_NONE, &g, 1, 0, 1));
        return;
    }
    const int64_t ms[] = {12, 13, 31, 200, 385}, ns[] = {32, 33, 47, 130}, ks[] = {1, 7, 256, 257, 600};
    int cases = 0;
    for (int isa = CPU_ISA_AVX2; isa <= isa_here; isa++)
        for (int t = 0; t < 4; t++)
            for (int x = 0; x < 5; x++)
                for (int y = 0; y < 4; y++)
                    for (int z = 0; z < 5; z++) {
                        const int v = (x + y + z + t) % 4;
                        gemm_case g = {.ta = t & 1, .tb = t >> 1, .acc = v == 1, .bias = v == 2, .act = (x + z) % 3,
                                       .res = (x + 2 * y + z) % 3 == 0, .m = ms[x], .n = ns[y], .k = ks[z]};
                        const uint64_t key = (uint64_t)(((isa * 4 + t) * 5 + x) * 4 + y) * 5 + z;
                        assert_true(run_case(isa, &g, 1 + (x + y) % 2, (int)(key % 2), key * 8));
                        cases++;
                    }
    print_message("%d products matched their fmaf chains bit for bit (%s)\n", cases,
                  isa_here == CPU_ISA_AVX512 ? "AVX-512 and AVX2" : "AVX2");
}

// A forward over fewer rows than columns (cpu_gemm_fast.c's gf_fwd_t: computed transposed, on
// AVX-512): its fmaf chains bit for bit, with and without bias and activation, rows and columns
// past whole tiles (the last block and tile moved back), at 1 and 2 threads.
static void test_gemm_fast_few_rows_forward(void **state) {
    (void)state;
    if (cpu_conv_fast_isa() == CPU_ISA_NONE) skip();
    const int64_t ms[] = {32, 45, 64, 128}, ns[] = {130, 512}, ks[] = {1, 200, 513};
    int cases = 0;
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 2; y++)
            for (int z = 0; z < 3; z++) {
                const gemm_case g = {.tb = true, .bias = (x + z) % 2 == 0, .act = (x + y + z) % 3,
                                     .res = (x + y) % 3 == 1, .m = ms[x], .n = ns[y], .k = ks[z]};
                assert_true(run_case(cpu_conv_fast_isa(), &g, 1 + (x + y + z) % 2, 0, 31 + (uint64_t)cases));
                cases++;
            }
}

// The same product at 1 and 2 threads: the same bits (the model test runs each case at one count).
static void test_gemm_fast_same_bits_at_any_thread_count(void **state) {
    (void)state;
    if (cpu_conv_fast_isa() == CPU_ISA_NONE) skip();
    const gemm_case g = {.tb = true, .bias = true, .act = 1, .m = 385, .n = 130, .k = 600};
    for (int threads = 1; threads <= 3; threads++) assert_true(run_case(cpu_conv_fast_isa(), &g, threads, 0, 77));
}

// Below a whole tile (M < 12 or N < 32) it declines, having written nothing.
static void test_gemm_fast_declines_small_products(void **state) {
    (void)state;
    float a[11 * 40], b[40 * 40], c[11 * 40];
    fill(a, 11 * 40, 5), fill(b, 40 * 40, 6);
    for (int i = 0; i < 11 * 40; i++) c[i] = 7.0f;
    const cpu_store_act none = {0};
    assert_false(cpu_gemm_fast(false, false, 11, 40, 40, a, 40, b, 40, false, NULL, none, c, 40, false));
    assert_false(cpu_gemm_fast(false, false, 12, 31, 40, a, 40, b, 40, false, NULL, none, c, 31, false));
    assert_false(
        cpu_gemm_fast_isa(CPU_ISA_NONE, false, false, 12, 32, 4, a, 40, b, 40, false, NULL, none, c, 32, false));
    for (int i = 0; i < 11 * 40; i++) assert_true(c[i] == 7.0f);
}

// cpu_gemm_depth (cpu_gemm.c: a weight gradient over many rows): the part count is the shape's,
// and C is ((P0 + P1) + P2) ... of serial sgemms over the parts, bit for bit, at 1, 2 and 3
// threads and from inside a parallel region, for every transpose, with parts that do not divide
// k (the last part shorter); C's padding stays untouched.
static void test_gemm_depth_adds_serial_parts_in_order(void **state) {
    (void)state;
    assert_int_equal(cpu_gemm_depth_parts(768, 192, 4096), 4);  // vit-tiny's fc1 at batch 64
    assert_int_equal(cpu_gemm_depth_parts(768, 192, 2047), 1);  // under two parts of 1024: by rows
    assert_int_equal(cpu_gemm_depth_parts(10, 10, 100000), 8);  // at most 8
    assert_int_equal(cpu_gemm_depth_parts(2048, 4096, 8192), 2);  // scratch over 32 MiB: fewer parts
    assert_int_equal(cpu_gemm_depth_parts(2049, 4096, 8192), 1);
    const int64_t shapes[][3] = {{13, 40, 2101}, {24, 33, 5003}, {7, 9, 9001}};  // 2, 4 and 8 parts
    const int saved = omp_get_max_threads();
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 4; t++) {
            const bool ta = t & 1, tb = t >> 1;
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], parts = cpu_gemm_depth_parts(m, n, k);
            assert_int_equal(parts, s == 0 ? 2 : s == 1 ? 4 : 8);
            const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2, len = (k + parts - 1) / parts;
            float *a = malloc(sizeof(float) * (size_t)((ta ? k : m) * lda));
            float *b = malloc(sizeof(float) * (size_t)((tb ? n : k) * ldb));
            float *want = malloc(sizeof(float) * (size_t)(m * ldc)), *c = malloc(sizeof(float) * (size_t)(m * ldc));
            float *pp = malloc(sizeof(float) * (size_t)(m * n));
            fill(a, (size_t)((ta ? k : m) * lda), 60 + (uint64_t)(4 * s + t));
            fill(b, (size_t)((tb ? n : k) * ldb), 70 + (uint64_t)(4 * s + t));
            for (int64_t e = 0; e < m * ldc; e++) want[e] = 7.0f;
            omp_set_num_threads(1);  // OpenBLAS's OpenMP build: serial calls outside a parallel region
            for (int64_t p = 0; p < parts; p++) {
                const int64_t o = p * len, kp = k - o < len ? k - o : len;
                memset(pp, 0, sizeof(float) * (size_t)(m * n));
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                            (blasint)n, (blasint)kp, 1.0f, ta ? a + o * lda : a + o, (blasint)lda,
                            tb ? b + o : b + o * ldb, (blasint)ldb, 1.0f, pp, (blasint)n);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++)
                        want[i * ldc + j] = p == 0 ? pp[i * n + j] : want[i * ldc + j] + pp[i * n + j];
            }
            for (int threads = 1; threads <= 4; threads++) {  // 4: 2 threads, called inside their region
                for (int64_t e = 0; e < m * ldc; e++) c[e] = 7.0f;
                omp_set_num_threads(threads == 4 ? 2 : threads);
                if (threads == 4) {
#pragma omp parallel
#pragma omp single
                    cpu_gemm_depth(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
                } else {
                    cpu_gemm_depth(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
                }
                if (memcmp(c, want, sizeof(float) * (size_t)(m * ldc)) != 0)
                    fail_msg("ta %d tb %d, %ld x %ld x %ld, %d threads: not the parts' sum in order", ta, tb, (long)m,
                             (long)n, (long)k, threads);
            }
            for (int64_t i = 0; i < m; i++)  // and the product it is meant to be
                for (int64_t j = 0; j < n; j++) {
                    double r = 0.0;
                    for (int64_t q = 0; q < k; q++)
                        r += (double)(ta ? a[q * lda + i] : a[i * lda + q]) * (tb ? b[j * ldb + q] : b[q * ldb + j]);
                    assert_true(fabs(c[i * ldc + j] - r) <= 1e-5 * (1.0 + fabs(r)) + 1e-6 * k);
                }
            free(a), free(b), free(want), free(c), free(pp);
        }
    omp_set_num_threads(saved);
}

// The dense layer's kernels on it against plain double loops: y = x W^T + b, dW = dy^T x,
// db = sum dy, dx += dy W, at a batch (128, the MLP's), one past 1024 rows and one past 2048
// (vit-tiny's tokens: the weight gradient then stays with OpenBLAS, by rows, then in parts of the
// rows: cpu_gemm_depth), and a width under a tile (10 units: OpenBLAS).
static void test_dense_kernels_match_double_loops(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{128, 784, 512}, {1100, 40, 64}, {2100, 40, 64}, {128, 64, 10}, {13, 33, 35}};
    for (int s = 0; s < 5; s++) {
        const int64_t n = shapes[s][0], k = shapes[s][1], u = shapes[s][2];
        float *x = malloc(sizeof(float) * (size_t)(n * k)), *w = malloc(sizeof(float) * (size_t)(u * k));
        float *b = malloc(sizeof(float) * (size_t)u), *y = malloc(sizeof(float) * (size_t)(n * u));
        float *dy = malloc(sizeof(float) * (size_t)(n * u)), *dw = malloc(sizeof(float) * (size_t)(u * k));
        float *db = malloc(sizeof(float) * (size_t)u), *dx = malloc(sizeof(float) * (size_t)(n * k));
        fill(x, (size_t)(n * k), 10 + s), fill(w, (size_t)(u * k), 20 + s), fill(b, (size_t)u, 30 + s);
        fill(dy, (size_t)(n * u), 40 + s), fill(dx, (size_t)(n * k), 50 + s);
        float *dx0 = malloc(sizeof(float) * (size_t)(n * k));
        memcpy(dx0, dx, sizeof(float) * (size_t)(n * k));
        cpu_dense_forward(n, k, u, x, w, b, y);
        cpu_dense_backward(n, k, u, x, w, dy, dw, db, dx);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < u; j++) {
                double r = b[j];
                for (int64_t q = 0; q < k; q++) r += (double)x[i * k + q] * w[j * k + q];
                assert_true(fabs(y[i * u + j] - r) <= 1e-5 * (1.0 + fabs(r)) + 1e-6 * k);
            }
        for (int64_t j = 0; j < u; j++) {
            float rb = 0.0f;  // the bias gradient: a float sum over rows in order, whatever the ISA
            for (int64_t i = 0; i < n; i++) rb += dy[i * u + j];
            assert_memory_equal(&db[j], &rb, sizeof(float));
            for (int64_t q = 0; q < k; q++) {
                double r = 0.0;
                for (int64_t i = 0; i < n; i++) r += (double)dy[i * u + j] * x[i * k + q];
                assert_true(fabs(dw[j * k + q] - r) <= 1e-5 * (1.0 + fabs(r)) + 1e-6 * n);
            }
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t q = 0; q < k; q++) {
                double r = dx0[i * k + q];
                for (int64_t j = 0; j < u; j++) r += (double)dy[i * u + j] * w[j * k + q];
                assert_true(fabs(dx[i * k + q] - r) <= 1e-5 * (1.0 + fabs(r)) + 1e-6 * u);
            }
        free(x), free(w), free(b), free(y), free(dy), free(dw), free(db), free(dx), free(dx0);
    }
}

// The fused activation (the graph's dense -> relu / leaky_relu) gives the two passes' bits, on
// galley's product and on the OpenBLAS fallback (10 units, under a tile).
static void test_dense_forward_act_is_the_two_passes(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{128, 100, 64}, {128, 64, 10}};
    for (int s = 0; s < 2; s++)
        for (int a = 0; a < 2; a++) {
            const int64_t n = shapes[s][0], k = shapes[s][1], u = shapes[s][2];
            const gl_act act = a ? ACT_LEAKY_RELU : ACT_RELU;
            float *x = malloc(sizeof(float) * (size_t)(n * k)), *w = malloc(sizeof(float) * (size_t)(u * k));
            float *b = malloc(sizeof(float) * (size_t)u), *y = malloc(sizeof(float) * (size_t)(n * u));
            float *z = malloc(sizeof(float) * (size_t)(n * u));
            fill(x, (size_t)(n * k), 60 + s), fill(w, (size_t)(u * k), 70 + s), fill(b, (size_t)u, 80 + s);
            cpu_dense_forward(n, k, u, x, w, b, y);
            cpu_act_forward(act, 0.1f, n * u, y, y);
            cpu_dense_forward_act(n, k, u, x, w, b, z, act, 0.1f);
            int zeros = 0;
            for (int64_t e = 0; e < n * u; e++) {
                assert_memory_equal(&y[e], &z[e], sizeof(float));
                zeros += z[e] == 0.0f;
            }
            if (!a) assert_true(zeros > n * u / 4);  // relu did cut
            free(x), free(w), free(b), free(y), free(z);
        }
}

// The fused residual (the graph's dense -> add) gives the bits of the product and then the add
// layer's sum, on galley's product (a partial last tile and column block), on the OpenBLAS
// fallback (10 units, under a tile) and in two passes for fewer rows than units (the transposed
// forward, then the add, threaded at this size), at 1 and 2 threads.
static void test_dense_forward_res_is_the_add(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{131, 100, 70}, {128, 64, 10}, {128, 64, 600}};
    for (int s = 0; s < 3; s++)
        for (int threads = 1; threads <= 2; threads++) {
            const int64_t n = shapes[s][0], k = shapes[s][1], u = shapes[s][2];
            float *x = malloc(sizeof(float) * (size_t)(n * k)), *w = malloc(sizeof(float) * (size_t)(u * k));
            float *b = malloc(sizeof(float) * (size_t)u), *y = malloc(sizeof(float) * (size_t)(n * u));
            float *r = malloc(sizeof(float) * (size_t)(n * u)), *z = malloc(sizeof(float) * (size_t)(n * u));
            fill(x, (size_t)(n * k), 90 + s), fill(w, (size_t)(u * k), 91 + s), fill(b, (size_t)u, 92 + s);
            fill(r, (size_t)(n * u), 93 + s);
            omp_set_num_threads(threads);
            cpu_dense_forward(n, k, u, x, w, b, y);
            for (int64_t e = 0; e < n * u; e++) y[e] = y[e] + r[e];
            cpu_dense_forward_res(n, k, u, x, w, b, r, z);
            omp_set_num_threads(2);
            assert_memory_equal(y, z, sizeof(float) * (size_t)(n * u));
            free(x), free(w), free(b), free(y), free(r), free(z);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_fast_sums_in_the_documented_order),
        cmocka_unit_test(test_gemm_fast_same_bits_at_any_thread_count),
        cmocka_unit_test(test_gemm_fast_few_rows_forward),
        cmocka_unit_test(test_gemm_fast_declines_small_products),
        cmocka_unit_test(test_gemm_depth_adds_serial_parts_in_order),
        cmocka_unit_test(test_dense_kernels_match_double_loops),
        cmocka_unit_test(test_dense_forward_act_is_the_two_passes),
        cmocka_unit_test(test_dense_forward_res_is_the_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
