// loader_cache.c: whether a split's decoded samples are kept in memory (data.loader.cache), and
// the start banner's line saying so. The cache itself is the loader's (loader.c).
//
// auto caches a split when its cache fits in data.loader.cache_share of the machine's memory,
// divided among the processes on the machine (each rank holds its own copy). The model's memory
// is planned after the data (run_data.c), so the share leaves room for it rather than counting
// it: the default 0.25 keeps both splits together under half of the machine, and the run's
// memory check still counts every cached byte.
#include <stdio.h>
#include <string.h>

#include "galley/loader.h"

void loader_cache_decide(int mode, double share, double bytes, uint64_t host, int node_ranks, loader_cache_plan *c) {
    memset(c, 0, sizeof *c);
    c->mode = mode;
    c->bytes = bytes;
    c->share = share;
    c->host = (double)host;
    c->node_ranks = node_ranks > 0 ? node_ranks : 1;
    if (mode == DATA_CACHE_AUTO) {
        c->budget = share * c->host / c->node_ranks;
        c->on = host > 0 && bytes <= c->budget;
    } else {
        c->on = mode == DATA_CACHE_MEMORY;
    }
}

static void size_words(double bytes, char *buf, size_t len) {
    if (bytes < 1048576) snprintf(buf, len, "%.1f KiB", bytes / 1024);
    else if (bytes < 1024.0 * 1048576) snprintf(buf, len, "%.1f MiB", bytes / 1048576);
    else snprintf(buf, len, "%.2f GiB", bytes / 1073741824);
}

// "training split cached in memory (3.2 MiB)", or why not, at buf + *at.
static void split_words(const loader_cache_plan *c, const char *split, char *buf, size_t len, size_t *at) {
    char size[32], budget[32];
    size_words(c->bytes, size, sizeof size);
    size_words(c->budget, budget, sizeof budget);
    int n;
    if (c->on)
        n = snprintf(buf + *at, len - *at, "%s split cached in memory (%s)", split, size);
    else if (c->mode == DATA_CACHE_AUTO && c->host <= 0)
        n = snprintf(buf + *at, len - *at, "%s split (%s) not cached: the machine's memory is unknown", split, size);
    else if (c->mode == DATA_CACHE_AUTO)
        n = snprintf(buf + *at, len - *at, "%s split (%s) not cached: over the %s a split may take, so read from "
                     "the files every epoch", split, size, budget);
    else
        n = snprintf(buf + *at, len - *at, "%s split read from the files every epoch", split);
    if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

int loader_cache_note(const gl_loader *train, const gl_loader *val, char *buf, size_t len) {
    const loader_cache_plan *t = loader_cache(train), *v = loader_cache(val);
    if (!len) return 0;
    buf[0] = '\0';
    if (t->bytes == 0) return 0;  // a source held in memory: nothing to cache
    if (t->mode == DATA_CACHE_NONE) {
        snprintf(buf, len, "data cache (data.loader.cache: none): off; both splits are read from the files every epoch");
        return 1;
    }
    int n;
    if (t->mode == DATA_CACHE_AUTO) {
        char host[32], ranks[64] = "";
        size_words(t->host, host, sizeof host);
        if (t->node_ranks > 1) snprintf(ranks, sizeof ranks, " shared by %d ranks on this node", t->node_ranks);
        n = snprintf(buf, len, "data cache (data.loader.cache: auto, a split within %g%% of %s%s, "
                     "data.loader.cache_share): ", 100 * t->share, host, ranks);
    } else {
        n = snprintf(buf, len, "data cache (data.loader.cache: memory): ");
    }
    size_t at = n > 0 ? ((size_t)n < len ? (size_t)n : len - 1) : 0;
    split_words(t, "training", buf, len, &at);
    if (at + 2 < len) buf[at++] = ';', buf[at++] = ' ', buf[at] = '\0';
    split_words(v, "validation", buf, len, &at);
    return 1;
}
