// dist_probe.c: Open MPI's selected transport, read from its own verbose output, and bounded
// collectives that name who did not answer (see dist_probe.h). Used by `galley doctor` only.
#include "dist/dist_probe.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "galley/check.h"

struct dist_capture {
    int real_fd;        // the original stderr (dup)
    int pipe_rd, pipe_wr;
    int swallow;        // 1: Open MPI's verbose lines are ours to hide (we raised the verbosity)
    pthread_t thread;
    int threaded;
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t synced;  // signalled when the thread reads the sync line dist_capture_pause writes
    int nsync;          // sync lines read (under mu)
    dist_transport t;   // under mu
    char types[8][2][24];  // "initializing <type> component <name>": the last 8 (name, type)
    int ntypes;
    char line[1024];    // the line being read (thread only)
    size_t len;
};

void dist_capture_transport(dist_capture *c, dist_transport *t) {
    if (!c) {
        memset(t, 0, sizeof *t);
        snprintf(t->how, sizeof t->how, "one process, no MPI launcher: no transport in use");
        return;
    }
    pthread_mutex_lock(&c->mu);
    *t = c->t;
    pthread_mutex_unlock(&c->mu);
}

#if GALLEY_HAVE_MPI
#include <mpi.h>

#define COMM(d) (*(MPI_Comm *)(d)->comm)

// A line of Open MPI's framework output: "[host:pid] " then one of these.
static const char *const ompi_verbose_starts[] = {"mca: ", "select: ", "selected ", "check:select: "};

// The variables dist_capture_begin sets when nobody has: the pml's and mtl's selection lines
// come at level 10, the BML's per-peer lines at 1; and every peer is connected in MPI_Init
// (Open MPI connects lazily beyond 32 ranks by default), so all of its lines come there.
static const char *const ompi_capture_vars[][2] = {{"OMPI_MCA_pml_base_verbose", "10"},
                                                   {"OMPI_MCA_mtl_base_verbose", "10"},
                                                   {"OMPI_MCA_btl_base_verbose", "1"},
                                                   {"OMPI_MCA_mpi_add_procs_cutoff", "1000000000"}};

static void list_add(char *list, size_t cap, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return;
    if (strlen(list) + n + 2 > cap) return;
    if (*list) strcat(list, ",");
    strcat(list, name);
}

// One of Open MPI's lines (after "[host:pid] "): what it says about the selection, if anything.
static void capture_parse(dist_capture *c, const char *host, const char *s) {
    char a[24] = "", b[24] = "", node[96] = "";
    int vpid = 0;
    if (sscanf(s, "select: initializing %23s component %23s", a, b) == 2) {
        int k = c->ntypes++ % 8;
        snprintf(c->types[k][0], 24, "%s", b);
        snprintf(c->types[k][1], 24, "%s", a);
    } else if (sscanf(s, "select: component %23s selected", a) == 1) {
        const char *type = "";
        for (int k = 0; k < 8 && k < c->ntypes; k++)
            if (!strcmp(c->types[k][0], a)) type = c->types[k][1];
        if (!strcmp(type, "mtl")) snprintf(c->t.mtl, sizeof c->t.mtl, "%s", a);
        if (!strcmp(type, "pml")) snprintf(c->t.pml, sizeof c->t.pml, "%s", a);
    } else if (sscanf(s, "mca: bml: Using %23s btl for send to [[%*d,%*d],%d] on node %95s", a, &vpid, node) == 3) {
        c->t.peers++;
        if (strcmp(a, "self") == 0) return;
        if (!strcmp(node, host)) list_add(c->t.btl_node, sizeof c->t.btl_node, a);
        else list_add(c->t.btl_net, sizeof c->t.btl_net, a);
    }
}

// 1 when the line is Open MPI's framework output of this process (parsed here, then hidden).
static int capture_line(dist_capture *c, char *line) {
    char host[96];
    int pid = 0, n = 0;
    if (sscanf(line, "[%95[^]:]:%d] %n", host, &pid, &n) < 2 || n == 0 || pid != (int)getpid()) return 0;
    const char *rest = line + n;
    for (size_t i = 0; i < sizeof ompi_verbose_starts / sizeof *ompi_verbose_starts; i++) {
        if (strncmp(rest, ompi_verbose_starts[i], strlen(ompi_verbose_starts[i]))) continue;
        pthread_mutex_lock(&c->mu);
        capture_parse(c, host, rest);
        pthread_mutex_unlock(&c->mu);
        return c->swallow;
    }
    return 0;
}

// What dist_capture_pause writes into the pipe: once the thread reads it, it has read
// everything written before.
static const char capture_sync[] = "\001galley capture sync";

