// doctor_site.c: what the site expects, read from the same data files the hooks apply
// (site/README.md): a site folder's site.env (NETWORK, FS_NO_LOCKING, and doctor's own
// DOCTOR_BUSBW_NODE / DOCTOR_BUSBW_NET in GB/s) and its network's profiles
// (<NETWORK>-fabric.env, -nccl.env, -ompi.env: the site folder's own first, then site/profiles/).
//
// --site NAME is a site folder's name (GALLEY_SITE_PATH, then the image's site/sites/), or a
// network profile's name (site/profiles/NAME-*.env); --site PATH a site folder or its site.env.
// Without --site, the site the hooks chose (the wiring report names its folder).
#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor/doctor.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

typedef void (*kv_fn)(doctor_site *s, const char *key, const char *value, const char *file);

// Calls fn for each KEY=VALUE line of file, as site/lib/hooks.sh reads them: blank and '#'
// lines skipped, a trailing "  # why" dropped, one pair of surrounding quotes removed.
static int read_kv(doctor_site *s, const char *file, kv_fn fn) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (*p == '#' || *p == '\n' || !*p) continue;
        for (char *h = p + 1; *h; h++)
            if (*h == '#' && isspace((unsigned char)h[-1])) {
                *h = 0;
                break;
            }
        size_t n = strlen(p);
        while (n && isspace((unsigned char)p[n - 1])) p[--n] = 0;
        char *eq = strchr(p, '=');
        if (!eq) continue;
        *eq = 0;
        char *v = eq + 1;
        size_t vn = strlen(v);
        if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') v[vn - 1] = 0, v++;
        fn(s, p, v, file);
    }
    fclose(f);
    return 0;
}

static void site_key(doctor_site *s, const char *k, const char *v, const char *file) {
    (void)file;
    if (!strcmp(k, "NETWORK")) snprintf(s->network, sizeof s->network, "%s", v);
    if (!strcmp(k, "FS_NO_LOCKING")) snprintf(s->no_locking, sizeof s->no_locking, "%s", v);
    if (!strcmp(k, "DOCTOR_BUSBW_NODE")) s->busbw_node = atof(v);
    if (!strcmp(k, "DOCTOR_BUSBW_NET")) s->busbw_net = atof(v);
}

static void profile_key(doctor_site *s, const char *k, const char *v, const char *file) {
    if (!strcmp(k, "OMPI_MCA_pml")) snprintf(s->pml, sizeof s->pml, "%s", v);
    if (!strcmp(k, "OMPI_MCA_mtl")) snprintf(s->mtl, sizeof s->mtl, "%s", v);
    if (!strcmp(k, "NCCL_NET")) snprintf(s->nccl_net, sizeof s->nccl_net, "%s", v);
    if (s->nvars == DOCTOR_SITE_VARS) return;
    const char *base = strrchr(file, '/');
    snprintf(s->vars[s->nvars].key, sizeof s->vars[0].key, "%s", k);
    snprintf(s->vars[s->nvars].value, sizeof s->vars[0].value, "%s", v);
    snprintf(s->vars[s->nvars].profile, sizeof s->vars[0].profile, "%s", base ? base + 1 : file);
    s->nvars++;
}

// The folders that may hold site/ (sites/, profiles/): the entrypoint's, the image's, and the
// one beside this binary's folder (a build tree: build/galley -> site/).
static int site_dirs(const doctor_wiring *w, char dirs[3][200]) {
    int n = 0;
    if (w->site_dir[0]) snprintf(dirs[n++], 200, "%s", w->site_dir);
    snprintf(dirs[n++], 200, "/opt/galley/site");
    char exe[160];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        char up[200], real[PATH_MAX];
        snprintf(up, sizeof up, "%.180s/../site", exe);
        doctor_copy(dirs[n++], 200, realpath(up, real) ? real : up);
    }
    return n;
}

// Whether snprintf's result K fit in LEN bytes (a path that would not fit is not looked at).
static bool fits(int k, size_t len) { return k >= 0 && (size_t)k < len; }

