// run_grid.c: distributed.tensor_parallel from the run's side: checks, the grid of ranks, the
// whole model's layout beside this rank's (grid.h, tp.h).
//
// Every rank reads the same recipe and world size, so every rank finds the same error: rank 0
// says it, all return exit 2 together, and none waits in a collective for another.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/optim.h"
#include "train/run.h"

static bool grid_wanted(const recipe_t *r) {
    return r->distributed.tensor_parallel > 1 || (r->distributed.deterministic && r->distributed.tensor_parts > 1);
}

// The canonical parts in deterministic mode (0: not deterministic).
static int grid_groups(const recipe_t *r) {
    if (!r->distributed.deterministic) return 0;
    return (int)(r->distributed.tensor_parts ? r->distributed.tensor_parts : r->distributed.tensor_parallel);
}

// What is wrong with the grid for this world: the key and the message, or NULL.
static const char *grid_problem(const recipe_t *r, int world, const char **key, char *buf, size_t len) {
    const int64_t tp = r->distributed.tensor_parallel, parts = grid_groups(r);
    if (world % tp) {
        *key = "distributed.tensor_parallel";
        snprintf(buf, len, "%lld does not divide the %d ranks of this job (the world is a grid of data-parallel x "
                 "tensor-parallel ranks); use a divisor of %d or launch a multiple of %lld ranks", (long long)tp,
                 world, world, (long long)tp);
        return buf;
    }
    if (parts && parts % tp) {
        *key = "distributed.tensor_parts";
        snprintf(buf, len, "%lld is not a multiple of distributed.tensor_parallel %lld (each tensor rank computes "
                 "tensor_parts / tensor_parallel of the canonical parts)", (long long)parts, (long long)tp);
        return buf;
    }
    if (tp > 1 && r->optimizer.type == OPT_LAMB) {
        *key = "optimizer.type";
        snprintf(buf, len, "lamb's per-tensor trust ratio is not implemented for tensors split over "
                 "distributed.tensor_parallel %lld; use adamw or sgd, or tensor_parallel 1", (long long)tp);
        return buf;
    }
    return NULL;
}

int run_grid_open(gl_run *u) {
    const recipe_t *r = u->r;
    u->dp = u->d;
    if (!grid_wanted(r)) return GL_EXIT_OK;
    const char *key = NULL;
    char buf[512];
    if (grid_problem(r, u->d->world, &key, buf, sizeof buf)) {
        if (u->d->rank == 0) {
            yt_mark m = recipe_mark(r, key);
            fprintf(u->err, "%s:%d:%d: error: %s: %s\n", m.file, m.line, m.col, key, buf);
        }
        return GL_EXIT_USAGE;
    }
    grid_open(&u->grid, u->d, (int)r->distributed.tensor_parallel, grid_groups(r),
              r->distributed.tensor_order == TENSOR_ORDER_TENSOR_FIRST);
    u->grid_on = true;
    u->dp = &u->grid.dpd;
    dist_set_timeout(&u->grid.tpd, r->distributed.timeout);
    dist_set_timeout(&u->grid.dpd, r->distributed.timeout);
    return GL_EXIT_OK;
}

const gl_tp *run_grid_tp(const gl_run *u) { return u->grid_on ? &u->grid.view : NULL; }

int run_grid_full(gl_run *u) {
    if (!u->grid_on || u->grid.tp == 1) return GL_EXIT_OK;  // tensor_parts alone: the layout is whole
    // Batch 1: only the layout is used (names, shapes, offsets); it is never bound.
    if (graph_build(&u->full, u->r, u->train.shape, 1, u->be, u->err) != 0) return GL_EXIT_USAGE;
    u->full_on = true;
    return GL_EXIT_OK;
}

// The whole model's parameters drawn as one rank would draw them, then this rank's slices: a
// run starts from the same weights whatever its grid. (A transient copy of the whole model.)
void run_grid_init_params(gl_run *u) {
    gl_graph *g = &u->g;
    if (!u->full_on) {
        graph_init_params(g, (uint64_t)u->r->seed);
        return;
    }
    gl_graph *f = &u->full;
    float *buf = gl_xmalloc(sizeof(float) * (size_t)(f->nparams ? f->nparams : 1));
    f->params = buf;
    for (int i = 0; i < f->nlayers; i++) f->layers[i].state = g->layers[i].state;  // replicated layers' state
    graph_init_params(f, (uint64_t)u->r->seed);
    graph_tp_slice(g, f, u->grid.tp_rank, g->params, buf, false);
    f->params = NULL;
    free(buf);
}

void run_grid_close(gl_run *u) {
    if (u->full_on) graph_free(&u->full);
    if (u->grid_on) grid_close(&u->grid);
    u->full_on = u->grid_on = false;
    u->dp = u->d;
}
