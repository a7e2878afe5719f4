/* test_store.c — the SQLite profile store end to end: a real record stream (main thread steps,
 * loader-like worker threads, real runtime ops) through mst_profiler and mst_store, checked
 * row by row against attribution recomputed from a copy of the same records; warm-up flags per
 * schedule, the trace_steps limit, metadata, folded samples, the bounded queue, step numbers
 * seen twice, unbalanced records, the read API, the database size per step, error paths, and
 * a child killed with SIGKILL mid-run whose database still opens with its finished steps. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "profiler/attribution.h"
#include "profiler/events.h"
#include "profiler/store.h"
#include "runtime/context.h"
#include "runtime/ops.h"

/* ---- helpers ---- */

static void tmp_db(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/mst_store_%s_%d.db", dir && *dir ? dir : "/tmp", tag, (int)getpid());
}

static void rm_db(const char *path) {
    char p[600];
    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

static void spin_ns(uint64_t ns) {
    uint64_t t0 = mst_prof_now_ns();
    while (mst_prof_now_ns() - t0 < ns) {
    }
}

static sqlite3 *db_open(const char *path) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    return db;
}

static int64_t q_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void q_text(sqlite3 *db, const char *sql, char *out, size_t n) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
}

static void assert_integrity(sqlite3 *db) {
    char ok[64];
    q_text(db, "PRAGMA integrity_check", ok, sizeof(ok));
    assert_string_equal(ok, "ok");
}

/* Every step row partitions its wall time exactly. */
static void assert_sums(sqlite3 *db) {
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps WHERE wall_ns != dispatch_ns + kernel_ns + comm_ns + data_ns"
                               " + compile_ns + memcpy_ns + other_ns OR wall_ns != t_end_ns - t_begin_ns"),
                     0);
}

/* A sink that keeps a copy of every record (with its thread) and forwards to the store. */
typedef struct {
    pthread_mutex_t lock;
    mst_prof_event *ev;
    uint32_t *tid;
    size_t n, cap;
    mst_store *store;
} tee;

static void tee_sink(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    tee *t = user;
    pthread_mutex_lock(&t->lock);
    if (t->n + n > t->cap) {
        while (t->n + n > t->cap) t->cap = t->cap ? 2 * t->cap : 65536;
        t->ev = realloc(t->ev, t->cap * sizeof(*t->ev));
        t->tid = realloc(t->tid, t->cap * sizeof(*t->tid));
        assert_non_null(t->ev);
        assert_non_null(t->tid);
    }
    memcpy(t->ev + t->n, ev, n * sizeof(*ev));
    for (size_t i = 0; i < n; i++) t->tid[t->n + i] = tid;
    t->n += n;
    pthread_mutex_unlock(&t->lock);
    mst_store_sink(t->store, tid, ev, n);
}

static void tee_free(tee *t) {
    free(t->ev);
    free(t->tid);
    pthread_mutex_destroy(&t->lock);
}

/* ---- a synthetic training run: steps on this thread, two producer threads beside it ---- */

typedef struct {
    volatile int stop;
    uint32_t name;
    int index;
    int64_t produced;       /* ranges finished, read by the main thread (atomics) */
} worker_arg;

/* Wait until every worker has finished one more range: on a loaded 2-core machine a spinning
 * main thread could otherwise run a whole test before the workers are scheduled at all. */
static void wait_for_workers(worker_arg *wa, int n) {
    for (int i = 0; i < n; i++) {
        const int64_t seen = __atomic_load_n(&wa[i].produced, __ATOMIC_ACQUIRE);
        while (__atomic_load_n(&wa[i].produced, __ATOMIC_ACQUIRE) == seen) sched_yield();
    }
}

static void *producer(void *arg) {
    worker_arg *w = arg;
    char name[32];
    snprintf(name, sizeof(name), "loader.worker.%d", w->index);
    mst_prof_set_thread_name(name);
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        mst_prof_begin(MST_CAT_DATA, w->name, -1);
        spin_ns(30000);
        mst_prof_end(MST_CAT_DATA, w->name, -1);
        __atomic_add_fetch(&w->produced, 1, __ATOMIC_RELEASE);
        spin_ns(10000 * (uint64_t)(w->index + 1));
    }
    return NULL;    /* the partial chunk is flushed at thread exit: it arrives late */
}

typedef struct {
    uint32_t wait, depth, mem, conv, relu, loss, lr, overflow, extra;
} names;

static names intern_names(void) {
    return (names){mst_prof_intern("loader.wait"), mst_prof_intern("loader.queue_depth"),
                   mst_prof_intern("mem.activations"), mst_prof_intern("conv2d"), mst_prof_intern("relu"),
                   mst_prof_intern("loss"), mst_prof_intern("lr"), mst_prof_intern("overflow"),
                   mst_prof_intern("grad_norm")};
}

