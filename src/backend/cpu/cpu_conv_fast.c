// cpu_conv_fast.c: convolution as an implicit GEMM on AVX-512 CPUs, for stride 1 and one group
// (CosmoFlow's and most CNNs' 3x3(x3) "same" convolutions).
//
// OpenBLAS's sgemm needs the columns of im2col in memory and then packs them again, and
// thread-count independence forced its reductions into K blocks of 128 (cpu_conv.c). Here
// a tile of 32 output positions gets its columns straight into a panel [K][32] that stays in
// the L2 cache, and an 8x32 register tile sums each output over all K taps in order, starting
// from the bias (or from the value already there, when accumulating). The sum of an output
// element is thus the same whatever the tiling and whichever thread computes it: results do not
// depend on the thread count.
//
// The input gradient of a stride-1 convolution is itself a stride-1 convolution of dy with the
// kernel flipped and channels swapped, padded (k-1)*d - p before: the same kernel computes it,
// accumulating into dx, with no columns and no col2im. The weight gradient is a third kernel: a
// register tile of 8 rows of dW by 32 filters, summed over every sample and position in order.
// The bias gradient's per-channel sums run here too, in 32 double lanes.
//
// The CPU is checked at run time; without AVX-512 (or for other geometries) cpu_conv.c's
// im2col + OpenBLAS path runs instead.
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define FAST_BUILT 1
#else
#define FAST_BUILT 0
#endif

#define NR 32  // output positions per tile: two 16-float vectors
#define MR 8   // output channels per register tile
#define KMAX 16  // the widest kernel (along W) taken

// One stride-1 convolution as this file sees it: x (cin, in) -> y (cout, out).
typedef struct {
    int64_t cin, cout, in[3], out[3], k[3], d[3], p[3];
    int64_t in_pos, out_pos, taps, kk;  // kk = cin * taps: the reduction length
} ig_geom;

bool cpu_conv_fast_ok(void) {
#if FAST_BUILT
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma");
    }
    return ok;
#else
    return false;
#endif
}

static ig_geom ig_make(int64_t cin, int64_t cout, const int64_t in[3], const int64_t out[3], const int64_t k[3],
                       const int64_t d[3], const int64_t p[3]) {
    ig_geom g = {.cin = cin, .cout = cout, .in_pos = 1, .out_pos = 1, .taps = 1};
    for (int i = 0; i < 3; i++) {
        g.in[i] = in[i], g.out[i] = out[i], g.k[i] = k[i], g.d[i] = d[i], g.p[i] = p[i];
        g.in_pos *= in[i], g.out_pos *= out[i], g.taps *= k[i];
    }
    g.kk = cin * g.taps;
    return g;
}

// Floats of scratch for the packed weights and `threads` panels.
static int64_t ig_pack_floats(const ig_geom *g) { return (g->cout + MR - 1) / MR * MR * g->kk; }
static int64_t ig_panel_floats(const ig_geom *g) { return g->kk * NR; }

// Panels that fit in scratch after the packed weights (0: not even one).
static int64_t ig_panels_fit(const ig_geom *g, int64_t scratch_floats) {
    int64_t left = scratch_floats - ig_pack_floats(g);
    return left > 0 ? left / ig_panel_floats(g) : 0;
}

#if FAST_BUILT

// Bits lo .. hi-1 of a 16-lane mask (clipped to [0, 16)).
static inline __mmask16 lane_mask(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    uint32_t m = (hi == 16 ? 0xffffu : ((1u << hi) - 1)) & ~((1u << lo) - 1);
    return (__mmask16)m;
}

