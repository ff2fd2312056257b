// cpu_conv_wino.c: 3x3 and 3x3x3 stride-1 convolutions by Winograd's minimal filtering F(2,3)
// along each transformed axis (Lavin and Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2016): the forward pass and the input gradient (a stride-1 convolution itself, of dy
// with the kernel flipped and channels swapped).
//
// Why: the implicit GEMM of cpu_conv_fast.c already runs these layers at 60-70% of the machine's
// sgemm peak, and issue #24 asks for 2x PyTorch, which at that rate needs fewer multiplications,
// not faster ones. A tile of 2x2 outputs (2x2x2 in 3D) from a 4x4 (4x4x4) input patch costs 16
// (64) multiply-adds per pair of channels instead of 36 (216): 2.25x fewer in 2D, 3.375x in 3D.
// Measured on a 2-core EPYC (Zen, AVX2) and a 2-core Xeon (AVX-512): see cpu_conv_wino_worth for the layers it takes.
//
// How, for a batch of WL = 32 output tiles (any samples, tile order (sample, z, y, x)):
//   V[e][c][j] = (B^T d B)[e] of tile j's input patch of channel c   (input transform, e < E = 16 or 64)
//   M[e][f][j] = sum over c of U[e][f][c] * V[e][c][j]               (E GEMMs: cpu_conv_fast.c's tile kernel)
//   y[f] of tile j = (A^T M A) + bias, then the activation            (output transform)
// with U[e][f][c] = (G w[f][c] G^T)[e], transformed once per call. The input is first copied with
// its zero border (xpad) so that every patch is read without bounds checks.
//
// The same bits on every CPU and at every thread count: the transforms are additions,
// subtractions and halvings, element by element (no fused multiply-add: the build is ISO C, whose
// default is -ffp-contract=off), and the GEMM is the tile kernel whose AVX2 and AVX-512 versions
// give the same bits (cpu_conv_fast.c). Every output depends on its own tile only, so neither the
// batches nor the threads change it. The result is not the direct convolution's bit for bit: F(2,3)
// rounds differently (within 1.4e-7 of sum |w x| + |b| in tests/unit/test_conv.c's cases, about one float ulp).
#include <omp.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_rows.h"
#include "galley/check.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WG_BUILT 1
#define WG_TARGET __attribute__((target("avx2")))  // element-wise adds: the same bits as scalar code
#else
#define WG_BUILT 0
#endif

#define WL 32  // tiles per batch: the lanes of every transform, the columns of the tile kernel (its NR)
// Floats between consecutive e's blocks of V, M, Y and dU beyond their size: the transforms touch
// every e of a channel at once, and blocks of a power-of-two size (4 KiB for V at 32 channels, 64
// KiB for Y) put those 16 or 64 rows into one L1 set. One cache line more each. Measured with
// wg_store's vector stores, on a 2-core EPYC (noisy; best of 12): the small CNN's second layer
// went from 1.15 / 1.17 to 1.23 / 1.33 times the implicit GEMM's speed (forward / input gradient),
// CosmoFlow's second (32 -> 64 on 16^3) from 1.85 / 1.86 to 2.06 / 1.94.
#define WG_SKEW 16

// The passes over whole rows of WL lanes (cpu_conv_wino_axes.h), for one instruction set.
typedef struct {
    void (*bt_axis)(float *d, int64_t rows, int64_t st, float *dst, int64_t ldd);
    void (*at_axis)(const float *src, int64_t lds, float *dst, int64_t na, int64_t nb);
    void (*a_axis)(const float *src, float *dst, int64_t ldd, int64_t na, int64_t nb);
    void (*bias_act)(int64_t rows, float *o, bool bias, float b, cpu_store_act act);
} wg_axes;

#if WG_BUILT
// Compiled for AVX2 and for AVX-512: the same operations, so the same bits. Measured on a 2-core
// Xeon (2 threads, alternating pairs of runs) against the 8-lane passes these replaced, which
// were AVX2 code on both: on AVX-512, cnn3d (tests/bench) 279-280 -> 307 samples/s (4 pairs),
// CosmoFlow at 32^3 median +8% (6 pairs), B^T's pass 6.4% of cnn3d's samples -> 2.1% and the bias
// and activation 3.0% -> under 0.8%; on the AVX2 kernels (GALLEY_CPU_ISA=avx2) cnn3d +1.8%,
// CosmoFlow +3.7%, the small CNN +2.6% (medians of 4-5 pairs).
#pragma GCC push_options
#pragma GCC target("avx2")
#define WW 8
#define WGX(name) wg_##name##_256
#include "backend/cpu/cpu_conv_wino_axes.h"
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2")
#define WW 16
#define WGX(name) wg_##name##_512
#include "backend/cpu/cpu_conv_wino_axes.h"
#pragma GCC pop_options
static const wg_axes wg_axes_256 = {wg_bt_axis_256, wg_at_axis_256, wg_a_axis_256, wg_bias_act_256};
static const wg_axes wg_axes_512 = {wg_bt_axis_512, wg_at_axis_512, wg_a_axis_512, wg_bias_act_512};
#endif

// One stride-1 convolution pass as the transforms see it: x (c channels, in) -> y (f, out).
typedef struct {
    int64_t c, f;                 // channels read (the GEMM's reduction), channels written
    int64_t in[3], out[3], p[3];  // maps {D, H, W} and the padding before them
    bool on[3];                   // axis transformed (kernel 3) or passed through (kernel 1)
    int64_t pa[3], ta[3], nt[3];  // per axis: patch (4 or 1), outputs per tile (2 or 1), tiles
    int64_t pd[3];                // the padded input's dims: room for every tile's patch
    int64_t qd[3];                // the padded output's dims (weight gradient: dy to whole tiles)
    int64_t E, tiles, out_pos, pad_pos, q_pos;  // patch elements, tiles per sample, positions
    int64_t vs, ms;               // floats from one e's block of V [c][WL] (of M [f][WL]) to the next
    const wg_axes *ax;            // this CPU's row passes
} wg_plan;

// The plan of a pass with kernel k and padding p, or false where F(2,3) does not apply: every axis
// must have kernel 3 (dilation 1, padding 0..2, out = in + 2p - 2) or kernel 1 (no padding, out =
// in), and W kernel 3.
static bool wg_make(int64_t c, int64_t f, const int64_t in[3], const int64_t out[3], const int64_t k[3],
                    const int64_t d[3], const int64_t p[3], wg_plan *g) {
    *g = (wg_plan){.c = c, .f = f, .E = 1, .tiles = 1, .out_pos = 1, .pad_pos = 1, .q_pos = 1};
    for (int i = 0; i < 3; i++) {
        g->in[i] = in[i], g->out[i] = out[i], g->p[i] = p[i];
        if (k[i] == 3) {
            if (d[i] != 1 || p[i] < 0 || p[i] > 2 || out[i] != in[i] + 2 * p[i] - 2 || out[i] < 1) return false;
            g->on[i] = true, g->pa[i] = 4, g->ta[i] = 2, g->nt[i] = (out[i] + 1) / 2, g->pd[i] = 2 * g->nt[i] + 2;
        } else {
            if (k[i] != 1 || p[i] != 0 || out[i] != in[i]) return false;
            g->pa[i] = g->ta[i] = 1, g->nt[i] = g->pd[i] = out[i];
        }
        g->qd[i] = g->nt[i] * g->ta[i];
        g->E *= g->pa[i], g->tiles *= g->nt[i], g->out_pos *= out[i], g->pad_pos *= g->pd[i], g->q_pos *= g->qd[i];
    }
    g->vs = c * WL + WG_SKEW, g->ms = f * WL + WG_SKEW;
#if WG_BUILT
    g->ax = cpu_conv_fast_isa() == CPU_ISA_AVX512 ? &wg_axes_512 : &wg_axes_256;
#endif
    return g->on[2] && c >= 1 && f >= 1;
}

#if WG_BUILT

// ---- transforms ------------------------------------------------------------------------------------

