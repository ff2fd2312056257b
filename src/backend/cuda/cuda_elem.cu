// cuda_elem.cu: element-wise and data-movement kernels: activations, dropout, scaling, axpy,
// strided row copies (flatten, concat) and nearest upsampling. One thread writes each output
// element (grid-stride loops), so results never depend on the launch shape; the math follows
// cpu_act.c and cpu_misc.c formula for formula. Where the CPU multiplies then adds, __fmul_rn
// keeps nvcc from fusing the two (an FMA rounds once), so those results are bitwise the CPU's.
#include "backend/cuda/cuda_internal.h"
#include "galley/rng.h"
#include "galley/rng_mix.h"  // the dropout mixer, bitwise the CPU's

#define GRID_STRIDE(i, n)                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

// ---- activations ------------------------------------------------------------------------------

// x[n] -> y[n]; x and y may alias. The activation is a template argument so the loop has no switch.
template <gl_act A>
__global__ static void act_forward_k(float alpha, int64_t n, const float *x, float *y) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        if (A == ACT_RELU) y[i] = v > 0.0f ? v : 0.0f;
        if (A == ACT_LEAKY_RELU) y[i] = v > 0.0f ? v : alpha * v;
        if (A == ACT_TANH) y[i] = tanhf(v);
        if (A == ACT_SIGMOID) y[i] = 1.0f / (1.0f + expf(-v));
        if (A == ACT_GELU) y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));  // exact (erf) GELU
    }
}

// x[n], dy[n] -> dx[n] += dy * act'(x), or with SET dx[n] = 0 + the same term (backend.h's
// act_backward_set: dx written first, not cleared before; the same bits as clearing and adding).
// The derivative comes from x, as on the CPU.
template <gl_act A, bool SET>
__global__ static void act_backward_k(float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    GRID_STRIDE(i, n) {
        float v = x[i], d = dy[i], base = SET ? 0.0f : dx[i];
        if (A == ACT_RELU) dx[i] = base + (v > 0.0f ? d : 0.0f);
        if (A == ACT_LEAKY_RELU) dx[i] = base + (v > 0.0f ? d : __fmul_rn(alpha, d));
        if (A == ACT_TANH) {
            float t = tanhf(v);
            dx[i] = base + d * (1.0f - t * t);
        }
        if (A == ACT_SIGMOID) {
            float s = 1.0f / (1.0f + expf(-v));
            dx[i] = base + d * s * (1.0f - s);
        }
        if (A == ACT_GELU) {
            float cdf = 0.5f * (1.0f + erff(v * 0.70710678f));
            float pdf = 0.39894228f * expf(-0.5f * v * v);
            dx[i] = base + d * (cdf + v * pdf);
        }
    }
}

void cuda_act_forward(gl_act act, float alpha, int64_t n, const float *x, float *y) {
    if (n <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    unsigned g = cuda_grid(n, GL_BLOCK);
    switch (act) {
    case ACT_RELU: act_forward_k<ACT_RELU><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, y); break;
    case ACT_LEAKY_RELU: act_forward_k<ACT_LEAKY_RELU><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, y); break;
    case ACT_TANH: act_forward_k<ACT_TANH><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, y); break;
    case ACT_SIGMOID: act_forward_k<ACT_SIGMOID><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, y); break;
    case ACT_GELU: act_forward_k<ACT_GELU><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, y); break;
    }
    CU_LAUNCHED();
}

template <bool SET>
static void act_backward_launch(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    if (n <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    unsigned g = cuda_grid(n, GL_BLOCK);
    switch (act) {
    case ACT_RELU: act_backward_k<ACT_RELU, SET><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, dy, dx); break;
    case ACT_LEAKY_RELU: act_backward_k<ACT_LEAKY_RELU, SET><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, dy, dx); break;
    case ACT_TANH: act_backward_k<ACT_TANH, SET><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, dy, dx); break;
    case ACT_SIGMOID: act_backward_k<ACT_SIGMOID, SET><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, dy, dx); break;
    case ACT_GELU: act_backward_k<ACT_GELU, SET><<<g, GL_BLOCK, 0, st>>>(alpha, n, x, dy, dx); break;
    }
    CU_LAUNCHED();
}

