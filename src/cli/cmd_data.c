// cmd_data.c: `galley data synth KIND OUT [key=value ...]`: a synthetic data set as HDF5;
// `galley data inspect FILE.h5`: what a file holds; `galley data bench RECIPE`: loader throughput.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "galley/check.h"
#include "cli/cli.h"
#include "galley/h5data.h"
#include "galley/loader.h"
#include "galley/synth.h"

static int parse_i64(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int synth_usage(FILE *out) {
    char kinds[512];
    synth_kind_list(kinds, sizeof kinds, ", ");
    fprintf(out, "usage: galley data synth KIND OUT.h5 [key=value ...]\n\n"
                 "Writes the synthetic data set KIND (%s) to OUT.h5,\n", kinds);
    fputs("the same samples `data.synthetic` generates in memory for the same seed, split and sizes.\n"
          "keys: n=256 (samples)  size=32 (edge)  seed=42  split=train|val  classes=3  channels=0 (kind's own)\n"
          "      features=2  noise=0.1  compress=0 (gzip level 0-9)  per_file=false (OUT is a directory of\n"
          "      sample-NNNNNN.h5 files without a sample axis, as DeepCAM stores its data)\n"
          "Datasets: x, y (float32; class labels int32) except cosmo3d: x int16 particle counts, read with\n"
          "data.transform: log1p as CosmoFlow; climate2d: climate/data (H, W, C) and climate/labels_0 (H, W),\n"
          "DeepCAM's names and layout (data.layout: channels_last). Root attributes galley_* record the\n"
          "generator's settings and the recipe keys that read the file. The file appears atomically.\n"
          "weather2d writes yearly files for data.source: timeseries instead: OUT/train/<year>.h5 and\n"
          "OUT/val/<year>.h5 with dataset fields [T, C, size/2, size], OUT/stats/global_means.npy and\n"
          "global_stds.npy ([1, C, 1, 1] over the training files); keys: steps=64 (T)  years=2 (training\n"
          "files)  val_years=1  size  seed  channels (0: 20)  noise  compress.\n",
          out);
    return 0;
}

// One key=value of `galley data synth` into p: 0, 1 for a bad value, -1 for an unknown key.
static int synth_key(h5_synth_params *p, const char *k, const char *v) {
    int64_t x = 0;
    int bad = 0;
    if (!strcmp(k, "n")) bad = parse_i64(v, 1, 1000000000, &p->n);
    else if (!strcmp(k, "size")) bad = parse_i64(v, 4, 4096, &p->size);
    else if (!strcmp(k, "seed")) bad = parse_i64(v, 0, INT64_MAX, &p->seed);
    else if (!strcmp(k, "classes")) bad = parse_i64(v, 2, 1000, &p->classes);
    else if (!strcmp(k, "channels")) bad = parse_i64(v, 0, 64, &p->channels);
    else if (!strcmp(k, "features")) bad = parse_i64(v, 2, 1000000, &p->features);
    else if (!strcmp(k, "compress")) bad = parse_i64(v, 0, 9, &x), p->compress = (int)x;
    else if (!strcmp(k, "steps")) bad = parse_i64(v, 2, 1000000, &p->steps);
    else if (!strcmp(k, "years")) bad = parse_i64(v, 1, 1000, &p->years);
    else if (!strcmp(k, "val_years")) bad = parse_i64(v, 1, 1000, &p->val_years);
    else if (!strcmp(k, "noise")) {
        char *end;
        p->noise = strtod(v, &end);
        bad = !*v || *end || p->noise < 0 || p->noise > 10;
    } else if (!strcmp(k, "split")) {
        bad = strcmp(v, "train") && strcmp(v, "val");
        p->split = strcmp(v, "val") ? SPLIT_TRAIN : SPLIT_VAL;
    } else if (!strcmp(k, "per_file")) {
        bad = strcmp(v, "true") && strcmp(v, "false");
        p->per_file = !strcmp(v, "true");
    } else {
        return -1;
    }
    return bad != 0;  // parse_i64's -1 is a bad value, not an unknown key
}

// Whether key k applies to the kind: weather2d writes yearly series (steps, years, val_years),
// the others samples (n, split, per_file).
static bool synth_key_applies(int kind, const char *k) {
    static const char *const series[] = {"steps", "years", "val_years", NULL};
    static const char *const samples[] = {"n", "split", "per_file", "classes", "features", NULL};
    const char *const *off = kind == SYNTH_WEATHER2D ? samples : series;
    for (int i = 0; off[i]; i++)
        if (!strcmp(off[i], k)) return false;
    return true;
}

static int cmd_synth(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) return synth_usage(stdout);
    if (argc < 2) {
        synth_usage(stderr);
        return GL_EXIT_USAGE;
    }
    h5_synth_params p;
    h5_synth_default_params(&p);
    p.kind = synth_kind_find(argv[0]);
    if (p.kind < 0) {
        char kinds[512];
        synth_kind_list(kinds, sizeof kinds, ", ");
        fprintf(stderr, "galley: error: unknown synthetic kind '%s' (one of %s)\n", argv[0], kinds);
        return GL_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "galley: error: '%s' is not key=value\n", argv[i]);
            return GL_EXIT_USAGE;
        }
        *eq = 0;
        int bad = synth_key(&p, argv[i], eq + 1);
        if (bad < 0) {
            fprintf(stderr, "galley: error: unknown key '%s' (n, size, seed, split, classes, channels, features, "
                            "noise, compress, per_file; weather2d: steps, years, val_years)\n", argv[i]);
            return GL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "galley: error: bad value '%s' for %s (see galley data synth --help)\n", eq + 1, argv[i]);
            return GL_EXIT_USAGE;
        }
        if (!synth_key_applies(p.kind, argv[i])) {
            fprintf(stderr, "galley: error: %s does not apply to %s (see galley data synth --help)\n", argv[i],
                    argv[0]);
            return GL_EXIT_USAGE;
        }
    }
    const int64_t most = synth_kind_max_classes(p.kind);
    if (most > 0 && p.classes > most) {
        fprintf(stderr, "galley: error: %s has at most %lld classes\n", synth_kind_name(p.kind), (long long)most);
        return GL_EXIT_USAGE;
    }
    if (p.kind == SYNTH_WEATHER2D) {
        if (h5_synth_write_series(&p, argv[1], stderr)) return GL_EXIT_RUNTIME;
        printf("galley: wrote %s: weather2d, %lld training and %lld validation years of %lld time steps "
               "(seed %lld), stats in %s/stats\n", argv[1], (long long)p.years, (long long)p.val_years,
               (long long)p.steps, (long long)p.seed, argv[1]);
        return GL_EXIT_OK;
    }
    if (h5_synth_write(&p, argv[1], stderr)) return GL_EXIT_RUNTIME;
    printf("galley: wrote %s: %s, %lld samples (%s split, seed %lld)\n", argv[1], synth_kind_name(p.kind),
           (long long)p.n, p.split == SPLIT_TRAIN ? "train" : "val", (long long)p.seed);
    return GL_EXIT_OK;
}

