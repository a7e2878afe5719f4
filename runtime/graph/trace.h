/* trace.h — the tracer: while ctx->tracer is set, the dispatcher creates shape-only outputs, runs
 * no kernel and calls mst_trace_record, which appends the call to a graph (runtime/graph/ir.h).
 *
 * Tensors met for the first time are classified: declared inputs were registered up front;
 * persistent tensors (parameters, state) become by-reference values; any other tensor with data is
 * a constant snapshotted now; a shape-only tensor the tracer never produced is an internal error.
 *
 *     mst_tracer *tr = mst_tracer_new(ctx, g);
 *     mst_trace_bind_input(tr, meta_x, 0);
 *     ctx->tracer = tr;  ... run the step ...;  ctx->tracer = NULL;
 *     int v = mst_trace_value_of(tr, loss);      // -1 when the trace never saw it
 *     mst_tracer_free(tr);
 */
#ifndef MST_RUNTIME_GRAPH_TRACE_H
#define MST_RUNTIME_GRAPH_TRACE_H

#include "runtime/op.h"

typedef struct mst_tracer mst_tracer;
struct mst_graph;

mst_tracer *mst_tracer_new(mst_ctx *ctx, struct mst_graph *g);
void        mst_tracer_free(mst_tracer *tr);
/* t (a meta tensor) is the run's in[index]. */
int         mst_trace_bind_input(mst_tracer *tr, mst_tensor *t, int index);
/* The value id a tensor maps to, classifying (and snapshotting) it if new; -1 with the error in ctx. */
int         mst_trace_value_of(mst_tracer *tr, mst_tensor *t);

/* Dispatcher hook: record one call whose outputs exist. Errors name the op, shapes and reason. */
mst_status  mst_trace_record(mst_ctx *ctx, const mst_op_call *c);
/* Release hook (tensor.c): t is being freed, so its address may come back as another tensor. */
void        mst_trace_forget(mst_tracer *tr, const mst_tensor *t);

#endif
