// test_cuda_ops.c: every kernel of the CUDA backend against the CPU backend, the reference.
// Each case runs the same call on both with the same inputs: the GPU's tensors come from its
// mem_alloc (managed memory, written and read by the host only after sync()), the losses'
// labels, class weights and targets are host memory on both. Outputs that are accumulated
// start from the same nonzero values on both sides; outputs that are overwritten start as NaN,
// so a kernel that skips an element or reads its output fails. Dropout masks, max-pool argmax
// and pure copies must be bitwise equal; everything else within the fp32 tolerances below.
// Without a usable GPU (or in a build without CUDA) it prints why and exits 77: skipped.
//
// train.precision: test_reduced_precision runs the dense, conv and transposed-conv cases again
// with the GPU set to tf32, bf16 and fp16 (set_precision) against the CPU's fp32, with the
// tolerances of PREC_CASES relative to the largest |cpu| of each tensor, then sets fp32 back.
#include "testlib.h"

#include <stdint.h>

#include "galley/loss.h"

#include "cuda_twin.h"

// ---- memory ---------------------------------------------------------------------------------------

static void test_memory_zero_upload_download(void **state) {
    const backends *b = *state;
    const gl_backend *gpu = b->gpu;
    assert_int_equal(gpu->device, 1);
    assert_int_equal(b->cpu->device, 0);
    enum { N = 1000 };
    float *g = gpu->mem_alloc(sizeof(float) * N), *g2 = gpu->mem_alloc(sizeof(float) * N);
    assert_non_null(g);
    assert_non_null(g2);
    assert_int_equal((uintptr_t)g % 256, 0);
    assert_int_equal((uintptr_t)g2 % 256, 0);
    gpu->sync();
    for (int i = 0; i < N; i++)
        if (g[i] != 0.0f || g2[i] != 0.0f) fail_msg("mem_alloc: element %d is not zeroed", i);

    float host[N], back[N], want[N];
    tl_fill_uniform(host, N, -1, 1, 1);
    gpu->upload(g, host, sizeof host);
    memset(back, 0, sizeof back);
    gpu->download(back, g, sizeof back);  // waits by itself
    expect_bitwise("round trip", "back", back, host, N);

    // Partial upload at an offset, partial zero, then reading a range back.
    float part[50];
    tl_fill_uniform(part, 50, 2, 3, 2);
    gpu->upload(g + 100, part, sizeof part);
    gpu->zero(g + 300, sizeof(float) * 200);
    memcpy(want, host, sizeof want);
    memcpy(want + 100, part, sizeof part);
    memset(want + 300, 0, sizeof(float) * 200);
    gpu->download(back, g, sizeof back);
    expect_bitwise("upload at an offset, zero a range", "g", back, want, N);
    gpu->download(back, g + 250, sizeof(float) * 100);
    expect_bitwise("download from an offset", "back", back, want + 250, 100);
    gpu->sync();
    expect_bitwise("host read after sync", "g", g, want, N);

    // download waits for the kernel that writes its source (scaling by 2 is exact).
    gpu->scale(N, 2.0f, g, g2);
    gpu->download(back, g2, sizeof back);
    for (int i = 0; i < N; i++) want[i] *= 2.0f;
    expect_bitwise("download after a kernel", "back", back, want, N);
    // zero is ordered after the kernels issued before it.
    gpu->scale(N, 3.0f, g, g2);
    gpu->zero(g2, sizeof(float) * N);
    gpu->sync();
    for (int i = 0; i < N; i++)
        if (g2[i] != 0.0f) fail_msg("zero after scale: g2[%d] = %g", i, g2[i]);
    gpu->mem_free(g);
    gpu->mem_free(g2);
}

// ---- dense ----------------------------------------------------------------------------------------

static void test_dense(void **state) {
    const backends *b = *state;
    const struct {
        int64_t n, k, u;
        int bias, with_dx;
    } cases[] = {{5, 37, 19, 1, 1}, {5, 37, 19, 0, 0}, {64, 300, 70, 1, 1}, {64, 300, 70, 0, 1}, {1, 8, 1, 1, 1},
                 {3, 1, 4, 1, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci].n, k = cases[ci].k, u = cases[ci].u;
        int bias = cases[ci].bias, with_dx = cases[ci].with_dx;
        char ctx[128];
        snprintf(ctx, sizeof ctx, "dense n=%lld k=%lld u=%lld bias=%d dx=%d", (long long)n, (long long)k,
                 (long long)u, bias, with_dx);
        twin x = twin_uniform(b, n * k, -1, 1, 10), w = twin_uniform(b, u * k, -1, 1, 11);
        twin bb = twin_uniform(b, u, -1, 1, 12), y = twin_const(b, n * u, NAN);
        b->cpu->dense_forward(n, k, u, x.c, w.c, bias ? bb.c : NULL, y.c);
        b->gpu->dense_forward(n, k, u, x.g, w.g, bias ? bb.g : NULL, y.g);
        b->gpu->sync();
        expect_gemm(b, ctx, "y", y.g, y.c, n * u, k + 1);

        twin dy = twin_uniform(b, n * u, -1, 1, 13), dw = twin_const(b, u * k, NAN), db = twin_const(b, u, NAN);
        twin dx = twin_uniform(b, n * k, -1, 1, 14);
        b->cpu->dense_backward(n, k, u, x.c, w.c, dy.c, dw.c, bias ? db.c : NULL, with_dx ? dx.c : NULL);
        b->gpu->dense_backward(n, k, u, x.g, w.g, dy.g, dw.g, bias ? db.g : NULL, with_dx ? dx.g : NULL);
        b->gpu->sync();
        expect_gemm(b, ctx, "dw", dw.g, dw.c, u * k, n);
        if (bias) expect_sum(ctx, "db", db.g, db.c, u, n);  // own fp32 kernel in every precision
        expect_gemm(b, ctx, "dx", dx.g, dx.c, n * k, u + 1);  // untouched on both without dx
        twin *all[] = {&x, &w, &bb, &y, &dy, &dw, &db, &dx};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(b, all[i]);
    }
}

// ---- activations ----------------------------------------------------------------------------------

