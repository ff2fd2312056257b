// signals.c: SIGTERM, SIGUSR1 (Slurm's --signal=USR1@90) and SIGINT ask the run to stop at the
// next step boundary with a checkpoint; a second SIGINT ends the process at once (the default
// action is restored after the first). The flag is the one piece of process-wide mutable state
// in galley: a signal handler can reach nothing else.
#include "galley/train.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig) {
    if (!pending_signal) pending_signal = sig;
    if (sig == SIGINT) signal(SIGINT, SIG_DFL);  // Ctrl-C twice: leave now
}

void train_signals_install(void) {
    pending_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // reads and waits in progress carry on; the loop checks the flag
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

void train_signals_restore(void) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

int train_signal_pending(void) { return pending_signal; }
