// graph_tp.c: which layers tensor parallelism splits (graph_build_tp), what the banner says of
// it, and the copies between one rank's parameters and the whole model's (checkpoints, init).
//
// The plan reads the recipe's layers only (kinds and inputs), before any shape is inferred:
// every attention layer is split by heads; a dense layer whose output goes only through
// element-wise layers (layer_kind.elementwise, each read by the next alone) into a second dense
// layer makes an MLP pair, column then row. Every other layer runs whole on every rank.
#include <stdio.h>
#include <string.h>

#include "galley/graph.h"
#include "model/graph_internal.h"

// The layer whose output is input k of layer i (-1: the model input).
static int producer(const gl_graph *g, const recipe_t *r, int i, int k) {
    const layer_cfg *c = &r->model.layers[i];
    if (c->inputs.n == 0) return i - 1;
    if (!strcmp(c->inputs.name[k], "input")) return -1;
    for (int j = i - 1; j >= 0; j--)
        if (!strcmp(r->model.layers[j].name, c->inputs.name[k])) return j;
    (void)g;
    return -1;
}

// The only layer that reads layer i's output, or -1 (none, or more than one).
static int sole_reader(const gl_graph *g, const recipe_t *r, int i) {
    int who = -1;
    for (int j = i + 1; j < g->nlayers; j++) {
        const int nin = r->model.layers[j].inputs.n ? r->model.layers[j].inputs.n : 1;
        for (int k = 0; k < nin; k++)
            if (producer(g, r, j, k) == i) {
                if (who >= 0) return -1;
                who = j;
            }
    }
    return who;
}

static bool is_kind(const layer_cfg *c, const char *name) { return !strcmp(c->kind->name, name); }

// Layer i is a dense layer starting an MLP pair: the index of its second dense, else -1.
static int mlp_partner(const gl_graph *g, const recipe_t *r, int i) {
    int j = sole_reader(g, r, i);
    while (j >= 0 && r->model.layers[j].kind->elementwise) {
        if (r->model.layers[j].inputs.n > 1) return -1;
        j = sole_reader(g, r, j);
    }
    if (j < 0 || !is_kind(&r->model.layers[j], "dense") || r->model.layers[j].inputs.n > 1) return -1;
    return j;
}

// Sets every layer's tp and tp_role. 0, or -1 when tp splits nothing (printed at the key).
int graph_tp_plan(gl_graph *g, const recipe_t *r, FILE *err) {
    int split = 0;
    for (int i = 0; i < g->nlayers; i++) g->layers[i].tp = g->tp, g->layers[i].tp_role = GL_TP_NONE;
    if (!g->tp) return 0;
    for (int i = 0; i < g->nlayers; i++) {
        const layer_cfg *c = &r->model.layers[i];
        if (is_kind(c, "attention")) {
            g->layers[i].tp_role = GL_TP_HEADS, split++;
        } else if (is_kind(c, "dense") && g->layers[i].tp_role == GL_TP_NONE) {
            int j = mlp_partner(g, r, i);
            if (j < 0) continue;
            g->layers[i].tp_role = GL_TP_COLUMN, g->layers[j].tp_role = GL_TP_ROW, split++;
        }
    }
    if (split) return 0;
    yt_mark m = recipe_mark(r, "distributed.tensor_parallel");
    fprintf(err, "%s:%d:%d: error: distributed.tensor_parallel: %d, but this model has no layer to split (tensor "
                 "parallelism splits attention layers by heads and MLP pairs, dense -> activations -> dense); use "
                 "1 and data parallelism\n", m.file, m.line, m.col, g->tp->size);
    return -1;
}

void graph_tp_describe(const gl_graph *g, char *buf, size_t len) {
    const layer_kind *kinds[64];
    int counts[64], nk = 0, heads = 0, pairs = 0;
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        if (l->tp_role == GL_TP_HEADS) heads++;
        if (l->tp_role == GL_TP_COLUMN) pairs++;
        if (l->tp_role != GL_TP_NONE || !l->nparams) continue;  // only replicated parameters matter
        int k = 0;
        while (k < nk && kinds[k] != l->kind) k++;
        if (k == nk && nk < 64) kinds[nk] = l->kind, counts[nk++] = 0;
        if (k < nk) counts[k]++;
    }
    size_t o = (size_t)snprintf(buf, len, "split: %d attention (by heads), %d MLP pair%s (dense column, dense row); "
                                "replicated with parameters:", heads, pairs, pairs == 1 ? "" : "s");
    for (int k = 0; k < nk && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s %d %s", k ? "," : "", counts[k], kinds[k]->name);
    if (!nk && o < len) snprintf(buf + o, len - o, " none");
}

// One tensor: local <-> its slice of full (rank's share; size ranks share it).
static void slice_param(const gl_param *lp, const gl_param *fp, int rank, float *local, float *full, bool to_full) {
    if (lp->split == GL_SPLIT_NONE) {
        memcpy(to_full ? full : local, to_full ? local : full, sizeof(float) * (size_t)lp->size);
        return;
    }
    if (lp->split == GL_SPLIT_COLS) {  // [R, C]: columns rank * C/size .. of every row
        const int64_t rows = fp->shape.d[0], lrow = lp->shape.d[1], frow = fp->shape.d[1];
        for (int64_t i = 0; i < rows; i++) {
            float *l = local + i * lrow, *f = full + i * frow + rank * lrow;
            memcpy(to_full ? f : l, to_full ? l : f, sizeof(float) * (size_t)lrow);
        }
        return;
    }
    // Rows in segments: each segment's rows rank * F/size .. (a row: the other dimensions' elements).
    const int segs = lp->segments > 0 ? lp->segments : 1;
    const int64_t nrows = lp->shape.d[0] / segs, lseg = lp->size / segs, rowlen = lseg / nrows,
                  fseg = fp->size / segs;
    for (int s = 0; s < segs; s++) {
        float *l = local + s * lseg, *f = full + s * fseg + rank * nrows * rowlen;
        memcpy(to_full ? f : l, to_full ? l : f, sizeof(float) * (size_t)lseg);
    }
}

void graph_tp_slice(const gl_graph *local, const gl_graph *full, int rank, float *localbuf, float *fullbuf,
                    bool to_full) {
    for (int i = 0; i < local->nlayers; i++) {
        const layer_t *l = &local->layers[i], *f = &full->layers[i];
        for (int p = 0; p < l->nparams; p++)
            slice_param(&l->params[p], &f->params[p], rank, localbuf + l->params[p].offset,
                        fullbuf + f->params[p].offset, to_full);
    }
}
