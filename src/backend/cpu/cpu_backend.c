// cpu_backend.c: the CPU backend's table. BLAS does the GEMM-shaped work on its own threads.
#include <omp.h>

#include "backend/cpu/cpu_kernels.h"

void openblas_set_num_threads(int num_threads);

// OpenBLAS threads run inside sgemm, OpenMP threads in galley's own loops; they never nest.
static void cpu_set_threads(int threads) {
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
}

static const gl_backend cpu = {
    .name = "cpu",
    .dense_forward = cpu_dense_forward,
    .dense_backward = cpu_dense_backward,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .softmax_xent = cpu_softmax_xent,
    .set_threads = cpu_set_threads,
    // (begin conv region)
    // (end conv region)
    // (begin pool-norm region)
    // (end pool-norm region)
};

const gl_backend *backend_cpu(void) { return &cpu; }