// U (the kernel of one pair of channels, [pa0][pa1][pa2]) = G g G^T along every transformed axis,
// g its taps [k0][k1][k2]. G's rows: g0; (g0 + g1 + g2) / 2; (g0 - g1 + g2) / 2; g2.
static void wg_kernel_transform(const wg_plan *g, const float *taps, float *u) {
    float a[64], b[64];
    int64_t dim[3];
    for (int i = 0; i < 3; i++) dim[i] = g->on[i] ? 3 : 1;
    memcpy(a, taps, sizeof(float) * (size_t)(dim[0] * dim[1] * dim[2]));
    for (int ax = 2; ax >= 0; ax--) {
        if (!g->on[ax]) continue;
        int64_t outer = 1, inner = 1;  // lines along ax: outer x inner of them
        for (int i = 0; i < ax; i++) outer *= dim[i];
        for (int i = ax + 1; i < 3; i++) inner *= dim[i];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const float g0 = a[(o * 3 + 0) * inner + i], g1 = a[(o * 3 + 1) * inner + i];
                const float g2 = a[(o * 3 + 2) * inner + i];
                b[(o * 4 + 0) * inner + i] = g0;
                b[(o * 4 + 1) * inner + i] = ((g0 + g1) + g2) * 0.5f;
                b[(o * 4 + 2) * inner + i] = ((g0 - g1) + g2) * 0.5f;
                b[(o * 4 + 3) * inner + i] = g2;
            }
        dim[ax] = 4;
        memcpy(a, b, sizeof(float) * (size_t)(dim[0] * dim[1] * dim[2]));
    }
    memcpy(u, a, sizeof(float) * (size_t)g->E);
}

// upack [e][m][c][r] = U[e] of output channel m*mr + r and input channel c (0 past f): each e's
// weights in the tile kernel's packed layout. flip: w is the forward weight of the convolution
// whose input gradient this pass is, (c_fwd = g->f, f_fwd = g->c, taps), read flipped.
static void wg_pack(const wg_plan *g, int64_t mr, bool flip, const float *w, float *upack) {
    const int64_t mp = (g->f + mr - 1) / mr;
    int64_t nk = 1;  // taps
    for (int i = 0; i < 3; i++) nk *= g->on[i] ? 3 : 1;
    // By blocks of mr output channels: each (e, c) row of a block's mr values is written whole (a
    // layer of 256 x 128 3x3x3 filters took 4% of CosmoFlow's step channel by channel).
#pragma omp parallel for schedule(static) if (mp * mr * g->c * g->E >= 65536)
    for (int64_t mb = 0; mb < mp; mb++)
        for (int64_t c = 0; c < g->c; c++) {
            float t[27], u[64], rows[64 * 8];  // rows [e][r], r < mr <= 8
            for (int64_t r = 0; r < mr; r++) {
                const int64_t o = mb * mr + r;
                if (o < g->f) {
                    const float *src = flip ? w + (c * g->f + o) * nk : w + (o * g->c + c) * nk;
                    for (int64_t i = 0; i < nk; i++) t[i] = flip ? src[nk - 1 - i] : src[i];
                    wg_kernel_transform(g, t, u);
                } else {
                    memset(u, 0, sizeof u);
                }
                for (int64_t e = 0; e < g->E; e++) rows[e * mr + r] = u[e];
            }
            for (int64_t e = 0; e < g->E; e++)
                memcpy(upack + ((e * mp + mb) * g->c + c) * mr, rows + e * mr, sizeof(float) * (size_t)mr);
        }
}

// xpad (ns, c, pd) = x (ns, c, in) placed at offset p on transformed axes, zeros around it.
static void wg_pad(const wg_plan *g, int64_t ns, const float *x, float *xpad) {
    const int64_t in_pos = g->in[0] * g->in[1] * g->in[2];
    const int64_t p0 = g->on[0] ? g->p[0] : 0, p1 = g->on[1] ? g->p[1] : 0, p2 = g->p[2];
#pragma omp parallel for schedule(static) if (ns * g->c * g->pad_pos >= 65536 && !omp_in_parallel())
    for (int64_t sc = 0; sc < ns * g->c; sc++) {
        const float *src = x + sc * in_pos;
        float *dst = xpad + sc * g->pad_pos;
        for (int64_t z = 0; z < g->pd[0]; z++)
            for (int64_t yy = 0; yy < g->pd[1]; yy++) {
                float *row = dst + (z * g->pd[1] + yy) * g->pd[2];
                const int64_t iz = z - p0, iy = yy - p1;
                if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) {
                    cpu_row_zero(row, g->pd[2]);
                    continue;
                }
                // rows of a few dozen floats: cpu_rows.h
                cpu_row_pad(row, p2, src + (iz * g->in[1] + iy) * g->in[2], g->in[2], g->pd[2] - p2 - g->in[2]);
            }
    }
}

// Tile t of a sample: its index along each axis.
static void wg_tile_index(const wg_plan *g, int64_t t, int64_t ti[3]) {
    ti[2] = t % g->nt[2], ti[1] = t / g->nt[2] % g->nt[1], ti[0] = t / (g->nt[2] * g->nt[1]);
}

// A batch's lanes: where each reads its patch (in xpad, channel 0) and writes its outputs (in y,
// channel 0), and whether it is a tile at all (the last batch's spare lanes repeat its first).
// quad[q]: lanes 4q .. 4q+3 are tiles side by side along W, all of their outputs inside the map.
typedef struct {
    int64_t base[WL], ybase[WL], dbase[WL], oi[WL][3];  // dbase: in the padded dy (weight gradient)
    int64_t sample[WL], tile[WL];                       // the lane's sample (in the call) and tile in it
    bool live[WL], quad[WL / 4];
    bool oct[WL / 8];  // lanes 8q .. 8q+7 read patches side by side along W: base 2 apart
    bool run;           // every lane a tile, all of one sample, in tile order (wg_store_pool's vectors)
    int32_t abase[WL];  // the lane's first output's offset in its output plane (wg_store_pool)
} wg_lanes;

// B^T of 4 values a line: d0 - d2, d1 + d2, d2 - d1, d1 - d3, on 8 lanes (b8) or 4 (b4).
#define WG_BT(T, sub, add, x)                                                                          \
    do {                                                                                               \
        const T t0_ = sub(x[0], x[2]), t1_ = add(x[1], x[2]), t2_ = sub(x[2], x[1]), t3_ = sub(x[1], x[3]); \
        x[0] = t0_, x[1] = t1_, x[2] = t2_, x[3] = t3_;                                                \
    } while (0)

// One plane's (a0's) patch rows of 8 lanes side by side along W (element e of lane i at p[2 i + e]:
// the even and odd columns of p[0..15] and p[2..17]), B^T along W and, over its 4 rows (rows 4;
// else 1: H not transformed), along H in registers, into rows (a1 * 4 + e2) of dr (ldo apart).
// The loops have constant trip counts so that w stays in registers.
WG_TARGET static inline void wg_row_oct(const float *p, __m256 x[4]) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const __m256 a2 = _mm256_loadu_ps(p + 2), b2 = _mm256_loadu_ps(p + 10);
#define WG_HALF(x, y, imm) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, imm)), _MM_SHUFFLE(3, 1, 2, 0)))
    x[0] = WG_HALF(a, b, 0x88), x[1] = WG_HALF(a, b, 0xdd), x[2] = WG_HALF(a2, b2, 0x88), x[3] = WG_HALF(a2, b2, 0xdd);
#undef WG_HALF
    WG_BT(__m256, _mm256_sub_ps, _mm256_add_ps, x);
}

WG_TARGET static void wg_input_oct(const float *p, int64_t ldp, int64_t rows, float *dr, int64_t ldo) {
    __m256 w[4][4];
    if (rows == 1) {
        wg_row_oct(p, w[0]);
        for (int e2 = 0; e2 < 4; e2++) _mm256_storeu_ps(dr + e2 * ldo, w[0][e2]);
        return;
    }
    for (int a1 = 0; a1 < 4; a1++) wg_row_oct(p + a1 * ldp, w[a1]);
    for (int e2 = 0; e2 < 4; e2++) {
        __m256 h[4] = {w[0][e2], w[1][e2], w[2][e2], w[3][e2]};
        WG_BT(__m256, _mm256_sub_ps, _mm256_add_ps, h);
        for (int a1 = 0; a1 < 4; a1++) _mm256_storeu_ps(dr + (a1 * 4 + e2) * ldo, h[a1]);
    }
}

