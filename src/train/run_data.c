// run_data.c: a run's data and model plan. The data first: its loaders check files and datasets
// (exit 2 naming them) and give the shapes the model is built for. They own their memory,
// counted in the plan. Then every byte of the model is planned and refused if it cannot fit,
// before anything is allocated (run_open.c allocates it once).
#include "galley/arena.h"
#include "galley/check.h"
#include "train/run.h"

int run_open_data(gl_run *u) {
    const recipe_t *r = u->r;
    const gl_dist *d = u->dp;  // the data-parallel group: all of u->d without tensor parallelism
    loader_params lpt, lpv;
    loader_default_params(&lpt);
    loader_default_params(&lpv);
    lpt.split = SPLIT_TRAIN;
    lpv.split = SPLIT_VAL;
    lpt.rank = lpv.rank = d->rank;
    lpt.world = lpv.world = d->world;
    lpt.start = u->resume_step;
    lpt.node_ranks = lpv.node_ranks = u->d->local_world;  // data.loader.cache: auto shares the node's memory
    u->loader_bytes = loader_plan_bytes(r, &lpt) + loader_plan_bytes(r, &lpv);
    u->host = arena_host_memory();
    u->staging = !r->distributed.deterministic;
    if (u->host && (double)u->loader_bytes > 0.9 * (double)u->host) {
        fprintf(u->err, "%s: error: the data loaders need %.2f GiB of memory but the machine has %.2f GiB; reduce the "
                        "data set, data.loader.prefetch or data.loader.cache\n",
                r->file, u->loader_bytes / 1073741824.0, u->host / 1073741824.0);
        return GL_EXIT_USAGE;
    }
    const double t_open = now_s();  // synthetic data is generated, HDF5 checked and staged, here
    int failed = loader_open(&u->lt, r, &lpt, u->err) != 0 || loader_open(&u->lv, r, &lpv, u->err) != 0;
    u->t_data = now_s() - t_open;
    if (r->data.loader.stage) u->t_stage0 = t_open, u->t_stage1 = t_open + u->t_data;  // MLPerf's staging
    if (failed) return GL_EXIT_USAGE;
    u->train = *loader_shape(u->lt), u->val = *loader_shape(u->lv);
    u->batch = loader_batch_capacity(u->lt);
    // The model's errors come from the recipe alone, the same on every rank: rank 0 says them.
    FILE *quiet = u->d->rank == 0 ? NULL : fopen("/dev/null", "w"), *err = quiet ? quiet : u->err;
    int code = GL_EXIT_OK;
    if (train_check_splits(r, &u->train, &u->val, err) != 0 ||
        graph_build_tp(&u->g, r, u->train.shape,
                       u->batch > loader_batch_capacity(u->lv) ? u->batch : loader_batch_capacity(u->lv), u->be,
                       run_grid_tp(u), err) != 0 ||
        run_grid_full(u) != GL_EXIT_OK || train_check_model(r, &u->g, &u->train, err) != 0)
        code = GL_EXIT_USAGE;
    if (quiet) fclose(quiet);
    return code;
}

int run_plan(gl_run *u) {
    const recipe_t *r = u->r;
    const gl_dist *d = u->dp;  // the data-parallel group: all of u->d without tensor parallelism
    // Synchronised batch norm needs every rank in every batch (each joins the statistics' sum).
    int64_t tail =
        r->data.loader.drop_last ? 0 : u->train.n % (r->train.batch_size < u->train.n ? r->train.batch_size : u->train.n);
    if (r->distributed.sync_batchnorm && d->world > 1 && tail > 0 && tail < d->world) {
        if (u->d->rank == 0)
            fprintf(u->err, "%s: error: distributed.sync_batchnorm: the last batch of each epoch has %lld samples, "
                            "fewer than the %d ranks; set data.loader.drop_last: true or change train.batch_size\n",
                    r->file, (long long)tail, d->world);
        return GL_EXIT_USAGE;
    }
    u->steps_per_epoch = loader_batches_per_epoch(u->lt);
    u->total_steps = r->train.steps > 0 ? r->train.steps : r->train.epochs * u->steps_per_epoch;
    u->epochs = (u->total_steps + u->steps_per_epoch - 1) / u->steps_per_epoch;
    // Plan every byte of the model first, refuse what cannot fit, then allocate once.
    // The next batch's copy overlaps the step (input_stage.c), except for deterministic parts.
    train_plan plan;
    train_plan_of(r, &u->g, &u->train, d, u->staging && u->be->upload_async, u->be->upload_declare != NULL, &plan);
    u->bytes = plan.total;
    // (On a GPU the model's arena is the GPU's memory: cudaMallocManaged reports a shortfall.)
    if (u->host && (double)((u->be->device ? 0 : u->bytes) + u->loader_bytes) > 0.9 * (double)u->host) {
        fprintf(u->err, "%s: error: this run needs %.2f GiB of memory (model %.2f, data %.2f) but the machine has "
                        "%.2f GiB; reduce train.batch_size, the data set or the model\n",
                r->file, (u->bytes + u->loader_bytes) / 1073741824.0, u->bytes / 1073741824.0,
                u->loader_bytes / 1073741824.0, u->host / 1073741824.0);
        return GL_EXIT_USAGE;
    }
    return GL_EXIT_OK;
}
