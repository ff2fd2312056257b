// doctor_json.c: `galley doctor --json FILE|-`: the whole report as one JSON document (schema
// "galley_doctor": 1): the site, every rank (its probes; "answered": false for a rank that never
// did; memlock_bytes null: unlimited, shm_bytes null: no /dev/shm), the bandwidth tables (bus bandwidth in GB/s per size in "sizes" bytes), the findings
// with their ranks and hosts, and "exit".
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"
#include "galley/check.h"
#include "log/json.h"

static void json_site(jbuf *b, const doctor_site *s) {
    jb_open(b, "site", '{');
    jb_str(b, "name", s->name);
    jb_str(b, "how", s->how);
    jb_str(b, "error", s->error);
    jb_str(b, "network", s->network);
    jb_str(b, "pml", s->pml);
    jb_str(b, "mtl", s->mtl);
    jb_str(b, "nccl_net", s->nccl_net);
    jb_num(b, "busbw_node", s->busbw_node);
    jb_num(b, "busbw_net", s->busbw_net);
    jb_close(b);
}

static void json_bw(jbuf *b, const char *key, const doctor_rank *m, int kind, int nsizes) {
    jb_open(b, key, '{');
    jb_str(b, "host", m->host);
    jb_int(b, "ranks", m->bw_n[kind]);
    jb_open(b, "busbw", '[');
    for (int i = 0; i < nsizes; i++) jb_num(b, NULL, m->bw[kind][i]);
    jb_close(b);
    jb_close(b);
}

static void json_paths(jbuf *b, const doctor_rank *m, const doctor_opts *o) {
    jb_open(b, "data", '[');
    for (int i = 0; i < o->ndata; i++) {
        const doctor_path *p = &m->path[i];
        jb_open(b, NULL, '{');
        jb_str(b, "path", o->data[i]);
        jb_bool(b, "ok", p->ok);
        jb_str(b, "why", p->why);
        jb_str(b, "file", p->file);
        jb_str(b, "fstype", p->fstype);
        jb_str(b, "mount", p->mount);
        if (p->lock < 0) jb_null(b, "flock");
        else jb_bool(b, "flock", p->lock == 1);
        jb_num(b, "read_mbs", p->mbs);
        jb_num(b, "read_bytes", p->bytes);
        jb_num(b, "read_seconds", p->seconds);
        jb_close(b);
    }
    jb_close(b);
}

static void json_rank_env(jbuf *b, const doctor_rank *m) {
    jb_str(b, "cores", m->cores);
    jb_int(b, "ncores", m->ncores);
    jb_bool(b, "bound", m->bound);
    jb_int(b, "threads", m->threads);
    jb_str(b, "numa", m->numa);
    jb_str(b, "device", m->device);
    jb_str(b, "gpu", m->gpu);
    jb_int(b, "gpu_numa", m->gpu_numa);
    jb_str(b, "gpu_note", m->gpu_note);
    if (m->memlock < 0) jb_null(b, "memlock_bytes");  // unlimited
    else jb_int(b, "memlock_bytes", m->memlock);
    if (m->shm < 0) jb_null(b, "shm_bytes");  // no /dev/shm
    else jb_int(b, "shm_bytes", m->shm);
    jb_str(b, "hdf5_use_file_locking", m->hdf5_lock);
    jb_open(b, "wiring", '{');
    jb_str(b, "state", m->wiring.state);
    jb_str(b, "site", m->wiring.site);
    jb_str(b, "runtime", m->wiring.runtime);
    jb_str(b, "folder", m->wiring.folder);
    jb_int(b, "set", m->wiring.nset);
    jb_int(b, "kept", m->wiring.nkept);
    jb_str(b, "warning", m->wiring.warning);
    jb_close(b);
    jb_str(b, "env_diff", m->env_diff);
}

