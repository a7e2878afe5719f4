/* step_threads.h — graph mode's verdict on a plan's thread budget: the whole step on all the
 * context's threads, or on the calling thread alone (mst_ctx.serial).
 *
 * A step of small products (the mlp at batch 16: 1-6.4 MFLOP each) can run faster on one thread
 * than on two: each op's second thread costs a wake-up and reads what the other core wrote. No
 * per-op rule sees that; the step's own time does. So a new plan's first runs alternate the two
 * budgets (a warm-up run of each first: a one-thread step makes its own kernel verdicts and oneDNN
 * primitives), and the timed runs decide: one thread is kept only when its median is
 * k_serial_margin faster and it won every timed pair but one. After two timed pairs a one-thread step already k_hopeless slower ends
 * the trial (the cnn: ~1.7x), so a large step pays two or three slow runs, not five.
 * The verdict goes to the machine's verdict file beside the kernel verdicts, and a later process
 * that plans the same graph at the same budget reads it instead of measuring (exec.c), so runs
 * of a job on one machine keep the same bits, as with the kernel verdicts (a one-thread step's
 * oneDNN reductions split differently, so its bits differ within f32 rounding, as
 * `runtime.threads: 1` does). MSTUNE_GRAPH_THREADS=all|one skips both (tests, benchmarks).
 *
 *     mst_step_threads v;
 *     mst_step_threads_init(&v, ctx->n_threads);
 *     bool one = mst_step_threads_next(&v);          // the budget of the run about to start
 *     ... run the step with ctx->serial = one, timing it ...
 *     mst_step_threads_record(&v, one, ns);          // after a run that completed
 *     if (mst_step_threads_decided(&v)) ... v.serial is the verdict
 */
#ifndef MST_RUNTIME_GRAPH_STEP_THREADS_H
#define MST_RUNTIME_GRAPH_STEP_THREADS_H

#include <stdbool.h>
#include <stdio.h>

/* a warm-up run of each budget, then up to five timed pairs */
#define MST_STEP_THREADS_PAIRS 5
#define MST_STEP_THREADS_TRIAL_RUNS (2 + 2 * MST_STEP_THREADS_PAIRS)

typedef struct {
    int runs;               /* runs recorded; MST_STEP_THREADS_TRIAL_RUNS once decided */
    bool serial;            /* the verdict (false while undecided) */
    bool forced;            /* by MSTUNE_GRAPH_THREADS, or nothing to decide (one thread) */
    bool early;             /* decided after two pairs: one thread far slower */
    bool from_file;         /* read from the machine's verdict file (mst_step_threads_set) */
    int timed;              /* timed pairs recorded */
    double ns[2][MST_STEP_THREADS_PAIRS];   /* [one thread?][pair] */
    double median_ns[2];    /* at the decision: all threads, one thread */
} mst_step_threads;

void mst_step_threads_init(mst_step_threads *v, int n_threads);
bool mst_step_threads_decided(const mst_step_threads *v);
/* A verdict from the machine's file (runtime/backend/kernel_choice.h): decided, no trial. */
void mst_step_threads_set(mst_step_threads *v, bool one_thread);
/* The budget of the next run: the verdict once decided, else the trial's turn (true: one thread). */
bool mst_step_threads_next(const mst_step_threads *v);
/* A completed run of the trial (ignored once decided). */
void mst_step_threads_record(mst_step_threads *v, bool serial, double ns);
/* One line for `mstune graph`. */
void mst_step_threads_describe(const mst_step_threads *v, int n_threads, FILE *f);

#endif
