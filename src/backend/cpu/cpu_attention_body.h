// cpu_attention_body.h: the vector inner kernels of cpu_attention.c, written once with GCC vector
// extensions and compiled there twice under a target pragma (AVX2: AW 8, AVX-512: AW 16); not a
// header of its own. Expects AW (lanes) and AFN(name) (suffixes a name) from the includer.
#define af AFN(af)
#define ai AFN(ai)
#define af_u AFN(af_u)
typedef float af __attribute__((vector_size(AW * 4)));
typedef int32_t ai __attribute__((vector_size(AW * 4)));
// Loads and stores at any address (as immintrin.h's __m256_u).
typedef float af_u __attribute__((vector_size(AW * 4), aligned(4), may_alias));

#define AINLINE static inline __attribute__((always_inline))

// e^x in each lane (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, times 2^n; within
// 2 ulp of expf); 0 below -87.3 (so -INF, a masked score, gives 0); NaN stays NaN, as with expf,
// so a NaN score reaches the output and the run's non-finite check (it used to give 0 and vanish).
#if AW == 16
// The same on AVX-512 through its masks: the clamps as a blend and a min, the floor in one
// rounding, NaN put back by one masked move; the same arithmetic on every value (the same fused
// multiply-adds, the floor's integer the same), so the same bits (test_attention compares it with
// the AVX2 one element by element). 24 instructions for 31; the exponentials were 27% of the
// attention's forward at vit-tiny's shape. Measured on a 2-core Xeon (2 threads, alternating
// runs): T 1024, H 8, E 48 forward 10.9-11.2 -> 10.3-10.6 ms, backward 20.4-21.1 -> 19.5-20.2 ms;
// T 4050 forward 198 -> 181 ms, backward 348 -> 332 ms; T 64 (vit-tiny) 1-3%.
AINLINE af AFN(vexp)(af xin) {
    const __m512 x0 = (__m512)xin, lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 nan = _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q), keep = _mm512_cmp_ps_mask(x0, lo, _CMP_GE_OQ);
    const __m512 x = _mm512_min_ps(_mm512_mask_blend_ps(keep, lo, x0), _mm512_set1_ps(88.37626f));
    const __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
    const __m512 n = _mm512_roundscale_ps(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512i t = _mm512_cvttps_epi32(n);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500E-4f), r, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(t, _mm512_set1_epi32(127)), 23));
    return (af)_mm512_mask_mov_ps(_mm512_maskz_mul_ps(keep, y, p2), nan, x0);
}
#else
AINLINE af AFN(vexp)(af x) {
    const af lo = (af){0} - 87.33654f, hi = (af){0} + 88.37626f;
    const ai nan = x != x;
    const af x0 = x;
    const ai keep = x >= lo;
    x = (af)(((ai)x & keep) | ((ai)lo & ~keep));  // x < lo (and NaN) -> lo; zeroed below
    const ai big = x > hi;
    x = (af)(((ai)hi & big) | ((ai)x & ~big));
    af fx = x * 1.44269504088896341f + 0.5f;
    ai t = __builtin_convertvector(fx, ai);
    t += __builtin_convertvector(t, af) > fx;  // floor: -1 where truncation rounded up
    const af n = __builtin_convertvector(t, af);
    af r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    af y = (af){0} + 1.9875691500E-4f;
    y = y * r + 1.3981999507E-3f;
    y = y * r + 8.3334519073E-3f;
    y = y * r + 4.1665795894E-2f;
    y = y * r + 1.6666665459E-1f;
    y = y * r + 5.0000001201E-1f;
    y = y * (r * r) + r + 1.0f;
    const af p2 = (af)((t + 127) << 23);
    return (af)(((ai)(y * p2) & keep) | ((ai)x0 & nan));
}
#endif

// Lanes l .. l+AW-1 of x[0, cnt) (past cnt: `fill`).
AINLINE af AFN(load_part)(const float *x, int64_t j, int64_t cnt, float fill) {
    if (j + AW <= cnt) return *(const af_u *)(x + j);
    float tmp[AW];
    for (int q = 0; q < AW; q++) tmp[q] = j + q < cnt ? x[j + q] : fill;
    return *(af_u *)tmp;
}

