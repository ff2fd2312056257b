// cuda_probe.cu: lists GPUs through the (statically linked) CUDA runtime, for `galley info`.
// The runtime loads libcuda at run time, so the same binary starts on nodes without a GPU.
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda_dl.h"
#include "galley/cuda_probe.h"

extern "C" int cuda_probe(char *buf, size_t len) {
    int runtime = 0, driver = 0, count = 0;
    size_t k = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaError_t e = cudaDriverGetVersion(&driver);
    k += (size_t)snprintf(buf + k, len - k, "CUDA runtime %d.%d (static)", runtime / 1000, (runtime % 1000) / 10);
    char libs[256];
    cuda_dl_versions(libs, sizeof libs);
    k += (size_t)snprintf(buf + k, len - k, "; loaded at run time: %s", libs);
    if (e != cudaSuccess || driver == 0) {
        snprintf(buf + k, len - k, ", no CUDA driver found");
        return 0;
    }
    k += (size_t)snprintf(buf + k, len - k, ", driver supports CUDA %d.%d", driver / 1000, (driver % 1000) / 10);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(buf + k, len - k, "; no GPU: %s", cudaGetErrorString(e));
        return 0;
    }
    for (int i = 0; i < count && k < len; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        k += (size_t)snprintf(buf + k, len - k, "\n    GPU %d: %s, sm_%d%d, %.1f GiB, PCI %04x:%02x:%02x", i, p.name,
                              p.major, p.minor, p.totalGlobalMem / 1073741824.0, p.pciDomainID, p.pciBusID,
                              p.pciDeviceID);
    }
    return count;
}
