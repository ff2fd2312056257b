// test_cuda_transformer.c: the CUDA backend's transformer kernels against the CPU backend's, as
// test_cuda_ops.c does for the others (cuda_twin.h: the same inputs on both, overwritten outputs
// starting as NaN): attention forward and backward (with the causal mask, attention dropout, T
// not a multiple of the tiles; in bf16 and fp16 the tensor-core kernels, cuda_attention_tc.cu,
// within a tolerance of the largest |cpu| and not bitwise the fp32 kernels'), the token ops (patch_rearrange, row_sum, row_spread, row_scale)
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

// max |got - want| / max |want|
static double worst_rel(const float *got, const float *want, int64_t n) {
    double d = 0.0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)got[i] - (double)want[i]));
    return d / fmax(max_abs(want, n), 1e-30);
}

// The kernels GALLEY_ATTENTION_KERNEL picks (NULL: unset, galley's).
static void attention_kernel_set(const char *k) {
    if (k) setenv("GALLEY_ATTENTION_KERNEL", k, 1);
    else unsetenv("GALLEY_ATTENTION_KERNEL");
}

// One case in the precision set now: y, lse and dqkv against the CPU within rtol of the largest
// |cpu| when tc (the tensor-core kernels must have run: not bitwise the fp32 kernels'), else
// bitwise the fp32 kernels' (the case falls back). The fp32 kernels' outputs come from the same
// GPU with GALLEY_ATTENTION_KERNEL=fp32. Where cuDNN's fused attention applies (tc, no mask, no
// dropout, a width that is a multiple of 8) it is checked the same way (cudnn), and must differ
// from galley's kernels somewhere (else it did not run); then the measured choice (measure).
static void attention_reduced_case(const backends *b, const char *prec, double rtol, int64_t n, int64_t t, int64_t h,
                                   int64_t e, int causal, float rate, bool tc) {
    char ctx[200];
    const int64_t rows = n * t, d = h * e;
    const float scale = 1.0f / sqrtf((float)e);
    const bool cudnn = tc && !causal && rate == 0.0f && e % 8 == 0 && b->gpu->set_precision;
    twin qkv = twin_uniform(b, rows * 3 * d, -1, 1, 240), dy = twin_uniform(b, rows * d, -1, 1, 241);
    twin y = twin_const(b, rows * d, NAN), lse = twin_const(b, n * h * t, NAN), dqkv = twin_const(b, rows * 3 * d, NAN),
         work = twin_const(b, n * h * t, NAN);
    float *y32 = xmalloc(sizeof(float) * (size_t)(rows * d)), *l32 = xmalloc(sizeof(float) * (size_t)(n * h * t)),
          *d32 = xmalloc(sizeof(float) * (size_t)(rows * 3 * d)), *ygl = xmalloc(sizeof(float) * (size_t)(rows * d)),
          *dgl = xmalloc(sizeof(float) * (size_t)(rows * 3 * d));
    b->cpu->attention_forward(n, t, h, e, scale, causal, rate, 5, 2, 0, qkv.c, y.c, lse.c);
    b->cpu->attention_backward(n, t, h, e, scale, causal, rate, 5, 2, 0, qkv.c, y.c, lse.c, dy.c, dqkv.c, work.c);
    static const char *const kernels[] = {"fp32", NULL, "cudnn", "measure"};
    for (int pass = 0; pass < (cudnn ? 4 : 2); pass++) {  // fp32, galley's (unset), then cudnn and measure where cuDNN applies
        attention_kernel_set(kernels[pass]);
        b->gpu->attention_forward(n, t, h, e, scale, causal, rate, 5, 2, 0, qkv.g, y.g, lse.g);
        b->gpu->attention_backward(n, t, h, e, scale, causal, rate, 5, 2, 0, qkv.g, y.g, lse.g, dy.g, dqkv.g, work.g);
        b->gpu->sync();
        snprintf(ctx, sizeof ctx, "%s attention n=%lld t=%lld h=%lld e=%lld causal=%d dropout=%g, kernels %s", prec,
                 (long long)n, (long long)t, (long long)h, (long long)e, causal, rate,
                 kernels[pass] ? kernels[pass] : "galley (unset)");
        if (pass == 0) {
            memcpy(y32, y.g, sizeof(float) * (size_t)(rows * d)), memcpy(l32, lse.g, sizeof(float) * (size_t)(n * h * t));
            memcpy(d32, dqkv.g, sizeof(float) * (size_t)(rows * 3 * d));
            continue;
        }
        printf("    %s: worst |gpu - cpu| / max |cpu|: y %.2e, lse %.2e, dqkv %.2e (tolerance %g)%s\n", ctx,
               worst_rel(y.g, y.c, rows * d), worst_rel(lse.g, lse.c, n * h * t),
               worst_rel(dqkv.g, dqkv.c, rows * 3 * d), rtol, tc ? "" : ", the fp32 kernels");
        expect_close(ctx, "y", y.g, y.c, rows * d, rtol, fmax(max_abs(y.c, rows * d), 1e-30));
        expect_close(ctx, "lse", lse.g, lse.c, n * h * t, rtol, fmax(max_abs(lse.c, n * h * t), 1e-30));
        expect_close(ctx, "dqkv", dqkv.g, dqkv.c, rows * 3 * d, rtol, fmax(max_abs(dqkv.c, rows * 3 * d), 1e-30));
        if (!tc) {
            expect_bitwise(ctx, "y (the fp32 kernels')", y.g, y32, rows * d);
            expect_bitwise(ctx, "lse (the fp32 kernels')", lse.g, l32, n * h * t);
            expect_bitwise(ctx, "dqkv (the fp32 kernels')", dqkv.g, d32, rows * 3 * d);
        } else if (memcmp(y.g, y32, sizeof(float) * (size_t)(rows * d)) == 0 ||
                   memcmp(dqkv.g, d32, sizeof(float) * (size_t)(rows * 3 * d)) == 0) {
            fail_msg("%s: bitwise the fp32 kernels' results: the 16-bit kernels did not run", ctx);
        }
        if (pass == 1) {
            memcpy(ygl, y.g, sizeof(float) * (size_t)(rows * d));
            memcpy(dgl, dqkv.g, sizeof(float) * (size_t)(rows * 3 * d));
        } else if (pass == 2 && memcmp(y.g, ygl, sizeof(float) * (size_t)(rows * d)) == 0 &&
                   memcmp(dqkv.g, dgl, sizeof(float) * (size_t)(rows * 3 * d)) == 0) {
            fail_msg("%s: bitwise galley's tensor-core results: cuDNN's fused attention did not run", ctx);
        }
    }
    attention_kernel_set(NULL);
    free(y32), free(l32), free(d32), free(ygl), free(dgl);
    twin_free(b, &qkv), twin_free(b, &dy), twin_free(b, &y), twin_free(b, &lse), twin_free(b, &dqkv),
        twin_free(b, &work);
}

