/* gate_output.c — the gate's verdicts written for people (terminal table, Markdown for a CI job
 * summary) and for machines (JSON with every number, JUnit XML with one test case per metric,
 * GitHub workflow-command annotations). All of them are rendered from one mst_gate_result, so they
 * cannot disagree. JUnit: the de-facto schema of Jenkins/Ant (testsuites > testsuite > testcase
 * with failure, error or skipped); annotations: GitHub's "::error title=T::message" commands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/gate.h"

static const char *mode_name(mst_gate_mode m) { return m == MST_GATE_MODE_HISTORY ? "history" : "paired"; }

/* The unit of a change in the job's metric: "pt" (percentage points), "dB", ... */
static const char *quality_unit(const mst_gate_result *r) { return r->quality.diff_unit[0] ? r->quality.diff_unit : "pt"; }

static void fmt_value(const mst_gate_metric_desc *d, double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "-");
    else if (d->rule == MST_GATE_RULE_MEMORY) snprintf(buf, n, "%.1f", v * d->display_scale);
    else if (d->rule == MST_GATE_RULE_QUALITY) snprintf(buf, n, "%.2f", v * d->display_scale);
    else snprintf(buf, n, "%.4g", v * d->display_scale);
}

static void fmt_change(const mst_gate_result *r, int metric, double x, char *buf, size_t n) {
    if (isnan(x)) snprintf(buf, n, "-");
    else if (isinf(x)) snprintf(buf, n, "%sinf", x > 0 ? "+" : "-");
    else if (mst_gate_metrics[metric].rule == MST_GATE_RULE_QUALITY) snprintf(buf, n, "%+.2f %s", x, quality_unit(r));
    else snprintf(buf, n, "%+.1f%%", 100 * x);
}

static void fmt_interval(const mst_gate_result *r, int metric, const mst_gate_metric_result *m, char *buf, size_t n) {
    if (m->interval_needs_runs > 0) {
        snprintf(buf, n, "n/a (need >= %d runs per side)", m->interval_needs_runs);
        return;
    }
    if (m->interval_needs_runs < 0) {
        snprintf(buf, n, "n/a (too few runs)");
        return;
    }
    if (isnan(m->change_lo) || isnan(m->change_hi)) {
        snprintf(buf, n, "-");
        return;
    }
    char lo[24], hi[24];
    fmt_change(r, metric, m->change_lo, lo, sizeof(lo));
    fmt_change(r, metric, m->change_hi, hi, sizeof(hi));
    snprintf(buf, n, "[%s, %s]", lo, hi);
}

static void fmt_threshold(const mst_gate_result *r, int metric, const mst_gate_metric_result *m, char *buf, size_t n) {
    const mst_gate_config *cfg = &r->config;
    const mst_gate_metric_desc *d = &mst_gate_metrics[metric];
    if (m->verdict == MST_GATE_ABSENT) snprintf(buf, n, "-");
    else if (d->rule == MST_GATE_RULE_MEMORY) snprintf(buf, n, "+%g%% & %g MiB", cfg->memory_pct, cfg->memory_mib);
    else if (d->rule == MST_GATE_RULE_QUALITY) snprintf(buf, n, "-%g %s", cfg->accuracy_margin_points, quality_unit(r));
    else snprintf(buf, n, "%s%.1f%%", d->higher_is_better ? "-" : "+", 100 * m->threshold);
}

