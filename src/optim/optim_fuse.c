// optim_fuse.c: the update in backward (optimizer.fuse). Where nothing after backward changes a
// step's update (no clip_norm, no loss scale, no sums across ranks or parts, train.nonfinite:
// stop), each layer's parameters are updated as soon as backward is done with them (the graph's
// params_done hook), while their gradients are still in the cache of the core that wrote them,
// and the first layer's weights, which the next forward reads first, are the last written.
//
// Per chunk, in the hook: its sum of squares (o->partial, as the pass after backward takes it),
// then, unless it or a layer before it (in backward's order) had a non-finite sum, its update
// (the rule's chunk_step). The same chunks, owner threads, arithmetic and sums as optim_step's
// pass: the same bits, for any thread count. optim_step then only adds the partial sums in chunk
// order (and does what backward did not reach). After a non-finite chunk, the layers backward
// reached before it (and its layer's finite chunks) were updated and the rest were not; the run
// stops on the norm (train.nonfinite: stop is a condition of arming) and saves nothing after it.
//
// Measured on a 2-core Xeon (Emerald Rapids; MLP 784-512-512-10, batch 128, 2 threads): this
// path +1.8% samples/s by median of 6 alternating pairs (87.5k against 85.9k); small CNN +0.5%,
// vit-tiny (AdamW) unchanged. The update's own traffic (weights and state, read and written)
// stays: skipping the optimizer altogether ran 103k against 84k, and skipping only the sums of
// squares here +0.7%.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "galley/backend.h"
#include "galley/check.h"
#include "optim/optim_internal.h"
#include "optim/optim_simd.h"

// Chunks [lo, hi) (one layer's): sums of squares, and the updates of the finite ones unless an
// earlier layer had a non-finite one.
static void fuse_chunks(gl_optim *o, int lo, int hi) {
    const optim_simd *os = optim_simd_get();
    const gl_optim_chunk *ch = o->chunks;
    float *w = o->fuse.g->params, *gr = o->fuse.g->grads;
    const bool go = !o->fuse.bad;
    int bad = 0;
#pragma omp parallel if (hi - lo > 1) reduction(| : bad)
    for (int c = lo, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < hi; c++) {
        if (optim_owner(&ch[c], nt) != me) continue;
        const double s = os->sumsq(gr + ch[c].offset, ch[c].len);
        o->partial[c] = s;
        o->fuse.seen[c] = 1;
        if (!isfinite(s)) {
            bad = 1;
        } else if (go) {
            o->rule->chunk_step(o, &o->fuse.a, &ch[c], w, gr);
            o->fuse.seen[c] = 2;
        }
    }
    if (bad) o->fuse.bad = true;
}

// g->params_done: layer's gradients are complete (backward runs layers last to first).
static void fuse_layer_done(void *ctx, int layer) {
    gl_optim *o = ctx;
    const int lo = o->layer_chunk[layer], hi = o->layer_chunk[layer + 1];
    if (lo == hi) return;
    const double t0 = omp_get_wtime();
    fuse_chunks(o, lo, hi);
    o->fuse.seconds += omp_get_wtime() - t0;
}

// Why this step's update cannot run in backward, or NULL.
static const char *fuse_refusal(const gl_optim *o, const gl_graph *g, const char *refuse) {
    if (refuse) return refuse;
    if (!o->rule->chunk_step) return "this optimizer.type needs every gradient before any update";
    if (!isnan(o->clip_norm)) return "optimizer.clip_norm is set";
    if (o->split_sum || g->layer_done) return "the gradients are summed across processes";
    return NULL;
}

bool optim_fuse_arm(gl_optim *o, gl_graph *g, double lr, const char *refuse) {
    o->fuse.armed = false;
    o->fuse.seconds = 0.0;
    g->params_done = NULL;
    // A CPU feature: on a device the update is one pass after backward, and nothing is said.
    if (!o->fuse.on || o->nchunks == 0 || (g->be && g->be->device)) return false;
    o->fuse.tried++;
    o->fuse.why_not = fuse_refusal(o, g, refuse);
    if (o->fuse.why_not) return false;
    GL_CHECK(g->nparams == o->n, "optimizer built for another graph");
    o->fuse.armed = true;
    o->fuse.bad = false;
    o->fuse.a = optim_args(o, false, 1.0f, lr, o->steps + 1);
    o->fuse.g = g;
    memset(o->fuse.seen, 0, (size_t)o->nchunks);
    g->params_done = fuse_layer_done;
    g->params_done_ctx = o;
    return true;
}

void optim_fuse_describe(const gl_optim *o, char *buf, size_t len) {
    buf[0] = 0;
    if (o->fuse.steps > 0)
        snprintf(buf, len, "optimizer: each layer updated inside backward at %lld of %lld steps (optimizer.fuse)",
                 (long long)o->fuse.steps, (long long)o->fuse.tried);
    else if (o->fuse.tried > 0 && o->fuse.why_not)
        snprintf(buf, len, "optimizer: one pass after backward (optimizer.fuse does not apply: %s)", o->fuse.why_not);
}

void optim_fuse_cancel(gl_optim *o) {
    if (!o->fuse.armed) return;
    for (int c = 0; c < o->nchunks; c++) GL_CHECK(o->fuse.seen[c] == 0, "an update in backward was cancelled after it began");
    o->fuse.armed = false;
    o->fuse.g->params_done = NULL;
}

double optim_fuse_finish(gl_optim *o, gl_graph *g, double lr) {
    GL_CHECK(g == o->fuse.g, "an update in backward finished on another graph");
    GL_CHECK((float)lr == o->fuse.a.lr, "an update in backward finished at another learning rate");
    o->fuse.armed = false;
    g->params_done = NULL;
    // Chunks backward did not reach (a batch of no samples, whose gradients are zeros): their sums now.
    bool missed = false;
    for (int c = 0; c < o->nchunks && !missed; c++) missed = o->fuse.seen[c] == 0;
    if (missed) optim_partials(o, g->grads, o->fuse.seen);
    double norm = optim_norm_of_partials(o);
    if (!isfinite(norm)) return norm;  // the chunks not yet updated stay as they are
    // The norm is finite, so every chunk backward reached was updated; those it missed now.
    if (missed) {
        const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel
        for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++)
            if (o->fuse.seen[c] == 0 && optim_owner(&ch[c], nt) == me)
                o->rule->chunk_step(o, &o->fuse.a, &ch[c], g->params, g->grads);
    }
    o->steps++;
    o->fuse.steps++;
    return norm;
}
