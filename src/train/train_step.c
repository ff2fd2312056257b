// train_step.c: one global step and one evaluation pass across ranks.
//
// Loss scaling. Every rank's loss gradient is d(mean loss over its rows)/d(out) times
// (its rows / global rows), so the sum over ranks is the gradient of the global batch's mean
// loss: the same as one process computing the whole batch, whatever the split.
//
// fp16 (train.precision) multiplies each part's loss gradient by the dynamic loss scale too
// (c->ls); the optimizer divides it out (optim_step_scaled), so the sums above are unchanged.
//
// Two ways to sum. By default each rank computes its part in one pass and gradients are summed
// by allreduce in buckets during backward (order chosen by MPI: equal to one process within
// rounding). With distributed.deterministic the global batch is cut into `parts` fixed parts;
// each rank computes its parts one after another, every part's gradient is gathered, and all
// ranks add them in part order. A part's arithmetic does not depend on which rank ran it, so
// the result is bitwise the same for any rank count that divides parts. Batch-norm running
// statistics then follow part 0 only (other parts restore them), so they match too.
#include <math.h>
#include <string.h>

#include "galley/check.h"
#include "galley/prof.h"
#include "galley/runlog.h"
#include "galley/grid.h"
#include "train/train_internal.h"

static int64_t state_floats_of(const gl_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->nlayers; i++) n += g->layers[i].state_floats;
    return n;
}

size_t train_ctx_bytes(const recipe_t *r, const gl_graph *g, const gl_dist *d) {
    int parts = r->distributed.deterministic ? (int)(r->distributed.parts ? r->distributed.parts : d->world) : 0;
    int local = parts ? parts / d->world : 1, all = parts ? parts : d->world;
    size_t b = sizeof(double) * (size_t)STEP_VEC * (size_t)(local + all) + 4 * GL_ARENA_ALIGN;
    b += sizeof(float) * (size_t)state_floats_of(g);
    if (parts) {
        b += sizeof(float) * (size_t)g->nparams * (size_t)local;
        if (d->world > 1) b += sizeof(float) * (size_t)g->nparams * (size_t)parts;
    }
    return b;
}

static void bn_sum(void *ctx, double *buf, int count) {
    train_ctx *c = ctx;
    dist_sum_doubles(c->d, buf, count, "the sync_batchnorm statistics", c->step);
}

void train_ctx_init(train_ctx *c, const recipe_t *r, gl_dist *d, gl_graph *g, const gl_loss *loss, gl_optim *opt,
                    const gl_dataset *train, gl_arena *a) {
    memset(c, 0, sizeof *c);
    c->r = r, c->d = d, c->g = g, c->be = g->be, c->loss = loss, c->opt = opt;
    c->parts = r->distributed.deterministic ? (int)(r->distributed.parts ? r->distributed.parts : d->world) : 0;
    c->local_parts = c->parts ? c->parts / d->world : 1;
    int all = c->parts ? c->parts : d->world;
    c->part_vec = arena_alloc(a, sizeof(double) * (size_t)STEP_VEC * (size_t)c->local_parts);
    c->all_vec = arena_alloc(a, sizeof(double) * (size_t)STEP_VEC * (size_t)all);
    c->state_floats = state_floats_of(g);
    if (c->state_floats) c->state_tmp = arena_floats(a, c->state_floats);
    if (c->parts) {
        c->part_grads = arena_floats(a, g->nparams * c->local_parts);
        c->all_grads = d->world > 1 ? arena_floats(a, g->nparams * c->parts) : c->part_grads;
    } else {
        c->sync = gradsync_new(d, g, r->distributed.bucket_mb, r->distributed.overlap);
    }
    if (r->distributed.sync_batchnorm && d->world > 1) {
        c->bn_sum = (gl_reducer){bn_sum, c};
        g->reduce = &c->bn_sum;
    }
    metrics_init_run(&c->lm, train, r);
    metrics_init_run(&c->sm, train, r);
}

