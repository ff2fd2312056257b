// synth_registry.c: the list of synthetic kinds. Adding a kind is one file (synth_<kind>.c,
// defining its synth_kind) plus one line here.
#include <stdio.h>
#include <string.h>

#include "data/synth_internal.h"

// One line per kind: its name in recipes and on the command line, and its descriptor. The order
// gives the ids recipes resolve to (recipe.h's SYNTH_* name the first ones): append new kinds.
#define SYNTH_KINDS(X)                      \
    X("spirals", synth_kind_spirals)        \
    X("blobs", synth_kind_blobs)            \
    X("shapes2d", synth_kind_shapes2d)      \
    X("cosmo3d", synth_kind_cosmo3d)        \
    X("climate2d", synth_kind_climate2d)    \
    X("nbody3d", synth_kind_nbody3d)        \
    X("weather2d", synth_kind_weather2d)

#define DECLARE(name, kind) extern const synth_kind kind;
#define NAME(name, kind) name,
#define ENTRY(name, kind) &kind,
SYNTH_KINDS(DECLARE)
const char *const synth_kind_choices[] = {SYNTH_KINDS(NAME) NULL};
static const synth_kind *const kinds[] = {SYNTH_KINDS(ENTRY)};

enum { COUNT = (int)(sizeof kinds / sizeof kinds[0]) };

int synth_kind_count(void) { return COUNT; }

const synth_kind *synth_kind_at(int id) { return id >= 0 && id < COUNT ? kinds[id] : NULL; }

int synth_kind_find(const char *name) {
    for (int i = 0; i < COUNT; i++)
        if (!strcmp(synth_kind_choices[i], name)) return i;
    return -1;
}

const char *synth_kind_name(int id) { return id >= 0 && id < COUNT ? synth_kind_choices[id] : "?"; }

void synth_kind_list(char *buf, size_t len, const char *sep) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; i < COUNT && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? sep : "", synth_kind_choices[i]);
        used += n > 0 ? (size_t)n : 0;
    }
}

bool synth_kind_reads(int id, unsigned keys) {
    const synth_kind *k = synth_kind_at(id);
    return k && (k->keys & keys) == keys;
}

int64_t synth_kind_max_classes(int id) {
    const synth_kind *k = synth_kind_at(id);
    return k ? k->max_classes : 0;
}
