// sweep.h: `galley sweep`: hyperparameter sweeps inside one launch. A sweep file names a base
// recipe, a search space over recipe keys, a method (grid, random, ASHA) and the metric; the
// world's ranks split into groups of ranks_per_trial, each training one trial at a time as an
// ordinary data-parallel run (SWEEP_DIR/trials/<id>/), while world rank 0 also coordinates.
// The sweep's state is SWEEP_DIR/journal.jsonl (append + fsync per event), so `--resume auto`
// continues a stopped sweep; results.csv, results.jsonl and best.yaml sit beside it.
#ifndef GALLEY_SWEEP_H
#define GALLEY_SWEEP_H

#include <stdio.h>

typedef struct {
    const char *file;         // the sweep file
    const char *dir;          // --dir (NULL: the file's `dir`)
    const char *resume;       // --resume: "auto" or NULL
    int noverrides;           // key=value for the base recipe, as `galley train` takes them
    char *const *overrides;
} sweep_opts;

// The whole sweep on every rank of the launch (MPI is initialised and finalised inside).
// Returns a GL_EXIT_* code: 0 finished, 2 bad sweep file or recipe, 4 stopped (resume it),
// 1 every trial failed or a runtime failure.
int sweep_main(const sweep_opts *o, FILE *out, FILE *err);

// 1 when dir holds a sweep (a journal.jsonl): `galley report` hands it to sweep_report.
int sweep_dir_is_sweep(const char *dir);
// `galley report SWEEP_DIR`: out_path (NULL: SWEEP_DIR/report.html) shows every trial (values,
// budget, metric, state), the metric against each hyperparameter, and links every trial's curves
// (SWEEP_DIR/curves.html, the ordinary run report of all trial runs). A GL_EXIT_* code.
int sweep_report(const char *dir, const char *out_path, FILE *out, FILE *err);

#endif
