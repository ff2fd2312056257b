// cuda_pool.cu: max, average and global-average pooling over [D, H, W] maps (2D: D = 1), as
// cpu_pool.c. Forward runs one thread per output. Backward gathers, one thread per INPUT element,
// over the outputs whose windows can reach it, in ascending output order: the CPU's scatter adds
// in that order too, so the gradients are bitwise repeatable (no float atomics) and match it.
#include "backend/cuda/cuda_internal.h"

#define GRID_STRIDE(i, n)                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

// A pooling geometry by value, for kernel arguments.
typedef struct {
    int64_t in[3], out[3];  // {D, H, W}, {OD, OH, OW}
    int k[3], s[3], p[3];
} pool_dims;

static pool_dims pool_dims_of(const int64_t in[3], const int64_t out[3], const int k[3], const int s[3],
                              const int p[3]) {
    pool_dims g;
    for (int j = 0; j < 3; j++) {
        g.in[j] = in[j], g.out[j] = out[j];
        g.k[j] = k ? k[j] : 1, g.s[j] = s ? s[j] : 1, g.p[j] = p ? p[j] : 0;
    }
    return g;
}

// Flat index i of a [n0, n1, n2] volume -> c[3]
__device__ static inline void coords3(int64_t i, const int64_t n[3], int64_t c[3]) {
    c[2] = i % n[2];
    i /= n[2];
    c[1] = i % n[1];
    c[0] = i / n[1];
}

// Outputs along one axis whose window (o*s - p .. o*s - p + k - 1) holds input coordinate d:
// lo .. hi (empty when lo > hi).
__device__ static inline void covering(int64_t d, int k, int s, int p, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t a = d + p - k + 1;  // o*s >= a
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = (d + p) / s;  // d + p >= 0 as p >= 0
    *hi = b < out - 1 ? b : out - 1;
}

// ---- max pooling ------------------------------------------------------------------------------

// x[N*C, D, H, W] -> y, argmax[N*C, OD, OH, OW]: one thread per output; windows clipped to the
// input; strictly greater wins, so the first of equal values keeps it, and NaN wins (PyTorch)
__global__ static void max_pool_forward_k(int64_t planes, pool_dims g, const float *x, float *y, int32_t *argmax) {
    const int64_t ip = g.in[0] * g.in[1] * g.in[2], op = g.out[0] * g.out[1] * g.out[2];
    GRID_STRIDE(e, planes * op) {
        int64_t q = e / op, oc[3], st[3], lo[3], hi[3];
        coords3(e - q * op, g.out, oc);
        for (int j = 0; j < 3; j++) {
            st[j] = oc[j] * g.s[j] - g.p[j];
            lo[j] = st[j] < 0 ? -st[j] : 0;
            hi[j] = st[j] + g.k[j] > g.in[j] ? g.in[j] - st[j] : g.k[j];
        }
        const float *xp = x + q * ip;
        float best = -INFINITY;
        int64_t bi = -1;
        for (int64_t a = lo[0]; a < hi[0]; a++)
            for (int64_t b = lo[1]; b < hi[1]; b++) {
                int64_t row = ((st[0] + a) * g.in[1] + st[1] + b) * g.in[2] + st[2];
                for (int64_t c = lo[2]; c < hi[2]; c++) {
                    float v = xp[row + c];
                    if (bi < 0 || v > best || isnan(v)) best = v, bi = row + c;
                }
            }
        y[e] = best;
        argmax[e] = (int32_t)bi;
    }
}

void cuda_max_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *x, float *y, int32_t *argmax) {
    const int64_t total = n * c * out[0] * out[1] * out[2];
    if (total <= 0) return;
    max_pool_forward_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n * c, pool_dims_of(in, out, k, s, p), x, y, argmax);
    CU_LAUNCHED();
}

// Backward gets no window geometry, only argmax. So the outputs that can have picked an input
// are bounded from argmax itself: per axis and input coordinate, the least and greatest output
// coordinate (over every plane) whose winner lies at that coordinate. An output that picked input
// (d, h, w) lies inside the box those bounds give, and the box lies inside the windows covering
// it, so the gather scans no more than a geometric one would. Integer min/max: order-free.
//
// The tables: tab[0 .. T) least, tab[T .. 2T) greatest, T = D + H + W, axis j at offset
// {0, D, D + H}[j]; they start at 0x7f7f7f7f and -1 (no output: an empty box).
#define COVER_SMEM_MAX 4096  // entries per table kept in shared memory (2 tables: 32 KiB)

