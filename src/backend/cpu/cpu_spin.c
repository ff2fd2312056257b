// cpu_spin.c: how long idle OpenMP threads spin before sleeping, from whether the cores are
// shared and from which spin measures faster.
//
// Why: a training step runs one parallel region per kernel. Between regions the workers wait;
// once they sleep, each region pays a futex wake and, on a virtual machine, the wake-up of a
// halted vCPU. libgomp's default spin (~3 ms) avoids that on some machines: +12-18% on the
// 2-thread small CNN, +5-14% on the MLP, +8-11% on CosmoFlow at 32^3 on a 2-core Sapphire Rapids
// VM. On others it costs: on a 2-core EPYC 9004 (Zen 4) VM the small CNN ran at 3,330-3,470
// samples/s spinning long (5 runs with OMP_WAIT_POLICY=active) against 4,760-5,430 spinning short
// (GOMP_SPINCOUNT=3000), while the MLP, cnn3d and vit-tiny did not care either way. Spinning long,
// it ran as fast as short for about a second, then 35% slower to the end; spinning short after
// that, it took about 2 s to come back. The guest saw no steal time and its threads on separate
// vCPUs, so the cause is below it (where the host puts busy vCPUs, presumably): not to be fixed
// here, only measured.
// And spinning threads hold cores that another process on the node needs: two 2-thread trainings
// on 2 cores each ran 2.4x slower spinning long than spinning short (~30 us, cpu_backend.c's
// default). So galley starts short and, every quarter second between steps, reads how long its
// threads sat runnable but waiting for a core (the kernel's run-queue delay,
// /proc/thread-self/schedstat). A window with wait brings the short spin back at once. After quiet
// windows it tries the long spin: windows long and short by turns, and the long spin stays only
// if it measures faster per step and while it stays so; the trial comes back after a while (later
// each time, sooner after the cores were shared).
//
// The spin count is libgomp's own variable, read at every wait (wait.h's do_spin): galley links
// libgomp statically, so it is reachable; a dynamic libgomp hides it, and then nothing changes.
// A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is always left as given.
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "galley/cpu_spin.h"

// libgomp's spin count (env.c); weak, so that a libgomp without it leaves the address NULL.
extern unsigned long long gomp_spin_count_var __attribute__((weak));

// Set by cpu_backend.c's constructor when galley chose the OpenMP wait policy itself.
#define SPIN_AUTO_ENV "GALLEY_OMP_SPIN_AUTO"

// This thread's run-queue wait so far in seconds (schedstat's second field, ns), or -1.
static double thread_wait_s(void) {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[128];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return -1;
    buf[got] = 0;
    char *end;
    strtoull(buf, &end, 10);  // time on a CPU
    if (end == buf) return -1;
    char *p = end;
    unsigned long long wait = strtoull(p, &end, 10);
    return end == p ? -1 : (double)wait * 1e-9;
}

// The team's run-queue wait: each thread reads its own (libgomp keeps the same threads for the
// same team size, so successive sums are comparable). -1 when any thread could not read it.
static double team_wait_s(int threads) {
    double sum = 0;
    int bad = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum, bad)
    {
        double w = thread_wait_s();
        if (w < 0) bad++;
        else sum += w;
    }
    return bad ? -1 : sum;
}

static void spin_set(unsigned long long count) { __atomic_store_n(&gomp_spin_count_var, count, __ATOMIC_RELAXED); }

void cpu_spin_start(gl_spin *s, int threads, double now) {
    memset(s, 0, sizeof *s);
    s->threads = threads;
    s->t0 = now;
    s->hold_next = CPU_SPIN_HOLD_FIRST;
    const char *auto_env = getenv(SPIN_AUTO_ENV);
    if (!auto_env || strcmp(auto_env, "1") != 0)
        snprintf(s->why, sizeof s->why, "OMP_WAIT_POLICY or GOMP_SPINCOUNT is set");
    else if (threads < 2)
        snprintf(s->why, sizeof s->why, "one thread");
    else if (&gomp_spin_count_var == NULL)
        snprintf(s->why, sizeof s->why, "libgomp is not linked statically");
    else if ((s->wait0 = team_wait_s(threads)) < 0)
        snprintf(s->why, sizeof s->why, "no run-queue delay in /proc/thread-self/schedstat");
    if (s->why[0]) return;
    s->managed = 1;
    spin_set(CPU_SPIN_SHORT);
}

