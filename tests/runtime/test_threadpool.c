/* test_threadpool.c — the context's kernel pool and mst_parallel_for: every index of a region is
 * visited exactly once over many (n, min_chunk, threads) combinations, the chunks are the fixed
 * ranges mst_parallel_range describes, small and single-threaded regions run inline on the
 * caller, a call from inside a region runs inline, mst_ctx_set_threads resizes the pool, and
 * pools start and stop cleanly (no leaks under ASan, no CPU burnt while idle), the own workers
 * start only when a region needs them; and the kernels
 * that split elements, channels or planes (activations, batchnorm, max pooling) give the same
 * bits at any thread count, and so do the optimizer updates split over the pool. The suite runs twice: on the pool's own workers, then on oneDNN's
 * OpenMP team once oneDNN has loaded libgomp (runtime/omp_team.h; skipped, with a message, in a
 * build or on a machine without oneDNN, and with MSTUNE_POOL_TEAM=own). The trade-off of
 * testing scheduling: which thread runs a chunk is not deterministic, so the tests check what
 * must hold for any schedule, and run many regions back to back to give races a chance. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/omp_team.h"
#include "runtime/ops.h"
#include "runtime/threadpool.h"

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_CHUNKS 16

/* What one region saw: visits per index, and the range each chunk (worker) got. */
typedef struct {
    atomic_int *visits;
    atomic_int calls[MAX_CHUNKS];
    int64_t begin[MAX_CHUNKS], end[MAX_CHUNKS];
    atomic_int bad_worker;
} record;

static void record_fn(void *arg, int64_t begin, int64_t end, int worker) {
    record *r = arg;
    if (worker < 0 || worker >= MAX_CHUNKS) {
        atomic_store(&r->bad_worker, 1);
        return;
    }
    atomic_fetch_add(&r->calls[worker], 1);
    r->begin[worker] = begin;
    r->end[worker] = end;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&r->visits[i], 1);
}

/* One region over [0, n); checks coverage and that the chunks are exactly the documented ones. */
static void check_region(mst_ctx *ctx, int threads, int64_t n, int64_t min_chunk) {
    record r;
    memset(&r, 0, sizeof(r));
    r.visits = calloc((size_t)(n > 0 ? n : 1), sizeof(*r.visits));
    assert_non_null(r.visits);
    int chunks = mst_parallel_chunks(threads, n, min_chunk);
    assert_int_equal(mst_parallel_chunks_ctx(ctx, n, min_chunk), chunks);
    mst_parallel_for(ctx, n, min_chunk, record_fn, &r);
    assert_int_equal(atomic_load(&r.bad_worker), 0);
    for (int64_t i = 0; i < n; i++)
        if (atomic_load(&r.visits[i]) != 1)
            fail_msg("threads %d n %lld min_chunk %lld: index %lld visited %d times", threads, (long long)n,
                     (long long)min_chunk, (long long)i, atomic_load(&r.visits[i]));
    for (int w = 0; w < MAX_CHUNKS; w++) {
        int want = n > 0 && w < chunks;
        if (atomic_load(&r.calls[w]) != want)
            fail_msg("threads %d n %lld min_chunk %lld: chunk %d ran %d times, expected %d", threads, (long long)n,
                     (long long)min_chunk, w, atomic_load(&r.calls[w]), want);
        if (!want) continue;
        int64_t b, e;
        mst_parallel_range(n, chunks, w, &b, &e);
        assert_int_equal(r.begin[w], b);
        assert_int_equal(r.end[w], e);
    }
    free(r.visits);
}

static const int64_t k_ns[] = {0, 1, 2, 3, 5, 7, 8, 16, 17, 100, 1001, 4096, 65539};
static const int64_t k_min_chunks[] = {-3, 0, 1, 2, 3, 7, 64, 1000, 100000};

