// cuda_metrics.cu: the metrics' sums on the GPU (backend.h's metrics_sums), as
// src/model/metrics.c counts them on the host. The output stays in GPU memory: reading a
// segmentation output on the host every step would migrate all its managed pages there and
// back. Labels and targets are the copies the loss staged just before (cuda_stage_find).
//
// Counts are integers added with atomics: exact, in any order, equal to the host's. The
// regression sum is a double with a fixed order (cuda_reduce.h): equal to the host's to rounding.
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.h"
#include "galley/backend_types.h"  // GL_MAX_IOU_CLASSES
#include "galley/check.h"

typedef unsigned long long u64;

// out (N, C, S), labels (N, S): one thread a position q = i S + p. Per block: counts in shared
// memory, then one global atomic each. counts: [0] argmax hits, [1] top-k hits, [2, 2 + C)
// intersections, [2 + C, 2 + 2C) unions.
template <bool TOPK, bool IOU>
__global__ static void class_counts_k(int64_t n, int64_t c, int64_t s, int k, const float *out, const int32_t *labels,
                                      u64 *counts) {
    __shared__ u64 sh[2 + 2 * GL_MAX_IOU_CLASSES];
    const int used = 2 + (IOU ? 2 * (int)c : 0);
    for (int j = threadIdx.x; j < used; j += blockDim.x) sh[j] = 0;
    __syncthreads();
    const int64_t positions = n * s;
    u64 hits = 0, hitsk = 0;  // per thread, added to the block's once
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < positions;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = q / s, p = q - i * s;
        const float *z = out + i * c * s + p;  // stride s between channels
        const int32_t y = labels[q];
        if (y < 0 || y >= c) continue;  // the loader keeps labels in range; never read past z
        int64_t a = 0;  // the first largest, as the host's argmax (NaN never wins a comparison)
        for (int64_t j = 1; j < c; j++)
            if (z[j * s] > z[a * s]) a = j;
        hits += a == y;
        if (TOPK) {
            int64_t higher = 0;  // the label is in the top k if fewer than k logits beat it
            for (int64_t j = 0; j < c; j++) higher += z[j * s] > z[y * s];
            hitsk += higher < k;
        }
        if (IOU) {  // argmax a and label y: the intersection of class a if they agree; the unions of both
            if (a == y) atomicAdd(&sh[2 + a], 1ull);
            atomicAdd(&sh[2 + c + a], 1ull);
            if (a != y) atomicAdd(&sh[2 + c + y], 1ull);
        }
    }
    if (hits) atomicAdd(&sh[0], hits);
    if (hitsk) atomicAdd(&sh[1], hitsk);
    __syncthreads();
    for (int j = threadIdx.x; j < used; j += blockDim.x)
        if (sh[j]) atomicAdd(&counts[j], sh[j]);
}

// out, values [count] -> partial[blocks] of sum |out - values|
__global__ static void abs_sum_k(int64_t count, const float *out, const float *values, double *partial) {
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        acc += fabs((double)out[i] - (double)values[i]);
    acc = cuda_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

void cuda_metrics_sums(bool class_like, bool topk, bool iou, int64_t n, int64_t c, int64_t s, int k, const float *out,
                       const int32_t *labels, const float *values, int64_t *counts, double *abs_sum) {
    cudaStream_t st = cuda_ctx_get()->stream;
    const int64_t positions = n * s;
    if (!class_like) {
        *abs_sum = 0;
        if (positions <= 0) return;
        const float *dv = (const float *)cuda_stage_find(values, sizeof(float) * (size_t)positions);
        const unsigned blocks = cuda_grid(positions, GL_BLOCK);
        double *host;
        double *partial = cuda_partials(blocks, &host);
        abs_sum_k<<<blocks, GL_BLOCK, 0, st>>>(positions, out, dv, partial);
        CU_LAUNCHED();
        *abs_sum = cuda_partials_sum(partial, host, blocks);
        return;
    }
    GL_CHECK(!iou || c <= GL_MAX_IOU_CLASSES, "IoU is counted for at most GL_MAX_IOU_CLASSES classes");
    const int used = 2 + (iou ? 2 * (int)c : 0);
    for (int j = 0; j < used; j++) counts[j] = 0;
    if (positions <= 0) return;
    const int32_t *dl = (const int32_t *)cuda_stage_find(labels, sizeof(int32_t) * (size_t)positions);
    // The partials' device doubles and pinned mirror serve as 64-bit counters here.
    double *host_d;
    u64 *dev = (u64 *)cuda_partials(used, &host_d);
    CU_CHECK(cudaMemsetAsync(dev, 0, sizeof(u64) * (size_t)used, st));
    const unsigned blocks = cuda_grid(positions, GL_BLOCK);
    if (topk && iou)
        class_counts_k<true, true><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, k, out, dl, dev);
    else if (topk)
        class_counts_k<true, false><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, k, out, dl, dev);
    else if (iou)
        class_counts_k<false, true><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, k, out, dl, dev);
    else
        class_counts_k<false, false><<<blocks, GL_BLOCK, 0, st>>>(n, c, s, k, out, dl, dev);
    CU_LAUNCHED();
    u64 *host = (u64 *)host_d;
    CU_CHECK(cudaMemcpyAsync(host, dev, sizeof(u64) * (size_t)used, cudaMemcpyDeviceToHost, st));
    CU_CHECK(cudaStreamSynchronize(st));
    for (int j = 0; j < used; j++) counts[j] = (int64_t)host[j];
}
