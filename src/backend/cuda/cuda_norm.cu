// cuda_norm.cu: batch and layer normalisation, as cpu_norm.c. Statistics are summed in double
// with fixed-order reductions (per-block trees, then the blocks' partials in order), so runs are
// bitwise repeatable; the math (two-pass variance, eps inside the root, momentum, the unbiased
// running variance, the running-stat init flag) is the CPU's formula for formula.
//
// Batch norm splits each channel's M = N*S values into `parts` chunks, one block each; the
// split depends only on the shape. With a reducer (sync_batchnorm) the per-channel sums go to
// the host between the passes and red->sum is called exactly as the CPU kernel calls it (same
// buffers, counts and order), since every rank calls it in lockstep.
#include "backend/cuda/cuda_act.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.h"
#include "galley/check.h"

#define GRID_STRIDE(i, n)                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

// ---- batch norm -------------------------------------------------------------------------------

// A channel's M values in `parts` chunks of `chunk`: about 4096 values a block, at most 1024 blocks
// a channel (a few channels over large volumes still fill the GPU).
typedef struct {
    int64_t m, parts, chunk;
} bn_split;

static bn_split bn_split_of(int64_t n, int64_t s) {
    bn_split b;
    b.m = n * s;
    b.parts = (b.m + 4095) / 4096;
    if (b.parts < 1) b.parts = 1;
    if (b.parts > 1024) b.parts = 1024;
    b.chunk = (b.m + b.parts - 1) / b.parts;
    return b;
}

enum { BN_SUM, BN_SQDEV };

// x[N, C, S] -> part[C, parts]: block (ch, p) sums chunk p of channel ch in double.
// BN_SUM: sum of x. BN_SQDEV: sum of (x - mean)^2 with mean = S[ch] / S[C] (0 when S[C] = 0).
template <int MODE>
__global__ static void bn_stat_parts_k(int64_t n, int64_t c, int64_t s, bn_split sp, const float *x,
                                       const double *sums, double *part) {
    const int64_t ch = blockIdx.x / sp.parts, p = blockIdx.x % sp.parts;
    const int64_t lo = p * sp.chunk, hi = lo + sp.chunk < sp.m ? lo + sp.chunk : sp.m;
    double mean = 0.0;
    if (MODE == BN_SQDEV) mean = sums[c] > 0 ? sums[ch] / sums[c] : 0.0;
    double acc = 0.0;
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
        int64_t i = e / s, j = e - i * s;
        float v = x[(i * c + ch) * s + j];
        if (MODE == BN_SUM) {
            acc += v;
        } else {
            double d = v - mean;
            acc += d * d;
        }
    }
    acc = cuda_block_sum(acc);
    if (threadIdx.x == 0) part[ch * sp.parts + p] = acc;
}

// x, dy[N, C, S], saved mean, inv -> part[2, C, parts]: sums of dy and of dy * xhat, in double
__global__ static void bn_grad_parts_k(int64_t n, int64_t c, int64_t s, bn_split sp, const float *x,
                                       const float *dy, const float *saved, double *part) {
    const int64_t ch = blockIdx.x / sp.parts, p = blockIdx.x % sp.parts;
    const int64_t lo = p * sp.chunk, hi = lo + sp.chunk < sp.m ? lo + sp.chunk : sp.m;
    const float mu = saved[ch], is = saved[c + ch];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
        int64_t i = e / s, j = e - i * s, k = (i * c + ch) * s + j;
        float g = dy[k];
        sdy += g;
        sdyx += (double)g * (double)((x[k] - mu) * is);
    }
    sdy = cuda_block_sum(sdy);
    sdyx = cuda_block_sum(sdyx);
    if (threadIdx.x == 0) part[ch * sp.parts + p] = sdy, part[(c + ch) * sp.parts + p] = sdyx;
}

// part[rows, parts] -> out[rows] (each row's partials in order); out[rows] = tail when has_tail
__global__ static void parts_reduce_k(int64_t rows, int64_t parts, const double *part, double *out, int has_tail,
                                      double tail) {
    GRID_STRIDE(r, rows) {
        double v = 0.0;
        for (int64_t p = 0; p < parts; p++) v += part[r * parts + p];
        out[r] = v;
    }
    if (has_tail && blockIdx.x == 0 && threadIdx.x == 0) out[rows] = tail;
}

