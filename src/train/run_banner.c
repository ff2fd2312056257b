// run_banner.c: what a run is about to do, printed once the run log is open: the run log's
// banner (recipe, device, data, model, steps, target), then the lines about ranks, the
// checkpoint continued or evaluated, and fp16 loss scaling.
#include "galley/check.h"
#include "galley/data.h"
#include "galley/synth.h"
#include "train/run.h"

static const char *task_words(const gl_dataset *d) {
    return d->target == TARGET_CLASS ? "classification" : d->target == TARGET_MASK ? "segmentation" : "regression";
}

// The progress line's metric: the target's, else accuracy (classes, masks) or MAE (values).
static int main_metric(const recipe_t *r, const gl_dataset *d) {
    int t = r->train.target.metric;
    if (t != METRIC_NONE && t != METRIC_LOSS) return t;
    return d->target == TARGET_VALUES ? METRIC_MAE : METRIC_ACCURACY;
}

// The lines after the banner: ranks, deterministic parts, the checkpoint, fp16.
static void banner_notes(const gl_run *u) {
    const gl_dist *d = u->d;
    const train_ctx *c = &u->c;
    const gl_ckpt_state *ck = &u->ck;
    FILE *out = u->out;
    if (d->world > 1)
        fprintf(out, "  ranks: %d (launched by %s, %d on this node) | %s\n", d->world, d->launcher, d->local_world,
                c->parts ? "deterministic: gradients gathered and summed in part order"
                         : "gradients summed by allreduce in buckets during backward");
    if (u->grid_on) {
        char what[1024];
        fprintf(out, "  ");
        grid_describe(&u->grid, d->world, out);
        graph_tp_describe(&u->g, what, sizeof what);
        fprintf(out, "  tensor parallel %d: %s; %lld of the %lld parameters on each rank%s\n", u->grid.tp, what,
                (long long)u->g.nparams, (long long)(u->full_on ? u->full.nparams : u->g.nparams),
                u->grid.view.groups ? "; split products in canonical parts (distributed.tensor_parts)" : "");
        if (u->grid.view.groups)
            fprintf(out, "  deterministic: the split products are computed as %d canonical parts (%d per tensor "
                         "rank), summed in part order\n", u->grid.view.groups, u->grid.view.groups / u->grid.tp);
    }
    if (c->parts)
        fprintf(out, "  deterministic: the global batch is computed as %d parts (%d per rank), summed in a fixed "
                     "order\n", c->parts, c->local_parts);
    if (u->opts->evaluate)
        fprintf(out, "  evaluation only (galley eval): the weights of %s, step %lld; nothing is trained\n",
                u->resume_path[0] ? u->resume_path : "(none)", (long long)ck->step);
    else if (u->resume_path[0])
        fprintf(out, "  resumed from %s at step %lld (epoch %lld)%s\n", u->resume_path, (long long)ck->step,
                (long long)(ck->step / u->steps_per_epoch + 1),
                ck->world != u->dp->world ? " (written by a run with another number of data-parallel ranks)" : "");
    if (c->ls.on && !u->opts->evaluate)
        fprintf(out, "  fp16: dynamic loss scaling, scale %g%s (halved on a non-finite gradient, the step skipped; "
                     "doubled after %d finite steps)\n",
                c->ls.scale,
                u->scaler_restored ? " from the checkpoint"
                : ck->scaler_saved ? " (the checkpoint's scale is not one scaling can reach: starting afresh)"
                : u->resume_path[0] ? " (the checkpoint has none)"
                                    : "",
                GL_LOSS_SCALE_GROWTH);
    if (u->resume_path[0] && c->parts && ck->parts != c->parts)
        fprintf(out, "  note: the checkpoint was written with distributed.parts %d, this run uses %d: it continues, "
                     "but not bitwise as the original run would have\n", ck->parts, c->parts);
}

void run_banner(gl_run *u) {
    const recipe_t *r = u->r;
    const gl_dataset *train = &u->train;
    gl_runinfo info = {.name = r->name, .recipe_file = r->file, .hash = recipe_hash(r), .device = u->device,
                       .ranks = u->d->world, .threads = u->threads, .precision = recipe_precision_name(u->precision),
                       .global_batch = r->train.batch_size < train->n ? r->train.batch_size : train->n,
                       .local_batch = u->batch, .parameters = u->full_on ? u->full.nparams : u->g.nparams, .mflops = (double)u->g.flops / 1e6,
                       .train_samples = train->n, .val_samples = u->val.n, .data_seconds = u->t_data,
                       .total_steps = u->total_steps, .steps_per_epoch = u->steps_per_epoch,
                       .steps_set = r->train.steps > 0, .main_metric = main_metric(r, train)};
    char shp[64];
    shape_format(&train->shape, shp, sizeof shp);
    if (r->data.source == DATA_SOURCE_HDF5)
        snprintf(info.data, sizeof info.data, "hdf5 %s, %s, input %s", r->data.train.files, task_words(train), shp);
    else if (r->data.source == DATA_SOURCE_TIMESERIES)
        snprintf(info.data, sizeof info.data, "timeseries %s, lead %lld, %s, input %s", r->data.timeseries.train,
                 (long long)r->data.timeseries.lead, task_words(train), shp);
    else
        snprintf(info.data, sizeof info.data, "synthetic %s, %s, input %s", synth_kind_name(r->data.synthetic.kind),
                 task_words(train), shp);
    lr_describe(&u->lr, info.lr_rule, sizeof info.lr_rule);
    if (u->res->target_reached == 0) run_target_words(r, info.target, sizeof info.target);
    runlog_banner(&u->lg, &info);
    char cache[1024];
    if (loader_cache_note(u->lt, u->lv, cache, sizeof cache)) fprintf(u->out, "  %s\n", cache);
    banner_notes(u);
}
