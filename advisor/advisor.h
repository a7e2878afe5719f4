/* advisor.h — diagnose a stored profile, then prove each recommendation with verified trials.
 *
 * The advisor never trusts its own prediction: every change a rule proposes becomes a trial that
 * changes exactly that one thing, runs the same job (same seed, data order, length) as a separate
 * `mstune train` process, repeated, and is accepted only when it is faster beyond the run-to-run
 * noise with validation accuracy inside the tolerance of the baseline (or, for changes that fix
 * accuracy, when accuracy improves beyond the tolerance without a slowdown). docs/advisor.md has
 * each rule, its thresholds with sources, and the protocol.
 *
 *     mst_advise_config cfg;
 *     mst_advise_config_default(&cfg);
 *     cfg.mstune_bin = "/proc/self/exe"; cfg.job_path = "job.yaml"; cfg.out_dir = "out/advise";
 *     mst_advice adv;
 *     if (mst_advise_run(&cfg, &adv, err, sizeof(err)) != 0) ...;
 *     mst_advice_print(stdout, &adv);
 *     mst_advice_free(&adv);
 */
#ifndef MST_ADVISOR_ADVISOR_H
#define MST_ADVISOR_ADVISOR_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "advisor/finding.h"
#include "advisor/trial.h"

typedef struct {
    const char *mstune_bin;     /* the program trials run (the running mstune) */
    const char *job_path;
    const char *const *job_sets;    /* the user's own --set overrides, applied to every run */
    int n_job_sets;
    const char *out_dir;
    double budget_minutes;      /* for the trials after the baseline; <= 0: no limit */
    double tolerance_pp;        /* metric tolerance in its unit: accuracy points, PSNR dB (0.5) */
    int repeats;                /* runs (seeds) per configuration (>= 3: a 3-vs-3 rank test can reach p = 0.05) */
    double min_speedup;         /* smallest speedup worth accepting, beyond the interval (1.02) */
    double confidence;          /* two-sided level of the speedup interval (0.90) */
    int n_cores;                /* the machine's cores (0: sysconf) */
    FILE *log;                  /* progress lines; NULL: silent */
    /* validates a trial's overrides against the job schema before it runs (0 ok, -1 with err);
     * NULL: the trial's own process validates (and a bad override fails the trial) */
    int (*check_sets)(void *arg, const char (*sets)[96], int n, char *err, size_t errn);
    void *check_arg;
    volatile sig_atomic_t *stop;    /* set (Ctrl-C): no new run starts; what ran is still judged and written */
    int nproc;                  /* > 1: every run is data parallel over nproc ranks (the "--nproc=N" set) */
    bool mpi_available;         /* this build can run several ranks (the processes-vs-threads rule's trial) */
} mst_advise_config;

void mst_advise_config_default(mst_advise_config *c);

typedef struct {
    mst_finding findings[MST_MAX_FINDINGS];
    int n_findings;
    mst_trial_set profile;                     /* the diagnosis run (mstune profile): never timed */
    mst_trial_set baseline;                    /* K unprofiled runs, seeds seed0 .. seed0 + K - 1 */
    double resolvable_speedup;                 /* the smallest gain K-vs-K runs resolve: the baseline's spread */
    mst_trial_set trials[MST_MAX_FINDINGS];    /* trials[i] verifies findings[i] (run only when actionable) */
    mst_verdict verdicts[MST_MAX_FINDINGS];
    bool has_combined;
    mst_trial_set combined;                    /* the accepted changes together, when more than one */
    mst_verdict combined_verdict;
    char accepted_sets[MST_MAX_FINDINGS * MST_FINDING_MAX_SETS][MST_SET_LEN];
    int n_accepted_sets;                       /* what tuned.yaml applies */
    char outcome[512];                         /* one sentence: what to do, or "no change helped" */
    char db_path[1100];                        /* the baseline's profile, which also holds the trials */
} mst_advice;

/* Baseline, diagnose, verify, combine. 0, or -1 with err (the baseline failed, the profile is
 * unreadable); individual trials failing is a verdict, not an error. */
int  mst_advise_run(const mst_advise_config *cfg, mst_advice *adv, char *err, size_t errn);
void mst_advice_free(mst_advice *adv);

/* Delivery (advisor/deliver.c): the ranked table for a terminal, Markdown, JSON, and the trial
 * rows in the baseline's profile database (the report's advisor section reads them). */
void mst_advice_print(FILE *f, const mst_advice *adv, const mst_advise_config *cfg);
int  mst_advice_write_markdown(const mst_advice *adv, const mst_advise_config *cfg, const char *path, char *err, size_t errn);
int  mst_advice_write_json(const mst_advice *adv, const mst_advise_config *cfg, const char *path, char *err, size_t errn);
int  mst_advice_store(const mst_advice *adv, const char *db_path, char *err, size_t errn);

#endif
