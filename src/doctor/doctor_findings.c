// doctor_findings.c: rank 0 judges every rank's report. A finding is one sentence and the ranks
// it concerns; the same sentence from several ranks is one finding naming them all, by host.
// What is judged, and against what:
//   - ranks that never answered; a site profile that cannot be loaded; the hooks' warnings;
//   - variables that differ from the site's profiles; the transport MPI (pml, mtl, TCP between
//     nodes) and NCCL ("Using network ...") chose against the profiles;
//   - binding: bound ranks of a host sharing cores or a GPU, a GPU on another NUMA node than its
//     rank's cores;
//   - ulimit -l below 64 MiB where RDMA is expected (a fabric site, or a GPU), /dev/shm missing
//     or below 1 GiB where ranks or a GPU share it;
//   - data paths that cannot be read, HDF5 locking left on where the filesystem refuses locks
//     or is one the site lists in FS_NO_LOCKING;
//   - a rank more than 15% below the median in GEMM, convolution or reading (ranks on the same
//     kind of device), a node's bus bandwidth more than 15% below the nodes' median, and bus
//     bandwidth below the site's DOCTOR_BUSBW_NODE / DOCTOR_BUSBW_NET.
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor/doctor.h"
#include "galley/check.h"

void doctor_finding_add(doctor_findings *fs, const int *ranks, int nranks, const char *fmt, ...) {
    char text[sizeof fs->f[0].text];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    for (int i = 0; i < fs->n && nranks; i++) {  // the same sentence: one finding, more ranks
        doctor_finding *f = &fs->f[i];
        if (strcmp(f->text, text) || !f->nranks) continue;
        f->ranks = gl_xrealloc(f->ranks, sizeof(int) * (size_t)(f->nranks + nranks));
        memcpy(f->ranks + f->nranks, ranks, sizeof(int) * (size_t)nranks);
        f->nranks += nranks;
        return;
    }
    if (fs->n == fs->cap) {
        fs->cap = fs->cap ? 2 * fs->cap : 16;
        fs->f = gl_xrealloc(fs->f, sizeof *fs->f * (size_t)fs->cap);
    }
    doctor_finding *f = &fs->f[fs->n++];
    snprintf(f->text, sizeof f->text, "%s", text);
    f->nranks = nranks;
    f->ranks = nranks ? gl_xmalloc(sizeof(int) * (size_t)nranks) : NULL;
    if (nranks) memcpy(f->ranks, ranks, sizeof(int) * (size_t)nranks);
}

void doctor_findings_free(doctor_findings *fs) {
    for (int i = 0; i < fs->n; i++) free(fs->f[i].ranks);
    free(fs->f);
    memset(fs, 0, sizeof *fs);
}

static int int_cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

void doctor_who(const doctor_rank *all, const int *ranks, int nranks, char *buf, size_t len) {
    int *r = gl_xmalloc(sizeof(int) * (size_t)(nranks ? nranks : 1));
    memcpy(r, ranks, sizeof(int) * (size_t)nranks);
    qsort(r, (size_t)nranks, sizeof *r, int_cmp);
    size_t n = (size_t)snprintf(buf, len, nranks > 1 ? "ranks " : "rank ");
    for (int i = 0; i < nranks && n < len; i++) {  // 0-3,7
        int j = i;
        while (j + 1 < nranks && r[j + 1] == r[j] + 1) j++;
        n += (size_t)snprintf(buf + n, len - n, "%s%d", i ? "," : "", r[i]);
        if (j > i && n < len) n += (size_t)snprintf(buf + n, len - n, "-%d", r[j]);
        i = j;
    }
    for (int i = 0; i < nranks && n < len; i++) {  // " on a, b": hosts in rank order, once each
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = !strcmp(all[r[k]].host, all[r[i]].host);
        if (!seen) n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : " on ", all[r[i]].host);
    }
    free(r);
}

static void add1(doctor_findings *fs, int rank, const char *fmt, const char *a, const char *b) {
    doctor_finding_add(fs, &rank, 1, fmt, a, b);
}

// The site hooks, the site's variables and the transports, one rank at a time.
static void judge_wiring(const doctor_rank *m, const doctor_site *s, doctor_findings *fs) {
    if (m->wiring.warning[0]) add1(fs, m->rank, "the site hooks said: %s%s", m->wiring.warning, "");
    if (m->env_diff[0]) add1(fs, m->rank, "variables differ from site %s's profiles: %s", s->name, m->env_diff);
    const dist_transport *t = &m->mpi;
    if (s->pml[0] && t->pml[0] && strcmp(s->pml, t->pml))
        add1(fs, m->rank, "MPI uses pml %s, the site's profile wants %s", t->pml, s->pml);
    if (s->mtl[0] && t->pml[0] && strcmp(s->mtl, t->mtl))
        add1(fs, m->rank, "MPI uses mtl %s, the site's profile wants %s", t->mtl[0] ? t->mtl : "none", s->mtl);
    if (s->network[0] && strcmp(s->network, "tcp") && strstr(t->btl_net, "tcp"))
        add1(fs, m->rank, "MPI reaches other nodes over TCP (btl %s) on a %s site", t->btl_net, s->network);
    if (strstr(m->nccl_note, " failed: ")) add1(fs, m->rank, "NCCL: %s%s", m->nccl_note, "");
    if (m->nccl_net[0] && s->nccl_net[0] && !strcasestr(m->nccl_net, s->nccl_net) && !strcasestr(s->nccl_net, m->nccl_net))
        add1(fs, m->rank, "NCCL uses network '%s', the site's profile wants '%s' (Socket is TCP, about 3x slower)",
             m->nccl_net, s->nccl_net);
}