// One block: running[2C+1] (init on first use), batch (S[C+1] sums and count, Q[C] squared
// deviations) or running stats -> saved[2C+1] and coef[3, C] (mean, scale, shift) for the apply.
__global__ static void bn_finalize_k(int64_t c, int train, const double *S, const double *Q, const float *gamma,
                                     const float *beta, float eps, float momentum, float *running, float *saved,
                                     float *coef) {
    float *rmean = running, *rvar = running + c;
    const bool fresh = running[2 * c] == 0.0f;  // the arena starts zeroed; PyTorch starts at 0, 1
    __syncthreads();                            // every thread has read the flag before it is set
    const double m = train ? S[c] : 0.0;
    for (int64_t ch = threadIdx.x; ch < c; ch += blockDim.x) {
        const float rm = fresh ? 0.0f : rmean[ch], rv = fresh ? 1.0f : rvar[ch];
        double mean, inv;
        if (train) {
            mean = m > 0 ? S[ch] / m : 0.0;
            double var = m > 0 ? Q[ch] / m : 0.0;
            // one value per channel: the biased (zero) variance instead of dividing by m - 1 = 0
            double unbiased = m > 1 ? Q[ch] / (m - 1) : var;
            inv = 1.0 / sqrt(var + (double)eps);
            rmean[ch] = (float)((1.0 - momentum) * rm + momentum * mean);
            rvar[ch] = (float)((1.0 - momentum) * rv + momentum * unbiased);
        } else {
            if (fresh) rmean[ch] = rm, rvar[ch] = rv;
            mean = rm;
            inv = 1.0 / sqrt((double)rv + (double)eps);
        }
        saved[ch] = (float)mean;
        saved[c + ch] = (float)inv;
        coef[ch] = (float)mean;
        coef[c + ch] = (float)(inv * (gamma ? gamma[ch] : 1.0f));
        coef[2 * c + ch] = beta ? beta[ch] : 0.0f;
    }
    if (threadIdx.x == 0) {
        running[2 * c] = 1.0f;
        saved[2 * c] = train ? 1.0f : 0.0f;
    }
}

// x[N, C, S], coef[3, C] -> y[N, C, S] = act((x - mean) * scale + shift) (x and y may alias; A
// as act_one's, 0: none); unfused as on the CPU, so with running statistics y is bitwise the CPU's
template <int A>
__global__ static void bn_apply_k(int64_t total, int64_t c, int64_t s, const float *coef, const float *x, float *y,
                                  float slope) {
    GRID_STRIDE(e, total) {
        int64_t ch = (e / s) % c;
        y[e] = act_one<A>(__fadd_rn(__fmul_rn(x[e] - coef[ch], coef[c + ch]), coef[2 * c + ch]), slope);
    }
}

// dev[count] -> host, sync, red->sum over ranks, host -> dev (the stream continues after it)
static void bn_allreduce(const gl_reducer *red, double *dev, double *host, int64_t count) {
    cudaStream_t st = cuda_ctx_get()->stream;
    CU_CHECK(cudaMemcpyAsync(host, dev, sizeof(double) * (size_t)count, cudaMemcpyDeviceToHost, st));
    CU_CHECK(cudaStreamSynchronize(st));
    red->sum(red->ctx, host, (int)count);
    CU_CHECK(cudaMemcpyAsync(dev, host, sizeof(double) * (size_t)count, cudaMemcpyHostToDevice, st));
}

