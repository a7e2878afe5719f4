/* deliver.c — the advisor's outputs: the ranked table for people (terminal and Markdown), JSON for
 * tools, and one row per trial in the baseline's profile database, which the report's advisor
 * section and its predicted-vs-measured chart read. */
#include "advisor/advisor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "util/stats.h"
#include "util/fsutil.h"

static const char *verdict_name(mst_verdict_kind k) { return mst_verdict_name(k); }

static void fmt_x(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.2fx", v);
}

static void fmt_interval(char *buf, size_t n, const mst_verdict *v) {
    if (isnan(v->speedup)) snprintf(buf, n, "-");
    else if (isnan(v->ci_low)) snprintf(buf, n, "%.2fx", v->speedup);
    else snprintf(buf, n, "%.2fx [%.2f, %.2f]", v->speedup, v->ci_low, v->ci_high);
}

static void fmt_mem(char *buf, size_t n, const mst_verdict *v) {
    if (isnan(v->memory_ratio)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%+.0f%%", 100 * (v->memory_ratio - 1));
}

static void fmt_acc(char *buf, size_t n, const mst_verdict *v) {
    if (isnan(v->accuracy_delta_pp)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%+.2f %s", v->accuracy_delta_pp, v->metric_unit[0] ? v->metric_unit : "");
}

/* The measured columns of one row, shared by the terminal table and the Markdown one. */
typedef struct {
    char pred[16], meas[48], mem[16], acc[24];
} row_text;

static void row_format(row_text *r, double predicted, const mst_verdict *v) {
    fmt_x(r->pred, sizeof(r->pred), predicted);
    fmt_interval(r->meas, sizeof(r->meas), v);
    fmt_mem(r->mem, sizeof(r->mem), v);
    fmt_acc(r->acc, sizeof(r->acc), v);
}

static double median_of(const mst_trial_set *t, int what) {
    double v[MST_TRIAL_MAX_RUNS];
    int n = 0;
    for (int i = 0; i < t->n_runs; i++) {
        const mst_run_result *r = &t->runs[i];
        double m = r->metric_name[0] ? r->metric : r->val_accuracy >= 0 ? r->val_accuracy : NAN;   /* the job's metric */
        if (!r->ok || (what == 1 && !isfinite(m))) continue;     /* not evaluated */
        v[n++] = what == 0 ? r->step_ms : what == 1 ? m : what == 2 ? r->peak_memory_bytes : r->ms_per_update;
    }
    return n ? mst_stats_median(v, n) : NAN;
}

/* The baseline's metric name ("accuracy" when its summaries name none). */
static const char *metric_of(const mst_trial_set *t) {
    for (int i = 0; i < t->n_runs; i++)
        if (t->runs[i].metric_name[0]) return t->runs[i].metric_name;
    return "accuracy";
}

/* "val accuracy 85.20%", "val psnr 24.31 dB", or "no val accuracy (train.eval false)" */
static const char *fmt_val_metric(char *buf, size_t n, const char *name, double m) {
    if (isnan(m)) snprintf(buf, n, "no val %s (train.eval false)", name);
    else if (strcmp(name, "accuracy") == 0) snprintf(buf, n, "val accuracy %.2f%%", 100 * m);
    else if (strcmp(name, "psnr") == 0) snprintf(buf, n, "val psnr %.2f dB", m);
    else snprintf(buf, n, "val %s %.4g", name, m);
    return buf;
}

/* "12.3 MB", "850 kB": small jobs have small peaks. */
static const char *fmt_bytes(char *buf, size_t n, double b) {
    if (isnan(b)) snprintf(buf, n, "n/a");
    else if (b >= 1e6) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.0f kB", b / 1e3);
    return buf;
}

void mst_advice_print(FILE *f, const mst_advice *adv, const mst_advise_config *cfg) {
    const mst_trial_set *b = &adv->baseline;
    char bmem[32];
    char bacc[64];
    fprintf(f, "\nbaseline: %d unprofiled runs (seeds %lld..%lld), %.4g ms per applied update (median step %.4g ms), %s, "
               "peak memory %s\n", b->n_runs, (long long)b->seed0, (long long)(b->seed0 + b->n_runs - 1), median_of(b, 3),
            median_of(b, 0), fmt_val_metric(bacc, sizeof(bacc), metric_of(b), median_of(b, 1)), fmt_bytes(bmem, sizeof(bmem), median_of(b, 2)));
    if (adv->n_findings == 0) fprintf(f, "findings: none\n");
    else
        fprintf(f, "\n %-2s %-21s %-42s %-9s %-24s %-7s %-10s %s\n", "#", "rule", "change", "predicted",
                "measured [interval]", "memory", "accuracy", "verdict");
    for (int i = 0; i < adv->n_findings; i++) {
        const mst_finding *fd = &adv->findings[i];
        const mst_verdict *v = &adv->verdicts[i];
        row_text r;
        row_format(&r, fd->predicted, v);
        fprintf(f, " %-2d %-21s %-42.42s %-9s %-24s %-7s %-10s %s\n", i + 1, fd->rule, fd->change, r.pred, r.meas, r.mem, r.acc,
                fd->goal == MST_GOAL_NONE ? "finding" : verdict_name(v->kind));
        fprintf(f, "    finding:  %s\n    evidence: %s\n    reason:   %s\n", fd->title, fd->evidence, v->reason);
    }
    if (adv->has_combined) {
        row_text r;
        row_format(&r, NAN, &adv->combined_verdict);
        fprintf(f, "\ncombined (all accepted changes): %s, memory %s, accuracy %s: %s\n    reason: %s\n", r.meas, r.mem, r.acc,
                verdict_name(adv->combined_verdict.kind), adv->combined_verdict.reason);
    }
    fprintf(f, "\n%s\n", adv->outcome);
    (void)cfg;
}

int mst_advice_write_markdown(const mst_advice *adv, const mst_advise_config *cfg, const char *path, char *err, size_t errn) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) { snprintf(err, errn, "%s: out of memory", path); return -1; }
    const mst_trial_set *b = &adv->baseline;
    char bmem[32];
    char bacc[64];
    fprintf(f, "# mstune advise: %s\n\nBaseline: %d unprofiled runs (one seed each), %.4g ms per applied update (median step "
               "%.4g ms), %s, peak memory %s. Tolerance %.2f %s, %d runs (seeds) per configuration, %.0f%% intervals.\n\n",
            cfg->job_path, b->n_runs, median_of(b, 3), median_of(b, 0), fmt_val_metric(bacc, sizeof(bacc), metric_of(b), median_of(b, 1)),
            fmt_bytes(bmem, sizeof(bmem), median_of(b, 2)),
            cfg->tolerance_pp, strcmp(metric_of(b), "accuracy") == 0 ? "pp" : strcmp(metric_of(b), "psnr") == 0 ? "dB" : "(metric units)",
            cfg->repeats, 100 * cfg->confidence);
    fprintf(f, "| # | rule | evidence | change | predicted | measured [interval] | memory | accuracy | verdict | reason |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < adv->n_findings; i++) {
        const mst_finding *fd = &adv->findings[i];
        const mst_verdict *v = &adv->verdicts[i];
        row_text r;
        row_format(&r, fd->predicted, v);
        fprintf(f, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", i + 1, fd->rule, fd->evidence, fd->change, r.pred,
                r.meas, r.mem, r.acc, fd->goal == MST_GOAL_NONE ? "finding" : verdict_name(v->kind), v->reason);
    }
    if (adv->has_combined)
        fprintf(f, "\nCombined: %s — %s\n", verdict_name(adv->combined_verdict.kind), adv->combined_verdict.reason);
    fprintf(f, "\n**%s**\n", adv->outcome);
    fclose(f);
    int rc = mst_write_atomic(path, buf, len, err, errn);
    free(buf);
    return rc;
}

