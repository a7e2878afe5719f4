/* gate.h — the CI regression gate: reduces each run (a folder holding summary.json) to a few
 * numbers, compares a candidate group of runs with a baseline group (or with a stored history of
 * past runs), and gives each metric and the whole comparison a verdict, with outputs for people
 * (table, Markdown) and CI systems (JSON, JUnit XML, GitHub annotation lines). docs/gate.md has
 * the rules and their reasons.
 *
 * The unit is the run, not the step: steps within a run are correlated (same process, same heap,
 * same CPU frequency), so a per-step test would be far too confident. A metric fails only when the
 * slowdown is both significant (one-sided Mann–Whitney, alpha 0.01) and larger than
 * max(5%, 3 x the run-to-run CV); either alone is a warning.
 *
 *     mst_gate_config cfg;
 *     mst_gate_config_default(&cfg);
 *     mst_gate_run base[5], cand[5];
 *     for (int i = 0; i < 5; i++) { mst_gate_run_load(&base[i], bdir[i]); mst_gate_run_load(&cand[i], cdir[i]); }
 *     mst_gate_result r;
 *     mst_gate_compare(&cfg, base, 5, cand, 5, &r);
 *     mst_gate_print_table(stdout, &r);
 *     return mst_gate_exit_code(&r);          // 0 pass/warn, 1 regression, 3 inconclusive, 4 job failed
 */
#ifndef MST_REPORT_GATE_H
#define MST_REPORT_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* What a run reduces to; summary.json keys. */
typedef enum {
    MST_GATE_METRIC_STEP_TIME,      /* step_time_ms_median: steady-state median step time */
    MST_GATE_METRIC_STEP_TIME_P90,  /* step_time_ms_p90: used when summary.json carries it */
    MST_GATE_METRIC_THROUGHPUT,     /* samples_per_s */
    MST_GATE_METRIC_PEAK_MEMORY,    /* peak_memory_bytes */
    MST_GATE_METRIC_QUALITY,        /* the job's metric: summary.json metric.value (accuracy 0..1, PSNR dB, ...;
                                       val_accuracy in summaries older than "metric") */
    MST_GATE_METRIC_COUNT
} mst_gate_metric;

typedef enum {
    MST_GATE_RULE_TIMING,           /* rank test on log values + effect threshold */
    MST_GATE_RULE_MEMORY,           /* median growth over both a percentage and an absolute floor */
    MST_GATE_RULE_QUALITY,          /* one-sided non-inferiority margin in the metric's points (pp, dB) */
} mst_gate_rule;

typedef struct {
    const char *key;                /* summary.json key */
    const char *label;              /* for tables */
    const char *unit;               /* of the displayed values */
    double display_scale;           /* summary value * scale = displayed value */
    mst_gate_rule rule;
    bool higher_is_better;
} mst_gate_metric_desc;

extern const mst_gate_metric_desc mst_gate_metrics[MST_GATE_METRIC_COUNT];

/* The job's metric the quality row judges, from summary.json's "metric" (accuracy for older
 * summaries without it). */
typedef struct {
    char name[32];                  /* "accuracy", "psnr"; "" when unknown */
    char label[48];                 /* "val accuracy", "val PSNR" */
    char unit[16];                  /* of the displayed values: "%", "dB" */
    char diff_unit[16];             /* of a change and the margin: "pt" (percentage points), "dB" */
    double scale;                   /* summary value * scale = displayed value = points */
    bool higher_is_better;
} mst_gate_quality;

typedef enum {
    MST_GATE_PASS,
    MST_GATE_WARN,                  /* significant but small, or large but not significant */
    MST_GATE_FAIL,                  /* a regression: exit 1 */
    MST_GATE_INCONCLUSIVE,          /* too few runs, or runs not comparable: exit 3 */
    MST_GATE_JOB_FAILED,            /* a run failed or diverged: exit 4 */
    MST_GATE_ABSENT,                /* the metric is not in the runs (e.g. no evaluation) */
    MST_GATE_VERDICT_COUNT
} mst_gate_verdict;

const char *mst_gate_verdict_name(mst_gate_verdict v);