static int cmd_inspect(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) return cli_help_for("data", stdout), 0;
    if (argc != 1) {
        fprintf(stderr, "usage: galley data inspect FILE.h5\n");
        return GL_EXIT_USAGE;
    }
    return h5_inspect(argv[0], stdout, stderr);
}

static int cmd_bench(int argc, char **argv) {
    int64_t steps = 0;
    int n = 0;
    for (int i = 0; i < argc; i++) {  // steps=N is the benchmark's own; the rest go to the recipe
        if (!strncmp(argv[i], "steps=", 6)) {
            if (parse_i64(argv[i] + 6, 1, 100000000, &steps)) {
                fprintf(stderr, "galley: error: bad value '%s' for steps (a positive number of batches)\n", argv[i] + 6);
                return GL_EXIT_USAGE;
            }
            continue;
        }
        argv[n++] = argv[i];
    }
    recipe_t r;
    int rc = cli_load_recipe("data", n, argv, &r);
    if (rc) return rc > 0 ? GL_EXIT_OK : GL_EXIT_USAGE;
    static const char *const modes[] = {"read", "full", "synthetic"};
    static const char *const what[] = {"files read only: no transform, normalisation, augmentation or cache",
                                       "the loader as training uses it: read, transform, augment",
                                       "batches copied from memory, nothing read: the loader's own overhead"};
    loader_bench_result res[3];
    for (int m = 0; m < 3 && rc == 0; m++) {
        rc = loader_bench(&r, m, steps, &res[m], stderr);
        if (rc) break;
        if (m == 0) {
            int big = res[m].sample_bytes >= 1024;
            printf("galley data bench %s: training split, %s data, batch %lld, %d reader threads, prefetch %lld, "
                   "%.*f %s per sample (float32)\n",
                   argv[0], data_source_name(r.data.source), (long long)res[m].batch,
                   res[m].threads, (long long)r.data.loader.prefetch, big ? 1 : 0, big ? res[m].sample_bytes / 1024 : res[m].sample_bytes,
                   big ? "KiB" : "bytes");
            printf("  %-9s %12s %10s %8s %9s  %s\n", "mode", "samples/s", "MB/s", "samples", "seconds", "what");
        }
        const loader_bench_result *q = &res[m];
        double sps = q->seconds > 0 ? (double)q->samples / q->seconds : 0;
        const char *w = m == 0 && r.data.source == DATA_SOURCE_SYNTHETIC
                            ? "generating the split in memory (synthetic data's read)" : what[m];
        printf("  %-9s %12.1f %10.1f %8lld %9.3f  %s\n", modes[m], sps, sps * q->sample_bytes / 1e6,
               (long long)q->samples, q->seconds, w);
        if (q->skipped) printf("            (%lld samples with NaN/Inf skipped)\n", (long long)q->skipped);
    }
    if (rc == 0)
        printf("MB/s counts samples as served (inputs and targets, 4 bytes each); files read twice may come from the "
               "page cache\n");
    recipe_free(&r);
    return rc;
}

int cmd_data(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        cli_help_for("data", argc < 1 ? stderr : stdout);
        return argc < 1 ? GL_EXIT_USAGE : GL_EXIT_OK;
    }
    if (!strcmp(argv[0], "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[0], "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[0], "bench")) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "galley: error: unknown data command '%s' (synth, inspect, bench)\n", argv[0]);
    return GL_EXIT_USAGE;
}
