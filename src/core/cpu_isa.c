// cpu_isa.c: cpu_isa.h's one probe of the CPU, shared by every kernel family that has vector twins.
#include "galley/cpu_isa.h"

#include <stdlib.h>
#include <string.h>

#include "galley/check.h"

// The cap GALLEY_CPU_ISA sets (2: none).
static int isa_cap(void) {
    const char *v = getenv("GALLEY_CPU_ISA");
    if (!v || !*v || !strcmp(v, "auto")) return 2;
    if (!strcmp(v, "avx2")) return 1;
    if (!strcmp(v, "none")) return 0;
    gl_die(GL_EXIT_USAGE, "unset it to let galley choose", "GALLEY_CPU_ISA=%s: the values are auto, avx2 and none",
           v);
}

int cpu_isa_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    static int isa = -1;  // every thread finds the same
    int v = __atomic_load_n(&isa, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("fma")
                ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                               : 0;
        const int cap = isa_cap();
        v = v < cap ? v : cap;
        __atomic_store_n(&isa, v, __ATOMIC_RELAXED);
    }
    return v;
#else
    return 0;
#endif
}