// The same for 4 lanes anywhere (p[i]: lane i's patch rows), 4 floats of a row each, transposed.
WG_TARGET static inline void wg_row_quad(const float *const p[4], int64_t o, __m128 x[4]) {
    __m128 r0 = _mm_loadu_ps(p[0] + o), r1 = _mm_loadu_ps(p[1] + o), r2 = _mm_loadu_ps(p[2] + o);
    __m128 r3 = _mm_loadu_ps(p[3] + o);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    x[0] = r0, x[1] = r1, x[2] = r2, x[3] = r3;
    WG_BT(__m128, _mm_sub_ps, _mm_add_ps, x);
}

WG_TARGET static void wg_input_quad(const float *const p[4], int64_t ldp, int64_t rows, float *dr, int64_t ldo) {
    __m128 w[4][4];
    if (rows == 1) {
        wg_row_quad(p, 0, w[0]);
        for (int e2 = 0; e2 < 4; e2++) _mm_storeu_ps(dr + e2 * ldo, w[0][e2]);
        return;
    }
    for (int a1 = 0; a1 < 4; a1++) wg_row_quad(p, a1 * ldp, w[a1]);
    for (int e2 = 0; e2 < 4; e2++) {
        __m128 h[4] = {w[0][e2], w[1][e2], w[2][e2], w[3][e2]};
        WG_BT(__m128, _mm_sub_ps, _mm_add_ps, h);
        for (int a1 = 0; a1 < 4; a1++) _mm_storeu_ps(dr + (a1 * 4 + e2) * ldo, h[a1]);
    }
}

// wg_input for 2D maps (D not transformed): each channel's 4 patch rows of 8 (or 4) lanes
// gathered, B^T along W and H in registers (wg_input_oct, wg_input_quad), stored as V's rows: no
// pass over d. Measured on a 2-core Xeon (AVX-512, 2 threads, best of 15): F(2,3) forward /
// input gradient of the small CNN's 32 -> 64 on 16x16 (batch 64) 2.76-2.79 / 2.76-2.83 ms ->
// 2.52-2.61 / 2.50-2.59. (The same for 3D, into d before the pass along D, took 2-6% longer: 16
// vectors held under AVX2's 16 registers.)
WG_TARGET static void wg_input_2d(const wg_plan *g, const float *xpad, const wg_lanes *l, float *v) {
    for (int64_t c = 0; c < g->c; c++) {
        const float *src = xpad + c * g->pad_pos;
        float *dr = v + c * WL;
        for (int q = 0; q < WL / 8; q++) {
            const int j = 8 * q;
            if (l->oct[q]) {
                wg_input_oct(src + l->base[j], g->pd[2], g->pa[1], dr + j, g->vs);
                continue;
            }
            for (int h = j; h < j + 8; h += 4) {
                const float *const p[4] = {src + l->base[h], src + l->base[h + 1], src + l->base[h + 2],
                                           src + l->base[h + 3]};
                wg_input_quad(p, g->pd[2], g->pa[1], dr + h, g->vs);
            }
        }
    }
}
#undef WG_BT

// V [e][c][WL] for the lanes' patches (l->base: each lane's offset in xpad's channel 0): per
// channel, each patch row's 4 elements of every lane, B^T along W applied as they are gathered,
// into d [E][WL]; then B^T along H and D, the last pass writing V's rows. Lanes that are 8 tiles
// side by side along W (l->oct) read their rows as two pairs of 8-float vectors (element e of
// lane i is x[2 i + e]: the even and odd columns of x[0..15] and x[2..17]); others 4 lanes at a
// time, 4 floats of a row each, transposed. The same sums in either way, so the same bits.
// Measured on a 2-core Xeon (AVX-512; 3D CNN, 2 threads): this function was 13% of the run's
// samples with a separate pass along W, a 4-lane gather everywhere and a copy of d into V.
WG_TARGET static void wg_input(const wg_plan *g, const float *xpad, const wg_lanes *l, float *d, float *v) {
    // (v [e][c][WL], e's blocks g->vs apart: the GEMM's panels, rows WL apart)
    const int64_t st1 = 4, st0 = 4 * g->pa[1];  // rows between neighbours along H and D in d
    if (!g->on[0]) {  // 2D: W and H in registers, straight into V (see wg_input_2d)
        wg_input_2d(g, xpad, l, v);
        return;
    }
    for (int64_t c = 0; c < g->c; c++) {
        const float *src = xpad + c * g->pad_pos;
        // with neither H nor D transformed, the W pass's rows are V's: no d
        float *out = g->on[0] || g->on[1] ? d : v + c * WL;
        const int64_t ldo = g->on[0] || g->on[1] ? WL : g->vs;
        for (int64_t a0 = 0; a0 < g->pa[0]; a0++)
            for (int64_t a1 = 0; a1 < g->pa[1]; a1++) {
                const int64_t off = (a0 * g->pd[1] + a1) * g->pd[2];
                float *dr = out + (a0 * st0 + a1 * st1) * ldo;
                for (int q = 0; q < WL / 8; q++) {
                    const int j = 8 * q;
                    if (l->oct[q]) {
                        const float *p = src + l->base[j] + off;
                        const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
                        const __m256 a2 = _mm256_loadu_ps(p + 2), b2 = _mm256_loadu_ps(p + 10);
#define WG_EVEN(x, y) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, 0x88)), _MM_SHUFFLE(3, 1, 2, 0)))
#define WG_ODD(x, y) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, 0xdd)), _MM_SHUFFLE(3, 1, 2, 0)))
                        const __m256 x0 = WG_EVEN(a, b), x1 = WG_ODD(a, b), x2 = WG_EVEN(a2, b2), x3 = WG_ODD(a2, b2);
#undef WG_EVEN
#undef WG_ODD
                        _mm256_storeu_ps(dr + j, _mm256_sub_ps(x0, x2));
                        _mm256_storeu_ps(dr + ldo + j, _mm256_add_ps(x1, x2));
                        _mm256_storeu_ps(dr + 2 * ldo + j, _mm256_sub_ps(x2, x1));
                        _mm256_storeu_ps(dr + 3 * ldo + j, _mm256_sub_ps(x1, x3));
                        continue;
                    }
                    for (int h = j; h < j + 8; h += 4) {
                        __m128 r0 = _mm_loadu_ps(src + l->base[h] + off), r1 = _mm_loadu_ps(src + l->base[h + 1] + off);
                        __m128 r2 = _mm_loadu_ps(src + l->base[h + 2] + off), r3 = _mm_loadu_ps(src + l->base[h + 3] + off);
                        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                        _mm_storeu_ps(dr + h, _mm_sub_ps(r0, r2)), _mm_storeu_ps(dr + ldo + h, _mm_add_ps(r1, r2));
                        _mm_storeu_ps(dr + 2 * ldo + h, _mm_sub_ps(r2, r1));
                        _mm_storeu_ps(dr + 3 * ldo + h, _mm_sub_ps(r1, r3));
                    }
                }
            }
        if (g->on[1]) g->ax->bt_axis(d, g->E, st1, g->on[0] ? d : v + c * WL, g->on[0] ? WL : g->vs);
        if (g->on[0]) g->ax->bt_axis(d, g->E, st0, v + c * WL, g->vs);
    }
}

// The outputs of channel f for the batch's lanes, from M [e][f][WL] (e's blocks g->ms apart): A^T along W, then H and D
// where transformed, through d (E rows of room); returns them, [ta0][ta1][2][WL].
static float *wg_output_tile(const wg_plan *g, const float *m, int64_t f, float *d) {
    float *t1 = d, *t2 = d + g->E / 2 * WL;
    g->ax->at_axis(m + f * WL, g->ms, t1, g->pa[0] * g->pa[1], 1);  // [pa0][pa1][2]: E/2 rows
    float *cur = t1;
    if (g->on[1]) {
        g->ax->at_axis(t1, WL, t2, g->pa[0], 2);  // [pa0][2][2]: E/4 rows
        cur = t2;
    }
    if (g->on[0]) {
        float *next = cur == t1 ? t2 : t1;
        g->ax->at_axis(cur, WL, next, 1, 2 * g->ta[1]);  // [2][ta1][2]
        cur = next;
    }
    return cur;
}