// act < 0: none; otherwise y = act(bn(x)) as it is stored (cuda_batch_norm_forward_act).
static void bn_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                       float eps, int train, float momentum, float *running, float *saved, float *y,
                       const gl_reducer *red, int act, float slope) {
    if (c <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    const bn_split sp = bn_split_of(n, s);
    float *coef = (float *)cuda_workspace(sizeof(float) * 3 * (size_t)c);
    // partials: part[C * parts] | S[C + 1] sums and count | Q[C] squared deviations
    double *host;
    double *part = cuda_partials(c * sp.parts + 2 * c + 1, &host);
    if (!part) return;  // a recording that needed them grown: it is broken, and the pass runs again eagerly
    double *S = part + c * sp.parts, *Q = S + c + 1;
    double *hS = host + c * sp.parts, *hQ = hS + c + 1;
    if (train) {
        // (with no values, M = 0, every block still writes its partial: 0)
        bn_stat_parts_k<BN_SUM><<<(unsigned)(c * sp.parts), GL_BLOCK, 0, st>>>(n, c, s, sp, x, S, part);
        CU_LAUNCHED();
        parts_reduce_k<<<cuda_grid(c, GL_BLOCK), GL_BLOCK, 0, st>>>(c, sp.parts, part, S, 1, (double)sp.m);
        CU_LAUNCHED();
        if (red) bn_allreduce(red, S, hS, c + 1);  // sums and count over ranks
        bn_stat_parts_k<BN_SQDEV><<<(unsigned)(c * sp.parts), GL_BLOCK, 0, st>>>(n, c, s, sp, x, S, part);
        CU_LAUNCHED();
        parts_reduce_k<<<cuda_grid(c, GL_BLOCK), GL_BLOCK, 0, st>>>(c, sp.parts, part, Q, 0, 0.0);
        CU_LAUNCHED();
        if (red) bn_allreduce(red, Q, hQ, c);  // squared deviations over ranks
    }
    bn_finalize_k<<<1, GL_BLOCK, 0, st>>>(c, train, S, Q, gamma, beta, eps, momentum, running, saved, coef);
    CU_LAUNCHED();
    if (sp.m > 0) {
        const int64_t total = n * c * s;
        const unsigned g = cuda_grid(total, GL_BLOCK);
        if (act == ACT_RELU)
            bn_apply_k<ACT_RELU + 1><<<g, GL_BLOCK, 0, st>>>(total, c, s, coef, x, y, slope);
        else if (act == ACT_LEAKY_RELU)
            bn_apply_k<ACT_LEAKY_RELU + 1><<<g, GL_BLOCK, 0, st>>>(total, c, s, coef, x, y, slope);
        else
            bn_apply_k<0><<<g, GL_BLOCK, 0, st>>>(total, c, s, coef, x, y, slope);
        CU_LAUNCHED();
    }
}

void cuda_batch_norm_forward(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma, const float *beta,
                             float eps, int train, float momentum, float *running, float *saved, float *y,
                             const gl_reducer *red) {
    bn_forward(n, c, s, x, gamma, beta, eps, train, momentum, running, saved, y, red, -1, 0.0f);
}

// The graph fuses batch norm with the relu or leaky_relu that alone reads it (graph_fuse_acts):
// the activation rides on the normalising pass, and its buffer is batch norm's.
void cuda_batch_norm_forward_act(int64_t n, int64_t c, int64_t s, const float *x, const float *gamma,
                                 const float *beta, float eps, int train, float momentum, float *running,
                                 float *saved, float *y, const gl_reducer *red, gl_act act, float slope) {
    GL_CHECK(gl_act_storable(act, slope),
             "batch_norm_forward_act takes relu or leaky_relu with a slope >= 0 (the graph fuses no other)");
    bn_forward(n, c, s, x, gamma, beta, eps, train, momentum, running, saved, y, red, (int)act, slope);
}

// S[2C+1] (sum dy, sum dy*xhat, this rank's) -> dgamma[C] = sum dy*xhat, dbeta[C] = sum dy
__global__ static void bn_param_grads_k(int64_t c, const double *S, float *dgamma, float *dbeta) {
    GRID_STRIDE(ch, c) {
        if (dgamma) dgamma[ch] = (float)S[c + ch];
        if (dbeta) dbeta[ch] = (float)S[ch];
    }
}

// saved, gamma, S (sums over every rank with red) -> coef[5, C]: mean, inv, gamma*inv, a, b
__global__ static void bn_grad_coefs_k(int64_t c, const float *saved, const float *gamma, const double *S,
                                       float *coef) {
    const bool train = saved[2 * c] != 0.0f;
    const double m = S[2 * c];
    GRID_STRIDE(ch, c) {
        const float is = saved[c + ch];
        coef[ch] = saved[ch];
        coef[c + ch] = is;
        coef[2 * c + ch] = (gamma ? gamma[ch] : 1.0f) * is;
        coef[3 * c + ch] = train ? (float)(S[ch] / m) : 0.0f;
        coef[4 * c + ch] = train ? (float)(S[c + ch] / m) : 0.0f;
    }
}

// x, dy[N, C, S], coef[5, C] -> dx[N, C, S] += g * (dy - a - xhat * b)
__global__ static void bn_grad_apply_k(int64_t total, int64_t c, int64_t s, const float *coef, const float *x,
                                       const float *dy, float *dx) {
    GRID_STRIDE(e, total) {
        int64_t ch = (e / s) % c;
        const float mu = coef[ch], is = coef[c + ch], g = coef[2 * c + ch], a = coef[3 * c + ch],
                    b = coef[4 * c + ch];
        dx[e] += g * (dy[e] - a - (x[e] - mu) * is * b);
    }
}

void cuda_batch_norm_backward(int64_t n, int64_t c, int64_t s, const float *x, const float *dy, const float *gamma,
                              const float *saved, float *dgamma, float *dbeta, float *dx, const gl_reducer *red) {
    if (c <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    const bn_split sp = bn_split_of(n, s);
    float *coef = (float *)cuda_workspace(sizeof(float) * 5 * (size_t)c);
    // partials: part[2 * C * parts] | S[2C + 1]: sum dy, sum dy*xhat, count
    double *host;
    double *part = cuda_partials(2 * c * sp.parts + 2 * c + 1, &host);
    if (!part) return;  // as in bn_forward
    double *S = part + 2 * c * sp.parts, *hS = host + 2 * c * sp.parts;
    bn_grad_parts_k<<<(unsigned)(c * sp.parts), GL_BLOCK, 0, st>>>(n, c, s, sp, x, dy, saved, part);
    CU_LAUNCHED();
    parts_reduce_k<<<cuda_grid(2 * c, GL_BLOCK), GL_BLOCK, 0, st>>>(2 * c, sp.parts, part, S, 1, (double)sp.m);
    CU_LAUNCHED();
    if (dgamma || dbeta) {  // this rank's sums: the gradient allreduce adds the other ranks'
        bn_param_grads_k<<<cuda_grid(c, GL_BLOCK), GL_BLOCK, 0, st>>>(c, S, dgamma, dbeta);
        CU_LAUNCHED();
    }
    if (red) {
        // The CPU reduces only batch statistics (saved's train flag), and every rank must make
        // the same calls: read the flag on the host, with the sums, in one wait.
        float flag = 0.0f;
        CU_CHECK(cudaMemcpyAsync(hS, S, sizeof(double) * (size_t)(2 * c + 1), cudaMemcpyDeviceToHost, st));
        CU_CHECK(cudaMemcpyAsync(&flag, saved + 2 * c, sizeof(float), cudaMemcpyDeviceToHost, st));
        CU_CHECK(cudaStreamSynchronize(st));
        if (flag != 0.0f) {
            red->sum(red->ctx, hS, (int)(2 * c + 1));
            CU_CHECK(cudaMemcpyAsync(S, hS, sizeof(double) * (size_t)(2 * c + 1), cudaMemcpyHostToDevice, st));
        }
    }
    if (!dx || sp.m == 0) return;
    bn_grad_coefs_k<<<cuda_grid(c, GL_BLOCK), GL_BLOCK, 0, st>>>(c, saved, gamma, S, coef);
    CU_LAUNCHED();
    bn_grad_apply_k<<<cuda_grid(n * c * s, GL_BLOCK), GL_BLOCK, 0, st>>>(n * c * s, c, s, coef, x, dy, dx);
    CU_LAUNCHED();
}

// ---- layer norm -------------------------------------------------------------------------------

// Threads a row gets: a warp for short rows, more for long ones (a multiple of 32).
static int ln_block(int64_t k) { return k <= 256 ? 32 : k <= 2048 ? 128 : 256; }

// x[N, K] -> y[N, K], saved[2N] (mean, 1/sqrt(var + eps)): one block per row, two passes in double
__global__ static void ln_forward_k(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta,
                                    float eps, float *saved, float *y) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {  // uniform per block: barriers are safe
        const float *xp = x + i * k;
        float *yp = y + i * k;
        double sum = 0.0, sq = 0.0;
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) sum += xp[j];
        const double mean = cuda_block_sum(sum) / (double)k;
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) sq += (xp[j] - mean) * (xp[j] - mean);
        const double inv = 1.0 / sqrt(cuda_block_sum(sq) / (double)k + (double)eps);
        if (threadIdx.x == 0) saved[i] = (float)mean, saved[n + i] = (float)inv;
        const float mu = (float)mean, is = (float)inv;
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
            float v = (xp[j] - mu) * is;
            yp[j] = gamma ? v * gamma[j] + (beta ? beta[j] : 0.0f) : v;
        }
    }
}

