/* step_runner.h — runs the training and evaluation steps of runtime/step.h either eagerly (each
 * call through the dispatcher) or in graph mode (traced once per input signature and replayed
 * from the plan cache of runtime/graph/graph.h). The trainer holds one; nothing else changes
 * between the modes, which is how the parity tests can compare them. Both modes pick the training
 * step's thread budget (all the context's threads, or the calling thread alone) by timing their
 * first steps (runtime/graph/step_threads.h); MSTUNE_STEP_THREADS=all|one pins it.
 *
 *     mst_step_runner *r = mst_step_runner_new(ctx, &spec, true, false, batch_size);
 *     mst_step_runner_train(r, x, y, &out);       // x[k], y[k] for k < spec.accumulate
 *     mst_step_runner_eval(r, x0, y0, &logits, &loss);
 *     mst_step_runner_free(r);                     // before the model and optimizer it traced
 */
#ifndef MST_RUNTIME_STEP_RUNNER_H
#define MST_RUNTIME_STEP_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/graph/graph.h"
#include "runtime/step.h"

typedef struct mst_step_runner mst_step_runner;

/* graph: trace and replay; dynamic_batch: one plan for every batch size <= max_batch (the last,
 * smaller batch of an epoch does not recompile). The spec must outlive the runner. NULL with the
 * error in ctx. */
mst_step_runner *mst_step_runner_new(mst_ctx *ctx, const mst_step_spec *spec, bool graph, bool dynamic_batch,
                                     int64_t max_batch);
void mst_step_runner_free(mst_step_runner *r);

mst_status mst_step_runner_train(mst_step_runner *r, mst_tensor *const x[], mst_tensor *const y[], mst_step_outputs *out);
mst_status mst_step_runner_eval(mst_step_runner *r, mst_tensor *x, mst_tensor *y, mst_tensor **logits, mst_tensor **loss);

/* Graph mode: the training step's plan cache (for dumps: `mstune graph`); NULL in eager mode. */
mst_graph_cache *mst_step_runner_train_cache(const mst_step_runner *r);

/* The training step's thread budget as a pin (mst_step_threads_pin, runtime/graph/step_threads.h):
 * MST_STEP_THREADS_ALL or _ONE once decided (the trial's verdict, or a pin), MST_STEP_THREADS_AUTO
 * (0) while the trial runs or with one thread. A checkpoint records it (checkpoint.h). */
int mst_step_runner_train_pin(const mst_step_runner *r);
/* Pins the training steps' budget (graph mode: every training plan compiled from now on; eager
 * mode: the steps from the next on) unless the job or MSTUNE_STEP_THREADS pins it already:
 * a resumed run goes on with its checkpoint's budget. 0 changes nothing. */
void mst_step_runner_set_train_pin(mst_step_runner *r, int pin);

/* Eager mode: the threads its training step runs on once the step-thread trial has decided (1:
 * the calling thread alone; runtime/graph/step_threads.h), 0 before and in graph mode. */
int mst_step_runner_eager_threads(const mst_step_runner *r);

/* Graph mode: compiles and planned memory of the training and evaluation plans, summed
 * (arena_bytes: the larger plan's arena; arena_cat_bytes: per category, the larger plan's peak live bytes).
 * All zero in eager mode. */
void mst_step_runner_stats(const mst_step_runner *r, mst_graph_stats *st);

#endif
