// cmd_help.c: usage and per-command help; `galley help recipe` prints the recipe reference.
#include <stdio.h>
#include <string.h>

#include "galley/check.h"
#include "cli/cli.h"
#include "galley/recipe.h"
#include "galley/synth.h"

void cli_usage(FILE *out) {
    fputs("usage: galley COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  train RECIPE [key=value ...]   train the model a recipe describes (--run-dir DIR: where its\n"
          "                                 run directory goes; --resume PATH|auto: continue a checkpoint)\n"
          "  eval RECIPE --checkpoint PATH|auto [key=value ...]\n"
          "                                 evaluate a checkpoint's weights on the validation split\n"
          "  check RECIPE [key=value ...]   validate a recipe; print it with every default filled in\n"
          "                                 and a summary of the model\n"
          "  report RUN_DIR... [-o FILE]    one HTML page with the curves, time breakdown and summary\n"
          "                                 of one or more runs\n"
          "  sweep SWEEP.yaml [--resume auto]\n"
          "                                 a hyperparameter sweep (grid, random, ASHA) in one launch:\n"
          "                                 trials on groups of ranks, results.csv, best.yaml\n"
          "  info [--wiring]                version, build features, CPU, GPUs, MPI and NCCL (--wiring: what\n"
          "                                 the container's site hooks set up)\n"
          "  doctor [--site S] [--data P] [--json F] [--quick]\n"
          "                                 check every rank and node before a job: binding, limits,\n"
          "                                 transports, bandwidth, compute and read speed\n"
          "  data synth KIND OUT.h5 [k=v]   write a synthetic data set as HDF5\n"          "  data inspect FILE.h5           datasets, shapes, dtypes, chunks, filters, min/max/mean\n"
          "  data bench RECIPE [k=v]        the data loader's throughput alone (read, full, synthetic)\n"
          "  ckpt inspect FILE [--recipe]   what a checkpoint holds, every checksum verified\n"
          "  help [COMMAND | recipe]        help for a command, or the recipe reference\n"
          "  --version, --help\n"
          "\n"
          "key=value overrides any recipe key, e.g. train.epochs=5 or model.layers[0].units=128.\n"
          "exit codes: 0 success, 1 runtime failure, 2 usage or recipe error,\n"
          "            3 trained but train.target not reached,\n"
          "            4 stopped early (signal or train.time_limit) after writing a checkpoint\n",
          out);
}

// `galley help train`.
static void help_train(FILE *out) {
    fputs("usage: galley train RECIPE [key=value ...] [--run-dir DIR] [--resume PATH|auto]\n\n"
          "Validates RECIPE (as `galley check` does), builds the model, and trains it, printing one line\n"
          "per evaluation with training and validation loss and metrics; between them a progress line\n"
          "(in place on a terminal, every log.every steps otherwise). The end summary splits the time\n"
          "into data wait, forward, backward, communication, optimizer, checkpoint and evaluation.\n"
          "Overrides are typed and checked like recipe text; list items are addressed as\n"
          "model.layers[2].units or model.layers.2.units.\n\n"
          "The run directory (log.dir/<name>/<YYYYmmdd-HHMMSS>/, or DIR with --run-dir) keeps the resolved\n"
          "recipe, metrics.jsonl, TensorBoard event files, console.log and summary.json; log.files=false\n"
          "keeps none. See them with `galley report DIR` or `tensorboard --logdir runs/`.\n\n"
          "Under mpirun or `srun --mpi=pmix` every rank trains its part of each global batch\n"
          "(train.batch_size) and gradients are summed across ranks; only rank 0 prints and writes.\n\n"
          "Checkpoints (checkpoint.*) go to checkpoint.dir/<name>-step<N>.h5. --resume PATH continues\n"
          "from that file; --resume auto from the newest good checkpoint of this run name in\n"
          "checkpoint.dir (falling back past damaged ones; a fresh start if there is none). SIGTERM,\n"
          "SIGUSR1 and SIGINT make every rank write a checkpoint at the next step boundary and exit 4;\n"
          "a second SIGINT exits at once. train.time_limit stops the same way before the limit.\n\n"
          "Exit codes: 0 success (and train.target reached, if set), 1 runtime failure, 2 usage or\n"
          "recipe error, 3 train.target not reached, 4 stopped early by a signal or train.time_limit\n"
          "with a checkpoint written (run again with --resume auto to continue).\n",
          out);
}