// panel[kk][NR] = the columns of output positions p0 .. p0+cnt-1 (cnt <= NR) of one sample's
// x (cin, in): row (c, kz, ky, kx) holds the input element each position's tap reads, 0 in the
// padding and past cnt.
FAST_TARGET static void ig_panel(const ig_geom *g, const float *x, int64_t p0, int64_t cnt, int64_t c_lo,
                                  int64_t c_hi, float *panel, int64_t ldp) {
    const int64_t OH = g->out[1], OW = g->out[2], D = g->in[0], H = g->in[1], W = g->in[2];
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];
    for (int64_t j0 = 0; j0 < cnt;) {  // runs of positions along one output row
        int64_t p = p0 + j0, oz = p / (OH * OW), oy = p / OW % OH, ox0 = p % OW;
        int64_t len = OW - ox0 < cnt - j0 ? OW - ox0 : cnt - j0;  // <= NR
        // Per kx and half q of the run: the lanes stored (st) and those inside the row (ld).
        __mmask16 st[2] = {lane_mask(0, len), lane_mask(0, len - 16)}, ld[KMAX][2];
        int64_t off[KMAX];
        for (int64_t kx = 0; kx < KW; kx++) {
            off[kx] = kx * g->d[2] - g->p[2];  // ix = ox + off
            int64_t lo = -off[kx] - ox0, hi = W - off[kx] - ox0;  // lanes l (ox = ox0 + l) with 0 <= ix < W
            ld[kx][0] = lane_mask(lo, hi) & st[0], ld[kx][1] = lane_mask(lo - 16, hi - 16) & st[1];
        }
        for (int64_t c = c_lo; c < c_hi; c++)
            for (int64_t kz = 0; kz < KD; kz++) {
                int64_t iz = oz - g->p[0] + kz * g->d[0];
                for (int64_t ky = 0; ky < KH; ky++) {
                    int64_t iy = oy - g->p[1] + ky * g->d[1];
                    float *dst = panel + ((c * KD + kz) * KH + ky) * KW * ldp + j0;
                    if (iz < 0 || iz >= D || iy < 0 || iy >= H) {
                        for (int64_t kx = 0; kx < KW; kx++, dst += ldp) {
                            _mm512_mask_storeu_ps(dst, st[0], _mm512_setzero_ps());
                            if (len > 16) _mm512_mask_storeu_ps(dst + 16, st[1], _mm512_setzero_ps());
                        }
                        continue;
                    }
                    // masked-off lanes are never read, so the address may lie outside x
                    const char *src = (const char *)(x + c * g->in_pos + (iz * H + iy) * W);
                    for (int64_t kx = 0; kx < KW; kx++, dst += ldp) {
                        const char *sx = src + 4 * (ox0 + off[kx]);
                        _mm512_mask_storeu_ps(dst, st[0], _mm512_maskz_loadu_ps(ld[kx][0], sx));
                        if (len > 16) _mm512_mask_storeu_ps(dst + 16, st[1], _mm512_maskz_loadu_ps(ld[kx][1], sx + 64));
                    }
                }
            }
        j0 += len;
    }
}

// y rows 0 .. rows-1 (row stride ldy), columns under masks m0 | m1 (32 lanes): y = init +
// sum over k of a[k][i] * b[k][j], in k order. init is bias[i] (or 0 without bias), or y's
// own value when acc.
FAST_TARGET static void ig_tile(int64_t kk, const float *a, const float *b, float *y, int64_t ldy, int rows,
                                __mmask16 m0, __mmask16 m1, const float *bias, bool acc) {
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
#define INIT(i, lo, hi)                                                                  \
    if (acc && i < rows) {                                                               \
        lo = _mm512_maskz_loadu_ps(m0, y + i * ldy);                                     \
        hi = _mm512_maskz_loadu_ps(m1, y + i * ldy + 16);                                \
    } else {                                                                             \
        lo = hi = _mm512_set1_ps(bias && i < rows ? bias[i] : 0.0f);                     \
    }
    INIT(0, c00, c01) INIT(1, c10, c11) INIT(2, c20, c21) INIT(3, c30, c31);
    INIT(4, c40, c41) INIT(5, c50, c51) INIT(6, c60, c61) INIT(7, c70, c71);
#undef INIT
    for (int64_t k = 0; k < kk; k++) {
        const __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
        const float *ak = a + k * MR;
#define FMA(i, lo, hi)                        \
    {                                         \
        __m512 ai = _mm512_set1_ps(ak[i]);    \
        lo = _mm512_fmadd_ps(ai, b0, lo);     \
        hi = _mm512_fmadd_ps(ai, b1, hi);     \
    }
        FMA(0, c00, c01) FMA(1, c10, c11) FMA(2, c20, c21) FMA(3, c30, c31);
        FMA(4, c40, c41) FMA(5, c50, c51) FMA(6, c60, c61) FMA(7, c70, c71);
#undef FMA
    }
#define STORE(i, lo, hi)                                     \
    if (i < rows) {                                          \
        _mm512_mask_storeu_ps(y + i * ldy, m0, lo);          \
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, hi);     \
    }
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31);
    STORE(4, c40, c41) STORE(5, c50, c51) STORE(6, c60, c61) STORE(7, c70, c71);
#undef STORE
}

