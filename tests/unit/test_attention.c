// test_attention.c: the attention kernels (backend.h attention_forward/backward) against a naive
// softmax(q k^T scale) v in double, forward and backward, masked and not, at T off the tile size;
// dropout's draws (the naive reference draws the same keys; forward and backward agree by finite
// differences; the kept fraction); every instruction set this CPU has against the scalar path;
// thread-count and split independence; and the `attention` layer: its PyTorch layout and init,
// its error for heads not dividing D, memory linear in T, a checkpoint round trip of its
// dotted parameter names.
//
// Memory, by design: cpu_attention.c calls no allocator (its tiles are fixed-size stack arrays)
// and takes only its arguments, and the layer's scratch and work are checked below to be exactly
// linear in T: no buffer anywhere holds T x T.
#include "testlib.h"

#include <omp.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/ckpt.h"
#include "galley/optim.h"

#define SEED 77u
#define STEP 5u
#define BASE 12345u

typedef struct {
    int64_t n, t, h, e;
    int causal;
    float rate;
} shape_t;

static int64_t qkv_size(const shape_t *s) { return s->n * s->t * 3 * s->h * s->e; }
static int64_t y_size(const shape_t *s) { return s->n * s->t * s->h * s->e; }

static double keep_of(const shape_t *s, int64_t n, int64_t h, int64_t i, int64_t j) {
    if (s->rate <= 0) return 1.0;
    uint64_t idx = BASE + (uint64_t)(((n * s->h + h) * s->t + i) * s->t + j);
    return rng_uniform(SEED, RNG_DROPOUT, STEP, idx) < s->rate ? 0.0 : 1.0 / (1.0 - (double)s->rate);
}

// Naive reference in double: y, lse, and (dy given) dqkv. Per row temporaries of T only.
static void naive(const shape_t *s, float scale, const float *qkv, const float *dy, double *y, double *lse,
                  double *dqkv) {
    const int64_t t = s->t, h = s->h, e = s->e, ld = 3 * h * e;
    double *p = malloc(sizeof(double) * (size_t)t), *dp = malloc(sizeof(double) * (size_t)t);
    assert_true(p && dp);
    if (dqkv) memset(dqkv, 0, sizeof(double) * (size_t)qkv_size(s));
    for (int64_t n = 0; n < s->n; n++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t i = 0; i < t; i++) {
                const float *q = qkv + (n * t + i) * ld + hh * e;
                const int64_t nk = s->causal ? i + 1 : t;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < nk; j++) {
                    const float *k = qkv + (n * t + j) * ld + h * e + hh * e;
                    double d = 0;
                    for (int64_t f = 0; f < e; f++) d += (double)q[f] * k[f];
                    p[j] = d * scale;
                    if (p[j] > m) m = p[j];
                }
                for (int64_t j = 0; j < nk; j++) sum += p[j] = exp(p[j] - m);
                for (int64_t j = 0; j < nk; j++) p[j] /= sum;
                lse[(n * h + hh) * t + i] = m + log(sum);
                double *yr = y + (n * t + i) * h * e + hh * e;
                for (int64_t f = 0; f < e; f++) yr[f] = 0;
                for (int64_t j = 0; j < nk; j++) {
                    const float *v = qkv + (n * t + j) * ld + 2 * h * e + hh * e;
                    for (int64_t f = 0; f < e; f++) yr[f] += p[j] * keep_of(s, n, hh, i, j) * v[f];
                }
                if (!dqkv) continue;
                const float *dyr = dy + (n * t + i) * h * e + hh * e;
                double dsum = 0;
                for (int64_t j = 0; j < nk; j++) {
                    const float *v = qkv + (n * t + j) * ld + 2 * h * e + hh * e;
                    const double kp = keep_of(s, n, hh, i, j);
                    double d = 0;
                    for (int64_t f = 0; f < e; f++) d += (double)dyr[f] * v[f];
                    dp[j] = d * kp;
                    dsum += p[j] * dp[j];
                    double *dv = dqkv + (n * t + j) * ld + 2 * h * e + hh * e;
                    for (int64_t f = 0; f < e; f++) dv[f] += p[j] * kp * dyr[f];
                }
                double *dq = dqkv + (n * t + i) * ld + hh * e;
                for (int64_t j = 0; j < nk; j++) {
                    const double ds = p[j] * (dp[j] - dsum) * scale;
                    const float *k = qkv + (n * t + j) * ld + h * e + hh * e;
                    double *dk = dqkv + (n * t + j) * ld + h * e + hh * e;
                    for (int64_t f = 0; f < e; f++) dq[f] += ds * k[f], dk[f] += ds * q[f];
                }
            }
    free(dp);
    free(p);
}