// o (the lanes' outputs of channel f, [ta0][ta1][2][WL]) + bias[f], then the activation, in
// place (relu and leaky_relu as cpu_act_forward computes them).
static void wg_bias_act(const wg_plan *g, float *o, int64_t f, const float *bias, cpu_store_act act) {
    g->ax->bias_act(2 * g->ta[0] * g->ta[1], o, bias != NULL, bias ? bias[f] : 0.0f, act);
}

// ---- driver ------------------------------------------------------------------------------------

static void wg_lanes_make(const wg_plan *g, int64_t s0, int64_t T0, int64_t count, wg_lanes *l) {
    bool whole[WL];
    for (int j = 0; j < WL; j++) {
        const int64_t t = T0 + j < count ? T0 + j : T0, s = t / g->tiles;
        int64_t ti[3], o[3];
        wg_tile_index(g, t % g->tiles, ti);
        whole[j] = T0 + j < count;
        for (int i = 0; i < 3; i++) {
            o[i] = g->on[i] ? 2 * ti[i] : ti[i], l->oi[j][i] = o[i];
            whole[j] = whole[j] && o[i] + g->ta[i] <= g->out[i];
        }
        l->base[j] = s * g->c * g->pad_pos + (o[0] * g->pd[1] + o[1]) * g->pd[2] + o[2];
        l->ybase[j] = (s0 + s) * g->f * g->out_pos + (o[0] * g->out[1] + o[1]) * g->out[2] + o[2];
        l->dbase[j] = s * g->f * g->q_pos + (o[0] * g->qd[1] + o[1]) * g->qd[2] + o[2];
        l->live[j] = T0 + j < count;
        l->sample[j] = s0 + s, l->tile[j] = t % g->tiles;
        l->abase[j] = (int32_t)((o[0] * g->out[1] + o[1]) * g->out[2] + o[2]);
    }
    l->run = l->live[WL - 1] && l->sample[WL - 1] == l->sample[0] && l->tile[WL - 1] == l->tile[0] + WL - 1;
    for (int q = 0; q < WL / 8; q++) {
        l->oct[q] = true;
        for (int i = 1; i < 8; i++) l->oct[q] = l->oct[q] && l->base[8 * q + i] == l->base[8 * q] + 2 * i;
    }
    for (int q = 0; q < WL / 4; q++) {
        const int j = 4 * q;
        l->quad[q] = whole[j] && whole[j + 1] && whole[j + 2] && whole[j + 3] && l->ybase[j + 1] == l->ybase[j] + 2 &&
                     l->ybase[j + 2] == l->ybase[j] + 4 && l->ybase[j + 3] == l->ybase[j] + 6;
    }
}

// y (channel f) of the lanes' tiles = o (+ bias, then the activation, in place in o), or y += o
// when acc. A quad's rows of 8 outputs go as two vectors (o's two W rows interleaved); other lanes
// value by value, dropping outputs past the map's edge (an odd size's last tile).
WG_TARGET static void wg_store(const wg_plan *g, const wg_lanes *l, float *o, int64_t f, const float *bias, bool acc,
                               cpu_store_act act, float *y) {
    if (!acc) wg_bias_act(g, o, f, bias, act);
    for (int q = 0; q < WL / 4; q++) {
        if (!l->quad[q]) continue;
        float *yq = y + l->ybase[4 * q] + f * g->out_pos;
        for (int64_t i0 = 0; i0 < g->ta[0]; i0++)
            for (int64_t i1 = 0; i1 < g->ta[1]; i1++) {
                const float *src = o + ((i0 * g->ta[1] + i1) * 2) * WL + 4 * q;
                const __m128 a = _mm_loadu_ps(src), b = _mm_loadu_ps(src + WL);  // x = 0 and x = 1 of 4 tiles
                __m128 lo = _mm_unpacklo_ps(a, b), hi = _mm_unpackhi_ps(a, b);
                float *row = yq + (i0 * g->out[1] + i1) * g->out[2];
                if (acc) lo = _mm_add_ps(_mm_loadu_ps(row), lo), hi = _mm_add_ps(_mm_loadu_ps(row + 4), hi);
                _mm_storeu_ps(row, lo), _mm_storeu_ps(row + 4, hi);
            }
    }
    for (int j = 0; j < WL; j++) {
        if (!l->live[j] || l->quad[j / 4]) continue;
        float *yj = y + l->ybase[j] + f * g->out_pos;
        for (int64_t i0 = 0; i0 < g->ta[0] && l->oi[j][0] + i0 < g->out[0]; i0++)
            for (int64_t i1 = 0; i1 < g->ta[1] && l->oi[j][1] + i1 < g->out[1]; i1++) {
                float *row = yj + (i0 * g->out[1] + i1) * g->out[2];
                const float *src = o + ((i0 * g->ta[1] + i1) * 2) * WL + j;
                const int w2 = l->oi[j][2] + 1 < g->out[2] ? 2 : 1;
                for (int i2 = 0; i2 < w2; i2++) row[i2] = acc ? row[i2] + src[i2 * WL] : src[i2 * WL];
            }
    }
}

// Whether the pool's windows are the tiles: kd x 2 x 2 outputs each (ta), every tile whole.
static bool wg_pool_fits(const wg_plan *g, const cpu_store_pool *pool) {
    if (!pool || g->ta[0] != pool->kd || g->ta[1] != 2 || g->ta[2] != 2) return false;
    for (int i = 0; i < 3; i++)
        if (g->out[i] % g->ta[i]) return false;
    return true;
}

