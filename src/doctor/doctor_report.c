// doctor_report.c: the summary rank 0 prints: a line per rank (where it runs, how it is bound,
// its limits, what the hooks and MPI did, its compute rates), the data paths, the bus bandwidth
// table, NCCL, and the findings with the verdict.
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor/doctor.h"
#include "galley/check.h"

// "8 MiB", "23.5 GiB", "unlimited"
static void bytes_text(int64_t b, char *buf, size_t len) {
    if (b < 0) snprintf(buf, len, "%s", "unlimited");
    else if (b >= (1LL << 30)) snprintf(buf, len, "%.1f GiB", (double)b / (1 << 30));
    else if (b >= (1 << 20)) snprintf(buf, len, "%lld MiB", (long long)(b >> 20));
    else snprintf(buf, len, "%lld KiB", (long long)(b >> 10));
}

static int count_hosts(const doctor_rank *all, int world) {
    int n = 0;
    for (int r = 0; r < world; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = !strcmp(all[q].host, all[r].host);
        n += !seen;
    }
    return n;
}

static void report_header(FILE *out, const doctor_rank *all, int world, const doctor_site *s, const doctor_opts *o) {
    int hosts = count_hosts(all, world);
    fprintf(out, "galley doctor: %d rank%s on %d host%s%s, timeout %.0f s\n", world, world > 1 ? "s" : "", hosts,
            hosts > 1 ? "s" : "", o->quick ? ", --quick" : "", o->timeout);
    if (s->name[0] && !s->error[0])
        fprintf(out, "site:    %s, from %s; network %s%s%s%s%s\n", s->name, s->how, s->network, s->pml[0] ? ", MPI pml " : "",
                s->pml, s->nccl_net[0] ? ", NCCL net " : "", s->nccl_net);
    else fprintf(out, "site:    %s\n", s->error[0] ? s->error : s->how);
    const dist_transport *t = &all[0].mpi;
    fprintf(out, "MPI:     %s (%s)\n", t->library[0] ? t->library : "none", t->how);
    fprintf(out, "hooks:   rank 0: %s%s%s%s%s\n", all[0].wiring.state, all[0].wiring.runtime[0] ? ", runtime " : "",
            all[0].wiring.runtime, all[0].wiring.site[0] ? ", site " : "", all[0].wiring.site);
}

static void report_ranks(FILE *out, const doctor_rank *all, int world, const unsigned char *missing) {
    int hw = 4;
    for (int r = 0; r < world; r++) hw = (int)strlen(all[r].host) > hw ? (int)strlen(all[r].host) : hw;
    if (hw > 32) hw = 32;
    fprintf(out, "\n%4s  %-*s  %-5s  %-10s %-4s  %-6s  %-9s  %-9s  %-8s  %-8s  %-11s  %-13s  %6s  %6s\n", "rank", hw,
            "host", "local", "cores", "numa", "device", "ulimit -l", "/dev/shm", "hdf5lock", "hooks", "mpi pml/mtl",
            "btl node/net", "GEMM", "conv");
    for (int r = 0; r < world; r++) {
        const doctor_rank *m = &all[r];
        if (missing && missing[r]) {
            fprintf(out, "%4d  %-*.*s  no answer\n", r, hw, hw, m->host);
            continue;
        }
        char lock[16], shm[16], local[16], pml[64], btl[112];
        bytes_text(m->memlock, lock, sizeof lock);
        bytes_text(m->shm, shm, sizeof shm);
        if (m->shm < 0) snprintf(shm, sizeof shm, "missing");
        snprintf(local, sizeof local, "%d/%d", m->local, m->nlocal);
        snprintf(pml, sizeof pml, "%s/%s", m->mpi.pml[0] ? m->mpi.pml : "-", m->mpi.mtl[0] ? m->mpi.mtl : "-");
        snprintf(btl, sizeof btl, "%s/%s", m->mpi.btl_node[0] ? m->mpi.btl_node : "-", m->mpi.btl_net[0] ? m->mpi.btl_net : "-");
        fprintf(out, "%4d  %-*.*s  %-5s  %-10s %-4s  %-6s  %-9s  %-9s  %-8s  %-8s  %-11s  %-13s  %6.1f  %6.1f\n", r, hw,
                hw, m->host, local, m->cores, m->numa, m->device, lock, shm, m->hdf5_lock, m->wiring.state, pml, btl,
                m->gemm, m->conv);
    }
    fprintf(out, "(GEMM and conv in GFLOP/s, best of several trials; cores: the ones the rank may run on%s)\n",
            all[0].gpu[0] ? "" : "; no GPU");
    for (int r = 0; r < world; r++)
        if (all[r].gpu[0]) fprintf(out, "  rank %d GPU %s (NUMA node %d), %s\n", r, all[r].gpu, all[r].gpu_numa, all[r].gpu_note);
}

