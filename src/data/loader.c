// loader.c: reader threads filling a ring of preallocated batch slots (see loader.h).
//
// The stream of batches is numbered k = 0, 1, ...: batch k is epoch k / B + 1, index k % B
// (B batches per epoch) and lives in slot k % prefetch. Readers work sample by sample: they claim
// the next unclaimed sample of the newest started batch (with runs, the next stretch of
// consecutive samples, taken in sample order: slot.work), or start batch k + 1 when its slot is
// free, or wait. The trainer takes batches in order (loader_next) and gives slots back
// (loader_release). Each sample is produced from (seed, epoch, sample) alone, into its own place
// in the slot, so the content does not depend on which thread made it or when.
//
// With data.loader.threads 0 there are no readers: the thread that asks for a batch makes it then
// and there, its samples shared out over its OpenMP team (fill_inline), into the slot or straight
// into a buffer the caller names (loader_try_next_into: a CPU run's model input, one copy less).
//
// A sample: source (in-memory synthetic data, the memory cache, the reader's run, or an HDF5 read:
// a hyperslab when cropping without cache) -> crop -> flips/rotation -> pad_crop shift -> copy into the slot ->
// noise. Masks and field targets follow x through every geometric step.
#include "galley/loader.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/source.h"
#include "galley/arena.h"
#include "data/augment.h"
#include "galley/check.h"

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_IN_USE };

typedef struct {
    int state;
    int64_t k, n, global_n, epoch, index;
    bool last;
    int64_t claimed, done, skipped;
    int failed;
    // data.nonfinite: skip: the bad sample at the lowest position of this batch (its message),
    // handed to skip_first when the batch is served, so "the first" follows the serving order
    // and not which reader thread got there first
    int64_t skip_pos;
    char skip_msg[1024];
    char err[1024];  // why the batch failed (its own: a later batch may fail too before it is served)
    float *x, *values;
    float *x_own;    // the slot's input array (x points elsewhere while an inline batch fills a caller's)
    int32_t *labels;
    int64_t *samples;  // served (a skipped sample's replacement in its place)
    int64_t *order;    // as the order and shard say
    int64_t *work;     // positions in the order readers take them: by sample, when reading runs
} slot;

typedef struct {
    void *cur;  // the source's reader state (NULL: it does not read)
    float *fx, *ft, *ax, *bx, *at, *bt;  // full-sample reads and ping-pong buffers (targets as 4-byte items)
    float *rx, *rt;           // a run of samples read at once: [run_max, full], targets as 4-byte items
    int64_t run_lo, run_ok;   // samples run_lo .. run_lo + run_ok - 1 are there
} worker;

struct gl_loader {
    uint64_t seed;
    int split, rank, world, train;
    int64_t batch, bpe, cap;
    bool drop_last;
    gl_dataset shape;  // per-sample shapes as served
    gl_shape xfull, tfull;
    int64_t xfull_n, tfull_n, full[3];
    int nd;            // spatial axes
    int tspatial;      // target follows x's geometry: 0 no, 1 mask, 2 field
    augment_params aug;
    float noise;
    bool skip_nonfinite;  // data.nonfinite: skip
    bool serve_only;      // loader_params.serve_only
    atomic_llong skipped;
    char skip_first[1024];

    gl_arena arena;    // slots, cache, perm, in-memory data
    const gl_source_ops *ops;  // data.source's
    void *src;                 // the split, opened by ops

    loader_cache_plan cache;
    float *cache_x, *cache_v;
    int32_t *cache_l;
    atomic_uchar *cache_state;  // 0 empty, 1 being filled, 2 ready
    atomic_uchar *fill_state;   // per block of fill_n samples: 1 once a reader has claimed it (NULL: no blocks)
    int64_t fill_n;
    int64_t run_max;            // the most consecutive samples a reader reads in one call (1: one at a time)

    int64_t *perm, perm_epoch;
    slot *slots;
    int nslots;
    int64_t next_start, next_out;
    slot *current;

    pthread_t *th;
    worker *w;
    int nthreads, started;
    int nw;          // workers: one a reader thread, or (threads 0) one a thread of the caller's team
    int64_t *runs;   // threads 0: a batch's runs as claimed, [2 * cap] (start in work, length)
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    double wait_total;