static cJSON *verdict_json(const mst_verdict *v) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "verdict", verdict_name(v->kind));
    if (!isnan(v->speedup)) cJSON_AddNumberToObject(o, "speedup", v->speedup);
    if (!isnan(v->ci_low)) cJSON_AddNumberToObject(o, "ci_low", v->ci_low);
    if (!isnan(v->ci_high)) cJSON_AddNumberToObject(o, "ci_high", v->ci_high);
    /* the accuracy_* keys hold the metric's gain in its unit (> 0 better); metric/metric_unit say which */
    if (v->metric_name[0]) cJSON_AddStringToObject(o, "metric", v->metric_name);
    if (v->metric_unit[0]) cJSON_AddStringToObject(o, "metric_unit", v->metric_unit);
    if (!isnan(v->accuracy_delta_pp)) cJSON_AddNumberToObject(o, "accuracy_delta_pp", v->accuracy_delta_pp);
    if (!isnan(v->memory_delta_bytes)) cJSON_AddNumberToObject(o, "memory_delta_bytes", v->memory_delta_bytes);
    if (!isnan(v->accuracy_ci_low)) cJSON_AddNumberToObject(o, "accuracy_ci_low_pp", v->accuracy_ci_low);
    if (!isnan(v->accuracy_ci_high)) cJSON_AddNumberToObject(o, "accuracy_ci_high_pp", v->accuracy_ci_high);
    if (v->accuracy_pairs > 0) cJSON_AddNumberToObject(o, "accuracy_seeds", v->accuracy_pairs);
    if (!isnan(v->seed_spread_pp)) cJSON_AddNumberToObject(o, "seed_spread_pp", v->seed_spread_pp);
    if (!isnan(v->step_speedup)) cJSON_AddNumberToObject(o, "step_median_speedup", v->step_speedup);
    if (!isnan(v->count_base)) {
        cJSON_AddStringToObject(o, "count", v->count == MST_COUNT_SKIPPED_STEPS ? "skipped_steps" : "compile_count");
        cJSON_AddNumberToObject(o, "count_baseline", v->count_base);
        cJSON_AddNumberToObject(o, "count_trial", v->count_trial);
    }
    if (v->kind != MST_VERDICT_NOT_RUN) {     /* what it was judged on: the first N runs of each side, at this level */
        cJSON_AddNumberToObject(o, "baseline_runs_judged", v->baseline_runs);
        cJSON_AddNumberToObject(o, "runs_judged", v->trial_runs);
        cJSON_AddNumberToObject(o, "speed_confidence", v->speed_confidence);
        if (v->extended_from > 0) cJSON_AddNumberToObject(o, "extended_from", v->extended_from);
        if (v->extended_from > 0) cJSON_AddBoolToObject(o, "speed_within_turns", v->in_turns);
    }
    cJSON_AddStringToObject(o, "reason", v->reason);
    return o;
}