// Lowers *lo to v and raises *hi to v; reading first skips most atomics (a stale read only costs
// an extra atomic, never a wrong bound).
__device__ static inline void cover_update(int *lo, int *hi, int v, bool global) {
    int l = global ? __ldcg(lo) : *lo, h = global ? __ldcg(hi) : *hi;
    if (v < l) atomicMin(lo, v);
    if (v > h) atomicMax(hi, v);
}

// argmax[N*C, OD, OH, OW] -> tab[2T] (see above); dynamic shared memory holds 2T ints when T <=
// COVER_SMEM_MAX, merged into tab at the end, else the updates go to tab directly
__global__ static void max_pool_cover_k(int64_t planes, pool_dims g, const int32_t *argmax, int *tab, int t) {
    extern __shared__ int cover_sh[];
    const bool smem = t <= COVER_SMEM_MAX;
    int *tb = smem ? cover_sh : tab;
    if (smem) {
        for (int i = threadIdx.x; i < 2 * t; i += blockDim.x) cover_sh[i] = i < t ? 0x7f7f7f7f : -1;
        __syncthreads();
    }
    const int64_t op = g.out[0] * g.out[1] * g.out[2];
    const int off[3] = {0, (int)g.in[0], (int)(g.in[0] + g.in[1])};
    GRID_STRIDE(e, planes * op) {
        int64_t oc[3], ac[3], a = argmax[e];
        if (a < 0) continue;  // never written by forward (defensive: it would index before tab)
        coords3(e % op, g.out, oc);
        coords3(a, g.in, ac);
        for (int j = 0; j < 3; j++) cover_update(tb + off[j] + ac[j], tb + t + off[j] + ac[j], (int)oc[j], !smem);
    }
    if (smem) {  // merge this block's bounds; an untouched entry has lo > hi
        __syncthreads();
        for (int i = threadIdx.x; i < t; i += blockDim.x) {
            int l = cover_sh[i], h = cover_sh[t + i];
            if (l > h) continue;
            if (l < __ldcg(tab + i)) atomicMin(tab + i, l);
            if (h > __ldcg(tab + t + i)) atomicMax(tab + t + i, h);
        }
    }
}

// argmax, dy[N*C, OD, OH, OW] -> dx[N*C, D, H, W] += dy of the outputs that picked each input:
// one thread per input, scanning the box of tab in ascending output order (the CPU's order)
__global__ static void max_pool_gather_k(int64_t planes, pool_dims g, const int *tab, int t, const int32_t *argmax,
                                         const float *dy, float *dx) {
    const int64_t ip = g.in[0] * g.in[1] * g.in[2], op = g.out[0] * g.out[1] * g.out[2];
    const int off[3] = {0, (int)g.in[0], (int)(g.in[0] + g.in[1])};
    GRID_STRIDE(e, planes * ip) {
        int64_t q = e / ip, i = e - q * ip, ic[3];
        coords3(i, g.in, ic);
        int lo[3], hi[3];
        bool empty = false;
        for (int j = 0; j < 3; j++) {
            lo[j] = tab[off[j] + ic[j]], hi[j] = tab[t + off[j] + ic[j]];
            empty = empty || lo[j] > hi[j];
        }
        if (empty) continue;
        const int32_t *am = argmax + q * op;
        const float *g0 = dy + q * op;
        float acc = dx[e];
        bool hit = false;
        for (int64_t a = lo[0]; a <= hi[0]; a++)
            for (int64_t b = lo[1]; b <= hi[1]; b++)
                for (int64_t c = lo[2]; c <= hi[2]; c++) {
                    int64_t o = (a * g.out[1] + b) * g.out[2] + c;
                    if (am[o] == (int32_t)i) acc += g0[o], hit = true;
                }
        if (hit) dx[e] = acc;
    }
}

