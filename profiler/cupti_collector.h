/* cupti_collector.h — device-side activity from CUPTI as mstune profiler records.
 *
 * The collector enables CUPTI's Activity API (kernels, memcpy, memset, runtime and driver API
 * calls) and turns each completed activity buffer into ranges on one pseudo-thread per device
 * stream ("gpu.<device>.<stream>"), timestamps mapped from CUPTI's clock to CLOCK_MONOTONIC.
 * events.c records only from the calling thread, so converted records leave through a
 * caller-supplied emit function with a synthetic tid instead (mst_store_sink fits it as is).
 * Built only with MSTUNE_CUDA; see docs/cupti.md for what is recorded and the limits.
 *
 * Usage:
 *     char err[256];
 *     if (mst_cupti_start(mst_store_sink, store, err, sizeof(err)) != 0)
 *         fprintf(stderr, "no device timeline: %s\n", err);     // e.g. no driver, no GPU
 *     ...  training steps: kernels and copies on the device  ...
 *     mst_cupti_flush();                // deliver what is complete (e.g. at each step's end)
 *     mst_cupti_stop();                 // deliver everything, disable collection
 *
 * The pure part (record conversion, clock mapping, the per-stream decoder) takes no CUPTI state
 * and is what the tests exercise on hand-built records.
 */
#ifndef MST_PROFILER_CUPTI_COLLECTOR_H
#define MST_PROFILER_CUPTI_COLLECTOR_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "profiler/events.h"

/* The record versions of the CUPTI this collector is written against (CUDA 13.0). The fields
 * read here (start, end, device, context, stream, correlation id, name, bytes, copy kind) sit
 * at the same place in the later versions a newer CUPTI writes. */
typedef CUpti_ActivityKernel10 mst_cupti_kernel_rec;
typedef CUpti_ActivityMemcpy6 mst_cupti_memcpy_rec;
typedef CUpti_ActivityMemset4 mst_cupti_memset_rec;

/* Receives one stream's converted records, in time order: `stream_id` is a synthetic tid
 * (MST_CUPTI_TID_BASE + n, never a real Linux tid) whose first chunk opens with an
 * MST_EV_THREAD_NAME record naming it "gpu.<device>.<stream>". Called from CUPTI's worker thread
 * or from the thread in mst_cupti_flush/stop, never concurrently with itself; it must copy what
 * it keeps. */
typedef void (*mst_cupti_emit_fn)(void *user, uint32_t stream_id, const mst_prof_event *ev, size_t n);

#define MST_CUPTI_TID_BASE 0x80000000u

/* ---- the collector: one per process (CUPTI is process-wide) ---- */

/* Registers the buffer callbacks and enables the activity kinds. Returns 0, or -1 with a message
 * in err (no NVIDIA driver, no CUDA device, a CUPTI call that failed and where, already running). */
int  mst_cupti_start(mst_cupti_emit_fn emit, void *user, char *err, size_t errn);
/* Delivers the buffers whose records are all complete, full or not (activity still running on
 * the device waits for a later flush). Returns 0, or -1 (mst_cupti_last_error says why); 0 when
 * not running. */
int  mst_cupti_flush(void);
/* Delivers everything (a forced flush: activity still running on the device has no end and is
 * counted as untimed, so synchronize the device first), disables the activity kinds and forgets
 * the emit function. No-op when not running. */
void mst_cupti_stop(void);
/* The last error message of the collector ("" if none), copied into buf. */
void mst_cupti_last_error(char *buf, size_t n);

/* What the collector saw; while running, the totals so far; after stop, the last session's. */
typedef struct {
    uint64_t kernels, memcpys, memsets; /* ranges delivered */
    uint64_t api_calls;                 /* runtime/driver API records read for launch times */
    uint64_t untimed;                   /* records without valid timestamps, skipped */
    uint64_t other;                     /* records of kinds not converted */
    uint64_t lost;                      /* dropped for lack of memory here */
    uint64_t cupti_dropped;             /* records CUPTI reported dropped (buffers full) */
    uint64_t buffers;                   /* activity buffers processed */
} mst_cupti_stats;
mst_cupti_stats mst_cupti_get_stats(void);

