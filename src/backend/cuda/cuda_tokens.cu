// cuda_tokens.cu: the token ops of transformers (backend.h's token region), as cpu_tokens.c:
// patches of a map <-> token rows, sums and spreads of consecutive rows, a scale per row. One
// thread writes each output element (grid-stride loops) and sums run over r = 0, 1, ... in a
// fixed order, so results repeat bit for bit and do not depend on the launch shape. Products
// are kept from fusing with the additions after them (__fmul_rn), as on the CPU.
#include "backend/cuda/cuda_internal.h"

#define GRID_STRIDE(i, n)                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

void cuda_patch_rearrange(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                          int accumulate, const float *src, float *dst);
void cuda_row_sum(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride, float *dst,
                  int accumulate);
void cuda_row_spread(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst,
                     int64_t dst_stride, int accumulate);
void cuda_row_scale(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate);

// image (N,C,D,H,W) <-> rows (N,T,K): one thread per row element (n, t, k); every image element
// lies in exactly one patch, so the image direction has one writer per element too.
__global__ static void patch_rearrange_k(int64_t n, int64_t c, int64_t D, int64_t H, int64_t W, int p0, int p1,
                                         int p2, int c_last, int to_rows, int accumulate, const float *src,
                                         float *dst) {
    const int64_t gh = H / p1, gw = W / p2, t = (D / p0) * gh * gw, taps = (int64_t)p0 * p1 * p2, k = c * taps;
    GRID_STRIDE(e, n * t * k) {
        const int64_t row = e / k, j = e - row * k, s = row / t, q = row - s * t;
        const int64_t pd = q / (gh * gw), ph = (q / gw) % gh, pw = q % gw;
        // The row position j as (ch, tap): c first (Conv weights) or c last (the tutorial's head).
        const int64_t ch = c_last ? j % c : j / taps, tap = c_last ? j / c : j % taps;
        const int64_t a = tap / ((int64_t)p1 * p2), b = (tap / p2) % p1, f = tap % p2;
        const int64_t img = (((s * c + ch) * D + pd * p0 + a) * H + ph * p1 + b) * W + pw * p2 + f;
        const int64_t from = to_rows ? img : e, to = to_rows ? e : img;
        if (accumulate)
            dst[to] += src[from];
        else
            dst[to] = src[from];
    }
}

void cuda_patch_rearrange(int64_t n, int64_t c, const int64_t in[3], const int p[3], int c_last, int to_rows,
                          int accumulate, const float *src, float *dst) {
    const int64_t total = n * c * in[0] * in[1] * in[2];
    if (total <= 0) return;
    patch_rearrange_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n, c, in[0], in[1], in[2], p[0], p[1], p[2], c_last, to_rows, accumulate, src, dst);
    CU_LAUNCHED();
}

// src rows of src_stride, (n*m) of them -> dst (n, len): one thread per output, over r in order
__global__ static void row_sum_k(int64_t n, int64_t m, int64_t len, float scale, const float *src,
                                 int64_t src_stride, float *dst, int accumulate) {
    GRID_STRIDE(e, n * len) {
        const int64_t i = e / len, j = e - i * len;
        const float *sp = src + i * m * src_stride + j;
        float acc = 0.0f;
        for (int64_t r = 0; r < m; r++) acc += sp[r * src_stride];
        const float v = __fmul_rn(scale, acc);
        if (accumulate)
            dst[e] += v;
        else
            dst[e] = v;
    }
}

void cuda_row_sum(int64_t n, int64_t m, int64_t len, float scale, const float *src, int64_t src_stride, float *dst,
                  int accumulate) {
    if (n <= 0 || len <= 0) return;
    row_sum_k<<<cuda_grid(n * len, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(n, m, len, scale, src,
                                                                                   src_stride, dst, accumulate);
    CU_LAUNCHED();
}

// src (n, len) -> dst rows of dst_stride, (n*m) of them: one thread per output element
__global__ static void row_spread_k(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst,
                                    int64_t dst_stride, int accumulate) {
    GRID_STRIDE(e, n * m * len) {
        const int64_t row = e / len, j = e - row * len;
        const float v = __fmul_rn(scale, src[(row / m) * len + j]);
        float *dp = dst + row * dst_stride + j;
        if (accumulate)
            *dp += v;
        else
            *dp = v;
    }
}

void cuda_row_spread(int64_t n, int64_t m, int64_t len, float scale, const float *src, float *dst,
                     int64_t dst_stride, int accumulate) {
    if (n <= 0 || m <= 0 || len <= 0) return;
    row_spread_k<<<cuda_grid(n * m * len, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n, m, len, scale, src, dst, dst_stride, accumulate);
    CU_LAUNCHED();
}

// s (rows), src and dst (rows, len): one thread per element
__global__ static void row_scale_k(int64_t rows, int64_t len, const float *s, const float *src, float *dst,
                                   int accumulate) {
    GRID_STRIDE(e, rows * len) {
        const float v = __fmul_rn(s[e / len], src[e]);
        if (accumulate)
            dst[e] += v;
        else
            dst[e] = v;
    }
}

void cuda_row_scale(int64_t rows, int64_t len, const float *s, const float *src, float *dst, int accumulate) {
    if (rows <= 0 || len <= 0) return;
    row_scale_k<<<cuda_grid(rows * len, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(rows, len, s, src, dst,
                                                                                        accumulate);
    CU_LAUNCHED();
}
