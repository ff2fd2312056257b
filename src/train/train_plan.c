// train_plan.c: the run's arena, planned in bytes before anything is allocated, by part.
#include "galley/train.h"

#include "galley/optim.h"
#include "train/train_internal.h"

void train_plan_of(const recipe_t *r, const gl_graph *g, const gl_dataset *train, const gl_dist *d, bool staging,
                   bool targets, train_plan *p) {
    p->model = 2 * sizeof(float) * (size_t)g->nparams;
    p->acts = sizeof(float) * (size_t)g->act_floats * (size_t)g->batch;
    p->optim = optim_bytes(r, g);
    p->input = staging ? input_stage_bytes(g, train, targets) : 0;
    // graph_build's plan holds the model, the activations, the layers' state, scratch and work
    // space and alignment; the step's buffers (train_ctx_bytes) and 8 alignments come beside it.
    const size_t graph_rest = g->bytes > p->model + p->acts ? g->bytes - p->model - p->acts : 0,
                 step = train_ctx_bytes(r, g, d) + 8 * GL_ARENA_ALIGN;
    p->other = graph_rest + step;
    p->total = g->bytes + p->optim + step + p->input;
}