static void json_rank(jbuf *b, const doctor_rank *m, int answered, const doctor_opts *o) {
    jb_open(b, NULL, '{');
    jb_int(b, "rank", m->rank);
    jb_str(b, "host", m->host);
    jb_bool(b, "answered", answered);
    if (answered) {
        jb_int(b, "local", m->local);
        jb_int(b, "nlocal", m->nlocal);
        json_rank_env(b, m);
        jb_open(b, "mpi", '{');
        jb_str(b, "library", m->mpi.library);
        jb_str(b, "pml", m->mpi.pml);
        jb_str(b, "mtl", m->mpi.mtl);
        jb_str(b, "btl_node", m->mpi.btl_node);
        jb_str(b, "btl_net", m->mpi.btl_net);
        jb_int(b, "peers", m->mpi.peers);
        jb_str(b, "how", m->mpi.how);
        jb_close(b);
        jb_open(b, "nccl", '{');
        jb_str(b, "note", m->nccl_note);
        jb_str(b, "network", m->nccl_net);
        jb_str(b, "plugin", m->nccl_plugin);
        jb_close(b);
        jb_num(b, "gemm_gflops", m->gemm);
        jb_num(b, "conv_gflops", m->conv);
        json_paths(b, m, o);
    }
    jb_close(b);
}

static void json_findings(jbuf *b, const doctor_rank *all, const doctor_findings *fs) {
    jb_open(b, "findings", '[');
    for (int i = 0; i < fs->n; i++) {
        const doctor_finding *f = &fs->f[i];
        jb_open(b, NULL, '{');
        jb_str(b, "text", f->text);
        jb_open(b, "ranks", '[');
        for (int k = 0; k < f->nranks; k++) jb_int(b, NULL, f->ranks[k]);
        jb_close(b);
        jb_open(b, "hosts", '[');
        for (int k = 0; k < f->nranks; k++) jb_str(b, NULL, all[f->ranks[k]].host);
        jb_close(b);
        jb_close(b);
    }
    jb_close(b);
}

static void json_doc(jbuf *b, const doctor_rank *all, int world, const unsigned char *missing, const doctor_site *site,
                     const doctor_opts *o, const doctor_findings *fs) {
    int nsizes = doctor_sizes(o);
    jb_open(b, NULL, '{');
    jb_int(b, "galley_doctor", 1);
    jb_int(b, "world", world);
    jb_bool(b, "quick", o->quick);
    jb_num(b, "timeout", o->timeout);
    json_site(b, site);
    jb_open(b, "sizes", '[');
    for (int i = 0; i < nsizes; i++) jb_int(b, NULL, doctor_size_bytes(i));
    jb_close(b);
    jb_open(b, "ranks", '[');
    for (int r = 0; r < world; r++) json_rank(b, &all[r], !missing || !missing[r], o);
    jb_close(b);
    jb_open(b, "bandwidth", '{');
    jb_open(b, "node", '[');
    for (int r = 0; r < world; r++)
        if ((!missing || !missing[r]) && all[r].local == 0 && all[r].bw_n[BW_NODE] > 0) json_bw(b, NULL, &all[r], BW_NODE, nsizes);
    jb_close(b);
    static const char *const keys[] = {"", "net", "all", "nccl"};
    for (int k = BW_NET; k < BW_KINDS; k++)
        if (all[0].bw_n[k] > 0) json_bw(b, keys[k], &all[0], k, nsizes);
        else jb_null(b, keys[k]);
    jb_close(b);
    json_findings(b, all, fs);
    jb_bool(b, "healthy", fs->n == 0);
    jb_int(b, "exit", fs->n ? GL_EXIT_RUNTIME : GL_EXIT_OK);
    jb_close(b);
}

int doctor_json(const char *path, const doctor_rank *all, int world, const unsigned char *missing,
                const doctor_site *site, const doctor_opts *o, const doctor_findings *fs, FILE *err) {
    size_t cap = 65536 + (size_t)world * 8192;
    for (;;) {  // grows until the document fits
        char *mem = gl_xmalloc(cap);
        jbuf b;
        jb_init(&b, mem, cap);
        json_doc(&b, all, world, missing, site, o, fs);
        if (b.truncated) {
            free(mem);
            cap *= 2;
            continue;
        }
        int stdout_ = !strcmp(path, "-");
        FILE *f = stdout_ ? stdout : fopen(path, "w");
        int ok = f && fwrite(b.p, 1, b.len, f) == b.len && fputc('\n', f) != EOF;
        if (f && !stdout_) ok = fclose(f) == 0 && ok;
        if (!ok) fprintf(err, "galley doctor: error: cannot write %s: %s\n", path, strerror(errno));
        free(mem);
        return ok ? 0 : -1;
    }
}