void cuda_layer_norm_forward(int64_t n, int64_t k, const float *x, const float *gamma, const float *beta, float eps,
                             float *saved, float *y) {
    if (n <= 0 || k <= 0) return;
    ln_forward_k<<<cuda_grid(n, 1), ln_block(k), 0, cuda_ctx_get()->stream>>>(n, k, x, gamma, beta, eps, saved, y);
    CU_LAUNCHED();
}

// x, dy[N, K], saved[2N] -> dx[N, K] += inv * (g - mean(g) - xhat * mean(g xhat)), g = dy * gamma:
// one block per row
__global__ static void ln_backward_dx_k(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                                        const float *saved, float *dx) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xp = x + i * k, *dyp = dy + i * k;
        const float mu = saved[i], is = saved[n + i];
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
            float g = gamma ? dyp[j] * gamma[j] : dyp[j];
            sg += g;
            sgx += (double)g * (double)((xp[j] - mu) * is);
        }
        const float a = (float)(cuda_block_sum(sg) / (double)k), b = (float)(cuda_block_sum(sgx) / (double)k);
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
            float g = gamma ? dyp[j] * gamma[j] : dyp[j];
            dx[i * k + j] += is * (g - a - (xp[j] - mu) * is * b);
        }
    }
}

// x, dy[N, K], saved[2N] -> part[2, P, K]: thread (p, j) sums column j over rows chunk p (rows
// in order): dy * xhat, then dy, in double. Coalesced along K.
__global__ static void ln_param_parts_k(int64_t n, int64_t k, int64_t rows, const float *x, const float *dy,
                                        const float *saved, double *part) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, p = blockIdx.y, np = gridDim.y;
    if (j >= k) return;
    const int64_t lo = p * rows, hi = lo + rows < n ? lo + rows : n;
    double sw = 0.0, sb = 0.0;
    for (int64_t i = lo; i < hi; i++) {
        float g = dy[i * k + j];
        sw += (double)g * (double)((x[i * k + j] - saved[i]) * saved[n + i]);
        sb += g;
    }
    part[p * k + j] = sw;
    part[(np + p) * k + j] = sb;
}

