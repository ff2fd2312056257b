// cpu_gemm.c: every matrix product of the CPU backend, as serial OpenBLAS calls on fixed tiles.
//
// Why not OpenBLAS's own threads: its threaded sgemm computes some elements with other kernels
// than its serial one (the edge kernels land on other rows when threads split the matrix, and
// on AMD Zen even a product with K = 48 differs in the last bits between 1 and 2 threads), so
// results would depend on the thread count. Here the output is cut into tiles whose sizes
// depend only on the shape; each tile is one serial sgemm; OpenMP threads take whole tiles (or,
// inside an already parallel loop, the calling thread runs them all). Every element is then
// computed by the same code whatever the thread count, and K needs no blocking.
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "galley/check.h"

// Tile length along the split dimension (len; other: C's other side, k: the depth): a power-of-
// two count of tiles, at most 16, each at least 128 long (the other operand is packed again for
// every tile, so short tiles cost more than they spread), rounded to 16 (OpenBLAS's register
// tiles divide it). Threads take them statically, in runs of consecutive tiles: a thread then
// meets the same rows of C at every step (a weight gradient's rows, which optim_owner gives the
// same thread to update). Measured on the 2-core EPYC: dynamic tiles left the MLP's SGD update
// 2x slower at 2 threads than at 1 (lines last written by the other core); static ones, with
// optim_owner and cpu_gemm_rows, took the MLP from 34.1k to 38.1k samples/s. A product that would stay one tile is still halved when each half is at least
// 64 long and holds 256k multiply-adds: a dense layer of 128 units over a 4096-long input (batch 64)
// was otherwise one thread's alone, a sixth of a 2-thread small_cnn step's GEMM time; and the
// MLP's 10-unit head (128 x 10 x 512, 2 x 327k) took 0.101-0.114 s of 2,000 steps on one thread
// of a 2-core Xeon, 0.036-0.043 s halved (4 alternating runs; 2M was the bound before).
static int64_t tile_len(int64_t len, int64_t other, int64_t k) {
    int64_t tiles = 1;
    while (tiles < 16 && len / (2 * tiles) >= 128) tiles *= 2;
    if (tiles == 1 && len / 2 >= 64 && (double)(len / 2) * (double)other * (double)k >= 262144.0) tiles = 2;
    int64_t t = (len + tiles - 1) / tiles;
    return (t + 15) / 16 * 16;
}