// wg_store with a max pool whose windows are the tiles (wg_pool_fits): o (+ bias, then the
// activation, in place) is each lane's window, its rows in the window's scan order (d, h, w), so
// the winner (the first of equal values; NaN wins) goes to pool->y at the tile's index and its
// offset in the output plane to pool->argmax: the bits of wg_store then cpu_max_pool_forward.
// Where the batch's 32 tiles follow each other in one sample (l->run: every batch of a map of a
// multiple of 32 tiles), their pooled values and argmaxes are consecutive too and go out as
// vectors; elsewhere lane by lane. Measured on a 2-core Xeon (AVX-512, 2 threads, best of 300):
// the small CNN's 32 -> 64 on 16x16 (batch 64) forward with its pool 1.58-1.59 -> 1.32-1.36 ms
// (the lane-by-lane stores had been 23% of it); on the AVX2 kernels 2.23 -> 2.01 ms.
WG_TARGET static void wg_store_pool(const wg_plan *g, const wg_lanes *l, float *o, int64_t f, const float *bias,
                                    cpu_store_act act, const cpu_store_pool *pool) {
    const int64_t taps = 2 * g->ta[0] * g->ta[1], H = g->out[1], W = g->out[2];  // the window's outputs
    wg_bias_act(g, o, f, bias, act);
    float best[WL], at[WL];
    for (int j = 0; j < WL; j += 8) {
        __m256 bv = _mm256_loadu_ps(o + j), bi = _mm256_setzero_ps();
        for (int64_t r = 1; r < taps; r++) {
            const __m256 v = _mm256_loadu_ps(o + r * WL + j);
            const __m256 win = _mm256_or_ps(_mm256_cmp_ps(v, bv, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            bv = _mm256_blendv_ps(bv, v, win);
            bi = _mm256_blendv_ps(bi, _mm256_set1_ps((float)r), win);
        }
        if (l->run) {  // 8 windows side by side: i0 H W + i1 W + i2 past each lane's abase, as below
            const int64_t q = (l->sample[0] * g->f + f) * g->tiles + l->tile[0] + j;
            const __m256i r = _mm256_cvttps_epi32(bi), one = _mm256_set1_epi32(1);
            const __m256i i0 = _mm256_srli_epi32(r, 2), i1 = _mm256_and_si256(_mm256_srli_epi32(r, 1), one);
            __m256i at8 = _mm256_loadu_si256((const __m256i *)(const void *)(l->abase + j));
            at8 = _mm256_add_epi32(at8, _mm256_mullo_epi32(i0, _mm256_set1_epi32((int32_t)(H * W))));
            at8 = _mm256_add_epi32(at8, _mm256_mullo_epi32(i1, _mm256_set1_epi32((int32_t)W)));
            at8 = _mm256_add_epi32(at8, _mm256_and_si256(r, one));
            _mm256_storeu_ps(pool->y + q, bv);
            _mm256_storeu_si256((__m256i *)(void *)(pool->argmax + q), at8);
            continue;
        }
        _mm256_storeu_ps(best + j, bv), _mm256_storeu_ps(at + j, bi);
    }
    for (int j = 0; j < WL && !l->run; j++) {
        if (!l->live[j]) continue;
        const int r = (int)at[j], i0 = r / 4, i1 = r / 2 % 2, i2 = r % 2;  // r = (i0 ta1 + i1) 2 + i2
        const int64_t q = (l->sample[j] * g->f + f) * g->tiles + l->tile[j];
        pool->y[q] = best[j];
        pool->argmax[q] = (int32_t)(((l->oi[j][0] + i0) * H + l->oi[j][1] + i1) * W + l->oi[j][2] + i2);
    }
}

// Floats of scratch: the packed U, then per thread V, M, d and the output rows.
static int64_t wg_pack_floats(const wg_plan *g, int64_t mr) { return g->E * ((g->f + mr - 1) / mr * mr) * g->c; }
static int64_t wg_thread_floats(const wg_plan *g) { return g->E * (g->vs + g->ms + WL); }

// One batch of WL tiles (lanes): V from the padded input, the E products with U, then y (or the
// pool's output) from M.
typedef struct {
    cpu_conv_tile_fn tile;
    int mr;
    const float *upack, *bias;
    bool acc, pooled;
    cpu_store_act act;
    float *y;
    cpu_store_pool *pool;
} wg_job;

static void wg_batch(const wg_plan *g, const wg_job *jb, const float *xpad, const wg_lanes *lanes, float *v, float *m,
                     float *d) {
    const int64_t mp = (g->f + jb->mr - 1) / jb->mr;
    wg_input(g, xpad, lanes, d, v);
    for (int64_t e = 0; e < g->E; e++)
        for (int64_t mb = 0; mb < mp; mb++) {
            const int rows = (int)(g->f - mb * jb->mr < jb->mr ? g->f - mb * jb->mr : jb->mr);
            jb->tile(g->c, jb->upack + (e * mp + mb) * g->c * jb->mr, v + e * g->vs, m + e * g->ms + mb * jb->mr * WL,
                     WL, rows, WL, NULL, false, (cpu_store_act){0});
        }
    for (int64_t f = 0; f < g->f; f++)
        if (jb->pooled)
            wg_store_pool(g, lanes, wg_output_tile(g, m, f, d), f, jb->bias, jb->act, jb->pool);
        else
            wg_store(g, lanes, wg_output_tile(g, m, f, d), f, jb->bias, jb->acc, jb->act, jb->y);
}

// y = conv(x) + bias (act), or y += conv(x) when acc. Where the samples share out well among the
// threads (a multiple of them, two or more each; or 8 or more each, at most one more for some)
// and scratch holds a padded sample per thread, threads take whole samples: each pads its sample
// into its own buffer (wg_pad then runs on the calling thread alone) and runs that sample's
// batches (the last part empty where the tiles are not a multiple of WL), so the batches read a
// padded input its own core has just written. Otherwise over the samples in chunks whose padded
// input fits scratch after U and the threads' buffers, each chunk padded by all threads and its
// batches shared out, whose reads came from L3 (the whole chunk's pad was written before any
// batch read it): wg_input_oct's loads were its hot spot. Measured on a 2-core Xeon (AVX-512, 2
// threads, best of 30-200, ms, forward with its pool / backward (dW + dX)): the small CNN's 32 ->
// 64 on 16x16 1.34 -> 1.30 / 3.58 -> 3.45; 3D (batch 8) 16 -> 32 on 20^3 3.53 -> 2.97 / 9.58 ->
// 8.78, 32 -> 64 on 10^3 1.34 -> 1.26 / 4.43 -> 4.31, on 16^3 4.46 -> 4.22 / 15.7 -> 15.4. In
// training (alternating pairs, medians): the small CNN +3.1% (6), cnn3d +5.7% (5), CosmoFlow at
// 32^3 +0.6% (4). The same tiles, each summed alone: the same bits. false (nothing done): too
// little scratch.
static bool wg_run(const wg_plan *g, int64_t n, bool flip, const float *x, const float *w, const float *bias, bool acc,
                   float *y, float *scratch, int64_t scratch_floats, cpu_store_act act, cpu_store_pool *pool) {
    int mr = 0;
    const cpu_conv_tile_fn tile = cpu_conv_fast_tile(&mr);
    if (!tile) return false;
    const int64_t pack = wg_pack_floats(g, mr), per = wg_thread_floats(g), in_pos = g->in[0] * g->in[1] * g->in[2];
    int64_t threads = omp_get_max_threads();
    int64_t left = scratch_floats - pack - threads * per;
    if (left < g->c * g->pad_pos) {  // fewer threads, then give up
        threads = (scratch_floats - pack - g->c * g->pad_pos) / per;
        if (threads < 1) return false;
        left = scratch_floats - pack - threads * per;
    }
    int64_t cs = left / (g->c * g->pad_pos);
    cs = cs < n ? cs : n;
    float *upack = scratch, *bufs = scratch + pack, *xpad = bufs + threads * per;
    wg_pack(g, mr, flip, w, upack);
    const bool pooled = !acc && wg_pool_fits(g, pool);
    if (pooled) pool->done = true;
    const wg_job jb = {.tile = tile, .mr = mr, .upack = upack, .bias = bias, .acc = acc, .pooled = pooled, .act = act,
                       .y = y, .pool = pool};
    if (threads > 1 && cs >= threads && ((n % threads == 0 && n >= 2 * threads) || n >= 8 * threads)) {
        const int64_t batches = (g->tiles + WL - 1) / WL;
#pragma omp parallel num_threads((int)threads)
        {
            const int64_t me = omp_get_thread_num();
            float *v = bufs + me * per, *m = v + g->E * g->vs, *d = m + g->E * g->ms;
            float *xp = xpad + me * g->c * g->pad_pos;  // this thread's padded sample
            wg_lanes lanes;
#pragma omp for schedule(dynamic, 1)
            for (int64_t s = 0; s < n; s++) {
                wg_pad(g, 1, x + s * g->c * in_pos, xp);
                for (int64_t bt = 0; bt < batches; bt++) {
                    wg_lanes_make(g, s, bt * WL, g->tiles, &lanes);
                    wg_batch(g, &jb, xp, &lanes, v, m, d);
                }
            }
        }
        return true;
    }
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        const int64_t ns = n - s0 < cs ? n - s0 : cs, count = ns * g->tiles, batches = (count + WL - 1) / WL;
        wg_pad(g, ns, x + s0 * g->c * in_pos, xpad);
        const int nth = (int)(threads < batches ? threads : batches);
#pragma omp parallel num_threads(nth)
        {
            float *v = bufs + omp_get_thread_num() * per, *m = v + g->E * g->vs, *d = m + g->E * g->ms;
            wg_lanes lanes;
#pragma omp for schedule(dynamic, 1)
            for (int64_t bt = 0; bt < batches; bt++) {
                wg_lanes_make(g, s0, bt * WL, count, &lanes);
                wg_batch(g, &jb, xpad, &lanes, v, m, d);
            }
        }
    }
    return true;
}

// ---- weight gradient ---------------------------------------------------------------------------
//
// Forward, per tile: M[e][f] = sum over c of U[e][f][c] V[e][c], y = A^T M A, U = G w G^T. So
// dL/dU[e][f][c] = sum over tiles of (A dy A^T)[e][f] * V[e][c], and dL/dw = G^T (dL/dU) G:
//   Y[e][f][t] = (A dy_t A^T)[e], A's rows: (dy0), (dy0 + dy1), (dy0 - dy1), (-dy1)
//   dU[e][f][c] = sum over t, in order, of Y[e][f][t] * V[e][c][t]   (E GEMMs: the dW tile kernel)
//   dw[f][c] = G^T dU[.][f][c] G, G^T's rows: u0 + (u1 + u2) / 2, (u1 - u2) / 2, (u1 + u2) / 2 + u3
// 3.375x (2.25x in 2D) fewer multiply-adds than the direct dW. Tiles go in chunks of WG_TC: the
// chunk's Y [e][f][tile] and V transposed [e][tile][c] are built batch by batch (threads over
// batches), then each (e, row block of f) sums the chunk's tiles onto its block of dU (threads over
// those). Every element of dU is one chain of fused multiply-adds over all tiles in order, through
// memory between chunks (as in the registers): the same bits at any thread count and chunking.
#define WG_TC 256  // tiles per chunk (the dW tile kernel takes at most 256 positions a call)

// dyp (ns, f, qd) = dy (ns, f, out), zeros past the map's end (to whole tiles).
static void wg_pad_dy(const wg_plan *g, int64_t ns, const float *dy, float *dyp) {
#pragma omp parallel for schedule(static) if (ns * g->f * g->q_pos >= 65536)
    for (int64_t sf = 0; sf < ns * g->f; sf++) {
        const float *src = dy + sf * g->out_pos;
        float *dst = dyp + sf * g->q_pos;
        for (int64_t z = 0; z < g->qd[0]; z++)
            for (int64_t yy = 0; yy < g->qd[1]; yy++) {
                float *row = dst + (z * g->qd[1] + yy) * g->qd[2];
                if (z >= g->out[0] || yy >= g->out[1]) {
                    cpu_row_zero(row, g->qd[2]);
                    continue;
                }
                cpu_row_pad(row, 0, src + (z * g->out[1] + yy) * g->out[2], g->out[2], g->qd[2] - g->out[2]);
            }
    }
}

// Two floats (no further: the last of dy's padded rows may end scratch) in the low half.
WG_TARGET static inline __m128 wg_load2(const float *p) {
    double v;
    memcpy(&v, p, sizeof v);
    return _mm_castpd_ps(_mm_set_sd(v));
}

// Y[e][f][lane] (f's rows ldy floats apart, e's blocks lde apart) for the lanes' dy tiles, through
// d (2E rows): the 2 (x 2 x 2) outputs of each lane (4 lanes at a time), then A along W, H, D.
WG_TARGET static void wg_dy_input(const wg_plan *g, const float *dyp, const int64_t *dbase, float *d, float *y,
                                  int64_t ldy, int64_t lde) {
    const int64_t n01 = g->ta[0] * g->ta[1];
    float *t1 = d, *t2 = d + g->E * WL;
    for (int64_t f = 0; f < g->f; f++) {
        const float *src = dyp + f * g->q_pos;
        for (int64_t i0 = 0; i0 < g->ta[0]; i0++)
            for (int64_t i1 = 0; i1 < g->ta[1]; i1++) {
                const int64_t off = (i0 * g->qd[1] + i1) * g->qd[2];
                float *r = t1 + ((i0 * g->ta[1] + i1) * 2) * WL;
                for (int j = 0; j < WL; j += 4) {
                    const __m128 a = wg_load2(src + dbase[j] + off), b = wg_load2(src + dbase[j + 1] + off);
                    const __m128 c = wg_load2(src + dbase[j + 2] + off), e = wg_load2(src + dbase[j + 3] + off);
                    const __m128 ab = _mm_movelh_ps(a, b), ce = _mm_movelh_ps(c, e);  // a0 a1 b0 b1, c0 c1 e0 e1
                    _mm_storeu_ps(r + j, _mm_shuffle_ps(ab, ce, _MM_SHUFFLE(2, 0, 2, 0)));
                    _mm_storeu_ps(r + WL + j, _mm_shuffle_ps(ab, ce, _MM_SHUFFLE(3, 1, 3, 1)));
                }
            }
        // the passes, the last one writing Y's rows of f
        const bool h = g->on[1], dz = g->on[0];
        float *out = y + f * ldy;
        const int64_t ldo = lde;
        g->ax->a_axis(t1, h || dz ? t2 : out, h || dz ? WL : ldo, n01, 1);  // [ta0][ta1][4]
        float *cur = t2;
        if (h) {
            g->ax->a_axis(t2, dz ? t1 : out, dz ? WL : ldo, g->ta[0], 4);  // [ta0][4][4]
            cur = t1;
        }
        if (dz) g->ax->a_axis(cur, out, ldo, 1, g->pa[1] * 4);  // [4][pa1][4]
    }
}

// vt [e][lane][c] (e's blocks vt_e apart) = v [e][c][WL] (e's blocks g->vs apart): 8x8 blocks.
WG_TARGET static void wg_transpose_v(const wg_plan *g, const float *v, float *vt, int64_t vt_e) {
    const int64_t C = g->c;
    for (int64_t e = 0; e < g->E; e++) {
        const float *ve = v + e * g->vs;
        float *te = vt + e * vt_e;
        int64_t c0 = 0;
        for (; c0 + 8 <= C; c0 += 8)
            for (int j0 = 0; j0 < WL; j0 += 8) {
                __m256 r0 = _mm256_loadu_ps(ve + (c0 + 0) * WL + j0), r1 = _mm256_loadu_ps(ve + (c0 + 1) * WL + j0);
                __m256 r2 = _mm256_loadu_ps(ve + (c0 + 2) * WL + j0), r3 = _mm256_loadu_ps(ve + (c0 + 3) * WL + j0);
                __m256 r4 = _mm256_loadu_ps(ve + (c0 + 4) * WL + j0), r5 = _mm256_loadu_ps(ve + (c0 + 5) * WL + j0);
                __m256 r6 = _mm256_loadu_ps(ve + (c0 + 6) * WL + j0), r7 = _mm256_loadu_ps(ve + (c0 + 7) * WL + j0);
                __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
                __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
                __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
                __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
                __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
                __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
                __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
                __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
                float *o = te + j0 * C + c0;
                _mm256_storeu_ps(o + 0 * C, _mm256_permute2f128_ps(s0, s4, 0x20));
                _mm256_storeu_ps(o + 1 * C, _mm256_permute2f128_ps(s1, s5, 0x20));
                _mm256_storeu_ps(o + 2 * C, _mm256_permute2f128_ps(s2, s6, 0x20));
                _mm256_storeu_ps(o + 3 * C, _mm256_permute2f128_ps(s3, s7, 0x20));
                _mm256_storeu_ps(o + 4 * C, _mm256_permute2f128_ps(s0, s4, 0x31));
                _mm256_storeu_ps(o + 5 * C, _mm256_permute2f128_ps(s1, s5, 0x31));
                _mm256_storeu_ps(o + 6 * C, _mm256_permute2f128_ps(s2, s6, 0x31));
                _mm256_storeu_ps(o + 7 * C, _mm256_permute2f128_ps(s3, s7, 0x31));
            }
        for (; c0 < C; c0++)
            for (int j = 0; j < WL; j++) te[j * C + c0] = ve[c0 * WL + j];
    }
}

// The taps' gradient of one pair of channels ([k0][k1][k2]) = G^T u G along every transformed
// axis, u [pa0][pa1][pa2] (overwritten).
static void wg_kernel_grad(const wg_plan *g, float *u, float *taps) {
    float b[64];
    int64_t dim[3];
    for (int i = 0; i < 3; i++) dim[i] = g->pa[i];
    for (int ax = 2; ax >= 0; ax--) {
        if (!g->on[ax]) continue;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < ax; i++) outer *= dim[i];
        for (int i = ax + 1; i < 3; i++) inner *= dim[i];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const float u0 = u[(o * 4 + 0) * inner + i], u1 = u[(o * 4 + 1) * inner + i];
                const float u2 = u[(o * 4 + 2) * inner + i], u3 = u[(o * 4 + 3) * inner + i];
                b[(o * 3 + 0) * inner + i] = u0 + (u1 + u2) * 0.5f;
                b[(o * 3 + 1) * inner + i] = (u1 - u2) * 0.5f;
                b[(o * 3 + 2) * inner + i] = (u1 + u2) * 0.5f + u3;
            }
        dim[ax] = 3;
        memcpy(u, b, sizeof(float) * (size_t)(dim[0] * dim[1] * dim[2]));
    }
    memcpy(taps, u, sizeof(float) * (size_t)(dim[0] * dim[1] * dim[2]));
}

