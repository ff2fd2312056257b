// train.c: the loop. Plan memory, build the model and data, then step: shuffle at each epoch,
// gather a batch, forward, loss, backward, optimizer at the scheduled learning rate; evaluate
// on the held-out split each epoch (or every eval_every steps) and stop at the target.
#include "galley/train.h"

#include <math.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "galley/arena.h"
#include "galley/check.h"
#include "galley/data.h"
#include "galley/graph.h"
#include "galley/loss.h"
#include "galley/lr.h"
#include "galley/optim.h"
#include "galley/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int train_threads(const recipe_t *r) {
    if (r->train.threads > 0) return (int)r->train.threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);  // honours Slurm binding
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

// Buffers for one batch of targets, and scratch row indices.
typedef struct {
    int32_t *labels;
    float *values;
    int64_t *rows;
} batch_buf;

static void evaluate(gl_graph *g, const gl_loss *loss, const gl_dataset *d, batch_buf *b, gl_metrics *m) {
    metrics_reset(m);
    gl_tensor *o = graph_output(g);
    for (int64_t s = 0; s < d->n; s += g->batch) {
        int64_t n = d->n - s < g->batch ? d->n - s : g->batch;
        for (int64_t i = 0; i < n; i++) b->rows[i] = s + i;
        data_gather(d, b->rows, n, g->input.data, b->labels, b->values);
        graph_forward(g, n, false);
        double l = loss_compute(loss, g->be, o, n, b->labels, b->values, NULL);
        metrics_add(m, o, n, b->labels, b->values, l);
    }
}

