/* store.c — the SQLite profile store: bounded queue written by the recording threads between steps
 * (a SCHED_IDLE backstop thread writes what they leave too long), per-step attribution,
 * finalisation at close, and the read side used by the CLI summary.
 *
 * Trade-off: the database keeps one row per step (and per step and counter) for the whole run,
 * but raw records only for a short trace span; op statistics live in fixed-size histograms in
 * memory until close. So the file grows by 100-200 bytes per step (measured; docs/profile-schema.md)
 * whatever the level, and the writer's memory is bounded by the queue (8 MiB by default) plus
 * 8 KiB per op name and 1 KiB per thread. Other threads' ranges, needed for hidden time, go to a
 * TEMP table (SQLite's temp file, never the run's database) and are swept against the steps once
 * at close, which holds 80 bytes per step in memory for the sweep.
 * Schema: docs/profile-schema.md. Attribution: docs/attribution.md.
 */
#define _GNU_SOURCE
#include "profiler/store.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "profiler/attribution.h"

#define DEFAULT_QUEUE_EVENTS (1u << 18)
#define QUEUE_ITEMS 4096                /* sink calls in flight; a power of two */
#define WRITER_POLL_NS 100000000ull     /* the backstop writer looks at the queue every 100 ms */
#define WRITER_STALE_NS 200000000ull    /* a queued item older than 200 ms: the recording thread drains */
#define MAX_THREADS 1024
#define MAX_MEM_CATS 32
#define MAX_STEP_COUNTERS 64

/* The steps table has one column per category, in enum order (dispatch_ns ... other_ns), and so
 * do the statements below and the readers: a new category must be added to all of them. */
_Static_assert(MST_CAT_COUNT == 7, "a new category needs columns in steps and in every statement naming them");

/* ---- schema ---- */

static const char k_schema[] =
    "CREATE TABLE run(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;\n"
    "CREATE TABLE threads(tid INTEGER PRIMARY KEY, name TEXT, is_main INTEGER NOT NULL DEFAULT 0,\n"
    "  n_events INTEGER NOT NULL DEFAULT 0);\n"
    "CREATE TABLE names(id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n"
    "CREATE TABLE steps(step INTEGER PRIMARY KEY, t_begin_ns INTEGER NOT NULL, t_end_ns INTEGER NOT NULL,\n"
    "  wall_ns INTEGER NOT NULL,\n"
    "  dispatch_ns INTEGER NOT NULL, kernel_ns INTEGER NOT NULL, comm_ns INTEGER NOT NULL,\n"
    "  data_ns INTEGER NOT NULL, compile_ns INTEGER NOT NULL, memcpy_ns INTEGER NOT NULL,\n"
    "  other_ns INTEGER NOT NULL,\n"
    "  hidden_dispatch_ns INTEGER, hidden_kernel_ns INTEGER, hidden_comm_ns INTEGER, hidden_data_ns INTEGER,\n"
    "  hidden_compile_ns INTEGER, hidden_memcpy_ns INTEGER, hidden_other_ns INTEGER,\n"
    "  warmup INTEGER NOT NULL, loss REAL, lr REAL, loss_scale REAL, overflow INTEGER,\n"
    "  n_events INTEGER NOT NULL, unmatched INTEGER NOT NULL, open_at_end INTEGER NOT NULL);\n"
    "CREATE TABLE events(tid INTEGER NOT NULL, t_ns INTEGER NOT NULL, kind INTEGER NOT NULL,\n"
    "  cat INTEGER NOT NULL, name INTEGER NOT NULL, op INTEGER NOT NULL, a INTEGER NOT NULL, b INTEGER NOT NULL);\n"
    "CREATE TABLE op_stats(name TEXT PRIMARY KEY, op INTEGER NOT NULL, calls INTEGER NOT NULL,\n"
    "  total_ns INTEGER NOT NULL, mean_ns REAL NOT NULL, min_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL,\n"
    "  p50_ns REAL NOT NULL, p95_ns REAL NOT NULL, flops INTEGER NOT NULL, bytes INTEGER NOT NULL,\n"
    "  gflops REAL NOT NULL, gbps REAL NOT NULL);\n"
    "CREATE TABLE counters(step INTEGER NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL,\n"
    "  min_value INTEGER NOT NULL, max_value INTEGER NOT NULL, last_value INTEGER NOT NULL,\n"
    "  PRIMARY KEY(step, name)) WITHOUT ROWID;\n"
    "CREATE TABLE memory(step INTEGER NOT NULL, category TEXT NOT NULL, max_bytes INTEGER NOT NULL,\n"
    "  PRIMARY KEY(step, category)) WITHOUT ROWID;\n"
    "CREATE TABLE memory_peak(category TEXT PRIMARY KEY, peak_bytes INTEGER NOT NULL) WITHOUT ROWID;\n"
    "CREATE TABLE samples(tid INTEGER NOT NULL, stack TEXT NOT NULL, count INTEGER NOT NULL,\n"
    "  PRIMARY KEY(tid, stack));\n"
    "CREATE TABLE sampler(id INTEGER PRIMARY KEY CHECK(id = 1), samples INTEGER NOT NULL,\n"
    "  dispatch_share REAL NOT NULL, hz REAL NOT NULL);\n"
    "CREATE TABLE profiler_overhead(id INTEGER PRIMARY KEY CHECK(id = 1), records INTEGER, record_ns REAL,\n"
    "  flush_ns INTEGER, flushes INTEGER, run_wall_s REAL, overhead_ns REAL, overhead_share REAL,\n"
    "  events_received INTEGER, events_dropped INTEGER, producer_waits INTEGER, producer_wait_ns INTEGER,\n"
    "  sampler_ns INTEGER, probe_ns INTEGER, prep_ns INTEGER, sig_miss_ns INTEGER);\n"
    "CREATE TABLE grad_underflow(step INTEGER PRIMARY KEY, half TEXT NOT NULL, elements INTEGER NOT NULL,\n"
    "  ref_nonzero INTEGER NOT NULL, half_zero INTEGER NOT NULL, cast_zero INTEGER NOT NULL,\n"
    "  cast_subnormal INTEGER NOT NULL, fraction REAL NOT NULL, probe_ns INTEGER NOT NULL);\n"
    "CREATE TABLE trials(id INTEGER PRIMARY KEY, change TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,\n"
    "  predicted_speedup REAL, measured_speedup REAL, ci_low REAL, ci_high REAL,\n"
    "  memory_delta_bytes INTEGER, accuracy_delta REAL, db_path TEXT, metrics_json TEXT);\n"
    "CREATE VIEW step_shares AS SELECT step, wall_ns / 1e6 AS wall_ms,\n"
    "  1.0 * dispatch_ns / wall_ns AS dispatch, 1.0 * kernel_ns / wall_ns AS kernel,\n"
    "  1.0 * comm_ns / wall_ns AS comm, 1.0 * data_ns / wall_ns AS data,\n"
    "  1.0 * compile_ns / wall_ns AS compile, 1.0 * memcpy_ns / wall_ns AS memcpy,\n"
    "  1.0 * other_ns / wall_ns AS other FROM steps WHERE warmup = 0 AND wall_ns > 0;\n"
    "CREATE VIEW events_named AS SELECT e.rowid AS seq, e.tid, t.name AS thread, e.t_ns,\n"
    "  CASE e.kind WHEN 0 THEN 'begin' WHEN 1 THEN 'end' WHEN 2 THEN 'counter' WHEN 3 THEN 'instant'\n"
    "    WHEN 4 THEN 'step_begin' WHEN 5 THEN 'step_end' WHEN 6 THEN 'value' ELSE 'thread_name' END AS kind,\n"
    "  CASE e.cat WHEN 0 THEN 'dispatch' WHEN 1 THEN 'kernel' WHEN 2 THEN 'comm' WHEN 3 THEN 'data'\n"
    "    WHEN 4 THEN 'compile' WHEN 5 THEN 'memcpy' ELSE 'other' END AS cat,\n"
    "  n.name, e.op, e.a, e.b FROM events e LEFT JOIN names n ON n.id = e.name\n"
    "  LEFT JOIN threads t ON t.tid = e.tid;\n"
    "CREATE TEMP TABLE intervals(tid INTEGER NOT NULL, cat INTEGER NOT NULL, t0 INTEGER NOT NULL, t1 INTEGER NOT NULL);\n";

_Static_assert(MST_EV_KIND_COUNT == 8 && MST_EV_THREAD_NAME == 7, "update the events_named view in k_schema");

enum {
    ST_STEP, ST_DEL_COUNTERS, ST_DEL_MEMORY, ST_COUNTER, ST_MEMORY, ST_EVENT, ST_INTERVAL, ST_VALUES,
    ST_NAME, ST_THREAD_NEW, ST_THREAD_NAME, ST_THREAD_MAIN, ST_META, ST_FOLDED, ST_COUNT
};

