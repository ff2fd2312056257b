// train.c: the run, as its phases. Open everything (the backend, the checkpoint to continue,
// the data and the model planned then allocated once, the run directory), say what will run,
// then step: shuffle at each epoch, gather a batch, forward, loss, backward, optimizer at the
// scheduled learning rate; evaluate on the held-out split each epoch (or every eval_every
// steps) and stop at the target; finish with the summary. Each phase is timed; the run log
// (runlog.h) shows progress and keeps the run directory. run.h holds the run's state and the
// phases' files.
// Across ranks (dist.h) every rank runs this loop on its part of each batch; train_step sums
// gradients, losses, metrics and the stop flags, so every rank takes the same decisions at the
// same step. Checkpoints: every N steps or minutes, at the end, and when a signal or
// train.time_limit stops the run (exit 4); --resume continues one bitwise.
#include "galley/train.h"

#include <sched.h>
#include <unistd.h>

#include "galley/check.h"
#include "train/run.h"
#include "train/run_hang.h"

int train_threads(const recipe_t *r) {
    if (r->train.threads > 0) return (int)r->train.threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);  // honours Slurm binding
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int train_run(const recipe_t *r, const train_opts *opts, FILE *out, FILE *err, train_result *res) {
    gl_run u;
    run_init(&u, r, opts, out, err, res);
    train_signals_install();  // from here a signal stops the run at its next step (the first, if need be)
    int code = run_open(&u);
    if (code == GL_EXIT_OK) {
        run_banner(&u);
        run_start(&u);
        if (!u.opts->evaluate) run_hang_arm(&u);  // a hang from here on may checkpoint the run
        // `galley eval`: one pass over the validation split with the checkpoint's weights.
        code = u.opts->evaluate ? run_evaluate(&u) : run_loop(&u);
        code = run_finish(&u, code);
        run_hang_disarm(&u);
    }
    run_close(&u);
    train_signals_restore();
    return code;
}
