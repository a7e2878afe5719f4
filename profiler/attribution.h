/* attribution.h — where a step's wall time went: a partition of the main thread's timeline by
 * innermost active range, the "hidden" work other threads did during the step, and per-op
 * kernel statistics with bounded memory. Pure computation on event records: no I/O, no locks.
 *
 * The definition (docs/attribution.md): every nanosecond of [t_begin, t_end] belongs to the
 * category of the innermost range open on the main thread at that instant, or to `other` when
 * none is open, so the seven parts sum to t_end - t_begin exactly, in integer nanoseconds.
 * Ranges crossing either edge are clipped; an END that closes nothing is ignored and counted;
 * a BEGIN never closed extends to the window end.
 *
 * Usage, one window from a recorded stream (events in recording order):
 *     mst_attr_result r;
 *     mst_attr_partition(t_begin, t_end, ev, n, &r);       // r.ns[MST_CAT_KERNEL], ...
 * Streaming, as the store does (the tracker persists across steps, a window per step):
 *     mst_attr_tracker tr = {0};  mst_attr_window w;
 *     mst_attr_window_begin(&w, &tr, t_begin);
 *     for each event e:  mst_attr_window_advance(&w, &tr, e->t_ns); mst_attr_track(&tr, e, &closed);
 *     mst_attr_window_end(&w, &tr, t_end, &r);
 * Hidden time of other threads (intervals of any category, any order):
 *     uint64_t hidden[MST_CAT_COUNT];
 *     mst_attr_hidden(t_begin, t_end, intervals, n, hidden);
 * Per-op statistics:
 *     mst_attr_ops *ops = mst_attr_ops_new();
 *     mst_attr_ops_add(ops, name_id, op, dur_ns, flops, bytes);
 *     mst_attr_op_summary s;  mst_attr_ops_summary(ops, i, &s);   // s.p50_ns, s.gflops, ...
 *     mst_attr_ops_free(ops);
 */
#ifndef MST_PROFILER_ATTRIBUTION_H
#define MST_PROFILER_ATTRIBUTION_H

#include <stddef.h>
#include <stdint.h>

#include "profiler/events.h"

/* Deepest nesting tracked per thread; a BEGIN beyond it is counted in `too_deep` and ignored
 * (its END then closes nothing and is counted too). The runtime nests two levels. */
#define MST_ATTR_MAX_DEPTH 64

typedef struct {
    uint64_t t_begin;
    int64_t a, b;               /* the BEGIN record's payload (kernel ranges: signature, fwd/bwd link) */
    uint32_t name;
    int16_t op;
    uint8_t cat;
} mst_attr_frame;

/* One closed range, as mst_attr_track reports it. */
typedef struct {
    uint64_t t0, t1;            /* begin and end, ns */
    int64_t flops, bytes;       /* the END record's payload (kernel ranges) */
    uint32_t name;
    int16_t op;
    uint8_t cat;
    int64_t begin_a, begin_b;   /* the BEGIN record's payload (events.h: mst_prof_kernel_begin) */
} mst_attr_range;

/* The open ranges of one thread. Zero-initialise. */
typedef struct {
    mst_attr_frame stack[MST_ATTR_MAX_DEPTH];
    int depth;
    uint64_t last_t;            /* latest timestamp applied (time never runs backwards here) */
    uint64_t unmatched_end;     /* ENDs that matched no open range */
    uint64_t too_deep;          /* BEGINs dropped past MST_ATTR_MAX_DEPTH */
    uint64_t out_of_order;      /* records older than their predecessor (treated as simultaneous) */
    uint64_t bad_category;      /* ranges with a category >= MST_CAT_COUNT (kept as `other`) */
} mst_attr_tracker;

/* Apply one record. BEGIN pushes; END closes the innermost open range with the same category
 * and name (searching outwards, so an END may close a range that is not the innermost: the
 * ranges above it stay open) and returns 1 with the closed range in *closed; any other record
 * only advances last_t. Returns 0 otherwise. */
int mst_attr_track(mst_attr_tracker *tr, const mst_prof_event *ev, mst_attr_range *closed);
/* Category of the innermost open range, MST_CAT_OTHER when none is open. */
mst_prof_cat mst_attr_innermost(const mst_attr_tracker *tr);

/* A step's partition and what was odd about its records. */
typedef struct {
    uint64_t t_begin, t_end;
    uint64_t ns[MST_CAT_COUNT];     /* sums to t_end - t_begin exactly */
    uint64_t unmatched_end;         /* ENDs inside the window that closed nothing */
    uint64_t open_at_end;           /* ranges still open at t_end (clipped; includes ranges that continue) */
    uint64_t too_deep, out_of_order;
} mst_attr_result;

/* Streaming window over a tracker: call advance(t) before tracking each record with time t. */
typedef struct {
    uint64_t t_begin, cursor;
    uint64_t ns[MST_CAT_COUNT];
    uint64_t unmatched0, too_deep0, out_of_order0;  /* tracker counters at begin */
} mst_attr_window;

