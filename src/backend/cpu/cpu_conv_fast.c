// cpu_conv_fast.c: convolution as an implicit GEMM on AVX-512 or AVX2+FMA CPUs, for stride 1 and
// one group (CosmoFlow's and most CNNs' 3x3(x3) "same" convolutions).
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
// register tile of 8 rows of dW by 32 filters, summed over every sample and position in order
// (a small dW, a first layer's: in a fixed number of chunks of positions, then the chunks' sums
// in order; dw_chunks), its rows read from a panel or from the input padded once (dw_direct:
// cpu_conv_fast_weight_grad). A convolution whose max pool is fused into it reads that padded
// input in place of a panel too (ig_direct: ig_run_pool).
// The bias gradient's per-channel sums run here too, in 32 double lanes.
//
// Two instruction sets, one arithmetic. The CPU is checked at run time: AVX-512 where present,
// else AVX2+FMA (AMD Zen 2/3, e.g. Perlmutter's EPYC Milan), else cpu_conv.c's im2col + OpenBLAS
// (which also takes other geometries). Both sets share the layouts (weights packed [kk][MR],
// panels [kk][NR], dW transposed [kk][F]), the scratch sizing and the drivers; only the inner
// kernels have twins. Every output is the same chain of single fused multiply-adds in the same
// order in both (AVX2 splits the 8x32 tile into sub-tiles, which reorders nothing within an
// element), and the bias sums keep bias_sum's lanes and tree, so both give the same bits.
#include <omp.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_rows.h"
#include "galley/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define FAST_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define FAST_BUILT 1
#else
#define FAST_BUILT 0
#endif

#define NR 32  // output positions per tile: two 16-float vectors
#define MR 8   // output channels per register tile (AVX-512)
#define MR_AVX2 6  // the same on AVX2, where 16 registers hold a 6x16 tile (see its kernels)
#define KMAX 16  // the widest kernel (along W) taken
#define DW_J 256  // positions one dW register tile sums before its sums go back to memory
#define DWX_MIN_ROW 8  // dw_direct for output rows at least this long (its runs are rows)

// One stride-1 convolution as this file sees it: x (geo.c, in) -> y (geo.f, out), one group
// (geo's s, groups and n unused), and the sizes derived from it.
typedef struct {
    gl_conv_geom geo;                   // backend_types.h
    int64_t in_pos, out_pos, taps, kk;  // kk = geo.c * taps: the reduction length
} ig_plan;

// A run of a dW group's positions along one output row (dw_direct): positions j .. j+len-1 of the
// group read, at tap offset 0, the padded input from xp + off on.
typedef struct dw_run_seg {
    int64_t off, j, len;
} dw_run_seg;

// The inner kernels of one instruction set (each documented at its AVX-512 version below).
typedef struct {
    void (*panel)(const ig_plan *g, const float *x, int64_t p0, int64_t cnt, int64_t c_lo, int64_t c_hi,
                  float *panel, int64_t ldp, int64_t jb);
    void (*tile)(int64_t kk, const float *a, const float *b, float *y, int64_t ldy, int rows, int cols,
                 const float *bias, bool acc, cpu_store_act act);
    void (*tile_x)(int64_t kk, const float *a, const float *xb, const int64_t *tab, float *y, int64_t ldy, int rows,
                   int cols, const float *bias, cpu_store_act act);
    void (*dw_tile)(int64_t cnt, const float *panel, int64_t ldp, const float *dyt, int64_t lddy, float *dwt,
                    int64_t ldw, int rows, int cols, bool init);
    void (*dy_transpose)(const float *dy, int64_t P, int64_t F, int64_t cnt, float *dyt);
    // dw_tile reading x in place (dw_direct): NULL where the instruction set has none (AVX2)
    void (*dw_seg)(int64_t nseg, const dw_run_seg *seg, const float *xp, const int64_t *roff, const float *dyt,
                   int64_t lddy, float *dwt, int64_t ldw, int rows, int cols, bool init);
    double (*bias_sum)(int64_t n, int64_t stride, int64_t P, const float *dy);
    int mr;  // rows of a register tile: weights are packed [kk][mr], dW is taken mr rows at a time
} ig_kernels;

static const ig_kernels *ig_kernels_get(void);

bool cpu_conv_fast_ok(void) { return ig_kernels_get() != NULL; }

static ig_plan ig_make(int64_t cin, int64_t cout, const int64_t in[3], const int64_t out[3], const int64_t k[3],
                       const int64_t d[3], const int64_t p[3]) {
    ig_plan g = {.geo = {.c = cin, .f = cout, .groups = 1}, .in_pos = 1, .out_pos = 1, .taps = 1};
    for (int i = 0; i < 3; i++) {
        g.geo.in[i] = in[i], g.geo.out[i] = out[i], g.geo.k[i] = k[i], g.geo.s[i] = 1, g.geo.d[i] = d[i];
        g.geo.p[i] = p[i];
        g.in_pos *= in[i], g.out_pos *= out[i], g.taps *= k[i];
    }
    g.kk = cin * g.taps;
    return g;
}

// n rows padded for either instruction set's row blocks (MR or MR_AVX2): scratch is sized, and
// the fast path taken or not, the same way on every CPU.
static int64_t ig_rows_padded(int64_t n) {
    int64_t a = (n + MR - 1) / MR * MR, b = (n + MR_AVX2 - 1) / MR_AVX2 * MR_AVX2;
    return a > b ? a : b;
}

// Floats of scratch for the packed weights and `threads` panels.
static int64_t ig_pack_floats(const ig_plan *g) { return ig_rows_padded(g->geo.f) * g->kk; }
// Per thread: a panel [kk][NR] and the outputs [cout][NR] of a tile that holds several samples.
static int64_t ig_panel_floats(const ig_plan *g) { return (g->kk + ig_rows_padded(g->geo.f)) * NR; }

// Samples per tile: 1 where a sample's map fills at least half a tile, else as many whole maps as
// a tile holds. A 2x2x2 map (CosmoFlow's last convolution at 32^3) would fill a quarter of a tile
// alone, and im2col + sgemm per sample (N = 8) read its 512 x 6912 weights once per sample.
static int64_t ig_samples_per_tile(int64_t P) { return P >= NR / 2 ? 1 : NR / P; }

// Tiles of n samples: ig_samples_per_tile samples each, or NR positions of one sample each.
static int64_t ig_tiles(int64_t n, int64_t P) {
    const int64_t spt = ig_samples_per_tile(P);
    return spt > 1 ? (n + spt - 1) / spt : n * ((P + NR - 1) / NR);
}

// Panels that fit in scratch after the packed weights (0: not even one).
static int64_t ig_panels_fit(const ig_plan *g, int64_t scratch_floats) {
    int64_t left = scratch_floats - ig_pack_floats(g);
    return left > 0 ? left / ig_panel_floats(g) : 0;
}

#if FAST_BUILT

// The sum of 8 double lanes in the tree of GCC's _mm512_reduce_add_pd (upper half onto lower,
// then again, then the last pair), written out so that neither the instruction set nor the
// compiler can change it.
static double lanes_sum8(const double l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// ---- AVX-512 ------------------------------------------------------------------------------------

// Bits lo .. hi-1 of a 16-lane mask (clipped to [0, 16)).
static inline __mmask16 lane_mask(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    uint32_t m = (hi == 16 ? 0xffffu : ((1u << hi) - 1)) & ~((1u << lo) - 1);
    return (__mmask16)m;
}

// act applied to finished outputs, as cpu_act_forward computes it: relu x > 0 ? x : 0 (max_ps
// returns its second operand, 0, for NaN and for -0), leaky x > 0 ? x : slope * x.
FAST_TARGET static inline __m512 store_act512(cpu_store_act act, __m512 x) {
    const __m512 z = _mm512_setzero_ps();
    if (act.act == ACT_RELU) return _mm512_max_ps(x, z);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_GT_OQ), _mm512_mul_ps(x, _mm512_set1_ps(act.slope)), x);
}

// Columns jb .. jb+cnt-1 (jb + cnt <= ldp) of panel[kk][ldp] = those of output positions p0 ..
// p0+cnt-1 of one sample's x (cin, in): row (c, kz, ky, kx) holds the input element each
// position's tap reads, 0 in the padding. (jb > 0: a tile that holds several samples' small maps.)
FAST_TARGET static void ig_panel(const ig_plan *g, const float *x, int64_t p0, int64_t cnt, int64_t c_lo,
                                  int64_t c_hi, float *panel, int64_t ldp, int64_t jb) {
    const int64_t OH = g->geo.out[1], OW = g->geo.out[2], D = g->geo.in[0], H = g->geo.in[1], W = g->geo.in[2];
    const int64_t KD = g->geo.k[0], KH = g->geo.k[1], KW = g->geo.k[2];
    for (int64_t j0 = 0; j0 < cnt;) {  // runs of positions along one output row
        int64_t p = p0 + j0, oz = p / (OH * OW), oy = p / OW % OH, ox0 = p % OW;
        int64_t len = OW - ox0 < cnt - j0 ? OW - ox0 : cnt - j0;  // <= NR
        // Per kx and half q of the run: the lanes stored (st) and those inside the row (ld).
        __mmask16 st[2] = {lane_mask(0, len), lane_mask(0, len - 16)}, ld[KMAX][2];
        int64_t off[KMAX];
        for (int64_t kx = 0; kx < KW; kx++) {
            off[kx] = kx * g->geo.d[2] - g->geo.p[2];  // ix = ox + off
            int64_t lo = -off[kx] - ox0, hi = W - off[kx] - ox0;  // lanes l (ox = ox0 + l) with 0 <= ix < W
            ld[kx][0] = lane_mask(lo, hi) & st[0], ld[kx][1] = lane_mask(lo - 16, hi - 16) & st[1];
        }
        for (int64_t c = c_lo; c < c_hi; c++)
            for (int64_t kz = 0; kz < KD; kz++) {
                int64_t iz = oz - g->geo.p[0] + kz * g->geo.d[0];
                for (int64_t ky = 0; ky < KH; ky++) {
                    int64_t iy = oy - g->geo.p[1] + ky * g->geo.d[1];
                    float *dst = panel + ((c * KD + kz) * KH + ky) * KW * ldp + jb + j0;
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

// y rows 0 .. rows-1 (row stride ldy), columns 0 .. cols-1 (cols <= NR): y = init + sum over k
// of a[k][i] * b[k][j], in k order, one fused multiply-add per k. init is bias[i] (or 0 without
// bias), or y's own value when acc. Row k of b is b + k * NR (a panel), or b + tab[k] (ig_tile_x:
// the padded input itself, whose NR floats from there are the row's; all NR are read).
FAST_TARGET static inline __attribute__((always_inline)) void
ig_tile_body(int64_t kk, const float *a, const float *b, const int64_t *tab, float *y, int64_t ldy, int rows, int cols,
             const float *bias, bool acc, cpu_store_act act) {
    const __mmask16 m0 = lane_mask(0, cols), m1 = lane_mask(0, cols - 16);
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
        const float *bk = tab ? b + tab[k] : b + k * NR;
        const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16);
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
#define STORE(i, lo, hi)                                                              \
    if (i < rows) {                                                                   \
        _mm512_mask_storeu_ps(y + i * ldy, m0, act.on ? store_act512(act, lo) : lo);  \
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, act.on ? store_act512(act, hi) : hi); \
    }
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31);
    STORE(4, c40, c41) STORE(5, c50, c51) STORE(6, c60, c61) STORE(7, c70, c71);
#undef STORE
}

FAST_TARGET static void ig_tile(int64_t kk, const float *a, const float *b, float *y, int64_t ldy, int rows, int cols,
                                const float *bias, bool acc, cpu_store_act act) {
    ig_tile_body(kk, a, b, NULL, y, ldy, rows, cols, bias, acc, act);
}

FAST_TARGET static void ig_tile_x(int64_t kk, const float *a, const float *xb, const int64_t *tab, float *y,
                                  int64_t ldy, int rows, int cols, const float *bias, cpu_store_act act) {
    ig_tile_body(kk, a, xb, tab, y, ldy, rows, cols, bias, false, act);
}

// dwt rows kk0 .. kk0+rows-1 (row stride ldw), columns 0 .. cols-1 (cols <= NR filters) += sum
// over positions j < cnt (cnt <= DW_J) of panel[kk0 + i][j] * dyt[j][f], in j order; the panel's
// rows are ldp apart. init: dwt's block is not read, the sums start from 0 (the first group).
// The same sums with row i of the panel read from xp + seg.off + roff[i] on, a run of positions
// (seg) at a time: the panel's rows where the panel is one run (roff[i] = i * ldp), or the padded
// input itself (dw_direct), whose rows along a run of an output row are the taps' values.
FAST_TARGET static void dw_seg(int64_t nseg, const dw_run_seg *seg, const float *xp, const int64_t *roff,
                               const float *dyt, int64_t lddy, float *dwt, int64_t ldw, int rows, int cols,
                               bool init) {
    const __mmask16 m0 = lane_mask(0, cols), m1 = lane_mask(0, cols - 16);
    const bool two = cols > 16;  // else one vector a row, where a second would multiply zeros
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
#define LOAD(i, lo, hi)                                                      \
    lo = init ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, dwt + i * ldw); \
    hi = init || !two ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, dwt + i * ldw + 16);
    LOAD(0, c00, c01) LOAD(1, c10, c11) LOAD(2, c20, c21) LOAD(3, c30, c31);
    LOAD(4, c40, c41) LOAD(5, c50, c51) LOAD(6, c60, c61) LOAD(7, c70, c71);
