// cuda_nccl.cu: NCCL's gradient sums on the bound GPU, on a stream of their own (see
// galley/devcomm.h; the policy and every wait are in src/dist/grad_nccl.c).
//
// NCCL is loaded with dlopen into a table that each gl_devcomm owns (the loader counts the
// opens), the way cuda_dl.cu loads cuDNN and cuBLAS: the binary links no NCCL.
//
// Streams. The compute stream (cuda_ctx.stream) runs backward; NCCL runs on `comm`, a
// non-blocking stream of the highest priority, so a bucket's kernels start as soon as the SMs
// free up rather than queueing behind the rest of backward. A bucket is ordered after the
// layers that wrote it by an event recorded on the compute stream and waited for on `comm`;
// the optimizer is ordered after every bucket by devcomm_join's event the other way round.
// Neither direction waits on the host.
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "galley/check.h"
#include "galley/devcomm.h"

static_assert(NCCL_UNIQUE_ID_BYTES == DEVCOMM_ID_BYTES, "devcomm.h's id size is NCCL's");

// The NCCL functions galley calls; each becomes a member typed from nccl.h's prototype.
#define GL_NCCL_FUNCS(X)                                                                                 \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) X(ncclCommInitRankConfig) \
    X(ncclCommGetAsyncError) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclAllReduce)

#define GL_NCCL_MEMBER(name) decltype(&::name) name;
typedef struct {
    GL_NCCL_FUNCS(GL_NCCL_MEMBER)
} nccl_table;
#undef GL_NCCL_MEMBER

struct gl_devcomm {
    nccl_table nc;
    char version[32];
    ncclComm_t comm;     // NULL until devcomm_connect
    cudaStream_t stream; // NCCL's
    cudaEvent_t ready;   // compute stream -> comm: the layers of a bucket are done
    cudaEvent_t done;    // comm -> compute stream and host: every queued sum is done
};