static const char *const k_stmts[ST_COUNT] = {
    [ST_STEP] = "INSERT OR REPLACE INTO steps(step, t_begin_ns, t_end_ns, wall_ns, dispatch_ns, kernel_ns, comm_ns,"
                " data_ns, compile_ns, memcpy_ns, other_ns, warmup, loss, lr, loss_scale, overflow, n_events,"
                " unmatched, open_at_end) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
                " ?15, ?16, ?17, ?18, ?19)",
    [ST_DEL_COUNTERS] = "DELETE FROM counters WHERE step = ?1",
    [ST_DEL_MEMORY] = "DELETE FROM memory WHERE step = ?1",
    [ST_COUNTER] = "INSERT OR REPLACE INTO counters(step, name, n, min_value, max_value, last_value)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_MEMORY] = "INSERT OR REPLACE INTO memory(step, category, max_bytes) VALUES (?1, ?2, ?3)",
    [ST_EVENT] = "INSERT INTO events(tid, t_ns, kind, cat, name, op, a, b) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_INTERVAL] = "INSERT INTO temp.intervals(tid, cat, t0, t1) VALUES (?1, ?2, ?3, ?4)",
    [ST_VALUES] = "UPDATE steps SET loss = coalesce(?1, loss), lr = coalesce(?2, lr),"
                  " loss_scale = coalesce(?3, loss_scale), overflow = coalesce(?4, overflow) WHERE step = ?5",
    [ST_NAME] = "INSERT OR IGNORE INTO names(id, name) VALUES (?1, ?2)",
    [ST_THREAD_NEW] = "INSERT OR IGNORE INTO threads(tid) VALUES (?1)",
    [ST_THREAD_NAME] = "UPDATE threads SET name = ?2 WHERE tid = ?1",
    [ST_THREAD_MAIN] = "UPDATE threads SET is_main = 1 WHERE tid = ?1",
    [ST_META] = "INSERT OR REPLACE INTO run(key, value) VALUES (?1, ?2)",
    [ST_FOLDED] = "INSERT INTO samples(tid, stack, count) VALUES (?1, ?2, ?3)"
                  " ON CONFLICT(tid, stack) DO UPDATE SET count = count + excluded.count",
};

/* ---- state ---- */

typedef struct {
    uint32_t tid;
    uint32_t n;
    uint64_t start;     /* absolute position in the ring */
    uint64_t t_ns;      /* when it was queued: a recording thread drains items older than WRITER_STALE_NS */
} q_item;

typedef struct {
    uint32_t tid;
    mst_attr_tracker tr;
    uint64_t n_events;
} thread_state;

typedef struct {
    uint32_t name;                      /* "mem.<category>" */
    int64_t level, step_max, peak;      /* last value on the main thread, max in this step, run peak */
    int level_known, step_has;
} mem_cat;

typedef struct {
    uint32_t name;
    int64_t n, min, max, last;
} step_counter;

enum { NAME_STORED = 1, NAME_CLASSIFIED = 2, NAME_MEM = 4 };

struct mst_store {
    char *path;
    sqlite3 *db;
    mst_prof_config cfg;
    int trace_steps;
    uint64_t commit_ns;
    int commit_steps;

    /* the queue: a ring of records and a ring of (tid, count, start) items, under qlock */
    pthread_mutex_t qlock;
    pthread_cond_t q_data, q_room;
    mst_prof_event *ring;
    uint64_t cap, head, tail;
    q_item items[QUEUE_ITEMS];
    uint64_t ihead, itail;
    int closing, failed_q;
    uint64_t received, dropped, producer_waits, producer_wait_ns;

    pthread_t writer;
    int writer_started;
    int writer_sched_errno;     /* 0: the writer ran as SCHED_IDLE during the run; else why not */

    /* the database, under dblock */
    pthread_mutex_t dblock;
    sqlite3_stmt *st[ST_COUNT];
    int failed;
    char err[768];          /* first fatal error (writer or close) */
    char api_err[768];      /* last error of an API call */
    int txn_open, txn_steps;
    uint64_t txn_t0;
    uint64_t steps_written, commits;

    /* the writer's view of the run (writer thread, then close after the join) */
    thread_state *threads;
    size_t n_threads, cap_threads, last_thread;
    uint32_t main_tid;
    size_t main_index;          /* into threads */
    int main_known;
    mst_attr_ops *ops;
    int in_step, cur_warmup, cur_traced;
    int64_t cur_step;
    uint64_t cur_n_events;
    mst_attr_window win;
    double v_loss, v_lr, v_scale;
    int64_t v_overflow;
    int has_loss, has_lr, has_scale, has_overflow;
    int has_last_step, any_step_written;
    int64_t last_step, max_step_written;
    int traced, span_started, span_complete;
    uint64_t span_start, span_end, last_traced_end;
    mem_cat mem[MAX_MEM_CATS];
    int n_mem;
    step_counter ctr[MAX_STEP_COUNTERS];
    int n_ctr;
    uint8_t *name_flags;
    size_t name_flags_cap;
    uint32_t id_loss, id_lr, id_scale, id_overflow;
    uint64_t marker_errors, incomplete_steps, untracked_records, untracked_counters;
};

/* ---- error helpers: every SQLite call is checked, the message names the path and the site ---- */

static int fail_at(mst_store *s, int fatal, const char *what, const char *file, int line) {
    char *buf = fatal ? s->err : s->api_err;
    size_t n = fatal ? sizeof(s->err) : sizeof(s->api_err);
    if (!fatal || !s->failed) {
        const char *base = strrchr(file, '/');
        snprintf(buf, n, "profile store '%s': %s failed (%s:%d): %s", s->path, what, base ? base + 1 : file, line,
                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
    }
    if (fatal) s->failed = 1;
    return -1;
}
#define FAIL(s, what) fail_at((s), 1, (what), __FILE__, __LINE__)
#define API_FAIL(s, what) fail_at((s), 0, (what), __FILE__, __LINE__)
/* A bind or other call returning a SQLite status; the enclosing function returns -1 on failure. */
#define SQL_OK(s, call)                                               \
    do {                                                              \
        if ((call) != SQLITE_OK) return FAIL(s, #call);               \
    } while (0)

/* Run a bound statement that returns no rows, then reset it (bindings kept, so rebind all). */
static int run_at(mst_store *s, int fatal, sqlite3_stmt *st, const char *file, int line) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        fail_at(s, fatal, sqlite3_sql(st), file, line);
        sqlite3_reset(st);
        return -1;
    }
    if (sqlite3_reset(st) != SQLITE_OK) return fail_at(s, fatal, sqlite3_sql(st), file, line);
    return 0;
}
#define RUN(s, st) run_at((s), 1, (st), __FILE__, __LINE__)

static int exec_at(mst_store *s, const char *sql, const char *file, int line) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        sqlite3_free(msg);
        return fail_at(s, 1, sql, file, line);
    }
    return 0;
}
#define EXEC(s, sql) exec_at((s), (sql), __FILE__, __LINE__)

static uint64_t now_ns(void) { return mst_prof_now_ns(); }