static void test_activations(void **state) {
    const backends *b = *state;
    static const struct {
        gl_act act;
        const char *name;
    } acts[] = {{ACT_RELU, "relu"},
                {ACT_LEAKY_RELU, "leaky_relu"},
                {ACT_TANH, "tanh"},
                {ACT_SIGMOID, "sigmoid"},
                {ACT_GELU, "gelu"}};
    const int64_t n = 4099;
    for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "activation %s", acts[ai].name);
        twin x = twin_new(b, n);
        tl_fill_uniform(x.c, n, -6, 6, 20);
        // The kinks and the saturated ends, where implementations differ most.
        const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-4f, -1e-4f};
        memcpy(x.c, special, sizeof special);
        twin_push(b, &x);
        twin y = twin_const(b, n, NAN);
        float alpha = 0.1f;  // only leaky_relu reads it
        b->cpu->act_forward(acts[ai].act, alpha, n, x.c, y.c);
        b->gpu->act_forward(acts[ai].act, alpha, n, x.g, y.g);
        b->gpu->sync();
        expect_elem(ctx, "y", y.g, y.c, n);

        twin dy = twin_uniform(b, n, -1, 1, 21), dx = twin_uniform(b, n, -1, 1, 22);
        b->cpu->act_backward(acts[ai].act, alpha, n, x.c, dy.c, dx.c);
        b->gpu->act_backward(acts[ai].act, alpha, n, x.g, dy.g, dx.g);
        b->gpu->sync();
        expect_elem(ctx, "dx", dx.g, dx.c, n);
        // act_backward_set writes dx whole (NaN before): the CPU's within tolerance, and bit for
        // bit the GPU's clearing then adding, signs of zero included.
        twin ds = twin_const(b, n, NAN), dz = twin_const(b, n, 0.0f);
        b->cpu->act_backward_set(acts[ai].act, alpha, n, x.c, dy.c, ds.c);
        b->gpu->act_backward_set(acts[ai].act, alpha, n, x.g, dy.g, ds.g);
        b->gpu->act_backward(acts[ai].act, alpha, n, x.g, dy.g, dz.g);
        b->gpu->sync();
        expect_elem(ctx, "dx (set)", ds.g, ds.c, n);
        expect_bitwise(ctx, "dx (set) = 0 + dx (added)", ds.g, dz.g, n);
        twin_free(b, &ds), twin_free(b, &dz);
        twin_free(b, &x), twin_free(b, &y), twin_free(b, &dy), twin_free(b, &dx);
    }
}

// ---- losses ---------------------------------------------------------------------------------------

static void test_softmax_xent(void **state) {
    const backends *b = *state;
    const struct {
        const char *name;
        int64_t n, c, s;
        int weighted;
        float range;  // logits uniform in [-range, range)
    } cases[] = {
        {"classification", 8, 10, 1, 0, 3.0f},
        {"classification weighted", 8, 10, 1, 1, 3.0f},
        {"classification 1000 classes", 4, 1000, 1, 1, 5.0f},
        {"segmentation 13x11", 2, 4, 143, 0, 3.0f},
        {"segmentation weighted", 3, 5, 64, 1, 3.0f},
        {"segmentation large logits", 4, 7, 9, 1, 40.0f},
        {"segmentation 2 classes, many positions", 2, 2, 5000, 0, 3.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci].n, c = cases[ci].c, s = cases[ci].s;
        char ctx[128];
        snprintf(ctx, sizeof ctx, "softmax_xent %s n=%lld c=%lld s=%lld", cases[ci].name, (long long)n, (long long)c,
                 (long long)s);
        twin logits = twin_uniform(b, n * c * s, -cases[ci].range, cases[ci].range, 30);
        int32_t *labels = xmalloc(sizeof(int32_t) * (size_t)(n * s));  // host, on both backends
        for (int64_t i = 0; i < n * s; i++) {
            int32_t y = (int32_t)(rng_uniform(TL_SEED, RNG_TEST, 31, (uint64_t)i) * (float)c);
            labels[i] = y < c ? y : (int32_t)c - 1;
        }
        float *weights = NULL;
        if (cases[ci].weighted) {
            weights = xmalloc(sizeof(float) * (size_t)c);
            tl_fill_uniform(weights, c, 0.2f, 2.0f, 32);
        }
        double lc = b->cpu->softmax_xent(n, c, s, logits.c, labels, weights, NULL);
        double lg = b->gpu->softmax_xent(n, c, s, logits.g, labels, weights, NULL);
        expect_loss(ctx, "loss without dlogits", lg, lc);
        assert_true(lc > 0.0);

        twin d = twin_const(b, n * c * s, NAN);
        lc = b->cpu->softmax_xent(n, c, s, logits.c, labels, weights, d.c);
        lg = b->gpu->softmax_xent(n, c, s, logits.g, labels, weights, d.g);
        expect_loss(ctx, "loss with dlogits", lg, lc);
        b->gpu->sync();
        expect_sum(ctx, "dlogits", d.g, d.c, n * c * s, c);
        free(weights);
        free(labels);
        twin_free(b, &logits), twin_free(b, &d);
    }
}

static void test_regression_loss(void **state) {
    const backends *b = *state;
    const int kinds[] = {LOSS_MSE, LOSS_L1};
    const int64_t counts[] = {1003, 70001, 1};
    for (size_t ki = 0; ki < 2; ki++)
        for (size_t ni = 0; ni < sizeof counts / sizeof counts[0]; ni++) {
            int64_t count = counts[ni];
            char ctx[64];
            snprintf(ctx, sizeof ctx, "regression_loss %s count=%lld", kinds[ki] == LOSS_MSE ? "mse" : "l1",
                     (long long)count);
            twin pred = twin_uniform(b, count, -2, 2, 40);
            float *target = xmalloc(sizeof(float) * (size_t)count);  // host, on both backends
            tl_fill_uniform(target, count, -2, 2, 41);
            double lc = b->cpu->regression_loss(kinds[ki], count, pred.c, target, NULL);
            double lg = b->gpu->regression_loss(kinds[ki], count, pred.g, target, NULL);
            expect_loss(ctx, "loss without dpred", lg, lc);
            twin d = twin_const(b, count, NAN);
            lc = b->cpu->regression_loss(kinds[ki], count, pred.c, target, d.c);
            lg = b->gpu->regression_loss(kinds[ki], count, pred.g, target, d.g);
            expect_loss(ctx, "loss with dpred", lg, lc);
            b->gpu->sync();
            expect_close(ctx, "dpred", d.g, d.c, count, RTOL_ELEM, max_abs(d.c, count));
            free(target);
            twin_free(b, &pred), twin_free(b, &d);
        }
}