static void split_sum(void *ctx, double *buf, int count) {
    train_ctx *c = ctx;
    dist_sum_doubles(&c->grid->tpd, buf, count, "the gradient norm's sum over the tensor group", c->step);
}

void train_ctx_grid(train_ctx *c, gl_dist *world, struct gl_grid *grid, const gl_graph *full) {
    c->world = world, c->grid = grid, c->full = full;
    if (grid->tp > 1) {
        c->split_sum = (gl_reducer){split_sum, c};
        c->opt->split_sum = &c->split_sum;
    }
}

void train_ctx_free(train_ctx *c) { gradsync_free(c->sync); }

static void state_save(train_ctx *c) {
    int64_t o = 0;
    for (int i = 0; i < c->g->nlayers; i++) {
        const layer_t *l = &c->g->layers[i];
        if (l->state_floats) memcpy(c->state_tmp + o, l->state, sizeof(float) * (size_t)l->state_floats);
        o += l->state_floats;
    }
}

static void state_restore(train_ctx *c) {
    int64_t o = 0;
    for (int i = 0; i < c->g->nlayers; i++) {
        layer_t *l = &c->g->layers[i];
        if (l->state_floats) memcpy(l->state, c->state_tmp + o, sizeof(float) * (size_t)l->state_floats);
        o += l->state_floats;
    }
}

void train_share_state(train_ctx *c, int64_t step) {
    if (c->d->world == 1 || !c->state_floats) return;
    for (int i = 0; i < c->g->nlayers; i++) {
        layer_t *l = &c->g->layers[i];
        if (l->state_floats) dist_bcast_floats(c->d, l->state, l->state_floats, 0, "sharing batch-norm statistics", step);
    }
}

// Rows [off, off + n) of batch b into the model input; returns the labels/values pointers.
static void load_rows(train_ctx *c, const gl_batch *b, int64_t off, int64_t n, const int32_t **lab, const float **val) {
    const int64_t size = c->g->input.size, ts = c->loss->tsize;
    if (n && !(c->staged && off == 0 && n == b->n))
        c->be->upload(c->g->input.data, b->x + off * size, sizeof(float) * (size_t)(n * size));
    *lab = b->labels ? b->labels + off * ts : NULL;
    *val = b->values ? b->values + off * ts : NULL;
}

// Forward and loss of n rows already in the input; the loss gradient scaled to the global batch.
// Fills this part's packed metrics into v. Returns the part's mean loss (0 for no rows).
static double part_forward(train_ctx *c, int64_t n, int64_t global_n, const int32_t *lab, const float *val,
                           double *v, bool train) {
    gl_tensor *o = graph_output(c->g);
    double l = 0;
    metrics_reset(&c->lm);
    if (n > 0) {
        prof_push("forward");
        graph_forward(c->g, n, train);
        prof_pop();
        l = loss_compute(c->loss, c->be, o, n, lab, val, train ? o->grad : NULL);
        // This part's share of the global batch, times fp16's loss scale (a power of two: exact).
        float f = n != global_n ? (float)n / (float)global_n : 1.0f;
        if (c->ls.on) f *= (float)c->ls.scale;
        if (train && f != 1.0f) c->be->scale(n * o->size, f, o->grad, o->grad);
        metrics_add(&c->lm, c->be, o, n, lab, val, l);
    }
    metrics_pack(&c->lm, v);
    v[GL_METRICS_PACKED] = n > 0 && !isfinite(l);
    return l;
}

// Sums rows of STEP_VEC doubles in order into dst.
static void fold_vecs(const double *all, int rows, double *dst) {
    memcpy(dst, all, sizeof(double) * STEP_VEC);
    for (int p = 1; p < rows; p++)
        for (int k = 0; k < STEP_VEC; k++) dst[k] += all[p * STEP_VEC + k];
}

