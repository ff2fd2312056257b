// graph_replay.c: train.cuda_graphs. Each forward and backward pass is recorded by the backend
// (capture_begin/end: a CUDA graph) and replayed with one launch instead of one per kernel.
//
// Keys. A recording freezes every kernel argument, so it is made per (input buffer, rows, row0,
// training or not, forward or backward): the two input buffers of input_stage.c, a short last
// batch, evaluation and the parts of distributed.deterministic each get their own, up to
// REPLAY_SLOTS (the least recently used goes beyond). The only per-step value inside a pass is dropout's step,
// which recorded kernels read on the device (replay_step).
// Warm-up. The first run of a key is eager: it chooses convolution algorithms and grows the
// workspaces, which a recording cannot do. The second records, then every run replays. A
// recording older than the backend's buffers (capture_generation) is made again.
// Not recorded. Training passes with sync_batchnorm (ranks' sums on the host mid-pass; evaluation
// uses running statistics and is recorded) and a backward whose layers
// hand gradient buckets to MPI or NCCL (g->layer_done): those passes run eagerly. A recording
// that fails (a call that cannot be recorded) is retried once after another eager run, then
// the key stays eager; the first such failure is said on err.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "model/graph_internal.h"

#define REPLAY_SLOTS 32

typedef struct {
    bool used, eager;  // eager: recording failed twice for this key
    int runs, fails;   // eager runs since the last (failed) recording; failures in a row
    uint64_t last;     // when it was last used (gl_replay.clock)
    const float *input;
    int64_t n, row0;
    bool train, backward;
    void *rec;
    uint64_t gen;
} replay_slot;

struct gl_replay {
    replay_slot s[REPLAY_SLOTS];
    uint64_t clock;  // passes seen
    FILE *err;
    bool said_fail, said_sync_bn, said_hooks;
    int64_t recorded, replays, eager;  // passes recorded, replayed, and run eagerly
};

void graph_replay_setup(gl_graph *g, bool on, FILE *err) {
    graph_replay_free(g);
    const gl_backend *be = g->be;
    if (!on || !be->capture_begin) return;
    if (g->tp && g->tp->size > 1) {  // the split layers' sums are MPI calls between kernels
        fprintf(err, "galley: note: train.cuda_graphs: every pass runs eagerly under tensor parallelism (its "
                     "layers' sums over the tensor group are host calls between kernels)\n");
        return;
    }
    g->replay = gl_xcalloc(1, sizeof *g->replay);
    g->replay->err = err;
}

void graph_replay_free(gl_graph *g) {
    gl_replay *rp = g->replay;
    if (!rp) return;
    for (int i = 0; i < REPLAY_SLOTS; i++)
        if (rp->s[i].rec) g->be->replay_free(rp->s[i].rec);
    free(rp);
    g->replay = NULL;
}

static replay_slot *slot_of(gl_graph *g, int64_t n, bool train, bool backward) {
    gl_replay *rp = g->replay;
    rp->clock++;
    replay_slot *s = NULL;
    for (int i = 0; i < REPLAY_SLOTS; i++) {
        replay_slot *t = &rp->s[i];
        if (t->used && t->input == g->input.data && t->n == n && t->row0 == g->row0 && t->train == train &&
            t->backward == backward) {
            t->last = rp->clock;
            return t;
        }
        if (!s || (s->used && (!t->used || t->last < s->last))) s = t;  // a free slot, else the least recently used
    }
    if (s->rec) g->be->replay_free(s->rec);
    memset(s, 0, sizeof *s);
    s->used = true, s->input = g->input.data, s->n = n, s->row0 = g->row0, s->train = train, s->backward = backward;
    s->last = rp->clock;
    return s;
}

// Whether a pass cannot be recorded at all (why: said once on err).
static bool refused(gl_graph *g, bool train_pass, bool backward) {
    gl_replay *rp = g->replay;
    if (g->reduce && (train_pass || backward)) {  // evaluation's batch norm uses running statistics
        if (!rp->said_sync_bn && rp->err)
            fprintf(rp->err, "galley: train.cuda_graphs: passes run eagerly: sync_batchnorm sums statistics over "
                             "ranks on the host inside them\n");
        rp->said_sync_bn = true;
        return true;
    }
    if (backward && g->params_done) return true;  // the CPU's update in backward: never armed on a device
    if (backward && g->layer_done) {
        if (!rp->said_hooks && rp->err)
            fprintf(rp->err, "galley: train.cuda_graphs: backward passes run eagerly: gradient buckets start "
                             "their sums across ranks from inside them (forward passes are recorded)\n");
        rp->said_hooks = true;
        return true;
    }
    return false;
}

bool graph_replay_pass(gl_graph *g, int64_t n, bool train, bool backward) {
    gl_replay *rp = g->replay;
    if (!rp || n <= 0) return false;
    if (refused(g, train, backward)) {
        rp->eager++;
        return false;
    }
    const gl_backend *be = g->be;
    replay_slot *s = slot_of(g, n, train, backward);
    if (s->rec && s->gen != be->capture_generation()) {  // a buffer it points into moved
        be->replay_free(s->rec);
        s->rec = NULL;
    }
    if (!s->rec) {
        if (s->eager || s->runs++ == 0) {  // never recordable, or the warm-up run
            rp->eager++;
            return false;
        }
        char msg[256] = "";
        void *rec = NULL;
        if (be->capture_begin(msg, sizeof msg) == 0) {
            if (backward) graph_run_backward(g, n);
            else graph_run_forward(g, n, train);
            rec = be->capture_end(msg, sizeof msg);
        }
        if (!rec) {
            // Nothing ran: the caller runs the pass. One more eager run may settle what was
            // missing (a buffer that had to grow); a second failure keeps this key eager.
            s->runs = 0;
            s->eager = ++s->fails >= 2;
            if (s->eager && !rp->said_fail && rp->err)
                fprintf(rp->err, "galley: train.cuda_graphs: the %s pass at %lld rows could not be recorded (%s); "
                                 "it runs eagerly\n",
                        backward ? "backward" : train ? "training forward" : "evaluation forward", (long long)n, msg);
            rp->said_fail |= s->eager;
            rp->eager++;
            return false;
        }
        s->rec = rec;
        s->fails = 0;
        s->gen = be->capture_generation();
        rp->recorded++;
    }
    be->replay_step((uint64_t)g->step);
    be->replay(s->rec);
    rp->replays++;
    return true;
}

void graph_replay_describe(const gl_graph *g, char *buf, size_t len) {
    if (!len) return;
    buf[0] = '\0';
    const gl_replay *rp = g->replay;
    if (!rp) return;
    snprintf(buf, len, "CUDA graphs: %lld passes replayed from %lld recordings, %lld run eagerly (warm-ups, and "
                       "passes that cannot be recorded)",
             (long long)rp->replays, (long long)rp->recorded, (long long)rp->eager);
}