#undef LOAD
    for (int64_t s = 0; s < nseg; s++) {
        const float *base = xp + seg[s].off, *dj = dyt + seg[s].j * lddy;
        const float *a0 = base + roff[0], *a1 = base + roff[1], *a2 = base + roff[2], *a3 = base + roff[3];
        const float *a4 = base + roff[4], *a5 = base + roff[5], *a6 = base + roff[6], *a7 = base + roff[7];
        const int64_t len = seg[s].len;
        if (two) {
            for (int64_t t = 0; t < len; t++, dj += lddy) {
                const __m512 b0 = _mm512_maskz_loadu_ps(m0, dj), b1 = _mm512_maskz_loadu_ps(m1, dj + 16);
#define FMA(i, lo, hi)                              \
    {                                               \
        __m512 ai = _mm512_set1_ps(a##i[t]);        \
        lo = _mm512_fmadd_ps(ai, b0, lo);           \
        hi = _mm512_fmadd_ps(ai, b1, hi);           \
    }
                FMA(0, c00, c01) FMA(1, c10, c11) FMA(2, c20, c21) FMA(3, c30, c31);
                FMA(4, c40, c41) FMA(5, c50, c51) FMA(6, c60, c61) FMA(7, c70, c71);
#undef FMA
            }
        } else {
            for (int64_t t = 0; t < len; t++, dj += lddy) {
                const __m512 b0 = _mm512_maskz_loadu_ps(m0, dj);
#define FMA(i, c) c = _mm512_fmadd_ps(_mm512_set1_ps(a##i[t]), b0, c);
                FMA(0, c00) FMA(1, c10) FMA(2, c20) FMA(3, c30) FMA(4, c40) FMA(5, c50) FMA(6, c60) FMA(7, c70)
#undef FMA
            }
        }
    }
#define STORE(i, lo, hi)                                                 \
    if (i < rows) {                                                      \
        _mm512_mask_storeu_ps(dwt + i * ldw, m0, lo);                    \
        if (two) _mm512_mask_storeu_ps(dwt + i * ldw + 16, m1, hi);      \
    }
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31);
    STORE(4, c40, c41) STORE(5, c50, c51) STORE(6, c60, c61) STORE(7, c70, c71);
#undef STORE
}

// At most 16 filters (a first layer's 16, the last block of a count that is not a multiple of
// 32) take one vector a row, where a second half would multiply zeros: the same sums in the same
// order, so the same bits. Measured on a 2-core Xeon (2 threads, best of 15, 3 runs): the weight
// gradient of cnn3d's first layer (1 -> 16 on 40^3, batch 8) 5.56 -> 3.99 ms, of 16 -> 16 on 20^3
// 10.65 -> 7.88 ms; cnn3d 148 -> 154 samples/s (means of 3).
FAST_TARGET static void dw_tile(int64_t cnt, const float *panel, int64_t ldp, const float *dyt, int64_t lddy,
                                float *dwt, int64_t ldw, int rows, int cols, bool init) {
    const dw_run_seg one = {0, 0, cnt};
    const int64_t roff[8] = {0, ldp, 2 * ldp, 3 * ldp, 4 * ldp, 5 * ldp, 6 * ldp, 7 * ldp};
    dw_seg(1, &one, panel, roff, dyt, lddy, dwt, ldw, rows, cols, init);
}

// One channel's sum of n rows of P (row stride `stride`): 32 double lanes (four independent
// chains a0..a3 of 8, so the adds overlap; a tail of under 32 goes 8 at a time into a0), then
// (a0 + a1) + (a2 + a3) lane by lane and lanes_sum8: a fixed order whatever the thread count.
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
    double l[8];
    _mm512_storeu_pd(l, _mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
    return lanes_sum8(l);
}

// ---- AVX2 + FMA -----------------------------------------------------------------------------------
//
// The same kernels with 8-float vectors and 16 registers. An 8x32 tile does not fit (32
// accumulators), so the AVX2 tile is 6 rows (MR_AVX2: the weights are packed [kk][6] and dW is
// taken 6 rows at a time) by 32 columns, run as two 6x16 sub-tiles (tile_6: 12 accumulators, 2
// vectors of b and a broadcast of a: 15 registers). Zen 3 needs 8 independent FMA chains to stay
// busy (4 cycles latency, 2 per cycle); 12 leave slack for loads. Each sub-tile keeps whole sums
// over k, so an element is the same chain of FMAs as in AVX-512's 8x32 tile: the row blocking
// changes which elements share a tile, never an element's sum.
//
// Masks: the AMD64 manual leaves faults on masked-off lanes of vmaskmovps "implementation
// dependent" (Intel's suppresses them), so no AVX2 load or store here touches a byte outside the
// buffers: whole vectors where they lie inside, else lane by lane or through a small copy.

// Lanes lo .. hi-1 (clipped to [0, 8)) of an 8-lane integer mask.
FAST_TARGET_AVX2 static inline __m256i lane_mask8(int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : lo > 8 ? 8 : lo;
    hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), idx));
}

// The first n (1..7) lanes of v to d, as a fixed-size copy (cpu_rows.h: a loop over lanes, or a
// copy of variable size, became a call to memcpy per vector: 27% of ig_panel_avx2 on 20^3 maps).
FAST_TARGET_AVX2 static inline void store_lanes8(float *d, __m256 v, int64_t n) {
    float t[8];
    _mm256_storeu_ps(t, v);
    cpu_rows_tail(d, t, n);
}