// part[2, P, K] -> dgamma[K], dbeta[K]: the chunks in order
__global__ static void ln_param_sum_k(int64_t k, int64_t np, const double *part, float *dgamma, float *dbeta) {
    GRID_STRIDE(j, k) {
        double sw = 0.0, sb = 0.0;
        for (int64_t p = 0; p < np; p++) sw += part[p * k + j], sb += part[(np + p) * k + j];
        dgamma[j] = (float)sw;
        if (dbeta) dbeta[j] = (float)sb;
    }
}

void cuda_layer_norm_backward(int64_t n, int64_t k, const float *x, const float *dy, const float *gamma,
                              const float *saved, float *dgamma, float *dbeta, float *dx) {
    if (k <= 0) return;
    cudaStream_t st = cuda_ctx_get()->stream;
    if (dx && n > 0) {
        ln_backward_dx_k<<<cuda_grid(n, 1), ln_block(k), 0, st>>>(n, k, x, dy, gamma, saved, dx);
        CU_LAUNCHED();
    }
    if (dgamma) {
        // Row chunks so that about 64k threads sum columns (at least 16 rows each): depends
        // only on the shape, so the sums' order is fixed.
        int64_t np = (65536 + k - 1) / k, most = (n + 15) / 16;
        if (np > most) np = most;
        if (np > 65535) np = 65535;
        if (np < 1) np = 1;
        const int64_t rows = (n + np - 1) / np;
        if (rows > 0) np = (n + rows - 1) / rows;  // no empty chunk
        double *part = cuda_partials(2 * np * k, NULL);
        dim3 grid((unsigned)((k + GL_BLOCK - 1) / GL_BLOCK), (unsigned)np);
        ln_param_parts_k<<<grid, GL_BLOCK, 0, st>>>(n, k, rows, x, dy, saved, part);
        CU_LAUNCHED();
        ln_param_sum_k<<<cuda_grid(k, GL_BLOCK), GL_BLOCK, 0, st>>>(k, np, part, dgamma, dbeta);
        CU_LAUNCHED();
    }
}
