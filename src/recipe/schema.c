// schema.c: the recipe schema, in one place. Every key a recipe may hold is here (layer kinds
// add their own keys in src/model/layers/); nothing outside this table is accepted.
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "galley/data.h"
#include "galley/optim.h"  // optim_names, optim_rule
#include "galley/recipe.h"
#include "galley/synth.h"

#define OFF(field) offsetof(recipe_t, field)
#define R(b) ((const recipe_t *)(b))

static int kind_of(const void *b) { return R(b)->data.synthetic.kind; }
static bool has_classes(const void *b) { return synth_kind_reads(kind_of(b), SYNTH_KEY_CLASSES); }
static bool is_vector_kind(const void *b) { return synth_kind_reads(kind_of(b), SYNTH_KEY_FEATURES); }
static bool is_field_kind(const void *b) { return synth_kind_reads(kind_of(b), SYNTH_KEY_SIZE); }
static bool has_channels(const void *b) { return synth_kind_reads(kind_of(b), SYNTH_KEY_CHANNELS); }
static bool has_steps(const void *b) { return synth_kind_reads(kind_of(b), SYNTH_KEY_STEPS); }
static bool is_xent(const void *b) { return R(b)->train.loss == LOSS_SOFTMAX_XENT; }
static bool is_l2_relative(const void *b) { return R(b)->train.loss == LOSS_L2_RELATIVE; }
static bool is_sgd(const void *b) { return R(b)->optimizer.type == OPT_SGD; }
static bool is_adam_like(const void *b) { return optim_rule(R(b)->optimizer.type)->adam; }
static bool is_multistep(const void *b) { return R(b)->optimizer.schedule.decay == DECAY_MULTISTEP; }
static bool is_annealing(const void *b) {
    return R(b)->optimizer.schedule.decay == DECAY_COSINE || R(b)->optimizer.schedule.decay == DECAY_POLY;
}
static bool is_poly(const void *b) { return R(b)->optimizer.schedule.decay == DECAY_POLY; }
static bool is_scaled(const void *b) { return R(b)->optimizer.schedule.scaling != SCALE_NONE; }
static bool has_target(const void *b) { return R(b)->train.target.metric != METRIC_NONE; }
static bool is_deterministic(const void *b) { return R(b)->distributed.deterministic; }
#define NO_RANGE 0, 0

static const char *const samples_choices[] = {"stacked", "per_file", NULL};
static const char *const layout_choices[] = {"channels_first", "channels_last", NULL};
static const char *const target_kind_choices[] = {"class", "mask", "values", NULL};
static const char *const transform_choices[] = {"none", "log1p", NULL};
static const char *const normalize_choices[] = {"none", "minmax", "standard", NULL};
static const char *const cache_choices[] = {"none", "memory", "auto", NULL};
static const char *const tensor_order_choices[] = {"tensor_first", "data_first", NULL};
static const char *const data_nonfinite_choices[] = {"error", "skip", NULL};
static const char *const loss_choices[] = {"softmax_cross_entropy", "mse", "l1", "l2_relative", NULL};
static const char *const l2_relative_per_choices[] = {"sample", "channel", NULL};
static const char *const nonfinite_choices[] = {"stop", "skip", NULL};
static const char *const device_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const precision_choices[] = {"auto", "fp32", "tf32", "bf16", "fp16", NULL};
static const char *const unit_choices[] = {"steps", "epochs", NULL};
static const char *const decay_choices[] = {"constant", "multistep", "cosine", "poly", NULL};
static const char *const scaling_choices[] = {"none", "linear", "sqrt", NULL};
static const char *const metric_choices[] = {"none", "accuracy", "top_k", "loss", "mae", "mean_iou", "l2_relative",
                                             NULL};

