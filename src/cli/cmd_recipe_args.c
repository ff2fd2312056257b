// cmd_recipe_args.c: the "RECIPE [key=value ...]" arguments that train and check share.
#include "cli/cli_internal.h"

#include <stdio.h>
#include <string.h>

#include "galley/check.h"
#include "cli/cli.h"

int cli_load_recipe(const char *cmd, int argc, char **argv, recipe_t *r) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        cli_help_for(cmd, stdout);
        return 1;
    }
    if (argc < 1) {
        fprintf(stderr, "galley %s: missing RECIPE\n", cmd);
        cli_help_for(cmd, stderr);
        return -1;
    }
    if (!argv[0][0]) {
        fprintf(stderr, "galley %s: the RECIPE path is empty\n", cmd);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-') {
            fprintf(stderr, "galley %s: unknown option '%s'\n", cmd, argv[i]);
            return -1;
        }
        if (i > 0 && !strchr(argv[i], '=')) {
            fprintf(stderr, "galley %s: '%s' is not a key=value override (one RECIPE, then overrides)\n", cmd,
                    argv[i]);
            return -1;
        }
    }
    if (recipe_load(r, argv[0], argc - 1, argv + 1, stderr) != 0) {
        fprintf(stderr, "galley: %s is not a valid recipe (see `galley help recipe`)\n", argv[0]);
        recipe_free(r);
        return -1;
    }
    return 0;
}