static void test_every_index_once(void **state) {
    static const int threads[] = {1, 2, 3, 4, 7};
    for (int t = 0; t < N_ELEMS(threads); t++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = threads[t]});
        assert_non_null(ctx);
        assert_int_equal(ctx->n_threads, threads[t]);
        for (int i = 0; i < N_ELEMS(k_ns); i++)
            for (int j = 0; j < N_ELEMS(k_min_chunks); j++) check_region(ctx, threads[t], k_ns[i], k_min_chunks[j]);
        mst_ctx_free(ctx);
    }
}

/* The partition rule itself: at most `threads` chunks, each of at least min_chunk items when
 * there are several, contiguous, sizes within one of each other, and inline below 2 * min_chunk. */
static void test_partition_rule(void **state) {
    for (int threads = 1; threads <= 9; threads++)
        for (int i = 0; i < N_ELEMS(k_ns); i++)
            for (int j = 0; j < N_ELEMS(k_min_chunks); j++) {
                int64_t n = k_ns[i], mc = k_min_chunks[j] < 1 ? 1 : k_min_chunks[j];
                int chunks = mst_parallel_chunks(threads, n, k_min_chunks[j]);
                assert_true(chunks >= 1 && chunks <= threads);
                if (threads == 1 || n < 2 * mc) assert_int_equal(chunks, 1);
                else assert_true(chunks >= 2);
                int64_t prev_end = 0, lo = INT64_MAX, hi = 0;
                for (int w = 0; w < chunks; w++) {
                    int64_t b, e;
                    mst_parallel_range(n, chunks, w, &b, &e);
                    assert_int_equal(b, prev_end);
                    if (chunks > 1) assert_true(e - b >= mc);
                    lo = e - b < lo ? e - b : lo;
                    hi = e - b > hi ? e - b : hi;
                    prev_end = e;
                }
                assert_int_equal(prev_end, n);
                assert_true(hi - lo <= 1);
            }
}

/* ---- inline cases ---- */

typedef struct {
    pthread_t caller;
    atomic_int calls, off_caller;
    int64_t begin, end;
    int worker;
} inline_probe;

static void probe_fn(void *arg, int64_t begin, int64_t end, int worker) {
    inline_probe *p = arg;
    atomic_fetch_add(&p->calls, 1);
    if (!pthread_equal(pthread_self(), p->caller)) atomic_fetch_add(&p->off_caller, 1);
    p->begin = begin;
    p->end = end;
    p->worker = worker;
}

static void expect_inline(mst_ctx *ctx, int64_t n, int64_t min_chunk) {
    inline_probe p = {.caller = pthread_self()};
    mst_parallel_for(ctx, n, min_chunk, probe_fn, &p);
    assert_int_equal(atomic_load(&p.calls), 1);
    assert_int_equal(atomic_load(&p.off_caller), 0);
    assert_int_equal(p.begin, 0);
    assert_int_equal(p.end, n);
    assert_int_equal(p.worker, 0);
}

static void test_inline(void **state) {
    mst_ctx *one = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    assert_null(one->threadpool);
    expect_inline(one, 1000000, 1);                     /* one thread: always inline */
    mst_ctx_free(one);
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 4});
    expect_inline(ctx, 1, 1);                           /* one item */
    expect_inline(ctx, 99, 50);                         /* below two chunks' worth */
    expect_inline(ctx, 7, 4);                           /* 7 < 2 * 4 */
    /* a serial context (a graph step on one thread): every region inline, one thread reported,
     * the pool kept for after */
    mst_threadpool *pool = ctx->threadpool;
    ctx->serial = true;
    assert_int_equal(mst_ctx_threads(ctx), 1);
    assert_int_equal(mst_parallel_chunks_ctx(ctx, 1000000, 1), 1);
    expect_inline(ctx, 1000000, 1);
    ctx->serial = false;
    assert_ptr_equal(ctx->threadpool, pool);
    assert_int_equal(mst_ctx_threads(ctx), 4);
    check_region(ctx, 4, 1000000, 1);
    mst_ctx_free(ctx);
}

/* ---- nested regions ---- */

typedef struct {
    mst_ctx *ctx;
    atomic_int outer_calls, inner_bad, inner_calls;
    atomic_int *visits;
    int64_t inner_n;
} nest;