static double bits_to_double(int64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

static int ensure_txn(mst_store *s) {
    if (s->txn_open) return 0;
    if (EXEC(s, "BEGIN") != 0) return -1;
    s->txn_open = 1;
    s->txn_t0 = now_ns();
    s->txn_steps = 0;
    return 0;
}

static int commit(mst_store *s) {
    if (!s->txn_open) return 0;
    s->txn_open = 0;
    if (EXEC(s, "COMMIT") != 0) return -1;
    s->commits++;
    return 0;
}

/* ---- names ---- */

static uint8_t *name_flags(mst_store *s, uint32_t id) {
    if (id >= s->name_flags_cap) {
        size_t cap = s->name_flags_cap ? s->name_flags_cap : 256;
        while (cap <= id) cap *= 2;
        uint8_t *f = realloc(s->name_flags, cap);
        if (!f) return NULL;
        memset(f + s->name_flags_cap, 0, cap - s->name_flags_cap);
        s->name_flags = f;
        s->name_flags_cap = cap;
    }
    return &s->name_flags[id];
}

static int name_is_mem(mst_store *s, uint32_t id) {
    uint8_t *f = name_flags(s, id);
    if (!f) return strncmp(mst_prof_name(id), "mem.", 4) == 0;
    if (!(*f & NAME_CLASSIFIED)) *f |= NAME_CLASSIFIED | (strncmp(mst_prof_name(id), "mem.", 4) == 0 ? NAME_MEM : 0);
    return (*f & NAME_MEM) != 0;
}

static int store_name(mst_store *s, uint32_t id) {
    if (id == 0) return 0;
    uint8_t *f = name_flags(s, id);
    if (f && (*f & NAME_STORED)) return 0;
    sqlite3_stmt *st = s->st[ST_NAME];
    SQL_OK(s, sqlite3_bind_int64(st, 1, id));
    SQL_OK(s, sqlite3_bind_text(st, 2, mst_prof_name(id), -1, SQLITE_STATIC));
    if (RUN(s, st) != 0) return -1;
    if (f) *f |= NAME_STORED;
    return 0;
}

/* ---- rows ---- */

static int store_event(mst_store *s, uint32_t tid, const mst_prof_event *e) {
    if (store_name(s, e->name) != 0) return -1;
    /* a kernel range's begin names its input signature in a (events.h: mst_prof_kernel_begin) */
    if (e->kind == MST_EV_BEGIN && e->cat == MST_CAT_KERNEL && e->a > 0 && e->a <= UINT32_MAX &&
        store_name(s, (uint32_t)e->a) != 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_EVENT];
    SQL_OK(s, sqlite3_bind_int64(st, 1, tid));
    SQL_OK(s, sqlite3_bind_int64(st, 2, (int64_t)e->t_ns));
    SQL_OK(s, sqlite3_bind_int(st, 3, e->kind));
    SQL_OK(s, sqlite3_bind_int(st, 4, e->cat));
    SQL_OK(s, sqlite3_bind_int64(st, 5, e->name));
    SQL_OK(s, sqlite3_bind_int(st, 6, e->op));
    SQL_OK(s, sqlite3_bind_int64(st, 7, e->a));
    SQL_OK(s, sqlite3_bind_int64(st, 8, e->b));
    return RUN(s, st);
}

static int store_interval(mst_store *s, uint32_t tid, int cat, uint64_t t0, uint64_t t1) {
    if (t1 <= t0) return 0;
    sqlite3_stmt *st = s->st[ST_INTERVAL];
    SQL_OK(s, sqlite3_bind_int64(st, 1, tid));
    SQL_OK(s, sqlite3_bind_int(st, 2, cat));
    SQL_OK(s, sqlite3_bind_int64(st, 3, (int64_t)t0));
    SQL_OK(s, sqlite3_bind_int64(st, 4, (int64_t)t1));
    return RUN(s, st);
}

static int bind_opt_double(mst_store *s, sqlite3_stmt *st, int i, int has, double v) {
    SQL_OK(s, has && isfinite(v) ? sqlite3_bind_double(st, i, v) : sqlite3_bind_null(st, i));
    return 0;
}

static thread_state *thread_get(mst_store *s, uint32_t tid) {
    if (s->last_thread < s->n_threads && s->threads[s->last_thread].tid == tid) return &s->threads[s->last_thread];
    for (size_t i = 0; i < s->n_threads; i++)
        if (s->threads[i].tid == tid) return &s->threads[s->last_thread = i];
    if (s->n_threads == MAX_THREADS) return NULL;
    if (s->n_threads == s->cap_threads) {
        size_t cap = s->cap_threads ? s->cap_threads * 2 : 16;
        thread_state *t = realloc(s->threads, cap * sizeof(*t));
        if (!t) return NULL;
        s->threads = t;
        s->cap_threads = cap;
    }
    thread_state *th = &s->threads[s->n_threads];
    memset(th, 0, sizeof(*th));
    th->tid = tid;
    sqlite3_stmt *st = s->st[ST_THREAD_NEW];
    if (sqlite3_bind_int64(st, 1, tid) != SQLITE_OK) {
        FAIL(s, "sqlite3_bind_int64(threads.tid)");
        return NULL;
    }
    if (RUN(s, st) != 0) return NULL;
    s->last_thread = s->n_threads++;
    return th;
}

static int thread_named(mst_store *s, thread_state *th, const mst_prof_event *e) {
    sqlite3_stmt *st = s->st[ST_THREAD_NAME];
    SQL_OK(s, sqlite3_bind_int64(st, 1, th->tid));
    SQL_OK(s, sqlite3_bind_text(st, 2, mst_prof_name(e->name), -1, SQLITE_STATIC));
    return RUN(s, st);
}

static mem_cat *mem_get(mst_store *s, uint32_t name) {
    for (int i = 0; i < s->n_mem; i++)
        if (s->mem[i].name == name) return &s->mem[i];
    if (s->n_mem == MAX_MEM_CATS) return NULL;
    mem_cat *m = &s->mem[s->n_mem++];
    memset(m, 0, sizeof(*m));
    m->name = name;
    return m;
}

static void mem_peak(mem_cat *m, int64_t v) {
    if (v > m->peak) m->peak = v;       /* bytes in use: never negative, so the peak starts at 0 */
}

/* ---- steps ---- */

static void begin_step(mst_store *s, thread_state *th, const mst_prof_event *e) {
    s->in_step = 1;
    s->cur_step = e->a;
    s->cur_warmup = mst_prof_schedule_phase(&s->cfg, e->a) != MST_PROF_STEP_ACTIVE;
    s->cur_traced = !s->cur_warmup && s->traced < s->trace_steps;
    if (s->cur_traced && !s->span_started) {
        s->span_started = 1;
        s->span_start = e->t_ns;
    }
    s->cur_n_events = 1;
    s->has_loss = s->has_lr = s->has_scale = s->has_overflow = 0;
    for (int i = 0; i < s->n_mem; i++) {
        s->mem[i].step_has = s->mem[i].level_known;
        s->mem[i].step_max = s->mem[i].level;
    }
    s->n_ctr = 0;
    mst_attr_window_begin(&s->win, &th->tr, e->t_ns);
}

static int prune_trace(mst_store *s, uint64_t t_lo, uint64_t t_hi, int all_tids) {
    sqlite3_stmt *st = NULL;
    const char *sql = all_tids ? "DELETE FROM events WHERE t_ns < ?1 OR t_ns > ?2"
                               : "DELETE FROM events WHERE tid != ?3 AND (t_ns < ?1 OR t_ns > ?2)";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return FAIL(s, sql);
    int rc = -1;
    if (sqlite3_bind_int64(st, 1, (int64_t)t_lo) != SQLITE_OK || sqlite3_bind_int64(st, 2, (int64_t)t_hi) != SQLITE_OK ||
        (!all_tids && sqlite3_bind_int64(st, 3, s->main_tid) != SQLITE_OK))
        FAIL(s, "sqlite3_bind_int64(prune)");
    else
        rc = RUN(s, st);
    sqlite3_finalize(st);
    return rc;
}

static int finish_step(mst_store *s, thread_state *th, uint64_t t_end) {
    mst_attr_result r;
    mst_attr_window_end(&s->win, &th->tr, t_end, &r);
    s->in_step = 0;
    const int64_t step = s->cur_step;
    if (s->any_step_written && step <= s->max_step_written) {     /* a step number seen again replaces its rows */
        for (int k = ST_DEL_COUNTERS; k <= ST_DEL_MEMORY; k++) {
            SQL_OK(s, sqlite3_bind_int64(s->st[k], 1, step));
            if (RUN(s, s->st[k]) != 0) return -1;
        }
    }
    sqlite3_stmt *st = s->st[ST_STEP];
    SQL_OK(s, sqlite3_bind_int64(st, 1, step));
    SQL_OK(s, sqlite3_bind_int64(st, 2, (int64_t)r.t_begin));
    SQL_OK(s, sqlite3_bind_int64(st, 3, (int64_t)r.t_end));
    SQL_OK(s, sqlite3_bind_int64(st, 4, (int64_t)(r.t_end - r.t_begin)));
    for (int c = 0; c < MST_CAT_COUNT; c++) SQL_OK(s, sqlite3_bind_int64(st, 5 + c, (int64_t)r.ns[c]));
    SQL_OK(s, sqlite3_bind_int(st, 12, s->cur_warmup));
    if (bind_opt_double(s, st, 13, s->has_loss, s->v_loss) != 0 || bind_opt_double(s, st, 14, s->has_lr, s->v_lr) != 0 ||
        bind_opt_double(s, st, 15, s->has_scale, s->v_scale) != 0)
        return -1;
    SQL_OK(s, s->has_overflow ? sqlite3_bind_int64(st, 16, s->v_overflow) : sqlite3_bind_null(st, 16));
    SQL_OK(s, sqlite3_bind_int64(st, 17, (int64_t)s->cur_n_events));
    SQL_OK(s, sqlite3_bind_int64(st, 18, (int64_t)(r.unmatched_end + r.too_deep + r.out_of_order)));
    SQL_OK(s, sqlite3_bind_int64(st, 19, (int64_t)r.open_at_end));
    if (RUN(s, st) != 0) return -1;

    st = s->st[ST_COUNTER];
    for (int i = 0; i < s->n_ctr; i++) {
        const step_counter *c = &s->ctr[i];
        SQL_OK(s, sqlite3_bind_int64(st, 1, step));
        SQL_OK(s, sqlite3_bind_text(st, 2, mst_prof_name(c->name), -1, SQLITE_STATIC));
        SQL_OK(s, sqlite3_bind_int64(st, 3, c->n));
        SQL_OK(s, sqlite3_bind_int64(st, 4, c->min));
        SQL_OK(s, sqlite3_bind_int64(st, 5, c->max));
        SQL_OK(s, sqlite3_bind_int64(st, 6, c->last));
        if (RUN(s, st) != 0) return -1;
    }
    st = s->st[ST_MEMORY];
    for (int i = 0; i < s->n_mem; i++) {
        const mem_cat *m = &s->mem[i];
        if (!m->step_has) continue;
        SQL_OK(s, sqlite3_bind_int64(st, 1, step));
        SQL_OK(s, sqlite3_bind_text(st, 2, mst_prof_name(m->name) + 4, -1, SQLITE_STATIC));
        SQL_OK(s, sqlite3_bind_int64(st, 3, m->step_max));
        if (RUN(s, st) != 0) return -1;
    }
    if (!s->any_step_written || step > s->max_step_written) s->max_step_written = step;
    s->any_step_written = 1;
    s->has_last_step = 1;
    s->last_step = step;
    s->steps_written++;
    s->txn_steps++;
    if (s->cur_traced) {
        s->traced++;
        s->last_traced_end = r.t_end;
        if (s->traced == s->trace_steps) {
            s->span_complete = 1;
            s->span_end = r.t_end;
            /* other threads' records were kept while the span's end was unknown */
            if (prune_trace(s, s->span_start, s->span_end, 0) != 0) return -1;
        }
    }
    return 0;
}

/* ---- records ---- */

static int span_active(const mst_store *s) { return s->trace_steps > 0 && s->span_started && !s->span_complete; }

static int counter_main(mst_store *s, const mst_prof_event *e) {
    if (name_is_mem(s, e->name)) {
        mem_cat *m = mem_get(s, e->name);
        if (!m) {
            s->untracked_counters++;
            return 0;
        }
        mem_peak(m, e->a);
        m->level = e->a;
        m->level_known = 1;
        if (s->in_step) {
            if (!m->step_has || e->a > m->step_max) m->step_max = e->a;
            m->step_has = 1;
        }
        return 0;
    }
    if (!s->in_step) return 0;
    int i = 0;
    while (i < s->n_ctr && s->ctr[i].name != e->name) i++;
    if (i == s->n_ctr) {
        if (s->n_ctr == MAX_STEP_COUNTERS) {
            s->untracked_counters++;
            return 0;
        }
        s->ctr[s->n_ctr++] = (step_counter){e->name, 0, e->a, e->a, e->a};
    }
    step_counter *c = &s->ctr[i];
    c->n++;
    if (e->a < c->min) c->min = e->a;
    if (e->a > c->max) c->max = e->a;
    c->last = e->a;
    return 0;
}

static int value_main(mst_store *s, const mst_prof_event *e) {
    const double v = bits_to_double(e->a);
    double loss = 0, lr = 0, scale = 0;
    int has_loss = 0, has_lr = 0, has_scale = 0, has_over = 0;
    int64_t over = 0;
    if (e->name == s->id_loss) has_loss = 1, loss = v;
    else if (e->name == s->id_lr) has_lr = 1, lr = v;
    else if (e->name == s->id_scale) has_scale = 1, scale = v;
    else if (e->name == s->id_overflow) has_over = 1, over = v != 0;
    else return 0;
    if (s->in_step) {
        if (has_loss) s->has_loss = 1, s->v_loss = loss;
        if (has_lr) s->has_lr = 1, s->v_lr = lr;
        if (has_scale) s->has_scale = 1, s->v_scale = scale;
        if (has_over) s->has_overflow = 1, s->v_overflow = over;
        return 0;
    }
    if (!s->has_last_step) return 0;    /* a value before any step belongs to none */
    sqlite3_stmt *st = s->st[ST_VALUES];
    if (bind_opt_double(s, st, 1, has_loss, loss) != 0 || bind_opt_double(s, st, 2, has_lr, lr) != 0 ||
        bind_opt_double(s, st, 3, has_scale, scale) != 0)
        return -1;
    SQL_OK(s, has_over ? sqlite3_bind_int64(st, 4, over) : sqlite3_bind_null(st, 4));
    SQL_OK(s, sqlite3_bind_int64(st, 5, s->last_step));
    return RUN(s, st);
}

static int main_event(mst_store *s, thread_state *th, const mst_prof_event *e) {
    if (e->kind == MST_EV_STEP_BEGIN) {
        if (s->in_step) {           /* a missing STEP_END: the open step ends here */
            s->marker_errors++;
            if (finish_step(s, th, e->t_ns) != 0) return -1;
        }
        mst_attr_track(&th->tr, e, NULL);
        begin_step(s, th, e);
        return span_active(s) ? store_event(s, th->tid, e) : 0;
    }
    if (e->kind == MST_EV_STEP_END) {
        if (!s->in_step) {
            s->marker_errors++;
            return 0;
        }
        if (e->a != s->cur_step) s->marker_errors++;
        mst_attr_window_advance(&s->win, &th->tr, e->t_ns);
        mst_attr_track(&th->tr, e, NULL);
        s->cur_n_events++;
        if (span_active(s) && store_event(s, th->tid, e) != 0) return -1;
        return finish_step(s, th, e->t_ns);
    }
    if (s->in_step) {
        mst_attr_window_advance(&s->win, &th->tr, e->t_ns);
        s->cur_n_events++;
    }
    mst_attr_range r;
    if (mst_attr_track(&th->tr, e, &r) && s->in_step && !s->cur_warmup && r.cat == MST_CAT_KERNEL)
        mst_attr_ops_add(s->ops, r.name, r.op, r.t1 - r.t0, r.flops, r.bytes);
    int rc = 0;
    if (e->kind == MST_EV_COUNTER) rc = counter_main(s, e);
    else if (e->kind == MST_EV_VALUE) rc = value_main(s, e);
    else if (e->kind == MST_EV_THREAD_NAME) rc = thread_named(s, th, e);
    if (rc == 0 && span_active(s)) rc = store_event(s, th->tid, e);
    return rc;
}

static uint64_t main_last_t(const mst_store *s) { return s->threads[s->main_index].tr.last_t; }

static int other_event(mst_store *s, thread_state *th, const mst_prof_event *e) {
    mst_attr_range r;
    if (mst_attr_track(&th->tr, e, &r) && store_interval(s, th->tid, r.cat, r.t0, r.t1) != 0) return -1;
    if (e->kind == MST_EV_COUNTER && name_is_mem(s, e->name)) {
        mem_cat *m = mem_get(s, e->name);
        if (m) mem_peak(m, e->a);
        else s->untracked_counters++;
    } else if (e->kind == MST_EV_THREAD_NAME && thread_named(s, th, e) != 0) {
        return -1;
    }
    /* raw records: kept while they may fall inside the trace span, pruned once its end is known.
     * Before the span starts, it can only start after the main thread's latest record. */
    if (s->trace_steps == 0 || (s->span_complete && e->t_ns > s->span_end)) return 0;
    if (s->span_started ? e->t_ns < s->span_start : s->main_known && e->t_ns < main_last_t(s)) return 0;
    return store_event(s, th->tid, e);
}

static int process_item(mst_store *s, const q_item *it) {
    if (ensure_txn(s) != 0) return -1;
    thread_state *th = thread_get(s, it->tid);
    if (!th) {
        if (s->failed) return -1;
        s->untracked_records += it->n;
        return 0;
    }
    const uint64_t mask = s->cap - 1;
    if (!s->main_known) {       /* the main thread is the one that marks steps */
        for (uint32_t i = 0; i < it->n; i++) {
            uint8_t k = s->ring[(it->start + i) & mask].kind;
            if (k == MST_EV_STEP_BEGIN || k == MST_EV_STEP_END) {
                s->main_known = 1;
                s->main_tid = it->tid;
                s->main_index = (size_t)(th - s->threads);
                SQL_OK(s, sqlite3_bind_int64(s->st[ST_THREAD_MAIN], 1, it->tid));
                if (RUN(s, s->st[ST_THREAD_MAIN]) != 0) return -1;
                break;
            }
        }
    }
    const int is_main = s->main_known && s->main_tid == it->tid;
    for (uint32_t i = 0; i < it->n; i++) {
        const mst_prof_event *e = &s->ring[(it->start + i) & mask];
        th->n_events++;
        if ((is_main ? main_event(s, th, e) : other_event(s, th, e)) != 0) return -1;
    }
    return 0;
}

/* ---- the queue ---- */

static int drain_one(mst_store *s);

static int has_room(const mst_store *s, uint64_t n) {
    return s->cap - (s->tail - s->head) >= n && s->itail - s->ihead < QUEUE_ITEMS;
}

void mst_store_sink(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    mst_store *s = user;
    const uint64_t t_call = now_ns();       /* the items' age is measured from here */
    pthread_mutex_lock(&s->qlock);
    while (n > 0) {
        if (s->failed_q || s->closing) {
            s->dropped += n;
            break;
        }
        uint64_t piece = n < s->cap ? n : s->cap;
        if (!has_room(s, piece)) {
            s->producer_waits++;
            uint64_t t0 = now_ns();
            while (!has_room(s, piece) && !s->failed_q && !s->closing) {
                pthread_mutex_unlock(&s->qlock);        /* help the writer (drain_one) rather than wait for it */
                const int helped = drain_one(s);
                pthread_mutex_lock(&s->qlock);
                if (!helped && !has_room(s, piece) && !s->failed_q && !s->closing) pthread_cond_wait(&s->q_room, &s->qlock);
            }
            s->producer_wait_ns += now_ns() - t0;
            continue;
        }
        const uint64_t at = s->tail & (s->cap - 1);
        const uint64_t first = piece < s->cap - at ? piece : s->cap - at;
        memcpy(&s->ring[at], ev, first * sizeof(*ev));
        if (first < piece) memcpy(&s->ring[0], ev + first, (piece - first) * sizeof(*ev));
        s->items[s->itail & (QUEUE_ITEMS - 1)] = (q_item){tid, (uint32_t)piece, s->tail, t_call};
        s->itail++;
        s->tail += piece;
        s->received += piece;
        ev += piece;
        n -= piece;
        /* Wake the backstop writer only when the queue fills up (writer_main); the recording
         * threads drain it below, between steps. */
        if (s->tail - s->head >= s->cap / 4 || s->itail - s->ihead >= QUEUE_ITEMS / 4) pthread_cond_signal(&s->q_data);
    }
    /* The recording thread writes the queue itself once its oldest item is WRITER_STALE_NS old,
     * timed in its hand-off (flush_ns): the writing happens between steps, where the estimate
     * sees it, and what a kill loses stays bounded by WRITER_STALE_NS plus the commit window
     * (docs/profile-schema.md). Where the steps leave a core idle (mst_prof_spare_core: the step
     * on one thread of two), the writer does it there instead, woken now; the hand-off drains only
     * what the writer left twice as long (a machine busy after all), so the bound holds at twice. */
    uint64_t stale = 0;     /* the items queued now: others' later hand-offs are theirs to drain */
    if (s->ihead != s->itail && !s->failed_q && !s->closing) {
        const uint64_t queued_at = s->items[s->ihead & (QUEUE_ITEMS - 1)].t_ns;     /* may be after t_call */
        const uint64_t age = t_call > queued_at ? t_call - queued_at : 0;
        const bool spare = mst_prof_spare_core();
        if (age > (spare ? 2 : 1) * WRITER_STALE_NS) stale = s->itail - s->ihead;
        else if (spare && age > WRITER_STALE_NS) pthread_cond_signal(&s->q_data);
    }
    pthread_mutex_unlock(&s->qlock);
    for (; stale > 0 && drain_one(s); stale--) {}
}

static void deadline_ts(uint64_t t_ns, struct timespec *ts) {
    ts->tv_sec = (time_t)(t_ns / 1000000000ull);
    ts->tv_nsec = (long)(t_ns % 1000000000ull);
}

/* Process the queue's oldest item, if there is one; 0 when the queue was empty. The writer's loop
 * calls it, and so do a producer that finds the queue full and a closing caller: a SCHED_IDLE writer
 * on a machine with no idle cycle falls behind, and then the recording threads do the work at their
 * hand-off, where it is timed (flush_ns, in the overhead estimate). dblock is held from taking the
 * item to retiring it, so items are processed in order whoever processes them. Lock order: dblock,
 * then qlock. */
static int drain_one(mst_store *s) {
    pthread_mutex_lock(&s->dblock);
    pthread_mutex_lock(&s->qlock);
    if (s->ihead == s->itail) {
        pthread_mutex_unlock(&s->qlock);
        pthread_mutex_unlock(&s->dblock);
        return 0;
    }
    const q_item it = s->items[s->ihead & (QUEUE_ITEMS - 1)];
    pthread_mutex_unlock(&s->qlock);
    if (!s->failed) {
        process_item(s, &it);
        if (!s->failed && s->txn_open && (now_ns() - s->txn_t0 >= s->commit_ns || s->txn_steps >= s->commit_steps))
            commit(s);
    }
    const int failed_now = s->failed;
    pthread_mutex_lock(&s->qlock);
    if (failed_now) s->dropped += it.n;     /* discarded, or cut short by the failure */
    if (failed_now && !s->failed_q) s->failed_q = 1;
    s->ihead++;
    s->head += it.n;
    pthread_cond_broadcast(&s->q_room);
    pthread_mutex_unlock(&s->qlock);
    pthread_mutex_unlock(&s->dblock);
    return 1;
}

/* The writer is a backstop, not the one who writes. The recording threads write the queue
 * themselves at their hand-off once its oldest item is WRITER_STALE_NS old (the trainer hands its
 * records over at the end of each recording window or every MST_PROF_HANDOFF_NS, so that is every
 * ~200 ms, between steps), timed in flush_ns and so in the
 * overhead estimate. A writer thread doing that work while the step's kernels ran cost far more
 * than its CPU time: as an ordinary thread ~75 us of work per cnn step cost +1.2 to +3.1% of step
 * time on 2 cores (preempting one thread of a parallel region stalls the region), and even as
 * SCHED_IDLE +1.5 to +2.7%, against a deferred writer's +0.5 to +0.9% (docs/benchmarks.md) — cost
 * the estimate could not see. So this thread (SCHED_IDLE) wakes every WRITER_POLL_NS and drains
 * only what nobody handed over for WRITER_STALE_NS (a long step, an evaluation pass, a stalled
 * run) or a queue filling up, and commits a transaction left open past its deadline with nothing
 * queued: what a kill loses stays bounded while the recording threads are away. Where the steps
 * leave a core idle (mst_prof_spare_core: a one-thread step on two cores), nothing runs beside the
 * step for this thread to stall, and it is the one who writes (woken by the hand-off that finds
 * the queue WRITER_STALE_NS old): the mlp's profile at batch 64 on one thread cost +4.1-4.2% of
 * step time with the drains in its hand-offs and +0.9-2.6% with the writer draining
 * (bench/profile_cost.sh, the builds in turns; docs/benchmarks.md). */
static void *writer_main(void *arg) {
    mst_store *s = arg;
    const struct sched_param idle = {0};
    s->writer_sched_errno = pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);    /* read after the join */
    for (;;) {
        pthread_mutex_lock(&s->qlock);
        if (s->closing) {
            pthread_mutex_unlock(&s->qlock);
            break;
        }
        const uint64_t now = now_ns(), queued = s->itail - s->ihead;
        const uint64_t oldest = queued ? s->items[s->ihead & (QUEUE_ITEMS - 1)].t_ns : now;
        const int due = queued > 0 && ((now > oldest && now - oldest >= WRITER_STALE_NS) || s->tail - s->head >= s->cap / 4 ||
                                       queued >= QUEUE_ITEMS / 4);
        if (due) {
            pthread_mutex_unlock(&s->qlock);
            for (uint64_t k = 0; k < queued && drain_one(s); k++) {}
            continue;
        }
        struct timespec ts;
        deadline_ts(now + WRITER_POLL_NS, &ts);
        pthread_cond_timedwait(&s->q_data, &s->qlock, &ts);
        const int empty = s->ihead == s->itail;
        pthread_mutex_unlock(&s->qlock);
        if (!empty) continue;
        pthread_mutex_lock(&s->dblock);     /* an open transaction past its deadline with nothing queued */
        if (!s->failed && s->txn_open && now_ns() - s->txn_t0 >= s->commit_ns) commit(s);
        const int failed = s->failed;
        pthread_mutex_unlock(&s->dblock);
        if (failed) {
            pthread_mutex_lock(&s->qlock);
            if (!s->failed_q) {
                s->failed_q = 1;
                pthread_cond_broadcast(&s->q_room);
            }
            pthread_mutex_unlock(&s->qlock);
        }
    }
    return NULL;
}

