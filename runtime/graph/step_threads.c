/* step_threads.c — see step_threads.h. */
#include "runtime/graph/step_threads.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/kernel_choice.h"
#include "util/stats.h"

/* One thread is kept only when its median step is this much faster and it won all pairs but one
 * at most: a wrong "one thread" costs a large step most (the cnn at batch 64 read 1.15-1.45x
 * faster on two threads, alternated), so ties and drift keep the pool. */
static const double k_serial_margin = 0.10;
/* A verdict on file is overturned only by a wider margin: where the two budgets sit near the first
 * one, a confirmation at the same margin flipped the file's verdict back and forth from process to
 * process (subnormal_weights' eager step: 18 of 48 baseline runs of one advise on one thread, 30 on
 * two, docs/benchmarks.md), and runs of one job on mixed budgets are what a trial must not compare. */
static const double k_overturn_margin = 0.20;

const char *mst_step_threads_pin_name(mst_step_threads_pin pin) {
    switch (pin) {
    case MST_STEP_THREADS_ALL: return "all";
    case MST_STEP_THREADS_ONE: return "one";
    default: return "auto";
    }
}

int mst_step_threads_pin_parse(const char *s) {
    for (int p = 0; p <= MST_STEP_THREADS_ONE; p++)
        if (s && strcmp(s, mst_step_threads_pin_name((mst_step_threads_pin)p)) == 0) return p;
    return -1;
}

void mst_step_threads_init(mst_step_threads *v, int n_threads, mst_step_threads_pin pin, const char *pin_by) {
    memset(v, 0, sizeof(*v));
    v->pinned_by = pin_by ? pin_by : "runtime.step_threads";
    const char *var = "MSTUNE_STEP_THREADS", *force = getenv(var);
    if (!force || !*force) force = getenv(var = "MSTUNE_GRAPH_THREADS");     /* its older name */
    int env = force && *force ? mst_step_threads_pin_parse(force) : -1;
    static _Atomic bool warned;
    if (force && *force && env < 0 && !atomic_exchange(&warned, true))     /* a typo must not leave a benchmark unpinned unseen */
        fprintf(stderr, "mstune: %s=%s ignored: expected all, one or auto\n", var, force);
    if (env > 0) {
        pin = (mst_step_threads_pin)env;
        v->pinned_by_env = true;
        v->pinned_by = var;
    }
    if (n_threads <= 1 || pin != MST_STEP_THREADS_AUTO) {
        v->forced = v->decided = true;
        v->serial = n_threads > 1 && pin == MST_STEP_THREADS_ONE;
    }
}

void mst_step_threads_set(mst_step_threads *v, bool one_thread) {
    v->from_file = true;
    v->file_serial = one_thread;
    if (mst_verdicts_kept()) {      /* used as it stands: no confirming runs (kernel_choice.h) */
        v->kept = v->decided = true;
        v->serial = one_thread;
    }
}

bool mst_step_threads_decided(const mst_step_threads *v) { return v->decided; }

bool mst_step_threads_measured_new(const mst_step_threads *v) {
    return v->decided && !v->forced && (!v->from_file || v->overturned);
}

/* Run r of the trial: the warm-up pair (all threads, one thread), then per timed pair all threads
 * twice and one thread twice. */
static bool run_serial(int r) { return r < 2 ? (r & 1) != 0 : (r - 2) % 4 >= 2; }
static bool run_timed(int r) { return r >= 2 && (r - 2) % 2 == 1; }

bool mst_step_threads_next(const mst_step_threads *v) { return v->decided ? v->serial : run_serial(v->runs); }

/* Budget b (true: one thread) beat the other: its median `margin` faster and it won all pairs but
 * one. */
static bool beats(const mst_step_threads *v, bool b, double margin) {
    int wins = 0;
    for (int i = 0; i < v->timed; i++) wins += v->ns[b][i] < v->ns[!b][i];
    return v->median_ns[b] < v->median_ns[!b] * (1 - margin) && wins >= v->timed - 1;
}

static void decide(mst_step_threads *v) {
    v->median_ns[0] = mst_stats_median(v->ns[0], v->timed);
    v->median_ns[1] = mst_stats_median(v->ns[1], v->timed);
    if (!v->from_file) v->serial = beats(v, true, k_serial_margin);
    else v->serial = beats(v, !v->file_serial, k_overturn_margin) ? !v->file_serial : v->file_serial;
    v->overturned = v->from_file && v->serial != v->file_serial;
    v->decided = true;
}

void mst_step_threads_record(mst_step_threads *v, bool serial, double ns) {
    if (mst_step_threads_decided(v) || serial != mst_step_threads_next(v)) return;
    int run = v->runs++;
    if (!run_timed(run)) return;                /* the warm-up pair, a turn's first run */
    int pair = (run - 2) / 4;
    v->ns[serial][pair] = ns;
    if (!serial) return;                        /* a pair is complete after its one-thread run */
    v->timed = pair + 1;
    if (v->timed == MST_STEP_THREADS_PAIRS) decide(v);
}

void mst_step_threads_describe(const mst_step_threads *v, int n_threads, FILE *f) {
    if (n_threads <= 1) return;
    fprintf(f, "step threads: ");
    if (v->forced)
        fprintf(f, "%s (pinned by %s)\n", v->serial ? "one thread" : "all threads",
                v->pinned_by);
    else if (v->kept)
        fprintf(f, "%s (this machine's verdict file, kept as it stands: MSTUNE_VERDICTS=keep)\n",
                v->serial ? "one thread" : "all threads");
    else if (v->from_file && !v->decided)
        fprintf(f, "%s (this machine's verdict file), confirmed by the step's first %d runs\n", v->file_serial ? "one thread" : "all threads",
                MST_STEP_THREADS_TRIAL_RUNS);
    else if (v->from_file)
        fprintf(f, "%s (this machine's verdict file %s): one thread %.1f us vs %d threads %.1f us (medians of %d alternated pairs)\n",
                v->serial ? "one thread" : "all threads", v->overturned ? "overturned" : "confirmed", v->median_ns[1] / 1e3, n_threads,
                v->median_ns[0] / 1e3, v->timed);
    else if (!mst_step_threads_decided(v))
        fprintf(f, "%d threads or the calling thread alone: decided by the step's first %d runs (one thread kept only "
                   "when %.0f%% faster)\n", n_threads, MST_STEP_THREADS_TRIAL_RUNS, 100 * k_serial_margin);
    else
        fprintf(f, "%s: one thread %.1f us vs %d threads %.1f us (medians of %d alternated pairs)\n",
                v->serial ? "one thread kept" : "one thread rejected", v->median_ns[1] / 1e3, n_threads,
                v->median_ns[0] / 1e3, v->timed);
}
