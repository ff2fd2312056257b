// cmd_ckpt.c: `galley ckpt inspect FILE [--recipe]`.
#include <stdio.h>
#include <string.h>

#include "galley/check.h"
#include "galley/ckpt.h"
#include "cli/cli.h"

int cmd_ckpt(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        cli_help_for("ckpt", argc < 1 ? stderr : stdout);
        return argc < 1 ? GL_EXIT_USAGE : GL_EXIT_OK;
    }
    if (strcmp(argv[0], "inspect") != 0) {
        fprintf(stderr, "galley ckpt: unknown subcommand '%s' (known: inspect)\n", argv[0]);
        return GL_EXIT_USAGE;
    }
    const char *file = NULL;
    bool recipe = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--recipe")) recipe = true;
        else if (!file && argv[i][0] != '-') file = argv[i];
        else {
            fprintf(stderr, "galley ckpt inspect: unexpected argument '%s'\n", argv[i]);
            return GL_EXIT_USAGE;
        }
    }
    if (!file) {
        fprintf(stderr, "galley ckpt inspect: give a checkpoint file\n");
        return GL_EXIT_USAGE;
    }
    return ckpt_inspect(file, recipe, stdout, stderr) == 0 ? GL_EXIT_OK : GL_EXIT_RUNTIME;
}
