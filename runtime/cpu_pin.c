/* cpu_pin.c — see cpu_pin.h. */
#define _GNU_SOURCE
#include "runtime/cpu_pin.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t allowed_once = PTHREAD_ONCE_INIT;
static cpu_set_t allowed_set;
static int allowed[CPU_SETSIZE];
static int n_allowed;
static int enabled;
static _Thread_local int t_pinned = -1;

static void read_allowed(void) {
    const char *e = getenv("MSTUNE_PIN_THREADS");
    enabled = !(e && strcmp(e, "0") == 0);
    CPU_ZERO(&allowed_set);
    if (sched_getaffinity(0, sizeof(allowed_set), &allowed_set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed_set)) allowed[n_allowed++] = c;
}

int mst_cpu_pin_self(int index) {
    pthread_once(&allowed_once, read_allowed);
    if (!enabled || n_allowed < 2 || index < 0) return -1;
    const int cpu = allowed[index % n_allowed];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) return -1;
    return t_pinned = cpu;
}

void mst_cpu_unpin_self(void) {
    pthread_once(&allowed_once, read_allowed);
    if (!enabled || n_allowed < 2) return;
    pthread_setaffinity_np(pthread_self(), sizeof(allowed_set), &allowed_set);
    t_pinned = -1;
}

int mst_cpu_pin_count(void) {
    pthread_once(&allowed_once, read_allowed);
    return enabled ? n_allowed : 0;
}

int mst_cpu_pinned_self(void) { return t_pinned; }

int mst_cpu_pin_index_here(void) {
    pthread_once(&allowed_once, read_allowed);
    const int cpu = sched_getcpu();
    for (int i = 0; i < n_allowed; i++)
        if (allowed[i] == cpu) return i;
    return 0;
}
