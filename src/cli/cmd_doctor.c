// cmd_doctor.c: `galley doctor`: run with the launcher and container a job will use, it checks
// every rank and node before the job does (src/doctor/doctor.h lists the probes). Phases, in
// order, every wait on other ranks bounded by --timeout:
//   1. MPI_Init, with Open MPI's transport selection captured (dist_probe.h); a watchdog ends
//      a rank whose MPI_Init never returns;
//   2. this rank's facts: host, binding, GPU, limits, hooks, site expectations, data paths;
//   3. the roll call: rank 0 hears every rank's host name (who does not answer is named), and
//      every rank learns the host table, which groups ranks by node;
//   4. the compute and read probes (every rank at once), the MPI bandwidth sweep, NCCL on GPUs;
//   5. every report to rank 0, which judges, prints the table (and --json) and tells the exit
//      code to all: 0 healthy, 1 a finding, 2 cannot run (bad arguments).
// A rank that stops answering ends the job with exit 1 once the others have said who it is.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "doctor/doctor.h"
#include "galley/check.h"

static void doctor_usage(FILE *out) {
    fputs("usage: galley doctor [--site NAME|PATH] [--data PATH]... [--json FILE|-] [--quick] [--timeout S]\n", out);
}

// Options into o. -1: run; otherwise the exit code (help printed: 0, a usage error: 2).
static int doctor_args(int argc, char **argv, doctor_opts *o) {
    memset(o, 0, sizeof *o);
    o->timeout = 60;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return cli_help_for("doctor", stdout), GL_EXIT_OK;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
            continue;
        }
        int takes = !strcmp(a, "--site") || !strcmp(a, "--data") || !strcmp(a, "--json") || !strcmp(a, "--timeout");
        if (!takes) {
            fprintf(stderr, "galley doctor: error: unknown argument '%s'\n", a);
            return doctor_usage(stderr), GL_EXIT_USAGE;
        }
        if (!v || !*v) {
            fprintf(stderr, "galley doctor: error: %s needs a value\n", a);
            return doctor_usage(stderr), GL_EXIT_USAGE;
        }
        i++;
        if (!strcmp(a, "--site")) o->site = v;
        if (!strcmp(a, "--json")) o->json = v;
        if (!strcmp(a, "--data")) {
            if (o->ndata == DOCTOR_MAX_DATA) {
                fprintf(stderr, "galley doctor: error: at most %d --data paths\n", DOCTOR_MAX_DATA);
                return GL_EXIT_USAGE;
            }
            o->data[o->ndata++] = v;
        }
        if (!strcmp(a, "--timeout")) {
            char *end;
            o->timeout = strtod(v, &end);
            if (*end || !(o->timeout >= 1 && o->timeout <= 86400)) {
                fprintf(stderr, "galley doctor: error: --timeout takes seconds from 1 to 86400, got '%s'\n", v);
                return GL_EXIT_USAGE;
            }
        }
    }
    return -1;
}

// Phase 2: this rank's own facts (nothing here waits on another rank).
static const gl_backend *doctor_facts(const gl_dist *d, dist_capture *cap, const doctor_opts *o, doctor_rank *me,
                                      doctor_site *site) {
    doctor_probe_env(d, me);
    dist_capture_transport(cap, &me->mpi);
    doctor_wiring_read(&me->wiring);
    const gl_backend *be = doctor_probe_backend(d, me);
    doctor_site_load(o->site, &me->wiring, site);
    doctor_site_check_env(site, me->gpu[0] != 0, me);
    for (int i = 0; i < o->ndata; i++) doctor_fs_probe(o->data[i], &me->path[i]);
    return be;
}