// The folder of site NAME: GALLEY_SITE_PATH's folders first, then each site dir's sites/.
static int find_site_folder(const char *name, char dirs[3][200], int ndirs, char *out, size_t len, char *looked,
                            size_t llen) {
    char path[512];
    const char *sp = getenv("GALLEY_SITE_PATH");
    size_t used = 0;
    for (int i = -1; i < ndirs; i++) {
        char dir[256];
        if (i < 0) {  // each entry of GALLEY_SITE_PATH
            if (!sp || !*sp) continue;
            const char *p = sp;
            while (*p) {
                const char *entry = p;
                size_t n = strcspn(p, ":");
                p += n + (p[n] == ':');
                if (!fits(snprintf(dir, sizeof dir, "%.*s", (int)n, entry), sizeof dir) ||
                    !fits(snprintf(path, sizeof path, "%s/%s/site.env", dir, name), sizeof path)) {
                    used += (size_t)snprintf(looked + used, used < llen ? llen - used : 0,
                                             "%s%.40s... (too long a path: not looked at)", used ? ", " : "", entry);
                    continue;
                }
                used += (size_t)snprintf(looked + used, used < llen ? llen - used : 0, "%s%s", used ? ", " : "", path);
                if (is_file(path) && fits(snprintf(out, len, "%s/%s", dir, name), len)) return 0;
            }
            continue;
        }
        if (!fits(snprintf(path, sizeof path, "%s/sites/%s/site.env", dirs[i], name), sizeof path)) {
            used += (size_t)snprintf(looked + used, used < llen ? llen - used : 0,
                                     "%s%.40s... (too long a path: not looked at)", used ? ", " : "", dirs[i]);
            continue;
        }
        used += (size_t)snprintf(looked + used, used < llen ? llen - used : 0, "%s%s", used ? ", " : "", path);
        if (is_file(path) && fits(snprintf(out, len, "%s/sites/%s", dirs[i], name), len)) return 0;
    }
    return -1;
}

// Reads the network's profiles: the site folder's own, then profiles/ of the site dirs.
static int load_profiles(doctor_site *s, const char *folder, char dirs[3][200], int ndirs) {
    static const char *const parts[] = {"fabric", "nccl", "ompi"};
    int found = 0;
    for (int k = 0; k < 3; k++) {
        char path[512];
        int done = 0;
        if (folder) {
            snprintf(path, sizeof path, "%s/%s-%s.env", folder, s->network, parts[k]);
            done = read_kv(s, path, profile_key) == 0;
        }
        for (int i = 0; i < ndirs && !done; i++) {
            snprintf(path, sizeof path, "%s/profiles/%s-%s.env", dirs[i], s->network, parts[k]);
            done = read_kv(s, path, profile_key) == 0;
        }
        found += done;
    }
    return found;
}

// A site folder (or its site.env): site.env, then its network's profiles.
static void load_folder(doctor_site *s, const char *folder, char dirs[3][200], int ndirs) {
    char env[512];
    snprintf(env, sizeof env, "%s/site.env", folder);
    if (read_kv(s, env, site_key) != 0) {
        snprintf(s->error, sizeof s->error, "site profile %.200s cannot be read", env);
        return;
    }
    if (!s->network[0]) snprintf(s->network, sizeof s->network, "tcp");
    if (strcmp(s->network, "tcp") && !load_profiles(s, folder, dirs, ndirs))
        snprintf(s->error, sizeof s->error, "site %s: NETWORK=%s but no profile %s-{fabric,nccl,ompi}.env in %s or %s/profiles",
                 s->name, s->network, s->network, folder, dirs[0]);
}