// metrics_sums on the GPU against the host's loops (metrics_add with no backend) on the same
// output: counts exactly equal, the regression sum to rounding. Logits on a coarse grid make
// ties, so "the first largest" is tested. Class-like cases run once after the loss (the labels'
// staged copy is reused) and once on their own (staged afresh).
static void test_metrics(void **state) {
    const backends *b = *state;
    const struct {
        const char *name;
        gl_target_kind target;
        int64_t n, c, s;
        int k;
    } cases[] = {
        {"classification top-5", TARGET_CLASS, 16, 10, 1, 5},
        {"classification 1000 classes", TARGET_CLASS, 8, 1000, 1, 5},
        {"segmentation 4 classes", TARGET_MASK, 3, 4, 777, 5},
        {"segmentation 64 classes", TARGET_MASK, 2, 64, 300, 5},
        {"segmentation 70 classes (no IoU)", TARGET_MASK, 2, 70, 50, 5},
        {"regression", TARGET_VALUES, 5, 1, 1001, 5},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t n = cases[ci].n, c = cases[ci].c, s = cases[ci].s;
        const bool values = cases[ci].target == TARGET_VALUES;
        const int64_t count = values ? n * s : n * c * s;
        twin out = twin_uniform(b, count, -3, 3, 50);
        for (int64_t i = 0; i < count; i++) out.c[i] = roundf(out.c[i] * 2) / 2;  // ties
        twin_push(b, &out);
        int32_t *labels = xmalloc(sizeof(int32_t) * (size_t)(n * s));
        float *target = xmalloc(sizeof(float) * (size_t)(n * s));
        for (int64_t i = 0; i < n * s; i++) {
            int32_t y = (int32_t)(rng_uniform(TL_SEED, RNG_TEST, 51, (uint64_t)i) * (float)c);
            labels[i] = y < c ? y : (int32_t)c - 1;
        }
        // Every third position labelled with its argmax: some hits and some misses in every case.
        for (int64_t q = 0; !values && q < n * s; q += 3) {
            const float *z = out.c + (q / s) * c * s + q % s;
            int32_t a = 0;
            for (int64_t j = 1; j < c; j++)
                if (z[j * s] > z[a * s]) a = (int32_t)j;
            labels[q] = a;
        }
        tl_fill_uniform(target, n * s, -3, 3, 52);
        gl_dataset d = {.target = cases[ci].target, .tsize = s, .classes = c};
        for (int after_loss = values ? 1 : 0; after_loss < 2; after_loss++) {
            char ctx[160];
            snprintf(ctx, sizeof ctx, "metrics %s n=%lld c=%lld s=%lld%s", cases[ci].name, (long long)n, (long long)c,
                     (long long)s, after_loss ? " after the loss" : "");
            if (after_loss && values) b->gpu->regression_loss(LOSS_MSE, n * s, out.g, target, NULL);
            else if (after_loss) b->gpu->softmax_xent(n, c, cases[ci].target == TARGET_MASK ? s : 1, out.g, labels, NULL, NULL);
            gl_metrics mc, mg;
            metrics_init(&mc, &d, cases[ci].k);
            metrics_init(&mg, &d, cases[ci].k);
            gl_tensor tc = {.data = out.c}, tg = {.data = out.g};
            metrics_add(&mc, NULL, &tc, n, values ? NULL : labels, values ? target : NULL, 0.25);
            metrics_add(&mg, b->gpu, &tg, n, values ? NULL : labels, values ? target : NULL, 0.25);
            if (values) {
                if (fabs(mg.abs_sum - mc.abs_sum) > 1e-12 * fabs(mc.abs_sum))
                    fail_msg("%s: abs_sum %.17g, host %.17g", ctx, mg.abs_sum, mc.abs_sum);
                assert_int_equal(mg.values, mc.values);
            } else {
                if (mg.hits != mc.hits || mg.hitsk != mc.hitsk || mg.positions != mc.positions)
                    fail_msg("%s: hits %lld/%lld, top-k %lld/%lld, positions %lld/%lld (gpu/host)", ctx,
                             (long long)mg.hits, (long long)mc.hits, (long long)mg.hitsk, (long long)mc.hitsk,
                             (long long)mg.positions, (long long)mc.positions);
                assert_true(mc.hits > 0 && mc.hits < mc.positions);  // a case that can tell
                for (int k = 0; k < GL_MAX_IOU_CLASSES; k++)
                    if (mg.inter[k] != mc.inter[k] || mg.uni[k] != mc.uni[k])
                        fail_msg("%s: class %d: intersection %lld/%lld, union %lld/%lld (gpu/host)", ctx, k,
                                 (long long)mg.inter[k], (long long)mc.inter[k], (long long)mg.uni[k],
                                 (long long)mc.uni[k]);
            }
            assert_int_equal(mg.samples, mc.samples);
        }
        free(labels), free(target);
        twin_free(b, &out);
    }
}

// ---- convolution and transposed convolution ---------------------------------------------------

// A layer's configuration; the kernels' geometry follows as conv.c and conv_transpose.c derive it.
typedef struct {
    const char *name;
    int nd;  // spatial dimensions: 2 (in[0] = 1) or 3
    int64_t n, c, f, groups;
    int64_t in[3];  // {D, H, W}
    int64_t k, s, d, pad;  // pad: PAD_SAME for `same` (conv only)
    int64_t op;  // conv_transpose's output_padding
} conv_case;

typedef struct {
    int64_t in[3], out[3], k[3], s[3], d[3], p[3];  // p: padding before
    int64_t in_pos, out_pos, taps;
} conv_geom;

// As conv.c: `same` puts the odd padding after; out = (in + before + after - span) / s + 1.
static conv_geom conv_geometry(const conv_case *t) {
    conv_geom g;
    g.in_pos = g.out_pos = g.taps = 1;
    for (int j = 0; j < 3; j++) {
        g.in[j] = t->in[j];
        g.k[j] = g.s[j] = g.d[j] = 1, g.p[j] = 0, g.out[j] = 1;
        if (j >= 3 - t->nd) {
            int64_t in = t->in[j], span = (t->k - 1) * t->d + 1, before = t->pad, after = t->pad;
            if (t->pad == PAD_SAME) {
                int64_t out = (in + t->s - 1) / t->s, total = (out - 1) * t->s + span - in;
                if (total < 0) total = 0;
                before = total / 2, after = total - before;
            }
            assert_true(in + before + after >= span);
            g.k[j] = t->k, g.s[j] = t->s, g.d[j] = t->d, g.p[j] = before;
            g.out[j] = (in + before + after - span) / t->s + 1;
        }
        g.in_pos *= g.in[j], g.out_pos *= g.out[j], g.taps *= g.k[j];
    }
    return g;
}

// As conv_transpose.c: out = (in - 1) * s - 2p + d * (k - 1) + output_padding + 1.
static conv_geom convt_geometry(const conv_case *t) {
    conv_geom g;
    g.in_pos = g.out_pos = g.taps = 1;
    assert_true(t->op < t->s || t->op < t->d);
    for (int j = 0; j < 3; j++) {
        g.in[j] = t->in[j];
        g.k[j] = g.s[j] = g.d[j] = 1, g.p[j] = 0, g.out[j] = 1;
        if (j >= 3 - t->nd) {
            g.k[j] = t->k, g.s[j] = t->s, g.d[j] = t->d, g.p[j] = t->pad;
            g.out[j] = (t->in[j] - 1) * t->s - 2 * t->pad + t->d * (t->k - 1) + t->op + 1;
            assert_true(g.out[j] >= 1);
        }
        g.in_pos *= g.in[j], g.out_pos *= g.out[j], g.taps *= g.k[j];
    }
    return g;
}

static int is_direct(const conv_geom *g) {
    for (int j = 0; j < 3; j++)
        if (g->k[j] != 1 || g->s[j] != 1 || g->p[j] != 0 || g->in[j] != g->out[j]) return 0;
    return 1;
}