static void report_data(FILE *out, const doctor_rank *all, int world, const unsigned char *missing, const doctor_opts *o) {
    if (!o->ndata) {
        fprintf(out, "\nread probe: skipped (no --data PATH given)\n");
        return;
    }
    fprintf(out, "\nread probe (MB/s reading in 4 MiB blocks; filesystem; flock as HDF5 takes it):\n");
    for (int i = 0; i < o->ndata; i++) {
        const doctor_path *p0 = &all[0].path[i];
        fprintf(out, "  %s: %s%s%s, flock %s\n", o->data[i], p0->fstype, p0->mount[0] ? " on " : "", p0->mount,
                p0->lock == 1 ? "works" : p0->lock == 0 ? "refused" : "not tried");
        for (int r = 0; r < world; r++) {
            const doctor_path *p = &all[r].path[i];
            if (missing && missing[r]) continue;
            if (!p->ok) fprintf(out, "    rank %d on %s: %s\n", r, all[r].host, p->why[0] ? p->why : "not read");
            else fprintf(out, "    rank %d on %s: %.0f MB/s (%.0f MB of %s in %.2f s)\n", r, all[r].host, p->mbs,
                         p->bytes / 1e6, p->file, p->seconds);
        }
    }
}

// The columns of the bandwidth table: each measured node (its first rank), the network's group
// (rank 0's), all ranks, NCCL. At most 8.
static int bw_columns(const doctor_rank *all, int world, const unsigned char *missing, int *rank, int *kind,
                      char head[][40]) {
    int n = 0;
    for (int r = 0; r < world && n < 5; r++)
        if ((!missing || !missing[r]) && all[r].local == 0 && all[r].bw_n[BW_NODE] > 0) {
            rank[n] = r, kind[n] = BW_NODE;
            snprintf(head[n++], 40, "%.24s (%d)", all[r].host, all[r].bw_n[BW_NODE]);
        }
    static const char *const names[] = {"", "nodes", "all", "NCCL"};
    for (int k = BW_NET; k < BW_KINDS; k++)
        if (all[0].bw_n[k] > 0) {
            rank[n] = 0, kind[n] = k;
            snprintf(head[n++], 40, "%s (%d)", names[k], all[0].bw_n[k]);
        }
    return n;
}

static void report_bw(FILE *out, const doctor_rank *all, int world, const unsigned char *missing, const doctor_opts *o) {
    int rank[8], kind[8];
    char head[8][40];
    int n = bw_columns(all, world, missing, rank, kind, head);
    if (!n) {
        fprintf(out, "\nallreduce: not measured (%s)\n", world == 1 ? "one rank" : "no group of two ranks or more");
        return;
    }
    fprintf(out, "\nallreduce bus bandwidth, GB/s (busbw = algbw * 2(n-1)/n; columns: within a host, one rank per node, "
                 "all ranks; (n) ranks)\n%8s", "size");
    for (int c = 0; c < n; c++) fprintf(out, "  %18s", head[c]);
    fputc('\n', out);
    for (int i = 0; i < doctor_sizes(o); i++) {
        int64_t b = doctor_size_bytes(i);
        char sz[16];
        snprintf(sz, sizeof sz, b >= (1 << 20) ? "%lld MiB" : "%lld KiB", (long long)(b >= (1 << 20) ? b >> 20 : b >> 10));
        fprintf(out, "%8s", sz);
        for (int c = 0; c < n; c++) fprintf(out, "  %18.3f", all[rank[c]].bw[kind[c]][i]);
        fputc('\n', out);
    }
}

static void report_findings(FILE *out, const doctor_rank *all, const doctor_findings *fs) {
    fprintf(out, "\nNCCL:    rank 0: %s%s%s%s%s\n", all[0].nccl_note, all[0].nccl_net[0] ? "; network " : "",
            all[0].nccl_net, all[0].nccl_plugin[0] ? "; " : "", all[0].nccl_plugin);
    if (!fs->n) {
        fprintf(out, "\nhealthy: no finding (exit 0)\n");
        return;
    }
    fprintf(out, "\nfindings (%d):\n", fs->n);
    for (int i = 0; i < fs->n; i++) {
        char who[512] = "the job";
        if (fs->f[i].nranks) doctor_who(all, fs->f[i].ranks, fs->f[i].nranks, who, sizeof who);
        fprintf(out, "  - %s: %s\n", who, fs->f[i].text);
    }
    fprintf(out, "\n%d finding%s (exit 1)\n", fs->n, fs->n > 1 ? "s" : "");
}

void doctor_report(FILE *out, const doctor_rank *all, int world, const unsigned char *missing, const doctor_site *site,
                   const doctor_opts *o, const doctor_findings *fs) {
    report_header(out, all, world, site, o);
    report_ranks(out, all, world, missing);
    report_data(out, all, world, missing, o);
    report_bw(out, all, world, missing, o);
    report_findings(out, all, fs);
    fflush(out);
}
