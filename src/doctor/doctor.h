// doctor.h: `galley doctor`: checks, before a long job, that every rank and node is wired,
// bound and as fast as the others, and that the transports are the ones the site expects.
//
//   cmd_doctor.c             options, then the phases in order, across ranks
//   doctor_probe_env.c       this rank: host, cores, NUMA, GPU, ulimit -l, /dev/shm, HDF5 locking
//   doctor_wiring.c          what the site hooks reported (GALLEY_WIRING_FILE)
//   doctor_site.c            what the site expects: transports, variables, bandwidth
//   doctor_fs.c              a data path: its filesystem and whether it takes file locks
//   doctor_read.c            the read probe of a data file (MB/s)
//   doctor_compute.c         the compute probe: GEMM and a 3x3 convolution through the backend
//   doctor_bw.c              MPI allreduce bus bandwidth within nodes, across nodes, all ranks
//   doctor_nccl.c            the same over NCCL on GPUs, and NCCL's own account of its network
//   doctor_findings.c        what is wrong, by host name and rank
//   doctor_report.c          the summary table; doctor_json.c the --json document
//   doctor_watchdog.c        ends a rank that hangs where no collective can be bounded (MPI_Init)
//
// Every rank fills one doctor_rank (fixed size, gathered as bytes); rank 0 judges and reports.
#ifndef GALLEY_DOCTOR_H
#define GALLEY_DOCTOR_H

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dist/dist_probe.h"
#include "galley/backend.h"
#include "galley/dist.h"

#define DOCTOR_MAX_DATA 4     // --data paths
#define DOCTOR_NSIZES 10      // allreduce sizes: 1 KiB * 4^i, i < 10 (up to 256 MiB)
#define DOCTOR_QUICK_SIZES 8  // --quick: up to 16 MiB
#define DOCTOR_SLOW 0.15      // a rank this far below the median is flagged
#define DOCTOR_HOST 64

// Which allreduce: within each node, across nodes (one rank per node), all ranks, NCCL (all).
enum { BW_NODE, BW_NET, BW_ALL, BW_NCCL, BW_KINDS };

typedef struct {
    const char *site;                   // --site NAME|PATH, NULL: the site the hooks chose
    const char *data[DOCTOR_MAX_DATA];  // --data
    int ndata;
    const char *json;                   // --json FILE, "-" for stdout, NULL: none
    int quick;
    double timeout;                     // --timeout: seconds any wait on other ranks may take
} doctor_opts;

// One --data path as one rank found it.
typedef struct {
    int32_t ok;       // 1: there is a file to read
    int32_t lock;     // flock(2) on it: 1 works, 0 refused by the filesystem, -1 not tried
    char fstype[24];  // from the mount table
    char mount[80];
    char file[160];   // the file read (a folder's first, by name)
    char why[200];    // !ok: why it cannot be read; lock == 0: the error
    double mbs, bytes, seconds;  // the read probe
} doctor_path;

// What the site hooks reported (doctor_wiring.c).
typedef struct {
    char state[16];    // "report", "no hooks", "unreadable"
    char site[32], runtime[24];
    char folder[160];   // the site's folder, as the report names it
    char site_dir[160]; // the folder of the entrypoint that wrote it (the image's site/)
    int32_t nset, nkept;
    char warning[200];  // the report's first warning line, if any
} doctor_wiring;

// What the site expects (doctor_site.c). Every rank loads it (the same files in the image) and
// checks its own environment against it.
#define DOCTOR_SITE_VARS 32
typedef struct {
    char name[48];            // the site (or network profile) checked against; "" none
    char how[200];            // where it came from: --site, the wiring report
    char error[240];          // why it could not be loaded (a finding); "" fine
    char network[24];         // site.env NETWORK (tcp: nothing expected of the transports)
    char pml[16], mtl[16];    // <network>-ompi.env's OMPI_MCA_pml, OMPI_MCA_mtl
    char nccl_net[40];        // <network>-nccl.env's NCCL_NET
    char no_locking[64];      // FS_NO_LOCKING (default "lustre gpfs")
    double busbw_node, busbw_net;  // DOCTOR_BUSBW_NODE, DOCTOR_BUSBW_NET in GB/s; 0: not stated
    int nvars;
    struct {
        char key[40], value[48], profile[32];
    } vars[DOCTOR_SITE_VARS];
} doctor_site;