typedef struct {
    nest *outer;
    pthread_t thread;
    atomic_int calls, off_thread;
} nest_inner;

static void inner_fn(void *arg, int64_t begin, int64_t end, int worker) {
    nest_inner *in = arg;
    atomic_fetch_add(&in->calls, 1);
    if (!pthread_equal(pthread_self(), in->thread)) atomic_fetch_add(&in->off_thread, 1);
    if (begin != 0 || end != in->outer->inner_n || worker != 0) atomic_fetch_add(&in->outer->inner_bad, 1);
}

static void outer_fn(void *arg, int64_t begin, int64_t end, int worker) {
    nest *o = arg;
    atomic_fetch_add(&o->outer_calls, 1);
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&o->visits[i], 1);
    /* from inside a region: a parallel call reports one chunk and runs inline on this thread */
    if (mst_parallel_chunks_ctx(o->ctx, o->inner_n, 1) != 1) atomic_fetch_add(&o->inner_bad, 1);
    nest_inner in = {.outer = o, .thread = pthread_self()};
    mst_parallel_for(o->ctx, o->inner_n, 1, inner_fn, &in);
    if (atomic_load(&in.calls) != 1 || atomic_load(&in.off_thread) != 0) atomic_fetch_add(&o->inner_bad, 1);
    atomic_fetch_add(&o->inner_calls, atomic_load(&in.calls));
}

static void test_nested(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 3});
    enum { n = 3000 };
    atomic_int *visits = calloc(n, sizeof(*visits));
    assert_non_null(visits);
    for (int rep = 0; rep < 200; rep++) {
        nest o = {.ctx = ctx, .visits = visits, .inner_n = 1000};
        memset(visits, 0, n * sizeof(*visits));
        mst_parallel_for(ctx, n, 1, outer_fn, &o);
        assert_int_equal(atomic_load(&o.outer_calls), 3);
        assert_int_equal(atomic_load(&o.inner_calls), 3);
        assert_int_equal(atomic_load(&o.inner_bad), 0);
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&visits[i]), 1);
    }
    /* after the region, the pool splits again */
    assert_int_equal(mst_parallel_chunks_ctx(ctx, 1000, 1), 3);
    free(visits);
    mst_ctx_free(ctx);
}

/* ---- resizing and lifetime ---- */

static void test_resize(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 2});
    assert_int_equal(mst_threadpool_size(ctx->threadpool), 2);
    check_region(ctx, 2, 1001, 1);
    mst_ctx_set_threads(ctx, 3);
    assert_int_equal(ctx->n_threads, 3);
    assert_int_equal(mst_threadpool_size(ctx->threadpool), 3);
    check_region(ctx, 3, 1001, 1);
    mst_threadpool *same = ctx->threadpool;
    mst_ctx_set_threads(ctx, 3);                        /* same count: the pool stays */
    assert_ptr_equal(ctx->threadpool, same);
    mst_ctx_set_threads(ctx, 1);
    assert_null(ctx->threadpool);
    check_region(ctx, 1, 1001, 1);
    mst_ctx_set_threads(ctx, 5);
    check_region(ctx, 5, 1001, 1);
    mst_ctx_set_threads(ctx, 0);                        /* all cores */
    assert_true(ctx->n_threads >= 1);
    check_region(ctx, ctx->n_threads, 1001, 1);
    assert_int_equal(mst_ctx_status(ctx), MST_OK);
    mst_ctx_free(ctx);
}

static void test_start_stop(void **state) {
    for (int i = 0; i < 50; i++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1 + i % 4});
        assert_non_null(ctx);
        if (i % 2) check_region(ctx, 1 + i % 4, 64, 1);   /* freed right after a region, or never used */
        mst_ctx_free(ctx);
    }
    mst_threadpool *p = mst_threadpool_new(3);
    assert_non_null(p);
    mst_threadpool_free(p);
    mst_threadpool_free(NULL);
    assert_int_equal(mst_threadpool_size(NULL), 1);
}