static cJSON *runs_json(const mst_trial_set *t) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < t->n_runs; i++) {
        const mst_run_result *r = &t->runs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dir", r->dir);
        cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
        cJSON_AddBoolToObject(o, "ok", r->ok);
        if (r->ok) {
            cJSON_AddNumberToObject(o, "step_time_ms_median", r->step_ms);
            cJSON_AddNumberToObject(o, "effective_step_ms", r->effective_step_ms);
            cJSON_AddNumberToObject(o, "val_accuracy", r->val_accuracy);
            if (r->metric_name[0]) {
                cJSON *m = cJSON_AddObjectToObject(o, "metric");
                cJSON_AddStringToObject(m, "name", r->metric_name);
                if (isfinite(r->metric)) cJSON_AddNumberToObject(m, "value", r->metric);
                else cJSON_AddNullToObject(m, "value");
                cJSON_AddBoolToObject(m, "higher_is_better", r->metric_higher_is_better);
            }
            cJSON_AddNumberToObject(o, "peak_memory_bytes", r->peak_memory_bytes);
            cJSON_AddNumberToObject(o, "skipped_steps", (double)r->skipped_steps);
            cJSON_AddNumberToObject(o, "steps", (double)r->steps);
            cJSON_AddNumberToObject(o, "seed", (double)r->seed);
            if (!isnan(r->ms_per_update)) cJSON_AddNumberToObject(o, "ms_per_update", r->ms_per_update);
            if (!isnan(r->train_loop_s)) cJSON_AddNumberToObject(o, "train_loop_s", r->train_loop_s);
            cJSON_AddNumberToObject(o, "compile_count", (double)r->compile_count);
            cJSON_AddNumberToObject(o, "step_threads", r->step_threads);
            cJSON_AddBoolToObject(o, "step_threads_pinned", r->step_pinned);
            cJSON_AddNumberToObject(o, "turn", r->turn);
        } else {
            cJSON_AddStringToObject(o, "error", r->error);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *sets_json(const char (*sets)[MST_SET_LEN], int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(sets[i]));
    return a;
}

static cJSON *finding_json(const mst_finding *fd, const mst_verdict *v, const mst_trial_set *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rule", fd->rule);
    cJSON_AddStringToObject(o, "goal", fd->goal == MST_GOAL_SPEED      ? "speed"
                            : fd->goal == MST_GOAL_ACCURACY ? "accuracy"
                            : fd->goal == MST_GOAL_SAFETY   ? "safety"
                                                            : "finding");
    if (fd->count != MST_COUNT_NONE)
        cJSON_AddStringToObject(o, "count", fd->count == MST_COUNT_SKIPPED_STEPS ? "skipped_steps" : "compile_count");
    cJSON_AddBoolToObject(o, "keeps_step", fd->keeps_step);
    cJSON_AddStringToObject(o, "title", fd->title);
    cJSON_AddStringToObject(o, "evidence", fd->evidence);
    cJSON_AddStringToObject(o, "change", fd->change);
    cJSON_AddItemToObject(o, "sets", sets_json((const char (*)[MST_SET_LEN])fd->sets, fd->n_sets));
    if (!isnan(fd->predicted)) cJSON_AddNumberToObject(o, "predicted_speedup", fd->predicted);
    cJSON_AddNumberToObject(o, "confidence", fd->confidence);
    cJSON_AddItemToObject(o, "result", verdict_json(v));
    if (t && t->n_runs) cJSON_AddItemToObject(o, "runs", runs_json(t));
    return o;
}

int mst_advice_write_json(const mst_advice *adv, const mst_advise_config *cfg, const char *path, char *err, size_t errn) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "job", cfg->job_path);
    cJSON_AddNumberToObject(root, "tolerance_pp", cfg->tolerance_pp);
    cJSON_AddNumberToObject(root, "repeats", cfg->repeats);
    cJSON_AddNumberToObject(root, "confidence", cfg->confidence);
    cJSON_AddItemToObject(root, "profile_run", runs_json(&adv->profile));
    cJSON_AddItemToObject(root, "baseline_runs", runs_json(&adv->baseline));
    cJSON_AddNumberToObject(root, "resolvable_speedup", adv->resolvable_speedup);
    cJSON *fs = cJSON_AddArrayToObject(root, "findings");
    for (int i = 0; i < adv->n_findings; i++)
        cJSON_AddItemToArray(fs, finding_json(&adv->findings[i], &adv->verdicts[i], &adv->trials[i]));
    if (adv->has_combined) {
        cJSON *c = cJSON_AddObjectToObject(root, "combined");
        cJSON_AddItemToObject(c, "sets", sets_json((const char (*)[MST_SET_LEN])adv->combined.sets, adv->combined.n_sets));
        cJSON_AddItemToObject(c, "result", verdict_json(&adv->combined_verdict));
        cJSON_AddItemToObject(c, "runs", runs_json(&adv->combined));
    }
    cJSON_AddItemToObject(root, "applied", sets_json((const char (*)[MST_SET_LEN])adv->accepted_sets, adv->n_accepted_sets));
    cJSON_AddStringToObject(root, "outcome", adv->outcome);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) { snprintf(err, errn, "%s: out of memory", path); return -1; }
    int rc = mst_write_atomic(path, text, strlen(text), err, errn);
    cJSON_free(text);
    return rc;
}

