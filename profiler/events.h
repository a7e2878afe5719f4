/* events.h — the profiler's event API: what the runtime calls to say where time goes.
 *
 * Ranges (begin/end with a category), counters and step markers are appended as fixed-size
 * records to a thread-local buffer. When no profiler is running, every call costs one
 * predictable branch on `mst_prof_enabled` (the only global shared across modules); each record
 * site has a detail level (mst_prof_level) and a schedule chooses which steps record.
 * Full buffers are handed to the active profiler's sink; the default sink keeps them in memory
 * (the profiler issue adds the SQLite writer and attribution on top of this stream).
 *
 * Usage:
 *     mst_profiler *p = mst_profiler_new();
 *     mst_profiler_configure(p, &(mst_prof_config){.level = MST_PROF_LEVEL_OPS});
 *     mst_profiler_start(p);
 *     uint32_t id = mst_prof_intern("conv2d");
 *     mst_prof_begin(MST_CAT_KERNEL, id, op);  ...  mst_prof_end(MST_CAT_KERNEL, id, op);
 *     mst_profiler_stop(p);                      // flushes the calling thread's buffer
 *     mst_profiler_foreach(p, visit, user);      // every record, per thread, in time order
 *     mst_profiler_free(p);
 */
#ifndef MST_PROFILER_EVENTS_H
#define MST_PROFILER_EVENTS_H

#include <stdbool.h>
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
    MST_EV_VALUE,       /* name = series (loss, lr, ...), a = the double's bits */
    MST_EV_THREAD_NAME, /* name = the recording thread's name; first record of a thread's stream */
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

/* Detail levels. Each record site has a level; a profiler at level L records the sites <= L. */
typedef enum {
    MST_PROF_LEVEL_STEPS = 0,   /* step markers, data waits, compile, per-step values: per-step totals */
    MST_PROF_LEVEL_OPS = 1,     /* plus a dispatch and a kernel range per op (FLOPs, bytes) */
    MST_PROF_LEVEL_DETAIL = 2,  /* plus memory counters on every allocation and free */
    MST_PROF_LEVEL_COUNT
} mst_prof_level;

/* The enable flag: 0 while no profiler records, otherwise its level + 1. Read it, never write it. */
extern int mst_prof_enabled;

/* True when records of level l are being kept: one predictable branch when profiling is off.
 * A build configured with -DMSTUNE_PROFILING=OFF compiles every record site out (the baseline the
 * overhead benchmark compares the disabled path with). */
#ifdef MSTUNE_NO_PROFILING
static inline int mst_prof_on(mst_prof_level l) { (void)l; return 0; }
#else
static inline int mst_prof_on(mst_prof_level l) { return __builtin_expect(mst_prof_enabled > (int)l, 0); }
#endif

/* Which steps record, as PyTorch's profiler schedule: `skip` steps off, then cycles of `wait`
 * steps off, `warmup` steps recorded but marked for dropping (buffers and caches warm up) and
 * `active` steps kept; `repeat` cycles (0 = forever); `active` 0 = every step after skip + warmup
 * (`wait` needs active > 0). A cycle's off steps beside its recorded ones measure what recording
 * costs inside one run (self_cost.h). At level OPS and above, `op_every` N > 1 keeps the per-op
 * ranges of one kept step in N (the 1st, N+1st, ... of each window); the steps between record
 * the per-step totals and values only (level STEPS) and are dropped from summaries like warm-up
 * steps: an op's records, their preparation and store work cost ~150-250 ns, a few % of a step
 * of microsecond ops (the mlp's; docs/benchmarks.md). */
typedef struct {
    mst_prof_level level;
    int64_t skip, warmup, active, repeat;
    int64_t wait;
    int64_t op_every;       /* 0 or 1: every kept step records its ops */
} mst_prof_config;

/* OFF: nothing recorded. WARMUP: recorded, dropped. ACTIVE: recorded, kept. TOTALS: an active
 * step between two that record their ops (op_every): recorded at level STEPS, dropped. */
typedef enum { MST_PROF_STEP_OFF, MST_PROF_STEP_WARMUP, MST_PROF_STEP_ACTIVE, MST_PROF_STEP_TOTALS } mst_prof_phase;

typedef struct mst_profiler mst_profiler;

/* A sink receives each full (or flushed) chunk of one thread's records, in order. It is called
 * from the recording thread with the profiler's lock held; it must copy what it keeps. */
typedef void (*mst_prof_sink_fn)(void *user, uint32_t tid, const mst_prof_event *ev, size_t n);

