/* exec.h — the graph executor: a flat array of (kernel, prebuilt mst_op_call) whose tensor
 * headers point into the arena, the persistent tensors and the bound inputs. A run does no
 * dispatch, allocation or tape work; each kernel or fused group gets one profiler range with
 * its FLOPs and bytes, as the eager dispatcher's kernel range does.
 *
 *     mst_graph_exec *ex = mst_graph_exec_new(ctx, g, &plan, -1);   // -1: no dynamic batch
 *     mst_graph_exec_run(ex, in, n_in);
 *     mst_tensor *loss = mst_graph_exec_value(ex, g->outputs[0]);   // valid until the next run
 *     mst_graph_exec_free(ex);
 */
#ifndef MST_RUNTIME_GRAPH_EXEC_H
#define MST_RUNTIME_GRAPH_EXEC_H

#include <stdio.h>

#include "runtime/graph/ir.h"
#include "runtime/graph/plan.h"

typedef struct mst_graph_exec mst_graph_exec;

/* traced_batch >= 0: inputs' dim 0 is a batch that may shrink below it between runs (shapes are
 * re-inferred; the arena was planned for traced_batch). NULL with the error in ctx. */
mst_graph_exec *mst_graph_exec_new(mst_ctx *ctx, const mst_graph *g, const mst_graph_plan *p, int64_t traced_batch);
void            mst_graph_exec_free(mst_graph_exec *ex);
mst_status      mst_graph_exec_run(mst_graph_exec *ex, mst_tensor *const in[], int n_in);
mst_tensor     *mst_graph_exec_value(mst_graph_exec *ex, int v);
int             mst_graph_exec_kernels(const mst_graph_exec *ex);
int64_t         mst_graph_exec_arena_bytes(const mst_graph_exec *ex);
/* Pins the step's thread budget (mst_step_threads_pin) before its first run, pin_by naming why for
 * the log; nothing when the job pins it (runtime.step_threads) or the plan has run. */
void            mst_graph_exec_pin_step_threads(mst_graph_exec *ex, int pin, const char *pin_by);
/* The threads the step runs on: the context's count, 1 on the calling thread alone, 0 while the
 * plan's first runs are still deciding (runtime/graph/step_threads.h). */
int             mst_graph_exec_step_threads(const mst_graph_exec *ex);
/* FLOPs of one run (op-table formulas over the current shapes). */
int64_t         mst_graph_exec_flops(const mst_graph_exec *ex);
/* One line per plan-time fusion verdict (kept or rejected, with the measured times), for `mstune graph`. */
void            mst_graph_exec_describe_fusions(const mst_graph_exec *ex, FILE *f);

#endif
