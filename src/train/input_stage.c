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
// Off for distributed.deterministic, whose parts copy row ranges of a batch one at a time.
// A batch taken early whose read failed keeps its failure for the step that needs it.
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "train/train_internal.h"

size_t input_stage_bytes(const gl_graph *g) {
    return arena_round(sizeof(float) * (size_t)(g->input.size * g->batch)) + GL_ARENA_ALIGN;
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
    if (!be->host_pin) return;
    s->pinned = gl_xcalloc((size_t)loader_slots(L), sizeof *s->pinned);
    for (int i = 0; i < loader_slots(L); i++) {
        size_t bytes;
        float *x = loader_slot_x(L, i, &bytes);
        char msg[256];
        if (be->host_pin(x, bytes, msg, sizeof msg) != 0) {
            if (note && len)
                snprintf(note, len, "input copies are not overlapped with compute (%s); raise the locked-memory "
                                    "limit (ulimit -l) to allow it", msg);
            // All or none, so the end summary's word for the copies holds for every batch.
            for (int j = 0; j < s->npinned; j++) be->host_unpin(s->pinned[j]);
            s->npinned = 0;
            break;
        }
        s->pinned[s->npinned++] = x;
    }
}

int input_stage_take(input_stage *s, gl_batch *b, bool *staged, FILE *err) {
    *staged = false;
    s->steps++;
    if (!s->have) return loader_next(s->L, b, err);
    s->have = false;
    *b = s->next;
    if (s->failed) return -1;  // loader_try_next printed why
    s->be->upload_wait();
    s->g->input.data = s->next_buf;
    *staged = true;
    s->early++;
    return 0;
}

void input_stage_describe(const input_stage *s, char *buf, size_t len) {
    if (!len) return;
    buf[0] = 0;
    if (!s->on || !s->steps) return;
    snprintf(buf, len, "input: %lld of %lld batches were ready a step ahead and copied %s (the rest: at their own step)",
             (long long)s->early, (long long)s->steps,
             !s->be->device ? "before it" : s->npinned ? "beside it (pinned, copy stream)"
                                                       : "beside it from pageable memory (not pinned)");
}

void input_stage_ahead(input_stage *s, FILE *err) {
    if (!s->on || s->have) return;
    int r = loader_try_next(s->L, &s->next, err);
    if (r == 1) return;  // not ready: the next step copies it itself
    s->have = true;
    s->failed = r != 0;
    if (s->failed) return;
    s->next_buf = s->g->input.data == s->buf[0] ? s->buf[1] : s->buf[0];
    s->be->upload_async(s->next_buf, s->next.x, sizeof(float) * (size_t)(s->next.n * s->g->input.size));
}

void input_stage_free(input_stage *s) {
    if (!s->on) return;
    // A copy may still be in flight (the run ended with a batch taken early): let it land
    // before its source goes back to the loader and its destination to the arena.
    s->be->upload_wait();
    s->be->sync();
    if (s->have) loader_release(s->L, &s->next);
    s->have = false;
    for (int i = 0; i < s->npinned; i++) s->be->host_unpin(s->pinned[i]);
    free(s->pinned);
    s->pinned = NULL, s->npinned = 0, s->on = false;
}
