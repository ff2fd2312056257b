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

// A bounded barrier over d before and after each phase, so that one phase's traffic does not
// time another's, and a rank that stopped answering is named before MPI_Comm_split waits for it.
static int phase_gap(gl_dist *d, const doctor_opts *o, const doctor_layout *l, doctor_rank *me, FILE *err) {
    unsigned char *missing = gl_xcalloc((size_t)d->world, 1);
    int lost = dist_probe_meet(d, missing, o->timeout);
    if (lost && d->rank == 0) {
        fprintf(err, "galley doctor: finding: %d rank%s did not reach the bandwidth probe's next phase within %.0f s "
                     "(--timeout): it hangs or its node cannot be reached:", lost, lost > 1 ? "s" : "", o->timeout);
        for (int r = 0; r < d->world; r++)
            if (missing[r]) fprintf(err, " rank %d on %s", r, l->hosts[r]);
        fputc('\n', err);
    } else if (lost) {
        fprintf(err, "galley doctor: finding: rank %d on %s: rank 0 (on %s) did not start the bandwidth probe's next "
                     "phase within %.0f s (--timeout)\n", me->rank, me->host, l->hosts[0], o->timeout);
    }
    free(missing);
    return lost ? -1 : 0;
}

// One phase: the group of ranks passing the same color (each group sums on its own); members of
// groups of one, or of groups not `measured`, only wait for the others. MPI_Comm_split cannot
// be bounded: all ranks meet first (bounded), and a watchdog covers the split itself.
static int phase(gl_dist *d, int color, int measured, float *buf, const doctor_opts *o, const doctor_layout *l,
                 int kind, const char *group, doctor_rank *me, FILE *err) {
    if (phase_gap(d, o, l, me, err) != 0) return -1;
    char msg[320];
    snprintf(msg, sizeof msg, "galley doctor: finding: rank %d on %s: making the groups for the bandwidth probe did not "
                              "complete within %.0f s (--timeout): a rank hangs or its node cannot be reached\n",
             me->rank, me->host, o->timeout);
    doctor_watchdog *w = doctor_watchdog_start(o->timeout, fileno(err), msg);
    gl_dist sub;
    dist_split(d, color, d->rank, &sub);
    doctor_watchdog_stop(w);
    int rc = 0;
    if (measured && sub.world > 1) {
        me->bw_n[kind] = sub.world;
        rc = sweep(&sub, buf, o, me->bw[kind], group, me, err);
    }
    dist_split_free(&sub);
    return rc;
}

int doctor_bw_run(gl_dist *d, const doctor_layout *l, const doctor_opts *o, doctor_rank *me, FILE *err) {
    const int *host_of = l->host_of;
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
    int rc = most > 1 ? phase(d, host_of[d->rank], 1, buf, o, l, BW_NODE, group, me, err) : 0;
    if (!rc && hosts > 1)
        rc = phase(d, me->local, me->local == 0, buf, o, l, BW_NET, "one rank per node (the network)", me, err);
    if (!rc && hosts > 1) rc = phase(d, 0, 1, buf, o, l, BW_ALL, "all ranks", me, err);
    if (!rc) rc = phase_gap(d, o, l, me, err);
    free(buf);
    return rc;
}
