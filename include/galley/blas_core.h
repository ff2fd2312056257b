// blas_core.h: OpenBLAS's kernel choice on CPUs newer than the OpenBLAS release
// (src/backend/cpu/cpu_blas_core.c).
#ifndef GALLEY_BLAS_CORE_H
#define GALLEY_BLAS_CORE_H

#include <stddef.h>

// First thing in main: when OpenBLAS chose kernels below this CPU's vector level (an unknown
// model) and OPENBLAS_CORETYPE is unset, re-executes galley with it set; otherwise returns.
void cpu_blas_core_fix(char **argv);
// "core NAME", plus how it was chosen when galley chose it.
void cpu_blas_core_describe(char *buf, size_t len);

#endif