/* ---- open ---- */

static int set_meta_locked(mst_store *s, int fatal, const char *key, const char *value) {
    sqlite3_stmt *st = s->st[ST_META];
    if (sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT) != SQLITE_OK)
        return fail_at(s, fatal, "sqlite3_bind_text(run)", __FILE__, __LINE__);
    return run_at(s, fatal, st, __FILE__, __LINE__);
}

static int set_meta_i64(mst_store *s, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    return set_meta_locked(s, 1, key, buf);
}

static int remove_old(const char *path, char *err, size_t errn) {
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char p[4096];
        if (snprintf(p, sizeof(p), "%s%s", path, suffix[i]) >= (int)sizeof(p)) {
            snprintf(err, errn, "profile store '%s': path too long", path);
            return -1;
        }
        if (unlink(p) != 0 && errno != ENOENT) {
            snprintf(err, errn, "profile store '%s': cannot replace %s: %s", path, p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void store_free(mst_store *s) {
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
    if (s->db) sqlite3_close(s->db);
    pthread_mutex_destroy(&s->qlock);
    pthread_mutex_destroy(&s->dblock);
    pthread_cond_destroy(&s->q_data);
    pthread_cond_destroy(&s->q_room);
    mst_attr_ops_free(s->ops);
    free(s->ring);
    free(s->threads);
    free(s->name_flags);
    free(s->path);
    free(s);
}

mst_store *mst_store_open(const char *path, const mst_prof_config *cfg, int trace_steps, char *err, size_t errn) {
    return mst_store_open_opts(path, cfg, trace_steps, NULL, err, errn);
}

mst_store *mst_store_open_opts(const char *path, const mst_prof_config *cfg, int trace_steps,
                               const mst_store_options *opt, char *err, size_t errn) {
    mst_store *s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path))) {
        snprintf(err, errn, "profile store '%s': out of memory", path);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->qlock, NULL);
    pthread_mutex_init(&s->dblock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);    /* deadlines come from mst_prof_now_ns */
    pthread_cond_init(&s->q_data, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->q_room, NULL);

    if (cfg) s->cfg = *cfg;
    else s->cfg.level = MST_PROF_LEVEL_OPS;
    s->trace_steps = trace_steps > 0 ? trace_steps : 0;
    size_t qn = opt && opt->queue_events ? opt->queue_events : DEFAULT_QUEUE_EVENTS;
    s->cap = 1;
    while (s->cap < qn && s->cap < (1ull << 30)) s->cap <<= 1;
    s->commit_ns = (uint64_t)(opt && opt->commit_ms > 0 ? opt->commit_ms : 100) * 1000000ull;
    /* 256: the 100 ms window decides at any step faster than 0.4 ms; at 16, a 0.7 ms mlp step paid a
     * commit every 11 ms (0.26 points of its profile's cost, docs/benchmarks.md) */
    s->commit_steps = opt && opt->commit_steps > 0 ? opt->commit_steps : 256;
    s->ring = malloc(s->cap * sizeof(*s->ring));
    s->ops = mst_attr_ops_new();
    if (!s->ring || !s->ops) {
        snprintf(err, errn, "profile store '%s': out of memory for the queue", path);
        goto fail;
    }
    /* touched now, not by the first pass of the recording threads' hand-offs: untouched, the
     * ring's page faults were ~70 us of each step's hand-off on the cnn (flush_ns) */
    memset(s->ring, 0, s->cap * sizeof(*s->ring));
    s->id_loss = mst_prof_intern("loss");
    s->id_lr = mst_prof_intern("lr");
    s->id_scale = mst_prof_intern("loss_scale");
    s->id_overflow = mst_prof_intern("overflow");

    if (remove_old(path, err, errn) != 0) goto fail;
    /* NOMUTEX: the connection is only used under dblock (the sink's drains, the writer, the API
     * calls, close), so SQLite's own per-call mutex (every bind and step) is redundant */
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        FAIL(s, "sqlite3_open_v2");
        goto fail_msg;
    }
    /* a reader that opened the new file first (a report, or test_advise polling the staged run)
     * holds a lock for a moment; switching to WAL needs it gone: wait for it rather than fail
     * ("database is locked" made one profiled run exit 74 under make test's load) */
    sqlite3_busy_timeout(s->db, 5000);
    sqlite3_stmt *jm = NULL;
    if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &jm, NULL) != SQLITE_OK) {
        FAIL(s, "PRAGMA journal_mode=WAL");
        goto fail_msg;
    }
    int rc = sqlite3_step(jm);
    const int wal = rc == SQLITE_ROW && sqlite3_column_text(jm, 0) &&
                    strcmp((const char *)sqlite3_column_text(jm, 0), "wal") == 0;
    if (rc != SQLITE_ROW) FAIL(s, "PRAGMA journal_mode=WAL");
    sqlite3_finalize(jm);
    if (rc != SQLITE_ROW) goto fail_msg;
    if (!wal) {
        snprintf(err, errn, "profile store '%s': the file system does not support WAL mode", path);
        goto fail;
    }
    char pragma[64];
    snprintf(pragma, sizeof(pragma), "PRAGMA user_version=%d", MST_STORE_SCHEMA_VERSION);
    if (EXEC(s, "PRAGMA synchronous=NORMAL") != 0 || EXEC(s, pragma) != 0) goto fail_msg;
    if (opt && opt->max_db_bytes > 0) {
        sqlite3_stmt *ps = NULL;
        int64_t page = 0;
        if (sqlite3_prepare_v2(s->db, "PRAGMA page_size", -1, &ps, NULL) == SQLITE_OK && sqlite3_step(ps) == SQLITE_ROW)
            page = sqlite3_column_int64(ps, 0);
        if (page <= 0) FAIL(s, "PRAGMA page_size");
        sqlite3_finalize(ps);
        if (page <= 0) goto fail_msg;
        snprintf(pragma, sizeof(pragma), "PRAGMA max_page_count=%lld", (long long)((opt->max_db_bytes + page - 1) / page));
        if (EXEC(s, pragma) != 0) goto fail_msg;
    }
    if (EXEC(s, "BEGIN") != 0 ||
        EXEC(s, k_schema) != 0)
        goto fail_msg;
    for (int i = 0; i < ST_COUNT; i++)
        if (sqlite3_prepare_v3(s->db, k_stmts[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) != SQLITE_OK) {
            FAIL(s, k_stmts[i]);
            goto fail_msg;
        }
    if (set_meta_i64(s, "schema_version", MST_STORE_SCHEMA_VERSION) != 0 ||
        set_meta_i64(s, "profiler.level", s->cfg.level) != 0 || set_meta_i64(s, "profiler.skip", s->cfg.skip) != 0 ||
        set_meta_i64(s, "profiler.warmup", s->cfg.warmup) != 0 || set_meta_i64(s, "profiler.active", s->cfg.active) != 0 ||
        set_meta_i64(s, "profiler.repeat", s->cfg.repeat) != 0 || set_meta_i64(s, "profiler.wait", s->cfg.wait) != 0 ||
        set_meta_i64(s, "profiler.op_every", s->cfg.op_every > 1 ? s->cfg.op_every : 1) != 0 ||
        set_meta_i64(s, "trace_steps", s->trace_steps) != 0 ||
        set_meta_locked(s, 1, "clock", "CLOCK_MONOTONIC, ns") != 0 ||
        set_meta_locked(s, 1, "sqlite_version", sqlite3_libversion()) != 0 || EXEC(s, "COMMIT") != 0)
        goto fail_msg;
    /* the writer starts with every signal blocked: process-directed signals (SIGINT, a sampler's
     * SIGPROF) go to the threads that expect them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int started = pthread_create(&s->writer, NULL, writer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started != 0) {
        snprintf(err, errn, "profile store '%s': cannot start the writer thread: %s", path, strerror(started));
        goto fail;
    }
    s->writer_started = 1;
    pthread_setname_np(s->writer, "mst-store");
    return s;
fail_msg:
    snprintf(err, errn, "%s", s->err);
fail:
    store_free(s);
    return NULL;
}

/* ---- caller-side API ---- */

const char *mst_store_error(const mst_store *s) { return s->api_err[0] ? s->api_err : s->err; }

int mst_store_set_meta(mst_store *s, const char *key, const char *value) {
    if (!key) return -1;
    pthread_mutex_lock(&s->dblock);
    int rc = set_meta_locked(s, 0, key, value);
    pthread_mutex_unlock(&s->dblock);
    return rc;
}

int mst_store_add_folded(mst_store *s, uint32_t tid, const char *folded_stack, int64_t count) {
    if (!folded_stack) return -1;
    pthread_mutex_lock(&s->dblock);
    sqlite3_stmt *st = s->st[ST_FOLDED];
    int rc = -1;
    if (sqlite3_bind_int64(st, 1, tid) != SQLITE_OK || sqlite3_bind_text(st, 2, folded_stack, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, count) != SQLITE_OK)
        API_FAIL(s, "sqlite3_bind(samples)");
    else
        rc = run_at(s, 0, st, __FILE__, __LINE__);
    pthread_mutex_unlock(&s->dblock);
    return rc;
}

/* One-off statement from the caller's thread; joins the writer's open transaction if there is one. */
static int api_exec(mst_store *s, const char *sql, int n, const double *v, const int is_int[]) {
    pthread_mutex_lock(&s->dblock);
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        API_FAIL(s, sql);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int b = is_int[i] ? sqlite3_bind_int64(st, i + 1, (int64_t)v[i]) : sqlite3_bind_double(st, i + 1, v[i]);
        if (b != SQLITE_OK) {
            API_FAIL(s, "sqlite3_bind");
            goto out;
        }
    }
    rc = run_at(s, 0, st, __FILE__, __LINE__);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->dblock);
    return rc;
}

