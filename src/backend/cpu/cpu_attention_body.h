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

// s[j] = s[j] * (dp[j] - d) * scale for j < cnt (dS from P and dP, dP kept or dropped).
static void AFN(ds_row)(float *s, const float *dp, int64_t cnt, float d, float scale) {
    int64_t j = 0;
    for (; j + AW <= cnt; j += AW) *(af_u *)(s + j) = *(af_u *)(s + j) * (*(const af_u *)(dp + j) - d) * scale;
    for (; j < cnt; j++) s[j] = s[j] * (dp[j] - d) * scale;
}

// sum_j a[j] b[j] over j < cnt (lane sums, then hsum; the tail in order after).
static float AFN(dot)(const float *a, const float *b, int64_t cnt) {
    af acc = (af){0};
    int64_t j = 0;
    for (; j + AW <= cnt; j += AW) acc += *(const af_u *)(a + j) * *(const af_u *)(b + j);
    float sum = AFN(hsum)(acc);
    for (; j < cnt; j++) sum += a[j] * b[j];
    return sum;
}

#undef af
#undef ai
#undef af_u
#undef AINLINE