// Forward then backward on both backends. full: bias, db and dx; otherwise no bias, db and dx
// NULL. The CPU gets scratch for every sample (backend.h's size rule); the GPU a managed buffer
// of the same size, which it may ignore.
static void check_conv(const backends *b, const conv_case *t, int transpose, int full) {
    conv_geom g = transpose ? convt_geometry(t) : conv_geometry(t);
    int64_t n = t->n, c = t->c, f = t->f, grp = t->groups;
    gl_conv_geom kg = {.nd = t->nd, .n = n, .c = c, .f = f, .groups = grp};  // what the kernels take
    for (int j = 0; j < 3; j++) {
        kg.in[j] = g.in[j], kg.out[j] = g.out[j], kg.k[j] = g.k[j];
        kg.s[j] = g.s[j], kg.d[j] = g.d[j], kg.p[j] = g.p[j];
    }
    char ctx[256];
    snprintf(ctx, sizeof ctx, "%s %s: n=%lld c=%lld f=%lld in=[%lld,%lld,%lld] out=[%lld,%lld,%lld] %s",
             transpose ? "conv_transpose" : "conv", t->name, (long long)n, (long long)c, (long long)f,
             (long long)g.in[0], (long long)g.in[1], (long long)g.in[2], (long long)g.out[0], (long long)g.out[1],
             (long long)g.out[2], full ? "bias, db, dx" : "no bias, db and dx NULL");
    assert_int_equal(c % grp, 0);
    assert_int_equal(f % grp, 0);
    int64_t nx = n * c * g.in_pos, ny = n * f * g.out_pos;
    int64_t nw = (transpose ? c * (f / grp) : f * (c / grp)) * g.taps;
    int64_t per = transpose ? (f * g.taps + c) * g.in_pos : (c * g.taps + f) * g.out_pos;
    int64_t sf = is_direct(&g) ? 0 : n * per;
    twin scratch = twin_new(b, sf > 0 ? sf : 1);
    float *sc = sf ? scratch.c : NULL, *sg = sf ? scratch.g : NULL;

    twin x = twin_uniform(b, nx, -1, 1, 50), w = twin_uniform(b, nw, -1, 1, 51), bias = twin_uniform(b, f, -1, 1, 52);
    twin y = twin_const(b, ny, NAN);
    if (transpose) {
        b->cpu->conv_transpose_forward(&kg, x.c, w.c, full ? bias.c : NULL, y.c, sc, sf);
        b->gpu->conv_transpose_forward(&kg, x.g, w.g, full ? bias.g : NULL, y.g, sg, sf);
    } else {
        b->cpu->conv_forward(&kg, x.c, w.c, full ? bias.c : NULL, y.c, sc, sf);
        b->gpu->conv_forward(&kg, x.g, w.g, full ? bias.g : NULL, y.g, sg, sf);
    }
    b->gpu->sync();
    expect_gemm(b, ctx, "y", y.g, y.c, ny, (c / grp) * g.taps + 1);
    {
        // The fused activation (graph_fuse_acts): against the CPU's, and bit for bit against the
        // GPU's own (transposed) convolution followed by act_forward (what an unfused graph computes).
        const gl_act a = full ? ACT_RELU : ACT_LEAKY_RELU;
        const float slope = full ? 0.0f : 0.1f;
        twin ya = twin_const(b, ny, NAN);
        if (transpose) {
            b->cpu->conv_transpose_forward_act(&kg, x.c, w.c, full ? bias.c : NULL, ya.c, sc, sf, a, slope);
            b->gpu->conv_transpose_forward_act(&kg, x.g, w.g, full ? bias.g : NULL, ya.g, sg, sf, a, slope);
        } else {
            b->cpu->conv_forward_act(&kg, x.c, w.c, full ? bias.c : NULL, ya.c, sc, sf, a, slope);
            b->gpu->conv_forward_act(&kg, x.g, w.g, full ? bias.g : NULL, ya.g, sg, sf, a, slope);
        }
        b->gpu->act_forward(a, slope, ny, y.g, y.g);
        b->gpu->sync();
        expect_bitwise(ctx, "fused activation = conv then act_forward", ya.g, y.g, ny);
        expect_gemm(b, ctx, "y with a fused activation", ya.g, ya.c, ny, (c / grp) * g.taps + 1);
        twin_free(b, &ya);
    }

    twin dy = twin_uniform(b, ny, -1, 1, 53), dw = twin_const(b, nw, NAN), db = twin_const(b, f, NAN);
    twin dx = twin_uniform(b, nx, -1, 1, 54);
    if (transpose) {
        b->cpu->conv_transpose_backward(&kg, x.c, w.c, dy.c, dw.c, full ? db.c : NULL, full ? dx.c : NULL, sc, sf);
        b->gpu->conv_transpose_backward(&kg, x.g, w.g, dy.g, dw.g, full ? db.g : NULL, full ? dx.g : NULL, sg, sf);
    } else {
        b->cpu->conv_backward(&kg, x.c, w.c, dy.c, dw.c, full ? db.c : NULL, full ? dx.c : NULL, sc, sf);
        b->gpu->conv_backward(&kg, x.g, w.g, dy.g, dw.g, full ? db.g : NULL, full ? dx.g : NULL, sg, sf);
    }
    b->gpu->sync();
    // dw sums over samples and the positions of the convolution's output (x's for the transpose).
    expect_gemm(b, ctx, "dw", dw.g, dw.c, nw, n * (transpose ? g.in_pos : g.out_pos));
    if (full) expect_sum(ctx, "db", db.g, db.c, f, n * g.out_pos);  // own fp32 kernel in every precision
    else expect_bitwise(ctx, "db (NULL: untouched)", db.g, db.c, f);
    expect_gemm(b, ctx, "dx", dx.g, dx.c, nx, (f / grp) * g.taps + 1);  // untouched on both when NULL
    twin *all[] = {&scratch, &x, &w, &bias, &y, &dy, &dw, &db, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(b, all[i]);
}

static void test_conv(void **state) {
    const backends *b = *state;
    const conv_case cases[] = {
        {"2D 3x3 pad 1", 2, 2, 4, 8, 1, {1, 9, 11}, 3, 1, 1, 1, 0},
        {"2D 3x3 stride 2 pad 1", 2, 2, 4, 6, 1, {1, 10, 9}, 3, 2, 1, 1, 0},
        {"2D 4x4 same (padding 1 before, 2 after)", 2, 2, 3, 5, 1, {1, 8, 7}, 4, 1, 1, PAD_SAME, 0},
        {"2D 4x4 stride 2 same (H symmetric, W asymmetric)", 2, 2, 3, 5, 1, {1, 8, 7}, 4, 2, 1, PAD_SAME, 0},
        {"2D 3x3 groups 2", 2, 2, 4, 6, 2, {1, 7, 8}, 3, 1, 1, 1, 0},
        {"2D 3x3 depthwise (groups = channels)", 2, 2, 4, 4, 4, {1, 7, 8}, 3, 1, 1, 1, 0},
        {"2D 3x3 dilation 2 pad 2", 2, 2, 4, 5, 1, {1, 9, 9}, 3, 1, 2, 2, 0},
        {"2D 3x3 dilation 2 same", 2, 1, 3, 4, 1, {1, 8, 9}, 3, 1, 2, PAD_SAME, 0},
        {"3D 3x3x3 pad 1", 3, 2, 3, 4, 1, {5, 6, 7}, 3, 1, 1, 1, 0},
        {"3D 2x2x2 stride 2", 3, 2, 4, 3, 1, {4, 6, 5}, 2, 2, 1, 0, 0},
        {"3D 3x3x3 stride 2 same, groups 2", 3, 1, 4, 6, 2, {5, 4, 7}, 3, 2, 1, PAD_SAME, 0},
        {"2D 1x1", 2, 2, 8, 5, 1, {1, 6, 7}, 1, 1, 1, 0, 0},
        {"3D 1x1x1", 3, 2, 6, 4, 1, {3, 4, 5}, 1, 1, 1, 0, 0},
        {"2D 1x1 stride 2", 2, 2, 4, 6, 1, {1, 7, 8}, 1, 2, 1, 0, 0},
        {"2D first layer: 3 channels, 3x3 pad 1", 2, 4, 3, 16, 1, {1, 16, 16}, 3, 1, 1, 1, 0},
        {"2D stem: 3 channels, 7x7 stride 2 pad 3", 2, 2, 3, 8, 1, {1, 20, 18}, 7, 2, 1, 3, 0},
        // Split into chunks of samples under test_cuda_ops_tuned's 0.05 MB workspace cap.
        {"2D 3x3 pad 1, 5 samples", 2, 5, 8, 16, 1, {1, 16, 16}, 3, 1, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_conv(b, &cases[i], 0, 1);
        check_conv(b, &cases[i], 0, 0);
    }
}

static void test_conv_transpose(void **state) {
    const backends *b = *state;
    const conv_case cases[] = {
        {"2D 2x2 stride 2", 2, 2, 8, 4, 1, {1, 5, 6}, 2, 2, 1, 0, 0},
        {"3D 2x2x2 stride 2", 3, 2, 4, 3, 1, {3, 4, 5}, 2, 2, 1, 0, 0},
        {"2D 3x3 stride 2 pad 1 output_padding 1", 2, 2, 4, 3, 1, {1, 5, 6}, 3, 2, 1, 1, 1},
        {"3D 3x3x3 stride 2 pad 1 output_padding 1", 3, 2, 3, 2, 1, {2, 3, 4}, 3, 2, 1, 1, 1},
        {"2D 4x4 stride 2 pad 1 groups 2", 2, 2, 4, 6, 2, {1, 5, 6}, 4, 2, 1, 1, 0},
        {"2D 3x3 stride 1 pad 2 dilation 2 output_padding 1", 2, 2, 3, 2, 1, {1, 5, 7}, 3, 1, 2, 2, 1},
        {"2D 1x1", 2, 2, 5, 3, 1, {1, 4, 6}, 1, 1, 1, 0, 0},
        // Split into chunks of samples under test_cuda_ops_tuned's 0.05 MB workspace cap (2, 2, 1;
        // the staged one, output_padding 1, one sample a chunk).
        {"2D 2x2 stride 2, 5 samples", 2, 5, 16, 8, 1, {1, 16, 16}, 2, 2, 1, 0, 0},
        {"2D 3x3 stride 2 pad 1 output_padding 1, 5 samples", 2, 5, 4, 8, 1, {1, 16, 16}, 3, 2, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_conv(b, &cases[i], 1, 1);
        check_conv(b, &cases[i], 1, 0);
    }
}

// ---- pooling ----------------------------------------------------------------------------------------

typedef struct {
    const char *name;
    int nd;
    int64_t n, c, in[3];  // {D, H, W}, D = 1 for 2D
    int k, s, p;
} pool_case;

static void test_pooling(void **state) {
    const backends *b = *state;
    const pool_case cases[] = {
        {"2D k3 s2 p1", 2, 2, 3, {1, 9, 10}, 3, 2, 1},
        {"2D k2 s2", 2, 2, 3, {1, 8, 7}, 2, 2, 0},
        {"2D k3 s1 p1", 2, 1, 4, {1, 6, 6}, 3, 1, 1},
        {"3D k3 s2 p1", 3, 2, 2, {5, 6, 7}, 3, 2, 1},
        {"3D k2 s2", 3, 2, 2, {4, 6, 5}, 2, 2, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const pool_case *t = &cases[ci];
        int k[3], s[3], p[3];
        int64_t out[3], in_pos = 1, out_pos = 1;
        for (int j = 0; j < 3; j++) {
            int spatial = j >= 3 - t->nd;
            k[j] = spatial ? t->k : 1, s[j] = spatial ? t->s : 1, p[j] = spatial ? t->p : 0;
            out[j] = (t->in[j] + 2 * p[j] - k[j]) / s[j] + 1;  // as pool.c (floor mode)
            in_pos *= t->in[j], out_pos *= out[j];
        }
        int64_t nx = t->n * t->c * in_pos, ny = t->n * t->c * out_pos;
        for (int is_max = 1; is_max >= 0; is_max--) {
            char ctx[160];
            snprintf(ctx, sizeof ctx, "%s pool %s: in=[%lld,%lld,%lld] out=[%lld,%lld,%lld]", is_max ? "max" : "avg",
                     t->name, (long long)t->in[0], (long long)t->in[1], (long long)t->in[2], (long long)out[0],
                     (long long)out[1], (long long)out[2]);
            // Values on a grid of 9 levels: windows hold ties, and the first must win.
            twin x = twin_new(b, nx);
            tl_fill_uniform(x.c, nx, 0, 1, 60);
            for (int64_t i = 0; i < nx; i++) x.c[i] = floorf(x.c[i] * 9.0f) * 0.25f - 1.0f;
            twin_push(b, &x);
            twin y = twin_const(b, ny, NAN), dy = twin_uniform(b, ny, -1, 1, 61), dx = twin_uniform(b, nx, -1, 1, 62);
            if (is_max) {
                int32_t *ac = b->cpu->mem_alloc(sizeof(int32_t) * (size_t)ny);
                int32_t *ag = b->gpu->mem_alloc(sizeof(int32_t) * (size_t)ny);
                assert_true(ac && ag);
                for (int64_t i = 0; i < ny; i++) ac[i] = ag[i] = -7;
                b->cpu->max_pool_forward(t->n, t->c, t->in, out, k, s, p, x.c, y.c, ac);
                b->gpu->max_pool_forward(t->n, t->c, t->in, out, k, s, p, x.g, y.g, ag);
                b->gpu->sync();
                expect_bitwise(ctx, "y", y.g, y.c, ny);
                expect_same_i32(ctx, "argmax", ag, ac, ny);
                b->cpu->max_pool_backward(t->n, t->c, t->in, out, ac, dy.c, dx.c);
                b->gpu->max_pool_backward(t->n, t->c, t->in, out, ag, dy.g, dx.g);
                b->gpu->sync();
                expect_elem(ctx, "dx", dx.g, dx.c, nx);
                b->cpu->mem_free(ac);
                b->gpu->mem_free(ag);
            } else {
                b->cpu->avg_pool_forward(t->n, t->c, t->in, out, k, s, p, x.c, y.c);
                b->gpu->avg_pool_forward(t->n, t->c, t->in, out, k, s, p, x.g, y.g);
                b->gpu->sync();
                expect_elem(ctx, "y", y.g, y.c, ny);
                b->cpu->avg_pool_backward(t->n, t->c, t->in, out, k, s, p, dy.c, dx.c);
                b->gpu->avg_pool_backward(t->n, t->c, t->in, out, k, s, p, dy.g, dx.g);
                b->gpu->sync();
                expect_elem(ctx, "dx", dx.g, dx.c, nx);
            }
            twin_free(b, &x), twin_free(b, &y), twin_free(b, &dy), twin_free(b, &dx);
        }
    }
}

static void test_global_avg_pool(void **state) {
    const backends *b = *state;
    const int64_t cases[][3] = {{3, 5, 97}, {2, 64, 1}, {2, 3, 4096}};  // n, c, s
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci][0], c = cases[ci][1], s = cases[ci][2];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "global_avg_pool n=%lld c=%lld s=%lld", (long long)n, (long long)c, (long long)s);
        twin x = twin_uniform(b, n * c * s, -1, 3, 70), y = twin_const(b, n * c, NAN);
        b->cpu->global_avg_pool_forward(n, c, s, x.c, y.c);
        b->gpu->global_avg_pool_forward(n, c, s, x.g, y.g);
        b->gpu->sync();
        expect_sum(ctx, "y", y.g, y.c, n * c, s);
        twin dy = twin_uniform(b, n * c, -1, 1, 71), dx = twin_uniform(b, n * c * s, -1, 1, 72);
        b->cpu->global_avg_pool_backward(n, c, s, dy.c, dx.c);
        b->gpu->global_avg_pool_backward(n, c, s, dy.g, dx.g);
        b->gpu->sync();
        expect_elem(ctx, "dx", dx.g, dx.c, n * c * s);
        twin_free(b, &x), twin_free(b, &y), twin_free(b, &dy), twin_free(b, &dx);
    }
}

// ---- normalisation ------------------------------------------------------------------------------

typedef struct {
    const backends *b;
    int64_t n, c, s;
    twin *gamma_, *beta_, *running, *saved, *y, *dy, *dgamma, *dbeta, *dx;  // gamma_, beta_ NULL: no affine
} bn_state;

// One forward on both backends from the same running statistics, then its backward; compares
// everything written. with_dx 0: backward with dx NULL.
static void bn_step(const bn_state *st, const char *name, const twin *x, int train, int with_dx) {
    const backends *b = st->b;
    int64_t n = st->n, c = st->c, s = st->s, m = n * s;
    int affine = st->gamma_ != NULL;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "batch_norm n=%lld c=%lld s=%lld %s, %s: %s", (long long)n, (long long)c,
             (long long)s, affine ? "gamma/beta" : "no affine", train ? "train" : "eval", name);
    twin_set(b, st->y, NAN);
    twin_set(b, st->saved, NAN);
    const float momentum = 0.1f, eps = 1e-5f;
    twin ra = twin_new(b, 2 * c + 1);  // the GPU's running statistics before this step, for the fused run
    memcpy(ra.g, st->running->g, sizeof(float) * (size_t)(2 * c + 1));
    b->cpu->batch_norm_forward(n, c, s, x->c, affine ? st->gamma_->c : NULL, affine ? st->beta_->c : NULL, eps, train,
                               momentum, st->running->c, st->saved->c, st->y->c, NULL);
    b->gpu->batch_norm_forward(n, c, s, x->g, affine ? st->gamma_->g : NULL, affine ? st->beta_->g : NULL, eps, train,
                               momentum, st->running->g, st->saved->g, st->y->g, NULL);
    b->gpu->sync();
    expect_norm(ctx, "y", st->y->g, st->y->c, n * c * s);
    expect_sum(ctx, "saved mean", st->saved->g, st->saved->c, c, m);
    expect_sum(ctx, "saved 1/std", st->saved->g + c, st->saved->c + c, c, m);
    expect_bitwise(ctx, "saved train flag", st->saved->g + 2 * c, st->saved->c + 2 * c, 1);
    expect_sum(ctx, "running mean", st->running->g, st->running->c, c, m);
    expect_sum(ctx, "running var", st->running->g + c, st->running->c + c, c, m);
    expect_bitwise(ctx, "running flag", st->running->g + 2 * c, st->running->c + 2 * c, 1);
    {
        // The fused activation (graph_fuse_acts), from the same running statistics: bit for bit
        // the unfused forward then act_forward, statistics included.
        const gl_act a = train ? ACT_RELU : ACT_LEAKY_RELU;
        const float slope = train ? 0.0f : 0.1f;
        twin ya = twin_const(b, n * c * s, NAN), yu = twin_new(b, n * c * s), sa = twin_const(b, 2 * c + 1, NAN);
        memcpy(yu.g, st->y->g, sizeof(float) * (size_t)(n * c * s));
        b->gpu->batch_norm_forward_act(n, c, s, x->g, affine ? st->gamma_->g : NULL, affine ? st->beta_->g : NULL, eps,
                                       train, momentum, ra.g, sa.g, ya.g, NULL, a, slope);
        b->gpu->act_forward(a, slope, n * c * s, yu.g, yu.g);
        b->gpu->sync();
        expect_bitwise(ctx, "fused activation = batch_norm then act_forward", ya.g, yu.g, n * c * s);
        expect_bitwise(ctx, "saved, fused", sa.g, st->saved->g, 2 * c + 1);
        expect_bitwise(ctx, "running statistics, fused", ra.g, st->running->g, 2 * c + 1);
        twin_free(b, &ya), twin_free(b, &yu), twin_free(b, &sa);
    }
    twin_free(b, &ra);
    // Carry on from identical statistics: the next step then tests only its own update.
    memcpy(st->running->g, st->running->c, sizeof(float) * (size_t)(2 * c + 1));

    twin_set(b, st->dgamma, NAN);
    twin_set(b, st->dbeta, NAN);
    b->cpu->batch_norm_backward(n, c, s, x->c, st->dy->c, affine ? st->gamma_->c : NULL, st->saved->c,
                                affine ? st->dgamma->c : NULL, affine ? st->dbeta->c : NULL,
                                with_dx ? st->dx->c : NULL, NULL);
    b->gpu->batch_norm_backward(n, c, s, x->g, st->dy->g, affine ? st->gamma_->g : NULL, st->saved->g,
                                affine ? st->dgamma->g : NULL, affine ? st->dbeta->g : NULL,
                                with_dx ? st->dx->g : NULL, NULL);
    b->gpu->sync();
    if (affine) {
        expect_sum(ctx, "dgamma", st->dgamma->g, st->dgamma->c, c, m);
        expect_sum(ctx, "dbeta", st->dbeta->g, st->dbeta->c, c, m);
    }
    expect_close(ctx, "dx", st->dx->g, st->dx->c, n * c * s, RTOL_NORM, fmax(1.0, max_abs(st->dx->c, n * c * s)));
    memcpy(st->dx->g, st->dx->c, sizeof(float) * (size_t)(n * c * s));  // the next step accumulates onto equal values
}

