// cmd_data.c: `galley data synth KIND OUT [key=value ...]`: a synthetic data set as HDF5.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "galley/cli.h"
#include "galley/h5data.h"

static const char *const kinds[] = {"spirals", "blobs", "shapes2d", "cosmo3d", "climate2d", "fields3d", NULL};

static int parse_i64(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int synth_usage(FILE *out) {
    fputs("usage: galley data synth KIND OUT.h5 [key=value ...]\n\n"
          "Writes the synthetic data set KIND (spirals, blobs, shapes2d, cosmo3d, climate2d, fields3d) to OUT.h5,\n"
          "the same samples `data.synthetic` generates in memory for the same seed, split and sizes.\n"
          "keys: n=256 (samples)  size=32 (edge)  seed=42  split=train|val  classes=3  channels=0 (kind's own)\n"
          "      features=2  noise=0.1  compress=0 (gzip level 0-9)  per_file=false (OUT is a directory of\n"
          "      sample-NNNNNN.h5 files without a sample axis, as DeepCAM stores its data)\n"
          "Datasets: x, y (float32; class labels int32) except cosmo3d: x int16 particle counts, read with\n"
          "data.transform: log1p as CosmoFlow; climate2d: climate/data (H, W, C) and climate/labels_0 (H, W),\n"
          "DeepCAM's names and layout (data.layout: channels_last). Root attributes galley_* record the\n"
          "generator's settings and the recipe keys that read the file. The file appears atomically.\n",
          out);
    return 0;
}

static int cmd_synth(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) return synth_usage(stdout);
    if (argc < 2) {
        synth_usage(stderr);
        return GL_EXIT_USAGE;
    }
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = -1;
    for (int i = 0; kinds[i]; i++)
        if (!strcmp(argv[0], kinds[i])) p.kind = i;
    if (p.kind < 0) {
        fprintf(stderr, "galley: error: unknown synthetic kind '%s' (one of spirals, blobs, shapes2d, cosmo3d, "
                        "climate2d, fields3d)\n", argv[0]);
        return GL_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "galley: error: '%s' is not key=value\n", argv[i]);
            return GL_EXIT_USAGE;
        }
        *eq = 0;
        const char *k = argv[i], *v = eq + 1;
        int64_t x = 0;
        int bad = 0;
        if (!strcmp(k, "n")) bad = parse_i64(v, 1, 1000000000, &p.n);
        else if (!strcmp(k, "size")) bad = parse_i64(v, 4, 4096, &p.size);
        else if (!strcmp(k, "seed")) bad = parse_i64(v, 0, INT64_MAX, &p.seed);
        else if (!strcmp(k, "classes")) bad = parse_i64(v, 2, 1000, &p.classes);
        else if (!strcmp(k, "channels")) bad = parse_i64(v, 0, 64, &p.channels);
        else if (!strcmp(k, "features")) bad = parse_i64(v, 2, 1000000, &p.features);
        else if (!strcmp(k, "compress")) bad = parse_i64(v, 0, 9, &x), p.compress = (int)x;
        else if (!strcmp(k, "noise")) {
            char *end;
            p.noise = strtod(v, &end);
            bad = !*v || *end || p.noise < 0 || p.noise > 10;
        } else if (!strcmp(k, "split")) {
            bad = strcmp(v, "train") && strcmp(v, "val");
            p.split = strcmp(v, "val") ? SPLIT_TRAIN : SPLIT_VAL;
        } else if (!strcmp(k, "per_file")) {
            bad = strcmp(v, "true") && strcmp(v, "false");
            p.per_file = !strcmp(v, "true");
        } else {
            fprintf(stderr, "galley: error: unknown key '%s' (n, size, seed, split, classes, channels, features, "
                            "noise, compress, per_file)\n", k);
            return GL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "galley: error: bad value '%s' for %s (see galley data synth --help)\n", v, k);
            return GL_EXIT_USAGE;
        }
    }
    if (p.kind == SYNTH_SHAPES2D && p.classes > 6) {
        fprintf(stderr, "galley: error: shapes2d has at most 6 classes\n");
        return GL_EXIT_USAGE;
    }
    if (h5_synth_write(&p, argv[1], stderr)) return GL_EXIT_RUNTIME;
    printf("galley: wrote %s: %s, %lld samples (%s split, seed %lld)\n", argv[1], kinds[p.kind], (long long)p.n,
           p.split == SPLIT_TRAIN ? "train" : "val", (long long)p.seed);
    return GL_EXIT_OK;
}

int cmd_data(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        cli_help_for("data", argc < 1 ? stderr : stdout);
        return argc < 1 ? GL_EXIT_USAGE : GL_EXIT_OK;
    }
    if (!strcmp(argv[0], "synth")) return cmd_synth(argc - 1, argv + 1);
    fprintf(stderr, "galley: error: unknown data command '%s' (synth)\n", argv[0]);
    return GL_EXIT_USAGE;
}
