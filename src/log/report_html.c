// report_html.c: the report page. One HTML file with inline CSS and SVG: no script, no links, no
// fonts or images from anywhere, so it opens offline, from a mail attachment or a cluster's
// file browser alike.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "galley/check.h"
#include "galley/report.h"
#include "log/report_internal.h"

static const char *const css =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#222;"
    "background:#f6f7f9;margin:0}\n"
    "main{max-width:1000px;margin:0 auto;padding:18px 24px 40px}\n"
    "h1{font-size:22px;margin:6px 0 2px}h2{font-size:17px;margin:0 0 6px}\n"
    "section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:12px 16px;margin:14px 0}\n"
    ".sub{color:#555;margin:0 0 8px}.runs{list-style:none;padding:0;margin:6px 0}\n"
    ".runs li{margin:2px 0}.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;"
    "vertical-align:-1px}\n"
    "svg.chart{width:100%;height:auto;display:block}\n"
    ".plot{fill:#fff;stroke:#c8ccd2}.grid{stroke:#eceef1}.line{fill:none;stroke-width:1.7}\n"
    ".key{stroke:#444;stroke-width:1.7}.kt,.rl{font-size:11px;fill:#333}\n"
    ".xt{font-size:11px;fill:#555;text-anchor:middle}.yt{font-size:11px;fill:#555;text-anchor:end}\n"
    ".xl,.yl{font-size:12px;fill:#333;text-anchor:middle}.empty{font-size:13px;fill:#888;text-anchor:middle}\n"
    ".pct{font-size:11px;fill:#fff;text-anchor:middle;font-weight:600}\n"
    "table{border-collapse:collapse;width:100%;font-size:13px}\n"
    "th,td{border-bottom:1px solid #e6e8eb;padding:4px 8px;text-align:left;vertical-align:top}\n"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f4f6}\n"
    "pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:4px;padding:8px 10px;overflow:auto;"
    "font-size:12px;max-height:480px}\n"
    "details{margin:6px 0}summary{cursor:pointer;font-weight:600}\n";

static const char *metric_title(const char *m) {
    if (!strcmp(m, "accuracy")) return "Accuracy";
    if (!strcmp(m, "top_k")) return "Top-k accuracy";
    if (!strcmp(m, "mae")) return "Mean absolute error";
    if (!strcmp(m, "mean_iou")) return "Mean IoU";
    if (!strcmp(m, "l2_relative")) return "Relative L2 error";
    return m;
}

// Which value of a point a chart shows.
typedef double (*pick_fn)(const rp_point *p, int arg);
static double pick_loss(const rp_point *p, int arg) { return (void)arg, p->loss; }
static double pick_lr(const rp_point *p, int arg) { return (void)arg, p->lr; }
static double pick_sps(const rp_point *p, int arg) { return (void)arg, p->sps; }
static double pick_metric(const rp_point *p, int arg) { return p->m[arg]; }

// One chart: per run, the training records (solid) and, with with_eval, the evaluations (dashed).
static void chart(FILE *o, const rp_set *s, const char *title, const char *ylabel, pick_fn pick, int arg,
                  bool with_train, bool with_eval, bool log_ok) {
    int ns = 0;
    rp_series *ser = gl_xcalloc((size_t)s->nrun * 2, sizeof *ser);
    double **bufs = gl_xcalloc((size_t)s->nrun * 4, sizeof *bufs);
    int nb = 0;
    for (int r = 0; r < s->nrun; r++) {
        const rp_run *run = &s->run[r];
        for (int e = 0; e < 2; e++) {
            if ((e == 0 && !with_train) || (e == 1 && !with_eval)) continue;
            const rp_point *pts = e ? run->eval : run->train;
            int n = e ? run->neval : run->ntrain;
            double *x = bufs[nb++] = gl_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
            double *y = bufs[nb++] = gl_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
            int k = 0;
            for (int i = 0; i < n; i++) {
                double v = pick(&pts[i], arg);
                if (isfinite(v)) x[k] = pts[i].step, y[k++] = v;
            }
            if (!k) continue;
            ser[ns++] = (rp_series){x, y, k, rp_run_color(r), e == 1, e == 1, run->label};
        }
    }
    fputs("<section><h2>", o);
    html_escape(o, title);
    fputs("</h2>\n", o);
    svg_lines(o, title, "step", ylabel, ser, ns, with_train && with_eval ? "training|validation" : NULL, log_ok);
    fputs("</section>\n", o);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    free(ser);
}

static bool any_value(const rp_set *s, pick_fn pick, int arg, bool eval) {
    for (int r = 0; r < s->nrun; r++) {
        const rp_point *pts = eval ? s->run[r].eval : s->run[r].train;
        int n = eval ? s->run[r].neval : s->run[r].ntrain;
        for (int i = 0; i < n; i++)
            if (isfinite(pick(&pts[i], arg))) return true;
    }
    return false;
}

