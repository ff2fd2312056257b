// cmd_train.c: `galley train [--run-dir DIR] RECIPE [key=value ...]`.
#include <stdio.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "galley/check.h"
#include "galley/cli.h"
#include "galley/train.h"

int cmd_train(int argc, char **argv) {
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
        } else {
            rest[n++] = argv[i];
        }
    }
    if (opts.run_dir && !*opts.run_dir) {
        fprintf(stderr, "galley train: --run-dir is empty\n");
        return GL_EXIT_USAGE;
    }
    recipe_t r;
    int rc = cli_load_recipe("train", n, rest, &r);
    if (rc) return rc > 0 ? GL_EXIT_OK : GL_EXIT_USAGE;
    train_result res;
    int code = train_run(&r, &opts, stdout, stderr, &res);
    recipe_free(&r);
    return code;
}
