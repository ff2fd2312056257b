// summary.c: the start banner and the end summary, on the console and in summary.json (written
// at the start with status "running", rewritten at the end).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "galley/check.h"
#include "log/json.h"
#include "galley/runlog.h"

#define SUMMARY_CAP 16384

static void json_info(jbuf *b, const gl_runinfo *in) {
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)in->hash);
    jb_str(b, "name", in->name);
    jb_str(b, "recipe_file", in->recipe_file);
    jb_str(b, "recipe_hash", hash);
    jb_str(b, "device", in->device);
    jb_int(b, "ranks", in->ranks);
    jb_int(b, "threads", in->threads);
    jb_str(b, "precision", in->precision);
    jb_int(b, "global_batch", in->global_batch);
    jb_int(b, "local_batch", in->local_batch);
    jb_int(b, "parameters", in->parameters);
    jb_num(b, "mflops_per_sample", in->mflops);
    jb_str(b, "data", in->data);
    jb_int(b, "train_samples", in->train_samples);
    jb_int(b, "val_samples", in->val_samples);
    jb_int(b, "total_steps", in->total_steps);
    jb_int(b, "steps_per_epoch", in->steps_per_epoch);
    jb_str(b, "lr_rule", in->lr_rule);
    jb_str(b, "target", in->target[0] ? in->target : NULL);
    jb_str(b, "main_metric", metrics_name(in->main_metric));
}

static void json_metrics(jbuf *b, const char *key, double loss, const gl_metric_set *m) {
    jb_open(b, key, '{');
    jb_num(b, "loss", loss);
    for (int i = 0; i < m->n; i++) jb_num(b, metrics_name(m->id[i]), m->v[i]);
    jb_close(b);
}