// Floats of scratch of the weight gradient: dU, the chunk's Y and V^T (each with mr spare rows,
// which the tile kernel reads), and per thread v and d.
// e's blocks of dU [f][c], Y [f][WG_TC] and V^T [WG_TC][c] are these many floats apart:
static int64_t wg_dus(const wg_plan *g) { return g->f * g->c + WG_SKEW; }
static int64_t wg_ys(const wg_plan *g) { return g->f * WG_TC + WG_SKEW; }
static int64_t wg_vts(const wg_plan *g) { return WG_TC * g->c + WG_SKEW; }
static int64_t wg_dw_fixed(const wg_plan *g, int64_t mr) {
    return g->E * wg_dus(g) + mr * g->c + g->E * wg_ys(g) + mr * WG_TC + g->E * wg_vts(g);
}
static int64_t wg_dw_thread(const wg_plan *g) { return g->E * (g->vs + 2 * WL); }
static int64_t wg_dw_sample(const wg_plan *g) { return g->c * g->pad_pos + g->f * g->q_pos; }

static bool wg_run_dw(const wg_plan *g, int64_t n, const float *x, const float *dy, float *dw, float *scratch,
                      int64_t scratch_floats) {
    int mr = 0;
    const cpu_conv_dw_tile_fn dw_tile = cpu_conv_fast_dw_tile(&mr);
    if (!dw_tile) return false;
    const int64_t fixed = wg_dw_fixed(g, mr), per = wg_dw_thread(g), sample = wg_dw_sample(g);
    int64_t threads = omp_get_max_threads(), left = scratch_floats - fixed - threads * per;
    if (left < sample) {  // fewer threads, then give up (the same test at any thread count)
        threads = (scratch_floats - fixed - sample) / per;
        if (threads < 1) return false;
        left = scratch_floats - fixed - threads * per;
    }
    int64_t cs = left / sample;
    cs = cs < n ? cs : n;
    const int64_t F = g->f, C = g->c, E = g->E, fb = (F + mr - 1) / mr, dus = wg_dus(g), ys = wg_ys(g), vts = wg_vts(g);
    float *du = scratch, *yc = du + E * dus + mr * C, *vt = yc + E * ys + mr * WG_TC, *bufs = vt + E * vts;
    float *xpad = bufs + threads * per, *dyp = xpad + cs * C * g->pad_pos;
    // Y's rows past F (the tile kernel reads mr rows of a block): the gaps, and after the last e
    for (int64_t e = 0; e < E; e++) memset(yc + e * ys + F * WG_TC, 0, sizeof(float) * WG_SKEW);
    memset(yc + E * ys, 0, sizeof(float) * (size_t)(mr * WG_TC));
    bool first = true;
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        const int64_t ns = n - s0 < cs ? n - s0 : cs, count = ns * g->tiles;
        wg_pad(g, ns, x + s0 * C * g->in[0] * g->in[1] * g->in[2], xpad);
        wg_pad_dy(g, ns, dy + s0 * F * g->out_pos, dyp);
        for (int64_t T0 = 0; T0 < count; T0 += WG_TC) {
            const int64_t cnt = count - T0 < WG_TC ? count - T0 : WG_TC, batches = (cnt + WL - 1) / WL;
            const bool init = first;
            const int nth = (int)(threads < batches ? threads : batches);
#pragma omp parallel num_threads(nth)
            {
                float *v = bufs + omp_get_thread_num() * per, *d = v + E * g->vs;
                wg_lanes lanes;
#pragma omp for schedule(dynamic, 1)
                for (int64_t bt = 0; bt < batches; bt++) {
                    wg_lanes_make(g, s0, T0 + bt * WL, count, &lanes);
                    wg_input(g, xpad, &lanes, d, v);
                    wg_transpose_v(g, v, vt + bt * WL * C, vts);
                    wg_dy_input(g, dyp, lanes.dbase, d, yc + bt * WL, WG_TC, ys);
                }
            }
            // spare lanes of the last batch: their Y is that of a real tile, so drop them (cnt)
            const int64_t tasks = E * fb;
            const int nt2 = (int)(threads < tasks ? threads : tasks);
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt2)
            for (int64_t task = 0; task < tasks; task++) {
                const int64_t e = task / fb, b = task % fb, rows = F - b * mr < mr ? F - b * mr : mr;
                for (int64_t c0 = 0; c0 < C; c0 += 32) {
                    const int cols = (int)(C - c0 < 32 ? C - c0 : 32);
                    dw_tile(cnt, yc + e * ys + b * mr * WG_TC, WG_TC, vt + e * vts + c0, C, du + e * dus + b * mr * C + c0,
                            C, (int)rows, cols, init);
                }
            }
            first = false;
        }
    }
    int64_t nk = 1;
    for (int i = 0; i < 3; i++) nk *= g->on[i] ? 3 : 1;
