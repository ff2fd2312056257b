// runlog.c: the run log's streams and files: the console tee, recipe.yaml, metrics.jsonl and
// the TensorBoard events; the live and plain progress lines. (The banner and the end summary
// are in summary.c.)
#include "galley/runlog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "galley/check.h"

#define LINE_CAP 1024
#define JSON_CAP 4096
#define IOBUF 16384  // each of: tee out, tee err, console.log, metrics.jsonl

double runlog_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void clear_live(gl_runlog *lg) {
    if (!lg->live_shown) return;
    fputs("\r\033[K", lg->term);
    fflush(lg->term);
    lg->live_shown = false;
}

// The tee: every byte printed through lg->out or lg->err goes to the terminal (after clearing a
// live line) and into console.log.
static ssize_t tee_write(void *cookie, const char *buf, size_t n) {
    gl_runlog_tee *t = cookie;
    gl_runlog *lg = t->lg;
    if (t->term) {
        clear_live(lg);
        fwrite(buf, 1, n, t->term);  // a closed pipe is not a reason to stop training
        fflush(t->term);
    }
    if (t->keep && lg->console) {
        if (fwrite(buf, 1, n, lg->console) != n || fflush(lg->console) != 0) lg->write_failed = true;
    }
    return (ssize_t)n;
}

static FILE *tee_open(gl_runlog_tee *t, char *buf) {
    cookie_io_functions_t io = {.write = tee_write};
    FILE *f = fopencookie(t, "w", io);
    GL_CHECK(f, "fopencookie failed");
    setvbuf(f, buf, _IOLBF, IOBUF);
    return f;
}

static FILE *open_in(gl_runlog *lg, const char *name, char *buf, FILE *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", lg->dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(err, "galley: error: cannot create %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (buf) setvbuf(f, buf, _IOFBF, IOBUF);
    return f;
}

// recipe.yaml, and the same text for TensorBoard (indented: a Markdown code block).
static int write_recipe(gl_runlog *lg, const recipe_t *r, FILE *err) {
    FILE *f = open_in(lg, "recipe.yaml", NULL, err);
    if (!f) return -1;
    fprintf(f, "# resolved by galley from %s (hash %016llx); `galley train` this file to run it again\n", r->file,
            (unsigned long long)recipe_hash(r));
    recipe_emit(r, f);
    if (fclose(f) != 0) return fprintf(err, "galley: error: cannot write %s/recipe.yaml\n", lg->dir), -1;
    if (!lg->tb_open) return 0;
    char *text = NULL, *md = NULL;
    size_t len = 0, mlen = 0;
    FILE *m = open_memstream(&text, &len), *o = open_memstream(&md, &mlen);
    GL_CHECK(m && o, "open_memstream failed");
    recipe_emit(r, m);
    fclose(m);
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) fprintf(o, "    %s\n", l);
    fclose(o);
    tfevents_text(&lg->tb, 0, lg->wall0, "recipe", md);
    tfevents_flush(&lg->tb);
    free(text);
    free(md);
    return 0;
}

int runlog_open(gl_runlog *lg, const recipe_t *r, const char *run_dir, int rank, FILE *out, FILE *err) {
    memset(lg, 0, sizeof *lg);
    lg->rank = rank;
    lg->active = rank == 0;
    lg->term = out, lg->term_err = err;
    lg->every = r->log.every;
    lg->wall0 = unix_now();
    lg->line_cap = LINE_CAP, lg->json_cap = JSON_CAP;
    lg->line = gl_xmalloc(LINE_CAP);
    lg->json = gl_xmalloc(JSON_CAP);
    lg->iobuf = gl_xmalloc(4 * IOBUF);
    lg->tty = lg->active && isatty(fileno(out));
    lg->width = 80;
    struct winsize ws;
    if (lg->tty && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) lg->width = ws.ws_col;
    lg->tee_out = (gl_runlog_tee){lg, lg->active ? out : NULL, lg->active};
    lg->tee_err = (gl_runlog_tee){lg, err, lg->active};
    lg->out = tee_open(&lg->tee_out, lg->iobuf);
    lg->err = tee_open(&lg->tee_err, lg->iobuf + IOBUF);
    if (!lg->active || (!run_dir && !r->log.files)) return GL_EXIT_OK;

    char msg[4400];
    if (rundir_make(lg->dir, sizeof lg->dir, run_dir, r->log.dir, r->name, msg, sizeof msg) != 0) {
        fprintf(err, "galley: error: %s\n  hint: %s\n", msg,
                run_dir ? "give --run-dir a new directory you can write" :
                          "set log.dir to a directory you can write, or log.files=false to keep no files");
        lg->dir[0] = 0;
        return run_dir && strstr(msg, "already holds") ? GL_EXIT_USAGE : GL_EXIT_RUNTIME;
    }
    lg->console = open_in(lg, "console.log", lg->iobuf + 2 * IOBUF, err);
    lg->jsonl = open_in(lg, "metrics.jsonl", lg->iobuf + 3 * IOBUF, err);
    if (!lg->console || !lg->jsonl) return GL_EXIT_RUNTIME;
    if (tfevents_open(&lg->tb, lg->dir, lg->wall0, msg, sizeof msg) != 0) {
        fprintf(err, "galley: error: %s\n", msg);
        return GL_EXIT_RUNTIME;
    }
    lg->tb_open = true;
    if (write_recipe(lg, r, err) != 0) return GL_EXIT_RUNTIME;
    return GL_EXIT_OK;
}

// "1234", "12.3k", "1.23M"
static void format_rate_short(double v, char *buf, size_t len) {
    if (v < 1e4) format_rate(v, buf, len);
    else if (v < 1e6) snprintf(buf, len, "%.1fk", v / 1e3);
    else snprintf(buf, len, "%.2fM", v / 1e6);
}

