// graph.c: builds the layer graph from the recipe, infers and checks shapes, plans memory, and
// runs forward (recipe order, which is topological) and backward (reverse order).
#include "galley/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "model/graph_internal.h"

static gl_tensor *find_tensor(gl_graph *g, int upto, const char *name) {
    if (!strcmp(name, "input")) return &g->input;
    for (int j = upto - 1; j >= 0; j--)
        if (!strcmp(g->layers[j].cfg->name, name)) return &g->layers[j].out;
    return NULL;
}

// Whether a layer other than `except` reads tensor t.
static bool graph_read_by_other(const gl_graph *g, int except, const gl_tensor *t) {
    for (int j = 0; j < g->nlayers; j++)
        for (int k = 0; k < g->layers[j].nin; k++)
            if (j != except && g->layers[j].in[k] == t) return true;
    return false;
}

// Fuses each activation with the layer before it where that layer's output feeds the activation
// alone: one buffer less (the activation's output is the producer's, which backward reads as its
// input: for relu and leaky_relu, y > 0 exactly where x > 0, and no layer's backward reads its own
// output). Where the producer can apply the activation as it stores (layer.h act_of, takes_act),
// also one pass less forward; otherwise the activation runs in place (act_inplace). Activations
// are not producers here: their buffer may already be shared. A NaN the producer made is then
// seen as relu's 0 by graph_first_nonfinite. Returns the floats per sample saved.
static int64_t graph_fuse_acts(gl_graph *g) {
    int64_t saved = 0;
    for (int i = 1; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i], *p = &g->layers[i - 1];
        gl_act a;
        float slope;
        if (l->nin != 1 || l->in[0] != &p->out || !l->kind->act_of || !l->kind->act_of(l, &a, &slope)) continue;
        if (p->kind->act_of) continue;
        if (graph_read_by_other(g, i, &p->out)) continue;
        if (p->kind->takes_act && p->kind->takes_act(p, g->be, a, slope)) {
            p->store_act_on = true, p->store_act = a, p->store_slope = slope;
            l->act_done = true;
        } else {
            l->act_inplace = true;
        }
        saved += l->out.size;
    }
    return saved;
}

// The layer whose output t is (NULL: the model input).
static layer_t *graph_producer(gl_graph *g, const gl_tensor *t);

// Lets each gelu whose input it alone reads keep its derivative there (layer_t.keep_deriv), on a
// backend that does (gelu_forward_keep): where the producer's backward does not read its own
// output (layer_kind.reads_out) and its buffer is its own (not an activation's, which shares its
// producer's, nor a reshape's, which may become a view of its input's). Not on the model input,
// which the loader owns. Its backward is then a product, or goes into the consumer's store
// (graph_fuse_act_grads); the same bits. Measured on a 2-core Xeon (AVX-512, vit-tiny, 2 threads,
// 40 steps): the gelu's share of perf samples 6.4% -> 3.2%; samples/s +1.3% to +4.1% by median
// in four series of 4 to 6 alternating pairs (the machine's noise is +-4%).
static void graph_keep_derivs(gl_graph *g) {
    if (!g->be->gelu_forward_keep || !g->be->gelu_backward_kept) return;
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *a = &g->layers[i];
        gl_act act;
        float slope;
        if (a->nin != 1 || !a->kind->act_of) continue;
        a->kind->act_of(a, &act, &slope);  // (false for gelu, which is not fused forward: graph_fuse_acts)
        if (act != ACT_GELU || graph_read_by_other(g, i, a->in[0])) continue;
        const layer_t *p = graph_producer(g, a->in[0]);  // NULL: the model input
        if (!p || p->kind->reads_out || p->kind->reshape_only || p->kind->act_of) continue;
        a->keep_deriv = true;
    }
}

