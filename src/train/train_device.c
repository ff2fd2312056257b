// train_device.c: train.device -> the backend this rank trains on.
#include <stdio.h>

#include "galley/check.h"
#include "galley/prof.h"
#include "train/train_internal.h"

#if !GALLEY_HAVE_CUDA
// Built without nvcc: there is no CUDA backend to bind, and no profiler to start.
const gl_backend *backend_cuda(int ordinal, char *msg, size_t len) {
    (void)ordinal;
    snprintf(msg, len, "this galley was built without CUDA (nvcc was not found at build time)");
    return NULL;
}
int prof_window(int64_t step, int64_t start_step, int64_t stop_step) {
    (void)step, (void)start_step, (void)stop_step;
    return 0;
}
#endif

const gl_backend *train_pick_backend(const recipe_t *r, const gl_dist *d, char *desc, size_t len, char *note,
                                     size_t note_len, FILE *err) {
    note[0] = '\0';
    if (r->train.device == DEVICE_CPU) {
        snprintf(desc, len, "cpu");
        return backend_cpu();
    }
    char msg[512];
    const gl_backend *be = backend_cuda(d->local_rank, msg, sizeof msg);
    if (be) {
        snprintf(desc, len, "cuda (%s)", msg);
        return be;
    }
    if (r->train.device == DEVICE_CUDA) {
        // Every rank that cannot bind says so: on a mixed allocation it is not always rank 0.
        char who[32] = "";
        if (d->world > 1) snprintf(who, sizeof who, " (rank %d)", d->rank);
        fprintf(err, "%s: error: train.device is cuda but no GPU can be used%s: %s\n  hint: set train.device: auto "
                     "(or cpu) to train on the CPU\n", r->file, who, msg);
        return NULL;
    }
    if (d->rank == 0) snprintf(note, note_len, "galley: no GPU to use (%s): training on the CPU\n", msg);
    snprintf(desc, len, "cpu");
    return backend_cpu();
}
