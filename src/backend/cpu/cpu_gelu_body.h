// cpu_gelu_body.h: cpu_gelu.c's vector passes, written once with GCC vector extensions and
// compiled there twice under a target pragma (AVX2: GW 8, AVX-512: GW 16); not a header of its
// own. Expects from the includer GW (lanes), GFN(name) (suffixes a name), GFMA(a, b, c) (a fused
// multiply-add of three vectors), GROUND(v) (rounding to the nearest integer, ties to even), and
// lane masks as the instruction set keeps them: gm their type, GGT(a, b) and GLT(a, b) (ordered
// comparisons: false for NaN), GSEL(m, a, b) (a where m, else b) and GZERO(m, v) (0 where m);
// all of them undefined at its end.
// Every operation is phi1's, lane by lane and in its order (no contraction: the C11 build keeps
// a * b + c two roundings), so the bits are the scalar code's on either instruction set.
#define gv GFN(gv)
#define gi GFN(gi)
#define gv_u GFN(gv_u)
typedef float gv __attribute__((vector_size(GW * 4)));
typedef int32_t gi __attribute__((vector_size(GW * 4)));
// Loads and stores at any address (as immintrin.h's __m256_u).
typedef float gv_u __attribute__((vector_size(GW * 4), aligned(4), may_alias));

// phi1 on GW lanes: Phi(x), and *e_out = exp(-x^2 / 2) (0 past the cut).
static inline gv GFN(phi)(gv x, gv *e_out) {
    const gv zero = (gv){0}, one = zero + 1.0f;
    const gv a = (gv)((gi)x & 0x7fffffff), h = x * x * 0.5f;
    const gm big = GGT(h, zero + PHI_CUT);  // false for NaN, as phi1's
    const gv z = GSEL(GGT(-h, zero - PHI_CUT), -h, zero - PHI_CUT);
    const gv n = GROUND(z * EXP_LOG2E);
    const gv r = GFMA(n, zero - EXP_LN2_LO, GFMA(n, zero - EXP_LN2_HI, z));
    gv s = zero + exp_s[5];
#pragma GCC unroll 8
    for (int i = 4; i >= 0; i--) s = GFMA(s, r, zero + exp_s[i]);
    const gi bits = (__builtin_convertvector(n, gi) + 127) << 23;
    const gv e = GFMA(s, r, one) * (gv)bits;
    const gv t = one / GFMA(a, zero + PHI_T, one);
    gv q = zero + phi_p[8];
#pragma GCC unroll 8  // whole: the coefficients then fold into constant vectors
    for (int i = 7; i >= 0; i--) q = GFMA(q, t, zero + phi_p[i]);
    const gv tail = GZERO(big, t * q * e);
    *e_out = GZERO(big, e);
    return GSEL(GLT(x, zero), tail, one - tail);
}

// y = x Phi(x) for whole blocks of GW in [0, len)
static void GFN(gelu_forward)(int64_t len, const float *x, float *y) {
    for (int64_t i = 0; i + GW <= len; i += GW) {
        const gv v = *(const gv_u *)(x + i);
        gv e;
        *(gv_u *)(y + i) = v * GFN(phi)(v, &e);
    }
}

// dx = (set ? 0 : dx) + dy gelu'(x), gelu'(x) = Phi(x) + x phi(x), whole blocks (gelu1_term's
// operations)
static void GFN(gelu_backward)(int64_t len, const float *x, const float *dy, float *dx, int set) {
    for (int64_t i = 0; i + GW <= len; i += GW) {
        const gv v = *(const gv_u *)(x + i);
        gv e;
        const gv cdf = GFN(phi)(v, &e), pdf = R_SQRT2PI * e;
        const gv g = *(const gv_u *)(dy + i) * GFMA(v, pdf, cdf);
        const gv base = set ? (gv){0} : (gv)(*(const gv_u *)(dx + i));
        *(gv_u *)(dx + i) = base + g;
    }
}

// y = x Phi(x), and x = gelu'(x) = Phi(x) + x phi(x) in its place (gelu_forward's and
// gelu_backward's operations), whole blocks
static void GFN(gelu_forward_keep)(int64_t len, float *x, float *y) {
    for (int64_t i = 0; i + GW <= len; i += GW) {
        const gv v = *(const gv_u *)(x + i);
        gv e;
        const gv cdf = GFN(phi)(v, &e), pdf = R_SQRT2PI * e;
        *(gv_u *)(y + i) = v * cdf;
        *(gv_u *)(x + i) = GFMA(v, pdf, cdf);
    }
}

// dx = (set ? 0 : dx) + dy d, d = gelu'(x) as gelu_forward_keep left it, whole blocks
static void GFN(gelu_backward_kept)(int64_t len, const float *d, const float *dy, float *dx, int set) {
    for (int64_t i = 0; i + GW <= len; i += GW) {
        const gv g = *(const gv_u *)(dy + i) * *(const gv_u *)(d + i);
        const gv base = set ? (gv){0} : (gv)(*(const gv_u *)(dx + i));
        *(gv_u *)(dx + i) = base + g;
    }
}

#undef gv
#undef gi
#undef gv_u
// the includer's, so that it can define them again for the other instruction set
#undef GW
#undef GFN
#undef GFMA
#undef GROUND
#undef gm
#undef GGT
#undef GLT
#undef GSEL
#undef GZERO