// Phase 3: rank 0 hears every host name, then all learn them. Returns host_of (each rank's
// first rank on the same host), hosts (world names); ends the job if a rank does not answer.
static int *doctor_rollcall(gl_dist *d, doctor_rank *me, double timeout, char (**hosts)[DOCTOR_HOST]) {
    char(*h)[DOCTOR_HOST] = gl_xcalloc((size_t)d->world, DOCTOR_HOST);
    unsigned char *missing = gl_xcalloc((size_t)d->world, 1);
    int lost = dist_probe_gather(d, me->host, DOCTOR_HOST, h, missing, timeout);
    if (lost && d->rank == 0) {
        fprintf(stderr, "galley doctor: finding: %d of %d ranks did not answer the roll call within %.0f s (--timeout): "
                        "their nodes cannot be reached, or they hang:", lost, d->world, timeout);
        for (int r = 0; r < d->world; r++)
            if (missing[r]) fprintf(stderr, " rank %d", r);
        fprintf(stderr, "\n");
    }
    if (!lost && dist_probe_bcast(d, h, d->world * DOCTOR_HOST, timeout) != 0) lost = 1;
    if (lost && d->rank != 0)
        fprintf(stderr, "galley doctor: finding: rank %d on %s: rank 0 did not complete the roll call within %.0f s "
                        "(--timeout): its node cannot be reached, or it hangs\n", d->rank, me->host, timeout);
    free(missing);
    if (lost) dist_abort(d, GL_EXIT_RUNTIME);
    int *host_of = gl_xmalloc(sizeof(int) * (size_t)d->world);
    for (int r = 0; r < d->world; r++) {
        host_of[r] = r;
        for (int q = 0; q < r && host_of[r] == r; q++)
            if (!strcmp(h[q], h[r])) host_of[r] = q;
    }
    for (int r = 0; r < d->world; r++)
        if (host_of[r] == host_of[d->rank]) me->local += r < d->rank, me->nlocal++;
    *hosts = h;
    return host_of;
}

// Phase 4: the probes. The compute probe takes the rank's cores (a share of the node's when
// ranks are not bound). Ends the job when a group stops answering (doctor_bw says which).
static void doctor_probes(gl_dist *d, const gl_backend *be, const doctor_layout *l, const doctor_opts *o,
                          doctor_rank *me) {
    int threads = me->bound || me->nlocal <= 1 ? me->ncores : me->ncores / me->nlocal;
    doctor_compute_probe(be, threads > 0 ? threads : 1, o->quick, me);
    for (int i = 0; i < o->ndata; i++) doctor_read_probe(&me->path[i], me->local, me->nlocal, o->quick);
    if (doctor_bw_run(d, l, o, me, stderr) != 0) dist_abort(d, GL_EXIT_RUNTIME);
    doctor_nccl_run(d, be, o, me);
}

// Phase 5 on rank 0: judge what arrived (ranks that did not: their host from the roll call),
// print, write --json. The exit code.
static int doctor_verdict(doctor_rank *all, int world, const unsigned char *missing, char (*hosts)[DOCTOR_HOST],
                          const doctor_site *site, const doctor_opts *o, FILE *json) {
    for (int r = 0; r < world; r++)
        if (missing[r]) {
            memset(&all[r], 0, sizeof all[r]);
            all[r].rank = r;
            snprintf(all[r].host, sizeof all[r].host, "%s", hosts[r]);
        }
    doctor_findings fs = {0};
    doctor_judge(all, world, missing, site, o, &fs);
    FILE *out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
    doctor_report(out, all, world, missing, site, o, &fs);
    int code = fs.n ? GL_EXIT_RUNTIME : GL_EXIT_OK;
    if (json) fclose(json);  // opened (and so checked) before the probes; written whole now
    if (o->json && doctor_json(o->json, all, world, missing, site, o, &fs, stderr) != 0) code = GL_EXIT_USAGE;
    doctor_findings_free(&fs);
    return code;
}