/* Many short regions back to back with changing sizes: the case where a worker wakes late and
 * meets a later region than the one it was woken for. */
static void sum_fn(void *arg, int64_t begin, int64_t end, int worker) {
    _Atomic int64_t *sum = arg;
    int64_t s = 0;
    for (int64_t i = begin; i < end; i++) s += i;
    atomic_fetch_add(sum, s);
}

static void test_many_regions(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 4});
    for (int rep = 0; rep < 20000; rep++) {
        int64_t n = 1 + rep % 37;
        _Atomic int64_t sum = 0;
        mst_parallel_for(ctx, n, 1 + rep % 3, sum_fn, &sum);
        if (atomic_load(&sum) != n * (n - 1) / 2) fail_msg("region %d over %lld: sum %lld", rep, (long long)n, (long long)sum);
    }
    mst_ctx_free(ctx);
}

/* Idle workers sleep: with a pool of 4 that has just run regions, the process burns (almost) no
 * CPU while the caller sleeps. A robust bound, not a timing claim: a spinning worker would use
 * all of the 200 ms. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_idle_workers_sleep(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 4});
    for (int i = 0; i < 100; i++) check_region(ctx, 4, 4096, 1);
    struct timespec quiet = {0, 300 * 1000 * 1000};   /* let any other library's spinning end */
    nanosleep(&quiet, NULL);
    double c0 = cpu_s();
    struct timespec idle = {0, 200 * 1000 * 1000};
    nanosleep(&idle, NULL);
    double used = cpu_s() - c0;
    printf("CPU used by an idle pool of 4 over 200 ms: %.1f ms\n", used * 1e3);
    assert_true(used < 0.05);
    mst_ctx_free(ctx);
}

/* Where the chunks ran: on another thread than the caller in some regions (the pool is real), and
 * on a team thread (omp_get_thread_num() > 0) exactly when the team is adopted. Each chunk spins
 * ~0.2 ms, so over 300 regions a second thread gets its chunk in some of them however loaded the
 * machine is. */
typedef struct {
    pthread_t caller;
    atomic_int elsewhere, on_team;
} where_ran;

static void where_fn(void *arg, int64_t begin, int64_t end, int worker) {
    (void)begin, (void)end, (void)worker;
    where_ran *w = arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000);
    if (!pthread_equal(pthread_self(), w->caller)) atomic_fetch_add(&w->elsewhere, 1);
    if (mst_omp_team_thread() > 0) atomic_fetch_add(&w->on_team, 1);
}

static void test_where_chunks_run(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 2});
    where_ran w = {.caller = pthread_self()};
    for (int rep = 0; rep < 300; rep++) mst_parallel_for(ctx, 2, 1, where_fn, &w);
    printf("chunks on another thread: %d of 600, on a team thread: %d\n", atomic_load(&w.elsewhere), atomic_load(&w.on_team));
    assert_true(atomic_load(&w.elsewhere) > 0);
    if (mst_omp_team_ready()) assert_int_equal(atomic_load(&w.on_team), atomic_load(&w.elsewhere));
    else assert_int_equal(atomic_load(&w.on_team), 0);
    mst_ctx_free(ctx);
}

/* The process's thread count, from /proc/self/status. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

/* The pool's own workers start at its first region that does not run on the team: making a
 * context starts no thread, and on the team no worker is ever started (before, one per extra core
 * slept unused for the whole run). A first region on the team of the size it already has. */
static void test_own_workers_start_when_needed(void **state) {
    mst_ctx *warm = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 2});
    check_region(warm, 2, 4096, 1);
    mst_ctx_free(warm);
    int before = process_threads();
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 2});
    assert_int_equal(process_threads(), before);
    check_region(ctx, 2, 4096, 1);
    int after = process_threads();
    printf("threads: %d before the context, %d after its first region (%s)\n", before, after,
           mst_omp_team_ready() ? "on the team" : "on the own workers");
    assert_int_equal(after, before + (mst_omp_team_ready() ? 0 : 1));
    check_region(ctx, 2, 4096, 1);
    assert_int_equal(process_threads(), after);     /* started once */
    mst_ctx_free(ctx);
}

