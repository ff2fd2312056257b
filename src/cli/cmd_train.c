// cmd_train.c: `galley train [--run-dir DIR] [--resume PATH|auto] RECIPE [key=value ...]` and
// `galley eval --checkpoint PATH|auto RECIPE [key=value ...]` (the same run, evaluation only).
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "galley/check.h"
#include "cli/cli.h"
#include "galley/train.h"

// Shared by `train` and `eval`: eval takes --checkpoint PATH|auto (required) instead of --resume.
static int train_or_eval(int argc, char **argv, bool evaluate) {
    const char *cmd = evaluate ? "eval" : "train";
    // Take out --run-dir DIR (or --run-dir=DIR); the rest is RECIPE [key=value ...].
    train_opts opts = {0};
    char *rest[argc > 0 ? argc : 1];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--run-dir")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "galley train: --run-dir needs a directory\n");
                return GL_EXIT_USAGE;
            }
            opts.run_dir = argv[++i];
        } else if (!strncmp(argv[i], "--run-dir=", 10)) {
            opts.run_dir = argv[i] + 10;
        } else if (!strcmp(argv[i], evaluate ? "--checkpoint" : "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "galley %s: %s needs a checkpoint file or 'auto'\n", cmd, argv[i]);
                return GL_EXIT_USAGE;
            }
            opts.resume = argv[++i];
        } else if (!strncmp(argv[i], evaluate ? "--checkpoint=" : "--resume=", evaluate ? 13 : 9)) {
            opts.resume = argv[i] + (evaluate ? 13 : 9);
        } else {
            rest[n++] = argv[i];
        }
    }
    if (opts.run_dir && !*opts.run_dir) {
        fprintf(stderr, "galley train: --run-dir is empty\n");
        return GL_EXIT_USAGE;
    }
    if (opts.resume && !*opts.resume) {
        fprintf(stderr, "galley %s: %s is empty (give a checkpoint file or 'auto')\n", cmd,
                evaluate ? "--checkpoint" : "--resume");
        return GL_EXIT_USAGE;
    }
    if (evaluate && !opts.resume) {
        fprintf(stderr, "galley eval: give the weights to evaluate: --checkpoint FILE.h5 or --checkpoint auto "
                        "(the newest good checkpoint in checkpoint.dir)\n");
        return GL_EXIT_USAGE;
    }
    opts.evaluate = evaluate;
    // MPI first (under a launcher), so that only rank 0 reports recipe errors: every rank
    // reads the same recipe and would print the same ones.
    gl_dist d;
    if (dist_init(&d, 0, stderr) != 0) return GL_EXIT_USAGE;
    opts.dist = &d;
    int saved = -1;
    if (d.rank != 0) {
        fflush(stderr);
        saved = dup(2);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) dup2(null, 2), close(null);
    }
    recipe_t r;
    int rc = cli_load_recipe(cmd, n, rest, &r);
    if (saved >= 0) fflush(stderr), dup2(saved, 2), close(saved);
    if (rc) {
        dist_finalize(&d);
        return rc > 0 ? GL_EXIT_OK : GL_EXIT_USAGE;
    }
    train_result res;
    int code = train_run(&r, &opts, stdout, stderr, &res);
    recipe_free(&r);
    dist_finalize(&d);
    return code;
}

int cmd_train(int argc, char **argv) { return train_or_eval(argc, argv, false); }
int cmd_eval(int argc, char **argv) { return train_or_eval(argc, argv, true); }
