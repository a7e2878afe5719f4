/* events.h — the profiler's event API: what the runtime calls to say where time goes.
 *
 * Ranges (begin/end with a category), counters and step markers are appended as fixed-size
 * records to a thread-local buffer. When no profiler is running, every call costs one
 * predictable branch on `mst_prof_enabled` (the only global shared across modules).
 * Full buffers are handed to the active profiler's sink; the default sink keeps them in memory
 * (the profiler issue adds the SQLite writer and attribution on top of this stream).
 *
 * Usage:
 *     mst_profiler *p = mst_profiler_new();
 *     mst_profiler_start(p);
 *     uint32_t id = mst_prof_intern("conv2d");
 *     mst_prof_begin(MST_CAT_KERNEL, id, op);  ...  mst_prof_end(MST_CAT_KERNEL, id, op);
 *     mst_profiler_stop(p);                      // flushes the calling thread's buffer
 *     mst_profiler_foreach(p, visit, user);      // every record, per thread, in time order
 *     mst_profiler_free(p);
 */
#ifndef MST_PROFILER_EVENTS_H
#define MST_PROFILER_EVENTS_H

#include <stddef.h>
#include <stdint.h>

/* One category per instant of the step's critical path (see docs/attribution.md). */
typedef enum {
    MST_CAT_DISPATCH,   /* host framework work per op outside kernels */
    MST_CAT_KERNEL,     /* compute */
    MST_CAT_COMM,       /* exposed collective time */
    MST_CAT_DATA,       /* waiting for the data loader */
    MST_CAT_COMPILE,    /* graph building and planning */
    MST_CAT_MEMCPY,     /* host/device copies */
    MST_CAT_OTHER,      /* anything else explicitly marked */
    MST_CAT_COUNT
} mst_prof_cat;

typedef enum {
    MST_EV_BEGIN,       /* range opens:  cat, name, op */
    MST_EV_END,         /* range closes: cat, name, op; a = FLOPs, b = bytes when known */
    MST_EV_COUNTER,     /* name = counter, a = value (int64) */
    MST_EV_INSTANT,     /* name = what happened, a/b free payload */
    MST_EV_STEP_BEGIN,  /* a = step number */
    MST_EV_STEP_END,    /* a = step number */
    MST_EV_KIND_COUNT
} mst_prof_kind;

/* 32 bytes, fixed size: recording is a store into a preallocated chunk. */
typedef struct {
    uint64_t t_ns;      /* CLOCK_MONOTONIC, nanoseconds */
    int64_t  a, b;      /* payload, meaning depends on kind */
    uint32_t name;      /* interned string id, 0 = none */
    int16_t  op;        /* op id, -1 = none */
    uint8_t  kind;      /* mst_prof_kind */
    uint8_t  cat;       /* mst_prof_cat */
} mst_prof_event;

_Static_assert(sizeof(mst_prof_event) == 32, "profiler records must stay 32 bytes");

/* The enable flag: nonzero while a profiler is running. Read it, never write it. */
extern int mst_prof_enabled;

typedef struct mst_profiler mst_profiler;

/* A sink receives each full (or flushed) chunk of one thread's records, in order. It is called
 * from the recording thread with the profiler's lock held; it must copy what it keeps. */
typedef void (*mst_prof_sink_fn)(void *user, uint32_t tid, const mst_prof_event *ev, size_t n);

mst_profiler *mst_profiler_new(void);
void          mst_profiler_free(mst_profiler *p);
/* Replace the default in-memory sink. Call before start. */
void          mst_profiler_set_sink(mst_profiler *p, mst_prof_sink_fn fn, void *user);
/* Only one profiler runs per process at a time; starting a second one returns -1. */
int           mst_profiler_start(mst_profiler *p);
void          mst_profiler_stop(mst_profiler *p);

/* The in-memory collector (default sink). */
size_t        mst_profiler_event_count(const mst_profiler *p);
typedef void (*mst_prof_visit_fn)(void *user, uint32_t tid, const mst_prof_event *ev);
void          mst_profiler_foreach(const mst_profiler *p, mst_prof_visit_fn fn, void *user);
/* Records lost because memory ran out (never silently: counted here). */
uint64_t      mst_profiler_dropped(const mst_profiler *p);

/* Hand the calling thread's partly filled buffer to the sink (threads do this on exit too). */
void          mst_prof_thread_flush(void);

/* String interning for range and counter names; ids are stable for the process. */
uint32_t      mst_prof_intern(const char *name);
const char   *mst_prof_name(uint32_t id);
const char   *mst_prof_cat_name(mst_prof_cat cat);

uint64_t      mst_prof_now_ns(void);

void mst_prof_record_(mst_prof_kind kind, mst_prof_cat cat, uint32_t name, int op, int64_t a, int64_t b);

static inline void mst_prof_begin(mst_prof_cat cat, uint32_t name, int op) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_BEGIN, cat, name, op, 0, 0);
}
static inline void mst_prof_end(mst_prof_cat cat, uint32_t name, int op) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_END, cat, name, op, 0, 0);
}
/* End of a kernel range with its cost: FLOPs and bytes moved, from the op table. */
static inline void mst_prof_end_cost(mst_prof_cat cat, uint32_t name, int op, int64_t flops, int64_t bytes) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_END, cat, name, op, flops, bytes);
}
static inline void mst_prof_counter(uint32_t name, int64_t value) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_COUNTER, MST_CAT_OTHER, name, -1, value, 0);
}
static inline void mst_prof_instant(uint32_t name, int64_t a, int64_t b) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_INSTANT, MST_CAT_OTHER, name, -1, a, b);
}
static inline void mst_prof_step_begin(int64_t step) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, -1, step, 0);
}
static inline void mst_prof_step_end(int64_t step) {
    if (__builtin_expect(mst_prof_enabled, 0)) mst_prof_record_(MST_EV_STEP_END, MST_CAT_OTHER, 0, -1, step, 0);
}

#endif
