// cpu_gelu.c: GELU (the exact, erf form: PyTorch's nn.GELU()) forward and backward, 16 or 8
// elements at a time through glibc's vector math library (libmvec: _ZGVeN16v_erff/_expf on
// AVX-512 CPUs, _ZGVdN8v_erff/_expf on AVX2+FMA ones), and split across threads.
//
// Why: with scalar erff and expf on one thread, GELU forward and backward were 16% of a
// vit-tiny training step (perf, 2-core AMD EPYC, 2 threads), for under 1% of its FLOPs; a
// transformer's MLP runs GELU over 4 x D features of every token.
//
// Thread-count independent: the array is cut into blocks of the vector width and every block,
// the last partial one included (padded with zeros in a local buffer), goes through the same
// vector code, so each element's bits depend only on its value and the machine's ISA (AVX-512,
// AVX2 or neither), not on which thread or block position computed it. Without AVX2 the scalar
// erff/expf compute every element.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/cpu_isa.h"

#define GELU_PAR_MIN 16384  // below this many elements, one thread
#define R_SQRT2 0.70710678f
#define R_SQRT2PI 0.39894228f

// libmvec's AVX2 and AVX-512 entry points (glibc >= 2.35 has erff; the vector function ABI names
// them).
__m256 _ZGVdN8v_erff(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);
__m512 _ZGVeN16v_erff(__m512 x);
__m512 _ZGVeN16v_expf(__m512 x);

// The vector width GELU runs at: 16 (AVX-512), 8 (AVX2+FMA) or 1 (cpu_isa.h).
static int gelu_width(void) {
    const int v = cpu_isa_best();
    return v == 2 ? 16 : v == 1 ? 8 : 1;
}

// y[0, 16) = gelu(x[0, 16)), and the backward term, as gelu8_* below 16 lanes at a time. Against
// the 8-lane versions on a 2-core Xeon (vit-tiny, 2 threads, 3 alternating runs of 20 steps):
// forward 0.212-0.219 -> 0.192-0.199 s, backward 0.293-0.305 -> 0.241-0.260 s.
#define GELU512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
GELU512 static void gelu16_forward(const float *x, float *y) {
    const __m512 v = _mm512_loadu_ps(x), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(v, _mm512_set1_ps(R_SQRT2)));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
}

GELU512 static void gelu16_backward(const float *x, const float *dy, float *dx, int set) {
    const __m512 v = _mm512_loadu_ps(x), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 cdf =
        _mm512_mul_ps(half, _mm512_add_ps(one, _ZGVeN16v_erff(_mm512_mul_ps(v, _mm512_set1_ps(R_SQRT2)))));
    const __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(R_SQRT2PI),
                                     _ZGVeN16v_expf(_mm512_mul_ps(_mm512_set1_ps(-0.5f), _mm512_mul_ps(v, v))));
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(dy), _mm512_fmadd_ps(v, pdf, cdf));
    const __m512 base = set ? _mm512_setzero_ps() : _mm512_loadu_ps(dx);
    _mm512_storeu_ps(dx, _mm512_add_ps(base, g));
}

// y[0, 8) = gelu(x[0, 8))
__attribute__((target("avx2,fma"))) static void gelu8_forward(const float *x, float *y) {
    const __m256 v = _mm256_loadu_ps(x), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 e = _ZGVdN8v_erff(_mm256_mul_ps(v, _mm256_set1_ps(R_SQRT2)));
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
}

// dx[0, 8) = (set ? 0 : dx) + dy * gelu'(x), gelu'(x) = cdf(x) + x * pdf(x). The add is the
// scalar code's, lane by lane; full blocks go straight from the arrays (copying every block
// into local buffers first was 3% of a vit-tiny step).
__attribute__((target("avx2,fma"))) static void gelu8_backward(const float *x, const float *dy, float *dx, int set) {
    const __m256 v = _mm256_loadu_ps(x), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 cdf = _mm256_mul_ps(half, _mm256_add_ps(one, _ZGVdN8v_erff(_mm256_mul_ps(v, _mm256_set1_ps(R_SQRT2)))));
    const __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(R_SQRT2PI),
                                     _ZGVdN8v_expf(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(v, v))));
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(dy), _mm256_fmadd_ps(v, pdf, cdf));
    const __m256 base = set ? _mm256_setzero_ps() : _mm256_loadu_ps(dx);
    _mm256_storeu_ps(dx, _mm256_add_ps(base, g));
}

static float gelu1_forward(float x) { return 0.5f * x * (1.0f + erff(x * R_SQRT2)); }
static float gelu1_backward(float x, float dy) {
    float cdf = 0.5f * (1.0f + erff(x * R_SQRT2)), pdf = R_SQRT2PI * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

// x, y are (n). Blocks of the vector width w, the last padded in a local buffer.
void cpu_gelu_forward(int64_t n, const float *x, float *y) {
    const int w = gelu_width();
    const int64_t bw = w == 1 ? 8 : w, blocks = (n + bw - 1) / bw;
#pragma omp parallel for schedule(static) if (n >= GELU_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t o = b * bw, len = n - o < bw ? n - o : bw;
        if (w == 1) {
            for (int64_t i = o; i < o + len; i++) y[i] = gelu1_forward(x[i]);
            continue;
        }
        float xi[16] = {0}, yo[16];
        const float *xs = x + o;
        float *ys = y + o;
        if (len < bw) {
            memcpy(xi, x + o, sizeof(float) * (size_t)len);
            xs = xi, ys = yo;
        }
        if (w == 16) gelu16_forward(xs, ys);
        else gelu8_forward(xs, ys);
        if (len < bw) memcpy(y + o, yo, sizeof(float) * (size_t)len);
    }
}

// x, dy, dx are (n): dx accumulated, or with set dx = 0 + the term (cpu_act_backward_set)
void cpu_gelu_backward(int64_t n, const float *x, const float *dy, float *dx, int set) {
    const int w = gelu_width();
    const int64_t bw = w == 1 ? 8 : w, blocks = (n + bw - 1) / bw;
#pragma omp parallel for schedule(static) if (n >= GELU_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t o = b * bw, len = n - o < bw ? n - o : bw;
        if (w > 1 && len == bw) {
            if (w == 16) gelu16_backward(x + o, dy + o, dx + o, set);
            else gelu8_backward(x + o, dy + o, dx + o, set);
            continue;
        }
        float xi[16] = {0}, di[16] = {0}, g[16];
        for (int i = 0; i < 16; i++) g[i] = -0.0f;
        memcpy(xi, x + o, sizeof(float) * (size_t)len);
        memcpy(di, dy + o, sizeof(float) * (size_t)len);
        if (w == 16) gelu16_backward(xi, di, g, 0);  // g = -0 + the term: the term itself, bit for bit
        else if (w == 8) gelu8_backward(xi, di, g, 0);
        else
            for (int64_t i = 0; i < len; i++) g[i] = gelu1_backward(xi[i], di[i]);
        for (int64_t i = 0; i < len; i++) dx[o + i] = (set ? 0.0f : dx[o + i]) + g[i];
    }
}