static void test_batch_norm(void **state) {
    const backends *b = *state;
    const struct {
        int64_t n, c, s;
        int affine, eval_first;
    } cases[] = {{4, 5, 37, 1, 0}, {3, 4, 29, 0, 1}, {16, 7, 1, 1, 0}, {2, 3, 3000, 1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci].n, c = cases[ci].c, s = cases[ci].s, count = n * c * s;
        twin gam = twin_uniform(b, c, 0.5f, 1.5f, 80), bet = twin_uniform(b, c, -0.5f, 0.5f, 81);
        twin running = twin_new(b, 2 * c + 1), saved = twin_new(b, 2 * c + 1), y = twin_new(b, count);
        twin dy = twin_uniform(b, count, -1, 1, 82), dg = twin_new(b, c), dbe = twin_new(b, c);
        twin dx = twin_uniform(b, count, -1, 1, 83);
        twin x1 = twin_uniform(b, count, -1, 3, 84), x2 = twin_uniform(b, count, -2, 1, 85);
        bn_state st = {b, n, c, s, cases[ci].affine ? &gam : NULL, cases[ci].affine ? &bet : NULL, &running, &saved,
                       &y, &dy, &dg, &dbe, &dx};
        // running starts zeroed (flag 0): the first call sets mean 0, var 1.
        if (cases[ci].eval_first) bn_step(&st, "fresh running statistics", &x1, 0, 1);
        bn_step(&st, cases[ci].eval_first ? "first training step" : "fresh running statistics", &x1, 1, 1);
        bn_step(&st, "second update of the running statistics", &x2, 1, 1);
        bn_step(&st, "running statistics", &x1, 0, 1);
        bn_step(&st, "train, dx NULL", &x2, 1, 0);
        twin *all[] = {&gam, &bet, &running, &saved, &y, &dy, &dg, &dbe, &dx, &x1, &x2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(b, all[i]);
    }
}

static void test_layer_norm(void **state) {
    const backends *b = *state;
    const struct {
        int64_t n, k;
        int affine, with_dx;
    } cases[] = {{6, 50, 1, 1}, {6, 50, 0, 1}, {3, 1030, 1, 1}, {1, 7, 1, 1}, {5, 33, 1, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci].n, k = cases[ci].k;
        int affine = cases[ci].affine, with_dx = cases[ci].with_dx;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "layer_norm n=%lld k=%lld %s%s", (long long)n, (long long)k,
                 affine ? "gamma/beta" : "no affine", with_dx ? "" : ", dx NULL");
        twin x = twin_uniform(b, n * k, -1, 3, 90), gam = twin_uniform(b, k, 0.5f, 1.5f, 91);
        twin bet = twin_uniform(b, k, -0.5f, 0.5f, 92), y = twin_const(b, n * k, NAN), saved = twin_const(b, 2 * n, NAN);
        const float eps = 1e-5f;
        b->cpu->layer_norm_forward(n, k, x.c, affine ? gam.c : NULL, affine ? bet.c : NULL, eps, saved.c, y.c);
        b->gpu->layer_norm_forward(n, k, x.g, affine ? gam.g : NULL, affine ? bet.g : NULL, eps, saved.g, y.g);
        b->gpu->sync();
        expect_norm(ctx, "y", y.g, y.c, n * k);
        expect_sum(ctx, "saved mean", saved.g, saved.c, n, k);
        expect_sum(ctx, "saved 1/std", saved.g + n, saved.c + n, n, k);

        twin dy = twin_uniform(b, n * k, -1, 1, 93), dx = twin_uniform(b, n * k, -1, 1, 94);
        twin dg = twin_const(b, k, NAN), dbe = twin_const(b, k, NAN);
        b->cpu->layer_norm_backward(n, k, x.c, dy.c, affine ? gam.c : NULL, saved.c, affine ? dg.c : NULL,
                                    affine ? dbe.c : NULL, with_dx ? dx.c : NULL);
        b->gpu->layer_norm_backward(n, k, x.g, dy.g, affine ? gam.g : NULL, saved.g, affine ? dg.g : NULL,
                                    affine ? dbe.g : NULL, with_dx ? dx.g : NULL);
        b->gpu->sync();
        if (affine) {
            expect_sum(ctx, "dgamma", dg.g, dg.c, k, n);
            expect_sum(ctx, "dbeta", dbe.g, dbe.c, k, n);
        }
        expect_close(ctx, "dx", dx.g, dx.c, n * k, RTOL_NORM, fmax(1.0, max_abs(dx.c, n * k)));
        twin *all[] = {&x, &gam, &bet, &y, &saved, &dy, &dx, &dg, &dbe};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(b, all[i]);
    }
}

