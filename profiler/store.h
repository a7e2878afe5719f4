/* store.h — the profile database: one SQLite file per run, written by a background thread.
 *
 * The profiler's sink copies each chunk of records into a bounded queue; the writer thread
 * drains it, attributes every step as its STEP_END arrives (profiler/attribution.h) and inserts
 * one `steps` row per step in batched transactions (at least every 100 ms), so a run killed with
 * SIGKILL leaves every step delivered more than ~100 ms before the kill readable. Raw records
 * are kept only for the first `trace_steps` active steps; everything else is aggregated per step
 * or per run. Hidden time, per-op statistics and memory peaks are finalised at close.
 * The schema is documented in docs/profile-schema.md.
 *
 * Usage:
 *     char err[512];
 *     mst_store *st = mst_store_open("run/profile.db", &cfg, 20, err, sizeof err);
 *     mst_profiler_set_sink(prof, mst_store_sink, st);
 *     mst_profiler_start(prof);  ... train ...  mst_profiler_stop(prof);   // stop before close
 *     mst_store_set_meta(st, "git_revision", rev);
 *     mst_store_set_overhead(st, &(mst_prof_overhead){...}, wall_s);
 *     if (mst_store_close(st, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
 *     mst_breakdown b;  mst_store_read_breakdown("run/profile.db", &b, err, sizeof err);
 */
#ifndef MST_PROFILER_STORE_H
#define MST_PROFILER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "profiler/events.h"

/* Bumped on any incompatible change; stored in PRAGMA user_version and run.schema_version. */
#define MST_STORE_SCHEMA_VERSION 1

typedef struct mst_store mst_store;

typedef struct {
    size_t queue_events;    /* queue capacity in records; 0 = 262144 (8 MiB); at least 1 */
    int commit_ms;          /* an open transaction commits at most this long after it began; 0 = 100 */
    int commit_steps;       /* ... or once it holds this many steps; 0 = 256 */
    int64_t max_db_bytes;   /* 0 = no limit; a database that would grow past it fails the store
                               (SQLITE_FULL): what was committed stays, later records are dropped */
} mst_store_options;

/* Create (replacing any file at path, and its -wal/-shm) the database, its schema and the writer
 * thread. cfg: the profiler's config (level and schedule; NULL = level 1, every step active).
 * trace_steps: how many active steps keep their raw records for trace export (0 = none).
 * NULL with a message naming the path on failure. */
mst_store *mst_store_open(const char *path, const mst_prof_config *cfg, int trace_steps, char *err, size_t errn);
mst_store *mst_store_open_opts(const char *path, const mst_prof_config *cfg, int trace_steps,
                               const mst_store_options *opt, char *err, size_t errn);

/* An mst_prof_sink_fn (user = the store). Blocks while the queue is full rather than dropping;
 * records are dropped (and counted) only after the store failed. */
void mst_store_sink(void *store, uint32_t tid, const mst_prof_event *ev, size_t n);

/* Run metadata (resolved config JSON, git revision, host, CPU model, versions). Replaces a key. */
int mst_store_set_meta(mst_store *s, const char *key, const char *value);
/* One folded stack "root;...;leaf" of the sampler; counts of the same (tid, stack) add up. */
int mst_store_add_folded(mst_store *s, uint32_t tid, const char *folded_stack, int64_t count);
int mst_store_set_sampler_summary(mst_store *s, int64_t samples, double dispatch_share, double hz);
int mst_store_set_overhead(mst_store *s, const mst_prof_overhead *o, double run_wall_s);
/* One sample of the trainer's partial-underflow probe (runtime/amp/underflow.h): a grad_underflow
 * row (fraction = half_zero / ref_nonzero). The store knows nothing of tensors: plain counts. */
typedef struct {
    int64_t step;
    const char *half;           /* "f16" or "bf16" */
    int64_t elements, ref_nonzero, half_zero, cast_zero, cast_subnormal;
    int64_t probe_ns;           /* the probe's wall time */
} mst_store_underflow;
int mst_store_add_underflow(mst_store *s, const mst_store_underflow *u);
/* The message of the last failure (functions above return -1), "" when none. */
const char *mst_store_error(const mst_store *s);

typedef struct {
    uint64_t received;          /* records accepted into the queue */
    uint64_t dropped;           /* records refused by the sink or discarded from the queue once the
                                   store failed (its uncommitted transaction is lost as well) */
    uint64_t producer_waits;    /* sink calls that found the queue full and waited */
    uint64_t producer_wait_ns;  /* time recording threads spent waiting for room */
    uint64_t steps;             /* steps rows written */
    uint64_t commits;
} mst_store_stats;
mst_store_stats mst_store_get_stats(mst_store *s);

/* Drain the queue, stop the writer, finalise (hidden time per step, op statistics, memory peaks,
 * thread table, trace pruning), commit, and leave a single file (journal_mode=DELETE). Frees s
 * in every case. 0, or -1 with a message naming the path. */
int mst_store_close(mst_store *s, char *err, size_t errn);

/* ---- reading, for the CLI summary ---- */

/* Open a profile for reading: read-write without create (so a killed run's WAL is recovered on
 * open), busy timeout 2 s, schema version checked. The entry point for every reader (CLI, trace
 * export, report, advisor); close with sqlite3_close. NULL with a message naming the path. */
struct sqlite3;
struct sqlite3 *mst_store_open_db(const char *path, char *err, size_t errn);

typedef struct {
    int64_t steps;              /* steps the figures cover: the non-warm-up ones */
    int64_t steps_total;        /* every step row, warm-up included */
    int includes_warmup;        /* 1 when all steps were warm-up, so all of them are used */
    double wall_median_ns;
    double median_ns[MST_CAT_COUNT];    /* per category, median over steps (medians need not add up) */
    double share[MST_CAT_COUNT];        /* sum of the category over sum of wall: these add up to 1 */
    int hidden_known;                   /* 0 when the run did not close cleanly (hidden is set at close) */
    double hidden_median_ns[MST_CAT_COUNT];
} mst_breakdown;

int mst_store_read_breakdown(const char *path, mst_breakdown *out, char *err, size_t errn);

/* One op_stats row: the one row type every reader of op statistics uses (the CLI's top ops, the
 * profile view behind the report and the advisor). */
typedef struct {
    char name[64];
    int op;                     /* mst_op, as stored */
    int64_t calls;
    int64_t total_ns;
    int64_t flops, bytes;
    double mean_ns, p50_ns, p95_ns;
    double gflops, gbps;
} mst_op_row;

/* The n_max ops with the largest total kernel time, largest first. Returns how many were
 * written to rows, or -1 with a message. */
int mst_store_read_top_ops(const char *path, mst_op_row *rows, int n_max, char *err, size_t errn);
/* Every op row of an open profile, largest total first (the order of mst_store_read_top_ops):
 * *rows is malloc'd (free it), the count returned, or -1 with a message. */
int mst_store_read_ops(struct sqlite3 *db, mst_op_row **rows, char *err, size_t errn);

#endif
