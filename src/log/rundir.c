// rundir.c: making the run directory: <root>/<name>/<YYYYmmdd-HHMMSS>/, or the one --run-dir names.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "galley/runlog.h"

// mkdir -p: every missing component of path; 0 or -1 (errno set).
static int make_parents(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) return errno = ENOTDIR, -1;
    return 0;
}

void rundir_safe_name(char *out, size_t len, const char *name) {
    size_t k = 0;
    for (const char *c = name ? name : ""; *c && k + 1 < len; c++) {
        char ch = *c;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                 ch == '_' || (ch == '.' && k > 0);
        out[k++] = ok ? ch : '_';
    }
    out[k] = 0;
    if (!k) snprintf(out, len, "run");
}

int rundir_make(char *out, size_t len, const char *dir, const char *root, const char *name, char *err,
                size_t errlen) {
    if (dir) {
        if (!*dir) return snprintf(err, errlen, "the run directory path is empty"), -1;
        if (snprintf(out, len, "%s", dir) >= (int)len) return snprintf(err, errlen, "run directory path too long"), -1;
        size_t n = strlen(out);
        while (n > 1 && out[n - 1] == '/') out[--n] = 0;
        if (make_parents(out) != 0) return snprintf(err, errlen, "cannot create %s: %s", out, strerror(errno)), -1;
        char m[4200];
        snprintf(m, sizeof m, "%s/metrics.jsonl", out);
        if (access(m, F_OK) == 0)
            return snprintf(err, errlen, "%s already holds a run (metrics.jsonl); give a new directory", out), -1;
        return 0;
    }
    char safe[256], stamp[32], base[4096];
    rundir_safe_name(safe, sizeof safe, name);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if (snprintf(base, sizeof base, "%s/%s", root && *root ? root : ".", safe) >= (int)sizeof base)
        return snprintf(err, errlen, "run directory path too long"), -1;
    if (make_parents(base) != 0) return snprintf(err, errlen, "cannot create %s: %s", base, strerror(errno)), -1;
    for (int i = 1; i < 1000; i++) {
        int n = i == 1 ? snprintf(out, len, "%s/%s", base, stamp) : snprintf(out, len, "%s/%s-%d", base, stamp, i);
        if (n < 0 || (size_t)n >= len) return snprintf(err, errlen, "run directory path too long"), -1;
        if (mkdir(out, 0777) == 0) return 0;  // atomic: a second run started in the same second gets -2
        if (errno != EEXIST) return snprintf(err, errlen, "cannot create %s: %s", out, strerror(errno)), -1;
    }
    return snprintf(err, errlen, "too many runs named %s in %s this second", safe, base), -1;
}
