/* sampler.h — the SIGPROF sampling profiler that cross-checks the instrumented `dispatch` share.
 *
 * Each sampled thread gets its own POSIX timer that sends SIGPROF to that thread only; the
 * handler unwinds the interrupted stack with libunwind into a preallocated per-thread ring (no
 * allocation, no locks). After stop, stacks are symbolized (the executable's ELF .symtab, so the
 * runtime's static kernels have names; dladdr for stripped shared libraries), folded into
 * Brendan Gregg's "root;...;leaf count" lines per thread, and each sample is classified as
 * outside an op, dispatch or kernel work (docs/sampler.md gives the exact rule). The trade-off:
 * a sample is a few microseconds of unwinding at 1 kHz, paid only while sampling, against
 * instrumentation that is exact but cannot see its own cost. Reference: B. Gregg, "The Flame
 * Graph", CACM 59(6), 2016; gperftools' CPU profiler for the per-thread-timer design.
 *
 * Usage (the layering keeps profiler/ free of runtime/: the caller supplies the kernels):
 *     mst_sampler *s = mst_sampler_new(1000, 64, 1 << 16);       // 1 kHz, 64 frames, 64k samples
 *     mst_sampler_set_kernel_addrs(s, kernels, n_kernels);       // mst_op_table[op]->kernels / ref
 *     mst_sampler_add_thread(s);                                 // on each thread to sample
 *     mst_sampler_start(s);
 *     ... train ...
 *     mst_sampler_stop(s);                                       // disarm, restore, symbolize
 *     mst_sampler_foreach_folded(s, write_line, file);           // flame graph input
 *     double d = mst_sampler_dispatch_share(s, main_tid);        // compare with attribution
 *     mst_sampler_free(s);
 */
#ifndef MST_PROFILER_SAMPLER_H
#define MST_PROFILER_SAMPLER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mst_sampler mst_sampler;

/* Which clock drives a thread's timer. WALL (the default) samples at a fixed rate of real time,
 * blocked or not, which is what the instrumented ranges measure; CPU samples the thread's CPU
 * time only (Linux checks CPU timers at the scheduler tick, so rates above CONFIG_HZ coalesce:
 * the missed expirations are counted as overruns). */
typedef enum { MST_SAMPLER_CLOCK_WALL, MST_SAMPLER_CLOCK_CPU } mst_sampler_clock;

/* How the samples of a thread (or all threads) divide (docs/sampler.md). */
typedef struct {
    int64_t samples;    /* stacks kept and aggregated = outside + dispatch + kernel + profiler */
    int64_t outside;    /* no mst_dispatch frame on the stack */
    int64_t dispatch;   /* inside mst_dispatch, not inside a kernel call */
    int64_t kernel;     /* inside a kernel (or what it calls) under mst_dispatch */
    int64_t profiler;   /* inside the event recorder (mst_prof_record_): instrumentation cost;
                           counted apart from outside/dispatch/kernel */
    int64_t truncated;  /* the unwinder stopped early or max_depth was reached (still counted) */
    int64_t lost;       /* signals that found the thread's ring full: never recorded */
    int64_t overruns;   /* timer expirations merged into one signal (si_overrun), not sampled */
    int64_t step_walked; /* samples unwound frame by frame (unw_step) instead of libunwind's fast
                            trace: the fast trace did not reach the interrupted frame, or
                            MSTUNE_SAMPLER_UNWIND=step asked for it (docs/sampler.md) */
} mst_sampler_stats;

/* hz <= 0: 1000. max_depth <= 0: 64 (at most 256). ring_capacity: samples each thread's ring
 * holds between drains (stop drains), 0: 16384 — 16 s at 1 kHz. A ring takes
 * ring_capacity * (16 + 8 * max_depth) bytes (8.6 MB by default), allocated and touched in
 * add_thread. NULL when out of memory. */
mst_sampler *mst_sampler_new(int hz, int max_depth, size_t ring_capacity);
void         mst_sampler_free(mst_sampler *s);          /* stops it first if running */
/* Before the first add_thread (each thread's timer is created there). */
void         mst_sampler_set_clock(mst_sampler *s, mst_sampler_clock clock);

/* The op table's kernel functions (kernels and ref slots): a frame whose function starts at
 * one of these addresses is kernel work. Copied; set before the first drain or stop (samples are
 * classified there). */
int          mst_sampler_set_kernel_addrs(mst_sampler *s, const void *const *addrs, size_t n);
/* The dispatcher entry points (mst_dispatch). Unset, a frame is dispatch when its symbol is
 * named "mst_dispatch" (or a GCC clone of it, "mst_dispatch.<suffix>"). */
int          mst_sampler_set_dispatch_addrs(mst_sampler *s, const void *const *addrs, size_t n);

/* Sample the calling thread: allocates its ring and creates its timer (armed at once if the
 * sampler is running). A second call from the same thread is a no-op. 0 or -1 (see error). */
int          mst_sampler_add_thread(mst_sampler *s);
/* Stop sampling the calling thread (before it exits); its samples stay for aggregation. */
int          mst_sampler_remove_thread(mst_sampler *s);

