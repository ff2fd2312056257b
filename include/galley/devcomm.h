// devcomm.h: sums of gradient buckets on the GPU's own buffers with NCCL, on a stream of their
// own (src/backend/cuda/cuda_nccl.cu; src/dist/devcomm_none.c stands in without CUDA).
//
// This is the mechanism only; src/dist/grad_nccl.c holds the policy: whether NCCL is used at
// all (every rank agrees over MPI), the unique id's broadcast, and every wait, each bounded by
// distributed.timeout. Nothing here talks MPI, sleeps or ends the job: calls start work and
// report a state, so the caller decides how long to wait and whom to tell.
//
//   gl_devcomm *c = devcomm_open(msg, len);            NULL: NCCL cannot be loaded (msg: why)
//   rank 0: devcomm_unique_id(c, id, ...);  broadcast id over MPI
//   devcomm_connect(c, id, rank, world, ...);          then devcomm_state until not BUSY
//   per bucket: devcomm_allreduce(c, buf, count, ...)  queued behind the compute stream's work
//   devcomm_join(c);  devcomm_joined(c, ...) until not BUSY
//   devcomm_finalize(c, ...) (then devcomm_state) and devcomm_close(c, 0), or devcomm_close(c, 1)
//
// NCCL is loaded at run time (dlopen libnccl.so.2), never linked, so the one galley binary runs
// on nodes without it. The communicator is non-blocking (ncclConfig_t.blocking = 0): creating
// it and the first collectives (which connect peers) return at once and are polled.
#ifndef GALLEY_DEVCOMM_H
#define GALLEY_DEVCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus  // cuda_nccl.cu is C++
extern "C" {
#endif

#define DEVCOMM_ID_BYTES 128  // NCCL_UNIQUE_ID_BYTES (checked where nccl.h is seen)

// What a call reports.
enum { DEVCOMM_DONE = 0, DEVCOMM_BUSY = 1, DEVCOMM_FAILED = -1 };

typedef struct gl_devcomm gl_devcomm;

// The GPU the CUDA backend is bound to: its UUID (unique across nodes: ranks that share a GPU
// have the same one) and its PCI bus id for messages. 0, or -1 without a bound GPU.
int devcomm_gpu_identity(unsigned char uuid[16], char *bus, size_t bus_len);

// Loads NCCL and makes the communication stream; NULL with the reason in msg.
gl_devcomm *devcomm_open(char *msg, size_t len);
// "NCCL 2.28.9" (the library loaded).
const char *devcomm_version(const gl_devcomm *c);
// Rank 0: a fresh id for devcomm_connect. DEVCOMM_DONE or DEVCOMM_FAILED (msg).
int devcomm_unique_id(gl_devcomm *c, unsigned char id[DEVCOMM_ID_BYTES], char *msg, size_t len);
// Starts creating the communicator of `world` ranks on the bound GPU.
int devcomm_connect(gl_devcomm *c, const unsigned char id[DEVCOMM_ID_BYTES], int rank, int world, char *msg,
                    size_t len);
// The communicator's state: BUSY while an operation is still being set up (creation,
// finalisation, a collective that connects peers), FAILED on NCCL's asynchronous error.
int devcomm_state(gl_devcomm *c, char *msg, size_t len);
// Queues an in-place float sum of buf[count] (GPU memory) over ranks on the communication
// stream, after everything queued on the compute stream so far. No host wait.
int devcomm_allreduce(gl_devcomm *c, float *buf, int64_t count, char *msg, size_t len);
// Makes the compute stream wait for every sum queued so far (no host wait), and marks the point
// devcomm_joined reports on.
void devcomm_join(gl_devcomm *c);
// Whether the sums before the last devcomm_join have completed on the GPU.
int devcomm_joined(gl_devcomm *c, char *msg, size_t len);
// Starts the orderly end of the communicator (poll devcomm_state).
int devcomm_finalize(gl_devcomm *c, char *msg, size_t len);
// Frees c: the communicator is destroyed (after devcomm_finalize settled) or, with abort,
// aborted (its kernels stopped, peers not waited for). NULL: nothing.
void devcomm_close(gl_devcomm *c, int abort);

#ifdef __cplusplus
}
#endif

#endif