static void shuffle(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {  // Fisher-Yates, keyed by (epoch, position)
        int64_t j = (int64_t)rng_below(seed, RNG_SHUFFLE, (uint64_t)epoch, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int target_met(const recipe_t *r, double v) {
    if (isnan(v)) return 0;
    if (!isnan(r->train.target.above)) return v >= r->train.target.above;
    return v <= r->train.target.below;
}

static const char *target_words(const recipe_t *r, char *buf, size_t len) {
    const char *m = metrics_name(r->train.target.metric);
    if (!isnan(r->train.target.above)) snprintf(buf, len, "validation %s >= %g", m, r->train.target.above);
    else snprintf(buf, len, "validation %s <= %g", m, r->train.target.below);
    return buf;
}

static const char *task_words(const gl_dataset *d) {
    return d->target == TARGET_CLASS ? "classification" : d->target == TARGET_MASK ? "segmentation" : "regression";
}

int train_run(const recipe_t *r, FILE *out, FILE *err, train_result *res) {
    memset(res, 0, sizeof *res);
    res->target_reached = r->train.target.metric == METRIC_NONE ? -1 : 0;
    res->best = NAN;
    res->best_loss = NAN;
    const gl_backend *be = backend_cpu();
    int threads = train_threads(r);
    be->set_threads(threads);

    gl_dataset train, val, shape;
    data_describe(r, &shape);
    int64_t ntrain = r->data.synthetic.train_size, batch = r->train.batch_size;
    if (batch > ntrain) batch = ntrain;  // a batch never holds more than the data set
    gl_graph g;
    if (graph_build(&g, r, shape.shape, batch, be, err) != 0 || train_check_model(r, &g, err) != 0) {
        graph_free(&g);
        return GL_EXIT_USAGE;
    }
    const int64_t steps_per_epoch = (ntrain + batch - 1) / batch;
    const int64_t total_steps = r->train.steps > 0 ? r->train.steps : r->train.epochs * steps_per_epoch;
    const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;

    // Plan every byte first, refuse what cannot fit, then allocate once.
    size_t target_bytes = (size_t)(batch * shape.tsize) * (shape.target == TARGET_VALUES ? sizeof(float) : 4);
    size_t bytes = g.bytes + optim_bytes(r, &g) + data_synth_bytes(r, SPLIT_TRAIN) + data_synth_bytes(r, SPLIT_VAL) +
                   arena_round((size_t)ntrain * sizeof(int64_t)) + arena_round(target_bytes) +
                   arena_round((size_t)batch * sizeof(int64_t)) + 8 * GL_ARENA_ALIGN;
    uint64_t host = arena_host_memory();
    if (host && (double)bytes > 0.9 * (double)host) {
        fprintf(err, "%s: error: this run needs %.2f GiB of memory but the machine has %.2f GiB; reduce "
                     "train.batch_size, the data set or the model\n",
                r->file, bytes / 1073741824.0, host / 1073741824.0);
        graph_free(&g);
        return GL_EXIT_USAGE;
    }
    gl_arena arena;
    arena_init(&arena, bytes);
    graph_bind(&g, &arena);
    graph_init_params(&g, (uint64_t)r->seed);
    g.seed = (uint64_t)r->seed;
    gl_optim opt;
    optim_init(&opt, r, &g, &arena);
    double t_data0 = now_s();
    data_synth_make(r, SPLIT_TRAIN, &train, &arena);
    data_synth_make(r, SPLIT_VAL, &val, &arena);
    double t_data = now_s() - t_data0;
    int64_t *perm = arena_alloc(&arena, (size_t)ntrain * sizeof(int64_t));
    batch_buf b = {0};
    if (shape.target == TARGET_VALUES) b.values = arena_alloc(&arena, target_bytes);
    else b.labels = arena_alloc(&arena, target_bytes);
    b.rows = arena_alloc(&arena, (size_t)batch * sizeof(int64_t));
    gl_loss loss;
    loss_init(&loss, r, &train);
    gl_metrics tm, vm;
    metrics_init(&tm, &train, (int)r->train.top_k);
    metrics_init(&vm, &val, (int)r->train.top_k);
    gl_lr lr;
    lr_init(&lr, r, batch, steps_per_epoch, total_steps);

    char tw[128], line[256], rule[512], shp[64];
    shape_format(&train.shape, shp, sizeof shp);
    fprintf(out, "galley: training '%s' (recipe %s, hash %016llx)\n", r->name, r->file,
            (unsigned long long)recipe_hash(r));
    fprintf(out, "  device cpu, %d threads | batch %lld | %lld parameters, %.3g MFLOPs/sample forward\n", threads,
            (long long)batch, (long long)g.nparams, (double)g.flops / 1e6);
    fprintf(out, "  data: synthetic %s, %s, input %s, train %lld, val %lld samples (generated in %.2f s)\n",
            r->data.synthetic.kind == SYNTH_SPIRALS ? "spirals" : r->data.synthetic.kind == SYNTH_BLOBS ? "blobs"
            : r->data.synthetic.kind == SYNTH_SHAPES2D ? "shapes2d" : r->data.synthetic.kind == SYNTH_COSMO3D ? "cosmo3d"
            : r->data.synthetic.kind == SYNTH_CLIMATE2D ? "climate2d" : "fields3d",
            task_words(&train), shp, (long long)train.n, (long long)val.n, t_data);
    lr_describe(&lr, rule, sizeof rule);
    fprintf(out, "  run: %lld steps (%lld per epoch%s) | %s\n", (long long)total_steps, (long long)steps_per_epoch,
            r->train.steps > 0 ? "; train.steps is set, so train.epochs is not used" : "", rule);
    if (res->target_reached == 0) fprintf(out, "  target: %s\n", target_words(r, tw, sizeof tw));
    fflush(out);

    int code = GL_EXIT_OK;
    int64_t step = 0, skipped = 0, seen = 0, seen_total = 0, last_eval = -1;
    double t_start = now_s(), t_mark = t_start, t_eval = 0;
    metrics_reset(&tm);
    gl_tensor *o = graph_output(&g);
    while (step < total_steps) {
        int64_t epoch = step / steps_per_epoch + 1, s = (step % steps_per_epoch) * batch;
        if (s == 0) shuffle(perm, train.n, (uint64_t)r->seed, epoch);
        int64_t n = train.n - s < batch ? train.n - s : batch;
        data_gather(&train, perm + s, n, g.input.data, b.labels, b.values);
        g.step = step;
        graph_forward(&g, n, true);
        double l = loss_compute(&loss, be, o, n, b.labels, b.values, o->grad);
        if (!isfinite(l)) {
            if (r->train.nonfinite == NONFINITE_SKIP) {
                skipped++;
            } else {
                int bad = graph_first_nonfinite(&g, n);
                fprintf(err, "galley: error: the loss became %g at step %lld (epoch %lld); ", l, (long long)step,
                        (long long)epoch);
                if (bad >= 0) fprintf(err, "the first layer whose output is not finite is '%s' (model.layers[%d])\n",
                                      g.layers[bad].cfg->name, bad);
                else fprintf(err, "every layer's output is finite, so the loss itself overflowed\n");
                fprintf(err, "  hint: lower optimizer.lr, set optimizer.clip_norm, check the data, or set "
                             "train.nonfinite: skip\n");
                code = GL_EXIT_RUNTIME;
                goto done;
            }
        } else {
            metrics_add(&tm, o, n, b.labels, b.values, l);
            graph_backward(&g, n);
            // A non-finite gradient norm leaves the weights untouched (optim_step skips it).
            double norm = optim_step(&opt, &g, lr_at(&lr, step));
            if (!isfinite(norm)) {
                if (r->train.nonfinite == NONFINITE_SKIP) {
                    skipped++;
                } else {
                    fprintf(err, "galley: error: the gradient norm became %g at step %lld (epoch %lld) while the "
                                 "loss was %g\n  hint: lower optimizer.lr, set optimizer.clip_norm, or set "
                                 "train.nonfinite: skip\n",
                            norm, (long long)step, (long long)epoch, l);
                    code = GL_EXIT_RUNTIME;
                    goto done;
                }
            }
        }
        step++;
        seen += n;
        seen_total += n;
        int epoch_end = step % steps_per_epoch == 0;
        int due = r->train.eval_every > 0 ? step % r->train.eval_every == 0 : epoch_end;
        if (!due && step < total_steps) continue;

        double te = now_s();
        evaluate(&g, &loss, &val, &b, &vm);
        t_eval += now_s() - te;
        last_eval = step;
        double elapsed = now_s() - t_mark;
        char tl[160], vl[160];
        metrics_format(&tm, tl, sizeof tl);
        metrics_format(&vm, vl, sizeof vl);
        if (r->train.eval_every > 0 || r->train.steps > 0)
            snprintf(line, sizeof line, "step %6lld/%lld (epoch %lld)", (long long)step, (long long)total_steps,
                     (long long)epoch);
        else
            snprintf(line, sizeof line, "epoch %3lld/%lld", (long long)epoch, (long long)epochs);
        fprintf(out, "%s  %s | val %s | lr %.4g | %.0f samples/s  %.2f s\n", line, tl, vl, lr_at(&lr, step - 1),
                (double)seen / (elapsed > 0 ? elapsed : 1e-9), elapsed);
        fflush(out);
        res->epochs_run = (int)epoch;
        res->last_loss = metrics_value(&vm, METRIC_LOSS);
        if (isnan(res->best_loss) || res->last_loss < res->best_loss) res->best_loss = res->last_loss, res->best_loss_step = step;
        res->last_acc = metrics_value(&vm, METRIC_ACCURACY);
        if (r->train.target.metric != METRIC_NONE) {
            double v = metrics_value(&vm, r->train.target.metric);
            int up = !isnan(r->train.target.above);
            if (isnan(res->best) || (up ? v > res->best : v < res->best)) res->best = v;
            res->last = v;
            if (res->target_reached == 0 && target_met(r, v)) {
                res->target_reached = 1;
                fprintf(out, "target reached: %s at step %lld, epoch %lld (%s %.4f)\n", target_words(r, tw, sizeof tw),
                        (long long)step, (long long)epoch, metrics_name(r->train.target.metric), v);
                break;
            }
        }
        metrics_reset(&tm);
        seen = 0;
        t_mark = now_s();
    }
    (void)last_eval;
    res->steps = step;
    res->seconds = now_s() - t_start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    metrics_format(&vm, line, sizeof line);
    double t_train = res->seconds - t_eval;
    res->samples_per_s = t_train > 0 ? (double)seen_total / t_train : 0;
    fprintf(out, "done: %lld steps in %.2f s (evaluation %.2f s) | training %.1f samples/s | last val %s | peak "
                 "memory %.1f MiB\n",
            (long long)step, res->seconds, t_eval, res->samples_per_s, line, ru.ru_maxrss / 1024.0);
    metrics_format_iou(&vm, line, sizeof line);
    if (line[0]) fprintf(out, "  %s\n", line);
    fprintf(out, "  best val loss %.4f at step %lld", res->best_loss, (long long)res->best_loss_step);
    if (r->train.target.metric != METRIC_NONE)
        fprintf(out, "; best val %s %.4f", metrics_name(r->train.target.metric), res->best);
    fputc('\n', out);
    if (skipped)
        fprintf(out, "  %lld steps skipped for a non-finite loss or gradient (train.nonfinite: skip)\n",
                (long long)skipped);
    if (res->target_reached == 0) {
        fprintf(out, "target NOT reached: %s; best %.4f (exit code %d)\n", target_words(r, tw, sizeof tw), res->best,
                GL_EXIT_TARGET);
        code = GL_EXIT_TARGET;
    }
done:
    graph_free(&g);
    arena_free(&arena);
    return code;
}