static void run_steps(const names *nm, int64_t first, int64_t n_steps, worker_arg *wa, int n_workers) {
    int64_t mem = 1 << 20;
    for (int64_t step = first; step < first + n_steps; step++) {
        mst_prof_step_begin(step);
        mst_prof_begin(MST_CAT_DATA, nm->wait, -1);
        spin_ns(20000);
        wait_for_workers(wa, n_workers);    /* a produce range ends inside every step */
        mst_prof_end(MST_CAT_DATA, nm->wait, -1);
        mst_prof_counter(nm->depth, step % 3);
        for (int k = 0; k < 4; k++) {
            uint32_t op = k % 2 ? nm->relu : nm->conv;
            int op_id = k % 2 ? 11 : 22;
            mst_prof_op_begin(MST_CAT_DISPATCH, op, op_id);
            spin_ns(4000);
            mem += 1000 * (k + 1);
            mst_prof_counter_detail(nm->mem, mem);
            mst_prof_op_begin(MST_CAT_KERNEL, op, op_id);
            spin_ns(k % 2 ? 5000 : 15000);
            mst_prof_record_(MST_EV_END, MST_CAT_KERNEL, op, op_id, k % 2 ? 100 : 100000, 4096);
            spin_ns(2000);
            mst_prof_op_end(MST_CAT_DISPATCH, op, op_id);
        }
        mem -= 10000;
        mst_prof_counter_detail(nm->mem, mem);
        mst_prof_value(nm->loss, 1.0 / (double)(step + 1));
        mst_prof_value(nm->lr, 0.1);
        mst_prof_value(nm->extra, 2.5);
        spin_ns(3000);
        mst_prof_step_end(step);
        if (step % 4 == 1) mst_prof_value(nm->overflow, 1);     /* after the step: updates its row */
        mst_prof_thread_flush();
    }
}

/* Expected per-step results recomputed from the tee's copy. */
typedef struct {
    int64_t step;
    uint64_t tb, te;
    mst_attr_result r;
    uint64_t hidden[MST_CAT_COUNT];
    int64_t mem_max;
    int has_mem;
} expect_step;

static size_t expected_steps(const tee *t, uint32_t main_tid, uint32_t mem_name, expect_step *out, size_t max) {
    /* main thread's records, in order */
    mst_prof_event *m = malloc(t->n * sizeof(*m));
    size_t nm = 0, ns = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->tid[i] == main_tid) m[nm++] = t->ev[i];
    int64_t level = 0;
    int level_known = 0;
    for (size_t i = 0; i < nm; i++) {
        if (m[i].kind == MST_EV_COUNTER && m[i].name == mem_name) level = m[i].a, level_known = 1;
        if (m[i].kind != MST_EV_STEP_BEGIN) continue;
        assert_true(ns < max);
        expect_step *e = &out[ns++];
        memset(e, 0, sizeof(*e));
        e->step = m[i].a;
        e->tb = m[i].t_ns;
        e->mem_max = level;
        e->has_mem = level_known;
        size_t j = i + 1;
        while (j < nm && m[j].kind != MST_EV_STEP_END) {
            if (m[j].kind == MST_EV_COUNTER && m[j].name == mem_name) {
                level = m[j].a;
                if (!e->has_mem || level > e->mem_max) e->mem_max = level;
                e->has_mem = level_known = 1;
            }
            j++;
        }
        assert_true(j < nm);
        e->te = m[j].t_ns;
        mst_attr_partition(e->tb, e->te, m, nm, &e->r);
        i = j;
    }
    /* other threads' closed ranges -> hidden per step */
    mst_attr_interval *iv = malloc(t->n * sizeof(*iv));
    size_t niv = 0;
    uint32_t tids[64];
    mst_attr_tracker tr[64];
    int ntids = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->tid[i] == main_tid) continue;
        int k = 0;
        while (k < ntids && tids[k] != t->tid[i]) k++;
        if (k == ntids) {
            assert_true(ntids < 64);
            tids[ntids] = t->tid[i];
            memset(&tr[ntids++], 0, sizeof(tr[0]));
        }
        mst_attr_range r;
        if (mst_attr_track(&tr[k], &t->ev[i], &r)) iv[niv++] = (mst_attr_interval){r.t0, r.t1, r.cat};
    }
    for (size_t s = 0; s < ns; s++) {
        mst_attr_interval *copy = malloc((niv ? niv : 1) * sizeof(*copy));
        memcpy(copy, iv, niv * sizeof(*copy));
        mst_attr_hidden(out[s].tb, out[s].te, copy, niv, out[s].hidden);
        free(copy);
    }
    free(iv);
    free(m);
    return ns;
}

