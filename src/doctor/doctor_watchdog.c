// doctor_watchdog.c: a thread that ends the process when a wait nothing else can bound (MPI_Init
// waiting for a node that never comes, MPI_Finalize waiting for one that left) takes too long:
// it prints its message on the given descriptor and exits 1, so `galley doctor` never hangs.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "doctor/doctor.h"
#include "galley/check.h"

struct doctor_watchdog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopped;
    struct timespec deadline;  // CLOCK_REALTIME, as pthread_cond_timedwait takes it
    int fd;
    char msg[512];
};

static void *watchdog_thread(void *arg) {
    doctor_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->stopped && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cv, &w->mu, &w->deadline);
    int fire = !w->stopped;
    pthread_mutex_unlock(&w->mu);
    if (fire) {
        ssize_t n = write(w->fd, w->msg, strlen(w->msg));
        (void)n;
        _exit(GL_EXIT_RUNTIME);
    }
    return NULL;
}

doctor_watchdog *doctor_watchdog_start(double seconds, int fd, const char *msg) {
    doctor_watchdog *w = gl_xcalloc(1, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    clock_gettime(CLOCK_REALTIME, &w->deadline);
    w->deadline.tv_sec += (time_t)seconds;
    w->deadline.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (w->deadline.tv_nsec >= 1000000000L) w->deadline.tv_sec++, w->deadline.tv_nsec -= 1000000000L;
    w->fd = fd;
    snprintf(w->msg, sizeof w->msg, "%s", msg);
    if (pthread_create(&w->thread, NULL, watchdog_thread, w) != 0) {  // no guard: carry on without one
        free(w);
        return NULL;
    }
    return w;
}

void doctor_watchdog_stop(doctor_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopped = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