// Sets the mode for the next window and counts the change.
static int spin_mode(gl_spin *s, int lng) {
    if (lng != s->lng) s->changes++;
    s->lng = lng;
    return lng;
}

// The open trial's window closed at `per_sample` s a sample: the mode for the next window.
static int trial_window(gl_spin *s, double per_sample) {
    double *best = s->lng ? &s->best_long : &s->best_short;
    if (*best == 0 || per_sample < *best) *best = per_sample;
    if (++s->trial <= CPU_SPIN_TRIAL_WINDOWS) return s->trial % 2;  // long, short, long, short
    // Long only where it was measurably faster (the trial's windows all had a step).
    int lng = s->best_long < s->best_short * (1 - CPU_SPIN_MARGIN);
    s->trials++;
    s->long_won += lng;
    s->hold = s->hold_next;
    s->hold_next = s->hold_next * CPU_SPIN_HOLD_GROW > CPU_SPIN_HOLD_MOST ? CPU_SPIN_HOLD_MOST
                                                                           : s->hold_next * CPU_SPIN_HOLD_GROW;
    s->trial = 0;
    return lng;
}

int cpu_spin_decide(gl_spin *s, double dt, double wait_cores, double per_sample) {
    if (s->lng) s->long_s += dt;
    else s->short_s += dt;
    int lng = s->lng;
    if (wait_cores > CPU_SPIN_SHARED_CORES) {
        // Shared cores: short at once; the next quiet spell tries the long spin again soon.
        s->quiet = 0, s->trial = 0, s->hold = 0, s->hold_next = CPU_SPIN_HOLD_FIRST;
        lng = 0;
    } else {
        // In between the two thresholds: not shared, but not quiet either (no trial opens on it).
        s->quiet = wait_cores < CPU_SPIN_QUIET_CORES ? s->quiet + 1 : 0;
        if (s->trial) return spin_mode(s, trial_window(s, per_sample));
        int behind = lng && per_sample > s->best_short * (1 + CPU_SPIN_MARGIN);
        if (behind) {
            // Long has fallen behind what the short spin measured (on a 2-core EPYC VM it ran as fast
            // as short for a second or so, then 35% slower): short until the next trial.
            s->fell_behind++;
            lng = 0;
        }
        if (s->hold > 0) s->hold--;
        if (!behind && s->hold == 0 && s->quiet >= CPU_SPIN_QUIET_WINDOWS) {
            s->trial = 1, s->best_long = 0, s->best_short = 0;
            lng = 1;
        }
    }
    return spin_mode(s, lng);
}

void cpu_spin_step(gl_spin *s, double now, double step_s, double samples) {
    if (!s->managed) return;
    s->step_s += step_s;
    s->samples += samples;
    if (now - s->t0 < CPU_SPIN_WINDOW_S) return;
    double w = team_wait_s(s->threads);
    // Unreadable, or the team changed under us (its wait went back), or the last reading was
    // unreadable: no verdict, the window starts again from this reading.
    if (w < 0 || s->wait0 < 0 || w < s->wait0 || s->samples <= 0) {
        s->wait0 = w;
        s->t0 = now, s->step_s = 0, s->samples = 0;
        return;
    }
    double dt = now - s->t0;
    int was = s->lng;
    if (cpu_spin_decide(s, dt, (w - s->wait0) / dt, s->step_s / s->samples) != was)
        spin_set(s->lng ? CPU_SPIN_LONG : CPU_SPIN_SHORT);
    s->t0 = now, s->step_s = 0, s->samples = 0;
    s->wait0 = w;
}

void cpu_spin_describe(const gl_spin *s, char *buf, size_t len) {
    if (!s->managed) {
        snprintf(buf, len, "idle threads: libgomp's spin as the environment sets it (%s)", s->why);
        return;
    }
    double all = s->long_s + s->short_s;
    snprintf(buf, len,
             "idle threads: spun ~3 ms before sleeping for %.0f%% of the training time, ~30 us for %.0f%%; %d "
             "trial%s of the long spin, faster in %d, fell behind later %d time%s; %d change%s",
             all > 0 ? 100 * s->long_s / all : 0.0, all > 0 ? 100 * s->short_s / all : 100.0, s->trials,
             s->trials == 1 ? "" : "s", s->long_won, s->fell_behind, s->fell_behind == 1 ? "" : "s", s->changes,
             s->changes == 1 ? "" : "s");
}