// y (n, cout, out) = conv(x (n, cin, in)) + bias, or y += conv(x) when acc. apack holds the
// weights in MR-row panels [kk][MR] (ig_pack_*); panels has room for `threads` [kk][NR].
FAST_TARGET static void ig_run(const ig_geom *g, int64_t n, const float *x, const float *apack, const float *bias,
                               bool acc, float *y, float *panels, int threads) {
    const int64_t P = g->out_pos, tiles = (P + NR - 1) / NR, tasks = n * tiles, mp = (g->cout + MR - 1) / MR;
    if (tasks < threads) threads = (int)tasks;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        float *panel = panels + (int64_t)omp_get_thread_num() * ig_panel_floats(g);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t s = t / tiles, p0 = t % tiles * NR, cnt = P - p0 < NR ? P - p0 : NR;
            if (cnt < NR)
                for (int64_t r = 0; r < g->kk; r++) memset(panel + r * NR + cnt, 0, sizeof(float) * (size_t)(NR - cnt));
            ig_panel(g, x + s * g->cin * g->in_pos, p0, cnt, 0, g->cin, panel, NR);
            __mmask16 m0 = lane_mask(0, cnt), m1 = lane_mask(0, cnt - 16);
            float *ys = y + s * g->cout * P + p0;
            for (int64_t m = 0; m < mp; m++) {
                int64_t rows = g->cout - m * MR < MR ? g->cout - m * MR : MR;
                ig_tile(g->kk, apack + m * g->kk * MR, panel, ys + m * MR * P, P, (int)rows, m0, m1,
                        bias ? bias + m * MR : NULL, acc);
            }
        }
    }
}

// dwt rows kk0 .. kk0+rows-1 (row stride ldw), columns under m0 | m1 (32 filters) += sum over
// the tile's positions j < cnt of panel[kk0 + i][j] * dyt[j][f], in j order.
FAST_TARGET static void dw_tile(int64_t cnt, const float *panel, const float *dyt, int64_t lddy, float *dwt,
                                int64_t ldw, int rows, __mmask16 m0, __mmask16 m1) {
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
#define LOAD(i, lo, hi)                                       \
    lo = _mm512_maskz_loadu_ps(m0, dwt + i * ldw);            \
    hi = _mm512_maskz_loadu_ps(m1, dwt + i * ldw + 16);
    LOAD(0, c00, c01) LOAD(1, c10, c11) LOAD(2, c20, c21) LOAD(3, c30, c31);
    LOAD(4, c40, c41) LOAD(5, c50, c51) LOAD(6, c60, c61) LOAD(7, c70, c71);
#undef LOAD
    for (int64_t j = 0; j < cnt; j++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, dyt + j * lddy);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, dyt + j * lddy + 16);
        const float *aj = panel + j;
#define FMA(i, lo, hi)                             \
    {                                              \
        __m512 ai = _mm512_set1_ps(aj[i * NR]);    \
        lo = _mm512_fmadd_ps(ai, b0, lo);          \
        hi = _mm512_fmadd_ps(ai, b1, hi);          \
    }
        FMA(0, c00, c01) FMA(1, c10, c11) FMA(2, c20, c21) FMA(3, c30, c31);
        FMA(4, c40, c41) FMA(5, c50, c51) FMA(6, c60, c61) FMA(7, c70, c71);
#undef FMA
    }
#define STORE(i, lo, hi)                                     \
    if (i < rows) {                                          \
        _mm512_mask_storeu_ps(dwt + i * ldw, m0, lo);        \
        _mm512_mask_storeu_ps(dwt + i * ldw + 16, m1, hi);   \
    }
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31);
    STORE(4, c40, c41) STORE(5, c50, c51) STORE(6, c60, c61) STORE(7, c70, c71);
#undef STORE
}

// dyt [cnt][F] = dy [F][cnt] (row stride P), gathered 16 filters at a time.
FAST_TARGET static void dy_transpose(const float *dy, int64_t P, int64_t F, int64_t cnt, float *dyt) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)P));
    for (int64_t f0 = 0; f0 < F; f0 += 16) {
        __mmask16 m = lane_mask(0, F - f0);
        const float *src = dy + f0 * P;
        for (int64_t j = 0; j < cnt; j++)
            _mm512_mask_storeu_ps(dyt + j * F + f0, m,
                                  _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, src + j, 4));
    }
}

