// doctor_fs.c: a --data path: the file to read (a folder's first regular file, by name), the
// filesystem it is on (the longest mount point of /proc/self/mounts that holds it, as the fs
// hook does) and whether that filesystem takes the flock(2) locks HDF5 asks for when
// HDF5_USE_FILE_LOCKING is not FALSE (a shared lock, at once released: no reader is disturbed).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor/doctor.h"

// Mount point and type of the filesystem holding the absolute path `real`.
static void mount_of(const char *real, doctor_path *p) {
    snprintf(p->fstype, sizeof p->fstype, "?");
    FILE *f = fopen("/proc/self/mounts", "r");
    if (!f) return;
    char line[4096], dev[1024], mp[1024], type[64];
    size_t best = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%1023s %1023s %63s", dev, mp, type) != 3) continue;
        size_t n = strlen(mp);
        int holds = !strcmp(mp, "/") || (!strncmp(real, mp, n) && (real[n] == '/' || real[n] == 0));
        if (holds && n >= best) {
            best = n;
            doctor_copy(p->mount, sizeof p->mount, mp);
            doctor_copy(p->fstype, sizeof p->fstype, type);
        }
    }
    fclose(f);
}

static int not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

// A folder: its first regular file by name into p->file. 0, or -1 with why.
static int folder_file(const char *dir, doctor_path *p) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, not_hidden, alphasort);
    if (n < 0) {
        snprintf(p->why, sizeof p->why, "cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    int found = -1;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
        if (found < 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            doctor_copy(p->file, sizeof p->file, path);
            found = 0;
        }
        free(list[i]);
    }
    free(list);
    if (found < 0) snprintf(p->why, sizeof p->why, "no file to read in the folder %s", dir);
    return found;
}

// Opens p->file for reading without blocking on a FIFO or device: -1 (why set) unless a
// regular file.
static int open_regular(doctor_path *p) {
    int fd = open(p->file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(p->why, sizeof p->why, "cannot open %s: %s", p->file, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(p->why, sizeof p->why, "%s is not a regular file", p->file);
        close(fd);
        return -1;
    }
    char byte;
    if (st.st_size > 0 && pread(fd, &byte, 1, 0) < 0) {
        snprintf(p->why, sizeof p->why, "cannot read %s: %s", p->file, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void doctor_fs_probe(const char *path, doctor_path *p) {
    memset(p, 0, sizeof *p);
    p->lock = -1;
    doctor_copy(p->file, sizeof p->file, path);
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        snprintf(p->why, sizeof p->why, "cannot read %s: %s", path, strerror(errno));
        return;
    }
    mount_of(real, p);
    struct stat st;
    if (stat(real, &st) == 0 && S_ISDIR(st.st_mode) && folder_file(path, p) != 0) return;
    int fd = open_regular(p);
    if (fd < 0) return;
    p->ok = 1;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        p->lock = 1;
        flock(fd, LOCK_UN);
    } else if (errno == EWOULDBLOCK) {
        p->lock = 1;  // someone holds an exclusive lock: locks work there
    } else {
        p->lock = 0;
        snprintf(p->why, sizeof p->why, "flock: %s", strerror(errno));
    }
    close(fd);
}