// ig_panel with 8-lane vectors. A run's vector q holds lanes [lo, hi) of the input row (0
// elsewhere): one plain load, masked after, where the run's vectors lie inside the sample's x,
// and they are stored whole where they stay inside the panel row (lanes past the run hold 0 and
// belong to later runs or samples, rewritten after, or lie past cnt); else (the first and last
// rows of x, a run crossing the row's end) lane by lane. Channels run innermost: the same masks
// and offsets serve cin rows in a row.
FAST_TARGET_AVX2 static void ig_panel_avx2(const ig_plan *g, const float *x, int64_t p0, int64_t cnt, int64_t c_lo,
                                           int64_t c_hi, float *panel, int64_t ldp, int64_t jb) {
    const int64_t OH = g->geo.out[1], OW = g->geo.out[2], D = g->geo.in[0], H = g->geo.in[1], W = g->geo.in[2];
    const int64_t KD = g->geo.k[0], KH = g->geo.k[1], KW = g->geo.k[2], xsize = g->geo.c * g->in_pos;
    const int64_t cstep = g->taps * ldp;  // panel floats from one channel's rows to the next's
    for (int64_t j0 = 0; j0 < cnt;) {  // runs of positions along one output row
        int64_t p = p0 + j0, oz = p / (OH * OW), oy = p / OW % OH, ox0 = p % OW;
        int64_t len = OW - ox0 < cnt - j0 ? OW - ox0 : cnt - j0;  // <= NR
        const int nq = (int)((len + 7) / 8);
        const bool whole = jb + j0 + 8 * nq <= ldp;
        // Per kx and vector q: lanes [lo, hi) lie inside both the run and the input row (ix = ox + off).
        __m256 mk[KMAX][4];
        int8_t lo[KMAX][4], hi[KMAX][4];
        for (int64_t kx = 0; kx < KW; kx++) {
            const int64_t off = kx * g->geo.d[2] - g->geo.p[2];
            for (int q = 0; q < 4; q++) {
                int64_t a = -off - ox0 - 8 * q, b = W - off - ox0 - 8 * q, e = len - 8 * q;
                a = a < 0 ? 0 : a > 8 ? 8 : a;
                b = b > e ? e : b;
                b = b < a ? a : b > 8 ? 8 : b;
                lo[kx][q] = (int8_t)a, hi[kx][q] = (int8_t)b, mk[kx][q] = _mm256_castsi256_ps(lane_mask8(a, b));
            }
        }
        for (int64_t kz = 0; kz < KD; kz++) {
            int64_t iz = oz - g->geo.p[0] + kz * g->geo.d[0];
            for (int64_t ky = 0; ky < KH; ky++) {
                int64_t iy = oy - g->geo.p[1] + ky * g->geo.d[1];
                const bool pad = iz < 0 || iz >= D || iy < 0 || iy >= H;
                for (int64_t kx = 0; kx < KW; kx++) {
                    float *dst = panel + c_lo * cstep + ((kz * KH + ky) * KW + kx) * ldp + jb + j0;
                    const int64_t off = kx * g->geo.d[2] - g->geo.p[2];
                    const __m256 *m = mk[kx];
                    int64_t o = c_lo * g->in_pos + (iz * H + iy) * W + ox0 + off;  // x offset of lane 0
                    if (whole && pad) {
                        for (int64_t c = c_lo; c < c_hi; c++, dst += cstep)
                            for (int q = 0; q < nq; q++) _mm256_storeu_ps(dst + 8 * q, _mm256_setzero_ps());
                        continue;
                    }
                    // Channels [ca, cb) take whole vectors (o_c = o + (c - c_lo) in_pos, 0 <= o_c and
                    // o_c + 8 nq <= xsize, o_c rising with c), the rest lane by lane: the bounds are
                    // found once per tap rather than tested per channel.
                    int64_t ca = c_hi, cb = c_hi;
                    if (whole) {
                        const int64_t ip = g->in_pos, lim = xsize - 8 * nq - o;
                        ca = o >= 0 ? c_lo : c_lo + (-o + ip - 1) / ip;
                        cb = lim < 0 ? c_lo : c_lo + lim / ip + 1;
                        ca = ca < c_hi ? ca : c_hi;
                        cb = cb < ca ? ca : cb > c_hi ? c_hi : cb;
                    }
                    for (int64_t c = c_lo; c < c_hi;) {
                        if (c == ca && ca < cb) {  // whole vectors, one loop per vector count
                            const float *src = x + o + (c - c_lo) * g->in_pos;
                            float *d = dst + (c - c_lo) * cstep;
                            const int64_t ip = g->in_pos, nc = cb - ca;
                            const __m256 m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3];
#define VEC(q, mq) _mm256_storeu_ps(d + 8 * q, _mm256_and_ps(_mm256_loadu_ps(src + 8 * q), mq))
                            switch (nq) {
                            case 4:
                                for (int64_t i = 0; i < nc; i++, src += ip, d += cstep)
                                    VEC(0, m0), VEC(1, m1), VEC(2, m2), VEC(3, m3);
                                break;
                            case 3:
                                for (int64_t i = 0; i < nc; i++, src += ip, d += cstep)
                                    VEC(0, m0), VEC(1, m1), VEC(2, m2);
                                break;
                            case 2:
                                for (int64_t i = 0; i < nc; i++, src += ip, d += cstep) VEC(0, m0), VEC(1, m1);
                                break;
                            default:
                                for (int64_t i = 0; i < nc; i++, src += ip, d += cstep) VEC(0, m0);
                                break;
                            }
#undef VEC
                            c = cb;
                            continue;
                        }
                        const int64_t oc = o + (c - c_lo) * g->in_pos;
                        float *d = dst + (c - c_lo) * cstep;
                        for (int q = 0; q < nq; q++) {
                            const int64_t at = oc + 8 * q;
                            __m256 v;
                            if (pad) {  // no lanes inside
                                v = _mm256_setzero_ps();
                            } else if (at >= 0 && at + 8 <= xsize) {  // a whole vector inside x, masked
                                v = _mm256_and_ps(_mm256_loadu_ps(x + at), m[q]);
                            } else {  // the first and last rows of x: lane by lane
                                float t[8] = {0};
                                for (int l = lo[kx][q]; l < hi[kx][q]; l++) t[l] = x[at + l];
                                v = _mm256_loadu_ps(t);
                            }
                            // Whole where the vector stays inside the panel row, else the run's
                            // lanes only (a run ending past the row's last vector: maps whose
                            // width is not a divisor of 32, e.g. 20, 14, 7).
                            if (whole || jb + j0 + 8 * q + 8 <= ldp) _mm256_storeu_ps(d + 8 * q, v);
                            else store_lanes8(d + 8 * q, v, len - 8 * q);
                        }
                        c++;
                    }
                }
            }
        }
        j0 += len;
    }
}

// store_act512 on 8 lanes.
FAST_TARGET_AVX2 static inline __m256 store_act256(cpu_store_act act, __m256 x) {
    const __m256 z = _mm256_setzero_ps();
    if (act.act == ACT_RELU) return _mm256_max_ps(x, z);
    return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_set1_ps(act.slope)), x, _mm256_cmp_ps(x, z, _CMP_GT_OQ));
}

// c rows 0 .. R-1 (row stride ldc), columns 0 .. 8*NV-1 = init + sum over k < kk of a(k, i) *
// b[k][j], in k order, one fused multiply-add per k, with a(k, i) = a[k * ak + i * ai] and b of
// row stride ldb (or row k at b + tab[k]: ig_tile_x_avx2). init: bias[i], or c's own values when
// bias is NULL. Stores rows < rows. R x NV accumulators (at most 12), NV vectors of b and a
// broadcast stay in registers: R and NV are constants once inlined, and the loops over them unroll.
FAST_TARGET_AVX2 static inline __attribute__((always_inline)) void
sub_tile(const int R, const int NV, int64_t kk, const float *a, int64_t ak, int64_t ai, const float *b, int64_t ldb,
         const int64_t *tab, float *c, int64_t ldc, const float *bias, int rows, cpu_store_act act) {
    __m256 acc[6][4];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[i][v] = bias ? _mm256_set1_ps(bias[i]) : _mm256_loadu_ps(c + i * ldc + 8 * v);
    for (int64_t k = 0; k < kk; k++) {
        __m256 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps((tab ? b + tab[k] : b + k * ldb) + 8 * v);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m256 av = _mm256_broadcast_ss(a + k * ak + i * ai);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        if (i < rows)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const __m256 r = act.on ? store_act256(act, acc[i][v]) : acc[i][v];
                if (act.stream) _mm256_stream_ps(c + i * ldc + 8 * v, r);
                else _mm256_storeu_ps(c + i * ldc + 8 * v, r);
            }
}

// Rows 0 .. rows-1 (rows <= 6) by columns 0 .. 8*nv-1 (nv = 1 .. 4) of a tile in sub-tiles of
// at most 12 chains: 6 rows by 16 columns where rows > 4, 4 by 16 where rows is 3 or 4, 2 by all
// columns where rows <= 2. A sub-tile computes its R rows whole (rows past `rows` read a's
// padding and are not stored). Arguments as sub_tile's.
FAST_TARGET_AVX2 static inline __attribute__((always_inline)) void
tile_6(int nv, int64_t kk, const float *a, int64_t ak, int64_t ai, const float *b, int64_t ldb, const int64_t *tab,
       float *c, int64_t ldc, const float *bias, int rows, cpu_store_act act) {
    if (rows <= 2) {
        switch (nv) {
        case 4: sub_tile(2, 4, kk, a, ak, ai, b, ldb, tab, c, ldc, bias, rows, act); break;
        case 3: sub_tile(2, 3, kk, a, ak, ai, b, ldb, tab, c, ldc, bias, rows, act); break;
        case 2: sub_tile(2, 2, kk, a, ak, ai, b, ldb, tab, c, ldc, bias, rows, act); break;
        default: sub_tile(2, 1, kk, a, ak, ai, b, ldb, tab, c, ldc, bias, rows, act); break;
        }
        return;
    }
    for (int v = 0; v < nv; v += 2) {
        const bool two = nv - v >= 2;
        if (rows > 4) {
            if (two) sub_tile(6, 2, kk, a, ak, ai, b + 8 * v, ldb, tab, c + 8 * v, ldc, bias, rows, act);
            else sub_tile(6, 1, kk, a, ak, ai, b + 8 * v, ldb, tab, c + 8 * v, ldc, bias, rows, act);
        } else {
            if (two) sub_tile(4, 2, kk, a, ak, ai, b + 8 * v, ldb, tab, c + 8 * v, ldc, bias, rows, act);
            else sub_tile(4, 1, kk, a, ak, ai, b + 8 * v, ldb, tab, c + 8 * v, ldc, bias, rows, act);
        }
    }
}

// The reduction block of ig_tile_avx2: the panel's rows [k0, k0 + IG_KC) (16 KiB) stay in the L1
// cache while the sub-tiles pass over them; the sums go through c between blocks, in float, as in
// the registers, so blocking changes no bit.
#define IG_KC 128

// ig_tile over MR_AVX2 rows (weights packed [kk][MR_AVX2]) in sub-tiles (tile_6). A whole tile (6
// rows, 32 columns) works in y; an edge tile in a copy, so that no vector reads or writes y past
// its rows and columns. Why 6 rows and not AVX-512's 8: 8 rows by 32 columns took two 6x16 passes
// and a 2x32 one, whose 8 chains fed by memory operands ran at ~62 GFLOP/s against ~85-98 for
// 6x16 on a Zen 3 core (hot L1); the whole tile measured 67-78.
FAST_TARGET_AVX2 static inline __attribute__((always_inline)) void
ig_tile_avx2_body(int64_t kk, const float *a, const float *b, const int64_t *tab, float *y, int64_t ldy, int rows,
                  int cols, const float *bias, bool acc, cpu_store_act act) {
    float bias6[MR_AVX2], buf[MR_AVX2 * NR] __attribute__((aligned(32)));
    for (int i = 0; i < MR_AVX2; i++) bias6[i] = bias && i < rows ? bias[i] : 0.0f;
    const bool whole = rows == MR_AVX2 && cols == NR;
    float *c = y;
    int64_t ldc = ldy;
    if (!whole) {
        c = buf, ldc = NR;
        if (acc) {
            memset(buf, 0, sizeof buf);
            for (int i = 0; i < rows; i++) memcpy(buf + i * NR, y + i * ldy, sizeof(float) * (size_t)cols);
        }
    }
    const int nv = (cols + 7) / 8;
    for (int64_t k0 = 0; k0 < kk; k0 += IG_KC) {
        const int64_t kc = kk - k0 < IG_KC ? kk - k0 : IG_KC;
        cpu_store_act last = k0 + kc == kk ? act : (cpu_store_act){0};  // on the finished sums only
        last.stream = last.stream && whole;  // only whole tiles store to y itself
        tile_6(nv, kc, a + k0 * MR_AVX2, MR_AVX2, 1, tab ? b : b + k0 * NR, NR, tab ? tab + k0 : NULL, c, ldc,
               acc || k0 ? NULL : bias6, rows, last);
    }
    if (!whole)
        for (int i = 0; i < rows; i++) memcpy(y + i * ldy, buf + i * NR, sizeof(float) * (size_t)cols);
}

FAST_TARGET_AVX2 static void ig_tile_avx2(int64_t kk, const float *a, const float *b, float *y, int64_t ldy, int rows,
                                          int cols, const float *bias, bool acc, cpu_store_act act) {
    ig_tile_avx2_body(kk, a, b, NULL, y, ldy, rows, cols, bias, acc, act);
}