// ---- dropout, scale, axpy, copy_rows, upsample --------------------------------------------------

static void test_dropout(void **state) {
    const backends *b = *state;
    const struct {
        float rate;
        int train;
        uint64_t seed, step, base;
    } cases[] = {{0.3f, 1, 1234, 7, 0},
                 {0.5f, 1, 99, 123456789, 5000000000ull},  // a base past 2^32
                 {0.3f, 0, 1234, 7, 0},
                 {0.0f, 1, 1234, 7, 0}};
    const int64_t count = 10007;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "dropout rate=%g train=%d seed=%llu step=%llu base=%llu", cases[ci].rate,
                 cases[ci].train, (unsigned long long)cases[ci].seed, (unsigned long long)cases[ci].step,
                 (unsigned long long)cases[ci].base);
        twin x = twin_uniform(b, count, -1, 1, 100), mask = twin_const(b, count, NAN), y = twin_const(b, count, NAN);
        b->cpu->dropout_forward(count, cases[ci].rate, cases[ci].train, cases[ci].seed, cases[ci].step,
                                cases[ci].base, x.c, mask.c, y.c);
        b->gpu->dropout_forward(count, cases[ci].rate, cases[ci].train, cases[ci].seed, cases[ci].step,
                                cases[ci].base, x.g, mask.g, y.g);
        b->gpu->sync();
        expect_bitwise(ctx, "mask", mask.g, mask.c, count);
        expect_elem(ctx, "y", y.g, y.c, count);
        int64_t dropped = 0;
        for (int64_t i = 0; i < count; i++) dropped += mask.c[i] == 0.0f;
        double frac = (double)dropped / (double)count, want = cases[ci].train ? cases[ci].rate : 0.0;
        if (fabs(frac - want) > 0.03) fail_msg("%s: %.3f of the mask is 0, expected about %.3f", ctx, frac, want);

        twin dy = twin_uniform(b, count, -1, 1, 101), dx = twin_uniform(b, count, -1, 1, 102);
        b->cpu->dropout_backward(count, mask.c, dy.c, dx.c);
        b->gpu->dropout_backward(count, mask.g, dy.g, dx.g);
        b->gpu->sync();
        expect_elem(ctx, "dx", dx.g, dx.c, count);
        twin_free(b, &x), twin_free(b, &mask), twin_free(b, &y), twin_free(b, &dy), twin_free(b, &dx);
    }
}

