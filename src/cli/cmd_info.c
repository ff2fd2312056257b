// cmd_info.c: `galley info`: what this binary is, was built with, and can see;
// `galley info --wiring`: what the container's site hooks (site/galley-entrypoint) did.
#include <dlfcn.h>
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "galley/arena.h"
#include "galley/blas_core.h"
#include "galley/check.h"
#include "cli/cli.h"
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

extern char **environ;

// The variables the site hooks set or read (site/README.md), shown by --wiring as galley sees them.
static const char *const wiring_prefixes[] = {"NCCL_", "FI_", "OMPI_MCA_", "PMIX_MCA_", "GALLEY_"};
static const char *const wiring_names[] = {
    "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "HDF5_USE_FILE_LOCKING", "SLURM_PROCID", "SLURM_LOCALID",
    "SLURM_NTASKS", "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_MPI_TYPE", "SLURM_CLUSTER_NAME", "PMIX_RANK",
    "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE", "NERSC_HOST", "SHIFTER_RUNTIME"};

static int wiring_var(const char *kv) {
    size_t n = strcspn(kv, "=");
    for (size_t i = 0; i < sizeof wiring_prefixes / sizeof *wiring_prefixes; i++)
        if (!strncmp(kv, wiring_prefixes[i], strlen(wiring_prefixes[i]))) return 1;
    for (size_t i = 0; i < sizeof wiring_names / sizeof *wiring_names; i++)
        if (strlen(wiring_names[i]) == n && !strncmp(kv, wiring_names[i], n)) return 1;
    return 0;
}

static int str_compare(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The entrypoint's report (GALLEY_WIRING_FILE), then the variables as galley sees them now.
static int info_wiring(void) {
    const char *path = getenv("GALLEY_WIRING_FILE");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!path || !*path) {
        printf("no site hooks ran: GALLEY_WIRING_FILE is not set, so galley was not started through the image's\n"
               "entrypoint (/opt/galley/site/galley-entrypoint). Inside the image, run it as\n"
               "`podman run IMAGE galley info --wiring`; GALLEY_HOOKS_DEBUG=1 prints the report at start.\n");
    } else if (!f) {
        printf("no wiring report: GALLEY_WIRING_FILE=%s cannot be read (%s);\n"
               "the entrypoint writes it at container start (set GALLEY_WIRING_FILE or TMPDIR to a writable place)\n",
               path, strerror(errno));
    } else {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
        fclose(f);
    }

    size_t count = 0, k = 0;
    for (char **e = environ; *e; e++) count += wiring_var(*e);
    const char **vars = gl_xmalloc((count ? count : 1) * sizeof *vars);
    for (char **e = environ; *e; e++)
        if (wiring_var(*e)) vars[k++] = *e;
    qsort(vars, count, sizeof *vars, str_compare);
    printf("\nenvironment galley sees (NCCL_*, FI_*, OMPI_MCA_*, PMIX_MCA_*, GALLEY_*, GPUs, library path, ranks):\n");
    for (size_t i = 0; i < count; i++) printf("  %s\n", vars[i]);
    if (!count) printf("  (none of them is set)\n");
    free(vars);
    return GL_EXIT_OK;
}

int cmd_info(int argc, char **argv) {
    int wiring = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return cli_help_for("info", stdout), 0;
        if (!strcmp(argv[i], "--wiring")) {
            wiring = 1;
            continue;
        }
        fprintf(stderr, "galley info: unknown argument '%s'; usage: galley info [--wiring]\n", argv[i]);
        return GL_EXIT_USAGE;
    }
    if (wiring) return info_wiring();
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
    printf("  backends:    cpu%s%s%s\n", GALLEY_HAVE_CUDA ? ", cuda" : " (built without CUDA: ",
           GALLEY_HAVE_CUDA ? "" : GALLEY_CUDA_REASON, GALLEY_HAVE_CUDA ? "" : ")");
    char core[256];
    cpu_blas_core_describe(core, sizeof core);
    printf("  libraries:   libyaml %s, HDF5 %u.%u.%u, OpenBLAS %s (%s)\n", yaml_get_version_string(), maj, min, rel,
           openblas_get_config(), core);
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