static void fmt_p(double p, char *buf, size_t n) {
    if (isnan(p)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.3g", p);
}

static void fmt_cv(double cv, char *buf, size_t n) {
    if (isnan(cv)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.1f%%", 100 * cv);
}

typedef struct {
    char value_b[32], value_c[32], change[32], interval[64], p[32], cv[32], threshold[48];
} row_text;

static void row(const mst_gate_result *r, int metric, row_text *t) {
    const mst_gate_metric_result *m = &r->metric[metric];
    mst_gate_metric_desc d = mst_gate_desc(r, metric);
    fmt_value(&d, m->base_value, t->value_b, sizeof(t->value_b));
    fmt_value(&d, m->cand_value, t->value_c, sizeof(t->value_c));
    fmt_change(r, metric, m->change, t->change, sizeof(t->change));
    fmt_interval(r, metric, m, t->interval, sizeof(t->interval));
    fmt_p(m->p_value, t->p, sizeof(t->p));
    fmt_cv(m->cv, t->cv, sizeof(t->cv));
    fmt_threshold(r, metric, m, t->threshold, sizeof(t->threshold));
}

static double interval_level(const mst_gate_result *r) {
    /* paired: two-sided 1 - 2 alpha (each bound one-sided 1 - alpha); history: one-sided 1 - alpha
     * prediction bounds on both sides, the same two-sided 1 - 2 alpha */
    return 1 - 2 * r->config.alpha;
}

void mst_gate_print_table(FILE *f, const mst_gate_result *r) {
    fprintf(f, "mstune gate (%s): %d %s vs %d candidate run%s; alpha %g, fail above max(%g%%, %g x CV)\n",
            mode_name(r->mode), r->n_base, r->mode == MST_GATE_MODE_HISTORY ? "history" : "baseline", r->n_cand,
            r->n_cand == 1 ? "" : "s", r->config.alpha, 100 * r->config.min_effect, r->config.cv_multiplier);
    fprintf(f, "fingerprint: %s\n\n", r->fingerprint);
    char ilabel[32];
    snprintf(ilabel, sizeof(ilabel), "%.0f%% interval", 100 * interval_level(r));
    fprintf(f, "%-14s %-10s %10s %10s %9s  %-29s %8s %6s  %-15s %s\n", "metric", "unit", "baseline", "candidate", "change",
            ilabel, "p", "CV", "threshold", "verdict");
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        mst_gate_metric_desc dd = mst_gate_desc(r, m), *d = &dd;
        if (r->metric[m].verdict == MST_GATE_ABSENT && m == MST_GATE_METRIC_STEP_TIME_P90) continue;
        row_text t;
        row(r, m, &t);
        fprintf(f, "%-14s %-10s %10s %10s %9s  %-29s %8s %6s  %-15s %s\n", d->label, d->unit, t.value_b, t.value_c, t.change,
                t.interval, t.p, t.cv, t.threshold, mst_gate_verdict_name(r->metric[m].verdict));
    }
    bool notes = false;
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        if (!r->metric[m].note[0] || (r->metric[m].verdict == MST_GATE_ABSENT && m == MST_GATE_METRIC_STEP_TIME_P90)) continue;
        if (!notes) fputc('\n', f);
        notes = true;
        fprintf(f, "  %s: %s\n", mst_gate_desc(r, m).label, r->metric[m].note);
    }
    fprintf(f, "\nverdict: %s (exit %d): %s\n", mst_gate_verdict_name(r->verdict), mst_gate_exit_code(r), r->reason);
}

static void add_number(cJSON *o, const char *key, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

int mst_gate_write_json(FILE *f, const mst_gate_result *r) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return -1;
    cJSON_AddStringToObject(root, "verdict", mst_gate_verdict_name(r->verdict));
    cJSON_AddNumberToObject(root, "exit_code", mst_gate_exit_code(r));
    cJSON_AddStringToObject(root, "reason", r->reason);
    cJSON_AddStringToObject(root, "mode", mode_name(r->mode));
    cJSON_AddNumberToObject(root, "baseline_runs", r->n_base);
    cJSON_AddNumberToObject(root, "candidate_runs", r->n_cand);
    cJSON_AddNumberToObject(root, "failed_runs", r->n_failed);
    if (r->n_failed) cJSON_AddStringToObject(root, "failure", r->failure);
    cJSON_AddNumberToObject(root, "interval_level", interval_level(r));
    cJSON *fp = cJSON_AddObjectToObject(root, "fingerprint");
    cJSON_AddBoolToObject(fp, "comparable", r->comparable);
    cJSON_AddStringToObject(fp, "config_hash_baseline", r->config_hash_base);
    cJSON_AddStringToObject(fp, "config_hash_candidate", r->config_hash_cand);
    cJSON_AddStringToObject(fp, "detail", r->fingerprint);
    cJSON *cfg = mst_gate_config_to_json(&r->config);
    if (cfg) cJSON_AddItemToObject(root, "config", cfg);
    cJSON *arr = cJSON_AddArrayToObject(root, "metrics");
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        const mst_gate_metric_result *x = &r->metric[m];
        mst_gate_metric_desc dd = mst_gate_desc(r, m), *d = &dd;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "metric", d->key);
        cJSON_AddStringToObject(o, "label", d->label);
        if (m == MST_GATE_METRIC_QUALITY && r->quality.name[0]) {     /* which metric, in which unit */
            cJSON_AddStringToObject(o, "metric_name", r->quality.name);
            cJSON_AddStringToObject(o, "unit", r->quality.unit);
            cJSON_AddNumberToObject(o, "display_scale", r->quality.scale);
        }
        cJSON_AddStringToObject(o, "verdict", mst_gate_verdict_name(x->verdict));
        cJSON_AddNumberToObject(o, "n_baseline", x->n_base);
        cJSON_AddNumberToObject(o, "n_candidate", x->n_cand);
        add_number(o, "baseline", x->base_value);
        add_number(o, "candidate", x->cand_value);
        cJSON_AddStringToObject(o, "change_unit", d->rule != MST_GATE_RULE_QUALITY ? "fraction"
                                                  : strcmp(quality_unit(r), "pt") == 0 ? "points" : quality_unit(r));
        add_number(o, "change", x->change);
        add_number(o, "change_lo", x->change_lo);
        add_number(o, "change_hi", x->change_hi);
        if (x->interval_needs_runs) cJSON_AddNumberToObject(o, "interval_needs_runs_per_side", x->interval_needs_runs);
        add_number(o, "p_value", x->p_value);
        cJSON_AddBoolToObject(o, "p_exact", x->exact);
        add_number(o, "cv", x->cv);
        add_number(o, "threshold", x->threshold);
        cJSON_AddStringToObject(o, "note", x->note);
        cJSON_AddItemToArray(arr, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return -1;
    int rc = fputs(text, f) < 0 || fputc('\n', f) == EOF ? -1 : 0;
    cJSON_free(text);
    return rc;
}

