// optim.c: optimizer state, the global gradient norm and clipping; the update rules live in
// sgd.c and adam.c (CPU) or behind the backend's optim_update (a GPU's, backend.h).
#include <math.h>
#include <omp.h>
#include <string.h>

#include "galley/backend.h"
#include "galley/check.h"
#include "optim/optim_internal.h"
#include "optim/optim_simd.h"

// Counts the non-empty parameter tensors of g and the chunks they split into.
static void plan(const gl_graph *g, int *ntensors, int *nchunks) {
    int nt = 0, nc = 0;
    for (int i = 0; i < g->nlayers; i++)
        for (int p = 0; p < g->layers[i].nparams; p++) {
            int64_t size = g->layers[i].params[p].size;
            if (size <= 0) continue;
            nt++;
            nc += (int)((size + GL_OPTIM_CHUNK - 1) / GL_OPTIM_CHUNK);
        }
    *ntensors = nt;
    *nchunks = nc;
}

// The registry's rule of r's optimizer.type.
static const gl_optim_rule *rule_of(const recipe_t *r) {
    const gl_optim_rule *rule = optim_rule(r->optimizer.type);
    GL_CHECK(rule != NULL, "unknown optimizer type");
    return rule;
}

// The state buffers r's rule keeps (0 when it keeps none for this recipe).
static int state_count(const recipe_t *r) {
    const gl_optim_rule *rule = rule_of(r);
    if (rule->keeps_state && !rule->keeps_state(r)) return 0;
    int n = 0;
    while (n < GL_OPTIM_MAX_STATE && rule->state[n]) n++;
    return n;
}

// The gl_optim field of the state buffer a rule names (its checkpoint dataset name).
static float **state_field(gl_optim *o, const char *name) {
    if (strcmp(name, "velocity") == 0) return &o->velocity;
    if (strcmp(name, "m") == 0) return &o->m;
    GL_CHECK(strcmp(name, "v") == 0, "an optimizer state buffer is velocity, m or v");
    return &o->v;
}

size_t optim_bytes(const recipe_t *r, const gl_graph *g) {
    int nt, nc;
    plan(g, &nt, &nc);
    size_t floats = arena_round((size_t)g->nparams * sizeof(float)), bytes = 0;
    bytes += (size_t)state_count(r) * floats;
    if (nc > 0)
        bytes += arena_round((size_t)nc * sizeof(gl_optim_chunk)) + arena_round(3 * (size_t)nc * sizeof(double)) +
                 arena_round((size_t)nt * sizeof(double)) + arena_round((size_t)(g->nlayers + 1) * sizeof(int)) +
                 arena_round((size_t)nc);
    return bytes;
}

void optim_init(gl_optim *o, const recipe_t *r, const gl_graph *g, gl_arena *a) {
    memset(o, 0, sizeof *o);
    o->type = r->optimizer.type;
    o->rule = rule_of(r);
    o->momentum = r->optimizer.momentum;
    o->weight_decay = r->optimizer.weight_decay;
    o->nesterov = r->optimizer.nesterov;
    o->beta1 = r->optimizer.beta1;
    o->beta2 = r->optimizer.beta2;
    o->eps = r->optimizer.eps;
    o->clip_norm = r->optimizer.clip_norm;
    o->n = g->nparams;
    o->last_scale = 1.0;
    for (int i = 0, ns = state_count(r); o->n > 0 && i < ns; i++)
        *state_field(o, o->rule->state[i]) = arena_floats(a, o->n);
    plan(g, &o->ntensors, &o->nchunks);
    if (o->nchunks == 0) return;
    o->chunks = arena_alloc(a, (size_t)o->nchunks * sizeof(gl_optim_chunk));
    o->partial = arena_alloc(a, 3 * (size_t)o->nchunks * sizeof(double));
    o->ratio = arena_alloc(a, (size_t)o->ntensors * sizeof(double));
    o->layer_chunk = arena_alloc(a, (size_t)(g->nlayers + 1) * sizeof(int));
    o->fuse.seen = arena_alloc(a, (size_t)o->nchunks);
    o->fuse.on = r->optimizer.fuse;
    int t = 0, c = 0;
    for (int i = 0; i < g->nlayers; i++) {
        o->layer_chunk[i] = c;
        for (int p = 0; p < g->layers[i].nparams; p++) {
            const gl_param *prm = &g->layers[i].params[p];
            if (prm->size <= 0) continue;
            GL_CHECK(prm->offset >= 0 && prm->offset + prm->size <= g->nparams, "parameter tensor outside the block");
            bool plain = r->optimizer.exclude_1d && prm->shape.ndim <= 1;
            const int parts = (int)((prm->size + GL_OPTIM_CHUNK - 1) / GL_OPTIM_CHUNK);
            for (int64_t s = 0; s < prm->size; s += GL_OPTIM_CHUNK)
                o->chunks[c++] = (gl_optim_chunk){
                    .offset = prm->offset + s,
                    .len = prm->size - s < GL_OPTIM_CHUNK ? prm->size - s : GL_OPTIM_CHUNK,
                    .tensor = t,
                    .plain = plain,
                    .split = prm->split != GL_SPLIT_NONE,
                    .part = (int)(s / GL_OPTIM_CHUNK),
                    .parts = parts};
            o->ratio[t++] = 1.0;
        }
    }
    o->layer_chunk[g->nlayers] = c;
}