void doctor_site_load(const char *asked, const doctor_wiring *w, doctor_site *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->no_locking, sizeof s->no_locking, "lustre gpfs");
    char dirs[3][200];
    int ndirs = site_dirs(w, dirs);
    if (!asked) {
        if (!w->folder[0]) {
            snprintf(s->how, sizeof s->how, "none: no --site, and no site hooks ran to choose one");
            return;
        }
        snprintf(s->name, sizeof s->name, "%s", w->site);
        snprintf(s->how, sizeof s->how, "the site the hooks chose (%s)", w->folder);
        load_folder(s, w->folder, dirs, ndirs);
        return;
    }
    snprintf(s->name, sizeof s->name, "%s", asked);
    char folder[512], looked[1024] = "";
    if (strchr(asked, '/') || is_dir(asked) || is_file(asked)) {
        snprintf(folder, sizeof folder, "%s", asked);
        size_t n = strlen(folder);
        if (is_file(asked) && n > 9 && !strcmp(folder + n - 9, "/site.env")) folder[n - 9] = 0;
        snprintf(s->how, sizeof s->how, "--site %s", asked);
        if (!is_dir(folder)) {
            snprintf(s->error, sizeof s->error, "site profile '%s' does not exist (give a site folder, its site.env, or a site's name)", asked);
            return;
        }
        load_folder(s, folder, dirs, ndirs);
        return;
    }
    if (find_site_folder(asked, dirs, ndirs, folder, sizeof folder, looked, sizeof looked) == 0) {
        snprintf(s->how, sizeof s->how, "--site %.60s (%.120s)", asked, folder);
        load_folder(s, folder, dirs, ndirs);
        return;
    }
    snprintf(s->network, sizeof s->network, "%s", asked);  // a network profile's name?
    if (load_profiles(s, NULL, dirs, ndirs)) {
        snprintf(s->how, sizeof s->how, "--site %s (the network profiles %s-*.env)", asked, asked);
        return;
    }
    s->network[0] = 0;
    snprintf(s->error, sizeof s->error, "site profile '%s' not found: no %.150s, no profiles/%s-*.env", asked, looked,
             asked);
}

// Appends ", item" (or "item") to list[cap], "..." once full.
static void list_append(char *list, size_t cap, const char *item) {
    size_t used = strlen(list), n = strlen(item);
    if (used && !strcmp(list + used - 3, "...")) return;
    if (used + n + 8 > cap) {
        if (used + 6 < cap) strcat(list, used ? ", ..." : "...");
        return;
    }
    if (used) strcat(list, ", ");
    strcat(list, item);
}

// This rank's environment against the profiles' variables, a profile at a time: "slingshot-
// fabric.env: unset FI_PROVIDER, ...; FI_X=a (wants b)". NCCL's variables only matter on a GPU,
// Open MPI's only to Open MPI.
void doctor_site_check_env(const doctor_site *s, int gpu, doctor_rank *me) {
    me->env_diff[0] = 0;
    int ompi = strstr(me->mpi.library, "Open MPI") != NULL;
    for (int i = 0; i < s->nvars; i++) {
        if (i && !strcmp(s->vars[i].profile, s->vars[i - 1].profile)) continue;  // a profile's first line only
        char unset[200] = "", differ[200] = "";
        for (int j = i; j < s->nvars && !strcmp(s->vars[j].profile, s->vars[i].profile); j++) {
            const char *k = s->vars[j].key, *want = s->vars[j].value, *have = getenv(k);
            if ((!gpu && !strncmp(k, "NCCL_", 5)) || (!ompi && !strncmp(k, "OMPI_MCA_", 9))) continue;
            if (have && !strcmp(have, want)) continue;
            char one[160];
            snprintf(one, sizeof one, "%s=%.40s (wants %s)", k, have ? have : "", want);
            list_append(have ? differ : unset, 200, have ? one : k);
        }
        if (!unset[0] && !differ[0]) continue;
        char part[480];
        snprintf(part, sizeof part, "%s: %s%s%s%s", s->vars[i].profile, unset[0] ? "unset " : "", unset,
                 unset[0] && differ[0] ? "; " : "", differ);
        size_t used = strlen(me->env_diff);
        if (used) doctor_copy(me->env_diff + used, sizeof me->env_diff - used, " | ");
        used = strlen(me->env_diff);
        doctor_copy(me->env_diff + used, sizeof me->env_diff - used, part);
    }
}
