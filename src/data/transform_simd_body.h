// transform_simd_body.h: one vector width of transform_simd.c, written once with GCC vector
// extensions and compiled twice there (AVX2: XW 8, AVX-512: XW 16) under a target pragma; not a
// header of its own. Expects XW (lanes), XFN(name) (suffixes a name) and XANY(vi mask) (any lane
// set) from the includer.
#define vf XFN(vf)
#define vi XFN(vi)
#define vs XFN(vs)
#define vus XFN(vus)
#define vb XFN(vb)
#define vf_u XFN(vf_u)
#define vu XFN(vu)
typedef float vf __attribute__((vector_size(XW * 4)));
typedef int32_t vi __attribute__((vector_size(XW * 4)));
typedef uint32_t vu __attribute__((vector_size(XW * 4)));  // bit arithmetic that may carry into bit 31
typedef int16_t vs __attribute__((vector_size(XW * 2)));
typedef uint16_t vus __attribute__((vector_size(XW * 2)));
typedef uint8_t vb __attribute__((vector_size(XW)));
// Loads and stores at any address go through these (as immintrin.h's __m256_u): a memcpy into a
// vector local made GCC bounce every load through the stack (a store-forwarding stall each).
typedef float vf_u __attribute__((vector_size(XW * 4), aligned(4), may_alias));
typedef int16_t XFN(vs_u) __attribute__((vector_size(XW * 2), aligned(2), may_alias));
typedef uint16_t XFN(vus_u) __attribute__((vector_size(XW * 2), aligned(2), may_alias));
typedef uint8_t XFN(vb_u) __attribute__((vector_size(XW), aligned(1), may_alias));

#define XINLINE static inline __attribute__((always_inline))

// 8 lanes whatever XW is: the channels-last transpose works on 8 x 8 blocks.
typedef float XFN(v8f) __attribute__((vector_size(32)));
typedef float XFN(v8f_u) __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t XFN(v8i) __attribute__((vector_size(32)));