static void test_store_stream(void **state) {
    char path[512];
    tmp_db(path, sizeof(path), "stream");
    const names nm = intern_names();
    mst_prof_config cfg = {.level = MST_PROF_LEVEL_DETAIL, .warmup = 2};
    char err[512];
    enum { STEPS = 14, TRACE = 3 };
    mst_store *st = mst_store_open(path, &cfg, TRACE, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    tee t = {.store = st};
    pthread_mutex_init(&t.lock, NULL);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_configure(p, &cfg);
    mst_profiler_set_sink(p, tee_sink, &t);
    mst_prof_set_thread_name("main");
    assert_int_equal(mst_profiler_start(p), 0);
    const uint32_t main_tid = (uint32_t)gettid();
    worker_arg wa[2] = {{0, mst_prof_intern("loader.produce"), 0, 0}, {0, mst_prof_intern("loader.produce"), 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, producer, &wa[i]);
    wait_for_workers(wa, 2);
    run_steps(&nm, 0, STEPS, wa, 2);
    for (int i = 0; i < 2; i++) __atomic_store_n(&wa[i].stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    mst_profiler_stop(p);

    assert_int_equal(mst_store_set_meta(st, "git_revision", "abc123"), 0);
    assert_int_equal(mst_store_set_meta(st, "config", "{\"model\":\"cnn\"}"), 0);
    assert_int_equal(mst_store_set_meta(st, "git_revision", "def456"), 0);    /* replaces */
    assert_int_equal(mst_store_add_folded(st, main_tid, "main;train;mst_dispatch;conv", 5), 0);
    assert_int_equal(mst_store_add_folded(st, main_tid, "main;train;mst_dispatch;conv", 7), 0);
    assert_int_equal(mst_store_add_folded(st, 42, "worker;produce", 3), 0);
    assert_int_equal(mst_store_set_sampler_summary(st, 15, 0.25, 1000), 0);
    mst_prof_overhead o = mst_profiler_overhead(p);
    assert_int_equal(mst_store_set_overhead(st, &o, 0.5), 0);
    mst_store_stats ss = mst_store_get_stats(st);
    assert_int_equal(ss.dropped, 0);
    assert_int_equal(ss.received, t.n);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);

    /* expected values from the copy */
    static expect_step ex[64];
    size_t n_ex = expected_steps(&t, main_tid, nm.mem, ex, 64);
    assert_int_equal(n_ex, STEPS);

    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    assert_int_equal(access(wal, F_OK), -1);    /* closed into a single file */
    sqlite3 *db = db_open(path);
    assert_integrity(db);
    assert_sums(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), STEPS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps WHERE warmup = 1"), 2);
    assert_int_equal(q_int(db, "SELECT max(step) FROM steps WHERE warmup = 1"), 1);
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT step, t_begin_ns, t_end_ns, dispatch_ns, kernel_ns, comm_ns, data_ns, compile_ns,"
                                        " memcpy_ns, other_ns, hidden_dispatch_ns, hidden_kernel_ns, hidden_comm_ns,"
                                        " hidden_data_ns, hidden_compile_ns, hidden_memcpy_ns, hidden_other_ns, loss, lr,"
                                        " overflow, unmatched, open_at_end FROM steps ORDER BY step",
                                        -1, &q, NULL),
                     SQLITE_OK);
    uint64_t hidden_data_total = 0;
    for (size_t s = 0; s < n_ex; s++) {
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(q, 0), ex[s].step);
        assert_int_equal(sqlite3_column_int64(q, 1), ex[s].tb);
        assert_int_equal(sqlite3_column_int64(q, 2), ex[s].te);
        for (int c = 0; c < MST_CAT_COUNT; c++) {
            assert_int_equal(sqlite3_column_int64(q, 3 + c), ex[s].r.ns[c]);
            assert_int_equal(sqlite3_column_int64(q, 10 + c), ex[s].hidden[c]);
        }
        hidden_data_total += ex[s].hidden[MST_CAT_DATA];
        assert_true(ex[s].r.ns[MST_CAT_KERNEL] > 0 && ex[s].r.ns[MST_CAT_DISPATCH] > 0 && ex[s].r.ns[MST_CAT_DATA] > 0);
        assert_true(fabs(sqlite3_column_double(q, 17) - 1.0 / (double)(ex[s].step + 1)) < 1e-15);
        assert_true(sqlite3_column_double(q, 18) == 0.1);
        if (ex[s].step % 4 == 1) assert_int_equal(sqlite3_column_int(q, 19), 1);
        else assert_int_equal(sqlite3_column_type(q, 19), SQLITE_NULL);
        assert_int_equal(sqlite3_column_int64(q, 20), 0);
        assert_int_equal(sqlite3_column_int64(q, 21), 0);
    }
    assert_int_equal(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    assert_true(hidden_data_total > 0);     /* the producers ran during the steps */

    /* memory timeline: max per step, carried level included; peak over the run */
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT step, max_bytes FROM memory WHERE category = 'activations' ORDER BY step",
                                        -1, &q, NULL),
                     SQLITE_OK);
    for (size_t s = 0; s < n_ex; s++) {
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(q, 0), ex[s].step);
        assert_int_equal(sqlite3_column_int64(q, 1), ex[s].mem_max);
    }
    sqlite3_finalize(q);
    int64_t peak = 0;
    for (size_t s = 0; s < n_ex; s++) peak = ex[s].mem_max > peak ? ex[s].mem_max : peak;
    assert_int_equal(q_int(db, "SELECT peak_bytes FROM memory_peak WHERE category = 'activations'"), peak);
    assert_int_equal(q_int(db, "SELECT count(*) FROM counters WHERE name = 'loader.queue_depth'"), STEPS);
    assert_int_equal(q_int(db, "SELECT last_value FROM counters WHERE name = 'loader.queue_depth' AND step = 5"), 2);

    /* trace: the first TRACE active steps (2, 3, 4), with every thread's records in that span */
    assert_int_equal(q_int(db, "SELECT count(*) FROM events WHERE kind = 4"), TRACE);
    assert_int_equal(q_int(db, "SELECT min(a) FROM events WHERE kind = 4"), 2);
    assert_int_equal(q_int(db, "SELECT max(a) FROM events WHERE kind = 5"), 4);
    const uint64_t span0 = ex[2].tb, span1 = ex[4].te;
    size_t in_span = 0, other_in_span = 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.ev[i].t_ns >= span0 && t.ev[i].t_ns <= span1) {
            in_span++;
            other_in_span += t.tid[i] != main_tid;
        }
    assert_int_equal(q_int(db, "SELECT count(*) FROM events"), in_span);
    assert_true(other_in_span > 0);
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM events WHERE tid != %u", main_tid);
    assert_int_equal(q_int(db, sql), other_in_span);
    assert_int_equal(q_int(db, "SELECT count(*) FROM events e LEFT JOIN names n ON n.id = e.name"
                               " WHERE e.name != 0 AND n.name IS NULL"),
                     0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM events_named WHERE name = 'conv2d' AND kind = 'end' AND cat = 'kernel'"),
                     TRACE * 2);

    /* op statistics over the active steps only */
    const int active = STEPS - 2;
    assert_int_equal(q_int(db, "SELECT calls FROM op_stats WHERE name = 'conv2d'"), active * 2);
    assert_int_equal(q_int(db, "SELECT flops FROM op_stats WHERE name = 'conv2d'"), active * 2 * 100000);
    assert_int_equal(q_int(db, "SELECT bytes FROM op_stats WHERE name = 'relu'"), active * 2 * 4096);
    assert_int_equal(q_int(db, "SELECT op FROM op_stats WHERE name = 'relu'"), 11);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_stats WHERE p50_ns < min_ns OR p95_ns > max_ns OR p50_ns > p95_ns"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_stats"), 2);

    /* metadata, threads, samples, sampler, overhead */
    char text[256];
    q_text(db, "SELECT value FROM run WHERE key = 'git_revision'", text, sizeof(text));
    assert_string_equal(text, "def456");
    q_text(db, "SELECT value FROM run WHERE key = 'config'", text, sizeof(text));
    assert_string_equal(text, "{\"model\":\"cnn\"}");
    assert_int_equal(q_int(db, "SELECT value FROM run WHERE key = 'profiler.warmup'"), 2);
    assert_int_equal(q_int(db, "PRAGMA user_version"), MST_STORE_SCHEMA_VERSION);
    snprintf(sql, sizeof(sql), "SELECT is_main FROM threads WHERE tid = %u AND name = 'main'", main_tid);
    assert_int_equal(q_int(db, sql), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM threads WHERE name LIKE 'loader.worker.%' AND is_main = 0"), 2);
    assert_int_equal(q_int(db, "SELECT sum(n_events) FROM threads"), t.n);
    snprintf(sql, sizeof(sql), "SELECT count FROM samples WHERE tid = %u AND stack = 'main;train;mst_dispatch;conv'", main_tid);
    assert_int_equal(q_int(db, sql), 12);
    assert_int_equal(q_int(db, "SELECT count(*) FROM samples"), 2);
    assert_int_equal(q_int(db, "SELECT samples FROM sampler"), 15);
    assert_int_equal(q_int(db, "SELECT events_received FROM profiler_overhead"), t.n);
    assert_int_equal(q_int(db, "SELECT events_dropped FROM profiler_overhead"), 0);
    assert_int_equal(q_int(db, "SELECT records FROM profiler_overhead"), o.records);
    assert_int_equal(q_int(db, "SELECT count(*) FROM trials"), 0);
    sqlite3_close(db);

    /* read API */
    mst_breakdown b;
    if (mst_store_read_breakdown(path, &b, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(b.steps, active);
    assert_int_equal(b.steps_total, STEPS);
    assert_int_equal(b.includes_warmup, 0);
    assert_true(b.hidden_known);
    double share = 0;
    for (int c = 0; c < MST_CAT_COUNT; c++) share += b.share[c];
    assert_true(fabs(share - 1.0) < 1e-9);
    assert_true(b.median_ns[MST_CAT_KERNEL] > 0 && b.wall_median_ns >= b.median_ns[MST_CAT_KERNEL]);
    double walls[64];
    for (int s = 0; s < active; s++) walls[s] = (double)(ex[2 + s].te - ex[2 + s].tb);
    for (int i = 1; i < active; i++)        /* insertion sort: the median the API should report */
        for (int j = i; j > 0 && walls[j] < walls[j - 1]; j--) { double x = walls[j]; walls[j] = walls[j - 1]; walls[j - 1] = x; }
    assert_true(b.wall_median_ns == (walls[active / 2 - 1] + walls[active / 2]) / 2);
    mst_op_row rows[8];
    int n = mst_store_read_top_ops(path, rows, 8, err, sizeof(err));
    assert_int_equal(n, 2);
    assert_true(rows[0].total_ns >= rows[1].total_ns);     /* largest first */
    assert_true(strcmp(rows[0].name, rows[1].name) != 0);
    assert_true(rows[0].gflops > 0 && rows[1].gflops > 0);
    assert_int_equal(rows[0].calls, active * 2);
    assert_int_equal(rows[1].calls, active * 2);
    assert_int_equal(mst_store_read_top_ops(path, rows, 1, err, sizeof(err)), 1);

    mst_profiler_free(p);
    tee_free(&t);
    rm_db(path);
}

/* Real runtime ops: the dispatcher's dispatch/kernel ranges and the allocator's counters. */
static void test_store_real_ops(void **state) {
    char path[512], err[512];
    tmp_db(path, sizeof(path), "ops");
    mst_prof_config cfg = {.level = MST_PROF_LEVEL_DETAIL};
    mst_store *st = mst_store_open(path, &cfg, 2, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){64, 64});
    mst_tensor *w = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){64, 64});
    mst_profiler *p = mst_profiler_new();
    mst_profiler_configure(p, &cfg);
    mst_profiler_set_sink(p, mst_store_sink, st);
    assert_int_equal(mst_profiler_start(p), 0);
    for (int step = 0; step < 5; step++) {
        mst_profiler_step(p, step);
        mst_prof_step_begin(step);
        mst_pool_push(ctx);
        mst_tensor *y = mst_relu(ctx, mst_add(ctx, mst_matmul(ctx, a, w), a));
        assert_non_null(y);
        mst_pool_pop(ctx);
        mst_prof_step_end(step);
        mst_prof_thread_flush();
    }
    mst_profiler_stop(p);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    sqlite3 *db = db_open(path);
    assert_integrity(db);
    assert_sums(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 5);
    assert_int_equal(q_int(db, "SELECT calls FROM op_stats WHERE name = 'matmul'"), 5);
    assert_int_equal(q_int(db, "SELECT flops FROM op_stats WHERE name = 'matmul'"), 5 * 2 * 64 * 64 * 64);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_stats WHERE name IN ('add', 'relu', 'matmul') AND gflops > 0"), 3);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps WHERE kernel_ns = 0 OR dispatch_ns = 0"), 0);
    assert_true(q_int(db, "SELECT count(DISTINCT step) FROM memory WHERE category = 'activations'") == 5);
    assert_true(q_int(db, "SELECT peak_bytes FROM memory_peak WHERE category = 'activations'") >= 3 * 64 * 64 * 4);
    assert_int_equal(q_int(db, "SELECT count(*) FROM events WHERE kind = 4"), 2);
    sqlite3_close(db);
    mst_profiler_free(p);
    mst_ctx_free(ctx);
    rm_db(path);
}

