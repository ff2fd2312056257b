// cuda_loss.cu: losses on the model output, as cpu_loss.c. Labels, class weights and targets
// arrive in host memory and are staged (cuda_stage). The loss is summed in double: per-thread
// sums, a fixed tree per block, the blocks' partials copied to the pinned host mirror and added
// there in block order, so the value is bitwise repeatable (not bitwise the CPU's serial sum).
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.h"
#include "galley/check.h"
#include "galley/backend_types.h"  // LOSS_MSE, GL_L2_RELATIVE_EPS

// logits[N, C, S], labels[N, S], weights[C] or NULL -> partial[blocks] of sum w[y] * nll, and
// dlogits[N, C, S] = w[y] * inv * (softmax - onehot) unless NULL (inv = 1 / sum w, from the host).
// L lanes per position: 1 for few classes, a warp for many (max, then sum of exp, both strided
// over the classes; the max is exact, the warp's sum a fixed tree).
template <int L>
__global__ static void softmax_xent_k(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                                      const float *weights, double inv, float *dlogits, double *partial) {
    const int lane = threadIdx.x % L;
    const int64_t positions = n * s, groups = (int64_t)gridDim.x * blockDim.x / L;
    double acc = 0.0;
    // Whole warps step together (L = 32: one position a warp), so the shuffles see every lane.
    for (int64_t q = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / L; q < positions; q += groups) {
        const int64_t i = q / s, p = q - i * s;
        const float *z = logits + i * c * s + p;  // stride s between channels
        const int32_t y = labels[q];
        const double w = weights ? weights[y] : 1.0;
        float mx = z[lane * s];  // lane < c: L > 1 only when c >= L
        for (int64_t j = lane + L; j < c; j += L) mx = z[j * s] > mx ? z[j * s] : mx;
        for (int o = L / 2; o > 0; o >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = other > mx ? other : mx;
        }
        double sum = 0.0;
        for (int64_t j = lane; j < c; j += L) sum += exp((double)z[j * s] - mx);  // shifted: no overflow
        for (int o = L / 2; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (L > 1) sum = __shfl_sync(0xffffffffu, sum, 0);  // lane 0's: every lane uses the same sum
        if (lane == 0) acc += w * (log(sum) + mx - z[y * s]);
        if (dlogits) {
            float *d = dlogits + i * c * s + p;
            for (int64_t j = lane; j < c; j += L) {
                float v = (float)(w * inv * exp((double)z[j * s] - mx) / sum);
                if (j == y) v -= (float)(w * inv);
                d[j * s] = v;
            }
        }
    }
    acc = cuda_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

double cuda_softmax_xent(int64_t n, int64_t c, int64_t s, const float *logits, const int32_t *labels,
                         const float *weights, float *dlogits) {
    const int64_t positions = n * s;
    if (positions <= 0 || c <= 0) return 0.0;
    // sum w is a host sum over host labels, in the CPU's order: the gradient needs it, so the
    // kernel can write it in the same pass as the loss.
    double wsum = 0.0;
    for (int64_t q = 0; q < positions; q++) {
        GL_CHECK(labels[q] >= 0 && labels[q] < c, "the loader keeps class labels in [0, classes)");
        wsum += weights ? weights[labels[q]] : 1.0;
    }
    const double inv = wsum > 0 ? 1.0 / wsum : 0.0;
    const size_t lbytes = sizeof(int32_t) * (size_t)positions, wbytes = weights ? sizeof(float) * (size_t)c : 0;
    const int32_t *dlabels = (const int32_t *)cuda_prestaged(labels, lbytes);
    const float *dweights = NULL;
    if (dlabels) {  // copied beside the step by input staging: only the weights go now
        if (weights) dweights = (const float *)cuda_stage(weights, wbytes);
    } else {
        // One staging buffer: labels, then the class weights.
        char *pack = (char *)gl_xmalloc(lbytes + wbytes);
        memcpy(pack, labels, lbytes);
        if (weights) memcpy(pack + lbytes, weights, wbytes);
        const char *staged = (const char *)cuda_stage(pack, lbytes + wbytes);
        free(pack);  // cuda_stage has copied pageable memory by the time it returns
        cuda_stage_name(labels, lbytes);  // the metrics that follow reuse the labels' copy
        dlabels = (const int32_t *)staged;
        dweights = weights ? (const float *)(staged + lbytes) : NULL;
    }

    cudaStream_t st = cuda_ctx_get()->stream;
    const bool wide = c >= 32;
    const unsigned blocks = cuda_grid(positions * (wide ? 32 : 1), GL_BLOCK);
    double *host;
    double *partial = cuda_partials(blocks, &host);
    if (wide)
        softmax_xent_k<32><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, logits, dlabels, dweights, inv, dlogits, partial);
    else
        softmax_xent_k<1><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, logits, dlabels, dweights, inv, dlogits, partial);
    CU_LAUNCHED();
    const double total = cuda_partials_sum(partial, host, blocks);
    return wsum > 0 ? total / wsum : 0.0;
}

