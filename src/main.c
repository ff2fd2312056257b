// main.c: the `galley` command line: dispatch to one command per file under src/cli/.
#include <stdio.h>
#include <string.h>

#include "galley/blas_core.h"
#include "galley/check.h"
#include "galley/cli.h"

#ifndef GALLEY_VERSION
#define GALLEY_VERSION "0.1.0-dev"
#endif

int main(int argc, char **argv) {
    cpu_blas_core_fix(argv);  // may re-execute galley: before anything else happens
    if (argc < 2) {
        cli_usage(stderr);
        return GL_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("galley %s\n", GALLEY_VERSION);
        return GL_EXIT_OK;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return cmd_help(0, NULL);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "check")) return cmd_check(argc - 2, argv + 2);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 2, argv + 2);
    if (!strcmp(cmd, "help")) return cmd_help(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return cmd_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    fprintf(stderr, "galley: unknown command '%s'\n\n", cmd);
    cli_usage(stderr);
    return GL_EXIT_USAGE;
}
