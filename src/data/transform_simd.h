// transform_simd.h: the loader's per-element work on one sample, in one pass: the stored dtype
// (float32, int16, uint8, float16) to float32, log1p, per-channel normalisation, and channels-last
// to channels-first. AVX-512 and AVX2 paths chosen at run time, a scalar path (the reference:
// libm's log1pf) where neither is there.
//
// Tolerance: for float32 data the vector paths compute log1p with a polynomial (musl's log1pf,
// branch-free); it stays within XF_LOG1P_ULP ulp of log1pf over every int16 value (as a float),
// every float16 value and a sweep of float32 (tests/unit/test_transform_simd.c; measured: 1 ulp),
// so after normalisation a result differs by at most |scale| * (2 ulp(log1p x) + 1 ulp(log1p x -
// shift)) + 1 ulp. int16, uint8 and float16 data take log1pf from a table of all their values:
// exact. Conversion and normalisation are exact and the same float operations as the scalar path,
// so without log1p (or with a table) the paths agree bit for bit.
#ifndef GALLEY_DATA_TRANSFORM_SIMD_H
#define GALLEY_DATA_TRANSFORM_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#define XF_LOG1P_ULP 2

typedef enum { XF_F32, XF_I16, XF_U8, XF_F16 } xf_dtype;
typedef enum { XF_SCALAR, XF_AVX2, XF_AVX512 } xf_isa;

typedef struct {
    xf_dtype dtype;      // of src
    bool channels_last;  // src is [vol, c] (else [c, vol]); dst is always [c, vol]
    bool log1p;          // x' = log1p(x) before normalising
    bool check;          // report NaN/Inf in src (floats only: integers cannot hold them)
    int64_t c, vol;      // channels, elements per channel
    const float *shift, *scale;  // per channel, x' = (x' - shift) * scale; NULL: none
} xf_params;

// src is [c, vol] or [vol, c] of dtype, dst [c, vol] float32, not overlapping src, except that
// dst may be src for float32 channels first without log1p (a check, a normalisation or both: each
// element is read before it is written, in its own place; ts_reader.c normalises a time step so).
// 0, or -1 when check is set and src holds NaN or Inf: *bad_c and *bad_v (may be NULL) name the
// first such element in channels-first order and *bad its value (dst then holds garbage). In
// place, that search runs over the partly normalised buffer: the same element, unless normalising
// overflowed a finite value before it to Inf.
int xf_sample(const xf_params *p, const void *src, float *dst, int64_t *bad_c, int64_t *bad_v, float *bad);

// The best instruction set this CPU has (asked once), and the same work on a chosen one: the
// tests' door to every path (an isa the CPU lacks falls back to the next lower one it has).
xf_isa xf_isa_best(void);
int xf_sample_isa(xf_isa isa, const xf_params *p, const void *src, float *dst, int64_t *bad_c, int64_t *bad_v,
                  float *bad);
const char *xf_isa_name(xf_isa isa);

// IEEE half (bits) to float, exactly; the scalar reference for XF_F16.
float xf_half_to_float(uint16_t h);

#endif
