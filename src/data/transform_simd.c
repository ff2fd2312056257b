// transform_simd.c: the loader's per-element work on one sample (see transform_simd.h): a scalar
// reference, and one vector body (transform_simd_body.h) compiled for AVX2 and for AVX-512, the
// best one the CPU has chosen at run time. The data layer asks the CPU itself (as the conv
// kernels do in the backend) rather than reach into backend headers.
#include "data/transform_simd.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "galley/check.h"
#include "galley/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define XF_VECTOR 1
#else
#define XF_VECTOR 0
#endif

enum { XF_TILE = 4096 };  // floats of a block kept in L1 between the sweeps (16 KiB)

float xf_half_to_float(uint16_t h) {
    uint32_t em = h & 0x7fffu, bits;
    if (em >= 0x7c00u) {
        bits = (em << 13) | 0x7f800000u;  // Inf, NaN (payload kept)
    } else {
        float mag;
        uint32_t sh = em << 13;
        memcpy(&mag, &sh, 4);
        mag *= 0x1p112f;  // rebias the exponent; subnormal halves become normal floats, exactly
        memcpy(&bits, &mag, 4);
    }
    bits |= (uint32_t)(h & 0x8000u) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float load1(xf_dtype dt, const void *src, int64_t i) {
    switch (dt) {
    case XF_I16: return ((const int16_t *)src)[i];
    case XF_U8: return ((const uint8_t *)src)[i];
    case XF_F16: return xf_half_to_float(((const uint16_t *)src)[i]);
    default: return ((const float *)src)[i];
    }
}

// The reference: element by element in channels-first order, libm's log1pf. Finds the first
// NaN/Inf (the vector paths only say that there is one).
static int xf_scalar(const xf_params *p, const void *src, float *dst, int64_t *bad_c, int64_t *bad_v, float *bad) {
    for (int64_t q = 0; q < p->c; q++) {
        float sh = p->shift ? p->shift[q] : 0.0f, sc = p->scale ? p->scale[q] : 1.0f;
        for (int64_t v = 0; v < p->vol; v++) {
            float a = load1(p->dtype, src, p->channels_last ? v * p->c + q : q * p->vol + v);
            if (p->check && !isfinite(a)) {
                if (bad_c) *bad_c = q;
                if (bad_v) *bad_v = v;
                if (bad) *bad = a;
                return -1;
            }
            if (p->log1p) a = log1pf(a);
            if (dst) dst[q * p->vol + v] = (a - sh) * sc;
        }
    }
    return 0;
}

#if XF_VECTOR
// log1pf of every value of a 16- or 8-bit dtype, indexed by its bits (int16 as uint16): the
// vector paths' log1p for those, exact and cheaper than the polynomial. Made once (256 KiB each).
static float *xf_tab_i16, *xf_tab_f16, *xf_tab_u8;
static pthread_once_t xf_tab_once = PTHREAD_ONCE_INIT;

static void xf_tab_make(void) {
    xf_tab_i16 = gl_xmalloc(65536 * sizeof(float));
    xf_tab_f16 = gl_xmalloc(65536 * sizeof(float));
    xf_tab_u8 = gl_xmalloc(256 * sizeof(float));
    for (int i = 0; i < 65536; i++) {
        xf_tab_i16[i] = log1pf((float)(int16_t)(uint16_t)i);
        xf_tab_f16[i] = log1pf(xf_half_to_float((uint16_t)i));
    }
    for (int i = 0; i < 256; i++) xf_tab_u8[i] = log1pf((float)i);
}

static const float *xf_log1p_table(xf_dtype dt) {
    pthread_once(&xf_tab_once, xf_tab_make);
    return dt == XF_I16 ? xf_tab_i16 : dt == XF_F16 ? xf_tab_f16 : xf_tab_u8;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define XW 8
#define XFN(name) name##_avx2
#define XANY(m) (_mm256_movemask_ps((__m256)(m)) != 0)
#include "data/transform_simd_body.h"
#undef XW
#undef XFN
#undef XANY
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define XW 16
#define XFN(name) name##_avx512
#define XANY(m) (_mm512_test_epi32_mask((__m512i)(m), (__m512i)(m)) != 0)
#include "data/transform_simd_body.h"
#undef XW
#undef XFN
#undef XANY
#pragma GCC pop_options
#endif

xf_isa xf_isa_best(void) {
    const int v = XF_VECTOR ? cpu_isa_best() : 0;  // cpu_isa.h: asked once, GALLEY_CPU_ISA's cap
    return v == 2 ? XF_AVX512 : v == 1 ? XF_AVX2 : XF_SCALAR;
}

const char *xf_isa_name(xf_isa isa) { return isa == XF_AVX512 ? "avx512" : isa == XF_AVX2 ? "avx2" : "scalar"; }

int xf_sample_isa(xf_isa isa, const xf_params *p, const void *src, float *dst, int64_t *bad_c, int64_t *bad_v,
                  float *bad) {
    if (isa > xf_isa_best()) isa = xf_isa_best();
    if ((p->channels_last || p->vol == 1) && p->c > XF_TILE) isa = XF_SCALAR;  // a tile must hold one position
    int rc = 0;
    switch (isa) {
#if XF_VECTOR
    case XF_AVX512: rc = xf_run_avx512(p, src, dst); break;
    case XF_AVX2: rc = xf_run_avx2(p, src, dst); break;
#endif
    default: return xf_scalar(p, src, dst, bad_c, bad_v, bad);
    }
    if (rc) xf_scalar(p, src, NULL, bad_c, bad_v, bad);  // where: the first in channels-first order
    return rc;
}

int xf_sample(const xf_params *p, const void *src, float *dst, int64_t *bad_c, int64_t *bad_v, float *bad) {
    return xf_sample_isa(xf_isa_best(), p, src, dst, bad_c, bad_v, bad);
}