// pred, target[count] -> partial[blocks] of sum e^2 (MSE) or |e|, e = pred - target, and
// dpred[count] = 2 e / count (MSE) or sign(e) / count (L1, 0 at e = 0) unless NULL
__global__ static void regression_k(int kind, int64_t count, double inv, const float *pred, const float *target,
                                    float *dpred, double *partial) {
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        double e = (double)pred[i] - (double)target[i];
        acc += kind == LOSS_MSE ? e * e : fabs(e);
        if (dpred) dpred[i] = (float)(kind == LOSS_MSE ? 2.0 * e * inv : (e > 0 ? inv : e < 0 ? -inv : 0.0));
    }
    acc = cuda_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

double cuda_regression_loss(int kind, int64_t count, const float *pred, const float *target, float *dpred) {
    if (count <= 0) return 0.0;
    const double inv = 1.0 / (double)count;
    // Copied beside the step by input staging, else now (the stage is named: the metrics reuse it).
    const float *dtarget = (const float *)cuda_prestaged(target, sizeof(float) * (size_t)count);
    if (!dtarget) dtarget = (const float *)cuda_stage(target, sizeof(float) * (size_t)count);
    const unsigned blocks = cuda_grid(count, GL_BLOCK);
    double *host;
    double *partial = cuda_partials(blocks, &host);
    regression_k<<<blocks, GL_BLOCK, 0, cuda_ctx_get()->stream>>>(kind, count, inv, pred, dtarget, dpred, partial);
    CU_LAUNCHED();
    return cuda_partials_sum(partial, host, blocks) * inv;
}

// pred, target[units, len] -> partial[u] = ||e_u|| / max(||t_u||, eps), e = pred - target, and
// dpred[units, len] = inv * e / (||e_u|| max(||t_u||, eps)) (0 where e_u == 0) unless NULL.
// One block a unit: strided sums in double, the block's fixed tree, then the gradient pass.
__global__ static void l2_relative_k(int64_t len, double inv, const float *pred, const float *target, float *dpred,
                                     double *partial) {
    const int64_t u = blockIdx.x;
    const float *p = pred + u * len, *t = target + u * len;
    double ee = 0.0, tt = 0.0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        double e = (double)p[j] - (double)t[j];
        ee += e * e;
        tt += (double)t[j] * (double)t[j];
    }
    ee = cuda_block_sum(ee);
    tt = cuda_block_sum(tt);
    const double en = sqrt(ee), tn = fmax(sqrt(tt), GL_L2_RELATIVE_EPS);
    if (threadIdx.x == 0) partial[u] = en / tn;
    if (!dpred) return;
    const double g = en > 0 ? inv / (en * tn) : 0.0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        dpred[u * len + j] = (float)(g * ((double)p[j] - (double)t[j]));
}

double cuda_l2_relative_loss(int64_t units, int64_t len, const float *pred, const float *target, float *dpred) {
    if (units <= 0) return 0.0;
    GL_CHECK(units <= 0x7fffffff, "l2_relative: at most 2^31 - 1 units (one block each)");
    const double inv = 1.0 / (double)units;
    const size_t bytes = sizeof(float) * (size_t)(units * len);
    // Copied beside the step by input staging, else now (the stage is named: the metrics reuse it).
    const float *dtarget = (const float *)cuda_prestaged(target, bytes);
    if (!dtarget) dtarget = (const float *)cuda_stage(target, bytes);
    double *host;
    double *partial = cuda_partials(units, &host);
    l2_relative_k<<<(unsigned)units, GL_BLOCK, 0, cuda_ctx_get()->stream>>>(len, inv, pred, dtarget, dpred, partial);
    CU_LAUNCHED();
    return cuda_partials_sum(partial, host, (unsigned)units) * inv;
}