// `galley help data`.
static void help_data(FILE *out) {
    char kinds[512];
    synth_kind_list(kinds, sizeof kinds, ", ");
    fprintf(out, "usage: galley data synth KIND OUT.h5 [key=value ...]\n"
                 "       galley data inspect FILE.h5\n"
                 "       galley data bench RECIPE [key=value ...] [steps=N]\n\n"
                 "synth writes a synthetic data set (%s) as HDF5,\n", kinds);
    fputs("the same samples data.synthetic makes in memory; a recipe reads it with data.source: hdf5.\n"
          "`galley data synth --help` lists the keys and the datasets written.\n\n"
          "inspect lists every dataset of an HDF5 file: path, shape, dtype, chunks, filters (gzip, shuffle,\n"
          "...) and min/max/mean of its values (read once, in blocks: memory stays bounded), with a count\n"
          "of NaN/Inf if any, then the root's galley_* attributes. Exit 2: missing or not an HDF5 file.\n\n"
          "bench measures the loader alone on the recipe's training split, as the NERSC tutorial's benchy:\n"
          "  read       files read only: no transform, normalisation, augmentation or cache (synthetic\n"
          "             data: generating the split in memory)\n"
          "  full       the loader as training uses it: read, transform, augment\n"
          "  synthetic  batches copied from memory, nothing read: the loader's own overhead\n"
          "each in samples/s and MB/s, with data.loader.threads reader threads (override it, e.g.\n"
          "data.loader.threads=2). steps=N batches per mode (default: one epoch).\n",
          out);
}

// `galley help doctor`.
static void help_doctor(FILE *out) {
    fputs("usage: galley doctor [--site NAME|PATH] [--data PATH]... [--json FILE|-] [--quick] [--timeout S]\n\n"
          "Run it the way the job will run (mpirun -np N galley doctor, srun --mpi=pmix ... podman-hpc run\n"
          "... galley doctor) or alone. Every rank reports, and rank 0 prints one line per rank and the findings:\n"
          "  - host name, local rank, the cores it is bound to and their NUMA node, its GPU's UUID and NUMA\n"
          "    node, ulimit -l, the size of /dev/shm, HDF5_USE_FILE_LOCKING, what the site hooks reported;\n"
          "  - the transport MPI really selected (Open MPI: pml, mtl, and the btl to peers on the node and\n"
          "    on other nodes, from its own selection lines) and, on GPUs, NCCL's (its NCCL_DEBUG=INFO\n"
          "    report: plugin or Socket), against the site's profiles;\n"
          "  - allreduce bus bandwidth over MPI (and NCCL on GPUs) from 1 KiB to 256 MiB (--quick: 16 MiB)\n"
          "    within each node, across nodes (one rank per node) and over all ranks;\n"
          "  - GEMM and 3x3 convolution GFLOP/s on the device training uses, and MB/s reading each --data\n"
          "    file (a folder: its first file); a rank more than 15% below the median is a finding.\n\n"
          "--site NAME|PATH  the site to check against: a site folder's name (site/sites/NAME, as\n"
          "                  GALLEY_SITE), a network profile's (slingshot: site/profiles/slingshot-*.env),\n"
          "                  or a site folder or site.env path. Default: the site the hooks chose.\n"
          "--data PATH       a data file or folder to read and check for HDF5 locking (up to 4)\n"
          "--json FILE|-     the whole report as JSON (-: on stdout; the table then goes to stderr)\n"
          "--quick           shorter probes, bandwidth up to 16 MiB (a few seconds)\n"
          "--timeout S       how long any wait on another rank may take (default 60): a rank or node\n"
          "                  that does not answer is named, and the job ends\n\n"
          "Exit codes: 0 healthy, 1 a finding (including a site profile that does not exist, a data\n"
          "path that cannot be read, a rank that does not answer), 2 cannot run (bad arguments, --json\n"
          "not writable).\n",
          out);
}