int mst_store_set_sampler_summary(mst_store *s, int64_t samples, double dispatch_share, double hz) {
    const double v[3] = {(double)samples, dispatch_share, hz};
    const int is_int[3] = {1, 0, 0};
    return api_exec(s,
                    "INSERT INTO sampler(id, samples, dispatch_share, hz) VALUES (1, ?1, ?2, ?3) ON CONFLICT(id) DO UPDATE"
                    " SET samples = excluded.samples, dispatch_share = excluded.dispatch_share, hz = excluded.hz",
                    3, v, is_int);
}

int mst_store_set_overhead(mst_store *s, const mst_prof_overhead *o, double run_wall_s) {
    /* the cost recording threads paid: each record and its preparation, the time spent handing
     * chunks to the sink, and the stack sampler's signal deliveries and unwinding (every collector) */
    const double overhead_ns = mst_prof_overhead_ns(o);
    const double v[11] = {(double)o->records, o->record_ns, (double)o->flush_ns, (double)o->flushes, run_wall_s,
                          overhead_ns, run_wall_s > 0 ? overhead_ns / (run_wall_s * 1e9) : 0, (double)o->sampler_ns,
                          (double)o->probe_ns, (double)o->prep_ns, (double)o->sig_miss_ns};
    const int is_int[11] = {1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1};
    return api_exec(s,
                    "INSERT INTO profiler_overhead(id, records, record_ns, flush_ns, flushes, run_wall_s, overhead_ns,"
                    " overhead_share, sampler_ns, probe_ns, prep_ns, sig_miss_ns)"
                    " VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                    " ON CONFLICT(id) DO UPDATE SET"
                    " records = excluded.records, record_ns = excluded.record_ns, flush_ns = excluded.flush_ns,"
                    " flushes = excluded.flushes, run_wall_s = excluded.run_wall_s, overhead_ns = excluded.overhead_ns,"
                    " overhead_share = excluded.overhead_share, sampler_ns = excluded.sampler_ns,"
                    " probe_ns = excluded.probe_ns, prep_ns = excluded.prep_ns, sig_miss_ns = excluded.sig_miss_ns",
                    11, v, is_int);
}