/* ---- kernels split without changing a bit ----
 * Each of these computes every output element (or channel statistic) alone, in the same order
 * whatever the split, so 2 and 3 threads must reproduce 1 thread exactly. Sizes are above the
 * kernels' thresholds (2^17 elements or window reads, 2^16 elements of a batchnorm range). */
enum { k_n_outputs = 14 };

typedef struct {
    float *data[k_n_outputs];
    int64_t numel[k_n_outputs];
} kernel_outputs;

static void keep(mst_ctx *ctx, kernel_outputs *o, int i, const mst_tensor *t) {
    if (!t) fail_msg("output %d: %s", i, mst_ctx_error(ctx));
    o->numel[i] = t->numel;
    o->data[i] = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(o->data[i]);
    memcpy(o->data[i], mst_tensor_data(t), (size_t)t->numel * sizeof(float));
}

static void run_kernels(int threads, kernel_outputs *o) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    assert_non_null(ctx);
    mst_grad_set_enabled(ctx, false);
    const int64_t img[4] = {64, 32, 28, 28}, act[4] = {64, 32, 14, 14}, ch[1] = {32}, wide[2] = {64, 4096};
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, img, 0, 1);
    mst_tensor *g = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, img, 0, 1);
    keep(ctx, o, 0, mst_relu(ctx, x));
    keep(ctx, o, 1, mst_relu_grad(ctx, g, x));
    keep(ctx, o, 2, mst_gelu(ctx, x));
    keep(ctx, o, 3, mst_maxpool2d(ctx, x, 2, 2, 2, 2, 0, 0));
    mst_tensor *h = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, act, 0.5, 2);
    mst_tensor *gamma = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, ch, 1, 0.1), *beta = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, ch, 0, 0.1);
    mst_tensor *rmean = mst_tensor_full(ctx, MST_DTYPE_F32, 1, ch, 0), *rvar = mst_tensor_full(ctx, MST_DTYPE_F32, 1, ch, 1);
    keep(ctx, o, 4, mst_batchnorm(ctx, h, gamma, beta, rmean, rvar, true, 0.1, 1e-5));
    keep(ctx, o, 5, rvar);                              /* updated in place */
    mst_tensor *gh = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, act, 0, 1);
    mst_tensor *invstd = mst_tensor_full(ctx, MST_DTYPE_F32, 1, ch, 0.7), *gb[3];
    assert_int_equal(mst_batchnorm_grad(ctx, gh, h, gamma, rmean, invstd, true, gb), MST_OK);
    keep(ctx, o, 6, gb[0]);
    keep(ctx, o, 7, gb[1]);
    /* (N, C) with many channels: ranges of channels within each row */
    mst_tensor *f = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, wide, 0, 1);
    mst_tensor *fg = mst_tensor_full(ctx, MST_DTYPE_F32, 1, &wide[1], 1), *fb = mst_tensor_full(ctx, MST_DTYPE_F32, 1, &wide[1], 0);
    mst_tensor *fm = mst_tensor_full(ctx, MST_DTYPE_F32, 1, &wide[1], 0), *fv = mst_tensor_full(ctx, MST_DTYPE_F32, 1, &wide[1], 1);
    keep(ctx, o, 8, mst_batchnorm(ctx, f, fg, fb, fm, fv, true, 0.1, 1e-5));
    keep(ctx, o, 9, mst_batchnorm(ctx, f, fg, fb, fm, fv, false, 0.1, 1e-5));
    assert_int_equal(mst_batchnorm_grad(ctx, f, f, fg, fm, fv, true, gb), MST_OK);
    keep(ctx, o, 10, gb[0]);
    /* parameter updates (the mlp's 784x256 weight and larger): elementwise ranges of the parameter */
    const int64_t wshape[2] = {784, 256}, big[1] = {3 * 65536 + 17}, one_param[1] = {1};
    mst_tensor *lr = mst_tensor_scalar(ctx, MST_DTYPE_F64, 0.01), *found_inf = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0);
    mst_tensor *steps = mst_tensor_full(ctx, MST_DTYPE_F64, 1, one_param, 0);
    mst_tensor *w = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, wshape, 0, 0.1), *wg = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, wshape, 0, 1);
    mst_tensor *buf = mst_tensor_full(ctx, MST_DTYPE_F32, 2, wshape, 0);
    for (int k = 0; k < 2; k++)     /* the first update sets the momentum buffer, the second uses it */
        assert_int_equal(mst_sgd_update(ctx, w, wg, lr, steps, found_inf, buf, 0, 0.9, 0, 5e-4, true), MST_OK);
    keep(ctx, o, 11, w);
    keep(ctx, o, 12, buf);
    mst_tensor *a = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, big, 0, 0.1), *ag = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, big, 0, 1);
    mst_tensor *am = mst_tensor_full(ctx, MST_DTYPE_F32, 1, big, 0), *av = mst_tensor_full(ctx, MST_DTYPE_F32, 1, big, 0);
    mst_tensor *asteps = mst_tensor_full(ctx, MST_DTYPE_F64, 1, one_param, 0);
    for (int k = 0; k < 2; k++)
        assert_int_equal(mst_adam_update(ctx, a, ag, lr, asteps, found_inf, am, av, 0, 0.9, 0.999, 1e-8, 0.01, true), MST_OK);
    keep(ctx, o, 13, a);
    mst_ctx_free(ctx);
}