mst_profiler *mst_profiler_new(void);                  /* level 1, every step */
void          mst_profiler_configure(mst_profiler *p, const mst_prof_config *cfg);
const mst_prof_config *mst_profiler_config(const mst_profiler *p);
/* The schedule's phase of a step (pure function of the config). */
mst_prof_phase mst_prof_schedule_phase(const mst_prof_config *cfg, int64_t step);
/* Called by the trainer as each step starts: turns recording on or off for the step per the
 * schedule, and returns its phase. */
mst_prof_phase mst_profiler_step(mst_profiler *p, int64_t step);
/* Called by mst_profiler_step when recording turns on or off between steps (the schedule's off
 * steps begin or end), from the thread that calls it: other collectors (the stack sampler) pause
 * with the recorder. Set before start. */
typedef void (*mst_prof_phase_hook)(void *user, bool recording);
void mst_profiler_set_phase_hook(mst_profiler *p, mst_prof_phase_hook fn, void *user);
/* Called by the trainer as each step ends, on the thread that marks steps: hands that thread's
 * records to the sink when due (mst_prof_handoff_due), and says whether it did. Not every step: a
 * hand-off takes the profiler's locks and the sink's queue and copies, ~0.8 us on these VMs, and
 * handing off every step measured ~0.45 points of the mlp's step time (docs/benchmarks.md). */
bool mst_profiler_step_done(mst_profiler *p, int64_t step);
/* Due: step recorded (its phase is not OFF), and either the next step does not record (its window
 * ends: the records never wait through an off window, whose steps the in-run measure times) or
 * MST_PROF_HANDOFF_NS have passed since the last hand-off (last_ns; now_ns is the clock now). What
 * a kill can lose grows by that much (docs/profile-schema.md). */
#define MST_PROF_HANDOFF_NS (20ull * 1000 * 1000)
bool mst_prof_handoff_due(const mst_prof_config *cfg, int64_t step, uint64_t now_ns, uint64_t last_ns);
/* Stop recording until the next mst_profiler_step (evaluation passes between steps); the calling
 * thread's records go to the sink now. */
void mst_profiler_pause(mst_profiler *p);
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

/* Self-measurement (as Nsight's PROFILER_OVERHEAD): records made, the calibrated cost of one
 * record, and the time recording threads spent handing chunks to the sink. */
typedef struct {
    uint64_t records;
    double record_ns;           /* measured at mst_profiler_new: one mst_prof_record_ call */
    uint64_t flush_ns;          /* wall time inside sink calls, summed over recording threads */
    uint64_t flushes;
    uint64_t sampler_ns;        /* the stack sampler's cost, when one ran (mst_sampler_cost_ns; 0 otherwise):
                                   set by whoever ran it, since the event recorder knows nothing of it */
    uint64_t probe_ns;          /* the trainer's partial-underflow probe (runtime/amp/underflow.h), when it ran:
                                   measurement work outside the steps, set by whoever ran it likewise */
    uint64_t prep_ns;           /* the callers' preparation of records (mst_prof_prep_begin/end), sampled and scaled,
                                   plus every signature-cache miss (mst_prof_intern_sig), timed whole */
    uint64_t sig_miss_ns;       /* the misses' part of prep_ns: a shape's first calls, mostly in the first steps */
    double bracket_ns;          /* measured at mst_profiler_new: what an empty timed bracket reads (its clock
                                   reads), taken off the mean of the timed ones */
} mst_prof_overhead;
mst_prof_overhead mst_profiler_overhead(const mst_profiler *p);
/* Every part of it in ns: records x record_ns, flushes, sampler, probe, record preparation. */
double mst_prof_overhead_ns(const mst_prof_overhead *o);

/* Name the calling thread in the profile ("main", "loader.worker.0", "pool.1"); any time. */
void          mst_prof_set_thread_name(const char *name);

/* Hand the calling thread's partly filled buffer to the sink (threads do this on exit too). */
void          mst_prof_thread_flush(void);

/* Whether the recording process leaves a core idle while its steps run (the step on fewer threads
 * than the cores it may use, loader workers counted): a sink may then move its own work (the
 * store's database writes) onto a thread of its own there instead of doing it in the recording
 * thread's hand-off (profiler/store.c). Set by the trainer as the step's budget is known; off by
 * default and for any process that does not say. */
void          mst_prof_set_spare_core(bool spare);
bool          mst_prof_spare_core(void);

/* String interning for range and counter names; ids are stable for the process. */
uint32_t      mst_prof_intern(const char *name);
const char   *mst_prof_name(uint32_t id);
const char   *mst_prof_cat_name(mst_prof_cat cat);

uint64_t      mst_prof_now_ns(void);

/* The interned signature of an op call's inputs, e.g. "[[64,784],[128,784]]|f32,f32" (the trace's
 * "Input Dims" | "Input type"). key is a hash of what the signature says; build writes the text
 * on a miss. A per-thread set-associative cache keyed by it makes the repeat calls of a training
 * loop a lookup; a miss (the text built and interned) is timed whole into prep_ns. */
