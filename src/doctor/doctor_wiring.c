// doctor_wiring.c: what the site hooks reported at container start, read from the file the
// entrypoint wrote (GALLEY_WIRING_FILE; `galley info --wiring` prints the same file): runtime,
// site and its folder, how many variables the hooks set or kept, and their first warning.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"

// The first word after "KEY:" and blanks, into buf.
static void first_word(const char *s, char *buf, size_t len) {
    s += strspn(s, " \t");
    size_t n = strcspn(s, " \t\n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), s);
}

// One line of the report.
static void wiring_line(doctor_wiring *w, const char *line) {
    if (!strncmp(line, "galley wiring report: ", 22)) {
        const char *p = line + 22, *e = strstr(p, "/galley-entrypoint");
        if (e) snprintf(w->site_dir, sizeof w->site_dir, "%.*s", (int)(e - p), p);
    } else if (!strncmp(line, "runtime:", 8)) {
        first_word(line + 8, w->runtime, sizeof w->runtime);
    } else if (!strncmp(line, "site:", 5)) {
        first_word(line + 5, w->site, sizeof w->site);
        const char *from = strstr(line, ") from ");
        if (from) {
            from += 7;
            size_t n = strcspn(from, ":\n");  // "from FOLDER: description"
            snprintf(w->folder, sizeof w->folder, "%.*s", (int)(n < sizeof w->folder ? n : sizeof w->folder - 1), from);
        }
    } else if (!strncmp(line, "  set  ", 7)) {
        w->nset++;
    } else if (!strncmp(line, "  kept ", 7)) {
        w->nkept++;
    } else if (!strncmp(line, "warning: ", 9) && !w->warning[0]) {
        doctor_copy(w->warning, sizeof w->warning, line + 9);
        w->warning[strcspn(w->warning, "\n")] = 0;
    }
}

void doctor_wiring_read(doctor_wiring *w) {
    memset(w, 0, sizeof *w);
    const char *path = getenv("GALLEY_WIRING_FILE");
    if (!path || !*path) {
        snprintf(w->state, sizeof w->state, "no hooks");
        return;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(w->state, sizeof w->state, "unreadable");
        snprintf(w->warning, sizeof w->warning, "GALLEY_WIRING_FILE=%s cannot be read (%s)", path, strerror(errno));
        return;
    }
    snprintf(w->state, sizeof w->state, "report");
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        wiring_line(w, line);
    }
    fclose(f);
}