// Hands each relu or leaky_relu whose output one layer alone reads to that layer's backward, where
// its kind can apply the derivative as it writes its input gradient (takes_act_grad: a max_pool
// of windows that do not overlap, or a dense layer, whose product stores its input gradient
// through the activation's output as a gate). The activation's backward then runs the consumer's
// backward_act; the consumer's own backward does nothing. The activation keeps its output
// gradient buffer, which nothing writes. Only an activation that alone reads its input, on a
// backend that writes such gradients whole (act_backward_set): it is then always the first to
// write its input gradient, which backward_act sets rather than adds to. Measured on the 2-core EPYC: the relu backward pass was
// 4.3% of the small CNN's step at 2 threads. The same bits (test_graph): each input of a
// non-overlapping pool gets at most one term, the relu's own term.
// A gelu that kept its derivative (graph_keep_derivs) is handed over alike, the derivative its gate.
static void graph_fuse_act_grads(gl_graph *g) {
    for (int i = 1; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i], *a = &g->layers[i - 1];
        gl_act act;
        float slope;
        if (l->nin != 1 || l->in[0] != &a->out || !l->kind->takes_act_grad || !l->kind->backward_act) continue;
        if (a->nin != 1 || !a->kind->act_of) continue;
        if (!a->kind->act_of(a, &act, &slope) && !a->keep_deriv) continue;
        // On the model input there is no input gradient to write (the input has none), so no
        // pass to save: the activation keeps its output gradient (tests read it as dL/dx).
        if (a->in[0] == &g->input) continue;
        if (a->grad_by || graph_read_by_other(g, i, &a->out) || graph_read_by_other(g, i - 1, a->in[0])) continue;
        if (!a->kind->sets_grad || !a->kind->sets_grad(a, g->be, 0)) continue;
        if (!l->kind->takes_act_grad(l, g->be, act, slope)) continue;
        a->grad_by = l;
        l->grad_deferred = true;
    }
}

// Hands each max pool whose windows tile its input (pool_store) to the convolution before it
// (takes_pool), directly or through the relu or leaky_relu it applies as it stores (act_done),
// where that output feeds the pool alone and no backward reads it: the activation's derivative is
// the pool's (grad_by, read from the pool's output), a convolution's backward reads its input,
// and the pool's the argmax. The producer then writes the pool's output and argmax, its own
// output never written nor read back (layer_t.store_pool). Measured on a 2-core Xeon (AVX-512, 2
// threads): see the note at cpu_conv_forward_pool.
static void graph_fuse_pools(gl_graph *g) {
    for (int i = 1; i < g->nlayers; i++) {
        layer_t *pl = &g->layers[i], *a = NULL, *c = &g->layers[i - 1];
        gl_pool_store ps;
        if (pl->nin != 1 || !pl->kind->pool_store || !pl->kind->pool_store(pl, &ps)) continue;
        if (c->act_done) {  // through the activation: its derivative must be the pool's
            a = c, c = i >= 2 ? &g->layers[i - 2] : NULL;
            if (!c || pl->in[0] != &a->out || a->in[0] != &c->out || a->grad_by != pl) continue;
            if (graph_read_by_other(g, i - 1, &c->out)) continue;
        } else if (pl->in[0] != &c->out) {
            continue;
        }
        if (graph_read_by_other(g, i, pl->in[0]) || c->store_pool) continue;
        if (!c->kind->takes_pool || !c->kind->takes_pool(c, g->be, ps.k)) continue;
        c->store_pool = pl, pl->pool_done = true;
    }
}

// The layer whose output t is (NULL: the model input).
static layer_t *graph_producer(gl_graph *g, const gl_tensor *t) {
    for (int j = 0; j < g->nlayers; j++)
        if (&g->layers[j].out == t) return &g->layers[j];
    return NULL;
}

// Makes each reshape_only layer (flatten) whose input it alone reads a view of that input
// (layer_t.view): its output is the input's buffer, no copy (graph_share_grads shares the
// gradient). Not on the model input. An activation after it that runs in place (graph_fuse_acts)
// then writes the producer's buffer, which nothing else reads, and relu's or leaky_relu's sign
// keeps an activation before the view correct as well. Measured on a 2-core Xeon (AVX-512, 2
// threads): flatten's two copies were the small CNN's memcpy, 4.4% of its samples. Returns the
// floats per sample saved.
static int64_t graph_fuse_views(gl_graph *g) {
    int64_t saved = 0;
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        if (!l->kind->reshape_only || l->nin != 1 || l->in[0] == &g->input) continue;
        if (graph_read_by_other(g, i, l->in[0])) continue;
        l->view = true;
        saved += l->out.size;
    }
    return saved;
}