uint32_t      mst_prof_intern_sig(uint64_t key, void (*build)(const void *arg, char *buf, size_t n), const void *arg);
/* Forward-to-backward links (per thread): the next forward op's sequence number (1, 2, ...), and
 * the forward op whose backward the thread is running (0: none; returns the previous one). */
int64_t       mst_prof_flow_next(void);
int64_t       mst_prof_flow_backward_of(void);
int64_t       mst_prof_flow_enter_backward(int64_t seq);

/* Makes one record now; returns it, or NULL when none was made. A caller may fill its a and b after
 * the timestamp (before its next record on this thread): work that only feeds a record stays out
 * of the range it closes. */
mst_prof_event *mst_prof_record_(mst_prof_kind kind, mst_prof_cat cat, uint32_t name, int op, int64_t a, int64_t b);

/* Work a caller does only to feed records (a call's signature hashed and interned, its FLOPs and
 * bytes counted) is the profiler's cost too, and the calibrated cost of a record does not include
 * it. Bracket it with these: one bracket in MST_PROF_PREP_EVERY on a thread is timed (two clock
 * reads), and mst_prof_overhead.prep_ns counts every bracket at the mean of the timed ones.
 * A timed bracket over MST_PROF_PREP_MAX_NS was interrupted and is left out: brackets sit next to
 * parallel regions, where the thread is often descheduled as a region ends (on the cnn 21% of the
 * timed brackets took 4-32 us, 90% of their sum, while perf put these functions at 0.02% of the
 * samples). begin returns 0 when this bracket is not timed. */
#define MST_PROF_PREP_EVERY 16
#define MST_PROF_PREP_MAX_NS 2000
uint64_t mst_prof_prep_begin(void);
void     mst_prof_prep_end(uint64_t t0);

/* Coarse ranges (data waits, compile, comm): level STEPS. */
static inline void mst_prof_begin(mst_prof_cat cat, uint32_t name, int op) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_BEGIN, cat, name, op, 0, 0);
}
static inline void mst_prof_end(mst_prof_cat cat, uint32_t name, int op) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_END, cat, name, op, 0, 0);
}
/* A kernel range's begin with what the trace shows of it (level OPS): sig, the interned
 * signature of the inputs' shapes and dtypes (mst_prof_intern_sig; 0 = none); link ties forward
 * to backward: > 0 the forward op's sequence number (mst_prof_flow_next), < 0 run by the backward
 * of forward op -link, 0 none. trace.json draws them as args and flow arrows. */
static inline void mst_prof_kernel_begin(uint32_t name, int op, uint32_t sig, int64_t link) {
    if (mst_prof_on(MST_PROF_LEVEL_OPS)) mst_prof_record_(MST_EV_BEGIN, MST_CAT_KERNEL, name, op, (int64_t)sig, link);
}
/* Per-op ranges (the dispatcher): level OPS. The kernel's end carries its FLOPs and bytes. */
static inline void mst_prof_op_begin(mst_prof_cat cat, uint32_t name, int op) {
    if (mst_prof_on(MST_PROF_LEVEL_OPS)) mst_prof_record_(MST_EV_BEGIN, cat, name, op, 0, 0);
}
static inline void mst_prof_op_end(mst_prof_cat cat, uint32_t name, int op) {
    if (mst_prof_on(MST_PROF_LEVEL_OPS)) mst_prof_record_(MST_EV_END, cat, name, op, 0, 0);
}
static inline void mst_prof_counter(uint32_t name, int64_t value) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_COUNTER, MST_CAT_OTHER, name, -1, value, 0);
}
/* Counters on hot paths (allocator): level DETAIL. */
static inline void mst_prof_counter_detail(uint32_t name, int64_t value) {
    if (mst_prof_on(MST_PROF_LEVEL_DETAIL)) mst_prof_record_(MST_EV_COUNTER, MST_CAT_OTHER, name, -1, value, 0);
}
static inline void mst_prof_instant(uint32_t name, int64_t a, int64_t b) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_INSTANT, MST_CAT_OTHER, name, -1, a, b);
}
/* A per-step value of a series: loss, learning rate, loss scale. */
static inline void mst_prof_value(uint32_t name, double v) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) {
        int64_t bits;
        __builtin_memcpy(&bits, &v, sizeof(bits));
        mst_prof_record_(MST_EV_VALUE, MST_CAT_OTHER, name, -1, bits, 0);
    }
}
static inline void mst_prof_step_begin(int64_t step) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, -1, step, 0);
}
static inline void mst_prof_step_end(int64_t step) {
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) mst_prof_record_(MST_EV_STEP_END, MST_CAT_OTHER, 0, -1, step, 0);
}

#endif
