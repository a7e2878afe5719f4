/* threadpool.c — see threadpool.h.
 *
 * One mutex and two condition variables: workers sleep on wake_cv until the region counter moves,
 * the caller sleeps on done_cv until the last chunk of its region is finished. Chunks are handed
 * out by compare-and-swap on a per-chunk word tagged with the region's number (2g open, 2g+1
 * taken), so a worker that wakes after its region is over — and so holds a stale copy of the
 * region — can never take a chunk of a later region. The trade-off against a spinning pool
 * (OpenMP's default, OpenBLAS's for a while after each call): a region pays a futex wake (about
 * 9 us of the caller's time on the 2-core VM of bench/bench_core) and a sleeping worker takes
 * 25-30 us more to start, instead of idle workers burning a core the data loader needs. So the
 * kernels open regions only for chunks of tens of microseconds or more, and the caller polls for
 * a short while (k_done_poll_ns) for chunks still being computed before it sleeps itself.
 *
 * Once oneDNN has loaded libgomp, regions run on its OpenMP team instead (runtime/omp_team.h):
 * the same chunks and claims, each team thread taking chunks from its own number on, so the
 * threads oneDNN's primitives just used — still spinning for a moment — take the pool's chunks
 * too, and the pool's own workers are never started (they start at the first region that does not
 * run on the team).
 */
#include "runtime/threadpool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/context.h"
#include "runtime/fpu.h"
#include "runtime/omp_team.h"
#include "runtime/status.h"

/* pthread calls on objects this file owns fail only when an invariant is broken. */
#define PT_CHECK(call) MST_ASSERT((call) == 0)

/* How long the caller polls for chunks still running on workers before it sleeps. Sleeping costs
 * a futex wait plus, when the worker finishes, a wake that took 25-30 us on the 2-core VM the
 * benchmarks ran on — as long as a whole mid-sized chunk. The caller only polls for chunks that
 * are being computed (never between regions), and a worker kept off its core by another thread
 * costs at most this much polling before the caller gives its core up. */
static const uint64_t k_done_poll_ns = 100 * 1000;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

typedef struct {
    mst_threadpool *pool;
    int home;                   /* the chunk this thread tries first */
    pthread_t thread;
} worker_slot;

/* A region as a thread sees it when it wakes. */
typedef struct {
    uint64_t gen;
    mst_parallel_fn fn;
    void *arg;
    int64_t n;
    int chunks;
} region;

struct mst_threadpool {
    int n_threads;              /* chunks per region at most; the caller counts */
    bool flush_denormals;       /* the creating thread's FTZ/DAZ mode, set on every worker (runtime/fpu.h) */
    int n_workers;              /* threads actually started (n_threads - 1 unless creation failed) */
    bool workers_tried;         /* start_workers ran: the first region not on the OpenMP team */
    worker_slot *workers;

    pthread_mutex_t lock;
    pthread_cond_t wake_cv;     /* workers: a region started, or shutdown */
    pthread_cond_t done_cv;     /* caller: the last chunk finished */
    region cur;                 /* the latest region the workers run. Guarded by lock */
    uint64_t gen;               /* regions opened so far, on the team or the workers (owner thread only) */
    uint32_t task_name;         /* the profile's "pool.task" */
    bool shutdown;

    _Atomic uint64_t *claim;    /* per chunk: 2g = open in region g, 2g + 1 = taken */
    atomic_int pending;         /* chunks of the current region not finished yet */
    atomic_bool active;         /* a region is running: a call now is nested and runs inline */
};

int mst_parallel_chunks(int n_threads, int64_t n, int64_t min_chunk) {
    if (min_chunk < 1) min_chunk = 1;
    if (n_threads <= 1 || n < 2 * min_chunk) return 1;
    int64_t c = n / min_chunk;
    return c < n_threads ? (int)c : n_threads;
}

void mst_parallel_range(int64_t n, int chunks, int i, int64_t *begin, int64_t *end) {
    int64_t base = n / chunks, rem = n % chunks;
    *begin = i * base + (i < rem ? i : rem);
    *end = *begin + base + (i < rem);
}

/* Take and run chunks of r, starting at `home` and going round; each chunk is run by exactly
 * one thread. `notify`: wake the caller after the last chunk (the workers' regions; a team
 * region ends at the team's own barrier). */
