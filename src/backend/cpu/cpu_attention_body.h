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

// c[R, cols] (=, or += when acc) a[R, k] . b[k, cols] for R rows and cols = nv AW (nv <= 2):
// each element sums its k products in order, starting from c or from 0.
AINLINE void AFN(mm_block)(int R, int nv, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float *c, int64_t ldc, int acc) {
    af s[4][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) {
            if (acc) s[r][v] = *(const af_u *)(c + r * ldc + v * AW);
            else s[r][v] = (af){0};
        }
    for (int64_t q = 0; q < k; q++) {
        af bv[2];
        for (int v = 0; v < nv; v++) bv[v] = *(const af_u *)(b + q * ldb + v * AW);
        for (int r = 0; r < R; r++) {
            const float x = a[r * lda + q];
            for (int v = 0; v < nv; v++) s[r][v] += x * bv[v];
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) *(af_u *)(c + r * ldc + v * AW) = s[r][v];
}

// c[m, cols] (=, or += when acc) a[m, k] . b[k, cols], all row-major with leading dimensions lda,
// ldb, ldc: register tiles of 4 rows x 2 vectors, then the vector and scalar remainders. (4 x 3
// tiles, 12 accumulators, measured 1.3-2x slower on AVX2: GCC spilled them.)
static void AFN(mm)(int64_t m, int64_t cols, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, int acc) {
    const int64_t cv = cols / AW * AW;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        int64_t j = 0;
        for (; j + 2 * AW <= cv; j += 2 * AW)
            AFN(mm_block)(4, 2, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, acc);
        if (j < cv) AFN(mm_block)(4, 1, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, acc);
    }
    for (; i < m; i++) {
        int64_t j = 0;
        for (; j + 2 * AW <= cv; j += 2 * AW)
            AFN(mm_block)(1, 2, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, acc);
        if (j < cv) AFN(mm_block)(1, 1, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, acc);
    }
    if (cv < cols)
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = cv; j < cols; j++) {
                float s = acc ? c[r * ldc + j] : 0.0f;
                for (int64_t q = 0; q < k; q++) s += a[r * lda + q] * b[q * ldb + j];
                c[r * ldc + j] = s;
            }
}

// e^x in each lane (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, times 2^n; within
// 2 ulp of expf); 0 below -87.3 (so -INF, a masked score, gives 0).
AINLINE af AFN(vexp)(af x) {
    const af lo = (af){0} - 87.33654f, hi = (af){0} + 88.37626f;
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
    return (af)((ai)(y * p2) & keep);
}

// Lanes l .. l+AW-1 of x[0, cnt) (past cnt: `fill`).
AINLINE af AFN(load_part)(const float *x, int64_t j, int64_t cnt, float fill) {
    if (j + AW <= cnt) return *(const af_u *)(x + j);
    float tmp[AW];
    for (int q = 0; q < AW; q++) tmp[q] = j + q < cnt ? x[j + q] : fill;
    return *(af_u *)tmp;
}

// The sum of a vector's lanes, halves folded onto each other (a fixed tree).
AINLINE float AFN(hsum)(af v) {
    float l[AW];
    *(af_u *)l = v;
    for (int w = AW / 2; w >= 1; w /= 2)
        for (int q = 0; q < w; q++) l[q] += l[q + w];
    return l[0];
}

// x[j] = e^(x[j] * scale - sub) for j < cnt; returns their sum (lane sums, then hsum).
static float AFN(exp_row)(float *x, int64_t cnt, float scale, float sub) {
    af acc = (af){0};
    for (int64_t j = 0; j < cnt; j += AW) {
        af v = AFN(vexp)(AFN(load_part)(x, j, cnt, -INFINITY) * scale - sub);
        acc += v;
        if (j + AW <= cnt) *(af_u *)(x + j) = v;
        else
            for (int64_t q = j; q < cnt; q++) x[q] = v[q - j];
    }
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
    float l[AW];
    *(af_u *)l = mx;
    for (int q = 1; q < AW; q++) m = l[q] > m ? l[q] : m;
    return l[0] > m ? l[0] : m;
}

// x[j] *= a for j < cnt.
static void AFN(scale_row)(float *x, int64_t cnt, float a) {
    int64_t j = 0;
    for (; j + AW <= cnt; j += AW) *(af_u *)(x + j) = *(af_u *)(x + j) * a;
    for (; j < cnt; j++) x[j] *= a;
}

#undef af
#undef ai
#undef af_u
#undef AINLINE
