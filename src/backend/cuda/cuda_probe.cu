// cuda_probe.cu: lists GPUs through the (statically linked) CUDA runtime, for `galley info`.
// The runtime loads libcuda at run time, so the same binary starts on nodes without a GPU.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_dl.h"
#include "galley/cuda_probe.h"

extern "C" void cuda_no_gpu_reason(char *buf, size_t len) {
    int runtime = 0, driver = 0, count = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaError_t de = cudaDriverGetVersion(&driver);  // 0 when the runtime cannot load libcuda.so.1
    cudaError_t e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    // Without a driver the runtime says "CUDA driver version is insufficient for CUDA runtime
    // version", which sends people to update a driver that is not there.
    if (de != cudaSuccess || driver == 0)
        snprintf(buf, len, "no NVIDIA driver found: libcuda.so.1 cannot be loaded on this node");
    else if (e == cudaErrorInsufficientDriver)
        snprintf(buf, len, "the NVIDIA driver supports CUDA %d.%d, older than this galley's CUDA runtime %d.%d: "
                 "update the driver", driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
    else if (e != cudaSuccess)
        snprintf(buf, len, "%s", cudaGetErrorString(e));
    else if (count == 0)
        snprintf(buf, len, "no CUDA device is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "",
                 vis ? ")" : "");
    else
        snprintf(buf, len, "%d CUDA device%s visible", count, count > 1 ? "s" : "");
}

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
        snprintf(buf + k, len - k, ", no NVIDIA driver found (libcuda.so.1 cannot be loaded)");
        return 0;
    }
    k += (size_t)snprintf(buf + k, len - k, ", driver supports CUDA %d.%d", driver / 1000, (driver % 1000) / 10);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        k += (size_t)snprintf(buf + k, len - k, "; no GPU: ");
        cuda_no_gpu_reason(buf + k, len - k);
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
