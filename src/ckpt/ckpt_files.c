// ckpt_files.c: naming, listing and pruning the checkpoint files of a run in checkpoint.dir.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/ckpt.h"
#include "galley/runlog.h"

// The run name as checkpoint files carry it: the run directory's safe name, and where that
// changed the name, a hash of the name as written, so that names that differ only in unsafe
// characters ("exp a", "exp_a", "a/b") never share, prune or resume each other's checkpoints.
static void safe_name(char *out, size_t len, const char *name) {
    char safe[256];
    rundir_safe_name(safe, sizeof safe, name);
    if (name && strcmp(safe, name) == 0) {
        snprintf(out, len, "%s", safe);
        return;
    }
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char *c = name ? name : ""; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    snprintf(out, len, "%s-%08x", safe, (unsigned)h);
}

void ckpt_path(char *buf, size_t len, const char *dir, const char *name, int64_t step) {
    char safe[300];
    safe_name(safe, sizeof safe, name);
    snprintf(buf, len, "%s/%s-step%08lld.h5", dir, safe, (long long)step);
}

// This host's name as it goes into temporary file names, [A-Za-z0-9._-], never empty, with the
// inode of this process's pid namespace: two containers on one node may share the host name
// but not their pids, and only a pid of our own namespace says whether its writer is alive.
static void host_name(char *out, size_t len) {
    char h[256] = "", safe[200];
    if (gethostname(h, sizeof h - 1) != 0) h[0] = 0;
    rundir_safe_name(safe, sizeof safe, h[0] ? h : "host");
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) == 0) snprintf(out, len, "%s-pidns%lu", safe, (unsigned long)ns.st_ino);
    else snprintf(out, len, "%s", safe);
}

void ckpt_tmp_path(char *buf, size_t len, const char *path, long pid) {
    char host[256];
    host_name(host, sizeof host);
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(buf, len, "%.*s/.%s.tmp.%s.%ld", (int)(slash - path), path, slash + 1, host, pid);
    else snprintf(buf, len, ".%s.tmp.%s.%ld", path, host, pid);
}

// The step of a file named <name>-step<digits>.h5, or -1.
static int64_t step_of(const char *file, const char *name) {
    size_t n = strlen(name);
    if (strncmp(file, name, n) != 0 || strncmp(file + n, "-step", 5) != 0) return -1;
    const char *d = file + n + 5;
    char *end;
    if (*d < '0' || *d > '9') return -1;
    long long s = strtoll(d, &end, 10);
    return strcmp(end, ".h5") == 0 ? s : -1;
}

typedef struct {
    char *path;
    int64_t step;
} entry;

static int newest_first(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_list(const char *dir, const char *name, char ***paths, int64_t **steps) {
    *paths = NULL, *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    entry *e = NULL;
    struct dirent *de;
    char safe[300];
    safe_name(safe, sizeof safe, name);
    // Checkpoints written before names were made safe carry the name as it was (one without a '/').
    bool old = name && strcmp(name, safe) != 0 && !strchr(name, '/');
    while ((de = readdir(d))) {
        int64_t s = step_of(de->d_name, safe);
        if (s < 0 && old) s = step_of(de->d_name, name);
        if (s < 0) continue;
        if (n == cap) e = gl_xrealloc(e, sizeof *e * (size_t)(cap = cap ? 2 * cap : 8));
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        e[n].path = gl_xmalloc(len);
        snprintf(e[n].path, len, "%s/%s", dir, de->d_name);
        e[n++].step = s;
    }
    closedir(d);
    if (n) qsort(e, (size_t)n, sizeof *e, newest_first);
    *paths = gl_xcalloc((size_t)n + 1, sizeof(char *));
    *steps = gl_xcalloc((size_t)n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) (*paths)[i] = e[i].path, (*steps)[i] = e[i].step;
    free(e);
    return n;
}

void ckpt_list_free(char **paths, int64_t *steps, int n) {
    for (int i = 0; i < n && paths; i++) free(paths[i]);
    free(paths);
    free(steps);
}

int ckpt_prune(const char *dir, const char *name, int64_t keep, int64_t upto, int64_t *later) {
    char **p;
    int64_t *s;
    int n = ckpt_list(dir, name, &p, &s), gone = 0, first = 0;
    while (first < n && s[first] > upto) first++;  // newest first: another run's, left alone
    if (later) *later = first ? s[0] : -1;
    for (int i = first + (int)keep; i < n; i++) gone += unlink(p[i]) == 0;
    ckpt_list_free(p, s, n);
    ckpt_remove_stale(dir, stdout);  // the run's console: train prints to stdout
    return gone;
}

// Whether the temporary file `file` (.<x>-stepN.h5.tmp.<host>.<pid>, or .tmp.<pid> from older
// galley) in dir belongs to a writer that is gone. A live writer's file is not stale: another
// run sharing the directory may be between its write and its rename (two quickstarts at once
// lost a checkpoint to this). A pid names a process only on its own host, so a file from
// another host, or one without a host, is stale only once nobody has written it for an hour (a
// checkpoint is written in seconds to minutes; a requeued job lands on another node).
static bool tmp_stale(const char *dir, const char *file, const char *host) {
    const char *t = NULL;  // the last ".h5.tmp." (a run name may hold one too)
    for (const char *q = strstr(file, ".h5.tmp."); q; q = strstr(q + 1, ".h5.tmp.")) t = q;
    if (file[0] != '.' || !t || !strstr(file, "-step")) return false;
    t += 8;
    const char *dot = strrchr(t, '.');
    const char *pp = dot ? dot + 1 : t;
    char *end;
    long pid = strtol(pp, &end, 10);
    if (*end || end == pp || pid <= 0) return false;
    bool here = dot && (size_t)(dot - t) == strlen(host) && strncmp(t, host, (size_t)(dot - t)) == 0;
    if (here) return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && difftime(time(NULL), sb.st_mtime) > 3600;
}

int ckpt_remove_stale(const char *dir, FILE *out) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char host[256], first[300] = "";
    host_name(host, sizeof host);
    int gone = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!tmp_stale(dir, de->d_name, host)) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) != 0) continue;
        if (!gone++) snprintf(first, sizeof first, "%s", de->d_name);
    }
    closedir(d);
    if (gone && out) {
        fprintf(out, "galley: removed %d temporary checkpoint file%s left in %s/ by writers that are gone (%s%s)\n",
                gone, gone > 1 ? "s" : "", dir, first, gone > 1 ? ", ..." : "");
        fflush(out);
    }
    return gone;
}

int ckpt_prepare_dir(const char *dir, char *err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *s = buf + 1; *s; s++) {  // mkdir -p
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create checkpoint directory %s: %s", buf, strerror(errno));
            return -1;
        }
        *s = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create checkpoint directory %s: %s", buf, strerror(errno));
        return -1;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.galley-write-test.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "checkpoint directory %s is not writable: %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    ckpt_remove_stale(dir, stdout);  // at start and before each write; the run's console: stdout
    return 0;
}
