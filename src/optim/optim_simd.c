// optim_simd.c: optim_simd.h's loops, one body (optim_simd_body.h) compiled for the baseline,
// AVX2 and AVX-512, and the choice among them. Built with -fno-math-errno (CMakeLists.txt), so
// AdamW's sqrtf vectorises: errno is the only thing that changes.
#include "optim/optim_simd.h"

#include <math.h>
#include <string.h>

#include "galley/cpu_isa.h"

#define OW 2
#define OFN(name) name##_base
#include "optim/optim_simd_body.h"
#undef OW
#undef OFN

#if defined(__x86_64__) && defined(__GNUC__)
#define OS_X86 1

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define OW 4
#define OFN(name) name##_avx2
#include "optim/optim_simd_body.h"
#undef OW
#undef OFN
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define OW 8
#define OFN(name) name##_avx512
#include "optim/optim_simd_body.h"
#undef OW
#undef OFN
#pragma GCC pop_options

#else
#define OS_X86 0
#endif

// The best instruction set this CPU has (cpu_isa.h: asked once, capped by GALLEY_CPU_ISA).
static optim_isa os_best(void) {
    const int v = OS_X86 ? cpu_isa_best() : 0;
    return v == 2 ? OS_AVX512 : v == 1 ? OS_AVX2 : OS_BASE;
}

const optim_simd *optim_simd_for(optim_isa isa) {
    if (isa > os_best()) return NULL;
#if OS_X86
    if (isa == OS_AVX512) return &optim_simd_avx512;
    if (isa == OS_AVX2) return &optim_simd_avx2;
#endif
    return &optim_simd_base;
}

const optim_simd *optim_simd_get(void) { return optim_simd_for(os_best()); }