// Everything one rank reports (fixed size: gathered to rank 0 as bytes).
typedef struct {
    int32_t rank, world, local, nlocal;  // local: index among the ranks of the same host name
    char host[DOCTOR_HOST];
    int32_t ncores, threads, bound;      // bound: the affinity is narrower than the machine
    char cores[48], numa[24];
    char device[8];                      // the backend probed: "cpu" or "cuda"
    char gpu[48];                        // its UUID ("GPU-..."), "" without a GPU
    char gpu_note[120];                  // the GPU's bus id, or why there is none
    int32_t gpu_numa;                    // the GPU's NUMA node, -1 unknown
    int64_t memlock, shm;                // ulimit -l (bytes; -1 unlimited), /dev/shm size (-1 none)
    char hdf5_lock[24];                  // HDF5_USE_FILE_LOCKING as set, "(unset)"
    doctor_wiring wiring;
    char env_diff[300];                  // variables that differ from the site's profiles
    dist_transport mpi;
    char nccl_net[40], nccl_plugin[120], nccl_note[160];
    double gemm, conv;                   // GFLOP/s, 0: not measured
    double bw[BW_KINDS][DOCTOR_NSIZES];  // bus bandwidth GB/s of this rank's groups, 0: none
    int32_t bw_n[BW_KINDS];              // ranks in each group (0: not measured)
    doctor_path path[DOCTOR_MAX_DATA];
} doctor_rank;

// src into dst[cap], cut to fit (the fixed-size fields of doctor_rank).
static inline void doctor_copy(char *dst, size_t cap, const char *src) {
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

// ---- the probes (this rank) ----------------------------------------------------------------------

void doctor_probe_env(const gl_dist *d, doctor_rank *me);
// A kernel cpu list ("0-3,8", as doctor_rank.cores holds) into set.
void doctor_cpulist_parse(const char *s, cpu_set_t *set);
// The compute backend: the GPU when the CUDA backend binds one (GPU fields of me set), else the CPU.
const gl_backend *doctor_probe_backend(const gl_dist *d, doctor_rank *me);
void doctor_wiring_read(doctor_wiring *w);
void doctor_site_load(const char *asked, const doctor_wiring *w, doctor_site *s);
void doctor_site_check_env(const doctor_site *s, int gpu, doctor_rank *me);
void doctor_fs_probe(const char *path, doctor_path *p);
void doctor_read_probe(doctor_path *p, int local, int nlocal, int quick);
void doctor_compute_probe(const gl_backend *be, int threads, int quick, doctor_rank *me);
// Where the ranks are, from the roll call: every rank's host name, and the first rank on it.
typedef struct {
    char (*hosts)[DOCTOR_HOST];
    int *host_of;
} doctor_layout;
// The MPI allreduce sweep over the node, cross-node and world groups. 0, or -1 after printing
// which rank or group stopped answering.
int doctor_bw_run(gl_dist *d, const doctor_layout *l, const doctor_opts *o, doctor_rank *me, FILE *err);
// NCCL on GPUs: the sweep over all ranks and NCCL's report of its network, into me (nccl_note
// says why not, or "... failed: why": a finding).
void doctor_nccl_run(gl_dist *d, const gl_backend *be, const doctor_opts *o, doctor_rank *me);
int doctor_sizes(const doctor_opts *o);
int64_t doctor_size_bytes(int i);

// ---- rank 0: findings and report -----------------------------------------------------------------

typedef struct {
    char text[480];
    int *ranks;  // the ranks it concerns (none: the job as a whole)
    int nranks;
} doctor_finding;

typedef struct {
    doctor_finding *f;
    int n, cap;
} doctor_findings;

void doctor_finding_add(doctor_findings *fs, const int *ranks, int nranks, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void doctor_findings_free(doctor_findings *fs);
// "rank 3 on nid0042" / "ranks 0-3 on nid0042, nid0043": who a finding concerns.
void doctor_who(const doctor_rank *all, const int *ranks, int nranks, char *buf, size_t len);
// Judges every rank's report (missing[r]: rank r never answered; NULL: all did).
void doctor_judge(const doctor_rank *all, int world, const unsigned char *missing, const doctor_site *site,
                  const doctor_opts *o, doctor_findings *fs);
void doctor_report(FILE *out, const doctor_rank *all, int world, const unsigned char *missing,
                   const doctor_site *site, const doctor_opts *o, const doctor_findings *fs);
// Writes the --json document; 0, or -1 with the reason printed on err.
int doctor_json(const char *path, const doctor_rank *all, int world, const unsigned char *missing,
                const doctor_site *site, const doctor_opts *o, const doctor_findings *fs, FILE *err);

// ---- a guard where nothing else bounds the wait ------------------------------------------------------

typedef struct doctor_watchdog doctor_watchdog;
// After `seconds`, prints msg on fd and ends the process (exit 1) unless stopped first.
doctor_watchdog *doctor_watchdog_start(double seconds, int fd, const char *msg);
void doctor_watchdog_stop(doctor_watchdog *w);

#endif
