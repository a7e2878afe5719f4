/* trace_export.h — Chrome trace JSON (the Trace Event Format) from a profile database, for
 * Perfetto (ui.perfetto.dev) and chrome://tracing.
 *
 * What it writes: one complete event ("X") per recorded range of the trace span (category and op
 * name, FLOPs and bytes for kernels), thread names as metadata ("M"), every step as a range on
 * its own "steps" track with its breakdown in args, and counters ("C") for memory per category,
 * loss, loss scale, learning rate and the raw counters of the span. Timestamps are microseconds
 * from the first step or record. Format reference: "Trace Event Format", Google, 2016.
 *
 *     char err[512];
 *     if (mst_trace_export("run/profile.db", "run/trace.json", err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
 */
#ifndef MST_PROFILER_TRACE_EXPORT_H
#define MST_PROFILER_TRACE_EXPORT_H

#include <stddef.h>

/* The pseudo thread id of the steps track (Linux never hands out tid 0). */
#define MST_TRACE_STEPS_TID 0

/* Written atomically (temp file beside json_path, fsync, rename). 0, or -1 with a message. */
int mst_trace_export(const char *db_path, const char *json_path, char *err, size_t errn);

#endif