    char *stage_dir;
    char **staged;
    int nstaged;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The caller's team: the threads that share an inline batch's samples.
static int inline_workers(void) { return omp_get_max_threads(); }

void loader_default_params(loader_params *p) {
    memset(p, 0, sizeof *p);
    p->split = SPLIT_TRAIN;
    p->world = 1;
}

// ---- sizes -----------------------------------------------------------------------------------

// Decoded samples a reader reads in one call: a run of a batch, a block of the cache.
enum { RUN_BYTES = 4 << 20 };

typedef struct {
    gl_dataset shape;
    gl_shape xfull, tfull;
    int64_t batch, cap, nslots, threads;
    loader_cache_plan cache;
    int64_t fill_n, run_max;  // see gl_loader
} load_plan;

static size_t cache_bytes(int64_t n, const gl_shape *xfull, const gl_shape *tfull) {
    return arena_round((size_t)(n * shape_size(xfull)) * sizeof(float)) + arena_round((size_t)(n * shape_size(tfull)) * 4) +
           2 * arena_round((size_t)n);  // entries' and blocks' states
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void make_plan(const recipe_t *r, const loader_params *p, const gl_source_ops *ops, const gl_dataset *shape,
                      const gl_shape *xfull, const gl_shape *tfull, int64_t crop, load_plan *pl) {
    pl->shape = *shape;
    pl->xfull = *xfull;
    pl->tfull = *tfull;
    int64_t b = p->batch > 0 ? p->batch : r->train.batch_size;
    pl->batch = b < shape->n ? b : shape->n;
    int world = p->world > 0 ? p->world : 1;
    pl->cap = (pl->batch + world - 1) / world;
    pl->nslots = p->prefetch > 0 ? p->prefetch : r->data.loader.prefetch;
    pl->threads = p->threads > 0 ? p->threads : r->data.loader.threads;
    // A source held in memory has nothing to cache; serving zeros (benchmarks) reads nothing.
    bool reads = !ops->memory_bytes && !p->serve_only;
    loader_cache_decide(reads ? r->data.loader.cache : DATA_CACHE_NONE, r->data.loader.cache_share,
                        ops->memory_bytes ? 0 : (double)cache_bytes(shape->n, xfull, tfull), arena_host_memory(),
                        p->node_ranks, &pl->cache);
    int64_t per = (shape_size(xfull) + shape_size(tfull)) * 4, fit = clamp64(RUN_BYTES / per, 1, INT64_MAX);
    pl->fill_n = pl->cache.on && ops->read_run ? clamp64(fit, 1, shape->n) : 1;
    // runs: whole samples, so not with a crop (its hyperslab reads less); work's sort keys fit
    pl->run_max = !pl->cache.on && reads && ops->read_run && crop == 0 && shape->n < INT64_MAX / (pl->cap + 1)
                      ? clamp64(fit, 1, pl->cap)
                      : 1;
}

static size_t slot_bytes(const load_plan *pl) {
    size_t tb = (size_t)pl->shape.tsize * 4;
    return arena_round((size_t)(pl->cap * pl->shape.size) * sizeof(float)) + arena_round((size_t)pl->cap * tb) +
           3 * arena_round((size_t)pl->cap * sizeof(int64_t));
}

static size_t arena_bytes(const gl_source_ops *ops, const void *src, const load_plan *pl) {
    size_t b = (size_t)pl->nslots * slot_bytes(pl) + arena_round((size_t)pl->shape.n * sizeof(int64_t)) +
               16 * GL_ARENA_ALIGN;
    if (ops->memory_bytes) b += ops->memory_bytes(src);
    else if (pl->cache.on) b += cache_bytes(pl->shape.n, &pl->xfull, &pl->tfull);
    return b;
}

// A reader's scratch: full samples, ping-pong buffers, its run, and what its cursor keeps to read
// runs and cache blocks (as stored before converting: at most 4 bytes an input item, 8 a label).
static size_t worker_bytes(const load_plan *pl) {
    int64_t x = shape_size(&pl->xfull), t = shape_size(&pl->tfull);
    int64_t most = pl->run_max > pl->fill_n ? pl->run_max : pl->fill_n;
    size_t run = pl->run_max > 1 ? (size_t)(pl->run_max * (x + t)) * 4 : 0;
    size_t cursor = most > 1 ? (size_t)(most * (4 * x + 8 * t)) : 0;
    return (size_t)(3 * x + 3 * t) * sizeof(float) + (size_t)(x > t ? x : t) * sizeof(float) + run + cursor;
}

size_t loader_plan_bytes(const recipe_t *r, const loader_params *p) {
    const gl_source_ops *ops = source_ops(r->data.source);
    void *src;
    FILE *devnull = fopen("/dev/null", "w");
    int rc = ops->open(&src, r, p->split, devnull ? devnull : stderr);
    if (devnull) fclose(devnull);
    if (rc) return 0;
    gl_dataset d;
    gl_shape xf, tf;
    int64_t crop;
    ops->describe(src, &d, &xf, &tf, &crop);
    load_plan pl;
    make_plan(r, p, ops, &d, &xf, &tf, crop, &pl);
    const int64_t workers = pl.threads > 0 ? pl.threads : inline_workers();
    size_t bytes = arena_bytes(ops, src, &pl) + (size_t)workers * worker_bytes(&pl) +
                   (pl.threads > 0 ? 0 : 2 * (size_t)pl.cap * sizeof(int64_t));  // fill_inline's runs
    ops->free(src);
    return bytes;
}

// ---- staging ---------------------------------------------------------------------------------

static int copy_file(const char *from, const char *to, FILE *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    int in = open(from, O_RDONLY), out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = in < 0 || out < 0 ? -1 : 0;
    enum { BUF = 1 << 20 };
    char *buf = gl_xmalloc(BUF);
    while (!rc) {
        ssize_t n = read(in, buf, BUF);
        if (n == 0) break;
        if (n < 0 || write(out, buf, (size_t)n) != n) rc = -1;
    }
    free(buf);
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0) rc = -1;
    if (!rc && rename(tmp, to) != 0) rc = -1;
    if (rc) {
        fprintf(err, "galley: error: staging %s to %s failed: %s\n", from, to, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

// Copies the files holding the samples this rank reads in the run's epochs to the stage dir.
static int stage_files(gl_loader *L, const recipe_t *r, const loader_params *p, FILE *err) {
    int nf = L->ops->files(L->src);
    unsigned char *need = gl_xcalloc((size_t)nf, 1);
    int64_t n = L->shape.n, epochs = L->train ? (p->epochs > 0 ? p->epochs : r->train.epochs) : 1;
    for (int64_t e = 1; e <= epochs; e++) {
        if (L->train) loader_epoch_order(L->perm, n, L->seed, e);
        else
            for (int64_t i = 0; i < n; i++) L->perm[i] = i;
        for (int64_t b = 0; b < L->bpe; b++) {
            int64_t start = b * L->batch, len = n - start < L->batch ? n - start : L->batch, lo, cnt, local;
            loader_shard(len, L->rank, L->world, &lo, &cnt);
            for (int64_t j = 0; j < cnt; j++) need[L->ops->file_of(L->src, L->perm[start + lo + j], &local)] = 1;
        }
    }
    L->perm_epoch = -1;
    size_t dl = strlen(r->data.loader.stage) + 64;
    L->stage_dir = gl_xmalloc(dl);
    snprintf(L->stage_dir, dl, "%s/galley-%ld-rank%d-%s", r->data.loader.stage, (long)getpid(), L->rank,
             L->split == SPLIT_TRAIN ? "train" : "val");
    int rc = 0;
    if (mkdir(L->stage_dir, 0755) != 0) {
        fprintf(err, "galley: error: data.loader.stage: cannot create %s: %s\n", L->stage_dir, strerror(errno));
        rc = -1;
    }
    L->staged = gl_xcalloc((size_t)nf, sizeof(char *));
    for (int i = 0; i < nf && !rc; i++) {
        if (!need[i]) continue;
        const char *path = L->ops->file(L->src, i), *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t len = strlen(L->stage_dir) + strlen(base) + 32;
        char *to = gl_xmalloc(len);
        snprintf(to, len, "%s/%06d-%s", L->stage_dir, i, base);
        L->staged[L->nstaged++] = to;
        rc = copy_file(path, to, err);
        if (!rc) L->ops->set_path(L->src, i, to);
    }
    free(need);
    return rc;
}

static void unstage(gl_loader *L) {
    for (int i = 0; i < L->nstaged; i++) {
        unlink(L->staged[i]);
        free(L->staged[i]);
    }
    free(L->staged);
    if (L->stage_dir) rmdir(L->stage_dir);
    free(L->stage_dir);
}

// ---- one sample ------------------------------------------------------------------------------

// out = the crop [off, off + c) of in along each of nd spatial axes of extents full; ch channels.
static void crop_copy(int nd, int64_t ch, const int64_t *full, const int64_t *off, int64_t c, const void *in,
                      void *out) {
    int64_t e[3] = {1, 1, 1}, o[3] = {0, 0, 0}, ce[3] = {1, 1, 1};
    for (int k = 0; k < nd; k++) e[k] = full[k], o[k] = off[k], ce[k] = c;
    const char *src = in;
    char *dst = out;
    for (int64_t q = 0; q < ch; q++)
        for (int64_t a = 0; a < ce[0]; a++)
            for (int64_t b = 0; b < ce[1]; b++) {
                const char *row = src + 4 * (((q * e[0] + a + o[0]) * e[1] + b + o[1]) * e[2] + o[2]);
                memcpy(dst, row, (size_t)(4 * ce[2]));
                dst += 4 * ce[2];
            }
}

// Fills the cache block holding sample i, if no reader has claimed it yet: each run of its
// entries nobody holds is read in one call. A sample that fails is left empty: the per-sample read
// that needs it says what is wrong (file, dataset, sample), when and as without blocks.
static void cache_fill_block(gl_loader *L, worker *w, int64_t i, char *msg, size_t len) {
    unsigned char zero = 0;
    int64_t lo = i / L->fill_n * L->fill_n, hi = lo + L->fill_n < L->shape.n ? lo + L->fill_n : L->shape.n;
    if (!atomic_compare_exchange_strong(&L->fill_state[i / L->fill_n], &zero, 1)) return;
    int mask = L->shape.target != TARGET_VALUES;
    for (int64_t q = lo; q < hi;) {
        int64_t a = q;  // claim the entries from q on that no reader holds
        while (q < hi && atomic_compare_exchange_strong(&L->cache_state[q], &zero, 1)) q++;
        zero = 0;
        if (a == q) {  // held by another reader, or ready
            q++;
            continue;
        }
        while (a < q) {
            int64_t k = L->ops->read_run(L->src, w->cur, a, q - a, L->cache_x + a * L->xfull_n,
                                         mask ? L->cache_l + a * L->tfull_n : NULL,
                                         mask ? NULL : L->cache_v + a * L->tfull_n, msg, len);
            for (int64_t e = a; e < a + k; e++) atomic_store(&L->cache_state[e], 2);
            if (a + k < q) atomic_store(&L->cache_state[a + k], 0);  // failed: left to its own read
            a += k + 1;
        }
    }
}

// Sample i as read or cached (or straight into the batch at pos, when nothing follows the read):
// *x its inputs, *t its labels or values, *cropped whether the read already took plan's crop.
static int sample_fetch(gl_loader *L, worker *w, slot *s, int64_t pos, int64_t i, const augment_plan *plan,
                        const float **xo, const void **to, int *croppedo, char *msg, size_t len) {
    int mask = L->shape.target != TARGET_VALUES;
    *croppedo = 0;
    if (L->ops->sample) {
        L->ops->sample(L->src, i, xo, to);
        return 0;
    }
    if (L->fill_state && atomic_load(&L->cache_state[i]) != 2) cache_fill_block(L, w, i, msg, len);
    unsigned char zero = 0;
    if (L->cache_state && atomic_load(&L->cache_state[i]) != 2 &&
        atomic_compare_exchange_strong(&L->cache_state[i], &zero, 1)) {
        int rc = L->ops->read(L->src, w->cur, i, NULL, L->cache_x + i * L->xfull_n,
                              mask ? L->cache_l + i * L->tfull_n : NULL, mask ? NULL : L->cache_v + i * L->tfull_n, msg,
                              len);
        atomic_store(&L->cache_state[i], rc ? 0 : 2);
        if (rc) return -1;
    }
    if (L->cache_state && atomic_load(&L->cache_state[i]) == 2) {
        *xo = L->cache_x + i * L->xfull_n;
        *to = mask ? (const void *)(L->cache_l + i * L->tfull_n) : (const void *)(L->cache_v + i * L->tfull_n);
        return 0;
    }
    if (i >= w->run_lo && i < w->run_lo + w->run_ok) {  // read with its run
        *xo = w->rx + (i - w->run_lo) * L->xfull_n;
        *to = w->rt + (i - w->run_lo) * L->tfull_n;
        return 0;
    }
    // no cache, or another reader is filling this entry: read it here, straight into the batch
    // when nothing follows the read (no rotation or shift): one copy less per sample
    int crop = L->aug.crop > 0;
    float *bx = crop ? w->ax : w->fx, *bt = crop ? w->at : w->ft;
    if (augment_is_identity(&plan->axes) && !plan->shift[0] && !plan->shift[1] && !plan->shift[2]) {
        bx = s->x + pos * L->shape.size;
        bt = mask ? (float *)(void *)(s->labels + pos * L->shape.tsize) : s->values + pos * L->shape.tsize;
    }
    if (L->ops->read(L->src, w->cur, i, crop ? plan->crop : NULL, bx, mask ? (int32_t *)bt : NULL, mask ? NULL : bt, msg,
                     len))
        return -1;
    *xo = bx, *to = bt, *croppedo = crop;
    return 0;
}

static int make_sample_from(gl_loader *L, worker *w, slot *s, int64_t pos, int64_t i, char *msg, size_t len) {
    augment_plan plan;
    augment_draw(&L->aug, L->seed, s->epoch, i, L->nd, L->full, L->train, &plan);
    const float *x;
    const void *t;
    int cropped, mask = L->shape.target != TARGET_VALUES;
    if (sample_fetch(L, w, s, pos, i, &plan, &x, &t, &cropped, msg, len)) return -1;
    int64_t ext[3] = {1, 1, 1}, c = L->shape.shape.d[0], tc = L->tspatial == 2 ? L->tfull.d[0] : 1;
    for (int k = 0; k < L->nd; k++) ext[k] = L->full[k];
    if (L->aug.crop > 0) {
        if (!cropped) {
            crop_copy(L->nd, c, L->full, plan.crop, L->aug.crop, x, w->ax);
            if (L->tspatial) crop_copy(L->nd, tc, L->full, plan.crop, L->aug.crop, t, w->at);
            x = w->ax;
            if (L->tspatial) t = w->at;
        }
        for (int k = 0; k < L->nd; k++) ext[k] = L->aug.crop;
    }
    if (!augment_is_identity(&plan.axes)) {
        float *ox = x == w->ax ? w->bx : w->ax, *ot = t == w->at ? w->bt : w->at;
        augment_axes_f32(&plan.axes, c, ext, x, ox);
        if (L->tspatial == 1) augment_axes_i32(&plan.axes, 1, ext, t, (int32_t *)ot);
        if (L->tspatial == 2) augment_axes_f32(&plan.axes, tc, ext, t, ot);
        int64_t e2[3] = {1, 1, 1};
        for (int a = 0; a < L->nd; a++) e2[a] = ext[plan.axes.perm[a]];
        memcpy(ext, e2, sizeof ext);
        x = ox;
        if (L->tspatial) t = ot;
    }
    if (plan.shift[0] || plan.shift[1] || plan.shift[2]) {
        float *ox = x == w->ax ? w->bx : w->ax, *ot = t == w->at ? w->bt : w->at;
        augment_shift_f32(L->nd, c, ext, plan.shift, x, ox);
        if (L->tspatial == 1) augment_shift_i32(L->nd, 1, ext, plan.shift, t, (int32_t *)ot);
        if (L->tspatial == 2) augment_shift_f32(L->nd, tc, ext, plan.shift, t, ot);
        x = ox;
        if (L->tspatial) t = ot;
    }
    float *out = s->x + pos * L->shape.size;
    void *tout = mask ? (void *)(s->labels + pos * L->shape.tsize) : (void *)(s->values + pos * L->shape.tsize);
    if (x != out) memcpy(out, x, (size_t)L->shape.size * sizeof(float));
    if (t != tout) memcpy(tout, t, (size_t)L->shape.tsize * 4);
    if (L->noise > 0 && L->train) augment_noise(&plan, L->noise, out, L->shape.size);
    return 0;
}

// Sample pos of slot s. With data.nonfinite: skip, an input holding NaN/Inf is replaced by the
// next valid sample of the same local batch (cyclically, in the batch's order), so the content
// still depends only on (seed, epoch, sample) and the local batch keeps its size.
static int make_sample(gl_loader *L, worker *w, slot *s, int64_t pos, int *skipped, char *msg, size_t len) {
    *skipped = 0;
    if (L->serve_only) {  // the loader's own overhead: a copy from memory, nothing read or computed
        s->samples[pos] = s->order[pos];
        memcpy(s->x + pos * L->shape.size, w->fx, (size_t)L->shape.size * sizeof(float));
        void *t = s->labels ? (void *)(s->labels + pos * L->shape.tsize) : (void *)(s->values + pos * L->shape.tsize);
        memcpy(t, w->at, (size_t)L->shape.tsize * 4);
        return 0;
    }
    for (int64_t t = 0; t < s->n; t++) {
        int64_t i = s->order[(pos + t) % s->n];
        int rc = make_sample_from(L, w, s, pos, i, msg, len);
        if (rc == 0) {
            s->samples[pos] = i;
            *skipped = t > 0;
            return 0;
        }
        if (!L->skip_nonfinite || !w->cur || !L->ops->nonfinite(w->cur)) return -1;
        if (t == 0) {
            pthread_mutex_lock(&L->mu);
            if (pos < s->skip_pos) s->skip_pos = pos, snprintf(s->skip_msg, sizeof s->skip_msg, "%s", msg);
            pthread_mutex_unlock(&L->mu);
        }
    }
    char last[720];
    snprintf(last, sizeof last, "%.700s", msg);
    snprintf(msg, len, "data.nonfinite is skip, but every sample of a local batch holds NaN or Inf (epoch %lld, batch "
             "%lld; the last: %s)", (long long)s->epoch, (long long)s->index, last);
    return -1;
}

// Positions work[c .. c + m) of slot s; with m > 1, their samples (consecutive) read first in one
// call into the reader's run, where make_sample finds them. 0, or -1 with the first error in msg.
static int make_run(gl_loader *L, worker *w, slot *s, int64_t c, int64_t m, int64_t *skipped, char *msg, size_t len) {
    if (m > 1) {
        int mask = L->shape.target != TARGET_VALUES;
        w->run_lo = s->order[s->work[c]];
        w->run_ok = L->ops->read_run(L->src, w->cur, w->run_lo, m, w->rx, mask ? (int32_t *)(void *)w->rt : NULL,
                                     mask ? NULL : w->rt, msg, len);  // a failed sample is read again alone
    }
    int rc = 0;
    char more[1024];
    *skipped = 0;
    for (int64_t q = 0; q < m; q++) {
        int sk;
        if (make_sample(L, w, s, s->work[c + q], &sk, rc ? more : msg, rc ? sizeof more : len)) rc = -1;
        *skipped += sk;
    }
    w->run_ok = 0;
    return rc;
}

// ---- the ring --------------------------------------------------------------------------------

static int key_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// The positions of slot s in the order readers take them (under the lock): in sample order when
// reading runs, so that consecutive samples meet.
static void work_order(const gl_loader *L, slot *s) {
    int64_t cap = L->cap;
    for (int64_t j = 0; j < s->n; j++) s->work[j] = L->run_max > 1 ? s->order[j] * cap + j : j;
    if (L->run_max <= 1 || s->n < 2) return;
    qsort(s->work, (size_t)s->n, sizeof(int64_t), key_cmp);
    for (int64_t j = 0; j < s->n; j++) s->work[j] %= cap;
}

// The positions a reader takes next from slot s (under the lock): work[*c .. *c + m), one, or with
// runs the longest stretch of consecutive samples up to run_max.
static int64_t claim(const gl_loader *L, slot *s, int64_t *c) {
    int64_t m = 1;
    *c = s->claimed;
    while (*c + m < s->n && m < L->run_max && s->order[s->work[*c + m]] == s->order[s->work[*c + m - 1]] + 1) m++;
    s->claimed += m;
    return m;
}

// Sets up slot f for stream batch k (under the lock).
static void start_batch(gl_loader *L, slot *f, int64_t k) {
    int64_t epoch = k / L->bpe + 1, index = k % L->bpe, n = L->shape.n;
    if (L->train && L->perm_epoch != epoch) {
        loader_epoch_order(L->perm, n, L->seed, epoch);
        L->perm_epoch = epoch;
    }
    int64_t start = index * L->batch, len = n - start < L->batch ? n - start : L->batch, lo, cnt;
    loader_shard(len, L->rank, L->world, &lo, &cnt);
    for (int64_t j = 0; j < cnt; j++) f->order[j] = f->samples[j] = L->train ? L->perm[start + lo + j] : start + lo + j;
    f->k = k, f->n = cnt, f->global_n = len, f->epoch = epoch, f->index = index;
    f->last = index == L->bpe - 1;
    f->claimed = f->done = f->skipped = 0;
    f->skip_pos = INT64_MAX, f->skip_msg[0] = '\0';
    f->failed = 0;
    f->state = cnt > 0 ? SLOT_FILLING : SLOT_READY;
    work_order(L, f);
}

static void *reader_main(void *arg) {
    gl_loader *L = ((void **)arg)[0];
    worker *w = ((void **)arg)[1];
    free(arg);
    char msg[1024];
    pthread_mutex_lock(&L->mu);
    while (!L->stop) {
        slot *s = L->current;
        if (s && s->state == SLOT_FILLING && s->claimed < s->n) {
            int64_t c, m = claim(L, s, &c), skipped;
            pthread_mutex_unlock(&L->mu);
            int rc = make_run(L, w, s, c, m, &skipped, msg, sizeof msg);
            pthread_mutex_lock(&L->mu);
            s->skipped += skipped;
            if (rc) {
                if (!s->failed) snprintf(s->err, sizeof s->err, "%s", msg);
                s->failed = 1;
            }
            s->done += m;
            if (s->done == s->n) {
                s->state = SLOT_READY;
                pthread_cond_broadcast(&L->cv);
            }
            continue;
        }
        slot *f = &L->slots[L->next_start % L->nslots];
        if (f->state == SLOT_FREE) {
            start_batch(L, f, L->next_start++);
            L->current = f;
            if (f->state == SLOT_READY) pthread_cond_broadcast(&L->cv);
            continue;
        }
        pthread_cond_wait(&L->cv, &L->mu);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

// ---- without readers (threads 0) -------------------------------------------------------------

// Makes stream batch next_start in the free slot s, now, on the caller's OpenMP team (at most nw
// threads, worker t for thread t), its inputs into dst (NULL: the slot's own array). The runs are
// claimed first, in the order readers would take them; a failed batch keeps the message of its
// earliest failing run, whichever thread read it.
static void fill_inline(gl_loader *L, slot *s, float *dst) {
    s->x = dst ? dst : s->x_own;
    start_batch(L, s, L->next_start++);
    int64_t nruns = 0, c;
    while (s->claimed < s->n) {
        int64_t m = claim(L, s, &c);
        L->runs[2 * nruns] = c, L->runs[2 * nruns + 1] = m, nruns++;
    }
    int64_t skipped = 0, first = INT64_MAX;
#pragma omp parallel num_threads(L->nw) reduction(+ : skipped)
    {
        char msg[1024];
        int64_t mine = INT64_MAX;
        worker *w = &L->w[omp_get_thread_num()];
#pragma omp for schedule(static)
        for (int64_t q = 0; q < nruns; q++) {  // each thread's runs in increasing q
            int64_t sk;
            char spare[1024];
            int rc = make_run(L, w, s, L->runs[2 * q], L->runs[2 * q + 1], &sk, mine == INT64_MAX ? msg : spare,
                              sizeof msg);
            skipped += sk;
            if (rc && mine == INT64_MAX) mine = q;
        }
#pragma omp critical(loader_inline_error)
        if (mine < first) first = mine, snprintf(s->err, sizeof s->err, "%s", msg);
    }
    s->skipped = skipped;
    s->failed = first != INT64_MAX;
    s->done = s->n;
    s->state = SLOT_READY;
}

// ---- open / next / free ----------------------------------------------------------------------

// The opened split's shapes, and what happens to its samples (augmentation, NaN/Inf).
static void describe_split(gl_loader *L, const recipe_t *r, const loader_params *p) {
    gl_dataset d;
    L->ops->describe(L->src, &d, &L->xfull, &L->tfull, &L->aug.crop);
    L->shape = d;
    L->nd = L->xfull.ndim - 1;
    for (int k = 0; k < L->nd; k++) L->full[k] = L->xfull.d[1 + k];
    L->xfull_n = shape_size(&L->xfull);
    L->tfull_n = shape_size(&L->tfull);
    if (d.target == TARGET_MASK) L->tspatial = 1;
    else if (d.target == TARGET_VALUES && L->nd > 0 && L->tfull.ndim == L->xfull.ndim) {
        L->tspatial = 2;
        for (int k = 0; k < L->nd; k++)
            if (L->tfull.d[1 + k] != L->xfull.d[1 + k]) L->tspatial = 0;
    }
    L->aug.flip = r->data.augment.flip;
    L->aug.rotate = r->data.augment.rotate;
    L->aug.pad = r->data.augment.pad_crop;
    L->noise = (float)r->data.augment.noise;
    L->skip_nonfinite = L->ops->nonfinite && r->data.nonfinite == DATA_NONFINITE_SKIP;
    L->serve_only = p->serve_only;
    atomic_init(&L->skipped, 0);
}

// The arena as plan pl counts it: the order, the in-memory data or the cache, the batch slots.
static void carve_memory(gl_loader *L, const recipe_t *r, const load_plan *pl) {
    const gl_dataset *d = &L->shape;
    arena_init(&L->arena, arena_bytes(L->ops, L->src, pl));
    L->perm = arena_alloc(&L->arena, (size_t)d->n * sizeof(int64_t));
    if (L->ops->load) {
        L->ops->load(L->src, r, &L->arena);
    } else if (pl->cache.on) {
        L->cache_x = arena_floats(&L->arena, d->n * L->xfull_n);
        if (d->target == TARGET_VALUES) L->cache_v = arena_floats(&L->arena, d->n * L->tfull_n);
        else L->cache_l = arena_alloc(&L->arena, (size_t)(d->n * L->tfull_n) * 4);
        L->cache_state = arena_alloc(&L->arena, (size_t)d->n);  // zeroed: empty
        if (L->fill_n > 1) L->fill_state = arena_alloc(&L->arena, (size_t)((d->n + L->fill_n - 1) / L->fill_n));
    }
    L->slots = gl_xcalloc((size_t)L->nslots, sizeof(slot));
    for (int i = 0; i < L->nslots; i++) {
        slot *s = &L->slots[i];
        s->x = s->x_own = arena_floats(&L->arena, L->cap * d->size);
        if (d->target == TARGET_VALUES) s->values = arena_floats(&L->arena, L->cap * d->tsize);
        else s->labels = arena_alloc(&L->arena, (size_t)(L->cap * d->tsize) * 4);
        s->samples = arena_alloc(&L->arena, (size_t)L->cap * sizeof(int64_t));
        s->order = arena_alloc(&L->arena, (size_t)L->cap * sizeof(int64_t));
        s->work = arena_alloc(&L->arena, (size_t)L->cap * sizeof(int64_t));
    }
}

// Each reader's cursor and scratch (worker_bytes), then the threads.
static void start_readers(gl_loader *L, const loader_params *p) {
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    L->nw = L->nthreads > 0 ? L->nthreads : inline_workers();
    L->th = gl_xcalloc((size_t)L->nthreads + 1, sizeof(pthread_t));
    L->w = gl_xcalloc((size_t)L->nw, sizeof(worker));
    if (!L->nthreads) L->runs = gl_xmalloc(2 * (size_t)L->cap * sizeof(int64_t));
    int64_t big = L->xfull_n > L->tfull_n ? L->xfull_n : L->tfull_n;
    for (int t = 0; t < L->nw; t++) {
        worker *w = &L->w[t];
        w->cur = L->ops->cursor_new ? L->ops->cursor_new(L->src) : NULL;
        w->fx = gl_xcalloc((size_t)L->xfull_n, sizeof(float));  // zero: what serve_only copies
        w->ft = gl_xmalloc((size_t)L->tfull_n * sizeof(float));
        w->ax = gl_xmalloc((size_t)L->xfull_n * sizeof(float));
        w->bx = gl_xmalloc((size_t)L->xfull_n * sizeof(float));
        w->at = gl_xcalloc((size_t)big, sizeof(float));
        w->bt = gl_xmalloc((size_t)big * sizeof(float));
        if (L->run_max > 1) {
            w->rx = gl_xmalloc((size_t)(L->run_max * L->xfull_n) * sizeof(float));
            w->rt = gl_xmalloc((size_t)(L->run_max * L->tfull_n) * sizeof(float));
        }
    }
    L->next_start = L->next_out = p->start > 0 ? p->start : 0;
    L->started = 1;
    for (int t = 0; t < L->nthreads; t++) {
        void **arg = gl_xmalloc(2 * sizeof(void *));
        arg[0] = L, arg[1] = &L->w[t];
        GL_CHECK(pthread_create(&L->th[t], NULL, reader_main, arg) == 0, "cannot start a reader thread");
    }
}

int loader_open(gl_loader **out, const recipe_t *r, const loader_params *p, FILE *err) {
    *out = NULL;
    gl_loader *L = gl_xcalloc(1, sizeof *L);
    L->seed = (uint64_t)r->seed;
    L->split = p->split;
    L->train = p->split == SPLIT_TRAIN;
    L->rank = p->rank;
    L->world = p->world > 0 ? p->world : 1;
    GL_CHECK(L->rank >= 0 && L->rank < L->world, "loader rank outside [0, world)");
    L->perm_epoch = -1;
    L->ops = source_ops(r->data.source);
    if (L->ops->open(&L->src, r, p->split, err)) {
        free(L);
        return GL_EXIT_USAGE;
    }
    describe_split(L, r, p);
    gl_dataset d = L->shape;
    if (L->train && L->aug.rotate && L->nd >= 2) {
        for (int k = 1; k < L->nd; k++)
            if (d.shape.d[1 + k] != d.shape.d[1]) {
                char sh[64];
                shape_format(&d.shape, sh, sizeof sh);
                fprintf(err, "galley: error: data.augment.rotate needs square or cubic samples, but they are %s; set "
                             "data.crop to a size that fits, or turn rotate off\n", sh);
                L->ops->free(L->src);
                free(L);
                return GL_EXIT_USAGE;
            }
    }

    load_plan pl;
    make_plan(r, p, L->ops, &d, &L->xfull, &L->tfull, L->aug.crop, &pl);
    L->batch = pl.batch;
    L->cap = pl.cap;
    L->nslots = (int)pl.nslots;
    L->nthreads = (int)pl.threads;
    L->drop_last = r->data.loader.drop_last && L->train;
    L->bpe = loader_batches(d.n, L->batch, L->drop_last);

    L->cache = pl.cache;
    L->fill_n = pl.fill_n;
    L->run_max = pl.run_max;
    carve_memory(L, r, &pl);
    if (L->ops->files && r->data.loader.stage && stage_files(L, r, p, err)) {
        loader_free(L);
        return GL_EXIT_USAGE;
    }
    start_readers(L, p);
    *out = L;
    return 0;
}

const gl_dataset *loader_shape(const gl_loader *L) { return &L->shape; }
int64_t loader_batches_per_epoch(const gl_loader *L) { return L->bpe; }
int64_t loader_batch_capacity(const gl_loader *L) { return L->cap; }
double loader_wait_total(const gl_loader *L) { return L->wait_total; }
int64_t loader_skipped(gl_loader *L, char *first, size_t len) {
    int64_t n = atomic_load(&L->skipped);
    if (first && len) {
        pthread_mutex_lock(&L->mu);
        snprintf(first, len, "%s", L->skip_first);
        pthread_mutex_unlock(&L->mu);
    }
    return n;
}
const char *loader_stage_dir(const gl_loader *L) { return L->stage_dir; }
const loader_cache_plan *loader_cache(const gl_loader *L) { return &L->cache; }

// The next batch: waits for it when wait is set, else returns 1 at once when it is not ready.
// Without readers it is made here (into dst when not NULL): ready either way.
static int take_next(gl_loader *L, gl_batch *b, bool wait, float *dst, FILE *err) {
    double t0 = now_s();
    slot *s = &L->slots[L->next_out % L->nslots];
    if (!L->nthreads) {
        GL_CHECK(s->state == SLOT_FREE && L->next_start == L->next_out,
                 "a batch slot still held: release batches before taking more than data.loader.prefetch");
        fill_inline(L, s, dst);
    }
    pthread_mutex_lock(&L->mu);
    while (!(s->state == SLOT_READY && s->k == L->next_out)) {
        if (!wait) {
            pthread_mutex_unlock(&L->mu);
            return 1;
        }
        pthread_cond_wait(&L->cv, &L->mu);
    }
    s->state = SLOT_IN_USE;
    L->next_out++;
    atomic_fetch_add(&L->skipped, s->skipped);  // counted when served, not when prefetched
    if (!L->skip_first[0] && s->skip_msg[0]) snprintf(L->skip_first, sizeof L->skip_first, "%s", s->skip_msg);
    int failed = s->failed;
    char msg[1024];
    if (failed) snprintf(msg, sizeof msg, "%s", s->err);
    pthread_mutex_unlock(&L->mu);
    memset(b, 0, sizeof *b);
    b->wait_s = now_s() - t0;
    L->wait_total += b->wait_s;
    b->n = s->n, b->global_n = s->global_n, b->epoch = s->epoch, b->index = s->index, b->last = s->last;
    b->x = s->x, b->labels = s->labels, b->values = s->values, b->samples = s->samples;
    b->slot = (int)(s - L->slots);
    if (failed) {
        fprintf(err, "galley: error: %s\n", msg);
        return -1;
    }
    return 0;
}

int loader_next(gl_loader *L, gl_batch *b, FILE *err) { return take_next(L, b, true, NULL, err); }

int loader_try_next(gl_loader *L, gl_batch *b, FILE *err) { return take_next(L, b, false, NULL, err); }

int loader_try_next_into(gl_loader *L, gl_batch *b, float *x, FILE *err) { return take_next(L, b, false, x, err); }

bool loader_inline(const gl_loader *L) { return !L->nthreads; }

int loader_slots(const gl_loader *L) { return L->nslots; }

float *loader_slot_x(const gl_loader *L, int i, size_t *bytes) {
    *bytes = sizeof(float) * (size_t)(L->cap * L->shape.size);
    return L->slots[i].x;
}

void *loader_slot_targets(const gl_loader *L, int i, size_t *bytes) {
    *bytes = 4 * (size_t)(L->cap * L->shape.tsize);  // int32 labels or float values
    return L->slots[i].values ? (void *)L->slots[i].values : (void *)L->slots[i].labels;
}

void loader_release(gl_loader *L, gl_batch *b) {
    pthread_mutex_lock(&L->mu);
    L->slots[b->slot].state = SLOT_FREE;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    b->x = NULL, b->labels = NULL, b->values = NULL;
}

void loader_free(gl_loader *L) {
    if (!L) return;
    if (L->started) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
        for (int t = 0; t < L->nthreads; t++) pthread_join(L->th[t], NULL);
        for (int t = 0; t < L->nw; t++) {
            worker *w = &L->w[t];
            if (w->cur) L->ops->cursor_free(w->cur);
            free(w->fx), free(w->ft), free(w->ax), free(w->bx), free(w->at), free(w->bt), free(w->rx), free(w->rt);
        }
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->cv);
    }
    free(L->th);
    free(L->w);
    free(L->runs);
    free(L->slots);
    unstage(L);
    L->ops->free(L->src);
    arena_free(&L->arena);
    free(L);
}