// dst[q * vol + i] = (t[i * c + q] - shift[q]) * scale[q] for 8 channels from q0 and 8 positions:
// an 8 x 8 transpose in registers (unpack, shuffle, swap halves), then the same float operations
// as the scalar path.
XINLINE void XFN(transpose8)(const float *t, int64_t c, int64_t q0, const float *sh, const float *sc, float *dst,
                             int64_t vol) {
    typedef XFN(v8f) v8;
    typedef XFN(v8i) m8;
    v8 r[8], u[8], w[8];
    for (int k = 0; k < 8; k++) r[k] = *(const XFN(v8f_u) *)(t + k * c + q0);
    for (int k = 0; k < 8; k += 2) {
        u[k] = __builtin_shuffle(r[k], r[k + 1], (m8){0, 8, 1, 9, 4, 12, 5, 13});
        u[k + 1] = __builtin_shuffle(r[k], r[k + 1], (m8){2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int k = 0; k < 8; k += 4)
        for (int h = 0; h < 2; h++) {
            w[k + 2 * h] = __builtin_shuffle(u[k + h], u[k + h + 2], (m8){0, 1, 8, 9, 4, 5, 12, 13});
            w[k + 2 * h + 1] = __builtin_shuffle(u[k + h], u[k + h + 2], (m8){2, 3, 10, 11, 6, 7, 14, 15});
        }
    for (int j = 0; j < 4; j++) {  // w[j] holds channels j (low half) and j + 4 (high) of rows 0-3; w[j + 4] rows 4-7
        v8 lo = __builtin_shuffle(w[j], w[j + 4], (m8){0, 1, 2, 3, 8, 9, 10, 11});
        v8 hi = __builtin_shuffle(w[j], w[j + 4], (m8){4, 5, 6, 7, 12, 13, 14, 15});
        lo = (lo - sh[q0 + j]) * sc[q0 + j];
        hi = (hi - sh[q0 + j + 4]) * sc[q0 + j + 4];
        *(XFN(v8f_u) *)(dst + (q0 + j) * vol) = lo;
        *(XFN(v8f_u) *)(dst + (q0 + j + 4) * vol) = hi;
    }
}

XINLINE vf XFN(sel)(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

// XW elements of src from index i, as floats (exact: every int16, uint8 and half is a float).
XINLINE vf XFN(load)(xf_dtype dt, const void *src, int64_t i) {
    switch (dt) {
    case XF_I16: {
        vs s = *(const XFN(vs_u) *)((const int16_t *)src + i);
        return __builtin_convertvector(__builtin_convertvector(s, vi), vf);
    }
    case XF_U8: {
        vb s = *(const XFN(vb_u) *)((const uint8_t *)src + i);
        return __builtin_convertvector(__builtin_convertvector(s, vi), vf);
    }
    case XF_F16: {  // as xf_half_to_float: shift the bits into place, rescale the exponent
        vus s = *(const XFN(vus_u) *)((const uint16_t *)src + i);
        vu h = __builtin_convertvector(s, vu), em = h & 0x7fffu;
        vf mag = (vf)(em << 13) * 0x1p112f;
        vu special = (vu)(em >= 0x7c00u);  // Inf, NaN
        vu bits = (~special & (vu)mag) | (special & ((em << 13) | 0x7f800000u));
        return (vf)(bits | ((h & 0x8000u) << 16));
    }
    default: return *(const vf_u *)((const float *)src + i);
    }
}

// log1p(x), musl's log1pf without branches: 1 + x = 2^k (1 + f), f in [sqrt(2)/2 - 1, sqrt(2) - 1],
// log(1 + f) by its polynomial in s = f / (2 + f), c corrects the rounding of 1 + x. Lanes
// outside (-1, Inf) (where log1p is -Inf, NaN or Inf) take libm's log1pf.
XINLINE vf XFN(log1p)(vf x) {
    const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
    const float Lg1 = 0xaaaaaa.0p-24f, Lg2 = 0xccce13.0p-25f, Lg3 = 0x91e9ee.0p-25f, Lg4 = 0xf89e26.0p-26f;
    vi ok = (x > -1.0f) & (x < __builtin_inff());
    vf u = x + 1.0f;
    vu iu = (vu)u + (0x3f800000u - 0x3f3504f3u);
    vi k = (vi)(iu >> 23) - 0x7f;
    vf dk = __builtin_convertvector(k, vf);
    vf c = XFN(sel)(k >= 2, 1.0f - (u - x), x - (u - 1.0f)) / u;
    c = (vf)((vi)c & (k < 25));
    vf f = (vf)((iu & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    vf s = f / (2.0f + f);
    vf z = s * s, w = z * z;
    vf R = z * (Lg1 + w * Lg3) + w * (Lg2 + w * Lg4);
    vf hfsq = 0.5f * f * f;
    vf r = s * (hfsq + R) + (dk * ln2_lo + c) - hfsq + f + dk * ln2_hi;
    if (__builtin_expect(XANY(~ok), 0))
        for (int l = 0; l < XW; l++)
            if (!ok[l]) r[l] = log1pf(x[l]);
    return r;
}

// Elementwise part over n contiguous elements of src from index i0 into out: load, NaN/Inf
// lanes into *bad, log1p. The tail goes through a zero-padded block, so every element takes
// the same arithmetic. log1p of a 16- or 8-bit dtype is a table look-up (log1pf itself).
XINLINE void XFN(elementwise)(xf_dtype dt, bool log1p, const void *src, int64_t i0, int64_t n, float *out, vi *bad,
                              bool check) {
    int64_t i = 0;
    if (log1p && dt != XF_F32) {
        const float *tab = xf_log1p_table(dt);
        if (dt == XF_U8) {
            const uint8_t *b = (const uint8_t *)src + i0;
            for (; i < n; i++) out[i] = tab[b[i]];
        } else {
            const uint16_t *h = (const uint16_t *)src + i0;  // int16 as its bits: the table is so indexed
            uint32_t special = 0;
            for (; i < n; i++) {
                out[i] = tab[h[i]];
                special |= (h[i] & 0x7c00u) == 0x7c00u;
            }
            if (dt == XF_F16 && check && special) (*bad)[0] = -1;  // which one: the scalar path finds it
        }
        return;
    }
    for (; i + XW <= n; i += XW) {
        vf a = XFN(load)(dt, src, i0 + i);
        if (check) *bad |= ((vi)a & 0x7f800000) == 0x7f800000;
        if (log1p) a = XFN(log1p)(a);
        *(vf_u *)(out + i) = a;
    }
    if (i < n) {
        size_t es = dt == XF_F32 ? 4 : dt == XF_U8 ? 1 : 2;
        unsigned char pad[XW * 4] = {0};
        memcpy(pad, (const unsigned char *)src + (size_t)(i0 + i) * es, (size_t)(n - i) * es);
        vf a = XFN(load)(dt, pad, 0);
        if (check) *bad |= ((vi)a & 0x7f800000) == 0x7f800000;
        if (log1p) a = XFN(log1p)(a);
        memcpy(out + i, &a, (size_t)(n - i) * sizeof(float));
    }
}

XINLINE int XFN(run)(xf_dtype dt, const xf_params *p, const void *src, float *dst) {
    vi bad = {0};
    int64_t c = p->c, vol = p->vol;
    // [c, 1] (feature vectors) is [1, c] in memory: the tile path takes them whole, not one padded
    // vector per channel
    bool cl = p->channels_last || vol == 1;
    if (!cl || c == 1) {  // [c, vol]: element by element, 
        for (int64_t q = 0; q < c; q++) {
            float *o = dst + q * vol;
            float sh = p->shift ? p->shift[q] : 0.0f, sc = p->scale ? p->scale[q] : 1.0f;
            for (int64_t v0 = 0; v0 < vol; v0 += XF_TILE) {  // a block stays in L1 for the second sweep
                int64_t n = vol - v0 < XF_TILE ? vol - v0 : XF_TILE;
                XFN(elementwise)(dt, p->log1p, src, q * vol + v0, n, o + v0, &bad, p->check);
                if (p->shift || p->scale) {
                    int64_t i = 0;
                    for (; i + XW <= n; i += XW) {
                        vf a = *(const vf_u *)(o + v0 + i);
                        *(vf_u *)(o + v0 + i) = (a - sh) * sc;
                    }
                    for (; i < n; i++) o[v0 + i] = (o[v0 + i] - sh) * sc;
                }
            }
        }
    } else {  // [vol, c]: a tile of positions, elementwise into tmp, then transposed out
        float tmp[XF_TILE];
        int64_t tv = XF_TILE / c;
        for (int64_t v0 = 0; v0 < vol; v0 += tv) {
            int64_t n = vol - v0 < tv ? vol - v0 : tv;
            XFN(elementwise)(dt, p->log1p, src, v0 * c, n * c, tmp, &bad, p->check);
            int64_t i8 = 0;  // positions done by 8 x 8 blocks
            if (c % 8 == 0) {
                float sh[XF_TILE / 8], sc[XF_TILE / 8];  // c <= XF_TILE / 8 here (n >= 8)
                for (int64_t q = 0; q < c && n >= 8; q++)
                    sh[q] = p->shift ? p->shift[q] : 0.0f, sc[q] = p->scale ? p->scale[q] : 1.0f;
                for (; i8 + 8 <= n; i8 += 8)
                    for (int64_t q0 = 0; q0 < c; q0 += 8)
                        XFN(transpose8)(tmp + i8 * c, c, q0, sh, sc, dst + v0 + i8, vol);
            }
            for (int64_t q = 0; q < c; q++) {
                float sh = p->shift ? p->shift[q] : 0.0f, sc = p->scale ? p->scale[q] : 1.0f;
                float *o = dst + q * vol + v0;
                const float *t = tmp + q;
                for (int64_t i = i8; i < n; i++) o[i] = (t[i * c] - sh) * sc;
            }
        }
    }
    return XANY(bad) ? -1 : 0;
}

static int XFN(xf_run)(const xf_params *p, const void *src, float *dst) {
    switch (p->dtype) {  // one copy of the loops per dtype
    case XF_I16: return XFN(run)(XF_I16, p, src, dst);
    case XF_U8: return XFN(run)(XF_U8, p, src, dst);
    case XF_F16: return XFN(run)(XF_F16, p, src, dst);
    default: return XFN(run)(XF_F32, p, src, dst);
    }
}

#undef XINLINE
#undef vf
#undef vi
#undef vs
#undef vus
#undef vb
#undef vf_u
#undef vu