/* Install the SIGPROF handler and arm every thread's timer. One sampler runs per process
 * (signal dispositions are process-wide): -1 when another one is running. */
int          mst_sampler_start(mst_sampler *s);
/* Disarm the timers, wait (bounded) for signals still pending and for handlers in flight,
 * restore the previous SIGPROF disposition, then drain the rings: symbolize, fold, classify.
 * Start again to add another window; results accumulate. Timers are deleted by remove_thread
 * and free. */
void         mst_sampler_stop(mst_sampler *s);

/* Disarm (paused) or re-arm every thread's timer, keeping the handler and the rings: the sampler
 * costs nothing while paused (a signal already queued is still taken). Before start it decides
 * whether start arms. The profile command pauses it with the recorder's off steps (events.h's
 * phase hook). 0, or -1 when a timer could not be set (see error). */
int          mst_sampler_pause(mst_sampler *s, bool paused);

/* Fold and classify what the rings hold now and free their space, while running: call it from
 * any thread (the trainer at a step end, a background writer) so that long runs need no huge
 * ring. stop drains too. 0. */
int          mst_sampler_drain(mst_sampler *s);

/* Aggregated results (of everything drained so far). tid 0 = all threads. */
typedef void (*mst_sampler_folded_fn)(void *user, uint32_t tid, const char *folded, int64_t count);
/* Every distinct (thread, stack), per thread in tid order, largest count first. -1 while running. */
int          mst_sampler_foreach_folded(mst_sampler *s, mst_sampler_folded_fn fn, void *user);
int64_t      mst_sampler_count(const mst_sampler *s, uint32_t tid);
/* dispatch / (dispatch + kernel) over the thread's samples inside mst_dispatch (the recorder's
 * samples left out); -1 when none. */
double       mst_sampler_dispatch_share(const mst_sampler *s, uint32_t tid);
/* Fewer main-thread samples than this and the share is not shown as a cross-check: at a 10% share
 * its standard error exceeds 5 points (sqrt(0.1 * 0.9 / 30) = 0.055), the agreement it is
 * compared against (tests/integration/test_profile.c). */
#define MST_SAMPLER_MIN_SHARE_SAMPLES 30
mst_sampler_stats mst_sampler_stats_get(const mst_sampler *s, uint32_t tid);
/* Samples lost to full rings, over all threads (also in the stats). Never silent. */
int64_t      mst_sampler_lost(const mst_sampler *s);
/* SIGPROF deliveries that were not this sampler's timer for a registered thread (a thread with
 * no ring yet, kill -PROF, a late signal of a deleted timer): ignored, counted here. */
int64_t      mst_sampler_stray(const mst_sampler *s);
/* What sampling cost the sampled threads, in ns: the time inside the signal handler (unwinding
 * and recording, measured on every delivery and every tick taken at a release) plus, per
 * delivery, one timer tick's price besides the handler (mst_sampler_tick_ns), plus every hold
 * since start (mst_sampler_hold) times one hold's calibrated cost. */
double       mst_sampler_cost_ns(const mst_sampler *s);
/* Calibrated at start: what one timer tick costs the calling thread besides the handler (its
 * interrupt, signal frame and return; a timer of the thread's own against a counted loop), and
 * what a signal the thread sends itself costs (the floor the tick's price never goes under). */
double       mst_sampler_tick_ns(const mst_sampler *s);
double       mst_sampler_self_signal_ns(const mst_sampler *s);
/* A call into code a sample must not unwind (oneDNN: its JIT kernels have no unwind information,
 * and its C++ may be inside malloc), held on the calling thread, only while a sampler runs: true
 * when it held (then mst_sampler_release() after the call). A tick that comes during the hold
 * takes no stack; the release takes it, the stack from the held call's caller on. A hold is
 * two stores to a thread-local cell and a count, no system call: counted into
 * mst_sampler_cost_ns at its calibrated price. Holds nest. */
bool         mst_sampler_hold(void);
void         mst_sampler_release(void);
/* One hold's calibrated cost (at start), and the holds since the last start. */
double       mst_sampler_hold_ns(const mst_sampler *s);
int64_t      mst_sampler_holds(void);
/* Signals the handler served since start (the calibration's own taken out). */
int64_t      mst_sampler_deliveries(const mst_sampler *s);
/* Ticks since start that came inside a hold and were taken at its release. */
int64_t      mst_sampler_deferred(const mst_sampler *s);
/* The last failure's message ("timer_create: Invalid argument"); "" when none. */
const char  *mst_sampler_error(const mst_sampler *s);

/* A label for what the calling thread runs at a higher level than C (the Python frontend sets
 * "py:forward (models/mlp.py:20)" at each op call from Python): each sample copies the thread's
 * label pointer, and the folded stack shows it as a frame right below the outermost dispatcher
 * frame, or at the leaf when no op is running. The string must outlive the sampler (intern it);
 * NULL clears. Cheap enough for every op; mst_sampler_running says whether it is worth computing. */
void mst_sampler_set_label(const char *label);
bool mst_sampler_running(void);

#endif