// ig_tile_x on AVX2: b's rows read at xb + tab[k], 8 * nv floats each (nv vectors cover cols).
FAST_TARGET_AVX2 static void ig_tile_x_avx2(int64_t kk, const float *a, const float *xb, const int64_t *tab, float *y,
                                            int64_t ldy, int rows, int cols, const float *bias, cpu_store_act act) {
    ig_tile_avx2_body(kk, a, xb, tab, y, ldy, rows, cols, bias, false, act);
}

// dw_tile over MR_AVX2 rows of dW in sub-tiles (tile_6) over the cnt positions: the panel's rows
// are the a (a(j, i) = panel[i * ldp + j]), dyt the b. Columns that end inside a vector (cols not
// a multiple of 8) go through copies.
FAST_TARGET_AVX2 static void dw_tile_avx2(int64_t cnt, const float *panel, int64_t ldp, const float *dyt,
                                          int64_t lddy, float *dwt, int64_t ldw, int rows, int cols, bool init) {
    static const float zeros[MR_AVX2];  // init: sub_tile's "bias", so the sums start from 0
    float bbuf[DW_J * NR] __attribute__((aligned(32))), cbuf[MR_AVX2 * NR] __attribute__((aligned(32)));
    // dw_run's next call works on the next rows: fetch them now (dwt may be too large for the
    // L2 cache, and each sub-tile waits for its sums before its first FMA). Prefetches never fault.
    for (int i = 0; i < MR_AVX2; i++) {
        _mm_prefetch((const char *)(dwt + (MR_AVX2 + i) * ldw), _MM_HINT_T0);
        _mm_prefetch((const char *)(dwt + (MR_AVX2 + i) * ldw + 16), _MM_HINT_T0);
    }
    const bool copy = cols % 8 != 0;
    if (copy) {
        memset(bbuf, 0, sizeof(float) * (size_t)(cnt * NR));
        for (int64_t j = 0; j < cnt; j++) memcpy(bbuf + j * NR, dyt + j * lddy, sizeof(float) * (size_t)cols);
        memset(cbuf, 0, sizeof cbuf);
        if (!init)
            for (int i = 0; i < rows; i++) memcpy(cbuf + i * NR, dwt + i * ldw, sizeof(float) * (size_t)cols);
    }
    tile_6((cols + 7) / 8, cnt, panel, 1, ldp, copy ? bbuf : dyt, copy ? NR : lddy, NULL, copy ? cbuf : dwt,
           copy ? NR : ldw, init ? zeros : NULL, rows, (cpu_store_act){0});
    if (copy)
        for (int i = 0; i < rows; i++) memcpy(dwt + i * ldw, cbuf + i * NR, sizeof(float) * (size_t)cols);
}

// dw_seg's R x 8*NV sub-tile on AVX2: rows i of a read from xp + seg.off + roff[i] on, runs of
// positions (seg) at a time, b = dyt (row stride ldb); init: the sums start from 0, else from c.
FAST_TARGET_AVX2 static inline __attribute__((always_inline)) void
seg_tile(const int R, const int NV, int64_t nseg, const dw_run_seg *seg, const float *xp, const int64_t *roff,
         const float *b, int64_t ldb, float *c, int64_t ldc, bool init, int rows) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[i][v] = init ? _mm256_setzero_ps() : _mm256_loadu_ps(c + i * ldc + 8 * v);
    for (int64_t s = 0; s < nseg; s++) {
        const float *ap[6], *bj = b + seg[s].j * ldb;
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) ap[i] = xp + seg[s].off + roff[i];
        for (int64_t t = 0; t < seg[s].len; t++, bj += ldb) {
            __m256 bv[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(bj + 8 * v);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                const __m256 av = _mm256_broadcast_ss(ap[i] + t);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
        if (i < rows)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

// dw_seg on AVX2: MR_AVX2 rows by cols filters in 6 x 16 sub-tiles (4 x 16 for 3 or 4 rows, 2 x 16
// for 1 or 2), each element the same chain as dw_seg's. Columns that end inside a vector go
// through copies, as in dw_tile_avx2.
FAST_TARGET_AVX2 static void dw_seg_avx2(int64_t nseg, const dw_run_seg *seg, const float *xp, const int64_t *roff,
                                         const float *dyt, int64_t lddy, float *dwt, int64_t ldw, int rows, int cols,
                                         bool init) {
    float bbuf[DW_J * NR] __attribute__((aligned(32))), cbuf[MR_AVX2 * NR] __attribute__((aligned(32)));
    const bool copy = cols % 8 != 0;
    const float *b = dyt;
    float *c = dwt;
    int64_t ldb = lddy, ldc = ldw;
    if (copy) {
        int64_t cnt = 0;
        for (int64_t s = 0; s < nseg; s++) cnt = seg[s].j + seg[s].len > cnt ? seg[s].j + seg[s].len : cnt;
        memset(bbuf, 0, sizeof(float) * (size_t)(cnt * NR));
        for (int64_t j = 0; j < cnt; j++) memcpy(bbuf + j * NR, dyt + j * lddy, sizeof(float) * (size_t)cols);
        memset(cbuf, 0, sizeof cbuf);
        if (!init)
            for (int i = 0; i < rows; i++) memcpy(cbuf + i * NR, dwt + i * ldw, sizeof(float) * (size_t)cols);
        b = bbuf, c = cbuf, ldb = NR, ldc = NR;
    }
    const int nv = (cols + 7) / 8;
    for (int v = 0; v < nv; v += 2) {
        const bool two = nv - v >= 2;
        if (rows > 4) {
            if (two) seg_tile(6, 2, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
            else seg_tile(6, 1, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
        } else if (rows > 2) {
            if (two) seg_tile(4, 2, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
            else seg_tile(4, 1, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
        } else {
            if (two) seg_tile(2, 2, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
            else seg_tile(2, 1, nseg, seg, xp, roff, b + 8 * v, ldb, c + 8 * v, ldc, init, rows);
        }
    }
    if (copy)
        for (int i = 0; i < rows; i++) memcpy(dwt + i * ldw, cbuf + i * NR, sizeof(float) * (size_t)cols);
}

// r0..r7 (8x8 floats, a row each) = their transpose.
#define TRANSPOSE8(r0, r1, r2, r3, r4, r5, r6, r7)                                                   \
    {                                                                                                \
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);                     \
        __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);                     \
        __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);                     \
        __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);                     \
        __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);           \
        __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);           \
        __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);           \
        __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);           \
        r0 = _mm256_permute2f128_ps(s0, s4, 0x20), r1 = _mm256_permute2f128_ps(s1, s5, 0x20);        \
        r2 = _mm256_permute2f128_ps(s2, s6, 0x20), r3 = _mm256_permute2f128_ps(s3, s7, 0x20);        \
        r4 = _mm256_permute2f128_ps(s0, s4, 0x31), r5 = _mm256_permute2f128_ps(s1, s5, 0x31);        \
        r6 = _mm256_permute2f128_ps(s2, s6, 0x31), r7 = _mm256_permute2f128_ps(s3, s7, 0x31);        \
    }

// Row i (< nf) of an 8x8 block: 8 floats of src, or its first nj lane by lane; 0 past nf.
FAST_TARGET_AVX2 static inline __m256 block_row(const float *src, int64_t i, int64_t nf, int64_t nj) {
    if (i >= nf) return _mm256_setzero_ps();
    if (nj == 8) return _mm256_loadu_ps(src);
    float t[8] = {0};
    memcpy(t, src, sizeof(float) * (size_t)nj);
    return _mm256_loadu_ps(t);
}

// dyt [cnt][F] = dy [F][cnt] (row stride P) in 8x8 blocks transposed in registers (on Zen 3 an
// 8-lane gather costs more than the whole block; on AVX-512 too: ig_avx512). Blocks of fewer than
// 8 positions load, and of fewer than 8 filters store, lane by lane.
FAST_TARGET_AVX2 static void dy_transpose_avx2(const float *dy, int64_t P, int64_t F, int64_t cnt, float *dyt) {
    for (int64_t f0 = 0; f0 < F; f0 += 8) {
        const int64_t nf = F - f0 < 8 ? F - f0 : 8;
        for (int64_t j0 = 0; j0 < cnt; j0 += 8) {
            const int64_t nj = cnt - j0 < 8 ? cnt - j0 : 8;
            const float *src = dy + f0 * P + j0;
            __m256 r0 = block_row(src, 0, nf, nj), r1 = block_row(src + P, 1, nf, nj);
            __m256 r2 = block_row(src + 2 * P, 2, nf, nj), r3 = block_row(src + 3 * P, 3, nf, nj);
            __m256 r4 = block_row(src + 4 * P, 4, nf, nj), r5 = block_row(src + 5 * P, 5, nf, nj);
            __m256 r6 = block_row(src + 6 * P, 6, nf, nj), r7 = block_row(src + 7 * P, 7, nf, nj);
            TRANSPOSE8(r0, r1, r2, r3, r4, r5, r6, r7);
            float *dst = dyt + j0 * F + f0;
            if (nf == 8 && nj == 8) {
                _mm256_storeu_ps(dst, r0), _mm256_storeu_ps(dst + F, r1);
                _mm256_storeu_ps(dst + 2 * F, r2), _mm256_storeu_ps(dst + 3 * F, r3);
                _mm256_storeu_ps(dst + 4 * F, r4), _mm256_storeu_ps(dst + 5 * F, r5);
                _mm256_storeu_ps(dst + 6 * F, r6), _mm256_storeu_ps(dst + 7 * F, r7);
            } else {
                float t[8][8];
                _mm256_storeu_ps(t[0], r0), _mm256_storeu_ps(t[1], r1), _mm256_storeu_ps(t[2], r2);
                _mm256_storeu_ps(t[3], r3), _mm256_storeu_ps(t[4], r4), _mm256_storeu_ps(t[5], r5);
                _mm256_storeu_ps(t[6], r6), _mm256_storeu_ps(t[7], r7);
                for (int64_t l = 0; l < nj; l++) memcpy(dst + l * F, t[l], sizeof(float) * (size_t)nf);
            }
        }
    }
}

