/* graph.h — graph mode (GRAPH_MODE / jit): a step function written with the ordinary ops is
 * traced once per input signature into IR (ir.h), optimized (passes.h), planned into one arena
 * (plan.h) and replayed as a flat list of kernels (exec.h) with no per-op dispatch.
 *
 * The function must not read tensor values on the host (that aborts while tracing) and must keep
 * everything that changes between steps in tensors: parameters and state are bound by reference,
 * in[] per run, and any other tensor it creates is a constant frozen at trace time. Random ops
 * draw fresh seeds every run, in the order eager mode draws them.
 *
 *     static mst_status step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in,
 *                            mst_tensor *out[], int *n_out) {
 *         ... forward, loss, mst_backward, optimizer update, zero_grad ...
 *         out[0] = loss; *n_out = 1;
 *         return mst_ctx_status(ctx);
 *     }
 *     mst_graph_options opt = {.optimize = true};
 *     mst_graph_cache *gc = mst_graph_cache_new(ctx, "train", step, &state, &opt);
 *     mst_tensor *out[4]; int n_out;
 *     mst_graph_cache_run(gc, (mst_tensor *[]){x, y}, 2, out, &n_out);   // compiles on first use
 *     mst_graph_cache_free(gc);
 */
#ifndef MST_RUNTIME_GRAPH_GRAPH_H
#define MST_RUNTIME_GRAPH_GRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/context.h"
#include "runtime/graph/step_threads.h"

/* Runs a new plan takes to settle: its first runs measure its in-step verdicts and may run a
 * slower variant: the step's thread budget (runtime/graph/step_threads.h), then the fused
 * optimizer's serial-vs-split (runtime/graph/exec.c). A benchmark warms up past them. */
#define MST_GRAPH_OPTIM_TRIAL_RUNS 8
#define MST_GRAPH_SETTLE_RUNS (MST_STEP_THREADS_TRIAL_RUNS + MST_GRAPH_OPTIM_TRIAL_RUNS)
#define MST_GRAPH_MAX_IO 130     /* inputs and outputs of a step: two per micro-batch (train.accumulate_steps <= 64), and a few more */

typedef mst_status (*mst_graph_fn)(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in,
                                   mst_tensor *out[], int *n_out);
typedef struct {
    bool dynamic_batch;     /* dim 0 of every input is a batch <= max_batch: one plan for all sizes */
    int64_t max_batch;
    bool optimize;          /* run the passes */
    unsigned skip_passes;   /* MST_PASS_* bits: fusions left out (the per-pass benchmark, bench_graph --passes) */
    bool blocked_everywhere;/* the nChw16c pass ignores which provider each convolution's kernel choice
                               picked (tests: the plain-copy fallback runs too); default: only where
                               oneDNN's blocked kernels run */
} mst_graph_options;

typedef struct mst_graph_cache mst_graph_cache;

/* NULL with the error in ctx. The cache must be freed before the parameters and state it saw. */
mst_graph_cache *mst_graph_cache_new(mst_ctx *ctx, const char *name, mst_graph_fn fn, void *arg,
                                     const mst_graph_options *opt);
void mst_graph_cache_free(mst_graph_cache *gc);
/* Compiles a plan on a new input signature (input shapes+dtypes, ctx->amp_level, ctx->amp_dtype),
 * inside a MST_CAT_COMPILE profiler range, then runs it. out[] are pooled tensors holding the output
 * values (copies), so the host can read them after the run. */
mst_status mst_graph_cache_run(mst_graph_cache *gc, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out);

typedef struct { int64_t compile_count; double compile_ms; int64_t arena_bytes, intermediate_bytes;
                 int64_t arena_cat_bytes[MST_MEM_COUNT];     /* per memory category: the plan's peak live bytes (plan.h) */
                 int64_t nodes_traced, nodes_after_passes, kernels;
                 int64_t blocked_values;    /* values the layout pass put in nChw16c (runtime/graph/layout.c) */
                 int step_threads;          /* the threads its step runs on (mst_graph_exec_step_threads) */ } mst_graph_stats;
/* Totals over compiles for compile_*, the last compiled plan for the rest. */
void mst_graph_cache_stats(const mst_graph_cache *gc, mst_graph_stats *st);
/* The threads the step of the cache's first plan (the first batch shape's) runs on; 0 while its
 * first runs are still deciding, or before any plan. */
int mst_graph_cache_first_step_threads(const mst_graph_cache *gc);
/* Every plan compiled from now on runs its step on this budget (mst_step_threads_pin: a resumed
 * run's, from its checkpoint) unless the job pins one; 0 (auto): the first plan tries, the others
 * take its verdict. */
void mst_graph_cache_pin_step_threads(mst_graph_cache *gc, int pin);

/* FLOPs of one run of the last compiled plan (op-table formulas); 0 before the first compile. */
int64_t mst_graph_cache_flops(const mst_graph_cache *gc);

/* Text and Graphviz DOT dumps of the last compiled graph before and after the passes (for
 * `mstune graph`). false when nothing was compiled yet. */
bool mst_graph_cache_dump(const mst_graph_cache *gc, FILE *f, bool after_passes);
bool mst_graph_cache_dump_dot(const mst_graph_cache *gc, FILE *f, bool after_passes);
/* The last plan's fusion verdicts, one line each (which were kept or rejected, and why). */
bool mst_graph_cache_describe_fusions(const mst_graph_cache *gc, FILE *f);

#endif