static const key_spec synthetic_keys[] = {
    {"kind", KT_ENUM, KF_DEFAULT, "spirals", NO_RANGE, synth_kind_choices, OFF(data.synthetic.kind), NULL,
     "spirals: interleaved 2D spiral arms, one per class (extra features are noise); "
     "blobs: one Gaussian cluster per class; shapes2d: images of geometric shapes, one class per shape; "
     "cosmo3d: 3D Gaussian random fields whose power spectrum depends on 4 parameters to regress "
     "(CosmoFlow-like, log1p-scaled counts); climate2d: multi-channel 2D fields with cyclone-like vortices "
     "and river-like bands, a 3-class mask per pixel (DeepCAM-like); nbody3d: 4-channel 3D fields to map "
     "to 5 derived channels (the SC22 U-Net's Nbody to Hydro task); weather2d: multi-channel fields on a "
     "lat-lon grid (size/2 x size) advected by a latitude-dependent zonal wind, diffused and forced, as pairs "
     "(x at t, x at t + lead) (FourCastNet-like)"},
    {"classes", KT_INT, KF_DEFAULT, "3", 2, 1000, NULL, OFF(data.synthetic.classes), NULL,
     "number of classes (shapes2d: at most 6)", has_classes, "data.synthetic.kind is spirals, blobs or shapes2d"},
    {"features", KT_INT, KF_DEFAULT, "2", 2, 1e6, NULL, OFF(data.synthetic.features), NULL,
     "input features per sample", is_vector_kind, "data.synthetic.kind is spirals or blobs"},
    {"size", KT_INT, KF_DEFAULT, "32", 4, 4096, NULL, OFF(data.synthetic.size), NULL,
     "edge length of each image or volume (CosmoFlow's full size is 128)", is_field_kind,
     "data.synthetic.kind is shapes2d, cosmo3d, climate2d, nbody3d or weather2d"},
    {"channels", KT_INT, KF_DEFAULT, "0", 0, 64, NULL, OFF(data.synthetic.channels), NULL,
     "input channels; 0 means the kind's own (shapes2d 3, cosmo3d 4, climate2d 16, weather2d 20)", has_channels,
     "data.synthetic.kind is shapes2d, cosmo3d, climate2d or weather2d"},
    {"steps", KT_INT, KF_DEFAULT, "64", 2, 1e6, NULL, OFF(data.synthetic.steps), NULL,
     "time steps per series (a year file of `galley data synth weather2d`); each series gives steps - lead "
     "samples", has_steps, "data.synthetic.kind is weather2d"},
    {"lead", KT_INT, KF_DEFAULT, "1", 1, 1e6, NULL, OFF(data.synthetic.lead), NULL,
     "time steps from input to target", has_steps, "data.synthetic.kind is weather2d"},
    {"train_size", KT_INT, KF_DEFAULT, "4096", 1, 1e9, NULL, OFF(data.synthetic.train_size), NULL,
     "training samples, generated in memory from the seed"},
    {"val_size", KT_INT, KF_DEFAULT, "1024", 1, 1e9, NULL, OFF(data.synthetic.val_size), NULL,
     "held-out validation samples, drawn independently of the training ones"},
    {"noise", KT_FLOAT, KF_DEFAULT, "0.1", 0, 10, NULL, OFF(data.synthetic.noise), NULL,
     "standard deviation of the Gaussian noise added to each sample"},
    KEY_END,
};

static bool is_synthetic(const void *b) { return R(b)->data.source == DATA_SOURCE_SYNTHETIC; }
static bool is_hdf5(const void *b) { return R(b)->data.source == DATA_SOURCE_HDF5; }
static bool is_timeseries(const void *b) { return R(b)->data.source == DATA_SOURCE_TIMESERIES; }
// Sources that read HDF5 files on the loader's threads: cache, stage, locking, nonfinite apply.
static bool reads_files(const void *b) { return is_hdf5(b) || is_timeseries(b); }
static bool hdf5_labels(const void *b) { return is_hdf5(b) && R(b)->data.target != DATA_TARGET_VALUES; }
static bool hdf5_normalized(const void *b) { return is_hdf5(b) && R(b)->data.normalize != DATA_NORM_NONE; }
static bool hdf5_standard(const void *b) { return is_hdf5(b) && R(b)->data.normalize == DATA_NORM_STANDARD; }
static bool hdf5_minmax(const void *b) { return is_hdf5(b) && R(b)->data.normalize == DATA_NORM_MINMAX; }

#define SPLIT_FILE_KEYS(split, what)                                                                              \
    {"files", KT_STRING, KF_REQUIRED, NULL, NO_RANGE, NULL, OFF(data.split.files), NULL,                          \
     "HDF5 files of the " what " split: a path, a glob (data/train-*.h5), several of these separated by commas, "  \
     "or @LIST (a text file naming one path per line); relative paths are relative to the working directory"},   \
    {"x", KT_STRING, KF_DEFAULT, "x", NO_RANGE, NULL, OFF(data.split.x), NULL,                                   \
     "dataset holding the inputs, e.g. climate/data (DeepCAM)"},                                                  \
    {"y", KT_STRING, KF_DEFAULT, "y", NO_RANGE, NULL, OFF(data.split.y), NULL,                                   \
     "dataset holding the targets, e.g. climate/labels_0 (DeepCAM)"},                                             \
    KEY_END

static const key_spec train_file_keys[] = {SPLIT_FILE_KEYS(train, "training")};
static const key_spec val_file_keys[] = {SPLIT_FILE_KEYS(val, "validation")};

