// loader.h: the data pipeline. A loader serves one split of a recipe's data set (synthetic, in
// memory, or HDF5 files) as a stream of batches, prepared ahead by reader threads.
//
// Order. Epoch e (from 1) visits the training samples in the permutation epoch_order(seed, e)
// (Fisher-Yates keyed by (seed, RNG_SHUFFLE, e), the order train.c has always used); global
// batch b is positions [b B, b B + B) of it. The validation split is visited in file order.
// Sharding. Rank r of w takes positions [floor(L r / w), floor(L (r + 1) / w)) of each global
// batch of length L, so the union over ranks is the global batch, in order, for any w: results
// do not depend on how many ranks ran them. Local batches differ by at most one sample.
// Last batch. data.loader.drop_last drops an epoch's partial last batch (training only);
// otherwise it is kept, smaller. Validation always covers every sample once.
// Content. A sample's bytes depend only on (seed, epoch, sample): reading, transform, crop and
// augmentation happen on reader threads, and any number of them gives the same batches.
// Cache. data.loader.cache: memory keeps each decoded sample (before crop and augmentation) the
// first time a reader needs it, so later epochs read no files; auto (the default) does so for a
// split whose cache fits in data.loader.cache_share of the machine's memory (divided among the
// processes on it; each split judged on its own), none never. A cache is filled in blocks of
// consecutive samples, one read each (the first sample a reader needs claims its block).
// Runs. Without a cache (and without data.crop) a reader takes the consecutive samples of a batch
// (in sample order) together and reads them in one call, so validation batches and large training
// batches read few, long runs. Neither changes a byte of what is served.
// Non-finite inputs. data.nonfinite: error fails loader_next naming file, dataset and sample;
// skip serves the next valid sample of the same local batch (cyclically) in the bad one's place
// (b.samples says which), so batch sizes and the order stay as above; loader_skipped counts them.
//
// Use:
//   loader_params p; loader_default_params(&p);  p.split = SPLIT_TRAIN; p.rank = .., p.world = ..
//   size_t bytes = loader_plan_bytes(r, &p);          // count it in the run's memory plan
//   gl_loader *L; if (loader_open(&L, r, &p, stderr)) return GL_EXIT_USAGE;   // bad data: exit 2
//   gl_batch b;
//   while (training) {
//       if (loader_next(L, &b, stderr)) return GL_EXIT_RUNTIME;   // a read failed mid-run
//       ... use b.x [b.n, size], b.labels or b.values [b.n, tsize] ...
//       loader_release(L, &b);
//   }
//   loader_free(L);
#ifndef GALLEY_LOADER_H
#define GALLEY_LOADER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/data.h"
#include "galley/recipe.h"

// ---- order and sharding (pure functions) ------------------------------------------------------

// perm[0..n) = the global order of epoch (from 1).
void loader_epoch_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch);
// Global batches per epoch for n samples.
int64_t loader_batches(int64_t n, int64_t batch, bool drop_last);
// Rank's part of a global batch of len samples: positions [*lo, *lo + *count) within it.
void loader_shard(int64_t len, int rank, int world, int64_t *lo, int64_t *count);

// ---- the loader -------------------------------------------------------------------------------

typedef struct {
    int split;          // SPLIT_TRAIN (shuffled, augmented) or SPLIT_VAL (in order, plain)
    int rank, world;    // this process among world (1 rank: 0, 1)
    int64_t batch;      // global batch; 0: train.batch_size (capped to the split's samples)
    int threads;        // reader threads; 0: data.loader.threads
    int prefetch;       // batch slots; 0: data.loader.prefetch
    int64_t epochs;     // epochs the run will take (staging copies what they read); 0: train.epochs
    bool serve_only;    // benchmarks: batches of zeros copied from memory, nothing read (the loader's overhead)
    int64_t start;      // the first batch served: stream batch k (epoch k / B + 1, index k % B); resume
    int node_ranks;     // processes on this machine, each with its own cache (data.loader.cache: auto); 0: 1
} loader_params;

void loader_default_params(loader_params *p);

typedef struct {
    int64_t n;          // samples in this rank's part of the batch (may be 0 with many ranks)
    int64_t global_n;   // samples in the global batch
    int64_t epoch;      // from 1 (validation: passes from 1)
    int64_t index;      // batch index within the epoch
    bool last;          // the epoch's last batch
    float *x;           // [n, size]
    int32_t *labels;    // CLASS, MASK: [n, tsize]; else NULL
    float *values;      // VALUES: [n, tsize]; else NULL
    const int64_t *samples;  // [n] the split's sample indices
    double wait_s;      // time loader_next waited for this batch
    int slot;
} gl_batch;

typedef struct gl_loader gl_loader;

