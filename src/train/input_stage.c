// input_stage.c: the next batch's copy to the model input, overlapped with the current step.
//
// The model input has two buffers. While step k computes from one, batch k + 1 is taken from
// the loader (only if its readers have it ready: the loop never waits for data early) and its
// rows go to the other on the backend's copy stream (upload_async); step k + 1 swaps the
// buffers and makes its kernels wait for that copy (upload_wait). The copy stream itself waits
// for the kernels issued before it, so a buffer is never filled while a step still reads it.
// On a GPU the loader's slots are pinned, so the copy is DMA running beside the kernels; the
// CPU backend copies at once, in the same order, which is what lets the CPU tests check it.
//
// Targets too, on a device backend (upload_declare): the batch's labels or values go the same
// way into one of two device buffers, and the step declares that copy, so the loss and the
// metrics read it instead of copying the targets on the compute stream (a U-Net's field targets
// are hundreds of MB a batch). A batch not staged, and each evaluation batch, has its targets
// copied in order with the kernels into the pair beside the current input, and declared too
// (input_stage_targets): no loss ever copies a batch of targets into a buffer of its own.
//
// Off for distributed.deterministic, whose parts copy row ranges of a batch one at a time.
// A batch taken early whose read failed keeps its failure for the step that needs it.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"
#include "train/train_internal.h"

// One sample's targets in bytes (int32 labels or float values alike).
static size_t target_row(const gl_dataset *d) { return 4 * (size_t)d->tsize; }

size_t input_stage_bytes(const gl_graph *g, const gl_dataset *d, bool targets) {
    size_t b = arena_round(sizeof(float) * (size_t)(g->input.size * g->batch)) + GL_ARENA_ALIGN;
    if (targets) b += 2 * (arena_round(target_row(d) * (size_t)g->batch) + GL_ARENA_ALIGN);
    return b;
}

// A byte range [lo, hi) of host memory.
typedef struct {
    const char *lo, *hi;
} span;

static int span_cmp(const void *a, const void *b) {
    const char *x = ((const span *)a)->lo, *y = ((const span *)b)->lo;
    return x < y ? -1 : x > y;
}

static size_t page_bytes(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

// Rounds each span out to whole pages, sorts them and merges those that share or touch a page;
// returns how many remain (in place).
static int spans_merge_pages(span *sp, int n, size_t page) {
    for (int i = 0; i < n; i++) {
        uintptr_t lo = (uintptr_t)sp[i].lo, hi = (uintptr_t)sp[i].hi;
        sp[i].lo = (const char *)(lo / page * page);
        sp[i].hi = (const char *)((hi + page - 1) / page * page);
    }
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && sp[i].lo <= sp[m - 1].hi) {
            if (sp[i].hi > sp[m - 1].hi) sp[m - 1].hi = sp[i].hi;
        } else {
            sp[m++] = sp[i];
        }
    }
    return m;
}

// Pins the slots' inputs (and with targets, their targets) as merged page runs, all or none;
// false with why in msg when a run is refused (what was pinned is undone).
static bool pin_slots(input_stage *s, bool targets, char *msg, size_t len) {
    // The slots' arrays lie side by side in the loader's arena, several to a page: a GPU pins
    // whole pages and refuses a second registration of a page, so the arrays' pages are merged
    // into runs first and each run is pinned once.
    const int slots = loader_slots(s->L);
    span *sp = gl_xcalloc(2 * (size_t)slots, sizeof *sp);
    int ns = 0;
    for (int i = 0; i < slots; i++) {
        size_t bytes;
        const char *x = (const char *)loader_slot_x(s->L, i, &bytes);
        sp[ns++] = (span){x, x + bytes};
        if (targets) {
            const char *t = (const char *)loader_slot_targets(s->L, i, &bytes);
            sp[ns++] = (span){t, t + bytes};
        }
    }
    ns = spans_merge_pages(sp, ns, page_bytes());
    bool ok = true;
    for (int i = 0; i < ns && ok; i++) {
        void *p = (void *)sp[i].lo;
        ok = s->be->host_pin(p, (size_t)(sp[i].hi - sp[i].lo), msg, len) == 0;
        if (ok) s->pinned[s->npinned++] = p;
    }
    free(sp);
    if (!ok) {
        for (int j = 0; j < s->npinned; j++) s->be->host_unpin(s->pinned[j]);
        s->npinned = 0;
    }
    return ok;
}