static const key_spec timeseries_keys[] = {
    {"train", KT_STRING, KF_REQUIRED, NULL, NO_RANGE, NULL, OFF(data.timeseries.train), NULL,
     "the training series: a directory (its *.h5 files, in name order: one file per year), a glob, or several "
     "of these separated by commas"},
    {"val", KT_STRING, KF_REQUIRED, NULL, NO_RANGE, NULL, OFF(data.timeseries.val), NULL,
     "the validation series, as train"},
    {"dataset", KT_STRING, KF_DEFAULT, "fields", NO_RANGE, NULL, OFF(data.timeseries.dataset), NULL,
     "dataset of each file holding the series [T, C, H, W] (the NERSC tutorial's and FourCastNet's fields)"},
    {"lead", KT_INT, KF_DEFAULT, "1", 1, 1e6, NULL, OFF(data.timeseries.lead), NULL,
     "time steps from input to target: a sample is (fields[t], fields[t + lead]) of one file, for every t "
     "with t + lead inside that file"},
    {"channels", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e6, NULL, OFF(data.timeseries.channels), NULL,
     "indices of the channels read, in this order, for input and target alike; []: all"},
    {"size", KT_FLOATS, KF_DEFAULT, "[]", 1, 1e6, NULL, OFF(data.timeseries.size), NULL,
     "[H, W]: read rows 0..H-1 and columns 0..W-1 of each field (the tutorial's img_size); []: the whole grid"},
    {"mean", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(data.timeseries.mean), NULL,
     "per-channel means subtracted from input and target: a .npy file (float32 or float64, any shape holding "
     "one value per channel read or per channel of the files, e.g. the tutorial's [1, C, 1, 1] "
     "global_means.npy) or FILE.h5:DATASET; unset: no normalisation"},
    {"std", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(data.timeseries.std), NULL,
     "per-channel standard deviations the centred values are divided by, as mean (global_stds.npy); given "
     "together with mean"},
    KEY_END,
};

static const key_spec loader_keys[] = {
    {"threads", KT_INT, KF_DEFAULT, "2", 0, 256, NULL, OFF(data.loader.threads), NULL,
     "reader threads: they read, decode, transform and augment samples off the training thread; the batches "
     "are the same for any number. 0: none, the training threads make each batch when the step needs it "
     "(on a CPU run straight into the model's input): fastest for data held in memory (synthetic, or "
     "cached) on a CPU run whose threads fill the cores, where readers only take turns with them; "
     "slow when samples are read from files"},
    {"prefetch", KT_INT, KF_DEFAULT, "4", 2, 1024, NULL, OFF(data.loader.prefetch), NULL,
     "batches prepared ahead (the loader's memory is this many batches, plus the cache)"},
    {"drop_last", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(data.loader.drop_last), NULL,
     "drop the last, partial batch of each training epoch (false: keep it, smaller); evaluation keeps every sample"},
    {"cache", KT_ENUM, KF_DEFAULT, "auto", NO_RANGE, cache_choices, OFF(data.loader.cache), NULL,
     "memory: keep each decoded sample (after transform and normalisation, before crops and augmentation) the "
     "first time it is read, so later epochs do not read files; needs samples x sample size x 4 bytes; auto: "
     "memory for each split that fits in data.loader.cache_share of the machine's memory (the start banner "
     "says which); none: read the files every epoch",
     reads_files, "data.source is hdf5 or timeseries"},
    {"cache_share", KT_FLOAT, KF_DEFAULT, "0.25", 0, 1, NULL, OFF(data.loader.cache_share), NULL,
     "cache: auto caches a split when its cache takes at most this share of the machine's memory (divided among "
     "the ranks on the node; each split on its own)",
     reads_files, "data.source is hdf5 or timeseries"},
    {"stage", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(data.loader.stage), NULL,
     "copy the files this rank reads to this directory (node-local storage such as /dev/shm) at start, as "
     "MLPerf CosmoFlow does, and read them there; removed at the end",
     reads_files, "data.source is hdf5 or timeseries"},
    KEY_END,
};

static const key_spec augment_keys[] = {
    {"flip", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(data.augment.flip), NULL,
     "flip each spatial axis with probability 1/2 (training only; masks and field targets alike)"},
    {"rotate", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(data.augment.rotate), NULL,
     "one of the 8 symmetries of a square (2D) or the 24 rotations of a cube (3D), uniformly; needs square or "
     "cubic samples (or crops)"},
    {"pad_crop", KT_INT, KF_DEFAULT, "0", 0, 4096, NULL, OFF(data.augment.pad_crop), NULL,
     "pad each spatial side with this many zeros, then crop back to the sample size at a random offset"},
    {"noise", KT_FLOAT, KF_DEFAULT, "0", 0, 100, NULL, OFF(data.augment.noise), NULL,
     "standard deviation of Gaussian noise added to the inputs (not to targets)"},
    KEY_END,
};