// Seconds per phase: summary.json's totals, else the last training record's.
static void run_phases(const rp_run *r, double *ph) {
    char key[64];
    bool from_summary = true;
    for (int p = 0; p < PHASE_COUNT; p++) {
        snprintf(key, sizeof key, "time_breakdown.%s", phase_name(p));
        const rp_kv *kv = rp_get(r, key);
        if (!kv || isnan(kv->num)) from_summary = false;
        ph[p] = kv ? kv->num : NAN;
    }
    if (from_summary) return;
    for (int p = 0; p < PHASE_COUNT; p++) ph[p] = r->ntrain ? r->train[r->ntrain - 1].phase[p] : 0;
    for (int p = 0; p < PHASE_COUNT; p++)
        if (isnan(ph[p])) ph[p] = 0;
}

static void breakdown(FILE *o, const rp_set *s) {
    double (*ph)[PHASE_COUNT] = gl_xcalloc((size_t)s->nrun, sizeof *ph);
    const char **labels = gl_xcalloc((size_t)s->nrun, sizeof *labels), **colors = gl_xcalloc((size_t)s->nrun, sizeof *colors);
    for (int r = 0; r < s->nrun; r++) {
        run_phases(&s->run[r], ph[r]);
        labels[r] = s->run[r].label;
        colors[r] = rp_run_color(r);
    }
    fputs("<section><h2>Time breakdown</h2>\n<p class=\"sub\">Where the wall time of the training steps went "
          "(evaluation included).</p>\n", o);
    svg_breakdown(o, labels, colors, s->nrun, (const double (*)[PHASE_COUNT])ph);
    fputs("<table><tr><th>phase</th>", o);
    for (int r = 0; r < s->nrun; r++) {
        fputs("<th>", o);
        html_escape(o, s->run[r].label);
        fputs("</th>", o);
    }
    fputs("</tr>\n", o);
    for (int p = 0; p <= PHASE_COUNT; p++) {
        fprintf(o, "<tr><td>%s</td>", p < PHASE_COUNT ? phase_name(p) : "<b>total</b>");
        for (int r = 0; r < s->nrun; r++) {
            double total = 0;
            for (int q = 0; q < PHASE_COUNT; q++) total += ph[r][q];
            double v = p < PHASE_COUNT ? ph[r][p] : total;
            fprintf(o, "<td class=\"n\">%.3f s (%.1f%%)</td>", v, total > 0 ? 100 * v / total : 0.0);
        }
        fputs("</tr>\n", o);
    }
    fputs("</table>\n</section>\n", o);
    free(ph);
    free(labels);
    free(colors);
}

// Whether some run's summary has key (the MLPerf times: runs with log.mlperf).
static bool any_run_has(const rp_set *s, const char *key) {
    for (int r = 0; r < s->nrun; r++)
        if (rp_get(&s->run[r], key)) return true;
    return false;
}

// One summary cell: a string, a number with fmt, or a dash.
static void cell(FILE *o, const rp_run *r, const char *key, const char *fmt) {
    const rp_kv *kv = rp_get(r, key);
    if (kv && kv->str) {
        fputs("<td>", o);
        html_escape(o, kv->str);
        fputs("</td>", o);
    } else if (kv && !isnan(kv->num)) {
        fputs("<td class=\"n\">", o);
        fprintf(o, fmt, kv->num);
        fputs("</td>", o);
    } else {
        fputs("<td class=\"n\">&mdash;</td>", o);
    }
}

