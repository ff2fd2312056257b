// cpu_backend.c: the CPU backend's table. BLAS does the GEMM-shaped work on its own threads.
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/arena.h"

void openblas_set_num_threads(int num_threads);

// libgomp reads OMP_WAIT_POLICY once, in its own constructor, before main(). Spinning idle
// threads suit an idle, dedicated node but are ruinous where cores are shared (a node running
// two jobs, ctest -j2, a login node): the 2-core quickstart took 60 s spinning and 1 s sleeping.
// So this constructor, ordered before libgomp's (priority 101 runs before unprioritised ones),
// picks "passive" when OMP_WAIT_POLICY is unset; OMP_WAIT_POLICY=active overrides it. It lives
// here because this file is always linked.
// Sleeping at once costs a futex wake per parallel region, though: a training step runs one
// region per kernel, back to back, and the MLP benchmark lost ~15% at 2 threads to wake-ups. So
// passive threads first spin briefly (GOMP_SPINCOUNT 3000, some tens of microseconds): enough to
// catch the next kernel's region on dedicated cores, little to waste where cores are shared
// (two 2-thread trainings on 2 cores: ~10% slower than not spinning; 30000 spins: 2x slower).
// GOMP_SPINCOUNT or OMP_WAIT_POLICY in the environment take precedence. Where neither is given,
// galley marks the choice as its own (GALLEY_OMP_SPIN_AUTO=1, which a re-executed galley inherits):
// cpu_spin.c then lengthens the spin between steps while the cores are not shared and the long
// spin measures faster.
__attribute__((constructor(101))) static void cpu_omp_default_passive(void) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("GALLEY_OMP_SPIN_AUTO", getenv("GOMP_SPINCOUNT") ? "0" : "1", 1);
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("GOMP_SPINCOUNT", "3000", 0);
}

// OpenBLAS always runs serially: cpu_gemm.c spreads its calls over galley's OpenMP threads in
// tiles fixed by the shape, because OpenBLAS's own threading changes results with the count.
// (Its OpenMP build follows omp_get_max_threads() instead; cpu_gemm.c handles that too.)
static void cpu_set_threads(int threads) {
    openblas_set_num_threads(1);
    omp_set_num_threads(threads);
}

// Host memory: the arena is page-aligned (and so aligned for AVX-512) and zeroed. One of 4 MiB
// or more is aligned to 2 MiB and asks for transparent huge pages (MADV_HUGEPAGE: honoured where
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise", a no-op elsewhere).
// Measured on a 2-core EPYC: with 4 KiB pages the MLP's 2-thread speed varied from run to run
// between 33k and 43k samples/s with where the kernel placed the pages (the caches index by
// physical address), and TLB misses cost the streaming passes over activations too.
#define CPU_HUGE_MIN ((size_t)4 << 20)
#define CPU_HUGE_ALIGN ((size_t)2 << 20)
static void *cpu_mem_alloc(size_t bytes) {
    void *p = NULL;
    const bool huge = bytes >= CPU_HUGE_MIN;
    if (huge) bytes = (bytes + CPU_HUGE_ALIGN - 1) / CPU_HUGE_ALIGN * CPU_HUGE_ALIGN;
    if (posix_memalign(&p, huge ? CPU_HUGE_ALIGN : 4096, bytes ? bytes : 1) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
#endif
    memset(p, 0, bytes);  // touch it now: a short machine fails here, not mid-run
    return p;
}
static void cpu_mem_free(void *p) { free(p); }
static void cpu_sync(void) {}  // every kernel has returned when its call does
// Spread over the threads: graph_backward clears every activation gradient each step (tens of
// MB for a CNN), and one thread doing it alone left the others idle for ~9% of a 2-thread
// small_cnn step.
static void cpu_zero(void *dst, size_t bytes) {
    enum { PIECE = 1 << 18 };  // 256 KiB: a few pieces per thread even for a small tensor
    const int64_t pieces = (int64_t)((bytes + PIECE - 1) / PIECE);
    if (pieces < 4 || omp_in_parallel()) {
        memset(dst, 0, bytes);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < pieces; i++) {
        const size_t o = (size_t)i * PIECE;
        memset((char *)dst + o, 0, bytes - o < PIECE ? bytes - o : PIECE);
    }
}
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
// The copy is done when upload_async returns: nothing to wait for. (The training loop's staging
// runs the same on the CPU as on a GPU, so the CPU tests cover its order.)
static void cpu_upload_wait(void) {}

static const gl_backend cpu = {
    .name = "cpu",
    .device = 0,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .sync = cpu_sync,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .upload_async = cpu_copy,
    .upload_wait = cpu_upload_wait,
    .dense_forward = cpu_dense_forward,
    .dense_forward_act = cpu_dense_forward_act,
    .dense_forward_res = cpu_dense_forward_res,
    .dense_backward = cpu_dense_backward,
    .dense_backward_set = cpu_dense_backward_set,
    .dense_backward_act = cpu_dense_backward_act,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .act_backward_set = cpu_act_backward_set,
    .gelu_forward_keep = cpu_gelu_forward_keep,
    .gelu_backward_kept = cpu_gelu_backward_kept,
    .softmax_xent = cpu_softmax_xent,
    .regression_loss = cpu_regression_loss,
    .l2_relative_loss = cpu_l2_relative_loss,
    .set_threads = cpu_set_threads,
    .set_precision = NULL,  // fp32 only (train.precision other than fp32 is refused for train.device cpu)
    // (begin conv region)
    .conv_forward = cpu_conv_forward,
    .conv_forward_act = cpu_conv_forward_act,
    .conv_forward_pool = cpu_conv_forward_pool,
    .conv_backward = cpu_conv_backward,
    .conv_backward_set = cpu_conv_backward_set,
    .conv_transpose_forward = cpu_conv_transpose_forward,
    .conv_transpose_forward_act = cpu_conv_transpose_forward_act,
    .conv_transpose_backward = cpu_conv_transpose_backward,
    // (end conv region)
    // (begin pool-norm region)
    .max_pool_forward = cpu_max_pool_forward,
    .max_pool_backward = cpu_max_pool_backward,
    .max_pool_backward_set = cpu_max_pool_backward_set,
    .max_pool_backward_act = cpu_max_pool_backward_act,
    .avg_pool_forward = cpu_avg_pool_forward,
    .avg_pool_backward = cpu_avg_pool_backward,
    .global_avg_pool_forward = cpu_global_avg_pool_forward,
    .global_avg_pool_backward = cpu_global_avg_pool_backward,
    .batch_norm_forward = cpu_batch_norm_forward,
    .batch_norm_forward_act = cpu_batch_norm_forward_act,
    .batch_norm_backward = cpu_batch_norm_backward,
    .layer_norm_forward = cpu_layer_norm_forward,
    .layer_norm_backward = cpu_layer_norm_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .copy_rows = cpu_copy_rows,
    .upsample_forward = cpu_upsample_forward,
    .upsample_backward = cpu_upsample_backward,
    // (end pool-norm region)
    // (begin token region)
    .patch_rearrange = cpu_patch_rearrange,
    .row_sum = cpu_row_sum,
    .row_spread = cpu_row_spread,
    .row_scale = cpu_row_scale,
    // (end token region)
    // (begin attention region)
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    // (end attention region)
};

const gl_backend *backend_cpu(void) { return &cpu; }

// arena.h: a host-memory arena is one from the CPU backend's allocator (core/arena.c takes the
// allocator from its caller and knows no backend).
void arena_init(gl_arena *a, size_t cap) { arena_init_for(a, cap, backend_cpu()); }
