// cmd_check.c: `galley check RECIPE [key=value ...]`: validate, print the resolved recipe and
// the model summary (as YAML comments, so the output still loads as a recipe).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "galley/check.h"
#include "galley/cli.h"
#include "galley/data.h"
#include "galley/graph.h"
#include "galley/train.h"

int cmd_check(int argc, char **argv) {
    recipe_t r;
    int rc = cli_load_recipe("check", argc, argv, &r);
    if (rc) return rc > 0 ? GL_EXIT_OK : GL_EXIT_USAGE;
    gl_graph g;
    gl_dataset d, v;
    int code = GL_EXIT_OK;
    if (data_shape(&r, SPLIT_TRAIN, &d, stderr) != 0 || data_shape(&r, SPLIT_VAL, &v, stderr) != 0 ||
        train_check_splits(&r, &d, &v, stderr) != 0) {
        recipe_free(&r);
        return GL_EXIT_USAGE;
    }
    if (graph_build(&g, &r, d.shape, r.train.batch_size, backend_cpu(), stderr) != 0 ||
        train_check_model(&r, &g, &d, stderr) != 0) {
        fprintf(stderr, "galley: %s is not a valid recipe\n", r.file);
        code = GL_EXIT_USAGE;
    } else {
        printf("# galley check: %s is valid; every default is filled in below\n", r.file);
        recipe_emit(&r, stdout);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (m) {
            graph_summary(&g, m);
            fclose(m);
            printf("# model summary\n");
            for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                printf("#   %s\n", line);
            free(buf);
        }
    }
    graph_free(&g);
    recipe_free(&r);
    return code;
}