// ulimit -l, /dev/shm, the data paths.
static void judge_limits(const doctor_rank *m, const doctor_site *s, const doctor_opts *o, doctor_findings *fs) {
    int gpu = m->gpu[0] != 0, fabric = s->network[0] && strcmp(s->network, "tcp");
    if (m->memlock >= 0 && m->memlock < (64 << 20) && (gpu || fabric))
        doctor_finding_add(fs, &m->rank, 1, "ulimit -l is %lld KiB: RDMA (%s) needs locked memory; ask for unlimited",
                           (long long)(m->memlock >> 10), gpu ? "GPU, NCCL" : "the fabric");
    if (m->shm < 0) doctor_finding_add(fs, &m->rank, 1, "there is no /dev/shm: MPI and NCCL keep their shared memory there");
    else if (m->shm < (1LL << 30) && (m->nlocal > 1 || gpu))
        doctor_finding_add(fs, &m->rank, 1, "/dev/shm holds only %lld MiB: MPI and NCCL between the ranks of a node need more "
                           "(containers: --shm-size)", (long long)(m->shm >> 20));
    int lock_off = !strcasecmp(m->hdf5_lock, "FALSE");
    for (int i = 0; i < o->ndata; i++) {
        const doctor_path *p = &m->path[i];
        if (!p->ok && p->why[0]) add1(fs, m->rank, "data path %s cannot be read: %s", o->data[i], p->why);
        char types[80];
        snprintf(types, sizeof types, " %s ", s->no_locking);
        char t[32];
        snprintf(t, sizeof t, " %s ", p->fstype);
        if (lock_off || !p->ok) continue;
        if (p->lock == 0)
            add1(fs, m->rank, "HDF5 file locking is on (HDF5_USE_FILE_LOCKING %s) but the filesystem of %s refuses locks: "
                 "set HDF5_USE_FILE_LOCKING=FALSE", m->hdf5_lock, o->data[i]);
        else if (strstr(types, t))
            doctor_finding_add(fs, &m->rank, 1, "HDF5 file locking is on (HDF5_USE_FILE_LOCKING %s) and %s is on %s, "
                               "where locks fail or stall: set HDF5_USE_FILE_LOCKING=FALSE", m->hdf5_lock, o->data[i], p->fstype);
    }
}