static const key_spec data_keys[] = {
    {"source", KT_ENUM, KF_DEFAULT, "synthetic", NO_RANGE, data_source_choices, OFF(data.source), NULL,
     "where samples come from: synthetic (built in, generated in memory from the seed), hdf5 (files; "
     "`galley data synth` writes the synthetic kinds as HDF5) or timeseries (yearly files of a field's time "
     "series, see data.timeseries)"},
    {"synthetic", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, synthetic_keys,
     "the built-in data set", is_synthetic, "data.source is synthetic"},
    {"timeseries", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, timeseries_keys,
     "yearly HDF5 files of a field's time series (FourCastNet's layout): samples are (x at t, x at t + lead)",
     is_timeseries, "data.source is timeseries"},
    {"train", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, train_file_keys,
     "the training split's files and dataset names", is_hdf5, "data.source is hdf5"},
    {"val", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, val_file_keys,
     "the validation split's files and dataset names; its samples must have the training split's shapes",
     is_hdf5, "data.source is hdf5"},
    {"samples", KT_ENUM, KF_DEFAULT, "stacked", NO_RANGE, samples_choices, OFF(data.samples), NULL,
     "stacked: the first axis of x and y indexes samples (many per file); per_file: each file holds one sample "
     "(DeepCAM), x and y have no sample axis",
     is_hdf5, "data.source is hdf5"},
    {"layout", KT_ENUM, KF_DEFAULT, "channels_first", NO_RANGE, layout_choices, OFF(data.layout), NULL,
     "axis order of x (and of field targets) on disk after the sample axis: channels_first (C, D, H, W) or "
     "channels_last (D, H, W, C; DeepCAM, CosmoFlow); samples reach the model channels first either way. Rank 1: "
     "feature vectors; rank 2: one-channel images",
     is_hdf5, "data.source is hdf5"},
    {"target", KT_ENUM, KF_DEFAULT, "class", NO_RANGE, target_kind_choices, OFF(data.target), NULL,
     "what y holds: class (one integer label per sample), mask (one label per pixel/voxel, the spatial shape of "
     "x) or values (floats: regression targets, or a field with x's spatial shape and layout)",
     is_hdf5, "data.source is hdf5"},
    {"classes", KT_INT, KF_DEFAULT, "2", 2, 1e6, NULL, OFF(data.classes), NULL,
     "number of classes; labels outside [0, classes) are an error naming the file and sample",
     hdf5_labels, "data.source is hdf5 and data.target is class or mask"},
    {"transform", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, transform_choices, OFF(data.transform), NULL,
     "applied to x first: log1p = log(1 + x) (CosmoFlow's counts)",
     is_hdf5, "data.source is hdf5"},
    {"normalize", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, normalize_choices, OFF(data.normalize), NULL,
     "then per channel: minmax (x - min) / (max - min), or standard (x - mean) / std; values from data.min/max "
     "or data.mean/std, or from data.stats",
     is_hdf5, "data.source is hdf5"},
    {"mean", KT_FLOATS, KF_DEFAULT, "[]", -GL_INF, GL_INF, NULL, OFF(data.mean), NULL,
     "per-channel means (one value: all channels); [] takes them from data.stats",
     hdf5_standard, "data.normalize is standard"},
    {"std", KT_FLOATS, KF_DEFAULT, "[]", 1e-30, GL_INF, NULL, OFF(data.std), NULL,
     "per-channel standard deviations, as data.mean", hdf5_standard, "data.normalize is standard"},
    {"min", KT_FLOATS, KF_DEFAULT, "[]", -GL_INF, GL_INF, NULL, OFF(data.min), NULL,
     "per-channel minima (one value: all channels); [] takes them from data.stats",
     hdf5_minmax, "data.normalize is minmax"},
    {"max", KT_FLOATS, KF_DEFAULT, "[]", -GL_INF, GL_INF, NULL, OFF(data.max), NULL,
     "per-channel maxima, as data.min", hdf5_minmax, "data.normalize is minmax"},
    {"stats", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(data.stats), NULL,
     "HDF5 file with datasets mean and std, or min and max (DeepCAM's climate/minval and climate/maxval are "
     "accepted too), one value per channel; used where the recipe gives none",
     hdf5_normalized, "data.normalize is minmax or standard"},
    {"crop", KT_INT, KF_DEFAULT, "0", 0, 1e6, NULL, OFF(data.crop), NULL,
     "edge of the spatial crop taken from each sample, read from the file as a hyperslab (the SC22 U-Net reads "
     "64^3 crops of 1024^3 volumes): random for training, a fixed random offset per sample for validation; "
     "0: whole samples",
     is_hdf5, "data.source is hdf5"},
    {"file_locking", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(data.file_locking), NULL,
     "HDF5 file locking (off by default: it fails on Lustre and some NFS); the HDF5_USE_FILE_LOCKING "
     "environment variable, when set, wins",
     reads_files, "data.source is hdf5 or timeseries"},
    {"nonfinite", KT_ENUM, KF_DEFAULT, "error", NO_RANGE, data_nonfinite_choices, OFF(data.nonfinite), NULL,
     "an input sample holding NaN or Inf: error (stop, naming the file, dataset and sample) or skip (serve the "
     "next valid sample of the same rank's batch in its place, deterministically; the count is reported)",
     reads_files, "data.source is hdf5 or timeseries"},
    {"loader", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, loader_keys,
     "how samples are read: reader threads, prefetch depth, cache, staging"},
    {"augment", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, augment_keys,
     "random training-time changes of each sample, seeded (seed, epoch, sample): the same for any thread or "
     "rank count"},
    KEY_END,
};

// model.blocks: its keys are the blocks' names, read with model.layers (src/recipe/resolve_blocks.c).
static const key_spec no_keys[] = {KEY_END};