/* Markdown table cells: a '|' would end the cell, a newline the row. */
static void md_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (*s == '\n') fputc(' ', f);
        else fputc(*s, f);
    }
}

void mst_gate_write_markdown(FILE *f, const mst_gate_result *r) {
    fprintf(f, "### mstune gate: %s\n\n", mst_gate_verdict_name(r->verdict));
    md_text(f, r->reason);
    fprintf(f, "\n\n%s mode, %d %s vs %d candidate runs, alpha %g, %.0f%% intervals.\n\n", mode_name(r->mode), r->n_base,
            r->mode == MST_GATE_MODE_HISTORY ? "history" : "baseline", r->n_cand, r->config.alpha, 100 * interval_level(r));
    fprintf(f, "| metric | baseline | candidate | change | interval | p | CV | threshold | verdict |\n");
    fprintf(f, "|---|---:|---:|---:|---|---:|---:|---|---|\n");
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        if (r->metric[m].verdict == MST_GATE_ABSENT && m == MST_GATE_METRIC_STEP_TIME_P90) continue;
        row_text t;
        row(r, m, &t);
        mst_gate_verdict v = r->metric[m].verdict;
        mst_gate_metric_desc d = mst_gate_desc(r, m);
        fprintf(f, "| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s%s%s |\n", d.label, d.unit, t.value_b, t.value_c, t.change, t.interval, t.p, t.cv, t.threshold,
                v == MST_GATE_FAIL ? "**" : "", mst_gate_verdict_name(v), v == MST_GATE_FAIL ? "**" : "");
    }
    fputc('\n', f);
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        if (!r->metric[m].note[0] || (r->metric[m].verdict == MST_GATE_ABSENT && m == MST_GATE_METRIC_STEP_TIME_P90)) continue;
        fprintf(f, "- %s: ", mst_gate_desc(r, m).label);
        md_text(f, r->metric[m].note);
        fputc('\n', f);
    }
    fprintf(f, "- fingerprint: ");
    md_text(f, r->fingerprint);
    fputc('\n', f);
    if (r->n_failed) {
        fprintf(f, "- failed runs: ");
        md_text(f, r->failure);
        fputc('\n', f);
    }
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* XML 1.0 forbids most control characters even escaped */
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
        }
    }
}

static void junit_case(FILE *f, const char *name, const char *kind, const char *message, const char *detail) {
    fprintf(f, "    <testcase classname=\"mstune.gate\" name=\"");
    xml_text(f, name);
    if (!kind) {
        fprintf(f, "\">");
        if (detail && *detail) {
            fprintf(f, "<system-out>");
            xml_text(f, detail);
            fprintf(f, "</system-out>");
        }
        fprintf(f, "</testcase>\n");
        return;
    }
    fprintf(f, "\">\n      <%s message=\"", kind);
    xml_text(f, message);
    fprintf(f, "\">");
    xml_text(f, detail ? detail : "");
    fprintf(f, "</%s>\n    </testcase>\n", kind);
}