static void summary_table(FILE *o, const rp_set *s) {
    static const struct {
        const char *label, *key, *fmt;
    } rows[] = {
        {"status", "status", "%g"},
        {"recipe", "recipe_file", "%g"},
        {"recipe hash", "recipe_hash", "%g"},
        {"device", "device", "%g"},
        {"ranks", "ranks", "%.0f"},
        {"threads", "threads", "%.0f"},
        {"precision", "precision", "%g"},
        {"global batch", "global_batch", "%.0f"},
        {"batch per rank", "local_batch", "%.0f"},
        {"parameters", "parameters", "%.0f"},
        {"data", "data", "%g"},
        {"training samples", "train_samples", "%.0f"},
        {"validation samples", "val_samples", "%.0f"},
        {"learning rate", "lr_rule", "%g"},
        {"target", "target", "%g"},
        {"steps", "steps", "%.0f"},
        {"epochs", "epochs", "%.0f"},
        {"wall time of the steps (s)", "wall_s", "%.2f"},
        {"training samples/s", "samples_per_s", "%.1f"},
        {"MLPerf time to train (s)", "time_to_train_s", "%.2f"},
        {"time to first step (s)", "time_to_first_step_s", "%.2f"},
        {"peak host memory (MiB)", "peak_host_memory_mib", "%.1f"},
        {"last validation loss", "last.loss", "%.4f"},
        {"best validation loss", "best.loss", "%.4f"},
        {"... at step", "best.loss_step", "%.0f"},
        {"target metric", "best.metric", "%g"},
        {"best value", "best.value", "%.4f"},
        {"... at step", "best.step", "%.0f"},
        {"exit code", "exit_code", "%.0f"},
    };
    fputs("<section><h2>Run summary</h2>\n<table><tr><th></th>", o);
    for (int r = 0; r < s->nrun; r++) {
        fprintf(o, "<th><span class=\"sw\" style=\"background:%s\"></span>", rp_run_color(r));
        html_escape(o, s->run[r].label);
        fputs("</th>", o);
    }
    fputs("</tr>\n", o);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        if (!strncmp(rows[i].key, "time_to_", 8) && !any_run_has(s, rows[i].key)) continue;  // log.mlperf only
        fprintf(o, "<tr><td>%s</td>", rows[i].label);
        for (int r = 0; r < s->nrun; r++) cell(o, &s->run[r], rows[i].key, rows[i].fmt);
        fputs("</tr>\n", o);
    }
    for (int m = 0; m < s->nmetric; m++) {
        char key[96];
        snprintf(key, sizeof key, "last.%s", s->metric[m]);
        fputs("<tr><td>last validation ", o);
        html_escape(o, s->metric[m]);
        fputs("</td>", o);
        for (int r = 0; r < s->nrun; r++) cell(o, &s->run[r], key, "%.4f");
        fputs("</tr>\n", o);
    }
    fputs("<tr><td>peak device memory (MiB)</td>", o);
    for (int r = 0; r < s->nrun; r++) {
        const rp_kv *kv = rp_get(&s->run[r], "peak_device_memory_mib");
        if (kv && !isnan(kv->num)) fprintf(o, "<td class=\"n\">%.1f</td>", kv->num);
        else fputs("<td class=\"n\">n/a</td>", o);
    }
    fputs("</tr>\n<tr><td>directory</td>", o);
    for (int r = 0; r < s->nrun; r++) {
        fputs("<td>", o);
        html_escape(o, s->run[r].dir);
        fputs("</td>", o);
    }
    fputs("</tr>\n</table>\n</section>\n", o);
}

static void page(FILE *o, const rp_set *s) {
    char when[64];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>galley report: ", o);
    html_escape(o, s->run[0].label);
    if (s->nrun > 1) fprintf(o, " and %d more", s->nrun - 1);
    fprintf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n<h1>galley report</h1>\n", css);
    fprintf(o, "<p class=\"sub\">%d run%s, written %s by <code>galley report</code>.</p>\n<ul class=\"runs\">\n",
            s->nrun, s->nrun == 1 ? "" : "s", when);
    for (int r = 0; r < s->nrun; r++) {
        const rp_run *run = &s->run[r];
        const rp_kv *st = rp_get(run, "status");
        fprintf(o, "<li><span class=\"sw\" style=\"background:%s\"></span><b>", rp_run_color(r));
        html_escape(o, run->label);
        fputs("</b> &mdash; ", o);
        html_escape(o, st && st->str ? st->str : "no summary (still running, or stopped)");
        fprintf(o, ", %d training records, %d evaluations</li>\n", run->ntrain, run->neval);
    }
    fputs("</ul>\n", o);

    chart(o, s, "Loss", "loss", pick_loss, 0, true, true, true);
    for (int m = 0; m < s->nmetric; m++)
        if (any_value(s, pick_metric, m, false) || any_value(s, pick_metric, m, true))
            chart(o, s, metric_title(s->metric[m]), s->metric[m], pick_metric, m, true, true, false);
    chart(o, s, "Learning rate", "learning rate", pick_lr, 0, true, false, false);
    chart(o, s, "Throughput", "training samples/s", pick_sps, 0, true, false, false);
    breakdown(o, s);
    summary_table(o, s);
    fputs("<section><h2>Recipe</h2>\n", o);
    for (int r = 0; r < s->nrun; r++) {
        fprintf(o, "<details%s><summary><span class=\"sw\" style=\"background:%s\"></span>", r == 0 ? " open" : "",
                rp_run_color(r));
        html_escape(o, s->run[r].label);
        fputs("</summary>\n<pre>", o);
        html_escape(o, s->run[r].recipe ? s->run[r].recipe : "(no recipe.yaml)");
        fputs("</pre></details>\n", o);
    }
    fputs("</section>\n</main>\n</body>\n</html>\n", o);
}

int report_write(char *const *runs, int nruns, const char *out_path, FILE *err) {
    rp_set s;
    if (rp_load(&s, runs, nruns, err) != 0) {
        rp_free(&s);
        return GL_EXIT_RUNTIME;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *o = fopen(tmp, "w");
    if (!o) {
        fprintf(err, "galley report: cannot create %s: %s\n", tmp, strerror(errno));
        rp_free(&s);
        return GL_EXIT_RUNTIME;
    }
    page(o, &s);
    int bad = ferror(o);
    if (fclose(o) != 0 || bad || rename(tmp, out_path) != 0) {
        fprintf(err, "galley report: cannot write %s: %s\n", out_path, strerror(errno));
        remove(tmp);
        rp_free(&s);
        return GL_EXIT_RUNTIME;
    }
    rp_free(&s);
    return GL_EXIT_OK;
}