void runlog_live(gl_runlog *lg, const gl_logpoint *p, double now) {
    if (!lg->tty) return;
    const gl_runinfo *in = &lg->info;
    enum { BAR = 12 };
    char bar[BAR + 4], eta[32], rate[32], metric[48] = "";
    double left = p->step > 0 ? p->time / (double)p->step * (double)(in->total_steps - p->step) : NAN;
    format_duration(left, eta, sizeof eta);
    format_rate_short(p->samples_per_s, rate, sizeof rate);
    int mm = in->main_metric;
    for (int i = 0; i < p->m.n; i++)
        if (p->m.id[i] == mm) snprintf(metric, sizeof metric, " %s %.4f", metric_short(mm), p->m.v[i]);
    int64_t epochs = in->steps_per_epoch > 0 ? (in->total_steps + in->steps_per_epoch - 1) / in->steps_per_epoch : 0;
    char tail[256];
    int n = snprintf(tail, sizeof tail, " %lld/%lld | loss %.4f%s | %s samples/s | ETA %s", (long long)p->epoch_step,
                     (long long)p->epoch_steps, p->loss, metric, rate, eta);
    // The bar only when the line still fits the terminal: \r cannot go back over a wrapped line.
    int room = lg->width - 1 - n - 16;
    bar[0] = 0;
    if (room >= BAR + 3) {
        int fill = p->epoch_steps > 0 ? (int)(BAR * p->epoch_step / p->epoch_steps) : 0;
        bar[0] = ' ', bar[1] = '[';
        for (int i = 0; i < BAR; i++) bar[2 + i] = i < fill ? '#' : '.';
        bar[BAR + 2] = ']', bar[BAR + 3] = 0;
    }
    n = snprintf(lg->line, lg->line_cap, "epoch %lld/%lld%s%s", (long long)p->epoch, (long long)epochs, bar, tail);
    if (n >= lg->width) lg->line[lg->width - 1] = 0;
    fputs("\r", lg->term);
    fputs(lg->line, lg->term);
    fputs("\033[K", lg->term);
    fflush(lg->term);
    lg->live_shown = true;
    lg->live_at = now;
}

static void write_json(gl_runlog *lg, const gl_logpoint *p, const char *kind) {
    if (!lg->jsonl) return;
    size_t n = format_record(p, kind, lg->wall0 + p->time, lg->json, lg->json_cap);
    if (!n) return;
    lg->json[n] = '\n';
    if (fwrite(lg->json, 1, n + 1, lg->jsonl) != n + 1 || fflush(lg->jsonl) != 0) lg->write_failed = true;
}

// TensorBoard tag "prefix/name" for a metric.
static void tb_metric(gl_runlog *lg, const char *prefix, const char *name, double v) {
    char tag[96];
    snprintf(tag, sizeof tag, "%s/%s", prefix, name);
    tfevents_scalar(&lg->tb, tag, v);
}

void runlog_train(gl_runlog *lg, const gl_logpoint *p, bool print) {
    if (!lg->active) return;
    format_progress(lg, p, lg->line, lg->line_cap);
    if (!print) {
    } else if (!lg->tty) {
        fputs(lg->line, lg->out);
        fputc('\n', lg->out);
        fflush(lg->out);
    } else if (lg->console) {  // the terminal shows the live line; the copy keeps the plain one
        if (fprintf(lg->console, "%s\n", lg->line) < 0 || fflush(lg->console) != 0) lg->write_failed = true;
    }
    write_json(lg, p, "train");
    if (!lg->tb_open) return;
    tb_metric(lg, "train", "loss", p->loss);
    for (int i = 0; i < p->m.n; i++) tb_metric(lg, "train", metrics_name(p->m.id[i]), p->m.v[i]);
    tfevents_scalar(&lg->tb, "train/lr", p->lr);
    tfevents_scalar(&lg->tb, "throughput/samples_per_s", p->samples_per_s);
    for (int i = 0; i < PHASE_COUNT; i++) tb_metric(lg, "time", phase_name(i), p->phase[i]);
    tfevents_event(&lg->tb, p->step, lg->wall0 + p->time);
    tfevents_flush(&lg->tb);
}

void runlog_eval(gl_runlog *lg, const gl_logpoint *p) {
    if (!lg->active) return;
    write_json(lg, p, "eval");
    if (!lg->tb_open) return;
    tb_metric(lg, "val", "loss", p->loss);
    for (int i = 0; i < p->m.n; i++) tb_metric(lg, "val", metrics_name(p->m.id[i]), p->m.v[i]);
    tfevents_event(&lg->tb, p->step, lg->wall0 + p->time);
    tfevents_flush(&lg->tb);
}

int runlog_close(gl_runlog *lg) {
    clear_live(lg);
    fflush(lg->out);
    fflush(lg->err);
    if (lg->tb_open && tfevents_close(&lg->tb) != 0) lg->write_failed = true;
    lg->tb_open = false;
    if (lg->jsonl && fclose(lg->jsonl) != 0) lg->write_failed = true;
    lg->jsonl = NULL;
    int rc = 0;
    if (lg->write_failed && lg->dir[0]) {
        fprintf(lg->term_err, "galley: warning: some writes to the run directory %s failed (disk full?); its files "
                              "may be incomplete\n", lg->dir);
        rc = -1;
    }
    fclose(lg->out);
    fclose(lg->err);
    if (lg->console && fclose(lg->console) != 0) rc = -1;
    lg->console = NULL;
    free(lg->line);
    free(lg->json);
    free(lg->iobuf);
    lg->line = lg->json = lg->iobuf = NULL;
    return rc;
}
