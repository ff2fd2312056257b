// cpu_gelu.c: GELU (the exact, erf form: PyTorch's nn.GELU()) forward and backward, y = x Phi(x)
// and dx (+)= dy (Phi(x) + x phi(x)), with Phi the standard normal CDF and phi its density,
// computed by galley's own vector code (16 lanes on AVX-512, 8 on AVX2+FMA, one at a time
// elsewhere) and split across threads.
//
// Phi(-a) for a = |x| >= 0 is e t P(t): e = exp(-a^2 / 2) (phi's exponential, which backward
// needs anyway), t = 1 / (1 + 0.26 a) and P a degree-8 polynomial fitted to erfc's scaled form
// (minimax in relative error over a in [0, 13.2], each coefficient rounded to float before the
// next was fitted); Phi(x) = 1 - Phi(-|x|) for x >= 0. exp is 2^n e^r, r in [-ln2/2, ln2/2], a
// degree-6 polynomial (1 + r S(r), fitted alike). Both fits are galley's (coefficients below).
// Accuracy, against erfc in double over x in [-16, 16] (test_layers_misc): Phi within 2.5e-7
// absolute (about 4 float ulps of 0.5; glibc's erff form 0.5 (1 + erf(x / sqrt 2)), PyTorch's
// and the earlier code's, is within 1.2e-7), and for x < 0 within 5e-6 relative down to
// Phi(x) = 1e-30, where the erf form loses every digit (1 + erf cancels: 2.7e-5 relative at
// x = -2.8, and 0 from x = -5.17 down). Where a^2 / 2 > 80 (|x| > 12.6) Phi(-a) and phi are taken
// as 0, which keeps every intermediate a normal float.
//
// Why not glibc's vector erff and expf (libmvec), as before: backward needs both, and each is a
// call with its own range reduction; here one exponential serves Phi and phi. Measured on a
// 2-core Xeon (Emerald Rapids, AVX-512, 2 threads, 4096 x 768 elements: one vit-tiny MLP,
// best of 20, two runs each): forward 1.06-1.10 -> 0.69 ms, backward 1.54-1.59 -> 0.77-0.79 ms; vit-tiny
// +1.4-3.1% in 4 alternating pairs of 40-step runs.
//
// The same bits everywhere: every lane and the scalar code run the same IEEE operations in the
// same order (multiplies, adds, fused multiply-adds, one correctly rounded division, rounding to
// the nearest integer, comparisons), so an element's result depends on its value alone: not on
// the thread count, its position in a vector block, or the instruction set (AVX-512, AVX2 or
// none; test_layers_misc checks the three against each other).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GELU_VECTOR 1
#else
#define GELU_VECTOR 0
#endif

#define GELU_PAR_MIN 16384  // below this many elements, one thread
#define R_SQRT2PI 0.39894228f
#define PHI_CUT 80.0f       // a^2 / 2 beyond which Phi(-a) and phi are 0
#define PHI_T 0.26f         // t = 1 / (1 + PHI_T a)
#define EXP_LOG2E 1.44269504f
#define EXP_LN2_HI 0.693145752f  // ln 2 = HI + LO, HI with 12 trailing zero bits: n HI is exact
#define EXP_LN2_LO 1.42860677e-06f

// P(t) = sum P[i] t^i (Horner from P[8])
static const float phi_p[9] = {0.103762671f,  0.102957055f, 0.103445783f, 0.0494351201f, 0.164629221f,
                               -0.156214699f, 0.256052226f, -0.155020699f, 0.0309533104f};
// e^r = 1 + r S(r), S(r) = sum S[i] r^i (Horner from S[5])
static const float exp_s[6] = {1.0f, 0.49999994f, 0.166665211f, 0.0416682549f, 0.00836867653f, 0.00138241996f};