// bias_sum with each of its 8-lane double vectors a0..a3 as two 4-lane halves (lanes 0-3, 4-7):
// every lane sums the same elements in the same order, and the halves meet in lanes_sum8.
FAST_TARGET_AVX2 static double bias_sum_avx2(int64_t n, int64_t stride, int64_t P, const float *dy) {
    __m256d a0l = _mm256_setzero_pd(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l, a3l = a0l, a3h = a0l;
#define ADD(acc, src) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(src)))
    for (int64_t s = 0; s < n; s++) {
        const float *row = dy + s * stride;
        int64_t i = 0;
        for (; i + 32 <= P; i += 32) {
            ADD(a0l, row + i), ADD(a0h, row + i + 4), ADD(a1l, row + i + 8), ADD(a1h, row + i + 12);
            ADD(a2l, row + i + 16), ADD(a2h, row + i + 20), ADD(a3l, row + i + 24), ADD(a3h, row + i + 28);
        }
        for (; i < P; i += 8) {  // into a0, the lanes past P adding 0 as the masked load there does
            float t[8] = {0};
            memcpy(t, row + i, sizeof(float) * (size_t)(P - i >= 8 ? 8 : P - i));
            ADD(a0l, t), ADD(a0h, t + 4);
        }
    }
#undef ADD
    double l[8];
    _mm256_storeu_pd(l, _mm256_add_pd(_mm256_add_pd(a0l, a1l), _mm256_add_pd(a2l, a3l)));
    _mm256_storeu_pd(l + 4, _mm256_add_pd(_mm256_add_pd(a0h, a1h), _mm256_add_pd(a2h, a3h)));
    return lanes_sum8(l);
}

// dst [kk][8] = w's nr rows (kk floats each, ld apart; 0 for rows nr .. 7) transposed, each row
// read backwards when rev (dst[k][i] = row i's element kk - 1 - k), 8 x 8 blocks in registers:
// the packs for mr = 8 (AVX-512's row tiles). Written float by float with stride 8, the forward's
// pack of CosmoFlow's 256 -> 512 weights (14 MB) was 30% of that layer's forward on 2^3 maps and
// the flipped one 26% of its input gradient.
FAST_TARGET_AVX2 static void pack_rows8(const float *w, int64_t ld, int64_t kk, int64_t nr, bool rev, float *dst) {
    const __m256i back = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    int64_t k0 = 0;
    for (; k0 + 8 <= kk; k0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++) {
            const float *src = w + i * ld + (rev ? kk - 8 - k0 : k0);
            r[i] = i < nr ? _mm256_loadu_ps(src) : _mm256_setzero_ps();
            if (rev) r[i] = _mm256_permutevar8x32_ps(r[i], back);
        }
        TRANSPOSE8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
        for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (k0 + j) * 8, r[j]);
    }
    for (; k0 < kk; k0++)
        for (int64_t i = 0; i < 8; i++) dst[k0 * 8 + i] = i < nr ? w[i * ld + (rev ? kk - 1 - k0 : k0)] : 0.0f;
}

// dy_transpose_avx2 on AVX-512 too: 16-lane gathers (one per position and 16 filters) took 5% of
// the small CNN's step on a 2-core Xeon, the 8 x 8 register blocks +4% samples/s (median of 6
// alternating pairs); 16 x 16 blocks in AVX-512 registers were 2-4% slower than these.
static const ig_kernels ig_avx512 = {ig_panel, ig_tile, ig_tile_x, dw_tile, dy_transpose_avx2, dw_seg, bias_sum, MR};
static const ig_kernels ig_avx2 = {ig_panel_avx2, ig_tile_avx2, ig_tile_x_avx2, dw_tile_avx2, dy_transpose_avx2,
                                   dw_seg_avx2, bias_sum_avx2, MR_AVX2};

#endif  // FAST_BUILT

// The kernels of the best instruction set this CPU has (cpu_isa.h: capped by GALLEY_CPU_ISA);
// NULL: none.
static const ig_kernels *ig_kernels_get(void) {
#if FAST_BUILT
    const int v = cpu_isa_best();
    return v == 2 ? &ig_avx512 : v == 1 ? &ig_avx2 : NULL;
#else
    return NULL;
#endif
}

int cpu_conv_fast_isa(void) {
    const ig_kernels *kr = ig_kernels_get();
#if FAST_BUILT
    if (kr == &ig_avx512) return CPU_ISA_AVX512;
#endif
    return kr ? CPU_ISA_AVX2 : CPU_ISA_NONE;
}

cpu_conv_tile_fn cpu_conv_fast_tile(int *mr) {
    const ig_kernels *kr = ig_kernels_get();
    *mr = kr ? kr->mr : 0;
    return kr ? kr->tile : NULL;
}

cpu_conv_dw_tile_fn cpu_conv_fast_dw_tile(int *mr) {
    const ig_kernels *kr = ig_kernels_get();
    *mr = kr ? kr->mr : 0;
    return kr ? kr->dw_tile : NULL;
}

// ---- drivers, shared by both instruction sets ------------------------------------------------------

// Output bytes from which ig_run streams its stores past the caches (see there).
#define IG_STREAM_BYTES (8.0 * 1024 * 1024)

// Panel rows per reduction block of ig_run: every row block of weights passes over one block of
// the panel before the next block, so a long panel (kk * NR floats: 864 KiB for a 256 -> 512
// 3x3x3 layer) is read from the L2 cache once per block rather than from memory once per row
// block. Sums go through y between blocks, in float, as in the registers: the same bits.
#define IG_KB 1024

// One panel's cnt columns (cnt <= NR) through the row blocks [m0, m1) of the packed weights into
// yt (row stride ldy): y = bias (or y itself when acc) + the sum over k, in blocks of IG_KB rows
// of the panel, act applied as the last block stores.
static void ig_tiles_run(const ig_kernels *kr, const ig_plan *g, const float *apack, int64_t m0, int64_t m1,
                         const float *panel, int64_t cnt, const float *bias, bool acc, cpu_store_act act, float *yt,
                         int64_t ldy) {
    const int64_t mr = kr->mr;
    for (int64_t k0 = 0; k0 < g->kk; k0 += IG_KB) {
        const int64_t kc = g->kk - k0 < IG_KB ? g->kk - k0 : IG_KB;
        for (int64_t m = m0; m < m1; m++) {
            const int64_t rows = g->geo.f - m * mr < mr ? g->geo.f - m * mr : mr;
            kr->tile(kc, apack + (m * g->kk + k0) * mr, panel + k0 * NR, yt + m * mr * ldy, ldy, (int)rows, (int)cnt,
                     bias && !k0 ? bias + m * mr : NULL, acc || k0, k0 + kc == g->kk ? act : (cpu_store_act){0});
        }
    }
}

// y (n, cout, out) = conv(x (n, cin, in)) + bias, or y += conv(x) when acc. apack holds the
// weights in mr-row panels [kk][mr] (ig_pack_*, mr = kr->mr); panels has room for `threads` of
// ig_panel_floats. A task is one tile: NR positions of one sample, or the whole small maps of
// ig_samples_per_tile samples side by side, whose outputs go through a copy [cout][NR].
static void ig_run(const ig_kernels *kr, const ig_plan *g, int64_t n, const float *x, const float *apack,
                   const float *bias, bool acc, float *y, float *panels, int threads, cpu_store_act act) {
    const int64_t mr = kr->mr, mp = (g->geo.f + mr - 1) / mr, P = g->out_pos, spt = ig_samples_per_tile(P);
    const int64_t tiles = spt > 1 ? 1 : (P + NR - 1) / NR, ntiles = ig_tiles(n, P);
    // Fewer tiles than 4 per thread (deep layers on small maps at small batches: CosmoFlow's 256
    // -> 512 one has 2 tiles at batch 8) are split by rows of output channels too, each task
    // building its tile's panel: a thread then reads only its rows of the weights (14 MB there)
    // rather than all of them per tile. The chunk of tasks a thread takes shrinks with them; a
    // chunk of 8 gave both of those 2 tiles to one thread. An output element is still one task's
    // sum in k order: the same bits at any split.
    int64_t msplit = ntiles >= 4 * (int64_t)threads ? 1 : (4 * (int64_t)threads + ntiles - 1) / ntiles;
    msplit = msplit < mp ? msplit : mp;
    const int64_t tasks = ntiles * msplit, chunk = tasks / (4 * (int64_t)threads) < 1 ? 1
                                                   : tasks / (4 * (int64_t)threads) > 8 ? 8
                                                   : tasks / (4 * (int64_t)threads);
    if (tasks < threads) threads = (int)tasks;
    // An output of IG_STREAM_BYTES or more, written whole (not accumulated), goes to memory with
    // non-temporal stores from whole tiles (AVX2 kernels; the AVX-512 ones store as usual): it
    // does not fit the caches anyway, and a plain store first reads each line in. Measured on a
    // 2-core EPYC: the small CNN's first convolution (3 -> 32 on 32x32, batch 64: 8 MiB) 0.275 ->
    // 0.157 s over 120 steps, the whole step 4% faster. Stores only: the same bits.
    act.stream = !acc && spt == 1 && P % 8 == 0 && (uintptr_t)y % 32 == 0 &&
                 4.0 * (double)n * (double)g->geo.f * (double)P >= IG_STREAM_BYTES;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        float *panel = panels + (int64_t)omp_get_thread_num() * ig_panel_floats(g), *yb = panel + g->kk * NR;
        int64_t built = -1;  // the tile whose panel this thread holds
#pragma omp for schedule(dynamic, chunk)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t t = task / msplit, ms = task % msplit, m0 = mp * ms / msplit, m1 = mp * (ms + 1) / msplit;
            const int64_t s0 = t / tiles * spt, ns = n - s0 < spt ? n - s0 : spt, p0 = t % tiles * NR;
            const int64_t cnt = spt > 1 ? ns * P : P - p0 < NR ? P - p0 : NR;
            // A tile split by rows of channels: a thread that takes the next part of the tile whose
            // panel it built keeps it (CosmoFlow's 256 -> 512 on 2^3: 8 tasks of 2 tiles, each
            // building the same 884 KiB panel, 23% of that layer's forward).
            if (t != built) {
                if (cnt < NR)
                    for (int64_t r = 0; r < g->kk; r++) memset(panel + r * NR + cnt, 0, sizeof(float) * (size_t)(NR - cnt));
                for (int64_t i = 0; i < ns; i++)
                    kr->panel(g, x + (s0 + i) * g->geo.c * g->in_pos, p0, spt > 1 ? P : cnt, 0, g->geo.c, panel, NR, i * P);
                built = t;
            }
            // outputs: y itself (row stride P), or yb [cout][NR] holding the ns samples' maps
            float *yt = spt > 1 ? yb : y + s0 * g->geo.f * P + p0;
            const int64_t ldy = spt > 1 ? NR : P;
            const int64_t c0 = m0 * mr, c1 = m1 * mr < g->geo.f ? m1 * mr : g->geo.f;  // this task's channels
            if (spt > 1 && acc)
                for (int64_t i = 0; i < ns; i++)
                    for (int64_t c = c0; c < c1; c++)
                        memcpy(yb + c * NR + i * P, y + ((s0 + i) * g->geo.f + c) * P, sizeof(float) * (size_t)P);
            ig_tiles_run(kr, g, apack, m0, m1, panel, cnt, bias, acc, act, yt, ldy);
            if (spt > 1)
                for (int64_t i = 0; i < ns; i++)
                    for (int64_t c = c0; c < c1; c++)
                        memcpy(y + ((s0 + i) * g->geo.f + c) * P, yb + c * NR + i * P, sizeof(float) * (size_t)P);
#if FAST_BUILT
            if (act.stream) _mm_sfence();
#endif
        }
    }
}

