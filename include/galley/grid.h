// grid.h: the world as a grid of data-parallel groups x tensor-parallel groups
// (distributed.tensor_parallel). Each rank belongs to one tensor group (the ranks holding one
// model between them, tp.h) and one data group (the ranks whose gradients are summed: the same
// tensor rank in every tensor group). distributed.tensor_order tensor_first (the default) makes
// tensor groups of consecutive ranks, which launchers place on one node first (their sums run
// at every layer); data_first makes data groups of consecutive ranks instead.
//
//   world rank w, tensor_first: tensor rank w % tp, data rank w / tp
//                 data_first:   tensor rank w / dp, data rank w % dp
#ifndef GALLEY_GRID_H
#define GALLEY_GRID_H

#include <stdbool.h>
#include <stdio.h>

#include "galley/dist.h"
#include "galley/tp.h"

typedef struct gl_grid {
    int tp, dp;            // group sizes: tp x dp = world
    int tp_rank, dp_rank;  // this rank's place
    bool tensor_first;
    gl_dist tpd, dpd;      // the tensor group and the data group as ranks of their own
    gl_tp view;            // what the layers call (its ctx is this grid)
    const gl_backend *be;  // set by grid_bind: device memory is synchronised before a sum
    const int64_t *step;   // set by grid_bind: names the step in timeout messages (NULL: 0)
    void *nccl;            // gl_devcomm of the tensor group on GPUs, or NULL (MPI)
    void *reqs;            // GRID_REQS MPI requests for the group's sums
} gl_grid;

#define GRID_REQS 16  // pieces of 2^26 floats a sum takes without an allocation of its own

// The place of world rank w in a grid of tp x (world / tp).
void grid_place(int w, int world, int tp, bool tensor_first, int *tp_rank, int *dp_rank);
// Splits world into the grid (collective over world). groups: distributed.tensor_parts in
// deterministic mode (0: not deterministic). tp must divide the world (checked by the caller).
void grid_open(gl_grid *g, gl_dist *world, int tp, int groups, bool tensor_first);
// After the graph is built: device memory (be) and the step counter; on GPUs every rank of the
// tensor group chooses NCCL or MPI for its sums (as the gradient buckets do).
void grid_bind(gl_grid *g, const gl_graph *graph, const int64_t *step);
void grid_close(gl_grid *g);
// "2 data x 2 tensor (tensor groups of consecutive ranks)" and every rank's place, for the banner.
void grid_describe(const gl_grid *g, int world, FILE *out);

#endif