static int insert_row(sqlite3_stmt *st, const char *change, const char *status, const char *reason, double predicted,
                      const mst_verdict *v, const char *dir, const char *metrics) {
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, change, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, reason, -1, SQLITE_TRANSIENT);
    double vals[4] = {predicted, v->speedup, v->ci_low, v->ci_high};
    for (int k = 0; k < 4; k++)
        if (isnan(vals[k])) sqlite3_bind_null(st, 4 + k);
        else sqlite3_bind_double(st, 4 + k, vals[k]);
    if (isnan(v->memory_delta_bytes)) sqlite3_bind_null(st, 8);
    else sqlite3_bind_int64(st, 8, (sqlite3_int64)llround(v->memory_delta_bytes));
    if (isnan(v->accuracy_delta_pp)) sqlite3_bind_null(st, 9);
    else sqlite3_bind_double(st, 9, v->accuracy_delta_pp);
    sqlite3_bind_text(st, 10, dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 11, metrics, -1, SQLITE_TRANSIENT);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
}

int mst_advice_store(const mst_advice *adv, const char *db_path, char *err, size_t errn) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errn, "%s: %s", db_path, db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE; DELETE FROM trials;", NULL, NULL, NULL) == SQLITE_OK &&
                     sqlite3_prepare_v2(db,
                                        "INSERT INTO trials(change, status, reason, predicted_speedup, measured_speedup, ci_low,"
                                        " ci_high, memory_delta_bytes, accuracy_delta, db_path, metrics_json)"
                                        " VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                                        -1, &st, NULL) == SQLITE_OK
                 ? 0
                 : -1;
    for (int i = 0; rc == 0 && i < adv->n_findings; i++) {
        const mst_finding *fd = &adv->findings[i];
        if (fd->goal == MST_GOAL_NONE) continue;
        cJSON *m = finding_json(fd, &adv->verdicts[i], &adv->trials[i]);
        char *metrics = cJSON_PrintUnformatted(m);
        cJSON_Delete(m);
        const char *dir = adv->trials[i].n_runs ? adv->trials[i].runs[0].dir : "";
        rc = metrics ? insert_row(st, fd->change, verdict_name(adv->verdicts[i].kind), adv->verdicts[i].reason, fd->predicted,
                                  &adv->verdicts[i], dir, metrics)
                     : -1;
        cJSON_free(metrics);
    }
    if (rc == 0 && adv->has_combined) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "rule", "combined");
        cJSON_AddItemToObject(m, "sets", sets_json((const char (*)[MST_SET_LEN])adv->combined.sets, adv->combined.n_sets));
        cJSON_AddItemToObject(m, "runs", runs_json(&adv->combined));
        char *metrics = cJSON_PrintUnformatted(m);
        cJSON_Delete(m);
        rc = metrics ? insert_row(st, "all accepted changes together", verdict_name(adv->combined_verdict.kind),
                                  adv->combined_verdict.reason, NAN, &adv->combined_verdict,
                                  adv->combined.n_runs ? adv->combined.runs[0].dir : "", metrics)
                     : -1;
        cJSON_free(metrics);
    }
    if (rc != 0) snprintf(err, errn, "%s: storing the trials: %s", db_path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_exec(db, rc == 0 ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}