// The padded input of the direct kernels (dw_direct, ig_direct): x (n, cin, in) with p zeros before
// and after each axis, so that every tap of every output position reads inside it; dims
// [n][cin][Dp][Hp][Wp].
static void dwx_dims(const ig_plan *g, int64_t dp[3]) {
    for (int a = 0; a < 3; a++) dp[a] = g->geo.in[a] + 2 * g->geo.p[a];
}
static int64_t dwx_floats(const ig_plan *g, int64_t n) {
    int64_t dp[3];
    dwx_dims(g, dp);
    return n * g->geo.c * dp[0] * dp[1] * dp[2];
}

// Each float written once: zeros only where the padding is (clearing whole planes first wrote the
// small CNN's inputs twice), rows by cpu_rows.h.
static void dwx_pad(const ig_plan *g, int64_t n, const float *x, float *xp) {
    int64_t dp[3];
    dwx_dims(g, dp);
    const int64_t D = g->geo.in[0], H = g->geo.in[1], W = g->geo.in[2], plane = dp[0] * dp[1] * dp[2];
    const int64_t pz = g->geo.p[0], py = g->geo.p[1], px = g->geo.p[2], Wp = dp[2], rows = dp[0] * dp[1];
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < n * g->geo.c; q++) {
        float *dst = xp + q * plane;
        for (int64_t r = 0; r < rows; r++) {
            float *row = dst + r * Wp;
            const int64_t z = r / dp[1] - pz, y = r % dp[1] - py;
            if (z < 0 || z >= D || y < 0 || y >= H) {
                cpu_row_zero(row, Wp);
                continue;
            }
            cpu_row_pad(row, px, x + (q * D * H + z * H + y) * W, W, px);
        }
    }
}

// tab[r] = where row r of dW, or of the forward's panel (channel c, tap kz, ky, kx), reads the
// padded input, relative to an output position's own offset, for r < kkp; rows past kk read row
// 0's (summed, never stored).
static void dwx_rows(const ig_plan *g, int64_t kkp, int64_t *tab) {
    int64_t dp[3];
    dwx_dims(g, dp);
    const int64_t KH = g->geo.k[1], KW = g->geo.k[2], plane = dp[0] * dp[1] * dp[2];
    for (int64_t r = 0; r < kkp; r++) {
        const int64_t c = r < g->kk ? r / g->taps : 0, t = r < g->kk ? r % g->taps : 0;
        const int64_t kz = t / (KH * KW), ky = t / KW % KH, kx = t % KW;
        tab[r] = c * plane + (kz * g->geo.d[0] * dp[1] + ky * g->geo.d[1]) * dp[2] + kx * g->geo.d[2];
    }
}

// Room for nrows rows' offsets (int64: 8-byte aligned, a float earlier where the end is not) and
// then xpf floats of padded input at the end of the `floats` floats from base: returns the floats
// left before them (under 1: they do not fit), with *tab and *xp where they go.
static int64_t dwx_place(float *base, int64_t floats, int64_t xpf, int64_t nrows, int64_t **tab, float **xp) {
    int64_t x0 = floats - xpf - 2 * nrows;
    if (x0 > 0 && (uintptr_t)(base + x0) % sizeof(int64_t)) x0--;
    *tab = (int64_t *)(void *)(base + (x0 > 0 ? x0 : 0));
    *xp = base + (x0 > 0 ? x0 : 0) + 2 * nrows;
    return x0;
}

// ig_run with a max pool of windows {kd, 2, 2} fused into the store (cpu_store_pool): a task is
// one row of windows of one sample, the 2 kd output rows they cover (kd runs of 2 W contiguous
// positions). Its tiles take NR columns of those runs side by side into yb [cout][R] (R = 2 kd W:
// a few KiB, in L1), then each channel's windows are pooled from there (cpu_max_pool_k2_rows): the convolution's
// output never goes to memory, nor is read back by a pooling pass. Each output is the same sum
// as in ig_run (one chain over k whatever the tiling), so pooled and argmax have the bits of
// ig_run then cpu_max_pool_forward. false, having done nothing: too little scratch, or fewer
// tasks than threads.
// The longest reduction ig_run_pool takes: it pays where the output's memory traffic is much of
// the layer's time (few input channels), not where the products are. Measured on a 2-core Xeon
// (AVX-512, 2 threads, best of 20, fused against convolution then pooling pass): first layers
// (kk 27: 1 -> 16 on 40^3, 3 -> 32 on 32^2) 0.57-0.76x the time, CosmoFlow's 4 -> 32 (kk 108)
// faster too; 32 -> 64 on 16^2 (kk 288) 0.99x alone but 1.07x in training; 32 -> 64 on 10^3 (kk 864)
// 1.09x.
//
// With xp (ig_direct: the input padded once, dwx_pad, and the taps' offsets into it, dwx_rows) no
// panel is built: output (oz, oy, ox) is column oz Hp Wp + oy Wp + ox of the padded input's
// geometry, so that the columns of a tile are contiguous there for every tap, and the tiles read
// their rows of "panel" from xp + tab[k] in place (ig_tile_x). A row of yb then holds the padded
// width Wp, of which the last Wp - W columns are computed and never read (6% more products at 32
// wide, 5% at 40). Measured on a 2-core Xeon (AVX-512, 2 threads): building the panel was 43% of
// cnn3d's first layer (1 -> 16 on 40^3: 27 rows repeating each input element 27 times); without
// it that layer's forward took 0.162 s over 40 steps instead of 0.204, cnn3d +3.0% by median of 8
// alternating pairs. The same products in the same order: the same bits.
#define IG_POOL_KK 256
// The longest reduction ig_run_pool takes with ig_direct (no panel to build, so longer ones gain):
// the small CNN's 32 -> 64 on 16x16 (kk 288) forward 0.754-0.764 -> 0.692-0.693 s over 300 steps
// fused this way rather than convolved and pooled after; CosmoFlow's 32 -> 64 on 16^3 (kk 864,
// forced off F(2,3)) 62.7-62.9 -> 60.6-62.7 samples/s, so not that far.
#define IG_DIRECT_KK 512

typedef struct {
    float *xp;     // [n][cin][Dp][Hp][Wp] and NR floats after it (read by a last tile's lanes)
    int64_t *tab;  // [kk]: dwx_rows
} ig_direct;

static bool ig_run_pool(const ig_kernels *kr, const ig_plan *g, int64_t n, const float *x, const ig_direct *xd,
                        const float *apack, const float *bias, float *bufs, int64_t buf_floats, cpu_store_act act,
                        const cpu_store_pool *pool) {
    const int64_t mr = kr->mr, mp = (g->geo.f + mr - 1) / mr, kd = pool->kd, F = g->geo.f;
    const int64_t H = g->geo.out[1], W = g->geo.out[2], OD = g->geo.out[0] / kd, OH = H / 2, OW = W / 2;
    int64_t dp[3];
    dwx_dims(g, dp);
    const int64_t Wr = xd ? dp[2] : W, R = 2 * kd * Wr, PP = OD * OH * OW;  // Wr: yb's row pitch
    int64_t threads = omp_get_max_threads();
    // A task: rpt rows of windows of one plane (rpt R columns, in tiles of NR that may span rows),
    // so that each channel's pooled values go out in runs of rpt OW. rpt starts at the plane and
    // is halved until there are 4 tasks a thread, down to rows that fill a tile, and to yb of at
    // most 32k floats. Maps whose plane of windows does not fill a tile (CosmoFlow's last layers
    // on 4^3 and 2^3), or fewer than 2 tasks a thread: false (ig_run packs several samples into a
    // tile or splits the output channels there, reading the weights fewer times: rows of 16
    // columns took 2x as long on CosmoFlow's 128 -> 256 layer on 4^3).
    const int64_t rmin = (NR + R - 1) / R;
    if (OH < rmin || g->kk > (xd ? IG_DIRECT_KK : IG_POOL_KK)) return false;
    int64_t rpt = OH;
    while (rpt > rmin && (n * OD * ((OH + rpt - 1) / rpt) < 4 * threads || F * rpt * R > 32768)) rpt = (rpt + 1) / 2;
    rpt = rpt > rmin ? rpt : rmin;
    const int64_t blocks = (OH + rpt - 1) / rpt, tasks = n * OD * blocks, L = rpt * R;
    const int64_t pf = xd ? 0 : g->kk * NR, per = pf + F * L;  // pf: the panel
    threads = threads < buf_floats / per ? threads : buf_floats / per;
    if (threads < 1 || tasks < 2 * threads) return false;
    act.stream = false;
    if (xd) {  // padded here, once the fused path is sure to run
        dwx_pad(g, n, x, xd->xp), dwx_rows(g, g->kk, xd->tab);
        memset(xd->xp + dwx_floats(g, n), 0, sizeof(float) * NR);
    }
#pragma omp parallel num_threads((int)threads)
    {
        float *panel = bufs + (int64_t)omp_get_thread_num() * per, *yb = panel + pf;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t s = task / (OD * blocks), od = task / blocks % OD, oh0 = task % blocks * rpt;
            const int64_t rows = OH - oh0 < rpt ? OH - oh0 : rpt, cols = xd ? 0 : rows * R;  // yb [F][L]: rows x R used
            const float *xs = x + s * g->geo.c * g->in_pos;
            // direct: yb [F][kd][rpt][2 Wr], plane z's 2 rows output rows a run of (2 rows - 1) Wp + W columns
            for (int64_t z = 0; xd && z < kd; z++) {
                const float *xb = xd->xp + ((s * g->geo.c * dp[0] + od * kd + z) * dp[1] + 2 * oh0) * dp[2];
                const int64_t span = (2 * rows - 1) * Wr + W;
                for (int64_t j0 = 0; j0 < span; j0 += NR) {
                    const int cnt = (int)(span - j0 < NR ? span - j0 : NR);
                    for (int64_t m = 0; m < mp; m++)
                        kr->tile_x(g->kk, apack + m * g->kk * mr, xb + j0, xd->tab, yb + m * mr * L + z * rpt * 2 * Wr + j0,
                                   L, (int)(F - m * mr < mr ? F - m * mr : mr), cnt, bias ? bias + m * mr : NULL, act);
                }
            }
            for (int64_t j0 = 0; j0 < cols; j0 += NR) {
                const int64_t cnt = cols - j0 < NR ? cols - j0 : NR;
                if (cnt < NR)
                    for (int64_t r = 0; r < g->kk; r++) memset(panel + r * NR + cnt, 0, sizeof(float) * (size_t)(NR - cnt));
                for (int64_t j = j0; j < j0 + cnt;) {  // row of windows oh0 + j / R: kd runs of 2 W positions
                    const int64_t z = j % R / (2 * W), off = j % (2 * W), oh = oh0 + j / R;
                    const int64_t len = 2 * W - off < j0 + cnt - j ? 2 * W - off : j0 + cnt - j;
                    kr->panel(g, xs, ((od * kd + z) * H + 2 * oh) * W + off, len, 0, g->geo.c, panel, NR, j - j0);
                    j += len;
                }
                ig_tiles_run(kr, g, apack, 0, mp, panel, cnt, bias, false, act, yb + j0, L);
            }
            for (int64_t r = 0; r < rows; r++) {
                // the window row's output rows: [z][2 Wr] (panel) or [z][rpt][2 Wr] (direct)
                const float *row = yb + r * (xd ? 2 * Wr : R), *row2 = xd ? row + rpt * 2 * Wr : row + 2 * W;
                const int64_t o = s * F * PP + (od * OH + oh0 + r) * OW;
                cpu_max_pool_k2_rows(F, L, PP, OW, (int)kd, row, row + Wr, kd == 2 ? row2 : NULL,
                                     kd == 2 ? row2 + Wr : NULL, (int32_t)((od * kd * H + 2 * (oh0 + r)) * W),
                                     (int32_t)W, (int32_t)(H * W), pool->y + o, pool->argmax + o);
            }
        }
    }
    return true;
}

