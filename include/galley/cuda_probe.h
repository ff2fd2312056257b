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
// Why the CUDA backend finds no GPU, in words: no NVIDIA driver, a driver older than the
// runtime, no visible device, or the runtime's own error.
void cuda_no_gpu_reason(char *buf, size_t len);
#ifdef __cplusplus
}
#endif

#endif