static const key_spec model_keys[] = {
    {"layers", KT_LAYERS, KF_REQUIRED, NULL, NO_RANGE, NULL, OFF(model.layers), NULL,
     "the layers in order; each has a type, an optional name and optional inputs "
     "(names of earlier layers; default: the previous layer); an item {block: NAME, repeat: N, name: P} stands "
     "for N copies of a block of model.blocks, its layers named P.0.LAYER ... P.<N-1>.LAYER (P: default NAME; "
     "P alone names the last copy's last layer)"},
    {"blocks", KT_SECTION, KF_OPTIONAL, NULL, NO_RANGE, NULL, 0, no_keys,
     "named blocks of layers, each written once as a list of layers (like model.layers) and repeated by items "
     "of model.layers; in a block, inputs name a layer of the same copy, `in` (the copy's input: the previous "
     "copy's last layer, or the layer before the item) or a layer above the item. Blocks do not nest, and each "
     "must be used. `galley check` prints the copies as layers"},
    {"fuse", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(model.fuse), NULL,
     "a relu or leaky_relu that alone reads a layer's output shares its buffer (the layer applies it as it "
     "stores where it can, else it runs in place), a max_pool of non-overlapping windows after one applies its "
     "derivative in backward, and a convolution followed (directly or through such an activation) by a max_pool "
     "whose 2x2 or 2x2x2 windows tile its output writes the pool's output instead of its own (CPU); a gelu "
     "that alone reads a layer's output keeps its derivative there in training (CPU; not after an activation, "
     "a reshape or a max_pool; a dense layer after it applies it in backward), so that layer's output then "
     "holds gelu'; a flatten "
     "that alone reads its input takes that input's buffer, and an add or a flatten gives an input that it "
     "alone reads its own output gradient (no copies); an add of two inputs, one a dense or attention layer's "
     "output that the add alone reads, is computed as that layer stores, the other input (made by a layer "
     "before it) added there (CPU), so that layer's output then holds the sum: less memory traffic, the same "
     "results; false keeps "
     "every layer's own output, so a non-finite value is traced to the exact layer that made it"},
    KEY_END,
};

static const key_spec target_keys[] = {
    {"metric", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, metric_choices, OFF(train.target.metric), NULL,
     "validation metric that ends training once it passes the threshold (none: no target): accuracy "
     "(per sample or per pixel), top_k (classification; k is train.top_k), loss, mae (regression), mean_iou "
     "(segmentation), l2_relative (regression: the relative L2 error, reduced as train.l2_relative_per)"},
    {"above", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.above), NULL,
     "stop when the metric is >= this (accuracy, top_k, mean_iou); give above or below, not both",
     has_target, "train.target.metric is set"},
    {"below", KT_FLOAT, KF_OPTIONAL, NULL, -GL_INF, GL_INF, NULL, OFF(train.target.below), NULL,
     "stop when the metric is <= this (loss, mae, l2_relative)",
     has_target, "train.target.metric is set"},
    KEY_END,
};

static const key_spec profile_keys[] = {
    {"start_step", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.profile.start_step), NULL,
     "the first step inside the profiled window (cudaProfilerStart before it)"},
    {"stop_step", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.profile.stop_step), NULL,
     "the step after the window (cudaProfilerStop before it); 0: no window. Use with `nsys profile "
     "--capture-range=cudaProfilerApi`"},
    KEY_END,
};