/* Run a store over steps emitted directly, without a profiler: records are handed to the sink. */
static mst_prof_event ev_make(mst_prof_kind kind, mst_prof_cat cat, uint32_t name, uint64_t t, int64_t a) {
    mst_prof_event e;
    memset(&e, 0, sizeof(e));
    e.t_ns = t;
    e.kind = (uint8_t)kind;
    e.cat = (uint8_t)cat;
    e.name = name;
    e.op = -1;
    e.a = a;
    return e;
}

static void test_trace_limits(void **state) {
    char path[512], err[512];
    const uint32_t k = mst_prof_intern("conv2d");
    for (int trace = 0; trace <= 20; trace += 20) {     /* none, and more than the run has */
        tmp_db(path, sizeof(path), "trace");
        mst_store *st = mst_store_open(path, NULL, trace, err, sizeof(err));
        if (!st) fail_msg("%s", err);
        uint64_t t = 1000;
        for (int step = 0; step < 6; step++) {
            mst_prof_event ev[6] = {
                ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, t, step), ev_make(MST_EV_BEGIN, MST_CAT_KERNEL, k, t + 10, 0),
                ev_make(MST_EV_END, MST_CAT_KERNEL, k, t + 60, 0),       ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, t + 100, step),
                ev_make(MST_EV_BEGIN, MST_CAT_COMPILE, k, t + 110, 0),  ev_make(MST_EV_END, MST_CAT_COMPILE, k, t + 120, 0),
            };
            mst_store_sink(st, 7, ev, 6);
            t += 200;
        }
        if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
        sqlite3 *db = db_open(path);
        assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 6);
        assert_int_equal(q_int(db, "SELECT sum(kernel_ns) FROM steps"), 6 * 50);
        /* everything between the first traced step's begin and the last one's end */
        assert_int_equal(q_int(db, "SELECT count(*) FROM events"), trace ? 6 * 4 + 5 * 2 : 0);
        sqlite3_close(db);
        rm_db(path);
    }
}

