// arena.h: the one allocation of a run. Sized up front from a plan, carved into tensors,
// freed at the end; nothing is allocated in the training loop.
#ifndef GALLEY_ARENA_H
#define GALLEY_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct gl_backend;

typedef struct {
    uint8_t *base;
    size_t cap, used;
    void (*release)(void *);  // frees base (the allocator's own free)
} gl_arena;

#define GL_ARENA_ALIGN 64  // cache line; also what AVX-512 loads like

// Bytes an arena needs to hold a request of n bytes (with alignment slack).
static inline size_t arena_round(size_t n) { return (n + GL_ARENA_ALIGN - 1) & ~(size_t)(GL_ARENA_ALIGN - 1); }

// Reserves cap bytes (zeroed) of host memory: arena_init_for with the CPU backend, defined beside
// it (src/backend/cpu/cpu_backend.c). Exits with GL_EXIT_RUNTIME and a hint when memory is short.
void arena_init(gl_arena *a, size_t cap);
// The same in the backend's memory (a GPU's, for the CUDA backend): the run's model arena.
void arena_init_for(gl_arena *a, size_t cap, const struct gl_backend *be);
// Returns n zeroed bytes aligned to GL_ARENA_ALIGN; a request past the plan is a bug (exits).
void *arena_alloc(gl_arena *a, size_t n);
float *arena_floats(gl_arena *a, int64_t n);
void arena_free(gl_arena *a);

// Physical memory of this machine in bytes (0 if unknown), to refuse absurd plans early.
uint64_t arena_host_memory(void);

#endif