// Bound ranks of one host that share cores or a GPU; a GPU on another NUMA node than the cores.
static void judge_binding(const doctor_rank *all, int world, const unsigned char *missing, doctor_findings *fs) {
    for (int a = 0; a < world; a++) {
        const doctor_rank *m = &all[a];
        if (missing && missing[a]) continue;
        char node[8];
        snprintf(node, sizeof node, "%d", m->gpu_numa);
        if (m->gpu[0] && m->gpu_numa >= 0 && m->numa[0] != '?' && !strstr(m->numa, node))
            doctor_finding_add(fs, &m->rank, 1, "its GPU is on NUMA node %d, its cores (%s) on %s: bind each rank to the "
                               "cores next to its GPU (the site's GPU_ORDER)", m->gpu_numa, m->cores, m->numa);
        for (int b = a + 1; b < world; b++) {
            const doctor_rank *n = &all[b];
            if ((missing && missing[b]) || strcmp(m->host, n->host)) continue;
            int pair[2] = {a, b};
            if (m->gpu[0] && !strcmp(m->gpu, n->gpu))
                doctor_finding_add(fs, pair, 2, "two ranks share the GPU %s (NCCL refuses a shared GPU)", m->gpu);
            if (!m->bound || !n->bound) continue;
            cpu_set_t x, y, both;
            doctor_cpulist_parse(m->cores, &x);
            doctor_cpulist_parse(n->cores, &y);
            CPU_AND(&both, &x, &y);
            if (CPU_COUNT(&both))
                doctor_finding_add(fs, pair, 2, "two ranks are bound to the same cores (%s and %s): they take turns",
                                   m->cores, n->cores);
        }
    }
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// One rank's figure to compare (i: the --data path); 0 when it has none.
typedef double (*rank_value)(const doctor_rank *m, int i);
static double v_gemm(const doctor_rank *m, int i) { return (void)i, m->gemm; }
static double v_conv(const doctor_rank *m, int i) { return (void)i, m->conv; }
static double v_read(const doctor_rank *m, int i) { return m->path[i].seconds >= 0.2 ? m->path[i].mbs : 0; }

// Flags ranks more than DOCTOR_SLOW below the median of the ranks on the same device.
static void judge_slow(const doctor_rank *all, int world, const unsigned char *missing, rank_value get, int i,
                       const char *what, const char *unit, doctor_findings *fs) {
    double *v = gl_xmalloc(sizeof(double) * (size_t)world);
    for (int dev = 0; dev < 2; dev++) {
        const char *name = dev ? "cuda" : "cpu";
        int n = 0;
        for (int r = 0; r < world; r++)
            if ((!missing || !missing[r]) && !strcmp(all[r].device, name) && get(&all[r], i) > 0) v[n++] = get(&all[r], i);
        if (n < 2) continue;
        qsort(v, (size_t)n, sizeof *v, dbl_cmp);
        double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        for (int r = 0; r < world; r++) {
            double x = (!missing || !missing[r]) && !strcmp(all[r].device, name) ? get(&all[r], i) : 0;
            if (x > 0 && x < (1 - DOCTOR_SLOW) * med)
                doctor_finding_add(fs, &r, 1, "%s %.1f %s, %.0f%% below the median %.1f of the %d %s ranks", what, x, unit,
                                   100 * (1 - x / med), med, n, name);
        }
    }
    free(v);
}

// Each node's bus bandwidth at the largest size: against the other nodes and the site's figure;
// the network's (one rank per node) against the site's.
static void judge_bw(const doctor_rank *all, int world, const unsigned char *missing, const doctor_site *s,
                     const doctor_opts *o, doctor_findings *fs) {
    int last = doctor_sizes(o) - 1, n = 0;
    double mib = (double)(doctor_size_bytes(last) >> 20);
    double *v = gl_xmalloc(sizeof(double) * (size_t)world);
    int *firsts = gl_xmalloc(sizeof(int) * (size_t)world);
    for (int r = 0; r < world; r++)  // the first rank of each host that measured its node
        if ((!missing || !missing[r]) && all[r].local == 0 && all[r].bw_n[BW_NODE] > 0)
            firsts[n] = r, v[n++] = all[r].bw[BW_NODE][last];
    for (int k = 0; k < n; k++) {
        const doctor_rank *m = &all[firsts[k]];
        if (s->busbw_node > 0 && v[k] < s->busbw_node)
            doctor_finding_add(fs, &m->rank, 1, "allreduce within host %s: %.2f GB/s bus bandwidth at %.0f MiB, below "
                               "the site's %.2f (DOCTOR_BUSBW_NODE)", m->host, v[k], mib, s->busbw_node);
    }
    double *sorted = gl_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, dbl_cmp);
    double med = n < 2 ? 0 : n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    for (int k = 0; k < n && n >= 2; k++)
        if (v[k] < (1 - DOCTOR_SLOW) * med)
            doctor_finding_add(fs, &all[firsts[k]].rank, 1, "allreduce within host %s: %.2f GB/s bus bandwidth at %.0f MiB, "
                               "%.0f%% below the median %.2f of the %d nodes", all[firsts[k]].host, v[k], mib,
                               100 * (1 - v[k] / med), med, n);
    if (all[0].bw_n[BW_NET] > 0 && s->busbw_net > 0 && all[0].bw[BW_NET][last] < s->busbw_net)
        doctor_finding_add(fs, NULL, 0, "allreduce across the %d nodes: %.2f GB/s bus bandwidth at %.0f MiB, below the "
                           "site's %.2f (DOCTOR_BUSBW_NET)", all[0].bw_n[BW_NET], all[0].bw[BW_NET][last], mib, s->busbw_net);
    free(sorted), free(v), free(firsts);
}

void doctor_judge(const doctor_rank *all, int world, const unsigned char *missing, const doctor_site *site,
                  const doctor_opts *o, doctor_findings *fs) {
    int lost = 0, *ranks = gl_xmalloc(sizeof(int) * (size_t)world);
    for (int r = 0; r < world; r++)
        if (missing && missing[r]) ranks[lost++] = r;
    if (lost)
        doctor_finding_add(fs, ranks, lost, "no answer within %.0f s (--timeout): the node cannot be reached, or the "
                           "rank hangs", o->timeout);
    free(ranks);
    if (site->error[0]) doctor_finding_add(fs, NULL, 0, "%s", site->error);
    for (int r = 0; r < world; r++) {
        if (missing && missing[r]) continue;
        if (strcmp(all[r].wiring.site, all[0].wiring.site))
            add1(fs, r, "the hooks chose site '%s' here but '%s' on rank 0", all[r].wiring.site, all[0].wiring.site);
        judge_wiring(&all[r], site, fs);
        judge_limits(&all[r], site, o, fs);
    }
    judge_binding(all, world, missing, fs);
    judge_slow(all, world, missing, v_gemm, 0, "GEMM", "GFLOP/s", fs);
    judge_slow(all, world, missing, v_conv, 0, "3x3 convolution", "GFLOP/s", fs);
    for (int i = 0; i < o->ndata; i++) {
        char what[200];
        snprintf(what, sizeof what, "reading %s", o->data[i]);
        judge_slow(all, world, missing, v_read, i, what, "MB/s", fs);
    }
    judge_bw(all, world, missing, site, o, fs);
}