/* Step markers out of place, ranges left open or closed twice: rows still partition exactly. */
static void test_unbalanced_and_repeated_steps(void **state) {
    char path[512], err[512];
    tmp_db(path, sizeof(path), "unbal");
    const uint32_t k = mst_prof_intern("conv2d"), d = mst_prof_intern("loader.wait");
    mst_store *st = mst_store_open(path, NULL, 0, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_prof_event ev[] = {
        ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, 50, 9),           /* an end with no step open */
        ev_make(MST_EV_BEGIN, MST_CAT_DATA, d, 80, 0),               /* opened before step 0 */
        ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, 100, 0),
        ev_make(MST_EV_END, MST_CAT_DATA, d, 130, 0),                /* clipped at the step start: 30 ns */
        ev_make(MST_EV_END, MST_CAT_KERNEL, k, 140, 0),              /* closes nothing */
        ev_make(MST_EV_BEGIN, MST_CAT_KERNEL, k, 150, 0),            /* never closed in step 0 */
        ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, 200, 0),
        ev_make(MST_EV_END, MST_CAT_KERNEL, k, 210, 0),
        ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, 300, 1),        /* a step number that will repeat */
        ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, 310, 1),
        ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, 400, 1),        /* ... its later occurrence wins */
        ev_make(MST_EV_BEGIN, MST_CAT_COMPILE, k, 400, 0),
        ev_make(MST_EV_END, MST_CAT_COMPILE, k, 450, 0),
        ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, 500, 2),        /* no STEP_END for 1: ends here */
        ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, 600, 2),
        ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, 700, 3),        /* open at close: not a finished step */
    };
    mst_store_sink(st, 9, ev, sizeof(ev) / sizeof(ev[0]));
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    sqlite3 *db = db_open(path);
    assert_sums(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 3);
    assert_int_equal(q_int(db, "SELECT data_ns FROM steps WHERE step = 0"), 30);
    assert_int_equal(q_int(db, "SELECT kernel_ns FROM steps WHERE step = 0"), 50);
    assert_int_equal(q_int(db, "SELECT unmatched FROM steps WHERE step = 0"), 1);
    assert_int_equal(q_int(db, "SELECT open_at_end FROM steps WHERE step = 0"), 1);
    assert_int_equal(q_int(db, "SELECT wall_ns FROM steps WHERE step = 1"), 100);
    assert_int_equal(q_int(db, "SELECT compile_ns FROM steps WHERE step = 1"), 50);
    assert_int_equal(q_int(db, "SELECT value FROM run WHERE key = 'store.step_marker_errors'"), 2);
    assert_int_equal(q_int(db, "SELECT value FROM run WHERE key = 'store.incomplete_steps'"), 1);
    sqlite3_close(db);
    rm_db(path);
}

/* A queue far smaller than the stream: producers wait, nothing is lost. */
typedef struct {
    mst_store *st;
    uint32_t name;
} flood_arg;

