// train.c: the loop. Plan memory, build the model and data, then per epoch: shuffle, step
// through batches (forward, loss, backward, optimizer), evaluate on the held-out split, print.
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

typedef struct {
    double loss, acc;
} eval_result;

static eval_result evaluate(gl_graph *g, const gl_dataset *d, int64_t *idx, int32_t *labels) {
    double loss = 0;
    int64_t hits = 0;
    for (int64_t s = 0; s < d->n; s += g->batch) {
        int64_t n = d->n - s < g->batch ? d->n - s : g->batch;
        for (int64_t i = 0; i < n; i++) idx[i] = s + i;
        data_gather(d, idx, n, g->input.data, labels);
        graph_forward(g, n, false);
        int64_t h = 0;
        gl_tensor *o = graph_output(g);
        loss += g->be->softmax_xent(n, o->size, o->data, labels, NULL, &h) * (double)n;
        hits += h;
    }
    return (eval_result){loss / (double)d->n, (double)hits / (double)d->n};
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

static int target_met(const recipe_t *r, eval_result e) {
    double v = r->train.target.metric == METRIC_ACCURACY ? e.acc : e.loss;
    if (!isnan(r->train.target.above)) return v >= r->train.target.above;
    return v <= r->train.target.below;
}

static const char *target_words(const recipe_t *r, char *buf, size_t len) {
    const char *m = r->train.target.metric == METRIC_ACCURACY ? "accuracy" : "loss";
    if (!isnan(r->train.target.above)) snprintf(buf, len, "validation %s >= %g", m, r->train.target.above);
    else snprintf(buf, len, "validation %s <= %g", m, r->train.target.below);
    return buf;
}

int train_run(const recipe_t *r, FILE *out, FILE *err, train_result *res) {
    memset(res, 0, sizeof *res);
    res->target_reached = r->train.target.metric == METRIC_NONE ? -1 : 0;
    const gl_backend *be = backend_cpu();
    int threads = train_threads(r);
    be->set_threads(threads);

    // Plan every byte first, refuse what cannot fit, then allocate once.
    gl_dataset train, val;
    gl_shape in_shape = shape_1d(r->data.synthetic.features);
    int64_t batch = r->train.batch_size;
    int64_t ntrain = r->data.synthetic.train_size;
    if (batch > ntrain) batch = ntrain;  // a batch never holds more than the data set
    gl_graph g;
    if (graph_build(&g, r, in_shape, batch, be, err) != 0) {
        graph_free(&g);
        return GL_EXIT_USAGE;
    }
    gl_tensor *o = graph_output(&g);
    if (train_check_model(r, &g, err) != 0) {
        graph_free(&g);
        return GL_EXIT_USAGE;
    }
    size_t bytes = g.bytes + optim_bytes(r, g.nparams) + data_synth_bytes(r, SPLIT_TRAIN) +
                   data_synth_bytes(r, SPLIT_VAL) + arena_round((size_t)ntrain * sizeof(int64_t)) +
                   arena_round((size_t)batch * sizeof(int32_t)) + arena_round((size_t)batch * sizeof(int64_t)) +
                   8 * GL_ARENA_ALIGN;
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
    optim_init(&opt, r, g.nparams, &arena);
    data_synth_make(r, SPLIT_TRAIN, &train, &arena);
    data_synth_make(r, SPLIT_VAL, &val, &arena);
    int64_t *perm = arena_alloc(&arena, (size_t)ntrain * sizeof(int64_t));
    int32_t *labels = arena_alloc(&arena, (size_t)batch * sizeof(int32_t));
    int64_t *eval_idx = arena_alloc(&arena, (size_t)batch * sizeof(int64_t));

    char tw[128];
    fprintf(out, "galley: training '%s' (recipe %s, hash %016llx)\n", r->name, r->file,
            (unsigned long long)recipe_hash(r));
    fprintf(out, "  device cpu, %d threads | batch %lld | %lld parameters | train %lld, val %lld samples\n", threads,
            (long long)batch, (long long)g.nparams, (long long)train.n, (long long)val.n);
    fprintf(out, "  optimizer sgd lr %g momentum %g%s weight_decay %g (constant learning rate)\n", r->optimizer.lr,
            r->optimizer.momentum, r->optimizer.nesterov ? " nesterov" : "", r->optimizer.weight_decay);
    if (res->target_reached == 0) fprintf(out, "  target: %s\n", target_words(r, tw, sizeof tw));
    fflush(out);

    int64_t step = 0;
    int code = GL_EXIT_OK;
    double t_start = now_s();
    for (int64_t epoch = 1; epoch <= r->train.epochs; epoch++) {
        double t0 = now_s(), loss_sum = 0;
        int64_t hits = 0;
        shuffle(perm, train.n, (uint64_t)r->seed, epoch);
        for (int64_t s = 0; s < train.n; s += batch, step++) {
            int64_t n = train.n - s < batch ? train.n - s : batch;
            data_gather(&train, perm + s, n, g.input.data, labels);
            g.step = step;
            graph_forward(&g, n, true);
            int64_t h = 0;
            double loss = be->softmax_xent(n, o->size, o->data, labels, o->grad, &h);
            if (!isfinite(loss)) {
                int bad = graph_first_nonfinite(&g, n);
                fprintf(err, "galley: error: the loss became %g at step %lld (epoch %lld)%s%s%s\n", loss,
                        (long long)step, (long long)epoch, bad >= 0 ? "; first non-finite output: layer " : "",
                        bad >= 0 ? g.layers[bad].cfg->name : "", bad >= 0 ? "" : "");
                fprintf(err, "  hint: lower optimizer.lr, or check the data for NaN/Inf\n");
                code = GL_EXIT_RUNTIME;
                goto done;
            }
            loss_sum += loss * (double)n;
            hits += h;
            graph_backward(&g, n);
            optim_step(&opt, g.params, g.grads, r->optimizer.lr);
        }
        double t_train = now_s() - t0;
        eval_result e = evaluate(&g, &val, eval_idx, labels);
        res->epochs_run = (int)epoch;
        res->last_train_loss = loss_sum / (double)train.n;
        res->last_val_loss = e.loss;
        res->last_val_acc = e.acc;
        if (e.acc > res->best_val_acc) res->best_val_acc = e.acc;
        fprintf(out, "epoch %3lld/%lld  loss %.4f  acc %.4f | val loss %.4f  acc %.4f | %.0f samples/s  %.2f s\n",
                (long long)epoch, (long long)r->train.epochs, res->last_train_loss, (double)hits / (double)train.n,
                e.loss, e.acc, (double)train.n / (t_train > 0 ? t_train : 1e-9), now_s() - t0);
        fflush(out);
        if (res->target_reached == 0 && target_met(r, e)) {
            res->target_reached = 1;
            fprintf(out, "target reached: %s at epoch %lld (accuracy %.4f, loss %.4f)\n",
                    target_words(r, tw, sizeof tw), (long long)epoch, e.acc, e.loss);
            break;
        }
    }
    res->seconds = now_s() - t_start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(out, "done: %d epochs, %lld steps in %.2f s | best val acc %.4f, last %.4f | peak memory %.1f MiB\n",
            res->epochs_run, (long long)step, res->seconds, res->best_val_acc, res->last_val_acc,
            ru.ru_maxrss / 1024.0);
    if (res->target_reached == 0) {
        fprintf(out, "target NOT reached: %s (exit code %d)\n", target_words(r, tw, sizeof tw), GL_EXIT_TARGET);
        code = GL_EXIT_TARGET;
    }
done:
    graph_free(&g);
    arena_free(&arena);
    return code;
}
