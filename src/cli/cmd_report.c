// cmd_report.c: `galley report RUN_DIR [RUN_DIR ...] [-o OUT.html]`: one self-contained HTML page
// comparing runs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "cli/cli.h"
#include "galley/report.h"
#include "galley/sweep.h"

int cmd_report(int argc, char **argv) {
    const char *out = NULL;
    char *dirs[argc > 0 ? argc : 1];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return cli_help_for("report", stdout), GL_EXIT_OK;
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "galley report: %s needs a file name\n", argv[i]);
                return GL_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (!strncmp(argv[i], "--output=", 9)) {
            out = argv[i] + 9;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "galley report: unknown option '%s'\n", argv[i]);
            return GL_EXIT_USAGE;
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (n == 0) {
        fprintf(stderr, "galley report: missing RUN_DIR\n");
        cli_help_for("report", stderr);
        return GL_EXIT_USAGE;
    }
    // A sweep directory (journal.jsonl): its own page, src/sweep/sweep_report.c.
    if (n == 1 && sweep_dir_is_sweep(dirs[0])) return sweep_report(dirs[0], out, stdout, stderr);
    char **runs;
    int nruns = report_find_runs(dirs, n, &runs, stderr);
    if (nruns < 0) return GL_EXIT_USAGE;
    char path[4200];
    if (!out) {  // one run: beside its files; several: here
        if (nruns == 1) snprintf(path, sizeof path, "%s/report.html", runs[0]);
        else snprintf(path, sizeof path, "report.html");
        out = path;
    }
    int code = report_write(runs, nruns, out, stderr);
    if (code == GL_EXIT_OK) printf("galley report: %d run%s -> %s\n", nruns, nruns == 1 ? "" : "s", out);
    for (int i = 0; i < nruns; i++) free(runs[i]);
    free(runs);
    return code;
}
