// doctor_probe_env.c: what this rank runs on: host name, the cores it is bound to and their NUMA
// nodes, its GPU (UUID, NUMA node), ulimit -l, the size of /dev/shm, HDF5_USE_FILE_LOCKING.
#include <ctype.h>
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "doctor/doctor.h"
#include "galley/devcomm.h"

// "0-3,8,10-11": the set as ranges.
static void cpuset_text(const cpu_set_t *set, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int c = 0; c < CPU_SETSIZE && n + 16 < len; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
        n += (size_t)snprintf(buf + n, len - n, n ? ",%d" : "%d", c);
        if (e > c) n += (size_t)snprintf(buf + n, len - n, "-%d", e);
        c = e;
    }
}

// Parses a kernel cpulist ("0-3,8") into set.
void doctor_cpulist_parse(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c >= 0 && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
        s = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
}

// The NUMA nodes whose cores meet `mine`, from /sys/devices/system/node/node*/cpulist.
static void numa_of(const cpu_set_t *mine, char *buf, size_t len) {
    snprintf(buf, len, "?");
    DIR *dir = opendir("/sys/devices/system/node");
    if (!dir) return;
    int nodes[64], n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && n < 64) {
        if (strncmp(e->d_name, "node", 4) || !isdigit((unsigned char)e->d_name[4])) continue;
        char path[320], list[4096] = "";
        snprintf(path, sizeof path, "/sys/devices/system/node/%s/cpulist", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(list, sizeof list, f)) list[0] = 0;
        fclose(f);
        cpu_set_t set, both;
        doctor_cpulist_parse(list, &set);
        CPU_AND(&both, &set, mine);
        if (CPU_COUNT(&both)) nodes[n++] = atoi(e->d_name + 4);
    }
    closedir(dir);
    for (int i = 1; i < n; i++)  // a few entries: insertion sort
        for (int j = i; j > 0 && nodes[j] < nodes[j - 1]; j--) {
            int t = nodes[j];
            nodes[j] = nodes[j - 1], nodes[j - 1] = t;
        }
    size_t used = 0;
    for (int i = 0; i < n && used + 8 < len; i++) used += (size_t)snprintf(buf + used, len - used, i ? ",%d" : "%d", nodes[i]);
}

static int64_t shm_bytes(void) {
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0) return -1;
    return (int64_t)v.f_blocks * (int64_t)v.f_frsize;
}

static int64_t memlock_bytes(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return 0;
    return r.rlim_cur == RLIM_INFINITY ? -1 : (int64_t)r.rlim_cur;
}

void doctor_probe_env(const gl_dist *d, doctor_rank *me) {
    me->rank = d->rank;
    me->world = d->world;
    if (gethostname(me->host, sizeof me->host) != 0) snprintf(me->host, sizeof me->host, "?");
    me->host[sizeof me->host - 1] = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        me->ncores = CPU_COUNT(&set);
        cpuset_text(&set, me->cores, sizeof me->cores);
        numa_of(&set, me->numa, sizeof me->numa);
    } else {
        me->ncores = online > 0 ? (int)online : 1;
        snprintf(me->cores, sizeof me->cores, "?");
        snprintf(me->numa, sizeof me->numa, "?");
    }
    me->bound = online > 0 && me->ncores < online;
    me->memlock = memlock_bytes();
    me->shm = shm_bytes();
    const char *lock = getenv("HDF5_USE_FILE_LOCKING");
    snprintf(me->hdf5_lock, sizeof me->hdf5_lock, "%s", lock ? lock : "(unset)");
    me->gpu_numa = -1;
}

// The GPU's NUMA node from sysfs (its PCI bus id in lower case there), -1 unknown.
static int gpu_numa(const char *bus) {
    char id[32], path[96];
    size_t i = 0;
    for (; bus[i] && i + 1 < sizeof id; i++) id[i] = (char)tolower((unsigned char)bus[i]);
    id[i] = 0;
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", id);
    FILE *f = fopen(path, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = -1;
        fclose(f);
    }
    return n;
}

const gl_backend *doctor_probe_backend(const gl_dist *d, doctor_rank *me) {
    char msg[512] = "";
    const gl_backend *be = backend_cuda(d->local_rank, msg, sizeof msg);
    if (!be) {
        snprintf(me->device, sizeof me->device, "cpu");
        snprintf(me->gpu_note, sizeof me->gpu_note, "no GPU: %.110s", msg);
        return backend_cpu();
    }
    snprintf(me->device, sizeof me->device, "cuda");
    unsigned char u[16] = {0};
    char bus[32] = "?";
    if (devcomm_gpu_identity(u, bus, sizeof bus) == 0) {
        snprintf(me->gpu, sizeof me->gpu,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
                 u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        me->gpu_numa = gpu_numa(bus);
    }
    snprintf(me->gpu_note, sizeof me->gpu_note, "bus %.31s: %.80s", bus, msg);
    return be;
}
