// devcomm_none.c: stands in for src/backend/cuda/cuda_nccl.cu in a build without CUDA. There is
// no GPU backend then, so gradients always go through MPI and only devcomm_open (which says
// why) and devcomm_gpu_identity are ever reached; the rest keep the link whole.
#include "galley/devcomm.h"

#include <stdio.h>

#if !GALLEY_HAVE_CUDA
int devcomm_gpu_identity(unsigned char uuid[16], char *bus, size_t bus_len) {
    (void)uuid, (void)bus, (void)bus_len;
    return -1;
}
gl_devcomm *devcomm_open(char *msg, size_t len) {
    snprintf(msg, len, "this galley was built without CUDA (%s)", GALLEY_CUDA_REASON);
    return NULL;
}
const char *devcomm_version(const gl_devcomm *c) {
    (void)c;
    return "none";
}
int devcomm_unique_id(gl_devcomm *c, unsigned char id[DEVCOMM_ID_BYTES], char *msg, size_t len) {
    (void)c, (void)id;
    snprintf(msg, len, "built without CUDA");
    return DEVCOMM_FAILED;
}
int devcomm_connect(gl_devcomm *c, const unsigned char id[DEVCOMM_ID_BYTES], int rank, int world, char *msg,
                    size_t len) {
    (void)c, (void)id, (void)rank, (void)world;
    snprintf(msg, len, "built without CUDA");
    return DEVCOMM_FAILED;
}
int devcomm_state(gl_devcomm *c, char *msg, size_t len) {
    (void)c, (void)msg, (void)len;
    return DEVCOMM_DONE;
}
int devcomm_allreduce(gl_devcomm *c, float *buf, int64_t count, char *msg, size_t len) {
    (void)c, (void)buf, (void)count;
    snprintf(msg, len, "built without CUDA");
    return DEVCOMM_FAILED;
}
void devcomm_join(gl_devcomm *c) { (void)c; }
int devcomm_joined(gl_devcomm *c, char *msg, size_t len) {
    (void)c, (void)msg, (void)len;
    return DEVCOMM_DONE;
}
int devcomm_finalize(gl_devcomm *c, char *msg, size_t len) {
    (void)c, (void)msg, (void)len;
    return DEVCOMM_DONE;
}
void devcomm_close(gl_devcomm *c, int abort) { (void)c, (void)abort; }
#else
typedef int devcomm_none_unused_;  // the CUDA build has the real one (ISO C wants a declaration)
#endif
