// train_ckpt_whole.c: checkpoints under tensor parallelism, written and read whole: in the layout
// of tensor_parallel 1 (the tensors PyTorch loads, `galley ckpt inspect` shows and any grid can
// resume from). The tensor group of data rank 0 gathers its slices onto world rank 0, which
// writes them; on resume world rank 0 reads the whole model and every rank takes its slices.
// Both hold a transient copy of the whole model (parameters and optimizer state) while they run.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/grid.h"
#include "train/train_internal.h"

enum { WHOLE_BUFS = 4 };  // parameters, then the optimizer's velocity, m, v

// This rank's buffers in WHOLE_BUFS order (NULL: the optimizer keeps none of that kind).
static void local_bufs(const train_ctx *c, float *b[WHOLE_BUFS]) {
    b[0] = c->g->params, b[1] = c->opt->velocity, b[2] = c->opt->m, b[3] = c->opt->v;
}

// The whole model's graph and optimizer over the buffers bufs (WHOLE_BUFS, as local_bufs).
static void whole_view(const train_ctx *c, float *bufs[WHOLE_BUFS], gl_graph *g, gl_optim *o) {
    *g = *c->full;
    *o = *c->opt;
    g->params = bufs[0];
    o->n = g->nparams;
    o->velocity = bufs[1], o->m = bufs[2], o->v = bufs[3];
    // Layers that keep state (batch norm) are never split: this rank's is the whole one.
    for (int i = 0; i < g->nlayers; i++) g->layers[i].state = c->g->layers[i].state;
}

int train_whole_gather(train_ctx *c, float *bufs[WHOLE_BUFS], gl_graph *wg, gl_optim *wo, int64_t step) {
    memset(bufs, 0, sizeof(float *) * WHOLE_BUFS);
    if (c->d->rank != 0) return 0;  // only the tensor group of data rank 0 takes part
    const gl_grid *gr = c->grid;
    const int64_t n = c->g->nparams, whole = c->full->nparams;
    const bool root = gr->tp_rank == 0;
    float *mine[WHOLE_BUFS];
    local_bufs(c, mine);
    float *all = gl_xmalloc(sizeof(float) * (size_t)(gr->tp * n + 1));
    for (int b = 0; b < WHOLE_BUFS; b++) {
        if (!mine[b]) continue;
        dist_gather_floats((gl_dist *)&gr->tpd, mine[b], n, all, "gathering the checkpoint's tensors", step);
        if (!root) continue;
        bufs[b] = gl_xmalloc(sizeof(float) * (size_t)(whole + 1));
        for (int r = 0; r < gr->tp; r++) graph_tp_slice(c->g, c->full, r, all + (int64_t)r * n, bufs[b], true);
    }
    free(all);
    if (root) whole_view(c, bufs, wg, wo);
    return root;
}

void train_whole_free(float *bufs[WHOLE_BUFS]) {
    for (int b = 0; b < WHOLE_BUFS; b++) free(bufs[b]), bufs[b] = NULL;
}

int train_whole_load(train_ctx *c, const char *path, gl_ckpt_state *st, FILE *err) {
    gl_dist *w = c->world;
    const int64_t whole = c->full->nparams;
    float *mine[WHOLE_BUFS], *bufs[WHOLE_BUFS] = {0};
    local_bufs(c, mine);
    for (int b = 0; b < WHOLE_BUFS; b++)
        if (mine[b]) bufs[b] = gl_xmalloc(sizeof(float) * (size_t)(whole + 1));
    int code = GL_EXIT_OK;
    if (w->rank == 0) {
        gl_graph g;
        gl_optim o;
        whole_view(c, bufs, &g, &o);
        char why[1024];
        int rc = ckpt_read(path, c->r, &g, &o, st, why, sizeof why);
        if (rc != 0) {
            fprintf(err, "galley: error: cannot resume: %s\n", why);
            code = rc == -2 ? GL_EXIT_USAGE : GL_EXIT_RUNTIME;
        }
        c->opt->steps = o.steps;
    }
    dist_bcast(w, &code, sizeof code, 0, "reading the checkpoint", 0);
    if (code == GL_EXIT_OK) {
        dist_bcast(w, st, sizeof *st, 0, "sharing the checkpoint", 0);
        dist_bcast(w, &c->opt->steps, sizeof c->opt->steps, 0, "sharing the checkpoint", 0);
        for (int b = 0; b < WHOLE_BUFS; b++) {
            if (!mine[b]) continue;
            dist_bcast_floats(w, bufs[b], whole, 0, "sharing the checkpoint's tensors", 0);
            graph_tp_slice(c->g, c->full, c->grid->tp_rank, mine[b], bufs[b], false);
        }
        for (int i = 0; i < c->g->nlayers; i++) {
            layer_t *l = &c->g->layers[i];
            if (l->state_floats) dist_bcast_floats(w, l->state, l->state_floats, 0, "sharing batch-norm statistics", 0);
        }
    }
    train_whole_free(bufs);
    return code;
}