// The sum of a vector's lanes, halves folded onto each other (a fixed tree: lane q gets lane
// q + w for w = AW/2, ..., 1), in registers: through memory, the folds were a quarter of exp_row's
// time at rows of 64.
AINLINE float AFN(hsum)(af v) {
    typedef float v8 __attribute__((vector_size(32)));
    typedef float v4 __attribute__((vector_size(16)));
    typedef float v2 __attribute__((vector_size(8)));
#if AW == 16
    const v8 h8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    const v8 h8 = v;
#endif
    const v4 h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
    const v2 h2 = __builtin_shufflevector(h4, h4, 0, 1) + __builtin_shufflevector(h4, h4, 2, 3);
    return h2[0] + h2[1];
}

// The largest lane of a vector, halves folded onto each other in registers. Every step keeps the
// larger of two values (or either, where they compare equal: only +0 and -0, which give the same
// exponentials and sums downstream), so the result is the lanes' maximum whatever the order: the
// same value as a scan in lane order. The scan it replaced (a store, then 15 dependent compares
// per row) made softmax_rows 29% of the attention forward at vit-tiny's shape (T 64, E 64), 23%
// now; a (sample, head) forward 8.6-9.2 -> 7.9-8.5 us (one thread of a 2-core Xeon, operands in
// cache, 5 alternating runs). No lane may be NaN (the callers' maxima never are: a NaN never
// compares greater). test_attention's peaked rows put the maximum in every lane.
AINLINE float AFN(hmax)(af v) {
    typedef float v8 __attribute__((vector_size(32)));
    typedef float v4 __attribute__((vector_size(16)));
    typedef int32_t i4 __attribute__((vector_size(16)));
#define AHMAX(V, I, a, b) ((V)(((I)(a) & ((a) > (b))) | ((I)(b) & ~((a) > (b)))))
#if AW == 16
    typedef int32_t i8 __attribute__((vector_size(32)));
    const v8 a8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
             b8 = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const v8 h8 = AHMAX(v8, i8, a8, b8);
#else
    const v8 h8 = v;
#endif
    const v4 a4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3), b4 = __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
    const v4 h4 = AHMAX(v4, i4, a4, b4);
    const v4 c4 = __builtin_shufflevector(h4, h4, 2, 3, 0, 1), h2 = AHMAX(v4, i4, h4, c4);
#undef AHMAX
    return h2[0] > h2[1] ? h2[0] : h2[1];
}

// The lane sums of both instruction sets are those of 16 lanes: AVX-512's one vector, or on AVX2
// two (lanes 0-7 and 8-15 of each 16 elements), added together where AVX-512's hsum folds its
// halves; so the sums, hence the attention's bits, are the same on both (test_attention).

// v = e^(x[j..] * scale - sub) stored back (only below cnt), and v itself
AINLINE af AFN(exp_part)(float *x, int64_t j, int64_t cnt, float scale, float sub) {
    af v = AFN(vexp)(AFN(load_part)(x, j, cnt, -INFINITY) * scale - sub);
    if (j + AW <= cnt) *(af_u *)(x + j) = v;
    else
        for (int64_t q = j; q < cnt; q++) x[q] = v[q - j];
    return v;
}

// x[j] = e^(x[j] * scale - sub) for j < cnt; returns their sum (16 lane sums, then hsum).
static float AFN(exp_row)(float *x, int64_t cnt, float scale, float sub) {
    af acc = (af){0};
#if AW == 16
    for (int64_t j = 0; j < cnt; j += 16) acc += AFN(exp_part)(x, j, cnt, scale, sub);
#else
    af acc_hi = (af){0};
    for (int64_t j = 0; j < cnt; j += 16) {
        acc += AFN(exp_part)(x, j, cnt, scale, sub);
        if (j + 8 < cnt) acc_hi += AFN(exp_part)(x, j + 8, cnt, scale, sub);
    }
    acc += acc_hi;
#endif
    return AFN(hsum)(acc);
}

// max(m, max_j x[j] * scale) over j < cnt.
static float AFN(row_max)(const float *x, int64_t cnt, float scale, float m) {
    af mx = (af){0} + m;
    for (int64_t j = 0; j < cnt; j += AW) {
        af v = AFN(load_part)(x, j, cnt, -INFINITY) * scale;
        const ai gt = v > mx;
        mx = (af)(((ai)v & gt) | ((ai)mx & ~gt));
    }
    return AFN(hmax)(mx);  // every lane starts at m: at least m
}

// x[j] *= a for j < cnt.
static void AFN(scale_row)(float *x, int64_t cnt, float a) {
    int64_t j = 0;
    for (; j + AW <= cnt; j += AW) *(af_u *)(x + j) = *(af_u *)(x + j) * a;
    for (; j < cnt; j++) x[j] *= a;
}