static void test_kernels_same_bits(void **state) {
    static const char *const names[k_n_outputs] = {
        "relu", "relu_grad", "gelu", "maxpool2d", "batchnorm", "running_var", "batchnorm_grad gx",
        "batchnorm_grad ggamma", "batchnorm (N, C)", "batchnorm (N, C) eval", "batchnorm_grad (N, C)",
        "sgd_update param", "sgd_update momentum buffer", "adam_update param (AdamW)"};
    kernel_outputs one;
    run_kernels(1, &one);
    for (int threads = 2; threads <= 3; threads++) {
        kernel_outputs o;
        run_kernels(threads, &o);
        for (int i = 0; i < k_n_outputs; i++) {
            assert_int_equal(o.numel[i], one.numel[i]);
            if (memcmp(o.data[i], one.data[i], (size_t)o.numel[i] * sizeof(float)) != 0)
                fail_msg("%s at %d threads differs from 1 thread", names[i], threads);
            free(o.data[i]);
        }
    }
    for (int i = 0; i < k_n_outputs; i++) free(one.data[i]);
}

/* The first run: regions on the pool's own workers, nothing has loaded libgomp's team for them. */
static int on_own_workers(void **state) {
    (void)state;
    return mst_omp_team_ready() ? -1 : 0;
}

/* The second: oneDNN loaded, its team adopted, so the same tests run their regions on it. */
static int on_team(void **state) {
    (void)state;
    if (!mst_onednn_available()) {
        printf("oneDNN unavailable (%s): the team's run is skipped\n", mst_onednn_unavailable_reason());
        return 0;
    }
    if (!mst_omp_team_wanted()) {
        printf("MSTUNE_POOL_TEAM=own: the team's run is skipped\n");
        return 0;
    }
    return mst_omp_team_ready() ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_index_once), cmocka_unit_test(test_partition_rule),
        cmocka_unit_test(test_inline),           cmocka_unit_test(test_nested),
        cmocka_unit_test(test_resize),           cmocka_unit_test(test_start_stop),
        cmocka_unit_test(test_many_regions),     cmocka_unit_test(test_idle_workers_sleep),
        cmocka_unit_test(test_kernels_same_bits), cmocka_unit_test(test_where_chunks_run),
        cmocka_unit_test(test_own_workers_start_when_needed),
    };
    int failed = cmocka_run_group_tests_name("own workers", tests, on_own_workers, NULL);
    if (!mst_onednn_available() || !mst_omp_team_wanted()) return failed + on_team(NULL);
    return failed + cmocka_run_group_tests_name("oneDNN's OpenMP team", tests, on_team, NULL);
}
