// report.h: `galley report`: one self-contained HTML page (inline SVG charts, no network, no
// script) from one or more run directories: loss, metric, learning-rate and throughput curves
// over steps (runs overlaid in different colours), the time breakdown, the run summary and the
// recipe.
#ifndef GALLEY_REPORT_H
#define GALLEY_REPORT_H

#include <stdio.h>

// Collects the run directories under each path: the path itself when it holds metrics.jsonl,
// else every directory below it (two levels deep, e.g. runs/ or runs/<name>/) that does, sorted.
// Returns the count (paths in *out, caller frees each and the array), or -1 after an error on err.
int report_find_runs(char *const *paths, int npaths, char ***out, FILE *err);

// Writes the report of the runs to out_path. Returns a GL_EXIT_* code; errors on err.
int report_write(char *const *runs, int nruns, const char *out_path, FILE *err);

#endif