// One serial product c (rows x cols) = beta c + op(a) . op(b) over depth k. beta 0: c is cleared
// here, in this thread's cache just before its product, and OpenBLAS adds to it. Its own beta-0
// pass (sgemm_beta) was 7% of a 2-thread MLP step. 0 + x is x, so the bits are those of beta 0.
static void sgemm_serial(bool ta, bool tb, int64_t rows, int64_t cols, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (beta == 0.0f) {
        for (int64_t r = 0; r < rows; r++) memset(c + r * ldc, 0, sizeof(float) * (size_t)cols);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)rows,
                (blasint)cols, (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

// C cut along its rows (by_rows) or its columns into tiles.
static void gemm_tiles(bool by_rows, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    const int64_t tl = tile_len(by_rows ? m : n, by_rows ? n : m, k), tiles = ((by_rows ? m : n) + tl - 1) / tl;
    const bool par = tiles > 1 && !omp_in_parallel() && (double)m * (double)n * (double)k >= 131072.0;
    // OpenBLAS's OpenMP build threads a call made outside an active parallel region over
    // omp_get_max_threads() threads (whatever openblas_set_num_threads said): a serial loop
    // lowers this task's thread count to 1 around its calls.
    const int saved = par || omp_in_parallel() ? 1 : omp_get_max_threads();
    if (saved > 1) omp_set_num_threads(1);
#pragma omp parallel for schedule(static) if (par)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t o = t * tl, len = (by_rows ? m : n) - o < tl ? (by_rows ? m : n) - o : tl;
        // rows o.. of C take rows o.. of op(a); columns o.. of C take columns o.. of op(b)
        const float *at = by_rows ? a + (ta ? o : o * lda) : a;
        const float *bt = by_rows ? b : b + (tb ? o * ldb : o);
        float *ct = c + (by_rows ? o * ldc : o);
        sgemm_serial(ta, tb, by_rows ? len : m, by_rows ? n : len, k, at, lda, bt, ldb, beta, ct, ldc);
    }
    if (saved > 1) omp_set_num_threads(saved);
}

void cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc) {
    // Split the longer side of C: the other operand is packed again per tile, so keep tiles long.
    gemm_tiles(m >= n, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void cpu_gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                   int64_t ldb, float beta, float *c, int64_t ldc) {
    gemm_tiles(true, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// ---- products over a long depth (weight gradients over many tokens) ----------------------------
//
// C = op(a) . op(b) (beta 0) with the depth k cut into parts whose count and lengths depend on
// the shape alone: part p is one serial sgemm over its stretch of k, into C (part 0) or a block
// of scratch, then C = ((P0 + P1) + P2) ... in part order, C's rows in static runs (at 2 threads
// the halves cpu_gemm_rows and optim_owner give). Every operand is then packed once: C cut by rows
// (cpu_gemm_rows) packs all of op(b) again for every row tile. vit-tiny's weight gradients
// (4096 tokens at batch 64; 768 x 192, 576 x 192, 192 x 192 and 192 x 768 over 4096) packed
// 21M floats a block that way, OpenBLAS's packing (sgemm_itcopy + otcopy) 7.7% of a 2-thread
// step's samples, 4.7% in parts. Measured on a 2-core Xeon (2 threads, vit-tiny, 40 steps): part
// length 2048 / 1024 / 512 gave 280 / 277 / 274 samples/s against 265-270 by rows. 1024 keeps
// as many tasks as the row tiles gave these layers (4), for CPUs with more cores than this one.
#define DEPTH_PART 1024
#define DEPTH_PARTS_MAX 8
// Floats of partial sums at most (32 MiB, glibc's largest mmap threshold: below it the block freed
// at the end of one call is handed back by the next, so no page is faulted in again), else fewer parts.
#define DEPTH_SCRATCH_MAX (8 << 20)

int64_t cpu_gemm_depth_parts(int64_t m, int64_t n, int64_t k) {
    int64_t parts = k / DEPTH_PART;
    parts = parts > DEPTH_PARTS_MAX ? DEPTH_PARTS_MAX : parts;
    while (parts >= 2 && (double)(parts - 1) * (double)m * (double)n > DEPTH_SCRATCH_MAX) parts--;
    return parts >= 2 && m > 0 && n > 0 ? parts : 1;
}

void cpu_gemm_depth(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
    const int64_t parts = cpu_gemm_depth_parts(m, n, k);
    if (parts < 2) {
        gemm_tiles(true, ta, tb, m, n, k, a, lda, b, ldb, 0.0f, c, ldc);
        return;
    }
    const int64_t len = (k + parts - 1) / parts;
    float *scr = gl_xmalloc(sizeof(float) * (size_t)((parts - 1) * m * n));
    // Every sgemm runs inside this team. OpenBLAS's OpenMP build threads a call made outside an
    // active parallel region over omp_get_max_threads() threads: where the team is one thread (one
    // asked for, OMP_DYNAMIC or a thread limit, or called inside another parallel region) that
    // count is set to 1 for this task, so each part stays one serial product.
#pragma omp parallel if (!omp_in_parallel())
    {
        if (omp_get_num_threads() == 1) omp_set_num_threads(1);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < parts; p++) {
            const int64_t o = p * len, kp = k - o < len ? k - o : len;  // kp > 1000: k >= 1024 parts
            sgemm_serial(ta, tb, m, n, kp, ta ? a + o * lda : a + o, lda, tb ? b + o : b + o * ldb, ldb, 0.0f,
                         p == 0 ? c : scr + (p - 1) * m * n, p == 0 ? ldc : n);
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++) {
            float *dst = c + r * ldc;
            for (int64_t p = 1; p < parts; p++) {
                const float *src = scr + (p - 1) * m * n + r * n;
#pragma omp simd
                for (int64_t j = 0; j < n; j++) dst[j] += src[j];
            }
        }
    }
    free(scr);
}