// s[j] = s[j] * (dp[j] - d) * scale for j < cnt (dS from P and dP, dP kept or dropped).
static void AFN(ds_row)(float *s, const float *dp, int64_t cnt, float d, float scale) {
    int64_t j = 0;
    for (; j + AW <= cnt; j += AW) *(af_u *)(s + j) = *(af_u *)(s + j) * (*(const af_u *)(dp + j) - d) * scale;
    for (; j < cnt; j++) s[j] = s[j] * (dp[j] - d) * scale;
}

// sum_j a[j] b[j] over j < cnt (16 lane sums as exp_row's, then hsum; the tail past the last
// whole 16 in order after).
static float AFN(dot)(const float *a, const float *b, int64_t cnt) {
    af acc = (af){0};
    int64_t j = 0;
#if AW == 16
    for (; j + 16 <= cnt; j += 16) acc += *(const af_u *)(a + j) * *(const af_u *)(b + j);
#else
    af acc_hi = (af){0};
    for (; j + 16 <= cnt; j += 16) {
        acc += *(const af_u *)(a + j) * *(const af_u *)(b + j);
        acc_hi += *(const af_u *)(a + j + 8) * *(const af_u *)(b + j + 8);
    }
    acc += acc_hi;
#endif
    float sum = AFN(hsum)(acc);
    for (; j < cnt; j++) sum += a[j] * b[j];
    return sum;
}

#if AW == 16
// ---- whole 64-key tiles on AVX-512 (cpu_attention.c's attn_tile_fast) -----------------------------
//
// q k^T, the softmax and P v of a (query tile, 64-key tile) in three kernels of their own rather
// than cpu_gemm_fast's 12 x 32 tiles and a row function per row: 6 rows x 64 columns (or 6 x E)
// register tiles, so 64 rows take 11 tiles (the last moved back over its neighbour, which its
// overlapping rows do not store) and E = 48 no column block of 32 half wasted; K^T packed once
// per tile; the softmax's constants set once per tile. Every element is the chain the general
// path sums (q k^T: an fma chain over E from 0; P v: over the keys from 0 or from y; the
// softmax: row_max's and exp_row's expressions), so the bits are the general path's
// (test_attention compares them).

// kt[f][j] (rows AK apart) = k[j * ldk + f] for f < e (a multiple of 16), j < 64: 16 x 16 blocks
// transposed in registers (cpu_transpose16.h).
static void AFN(pack_kt)(int64_t e, const float *k, int64_t ldk, float *kt) {
    for (int64_t j0 = 0; j0 < 64; j0 += 16)
        for (int64_t f0 = 0; f0 < e; f0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(k + (j0 + i) * ldk + f0);
            cpu_transpose16(r);
            for (int q = 0; q < 16; q++) _mm512_storeu_ps(kt + (f0 + q) * AK + j0, r[q]);
        }
}

// s[r][j] (rows AK apart) = the fma chain over f < e from 0 of q[r * ldq + f] kt[f][j], for
// r < bq (at least 6), j < 64.
static void AFN(qk_rows)(int64_t bq, int64_t e, const float *q, int64_t ldq, const float *kt, float *s) {
    for (int64_t i = 0; i < bq; i += 6) {
        const int64_t i0 = i + 6 <= bq ? i : bq - 6;
        __m512 c[6][4];
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) c[r][0] = c[r][1] = c[r][2] = c[r][3] = _mm512_setzero_ps();
        const float *qr = q + i0 * ldq;
        for (int64_t f = 0; f < e; f++) {
            const __m512 b0 = _mm512_loadu_ps(kt + f * AK), b1 = _mm512_loadu_ps(kt + f * AK + 16);
            const __m512 b2 = _mm512_loadu_ps(kt + f * AK + 32), b3 = _mm512_loadu_ps(kt + f * AK + 48);
#pragma GCC unroll 6
            for (int r = 0; r < 6; r++) {
                const __m512 a = _mm512_set1_ps(qr[r * ldq + f]);
                c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]), c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
                c[r][2] = _mm512_fmadd_ps(a, b2, c[r][2]), c[r][3] = _mm512_fmadd_ps(a, b3, c[r][3]);
            }
        }
#pragma GCC unroll 6
        for (int r = (int)(i - i0); r < 6; r++)
            for (int v = 0; v < 4; v++) _mm512_storeu_ps(s + (i0 + r) * AK + 16 * v, c[r][v]);
    }
}