/* ---- clock mapping: CUPTI's timestamps (CLOCK_REALTIME on Linux) to CLOCK_MONOTONIC ---- */

/* Paired readings of the two clocks; sample 1 is the latest (0 = none yet). */
typedef struct {
    uint64_t cupti0, mono0;
    uint64_t cupti1, mono1;
} mst_cupti_clock;

/* Shortest span between samples over which their rate is trusted, and how far from 1 it may be. */
#define MST_CUPTI_CLOCK_MIN_SPAN_NS 100000000ull    /* 100 ms */
#define MST_CUPTI_CLOCK_MAX_SKEW    1e-3

/* Maps a CUPTI timestamp: linear through both samples when they span at least
 * MST_CUPTI_CLOCK_MIN_SPAN_NS and the rate is within MST_CUPTI_CLOCK_MAX_SKEW of 1; otherwise the
 * offset of the latest sample (a wall-clock step between samples lands here). Clamps at 0. */
uint64_t mst_cupti_clock_map(const mst_cupti_clock *clk, uint64_t cupti_ns);
/* Records a new latest sample (the first call sets sample 0 too). */
void     mst_cupti_clock_add(mst_cupti_clock *clk, uint64_t cupti_ns, uint64_t mono_ns);

/* ---- record conversion ---- */

/* One device activity as a BEGIN/END pair. BEGIN: a = correlation id, b = 0 (the decoder fills in
 * the launching API call's start, CLOCK_MONOTONIC, when it saw it). END: a = 0 (FLOPs unknown),
 * b = bytes for memcpy/memset, 0 for kernels. */
typedef struct {
    uint32_t device, stream;
    uint32_t correlation, correlation2;     /* memcpy: the runtime API's id as well, else 0 */
    mst_prof_event ev[2];
} mst_cupti_range;

typedef enum {
    MST_CUPTI_CONV_RANGE,       /* *out holds a range */
    MST_CUPTI_CONV_UNTIMED,     /* a kind converted here, but without valid timestamps */
    MST_CUPTI_CONV_OTHER,       /* a kind not converted */
} mst_cupti_conv;

/* Kernels (KERNEL, CONCURRENT_KERNEL) -> MST_CAT_KERNEL named after the kernel (as CUPTI gives
 * it: mangled for C++ kernels); memcpy -> MST_CAT_MEMCPY "memcpy.htod" etc.; memset ->
 * MST_CAT_MEMCPY "memset". */
mst_cupti_conv mst_cupti_convert(const CUpti_Activity *rec, const mst_cupti_clock *clk, mst_cupti_range *out);

/* ---- the decoder: ranges of a buffer grouped per stream, with launch times ---- */

typedef struct mst_cupti_decoder mst_cupti_decoder;

mst_cupti_decoder *mst_cupti_decoder_new(mst_cupti_emit_fn emit, void *user);
void mst_cupti_decoder_free(mst_cupti_decoder *d);
/* Converts one record with the clock; runtime/driver API records only feed launch times. */
void mst_cupti_decoder_add(mst_cupti_decoder *d, const CUpti_Activity *rec, const mst_cupti_clock *clk);
/* Emits what was added since the last call: per pseudo-thread, ranges sorted by start. Ranges
 * that overlap on one stream (graph branches) go to extra lanes "gpu.<device>.<stream>.<k>", so
 * every pseudo-thread gets disjoint ranges in time order across all its chunks. */
void mst_cupti_decoder_emit(mst_cupti_decoder *d);
/* Counts; cupti_dropped and buffers stay 0 (the collector keeps them). */
mst_cupti_stats mst_cupti_decoder_stats(const mst_cupti_decoder *d);

#endif
