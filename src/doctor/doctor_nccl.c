// doctor_nccl.c: on GPUs, NCCL's own account of the network it chose and its allreduce bus
// bandwidth over all ranks (the same sizes as over MPI). NCCL_DEBUG=INFO with
// NCCL_DEBUG_SUBSYS=INIT,NET writes its init report to a file (NCCL_DEBUG_FILE; values the user
// set are kept): "NET/Plugin ..." says whether a net plugin (aws-ofi-nccl on Slingshot) loaded,
// "Using network X" what NCCL then uses: Socket means TCP, about 3x slower than the plugin.
// Through galley/devcomm.h (the mechanism training uses); every wait bounded by --timeout.
// Runs only when every rank has a GPU (all decide alike); otherwise says why in nccl_note.
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "doctor/doctor.h"
#include "galley/devcomm.h"

// Sets the NCCL_DEBUG variables unless set; the report's path into file ("" when the user's
// NCCL_DEBUG_FILE is kept: then it is theirs to read, and said so).
static void nccl_debug_env(char *file, size_t len) {
    setenv("NCCL_DEBUG", "INFO", 0);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 0);
    file[0] = 0;
    if (getenv("NCCL_DEBUG_FILE")) return;
    const char *tmp = getenv("TMPDIR");
    snprintf(file, len, "%s/galley-doctor-nccl-%d.log", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    setenv("NCCL_DEBUG_FILE", file, 1);
}

// NCCL's net lines from its report.
static void nccl_debug_read(const char *file, doctor_rank *me) {
    FILE *f = file[0] ? fopen(file, "r") : NULL;
    if (!f) {
        snprintf(me->nccl_plugin, sizeof me->nccl_plugin, "%s", file[0] ? "NCCL wrote no report" : "report in your NCCL_DEBUG_FILE");
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const char *p = strstr(line, "NET/Plugin"), *u = strstr(line, "Using network ");
        if (p && !me->nccl_plugin[0]) snprintf(me->nccl_plugin, sizeof me->nccl_plugin, "%s", p);
        if (u && !me->nccl_net[0]) snprintf(me->nccl_net, sizeof me->nccl_net, "%s", u + 14);
    }
    fclose(f);
}

// Polls fn(c) until it is not BUSY or timeout passes: DONE, FAILED (msg) or BUSY (timed out).
static int poll_until(int (*fn)(gl_devcomm *, char *, size_t), gl_devcomm *c, double timeout, char *msg, size_t len) {
    double t0 = dist_now();
    struct timespec nap = {0, 100000};
    int s;
    while ((s = fn(c, msg, len)) == DEVCOMM_BUSY && dist_now() - t0 < timeout) nanosleep(&nap, NULL);
    if (s == DEVCOMM_BUSY) snprintf(msg, len, "no progress within %.0f s (--timeout)", timeout);
    return s;
}

// Every rank's flag (1: cannot go on) to all: 1 when any rank raised it (or one did not answer).
static int any_failed(gl_dist *d, int failed, double timeout) {
    double v = failed;
    return dist_probe_max(d, &v, 1, timeout) != 0 || v > 0;
}

// Times the sizes over c into me->bw[BW_NCCL]. 0, or -1 (msg).
static int nccl_sweep(gl_dist *d, gl_devcomm *c, float *buf, const doctor_opts *o, doctor_rank *me, char *msg, size_t len) {
    for (int i = 0; i < doctor_sizes(o); i++) {
        int64_t bytes = doctor_size_bytes(i), count = bytes / 4;
        int iters = bytes >= (64 << 20) ? 4 : 20;
        double t0 = 0;
        for (int rep = 0; rep < 2; rep++) {  // the first round warms up (connects peers)
            t0 = dist_now();
            for (int k = 0; k < (rep ? iters : 1); k++)
                if (devcomm_allreduce(c, buf, count, msg, len) == DEVCOMM_FAILED) return -1;
            devcomm_join(c);
            if (poll_until(devcomm_joined, c, o->timeout, msg, len) != DEVCOMM_DONE) return -1;
        }
        double t = (dist_now() - t0) / iters;
        if (dist_probe_max(d, &t, 1, o->timeout) != 0) return snprintf(msg, len, "a rank did not answer"), -1;
        me->bw[BW_NCCL][i] = (double)bytes / t / 1e9 * 2.0 * (d->world - 1) / d->world;
    }
    me->bw_n[BW_NCCL] = d->world;
    return 0;
}

// The communicator: rank 0's id to all, then connect. 0, or -1 (msg).
static int nccl_connect(gl_dist *d, gl_devcomm *c, double timeout, char *msg, size_t len) {
    unsigned char id[DEVCOMM_ID_BYTES] = {0};
    int bad = d->rank == 0 && devcomm_unique_id(c, id, msg, len) != DEVCOMM_DONE;
    if (any_failed(d, bad, timeout)) return -1;
    if (dist_probe_bcast(d, id, (int)sizeof id, timeout) != 0) return snprintf(msg, len, "rank 0 did not answer"), -1;
    bad = devcomm_connect(c, id, d->rank, d->world, msg, len) == DEVCOMM_FAILED ||
          poll_until(devcomm_state, c, timeout, msg, len) != DEVCOMM_DONE;
    return any_failed(d, bad, timeout) ? -1 : 0;
}

void doctor_nccl_run(gl_dist *d, const gl_backend *be, const doctor_opts *o, doctor_rank *me) {
    int gpu = !strcmp(me->device, "cuda");
    if (d->world == 1) {
        snprintf(me->nccl_note, sizeof me->nccl_note, "one rank: NCCL has no peer");
        return;
    }
    if (any_failed(d, !gpu, o->timeout)) {
        snprintf(me->nccl_note, sizeof me->nccl_note, "not run: %s", gpu ? "a rank has no GPU" : "no GPU here");
        return;
    }
    char file[256], msg[512] = "another rank could not go on";  // replaced by this rank's own error
    nccl_debug_env(file, sizeof file);
    gl_devcomm *c = devcomm_open(msg, sizeof msg);
    float *buf = c ? be->mem_alloc((size_t)doctor_size_bytes(doctor_sizes(o) - 1)) : NULL;
    int rc = any_failed(d, !buf, o->timeout) ? -1 : nccl_connect(d, c, o->timeout, msg, sizeof msg);
    if (rc == 0) rc = nccl_sweep(d, c, buf, o, me, msg, sizeof msg);
    if (rc == 0 && devcomm_finalize(c, msg, sizeof msg) != DEVCOMM_FAILED)
        rc = poll_until(devcomm_state, c, o->timeout, msg, sizeof msg) == DEVCOMM_DONE ? 0 : -1;
    char version[64];
    snprintf(version, sizeof version, "%s", c ? devcomm_version(c) : "NCCL");
    devcomm_close(c, rc != 0);
    if (buf) be->mem_free(buf);
    nccl_debug_read(file, me);
    // "failed:" in the note is a finding (doctor_findings.c)
    snprintf(me->nccl_note, sizeof me->nccl_note, "%.40s%s%.100s", version, rc ? " failed: " : "", rc ? msg : "");
}
