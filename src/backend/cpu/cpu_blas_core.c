// cpu_blas_core.c: make sure OpenBLAS runs kernels that match the CPU.
//
// OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU's family/model when the library loads.
// A release older than the CPU does not know its model and falls back to a generic core:
// Debian 12's 0.3.21 runs an Emerald Rapids Xeon (family 6, model 207) on its Prescott SSE3
// kernels, ~6x below what its AVX-512 kernels reach. The core can only be chosen before the
// library initialises (OPENBLAS_CORETYPE, read by its constructor), so when the chosen core uses
// less of the vector unit than the CPU has, galley re-executes itself once, first thing in main,
// with OPENBLAS_CORETYPE set from the CPU's features, and says so where the core is shown.
// A user's own OPENBLAS_CORETYPE (even empty) is never touched.
#include <cpuid.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "galley/blas_core.h"

char *openblas_get_corename(void);

// Set in the re-executed process: the core OpenBLAS had chosen by itself (the loop guard too).
#define CORE_FROM_ENV "GALLEY_OPENBLAS_CORE_FROM"

// How much of the vector unit a core's kernels use: 3 AVX-512, 2 AVX2+FMA, 1 AVX, 0 below.
static int core_level(const char *core) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2[] = {"Haswell", "Zen", NULL};
    for (int i = 0; avx512[i]; i++)
        if (!strcasecmp(core, avx512[i])) return 3;
    for (int i = 0; avx2[i]; i++)
        if (!strcasecmp(core, avx2[i])) return 2;
    return !strcasecmp(core, "Sandybridge") ? 1 : 0;
}

// The same scale for this CPU (the compiler's checks include the OS's register support).
static int cpu_level(bool *bf16) {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    *bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));  // AVX512_BF16
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
    return __builtin_cpu_supports("avx") ? 1 : 0;
}

// The core to ask for, or NULL when OpenBLAS's own choice already matches the CPU.
static const char *core_wanted(const char *have) {
    bool bf16;
    int want = cpu_level(&bf16);
    if (core_level(have) >= want) return NULL;
    if (want == 3) return bf16 ? "Cooperlake" : "SkylakeX";
    return want == 2 ? "Haswell" : "Sandybridge";
}

void cpu_blas_core_fix(char **argv) {
    const char *done = getenv(CORE_FROM_ENV);  // set (non-empty) by the re-execution itself
    if (getenv("OPENBLAS_CORETYPE") || (done && *done)) return;
    const char *have = openblas_get_corename();
    if (!have) return;
    const char *want = core_wanted(have);
    if (!want) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) || setenv(CORE_FROM_ENV, have, 1)) return;
    execv("/proc/self/exe", argv);
    // Not re-executed (no /proc?): run on as we are, and say so where the core is shown.
    unsetenv("OPENBLAS_CORETYPE");
    setenv(CORE_FROM_ENV, "-", 1);
}

void cpu_blas_core_describe(char *buf, size_t len) {
    const char *core = openblas_get_corename();
    const char *from = getenv(CORE_FROM_ENV);
    bool bf16;
    if (!from || !*from) {
        snprintf(buf, len, "core %s", core ? core : "?");
    } else if (!strcmp(from, "-")) {
        snprintf(buf, len, "core %s: below this CPU's level %d, and galley could not re-execute itself to "
                           "choose another; set OPENBLAS_CORETYPE", core ? core : "?", cpu_level(&bf16));
    } else {
        snprintf(buf, len, "core %s, chosen by galley: OpenBLAS took this CPU for %s; set OPENBLAS_CORETYPE to choose",
                 core ? core : "?", from);
    }
}
