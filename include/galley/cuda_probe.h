// cuda_probe.h: what the CUDA runtime sees (compiled only when nvcc was found).
#ifndef GALLEY_CUDA_PROBE_H
#define GALLEY_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
// Writes lines describing the driver, runtime and GPUs into buf; returns the number of GPUs
// (0 when there is none or no driver, with the reason in buf).
int cuda_probe(char *buf, size_t len);
#ifdef __cplusplus
}
#endif

#endif