static void capture_flush_line(dist_capture *c, int partial) {
    c->line[c->len] = 0;
    if (!partial && !strcmp(c->line, capture_sync)) {
        pthread_mutex_lock(&c->mu);
        c->nsync++;
        pthread_cond_signal(&c->synced);
        pthread_mutex_unlock(&c->mu);
    } else if (partial || !capture_line(c, c->line)) {
        if (!partial) c->line[c->len++] = '\n';
        ssize_t w = write(c->real_fd, c->line, c->len);
        (void)w;  // nowhere left to report a failing stderr
    }
    c->len = 0;
}

// The reader: splits what arrives on the pipe into lines until told to stop and drained.
static void *capture_thread(void *arg) {
    dist_capture *c = arg;
    char buf[4096];
    for (;;) {
        struct pollfd p = {c->pipe_rd, POLLIN, 0};
        int r = poll(&p, 1, 50);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (atomic_load(&c->stop)) break;
            continue;
        }
        ssize_t n = read(c->pipe_rd, buf, sizeof buf);
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') capture_flush_line(c, 0);
            else if (c->len + 2 < sizeof c->line) c->line[c->len++] = buf[i];
            else capture_flush_line(c, 1);  // an overlong line goes out in pieces
        }
    }
    if (c->len) capture_flush_line(c, 1);
    return NULL;
}

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE");
}

// Points fd 2 at the pipe and starts the reader. 0, or -1 (then nothing was changed).
static int capture_redirect(dist_capture *c) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stderr);
    c->real_fd = dup(2);
    if (c->real_fd < 0 || dup2(p[1], 2) < 0) {
        if (c->real_fd >= 0) close(c->real_fd);
        close(p[0]), close(p[1]);
        return -1;
    }
    c->pipe_rd = p[0];
    c->pipe_wr = p[1];
    c->threaded = pthread_create(&c->thread, NULL, capture_thread, c) == 0;
    if (!c->threaded) {  // no reader: put everything back
        dup2(c->real_fd, 2);
        return -1;
    }
    return 0;
}

dist_capture *dist_capture_begin(void) {
    if (!launched_by_mpi()) return NULL;
    dist_capture *c = gl_xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->synced, NULL);
    c->real_fd = c->pipe_rd = c->pipe_wr = -1;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(lib, &len);  // allowed before MPI_Init
    lib[strcspn(lib, "\n,")] = 0;
    snprintf(c->t.library, sizeof c->t.library, "%.*s", (int)sizeof c->t.library - 1, lib);
    if (!strstr(lib, "Open MPI")) {
        snprintf(c->t.how, sizeof c->t.how, "not Open MPI: its transport is not determined by galley");
        return c;
    }
    int user = 0;
    for (size_t i = 0; i < sizeof ompi_capture_vars / sizeof *ompi_capture_vars; i++) {
        if (getenv(ompi_capture_vars[i][0])) user += i < 3;
        else setenv(ompi_capture_vars[i][0], ompi_capture_vars[i][1], 0);
    }
    c->swallow = user == 0;
    if (capture_redirect(c) != 0) {
        snprintf(c->t.how, sizeof c->t.how, "could not read Open MPI's output (pipe: %s)", strerror(errno));
        return c;
    }
    snprintf(c->t.how, sizeof c->t.how, "Open MPI's own selection lines (OMPI_MCA_{pml,mtl,btl}_base_verbose)");
    return c;
}

void dist_capture_end(dist_capture *c) {
    if (!c) return;
    if (c->threaded) {
        fflush(stderr);
        dup2(c->real_fd, 2);
        close(c->pipe_wr);
        atomic_store(&c->stop, 1);
        pthread_join(c->thread, NULL);
        close(c->pipe_rd);
        close(c->real_fd);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->synced);
    free(c);
}

void dist_capture_pause(dist_capture *c) {
    if (!c || !c->threaded) return;
    fflush(stderr);
    dup2(c->real_fd, 2);
    // Wait (a second at most) until the thread has read what MPI_Init wrote: then the
    // transport is complete when asked for. (The write may block on a full pipe: not under mu,
    // which the thread needs to drain it.)
    pthread_mutex_lock(&c->mu);
    int want = c->nsync + 1;
    pthread_mutex_unlock(&c->mu);
    char line[sizeof capture_sync + 1];
    snprintf(line, sizeof line, "%s\n", capture_sync);
    if (write(c->pipe_wr, line, strlen(line)) != (ssize_t)strlen(line)) return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&c->mu);
    while (c->nsync < want && pthread_cond_timedwait(&c->synced, &c->mu, &until) == 0) {}
    pthread_mutex_unlock(&c->mu);
}

void dist_capture_resume(dist_capture *c) {
    if (!c || !c->threaded) return;
    fflush(stderr);
    dup2(c->pipe_wr, 2);
}

