// arena.c: one zeroed, aligned block per run, handed out front to back.
#include "galley/arena.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/check.h"

void arena_init(gl_arena *a, size_t cap) {
    cap = arena_round(cap ? cap : GL_ARENA_ALIGN);
    void *p = NULL;
    if (posix_memalign(&p, GL_ARENA_ALIGN, cap) != 0 || !p)
        gl_die(GL_EXIT_RUNTIME, "reduce train.batch_size or the model size",
               "cannot allocate the run's memory arena of %.1f MiB", cap / 1048576.0);
    memset(p, 0, cap);  // touch it now: a short machine fails here, not mid-run
    a->base = p;
    a->cap = cap;
    a->used = 0;
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
    free(a->base);
    a->base = NULL;
    a->cap = a->used = 0;
}

uint64_t arena_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return (pages > 0 && size > 0) ? (uint64_t)pages * (uint64_t)size : 0;
}