// Phi(x), and *e = exp(-x^2 / 2) (0 past the cut): the scalar form, whose operations the
// vector passes (cpu_gelu_body.h) repeat lane by lane.
static float phi1(float x, float *e_out) {
    const float a = fabsf(x), h = x * x * 0.5f;
    const bool big = h > PHI_CUT;
    const float z = -h > -PHI_CUT ? -h : -PHI_CUT;  // maxps's operand order: a NaN gives -PHI_CUT
    const float n = nearbyintf(z * EXP_LOG2E);
    const float r = fmaf(n, -EXP_LN2_LO, fmaf(n, -EXP_LN2_HI, z));
    float s = exp_s[5];
    for (int i = 4; i >= 0; i--) s = fmaf(s, r, exp_s[i]);
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    const float e = fmaf(s, r, 1.0f) * two_n;
    const float t = 1.0f / fmaf(a, PHI_T, 1.0f);
    float q = phi_p[8];
    for (int i = 7; i >= 0; i--) q = fmaf(q, t, phi_p[i]);
    const float tail = big ? 0.0f : t * q * e;
    *e_out = big ? 0.0f : e;
    return x < 0.0f ? tail : 1.0f - tail;
}

static float gelu1_forward(float x) {
    float e;
    return x * phi1(x, &e);
}

// dy * gelu'(x) (the term backward adds)
static float gelu1_term(float x, float dy) {
    float e;
    const float cdf = phi1(x, &e);
    return dy * fmaf(x, R_SQRT2PI * e, cdf);
}

// gelu(x), and *d = gelu'(x) (gelu1_forward's and gelu1_term's operations)
static float gelu1_keep(float x, float *d) {
    float e;
    const float cdf = phi1(x, &e);
    *d = fmaf(x, R_SQRT2PI * e, cdf);
    return x * cdf;
}

#if GELU_VECTOR
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define GW 8
#define GFN(name) name##_256
#define GFMA(a, b, c) ((gv)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define GROUND(v) ((gv)_mm256_round_ps((__m256)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define gm __m256
#define GGT(a, b) _mm256_cmp_ps((__m256)(a), (__m256)(b), _CMP_GT_OQ)
#define GLT(a, b) _mm256_cmp_ps((__m256)(a), (__m256)(b), _CMP_LT_OQ)
#define GSEL(m, a, b) ((gv)_mm256_blendv_ps((__m256)(b), (__m256)(a), (m)))
#define GZERO(m, v) ((gv)_mm256_andnot_ps((m), (__m256)(v)))
#include "backend/cpu/cpu_gelu_body.h"
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#define GW 16
#define GFN(name) name##_512
#define GFMA(a, b, c) ((gv)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define GROUND(v) ((gv)_mm512_roundscale_ps((__m512)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define gm __mmask16
#define GGT(a, b) _mm512_cmp_ps_mask((__m512)(a), (__m512)(b), _CMP_GT_OQ)
#define GLT(a, b) _mm512_cmp_ps_mask((__m512)(a), (__m512)(b), _CMP_LT_OQ)
#define GSEL(m, a, b) ((gv)_mm512_mask_blend_ps((m), (__m512)(b), (__m512)(a)))
#define GZERO(m, v) ((gv)_mm512_maskz_mov_ps((__mmask16)~(m), (__m512)(v)))
#include "backend/cpu/cpu_gelu_body.h"
#pragma GCC pop_options
#endif

// The vector width an instruction set runs (cpu_isa.h: 2 AVX-512, 1 AVX2+FMA, 0 none).
static int gelu_width(int isa) { return !GELU_VECTOR ? 1 : isa >= 2 ? 16 : isa == 1 ? 8 : 1; }

#define GELU_CHUNK 4096  // elements per OpenMP iteration (a multiple of 16)

// The passes: y = gelu(x); dx (+)= dy gelu'(x); y = gelu(x) with x = gelu'(x) kept in its place;
// dx (+)= dy d with d that kept derivative (in x's place in the arguments).
typedef enum { GELU_FWD, GELU_BWD, GELU_FWD_KEEP, GELU_BWD_KEPT } gelu_mode;
typedef struct {
    gelu_mode mode;
    float *x;         // x (written only by GELU_FWD_KEEP), or d (GELU_BWD_KEPT)
    const float *dy;  // backward's
    float *out;       // y, or dx
    int set;          // backward: dx = 0 + the term (else added to)
} gelu_args;

