// cmd_sweep.c: `galley sweep SWEEP.yaml [--dir DIR] [--resume auto] [key=value ...]`: a
// hyperparameter sweep inside one launch (src/sweep/, galley/sweep.h).
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "galley/check.h"
#include "galley/sweep.h"

void cli_sweep_usage(FILE *out) {
    fputs("usage: galley sweep SWEEP.yaml [--dir DIR] [--resume auto] [key=value ...]\n\n"
          "Runs the trials of a sweep file (base recipe, space, method grid|random|asha, metric, budget,\n"
          "trials, ranks_per_trial, seed) inside one launch: under mpirun -np N or srun -n N the ranks\n"
          "split into N / ranks_per_trial groups, each training one trial at a time data-parallel in\n"
          "SWEEP_DIR/trials/<id>/; world rank 0 also coordinates. key=value overrides the base recipe\n"
          "for every trial. SWEEP_DIR (--dir, or the file's dir, default sweeps/<file name>) keeps\n"
          "journal.jsonl, results.csv, results.jsonl and best.yaml; `galley report SWEEP_DIR` draws it.\n"
          "SIGTERM, SIGUSR1, SIGINT or the base recipe's train.time_limit checkpoint the running trials\n"
          "and exit 4; --resume auto continues (or starts) the sweep in SWEEP_DIR.\n"
          "Exit codes: 0 finished, 1 no trial succeeded, 2 bad sweep file or recipe, 4 stopped.\n",
          out);
}

int cmd_sweep(int argc, char **argv) {
    sweep_opts o = {0};
    char *rest[argc > 0 ? argc : 1];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return cli_sweep_usage(stdout), GL_EXIT_OK;
        if (!strcmp(a, "--dir") || !strcmp(a, "--resume")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "galley sweep: %s needs %s\n", a, a[2] == 'd' ? "a directory" : "'auto'");
                return GL_EXIT_USAGE;
            }
            if (a[2] == 'd') o.dir = argv[++i];
            else o.resume = argv[++i];
        } else if (!strncmp(a, "--dir=", 6)) {
            o.dir = a + 6;
        } else if (!strncmp(a, "--resume=", 9)) {
            o.resume = a + 9;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "galley sweep: unknown option '%s'\n", a);
            return GL_EXIT_USAGE;
        } else if (!o.file) {
            o.file = a;
        } else if (strchr(a, '=')) {
            rest[n++] = argv[i];
        } else {
            fprintf(stderr, "galley sweep: expected key=value after the sweep file, found '%s'\n", a);
            return GL_EXIT_USAGE;
        }
    }
    if (!o.file) {
        fprintf(stderr, "galley sweep: missing SWEEP.yaml\n");
        cli_sweep_usage(stderr);
        return GL_EXIT_USAGE;
    }
    if (o.resume && strcmp(o.resume, "auto")) {
        fprintf(stderr, "galley sweep: --resume takes 'auto' (continue the sweep in its directory, or start it)\n");
        return GL_EXIT_USAGE;
    }
    if (o.dir && !*o.dir) {
        fprintf(stderr, "galley sweep: --dir is empty\n");
        return GL_EXIT_USAGE;
    }
    o.noverrides = n;
    o.overrides = rest;
    return sweep_main(&o, stdout, stderr);
}