int mst_store_add_underflow(mst_store *s, const mst_store_underflow *u) {
    static const char sql[] = "INSERT OR REPLACE INTO grad_underflow(step, half, elements, ref_nonzero, half_zero, cast_zero,"
                              " cast_subnormal, fraction, probe_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
    pthread_mutex_lock(&s->dblock);
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        API_FAIL(s, sql);
        goto out;
    }
    const int64_t iv[6] = {u->elements, u->ref_nonzero, u->half_zero, u->cast_zero, u->cast_subnormal, u->probe_ns};
    int b = sqlite3_bind_int64(st, 1, u->step) | sqlite3_bind_text(st, 2, u->half, -1, SQLITE_TRANSIENT);
    for (int i = 0; i < 5; i++) b |= sqlite3_bind_int64(st, 3 + i, iv[i]);
    b |= sqlite3_bind_double(st, 8, u->ref_nonzero > 0 ? (double)u->half_zero / (double)u->ref_nonzero : 0);
    b |= sqlite3_bind_int64(st, 9, iv[5]);
    if (b != SQLITE_OK) {
        API_FAIL(s, "sqlite3_bind(grad_underflow)");
        goto out;
    }
    rc = run_at(s, 0, st, __FILE__, __LINE__);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->dblock);
    return rc;
}

