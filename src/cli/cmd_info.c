// cmd_info.c: `galley info`: what this binary is, was built with, and can see.
#include <dlfcn.h>
#include <hdf5.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "galley/arena.h"
#include "galley/check.h"
#include "galley/cli.h"
#if GALLEY_HAVE_CUDA
#include "galley/cuda_probe.h"
#endif

#ifndef GALLEY_VERSION
#define GALLEY_VERSION "0.1.0-dev"
#endif
#ifndef GALLEY_BUILD_TYPE
#define GALLEY_BUILD_TYPE "unknown"
#endif
#ifndef GALLEY_SANITIZE
#define GALLEY_SANITIZE 0
#endif

char *openblas_get_config(void);
char *openblas_get_corename(void);
int openblas_get_num_threads(void);

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(buf, len, "%s", colon + 2);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
}

static void nccl_probe(char *buf, size_t len) {
    // Looked up at run time, so a CPU node without NCCL still runs this binary.
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(buf, len, "not found (libnccl.so.2 not loadable)");
        return;
    }
    int (*get_version)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
    int v = 0;
    if (get_version && get_version(&v) == 0)
        snprintf(buf, len, "%d.%d.%d (libnccl.so.2)", v / 10000, (v / 100) % 100, v % 100);
    else
        snprintf(buf, len, "found, version unknown");
    dlclose(h);
}

int cmd_info(int argc, char **argv) {
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) return cli_help_for("info", stdout), 0;
    if (argc > 0) {
        fprintf(stderr, "galley info: takes no arguments\n");
        return GL_EXIT_USAGE;
    }
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int mpilen = 0;
    MPI_Get_library_version(mpi, &mpilen);  // allowed before MPI_Init
    mpi[strcspn(mpi, "\n,")] = 0;
    char cpu[256], nccl[128];
    cpu_model(cpu, sizeof cpu);
    nccl_probe(nccl, sizeof nccl);
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;

    printf("galley %s\n", GALLEY_VERSION);
    printf("  version:     %s\n", GALLEY_VERSION);
    printf("  build:       %s%s\n", GALLEY_BUILD_TYPE, GALLEY_SANITIZE ? ", sanitizers: address,undefined" : "");
    printf("  backends:    cpu%s\n", GALLEY_HAVE_CUDA ? ", cuda" : " (built without CUDA: nvcc was not found)");
    printf("  libraries:   libyaml %s, HDF5 %u.%u.%u, OpenBLAS %s (core %s)\n", yaml_get_version_string(), maj, min,
           rel, openblas_get_config(), openblas_get_corename());
    printf("  MPI:         %s\n", mpi);
    printf("  NCCL:        %s\n", nccl);
    printf("  CPU:         %s, %d cores available, features:", cpu, cores);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) printf(" sse4.2");
    if (__builtin_cpu_supports("avx")) printf(" avx");
    if (__builtin_cpu_supports("avx2")) printf(" avx2");
    if (__builtin_cpu_supports("fma")) printf(" fma");
    if (__builtin_cpu_supports("avx512f")) printf(" avx512f");
    printf("\n  memory:      %.1f GiB\n", arena_host_memory() / 1073741824.0);
#if GALLEY_HAVE_CUDA
    char gpu[2048];
    int n = cuda_probe(gpu, sizeof gpu);
    printf("  GPUs:        %d; %s\n", n, gpu);
#else
    printf("  GPUs:        not probed (no CUDA backend in this build)\n");
#endif
    return GL_EXIT_OK;
}