// train.precision bf16 and fp16: the tensor-core kernels at every head width they take, T below,
// at and past the 64-row tiles, causal or not; head widths they do not take, and dropout, fall
// back. Tolerances: bf16 keeps 8 bits of mantissa, fp16 11 (test_cuda_ops's dense and conv
// tolerances are 0.03 and 0.005).
static void test_attention_reduced(void **state) {
    const backends *b = *state;
    static const struct {
        int prec;
        const char *name;
        double rtol;
    } precs[] = {{PRECISION_BF16, "bf16", 0.05}, {PRECISION_FP16, "fp16", 0.01}};
    static const struct {
        int64_t n, t, h, e;
        int causal;
        float rate;
        bool tc;
    } cases[] = {{2, 130, 2, 48, 0, 0.0f, true}, {1, 65, 3, 64, 1, 0.0f, true},   {2, 7, 2, 32, 0, 0.0f, true},
                 {1, 200, 1, 128, 1, 0.0f, true}, {1, 100, 2, 96, 0, 0.0f, true}, {1, 64, 1, 64, 1, 0.0f, true},
                 {1, 300, 2, 48, 1, 0.0f, true},  {1, 50, 2, 17, 0, 0.0f, false}, {1, 70, 2, 64, 1, 0.25f, false}};
    char msg[256] = "";
    if (!b->gpu->set_precision) {  // GALLEY_TEST_FAKE_GPU=cpu: one pass, every case the same arithmetic
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            attention_reduced_case(b, "fake", 1e-6, cases[c].n, cases[c].t, cases[c].h, cases[c].e, cases[c].causal,
                                   cases[c].rate, false);
        return;
    }
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        if (b->gpu->set_precision(precs[p].prec, msg, sizeof msg) < 0) {
            printf("    %s attention not checked: %s\n", precs[p].name, msg);
            continue;
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            attention_reduced_case(b, precs[p].name, precs[p].rtol, cases[c].n, cases[c].t, cases[c].h, cases[c].e,
                                   cases[c].causal, cases[c].rate, cases[c].tc);
    }
    assert_int_equal(b->gpu->set_precision(PRECISION_FP32, msg, sizeof msg), PRECISION_FP32);
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

// The NERSC tutorial ViT's attention (batch 16, 4,050 tokens, 8 heads of 48) in bf16 on the GPU:
// cuDNN's fused attention against galley's tensor-core kernels (two independent implementations:
// y and dqkv within the bf16 tolerance of each other's largest value; the CPU would take minutes
// at this size), then GALLEY_ATTENTION_KERNEL=measure, whose line on stderr gives each path's
// forward and backward time at the shape the benchmark's ViT trains. Only on a GPU.
static void test_attention_tutorial_shape(void **state) {
    const backends *b = *state;
    char msg[256] = "";
    if (!b->gpu->set_precision || b->gpu->set_precision(PRECISION_BF16, msg, sizeof msg) < 0) {
        printf("    not run: %s\n", b->gpu->set_precision ? msg : "the fake GPU (the CPU backend)");
        return;
    }
    const int64_t n = 16, t = 4050, h = 8, e = 48, rows = n * t, d = h * e;
    const float scale = 1.0f / sqrtf((float)e);
    const size_t bq = sizeof(float) * (size_t)(rows * 3 * d), bo = sizeof(float) * (size_t)(rows * d),
                 bl = sizeof(float) * (size_t)(n * h * t);
    float *qkv = b->gpu->mem_alloc(bq), *y = b->gpu->mem_alloc(bo), *dy = b->gpu->mem_alloc(bo),
          *lse = b->gpu->mem_alloc(bl), *work = b->gpu->mem_alloc(bl), *dqkv = b->gpu->mem_alloc(bq);
    float *y0 = xmalloc(bo), *d0 = xmalloc(bq);
    if (!qkv || !y || !dy || !lse || !work || !dqkv) fail_msg("mem_alloc failed");
    b->gpu->sync();
    tl_fill_uniform(qkv, rows * 3 * d, -1, 1, 250);
    tl_fill_uniform(dy, rows * d, -1, 1, 251);
    static const char *const kernels[] = {NULL, "cudnn", "measure"};
    for (int pass = 0; pass < 3; pass++) {
        attention_kernel_set(kernels[pass]);
        b->gpu->attention_forward(n, t, h, e, scale, 0, 0.0f, 5, 2, 0, qkv, y, lse);
        b->gpu->attention_backward(n, t, h, e, scale, 0, 0.0f, 5, 2, 0, qkv, y, lse, dy, dqkv, work);
        b->gpu->sync();
        if (pass == 0) {
            memcpy(y0, y, bo), memcpy(d0, dqkv, bq);
        } else if (pass == 1) {
            printf("    tutorial shape, bf16: worst |cudnn - galley| / max |galley|: y %.2e, dqkv %.2e\n",
                   worst_rel(y, y0, rows * d), worst_rel(dqkv, d0, rows * 3 * d));
            expect_close("tutorial shape, cuDNN against galley's kernels", "y", y, y0, rows * d, 0.05,
                         fmax(max_abs(y0, rows * d), 1e-30));
            expect_close("tutorial shape, cuDNN against galley's kernels", "dqkv", dqkv, d0, rows * 3 * d, 0.05,
                         fmax(max_abs(d0, rows * 3 * d), 1e-30));
        }
    }
    attention_kernel_set(NULL);
    free(y0), free(d0);
    b->gpu->mem_free(qkv), b->gpu->mem_free(y), b->gpu->mem_free(dy), b->gpu->mem_free(lse), b->gpu->mem_free(work),
        b->gpu->mem_free(dqkv);
    assert_int_equal(b->gpu->set_precision(PRECISION_FP32, msg, sizeof msg), PRECISION_FP32);
}

CUDA_TWIN_MAIN("test_cuda_transformer", cmocka_unit_test_prestate(test_attention, &be),
               cmocka_unit_test_prestate(test_attention_reduced, &be),
               cmocka_unit_test_prestate(test_attention_tutorial_shape, &be),
               cmocka_unit_test_prestate(test_patch_rearrange, &be), cmocka_unit_test_prestate(test_row_ops, &be),
               cmocka_unit_test_prestate(test_l2_relative, &be), )