mst_store_stats mst_store_get_stats(mst_store *s) {
    mst_store_stats r = {0};
    pthread_mutex_lock(&s->qlock);
    r.received = s->received;
    r.dropped = s->dropped;
    r.producer_waits = s->producer_waits;
    r.producer_wait_ns = s->producer_wait_ns;
    pthread_mutex_unlock(&s->qlock);
    pthread_mutex_lock(&s->dblock);
    r.steps = s->steps_written;
    r.commits = s->commits;
    pthread_mutex_unlock(&s->dblock);
    return r;
}

/* ---- close: finalisation ---- */

static int prepare(mst_store *s, const char *sql, sqlite3_stmt **st) {
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return FAIL(s, sql);
    return 0;
}

/* Hidden time of every step: other threads' intervals, merged per category, swept over the steps. */
static int finalize_hidden(mst_store *s) {
    if (!s->main_known) return 0;
    sqlite3_stmt *st = NULL;
    uint64_t *tb = NULL, *te = NULL;
    int64_t *step = NULL;
    uint64_t (*hidden)[MST_CAT_COUNT] = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    if (prepare(s, "SELECT step, t_begin_ns, t_end_ns FROM steps ORDER BY t_begin_ns", &st) != 0) goto out;
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            uint64_t *ntb = realloc(tb, cap * sizeof(*tb)), *nte = ntb ? realloc(te, cap * sizeof(*te)) : NULL;
            if (ntb) tb = ntb;
            if (nte) te = nte;
            int64_t *ns = nte ? realloc(step, cap * sizeof(*step)) : NULL;
            if (ns) step = ns;
            if (!ntb || !nte || !ns) {
                snprintf(s->err, sizeof(s->err), "profile store '%s': out of memory computing hidden time", s->path);
                s->failed = 1;
                goto out;
            }
        }
        step[n] = sqlite3_column_int64(st, 0);
        tb[n] = (uint64_t)sqlite3_column_int64(st, 1);
        te[n] = (uint64_t)sqlite3_column_int64(st, 2);
        n++;
    }
    if (r != SQLITE_DONE) {
        FAIL(s, "SELECT steps");
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (n == 0) {
        rc = 0;
        goto out;
    }
    if (!(hidden = calloc(n, sizeof(*hidden)))) {
        snprintf(s->err, sizeof(s->err), "profile store '%s': out of memory computing hidden time", s->path);
        s->failed = 1;
        goto out;
    }
    mst_attr_sweep sw;
    mst_attr_sweep_init(&sw, n, tb, te, hidden);
    if (prepare(s, "SELECT cat, t0, t1 FROM temp.intervals WHERE tid != ?1 ORDER BY cat, t0", &st) != 0) goto out;
    if (sqlite3_bind_int64(st, 1, s->main_tid) != SQLITE_OK) {
        FAIL(s, "sqlite3_bind_int64(intervals)");
        goto out;
    }
    while ((r = sqlite3_step(st)) == SQLITE_ROW)
        mst_attr_sweep_add(&sw, (mst_prof_cat)sqlite3_column_int(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
                           (uint64_t)sqlite3_column_int64(st, 2));
    if (r != SQLITE_DONE) {
        FAIL(s, "SELECT intervals");
        goto out;
    }
    mst_attr_sweep_finish(&sw);
    sqlite3_finalize(st);
    st = NULL;
    if (prepare(s,
                "UPDATE steps SET hidden_dispatch_ns = ?1, hidden_kernel_ns = ?2, hidden_comm_ns = ?3, hidden_data_ns = ?4,"
                " hidden_compile_ns = ?5, hidden_memcpy_ns = ?6, hidden_other_ns = ?7 WHERE step = ?8",
                &st) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < MST_CAT_COUNT; c++)
            if (sqlite3_bind_int64(st, c + 1, (int64_t)hidden[i][c]) != SQLITE_OK) {
                FAIL(s, "sqlite3_bind_int64(hidden)");
                goto out;
            }
        if (sqlite3_bind_int64(st, 8, step[i]) != SQLITE_OK) {
            FAIL(s, "sqlite3_bind_int64(hidden step)");
            goto out;
        }
        if (RUN(s, st) != 0) goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(st);
    free(tb);
    free(te);
    free(step);
    free(hidden);
    return rc;
}

static int finalize_ops(mst_store *s) {
    sqlite3_stmt *st = NULL;
    if (prepare(s,
                "INSERT OR REPLACE INTO op_stats(name, op, calls, total_ns, mean_ns, min_ns, max_ns, p50_ns, p95_ns, flops,"
                " bytes, gflops, gbps) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                &st) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < mst_attr_ops_count(s->ops) && rc == 0; i++) {
        mst_attr_op_summary o;
        mst_attr_ops_summary(s->ops, i, &o);
        if (sqlite3_bind_text(st, 1, mst_prof_name(o.name), -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int(st, 2, o.op) != SQLITE_OK || sqlite3_bind_int64(st, 3, o.calls) != SQLITE_OK ||
            sqlite3_bind_int64(st, 4, (int64_t)o.total_ns) != SQLITE_OK || sqlite3_bind_double(st, 5, o.mean_ns) != SQLITE_OK ||
            sqlite3_bind_int64(st, 6, (int64_t)o.min_ns) != SQLITE_OK || sqlite3_bind_int64(st, 7, (int64_t)o.max_ns) != SQLITE_OK ||
            sqlite3_bind_double(st, 8, o.p50_ns) != SQLITE_OK || sqlite3_bind_double(st, 9, o.p95_ns) != SQLITE_OK ||
            sqlite3_bind_int64(st, 10, o.flops) != SQLITE_OK || sqlite3_bind_int64(st, 11, o.bytes) != SQLITE_OK ||
            sqlite3_bind_double(st, 12, o.gflops) != SQLITE_OK || sqlite3_bind_double(st, 13, o.gbps) != SQLITE_OK)
            rc = FAIL(s, "sqlite3_bind(op_stats)");
        else
            rc = RUN(s, st);
    }
    sqlite3_finalize(st);
    return rc;
}

static int finalize_rows(mst_store *s) {
    if (s->in_step) {           /* the profiler stopped inside a step: it is not a finished step */
        s->in_step = 0;
        s->incomplete_steps++;
    }
    /* other threads' ranges still open extend to the thread's last record */
    for (size_t i = 0; i < s->n_threads; i++) {
        thread_state *th = &s->threads[i];
        if (s->main_known && th->tid == s->main_tid) continue;
        for (int k = 0; k < th->tr.depth; k++)
            if (store_interval(s, th->tid, th->tr.stack[k].cat, th->tr.stack[k].t_begin, th->tr.last_t) != 0) return -1;
    }
    if (s->trace_steps > 0 && !s->span_complete) {
        if (s->traced == 0) {
            if (EXEC(s, "DELETE FROM events") != 0) return -1;
        } else if (prune_trace(s, s->span_start, s->last_traced_end, 1) != 0) {
            return -1;
        }
    }
    if (finalize_ops(s) != 0) return -1;
    sqlite3_stmt *st = NULL;
    if (prepare(s, "INSERT OR REPLACE INTO memory_peak(category, peak_bytes) VALUES (?1, ?2)", &st) != 0) return -1;
    for (int i = 0; i < s->n_mem; i++) {
        if (sqlite3_bind_text(st, 1, mst_prof_name(s->mem[i].name) + 4, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, s->mem[i].peak) != SQLITE_OK || RUN(s, st) != 0) {
            if (!s->failed) FAIL(s, "sqlite3_bind(memory_peak)");
            sqlite3_finalize(st);
            return -1;
        }
    }
    sqlite3_finalize(st);
    if (prepare(s, "UPDATE threads SET n_events = ?2 WHERE tid = ?1", &st) != 0) return -1;
    for (size_t i = 0; i < s->n_threads; i++) {
        if (sqlite3_bind_int64(st, 1, s->threads[i].tid) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, (int64_t)s->threads[i].n_events) != SQLITE_OK || RUN(s, st) != 0) {
            if (!s->failed) FAIL(s, "sqlite3_bind(threads)");
            sqlite3_finalize(st);
            return -1;
        }
    }
    sqlite3_finalize(st);
    if (prepare(s,
                "INSERT INTO profiler_overhead(id, events_received, events_dropped, producer_waits, producer_wait_ns)"
                " VALUES (1, ?1, ?2, ?3, ?4) ON CONFLICT(id) DO UPDATE SET events_received = excluded.events_received,"
                " events_dropped = excluded.events_dropped, producer_waits = excluded.producer_waits,"
                " producer_wait_ns = excluded.producer_wait_ns",
                &st) != 0)
        return -1;
    int rc = -1;
    if (sqlite3_bind_int64(st, 1, (int64_t)s->received) != SQLITE_OK || sqlite3_bind_int64(st, 2, (int64_t)s->dropped) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, (int64_t)s->producer_waits) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, (int64_t)s->producer_wait_ns) != SQLITE_OK)
        FAIL(s, "sqlite3_bind(profiler_overhead)");
    else
        rc = RUN(s, st);
    sqlite3_finalize(st);
    if (rc != 0) return -1;
    if (set_meta_i64(s, "store.step_marker_errors", (int64_t)s->marker_errors) != 0 ||
        set_meta_i64(s, "store.incomplete_steps", (int64_t)s->incomplete_steps) != 0 ||
        set_meta_i64(s, "store.untracked_records", (int64_t)s->untracked_records) != 0 ||
        set_meta_i64(s, "store.untracked_counters", (int64_t)s->untracked_counters) != 0 ||
        set_meta_i64(s, "store.untracked_ops", (int64_t)mst_attr_ops_untracked(s->ops)) != 0 ||
        set_meta_i64(s, "store.main_tid", s->main_known ? (int64_t)s->main_tid : 0) != 0)
        return -1;
    return finalize_hidden(s);
}