// Floats of dw_run's buffer per thread and tile of a group: panel columns [kkp][NR] and the
// transposed dy [NR][F], kkp the reduction length padded for either instruction set.
static int64_t dw_per_tile(const ig_plan *g) { return ig_rows_padded(g->kk) * NR + NR * g->geo.f; }

// The part of dW one thread sums for one group of tiles: row blocks [b0, b1) of dW (mr rows
// each), filters [fa, fb), and the input channels [c_lo, c_hi) those rows read.
typedef struct {
    int64_t b0, b1, fa, fb, c_lo, c_hi;
} dw_block;

// The runs of output positions p0 .. p0+len-1 of sample s, cut at the ends of output rows, as
// group positions from j on; returns how many were appended at seg.
static int64_t dwx_runs(const ig_plan *g, int64_t s, int64_t p0, int64_t len, int64_t j, dw_run_seg *seg) {
    int64_t dp[3], ns = 0;
    dwx_dims(g, dp);
    const int64_t OH = g->geo.out[1], OW = g->geo.out[2], sstride = g->geo.c * dp[0] * dp[1] * dp[2];
    int64_t oz = p0 / (OH * OW), oy = p0 / OW % OH, ox = p0 % OW;  // then stepped: no division a run
    for (int64_t q = 0; q < len;) {
        const int64_t run = OW - ox < len - q ? OW - ox : len - q;
        seg[ns++] = (dw_run_seg){.off = s * sstride + (oz * dp[1] + oy) * dp[2] + ox, .j = j + q, .len = run};
        q += run, ox = 0;
        if (++oy == OH) oy = 0, oz++;
    }
    return ns;
}

// out [kkp][F] (its block k) += the tiles [T0, T1)'s positions, in order, side by side in panel
// [kkp][ldp] and dyt [J][fb - fa]; with init the sums start from 0 (the first group). With xp
// (dw_direct: the padded input) no panel is built: the tiles' positions become runs along output
// rows and the register tiles read the taps' values from xp, in the same order.
static void dw_group(const ig_kernels *kr, const ig_plan *g, int64_t n, const float *x, const float *xp,
                     const int64_t *tab, const float *dy, int64_t T0, int64_t T1, const dw_block *k, float *panel, float *dyt,
                     int64_t ldp, float *out, bool init) {
    const int64_t mr = kr->mr, P = g->out_pos, F = g->geo.f, fw = k->fb - k->fa, spt = ig_samples_per_tile(P);
    const int64_t tps = spt > 1 ? 1 : (P + NR - 1) / NR;
    dw_run_seg seg[DW_J];  // a group's positions are at most DW_J (cpu_conv_fast_weight_grad's tg)
    int64_t J = 0, nseg = 0;  // the group's positions so far: its panel columns and dyt rows
    for (int64_t T = T0; T < T1; T++) {
        const int64_t s0 = T / tps * spt, p0 = T % tps * NR, ns = n - s0 < spt ? n - s0 : spt;
        const int64_t len = spt > 1 ? P : P - p0 < NR ? P - p0 : NR;  // positions per sample
        for (int64_t i = 0; i < ns; i++, J += len) {
            if (xp)
                nseg += dwx_runs(g, s0 + i, p0, len, J, seg + nseg);
            else
                kr->panel(g, x + (s0 + i) * g->geo.c * g->in_pos, p0, len, k->c_lo, k->c_hi, panel, ldp, J);
            kr->dy_transpose(dy + ((s0 + i) * F + k->fa) * P + p0, P, fw, len, dyt + J * fw);  // [len][fw]
        }
    }
    for (int64_t b = k->b0; b < k->b1; b++) {
        const int64_t rows = g->kk - b * mr < mr ? g->kk - b * mr : mr;
        for (int64_t f0 = k->fa; f0 < k->fb; f0 += NR) {
            const int cols = (int)(k->fb - f0 < NR ? k->fb - f0 : NR);
            if (xp)
                kr->dw_seg(nseg, seg, xp, tab + b * mr, dyt + (f0 - k->fa), fw, out + b * mr * F + f0, F, (int)rows, cols,
                           init);
            else
                kr->dw_tile(J, panel + b * mr * ldp, ldp, dyt + (f0 - k->fa), fw, out + b * mr * F + f0, F,
                            (int)rows, cols, init);
        }
    }
}

// dwt [kkp][F] = the weight gradient of g over n >= 1 samples (x (n, cin, in), dy (n, cout, out)),
// transposed. Threads own fixed blocks of dwt and run every sample and position in order, so
// each element's sum is the same at any thread count. The blocks are ranges of mr-row blocks of
// kk, each thread transposing all of dy; or, where kk is short next to F (a first layer's 3 or 4
// input channels: the dy transpose is then most of the work), ranges of 16 filters, each thread
// transposing only its own filters and building all of the (short) panel.
//
// Tiles (NR positions of a sample, or several samples' small maps) go in groups of tg, side by
// side in one panel [kkp][tg * NR] and one dyt [tg * NR][F]; each register tile of dwt then sums
// the group's positions (at most DW_J) before going back to memory, rather than one tile's 32: a
// 512 x 6912 dW (14 MB) otherwise went through memory once per tile. The order of every sum is
// still sample by sample and position by position. buf holds `threads` of tg * dw_per_tile.
static void dw_run(const ig_kernels *kr, const ig_plan *g, int64_t n, const float *x, const float *xp,
                   const int64_t *tab, const float *dy, float *dwt, float *buf, int threads, int64_t tg) {
    const int64_t mr = kr->mr, P = g->out_pos, F = g->geo.f, kb = (g->kk + mr - 1) / mr, fg = (F + 15) / 16;
    const int64_t kkp = kb * mr, per = tg * dw_per_tile(g), ldp = tg * NR, ntiles = ig_tiles(n, P);  // tiles in order
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
        const int64_t c_lo = b0 * mr / g->taps, c_hi0 = (b1 * mr + g->taps - 1) / g->taps;
        const int64_t c_hi = c_hi0 < g->geo.c ? c_hi0 : g->geo.c;
        const dw_block blk = {b0, b1, fa, fb, c_lo, c_hi};
        float *panel = buf + t * per, *dyt = panel + ig_rows_padded(g->kk) * ldp;
        memset(panel + g->kk * ldp, 0, sizeof(float) * (size_t)((kkp - g->kk) * ldp));  // rows past kk: read, unused
        for (int64_t T0 = 0; T0 < ntiles && b0 < b1 && fa < fb; T0 += tg)
            dw_group(kr, g, n, x, xp, tab, dy, T0, T0 + tg < ntiles ? T0 + tg : ntiles, &blk, panel, dyt, ldp, dwt, T0 == 0);
    }
}

// Chunks of a small weight gradient (dw_chunks): where dW is at most DW_CHUNK_MAX floats (first
// layers: 27 x 32 for RGB 3x3 into 32 filters, 108 x 32 for CosmoFlow's), dw_run would split
// only its few row blocks or filter groups, and every thread would transpose all of dy or build
// the whole panel: on a 2-core EPYC the 1 -> 16 3x3x3 layer on 40^3 maps took 0.64 s of a 5.0 s
// run for its dW, 28 GFLOP/s. Instead the tiles, in order, are cut into Q ranges fixed by the
// shape (Q = min(DW_CHUNKS, tiles)); each range's partial dW sums its positions in order from 0
// (as dw_run does for all of them), any thread taking any range; then dW = ((p_0 + p_1) + p_2)
// + ... in range order. The same bits at any thread count, and every thread's work its own.
#define DW_CHUNKS 16
#define DW_CHUNK_MAX 16384

// Q for n samples of g: 0 where dW is larger than DW_CHUNK_MAX floats (dw_run as it is).
static int64_t dw_chunks(const ig_plan *g, int64_t n) {
    if (g->kk * g->geo.f > DW_CHUNK_MAX) return 0;
    const int64_t t = ig_tiles(n, g->out_pos);
    return t < DW_CHUNKS ? t : DW_CHUNKS;
}

// dwt [kkp][F] as dw_chunks says, q ranges of tiles into part [q][kkp][F]; buf holds `threads`
// of tg * dw_per_tile.
static void dw_run_chunks(const ig_kernels *kr, const ig_plan *g, int64_t n, const float *x, const float *xp,
                          const int64_t *tab, const float *dy, float *dwt, float *part, int64_t q, float *buf, int threads, int64_t tg) {
    const int64_t mr = kr->mr, P = g->out_pos, F = g->geo.f, kb = (g->kk + mr - 1) / mr, kkp = kb * mr;
    const int64_t per = tg * dw_per_tile(g), ldp = tg * NR, ntiles = ig_tiles(n, P);
    if (q < threads) threads = (int)q;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        float *panel = buf + (int64_t)omp_get_thread_num() * per, *dyt = panel + ig_rows_padded(g->kk) * ldp;
        memset(panel + g->kk * ldp, 0, sizeof(float) * (size_t)((kkp - g->kk) * ldp));  // rows past kk: read, unused
        const dw_block all_of_it = {0, kb, 0, F, 0, g->geo.c};
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < q; r++) {
            const int64_t ta = ntiles * r / q, tb = ntiles * (r + 1) / q;
            for (int64_t T0 = ta; T0 < tb; T0 += tg)
                dw_group(kr, g, n, x, xp, tab, dy, T0, T0 + tg < tb ? T0 + tg : tb, &all_of_it, panel, dyt, ldp,
                         part + r * kkp * F, T0 == ta);
        }
    }
    const int64_t all = kkp * F;
#pragma omp parallel for schedule(static) if (all * q >= 65536)
    for (int64_t i = 0; i < all; i++) {
        float v = part[i];
        for (int64_t r = 1; r < q; r++) v += part[r * all + i];
        dwt[i] = v;
    }
}