static void test_scale_axpy(void **state) {
    const backends *b = *state;
    const int64_t counts[] = {1, 1001, 65539};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        int64_t n = counts[ci];
        char ctx[64];
        snprintf(ctx, sizeof ctx, "scale/axpy count=%lld", (long long)n);
        twin x = twin_uniform(b, n, -1, 1, 110), y = twin_const(b, n, NAN);
        b->cpu->scale(n, -0.7f, x.c, y.c);
        b->gpu->scale(n, -0.7f, x.g, y.g);
        b->gpu->sync();
        expect_elem(ctx, "scale y", y.g, y.c, n);
        twin acc = twin_uniform(b, n, -1, 1, 111);
        b->cpu->axpy(n, 0.35f, x.c, acc.c);
        b->gpu->axpy(n, 0.35f, x.g, acc.g);
        b->gpu->sync();
        expect_elem(ctx, "axpy y", acc.g, acc.c, n);
        twin_free(b, &x), twin_free(b, &y), twin_free(b, &acc);
    }
}

static void test_copy_rows(void **state) {
    const backends *b = *state;
    const int64_t cases[][4] = {{7, 13, 20, 17}, {5, 16, 16, 16}, {1, 1000, 1000, 1000}, {9, 3, 3, 11}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            int64_t rows = cases[ci][0], len = cases[ci][1], ss = cases[ci][2], ds = cases[ci][3];
            char ctx[128];
            snprintf(ctx, sizeof ctx, "copy_rows rows=%lld len=%lld src_stride=%lld dst_stride=%lld accumulate=%d",
                     (long long)rows, (long long)len, (long long)ss, (long long)ds, accumulate);
            // dst has room for the gaps between rows: they must stay as they were.
            twin src = twin_uniform(b, rows * ss, -1, 1, 120), dst = twin_uniform(b, rows * ds, -1, 1, 121);
            b->cpu->copy_rows(rows, len, src.c, ss, dst.c, ds, accumulate);
            b->gpu->copy_rows(rows, len, src.g, ss, dst.g, ds, accumulate);
            b->gpu->sync();
            if (accumulate) expect_elem(ctx, "dst", dst.g, dst.c, rows * ds);
            else expect_bitwise(ctx, "dst", dst.g, dst.c, rows * ds);
            twin_free(b, &src), twin_free(b, &dst);
        }
}