static const key_spec train_keys[] = {
    {"steps", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.steps), NULL,
     "optimizer steps to run; when > 0 it replaces train.epochs (the start banner says so), e.g. for a "
     "short trial run of a long recipe"},
    {"epochs", KT_INT, KF_DEFAULT, "10", 1, 1e9, NULL, OFF(train.epochs), NULL,
     "passes over the training data (unless train.steps > 0)"},
    {"batch_size", KT_INT, KF_DEFAULT, "64", 1, 1e8, NULL, OFF(train.batch_size), NULL,
     "samples per optimizer step: the global batch, split across ranks (any number of ranks gives the same "
     "batches); the last, partial batch of an epoch is kept"},
    {"device", KT_ENUM, KF_DEFAULT, "auto", NO_RANGE, device_choices, OFF(train.device), NULL,
     "where the model trains: auto (the GPU of this rank's local rank when there is one, else the CPU, said "
     "once), cpu, or cuda (an error when no GPU can be used)"},
    {"cuda_graphs", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(train.cuda_graphs), NULL,
     "on a GPU, record each forward and backward pass (CUDA graphs) after its first run at a batch size and "
     "replay it with one launch; a pass that cannot be recorded (sync_batchnorm, gradient buckets sent during "
     "backward) runs eagerly and a line says why. No effect on the CPU"},
    {"precision", KT_ENUM, KF_DEFAULT, "auto", NO_RANGE, precision_choices, OFF(train.precision), NULL,
     "arithmetic of the GEMM-shaped layers (dense, conv, conv_transpose, and attention's scores and "
     "weighted sums where its tensor-core kernel applies) on a GPU: fp32 (exact fp32, the same "
     "bits every run); tf32 (TF32 tensor cores, compute capability 8.0+); bf16 or fp16 (mixed precision: "
     "operands rounded to 16 bits, fp32 accumulation and results; fp16 adds dynamic loss scaling, its scale "
     "saved in checkpoints); auto: bf16 on compute capability 8.0+, fp16 on 7.x, fp32 on the CPU. Weights, "
     "optimizer state and every other layer stay fp32, and activations are stored in fp32 in this first cut, "
     "so GPU memory is not halved. The CPU trains in fp32 only: tf32, bf16 or fp16 with train.device cpu is "
     "an error (with auto and no GPU it is said once and the run goes on in fp32)"},
    {"threads", KT_INT, KF_DEFAULT, "0", 0, 4096, NULL, OFF(train.threads), NULL,
     "compute threads; 0 means one per core this process may run on (ranks on one node without a CPU "
     "binding share the node's cores)"},
    {"loss", KT_ENUM, KF_DEFAULT, "softmax_cross_entropy", NO_RANGE, loss_choices, OFF(train.loss), NULL,
     "softmax_cross_entropy (class labels, per sample or per pixel: softmax over the output's channels), "
     "mse or l1 (regression and field-to-field targets; mean over all elements), l2_relative (the same targets: "
     "the mean of ||pred - target||_2 / ||target||_2, as the NERSC SC23 tutorial's FourCastNet-like ViT; a target "
     "whose norm is below 1e-12 divides by 1e-12, a huge but finite loss)"},
    {"l2_relative_per", KT_ENUM, KF_DEFAULT, "sample", NO_RANGE, l2_relative_per_choices, OFF(train.l2_relative_per),
     NULL,
     "what one ratio of l2_relative covers: sample (the whole flattened sample, as the tutorial; the mean over "
     "samples) or channel (each channel of each sample over its positions; the mean over samples and channels). "
     "The l2_relative metric is reduced the same way",
     is_l2_relative, "train.loss is l2_relative"},
    {"class_weights", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e6, NULL, OFF(train.class_weights), NULL,
     "one weight per class (as PyTorch's CrossEntropyLoss weight; DeepCAM uses frequency^-0.125); [] for none",
     is_xent, "train.loss is softmax_cross_entropy"},
    {"top_k", KT_INT, KF_DEFAULT, "5", 1, 1000, NULL, OFF(train.top_k), NULL,
     "k of the top-k accuracy metric, shown for classification with more than k classes"},
    {"eval_every", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(train.eval_every), NULL,
     "evaluate on the validation split every this many steps (and at the end); 0 means after each epoch"},
    {"nonfinite", KT_ENUM, KF_DEFAULT, "stop", NO_RANGE, nonfinite_choices, OFF(train.nonfinite), NULL,
     "a NaN/Inf loss: stop (exit 1, naming the step and the first layer whose output went non-finite) or "
     "skip the step (counted and reported)"},
    {"time_limit", KT_FLOAT, KF_DEFAULT, "0", 0, 1e9, NULL, OFF(train.time_limit), NULL,
     "seconds of wall time the run may take (0: no limit): galley stops early enough to write a checkpoint "
     "and exits with code 4, so a job ends cleanly before its scheduler limit"},
    {"profile", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, profile_keys,
     "a window of steps for a profiler: NVTX ranges (data, forward, backward, allreduce, optimizer, checkpoint) "
     "are always emitted; this adds cudaProfilerStart/Stop around steps [start_step, stop_step)"},
    {"target", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, target_keys,
     "quality target, checked at each evaluation; training stops when it is reached, and if it is not "
     "reached by the end galley exits with code 3"},
    KEY_END,
};

static const key_spec schedule_keys[] = {
    {"unit", KT_ENUM, KF_DEFAULT, "steps", NO_RANGE, unit_choices, OFF(optimizer.schedule.unit), NULL,
     "unit of warmup and milestones: optimizer steps or epochs (fractions allowed)"},
    {"warmup", KT_FLOAT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(optimizer.schedule.warmup), NULL,
     "linear warmup from lr/warmup-steps to lr over this many units (0: none)"},
    {"decay", KT_ENUM, KF_DEFAULT, "constant", NO_RANGE, decay_choices, OFF(optimizer.schedule.decay), NULL,
     "after warmup: constant; multistep (factors at milestones); cosine or poly from lr to end_lr over the "
     "rest of the run"},
    {"milestones", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e12, NULL, OFF(optimizer.schedule.milestones), NULL,
     "increasing points (in unit) where the factor changes",
     is_multistep, "schedule.decay is multistep"},
    {"factors", KT_FLOATS, KF_DEFAULT, "[]", 0, 1e6, NULL, OFF(optimizer.schedule.factors), NULL,
     "lr multiplier from each milestone on (same length as milestones), e.g. [0.25, 0.125]",
     is_multistep, "schedule.decay is multistep"},
    {"end_lr", KT_FLOAT, KF_DEFAULT, "0", 0, 1e6, NULL, OFF(optimizer.schedule.end_lr), NULL,
     "the learning rate the decay reaches at the end of the run (not scaled by batch)",
     is_annealing, "schedule.decay is cosine or poly"},
    {"power", KT_FLOAT, KF_DEFAULT, "1", 0, 100, NULL, OFF(optimizer.schedule.power), NULL, "exponent",
     is_poly, "schedule.decay is poly"},
    {"scaling", KT_ENUM, KF_DEFAULT, "none", NO_RANGE, scaling_choices, OFF(optimizer.schedule.scaling), NULL,
     "scale lr by (batch_size / base_batch) (linear) or its square root (sqrt), as the NERSC tutorial does"},
    {"base_batch", KT_INT, KF_DEFAULT, "64", 1, 1e8, NULL, OFF(optimizer.schedule.base_batch), NULL,
     "the batch size lr was tuned for",
     is_scaled, "schedule.scaling is linear or sqrt"},
    KEY_END,
};