static void run_chunks(mst_threadpool *p, const region *r, int home, bool notify) {
    uint64_t open = 2 * r->gen;
    for (int k = 0; k < r->chunks; k++) {
        int i = (home + k) % r->chunks;
        uint64_t expect = open;
        if (atomic_load_explicit(&p->claim[i], memory_order_relaxed) != open ||
            !atomic_compare_exchange_strong(&p->claim[i], &expect, open + 1))
            continue;
        int64_t begin, end;
        mst_parallel_range(r->n, r->chunks, i, &begin, &end);
        r->fn(r->arg, begin, end, i);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && notify) {   /* the last one: the caller may be waiting */
            PT_CHECK(pthread_mutex_lock(&p->lock));
            PT_CHECK(pthread_cond_signal(&p->done_cv));
            PT_CHECK(pthread_mutex_unlock(&p->lock));
        }
    }
}

static void *worker_main(void *arg) {
    worker_slot *w = arg;
    mst_threadpool *p = w->pool;
    char name[32];
    snprintf(name, sizeof(name), "pool.%d", w->home);
    mst_prof_set_thread_name(name);
    mst_fpu_set_flush(p->flush_denormals);
    const uint32_t task = p->task_name;
    uint64_t seen = 0;
    for (;;) {
        PT_CHECK(pthread_mutex_lock(&p->lock));
        while (!p->shutdown && p->cur.gen == seen) PT_CHECK(pthread_cond_wait(&p->wake_cv, &p->lock));
        if (p->shutdown) {
            PT_CHECK(pthread_mutex_unlock(&p->lock));
            return NULL;
        }
        region r = p->cur;
        seen = r.gen;
        PT_CHECK(pthread_mutex_unlock(&p->lock));
        /* a worker's share of a kernel overlaps the caller's kernel range: the profile reports it
         * as hidden kernel time */
        mst_prof_op_begin(MST_CAT_KERNEL, task, -1);
        run_chunks(p, &r, w->home % r.chunks, true);
        mst_prof_op_end(MST_CAT_KERNEL, task, -1);
    }
}

void mst_threadpool_block_signals(sigset_t *old) {
    static const int k_blocked[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGCHLD, SIGUSR1, SIGUSR2};
    sigset_t block;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(k_blocked) / sizeof(k_blocked[0]); i++) sigaddset(&block, k_blocked[i]);
    PT_CHECK(pthread_sigmask(SIG_BLOCK, &block, old));
}

mst_threadpool *mst_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    mst_threadpool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->n_threads = n_threads;
    p->flush_denormals = mst_fpu_flushing();
    p->task_name = mst_prof_intern("pool.task");
    p->claim = calloc((size_t)n_threads, sizeof(*p->claim));
    p->workers = calloc((size_t)n_threads, sizeof(*p->workers));
    if (!p->claim || !p->workers) {
        free(p->claim);
        free(p->workers);
        free(p);
        return NULL;
    }
    for (int i = 0; i < n_threads; i++) atomic_init(&p->claim[i], 1);     /* taken in region 0 */
    atomic_init(&p->pending, 0);
    atomic_init(&p->active, false);
    PT_CHECK(pthread_mutex_init(&p->lock, NULL));
    PT_CHECK(pthread_cond_init(&p->wake_cv, NULL));
    PT_CHECK(pthread_cond_init(&p->done_cv, NULL));
    return p;
}

/* The own workers, at the first region that needs them (owner thread only). */
static void start_workers(mst_threadpool *p) {
    p->workers_tried = true;
    sigset_t old;
    mst_threadpool_block_signals(&old);     /* the workers inherit it */
    for (int i = 1; i < p->n_threads; i++) {
        worker_slot *w = &p->workers[p->n_workers];
        *w = (worker_slot){.pool = p, .home = i};
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;   /* run with fewer */
        p->n_workers++;
    }
    PT_CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL));
}

void mst_threadpool_free(mst_threadpool *p) {
    if (!p) return;
    PT_CHECK(pthread_mutex_lock(&p->lock));
    p->shutdown = true;
    PT_CHECK(pthread_cond_broadcast(&p->wake_cv));
    PT_CHECK(pthread_mutex_unlock(&p->lock));
    for (int i = 0; i < p->n_workers; i++) PT_CHECK(pthread_join(p->workers[i].thread, NULL));
    PT_CHECK(pthread_cond_destroy(&p->done_cv));
    PT_CHECK(pthread_cond_destroy(&p->wake_cv));
    PT_CHECK(pthread_mutex_destroy(&p->lock));
    free(p->claim);
    free(p->workers);
    free(p);
}