// Fuses each add of two inputs (sums_inputs) with the producer of one of them where that producer
// can add the other as it stores its output (takes_res: a dense layer, attention's output
// projection, on the CPU): the add's forward pass (read both, write the sum) is gone, and its
// output is the producer's buffer (layer_t.res_by), one buffer less. Only where the producer's
// output feeds the add alone (nothing else may see it without the residual) and the residual is
// made by a layer before the producer (it is final when the producer stores). No backward reads
// the producer's output (dense and attention read their inputs and scratch), and the add's
// backward reads only its output gradient. A non-finite sum is seen at the producer
// (graph_first_nonfinite; a residual that was already non-finite, at the layer that made it).
// The same bits (but for which NaN's payload a NaN + NaN keeps): the store adds the residual once,
// as the add did.
// Measured on a 2-core Xeon (AVX-512, vit-tiny's 12 residual adds, 2 threads, 40 steps): the adds'
// forward passes took 1.5 + 1.8 ms a step (per-layer timing, fastest step); the stores that now
// read the residual take about 0.4 ms more; samples/s +0.4% to +6.9% in 11 alternating pairs
// (median +1.8%, every pair faster); activations at batch 64 291.8 -> 255.8 MiB.
static int64_t graph_fuse_adds(gl_graph *g) {
    int64_t saved = 0;
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        if (!l->kind->sums_inputs || l->nin != 2 || l->in[0] == l->in[1]) continue;
        for (int k = 0; k < 2 && !l->res_by; k++) {
            layer_t *p = graph_producer(g, l->in[k]);
            const gl_tensor *res = l->in[1 - k];
            const layer_t *r = graph_producer(g, res);  // NULL: the model input
            if (!p || !p->kind->takes_res || p->store_res || (r && r >= p)) continue;
            if (graph_read_by_other(g, i, &p->out) || !p->kind->takes_res(p, g->be)) continue;
            p->store_res = res;
            l->res_by = p;
            saved += l->out.size;
        }
    }
    return saved;
}

// Gives each input of a grad_is_dy layer (add, flatten) that it alone reads, once, the layer's
// output gradient as its own (grad_shared, and the producer's grad_with): dx = dy without a copy,
// one gradient buffer less. Not the model input (no gradient), not an input read twice by the
// layer, not a producer whose gradient is already another's, and only where the layer writes
// that input's gradient whole (sets_grad: graph_run_backward would otherwise clear it, and so
// clear the layer's own output gradient, before its backward). Measured on a 2-core Xeon (AVX-512,
// 2 threads): vit-tiny's 12 residual adds copied dy to the attention's and the MLP's outputs.
static void graph_share_grads(gl_graph *g) {
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        if (!l->kind->grad_is_dy) continue;
        for (int k = 0; k < l->nin; k++) {
            layer_t *p = graph_producer(g, l->in[k]);
            bool again = false;
            for (int q = 0; q < l->nin; q++) again |= q != k && l->in[q] == l->in[k];
            if (!p || again || p->grad_with || graph_read_by_other(g, i, l->in[k])) continue;
            if (!l->kind->sets_grad || !l->kind->sets_grad(l, g->be, k)) continue;
            l->grad_shared[k] = true;
            p->grad_with = l;
        }
    }
}

bool graph_out_written(const gl_graph *g, int i) {
    const layer_t *l = &g->layers[i];
    return !l->store_pool && !(l->act_done && g->layers[i - 1].store_pool);
}

