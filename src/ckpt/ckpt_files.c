// ckpt_files.c: naming, listing and pruning the checkpoint files of a run in checkpoint.dir.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "galley/check.h"
#include "galley/ckpt.h"
#include "galley/runlog.h"

void ckpt_path(char *buf, size_t len, const char *dir, const char *name, int64_t step) {
    char safe[256];
    rundir_safe_name(safe, sizeof safe, name);
    snprintf(buf, len, "%s/%s-step%08lld.h5", dir, safe, (long long)step);
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
    char safe[256];
    rundir_safe_name(safe, sizeof safe, name);
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

int ckpt_prune(const char *dir, const char *name, int64_t keep) {
    char **p;
    int64_t *s;
    int n = ckpt_list(dir, name, &p, &s), gone = 0;
    for (int i = (int)keep; i < n; i++) gone += unlink(p[i]) == 0;
    ckpt_list_free(p, s, n);
    // Temporary files left by a writer that was killed: .<name>-step*.h5.tmp.<pid>
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        size_t nl = strlen(name);
        while ((de = readdir(d))) {
            if (de->d_name[0] != '.' || strncmp(de->d_name + 1, name, nl) != 0 || !strstr(de->d_name, ".h5.tmp."))
                continue;
            long pid = strtol(strrchr(de->d_name, '.') + 1, NULL, 10);
            if (pid == (long)getpid()) continue;  // our own write in progress cannot be here, but be safe
            // A live writer's file is not stale: another run sharing this directory may be between
            // its write and its rename (two quickstarts at once lost a checkpoint to this).
            if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue;
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
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
    return 0;
}
