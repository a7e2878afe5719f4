/* finding.h — what a diagnosis rule reports: the numbers it saw, the change it proposes (as job
 * overrides, so a trial changes exactly that), a predicted speedup and a confidence.
 *
 * The rules (advisor/rules.c) read a stored profile (profiler/profile_view.h) and the run's
 * summary.json; docs/advisor.md lists each with its thresholds and their sources. */
#ifndef MST_ADVISOR_FINDING_H
#define MST_ADVISOR_FINDING_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "advisor/calibration.h"
#include "advisor/trial.h"
#include "profiler/profile_view.h"

#define MST_MAX_FINDINGS 12
#define MST_FINDING_MAX_SETS 4
#define MST_SET_LEN 96

typedef enum {
    MST_GOAL_SPEED,         /* accepted when faster beyond noise, accuracy inside the tolerance */
    MST_GOAL_ACCURACY,      /* fixes training: accepted when accuracy rises beyond the tolerance, no slowdown */
    MST_GOAL_SAFETY,        /* leaves a known-unsafe setting: accepted when accuracy is not worse beyond the
                               tolerance, whatever the speed (O3 -> O2) */
    MST_GOAL_NONE,          /* a finding only: reported, never applied (batch size, memory headroom) */
} mst_goal;

typedef struct {
    const char *rule;                   /* "graph_mode", "amp_level", "loss_scale", "loader", ... */
    mst_goal goal;
    char title[160];                    /* one line: "eager dispatch is 41% of the step" */
    char evidence[1024];                 /* the numbers the rule saw */
    char sets[MST_FINDING_MAX_SETS][MST_SET_LEN];   /* the change as job overrides "key=value" */
    int n_sets;
    char change[192];                   /* for people: "runtime.mode eager -> graph" */
    mst_count_kind count;               /* a deterministic effect judged as an exact count (skips, compiles) */
    bool keeps_step;                    /* the change sets only the loss scaler's numbers (init, window, factor):
                                           the step runs the same kernels, so its trial runs on the step-thread
                                           budget of the baseline's runs instead of deciding its own — the two
                                           configurations then differ by the change alone (advise.c) */
    double predicted;                   /* predicted speedup (x); NAN when the rule does not predict one */
    double confidence;                  /* 0..1 */
    double score;                       /* ranking: larger first */
} mst_finding;

/* What the rules need besides the profile. */
typedef struct {
    int n_cores;
    double memory_bytes;                /* physical memory; 0 when unknown (no headroom finding) */
    const cJSON *summary;               /* the profiled run's summary.json (compile_count, skipped_steps, ...) */
    double resolvable_speedup;          /* the smallest gain the trial protocol resolves (the baseline's
                                           run-to-run spread, at least the minimum speedup); 0: 1.10 */
    bool mpi_available;                 /* trials may run several ranks (--nproc) */
    const mst_amp_calib *amp_calib;     /* the AMP rule's per-op rates on this machine (advisor/calibration.h);
                                           NULL: the rule reports that it cannot predict */
    double subnormal_penalty;           /* mst_fpu_subnormal_penalty() on this machine (runtime/fpu.h): subnormal
                                           over normal arithmetic time; 0 or NAN: not measured */
    const char *subnormal_pass;         /* mst_fpu_subnormal_pass(): what that timed; NULL: not said */
} mst_rule_env;

/* Runs every rule; fills at most cap findings, largest score first; returns the count. */
int mst_advisor_diagnose(const rpt_profile *p, const mst_rule_env *env, mst_finding *out, int cap);

/* The AMP rule's prediction (rules.c): the step's speedup at O2 from the profile's per-op kernel
 * time (p50 x calls) and the calibrated half/f32 ratios: 1 / ((1 - k) + k * T2 / T), T the kernel
 * time, T2 the same ops scaled by their ratios (1 where uncalibrated) plus O2's parameter casts,
 * k the kernel share of the step. *uncal: the share of T without a ratio; cite: "op 0.52x, ...". */
double mst_amp_predict(const rpt_profile *p, const mst_amp_calib *cal, double kernel_share, double *uncal, char *cite, size_t n);

/* A string / number (a bool reads as 0 or 1) at a dotted path of a JSON object — the job config
 * stored with the profile, a run's summary.json — or the fallback. */
const char *mst_cfg_str(const cJSON *config, const char *path, const char *fallback);
double      mst_cfg_num(const cJSON *config, const char *path, double fallback);

#endif