// The kind's gl_takes against its inputs, and inputs of one layer all tokens or none: 0, or -1
// after printing an error at the layer's recipe line that says what to put in between.
static int graph_check_takes(const layer_t *l, FILE *err) {
    const layer_cfg *c = l->cfg;
    for (int j = 0; j < l->nin; j++) {
        const gl_shape *s = &l->in[j]->shape;
        char shape[64];
        shape_format(s, shape, sizeof shape);
        const char *why = NULL;
        if (l->kind->takes == GL_TAKES_TOKENS && !s->tokens)
            why = "takes tokens [T, D], got %s: put a patch_embed before it (maps -> tokens)";
        else if (l->kind->takes == GL_TAKES_SPATIAL && s->tokens)
            why = "takes maps or vectors [C, ...], got tokens %s: put an unpatch (tokens -> a map), token_pool or "
                  "flatten before it";
        else if (j > 0 && s->tokens != l->in[0]->shape.tokens)
            why = "cannot mix tokens and maps in its inputs (input %s is not like the first)";
        if (why) {
            char what[256];
            snprintf(what, sizeof what, why, shape);
            fprintf(err, "%s:%d:%d: error: model.layers[%d] (%s): %s %s layer %s\n", c->mark.file, c->mark.line,
                    c->mark.col, c->index, c->name, strchr("aeiou", l->kind->name[0]) ? "an" : "a", l->kind->name,
                    what);
            return -1;
        }
    }
    return 0;
}

int graph_build(gl_graph *g, const recipe_t *r, gl_shape input, int64_t batch, const gl_backend *be, FILE *err) {
    return graph_build_tp(g, r, input, batch, be, NULL, err);
}

int graph_build_tp(gl_graph *g, const recipe_t *r, gl_shape input, int64_t batch, const gl_backend *be,
                   const gl_tp *tp, FILE *err) {
    memset(g, 0, sizeof *g);
    g->be = be;
    g->tp = tp;
    g->batch = batch;
    g->input.shape = input;
    g->input.size = shape_size(&input);
    g->nlayers = r->model.nlayers;
    g->layers = gl_xcalloc((size_t)g->nlayers, sizeof(layer_t));
    if (graph_tp_plan(g, r, err) != 0) return -1;
    int64_t act = 0;
    double extra = 0;  // layers' state and scratch, already sized for the batch
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        const layer_cfg *c = &r->model.layers[i];
        l->kind = c->kind;
        l->cfg = c;
        l->index = i;
        l->batch = batch;
        if (c->inputs.n == 0) {
            l->nin = 1;
            l->in[0] = i ? &g->layers[i - 1].out : &g->input;
        } else {
            l->nin = c->inputs.n;
            for (int j = 0; j < c->inputs.n; j++) {
                l->in[j] = find_tensor(g, i, c->inputs.name[j]);
                GL_CHECK(l->in[j], "recipe resolution should have rejected an unknown input name");
            }
        }
        if (l->nin < c->kind->min_inputs || l->nin > c->kind->max_inputs) {
            fprintf(err, "%s:%d:%d: error: model.layers[%d] (%s): a %s layer takes %d to %d inputs, got %d\n",
                    c->mark.file, c->mark.line, c->mark.col, c->index, c->name, c->kind->name, c->kind->min_inputs,
                    c->kind->max_inputs, l->nin);
            return -1;
        }
        if (graph_check_takes(l, err) != 0) return -1;
        char msg[512] = "";
        if (c->kind->infer(l, msg, sizeof msg) != 0) {
            char ins[256] = "", one[64];
            size_t k = 0;
            for (int j = 0; j < l->nin; j++) {
                shape_format(&l->in[j]->shape, one, sizeof one);
                k += (size_t)snprintf(ins + k, sizeof ins - k, j ? ", %s" : "%s", one);
            }
            fprintf(err, "%s:%d:%d: error: model.layers[%d] (%s): %s (input shape %s)\n", c->mark.file, c->mark.line,
                    c->mark.col, c->index, c->name, msg, ins);
            return -1;
        }
        l->out.size = shape_size(&l->out.shape);
        for (int p = 0; p < l->nparams; p++) {
            l->params[p].offset = g->nparams;
            g->nparams += l->params[p].size;
        }
        g->flops += l->flops;
        act += l->out.size;
        extra += (double)l->state_floats + (double)l->scratch_floats;
        if (be->own_conv_workspace && l->kind->im2col_work) l->work_floats = 0;
        if (l->work_floats > g->work_floats) g->work_floats = l->work_floats;
    }
    if (r->model.fuse) {
        act -= graph_fuse_acts(g);
        graph_keep_derivs(g), graph_fuse_act_grads(g), graph_fuse_pools(g);
        act -= graph_fuse_views(g);
        act -= graph_fuse_adds(g);
        graph_share_grads(g);
    }
    g->grad_floats = graph_plan_grads(g, true);
    g->act_floats = act + g->input.size + g->grad_floats;
    // Plan: params + grads, input, every layer's output, the gradients' pool (all for `batch`
    // rows), the layers' state and scratch, one work buffer.
    double floats = 2.0 * (double)g->nparams + (double)g->act_floats * (double)batch + extra + (double)g->work_floats;
    g->bytes = (size_t)(floats * sizeof(float)) + (size_t)(3 * g->nlayers + 6) * GL_ARENA_ALIGN;
    if (floats * sizeof(float) > 1e15) {
        fprintf(err, "%s: error: the model needs %.3g bytes at batch %lld; reduce the batch or the model\n", r->file,
                floats * sizeof(float), (long long)batch);
        return -1;
    }
    return 0;
}

