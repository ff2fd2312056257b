// model_check.c: the checks that tie the model to the loss and the data, shared by
// `galley check` and `galley train` so a recipe that checks clean also starts training.
#include <stdio.h>

#include "galley/train.h"

int train_check_model(const recipe_t *r, gl_graph *g, FILE *err) {
    const gl_tensor *o = graph_output(g);
    int64_t classes = r->data.synthetic.classes;
    if (o->shape.ndim != 1 || o->size != classes) {
        char s[64];
        shape_format(&o->shape, s, sizeof s);
        const layer_cfg *c = g->layers[g->nlayers - 1].cfg;
        fprintf(err,
                "%s:%d:%d: error: model.layers[%d] (%s): the model's output shape %s does not match the data's "
                "%lld classes; softmax_cross_entropy wants [%lld] (set units: %lld on the last dense layer)\n",
                c->mark.file, c->mark.line, c->mark.col, g->nlayers - 1, c->name, s, (long long)classes,
                (long long)classes, (long long)classes);
        return -1;
    }
    return 0;
}
