// test_cuda_transformer.c: the CUDA backend's transformer kernels against the CPU backend's, as
// test_cuda_ops.c does for the others (cuda_twin.h: the same inputs on both, overwritten outputs
// starting as NaN): attention forward and backward (with the causal mask, attention dropout, T
// not a multiple of the tiles), the token ops (patch_rearrange, row_sum, row_spread, row_scale)
// and the relative L2 loss. Pure rearrangements must be bitwise equal, sums within the fp32 sum
// tolerance. Without a GPU it exits 77: skipped (tests/gpu/run.sh runs it when one is lent).
#include "testlib.h"

#include "cuda_twin.h"

static void attention_case(const backends *b, int64_t n, int64_t t, int64_t h, int64_t e, int causal, float rate) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "attention n=%lld t=%lld h=%lld e=%lld causal=%d dropout=%g", (long long)n,
             (long long)t, (long long)h, (long long)e, causal, rate);
    const int64_t rows = n * t, d = h * e;
    const float scale = 1.0f / sqrtf((float)e);
    const uint64_t seed = 11, step = 3, base = 1000;
    twin qkv = twin_uniform(b, rows * 3 * d, -1, 1, 200), y = twin_const(b, rows * d, NAN),
         lse = twin_const(b, n * h * t, NAN);
    b->cpu->attention_forward(n, t, h, e, scale, causal, rate, seed, step, base, qkv.c, y.c, lse.c);
    b->gpu->attention_forward(n, t, h, e, scale, causal, rate, seed, step, base, qkv.g, y.g, lse.g);
    b->gpu->sync();
    expect_sum(ctx, "y", y.g, y.c, rows * d, t * e);
    expect_sum(ctx, "lse", lse.g, lse.c, n * h * t, t * e);
    twin dy = twin_uniform(b, rows * d, -1, 1, 201), dqkv = twin_const(b, rows * 3 * d, NAN),
         work = twin_const(b, n * h * t, NAN);
    b->cpu->attention_backward(n, t, h, e, scale, causal, rate, seed, step, base, qkv.c, y.c, lse.c, dy.c, dqkv.c,
                               work.c);
    b->gpu->attention_backward(n, t, h, e, scale, causal, rate, seed, step, base, qkv.g, y.g, lse.g, dy.g, dqkv.g,
                               work.g);
    b->gpu->sync();
    expect_sum(ctx, "dqkv", dqkv.g, dqkv.c, rows * 3 * d, t * e);
    twin_free(b, &qkv), twin_free(b, &y), twin_free(b, &lse), twin_free(b, &dy), twin_free(b, &dqkv),
        twin_free(b, &work);
}

static void test_attention(void **state) {
    const backends *b = *state;
    attention_case(b, 2, 7, 2, 16, 0, 0.0f);
    attention_case(b, 1, 65, 3, 64, 1, 0.0f);
    attention_case(b, 2, 130, 1, 48, 0, 0.0f);
    attention_case(b, 1, 200, 2, 17, 1, 0.25f);  // dropout: both draw the same elements
    attention_case(b, 3, 1, 2, 32, 0, 0.0f);
    attention_case(b, 70000, 2, 1, 2, 1, 0.1f);  // a batch above 65535 (it was gridDim.z: no launch)
}

static void test_patch_rearrange(void **state) {
    const backends *b = *state;
    const struct {
        int64_t n, c, in[3];
        int p[3];
    } cases[] = {{2, 3, {1, 8, 12}, {1, 2, 2}}, {1, 5, {1, 6, 9}, {1, 3, 3}}, {2, 2, {4, 4, 6}, {2, 2, 2}}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int c_last = 0; c_last <= 1; c_last++)
            for (int to_rows = 0; to_rows <= 1; to_rows++)
                for (int acc = 0; acc <= 1; acc++) {
                    char ctx[128];
                    snprintf(ctx, sizeof ctx, "patch_rearrange case %zu c_last=%d to_rows=%d accumulate=%d", ci,
                             c_last, to_rows, acc);
                    int64_t count = cases[ci].n * cases[ci].c * cases[ci].in[0] * cases[ci].in[1] * cases[ci].in[2];
                    twin src = twin_uniform(b, count, -1, 1, 210);
                    twin dst = acc ? twin_uniform(b, count, -1, 1, 211) : twin_const(b, count, NAN);
                    b->cpu->patch_rearrange(cases[ci].n, cases[ci].c, cases[ci].in, cases[ci].p, c_last, to_rows, acc,
                                            src.c, dst.c);
                    b->gpu->patch_rearrange(cases[ci].n, cases[ci].c, cases[ci].in, cases[ci].p, c_last, to_rows, acc,
                                            src.g, dst.g);
                    b->gpu->sync();
                    expect_bitwise(ctx, "dst", dst.g, dst.c, count);
                    twin_free(b, &src), twin_free(b, &dst);
                }
}