void mst_gate_write_junit(FILE *f, const mst_gate_result *r) {
    int tests = 2, failures = 0, errors = r->n_failed ? 1 : 0, skipped = r->comparable ? 0 : 1;
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        tests++;
        mst_gate_verdict v = r->metric[m].verdict;
        failures += v == MST_GATE_FAIL;
        skipped += v == MST_GATE_INCONCLUSIVE || v == MST_GATE_ABSENT;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"mstune gate\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\">\n", tests, failures,
            errors, skipped);
    fprintf(f, "  <testsuite name=\"mstune-gate-%s\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\">\n",
            mode_name(r->mode), tests, failures, errors, skipped);
    fprintf(f, "    <properties>\n      <property name=\"verdict\" value=\"%s\"/>\n", mst_gate_verdict_name(r->verdict));
    fprintf(f, "      <property name=\"reason\" value=\"");
    xml_text(f, r->reason);
    fprintf(f, "\"/>\n    </properties>\n");
    char msg[256];
    snprintf(msg, sizeof(msg), "%d of %d runs failed", r->n_failed, r->n_base + r->n_cand);
    junit_case(f, "runs", r->n_failed ? "error" : NULL, msg, r->n_failed ? r->failure : NULL);
    junit_case(f, "fingerprint", r->comparable ? NULL : "skipped", "runs not comparable", r->fingerprint);
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        const mst_gate_metric_result *x = &r->metric[m];
        row_text t;
        row(r, m, &t);
        mst_gate_metric_desc d = mst_gate_desc(r, m);
        char detail[768];
        snprintf(detail, sizeof(detail), "baseline %s %s, candidate %s %s, change %s %s, p %s, CV %s, threshold %s. %s", t.value_b,
                 d.unit, t.value_c, d.unit, t.change, t.interval, t.p, t.cv, t.threshold,
                 x->note);
        const char *kind = x->verdict == MST_GATE_FAIL ? "failure"
                           : x->verdict == MST_GATE_INCONCLUSIVE || x->verdict == MST_GATE_ABSENT ? "skipped"
                                                                                                    : NULL;
        snprintf(msg, sizeof(msg), "%s %s: %s", d.label, mst_gate_verdict_name(x->verdict), x->note[0] ? x->note : t.change);
        junit_case(f, d.key, kind, msg, detail);
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
}

/* Workflow-command escaping: data escapes %, CR, LF; property values also ':' and ','. */
static void gh_text(FILE *f, const char *s, bool property) {
    for (; *s; s++) {
        if (*s == '%') fputs("%25", f);
        else if (*s == '\r') fputs("%0D", f);
        else if (*s == '\n') fputs("%0A", f);
        else if (property && *s == ':') fputs("%3A", f);
        else if (property && *s == ',') fputs("%2C", f);
        else fputc(*s, f);
    }
}

static void gh_line(FILE *f, const char *level, const char *title, const char *message) {
    fprintf(f, "::%s title=", level);
    gh_text(f, title, true);
    fputs("::", f);
    gh_text(f, message, false);
    fputc('\n', f);
}

void mst_gate_write_annotations(FILE *f, const mst_gate_result *r) {
    char title[128], msg[1400];
    if (r->n_failed) {
        snprintf(msg, sizeof(msg), "%d of %d runs failed: %s", r->n_failed, r->n_base + r->n_cand, r->failure);
        gh_line(f, "error", "mstune gate: job failed", msg);
    }
    if (!r->comparable) gh_line(f, "warning", "mstune gate: inconclusive", r->fingerprint);
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        const mst_gate_metric_result *x = &r->metric[m];
        if (x->verdict != MST_GATE_FAIL && x->verdict != MST_GATE_WARN && x->verdict != MST_GATE_INCONCLUSIVE) continue;
        row_text t;
        row(r, m, &t);
        mst_gate_metric_desc d = mst_gate_desc(r, m);
        snprintf(title, sizeof(title), "mstune gate: %s %s", d.label, mst_gate_verdict_name(x->verdict));
        snprintf(msg, sizeof(msg), "%s: %s -> %s %s (%s, interval %s). %s", d.label, t.value_b, t.value_c, d.unit, t.change,
                 t.interval, x->note);
        gh_line(f, x->verdict == MST_GATE_FAIL ? "error" : "warning", title, msg);
    }
}
