// arena.c: one zeroed, aligned block per run, handed out front to back. The block comes from a
// backend's allocator (arena_init_for); arena_init, host memory, is the CPU backend's
// (src/backend/cpu/cpu_backend.c), so core depends on no backend.
#include "galley/arena.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/backend.h"
#include "galley/check.h"

void arena_init_for(gl_arena *a, size_t cap, const gl_backend *be) {
    cap = arena_round(cap ? cap : GL_ARENA_ALIGN);
    void *p = be->mem_alloc(cap);  // zeroed; the CPU's touches every page so a short machine fails here
    if (!p)
        gl_die(GL_EXIT_RUNTIME, "reduce train.batch_size or the model size",
               "cannot allocate the run's memory arena of %.1f MiB (%s memory)", cap / 1048576.0,
               be->device ? "GPU" : "host");
    a->base = p;
    a->cap = cap;
    a->used = 0;
    a->release = be->mem_free;
}

void *arena_alloc(gl_arena *a, size_t n) {
    size_t need = arena_round(n);
    GL_CHECK(a->base && a->used + need <= a->cap, "the memory plan undercounted; please report this recipe");
    void *p = a->base + a->used;
    a->used += need;
    return p;
}

float *arena_floats(gl_arena *a, int64_t n) {
    GL_CHECK(n >= 0, "negative tensor size");
    return arena_alloc(a, (size_t)n * sizeof(float));
}

void arena_free(gl_arena *a) {
    if (a->base) a->release(a->base);
    a->base = NULL;
    a->cap = a->used = 0;
}

uint64_t arena_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return (pages > 0 && size > 0) ? (uint64_t)pages * (uint64_t)size : 0;
}
