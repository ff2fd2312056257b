// grid.c: the data x tensor grid of ranks (grid.h), and the tensor group's sums for the layers.
//
// The sums are bounded like every collective (distributed.timeout) and give every rank of the
// group the same bits: MPI_Allreduce's result is the same on every rank, and the deterministic
// mode gathers the parts and adds them in part order on each rank (tp_ops.c). On a GPU the
// buffers are managed memory: the host waits for the GPU before MPI reads them; with NCCL
// (every rank of the group on a GPU of its own) the sum is queued on NCCL's stream instead.
#include "galley/grid.h"

#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"
#include "galley/check.h"

void grid_place(int w, int world, int tp, bool tensor_first, int *tp_rank, int *dp_rank) {
    const int dp = world / tp;
    *tp_rank = tensor_first ? w % tp : w / dp;
    *dp_rank = tensor_first ? w / tp : w % dp;
}

static int64_t grid_step(const gl_grid *g) { return g->step ? *g->step : 0; }

static void grid_sum(void *ctx, float *buf, int64_t count, const char *what) {
    gl_grid *g = ctx;
    if (g->tp == 1 || count == 0) return;
    const int64_t k = dist_enter(&g->tpd, what, grid_step(g), DIST_ALL);  // numbered for hang reports
    if (g->nccl) {
        gradnccl_allreduce(&g->tpd, g->nccl, buf, count, k);
        gradnccl_wait(&g->tpd, g->nccl, k);
        return;
    }
    if (g->be && g->be->device) g->be->sync();
    // Requests: the grid's own (set up once: this runs at every split layer of every step), or
    // for a sum of over GRID_REQS pieces of 2^26 floats, a larger array for this call.
    const int64_t nreq = count / ((int64_t)1 << 26) + 1;
    void *reqs = nreq <= GRID_REQS ? g->reqs : gl_xmalloc(dist_request_size() * (size_t)nreq);
    int n = 0;
    dist_iallreduce_floats(&g->tpd, buf, count, reqs, &n);
    dist_wait(&g->tpd, n, reqs, k);
    if (reqs != g->reqs) free(reqs);
}

static void grid_gather(void *ctx, const float *mine, int64_t count, float *all, const char *what) {
    gl_grid *g = ctx;
    if (g->be && g->be->device) g->be->sync();
    dist_gather_floats(&g->tpd, mine, count, all, what, grid_step(g));
}

void grid_open(gl_grid *g, gl_dist *world, int tp, int groups, bool tensor_first) {
    memset(g, 0, sizeof *g);
    GL_CHECK(tp >= 1 && world->world % tp == 0, "the caller checks that tensor_parallel divides the world");
    g->tp = tp, g->dp = world->world / tp, g->tensor_first = tensor_first;
    grid_place(world->rank, world->world, tp, tensor_first, &g->tp_rank, &g->dp_rank);
    // The tensor group: the same data rank; the data group: the same tensor rank.
    dist_split(world, g->dp_rank, g->tp_rank, &g->tpd);
    dist_split(world, g->tp_rank, g->dp_rank, &g->dpd);
    g->reqs = gl_xmalloc(dist_request_size() * GRID_REQS);
    g->view = (gl_tp){.size = tp, .rank = g->tp_rank, .groups = groups, .sum = grid_sum, .gather = grid_gather,
                      .ctx = g};
}

void grid_bind(gl_grid *g, const gl_graph *graph, const int64_t *step) {
    g->be = graph->be;
    g->step = step;
    // Like the gradient buckets: NCCL when every rank of the group has a GPU of its own.
    if (g->tp > 1 && graph->be->device && !g->view.groups) g->nccl = gradnccl_open(&g->tpd, graph);
}

void grid_close(gl_grid *g) {
    if (g->nccl) gradnccl_close(&g->tpd, g->nccl);
    dist_split_free(&g->tpd);
    dist_split_free(&g->dpd);
    free(g->reqs);
    memset(g, 0, sizeof *g);
}

void grid_describe(const gl_grid *g, int world, FILE *out) {
    fprintf(out, "grid: %d data-parallel x %d tensor-parallel ranks (%s); rank (data, tensor):", g->dp, g->tp,
            g->tensor_first ? "tensor groups of consecutive ranks, within a node first"
                            : "data groups of consecutive ranks: tensor groups span nodes");
    for (int w = 0; w < world; w++) {
        int t, d;
        grid_place(w, world, g->tp, g->tensor_first, &t, &d);
        if (w == 16 && world > 17) {
            fprintf(out, " ... (%d more)", world - 16);
            break;
        }
        fprintf(out, "%s %d (%d, %d)", w ? "," : "", w, d, t);
    }
    fputc('\n', out);
}
