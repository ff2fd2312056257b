// main.c: the `galley` command line: dispatch to one command per file under src/cli/.
#include <stdio.h>
#include <string.h>

#include "galley/blas_core.h"
#include "galley/check.h"
#include "cli/cli.h"

#ifndef GALLEY_VERSION
#define GALLEY_VERSION "0.1.0-dev"
#endif

// The commands: one file each under src/cli/ (cmd_<name>.c, declared in cli/cli.h) and one
// line here. `galley help` (cmd_help.c) describes them.
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"train", cmd_train}, {"check", cmd_check}, {"info", cmd_info}, {"report", cmd_report},
    {"help", cmd_help},   {"data", cmd_data},   {"ckpt", cmd_ckpt}, {"eval", cmd_eval},
    {"sweep", cmd_sweep},  // hyperparameter sweeps: src/cli/cmd_sweep.c, src/sweep/
    {"doctor", cmd_doctor},  // checks a job's ranks and nodes: src/cli/cmd_doctor.c, src/doctor/
};

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
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "galley: unknown command '%s'\n\n", cmd);
    cli_usage(stderr);
    return GL_EXIT_USAGE;
}
