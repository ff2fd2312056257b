// doctor_read.c: the read probe: MB/s reading a data file in 4 MiB blocks, as a loader would.
// The file's cached pages are dropped first where the kernel lets go of them
// (posix_fadvise DONTNEED: local filesystems; a network filesystem may keep its cache). The
// ranks of a node start at different offsets (local / nlocal of the way in, wrapping round), so
// no rank reads what another just brought into the cache. A file smaller than what the probe
// reads in its minimum time is read again: those passes come from the page cache.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "doctor/doctor.h"
#include "galley/check.h"

enum { READ_BLOCK = 4 << 20 };

typedef struct {
    double tmin, tmax;  // read for tmin seconds at least, tmax at most; between the two, until
    double cap;         // the whole file or cap bytes have been read
} read_limits;

// Reads from fd (size bytes) starting at off, wrapping; p gets bytes and seconds. 0, or -1 (why).
static int read_loop(int fd, int64_t size, int64_t off, const read_limits *l, char *buf, doctor_path *p) {
    double t0 = dist_now(), bytes = 0, t = 0;
    for (;;) {
        size_t want = (size_t)(size - off < READ_BLOCK ? size - off : READ_BLOCK);
        ssize_t n = pread(fd, buf, want, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(p->why, sizeof p->why, "reading %s at byte %lld: %s", p->file, (long long)off,
                     n < 0 ? strerror(errno) : "the file ended early");
            return -1;
        }
        bytes += (double)n;
        off = (off + n) % size;
        t = dist_now() - t0;
        if (t >= l->tmax || (t >= l->tmin && (bytes >= (double)size || bytes >= l->cap))) break;
    }
    p->bytes = bytes;
    p->seconds = t;
    p->mbs = t > 0 ? bytes / 1e6 / t : 0;
    return 0;
}

void doctor_read_probe(doctor_path *p, int local, int nlocal, int quick) {
    if (!p->ok) return;
    read_limits l = quick ? (read_limits){0.25, 1.0, 256.0 * (1 << 20)} : (read_limits){1.0, 5.0, 2048.0 * (1 << 20)};
    int fd = open(p->file, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(p->why, sizeof p->why, "cannot open %s: %s", p->file, strerror(errno));
        p->ok = 0;
        if (fd >= 0) close(fd);
        return;
    }
    int64_t size = (int64_t)st.st_size;
    if (size == 0) {
        snprintf(p->why, sizeof p->why, "%s is empty: nothing to read", p->file);
        close(fd);
        return;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    int64_t off = nlocal > 1 ? (size / nlocal * local) & ~(int64_t)4095 : 0;
    char *buf = gl_xmalloc(READ_BLOCK);
    if (read_loop(fd, size, off, &l, buf, p) != 0) p->ok = 0;
    free(buf);
    close(fd);
}
