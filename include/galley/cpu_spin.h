// cpu_spin.h: how long the CPU backend's idle OpenMP threads spin before they sleep, chosen
// between training steps from whether this process has its cores to itself and from which spin
// measures faster (cpu_spin.c).
#ifndef GALLEY_CPU_SPIN_H
#define GALLEY_CPU_SPIN_H

#include <stddef.h>

// libgomp spin counts (about 100 spins per microsecond): short ~30 us, long ~3 ms (libgomp's own
// default, what PyTorch's wheels run with).
#define CPU_SPIN_SHORT 3000ULL
#define CPU_SPIN_LONG 300000ULL
// A window closes at the first step end at least this long after it opened.
#define CPU_SPIN_WINDOW_S 0.25
// Run-queue wait, in cores (thread-seconds waiting for a CPU per second), above which the cores
// count as shared (alone: ~0.03 on 2 cores; beside a second 2-thread training: 0.7 to 1.0) and
// below which a window counts as quiet. Two quiet windows in a row allow a trial of the long spin.
// (A window in between is neither: it keeps the mode and breaks the row.)
#define CPU_SPIN_SHARED_CORES 0.25
#define CPU_SPIN_QUIET_CORES 0.10
#define CPU_SPIN_QUIET_WINDOWS 2
// A trial: this many windows, long and short by turns (long first). The long spin stays only if
// its best window's seconds per sample beat the short one's by CPU_SPIN_MARGIN, and only while no
// later window falls behind the short one's by as much. Where a window stretches to several
// seconds (long steps), a short window right after a long one may still carry the long spin's
// after-effect (on the EPYC VM: ~2 s to recover), which favours long; fell_behind then corrects.
#define CPU_SPIN_TRIAL_WINDOWS 4
#define CPU_SPIN_MARGIN 0.05
// Windows from one trial's verdict to the next trial (which opens as the last of them closes):
// the first wait, CPU_SPIN_HOLD_GROW times longer after each trial, up to the most (~4 min);
// shared cores start it again from the first. Steep, because on the EPYC VM a trial's long
// windows cost more than themselves: the small CNN ran ~35% slower for 1-3 s after some trials.
#define CPU_SPIN_HOLD_FIRST 16
#define CPU_SPIN_HOLD_GROW 4
#define CPU_SPIN_HOLD_MOST 1024

// One run's state; cpu_spin_start fills it.
typedef struct gl_spin {
    int managed;                // 1: galley chooses (the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT)
    int threads;                // the OpenMP team size
    int lng;                    // 1: the long spin is in force
    int quiet;                  // quiet windows in a row
    int changes;                // mode changes so far
    int trial;                  // 0: no trial; else the trial window now open (1..CPU_SPIN_TRIAL_WINDOWS)
    double best_long, best_short;  // the last trial's fastest window in each mode (s per sample)
    int hold, hold_next;        // windows before the next trial may start; the wait after the next verdict
    int trials, long_won;       // trials decided, and how many the long spin won
    int fell_behind;            // times the long spin fell behind the short one's trial time (short came back)
    double t0, wait0;           // the open window's start (s) and its team's run-queue wait then (s)
    double step_s;              // the open window's steps' own time (s: without evaluation between them)
    double samples;             // the samples those steps trained
    double long_s, short_s;     // time spent in each mode (s)
    char why[96];               // why galley does not choose ("" when it does)
} gl_spin;

// Starts a run with `threads` OpenMP threads at time `now` (s): the short spin, and whether
// galley may change it (it does only with more than one thread, where the kernel reports
// run-queue delay and libgomp is linked in statically).
void cpu_spin_start(gl_spin *s, int threads, double now);
// After each training step that took step_s seconds over `samples` samples, ending at `now`:
// closes the window when it is due and sets the spin for the next one.
void cpu_spin_step(gl_spin *s, double now, double step_s, double samples);
// One closed window (dt s long, `wait_cores` thread-seconds of run-queue wait per second, its
// steps at `per_sample` s a sample): returns the mode for the next (1 long, 0 short) and updates
// s. No system calls (tests).
int cpu_spin_decide(gl_spin *s, double dt, double wait_cores, double per_sample);
// "idle threads: spun ~3 ms before sleeping for 96% of the training time ..." for the end of a run.
void cpu_spin_describe(const gl_spin *s, char *buf, size_t len);

#endif