static const key_spec optimizer_keys[] = {
    {"type", KT_ENUM, KF_DEFAULT, "sgd", NO_RANGE, optim_names, OFF(optimizer.type), NULL,
     "sgd (momentum, Nesterov), adamw (decoupled weight decay) or lamb (layer-wise trust ratio, for large "
     "batches)"},
    {"lr", KT_FLOAT, KF_REQUIRED, NULL, 0, 1e6, NULL, OFF(optimizer.lr), NULL,
     "peak learning rate (before batch scaling)"},
    {"momentum", KT_FLOAT, KF_DEFAULT, "0.9", 0, 1, NULL, OFF(optimizer.momentum), NULL,
     "momentum factor (PyTorch convention: v = m*v + g; w -= lr*v)",
     is_sgd, "optimizer.type is sgd"},
    {"nesterov", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(optimizer.nesterov), NULL,
     "Nesterov momentum",
     is_sgd, "optimizer.type is sgd"},
    {"weight_decay", KT_FLOAT, KF_DEFAULT, "0", 0, 1, NULL, OFF(optimizer.weight_decay), NULL,
     "sgd: L2 penalty added to the gradient (coupled); adamw, lamb: decoupled decay"},
    {"beta1", KT_FLOAT, KF_DEFAULT, "0.9", 0, 0.999999, NULL, OFF(optimizer.beta1), NULL,
     "first-moment decay",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"beta2", KT_FLOAT, KF_DEFAULT, "0.999", 0, 0.999999999, NULL, OFF(optimizer.beta2), NULL,
     "second-moment decay",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"eps", KT_FLOAT, KF_DEFAULT, "1e-8", 0, 1, NULL, OFF(optimizer.eps), NULL,
     "added to the root of the second moment",
     is_adam_like, "optimizer.type is adamw or lamb"},
    {"exclude_1d", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(optimizer.exclude_1d), NULL,
     "biases and normalisation weights (1-D tensors) get no weight decay and, with lamb, a trust ratio of 1 "
     "(the no-decay group of apex/timm; LAMB barely moves zero-initialised biases otherwise)"},
    {"clip_norm", KT_FLOAT, KF_OPTIONAL, NULL, 1e-12, 1e12, NULL, OFF(optimizer.clip_norm), NULL,
     "clip gradients to this global L2 norm before the update (unset: no clipping)"},
    {"fuse", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(optimizer.fuse), NULL,
     "sgd and adamw on the CPU in one process: each layer's parameters are updated as soon as backward is "
     "done with them, while their gradients are still in cache, instead of in one pass over all after "
     "backward: the same results, faster. Applies only where nothing after backward changes the update "
     "(no clip_norm, no fp16 loss scale, train.nonfinite: stop, one process, distributed.deterministic "
     "false); elsewhere, and with false, the pass after backward"},
    {"schedule", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, schedule_keys,
     "learning-rate rule: batch scaling, warmup, then decay"},
    KEY_END,
};

// log.mlperf is emitted (recipe.yaml, the recipe hash) only when on, so that the recipes without
// it keep their hash. Before it is resolved it is NULL and applies; its default is "false".
static bool mlperf_on(const void *b) { return !R(b)->log.mlperf || strcmp(R(b)->log.mlperf, "false") != 0; }

static const key_spec log_keys[] = {
    {"every", KT_INT, KF_DEFAULT, "50", 0, 1e12, NULL, OFF(log.every), NULL,
     "a progress line (when the output is not a terminal) and a metrics.jsonl/TensorBoard record every this "
     "many steps; 0: only at evaluations. On a terminal the progress line updates in place instead"},
    {"files", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(log.files), NULL,
     "write a run directory (recipe.yaml, metrics.jsonl, TensorBoard events, console.log, summary.json); "
     "false: print only. `galley train --run-dir DIR` writes one whatever this says"},
    {"dir", KT_STRING, KF_DEFAULT, "runs", NO_RANGE, NULL, OFF(log.dir), NULL,
     "where run directories go: `DIR/<name>/<YYYYmmdd-HHMMSS>/`, relative to the working directory "
     "(`--run-dir` names the run directory itself instead; unused with log.files false, so that "
     "log.files=false works on any recipe)"},
    {"mlperf", KT_STRING, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(log.mlperf), NULL,
     "an MLPerf HPC log (`:::MLLOG` lines for mlperf_logging's compliance checker, open division) written by "
     "rank 0: a file name, or true for `RUN_DIR/mlperf.log`; --resume continues the file. The end summary then "
     "also gives time to train and to the first step (false: none)",
     mlperf_on, NULL},
    KEY_END,
};