static void *flood(void *arg) {
    flood_arg *f = arg;
    for (int i = 0; i < 20000; i++) {
        mst_prof_begin(MST_CAT_KERNEL, f->name, -1);
        mst_prof_end(MST_CAT_KERNEL, f->name, -1);
    }
    return NULL;
}

static void test_bounded_queue(void **state) {
    char path[512], err[512];
    tmp_db(path, sizeof(path), "queue");
    mst_store_options opt = {.queue_events = 1024, .commit_steps = 2};
    mst_store *st = mst_store_open_opts(path, NULL, 1, &opt, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_set_sink(p, mst_store_sink, st);
    assert_int_equal(mst_profiler_start(p), 0);
    flood_arg fa = {st, mst_prof_intern("pool.kernel")};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, flood, &fa);
    const names nm = intern_names();
    run_steps(&nm, 0, 10, NULL, 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    mst_profiler_stop(p);
    mst_store_stats s = mst_store_get_stats(st);
    assert_int_equal(s.dropped, 0);
    assert_true(s.received >= 4 * 40000);
    assert_true(s.commits >= 1);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    sqlite3 *db = db_open(path);
    assert_sums(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 10);
    assert_int_equal(q_int(db, "SELECT sum(n_events) FROM threads"), (int64_t)s.received);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps WHERE hidden_kernel_ns > wall_ns"), 0);
    sqlite3_close(db);
    mst_profiler_free(p);
    rm_db(path);
}

/* The writer is SCHED_IDLE: with a busy thread on every core it gets (almost) no cycles, so a small
 * queue fills and the recording thread drains it at its hand-off (drain_one), and close drains the
 * rest; every step arrives, in order, and the run says how its writer was scheduled. */
static atomic_int g_busy_stop;
static void *busy(void *arg) {
    (void)arg;
    volatile uint64_t x = 0;
    while (!atomic_load(&g_busy_stop)) x++;
    return NULL;
}

/* One spinning thread per core (at most 64); returns how many to hand to stop_busy. */
static long start_busy(pthread_t th[64]) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1 || cores > 64) cores = 2;
    atomic_store(&g_busy_stop, 0);
    for (long i = 0; i < cores; i++) pthread_create(&th[i], NULL, busy, NULL);
    return cores;
}

static void stop_busy(pthread_t th[64], long n) {
    atomic_store(&g_busy_stop, 1);
    for (long i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void test_idle_writer_under_load(void **state) {
    (void)state;
    char path[512], err[512];
    tmp_db(path, sizeof(path), "idle");
    pthread_t th[64];
    const long cores = start_busy(th);
    mst_store_options opt = {.queue_events = 256, .commit_steps = 4};
    mst_store *st = mst_store_open_opts(path, NULL, 2, &opt, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_set_sink(p, mst_store_sink, st);
    assert_int_equal(mst_profiler_start(p), 0);
    const names nm = intern_names();
    run_steps(&nm, 0, 200, NULL, 0);
    mst_profiler_stop(p);
    const mst_store_stats s = mst_store_get_stats(st);
    assert_int_equal(s.dropped, 0);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    stop_busy(th, cores);
    sqlite3 *db = db_open(path);
    assert_sums(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 200);
    assert_int_equal(q_int(db, "SELECT min(step) FROM steps"), 0);
    assert_int_equal(q_int(db, "SELECT max(step) FROM steps"), 199);
    char sched[200];
    q_text(db, "SELECT value FROM run WHERE key = 'profiler.writer_sched'", sched, sizeof(sched));
    assert_true(strcmp(sched, "SCHED_IDLE") == 0 || strncmp(sched, "SCHED_OTHER (SCHED_IDLE refused: ", 33) == 0);
    sqlite3_close(db);
    mst_profiler_free(p);
    rm_db(path);
}

/* With room in the queue, a starved writer must still not let it age (what a kill loses is bounded):
 * by the first hand-off after 200 ms every older step is in the database. (On the 2-core VM the
 * idle writer's small share kept up with these steps even without the hand-off's drain, so this
 * checks the bound and the drain's order and counts, not that the drain was needed.) */
static void test_starved_writer_queue_does_not_age(void **state) {
    (void)state;
    char path[512], err[512];
    tmp_db(path, sizeof(path), "stale");
    pthread_t th[64];
    const long cores = start_busy(th);
    mst_store *st = mst_store_open(path, NULL, 2, err, sizeof(err));      /* the default 8 MiB queue */
    if (!st) fail_msg("%s", err);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_set_sink(p, mst_store_sink, st);
    assert_int_equal(mst_profiler_start(p), 0);
    const names nm = intern_names();
    run_steps(&nm, 0, 400, NULL, 0);        /* ~7 ms of the writer's work: more than its idle share */
    spin_ns(250000000);
    run_steps(&nm, 400, 1, NULL, 0);
    const mst_store_stats s = mst_store_get_stats(st);
    assert_true(s.steps >= 400);
    mst_profiler_stop(p);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    stop_busy(th, cores);
    sqlite3 *db = db_open(path);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), 401);
    sqlite3_close(db);
    mst_profiler_free(p);
    rm_db(path);
}

/* The database per step at level 1 with ~600 records per step (a cnn step): measured, bounded. */
static mst_prof_event op_ev(mst_prof_kind kind, mst_prof_cat cat, uint32_t name, int op, uint64_t t, int64_t a, int64_t b) {
    mst_prof_event e = ev_make(kind, cat, name, t, a);
    e.op = (int16_t)op;
    e.b = b;
    return e;
}

static int64_t db_bytes_for(int steps, int trace, int64_t *events) {
    enum { OPS = 150 };
    char path[512], err[512];
    tmp_db(path, sizeof(path), "size");
    mst_store *st = mst_store_open(path, NULL, trace, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    static const char *const opn[8] = {"conv2d", "relu", "add", "matmul", "max_pool2d", "batch_norm", "sum", "mul"};
    uint32_t ids[8];
    for (int i = 0; i < 8; i++) ids[i] = mst_prof_intern(opn[i]);
    const uint32_t depth = mst_prof_intern("loader.queue_depth"), loss = mst_prof_intern("loss"), lr = mst_prof_intern("lr");
    const uint32_t wait = mst_prof_intern("loader.wait");
    static mst_prof_event ev[4 * OPS + 16];
    uint64_t t = 1000000;
    for (int step = 0; step < steps; step++) {
        size_t n = 0;
        ev[n++] = ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, t, step);
        ev[n++] = ev_make(MST_EV_BEGIN, MST_CAT_DATA, wait, t += 300, 0);
        ev[n++] = ev_make(MST_EV_END, MST_CAT_DATA, wait, t += 2000, 0);
        ev[n++] = ev_make(MST_EV_COUNTER, MST_CAT_OTHER, depth, t, step % 4);
        for (int k = 0; k < OPS; k++) {
            const uint32_t id = ids[k % 8];
            ev[n++] = op_ev(MST_EV_BEGIN, MST_CAT_DISPATCH, id, k % 8, t += 900, 0, 0);
            ev[n++] = op_ev(MST_EV_BEGIN, MST_CAT_KERNEL, id, k % 8, t += 300, 0, 0);
            ev[n++] = op_ev(MST_EV_END, MST_CAT_KERNEL, id, k % 8, t += 20000 + (uint64_t)(k * 37 % 5000), 1000000, 4096);
            ev[n++] = op_ev(MST_EV_END, MST_CAT_DISPATCH, id, k % 8, t += 200, 0, 0);
        }
        const double lv = 2.0 / (step + 1), lrv = 0.01;
        int64_t bits;
        memcpy(&bits, &lv, sizeof(bits));
        ev[n++] = ev_make(MST_EV_VALUE, MST_CAT_OTHER, loss, t += 100, bits);
        memcpy(&bits, &lrv, sizeof(bits));
        ev[n++] = ev_make(MST_EV_VALUE, MST_CAT_OTHER, lr, t, bits);
        ev[n++] = ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, t += 500, step);
        mst_store_sink(st, 100, ev, n);
        t += 1000;
    }
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    sqlite3 *db = db_open(path);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps"), steps);
    assert_int_equal(q_int(db, "SELECT calls FROM op_stats WHERE name = 'conv2d'"), steps * (OPS / 8 + 1));
    *events = q_int(db, "SELECT count(*) FROM events");
    sqlite3_close(db);
    rm_db(path);
    return (int64_t)sb.st_size;
}