int devcomm_gpu_identity(unsigned char uuid[16], char *bus, size_t bus_len) {
    cuda_ctx *x = cuda_ctx_get();
    if (!x->stream) return -1;  // the CUDA backend is not bound
    memcpy(uuid, x->prop.uuid.bytes, 16);
    if (cudaDeviceGetPCIBusId(bus, (int)bus_len, x->device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(bus, bus_len, "GPU %d", x->device);
    }
    return 0;
}

// NCCL's word for r, and its last error's detail when it has one.
static int nccl_failed(const gl_devcomm *c, ncclResult_t r, const char *call, char *msg, size_t len) {
    const char *last = c->nc.ncclGetLastError ? c->nc.ncclGetLastError(c->comm) : NULL;
    snprintf(msg, len, "NCCL: %s failed: %s%s%s", call, c->nc.ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
    return DEVCOMM_FAILED;
}

// A call's result as a state: ncclInProgress is the non-blocking communicator's "started".
static int nccl_state(const gl_devcomm *c, ncclResult_t r, const char *call, char *msg, size_t len) {
    if (r == ncclSuccess) return DEVCOMM_DONE;
    if (r == ncclInProgress) return DEVCOMM_BUSY;
    return nccl_failed(c, r, call, msg, len);
}

gl_devcomm *devcomm_open(char *msg, size_t len) {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(msg, len, "cannot load libnccl.so.2 (%s)", why ? why : "not found");
        return NULL;
    }
    nccl_table nc;
    memset(&nc, 0, sizeof nc);
#define GL_NCCL_SYM(name)                                                                                \
    if (!(*(void **)&nc.name = dlsym(lib, #name))) {                                                     \
        snprintf(msg, len, "libnccl.so.2 has no %s (NCCL 2.14 or newer is needed)", #name);              \
        dlclose(lib);                                                                                    \
        return NULL;                                                                                     \
    }
    GL_NCCL_FUNCS(GL_NCCL_SYM)
#undef GL_NCCL_SYM
    int v = 0;
    if (nc.ncclGetVersion(&v) != ncclSuccess || v < NCCL_VERSION(2, 14, 0)) {
        snprintf(msg, len, "libnccl.so.2 is version %d; non-blocking communicators need NCCL 2.14 or newer", v);
        dlclose(lib);
        return NULL;
    }
    // 2.x.y from code 2xxyy (NCCL >= 2.9 encodes major*10000 + minor*100 + patch).
    char version[32];
    snprintf(version, sizeof version, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    // Checked after the symbols, so that test_dist_nccl sees the whole table load without a GPU.
    if (!cuda_ctx_get()->stream) {
        snprintf(msg, len, "%s loaded, but no GPU is bound (the CUDA backend is not in use)", version);
        dlclose(lib);
        return NULL;
    }
    // From here the library stays loaded (never dlclosed): NCCL's threads may outlive a communicator.
    gl_devcomm *c = (gl_devcomm *)gl_xcalloc(1, sizeof *c);
    c->nc = nc;
    memcpy(c->version, version, sizeof version);
    int lo = 0, hi = 0;
    CU_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CU_CHECK(cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, hi));
    CU_CHECK(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    return c;
}

const char *devcomm_version(const gl_devcomm *c) { return c->version; }

int devcomm_unique_id(gl_devcomm *c, unsigned char id[DEVCOMM_ID_BYTES], char *msg, size_t len) {
    ncclUniqueId u;
    ncclResult_t r = c->nc.ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_failed(c, r, "ncclGetUniqueId", msg, len);
    memcpy(id, u.internal, DEVCOMM_ID_BYTES);
    return DEVCOMM_DONE;
}

int devcomm_connect(gl_devcomm *c, const unsigned char id[DEVCOMM_ID_BYTES], int rank, int world, char *msg,
                    size_t len) {
    ncclUniqueId u;
    memcpy(u.internal, id, DEVCOMM_ID_BYTES);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // returns at once; grad_nccl.c bounds the wait by distributed.timeout
    cfg.commName = "galley-gradients";
    return nccl_state(c, c->nc.ncclCommInitRankConfig(&c->comm, world, u, rank, &cfg), "ncclCommInitRankConfig",
                      msg, len);
}

int devcomm_state(gl_devcomm *c, char *msg, size_t len) {
    if (!c->comm) return DEVCOMM_DONE;
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = c->nc.ncclCommGetAsyncError(c->comm, &a);
    if (r != ncclSuccess) return nccl_failed(c, r, "ncclCommGetAsyncError", msg, len);
    return nccl_state(c, a, "the communicator (asynchronous error)", msg, len);
}

int devcomm_allreduce(gl_devcomm *c, float *buf, int64_t count, char *msg, size_t len) {
    cudaStream_t compute = cuda_ctx_get()->stream;
    CU_CHECK(cudaEventRecord(c->ready, compute));
    CU_CHECK(cudaStreamWaitEvent(c->stream, c->ready, 0));
    return nccl_state(c, c->nc.ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, c->comm, c->stream),
                      "ncclAllReduce", msg, len);
}

void devcomm_join(gl_devcomm *c) {
    CU_CHECK(cudaEventRecord(c->done, c->stream));
    CU_CHECK(cudaStreamWaitEvent(cuda_ctx_get()->stream, c->done, 0));
}

int devcomm_joined(gl_devcomm *c, char *msg, size_t len) {
    cudaError_t e = cudaEventQuery(c->done);
    if (e != cudaSuccess && e != cudaErrorNotReady) {
        snprintf(msg, len, "CUDA: the gradient sums' stream failed: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return DEVCOMM_FAILED;
    }
    // A peer that died leaves NCCL's kernels spinning: its asynchronous error is how we learn.
    int s = devcomm_state(c, msg, len);
    if (s == DEVCOMM_FAILED) return s;
    return e == cudaSuccess ? DEVCOMM_DONE : DEVCOMM_BUSY;
}

int devcomm_finalize(gl_devcomm *c, char *msg, size_t len) {
    if (!c->comm) return DEVCOMM_DONE;
    return nccl_state(c, c->nc.ncclCommFinalize(c->comm), "ncclCommFinalize", msg, len);
}

void devcomm_close(gl_devcomm *c, int abort) {
    if (!c) return;
    if (c->comm) {
        if (abort) c->nc.ncclCommAbort(c->comm);
        else c->nc.ncclCommDestroy(c->comm);
    }
    // Not checked: on the abort path the GPU may already be in a sticky error state.
    cudaEventDestroy(c->ready);
    cudaEventDestroy(c->done);
    cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}
