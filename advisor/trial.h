/* trial.h — one configuration of the job run as separate `mstune` processes, repeated, and the
 * verdict that compares it with the baseline.
 *
 * A trial is a process so that a crash, a NaN or an out-of-memory cannot take the advisor down and
 * its peak memory is its own. Each run writes summary.json into its own folder; the trial keeps the
 * numbers the verdict needs. Speed is compared per run (the run is the unit, as in the gate:
 * steps within a run are correlated): the Hodges–Lehmann shift of log time per applied update
 * between the two groups with its distribution-free interval (util/stats.h), stratified by turn
 * once a trial was extended (runs are compared only with the runs taken in turns with them, so a
 * drift of the machine between the first look and an extension falls out); accuracy as a
 * non-inferiority test on the mean paired (same seed) difference with its t interval. */
#ifndef MST_ADVISOR_TRIAL_H
#define MST_ADVISOR_TRIAL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Runs a side at most: K x 2^MST_TRIAL_MAX_LOOKS for K = 3 (an unresolved speed trial looks again
 * with twice the runs, up to MST_TRIAL_MAX_LOOKS more looks, the budget permitting). */
#define MST_TRIAL_MAX_RUNS 48
#define MST_TRIAL_MAX_LOOKS 4
#define MST_TRIAL_MAX_SETS 24

/* Runs a side at look n of a trial whose first look had K = repeats: K x 2^n, at most the limit. */
static inline int mst_trial_look_runs(int repeats, int look) {
    return (repeats << look) > MST_TRIAL_MAX_RUNS ? MST_TRIAL_MAX_RUNS : repeats << look;
}

typedef struct {
    int exit_code;                  /* the process's exit status; -signal when killed */
    bool ok;                        /* exit 0 and a readable summary */
    double step_ms;                 /* summary step_time_ms_median */
    double effective_step_ms;       /* step_ms / (1 - skipped fraction): time per applied update */
    double val_accuracy;            /* 0..1; -1 when not evaluated */
    char metric_name[32];           /* summary metric.name ("accuracy", "psnr"); "" when the summary has none */
    double metric;                  /* summary metric.value; NAN when not evaluated */
    bool metric_higher_is_better;   /* summary metric.higher_is_better */
    double final_loss;
    double peak_memory_bytes;
    double wall_s;
    double train_loop_s;            /* summary train_loop_s: every step's wall time, compiles included */
    double ms_per_update;           /* train_loop_s / applied updates: the speed metric (NAN if unknown) */
    int64_t applied_updates;        /* steps - skipped steps */
    int64_t seed;                   /* summary seed: runs of two configurations are paired by it */
    int64_t steps, skipped_steps, overflow_steps, compile_count;
    int step_threads;               /* summary step_threads: the threads the training step ran on at the
                                       end (0: its own trial had not decided) */
    bool step_pinned;               /* it ran with the set's step_pin (runtime.step_threads) */
    double loss_scale_final;        /* NAN when not reported */
    int turn;                       /* the block of runs taken in turns it belongs to: 0 for the first look
                                       (the baseline's first K runs and every trial's first K), a new id
                                       for each extension, whose baseline and trial runs alternate */
    char dir[1024];
    char error[256];                /* the last line of the run's stderr when !ok */
} mst_run_result;

typedef struct {
    char name[64];                  /* "baseline", "trial-1-graph_mode", ... */
    char sets[MST_TRIAL_MAX_SETS][96];
    int n_sets;
    bool seeded;                    /* run i gets train.seed = seed0 + i (K seeds; the timing repeats) */
    char step_pin[8];               /* "all" or "one": the step-thread budget the set's first run that
                                       decided one settled on, given to every later run as
                                       runtime.step_threads; "" until then */
    int64_t seed0;
    mst_run_result runs[MST_TRIAL_MAX_RUNS];
    int n_runs;
    double wall_s;                  /* all runs together */
} mst_trial_set;

/* Run `bin <command> job --set ... --out dir/<name>-r<i>` repeats more times (command "train" or
 * "profile"), appended to the runs t already has (i counts from its first run, so a set can be
 * extended by more seeds); first_profile: run 0 is `profile` (the diagnosis run); t->seeded: run i
 * also gets train.seed = t->seed0 + i. One budget a set: once a run of the set reports the step
 * budget its own trial decided (summary step_threads), every later run of the set is pinned to it
 * (runtime.step_threads=all|one, t->step_pin), so that a set's runs differ by their seeds and the
 * machine's noise, not by a budget decided again in each process (a budget near its margin
 * flipped between processes: baselines ran 10 of 48 runs on one thread, 38 on two). A set whose
 * step_pin is given before its first run (a trial whose change keeps the step takes the
 * baseline's, advise.c) runs pinned from the first. Extra sets
 * (e.g. train.checkpoint=false) are appended by the caller. Returns the number of runs that
 * completed; a failed run is recorded with its exit code and error, and a run that was stopped
 * early (its summary says interrupted) counts as failed. No run starts once *stop is set. */
