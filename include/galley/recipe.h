// recipe.h: a validated recipe. Load YAML, apply key=value overrides, check every key against
// the schema (unknown, wrong type, out of range, missing), fill defaults, and report errors as
// FILE:LINE:COL with the key path. A recipe is read-only once loaded.
#ifndef GALLEY_RECIPE_H
#define GALLEY_RECIPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "galley/backend_types.h"  // PRECISION_*, LOSS_*, OPT_*
#include "galley/schema.h"
#include "galley/ytree.h"

struct layer_kind;

#define GL_MAX_LAYER_KEYS 24

// One entry of model.layers as written (with defaults filled).
enum { TENSOR_ORDER_TENSOR_FIRST = 0, TENSOR_ORDER_DATA_FIRST };

typedef struct {
    const struct layer_kind *kind;
    const char *name;   // given, or "<type><index>"
    gl_names inputs;    // given; empty means "the previous layer" (or the model input)
    gl_value v[GL_MAX_LAYER_KEYS];  // indexed like kind->keys
    yt_mark mark;       // where the layer's mapping starts
    int index;          // the item's index in model.layers as written (copies of a block share it)
} layer_cfg;

// Enum values, in the order of their choices tables in schema.c (PRECISION_*, LOSS_* and OPT_*:
// backend_types.h).
enum { DATA_SOURCE_SYNTHETIC = 0, DATA_SOURCE_HDF5 = 1, DATA_SOURCE_TIMESERIES = 2 };  // the order of src/data/source_registry.c
enum { DATA_SAMPLES_STACKED = 0, DATA_SAMPLES_PER_FILE = 1 };
enum { DATA_LAYOUT_CHANNELS_FIRST = 0, DATA_LAYOUT_CHANNELS_LAST = 1 };
enum { DATA_TARGET_CLASS = 0, DATA_TARGET_MASK = 1, DATA_TARGET_VALUES = 2 };
enum { DATA_TRANSFORM_NONE = 0, DATA_TRANSFORM_LOG1P = 1 };
enum { DATA_NORM_NONE = 0, DATA_NORM_MINMAX = 1, DATA_NORM_STANDARD = 2 };
enum { DATA_CACHE_NONE = 0, DATA_CACHE_MEMORY = 1, DATA_CACHE_AUTO = 2 };
enum { DATA_NONFINITE_ERROR = 0, DATA_NONFINITE_SKIP = 1 };
// The order of src/data/synth_registry.c (include/galley/synth.h looks kinds up by name).
enum { SYNTH_SPIRALS = 0, SYNTH_BLOBS, SYNTH_SHAPES2D, SYNTH_COSMO3D, SYNTH_CLIMATE2D, SYNTH_NBODY3D, SYNTH_WEATHER2D };
enum { DEVICE_AUTO = 0, DEVICE_CPU = 1, DEVICE_CUDA = 2 };
enum { NONFINITE_STOP = 0, NONFINITE_SKIP = 1 };
enum { SCHED_UNIT_STEPS = 0, SCHED_UNIT_EPOCHS = 1 };
enum { DECAY_CONSTANT = 0, DECAY_MULTISTEP = 1, DECAY_COSINE = 2, DECAY_POLY = 3 };
enum { SCALE_NONE = 0, SCALE_LINEAR = 1, SCALE_SQRT = 2 };
enum { METRIC_NONE = 0, METRIC_ACCURACY, METRIC_TOPK, METRIC_LOSS, METRIC_MAE, METRIC_MEAN_IOU, METRIC_L2_RELATIVE };
enum { L2REL_PER_SAMPLE = 0, L2REL_PER_CHANNEL = 1 };