/* Thresholds; a JSON file in the user's repo sets any of them (mst_gate_config_load). */
typedef struct {
    double alpha;                   /* one-sided significance level (0.01) */
    double min_effect;              /* smallest timing regression that can fail, as a fraction (0.05) */
    double cv_multiplier;           /* ... or this many run-to-run CVs, whichever is larger (3) */
    double memory_pct;              /* peak memory fails at this growth in percent (5) ... */
    double memory_mib;              /* ... and at least this many MiB (64) */
    double accuracy_margin_points;  /* non-inferiority margin for the job's metric, in its points: percentage
                                       points for accuracy, dB for PSNR (0.5) */
    int runs;                       /* runs per side in `gate run` (5) */
    bool allow_config_change;       /* compare runs whose job configs differ (false) */
} mst_gate_config;

void mst_gate_config_default(mst_gate_config *c);
/* Reads a JSON object of the fields above over c; unknown keys, wrong types and out-of-range
 * values are errors. 0 on success, -1 with a message. */
int mst_gate_config_load(mst_gate_config *c, const char *path, char *err, size_t errn);
int mst_gate_config_parse(mst_gate_config *c, const char *text, const char *origin, char *err, size_t errn);
/* The config as a JSON object (caller deletes), in the file's format. */
cJSON *mst_gate_config_to_json(const mst_gate_config *c);

/* One run. ok is false when the run failed (non-zero exit, no summary.json, interrupted) or
 * diverged (a non-finite loss); error says which. */
typedef struct {
    char dir[1024];
    bool ok;
    char error[1400];
    double value[MST_GATE_METRIC_COUNT];    /* NAN when absent */
    mst_gate_quality quality;               /* what value[MST_GATE_METRIC_QUALITY] is */
    cJSON *config;                          /* owned copy of summary.json's config, or NULL */
    cJSON *machine;                         /* owned copy of summary.json's machine, or NULL */
} mst_gate_run;

/* Reads DIR/summary.json. Returns 0 when the run is usable, -1 when not (r->ok false, r->error
 * set); r needs mst_gate_run_free either way. */
int mst_gate_run_load(mst_gate_run *r, const char *dir);
/* Marks r as a failed run (e.g. its command exited non-zero) without reading anything. */
void mst_gate_run_set_failed(mst_gate_run *r, const char *dir, const char *why);
void mst_gate_run_free(mst_gate_run *r);

/* A stored baseline: the values of the last n runs of a job on one machine (JSON in the user's
 * repo; format in docs/gate.md). */
typedef struct {
    int n;
    double *value[MST_GATE_METRIC_COUNT];   /* n values each, NAN when absent */
    char **revision;                        /* n git revisions ("" when unknown) */
    cJSON *config;                          /* the job config the runs share, or NULL */
    cJSON *machine;                         /* the machine they ran on, or NULL */
} mst_gate_history;

/* A missing file is an error; mst_gate_history_init gives an empty history to add to. */
void mst_gate_history_init(mst_gate_history *h);
int mst_gate_history_load(mst_gate_history *h, const char *path, char *err, size_t errn);
/* Appends usable runs, keeping the newest `keep`. Runs must match the history's config and
 * machine (an empty history takes theirs). 0 on success, -1 with a message. */
int mst_gate_history_add(mst_gate_history *h, const mst_gate_run *runs, int n, int keep, char *err, size_t errn);
int mst_gate_history_save(const mst_gate_history *h, const char *path, char *err, size_t errn);
void mst_gate_history_free(mst_gate_history *h);

typedef enum { MST_GATE_MODE_PAIRED, MST_GATE_MODE_HISTORY } mst_gate_mode;

