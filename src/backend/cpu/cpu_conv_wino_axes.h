// cpu_conv_wino_axes.h: cpu_conv_wino.c's passes over whole rows of WL lanes (B^T, A^T and A
// along one axis; the bias and activation of the outputs), written once with GCC vector
// extensions and compiled there twice under a target pragma: AVX2 (vectors of WW = 8 floats) and
// AVX-512 (WW = 16); not a header of its own. Expects WL, WW (dividing WL) and WGX(name)
// (suffixes a name) from the includer, and int32_t, bool, cpu_store_act and ACT_RELU; WW and
// WGX are undefined at its end. Additions, subtractions, leaky_relu's product and selects, lane
// by lane and in the scalar expressions' order (no contraction: the C11 build keeps every
// operation), so the bits are the same on either instruction set. (Vectors of 16 floats under
// AVX2, two registers each, had the comparison compiled lane by lane through the stack: cnn3d 10%
// slower on the AVX2 kernels.)
#define wv WGX(wv)
#define wvi WGX(wvi)
#define wv_u WGX(wv_u)
typedef float wv __attribute__((vector_size(WW * 4)));
typedef int32_t wvi __attribute__((vector_size(WW * 4)));
// Loads and stores at any address (as immintrin.h's __m256_u and __m512_u).
typedef float wv_u __attribute__((vector_size(WW * 4), aligned(4), may_alias));
#define WV(p) (*(wv_u *)(p))

// B^T along the axis whose neighbours are st rows (of WL floats) apart in d [rows][WL], rows a
// multiple of 4 st: each line (r, r + st, r + 2 st, r + 3 st) -> d0 - d2, d1 + d2, d2 - d1,
// d1 - d3 into dst's rows r .. (ldd floats apart). dst may be d (a line's four rows are read
// before they are written). The lines' first rows are enumerated: a test of every row,
// r / st % 4, was an integer division a row, 4x the rows that do work, and cost more than the
// transform.
static void WGX(bt_axis)(float *d, int64_t rows, int64_t st, float *dst, int64_t ldd) {
    for (int64_t b = 0; b < rows; b += 4 * st)
        for (int64_t r = b; r < b + st; r++) {  // the first rows of the lines in this block
            const float *r0 = d + r * WL, *r1 = r0 + st * WL, *r2 = r1 + st * WL, *r3 = r2 + st * WL;
            float *o0 = dst + r * ldd, *o1 = o0 + st * ldd, *o2 = o1 + st * ldd, *o3 = o2 + st * ldd;
            for (int j = 0; j < WL; j += WW) {
                const wv a = WV(r0 + j), b1 = WV(r1 + j), c = WV(r2 + j), e = WV(r3 + j);
                WV(o0 + j) = a - c, WV(o1 + j) = b1 + c, WV(o2 + j) = c - b1, WV(o3 + j) = b1 - e;
            }
        }
}

// A^T along the middle axis of src [na][4][nb] (rows lds floats apart) into dst [na][2][nb] (rows
// WL apart): o0 = (m0 + m1) + m2, o1 = (m1 - m2) - m3.
static void WGX(at_axis)(const float *src, int64_t lds, float *dst, int64_t na, int64_t nb) {
    for (int64_t a = 0; a < na; a++)
        for (int64_t b = 0; b < nb; b++) {
            const float *m0 = src + ((a * 4 + 0) * nb + b) * lds, *m1 = m0 + nb * lds, *m2 = m1 + nb * lds;
            const float *m3 = m2 + nb * lds;
            float *o0 = dst + ((a * 2 + 0) * nb + b) * WL, *o1 = o0 + nb * WL;
            for (int j = 0; j < WL; j += WW) {
                const wv x0 = WV(m0 + j), x1 = WV(m1 + j), x2 = WV(m2 + j), x3 = WV(m3 + j);
                WV(o0 + j) = (x0 + x1) + x2, WV(o1 + j) = (x1 - x2) - x3;
            }
        }
}

// A along the middle axis of src [na][2][nb] (rows WL apart) into dst [na][4][nb] (rows ldd
// floats apart): m0 = d0, m1 = d0 + d1, m2 = d0 - d1, m3 = 0 - d1.
static void WGX(a_axis)(const float *src, float *dst, int64_t ldd, int64_t na, int64_t nb) {
    const wv z = {0};
    for (int64_t a = 0; a < na; a++)
        for (int64_t b = 0; b < nb; b++) {
            const float *d0 = src + ((a * 2 + 0) * nb + b) * WL, *d1 = d0 + nb * WL;
            float *m0 = dst + ((a * 4 + 0) * nb + b) * ldd, *m1 = m0 + nb * ldd, *m2 = m1 + nb * ldd;
            float *m3 = m2 + nb * ldd;
            for (int j = 0; j < WL; j += WW) {
                const wv x0 = WV(d0 + j), x1 = WV(d1 + j);
                WV(m0 + j) = x0, WV(m1 + j) = x0 + x1, WV(m2 + j) = x0 - x1, WV(m3 + j) = z - x1;
            }
        }
}

// rows x WL outputs o, in place: o + b where bias (b its value), then the activation as
// cpu_act_forward computes it (relu: v > 0 ? v : 0; leaky: v > 0 ? v : slope v; NaN fails
// v > 0). b and the slope go to every lane as b - 0 (b itself, -0 included: 0 + b would make a
// bias of -0 +0, and an output of -0 plus it +0 rather than -0).
static void WGX(bias_act)(int64_t rows, float *o, bool bias, float b, cpu_store_act act) {
    if (!bias && !act.on) return;
    const wv z = {0}, bv = b - z, sv = act.slope - z;
    const bool relu = act.act == ACT_RELU;
    for (int64_t i = 0; i < rows * WL; i += WW) {
        wv v = WV(o + i);
        if (bias) v = v + bv;
        if (act.on) {
            const wvi pos = (wvi)(v > z);  // all ones where v > 0
            v = relu ? (wv)((wvi)v & pos) : (wv)(((wvi)v & pos) | ((wvi)(sv * v) & ~pos));
        }
        WV(o + i) = v;
    }
}

#undef WV
#undef wv
#undef wvi
#undef wv_u
#undef WGX
#undef WW
