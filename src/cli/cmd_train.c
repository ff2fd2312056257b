// cmd_train.c: `galley train RECIPE [key=value ...]`.
#include "cli/cli_internal.h"
#include "galley/check.h"
#include "galley/cli.h"
#include "galley/train.h"

int cmd_train(int argc, char **argv) {
    recipe_t r;
    int rc = cli_load_recipe("train", argc, argv, &r);
    if (rc) return rc > 0 ? GL_EXIT_OK : GL_EXIT_USAGE;
    train_result res;
    int code = train_run(&r, stdout, stderr, &res);
    recipe_free(&r);
    return code;
}