static void test_upsample(void **state) {
    const backends *b = *state;
    const struct {
        int64_t n, c, in[3];
        int f[3];
    } cases[] = {{2, 3, {1, 4, 5}, {1, 2, 2}},
                 {2, 2, {2, 3, 4}, {2, 2, 2}},
                 {1, 3, {1, 5, 3}, {1, 3, 2}},
                 {2, 2, {3, 2, 3}, {1, 2, 3}}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t n = cases[ci].n, c = cases[ci].c;
        const int64_t *in = cases[ci].in;
        const int *f = cases[ci].f;
        char ctx[128];
        snprintf(ctx, sizeof ctx, "upsample n=%lld c=%lld in=[%lld,%lld,%lld] factors=[%d,%d,%d]", (long long)n,
                 (long long)c, (long long)in[0], (long long)in[1], (long long)in[2], f[0], f[1], f[2]);
        int64_t nx = n * c * in[0] * in[1] * in[2], ny = nx * f[0] * f[1] * f[2];
        twin x = twin_uniform(b, nx, -1, 1, 130), y = twin_const(b, ny, NAN);
        b->cpu->upsample_forward(n, c, in, f, x.c, y.c);
        b->gpu->upsample_forward(n, c, in, f, x.g, y.g);
        b->gpu->sync();
        expect_bitwise(ctx, "y", y.g, y.c, ny);
        twin dy = twin_uniform(b, ny, -1, 1, 131), dx = twin_uniform(b, nx, -1, 1, 132);
        b->cpu->upsample_backward(n, c, in, f, dy.c, dx.c);
        b->gpu->upsample_backward(n, c, in, f, dy.g, dx.g);
        b->gpu->sync();
        expect_elem(ctx, "dx", dx.g, dx.c, nx);
        twin_free(b, &x), twin_free(b, &y), twin_free(b, &dy), twin_free(b, &dx);
    }
}

// ---- train.precision ---------------------------------------------------------------------------

// The dense, conv and transposed-conv cases in tf32, bf16 and fp16 (those the GPU supports:
// set_precision refuses tf32 and bf16 below compute capability 8.0), then auto and back to fp32.
static void test_reduced_precision(void **state) {
    const backends *b0 = *state;
    static const struct {
        int prec;
        const char *name;
        double rtol;
    } precs[] = PREC_CASES;
    assert_true(b0->gpu->set_precision != NULL);
    assert_true(b0->cpu->set_precision == NULL);
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
        char msg[256] = "";
        int got = b0->gpu->set_precision(precs[i].prec, msg, sizeof msg);
        if (got < 0) {
            assert_true(precs[i].prec != PRECISION_FP16);  // fp16 runs on every GPU CUDA 13 supports
            printf("test_cuda_ops: %s not checked: %s\n", precs[i].name, msg);
            continue;
        }
        assert_int_equal(got, precs[i].prec);
        printf("test_cuda_ops: %s: dense, conv and conv_transpose within %g of the largest |cpu|\n", precs[i].name,
               precs[i].rtol);
        backends b = *b0;
        b.rtol = precs[i].rtol;
        void *st = &b;
        test_dense(&st);
        // bf16 and fp16 convolutions: channels-last 16-bit copies (the default), then channels-first.
        const bool half = precs[i].prec == PRECISION_BF16 || precs[i].prec == PRECISION_FP16;
        for (int cl = 1; cl >= (half ? 0 : 1); cl--) {
            setenv("GALLEY_CUDNN_CHANNELS_LAST", cl ? "1" : "0", 1);
            if (half) printf("test_cuda_ops: %s convolutions, 16-bit copies channels-%s\n", precs[i].name,
                             cl ? "last" : "first");
            test_conv(&st);
            test_conv_transpose(&st);
        }
        unsetenv("GALLEY_CUDNN_CHANNELS_LAST");
    }
    char msg[256] = "";
    int got = b0->gpu->set_precision(PRECISION_AUTO, msg, sizeof msg);
    assert_true(got == PRECISION_BF16 || got == PRECISION_FP16 || got == PRECISION_FP32);
    assert_int_equal(b0->gpu->set_precision(PRECISION_FP32, msg, sizeof msg), PRECISION_FP32);
    void *st = (void *)b0;
    test_dense(&st);  // fp32 again: fp32's tolerances hold
}

CUDA_TWIN_MAIN("test_cuda_ops",
               cmocka_unit_test_prestate(test_memory_zero_upload_download, &be),
               cmocka_unit_test_prestate(test_dense, &be),
               cmocka_unit_test_prestate(test_activations, &be),
               cmocka_unit_test_prestate(test_softmax_xent, &be),
               cmocka_unit_test_prestate(test_regression_loss, &be),
               cmocka_unit_test_prestate(test_metrics, &be),
               cmocka_unit_test_prestate(test_conv, &be),
               cmocka_unit_test_prestate(test_conv_transpose, &be),
               cmocka_unit_test_prestate(test_pooling, &be),
               cmocka_unit_test_prestate(test_global_avg_pool, &be),
               cmocka_unit_test_prestate(test_batch_norm, &be),
               cmocka_unit_test_prestate(test_layer_norm, &be),
               cmocka_unit_test_prestate(test_dropout, &be),
               cmocka_unit_test_prestate(test_scale_axpy, &be),
               cmocka_unit_test_prestate(test_copy_rows, &be),
               cmocka_unit_test_prestate(test_upsample, &be),
               cmocka_unit_test_prestate(test_reduced_precision, &be),
               )
