// doctor_bw.c: allreduce bus bandwidth over MPI, as nccl-tests reports it: algbw = bytes / time,
// busbw = algbw * 2 (n - 1) / n (what each rank's link carries in a ring), from 1 KiB to 256 MiB
// in powers of 4 (--quick: to 16 MiB). Three phases, one after another:
//   node:  the ranks of each host name together (every node at once: each its own figure);
//   net:   one rank per node (each node's first by rank): the network between nodes;
//   all:   every rank (what the gradient allreduce sees), when there are several nodes.
// Groups come from host names (gethostname: a container's or UTS namespace's own), not from
// MPI's idea of a node. Every sum is bounded by --timeout; a group that stops answering is named.
#include <stdlib.h>

#include "doctor/doctor.h"
#include "galley/check.h"

int doctor_sizes(const doctor_opts *o) { return o->quick ? DOCTOR_QUICK_SIZES : DOCTOR_NSIZES; }

int64_t doctor_size_bytes(int i) { return (int64_t)1024 << (2 * i); }

// Timed sums per size: enough to move about 32 MiB (512 MiB without --quick), 2 to 20 of them.
static int iters_for(int64_t bytes, int quick) {
    double target = (quick ? 32.0 : 512.0) * (1 << 20);
    int n = (int)(target / (double)bytes);
    return n < 2 ? 2 : n > 20 ? 20 : n;
}

// "1 KiB", "16 MiB"
static void size_text(int64_t b, char *buf, size_t len) {
    if (b >= (1 << 20)) snprintf(buf, len, "%lld MiB", (long long)(b >> 20));
    else snprintf(buf, len, "%lld KiB", (long long)(b >> 10));
}

// The sweep over sub into bw[] (GB/s). 0, or -1 after saying which sum got no answer.
static int sweep(gl_dist *sub, float *buf, const doctor_opts *o, double *bw, const char *group,
                 const doctor_rank *me, FILE *err) {
    for (int i = 0; i < doctor_sizes(o); i++) {
        int64_t bytes = doctor_size_bytes(i), count = bytes / (int64_t)sizeof(float);
        double t = dist_probe_allreduce_time(sub, buf, count, 1, o->timeout);  // warm-up: connects, faults pages
        if (t >= 0) t = dist_probe_allreduce_time(sub, buf, count, iters_for(bytes, o->quick), o->timeout);
        if (t < 0) {
            char sz[32];
            size_text(bytes, sz, sizeof sz);
            fprintf(err, "galley doctor: finding: rank %d on %s: the allreduce of %s among %s got no answer "
                         "within %.0f s (--timeout): a rank there hangs or its node cannot be reached\n",
                    me->rank, me->host, sz, group, o->timeout);
            return -1;
        }
        double n = sub->world;
        bw[i] = (double)bytes / t / 1e9 * 2.0 * (n - 1) / n;
    }
    return 0;
}

// A bounded barrier over d between phases, so that one phase's traffic does not time another's.
static int phase_gap(gl_dist *d, const doctor_opts *o, const doctor_rank *me, FILE *err) {
    double v = 0;
    if (dist_probe_max(d, &v, 1, o->timeout) == 0) return 0;
    fprintf(err, "galley doctor: finding: rank %d on %s: the ranks did not meet between bandwidth phases within "
                 "%.0f s (--timeout): a rank hangs or its node cannot be reached\n", me->rank, me->host, o->timeout);
    return -1;
}

// One phase: the group of ranks passing the same color (each group sums on its own); members of
// groups of one, or of groups not `measured`, only wait for the others.
static int phase(gl_dist *d, int color, int measured, float *buf, const doctor_opts *o, int kind, const char *group,
                 doctor_rank *me, FILE *err) {
    gl_dist sub;
    dist_split(d, color, d->rank, &sub);
    int rc = 0;
    if (measured && sub.world > 1) {
        me->bw_n[kind] = sub.world;
        rc = sweep(&sub, buf, o, me->bw[kind], group, me, err);
    }
    dist_split_free(&sub);
    return rc ? rc : phase_gap(d, o, me, err);
}

int doctor_bw_run(gl_dist *d, const int *host_of, const doctor_opts *o, doctor_rank *me, FILE *err) {
    if (d->world == 1) return 0;
    int hosts = 0, most = 0;  // distinct hosts, and the most ranks on one
    for (int r = 0; r < d->world; r++) {
        hosts += host_of[r] == r;
        int n = 0;
        for (int q = 0; q < d->world; q++) n += host_of[q] == host_of[r];
        if (n > most) most = n;
    }
    float *buf = gl_xcalloc((size_t)(doctor_size_bytes(doctor_sizes(o) - 1) / 4), sizeof(float));
    char group[160];
    snprintf(group, sizeof group, "the ranks on host %s", me->host);
    int rc = most > 1 ? phase(d, host_of[d->rank], 1, buf, o, BW_NODE, group, me, err) : 0;
    if (!rc && hosts > 1)
        rc = phase(d, me->local, me->local == 0, buf, o, BW_NET, "one rank per node (the network)", me, err);
    if (!rc && hosts > 1) rc = phase(d, 0, 1, buf, o, BW_ALL, "all ranks", me, err);
    free(buf);
    return rc;
}
