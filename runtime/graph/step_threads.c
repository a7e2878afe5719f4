/* step_threads.c — see step_threads.h. */
#include "runtime/graph/step_threads.h"

#include <stdlib.h>
#include <string.h>

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
/* After two timed pairs, a one-thread median this many times the all-threads one ends the trial. */
static const double k_hopeless = 1.5;

void mst_step_threads_init(mst_step_threads *v, int n_threads) {
    memset(v, 0, sizeof(*v));
    v->pairs = MST_STEP_THREADS_PAIRS;
    const char *force = getenv("MSTUNE_STEP_THREADS");
    if (!force || !*force) force = getenv("MSTUNE_GRAPH_THREADS");     /* its older name */
    bool forced_one = force && strcmp(force, "one") == 0, forced_all = force && strcmp(force, "all") == 0;
    if (n_threads <= 1 || forced_one || forced_all) {
        v->forced = v->decided = true;
        v->serial = n_threads > 1 && forced_one;
    }
}

void mst_step_threads_set(mst_step_threads *v, bool one_thread) {
    v->from_file = true;
    v->file_serial = one_thread;
    v->pairs = MST_STEP_THREADS_CONFIRM_PAIRS;
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
    if (!v->from_file) v->serial = !v->early && beats(v, true, k_serial_margin);
    else v->serial = v->early ? false : beats(v, !v->file_serial, k_overturn_margin) ? !v->file_serial : v->file_serial;
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
    if (v->timed == 2 && mst_stats_median(v->ns[1], 2) > k_hopeless * mst_stats_median(v->ns[0], 2)) {
        v->early = true;
        decide(v);
    } else if (v->timed == v->pairs) {
        decide(v);
    }
}

void mst_step_threads_describe(const mst_step_threads *v, int n_threads, FILE *f) {
    if (n_threads <= 1) return;
    fprintf(f, "step threads: ");
    if (v->forced) fprintf(f, "%s (forced by MSTUNE_STEP_THREADS)\n", v->serial ? "one thread" : "all threads");
    else if (v->from_file && !v->decided)
        fprintf(f, "%s (this machine's verdict file), confirmed by the step's first %d runs\n", v->file_serial ? "one thread" : "all threads",
                MST_STEP_THREADS_RUNS(v->pairs));
    else if (v->from_file)
        fprintf(f, "%s (this machine's verdict file %s): one thread %.1f us vs %d threads %.1f us (medians of %d alternated pairs%s)\n",
                v->serial ? "one thread" : "all threads", v->overturned ? "overturned" : "confirmed", v->median_ns[1] / 1e3, n_threads,
                v->median_ns[0] / 1e3, v->timed, v->early ? ", stopped early" : "");
    else if (!mst_step_threads_decided(v))
        fprintf(f, "%d threads or the calling thread alone: decided by the step's first %d runs (one thread kept only "
                   "when %.0f%% faster)\n", n_threads, MST_STEP_THREADS_TRIAL_RUNS, 100 * k_serial_margin);
    else
        fprintf(f, "%s: one thread %.1f us vs %d threads %.1f us (medians of %d alternated pairs%s)\n",
                v->serial ? "one thread kept" : "one thread rejected", v->median_ns[1] / 1e3, n_threads,
                v->median_ns[0] / 1e3, v->timed, v->early ? ", stopped early" : "");
}