// Bytes the loader allocates (batch slots, cache, in-memory data set, reader scratch), so a run
// can refuse plans that do not fit before starting. Opens no file for synthetic data; for HDF5
// it reads the files' metadata (0 if that fails: loader_open then reports why).
size_t loader_plan_bytes(const recipe_t *r, const loader_params *p);
// Checks and opens the split (HDF5: files, datasets, shapes, dtypes, statistics), stages files,
// allocates everything and starts the reader threads. Returns 0, or GL_EXIT_USAGE with the
// reason printed to err.
int loader_open(gl_loader **L, const recipe_t *r, const loader_params *p, FILE *err);
// Per-sample shapes as batches hold them (n: the split's samples).
const gl_dataset *loader_shape(const gl_loader *L);
int64_t loader_batches_per_epoch(const gl_loader *L);
int64_t loader_batch_capacity(const gl_loader *L);  // the largest local batch
// Waits for the next batch. 0, or -1 after printing the reader's error (file, dataset, sample).
int loader_next(gl_loader *L, gl_batch *b, FILE *err);
// As loader_next without waiting: 1 (nothing taken, b untouched) when the next batch is not
// ready yet. A trainer that holds the current batch may take the next one early this way (the
// GPU copies it while the current one computes): the slots allow two held at once (prefetch >= 2).
int loader_try_next(gl_loader *L, gl_batch *b, FILE *err);
// As loader_try_next; a loader without readers (data.loader.threads 0, loader_inline) makes the
// batch now with its inputs in x ([batch capacity, size] floats, host memory the batch's user
// owns: b->x == x), so a CPU run gathers straight into its model input. With readers x is unused.
int loader_try_next_into(gl_loader *L, gl_batch *b, float *x, FILE *err);
// Whether L has no reader threads: the caller's threads make each batch when it is asked for.
bool loader_inline(const gl_loader *L);
// The batch slots' input arrays, slot i of loader_slots: where every b.x points into (a GPU
// backend pins them, so copies from them run asynchronously). *bytes: one slot's array.
int loader_slots(const gl_loader *L);
float *loader_slot_x(const gl_loader *L, int i, size_t *bytes);
// Slot i's targets, where every b.labels or b.values points into (*bytes: the whole array).
void *loader_slot_targets(const gl_loader *L, int i, size_t *bytes);
// Gives the batch's slot back to the readers; b's pointers are invalid afterwards.
void loader_release(gl_loader *L, gl_batch *b);
// Total seconds loader_next has waited, and batches served.
double loader_wait_total(const gl_loader *L);
// Input samples replaced because they held NaN/Inf (data.nonfinite: skip) in the batches
// loader_next has served (once per epoch for a bad sample), and the first one met (file,
// dataset, sample) into first[len] when first is not NULL.
int64_t loader_skipped(gl_loader *L, char *first, size_t len);
// Where staged files went (NULL: not staged).
const char *loader_stage_dir(const gl_loader *L);
void loader_free(gl_loader *L);

// ---- the memory cache (data.loader.cache) -----------------------------------------------------

// Whether a split is cached, and why (see "Cache" above).
typedef struct {
    int mode;           // DATA_CACHE_* asked for
    bool on;            // the split is cached
    double bytes;       // what its cache takes, whether on or not; 0: a source held in memory (none)
    double share;       // data.loader.cache_share
    double host;        // the machine's memory (0: unknown, then auto does not cache)
    int node_ranks;     // processes on the machine sharing it
    double budget;      // auto: share x host / node_ranks, the most the cache may take
} loader_cache_plan;

// The plan for a split whose cache takes bytes (a pure function: the tests' door).
void loader_cache_decide(int mode, double share, double bytes, uint64_t host, int node_ranks, loader_cache_plan *c);
// The plan loader_open followed for L's split.
const loader_cache_plan *loader_cache(const gl_loader *L);
// One line for the start banner saying, for both splits, whether they are cached, their size and
// why ("data cache (data.loader.cache: auto, ...): training split cached in memory (3.2 MiB); ...").
// 0 with buf empty for a source held in memory (synthetic data: there is nothing to cache).
int loader_cache_note(const gl_loader *train, const gl_loader *val, char *buf, size_t len);

// ---- benchmark (`galley data bench`) ----------------------------------------------------------

// READ: files read, no transform, normalisation, augmentation or cache (synthetic data: the
// generation at open); FULL: the loader as training uses it; SERVE: loader_params.serve_only.
enum { LOADER_BENCH_READ = 0, LOADER_BENCH_FULL = 1, LOADER_BENCH_SERVE = 2 };

typedef struct {
    int64_t samples, batches, batch, skipped;
    int threads;
    double seconds, open_s;  // serving the batches; opening (synthetic READ: generating, = seconds)
    double sample_bytes;     // one sample as served: x and target as 4-byte items
} loader_bench_result;

// Serves steps training batches (0: one epoch) of r's training split in mode, one rank.
// GL_EXIT_USAGE if the split cannot be opened, GL_EXIT_RUNTIME if a read fails (printed to err).
int loader_bench(const recipe_t *r, int mode, int64_t steps, loader_bench_result *res, FILE *err);

#endif