static double finish_vec(train_ctx *c, const double *v, int *nonfinite) {
    metrics_reset(&c->sm);
    metrics_add_packed(&c->sm, v);
    *nonfinite = v[GL_METRICS_PACKED] > 0;
    for (int f = 0; f < FLAG_COUNT; f++) c->flags[f] = v[GL_METRICS_PACKED + 1 + f];
    // The losses were summed over the data-parallel group (the tensor group's ranks compute the
    // same ones); a stop or checkpoint wish must reach every rank: over the tensor group too.
    if (c->grid && c->grid->tp > 1)
        dist_sum_doubles(&c->grid->tpd, c->flags, FLAG_COUNT, "the step's flags over the tensor group", c->step);
    return c->sm.samples > 0 ? c->sm.loss_sum / (double)c->sm.samples : 0.0;
}

static double step_summed(train_ctx *c, const gl_batch *b, int64_t step, const double *flags, int *bad) {
    gl_graph *g = c->g;
    int64_t lo, cnt;
    loader_shard(b->global_n, c->d->rank, c->d->world, &lo, &cnt);
    const int32_t *lab;
    const float *val;
    load_rows(c, b, 0, b->n, &lab, &val);
    g->row0 = lo;
    g->step = step;
    double *v = c->part_vec;
    part_forward(c, b->n, b->global_n, lab, val, v, true);
    *bad = v[GL_METRICS_PACKED] > 0;
    for (int f = 0; f < FLAG_COUNT; f++) v[GL_METRICS_PACKED + 1 + f] = flags[f];
    // One small reduction per step: losses, metrics and flags, so every rank sees the same
    // loss and stops (non-finite, signal, time limit, checkpoint) at the same step.
    double t0 = runlog_now();
    dist_sum_doubles(c->d, v, STEP_VEC, "the step's loss and metrics reduction", step);
    double t1 = runlog_now();
    c->comm_s = c->d->world > 1 ? t1 - t0 : 0;  // one process: nothing was communicated
    int nonfinite;
    double loss = finish_vec(c, v, &nonfinite);
    if (nonfinite) return isfinite(loss) ? NAN : loss;
    gradsync_begin(c->sync, step);
    prof_push("backward");
    if (b->n > 0) graph_backward(g, b->n);
    else g->be->zero(g->grads, sizeof(float) * (size_t)g->nparams), g->be->sync();
    c->bwd_s = runlog_now() - t1;
    prof_pop();
    prof_push("allreduce");
    c->comm_s += gradsync_finish(c->sync);  // the part backward did not hide
    prof_pop();
    return loss;
}

static double step_parts(train_ctx *c, const gl_batch *b, int64_t step, const double *flags, int *bad) {
    gl_graph *g = c->g;
    const int64_t np = g->nparams;
    int64_t lo_r, cnt_r;
    loader_shard(b->global_n, c->d->rank, c->d->world, &lo_r, &cnt_r);
    *bad = 0;
    for (int j = 0; j < c->local_parts; j++) {
        int p = c->d->rank * c->local_parts + j;
        int64_t lo, n;
        loader_shard(b->global_n, p, c->parts, &lo, &n);
        const int32_t *lab;
        const float *val;
        load_rows(c, b, lo - lo_r, n, &lab, &val);
        g->row0 = lo;
        g->step = step;
        double *v = c->part_vec + (size_t)j * STEP_VEC;
        if (c->state_floats && p > 0) state_save(c);  // running statistics follow part 0 only
        part_forward(c, n, b->global_n, lab, val, v, true);
        if (c->state_floats && p > 0) state_restore(c);
        for (int f = 0; f < FLAG_COUNT; f++) v[GL_METRICS_PACKED + 1 + f] = j == 0 ? flags[f] : 0;
        float *pg = c->part_grads + (size_t)j * (size_t)np;
        if (v[GL_METRICS_PACKED] > 0) {
            *bad = 1;
            memset(pg, 0, sizeof(float) * (size_t)np);
        } else if (n > 0) {
            double tb = runlog_now();
            prof_push("backward");
            graph_backward(g, n);
            prof_pop();
            c->bwd_s += runlog_now() - tb;
            memcpy(pg, g->grads, sizeof(float) * (size_t)np);
        } else {
            memset(pg, 0, sizeof(float) * (size_t)np);
        }
    }
    double t0 = runlog_now();
    dist_gather_doubles(c->d, c->part_vec, STEP_VEC * c->local_parts, c->all_vec, "the step's loss and metrics gather",
                        step);
    double v[STEP_VEC];
    fold_vecs(c->all_vec, c->parts, v);
    int nonfinite;
    double loss = finish_vec(c, v, &nonfinite);
    if (nonfinite) {
        c->comm_s = runlog_now() - t0;
        return isfinite(loss) ? NAN : loss;
    }
    if (c->d->world > 1)
        dist_gather_floats(c->d, c->part_grads, np * c->local_parts, c->all_grads, "the gradient gather", step);
    // Part order, element by element: the same sums for any thread count too.
    const float *all = c->all_grads;
    float *dst = g->grads;
    memcpy(dst, all, sizeof(float) * (size_t)np);
    for (int p = 1; p < c->parts; p++) {
        const float *src = all + (size_t)p * (size_t)np;
#pragma omp parallel for schedule(static) if (np >= 65536)
        for (int64_t i = 0; i < np; i++) dst[i] += src[i];
    }
    c->comm_s = runlog_now() - t0;
    return loss;
}