void cuda_act_backward(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    act_backward_launch<false>(act, alpha, n, x, dy, dx);
}

void cuda_act_backward_set(gl_act act, float alpha, int64_t n, const float *x, const float *dy, float *dx) {
    act_backward_launch<true>(act, alpha, n, x, dy, dx);
}

// ---- dropout ----------------------------------------------------------------------------------

// x[count] -> mask[count], y[count]. key = rng_mix_key(seed, RNG_DROPOUT, step), hashed once on
// the host; element i draws rng_mix_uniform(key, base + i), exactly the CPU's rng_uniform.
__global__ static void dropout_train_k(int64_t count, float rate, float keep, uint64_t key, uint64_t base,
                                       const float *x, float *mask, float *y) {
    GRID_STRIDE(i, count) {
        float m = rng_mix_uniform(key, base + (uint64_t)i) < rate ? 0.0f : keep;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

// As dropout_train_k, recorded in a replayed pass (cuda_graph.cu): the step is read on the device
// at run time, so each replay draws its own step's mask (the same key, hashed per thread).
__global__ static void dropout_train_step_k(int64_t count, float rate, float keep, uint64_t seed,
                                            const uint64_t *step, uint64_t base, const float *x, float *mask,
                                            float *y) {
    const uint64_t key = rng_mix_key(seed, RNG_DROPOUT, *step);
    GRID_STRIDE(i, count) {
        float m = rng_mix_uniform(key, base + (uint64_t)i) < rate ? 0.0f : keep;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

// x[count] -> mask[count] = 1, y[count] = x (not training, or rate 0)
__global__ static void dropout_pass_k(int64_t count, const float *x, float *mask, float *y) {
    GRID_STRIDE(i, count) {
        mask[i] = 1.0f;
        y[i] = x[i];
    }
}

void cuda_dropout_forward(int64_t count, float rate, int train, uint64_t seed, uint64_t step, uint64_t base,
                          const float *x, float *mask, float *y) {
    if (count <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    unsigned g = cuda_grid(count, GL_BLOCK);
    if (!train || rate <= 0.0f) {
        dropout_pass_k<<<g, GL_BLOCK, 0, st>>>(count, x, mask, y);
    } else {
        const float keep = 1.0f / (1.0f - rate);  // computed as the CPU does, so the mask is bitwise equal
        cuda_ctx *c = cuda_ctx_get();
        if (c->capturing)
            dropout_train_step_k<<<g, GL_BLOCK, 0, st>>>(count, rate, keep, seed, c->step_dev, base, x, mask, y);
        else
            dropout_train_k<<<g, GL_BLOCK, 0, st>>>(count, rate, keep, rng_mix_key(seed, RNG_DROPOUT, step), base,
                                                    x, mask, y);
    }
    CU_LAUNCHED();
}

// mask[count], dy[count] -> dx[count] += dy * mask
__global__ static void dropout_backward_k(int64_t count, const float *mask, const float *dy, float *dx) {
    GRID_STRIDE(i, count) dx[i] += __fmul_rn(dy[i], mask[i]);
}

void cuda_dropout_backward(int64_t count, const float *mask, const float *dy, float *dx) {
    if (count <= 0) return;
    dropout_backward_k<<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(count, mask, dy, dx);
    CU_LAUNCHED();
}

// ---- scale, axpy, row copies ------------------------------------------------------------------

// x[count] -> y[count] = a * x
__global__ static void scale_k(int64_t count, float a, const float *x, float *y) {
    GRID_STRIDE(i, count) y[i] = a * x[i];
}

void cuda_scale(int64_t count, float a, const float *x, float *y) {
    if (count <= 0) return;
    scale_k<<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(count, a, x, y);
    CU_LAUNCHED();
}

// x[count] -> y[count] += a * x
__global__ static void axpy_k(int64_t count, float a, const float *x, float *y) {
    GRID_STRIDE(i, count) y[i] += __fmul_rn(a, x[i]);
}

void cuda_axpy(int64_t count, float a, const float *x, float *y) {
    if (count <= 0) return;
    axpy_k<<<cuda_grid(count, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(count, a, x, y);
    CU_LAUNCHED();
}

// src[rows, src_stride] -> dst[rows, dst_stride]: the first len elements of each row, copied or
// added (accumulate); one thread per element, consecutive threads along a row (coalesced)
__global__ static void copy_rows_k(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst,
                                   int64_t dst_stride, int accumulate) {
    GRID_STRIDE(e, rows * len) {
        int64_t r = e / len, j = e - r * len;
        float v = src[r * src_stride + j];
        if (accumulate)
            dst[r * dst_stride + j] += v;
        else
            dst[r * dst_stride + j] = v;
    }
}

void cuda_copy_rows(int64_t rows, int64_t len, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                    int accumulate) {
    if (rows <= 0 || len <= 0) return;
    copy_rows_k<<<cuda_grid(rows * len, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        rows, len, src, src_stride, dst, dst_stride, accumulate);
    CU_LAUNCHED();
}

// ---- nearest upsampling -----------------------------------------------------------------------

// x[N*C, D, H, W] -> y[N*C, D*f0, H*f1, W*f2]: one thread per output element
__global__ static void upsample_forward_k(int64_t planes, int64_t D, int64_t H, int64_t W, int f0, int f1, int f2,
                                          const float *x, float *y) {
    const int64_t oh = H * f1, ow = W * f2, op = D * f0 * oh * ow, ip = D * H * W;
    GRID_STRIDE(e, planes * op) {
        int64_t q = e / op, r = e - q * op;
        int64_t w = r % ow, t = r / ow, h = t % oh, d = t / oh;
        y[e] = x[q * ip + ((d / f0) * H + h / f1) * W + w / f2];
    }
}

void cuda_upsample_forward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *x, float *y) {
    const int64_t total = n * c * in[0] * f[0] * in[1] * f[1] * in[2] * f[2];
    if (total <= 0) return;
    upsample_forward_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n * c, in[0], in[1], in[2], f[0], f[1], f[2], x, y);
    CU_LAUNCHED();
}

// dy[N*C, D*f0, H*f1, W*f2] -> dx[N*C, D, H, W] += the sum of each f0 x f1 x f2 block: one thread
// per input element, summing its block in the CPU's order (so bitwise equal to it)
__global__ static void upsample_backward_k(int64_t planes, int64_t D, int64_t H, int64_t W, int f0, int f1, int f2,
                                           const float *dy, float *dx) {
    const int64_t oh = H * f1, ow = W * f2, op = D * f0 * oh * ow, ip = D * H * W;
    GRID_STRIDE(e, planes * ip) {
        int64_t q = e / ip, r = e - q * ip;
        int64_t w = r % W, t = r / W, h = t % H, d = t / H;
        const float *dyp = dy + q * op;
        float sum = 0.0f;
        for (int a = 0; a < f0; a++)
            for (int b = 0; b < f1; b++) {
                const float *row = dyp + ((d * f0 + a) * oh + h * f1 + b) * ow + w * f2;
                for (int k = 0; k < f2; k++) sum += row[k];
            }
        dx[e] += sum;
    }
}

void cuda_upsample_backward(int64_t n, int64_t c, const int64_t in[3], const int f[3], const float *dy, float *dx) {
    const int64_t total = n * c * in[0] * in[1] * in[2];
    if (total <= 0 || f[0] * f[1] * f[2] <= 0) return;
    upsample_backward_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n * c, in[0], in[1], in[2], f[0], f[1], f[2], dy, dx);
    CU_LAUNCHED();
}