void graph_keep_grads(gl_graph *g) {
    if (g->grads_kept) return;
    int64_t kept = graph_plan_grads(g, false);
    g->bytes += (size_t)((kept - g->grad_floats) * g->batch) * sizeof(float);
    g->act_floats += kept - g->grad_floats;
    g->grad_floats = kept;
    g->grads_kept = true;
}

void graph_bind(gl_graph *g, gl_arena *a) {
    g->params = arena_floats(a, g->nparams);
    g->grads = arena_floats(a, g->nparams);
    g->input.data = arena_floats(a, g->input.size * g->batch);
    g->input.grad = NULL;  // nothing upstream of the data
    g->grad_pool = arena_floats(a, g->grad_floats * g->batch);
    g->work = g->work_floats ? arena_floats(a, g->work_floats) : NULL;
    for (int i = 0; i < g->nlayers; i++) {
        layer_t *l = &g->layers[i];
        // a fused activation's output is its producer's (graph_fuse_acts), a view's its input's
        // (graph_fuse_views), a fused add's the producer's that adds it (graph_fuse_adds;
        // graph_plan_grads placed shared gradients as one)
        l->out.data = l->act_done || l->act_inplace ? g->layers[i - 1].out.data
                      : l->view                      ? l->in[0]->data
                      : l->res_by                    ? l->res_by->out.data
                                                     : arena_floats(a, l->out.size * g->batch);
        l->out.grad = g->grad_pool + l->grad_off * g->batch;
        l->work = l->work_floats ? g->work : NULL;
        l->work_room = l->work ? g->work_floats : 0;
        l->state = l->state_floats ? arena_floats(a, l->state_floats) : NULL;
        l->scratch = l->scratch_floats ? arena_floats(a, l->scratch_floats) : NULL;
        if (l->nparams) {
            l->w = g->params + l->params[0].offset;
            l->dw = g->grads + l->params[0].offset;
        }
    }
}

void graph_init_params(gl_graph *g, uint64_t seed) {
    memset(g->params, 0, sizeof(float) * (size_t)g->nparams);
    for (int i = 0; i < g->nlayers; i++)
        if (g->layers[i].kind->init) g->layers[i].kind->init(&g->layers[i], g->params, seed);
}

void graph_run_forward(gl_graph *g, int64_t n, bool train) {
    for (int i = 0; i < g->nlayers; i++) {
        g->layers[i].seed = g->seed;
        g->layers[i].step = g->step;
        g->layers[i].row0 = g->row0;
        g->layers[i].reduce = g->reduce;
        g->layers[i].kind->forward(&g->layers[i], g->be, n, train);
    }
}

void graph_forward(gl_graph *g, int64_t n, bool train) {
    if (!graph_replay_pass(g, n, train, false)) graph_run_forward(g, n, train);
    g->be->sync();  // the caller reads outputs on the host (metrics) next
}