typedef struct {
    const char *name;
    int64_t seed;
    struct {
        int source;
        struct {
            int kind;
            int64_t classes, features, size, channels, train_size, val_size;
            int64_t steps, lead;  // weather2d: time steps per series, pairs (t, t + lead)
            double noise;
        } synthetic;
        // source: hdf5 (see src/data/h5_reader.c)
        struct {
            const char *files, *x, *y;  // files: path, glob or comma-separated list; @FILE lists paths
        } train, val;
        // source: timeseries (see src/data/ts_reader.c)
        struct {
            const char *train, *val;   // a directory (its *.h5 by name), a glob, or a comma list
            const char *dataset;       // [T, C, H, W] in each file
            int64_t lead;              // steps between input and target
            gl_floats channels, size;  // channel indices ([]: all); [H, W] from the top-left ([]: whole)
            const char *mean, *std;    // FILE.npy or FILE.h5:DATASET; NULL: not normalised
        } timeseries;
        int samples, layout, target, transform, normalize;  // DATA_SAMPLES_*, _LAYOUT_*, _TARGET_*, ...
        int64_t classes, crop;                              // crop: 0 = whole samples
        gl_floats mean, std, min, max;                      // per channel, or one for all
        const char *stats;                                  // NULL: none
        bool file_locking;
        int nonfinite;      // DATA_NONFINITE_*: NaN/Inf in an input sample
        struct {
            int64_t threads, prefetch;
            bool drop_last;
            int cache;          // DATA_CACHE_*
            double cache_share; // auto: a split is cached when it fits in this share of host memory
            const char *stage;  // NULL: read in place
        } loader;
        struct {
            bool flip, rotate;
            int64_t pad_crop;
            double noise;
        } augment;
    } data;
    struct {
        layer_cfg *layers;
        int nlayers;
        bool fuse;  // model.fuse: activations share their producer's buffer (graph_build)
    } model;
    struct {
        int64_t steps, epochs, batch_size, threads, eval_every, top_k;
        int loss, nonfinite;
        int l2_relative_per;  // L2REL_PER_*: what one ratio of the l2_relative loss covers
        int device;         // DEVICE_*
        int precision;      // PRECISION_*: as written (auto is resolved when the device is bound)
        bool cuda_graphs;   // record and replay each forward and backward pass on a GPU
        double time_limit;  // seconds of wall time the run may take (0: no limit)
        struct {
            int64_t start_step, stop_step;  // cudaProfilerStart/Stop window (stop 0: none)
        } profile;
        gl_floats class_weights;
        struct {
            int metric;
            double above, below;  // exactly one is set (the other NAN) when metric != none
        } target;
    } train;
    struct {
        int type;
        double lr, momentum, weight_decay;
        bool nesterov;
        double beta1, beta2, eps;
        double clip_norm;  // NAN: no clipping
        bool exclude_1d;   // 1-D tensors: no weight decay, LAMB trust ratio 1
        bool fuse;         // the update in backward where it gives the same bits (optim_fuse.c)
        struct {
            int unit;                  // SCHED_UNIT_*
            double warmup;             // in unit
            int decay;                 // DECAY_*
            gl_floats milestones;      // multistep: in unit, increasing
            gl_floats factors;         // multistep: lr multiplier from each milestone on
            double end_lr;             // cosine/poly: final learning rate
            double power;              // poly
            int scaling;               // SCALE_*
            int64_t base_batch;        // batch size lr was tuned for
        } schedule;
    } optimizer;
    struct {
        double bucket_mb;      // gradient allreduce bucket size
        bool overlap;          // start each bucket during backward (false: all after backward)
        bool sync_batchnorm;   // batch-norm statistics over the global batch
        bool deterministic;    // fixed reduction order: bitwise the same for any rank count dividing parts
        int64_t parts;         // deterministic: the global batch is computed as this many parts (0: ranks)
        double timeout;        // seconds a collective may make no progress before the job is ended
        int64_t tensor_parallel;  // ranks per tensor group (grid.h; 1: data parallelism only)
        int64_t tensor_parts;     // deterministic: canonical parts of the split products (0: tensor_parallel)
        int tensor_order;         // TENSOR_ORDER_*: which groups take consecutive ranks
    } distributed;
    struct {
        const char *dir;       // checkpoint files: dir/<name>-step<N>.h5
        int64_t every_steps;   // 0: not by steps
        double every_minutes;  // 0: not by time
        int64_t keep;          // newest files kept
        bool at_end;           // one at the end of the run
    } checkpoint;
    struct {
        int64_t every;     // progress line and metrics record every this many steps (0: at evaluations)
        bool files;        // write a run directory
        const char *dir;   // where run directories go: dir/<name>/<timestamp>/
        const char *mlperf;  // MLPerf HPC log: a file, "true" (RUN_DIR/mlperf.log), "false" (or NULL): none
    } log;

    // Provenance, not schema keys.
    const char *file;
    yt_doc *doc;      // keeps the strings above alive
    yt_doc **odocs;   // parsed override values, alive as long as the recipe
    int nodocs;
} recipe_t;

// The top-level schema (NULL-terminated) and the enum choices it uses.
extern const key_spec recipe_schema[];

// Loads FILE with overrides ("a.b.c=value"). Returns 0, or prints every error to err_out
// (FILE:LINE:COL: error: PATH: message) and returns -1. The caller exits GL_EXIT_USAGE.
int recipe_load(recipe_t *r, const char *file, int noverrides, char *const *overrides, FILE *err_out);
void recipe_free(recipe_t *r);

// Writes the resolved recipe as YAML, every default filled in; loading it gives the same recipe.
void recipe_emit(const recipe_t *r, FILE *out);
// Writes the Markdown recipe reference (the README's section between the reference markers).
void recipe_emit_reference(FILE *out);

// Where a key was written (for errors found after loading); the recipe's start if it was not.
yt_mark recipe_mark(const recipe_t *r, const char *dotted);
// "FILE:LINE:COL: error: KEY" at that mark: the start of an error about a key's value.
void recipe_where(const recipe_t *r, const char *dotted, char *buf, size_t len);

// A 64-bit FNV-1a hash of the emitted recipe, to name and compare runs.
uint64_t recipe_hash(const recipe_t *r);

#endif