// apack[m][k][i] = w[(m*mr + i) * kk + k], zero past cout: w is (cout, kk).
static void ig_pack_forward(const ig_plan *g, int64_t mr, const float *w, float *apack) {
    const int64_t mp = (g->geo.f + mr - 1) / mr;
#pragma omp parallel for schedule(static) if (mp * g->kk >= 65536)
    for (int64_t m = 0; m < mp; m++) {
#if FAST_BUILT
        if (mr == 8) {
            const int64_t nr = g->geo.f - m * 8 < 8 ? g->geo.f - m * 8 : 8;
            pack_rows8(w + m * 8 * g->kk, g->kk, g->kk, nr, false, apack + m * g->kk * 8);
            continue;
        }
#endif
        for (int64_t i = 0; i < mr; i++) {  // row by row: w read in order (a 512 x 6912 w is 14 MB)
            const int64_t o = m * mr + i;
            float *dst = apack + m * g->kk * mr + i;
            if (o < g->geo.f)
                for (int64_t k = 0; k < g->kk; k++) dst[k * mr] = w[o * g->kk + k];
            else
                for (int64_t k = 0; k < g->kk; k++) dst[k * mr] = 0.0f;
        }
    }
}

// The flipped kernel of the input gradient: g maps dy (cin = F) to dx (cout = C); w is the
// forward weight (F, C, taps). apack[m][(f, t)][i] = w[f][m*mr + i][taps - 1 - t].
static void ig_pack_flipped(const ig_plan *g, int64_t mr, const float *w, float *apack) {
    const int64_t mp = (g->geo.f + mr - 1) / mr, taps = g->taps, C = g->geo.f;
    // Blocks of 8 filters (their w, 8 * C * taps floats, read in order as m goes up) in parallel,
    // each writing its rows of every m block: m outermost read all of w's filters' rows at once, a
    // cache miss per line, and took longer than the convolution for a 512 -> 256 3x3x3 one.
    const int64_t fb = (g->geo.c + 7) / 8;
#pragma omp parallel for schedule(static) if (mp * g->kk >= 65536)
    for (int64_t b = 0; b < fb; b++)
        for (int64_t m = 0; m < mp; m++)
        for (int64_t f = b * 8; f < (b * 8 + 8 < g->geo.c ? b * 8 + 8 : g->geo.c); f++) {
#if FAST_BUILT
            if (mr == 8) {
                const int64_t nr = C - m * 8 < 8 ? C - m * 8 : 8;
                pack_rows8(w + (f * C + m * 8) * taps, taps, taps, nr, true, apack + (m * g->kk + f * taps) * 8);
                continue;
            }
#endif
            for (int64_t i = 0; i < mr; i++) {  // the inner loop a plain strided copy
                const int64_t c = m * mr + i;
                float *dst = apack + (m * g->kk + f * taps) * mr + i;
                if (c < C) {
                    const float *src = w + (f * C + c) * taps + taps - 1;
                    for (int64_t t = 0; t < taps; t++) dst[t * mr] = src[-t];
                } else {
                    for (int64_t t = 0; t < taps; t++) dst[t * mr] = 0.0f;
                }
            }
        }
}

// Whether the fast kernels take this geometry: stride 1, one group (the caller checks those),
// a kernel at most KMAX wide, and room in scratch for the packed weights and one thread's panel
// and outputs. The same on both instruction sets, so that both machines take the same path.
static bool ig_fits(const ig_plan *g, int64_t scratch_floats) {
    return cpu_conv_fast_ok() && g->geo.k[2] <= KMAX && ig_panels_fit(g, scratch_floats) >= 1;
}

static int ig_threads(const ig_plan *g, int64_t scratch_floats) {
    int64_t t = omp_get_max_threads(), fit = ig_panels_fit(g, scratch_floats);
    return (int)(t < fit ? t : fit);
}

bool cpu_conv_fast_forward(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                           const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                           const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats,
                           cpu_store_act act, cpu_store_pool *pool) {
    ig_plan g = ig_make(c, f, in, out, k, d, p);
    if (!ig_fits(&g, scratch_floats)) return false;
    const ig_kernels *kr = ig_kernels_get();
    ig_pack_forward(&g, kr->mr, w, scratch);
    float *bufs = scratch + ig_pack_floats(&g);
    int64_t buf_floats = scratch_floats - ig_pack_floats(&g);
    if (pool && n > 0) {
        // ig_direct where output rows are not short (a row's Wp - W columns are computed in vain)
        // and the padded input, NR floats after it and the taps' offsets fit at the end of scratch
        ig_direct xd = {0};
        const int64_t xpf = out[2] >= DWX_MIN_ROW && g.kk <= IG_DIRECT_KK ? dwx_floats(&g, n) + NR : 0;
        const int64_t x0 = xpf > 0 ? dwx_place(bufs, buf_floats, xpf, g.kk, &xd.tab, &xd.xp) : 0;
        const bool direct = x0 > 0;
        if (ig_run_pool(kr, &g, n, x, direct ? &xd : NULL, scratch, b, bufs, direct ? x0 : buf_floats, act, pool) ||
            (direct && ig_run_pool(kr, &g, n, x, NULL, scratch, b, bufs, buf_floats, act, pool))) {
            pool->done = true;
            return true;
        }
    }
    ig_run(kr, &g, n, x, scratch, b, false, y, bufs, ig_threads(&g, scratch_floats), act);
    return true;
}

bool cpu_conv_fast_weight_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                               const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                               const float *dy, float *dw, float *scratch, int64_t scratch_floats) {
    ig_plan g = ig_make(c, f, in, out, k, d, p);
    const int64_t kkp = ig_rows_padded(g.kk), per = dw_per_tile(&g), q = n > 0 ? dw_chunks(&g, n) : 0;
    int64_t fit = (scratch_floats - kkp * f * (1 + q)) / per;  // tiles' buffers that fit (after the parts)
    // dw_direct (both instruction sets) where output rows are not short and the padded input fits
    // at the end of scratch beside at least one tile's buffers: the register tiles read x, padded
    // once, in place of a panel (im2col) built for every group, which repeats each input element
    // taps times and was 39% of the 16 -> 32 3x3x3 dW on 20^3 (panel 22% on the small CNN's
    // 32 -> 64 on 16x16). Measured on a 2-core Xeon, AVX-512 (2 threads, best of 6-15, batch 8 /
    // 64): that dW 10.6-11.2 -> 7.4-7.5 ms, 1 -> 16 on 40^3 4.75-4.88 -> 3.35, 4 -> 16 on 40^3
    // 16.5 -> 9.4-9.6, 32 -> 64 on 16^3 19.0-20.8 -> 16.6-16.7, 32 -> 64 on 16x16 3.21-3.26 ->
    // 2.88-2.93, 64 -> 128 on 8^3 8.83-8.86 -> 8.92-8.95; cnn3d 160 -> 178 samples/s (3
    // alternating pairs; AVX2 kernels on the same Xeon 110-112 -> 117-119). The same sums in the
    // same order: the same bits. (Splitting dW by filters here, so each thread transposes only its
    // own filters of dy, measured slower.)
    const ig_kernels *kr = ig_kernels_get();
    // Its rows' offsets and the padded input close scratch (dwx_place).
    const int64_t xpf = kr && kr->dw_seg && g.geo.out[2] >= DWX_MIN_ROW && n > 0 ? dwx_floats(&g, n) : 0;
    int64_t *tab = NULL;
    float *xp = NULL;
    const int64_t x0 = xpf > 0 ? dwx_place(scratch, scratch_floats, xpf, kkp, &tab, &xp) : 0;
    const int64_t fit_x = xpf > 0 && x0 > 0 ? (x0 - kkp * f * (1 + q)) / per : 0;
    if (fit_x >= 1)
        fit = fit_x;
    else
        tab = NULL, xp = NULL;
    if (!cpu_conv_fast_ok() || g.geo.k[2] > KMAX || fit < 1)
        return false;
    float *dwt = scratch;  // written whole by the first group of tiles (rows past kk: never read)
    if (n <= 0) {
        memset(dw, 0, sizeof(float) * (size_t)(f * g.kk));
        return true;
    }
    const int64_t ntiles = ig_tiles(n, g.out_pos);
    const int64_t t = omp_get_max_threads(), threads = t < fit ? t : fit;
    // Tiles per group: up to DW_J positions, the group's dyt (read again for every row block of
    // dW) at most 128 KiB, and what scratch holds. The sums' order does not depend on it.
    int64_t tg = DW_J / NR, dyt_cap = 32768 / (f > 0 ? f : 1) / NR;
    tg = tg < dyt_cap ? tg : dyt_cap;
    tg = tg < fit / threads ? tg : fit / threads;
    tg = tg < ntiles ? tg : ntiles;
    tg = tg > 1 ? tg : 1;
    if (xp) dwx_pad(&g, n, x, xp), dwx_rows(&g, kkp, tab);
    if (q > 0)
        dw_run_chunks(kr, &g, n, x, xp, tab, dy, dwt, scratch + kkp * f, q, scratch + kkp * f * (1 + q),
                      (int)threads, tg);
    else
        dw_run(kr, &g, n, x, xp, tab, dy, dwt, scratch + kkp * f, (int)threads, tg);
    // dw (F, kk) = dwt^T, 8 rows of dwt at a time: those rows stay in L1 while every filter's 8
    // values are written. Element by element, each read of a dwt column took a cache line of its
    // own, and with 16 rows 2 KiB apart (F = 512) the rows' lines fell into two L1 sets and were
    // evicted between uses: a 512 x 6912 dW took longer to transpose than to compute (batch 8 on
    // 2x2x2 maps).
    const int64_t rb = (g.kk + 7) / 8;
#pragma omp parallel for schedule(static) if (f * g.kk >= 65536)
    for (int64_t b = 0; b < rb; b++) {
        const int64_t r0 = b * 8, r1 = r0 + 8 < g.kk ? r0 + 8 : g.kk;
        for (int64_t o = 0; o < f; o++)
            for (int64_t r = r0; r < r1; r++) dw[o * g.kk + r] = dwt[r * f + o];
    }
    return true;
}

bool cpu_conv_fast_bias_grad(int64_t n, int64_t ch, int64_t P, const float *dy, float *db) {
    const ig_kernels *kr = ig_kernels_get();
    if (!kr) return false;
#pragma omp parallel for schedule(static) if (n * ch * P >= 65536)
    for (int64_t c = 0; c < ch; c++) db[c] = (float)kr->bias_sum(n, ch * P, P, dy + c * P);
    return true;
}

bool cpu_conv_fast_input_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                              const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *w,
                              const float *dy, float *dx, bool acc, float *scratch, int64_t scratch_floats) {
    int64_t pf[3];
    for (int i = 0; i < 3; i++) pf[i] = (k[i] - 1) * d[i] - p[i];
    ig_plan g = ig_make(f, c, out, in, k, d, pf);
    if (!ig_fits(&g, scratch_floats)) return false;
    if (!dy) return true;
    ig_pack_flipped(&g, ig_kernels_get()->mr, w, scratch);
    ig_run(ig_kernels_get(), &g, n, dy, scratch, NULL, acc, dx, scratch + ig_pack_floats(&g),
           ig_threads(&g, scratch_floats), (cpu_store_act){0});
    return true;
}
