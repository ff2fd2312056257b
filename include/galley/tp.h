// tp.h: tensor parallelism as the model sees it (Megatron-style). A tensor group of `size`
// ranks holds one model between them: attention is split by heads (q, k, v column-parallel, the
// output projection row-parallel) and the MLP's dense pair column then row; everything else is
// replicated on every rank of the group. The layers call the group's collectives through this
// struct (src/dist/tp_comm.c fills it), so src/model never includes the distributed layer.
//
// Deterministic mode (groups > 0): every split product is computed as `groups` canonical parts
// of the split dimension (heads or MLP units; groups / size per rank), each part's product with
// the same shapes whatever the layout, and sums over parts run in part order after a gather: any
// tensor_parallel dividing groups gives bitwise the same numbers. Otherwise a rank computes its
// share as one product and the partial sums are summed over the group (MPI_Allreduce or NCCL).
#ifndef GALLEY_TP_H
#define GALLEY_TP_H

#include <stdint.h>

typedef struct gl_tp {
    int size, rank;  // the tensor group; rank in [0, size)
    int groups;      // deterministic: canonical parts (a multiple of size); 0: not deterministic
    // buf[count] summed over the group in place, the same bits on every rank.
    void (*sum)(void *ctx, float *buf, int64_t count, const char *what);
    // all[size * count] = every rank's mine[count] in rank order.
    void (*gather)(void *ctx, const float *mine, int64_t count, float *all, const char *what);
    void *ctx;
} gl_tp;

// How a layer takes part (layer_t.tp_role, set by graph_build).
enum { GL_TP_NONE = 0, GL_TP_HEADS, GL_TP_COLUMN, GL_TP_ROW };

// How a parameter tensor is cut (gl_param.split): not (replicated), along its rows (dimension
// 0, in `segments` equal segments each cut size ways: in_proj's q, k, v) or along its columns
// (dimension 1).
enum { GL_SPLIT_NONE = 0, GL_SPLIT_ROWS, GL_SPLIT_COLS };

#endif
