// graph_internal.h: what graph.c and graph_replay.c share: the passes themselves, and the
// replay that stands in for them.
#ifndef GALLEY_GRAPH_INTERNAL_H
#define GALLEY_GRAPH_INTERNAL_H

#include "galley/graph.h"

typedef struct gl_replay gl_replay;

// The layers' forward (rows [0, n)) and backward passes, as issued to the backend, no wait at the end.
void graph_run_forward(gl_graph *g, int64_t n, bool train);
void graph_run_backward(gl_graph *g, int64_t n);
// Replays (recording it first when due) the pass instead of running it: true when it did, false
// when the caller must run the pass itself (recording off or impossible, or its first run).
bool graph_replay_pass(gl_graph *g, int64_t n, bool train, bool backward);
// Places each output's gradient in the pool (layer_t.grad_off; graph_plan.c), sharing memory
// between gradients never live at once when `share`, else one after another. Returns the
// pool's floats per sample.
int64_t graph_plan_grads(gl_graph *g, bool share);
// Sets every layer's tp and tp_role from g->tp (graph_tp.c). 0, or -1 when tensor parallelism
// would split no layer (printed at the recipe key).
int graph_tp_plan(gl_graph *g, const recipe_t *r, FILE *err);
// Frees the recordings (graph_free).
void graph_replay_free(gl_graph *g);

#endif
