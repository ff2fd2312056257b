// cpu_isa.h: the x86 instruction set the CPU kernels use (the conv, dense, attention, optimizer
// and loader paths each compile AVX2+FMA and AVX-512 twins and take the best): asked of the CPU
// once, capped by GALLEY_CPU_ISA (unset, empty or auto: the best; avx2: the AVX2+FMA kernels on
// an AVX-512 CPU too, so one machine's tests cover both; none: the plain paths). Another value
// ends the run with exit 2 (GL_EXIT_USAGE).
#ifndef GALLEY_CPU_ISA_H
#define GALLEY_CPU_ISA_H

// 0: neither, 1: AVX2+FMA, 2: AVX-512 (F, BW, DQ, VL) with FMA. 0 off x86.
int cpu_isa_best(void);

#endif