double train_step(train_ctx *c, const gl_batch *b, int64_t step, const double *flags, int *bad) {
    c->comm_s = c->bwd_s = 0;
    c->step = step;
    return c->parts ? step_parts(c, b, step, flags, bad) : step_summed(c, b, step, flags, bad);
}

int train_evaluate(train_ctx *c, gl_loader *lv, gl_metrics *m, int64_t step, FILE *err) {
    metrics_reset(m);
    c->step = step;
    c->staged = false;  // evaluation batches are copied by each part as it goes
    train_share_state(c, step);
    for (int64_t i = 0, nb = loader_batches_per_epoch(lv); i < nb; i++) {
        gl_batch b;
        if (loader_next(lv, &b, err)) {
            if (c->d->world == 1) return -1;
            fprintf(err, "galley: error: rank %d of %d: a validation batch could not be read (above); ending the job\n",
                    c->d->rank, c->d->world);
            dist_abort(c->d, GL_EXIT_RUNTIME);  // the other ranks would wait for this one's metrics
        }
        const int32_t *lab;
        const float *val;
        if (!c->parts) {
            if (c->stage) input_stage_targets(c->stage, &b);  // beside the input, not in a loss buffer
            load_rows(c, &b, 0, b.n, &lab, &val);
            double v[STEP_VEC];
            part_forward(c, b.n, b.global_n, lab, val, v, false);
            metrics_add_packed(m, v);
        } else {
            // Part by part, gathered and added in part order: bitwise the same for any rank count.
            int64_t lo_r, cnt_r;
            loader_shard(b.global_n, c->d->rank, c->d->world, &lo_r, &cnt_r);
            for (int j = 0; j < c->local_parts; j++) {
                int64_t lo, n;
                loader_shard(b.global_n, c->d->rank * c->local_parts + j, c->parts, &lo, &n);
                load_rows(c, &b, lo - lo_r, n, &lab, &val);
                part_forward(c, n, b.global_n, lab, val, c->part_vec + (size_t)j * STEP_VEC, false);
            }
            dist_gather_doubles(c->d, c->part_vec, STEP_VEC * c->local_parts, c->all_vec,
                                "the evaluation's metrics gather", step);
            double v[STEP_VEC];
            fold_vecs(c->all_vec, c->parts, v);
            metrics_add_packed(m, v);
        }
        loader_release(lv, &b);
    }
    if (!c->parts) {
        double v[GL_METRICS_PACKED];
        metrics_pack(m, v);
        dist_sum_doubles(c->d, v, GL_METRICS_PACKED, "the evaluation's metrics reduction", step);
        metrics_reset(m);
        metrics_add_packed(m, v);
    }
    return 0;
}