// For rows r < bq of s (64 keys each, rows AK apart): mx[r] = row_max(s[r], 64, scale, m[r]), then
// s[r] = e^(s[r] * scale - mx[r]) and sum[r] their sum, as exp_row (inlined here, the same
// expressions).
static void AFN(softmax_rows)(int64_t bq, float *s, float scale, const float *m, float *mx, float *sum) {
    for (int64_t r = 0; r < bq; r++) {
        float *x = s + r * AK;
        af mv = (af){0} + m[r];
        for (int64_t j = 0; j < 64; j += AW) {
            af v = *(const af_u *)(x + j) * scale;
            const ai gt = v > mv;
            mv = (af)(((ai)v & gt) | ((ai)mv & ~gt));
        }
        const float mr = AFN(hmax)(mv);
        af acc = (af){0};
        for (int64_t j = 0; j < 64; j += AW) {
            af v = AFN(vexp)(*(const af_u *)(x + j) * scale - mr);
            acc += v;
            *(af_u *)(x + j) = v;
        }
        mx[r] = mr, sum[r] = AFN(hsum)(acc);
    }
}

// y[r * ldy + x] for r < rows (at least 6), x < 16 NE: the fma chain over j < kn in order of
// a(r, j) v[j * ldv + x], from y (acc) or 0; a(r, j) = p[r][j], or with TA p[j][r] (p's rows AK
// apart: its transpose read in place). P v and dS k (rows the queries, kn 64 keys) and, with TA,
// P^T dy and dS^T q (rows the 64 keys, kn the queries).
AINLINE void AFN(prod_rows_n)(const int NE, const bool TA, int64_t rows, int64_t kn, const float *p, const float *v,
                              int64_t ldv, float *y, int64_t ldy, bool acc) {
    for (int64_t i = 0; i < rows; i += 6) {
        const int64_t i0 = i + 6 <= rows ? i : rows - 6;
        const int r0 = (int)(i - i0);  // rows before r0 belong to the tile before: neither read nor stored
        __m512 c[6][4];
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++)
#pragma GCC unroll 4
            for (int x = 0; x < NE; x++)
                c[r][x] = acc && r >= r0 ? _mm512_loadu_ps(y + (i0 + r) * ldy + 16 * x) : _mm512_setzero_ps();
        for (int64_t j = 0; j < kn; j++) {
            __m512 b[4];
#pragma GCC unroll 4
            for (int x = 0; x < NE; x++) b[x] = _mm512_loadu_ps(v + j * ldv + 16 * x);
#pragma GCC unroll 6
            for (int r = 0; r < 6; r++) {
                const __m512 a = _mm512_set1_ps(TA ? p[j * AK + i0 + r] : p[(i0 + r) * AK + j]);
#pragma GCC unroll 4
                for (int x = 0; x < NE; x++) c[r][x] = _mm512_fmadd_ps(a, b[x], c[r][x]);
            }
        }
#pragma GCC unroll 6
        for (int r = r0; r < 6; r++)
#pragma GCC unroll 4
            for (int x = 0; x < NE; x++) _mm512_storeu_ps(y + (i0 + r) * ldy + 16 * x, c[r][x]);
    }
}

AINLINE void AFN(prod_rows)(const bool TA, int64_t rows, int64_t kn, int64_t e, const float *p, const float *v,
                            int64_t ldv, float *y, int64_t ldy, bool acc) {
    switch (e / 16) {
        case 1: AFN(prod_rows_n)(1, TA, rows, kn, p, v, ldv, y, ldy, acc); break;
        case 2: AFN(prod_rows_n)(2, TA, rows, kn, p, v, ldv, y, ldy, acc); break;
        case 3: AFN(prod_rows_n)(3, TA, rows, kn, p, v, ldv, y, ldy, acc); break;
        default: AFN(prod_rows_n)(4, TA, rows, kn, p, v, ldv, y, ldy, acc); break;
    }
}

// y (=, +=) p v for bq rows of p (64 keys each) and 64 rows of v.
static void AFN(pv_rows)(int64_t bq, int64_t e, const float *p, const float *v, int64_t ldv, float *y, int64_t ldy,
                         bool acc) {
    AFN(prod_rows)(false, bq, 64, e, p, v, ldv, y, ldy, acc);
}

// y (=, +=) p^T v for 64 rows of y (the keys) over bq rows of p and v.
static void AFN(ptv_rows)(int64_t bq, int64_t e, const float *p, const float *v, int64_t ldv, float *y, int64_t ldy,
                          bool acc) {
    AFN(prod_rows)(true, 64, bq, e, p, v, ldv, y, ldy, acc);
}
#endif

#undef af
#undef ai
#undef af_u
#undef AINLINE
