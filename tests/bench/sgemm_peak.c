/* sgemm_peak: this machine's single-precision GEMM peak through the OpenBLAS galley links.
 *
 * Built by tests/bench/run.sh against the static OpenMP OpenBLAS galley uses:
 *   cc -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp sgemm_peak.c \
 *      /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.a -lgfortran -lm -lpthread
 *
 * Usage: sgemm_peak [THREADS...]   (default: 1 and all available cores)
 * For each thread count, times C = A B on square N x N matrices (N = 2048, 3072, 4096), best of
 * REPS runs each, and prints one line per thread count:
 *   threads T peak G GFLOP/s (N=..., best of R) | ...
 * and first a line `core NAME | config ...` naming the kernel OpenBLAS picked.
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double best_gflops(int n, float *a, float *b, float *c) {
    double best = 0.0;
    /* One untimed call warms the thread pool and the pages of C. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double dt = now_s() - t0;
        double g = 2.0 * (double)n * (double)n * (double)n / dt / 1e9;
        if (g > best) best = g;
    }
    return best;
}

int main(int argc, char **argv) {
    static const int sizes[] = {2048, 3072, 4096};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    const int nmax = sizes[nsizes - 1];
    int threads[16];
    int nthreads = 0;
    for (int i = 1; i < argc && nthreads < 16; i++) threads[nthreads++] = atoi(argv[i]);
    if (nthreads == 0) {
        threads[nthreads++] = 1;
        int all = omp_get_num_procs();
        if (all > 1) threads[nthreads++] = all;
    }

    size_t elems = (size_t)nmax * (size_t)nmax;
    float *a = malloc(elems * sizeof *a);
    float *b = malloc(elems * sizeof *b);
    float *c = malloc(elems * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "sgemm_peak: out of memory\n");
        return 1;
    }
    unsigned s = 12345u;
    for (size_t i = 0; i < elems; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        s = s * 1664525u + 1013904223u;
        b[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        c[i] = 0.0f;
    }

    printf("core %s | config %s\n", openblas_get_corename(), openblas_get_config());
    for (int t = 0; t < nthreads; t++) {
        openblas_set_num_threads(threads[t]);
        omp_set_num_threads(threads[t]);
        double peak = 0.0;
        int peak_n = 0;
        char detail[256] = "";
        int len = 0;
        for (int i = 0; i < nsizes; i++) {
            double g = best_gflops(sizes[i], a, b, c);
            len += snprintf(detail + len, sizeof detail - (size_t)len, " N=%d %.1f", sizes[i], g);
            if (g > peak) {
                peak = g;
                peak_n = sizes[i];
            }
        }
        printf("threads %d peak %.1f GFLOP/s (N=%d, best of %d) |%s\n", threads[t], peak, peak_n,
               REPS, detail);
        fflush(stdout);
    }
    free(a);
    free(b);
    free(c);
    return 0;
}