int cli_help_for(const char *c, FILE *out) {
    if (!strcmp(c, "train")) {
        help_train(out);
    } else if (!strcmp(c, "eval")) {
        fputs("usage: galley eval RECIPE --checkpoint PATH|auto [key=value ...] [--run-dir DIR]\n\n"
              "Builds the recipe's model, loads the weights (and batch-norm statistics) of a checkpoint, and\n"
              "evaluates them once on the validation split: loss and the metrics that apply, printed and\n"
              "kept in the run directory like a training run's evaluation. --checkpoint auto takes the newest\n"
              "good checkpoint of the recipe's name in checkpoint.dir. Nothing is trained or written to\n"
              "checkpoint.dir. Runs on several ranks like train (the validation split is shared out).\n"
              "Exit codes: 0 evaluated (and train.target met, if set), 1 runtime failure, 2 usage or recipe\n"
              "error or a checkpoint that does not fit the model, 3 train.target not met.\n",
              out);
    } else if (!strcmp(c, "sweep")) {
        cli_sweep_usage(out);
    } else if (!strcmp(c, "ckpt")) {
        fputs("usage: galley ckpt inspect FILE.h5 [--recipe]\n\n"
              "Lists what a checkpoint holds: its attributes (step, epoch, world size, optimizer, recipe hash,\n"
              "best metrics, ...) and every tensor (parameters, batch-norm state, optimizer state) with its\n"
              "shape and whether its CRC-32C checksum matches. --recipe also prints the resolved recipe it\n"
              "was trained with. Exit codes: 0 a good checkpoint, 1 damaged or not a checkpoint, 2 usage.\n",
              out);
    } else if (!strcmp(c, "report")) {
        fputs("usage: galley report RUN_DIR [RUN_DIR ...] [-o OUT.html]\n\n"
              "Writes one self-contained HTML page (inline SVG, no script, no network) with the loss, metric,\n"
              "learning-rate and throughput curves over steps, the time breakdown, the run summary and the\n"
              "recipe. Several runs are overlaid in different colours. A RUN_DIR that is not a run directory\n"
              "(no metrics.jsonl) stands for the runs below it, e.g. runs/quickstart for all its runs.\n"
              "Default output: RUN_DIR/report.html for one run, ./report.html for several.\n"
              "Exit codes: 0 written, 1 I/O error, 2 usage error or no run found.\n",
              out);
    } else if (!strcmp(c, "check")) {
        fputs("usage: galley check RECIPE [key=value ...]\n\n"
              "Validates RECIPE and the overrides, then prints the resolved recipe as YAML with every\n"
              "default filled in (feeding it back to galley gives the same recipe), followed by the model\n"
              "summary as comments: each layer's output shape, parameters, FLOPs and activation memory.\n"
              "Errors name FILE:LINE:COLUMN and the key path. Exit codes: 0 valid, 2 invalid.\n",
              out);
    } else if (!strcmp(c, "info")) {
        fputs("usage: galley info [--wiring]\n\n"
              "Prints the version, build type and features (CUDA backend, sanitizers), library versions\n"
              "(libyaml, HDF5, OpenBLAS, MPI), the CPU and its vector features, GPUs seen by the CUDA\n"
              "runtime, and whether NCCL can be loaded.\n\n"
              "--wiring prints the report the image's entrypoint (/opt/galley/site/galley-entrypoint) wrote\n"
              "at container start: runtime, site, ranks, and each variable its hooks set or kept, and why\n"
              "(GPU binding, NCCL plugin and Slingshot settings, MPI/PMIx, HDF5 file locking); then the\n"
              "NCCL_*, FI_*, OMPI_MCA_*, PMIX_MCA_*, GALLEY_*, CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH and rank\n"
              "variables galley sees. Outside the container it says that no hooks ran.\n",
              out);
    } else if (!strcmp(c, "data")) {
        help_data(out);
    } else if (!strcmp(c, "doctor")) {
        help_doctor(out);
    } else if (!strcmp(c, "help")) {
        fputs("usage: galley help [COMMAND | recipe]\n\n"
              "`galley help recipe` prints the recipe reference (Markdown) that the README carries.\n",
              out);
    } else if (!strcmp(c, "recipe")) {
        recipe_emit_reference(out);
    } else {
        return -1;
    }
    return 0;
}

int cmd_help(int argc, char **argv) {
    if (argc == 0) {
        cli_usage(stdout);
        return GL_EXIT_OK;
    }
    if (argc > 1) {
        fputs("galley: help takes one command name\n", stderr);
        return GL_EXIT_USAGE;
    }
    if (cli_help_for(argv[0], stdout) != 0) {
        fprintf(stderr, "galley: unknown command '%s'; commands: train, check, report, info, help\n", argv[0]);
        return GL_EXIT_USAGE;
    }
    return GL_EXIT_OK;
}
