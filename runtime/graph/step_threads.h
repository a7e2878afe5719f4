/* step_threads.h — the verdict on a training step's thread budget: the whole step on all the
 * context's threads, or on the calling thread alone (mst_ctx.serial). Graph mode keeps one per
 * plan (exec.c); eager mode one per run, timed on the first batch's shapes (runtime/step_runner.c).
 *
 * A step of small products (the mlp at batch 16: 1-6.4 MFLOP each) can run faster on one thread
 * than on two: each op's second thread costs a wake-up and reads what the other core wrote. No
 * per-op rule sees that; the step's own time does. So a new plan's first runs try the two budgets
 * in turns (a warm-up run of each first: a one-thread step makes its own kernel verdicts and oneDNN
 * primitives), each turn two runs of one budget of which the second is timed: a run right after
 * the other budget's finds the pool as that one left it (after a one-thread run the workers have
 * gone to sleep, and a two-thread run pays their wake-ups: alternating single runs timed the mlp
 * at batch 64 faster on one thread, 394 against 426 us, while run after run two threads took
 * 0.29-0.31 ms and one 0.36-0.37). The timed runs decide: one thread is kept only when its median
 * is k_serial_margin faster and it won every timed pair but one.
 * The verdict goes to the machine's verdict file beside the kernel verdicts, and a later process
 * that plans the same graph at the same budget starts from it (exec.c) and confirms it; it is
 * overturned only when the other budget is k_overturn_margin (20%, twice the first trial's margin:
 * hysteresis) faster at the median and won all pairs but one, and an overturned verdict is written
 * again (the newest line wins). A VM's speed for two threads moves with where the host puts its
 * vCPUs: the mlp at batch 64 had kept one thread (215 against 371 us) and later ran 0.36 ms so
 * against eager's 0.33 on two.
 * The bits: a one-thread step's reductions split differently (oneDNN's team, the pool's chunks) and
 * its kernel verdicts are its own, so its bits differ within f32 rounding, as `runtime.threads: 1`
 * does. So the run order is fixed: a new trial and a confirmation run the same budgets at the same
 * runs, whatever the times say (there is no early stop), and two processes that reach the same
 * verdict run every step on the same budget and get the same bits. (A first trial of five pairs
 * confirmed by three, with an early stop when one thread was 1.5x slower, gave three runs of the
 * super-resolution job on one verdict three different checkpoints; docs/benchmarks.md.)
 * Eager steps gain the same way: the mlp at batch 16 ran 2.07x as fast on one thread
 * (docs/benchmarks.md), and without its own trial graph mode's measured gain over eager was
 * mostly this budget, not the dispatch it removes.
 * A pin skips the trial: runtime.step_threads (mst_ctx.step_threads_pin; all|one; auto, the
 * default, tries; set by cli/session.c), a checkpoint's budget for a resumed run's training steps
 * (runtime/step_runner.h, mst_step_runner_set_train_pin), the first plan's verdict for a graph
 * plan of another shape (runtime/graph/cache.c: a smaller last batch, as in eager mode, tries no
 * budget of its own), and over all of them MSTUNE_STEP_THREADS=all|one (or its older name
 * MSTUNE_GRAPH_THREADS; tests, benchmarks).
 *
 *     mst_step_threads v;
 *     mst_step_threads_init(&v, ctx->n_threads, ctx->step_threads_pin, NULL);
 *     bool one = mst_step_threads_next(&v);          // the budget of the run about to start
 *     ... run the step with ctx->serial = one, timing it ...
 *     mst_step_threads_record(&v, one, ns);          // after a run that completed
 *     if (mst_step_threads_decided(&v)) ... v.serial is the verdict
 */
#ifndef MST_RUNTIME_GRAPH_STEP_THREADS_H
#define MST_RUNTIME_GRAPH_STEP_THREADS_H

#include <stdbool.h>
#include <stdio.h>

/* a warm-up run of each budget, then four timed pairs (a new trial and a confirmation alike), each
 * pair four runs: all threads twice, one thread twice, the second of each timed */
#define MST_STEP_THREADS_PAIRS 4
#define MST_STEP_THREADS_TRIAL_RUNS (2 + 4 * MST_STEP_THREADS_PAIRS)

/* A budget pinned instead of tried (runtime.step_threads; the values' order is the job key's). */
typedef enum { MST_STEP_THREADS_AUTO, MST_STEP_THREADS_ALL, MST_STEP_THREADS_ONE } mst_step_threads_pin;
const char *mst_step_threads_pin_name(mst_step_threads_pin pin);
int         mst_step_threads_pin_parse(const char *s);      /* -1 if not auto, all or one */

typedef struct {
    int runs;               /* runs recorded */
    bool decided;
    bool serial;            /* the verdict (while confirming: the file's) */
    bool forced;            /* pinned, or nothing to decide (one thread) */
    bool pinned_by_env;     /* by MSTUNE_STEP_THREADS */
    const char *pinned_by;  /* what pinned it, for describe: the environment variable, or init's pin_by */
    bool from_file;         /* started from the machine's verdict file (mst_step_threads_set) */
    bool file_serial;       /* from_file: the file's verdict */
    bool overturned;        /* from_file: the confirmation found the other budget faster */
    bool kept;              /* from_file under MSTUNE_VERDICTS=keep: decided as the file says, unconfirmed */
    int timed;              /* timed pairs recorded */
    double ns[2][MST_STEP_THREADS_PAIRS];   /* [one thread?][pair] */
    double median_ns[2];    /* at the decision: all threads, one thread */
} mst_step_threads;

/* pin: runtime.step_threads, a resumed checkpoint's budget, or the first batch shape's verdict
 * (MSTUNE_STEP_THREADS overrides); pin_by names which for the log, NULL for the job. */
void mst_step_threads_init(mst_step_threads *v, int n_threads, mst_step_threads_pin pin, const char *pin_by);
bool mst_step_threads_decided(const mst_step_threads *v);
/* A verdict from the machine's file (runtime/backend/kernel_choice.h), confirmed by the trial's
 * runs (the same budgets at the same runs as a new trial). */
void mst_step_threads_set(mst_step_threads *v, bool one_thread);
/* Decided by measuring something the file does not say yet: a new trial, or an overturned verdict. */
bool mst_step_threads_measured_new(const mst_step_threads *v);
/* The budget of the next run: the verdict once decided, else the trial's turn (true: one thread). */
bool mst_step_threads_next(const mst_step_threads *v);
/* A completed run of the trial (ignored once decided). */
void mst_step_threads_record(mst_step_threads *v, bool serial, double ns);
/* One line for `mstune graph`. */
void mst_step_threads_describe(const mst_step_threads *v, int n_threads, FILE *f);

#endif