typedef struct {
    mst_gate_verdict verdict;
    int n_base, n_cand;             /* values that entered the comparison */
    double base_value, cand_value;  /* summary units: medians (paired) or geometric means (history) */
    /* candidate vs baseline in natural direction: ratio - 1 for timing and memory, points for
     * accuracy; the interval at level 1 - 2 alpha (each bound one-sided at 1 - alpha) */
    double change, change_lo, change_hi;
    int interval_needs_runs;        /* > 0: too few runs for a bounded interval (lo, hi are NAN);
                                     * the runs per side that would give one */
    double p_value;                 /* one-sided, towards a regression; NAN when the rule has none */
    bool exact;                     /* p from the exact null distribution */
    double cv;                      /* run-to-run variation: robust sd of log values (Shamos, pooled
                                     * within sides; ~ sd/mean); NAN when the rule has none */
    double threshold;               /* what a FAIL needs: fraction (timing, memory) or points */
    char note[256];
} mst_gate_metric_result;

typedef struct {
    mst_gate_mode mode;
    mst_gate_config config;
    mst_gate_verdict verdict;
    char reason[512];               /* one line: why this verdict */
    mst_gate_metric_result metric[MST_GATE_METRIC_COUNT];
    mst_gate_quality quality;       /* the job's metric the quality row judged */
    int n_base, n_cand;             /* runs given, failed ones included */
    int n_failed;
    char failure[1024];             /* the failed runs and why */
    bool comparable;                /* same machine and config (or the config change allowed) */
    char fingerprint[1024];         /* what was compared and what differs */
    char config_hash_base[17], config_hash_cand[17];
} mst_gate_result;

/* Paired mode: k baseline runs against k candidate runs. 0 on success, -1 out of memory. */
int mst_gate_compare(const mst_gate_config *cfg, const mst_gate_run *base, int nb, const mst_gate_run *cand, int nc,
                     mst_gate_result *r);
/* History mode: candidate runs against the stored values (prediction interval on log values). */
int mst_gate_compare_history(const mst_gate_config *cfg, const mst_gate_history *h, const mst_gate_run *cand, int nc,
                             mst_gate_result *r);
/* A metric's description as this result shows it: the table's, with the quality row named after
 * the job's metric (label, unit, scale from r->quality). */
mst_gate_metric_desc mst_gate_desc(const mst_gate_result *r, int metric);
/* 0 pass or warn, 1 regression, 3 inconclusive, 4 a run failed. */
int mst_gate_exit_code(const mst_gate_result *r);

/* Outputs. The table and Markdown are for people; the JSON holds every number; JUnit has one
 * test case per metric plus the runs and the fingerprint; annotations are GitHub workflow
 * commands: ::error for a FAIL or a failed run, ::warning for WARN and INCONCLUSIVE. */
void mst_gate_print_table(FILE *f, const mst_gate_result *r);
int mst_gate_write_json(FILE *f, const mst_gate_result *r);
void mst_gate_write_markdown(FILE *f, const mst_gate_result *r);
void mst_gate_write_junit(FILE *f, const mst_gate_result *r);
void mst_gate_write_annotations(FILE *f, const mst_gate_result *r);

/* Calibration from A/A repeats of one command: run-to-run CV per metric, the timing threshold it
 * implies, and how many runs per side detect a given slowdown with 80% power. */
#define MST_GATE_MAX_RUNS 50
typedef struct {
    int n;                                  /* usable runs */
    double median[MST_GATE_METRIC_COUNT];   /* NAN when absent */
    double cv[MST_GATE_METRIC_COUNT];       /* robust sd of log values (points for accuracy); NAN when absent */
    double threshold;                       /* max(min_effect, cv_multiplier * step-time CV) */
    double effect;                          /* the slowdown asked about (fraction) */
    int runs_needed;                        /* per side, 80% power to FAIL; -1 if over MST_GATE_MAX_RUNS */
    double power_at_config_runs;            /* power with cfg->runs per side */
    mst_gate_config proposed;               /* cfg with runs = max(cfg->runs, runs_needed) */
} mst_gate_calibration;

int mst_gate_calibrate(const mst_gate_config *cfg, const mst_gate_run *runs, int n, double effect,
                       mst_gate_calibration *out, char *err, size_t errn);
/* Probability that k runs per side FAIL the timing rule when the true slowdown is `effect` and
 * log run times scatter with sd `cv` (seeded Monte Carlo, `sims` draws). */
double mst_gate_power(const mst_gate_config *cfg, double cv, double effect, int k, int sims, uint64_t seed);

#endif