static const key_spec distributed_keys[] = {
    {"bucket_mb", KT_FLOAT, KF_DEFAULT, "25", 0.001, 1e5, NULL, OFF(distributed.bucket_mb), NULL,
     "gradients are summed across ranks in buckets of about this many MiB, each started as soon as backward "
     "has filled it"},
    {"overlap", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(distributed.overlap), NULL,
     "start each bucket's allreduce during backward (false: all of them after backward; for measuring)"},
    {"sync_batchnorm", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(distributed.sync_batchnorm), NULL,
     "batch-norm statistics over the global batch (false: over each rank's part, as PyTorch DDP)"},
    {"deterministic", KT_BOOL, KF_DEFAULT, "false", NO_RANGE, NULL, OFF(distributed.deterministic), NULL,
     "sum gradients, losses and metrics in a fixed order over distributed.parts parts of the batch, so any "
     "number of ranks that divides parts gives bitwise the same run (costs more communication)"},
    {"parts", KT_INT, KF_DEFAULT, "0", 0, 65536, NULL, OFF(distributed.parts), NULL,
     "the global batch is computed as this many parts, one after another on each rank (0: one per rank); "
     "batch norm without sync_batchnorm normalises over each part",
     is_deterministic, "distributed.deterministic is true"},
    {"timeout", KT_FLOAT, KF_DEFAULT, "300", 1, 1e7, NULL, OFF(distributed.timeout), NULL,
     "seconds a collective may wait for the other ranks before the job is ended with a message naming the "
     "step (a rank that died or hangs)"},
    {"tensor_parallel", KT_INT, KF_DEFAULT, "1", 1, 4096, NULL, OFF(distributed.tensor_parallel), NULL,
     "ranks that hold one model between them (Megatron-style tensor parallelism: attention split by heads, "
     "each MLP's dense pair column then row, other layers replicated); the world is a grid of "
     "world / tensor_parallel data-parallel groups of this many; must divide the ranks"},
    {"tensor_parts", KT_INT, KF_DEFAULT, "0", 0, 4096, NULL, OFF(distributed.tensor_parts), NULL,
     "the split products are computed as this many canonical parts (of the heads and MLP units) and summed in "
     "part order, so any tensor_parallel dividing it gives bitwise the same run (0: tensor_parallel)",
     is_deterministic, "distributed.deterministic is true"},
    {"tensor_order", KT_ENUM, KF_DEFAULT, "tensor_first", NO_RANGE, tensor_order_choices,
     OFF(distributed.tensor_order), NULL,
     "tensor_first: each tensor group is consecutive ranks (one node first, where their per-layer sums are "
     "cheapest); data_first: each data-parallel group is"},
    KEY_END,
};

static const key_spec checkpoint_keys[] = {
    {"dir", KT_STRING, KF_DEFAULT, "checkpoints", NO_RANGE, NULL, OFF(checkpoint.dir), NULL,
     "where checkpoints go, as DIR/<name>-step<N>.h5 (relative to the working directory); "
     "`--resume auto` looks here"},
    {"every_steps", KT_INT, KF_DEFAULT, "0", 0, 1e12, NULL, OFF(checkpoint.every_steps), NULL,
     "write one every this many steps (0: not by steps)"},
    {"every_minutes", KT_FLOAT, KF_DEFAULT, "0", 0, 1e9, NULL, OFF(checkpoint.every_minutes), NULL,
     "write one when this many minutes have passed since the last (0: not by time)"},
    {"keep", KT_INT, KF_DEFAULT, "3", 1, 1e6, NULL, OFF(checkpoint.keep), NULL,
     "the newest this many checkpoints are kept; older ones are deleted after a new one is complete"},
    {"at_end", KT_BOOL, KF_DEFAULT, "true", NO_RANGE, NULL, OFF(checkpoint.at_end), NULL,
     "write one when training ends (signals and train.time_limit always write one)"},
    KEY_END,
};

const key_spec recipe_schema[] = {
    {"name", KT_STRING, KF_OPTIONAL, NULL, NO_RANGE, NULL, OFF(name), NULL,
     "run name (default: the recipe's file name without .yaml)"},
    {"seed", KT_INT, KF_DEFAULT, "42", 0, 9.2e18, NULL, OFF(seed), NULL,
     "seed of every random number: init, data order, synthetic data"},
    {"data", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, data_keys, "training and validation data"},
    {"model", KT_SECTION, KF_REQUIRED, NULL, NO_RANGE, NULL, 0, model_keys, "the network"},
    {"train", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, train_keys, "the training loop"},
    {"optimizer", KT_SECTION, KF_REQUIRED, NULL, NO_RANGE, NULL, 0, optimizer_keys, "the optimizer"},
    {"distributed", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, distributed_keys,
     "data-parallel training over MPI ranks: launch with mpirun or srun --mpi=pmix; a process started alone is one rank"},
    {"checkpoint", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, checkpoint_keys,
     "checkpoint files (HDF5) for `galley train --resume`"},
    {"log", KT_SECTION, KF_DEFAULT, NULL, NO_RANGE, NULL, 0, log_keys,
     "what a run prints and keeps (the run directory: see \"Watching a run\" in the README)"},
    KEY_END,
};