static void test_row_ops(void **state) {
    const backends *b = *state;
    const int64_t cases[][4] = {{1, 16, 4050, 4050}, {4, 65, 192, 192}, {3, 5, 7, 21}};  // n, m, len, stride
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int acc = 0; acc <= 1; acc++) {
            int64_t n = cases[ci][0], m = cases[ci][1], len = cases[ci][2], stride = cases[ci][3];
            char ctx[128];
            snprintf(ctx, sizeof ctx, "row ops n=%lld m=%lld len=%lld stride=%lld accumulate=%d", (long long)n,
                     (long long)m, (long long)len, (long long)stride, acc);
            twin rows = twin_uniform(b, n * m * stride, -1, 1, 220);
            twin sum = acc ? twin_uniform(b, n * len, -1, 1, 221) : twin_const(b, n * len, NAN);
            b->cpu->row_sum(n, m, len, 0.5f, rows.c, stride, sum.c, acc);
            b->gpu->row_sum(n, m, len, 0.5f, rows.g, stride, sum.g, acc);
            b->gpu->sync();
            expect_sum(ctx, "row_sum", sum.g, sum.c, n * len, m);
            twin spread = twin_uniform(b, n * m * stride, -1, 1, 222);  // the gaps must stay as they are
            b->cpu->row_spread(n, m, len, 0.25f, sum.c, spread.c, stride, acc);
            b->gpu->row_spread(n, m, len, 0.25f, sum.g, spread.g, stride, acc);
            b->gpu->sync();
            expect_elem(ctx, "row_spread", spread.g, spread.c, n * m * stride);
            twin s = twin_uniform(b, n * m, 0, 2, 223), scaled = acc ? twin_uniform(b, n * m * stride, -1, 1, 224)
                                                                      : twin_const(b, n * m * stride, NAN);
            b->cpu->row_scale(n * m, stride, s.c, rows.c, scaled.c, acc);
            b->gpu->row_scale(n * m, stride, s.g, rows.g, scaled.g, acc);
            b->gpu->sync();
            expect_elem(ctx, "row_scale", scaled.g, scaled.c, n * m * stride);
            twin_free(b, &rows), twin_free(b, &sum), twin_free(b, &spread), twin_free(b, &s), twin_free(b, &scaled);
        }
}

static void test_l2_relative(void **state) {
    const backends *b = *state;
    const int64_t cases[][2] = {{16, 20 * 45 * 90}, {64, 7}, {1, 1}};  // units, len
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t units = cases[ci][0], len = cases[ci][1], count = units * len;
        char ctx[64];
        snprintf(ctx, sizeof ctx, "l2_relative units=%lld len=%lld", (long long)units, (long long)len);
        twin pred = twin_uniform(b, count, -2, 2, 230), d = twin_const(b, count, NAN);
        float *target = malloc(sizeof(float) * (size_t)count);  // host, on both backends
        if (!target) abort();
        tl_fill_uniform(target, count, -2, 2, 231);
        double lc = b->cpu->l2_relative_loss(units, len, pred.c, target, NULL);
        double lg = b->gpu->l2_relative_loss(units, len, pred.g, target, NULL);
        expect_loss(ctx, "loss without dpred", lg, lc);
        lc = b->cpu->l2_relative_loss(units, len, pred.c, target, d.c);
        lg = b->gpu->l2_relative_loss(units, len, pred.g, target, d.g);
        expect_loss(ctx, "loss with dpred", lg, lc);
        b->gpu->sync();
        expect_close(ctx, "dpred", d.g, d.c, count, RTOL_NORM, max_abs(d.c, count));
        free(target);
        twin_free(b, &pred), twin_free(b, &d);
    }
}

CUDA_TWIN_MAIN("test_cuda_transformer", cmocka_unit_test_prestate(test_attention, &be),
               cmocka_unit_test_prestate(test_patch_rearrange, &be), cmocka_unit_test_prestate(test_row_ops, &be),
               cmocka_unit_test_prestate(test_l2_relative, &be), )