int mst_trial_run(mst_trial_set *t, const char *bin, const char *job_path, const char *dir, int repeats, bool first_profile,
                  FILE *log, volatile sig_atomic_t *stop);

/* Read one run's summary.json into r (ok = false with error on a problem). The job's metric comes
 * from its "metric" object; an older summary without one gives accuracy from val_accuracy. */
void mst_run_read_summary(mst_run_result *r, const char *summary_path);

typedef enum {
    MST_VERDICT_ACCEPTED,
    MST_VERDICT_REJECTED,
    MST_VERDICT_NOT_RUN,
    MST_VERDICT_CANNOT_VERIFY,      /* faster (or fixing), but accuracy cannot be resolved at the tolerance */
} mst_verdict_kind;

/* A deterministic effect a change aims at, judged as an exact count (not against timing noise). */
typedef enum { MST_COUNT_NONE, MST_COUNT_SKIPPED_STEPS, MST_COUNT_COMPILES } mst_count_kind;

typedef struct {
    mst_verdict_kind kind;
    double speedup;                 /* baseline time per applied update / trial's (train loop, compiles included),
                                       Hodges–Lehmann over runs; NAN if not measured */
    double ci_low, ci_high;         /* its interval at the configured level */
    double accuracy_delta_pp;       /* mean over seeds of the metric's gain (trial - baseline, sign flipped for a
                                       lower-is-better metric, so > 0 is better) at the same seed, in the metric's
                                       unit (accuracy: points; PSNR: dB); NAN if not measured */
    double accuracy_ci_low, accuracy_ci_high;   /* its t interval at the configured level (NAN with one pair) */
    int accuracy_pairs;             /* seeds both sides ran */
    double seed_spread_pp;          /* the baseline's metric range over its seeds (max - min), the metric's unit */
    char metric_name[32];           /* the metric judged ("accuracy" when the summaries name none) */
    char metric_unit[8];            /* its tolerance unit: "pp" for accuracy, "dB" for PSNR, "" otherwise */
    double step_speedup;            /* secondary: the same estimate on the per-step medians */
    mst_count_kind count;           /* the exact count the change aims at, if any */
    double count_base, count_trial; /* its medians over runs (NAN when none) */
    double memory_delta_bytes;      /* median peak, trial - baseline */
    double memory_ratio;            /* trial / baseline peak */
    double speed_confidence;        /* the level of the speed intervals (stricter on an extended look) */
    int baseline_runs;              /* the baseline runs it was judged against (the first N: a later
                                       extension adds runs that an earlier verdict did not see) */
    bool speed_unresolved;          /* a speed change whose estimate or interval reached the minimum effect
                                       but whose interval did not exclude 1 (nor show it slower), accuracy
                                       not inferior, every run fine: more seeds could decide it */
    bool speed_confirm;             /* a first look whose timing decided the outcome (a speed change
                                       faster, or slower by no more than the machine's drift, or a
                                       count change slower): its runs followed the baseline's rather
                                       than taking turns with them, so a drift of the machine reads
                                       as an effect; more seeds in turns confirm it */
    int trial_runs;                 /* the trial's runs it was judged on (the first N) */
    int extended_from;              /* runs per side before the extension; 0 when not extended */
    bool in_turns;                  /* the speed was compared within turns (stratified by mst_run_result.turn:
                                       an extended trial whose every run has baseline runs of its turn),
                                       not pooled */
    char reason[700];
} mst_verdict;

/* goal: an mst_goal (advisor/finding.h); count: the exact count the change aims at; tolerance: in
 * the metric's unit (accuracy: percentage points; PSNR: dB), applied in its direction. */
void mst_verdict_decide(const mst_trial_set *base, const mst_trial_set *trial, int goal, mst_count_kind count,
                        double tolerance, double min_speedup, double confidence, mst_verdict *v);
/* The same with the speed intervals at their own level (speed_confidence): the extended look of a
 * trial that the first K seeds left unresolved is judged at a stricter level, so that looking twice
 * does not raise the rate of accepting a change that gains nothing (docs/advisor.md). */
void mst_verdict_decide_at(const mst_trial_set *base, const mst_trial_set *trial, int goal, mst_count_kind count,
                           double tolerance, double min_speedup, double confidence, double speed_confidence, mst_verdict *v);
const char *mst_verdict_name(mst_verdict_kind k);
/* The smallest gain a trial resolves within the budget (left_min minutes after the baseline; INFINITY
 * for no budget) from the baseline's K = repeats runs: min_speedup times the interval's reach that
 * many runs leave (the verdict's lower bound must reach min_speedup), what the rules weigh a
 * prediction against (docs/advisor.md, "resolvable gain"). */
double mst_verdict_resolvable(const mst_trial_set *base, int repeats, double left_min, double min_speedup);

#endif