// Polls n requests until they complete (0) or timeout seconds pass (-1).
static int probe_wait(int n, MPI_Request *r, double timeout) {
    double t0 = dist_now();
    struct timespec nap = {0, 20000};
    for (;;) {
        int done = 0;
        MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (done) return 0;
        double waited = dist_now() - t0;
        if (waited > timeout) return -1;
        if (waited > 0.005) nanosleep(&nap, NULL);  // spin the first 5 ms: small sums are timed
    }
}

enum { PROBE_TAG_GATHER = 7301 };

int dist_probe_gather(gl_dist *d, const void *mine, int bytes, void *all, unsigned char *missing, double timeout) {
    if (missing) memset(missing, 0, (size_t)d->world);
    if (d->rank == 0) memcpy(all, mine, (size_t)bytes);
    if (!d->mpi || d->world == 1) return 0;
    if (d->rank != 0) {
        MPI_Request r;
        MPI_Isend(mine, bytes, MPI_BYTE, 0, PROBE_TAG_GATHER, COMM(d), &r);
        return probe_wait(1, &r, timeout) == 0 ? 0 : 1;
    }
    MPI_Request *r = gl_xmalloc(sizeof *r * (size_t)d->world);
    r[0] = MPI_REQUEST_NULL;
    for (int k = 1; k < d->world; k++)
        MPI_Irecv((char *)all + (size_t)k * (size_t)bytes, bytes, MPI_BYTE, k, PROBE_TAG_GATHER, COMM(d), &r[k]);
    int lost = 0;
    if (probe_wait(d->world, r, timeout) != 0) {
        for (int k = 1; k < d->world; k++) {
            int done = 0;
            MPI_Test(&r[k], &done, MPI_STATUS_IGNORE);
            if (done) continue;
            lost++;
            if (missing) missing[k] = 1;
        }
    }
    free(r);  // unanswered receives are left behind: the caller ends the job after a loss
    return lost;
}

int dist_probe_meet(gl_dist *d, unsigned char *missing, double timeout) {
    char in = 1, *all = d->rank == 0 ? gl_xmalloc((size_t)d->world) : &in;
    int lost = dist_probe_gather(d, &in, 1, all, missing, timeout);
    if (all != &in) free(all);
    if (lost) return lost;
    return dist_probe_bcast(d, &in, 1, timeout) == 0 ? 0 : 1;
}

int dist_probe_bcast(gl_dist *d, void *buf, int bytes, double timeout) {
    if (!d->mpi || d->world == 1) return 0;
    MPI_Request r;
    MPI_Ibcast(buf, bytes, MPI_BYTE, 0, COMM(d), &r);
    return probe_wait(1, &r, timeout);
}

int dist_probe_max(gl_dist *d, double *v, int n, double timeout) {
    if (!d->mpi || d->world == 1) return 0;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, COMM(d), &r);
    return probe_wait(1, &r, timeout);
}

double dist_probe_allreduce_time(gl_dist *d, float *buf, int64_t count, int iters, double timeout) {
    if (!d->mpi || d->world == 1 || count > INT32_MAX) return -1;
    double t0 = dist_now();
    for (int i = 0; i < iters; i++) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, COMM(d), &r);
        if (probe_wait(1, &r, timeout) != 0) return -1;
    }
    double per = (dist_now() - t0) / iters;
    return dist_probe_max(d, &per, 1, timeout) == 0 ? per : -1;
}

#else  // no MPI in this build: one rank, nothing to capture

dist_capture *dist_capture_begin(void) { return NULL; }
void dist_capture_end(dist_capture *c) { (void)c; }
void dist_capture_pause(dist_capture *c) { (void)c; }
void dist_capture_resume(dist_capture *c) { (void)c; }
int dist_probe_gather(gl_dist *d, const void *mine, int bytes, void *all, unsigned char *missing, double timeout) {
    (void)d, (void)timeout;
    if (missing) missing[0] = 0;
    memcpy(all, mine, (size_t)bytes);
    return 0;
}
int dist_probe_meet(gl_dist *d, unsigned char *missing, double timeout) {
    (void)d, (void)timeout;
    if (missing) missing[0] = 0;
    return 0;
}
int dist_probe_bcast(gl_dist *d, void *buf, int bytes, double timeout) {
    (void)d, (void)buf, (void)bytes, (void)timeout;
    return 0;
}
int dist_probe_max(gl_dist *d, double *v, int n, double timeout) {
    (void)d, (void)v, (void)n, (void)timeout;
    return 0;
}
double dist_probe_allreduce_time(gl_dist *d, float *buf, int64_t count, int iters, double timeout) {
    (void)d, (void)buf, (void)count, (void)iters, (void)timeout;
    return -1;
}

#endif