static void test_db_size_per_step(void **state) {
    enum { STEPS = 2000, TRACE = 10 };
    int64_t ev_small, ev_big, ev_trace;
    const int64_t small = db_bytes_for(200, 0, &ev_small), big = db_bytes_for(STEPS, 0, &ev_big);
    const int64_t traced = db_bytes_for(STEPS, TRACE, &ev_trace);
    assert_int_equal(ev_big, 0);
    assert_int_equal(ev_trace, TRACE * 607);
    const double per_step = (double)(big - small) / (STEPS - 200), trace_bytes = (double)(traced - big);
    printf("db: %lld bytes for %d steps of 607 records, %lld for 200 steps: %.0f bytes/step; a %d-step trace adds %.0f"
           " bytes (%.0f per record); 9400 steps with that trace -> %.2f MB\n",
           (long long)big, STEPS, (long long)small, per_step, TRACE, trace_bytes, trace_bytes / (double)ev_trace,
           ((double)small + per_step * (9400 - 200) + trace_bytes) / 1e6);
    assert_true(per_step < 1000);
    assert_true((double)small + per_step * (9400 - 200) + trace_bytes < 20e6);
}

/* A process killed with SIGKILL mid-run: the database opens, is intact, and holds every step
 * that was handed to the store well before the kill. */