// max |a - ref| / max |ref|
static double rel_err(const float *a, const double *ref, int64_t cnt) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < cnt; i++) {
        md = fmax(md, fabs(a[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

typedef struct {
    shape_t s;
    float scale;
    float *qkv, *dy, *y, *lse, *dqkv, *work;
} case_t;

static case_t case_make(shape_t s, uint64_t stream) {
    case_t c = {.s = s, .scale = 2.0f / sqrtf((float)s.e)};  // sharper than 1/sqrt(E): peaked rows
    c.qkv = malloc(sizeof(float) * (size_t)qkv_size(&s));
    c.dy = malloc(sizeof(float) * (size_t)y_size(&s));
    c.y = malloc(sizeof(float) * (size_t)y_size(&s));
    c.dqkv = malloc(sizeof(float) * (size_t)qkv_size(&s));
    c.lse = malloc(sizeof(float) * (size_t)(s.n * s.h * s.t));
    c.work = malloc(sizeof(float) * (size_t)(s.n * s.h * s.t));
    assert_true(c.qkv && c.dy && c.y && c.dqkv && c.lse && c.work);
    tl_fill_uniform(c.qkv, qkv_size(&s), -1.5f, 1.5f, stream);
    tl_fill_uniform(c.dy, y_size(&s), -1.0f, 1.0f, stream + 1);
    return c;
}

static void case_free(case_t *c) {
    free(c->qkv), free(c->dy), free(c->y), free(c->dqkv), free(c->lse), free(c->work);
}

static void case_run(case_t *c) {
    const gl_backend *be = backend_cpu();
    const shape_t *s = &c->s;
    for (int64_t i = 0; i < qkv_size(s); i++) c->dqkv[i] = NAN;  // must be overwritten
    be->attention_forward(s->n, s->t, s->h, s->e, c->scale, s->causal, s->rate, SEED, STEP, BASE, c->qkv, c->y,
                          c->lse);
    be->attention_backward(s->n, s->t, s->h, s->e, c->scale, s->causal, s->rate, SEED, STEP, BASE, c->qkv, c->y,
                           c->lse, c->dy, c->dqkv, c->work);
}

static const shape_t shapes[] = {
    {2, 1, 2, 64, 0, 0},  {1, 7, 3, 17, 1, 0},   {2, 65, 2, 32, 0, 0},  {1, 65, 1, 64, 1, 0},
    {1, 200, 2, 17, 1, 0}, {1, 200, 1, 64, 0, 0}, {2, 130, 2, 48, 1, 0}, {1, 129, 1, 80, 0, 0},
    {3, 64, 3, 64, 0, 0},  {2, 128, 2, 64, 1, 0},  // whole tiles: vit-tiny's one, and two (first tiles write)
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

// The kernels under every instruction set this CPU has and both backward splits equal the naive
// reference: y within 1e-6 of max |y|, lse within 1e-6, dqkv within 1e-5 of its max.
static void check_case_against_naive(case_t c, bool grads, double worst[3]) {
    const shape_t s = c.s;
    double *y = malloc(sizeof(double) * (size_t)y_size(&s)), *lse = malloc(sizeof(double) * (size_t)(s.n * s.h * s.t));
    double *dq = malloc(sizeof(double) * (size_t)qkv_size(&s));
    assert_true(y && lse && dq);
    naive(&s, c.scale, c.qkv, c.dy, y, lse, dq);
    int done[3] = {0};
    for (int isa = 0; isa <= 2; isa++)
        for (int split = 0; split <= 1; split++) {
            const int got = cpu_attention_force(isa, split);
            if (done[got] > split) continue;
            done[got]++;
            case_run(&c);
            const double ey = rel_err(c.y, y, y_size(&s)), eg = rel_err(c.dqkv, dq, qkv_size(&s));
            double el = 0;
            for (int64_t i = 0; i < s.n * s.h * s.t; i++) el = fmax(el, fabs(c.lse[i] - lse[i]) / (1 + fabs(lse[i])));
            worst[0] = fmax(worst[0], ey), worst[1] = fmax(worst[1], el), worst[2] = fmax(worst[2], grads ? eg : 0);
            if (!(ey <= 1e-6 && el <= 1e-6 && (eg <= 1e-5 || !grads)))
                fail_msg("N %lld T %lld H %lld E %lld causal %d rate %g isa %d split %d: y off by %.3g, lse %.3g, "
                         "dqkv %.3g (relative)",
                         (long long)s.n, (long long)s.t, (long long)s.h, (long long)s.e, s.causal, s.rate, got, split,
                         ey, el, eg);
        }
    cpu_attention_force(-1, -1);
    free(dq), free(lse), free(y);
    case_free(&c);
}

static void check_against_naive(shape_t s, uint64_t stream, double worst[3]) {
    check_case_against_naive(case_make(s, stream), true, worst);
}

static void test_kernel_matches_naive(void **state) {
    (void)state;
    double worst[3] = {0};
    for (int i = 0; i < NSHAPES; i++) check_against_naive(shapes[i], 100 + 10 * (uint64_t)i, worst);
    print_message("attention vs naive: worst relative error y %.2g, lse %.2g, dqkv %.2g\n", worst[0], worst[1], worst[2]);
}

// Rows whose largest score lies at every lane position of the vectors (the diagonal of q k^T,
// scaled to 120, every other score 0): the row maxima (row_max, softmax_rows' lane folds) must
// find it, or the exponentials clamp and lse is off by tens. A maximum in the wrong lane leaves
// random rows' softmax right to rounding (softmax does not depend on the shift), so only rows like
// these catch it. T 64 (AVX-512's whole tiles) and 50 (the general path, a partial last vector).
// y and lse only: with one-hot probabilities dS = P (dP - D) is all cancellation, which the other
// cases' gradients cover.
static void test_row_maxima_in_every_lane(void **state) {
    (void)state;
    double worst[3] = {0};
    for (int64_t t = 64; t >= 50; t -= 14) {
        case_t c = case_make((shape_t){1, t, 1, 64, 0, 0}, 600);
        c.scale = 2.0f;
        for (int64_t i = 0; i < t; i++)
            for (int64_t f = 0; f < 64; f++) {
                c.qkv[i * 3 * 64 + f] = f == i ? 60.0f : 0.0f;            // q_i = 60 e_i
                c.qkv[i * 3 * 64 + 64 + f] = f == i ? 1.0f : 0.0f;        // k_j = e_j
            }
        check_case_against_naive(c, false, worst);
    }
    print_message("attention, peaked rows vs naive: worst relative error y %.2g, lse %.2g\n", worst[0], worst[1]);
}

static void test_kernel_with_dropout_matches_naive_with_the_same_draws(void **state) {
    (void)state;
    double worst[3] = {0};
    check_against_naive((shape_t){2, 70, 2, 17, 0, 0.3f}, 200, worst);
    check_against_naive((shape_t){1, 130, 3, 32, 1, 0.1f}, 210, worst);
    print_message("attention with dropout vs naive: worst relative error y %.2g, lse %.2g, dqkv %.2g\n", worst[0],
                  worst[1], worst[2]);
}

// The fast paths against the scalar one directly (within rounding), and the two backward splits
// and thread counts give the same bits.
static void test_fast_paths_and_splits(void **state) {
    (void)state;
    shape_t s = {2, 150, 2, 48, 1, 0.2f};
    case_t a = case_make(s, 300), b = case_make(s, 300);
    cpu_attention_force(0, 0);
    case_run(&a);
    const int best = cpu_attention_force(-1, 1);
    print_message("attention: best instruction set here %s\n", best == 2 ? "AVX-512" : best == 1 ? "AVX2" : "scalar");
    case_run(&b);
    double ey = 0, eg = 0, my = 0, mg = 0;
    for (int64_t i = 0; i < y_size(&s); i++) ey = fmax(ey, fabs(a.y[i] - b.y[i])), my = fmax(my, fabs(a.y[i]));
    for (int64_t i = 0; i < qkv_size(&s); i++) eg = fmax(eg, fabs(a.dqkv[i] - b.dqkv[i])), mg = fmax(mg, fabs(a.dqkv[i]));
    if (!(ey <= 1e-6 * my && eg <= 1e-5 * mg)) fail_msg("fast vs scalar: y %.3g, dqkv %.3g apart", ey / my, eg / mg);
    // Same instruction set: split 0 vs 1, one thread vs two: identical.
    const int threads = omp_get_max_threads();
    cpu_attention_force(-1, 0);
    omp_set_num_threads(1);
    case_run(&a);
    omp_set_num_threads(threads > 1 ? threads : 2);
    cpu_attention_force(-1, 1);
    case_run(&b);
    omp_set_num_threads(threads);
    cpu_attention_force(-1, -1);
    assert_memory_equal(a.y, b.y, sizeof(float) * (size_t)y_size(&s));
    assert_memory_equal(a.lse, b.lse, sizeof(float) * (size_t)(s.n * s.h * s.t));
    assert_memory_equal(a.dqkv, b.dqkv, sizeof(float) * (size_t)qkv_size(&s));
    case_free(&a), case_free(&b);
}

// AVX2 and AVX-512 give the same bits (cpu_attention_body.h: both sum 16 lanes, folded alike; the
// exponentials and products the same arithmetic): y, lse and dqkv, on shapes with T and E not
// multiples of 16 (the partial last vector, the dot's tail), causal masks, dropout, and vit-tiny's
// whole tiles (AVX-512's tile kernels against AVX2's general path). Skipped without AVX-512.
static void test_avx2_gives_the_avx512_bits(void **state) {
    (void)state;
    if (cpu_attention_force(2, -1) != 2) {
        cpu_attention_force(-1, -1);
        skip();
    }
    const shape_t more[] = {{2, 70, 2, 17, 0, 0.3f}, {1, 130, 3, 32, 1, 0.1f}, {2, 33, 1, 24, 0, 0}};
    for (int i = 0; i < NSHAPES + 3; i++) {
        const shape_t sh = i < NSHAPES ? shapes[i] : more[i - NSHAPES];
        case_t a = case_make(sh, 500 + 10 * (uint64_t)i), b = case_make(sh, 500 + 10 * (uint64_t)i);
        cpu_attention_force(2, -1);
        case_run(&a);
        cpu_attention_force(1, -1);
        case_run(&b);
        cpu_attention_force(-1, -1);
        const shape_t *s = &a.s;
        if (memcmp(a.y, b.y, sizeof(float) * (size_t)y_size(s)) ||
            memcmp(a.lse, b.lse, sizeof(float) * (size_t)(s->n * s->h * s->t)) ||
            memcmp(a.dqkv, b.dqkv, sizeof(float) * (size_t)qkv_size(s)))
            fail_msg("N %lld T %lld H %lld E %lld causal %d rate %g: AVX2 and AVX-512 differ", (long long)s->n,
                     (long long)s->t, (long long)s->h, (long long)s->e, s->causal, s->rate);
        case_free(&a), case_free(&b);
    }
}

// The whole-tile kernels (AVX-512: full 64-key tiles of queries tiles of 12 rows or more, E of 32
// to 64, no mask, no dropout) sum the general path's chains: y, lse and dqkv bit for bit with them
// off, at both backward splits, on shapes with a partial last query tile of 12+ rows (its
// moved-back row block), of fewer rows (the general path), a partial last key tile, E 32, 48 and
// 64; and a causal case, which keeps the general path, equal too.
static void test_tile_kernels_sum_the_general_chains(void **state) {
    (void)state;
    if (cpu_attention_force(2, -1) != 2) {
        cpu_attention_force(-1, -1);
        skip();
    }
    const shape_t tiled[] = {{3, 64, 3, 64, 0, 0}, {2, 81, 2, 48, 0, 0}, {1, 140, 2, 32, 0, 0},
                             {1, 130, 1, 64, 0, 0}, {2, 76, 1, 48, 0, 0},  {1, 128, 2, 64, 1, 0}};
    for (int i = 0; i < (int)(sizeof tiled / sizeof tiled[0]); i++)
        for (int split = 0; split <= 1; split++) {
            case_t a = case_make(tiled[i], 400 + 10 * (uint64_t)i), b = case_make(tiled[i], 400 + 10 * (uint64_t)i);
            cpu_attention_force(2, split);
            cpu_attention_force_tiles(0);
            case_run(&a);
            cpu_attention_force_tiles(1);
            case_run(&b);
            const shape_t *s = &tiled[i];
            if (memcmp(a.y, b.y, sizeof(float) * (size_t)y_size(s)) ||
                memcmp(a.lse, b.lse, sizeof(float) * (size_t)(s->n * s->h * s->t)) ||
                memcmp(a.dqkv, b.dqkv, sizeof(float) * (size_t)qkv_size(s)))
                fail_msg("N %lld T %lld H %lld E %lld causal %d split %d: the tile kernels' bits differ",
                         (long long)s->n, (long long)s->t, (long long)s->h, (long long)s->e, s->causal, split);
            case_free(&a), case_free(&b);
        }
    cpu_attention_force(-1, -1);
}

// The AVX-512 exponential (its own masks and rounding) gives the AVX2 one's bits, element by
// element, over a sweep of [-100, 100] and the edges: below the cut (0), above the clamp, -INF
// (0), +INF, NaN (kept), -0, and results down in the subnormals; and within 2 ulp-ish (2e-7
// relative) of expf where the result is normal.
static void test_vector_exponentials_agree(void **state) {
    (void)state;
    if (cpu_attention_force(2, -1) != 2) {
        cpu_attention_force(-1, -1);
        skip();
    }
    cpu_attention_force(-1, -1);
    enum { N = 4096 + 16 };
    float a[N], b[N];
    for (int i = 0; i < 4096; i++) a[i] = -100.0f + 200.0f * (float)i / 4095.0f;
    const float edges[16] = {-87.33654f, -87.3365f,  -87.34f, 88.37626f, 88.38f, -INFINITY, INFINITY, NAN,
                             -0.0f,      0.0f,       -86.0f,  -80.0f,    1e-8f,  -1e-8f,    0.6931472f, -103.0f};
    memcpy(a + 4096, edges, sizeof edges);
    memcpy(b, a, sizeof a);
    cpu_attention_exp_row(2, a, N, 1.0f, 0.0f);
    cpu_attention_exp_row(1, b, N, 1.0f, 0.0f);
    for (int i = 0; i < N; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)))
            fail_msg("element %d: AVX-512 %a, AVX2 %a", i, (double)a[i], (double)b[i]);
        const float x = i < 4096 ? -100.0f + 200.0f * (float)i / 4095.0f : edges[i - 4096], e = expf(x);
        if (isnormal(e) && x < 88.0f && fabsf(a[i] - e) > 2e-7f * e) fail_msg("e^%g: %a, expf %a", (double)x, (double)a[i], (double)e);
    }
    assert_true(isnan(a[4096 + 7]) && a[4096 + 5] == 0.0f && a[4096 + 15] == 0.0f);
}

// Dropout on: backward is the derivative of forward (same draws), by central differences of
// L = sum(y * R) over every qkv element.
typedef struct {
    case_t *c;
} fd_ctx;

static double fd_loss(void *p) {
    case_t *c = ((fd_ctx *)p)->c;
    const shape_t *s = &c->s;
    backend_cpu()->attention_forward(s->n, s->t, s->h, s->e, c->scale, s->causal, s->rate, SEED, STEP, BASE, c->qkv,
                                     c->y, c->lse);
    double l = 0;
    for (int64_t i = 0; i < y_size(s); i++) l += (double)c->y[i] * c->dy[i];
    return l;
}

static void test_dropout_backward_is_forwards_derivative(void **state) {
    (void)state;
    for (int causal = 0; causal <= 1; causal++) {
        case_t c = case_make((shape_t){2, 9, 2, 5, causal, 0.3f}, 400 + (uint64_t)causal);
        case_run(&c);
        const int64_t cnt = qkv_size(&c.s);
        double *num = malloc(sizeof(double) * (size_t)cnt);
        assert_non_null(num);
        fd_ctx f = {&c};
        tl_fd_grad(c.qkv, cnt, 1e-2f, fd_loss, &f, num);
        const double mx = tl_check_grad(causal ? "dqkv (dropout, causal)" : "dqkv (dropout)", c.dqkv, num, cnt, 1e-2,
                                        1e-3);
        assert_true(mx > 1e-2);
        free(num);
        case_free(&c);
    }
}

// q = k = 0 and v = 1 (E = 1): y_i = (kept keys of row i) / T / (1 - rate), so the kept fraction
// shows, and each row's count is a whole number.
static void test_dropout_keeps_about_one_minus_rate(void **state) {
    (void)state;
    const float rate = 0.25f;
    shape_t s = {2, 200, 2, 1, 0, rate};
    case_t c = case_make(s, 500);
    for (int64_t i = 0; i < qkv_size(&s); i++) c.qkv[i] = i % (3 * s.h * s.e) >= 2 * s.h * s.e ? 1.0f : 0.0f;  // v
    case_run(&c);
    double kept = 0;
    for (int64_t i = 0; i < y_size(&s); i++) {
        const double k = c.y[i] * (1.0 - rate) * (double)s.t;
        assert_true(fabs(k - round(k)) < 1e-3);
        kept += k;
    }
    const double frac = kept / (double)(s.n * s.h * s.t * s.t);
    print_message("attention dropout %.2f: kept %.4f of %lld\n", rate, frac, (long long)(s.n * s.h * s.t * s.t));
    assert_true(fabs(frac - (1.0 - rate)) < 0.01);  // 160000 draws: 10 standard deviations
    case_free(&c);
}

// ---- the layer --------------------------------------------------------------------------------------

static gl_shape tokens(int64_t t, int64_t d) { return shape_tokens(t, d); }

static void test_layer_heads_must_divide_d(void **state) {
    (void)state;
    tl_model m;
    char *errors = NULL;
    assert_int_equal(tl_model_try(&m, "    - {type: attention, heads: 5}\n", tokens(4, 192), 2, &errors), -1);
    assert_non_null(strstr(errors, "heads 5 does not divide the embedding D 192"));
    free(errors);
    assert_int_equal(tl_model_try(&m, "    - {type: attention, heads: 2}\n", shape_1d(8), 2, &errors), -1);
    assert_non_null(strstr(errors, "takes tokens"));
    free(errors);
}

// PyTorch's names, shapes and init; the output a naive MultiheadAttention in double gives.
static void test_layer_is_pytorch_multihead_attention(void **state) {
    (void)state;
    const int64_t T = 5, D = 6, H = 2, E = 3, N = 2;
    tl_model m;
    tl_model_build(&m, "    - {type: attention, heads: 2, name: att}\n", tokens(T, D), N);
    const layer_t *l = &m.g.layers[0];
    const char *names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    const int64_t sizes[] = {3 * D * D, 3 * D, D * D, D};
    assert_int_equal(l->nparams, 4);
    for (int p = 0; p < 4; p++) {
        assert_string_equal(l->params[p].name, names[p]);
        assert_int_equal(l->params[p].size, sizes[p]);
    }
    assert_true(l->out.shape.tokens && l->out.shape.d[0] == T && l->out.shape.d[1] == D);
    graph_init_params(&m.g, 9);
    const float *w = m.g.params;
    const double xb = sqrt(6.0 / (double)(D + 3 * D)), ob = 1.0 / sqrt((double)D);
    double mx_in = 0, mx_out = 0;
    for (int64_t i = 0; i < 3 * D * D; i++) mx_in = fmax(mx_in, fabs(w[i]));
    for (int64_t i = 0; i < 3 * D; i++) assert_true(w[3 * D * D + i] == 0.0f);
    for (int64_t i = 0; i < D * D; i++) mx_out = fmax(mx_out, fabs(w[4 * D * D + i]));
    for (int64_t i = 0; i < D; i++) assert_true(w[5 * D * D + i] == 0.0f);
    assert_true(mx_in <= xb && mx_in > 0.5 * xb && mx_out <= ob && mx_out > 0.5 * ob);
    // Random parameters and input; the naive layer in double.
    tl_fill_uniform(m.g.params, m.g.nparams, -1, 1, 600);
    tl_fill_uniform(m.g.input.data, N * T * D, -1, 1, 601);
    graph_forward(&m.g, N, false);
    const float *wi = m.g.params, *bi = wi + 3 * D * D, *wo = bi + 3 * D, *bo = wo + D * D, *x = m.g.input.data;
    float *qkv = malloc(sizeof(float) * (size_t)(N * T * 3 * D));
    double *o = malloc(sizeof(double) * (size_t)(N * T * D)), *lse = malloc(sizeof(double) * (size_t)(N * H * T));
    assert_true(qkv && o && lse);
    for (int64_t r = 0; r < N * T; r++)
        for (int64_t u = 0; u < 3 * D; u++) {
            double a = bi[u];
            for (int64_t k = 0; k < D; k++) a += (double)x[r * D + k] * wi[u * D + k];
            qkv[r * 3 * D + u] = (float)a;
        }
    shape_t s = {N, T, H, E, 0, 0};
    naive(&s, 1.0f / sqrtf((float)E), qkv, NULL, o, lse, NULL);
    const float *y = graph_output(&m.g)->data;
    for (int64_t r = 0; r < N * T; r++)
        for (int64_t u = 0; u < D; u++) {
            double a = bo[u];
            for (int64_t k = 0; k < D; k++) a += o[r * D + k] * wo[u * D + k];
            if (fabs(y[r * D + u] - a) > 1e-5 * (1 + fabs(a)))
                fail_msg("y[%lld, %lld] = %g, want %g", (long long)r, (long long)u, y[r * D + u], a);
        }
    free(lse), free(o), free(qkv);
    tl_model_free(&m);
}

static double max_diff(const float *a, const float *b, int64_t cnt) {
    double m = 0;
    for (int64_t i = 0; i < cnt; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

// Dropout in the layer: evaluation ignores it; in training, sample 1 of a batch draws what it draws
// alone as row 0 of a rank whose batch starts at global row 1 (row0), and another step draws anew.
static void test_layer_dropout_keys_by_global_row(void **state) {
    (void)state;
    const int64_t T = 9, D = 8, sz = T * D;
    tl_model m, z;
    tl_model_build(&m, "    - {type: attention, heads: 2, dropout: 0.4}\n", tokens(T, D), 2);
    tl_model_build(&z, "    - {type: attention, heads: 2}\n", tokens(T, D), 2);
    tl_fill_uniform(m.g.params, m.g.nparams, -1, 1, 800);
    memcpy(z.g.params, m.g.params, sizeof(float) * (size_t)m.g.nparams);
    tl_fill_uniform(m.g.input.data, 2 * sz, -1, 1, 801);
    memcpy(z.g.input.data, m.g.input.data, sizeof(float) * (size_t)(2 * sz));
    const float *y = graph_output(&m.g)->data;
    float *both = malloc(sizeof(float) * (size_t)(2 * sz)), *eval = malloc(sizeof(float) * (size_t)(2 * sz));
    assert_true(both && eval);
    graph_forward(&m.g, 2, false);
    memcpy(eval, y, sizeof(float) * (size_t)(2 * sz));
    graph_forward(&z.g, 2, true);
    assert_memory_equal(eval, graph_output(&z.g)->data, sizeof(float) * (size_t)(2 * sz));
    m.g.seed = 3, m.g.step = 7, m.g.row0 = 0;
    graph_forward(&m.g, 2, true);
    memcpy(both, y, sizeof(float) * (size_t)(2 * sz));
    assert_true(max_diff(both, eval, 2 * sz) > 1e-2);
    memcpy(m.g.input.data, m.g.input.data + sz, sizeof(float) * (size_t)sz);
    m.g.row0 = 1;  // (sgemm's rounding may depend on the row count: compared within 1e-5, not in bits)
    graph_forward(&m.g, 1, true);
    assert_true(max_diff(y, both + sz, sz) < 1e-5);
    m.g.step = 8;
    graph_forward(&m.g, 1, true);
    assert_true(max_diff(y, both + sz, sz) > 1e-2);
    free(eval), free(both);
    tl_model_free(&z), tl_model_free(&m);
}

// Scratch and work exactly linear in T (no T^2 term), and dropout does not change them.
static void test_layer_memory_is_linear_in_t(void **state) {
    (void)state;
    int64_t sc[2], wk[2];
    for (int k = 0; k < 2; k++) {
        tl_model m;
        tl_model_build(&m, "    - {type: attention, heads: 2, dropout: 0.1, causal: true}\n", tokens(100 << k, 16), 3);
        sc[k] = m.g.layers[0].scratch_floats, wk[k] = m.g.layers[0].work_floats;
        tl_model_free(&m);
    }
    assert_int_equal(sc[1], 2 * sc[0]);
    assert_int_equal(wk[1], 2 * wk[0]);
    assert_true(sc[0] < 3 * 100 * 16 * 10);  // a few [T, D]s per sample, not [T, T]
}

// Dotted names (out_proj.weight) survive a checkpoint: written, read back, listed by inspect.
static void test_layer_checkpoint_roundtrip(void **state) {
    (void)state;
    char *text = tl_recipe_text("    - {type: attention, heads: 2, name: att}\n");
    tl_model m;
    memset(&m, 0, sizeof m);
    tl_recipe(&m.r, text, 0, NULL);
    free(text);
    tl_stream ts;
    assert_int_equal(graph_build(&m.g, &m.r, tokens(3, 4), 2, backend_cpu(), tl_stream_open(&ts)), 0);
    free(tl_stream_close(&ts));
    arena_init(&m.a, m.g.bytes + optim_bytes(&m.r, &m.g));
    graph_bind(&m.g, &m.a);
    gl_optim o;
    optim_init(&o, &m.r, &m.g, &m.a);
    tl_fill_uniform(m.g.params, m.g.nparams, -1, 1, 700);
    float *keep = malloc(sizeof(float) * (size_t)m.g.nparams);
    assert_non_null(keep);
    memcpy(keep, m.g.params, sizeof(float) * (size_t)m.g.nparams);
    char dir[] = "/tmp/galley_test_att_XXXXXX", path[128], why[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/att.h5", dir);
    gl_ckpt_state st = {.step = 3, .world = 1, .threads = 1, .best = NAN, .best_loss = NAN};
    if (ckpt_write(path, &m.r, &m.g, &o, &st, why, sizeof why) != 0) fail_msg("ckpt_write: %s", why);
    memset(m.g.params, 0, sizeof(float) * (size_t)m.g.nparams);
    gl_ckpt_state back;
    if (ckpt_read(path, &m.r, &m.g, &o, &back, why, sizeof why) != 0) fail_msg("ckpt_read: %s", why);
    assert_memory_equal(keep, m.g.params, sizeof(float) * (size_t)m.g.nparams);
    char *listing = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&listing, &len);
    assert_int_equal(ckpt_inspect(path, false, out, stderr), 0);
    fclose(out);
    assert_non_null(strstr(listing, "params/att/out_proj.weight"));
    assert_non_null(strstr(listing, "params/att/in_proj_bias"));
    free(listing);
    unlink(path);
    rmdir(dir);
    free(keep);
    tl_model_free(&m);
}

// A NaN in one key reaches every output row that attends to it, on every instruction set (the
// vector exponential once mapped a NaN score to 0, so a NaN in q or k vanished), and no other row.
static void test_nan_score_reaches_the_output(void **state) {
    (void)state;
    const shape_t s = {2, 40, 2, 24, 1, 0};
    const int64_t ld = 3 * s.h * s.e, jn = 9, hn = 1;  // key of position 9, head 1, sample 0
    for (int isa = 0; isa <= 2; isa++) {
        case_t c = case_make(s, 500);
        c.qkv[jn * ld + s.h * s.e + hn * s.e + 5] = NAN;
        const int got = cpu_attention_force(isa, 0);
        const gl_backend *be = backend_cpu();
        be->attention_forward(s.n, s.t, s.h, s.e, c.scale, s.causal, s.rate, SEED, STEP, BASE, c.qkv, c.y, c.lse);
        for (int64_t n = 0; n < s.n; n++)
            for (int64_t i = 0; i < s.t; i++)
                for (int64_t h = 0; h < s.h; h++) {
                    const bool sees = n == 0 && h == hn && i >= jn;  // causal: rows from 9 on
                    const float v = c.y[(n * s.t + i) * s.h * s.e + h * s.e];
                    if (sees != isnan(v))
                        fail_msg("isa %d: row %lld of head %lld, sample %lld is %g (a NaN key at 9 %s it)", got,
                                 (long long)i, (long long)h, (long long)n, (double)v, sees ? "precedes" : "is not in");
                }
        case_free(&c);
    }
    cpu_attention_force(-1, -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_matches_naive),
        cmocka_unit_test(test_row_maxima_in_every_lane),
        cmocka_unit_test(test_kernel_with_dropout_matches_naive_with_the_same_draws),
        cmocka_unit_test(test_fast_paths_and_splits),
        cmocka_unit_test(test_tile_kernels_sum_the_general_chains),
        cmocka_unit_test(test_avx2_gives_the_avx512_bits),
        cmocka_unit_test(test_vector_exponentials_agree),
        cmocka_unit_test(test_nan_score_reaches_the_output),
        cmocka_unit_test(test_dropout_backward_is_forwards_derivative),
        cmocka_unit_test(test_dropout_keeps_about_one_minus_rate),
        cmocka_unit_test(test_layer_heads_must_divide_d),
        cmocka_unit_test(test_layer_is_pytorch_multihead_attention),
        cmocka_unit_test(test_layer_dropout_keys_by_global_row),
        cmocka_unit_test(test_layer_memory_is_linear_in_t),
        cmocka_unit_test(test_layer_checkpoint_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