// dwt [kkp][F] += the weight gradient of g over n samples (x (n, cin, in), dy (n, cout, out)),
// transposed. Threads own fixed blocks of dwt and run every sample and tile position in order,
// so each element's sum is the same at any thread count. The blocks are ranges of MR-row blocks
// of kk, each thread transposing all of dy; or, where kk is short next to F (a first layer's 3
// or 4 input channels: the dy transpose is then most of the work), ranges of 16 filters, each
// thread transposing only its own filters and building all of the (short) panel. buf holds
// `threads` of [kk][NR] + [NR][F].
FAST_TARGET static void dw_run(const ig_geom *g, int64_t n, const float *x, const float *dy, float *dwt,
                               float *buf, int threads) {
    const int64_t P = g->out_pos, F = g->cout, kb = (g->kk + MR - 1) / MR, fg = (F + 15) / 16;
    const int64_t kkp = kb * MR, per = kkp * NR + NR * F;
    const bool by_f = g->kk <= 2 * F && fg >= 2;
    const int64_t parts = by_f ? fg : kb;
    if (parts < threads) threads = (int)parts;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t b0 = 0, b1 = kb, fa = 0, fb = F;
        if (by_f) {
            fa = 16 * (fg * t / nt), fb = 16 * (fg * (t + 1) / nt);
            fb = fb < F ? fb : F;
        } else {
            b0 = kb * t / nt, b1 = kb * (t + 1) / nt;
        }
        const int64_t c_lo = b0 * MR / g->taps, c_hi0 = (b1 * MR + g->taps - 1) / g->taps;
        const int64_t c_hi = c_hi0 < g->cin ? c_hi0 : g->cin;
        float *panel = buf + t * per, *dyt = panel + kkp * NR;
        memset(panel + g->kk * NR, 0, sizeof(float) * (size_t)((kkp - g->kk) * NR));  // rows past kk: read, unused
        for (int64_t s = 0; s < n && b0 < b1 && fa < fb; s++)
            for (int64_t p0 = 0; p0 < P; p0 += NR) {
                int64_t cnt = P - p0 < NR ? P - p0 : NR;
                ig_panel(g, x + s * g->cin * g->in_pos, p0, cnt, c_lo, c_hi, panel, NR);
                const float *dys = dy + (s * F + fa) * P + p0;
                dy_transpose(dys, P, fb - fa, cnt, dyt);  // dyt [cnt][fb - fa]
                for (int64_t f0 = fa; f0 < fb; f0 += NR) {
                    __mmask16 m0 = lane_mask(0, fb - f0), m1 = lane_mask(0, fb - f0 - 16);
                    for (int64_t b = b0; b < b1; b++) {
                        int64_t rows = g->kk - b * MR < MR ? g->kk - b * MR : MR;
                        dw_tile(cnt, panel + b * MR * NR, dyt + (f0 - fa), fb - fa, dwt + b * MR * F + f0, F,
                                (int)rows, m0, m1);
                    }
                }
            }
    }
}

#endif  // FAST_BUILT

// apack[m][k][i] = w[(m*MR + i) * kk + k], zero past cout: w is (cout, kk).
static void ig_pack_forward(const ig_geom *g, const float *w, float *apack) {
    const int64_t mp = (g->cout + MR - 1) / MR;
#pragma omp parallel for schedule(static) if (mp * g->kk >= 65536)
    for (int64_t m = 0; m < mp; m++)
        for (int64_t k = 0; k < g->kk; k++)
            for (int64_t i = 0; i < MR; i++) {
                int64_t o = m * MR + i;
                apack[(m * g->kk + k) * MR + i] = o < g->cout ? w[o * g->kk + k] : 0.0f;
            }
}

// The flipped kernel of the input gradient: g maps dy (cin = F) to dx (cout = C); w is the
// forward weight (F, C, taps). apack[m][(f, t)][i] = w[f][m*MR + i][taps - 1 - t].
static void ig_pack_flipped(const ig_geom *g, const float *w, float *apack) {
    const int64_t mp = (g->cout + MR - 1) / MR, taps = g->taps, C = g->cout;
#pragma omp parallel for schedule(static) if (mp * g->kk >= 65536)
    for (int64_t m = 0; m < mp; m++)
        for (int64_t f = 0; f < g->cin; f++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t i = 0; i < MR; i++) {
                    int64_t c = m * MR + i;
                    apack[(m * g->kk + f * taps + t) * MR + i] =
                        c < C ? w[(f * C + c) * taps + taps - 1 - t] : 0.0f;
                }
}

// Whether the fast kernels take this geometry: stride 1, one group, output maps of at least
// 16 positions (a tile is 32), and room in scratch for the packed weights and one panel.
static bool ig_fits(const ig_geom *g, int64_t scratch_floats) {
    return cpu_conv_fast_ok() && g->k[2] <= KMAX && g->out_pos >= 16 && ig_panels_fit(g, scratch_floats) >= 1;
}