int mst_threadpool_size(const mst_threadpool *p) { return p ? p->n_threads : 1; }

/* A region as the team sees it. */
typedef struct {
    mst_threadpool *pool;
    region r;
} team_region;

static _Thread_local bool team_thread_named;

static void team_member(void *arg) {
    team_region *t = arg;
    mst_threadpool *p = t->pool;
    int me = mst_omp_team_thread();
    if (me == 0) {      /* the caller, inside its kernel's range in the profile */
        run_chunks(p, &t->r, 0, false);
        return;
    }
    if (!team_thread_named) {
        char name[32];
        snprintf(name, sizeof(name), "omp.%d", me);
        mst_prof_set_thread_name(name);
        team_thread_named = true;
    }
    /* the team also runs oneDNN's primitives, which set nothing: the pool's FTZ/DAZ mode */
    if (mst_fpu_flushing() != p->flush_denormals) mst_fpu_set_flush(p->flush_denormals);
    mst_prof_op_begin(MST_CAT_KERNEL, p->task_name, -1);
    run_chunks(p, &t->r, me % t->r.chunks, false);
    mst_prof_op_end(MST_CAT_KERNEL, p->task_name, -1);
}

void mst_threadpool_run(mst_threadpool *p, int64_t n, int64_t min_chunk, mst_parallel_fn fn, void *arg) {
    if (n <= 0) return;
    int chunks = mst_parallel_chunks(mst_threadpool_size(p), n, min_chunk);
    /* one chunk, or nested in a region of this pool (the flag is only set by its owner's thread,
     * so seeing it set means this call comes from inside that region) */
    if (chunks == 1 || atomic_exchange(&p->active, true)) {
        fn(arg, 0, n, 0);
        return;
    }
    /* open the chunks before any thread can see the region (a worker holding an older region's
     * copy expects that region's tag, so it can never take one of these) */
    region r = {++p->gen, fn, arg, n, chunks};
    for (int i = 0; i < chunks; i++) atomic_store_explicit(&p->claim[i], 2 * r.gen, memory_order_relaxed);
    atomic_store(&p->pending, chunks);
    if (mst_omp_team_ready()) {
        team_region t = {p, r};
        mst_omp_team_run(chunks, team_member, &t);    /* returns when every member has */
        atomic_store(&p->active, false);
        return;
    }
    if (!p->workers_tried) start_workers(p);
    if (p->n_workers == 0) {    /* no worker could be started: the same chunks, one after another */
        for (int i = 0; i < chunks; i++) {
            int64_t begin, end;
            mst_parallel_range(n, chunks, i, &begin, &end);
            fn(arg, begin, end, i);
        }
        atomic_store(&p->active, false);
        return;
    }
    PT_CHECK(pthread_mutex_lock(&p->lock));
    p->cur = r;
    PT_CHECK(pthread_mutex_unlock(&p->lock));
    /* after the unlock, so a woken worker does not block on the mutex straight away */
    PT_CHECK(pthread_cond_broadcast(&p->wake_cv));

    run_chunks(p, &r, 0, true);
    uint64_t t0 = 0;
    for (unsigned i = 0; atomic_load(&p->pending) != 0; i++) {
        if (i % 64 == 0) {
            uint64_t t = mst_prof_now_ns();
            if (t0 == 0) t0 = t;
            else if (t - t0 > k_done_poll_ns) break;
        }
        cpu_relax();
    }
    if (atomic_load(&p->pending) != 0) {
        PT_CHECK(pthread_mutex_lock(&p->lock));
        while (atomic_load(&p->pending) != 0) PT_CHECK(pthread_cond_wait(&p->done_cv, &p->lock));
        PT_CHECK(pthread_mutex_unlock(&p->lock));
    }
    atomic_store(&p->active, false);
}

void mst_parallel_for(mst_ctx *ctx, int64_t n, int64_t min_chunk, mst_parallel_fn fn, void *arg) {
    mst_threadpool_run(ctx->serial ? NULL : ctx->threadpool, n, min_chunk, fn, arg);
}

int mst_parallel_chunks_ctx(const mst_ctx *ctx, int64_t n, int64_t min_chunk) {
    mst_threadpool *p = ctx->serial ? NULL : ctx->threadpool;
    if (!p || atomic_load(&p->active)) return 1;
    return mst_parallel_chunks(p->n_threads, n, min_chunk);
}