static void test_kill_safety(void **state) {
    char path[512];
    tmp_db(path, sizeof(path), "kill");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char err[512];
        mst_prof_config cfg = {.level = MST_PROF_LEVEL_OPS};
        mst_store *st = mst_store_open(path, &cfg, 2, err, sizeof(err));
        if (!st) _exit(3);
        mst_profiler *p = mst_profiler_new();
        mst_profiler_configure(p, &cfg);
        mst_profiler_set_sink(p, mst_store_sink, st);
        if (mst_profiler_start(p) != 0) _exit(4);
        const names nm = intern_names();
        for (int64_t step = 0;; step++) {
            run_steps(&nm, step, 1, NULL, 0);    /* flushes after the step: the store has it */
            if (write(fds[1], &step, sizeof(step)) != sizeof(step)) _exit(5);
            spin_ns(500000);
        }
    }
    close(fds[1]);
    /* read the delivered step numbers with their arrival times; kill 800 ms after step 40 */
    enum { MAX = 1 << 16 };
    static int64_t steps[MAX];
    static uint64_t when[MAX];
    size_t n_read = 0;
    uint64_t kill_at = 0;
    for (;;) {
        int64_t got;
        ssize_t r = read(fds[0], &got, sizeof(got));
        if (r != sizeof(got)) {
            int status = 0;
            waitpid(pid, &status, 0);
            fail_msg("the child stopped early (status %d)", status);
        }
        const uint64_t now = mst_prof_now_ns();
        if (n_read < MAX) steps[n_read] = got, when[n_read++] = now;
        if (got == 40) kill_at = now + 800 * 1000 * 1000ull;
        if (kill_at && now >= kill_at) break;
    }
    kill(pid, SIGKILL);
    const uint64_t killed = mst_prof_now_ns();
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* every step handed to the store LOST_MS before the kill must be there: the queue holds at most
     * ~300 ms (drained at the hand-off that finds it 200 ms old, or by the 100 ms backstop poll) and
     * the open transaction at most 100 ms (docs/guarantees.md); 100 ms more for scheduling, since
     * sanitizer builds run the drain several times slower */
    enum { LOST_MS = 500 };
    int64_t delivered = -1;
    for (size_t i = 0; i < n_read; i++)
        if (when[i] + LOST_MS * 1000 * 1000ull <= killed) delivered = steps[i];
    assert_true(delivered >= 40);

    sqlite3 *db = db_open(path);
    assert_integrity(db);
    assert_sums(db);
    const int64_t n = q_int(db, "SELECT count(*) FROM steps");
    printf("killed %zu steps after start; step %lld was delivered %d ms before the kill; %lld steps readable\n",
           n_read, (long long)delivered, LOST_MS, (long long)n);
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM steps WHERE step <= %lld", (long long)delivered);
    assert_int_equal(q_int(db, sql), delivered + 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM steps WHERE hidden_data_ns IS NOT NULL"), 0);  /* set at close */
    sqlite3_close(db);
    mst_breakdown b;
    char err[512];
    assert_int_equal(mst_store_read_breakdown(path, &b, err, sizeof(err)), 0);
    assert_true(b.steps >= delivered + 1);
    assert_int_equal(b.hidden_known, 0);
    rm_db(path);
}

/* A database that cannot grow (here a size cap; a full disk behaves the same): the store fails,
 * producers are never blocked for good, drops are counted, close reports the path, and what was
 * committed before stays readable. */
static void test_store_full(void **state) {
    char path[512], err[512];
    tmp_db(path, sizeof(path), "full");
    /* commits every 16 steps: the database fills within the default 256, and what was committed
     * before the fill is what this test reads back */
    mst_store_options opt = {.max_db_bytes = 400 * 1024, .commit_steps = 16};
    mst_store *st = mst_store_open_opts(path, NULL, 100000, &opt, err, sizeof(err));    /* trace everything */
    if (!st) fail_msg("%s", err);
    const uint32_t k = mst_prof_intern("conv2d");
    static mst_prof_event ev[602];
    uint64_t t = 1000;
    for (int step = 0; step < 400; step++) {
        size_t n = 0;
        ev[n++] = ev_make(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, t, step);
        for (int i = 0; i < 300; i++) {
            ev[n++] = ev_make(MST_EV_BEGIN, MST_CAT_KERNEL, k, t += 10, 0);
            ev[n++] = ev_make(MST_EV_END, MST_CAT_KERNEL, k, t += 100, 0);
        }
        ev[n++] = ev_make(MST_EV_STEP_END, MST_CAT_OTHER, 0, t += 10, step);
        mst_store_sink(st, 5, ev, n);
    }
    mst_store_stats ss = mst_store_get_stats(st);
    assert_int_equal(mst_store_close(st, err, sizeof(err)), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "full"));
    /* every record offered was either queued or refused; the writer may still be draining */
    assert_true(ss.received <= 400 * 602 && ss.received + ss.dropped >= 400 * 602);
    sqlite3 *db = db_open(path);
    assert_integrity(db);
    assert_sums(db);
    const int64_t n = q_int(db, "SELECT count(*) FROM steps");
    assert_true(n >= 1 && n < 400);
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM steps WHERE step < %lld", (long long)n);
    assert_int_equal(q_int(db, sql), n);     /* a prefix of the run */
    sqlite3_close(db);
    rm_db(path);
}

static void test_errors(void **state) {
    char err[512] = "";
    mst_store *st = mst_store_open("/nonexistent-dir/x/profile.db", NULL, 0, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "/nonexistent-dir/x/profile.db"));
    mst_breakdown b;
    assert_int_equal(mst_store_read_breakdown("/nonexistent-dir/p.db", &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/p.db"));
    mst_op_row rows[2];
    assert_int_equal(mst_store_read_top_ops("/nonexistent-dir/p.db", rows, 2, err, sizeof(err)), -1);
    /* a SQLite file that is not a profile */
    char path[512];
    tmp_db(path, sizeof(path), "foreign");
    rm_db(path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(mst_store_read_breakdown(path, &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not an mstune profile"));
    /* an existing file is replaced */
    st = mst_store_open(path, NULL, 0, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    assert_int_equal(mst_store_set_meta(st, NULL, "x"), -1);
    assert_int_equal(mst_store_close(st, err, sizeof(err)), 0);
    assert_int_equal(mst_store_read_breakdown(path, &b, err, sizeof(err)), 0);
    assert_int_equal(b.steps_total, 0);
    rm_db(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_stream),    cmocka_unit_test(test_store_real_ops),
        cmocka_unit_test(test_trace_limits),    cmocka_unit_test(test_unbalanced_and_repeated_steps),
        cmocka_unit_test(test_bounded_queue),   cmocka_unit_test(test_idle_writer_under_load),
        cmocka_unit_test(test_starved_writer_queue_does_not_age),
        cmocka_unit_test(test_db_size_per_step),
        cmocka_unit_test(test_kill_safety),     cmocka_unit_test(test_store_full),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
