// train_device.c: train.device -> the backend this rank trains on.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char where[512], who[32] = "";
    recipe_where(r, "train.precision", where, sizeof where);
    if (d->world > 1) snprintf(who, sizeof who, " (rank %d)", d->rank);
    fprintf(err, "%s: %s cannot be used%s: %s\n  hint: set train.precision: auto (it picks what the GPU supports) "
                 "or fp32\n",
            where, recipe_precision_name(r->train.precision), who, msg);
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

int train_gpu_sharing(const train_gpu_id *all, int world, int rank) {
    if (!all[rank].gpu) return 0;
    int n = 0;
    for (int r = 0; r < world; r++) n += all[r].gpu && !memcmp(all[r].uuid, all[rank].uuid, sizeof all[r].uuid);
    return n;
}

int train_device_fits(const recipe_t *r, const gl_backend *be, gl_dist *d, size_t bytes, FILE *err) {
    // Which GPU every rank holds (its UUID: a hook may show each rank only its own GPU), so that
    // ranks sharing one count each other's plans. CPU ranks join the gather too: all call it.
    train_gpu_id me;
    memset(&me, 0, sizeof me);
    size_t free_b = 0, total = 0, reserve = 0;
    char name[160] = "the GPU";
    if (be->device && be->mem_info) {
        be->mem_info(&free_b, &total, &reserve, me.uuid, name, sizeof name);
        me.gpu = 1;
    }
    train_gpu_id *all = gl_xmalloc(sizeof *all * (size_t)d->world);
    dist_gather_bytes(d, &me, (int)sizeof me, all, "the GPU memory check", 0);
    const int sharing = train_gpu_sharing(all, d->world, d->rank);
    free(all);
    int bad = 0;
    if (me.gpu) {
        double need = ((double)bytes + (double)reserve) * sharing;
        if (need > (double)free_b) {
            bad = 1;
            char who[64] = "";
            if (d->world > 1) snprintf(who, sizeof who, " (rank %d)", d->rank);
            char shared[96] = "";
            if (sharing > 1) snprintf(shared, sizeof shared, " for the %d ranks that share it", sharing);
            fprintf(err, "%s: error%s: this run needs %.2f GiB of GPU memory%s (each: model, activations, "
                         "gradients and optimizer %.2f GiB + up to %.2f GiB of cuDNN workspace and library "
                         "buffers) but %s has %.2f GiB free of %.2f GiB\n"
                         "  hint: reduce train.batch_size or the model; GALLEY_CUDNN_WORKSPACE_MB lowers the "
                         "workspace cap\n",
                    r->file, who, need / 1073741824.0, shared, bytes / 1073741824.0, reserve / 1073741824.0, name,
                    free_b / 1073741824.0, total / 1073741824.0);
        }
    }
    return dist_agree(d, bad ? GL_EXIT_USAGE : GL_EXIT_OK, "checking that its GPU can hold this run", err);
}