void mst_attr_window_begin(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t_begin);
/* Charge [cursor, t) to the tracker's innermost category; t is clamped to >= cursor. */
void mst_attr_window_advance(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t);
/* Charge up to t_end (>= t_begin; a smaller t_end is raised to the cursor) and fill *out. */
void mst_attr_window_end(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t_end, mst_attr_result *out);

/* One window from a batch of one thread's records in recording order. Records before t_begin
 * only open and close ranges (what is open at t_begin is clipped to it); records after t_end
 * are ignored; a record at exactly t_end is applied. t_end < t_begin is treated as empty. */
void mst_attr_partition(uint64_t t_begin, uint64_t t_end, const mst_prof_event *ev, size_t n, mst_attr_result *out);

/* ---- hidden time: other threads' ranges overlapping the window ---- */

typedef struct {
    uint64_t t0, t1;
    uint8_t cat;
} mst_attr_interval;

/* Per category, the length of the union of that category's intervals clipped to
 * [t_begin, t_end]: overlapping ranges of two threads count once. Sorts iv in place. */
void mst_attr_hidden(uint64_t t_begin, uint64_t t_end, mst_attr_interval *iv, size_t n, uint64_t out[MST_CAT_COUNT]);

/* The same over many windows at once (the store's finalisation), in O(windows + intervals):
 * windows sorted by t_begin and disjoint; each category's intervals fed in non-decreasing t0
 * (categories may interleave). Adds into hidden[w][cat]. */
typedef struct {
    size_t n;
    const uint64_t *t_begin, *t_end;            /* n windows */
    uint64_t (*hidden)[MST_CAT_COUNT];          /* n rows, caller zeroes */
    struct { uint64_t a, b; int open; size_t cursor; } cat[MST_CAT_COUNT];
} mst_attr_sweep;

void mst_attr_sweep_init(mst_attr_sweep *s, size_t n, const uint64_t *t_begin, const uint64_t *t_end,
                         uint64_t (*hidden)[MST_CAT_COUNT]);
/* Returns -1 (and ignores the interval) if t0 goes backwards within its category. */
int  mst_attr_sweep_add(mst_attr_sweep *s, mst_prof_cat cat, uint64_t t0, uint64_t t1);
void mst_attr_sweep_finish(mst_attr_sweep *s);

/* ---- per-op statistics ---- */

/* Durations go into a log-linear histogram: exact below 16 ns, then 16 buckets per power of
 * two (each bucket at most 1/16 of its lower bound wide). A percentile is reported as the middle
 * of the bucket holding the nearest-rank sample, clamped to the observed min/max, so it is within
 * MST_ATTR_PCT_REL_ERROR (1/32 = 3.125%) of the exact nearest-rank value. 976 buckets cover all
 * of uint64; memory per op is fixed (about 8 KiB), whatever the run length. */
#define MST_ATTR_HIST_SUB 16
#define MST_ATTR_HIST_BUCKETS (MST_ATTR_HIST_SUB + (64 - 4) * MST_ATTR_HIST_SUB)
#define MST_ATTR_PCT_REL_ERROR (1.0 / (2.0 * MST_ATTR_HIST_SUB))
/* Distinct op names tracked; further names are counted in mst_attr_ops_untracked. */
#define MST_ATTR_MAX_OPS 512

typedef struct mst_attr_ops mst_attr_ops;

typedef struct {
    uint32_t name;
    int16_t op;
    int64_t calls;
    uint64_t total_ns, min_ns, max_ns;
    double mean_ns, p50_ns, p95_ns;
    int64_t flops, bytes;
    double gflops;      /* achieved: flops / total_ns (FLOP per ns = GFLOP/s) */
    double gbps;        /* bytes / total_ns (GB/s) */
} mst_attr_op_summary;

mst_attr_ops *mst_attr_ops_new(void);
void   mst_attr_ops_free(mst_attr_ops *ops);
/* 0, or -1 when the name is new and MST_ATTR_MAX_OPS are tracked already (counted) or memory ran out. */
int    mst_attr_ops_add(mst_attr_ops *ops, uint32_t name, int op, uint64_t dur_ns, int64_t flops, int64_t bytes);
size_t mst_attr_ops_count(const mst_attr_ops *ops);
uint64_t mst_attr_ops_untracked(const mst_attr_ops *ops);
/* Summary of the i-th op (in order of first appearance). */
void   mst_attr_ops_summary(const mst_attr_ops *ops, size_t i, mst_attr_op_summary *out);
/* Percentile p in [0, 1] of the i-th op's durations (nearest rank), within MST_ATTR_PCT_REL_ERROR. */
double mst_attr_ops_percentile(const mst_attr_ops *ops, size_t i, double p);

/* Histogram bucket of a duration and the [lo, hi) range it covers (exposed for tests). */
unsigned mst_attr_hist_bucket(uint64_t v);
void     mst_attr_hist_range(unsigned bucket, uint64_t *lo, uint64_t *hi);

#endif