#pragma omp parallel for schedule(static) if (F * C * E >= 65536)
    for (int64_t f = 0; f < F; f++)
        for (int64_t c = 0; c < C; c++) {
            float u[64];
            for (int64_t e = 0; e < E; e++) u[e] = du[e * dus + f * C + c];
            wg_kernel_grad(g, u, dw + (f * C + c) * nk);
        }
    return true;
}

#endif  // WG_BUILT

// GALLEY_CONV_ALGO: unset, empty or auto (cpu_conv_wino_worth decides), direct (never F(2,3): the
// implicit GEMM's bits), winograd (wherever it applies, worth it or not: for tests).
enum { ALGO_AUTO, ALGO_DIRECT, ALGO_WINOGRAD };

static int wg_algo(void) {
    const char *v = getenv("GALLEY_CONV_ALGO");
    if (!v || !*v || !strcmp(v, "auto")) return ALGO_AUTO;
    if (!strcmp(v, "direct")) return ALGO_DIRECT;
    if (!strcmp(v, "winograd")) return ALGO_WINOGRAD;
    gl_die(GL_EXIT_USAGE, "unset it to let galley choose",
           "GALLEY_CONV_ALGO=%s: the values are auto, direct and winograd", v);
}

// Whether F(2,3) is worth it: it trades multiply-adds in the GEMM for transforms, whose gathers
// run 8 lanes wide on both ISAs (their row passes 16 on AVX-512: cpu_conv_wino_axes.h), so the
// trade pays less where the GEMM is 16-wide. Each pass is timed against the implicit GEMM at 2
// threads (alternating the two, the best of each), as the speed-up forward / input gradient /
// weight gradient. The Xeon's column was measured again (two runs: their range) once the row
// passes went 16-wide; every rule below held. (Weight gradients alone with ample scratch are not
// the whole story: in CosmoFlow's training, with the graph's work buffer as scratch, the implicit
// GEMM's dW of 64 -> 128 on 8^3 took 0.387-0.397 s over 30 steps where F(2,3)'s took
// 0.316-0.320, when alone it measured 0.92-0.94.) The small CNN's second layer's backward in
// training went 1.69-1.74 -> 1.65-1.68 s over 300 steps with its input gradient by F(2,3).
//
//                                                    2-core EPYC (Zen 3,     2-core Xeon (AVX-512,
//                                                    AVX2; best of 12)       best of 15)
//   2D 32 -> 64 on 16x16, batch 64 (small CNN's 2nd)  1.15 / 1.17 / 1.31      1.03-1.06 / 1.12-1.15 / 0.58-0.59
//   2D 64 -> 64 on 16x16, batch 64                    1.40 / 1.32 / 1.58      1.25-1.31 / 1.31-1.38 / 0.66-0.69
//   2D 32 -> 32 on 16x16, batch 64                    1.03 / 1.05 / 1.00      0.96-1.02 / 1.03 / 0.51
//   2D 64 -> 128 on 8x8, batch 64                            -                1.26-1.30 / 1.38-1.40 / 0.93-0.94
//   2D 128 -> 128 on 8x8, batch 64                           -                1.28-1.39 / 1.38 / 1.04-1.05
//   3D 32 -> 64 on 16^3, batch 8 (CosmoFlow's 2nd)    1.85 / 1.86 / 1.69      1.97-1.99 / 1.89-2.01 / 0.90
//   3D 32 -> 64 on 10^3, batch 8 (cnn3d's 3rd)               -                1.86-1.92 / 2.23-2.31 / 0.90-0.91
//   3D 64 -> 128 on 8^3, batch 8                      2.17 / 2.16 / 1.63      1.67-1.75 / 1.90-1.97 / 1.29-1.35
//   3D 64 -> 128 on 6^3, batch 8 (27 tiles a sample)         -                1.27-1.44 / 1.58-1.77 / 1.35-1.36
//   3D 128 -> 256 on 4^3, batch 8 (8 tiles a sample)  1.12 / 1.19 / 1.21      0.71-0.80 / 0.83-0.94 / 1.09-1.14
//   3D 16 -> 16 on 20^3, batch 8                      1.51 / 1.51 / 1.21      1.64-1.72 / 1.67-1.74 / 0.45-0.46
//   3D 16 -> 32 on 20^3, batch 8 (cnn3d's 2nd)               -                1.55-1.61 / 1.92-1.96 / 0.53-0.56
//   3D 32 -> 32 on 20^3, batch 8                             -                1.86-1.90 / 1.90-1.95 / 0.77-0.78
//   3D 256 -> 512 on 2^3, batch 8 (1 tile a sample)   0.38 / 0.47 / 1.03             -
//   3D 4 -> 32 on 32^3, batch 8 (a first layer)       0.69 / 1.21 / 0.31             -
//   3D 1 -> 16 on 40^3, batch 8                       0.56 / 0.86 / 0.16             -
//
// The 2D forward again once wg_store_pool stored whole batches as vectors (Xeon, best of 100, two
// runs, batch 64), plain / with its 2 x 2 max pool fused into the store (against the implicit
// GEMM's fused pool): 32 -> 64 on 16x16 1.06-1.07 / 1.27-1.29, 64 -> 32 1.17 / 1.28-1.29, 32 ->
// 64 on 32x32 1.04-1.05 / 1.35, 32 -> 32 on 16x16 0.94-0.95 / 1.11, on 32x32 0.84-0.86, 32 -> 48
// 0.98-1.00, 16 -> 32 - / 0.93-0.97, 16 -> 16 - / 0.78-0.80. So 2D forwards take F(2,3) where the
// input gradient does (32+ channels one side, 64+ the other): the choice cannot hang on the pool,
// whose fusion must not change a run's bits (model.fuse: false). The small CNN (tests/bench),
// whose 2nd layer's forward this moved to F(2,3): +6.7% and +4.6% by median in two series of
// alternating pairs (8 and 6; 7,269-7,569 -> 7,589-7,919 samples/s in the first).
//
// Everywhere: few channels make the small GEMMs memory-bound (M is 8x (3D) or 4x (2D) the
// output), and maps of fewer than 8 tiles a sample spend their lanes and the kernel transform on
// padding. On AVX-512 besides: in 2D the forward and the input gradient with 32+ channels one
// side and 64+ the other, never the weight gradient; in 3D forward and input gradient on maps of
// 27+ tiles, the weight gradient with 64+. On the EPYC every pass of these layers stays F(2,3).
bool cpu_conv_wino_worth(int isa, cpu_conv_pass pass, int dims, int64_t n, int64_t c, int64_t f, int64_t tiles) {
    const int64_t few = c < f ? c : f;
    if (few < 16 || tiles < 8 || n * tiles < 2 * WL) return false;
    if (isa != CPU_ISA_AVX512) return true;
    if (dims == 2) return pass != CPU_CONV_WEIGHT_GRAD && few >= 32 && (c > f ? c : f) >= 64;
    return pass == CPU_CONV_WEIGHT_GRAD ? few >= 64 : tiles >= 27;
}