static int ig_threads(const ig_geom *g, int64_t scratch_floats) {
    int64_t t = omp_get_max_threads(), fit = ig_panels_fit(g, scratch_floats);
    return (int)(t < fit ? t : fit);
}

bool cpu_conv_fast_forward(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                           const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                           const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats) {
    ig_geom g = ig_make(c, f, in, out, k, d, p);
    if (!ig_fits(&g, scratch_floats)) return false;
#if FAST_BUILT
    ig_pack_forward(&g, w, scratch);
    ig_run(&g, n, x, scratch, b, false, y, scratch + ig_pack_floats(&g), ig_threads(&g, scratch_floats));
    return true;
#else
    (void)n, (void)x, (void)w, (void)b, (void)y, (void)scratch;
    return false;
#endif
}

bool cpu_conv_fast_weight_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                               const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                               const float *dy, float *dw, float *scratch, int64_t scratch_floats) {
    ig_geom g = ig_make(c, f, in, out, k, d, p);
    const int64_t kkp = (g.kk + MR - 1) / MR * MR, per = kkp * NR + NR * f;
    const int64_t fit = (scratch_floats - kkp * f) / per;
    // (dy_transpose gathers at offsets up to 15 * positions, in 32 bits)
    if (!cpu_conv_fast_ok() || g.k[2] > KMAX || g.out_pos < 16 || g.out_pos > INT32_MAX / 16 || fit < 1)
        return false;
#if FAST_BUILT
    float *dwt = scratch;
    memset(dwt, 0, sizeof(float) * (size_t)(kkp * f));
    int64_t t = omp_get_max_threads();
    dw_run(&g, n, x, dy, dwt, scratch + kkp * f, (int)(t < fit ? t : fit));
    // dw (F, kk) = dwt^T
#pragma omp parallel for schedule(static) if (f * g.kk >= 65536)
    for (int64_t o = 0; o < f; o++)
        for (int64_t r = 0; r < g.kk; r++) dw[o * g.kk + r] = dwt[r * f + o];
    return true;
#else
    (void)n, (void)x, (void)dy, (void)dw;
    return false;
#endif
}

#if FAST_BUILT
// One channel's sum: 32 double lanes (four independent chains, so the adds overlap), a fixed
// order whatever the thread count.
FAST_TARGET static double bias_sum(int64_t n, int64_t stride, int64_t P, const float *dy) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t s = 0; s < n; s++) {
        const float *row = dy + s * stride;
        int64_t i = 0;
        for (; i + 32 <= P; i += 32) {
            a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(row + i)));
            a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(row + i + 8)));
            a2 = _mm512_add_pd(a2, _mm512_cvtps_pd(_mm256_loadu_ps(row + i + 16)));
            a3 = _mm512_add_pd(a3, _mm512_cvtps_pd(_mm256_loadu_ps(row + i + 24)));
        }
        for (; i < P; i += 8) {
            __mmask8 m = (__mmask8)(P - i >= 8 ? 0xff : (1u << (P - i)) - 1);
            a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + i)));
        }
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}
#endif

bool cpu_conv_fast_bias_grad(int64_t n, int64_t ch, int64_t P, const float *dy, float *db) {
    if (!cpu_conv_fast_ok()) return false;
#if FAST_BUILT
#pragma omp parallel for schedule(static) if (n * ch * P >= 65536)
    for (int64_t c = 0; c < ch; c++) db[c] = (float)bias_sum(n, ch * P, P, dy + c * P);
    return true;
#else
    (void)n, (void)ch, (void)P, (void)dy, (void)db;
    return false;
#endif
}

bool cpu_conv_fast_input_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                              const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *w,
                              const float *dy, float *dx, float *scratch, int64_t scratch_floats) {
    int64_t pf[3];
    for (int i = 0; i < 3; i++) pf[i] = (k[i] - 1) * d[i] - p[i];
    ig_geom g = ig_make(f, c, out, in, k, d, pf);
    if (!ig_fits(&g, scratch_floats)) return false;
    if (!dy) return true;
#if FAST_BUILT
    ig_pack_flipped(&g, w, scratch);
    ig_run(&g, n, dy, scratch, NULL, true, dx, scratch + ig_pack_floats(&g), ig_threads(&g, scratch_floats));
    return true;
#else
    (void)n, (void)w, (void)dy, (void)dx, (void)scratch;
    return false;
#endif
}