void cuda_max_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int32_t *argmax,
                            const float *dy, float *dx) {
    const int64_t outs = n * c * out[0] * out[1] * out[2], ins = n * c * in[0] * in[1] * in[2];
    if (outs <= 0 || ins <= 0) return;
    cuda_ctx *cx = cuda_ctx_get();
    const pool_dims g = pool_dims_of(in, out, NULL, NULL, NULL);
    const int t = (int)(in[0] + in[1] + in[2]);
    int *tab = (int *)cuda_workspace(sizeof(int) * 2 * (size_t)t);
    CU_CHECK(cudaMemsetAsync(tab, 0x7f, sizeof(int) * (size_t)t, cx->stream));
    CU_CHECK(cudaMemsetAsync(tab + t, 0xff, sizeof(int) * (size_t)t, cx->stream));
    // Few blocks suffice for the bounds (each block merges its tables once); min/max do not
    // depend on the grid.
    unsigned cover_blocks = cuda_grid(outs, GL_BLOCK);
    unsigned cap = 4u * (unsigned)(cx->prop.multiProcessorCount > 0 ? cx->prop.multiProcessorCount : 32);
    if (cover_blocks > cap) cover_blocks = cap;
    size_t smem = t <= COVER_SMEM_MAX ? sizeof(int) * 2 * (size_t)t : 0;
    max_pool_cover_k<<<cover_blocks, GL_BLOCK, smem, cx->stream>>>(n * c, g, argmax, tab, t);
    CU_LAUNCHED();
    max_pool_gather_k<<<cuda_grid(ins, GL_BLOCK), GL_BLOCK, 0, cx->stream>>>(n * c, g, tab, t, argmax, dy, dx);
    CU_LAUNCHED();
}

// ---- average pooling --------------------------------------------------------------------------

// x[N*C, D, H, W] -> y[N*C, OD, OH, OW]: one thread per output, the clipped window summed in
// double in the CPU's order, divided by k0*k1*k2 (padding counts as zeros)
__global__ static void avg_pool_forward_k(int64_t planes, pool_dims g, double inv, const float *x, float *y) {
    const int64_t ip = g.in[0] * g.in[1] * g.in[2], op = g.out[0] * g.out[1] * g.out[2];
    GRID_STRIDE(e, planes * op) {
        int64_t q = e / op, oc[3], st[3], lo[3], hi[3];
        coords3(e - q * op, g.out, oc);
        for (int j = 0; j < 3; j++) {
            st[j] = oc[j] * g.s[j] - g.p[j];
            lo[j] = st[j] < 0 ? -st[j] : 0;
            hi[j] = st[j] + g.k[j] > g.in[j] ? g.in[j] - st[j] : g.k[j];
        }
        const float *xp = x + q * ip;
        double sum = 0.0;
        for (int64_t a = lo[0]; a < hi[0]; a++)
            for (int64_t b = lo[1]; b < hi[1]; b++) {
                int64_t row = ((st[0] + a) * g.in[1] + st[1] + b) * g.in[2] + st[2];
                for (int64_t c = lo[2]; c < hi[2]; c++) sum += xp[row + c];
            }
        y[e] = (float)(sum * inv);
    }
}

void cuda_avg_pool_forward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                           const int s[3], const int p[3], const float *x, float *y) {
    const int64_t total = n * c * out[0] * out[1] * out[2];
    if (total <= 0) return;
    const double inv = 1.0 / ((double)k[0] * k[1] * k[2]);
    avg_pool_forward_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n * c, pool_dims_of(in, out, k, s, p), inv, x, y);
    CU_LAUNCHED();
}

