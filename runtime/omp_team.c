/* omp_team.c — see omp_team.h. libgomp's ABI entry GOMP_parallel is what `#pragma omp parallel`
 * compiles to (GCC >= 4.9); it and omp_get_thread_num are looked up with dlsym, so the runtime
 * neither links libgomp nor is built with -fopenmp. */
#include "runtime/omp_team.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cpu_pin.h"
#include "runtime/threadpool.h"

typedef void (*gomp_parallel_fn)(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
typedef int (*omp_thread_num_fn)(void);

static gomp_parallel_fn gomp_parallel;
static omp_thread_num_fn omp_thread_num;
static atomic_bool ready;
static pthread_once_t attach_once = PTHREAD_ONCE_INIT;

static void nothing(void *arg) { (void)arg; }

bool mst_omp_team_wanted(void) {
    const char *pref = getenv("MSTUNE_POOL_TEAM");
    return !(pref && strcmp(pref, "own") == 0);
}

static void attach(void) {
    if (!mst_omp_team_wanted()) return;
    void *h = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return;
    void *par = dlsym(h, "GOMP_parallel"), *num = dlsym(h, "omp_get_thread_num");
    if (!par || !num) return;   /* the handle stays open: libgomp was loaded by someone else anyway */
    memcpy(&gomp_parallel, &par, sizeof(par));
    memcpy(&omp_thread_num, &num, sizeof(num));
    /* libgomp starts a team's threads at the first region that needs them, and a thread inherits
     * the signal mask of the thread that starts it: start them now, with the signals the pool's
     * own workers block blocked too. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    sigset_t old;
    mst_threadpool_block_signals(&old);
    gomp_parallel(nothing, NULL, (unsigned)(cpus > 1 && cpus < 1024 ? cpus : 1), 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store(&ready, true);
}

bool mst_omp_team_attach(void) {
    pthread_once(&attach_once, attach);
    return atomic_load(&ready);
}

bool mst_omp_team_ready(void) { return atomic_load_explicit(&ready, memory_order_acquire); }

static void pin_member(void *arg) {
    (void)arg;
    mst_cpu_pin_self(omp_thread_num());
}

static void unpin_member(void *arg) {
    (void)arg;
    mst_cpu_unpin_self();
}

void mst_omp_team_pin(bool on) {
    if (!mst_omp_team_ready()) {        /* the caller alone */
        if (on) mst_cpu_pin_self(0);
        else mst_cpu_unpin_self();
        return;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    gomp_parallel(on ? pin_member : unpin_member, NULL, (unsigned)(cpus > 1 && cpus < 1024 ? cpus : 1), 0);
}

void mst_omp_team_run(int n, void (*fn)(void *), void *arg) {
    if (n < 1) n = 1;
    gomp_parallel(fn, arg, (unsigned)n, 0);
}

int mst_omp_team_thread(void) { return mst_omp_team_ready() ? omp_thread_num() : 0; }