// summary.json, through a temporary file so a reader never sees half of it.
static void write_summary(gl_runlog *lg, const gl_runsummary *s) {
    if (!lg->dir[0]) return;
    char *mem = gl_xmalloc(SUMMARY_CAP);
    jbuf b;
    jb_init(&b, mem, SUMMARY_CAP);
    jb_open(&b, NULL, '{');
    jb_str(&b, "status", s ? s->status : "running");
    json_info(&b, &lg->info);
    jb_fix(&b, "started", lg->wall0, 3);
    if (s) {
        jb_int(&b, "exit_code", s->exit_code);
        jb_int(&b, "steps", s->steps);
        jb_int(&b, "epochs", s->epochs);
        jb_int(&b, "samples", s->samples);
        jb_int(&b, "skipped_steps", s->skipped);
        jb_fix(&b, "wall_s", s->wall, 4);
        jb_open(&b, "time_breakdown", '{');
        for (int i = 0; i < PHASE_COUNT; i++) jb_fix(&b, phase_name(i), s->phase[i], 4);
        jb_close(&b);
        jb_num(&b, "samples_per_s", s->samples_per_s);
        if (s->mlperf) {  // log.mlperf: null until the target is reached
            jb_num(&b, "time_to_train_s", s->time_to_train);
            jb_num(&b, "time_to_first_step_s", s->time_to_first_step);
        }
        jb_num(&b, "peak_host_memory_mib", s->peak_host_mib);
        jb_num(&b, "peak_device_memory_mib", s->peak_device_mib);
        json_metrics(&b, "last", s->last_loss, &s->last);
        jb_open(&b, "best", '{');
        jb_num(&b, "loss", s->best_loss);
        jb_int(&b, "loss_step", s->best_loss_step);
        if (s->best_metric != METRIC_NONE) {
            jb_str(&b, "metric", metrics_name(s->best_metric));
            jb_num(&b, "value", s->best);
            jb_int(&b, "step", s->best_step);
        }
        jb_close(&b);
    }
    jb_close(&b);
    char path[4200], tmp[4220];
    snprintf(path, sizeof path, "%s/summary.json", lg->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = b.truncated ? NULL : fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", mem) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) lg->write_failed = true;
    free(mem);
}

void runlog_banner(gl_runlog *lg, const gl_runinfo *in) {
    lg->info = *in;
    FILE *o = lg->out;
    fprintf(o, "galley: training '%s' (recipe %s, hash %016llx)\n", in->name, in->recipe_file,
            (unsigned long long)in->hash);
    fprintf(o, "  device %s, %d rank%s, %d thread%s, %s | global batch %lld, %lld per rank | %lld parameters, "
               "%.3g MFLOPs/sample forward\n",
            in->device, in->ranks, in->ranks == 1 ? "" : "s", in->threads, in->threads == 1 ? "" : "s", in->precision,
            (long long)in->global_batch, (long long)in->local_batch, (long long)in->parameters, in->mflops);
    fprintf(o, "  data: %s, train %lld, val %lld samples (prepared in %.2f s)\n", in->data,
            (long long)in->train_samples, (long long)in->val_samples, in->data_seconds);
    fprintf(o, "  run: %lld steps (%lld per epoch%s) | %s\n", (long long)in->total_steps,
            (long long)in->steps_per_epoch, in->steps_set ? "; train.steps is set, so train.epochs is not used" : "",
            in->lr_rule);
    if (in->target[0]) fprintf(o, "  target: %s\n", in->target);
    if (lg->dir[0]) fprintf(o, "  run directory: %s\n", lg->dir);
    fflush(o);
    write_summary(lg, NULL);
}

static void print_metrics(FILE *o, double loss, const gl_metric_set *m) {
    fprintf(o, "loss %.4f", loss);
    for (int i = 0; i < m->n; i++) fprintf(o, "  %s %.4f", metric_short(m->id[i]), m->v[i]);
}

// log.mlperf: MLPerf's time to train (run_start to the evaluation that reached the target) and
// the time to the first step (set-up included).
static void mlperf_times(FILE *o, const gl_runsummary *s) {
    if (isnan(s->time_to_train)) fputs("  MLPerf time to train: n/a (target not reached)", o);
    else fprintf(o, "  MLPerf time to train: %.2f s (%.2f min)", s->time_to_train, s->time_to_train / 60);
    fprintf(o, " | time to first step %.2f s\n", s->time_to_first_step);
}

void runlog_finish(gl_runlog *lg, gl_runsummary *s) {
    double known = 0;
    for (int i = 0; i < PHASE_OTHER; i++) known += s->phase[i];
    s->phase[PHASE_OTHER] = s->wall - known;
    write_summary(lg, s);
    if (!lg->active || s->exit_code == GL_EXIT_RUNTIME) return;
    FILE *o = lg->out;
    char dev[64] = "n/a (CPU run)";
    if (s->on_device) snprintf(dev, sizeof dev, "not measured (nvidia-smi shows it)");
    if (!isnan(s->peak_device_mib)) snprintf(dev, sizeof dev, "%.1f MiB", s->peak_device_mib);
    fprintf(o, "done: %lld steps, %lld epoch%s in %.2f s | training %.1f samples/s | peak memory: host %.1f MiB, "
               "device %s\n",
            (long long)s->steps, (long long)s->epochs, s->epochs == 1 ? "" : "s", s->wall, s->samples_per_s,
            s->peak_host_mib, dev);
    static const char *const words[PHASE_COUNT] = {"data wait",  "forward",    "backward",   "communication",
                                                   "optimizer",  "checkpoint", "evaluation", "other"};
    static const char *const notes[PHASE_COUNT] = {
        "  (shuffling, gathering batches)", "  (incl. loss and metrics)", "", "  (reductions and the gradient wait backward did not hide)",
        "", "  (written by rank 0; the others wait)", "", "  (logging, bookkeeping)"};
    fprintf(o, "  time of the %.2f s of steps:\n", s->wall);
    for (int i = 0; i < PHASE_COUNT; i++)
        fprintf(o, "    %-14s %9.3f s %5.1f %%%s\n", words[i], s->phase[i],
                s->wall > 0 ? 100 * s->phase[i] / s->wall : 0.0, notes[i]);
    if (s->threads_note[0]) fprintf(o, "  %s\n", s->threads_note);
    if (s->input_note[0]) fprintf(o, "  %s\n", s->input_note);
    if (s->replay_note[0]) fprintf(o, "  %s\n", s->replay_note);
    if (s->optim_note[0]) fprintf(o, "  %s\n", s->optim_note);
    if (isnan(s->last_loss)) {
        fputs("  last val: none (no evaluation in this run)\n", o);
    } else {
        fputs("  last val ", o);
        print_metrics(o, s->last_loss, &s->last);
        fputc('\n', o);
    }
    if (s->iou[0]) fprintf(o, "  %s\n", s->iou);
    fprintf(o, "  best val loss %.4f at step %lld", s->best_loss, (long long)s->best_loss_step);
    if (s->best_metric != METRIC_NONE)
        fprintf(o, "; best val %s %.4f at step %lld", metrics_name(s->best_metric), s->best, (long long)s->best_step);
    fputc('\n', o);
    if (s->skipped)
        fprintf(o, "  %lld steps skipped for a non-finite loss or gradient (train.nonfinite: skip)\n",
                (long long)s->skipped);
    if (s->mlperf) mlperf_times(o, s);
    if (lg->dir[0]) fprintf(o, "  run directory: %s (galley report %s)\n", lg->dir, lg->dir);
    fflush(o);
}
