// data_bench.c: the loader's throughput alone (`galley data bench`), in the three modes of the
// NERSC tutorial's benchy: read only (IO), the full loader as training uses it (FULL), and batches
// copied from memory with nothing read (SYNTHETIC: the loader's own overhead).
#include <string.h>
#include <time.h>

#include "data/source.h"
#include "galley/check.h"
#include "galley/loader.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int loader_bench(const recipe_t *r, int mode, int64_t steps, loader_bench_result *res, FILE *err) {
    memset(res, 0, sizeof *res);
    recipe_t rr = *r;  // a shallow copy: only scalar keys change, r keeps ownership of everything
    if (mode == LOADER_BENCH_READ) {
        rr.data.transform = DATA_TRANSFORM_NONE;
        rr.data.normalize = DATA_NORM_NONE;
        rr.data.timeseries.mean = rr.data.timeseries.std = NULL;  // the time-series source's own normalisation
        memset(&rr.data.augment, 0, sizeof rr.data.augment);
        rr.data.loader.cache = DATA_CACHE_NONE;
    }
    loader_params p;
    loader_default_params(&p);
    p.split = SPLIT_TRAIN;
    p.serve_only = mode == LOADER_BENCH_SERVE;
    gl_loader *L;
    double t0 = now_s();
    if (loader_open(&L, &rr, &p, err)) return GL_EXIT_USAGE;
    res->open_s = now_s() - t0;
    const gl_dataset *d = loader_shape(L);
    res->sample_bytes = (double)(d->size + d->tsize) * 4;
    res->threads = (int)(rr.data.loader.threads);
    res->batch = loader_batch_capacity(L);
    if (mode == LOADER_BENCH_READ && source_ops(r->data.source)->load) {
        // A source held in memory (synthetic) is made when the loader opens: that is its "read".
        res->samples = d->n;
        res->seconds = res->open_s;
        loader_free(L);
        return GL_EXIT_OK;
    }
    if (steps <= 0) steps = loader_batches_per_epoch(L);
    gl_batch b;
    int rc = GL_EXIT_OK;
    t0 = now_s();
    for (int64_t s = 0; s < steps; s++) {
        if (loader_next(L, &b, err)) {
            rc = GL_EXIT_RUNTIME;
            break;
        }
        res->samples += b.n;
        res->batches++;
        loader_release(L, &b);
    }
    res->seconds = now_s() - t0;
    res->skipped = loader_skipped(L, NULL, 0);
    loader_free(L);
    return rc;
}
