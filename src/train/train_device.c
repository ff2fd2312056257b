// train_device.c: train.device -> the backend this rank trains on.
#include <stdio.h>

#include "galley/check.h"
#include "galley/prof.h"
#include "train/train_internal.h"

#if !GALLEY_HAVE_CUDA
// Built without nvcc: there is no CUDA backend to bind, and no profiler to start.
const gl_backend *backend_cuda(int ordinal, char *msg, size_t len) {
    (void)ordinal;
    snprintf(msg, len, "this galley was built without CUDA (%s)", GALLEY_CUDA_REASON);
    return NULL;
}
int prof_window(int64_t step, int64_t start_step, int64_t stop_step) {
    (void)step, (void)start_step, (void)stop_step;
    return 0;
}
#endif

// train.precision on the bound GPU: the one in effect, or -1 (printed, with where the key is).
static int pick_precision(const recipe_t *r, const gl_dist *d, const gl_backend *be, FILE *err) {
    if (!be->set_precision) return PRECISION_FP32;
    char msg[512] = "";
    int p = be->set_precision(r->train.precision, msg, sizeof msg);
    if (p >= 0) return p;
    yt_mark m = recipe_mark(r, "train.precision");
    char who[32] = "";
    if (d->world > 1) snprintf(who, sizeof who, " (rank %d)", d->rank);
    fprintf(err, "%s:%d:%d: error: train.precision: %s cannot be used%s: %s\n  hint: set train.precision: auto "
                 "(it picks what the GPU supports) or fp32\n",
            m.file, m.line, m.col, recipe_precision_name(r->train.precision), who, msg);
    return -1;
}

const gl_backend *train_pick_backend(const recipe_t *r, const gl_dist *d, char *desc, size_t len, char *note,
                                     size_t note_len, int *precision, FILE *err) {
    note[0] = '\0';
    *precision = PRECISION_FP32;  // the CPU's only one (the recipe refuses others with train.device cpu)
    if (r->train.device == DEVICE_CPU) {
        snprintf(desc, len, "cpu");
        return backend_cpu();
    }
    char msg[512];
    const gl_backend *be = backend_cuda(d->local_rank, msg, sizeof msg);
    if (be) {
        snprintf(desc, len, "cuda (%s)", msg);
        *precision = pick_precision(r, d, be, err);
        return *precision >= 0 ? be : NULL;
    }
    if (r->train.device == DEVICE_CUDA) {
        // Every rank that cannot bind says so: on a mixed allocation it is not always rank 0.
        char who[32] = "";
        if (d->world > 1) snprintf(who, sizeof who, " (rank %d)", d->rank);
        fprintf(err, "%s: error: train.device is cuda but no GPU can be used%s: %s\n  hint: set train.device: auto "
                     "(or cpu) to train on the CPU\n", r->file, who, msg);
        return NULL;
    }
    // auto without a GPU: an explicit reduced precision is said in the same line, never dropped silently.
    char also[160] = "";
    if (r->train.precision > PRECISION_FP32)
        snprintf(also, sizeof also, "; train.precision %s applies on GPUs, the CPU trains in fp32",
                 recipe_precision_name(r->train.precision));
    if (d->rank == 0) snprintf(note, note_len, "galley: no GPU to use (%s): training on the CPU%s\n", msg, also);
    snprintf(desc, len, "cpu");
    return backend_cpu();
}