#if WG_BUILT
// cpu_conv_wino_worth for plan g's pass on this CPU's kernels.
static bool wg_worth(const wg_plan *g, cpu_conv_pass pass, int64_t n) {
    return cpu_conv_wino_worth(cpu_conv_fast_isa(), pass, g->E == 64 ? 3 : 2, n, g->c, g->f, g->tiles);
}
#endif

// Both return false, having done nothing, where F(2,3) does not apply or is not worth it (the
// caller then runs cpu_conv_fast.c): see cpu_kernels.h.
bool cpu_conv_wino_forward(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                           const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                           const float *w, const float *b, float *y, float *scratch, int64_t scratch_floats,
                           cpu_store_act act, cpu_store_pool *pool) {
#if WG_BUILT
    wg_plan g;
    const int algo = wg_algo();
    if (algo == ALGO_DIRECT || n < 1 || !wg_make(c, f, in, out, k, d, p, &g)) return false;
    if (algo == ALGO_AUTO && !wg_worth(&g, CPU_CONV_FORWARD, n)) return false;
    return wg_run(&g, n, false, x, w, b, false, y, scratch, scratch_floats, act, pool);
#else
    (void)n, (void)c, (void)f, (void)in, (void)out, (void)k, (void)d, (void)p, (void)x, (void)w, (void)b, (void)y;
    (void)scratch, (void)scratch_floats, (void)act, (void)pool;
    return false;
#endif
}

bool cpu_conv_wino_weight_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                               const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *x,
                               const float *dy, float *dw, float *scratch, int64_t scratch_floats) {
#if WG_BUILT
    wg_plan g;
    const int algo = wg_algo();
    if (algo == ALGO_DIRECT || n < 1 || !wg_make(c, f, in, out, k, d, p, &g)) return false;
    if (algo == ALGO_AUTO && !wg_worth(&g, CPU_CONV_WEIGHT_GRAD, n)) return false;
    return wg_run_dw(&g, n, x, dy, dw, scratch, scratch_floats);
#else
    (void)n, (void)c, (void)f, (void)in, (void)out, (void)k, (void)d, (void)p, (void)x, (void)dy, (void)dw;
    (void)scratch, (void)scratch_floats;
    return false;
#endif
}

int64_t cpu_conv_wino_weight_grad_floats(int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                                         const int64_t k[3], const int64_t p[3]) {
#if WG_BUILT
    wg_plan g;
    int mr = 0;
    const int64_t d1[3] = {1, 1, 1};
    if (!wg_make(c, f, in, out, k, d1, p, &g) || !cpu_conv_fast_dw_tile(&mr)) return 0;
    return wg_dw_fixed(&g, mr) + wg_dw_thread(&g) + wg_dw_sample(&g);
#else
    (void)c, (void)f, (void)in, (void)out, (void)k, (void)p;
    return 0;
#endif
}

// Without acc, dx is written: the output transform's values themselves (a -0 stays -0, where
// 0 + -0 gave +0).
bool cpu_conv_wino_input_grad(int64_t n, int64_t c, int64_t f, const int64_t in[3], const int64_t out[3],
                              const int64_t k[3], const int64_t d[3], const int64_t p[3], const float *w,
                              const float *dy, float *dx, bool acc, float *scratch, int64_t scratch_floats) {
#if WG_BUILT
    int64_t pf[3];
    for (int i = 0; i < 3; i++) pf[i] = (k[i] - 1) * d[i] - p[i];
    wg_plan g;  // dy (f channels, out) -> dx (c channels, in)
    const int algo = wg_algo();
    if (algo == ALGO_DIRECT || n < 1 || !wg_make(f, c, out, in, k, d, pf, &g)) return false;
    if (algo == ALGO_AUTO && !wg_worth(&g, CPU_CONV_INPUT_GRAD, n)) return false;
    if (!dy) {  // only whether it would: the scratch check of wg_run without the run
        int mr = 0;
        if (!cpu_conv_fast_tile(&mr)) return false;
        return scratch_floats - wg_pack_floats(&g, mr) - wg_thread_floats(&g) >= g.c * g.pad_pos;
    }
    return wg_run(&g, n, true, dy, w, NULL, acc, dx, scratch, scratch_floats, (cpu_store_act){0}, NULL);
#else
    (void)n, (void)c, (void)f, (void)in, (void)out, (void)k, (void)d, (void)p, (void)w, (void)dy, (void)dx;
    (void)scratch, (void)scratch_floats, (void)acc;
    return false;
#endif
}