// Whether a layer after `after` reads tensor t.
static bool graph_read_after(const gl_graph *g, int after, const gl_tensor *t) {
    for (int j = after + 1; j < g->nlayers; j++)
        for (int k = 0; k < g->layers[j].nin; k++)
            if (g->layers[j].in[k] == t) return true;
    return false;
}

static void graph_zero_grad(const gl_graph *g, const gl_tensor *t, int64_t n) {
    g->be->zero(t->grad, sizeof(float) * (size_t)(t->size * n));
}

void graph_run_backward(gl_graph *g, int64_t n) {
    // Gradients accumulate (a tensor may feed several layers), so every one but the output's is
    // cleared, each just before the first layer that writes it (the last that reads it) runs
    // backward: the zeros are then still in cache when that layer adds to them, where clearing
    // all at the start sent tens of MB to memory and back.
    for (int i = g->nlayers - 1; i >= 0; i--) {
        layer_t *l = &g->layers[i];
        // an output nobody reads (a dead branch) has a zero gradient
        if (i < g->nlayers - 1 && !graph_read_after(g, i, &l->out)) graph_zero_grad(g, &l->out, n);
        for (int k = 0; k < l->nin; k++) {
            const gl_tensor *t = l->in[k];
            bool again = false;  // the same tensor twice among this layer's inputs: added to, never set
            for (int q = 0; q < l->nin; q++) again |= q != k && l->in[q] == t;
            bool first = t->grad && !graph_read_after(g, i, t);  // this layer writes it first
            // A layer that can write the gradient whole does so (no clearing pass); else it is cleared
            // here, once, and the layer adds to it.
            l->grad_set[k] = first && !again && l->kind->sets_grad && l->kind->sets_grad(l, g->be, k);
            bool cleared_before = false;
            for (int q = 0; q < k; q++) cleared_before |= l->in[q] == t;
            if (first && !l->grad_set[k] && !cleared_before) graph_zero_grad(g, t, n);
        }
        if (l->kind->backward) l->kind->backward(l, g->be, n);
        // Buckets handed to MPI are read from the host: they must be complete first. NCCL's are
        // ordered on the GPU (layer_done_on_device), so backward runs on without waiting.
        if (g->layer_done) {
            if (g->be->device && !g->layer_done_on_device) g->be->sync();
            g->layer_done(g->layer_done_ctx, i);
        }
        // A layer's parameter gradients are complete after its own backward, or, where an
        // activation before it runs it (grad_by, grad_deferred), after that activation's.
        if (g->params_done && !l->grad_deferred) g->params_done(g->params_done_ctx, i);
        if (g->params_done && l->grad_by && l->grad_by->grad_deferred)
            g->params_done(g->params_done_ctx, (int)(l->grad_by - g->layers));
    }
}

void graph_backward(gl_graph *g, int64_t n) {
    if (!graph_replay_pass(g, n, true, true)) graph_run_backward(g, n);
    g->be->sync();  // the optimizer reads the gradients on the host next
}

gl_tensor *graph_output(gl_graph *g) { return &g->layers[g->nlayers - 1].out; }

int graph_first_nonfinite(const gl_graph *g, int64_t n) {
    for (int i = 0; i < g->nlayers; i++) {
        const gl_tensor *t = &g->layers[i].out;
        if (!graph_out_written(g, i)) continue;  // a fused pool's producer: the pool shows its NaN
        for (int64_t j = 0; j < t->size * n; j++)
            if (!isfinite(t->data[j])) return i;
    }
    return -1;
}

static void human_bytes(double b, char *buf, size_t len) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (b >= 1024 && k < 4) b /= 1024, k++;
    snprintf(buf, len, k ? "%.1f %s" : "%.0f %s", b, u[k]);
}

