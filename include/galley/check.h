// check.h: exit codes and fatal checks that say where it happened and what to try.
#ifndef GALLEY_CHECK_H
#define GALLEY_CHECK_H

#include <stddef.h>

#ifdef __cplusplus  // the CUDA backend's files are C++
#define GL_NORETURN [[noreturn]]
extern "C" {
#else
#define GL_NORETURN _Noreturn
#endif

// Exit codes, documented in the README ("Exit codes"); keep the two in step.
enum {
    GL_EXIT_OK = 0,       // success
    GL_EXIT_RUNTIME = 1,  // runtime failure: out of memory, I/O error, non-finite loss, ...
    GL_EXIT_USAGE = 2,    // usage or recipe error: nothing was trained or written
    GL_EXIT_TARGET = 3,   // training finished but the recipe's train.target was not reached
    GL_EXIT_STOPPED = 4,  // stopped early (SIGTERM/SIGUSR1/SIGINT, train.time_limit) after a checkpoint
};

// Prints "galley: error: <msg> (file.c:line)\n  hint: <hint>" to stderr and exits with code.
GL_NORETURN void gl_die_at(const char *file, int line, int code, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define gl_die(code, hint, ...) gl_die_at(__FILE__, __LINE__, (code), (hint), __VA_ARGS__)

// Internal invariant: a failure is a bug in galley, not in the user's input.
#define GL_CHECK(cond, hint)                                                              \
    do {                                                                                  \
        if (!(cond)) gl_die_at(__FILE__, __LINE__, GL_EXIT_RUNTIME, (hint),              \
                               "internal check failed: %s", #cond);                      \
    } while (0)

// malloc/calloc that exit with a clear message instead of returning NULL.
void *gl_xmalloc_at(const char *file, int line, size_t n);
void *gl_xcalloc_at(const char *file, int line, size_t count, size_t size);
char *gl_xstrdup_at(const char *file, int line, const char *s);
void *gl_xrealloc_at(const char *file, int line, void *p, size_t n);
#define gl_xmalloc(n) gl_xmalloc_at(__FILE__, __LINE__, (n))
#define gl_xcalloc(c, s) gl_xcalloc_at(__FILE__, __LINE__, (c), (s))
#define gl_xstrdup(s) gl_xstrdup_at(__FILE__, __LINE__, (s))
#define gl_xrealloc(p, n) gl_xrealloc_at(__FILE__, __LINE__, (p), (n))

#ifdef __cplusplus
}
#endif

#endif