// Whether the update runs on the backend's device (backend.h: chunk_sumsq, optim_update). A
// device backend without them leaves the loops below to touch its (managed) memory from the host.
static bool on_device(const gl_backend *be) { return be && be->device && be->chunk_sumsq && be->optim_update; }

void optim_partials(gl_optim *o, const float *g, const uint8_t *skip) {
    const optim_simd *os = optim_simd_get();
    const gl_optim_chunk *ch = o->chunks;
#pragma omp parallel
    for (int c = 0, me = omp_get_thread_num(), nt = omp_get_num_threads(); c < o->nchunks; c++) {
        if (optim_owner(&ch[c], nt) != me || (skip && skip[c])) continue;
        o->partial[c] = os->sumsq(g + ch[c].offset, ch[c].len);
    }
}

double optim_norm_of_partials(gl_optim *o) {
    const double *part = o->partial;
    const gl_optim_chunk *ch = o->chunks;
    double total = 0.0, split = 0.0;
    for (int c = 0; c < o->nchunks; c++) {
        if (o->split_sum && ch[c].split) split += part[c];
        else total += part[c];
    }
    if (o->split_sum) {  // each rank holds its share of the split tensors: the group's sum, then the rest
        o->split_sum->sum(o->split_sum->ctx, &split, 1);
        total += split;
    }
    return sqrt(total);
}

// ||g||: squares summed in double within each chunk (in parallel, on the CPU or the device),
// then over chunks in order on the host.
static double grad_norm(gl_optim *o, const gl_backend *be, const float *g) {
    if (on_device(be)) {
        if (o->nchunks > 0) be->chunk_sumsq(o->nchunks, o->chunks, g, o->partial);
    } else {
        // Double lanes in a fixed order (optim_simd.h), so thread-count and instruction-set
        // independent, then the chunks in order.
        optim_partials(o, g, NULL);
    }
    return optim_norm_of_partials(o);
}

// The update's scalars: float copies of the hyper-parameters and, for the Adam family, the
// bias corrections of step t (adam.c).
gl_optim_args optim_args(const gl_optim *o, bool clip, float coef, double lr, int64_t t) {
    gl_optim_args a = {.rule = o->type,
                       .clip = clip,
                       .coef = coef,
                       .lr = (float)lr,
                       .momentum = (float)o->momentum,
                       .weight_decay = (float)o->weight_decay,
                       .nesterov = o->nesterov};
    if (o->rule->adam) adam_args(o, lr, t, &a);
    return a;
}

// The update on the device (the rule's device_step). Ends with sync, so host code that reads the
// parameters or the state next (checkpoints) sees the update, as it does after the CPU's loops.
static void device_update(gl_optim *o, const gl_backend *be, const gl_optim_args *a, gl_graph *g) {
    if (o->nchunks == 0) return;
    o->rule->device_step(o, be, a, g->params, g->grads);
    be->sync();
}

double optim_step(gl_optim *o, gl_graph *g, double lr) { return optim_step_scaled(o, g, lr, 1.0); }

double optim_step_scaled(gl_optim *o, gl_graph *g, double lr, double scale) {
    GL_CHECK(g->nparams == o->n, "optimizer built for another graph");
    GL_CHECK(scale >= 1.0, "the loss scale is at least 1");
    if (o->fuse.armed) {  // most of it ran in backward (optim_fuse.c)
        GL_CHECK(scale == 1.0, "an update in backward has no loss scale");
        return optim_fuse_finish(o, g, lr);
    }
    // Dividing by a power of two is exact, so the norm is the unscaled gradients' norm.
    double norm = grad_norm(o, g->be, g->grads) / scale;
    if (!isfinite(norm)) return norm;
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when below 1
    // (PyTorch multiplies by min(coef, 1), which is the same).
    double coef = isnan(o->clip_norm) ? 1.0 : o->clip_norm / (norm + 1e-6);
    bool clip = coef < 1.0;
    o->last_scale = clip ? (double)(float)coef : 1.0;
    // Unscaling rides on the clip multiply: one pass over the gradients either way (and none
    // when neither applies, so fp32 runs keep their bits).
    double mult = (clip ? coef : 1.0) / scale;
    int64_t t = o->steps + 1;
    GL_CHECK(o->rule && o->rule == optim_rule(o->type), "unknown optimizer type");
    const gl_optim_args a = optim_args(o, clip || scale != 1.0, (float)mult, lr, t);
    if (on_device(g->be)) {
        device_update(o, g->be, &a, g);
    } else {
        o->rule->step(o, &a, lr, g->params, g->grads);
    }
    o->steps = t;
    return norm;
}
