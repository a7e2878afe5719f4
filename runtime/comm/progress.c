/* progress.c — the communicator's progress thread (runtime.comm.progress_thread; see comm.h).
 * OpenMPI moves a non-blocking collective only inside MPI calls, so without this thread a
 * bucket's all-reduce advances only when the main thread polls it, and over shared memory the
 * poll runs the copy itself. With it, the all-reduces handed over (mst_comm_iallreduce_*) are
 * tested on this thread, in a loop while any is in flight (yielding the core between sweeps),
 * asleep on a condition variable otherwise; the caller's poll and wait only read a record's
 * atomic state. Trade-off: a second thread per rank that needs a core while a transfer is in
 * flight: on a machine with fewer cores than ranks x threads it takes that time from backward.
 *
 * Ownership: a record is pushed by the caller, tested and completed by the thread, and freed by
 * the caller once it has read the final state; the thread never touches it after the store. */
#include "runtime/comm/comm.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/threadpool.h"

struct mst_comm_prog_rec {
    mst_comm_req inner;         /* the implementation's request: tested by the thread only */
    _Atomic int state;          /* 0 in flight, 1 complete, -1 failed (err set) */
    char err[512];
    struct mst_comm_prog_rec *next;
};

struct mst_comm_progress {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mst_comm_prog_rec *incoming;    /* pushed by the caller, taken by the thread (under mu) */
    bool stop;
    mst_comm shadow;                /* the thread's view of the communicator: its own err buffer */
    struct mst_comm_progress *next_running;
};

/* every running thread, so that MPI's finalize at exit stops them first */
static pthread_mutex_t g_running_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mst_comm_progress *g_running;

static void *progress_main(void *arg) {
    struct mst_comm_progress *p = arg;
    mst_prof_set_thread_name("comm progress");
    const uint32_t name = mst_prof_intern("allreduce.progress_thread");
    mst_comm_prog_rec *mine = NULL;
    bool busy = false;              /* inside a comm range: from the first record taken to the list running dry */
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!mine && !p->incoming && !p->stop) {
            if (busy) {
                mst_prof_end(MST_CAT_COMM, name, -1);
                mst_prof_thread_flush();
                busy = false;
            }
            pthread_cond_wait(&p->cv, &p->mu);
        }
        while (p->incoming) {
            mst_comm_prog_rec *r = p->incoming;
            p->incoming = r->next;
            r->next = mine;
            mine = r;
        }
        const bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        if (!busy) {
            mst_prof_begin(MST_CAT_COMM, name, -1);
            busy = true;
        }
        for (mst_comm_prog_rec **pp = &mine; *pp;) {
            mst_comm_prog_rec *r = *pp;
            int t = p->shadow.ops->test(&p->shadow, &r->inner);
            if (t == 0) {
                pp = &r->next;
                continue;
            }
            *pp = r->next;
            if (t < 0) snprintf(r->err, sizeof(r->err), "%s", p->shadow.err);
            atomic_store_explicit(&r->state, t > 0 ? 1 : -1, memory_order_release);
        }
        if (mine) sched_yield();
    }
    for (mst_comm_prog_rec *r = mine, *n; r; r = n) {      /* stopped with collectives in flight */
        n = r->next;
        snprintf(r->err, sizeof(r->err), "rank %d: the communicator's progress thread stopped with a collective in flight",
                 p->shadow.rank);
        atomic_store_explicit(&r->state, -1, memory_order_release);
    }
    if (busy) mst_prof_end(MST_CAT_COMM, name, -1);
    mst_prof_thread_flush();
    return NULL;
}

static void progress_stop(struct mst_comm_progress *p) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->tid, NULL);
    pthread_mutex_lock(&g_running_mu);
    for (struct mst_comm_progress **q = &g_running; *q; q = &(*q)->next_running)
        if (*q == p) {
            *q = p->next_running;
            break;
        }
    pthread_mutex_unlock(&g_running_mu);
    /* records still pushed but never taken: failed, for their waiters */
    for (mst_comm_prog_rec *r = p->incoming, *n; r; r = n) {
        n = r->next;
        snprintf(r->err, sizeof(r->err), "rank %d: the communicator's progress thread stopped with a collective in flight",
                 p->shadow.rank);
        atomic_store_explicit(&r->state, -1, memory_order_release);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

mst_status mst_comm_progress_thread(mst_comm *c, bool on) {
    if (!on) {
        if (c->progress) progress_stop(c->progress);
        c->progress = NULL;
        return MST_OK;
    }
    if (c->progress || c->size <= 1) return MST_OK;      /* one process: every collective completes at once */
    if (!c->threads_ok) {
        snprintf(c->err, sizeof(c->err),
                 "rank %d: runtime.comm.progress_thread needs a communicator callable from several threads (MPI_THREAD_MULTIPLE), "
                 "and %s does not provide it", c->rank, c->ops->name);
        return MST_ERR_ARG;
    }
    struct mst_comm_progress *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(c->err, sizeof(c->err), "rank %d: out of memory for the progress thread", c->rank);
        return MST_ERR_OOM;
    }
    p->shadow = *c;
    p->shadow.progress = NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    sigset_t old;
    mst_threadpool_block_signals(&old);     /* as the pool's and the loader's threads: stop signals go to the training thread */
    int rc = pthread_create(&p->tid, NULL, progress_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        snprintf(c->err, sizeof(c->err), "rank %d: cannot start the progress thread: %s", c->rank, strerror(rc));
        return MST_ERR_IO;
    }
    pthread_mutex_lock(&g_running_mu);
    p->next_running = g_running;
    g_running = p;
    pthread_mutex_unlock(&g_running_mu);
    c->progress = p;
    return MST_OK;
}

void mst_comm_progress_stop_all(void) {
    for (;;) {
        pthread_mutex_lock(&g_running_mu);
        struct mst_comm_progress *p = g_running;
        pthread_mutex_unlock(&g_running_mu);
        if (!p) return;
        progress_stop(p);       /* unlinks it; its communicator's pointer dangles only until exit */
    }
}

mst_comm_prog_rec *mst_comm_prog_rec_new(void) { return calloc(1, sizeof(mst_comm_prog_rec)); }

mst_comm_req *mst_comm_prog_rec_req(mst_comm_prog_rec *r) { return &r->inner; }

void mst_comm_prog_push(mst_comm *c, mst_comm_prog_rec *r) {
    struct mst_comm_progress *p = c->progress;
    atomic_store_explicit(&r->state, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    r->next = p->incoming;
    p->incoming = r;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int mst_comm_prog_state(mst_comm *c, mst_comm_prog_rec *r) {
    int s = atomic_load_explicit(&r->state, memory_order_acquire);
    if (s < 0) snprintf(c->err, sizeof(c->err), "%s", r->err);
    return s;
}