// "  kept from forward to backward: attention 1.1 GiB (12 layers; linear in T), ...": the layers'
// scratch (layer_t.scratch_floats) by kind, largest first, for the kinds that keep any.
static void summary_scratch(const gl_graph *g, FILE *out) {
    const layer_kind *kinds[64];
    double floats[64];
    int layers[64], nk = 0;
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        if (!l->scratch_floats) continue;
        int k = 0;
        while (k < nk && kinds[k] != l->kind) k++;
        if (k == nk) {
            if (nk == 64) continue;
            kinds[nk] = l->kind, floats[nk] = 0, layers[nk++] = 0;
        }
        floats[k] += (double)l->scratch_floats, layers[k]++;
    }
    if (!nk) return;
    fprintf(out, "  kept from forward to backward at batch %lld:", (long long)g->batch);
    for (int done = 0; done < nk; done++) {
        int best = 0;
        for (int k = 1; k < nk; k++)
            if (floats[k] > floats[best]) best = k;
        char mem[32];
        human_bytes(floats[best] * sizeof(float), mem, sizeof mem);
        fprintf(out, "%s %s %s (%d layer%s%s%s)", done ? "," : "", kinds[best]->name, mem, layers[best],
                layers[best] == 1 ? "" : "s", kinds[best]->scratch_doc ? "; " : "",
                kinds[best]->scratch_doc ? kinds[best]->scratch_doc : "");
        floats[best] = -1;
    }
    fputc('\n', out);
}

void graph_summary(const gl_graph *g, FILE *out) {
    char shape[64], mem[32];
    fprintf(out, "%-4s %-20s %-12s %-18s %12s %14s %12s\n", "#", "layer", "type", "output", "params",
            "FLOPs/sample", "out/sample");
    shape_format(&g->input.shape, shape, sizeof shape);
    human_bytes((double)g->input.size * sizeof(float), mem, sizeof mem);
    fprintf(out, "%-4s %-20s %-12s %-18s %12d %14d %12s\n", "-", "input", "-", shape, 0, 0, mem);
    for (int i = 0; i < g->nlayers; i++) {
        const layer_t *l = &g->layers[i];
        int64_t np = 0;
        for (int p = 0; p < l->nparams; p++) np += l->params[p].size;
        shape_format(&l->out.shape, shape, sizeof shape);
        // a fused activation's output is its producer's buffer (graph_fuse_acts)
        if (l->act_done || l->act_inplace || l->view || l->res_by) snprintf(mem, sizeof mem, "shared");
        else if (!graph_out_written(g, i)) snprintf(mem, sizeof mem, "pooled");
        else human_bytes((double)l->out.size * sizeof(float), mem, sizeof mem);
        fprintf(out, "%-4d %-20s %-12s %-18s %12lld %14lld %12s\n", i, l->cfg->name, l->kind->name, shape,
                (long long)np, (long long)l->flops, mem);
    }
    char pm[32], am[32], gm[32], sm[32], wm[32];
    human_bytes((double)g->nparams * sizeof(float), pm, sizeof pm);
    human_bytes((double)g->act_floats * sizeof(float) * (double)g->batch, am, sizeof am);
    human_bytes((double)g->grad_floats * sizeof(float) * (double)g->batch, gm, sizeof gm);
    int64_t all = 0;  // the gradients' floats per sample were each output to keep its own
    for (int i = 0; i < g->nlayers; i++) all += g->layers[i].out.size;
    human_bytes((double)all * sizeof(float) * (double)g->batch, sm, sizeof sm);
    human_bytes((double)g->work_floats * sizeof(float), wm, sizeof wm);
    fprintf(out, "total: %lld parameters (%s), %.4g MFLOPs forward per sample, activations %s at batch %lld\n",
            (long long)g->nparams, pm, (double)g->flops / 1e6, am, (long long)g->batch);
    if (g->grads_kept)
        fprintf(out, "  of which the outputs' gradients take %s, each its own", gm);
    else
        fprintf(out, "  of which the outputs' gradients take %s, shared by lifetime (%s were each its own)", gm, sm);
    if (g->work_floats)  // the CPU's im2col columns, attention's backward temporaries (layer_t.work)
        fprintf(out, "; the layers share %s of work space within a call (the convolutions' im2col columns, "
                     "none on a GPU where cuDNN has its own; patch rows; attention's backward temporaries)", wm);
    fputc('\n', out);
    summary_scratch(g, out);
}

void graph_free(gl_graph *g) {
    graph_replay_free(g);
    free(g->layers);
    memset(g, 0, sizeof *g);
}