void input_stage_init(input_stage *s, const gl_backend *be, gl_graph *g, gl_loader *L, bool on, gl_arena *a,
                      char *note, size_t len) {
    memset(s, 0, sizeof *s);
    if (note && len) note[0] = 0;
    s->be = be, s->g = g, s->L = L;
    s->on = on && be->upload_async && be->upload_wait && loader_slots(L) >= 2;
    if (!s->on) return;
    s->buf[0] = g->input.data;
    s->buf[1] = arena_floats(a, g->input.size * g->batch);  // the whole capacity: evaluation uses it too
    if (be->upload_declare) {
        s->trow = target_row(loader_shape(L));
        for (int k = 0; k < 2; k++) s->tbuf[k] = arena_alloc(a, s->trow * (size_t)g->batch);
    }
    if (!be->host_pin) return;
    s->pinned = gl_xcalloc(2 * (size_t)loader_slots(L), sizeof *s->pinned);
    // All or none, so the end summary's word for the copies holds for every batch; when the
    // targets tip the locked-memory limit, the inputs alone are still worth pinning.
    char msg[256];
    if (pin_slots(s, s->tbuf[0] != NULL, msg, sizeof msg)) {
        s->targets_pinned = s->tbuf[0] != NULL;
        return;
    }
    if (s->tbuf[0] && pin_slots(s, false, msg, sizeof msg)) {
        if (note && len)
            snprintf(note, len, "the targets' copies are made from pageable memory (%s); raise the locked-memory "
                                "limit (ulimit -l) to overlap them too", msg);
        return;
    }
    if (note && len)
        snprintf(note, len, "input copies are not overlapped with compute (%s); raise the locked-memory limit "
                            "(ulimit -l) to allow it", msg);
}

// The batch's targets on the host (labels or values), or NULL.
static const void *targets_of(const gl_batch *b) {
    return b->values ? (const void *)b->values : (const void *)b->labels;
}

void input_stage_targets(input_stage *s, const gl_batch *b) {
    if (!s->tbuf[0]) return;
    if (!targets_of(b) || b->n <= 0) {
        s->be->upload_declare(NULL, 0, NULL);
        return;
    }
    // Pending copies (a batch taken early) go to the other pair; earlier readers of this one
    // are ordered before this copy by the stream.
    void *t = s->tbuf[s->g->input.data == s->buf[0] ? 0 : 1];
    s->be->upload(t, targets_of(b), s->trow * (size_t)b->n);
    s->be->upload_declare(targets_of(b), s->trow * (size_t)b->n, t);
}

int input_stage_take(input_stage *s, gl_batch *b, bool *staged, FILE *err) {
    *staged = false;
    s->steps++;
    // A slot comes back at the same address with another batch: what was declared for the last
    // step must not be found for this one.
    if (s->tbuf[0]) s->be->upload_declare(NULL, 0, NULL);
    if (!s->have) {
        int rc = loader_next(s->L, b, err);
        if (rc == 0) input_stage_targets(s, b);
        return rc;
    }
    s->have = false;
    *b = s->next;
    if (s->failed) return -1;  // loader_try_next printed why
    s->be->upload_wait();
    const int k = s->next_buf == s->buf[0] ? 0 : 1;  // its targets went to tbuf[k] (input_stage_ahead)
    s->g->input.data = s->next_buf;
    if (s->tbuf[0] && targets_of(b)) s->be->upload_declare(targets_of(b), s->trow * (size_t)b->n, s->tbuf[k]);
    *staged = true;
    s->early++;
    return 0;
}

void input_stage_describe(const input_stage *s, char *buf, size_t len) {
    if (!len) return;
    buf[0] = 0;
    if (!s->on || !s->steps) return;
    if (!s->be->device && loader_inline(s->L)) {
        snprintf(buf, len, "input: %lld of %lld batches made a step ahead by the training threads, in the model's "
                           "input (data.loader.threads 0: no readers)", (long long)s->early, (long long)s->steps);
        return;
    }
    snprintf(buf, len, "input: %lld of %lld batches were ready a step ahead and copied%s %s%s (the rest: at their "
                       "own step)",
             (long long)s->early, (long long)s->steps, s->tbuf[0] ? " with their targets" : "",
             !s->be->device ? "before it" : s->npinned ? "beside it (pinned, copy stream)"
                                                       : "beside it from pageable memory (not pinned)",
             s->npinned && s->tbuf[0] && !s->targets_pinned ? "; the targets from pageable memory" : "");
}

void input_stage_ahead(input_stage *s, FILE *err) {
    if (!s->on || s->have) return;
    const int k = s->g->input.data == s->buf[0] ? 1 : 0;  // the buffers the step in flight does not read
    // A loader without readers on a host backend makes the batch in that buffer: no copy.
    float *into = !s->be->device && loader_inline(s->L) ? s->buf[k] : NULL;
    int r = into ? loader_try_next_into(s->L, &s->next, into, err) : loader_try_next(s->L, &s->next, err);
    if (r == 1) return;  // not ready: the next step copies it itself
    s->have = true;
    s->failed = r != 0;
    if (s->failed) return;
    s->next_buf = s->buf[k];
    if (s->next.x != s->next_buf)
        s->be->upload_async(s->next_buf, s->next.x, sizeof(float) * (size_t)(s->next.n * s->g->input.size));
    if (s->tbuf[0] && targets_of(&s->next))
        s->be->upload_async(s->tbuf[k], targets_of(&s->next), s->trow * (size_t)s->next.n);
}

void input_stage_free(input_stage *s) {
    if (!s->on) return;
    // A copy may still be in flight (the run ended with a batch taken early): let it land
    // before its source goes back to the loader and its destination to the arena.
    s->be->upload_wait();
    s->be->sync();
    if (s->tbuf[0]) s->be->upload_declare(NULL, 0, NULL);
    if (s->have) loader_release(s->L, &s->next);
    s->have = false;
    for (int i = 0; i < s->npinned; i++) s->be->host_unpin(s->pinned[i]);
    free(s->pinned);
    s->pinned = NULL, s->npinned = 0, s->on = false;
}