// dy[N*C, OD, OH, OW] -> dx[N*C, D, H, W] += dy * inv over each window: one thread per input,
// adding the covering outputs' shares in ascending output order (as the CPU's scatter does)
__global__ static void avg_pool_backward_k(int64_t planes, pool_dims g, float inv, const float *dy, float *dx) {
    const int64_t ip = g.in[0] * g.in[1] * g.in[2], op = g.out[0] * g.out[1] * g.out[2];
    GRID_STRIDE(e, planes * ip) {
        int64_t q = e / ip, ic[3], lo[3], hi[3];
        coords3(e - q * ip, g.in, ic);
        bool empty = false;
        for (int j = 0; j < 3; j++) {
            covering(ic[j], g.k[j], g.s[j], g.p[j], g.out[j], &lo[j], &hi[j]);
            empty = empty || lo[j] > hi[j];
        }
        if (empty) continue;  // no window reaches this input (stride > kernel)
        const float *g0 = dy + q * op;
        float acc = dx[e];
        for (int64_t a = lo[0]; a <= hi[0]; a++)
            for (int64_t b = lo[1]; b <= hi[1]; b++)
                for (int64_t c = lo[2]; c <= hi[2]; c++)
                    acc += __fmul_rn(g0[(a * g.out[1] + b) * g.out[2] + c], inv);  // unfused, as the CPU
        dx[e] = acc;
    }
}

void cuda_avg_pool_backward(int64_t n, int64_t c, const int64_t in[3], const int64_t out[3], const int k[3],
                            const int s[3], const int p[3], const float *dy, float *dx) {
    const int64_t total = n * c * in[0] * in[1] * in[2];
    if (total <= 0 || out[0] * out[1] * out[2] <= 0) return;
    const float inv = (float)(1.0 / ((double)k[0] * k[1] * k[2]));
    avg_pool_backward_k<<<cuda_grid(total, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(
        n * c, pool_dims_of(in, out, k, s, p), inv, dy, dx);
    CU_LAUNCHED();
}

// ---- global average pooling -------------------------------------------------------------------

// x[R, S] -> y[R] = mean over S: one group of L lanes (a warp, or a whole block for long rows)
// per row, double partial sums reduced in a fixed tree (repeatable; the CPU sums serially)
template <int L>
__global__ static void global_avg_pool_forward_k(int64_t rows, int64_t s, const float *x, float *y) {
    __shared__ double part[GL_BLOCK / 32];
    const int lane = threadIdx.x % L;
    const int64_t groups = (int64_t)gridDim.x * (blockDim.x / L);
    // Every thread of a block runs the same number of iterations (L = block: one group per
    // block; L = 32: whole warps), so the shuffles and barriers below see all their threads.
    for (int64_t r0 = (int64_t)blockIdx.x * (blockDim.x / L); r0 < rows; r0 += groups) {
        int64_t r = r0 + threadIdx.x / L;
        double sum = 0.0;
        if (r < rows)
            for (int64_t j = lane; j < s; j += L) sum += x[r * s + j];
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (L > 32) {
            if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
            __syncthreads();
            if (threadIdx.x == 0) {
                sum = 0.0;
                for (int w = 0; w < L / 32; w++) sum += part[w];
            }
            __syncthreads();  // part[] is rewritten in the next iteration
        }
        if (lane == 0 && r < rows) y[r] = (float)(sum / (double)s);
    }
}

void cuda_global_avg_pool_forward(int64_t n, int64_t c, int64_t s, const float *x, float *y) {
    const int64_t rows = n * c;
    if (rows <= 0 || s <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    if (s >= 4096) {  // long rows: a block each
        global_avg_pool_forward_k<GL_BLOCK><<<cuda_grid(rows, 1), GL_BLOCK, 0, st>>>(rows, s, x, y);
    } else {  // a warp each
        global_avg_pool_forward_k<32><<<cuda_grid(rows * 32, GL_BLOCK), GL_BLOCK, 0, st>>>(rows, s, x, y);
    }
    CU_LAUNCHED();
}

// dy[R] -> dx[R, S] += dy / S
__global__ static void global_avg_pool_backward_k(int64_t rows, int64_t s, float inv, const float *dy, float *dx) {
    GRID_STRIDE(e, rows * s) dx[e] += __fmul_rn(dy[e / s], inv);  // unfused, as the CPU
}

void cuda_global_avg_pool_backward(int64_t n, int64_t c, int64_t s, const float *dy, float *dx) {
    if (n * c * s <= 0) return;
    const float inv = (float)(1.0 / (double)s);
    global_avg_pool_backward_k<<<cuda_grid(n * c * s, GL_BLOCK), GL_BLOCK, 0, cuda_ctx_get()->stream>>>(n * c, s, inv,
                                                                                                      dy, dx);
    CU_LAUNCHED();
}