int mst_store_close(mst_store *s, char *err, size_t errn) {
    if (!s) return 0;
    pthread_mutex_lock(&s->qlock);
    s->closing = 1;
    pthread_cond_broadcast(&s->q_data);
    pthread_cond_broadcast(&s->q_room);
    pthread_mutex_unlock(&s->qlock);
    if (s->writer_started) {
        /* the run is over: the caller drains the backlog too (a SCHED_IDLE writer waits behind every
         * busy process of the machine, and an unprivileged thread cannot leave SCHED_IDLE) */
        while (drain_one(s)) {}
        pthread_join(s->writer, NULL);
    }

    pthread_mutex_lock(&s->dblock);
    int rc = -1;
    char sched[160];
    if (!s->writer_started) snprintf(sched, sizeof(sched), "none");
    else if (s->writer_sched_errno == 0) snprintf(sched, sizeof(sched), "SCHED_IDLE");
    else snprintf(sched, sizeof(sched), "SCHED_OTHER (SCHED_IDLE refused: %s)", strerror(s->writer_sched_errno));
    if (!s->failed && ensure_txn(s) == 0 && set_meta_locked(s, 1, "profiler.writer_sched", sched) == 0 &&
        finalize_rows(s) == 0 && commit(s) == 0 &&
        EXEC(s, "PRAGMA wal_checkpoint(TRUNCATE)") == 0 && EXEC(s, "PRAGMA journal_mode=DELETE") == 0)
        rc = 0;
    if (rc != 0 && s->txn_open) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(s->st[i]);
        s->st[i] = NULL;
    }
    if (sqlite3_close(s->db) != SQLITE_OK && rc == 0) {
        FAIL(s, "sqlite3_close");
        rc = -1;
    } else {
        s->db = NULL;
    }
    if (rc != 0 && err) snprintf(err, errn, "%s", s->err);
    pthread_mutex_unlock(&s->dblock);
    store_free(s);
    return rc;
}

/* ---- reading ---- */

sqlite3 *mst_store_open_db(const char *path, char *err, size_t errn) {
    sqlite3 *db = NULL;
    if (access(path, F_OK) != 0) {
        snprintf(err, errn, "profile '%s': %s", path, strerror(errno));
        return NULL;
    }
    /* read-write (no create) so a run killed mid-write has its WAL recovered on open */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errn, "profile '%s': cannot open: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 2000);
    sqlite3_stmt *st = NULL;
    int version = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version < 0)
        snprintf(err, errn, "profile '%s': cannot read: %s", path, sqlite3_errmsg(db));
    else if (version != MST_STORE_SCHEMA_VERSION)
        snprintf(err, errn, "profile '%s': not an mstune profile of schema version %d (found %d)", path,
                 MST_STORE_SCHEMA_VERSION, version);
    if (version != MST_STORE_SCHEMA_VERSION) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Columns: wall, 7 categories, 7 hidden. */
#define BD_COLS (1 + 2 * MST_CAT_COUNT)

int mst_store_read_breakdown(const char *path, mst_breakdown *out, char *err, size_t errn) {
    memset(out, 0, sizeof(*out));
    sqlite3 *db = mst_store_open_db(path, err, errn);
    if (!db) return -1;
    sqlite3_stmt *st = NULL;
    double *col[BD_COLS] = {0};
    size_t n = 0, n_hidden = 0, cap = 0;
    int rc = -1;
    static const char sql[] =
        "SELECT wall_ns, dispatch_ns, kernel_ns, comm_ns, data_ns, compile_ns, memcpy_ns, other_ns,"
        " hidden_dispatch_ns, hidden_kernel_ns, hidden_comm_ns, hidden_data_ns, hidden_compile_ns, hidden_memcpy_ns,"
        " hidden_other_ns FROM steps WHERE warmup = 0 OR ?1 ORDER BY step";
    if (sqlite3_prepare_v2(db, "SELECT count(*), sum(warmup = 0) FROM steps", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        snprintf(err, errn, "profile '%s': cannot read steps: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    out->steps_total = sqlite3_column_int64(st, 0);
    out->includes_warmup = out->steps_total > 0 && sqlite3_column_int64(st, 1) == 0;
    sqlite3_finalize(st);
    st = NULL;
    double sum[1 + MST_CAT_COUNT] = {0};
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || sqlite3_bind_int(st, 1, out->includes_warmup) != SQLITE_OK) {
        snprintf(err, errn, "profile '%s': cannot read steps: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            for (int c = 0; c < BD_COLS; c++) {
                double *p = realloc(col[c], cap * sizeof(double));
                if (!p) {
                    snprintf(err, errn, "profile '%s': out of memory", path);
                    goto out;
                }
                col[c] = p;
            }
        }
        for (int c = 0; c <= MST_CAT_COUNT; c++) {
            col[c][n] = (double)sqlite3_column_int64(st, c);
            sum[c] += col[c][n];
        }
        if (sqlite3_column_type(st, 1 + MST_CAT_COUNT) != SQLITE_NULL) {
            for (int c = 0; c < MST_CAT_COUNT; c++)
                col[1 + MST_CAT_COUNT + c][n_hidden] = (double)sqlite3_column_int64(st, 1 + MST_CAT_COUNT + c);
            n_hidden++;
        }
        n++;
    }
    if (r != SQLITE_DONE) {
        snprintf(err, errn, "profile '%s': cannot read steps: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    out->steps = (int64_t)n;
    out->wall_median_ns = median(col[0], n);
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        out->median_ns[c] = median(col[1 + c], n);
        out->share[c] = sum[0] > 0 ? sum[1 + c] / sum[0] : 0;
        out->hidden_median_ns[c] = median(col[1 + MST_CAT_COUNT + c], n_hidden);
    }
    out->hidden_known = n_hidden > 0;
    rc = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    for (int c = 0; c < BD_COLS; c++) free(col[c]);
    return rc;
}

int mst_store_read_ops(sqlite3 *db, mst_op_row **rows, char *err, size_t errn) {
    *rows = NULL;
    sqlite3_stmt *st = NULL;
    int n = 0, cap = 0, r = SQLITE_DONE;
    if (sqlite3_prepare_v2(db,
                           "SELECT name, op, calls, total_ns, flops, bytes, mean_ns, p50_ns, p95_ns, gflops, gbps FROM op_stats"
                           " ORDER BY total_ns DESC, name",
                           -1, &st, NULL) != SQLITE_OK) {
        r = SQLITE_ERROR;
    } else {
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                int nc = cap ? 2 * cap : 32;
                mst_op_row *g = realloc(*rows, sizeof(**rows) * (size_t)nc);
                if (!g) {
                    snprintf(err, errn, "op_stats: out of memory");
                    sqlite3_finalize(st);
                    free(*rows);
                    *rows = NULL;
                    return -1;
                }
                *rows = g;
                cap = nc;
            }
            mst_op_row *o = &(*rows)[n++];
            memset(o, 0, sizeof(*o));
            const unsigned char *name = sqlite3_column_text(st, 0);
            snprintf(o->name, sizeof(o->name), "%s", name ? (const char *)name : "");
            o->op = sqlite3_column_int(st, 1);
            o->calls = sqlite3_column_int64(st, 2);
            o->total_ns = sqlite3_column_int64(st, 3);
            o->flops = sqlite3_column_int64(st, 4);
            o->bytes = sqlite3_column_int64(st, 5);
            o->mean_ns = sqlite3_column_double(st, 6);
            o->p50_ns = sqlite3_column_double(st, 7);
            o->p95_ns = sqlite3_column_double(st, 8);
            o->gflops = sqlite3_column_double(st, 9);
            o->gbps = sqlite3_column_double(st, 10);
        }
    }
    if (r != SQLITE_DONE) {
        snprintf(err, errn, "cannot read op_stats: %s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        free(*rows);
        *rows = NULL;
        return -1;
    }
    sqlite3_finalize(st);
    return n;
}

int mst_store_read_top_ops(const char *path, mst_op_row *rows, int n_max, char *err, size_t errn) {
    sqlite3 *db = mst_store_open_db(path, err, errn);
    if (!db) return -1;
    mst_op_row *all = NULL;
    char e[256];
    int n = mst_store_read_ops(db, &all, e, sizeof(e));
    sqlite3_close(db);
    if (n < 0) {
        snprintf(err, errn, "profile '%s': %s", path, e);
        return -1;
    }
    if (n > n_max) n = n_max > 0 ? n_max : 0;
    if (n > 0) memcpy(rows, all, sizeof(*rows) * (size_t)n);
    free(all);
    return n;
}