// Phase 5: every report to rank 0; the verdict back to all. Ends the job if a rank is lost.
static int doctor_finish(gl_dist *d, doctor_rank *me, char (*hosts)[DOCTOR_HOST], const doctor_site *site,
                         const doctor_opts *o, FILE *json) {
    doctor_rank *all = d->rank == 0 ? gl_xcalloc((size_t)d->world, sizeof *all) : me;
    unsigned char *missing = gl_xcalloc((size_t)d->world, 1);
    int lost = dist_probe_gather(d, me, (int)sizeof *me, all, missing, o->timeout);
    int code = GL_EXIT_RUNTIME;
    if (d->rank == 0) code = doctor_verdict(all, d->world, missing, hosts, site, o, json);
    else if (lost)
        fprintf(stderr, "galley doctor: finding: rank %d on %s: rank 0 did not take its report within %.0f s (--timeout)\n",
                d->rank, me->host, o->timeout);
    if (!lost && dist_probe_bcast(d, &code, (int)sizeof code, o->timeout) != 0) {
        fprintf(stderr, "galley doctor: finding: rank %d on %s: no verdict from rank 0 within %.0f s (--timeout)\n",
                d->rank, me->host, o->timeout);
        lost = 1;
    }
    if (all != me) free(all);
    free(missing);
    if (lost) dist_abort(d, GL_EXIT_RUNTIME);  // MPI cannot finish with a rank gone
    return code;
}

// Rank 0 opens --json FILE before anything runs, so a bad path stops every rank at once (exit 2).
static int doctor_open_json(gl_dist *d, const doctor_opts *o, FILE **json) {
    *json = NULL;
    int code = GL_EXIT_OK;
    if (d->rank == 0 && o->json && strcmp(o->json, "-")) {
        *json = fopen(o->json, "w");
        if (!*json) {
            fprintf(stderr, "galley doctor: error: cannot write --json %s: %s\n", o->json, strerror(errno));
            code = GL_EXIT_USAGE;
        }
    }
    return dist_agree(d, code, "opening --json", stderr);
}

static int doctor_main(gl_dist *d, dist_capture *cap, const doctor_opts *o) {
    FILE *json;
    int code = doctor_open_json(d, o, &json);
    if (code) return code;
    doctor_rank *me = gl_xcalloc(1, sizeof *me);
    doctor_site *site = gl_xcalloc(1, sizeof *site);
    const gl_backend *be = doctor_facts(d, cap, o, me, site);
    doctor_layout l = {NULL, NULL};
    l.host_of = doctor_rollcall(d, me, o->timeout, &l.hosts);
    doctor_probes(d, be, &l, o, me);
    code = doctor_finish(d, me, l.hosts, site, o, json);
    free(l.host_of), free(l.hosts), free(site), free(me);
    return code;
}

int cmd_doctor(int argc, char **argv) {
    doctor_opts o;
    int code = doctor_args(argc, argv, &o);
    if (code >= 0) return code;
    // MPI_Init and MPI_Finalize may wait for a node that never comes: a watchdog bounds both.
    char msg[256], host[DOCTOR_HOST] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(msg, sizeof msg, "galley doctor: finding: process %d on %s: MPI did not start (or finish) within %.0f s "
                              "(--timeout + 10): a node of the job cannot be reached, or a rank did not start\n",
             (int)getpid(), host, o.timeout + 10);
    int errfd = dup(2);  // the real stderr: fd 2 goes through the capture while MPI starts
    dist_capture *cap = dist_capture_begin();
    doctor_watchdog *w = doctor_watchdog_start(o.timeout + 10, errfd, msg);
    gl_dist d;
    code = dist_init(&d, o.timeout, stderr);
    doctor_watchdog_stop(w);
    dist_capture_pause(cap);
    if (code == GL_EXIT_OK) code = doctor_main(&d, cap, &o);
    dist_capture_resume(cap);
    w = doctor_watchdog_start(o.timeout + 10, errfd, msg);
    dist_finalize(&d);
    doctor_watchdog_stop(w);
    dist_capture_end(cap);
    close(errfd);
    return code;
}
