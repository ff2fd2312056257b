// cmd_check.c: `galley check RECIPE [key=value ...]`: validate, print the resolved recipe and
// the model summary (as YAML comments, so the output still loads as a recipe).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "galley/check.h"
#include "cli/cli.h"
#include "galley/data.h"
#include "galley/graph.h"
#include "galley/train.h"

static void size_words(double b, char *buf, size_t len) {
    if (b >= 1073741824.0) snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
    else snprintf(buf, len, "%.1f MiB", b / 1048576.0);
}

static void plan_line(const char *where, const train_plan *p) {
    char t[32], m[32], o[32], a[32], i[32], x[32];
    size_words((double)p->total, t, sizeof t), size_words((double)p->model, m, sizeof m);
    size_words((double)p->optim, o, sizeof o), size_words((double)p->acts, a, sizeof a);
    size_words((double)p->input, i, sizeof i), size_words((double)p->other, x, sizeof x);
    printf("#   %-11s %s: parameters and gradients %s, optimizer %s, activations %s, staged input %s, other %s\n",
           where, t, m, o, a, i, x);
}

// The run's arena at the recipe's batch for one rank, as train plans it: on the CPU, and on a
// GPU (no im2col space: cuDNN keeps its own; staged targets), so a batch can be sized before
// a job waits in a queue for a GPU it does not fit. tp: one rank of a tensor group (NULL: the
// whole model on each rank).
static void print_plan(const recipe_t *r, const gl_graph *cpu, const gl_dataset *d, const gl_tp *tp) {
    gl_dist one = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1, .launcher = "none"};
    const bool staging = !r->distributed.deterministic;
    train_plan pc, pg;
    train_plan_of(r, cpu, d, &one, false, false, &pc);  // the CPU does not stage (no upload_async)
    gl_backend view = *backend_cpu();
    view.device = 1, view.own_conv_workspace = 1;
    view.dense_forward_res = NULL;  // the CUDA backend does not fuse residual adds: each keeps its buffer
    gl_graph g;
    if (graph_build_tp(&g, r, d->shape, r->train.batch_size, &view, tp, stderr) != 0) {
        graph_free(&g);
        return;  // it built on the CPU's terms: graph_build said why on stderr
    }
    train_plan_of(r, &g, d, &one, staging, true, &pg);
    graph_free(&g);
    if (tp)
        printf("# memory plan at batch %lld on one data-parallel rank, for each rank of a tensor group of %d "
               "(distributed.tensor_parallel; %lld of the parameters on each rank):\n",
               (long long)r->train.batch_size, tp->size, (long long)cpu->nparams);
    else
        printf("# memory plan at batch %lld, one rank (the arena train allocates once):\n",
               (long long)r->train.batch_size);
    plan_line("on a GPU", &pg);
    printf("#   %-11s plus the cuDNN workspace cap (GALLEY_CUDNN_WORKSPACE_MB; default 1/16 of the GPU's memory, at "
           "most 2 GiB) and 256 MiB of library buffers\n", "");
    plan_line("on the CPU", &pc);
}

// distributed.tensor_parallel > 1: the model as one rank of a tensor group builds it (a split
// that does not divide is an error here as in train) and its plan. GL_EXIT_OK or GL_EXIT_USAGE.
static int check_tensor_parallel(const recipe_t *r, const gl_dataset *d) {
    const int64_t tp = r->distributed.tensor_parallel;
    if (tp <= 1) return GL_EXIT_OK;
    const gl_tp view = {.size = (int)tp,
                        .groups = r->distributed.deterministic
                                      ? (int)(r->distributed.tensor_parts ? r->distributed.tensor_parts : tp)
                                      : 0};
    gl_graph g;
    int code = GL_EXIT_OK;
    if (graph_build_tp(&g, r, d->shape, r->train.batch_size, backend_cpu(), &view, stderr) != 0) {
        code = GL_EXIT_USAGE;
    } else {
        char what[1024];
        graph_tp_describe(&g, what, sizeof what);
        printf("# tensor parallel %lld: %s\n", (long long)tp, what);
        print_plan(r, &g, d, &view);
    }
    graph_free(&g);
    return code;
}

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
        print_plan(&r, &g, &d, NULL);
        if (check_tensor_parallel(&r, &d) != GL_EXIT_OK) {
            fprintf(stderr, "galley: %s is not a valid recipe\n", r.file);
            code = GL_EXIT_USAGE;
        }
    }
    graph_free(&g);
    recipe_free(&r);
    return code;
}
