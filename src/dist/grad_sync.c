// grad_sync.c: bucketed gradient allreduce overlapped with backward (see dist.h).
//
// Buckets are whole layers' gradient slices, taken from the last layer backwards until a bucket
// holds about bucket_mb (the first: 1 MiB); layers without parameters belong to none. Layer i's backward completes
// bucket b when i is b's lowest layer, because backward visits layers last to first. Non-blocking
// MPI progresses only inside MPI calls, so every layer hook also tests the buckets in flight.
//
// Two paths (grad_nccl.c chooses once, every rank alike). MPI reads the buckets from the host,
// so backward waits for the GPU before each hook. NCCL (the CUDA backend, a GPU per rank) queues
// each bucket's sum on its own stream behind the layers that wrote it: backward never waits, and
// gradsync_finish waits once, for the last sum.
#include <stdio.h>
#include <stdlib.h>

#include "dist/dist_internal.h"
#include "galley/check.h"

#define MAX_PIECES_PER_BUCKET 64

typedef struct {
    int64_t off, len;  // slice of the gradient block
    int lo_layer;      // the lowest layer with parameters in it
    int started, done, nreq;
    int64_t seq;       // its collective's number (dist_enter)
    char *reqs;        // MAX_PIECES_PER_BUCKET requests
} bucket;

struct gl_gradsync {
    gl_dist *d;
    gl_graph *g;
    bool overlap;
    int nb;
    bucket *b;
    int next;  // the next bucket to start (they start in order)
    int64_t step;
    char what[64];
    gl_devcomm *dev;  // NCCL's communicator; NULL: MPI
};

static void start_bucket(gl_gradsync *s, bucket *b) {
    b->started = 1;
    snprintf(s->what, sizeof s->what, "the %sgradient allreduce (bucket %d of %d)", s->dev ? "NCCL " : "",
             (int)(b - s->b) + 1, s->nb);
    b->seq = dist_enter(s->d, s->what, s->step, DIST_ALL);
    if (s->dev) gradnccl_allreduce(s->d, s->dev, s->g->grads + b->off, b->len, b->seq);
    else dist_iallreduce_floats(s->d, s->g->grads + b->off, b->len, b->reqs, &b->nreq);
}

// Progresses the buckets in flight (a cheap test each).
static void poke(gl_gradsync *s) {
    for (int k = 0; k < s->next; k++) {
        bucket *b = &s->b[k];
        if (!b->done && dist_test(s->d, b->nreq, b->reqs)) b->done = 1;
    }
}

static void on_layer_done(void *ctx, int layer) {
    gl_gradsync *s = ctx;
    while (s->next < s->nb && s->b[s->next].lo_layer >= layer) start_bucket(s, &s->b[s->next++]);
    if (!s->dev) poke(s);  // NCCL progresses on its own
}

gl_gradsync *gradsync_new(gl_dist *d, gl_graph *g, double bucket_mb, bool overlap) {
    gl_gradsync *s = gl_xcalloc(1, sizeof *s);
    s->d = d, s->g = g, s->overlap = overlap;
    int64_t cap = (int64_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    const int64_t first_cap = (int64_t)(1048576 / sizeof(float));
    s->b = gl_xcalloc((size_t)g->nlayers + 1, sizeof(bucket));
    bucket *cur = NULL;
    for (int i = g->nlayers - 1; i >= 0; i--) {
        const layer_t *l = &g->layers[i];
        int64_t n = 0;
        for (int p = 0; p < l->nparams; p++) n += l->params[p].size;
        if (n == 0) continue;
        // The first bucket (the last layers) holds at most 1 MiB, as PyTorch DDP's does: it
        // starts while most of backward is still to run, whatever bucket_mb is.
        int64_t limit = s->nb == 1 && first_cap < cap ? first_cap : cap;
        if (!cur || cur->len >= limit) {
            cur = &s->b[s->nb++];
            cur->off = l->params[0].offset + n;  // grows downwards below
        }
        cur->off -= n;
        cur->len += n;
        cur->lo_layer = i;
    }
    size_t rs = dist_request_size();
    for (int k = 0; k < s->nb; k++) {
        GL_CHECK(s->b[k].len / ((int64_t)1 << 26) < MAX_PIECES_PER_BUCKET, "gradient bucket too large");
        s->b[k].reqs = gl_xcalloc(MAX_PIECES_PER_BUCKET, rs);
    }
    s->dev = gradnccl_open(d, g);  // a collective: every rank calls gradsync_new
    return s;
}

void gradsync_free(gl_gradsync *s) {
    if (!s) return;
    gradnccl_close(s->d, s->dev);
    for (int k = 0; k < s->nb; k++) free(s->b[k].reqs);
    free(s->b);
    free(s);
}

int gradsync_buckets(const gl_gradsync *s) { return s->nb; }

void gradsync_begin(gl_gradsync *s, int64_t step) {
    s->step = step;
    s->next = 0;
    for (int k = 0; k < s->nb; k++) s->b[k].started = s->b[k].done = 0;
    s->g->layer_done = s->overlap && (s->d->world > 1 || s->dev) ? on_layer_done : NULL;
    s->g->layer_done_ctx = s;
    s->g->layer_done_on_device = s->dev != NULL;  // NCCL orders on the GPU: no host wait per layer
}

double gradsync_finish(gl_gradsync *s) {
    s->g->layer_done = NULL;
    if (s->d->world == 1 && !s->dev) return 0;
    double t0 = dist_now();
    while (s->next < s->nb) start_bucket(s, &s->b[s->next++]);
    if (s->dev) {
        gradnccl_wait(s->d, s->dev, s->b[0].seq);  // a timeout names the first: the others queue behind it
        return dist_now() - t0;
    }
    for (int k = 0; k < s->nb; k++) {
        bucket *b = &s->b[k];
        if (b->done) continue;
        dist_wait(s->d, b->nreq, b->reqs, b->seq);
        b->done = 1;
    }
    return dist_now() - t0;
}
