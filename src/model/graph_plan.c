// graph_plan.c: where each layer output's gradient lies. Backward runs the layers last to first;
// an output's gradient is needed from the first layer that writes it (its last reader; the loss
// for the model's output) down to the layer that made it, and no longer. Gradients whose spans
// do not meet share memory, so together they take about the widest cut through the network
// instead of its whole depth: for a chain, two layers' worth.
#include <stdlib.h>

#include "galley/check.h"
#include "model/graph_internal.h"

typedef struct {
    int top, bottom;  // backward runs layer `top` first, layer `bottom` last while it is live
    int64_t size, off;  // floats per sample, rounded to the arena's alignment
    int layer;
} grad_span;

// The first layer to write layer i's output gradient in backward: its last reader; the loss
// (nlayers) for the model's output; the layer itself for an output nobody reads (zeroed there).
static int span_top(const gl_graph *g, int i) {
    if (i == g->nlayers - 1) return g->nlayers;
    for (int j = g->nlayers - 1; j > i; j--)
        for (int k = 0; k < g->layers[j].nin; k++)
            if (g->layers[j].in[k] == &g->layers[i].out) return j;
    return i;
}

// The last layer of i's grad_with chain (graph_share_grads): the one whose gradient i's is.
static int grad_root(const gl_graph *g, int i) {
    while (g->layers[i].grad_with) i = (int)(g->layers[i].grad_with - g->layers);
    return i;
}

static bool spans_meet(const grad_span *a, const grad_span *b) { return a->bottom <= b->top && b->bottom <= a->top; }

// Larger first (they are the hard ones to fit), then in layer order, so the plan is the same on every run.
static int by_size(const void *pa, const void *pb) {
    const grad_span *a = pa, *b = pb;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    return a->layer - b->layer;
}

static int by_off(const void *pa, const void *pb) {
    const grad_span *a = *(const grad_span *const *)pa, *b = *(const grad_span *const *)pb;
    return a->off < b->off ? -1 : a->off > b->off;
}

int64_t graph_plan_grads(gl_graph *g, bool share) {
    const int64_t align = GL_ARENA_ALIGN / (int64_t)sizeof(float);  // floats per sample: aligned at any batch
    int n = g->nlayers;
    if (n == 0) return 0;
    grad_span *s = gl_xcalloc((size_t)n, sizeof *s);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        s[i] = (grad_span){.top = span_top(g, i), .bottom = i, .layer = i,
                           .size = (g->layers[i].out.size + align - 1) / align * align};
        if (g->layers[i].grad_with) s[i].size = 0;  // another's gradient (placed below)
        s[i].off = total;  // kept: one after another
        total += s[i].size;
    }
    // A layer whose backward an activation before it runs (graph_fuse_act_grads: grad_by) reads
    // its output gradient at that activation's turn, while the activation writes its own input
    // gradient: the span reaches down to the activation. Without this, a max_pool's dy could
    // share memory with the dx it writes (a conv -> relu -> max_pool -> conv chain did).
    for (int j = 0; j < n; j++)
        if (g->layers[j].grad_by) {
            int k = (int)(g->layers[j].grad_by - g->layers);
            if (j < s[k].bottom) s[k].bottom = j;
        }
    // A gradient shared with a later layer's (grad_with: graph_share_grads) is live from that
    // one's first writer down to its own layer (or the activation that reads it, above): the
    // chain's last layer's span reaches down that far, and all of them lie where it is placed.
    for (int i = 0; i < n; i++)
        if (g->layers[i].grad_with) {
            int r = grad_root(g, i);
            if (s[i].bottom < s[r].bottom) s[r].bottom = s[i].bottom;
        }
    if (share) {
        // First fit, largest first: each span goes at the lowest offset where it overlaps no
        // placed span that is live at the same time.
        qsort(s, (size_t)n, sizeof *s, by_size);
        const grad_span **live = gl_xcalloc((size_t)n, sizeof *live);
        total = 0;
        for (int i = 0; i < n; i++) {
            int m = 0;
            for (int j = 0; j < i; j++)
                if (spans_meet(&s[i], &s[j])) live[m++] = &s[j];
            qsort(live, (size_t)m, sizeof *live, by_off);
            int64_t off = 0;
            for (int j = 0; j < m && off + s[i].size > live[j]->off; j++)
                if (live[j]->off + live[j]->size > off) off = live[j]->off + live[j]->size;
            s[i].off = off;
            if (off + s[i].size > total) total = off + s[i].size;
        }
        free(live);
    }
    for (int i = 0; i < n; i++) g->layers[s[i].layer].grad_off = s[i].off;
    for (int i = 0; i < n; i++)
        if (g->layers[i].grad_with) g->layers[i].grad_off = g->layers[grad_root(g, i)].grad_off;
    free(s);
    return total;
}