// Chunk [o, o + len) of a pass: whole vectors of width w, the rest by the scalar code (the same bits).
static void gelu_chunk(const gelu_args *a, int w, int64_t o, int64_t len) {
    const int64_t vec = w == 1 ? 0 : len / w * w;
    float *x = a->x + o, *out = a->out + o;
    const float *dy = a->dy ? a->dy + o : NULL;
#if GELU_VECTOR
#define GELU_VEC(W, SFX)                                                                       \
    if (w == W) switch (a->mode) {                                                             \
            case GELU_FWD: gelu_forward_##SFX(vec, x, out); break;                             \
            case GELU_BWD: gelu_backward_##SFX(vec, x, dy, out, a->set); break;                \
            case GELU_FWD_KEEP: gelu_forward_keep_##SFX(vec, x, out); break;                   \
            case GELU_BWD_KEPT: gelu_backward_kept_##SFX(vec, x, dy, out, a->set); break;      \
        }
    GELU_VEC(16, 512)
    GELU_VEC(8, 256)
#undef GELU_VEC
#endif
    for (int64_t i = vec; i < len; i++) switch (a->mode) {
            case GELU_FWD: out[i] = gelu1_forward(x[i]); break;
            case GELU_BWD: out[i] = (a->set ? 0.0f : out[i]) + gelu1_term(x[i], dy[i]); break;
            case GELU_FWD_KEEP: out[i] = gelu1_keep(x[i], &x[i]); break;
            case GELU_BWD_KEPT: out[i] = (a->set ? 0.0f : out[i]) + dy[i] * x[i]; break;
        }
}

// A whole pass, in chunks split across threads.
static void gelu_pass(int isa, int64_t n, gelu_args a) {
    const int w = gelu_width(isa);
    const int64_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for schedule(static) if (n >= GELU_PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t o = c * GELU_CHUNK;
        gelu_chunk(&a, w, o, n - o < GELU_CHUNK ? n - o : GELU_CHUNK);
    }
}

void cpu_gelu_forward_keep_isa(int isa, int64_t n, float *x, float *y) {
    gelu_pass(isa, n, (gelu_args){.mode = GELU_FWD_KEEP, .x = x, .out = y});
}

void cpu_gelu_backward_kept_isa(int isa, int64_t n, const float *d, const float *dy, float *dx, int set) {
    gelu_pass(isa, n, (gelu_args){.mode = GELU_BWD_KEPT, .x = (float *)d, .dy = dy, .out = dx, .set = set});
}

// The derivative kept (backend.h's gelu_forward_keep): the backward pass, which computed Phi and
// phi again (a division and two polynomials an element), becomes a product, or goes into the
// store of the dense layer after (cpu_dense_backward_act). Measured on a 2-core Xeon (AVX-512, 2
// threads, 4096 x 768 elements, vit-tiny's MLP, best of 20, caches flushed): forward 0.64-0.66 ->
// 0.71-0.73 ms (the derivative's store), backward 0.74-0.78 -> 0.59-0.60 ms alone and nothing
// beyond a load in vit-tiny, where the dense layer after applies it. Applying the gelu as the
// dense layer before it stores (its tile computing both outputs) was tried: 3.54 -> 3.48 ms for
// that product and the pass together, nothing measurable in training (the work is Phi's
// arithmetic, not the memory traffic), so not kept.
void cpu_gelu_forward_keep(int64_t n, float *x, float *y) { cpu_gelu_forward_keep_isa(cpu_isa_best(), n, x, y); }

void cpu_gelu_backward_kept(int64_t n, const float *d, const float *dy, float *dx, int set) {
    cpu_gelu_backward_kept_isa(cpu_isa_best(), n, d, dy, dx, set);
}

// (x is only read in these two: the struct's pointer is writable for GELU_FWD_KEEP's sake.)
void cpu_gelu_forward_isa(int isa, int64_t n, const float *x, float *y) {
    gelu_pass(isa, n, (gelu_args){.mode = GELU_FWD, .x = (float *)x, .out = y});
}

void cpu_gelu_backward_isa(int isa, int64_t n, const float *x, const float *dy, float *dx, int set) {
    gelu_pass(isa, n, (gelu_args){.mode = GELU_BWD, .x = (float *)x, .dy = dy, .out = dx, .set = set});
}

// x, y are (n)
void cpu_gelu_forward(int64_t n, const float *x, float *y) { cpu_gelu_forward_isa(cpu_isa_best(), n, x, y); }

// x, dy, dx are (n): dx accumulated, or with set dx = 0 + the term (cpu_act_backward_set)
void cpu_gelu_backward(int64_t n, const float *x, const float *dy, float *dx, int set) {
    cpu_gelu_backward_isa(cpu_isa_best(), n, x, dy, dx, set);
}
