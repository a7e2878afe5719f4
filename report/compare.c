/* compare.c — mst_compare_render: two profiles side by side. One list of rows (median step,
 * each category, throughput, peak memory, validation accuracy) and one of ops matched by name
 * feed both the terminal table and the HTML page, so the two always agree. This is a
 * description of two runs, not a verdict: whether a difference is real is the gate's question
 * (report/gate.h), answered from per-step samples with a rank test. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/gnuplot.h"
#include "util/fsutil.h"
#include "report/render.h"
#include "report/report.h"

#define TOP_OPS_COMPARE 15
#define TOP_OPS_COMPARE_CHART 10

typedef enum { ROW_RATIO, ROW_POINTS } row_kind;    /* delta and B/A; or a difference in the metric's unit (pp, dB) */

typedef struct {
    char label[64];
    const char *id;         /* HTML id stem, NULL for none */
    char id_text[48];       /* storage for an id made at run time */
    char unit[16];          /* ROW_POINTS: the difference's unit ("pp", "dB") */
    double a, b;
    bool has_a, has_b;
    row_kind kind;
    int indent;
} row;

typedef struct {
    const char *name;
    double a_ms, b_ms;      /* kernel ms per profiled step */
    double a_gflops, b_gflops;
    bool in_a, in_b;
} op_row;

typedef struct {
    char key[256];
    char a[160], b[160];    /* JSON text of the value; "(absent)" when one side lacks the key */
} key_diff;

#define MAX_KEY_DIFFS 64

/* What the summary.json beside a profile adds (< 0: not there, or of another job). */
typedef struct {
    double val_accuracy, peak_memory_bytes, samples_per_s;
    rpt_metric metric;      /* the job's metric (known = false without a summary) */
} sibling;

typedef struct {
    rpt_profile a, b;
    sibling sa, sb;
    key_diff diffs[MAX_KEY_DIFFS];
    int n_diffs, n_diffs_total;
    bool configs_known;
    row rows[24];
    int n_rows;
    op_row *ops;
    int n_ops;
} comparison;

/* The summary.json beside a profile, when that summary is of the same job: the numbers the
 * report card shows come from it, so compare shows the same ones. */
static sibling sibling_summary(const rpt_profile *p) {
    sibling s = {-1, -1, -1, {0}};
    s.metric.value = NAN;
    char path[4096];
    const char *slash = strrchr(p->path, '/');
    int dir_len = slash ? (int)(slash - p->path) : 0;
    if ((slash ? snprintf(path, sizeof(path), "%.*s/summary.json", dir_len, p->path) : snprintf(path, sizeof(path), "summary.json")) >=
        (int)sizeof(path))
        return s;
    char err[64];
    char *text = rpt_read_file(path, NULL, err, sizeof(err));
    if (!text) return s;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *name = cJSON_GetObjectItem(j, "name");
    if (cJSON_IsObject(j) && (!cJSON_IsString(name) || !*p->job_name || strcmp(name->valuestring, p->job_name) == 0)) {
        const cJSON *acc = cJSON_GetObjectItem(j, "val_accuracy"), *peak = cJSON_GetObjectItem(j, "peak_memory_bytes"),
                    *sps = cJSON_GetObjectItem(j, "samples_per_s");
        if (cJSON_IsNumber(acc)) s.val_accuracy = acc->valuedouble;
        if (cJSON_IsNumber(peak) && peak->valuedouble > 0) s.peak_memory_bytes = peak->valuedouble;
        if (cJSON_IsNumber(sps) && sps->valuedouble > 0) s.samples_per_s = sps->valuedouble;
        rpt_metric_from_summary(j, &s.metric);
    }
    cJSON_Delete(j);
    return s;
}

/* Peak memory as the report card shows it: summary.json's (the allocator's peak, recorded at every
 * profile level), else the profile's per-step memory (level 2). */
static double peak_bytes(const rpt_profile *p, const sibling *s) {
    if (s->peak_memory_bytes > 0) return s->peak_memory_bytes;
    if (p->mem_peak_step_total >= 0) return (double)p->mem_peak_step_total;
    return -1;
}

/* The run's throughput as its report card shows it (docs/report.md): summary.json's samples_per_s,
 * else the same definition from the profile's run table; steps/s when the batch size is unknown. */
static double throughput(const rpt_profile *p, const sibling *s) {
    if (s->samples_per_s > 0 && p->batch_size > 0) return s->samples_per_s;
    return rpt_profile_throughput(p, p->batch_size > 0);
}

/* ---- job keys that differ (the flattened run.config of each profile) ---- */

static void leaf_text(const cJSON *v, char *out, size_t n) {
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(out, n, "%s", t ? t : "(absent)");
    cJSON_free(t);
}

static void add_diff(comparison *c, const char *key, const cJSON *a, const cJSON *b) {
    c->n_diffs_total++;
    if (c->n_diffs == MAX_KEY_DIFFS) return;
    key_diff *d = &c->diffs[c->n_diffs++];
    snprintf(d->key, sizeof(d->key), "%s", key);
    leaf_text(a, d->a, sizeof(d->a));
    leaf_text(b, d->b, sizeof(d->b));
}

/* Walks a's keys (and b's missing from a): objects by key, everything else compared as a leaf. */
static void diff_config(comparison *c, const char *prefix, const cJSON *a, const cJSON *b) {
    char key[256];
    for (const cJSON *x = a ? a->child : NULL; x; x = x->next) {
        snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", x->string);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (cJSON_IsObject(x) && cJSON_IsObject(y)) diff_config(c, key, x, y);
        else if (!y || !cJSON_Compare(x, y, true)) add_diff(c, key, x, y);
    }
    for (const cJSON *y = b ? b->child : NULL; y; y = y->next)
        if (!cJSON_GetObjectItemCaseSensitive(a, y->string)) {
            snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", y->string);
            add_diff(c, key, NULL, y);
        }
}

static void add_row(comparison *c, const char *label, const char *id, double a, double b, bool has_a, bool has_b, row_kind kind,
                    int indent) {
    row *r = &c->rows[c->n_rows++];
    snprintf(r->label, sizeof(r->label), "%s", label);
    r->id = id;
    r->a = a;
    r->b = b;
    r->has_a = has_a;
    r->has_b = has_b;
    r->kind = kind;
    r->indent = indent;
}

static int op_cmp(const void *x, const void *y) {
    const op_row *a = x, *b = y;
    double da = fmax(a->a_ms, a->b_ms), db = fmax(b->a_ms, b->b_ms);
    if (da != db) return da < db ? 1 : -1;
    return strcmp(a->name, b->name);
}

static int build(comparison *c, char *err, size_t errn) {
    const rpt_profile *A = &c->a, *B = &c->b;
    static const char *const cat_ids[MST_CAT_COUNT] = {"cat-dispatch", "cat-kernel", "cat-comm", "cat-data",
                                                        "cat-compile",  "cat-memcpy", "cat-other"};
    add_row(c, "step time, median (ms)", "step-time-ms", A->bd.wall_median_ns / 1e6, B->bd.wall_median_ns / 1e6, A->bd.steps > 0,
            B->bd.steps > 0, ROW_RATIO, 0);
    for (int k = 0; k < MST_CAT_COUNT; k++) {
        char label[64];
        snprintf(label, sizeof(label), "%s ms/step", mst_prof_cat_name((mst_prof_cat)k));
        add_row(c, label, cat_ids[k], A->bd.median_ns[k] / 1e6, B->bd.median_ns[k] / 1e6, A->bd.steps > 0, B->bd.steps > 0, ROW_RATIO, 1);
    }
    bool samples = A->batch_size > 0 && B->batch_size > 0;
    double ta = throughput(A, &c->sa), tb = throughput(B, &c->sb);
    add_row(c, samples ? "throughput (samples/s)" : "throughput (steps/s)", "throughput", ta, tb, ta >= 0, tb >= 0, ROW_RATIO, 0);
    const double mib = 1024.0 * 1024.0;
    double pa = peak_bytes(A, &c->sa), pb = peak_bytes(B, &c->sb);
    add_row(c, "peak memory (MiB)", "peak-memory-mib", pa / mib, pb / mib, pa >= 0, pb >= 0, ROW_RATIO, 0);
    /* the job's metric (accuracy, PSNR, ...) as each run's card shows it; two different metrics do not compare */
    const rpt_metric *ma = &c->sa.metric, *mb = &c->sb.metric, *m = ma->known ? ma : mb;
    bool same = !ma->known || !mb->known || strcmp(ma->name, mb->name) == 0;
    char label[64];
    if (m->known) snprintf(label, sizeof(label), "validation %s%s%s%s", m->label, m->unit[0] ? " (" : "", m->unit, m->unit[0] ? ")" : "");
    else snprintf(label, sizeof(label), "validation metric");
    bool ha = ma->known && same && !isnan(ma->value), hb = mb->known && same && !isnan(mb->value);
    add_row(c, label, NULL, m->scale * ma->value, m->scale * mb->value, ha, hb, ROW_POINTS, 0);
    row *mr = &c->rows[c->n_rows - 1];
    snprintf(mr->id_text, sizeof(mr->id_text), "val-%s", m->known ? m->name : "metric");
    mr->id = mr->id_text;
    snprintf(mr->unit, sizeof(mr->unit), "%s", m->known ? m->diff_unit : "");

    /* ops matched by name */
    c->ops = calloc((size_t)(A->n_ops + B->n_ops + 1), sizeof(op_row));
    if (!c->ops) {
        snprintf(err, errn, "compare: out of memory");
        return -1;
    }
    double sa = A->bd.steps > 0 ? (double)A->bd.steps : 1, sb = B->bd.steps > 0 ? (double)B->bd.steps : 1;
    for (int i = 0; i < A->n_ops; i++) {
        op_row *o = &c->ops[c->n_ops++];
        o->name = A->ops[i].name;
        o->a_ms = (double)A->ops[i].total_ns / 1e6 / sa;
        o->a_gflops = A->ops[i].gflops;
        o->in_a = true;
    }
    for (int i = 0; i < B->n_ops; i++) {
        op_row *o = NULL;
        for (int k = 0; k < A->n_ops && !o; k++)
            if (strcmp(c->ops[k].name, B->ops[i].name) == 0) o = &c->ops[k];
        if (!o) {
            o = &c->ops[c->n_ops++];
            o->name = B->ops[i].name;
        }
        o->b_ms = (double)B->ops[i].total_ns / 1e6 / sb;
        o->b_gflops = B->ops[i].gflops;
        o->in_b = true;
    }
    qsort(c->ops, (size_t)c->n_ops, sizeof(op_row), op_cmp);
    return 0;
}

static void fmt_val(double v, bool has, char *out, size_t n) {
    if (!has) snprintf(out, n, "n/a");
    else if (fabs(v) >= 1000) rpt_fmt_rate(v, out, n);
    else rpt_fmt_ms(v, out, n);
}

static void fmt_delta(const row *r, char *d, size_t dn, char *q, size_t qn) {
    if (!r->has_a || !r->has_b) {
        snprintf(d, dn, "n/a");
        snprintf(q, qn, "n/a");
        return;
    }
    double delta = r->b - r->a;
    char v[32];
    fmt_val(fabs(delta), true, v, sizeof(v));
    snprintf(d, dn, "%s%s%s%s", delta > 0 ? "+" : delta < 0 ? "-" : "", v, r->kind == ROW_POINTS && r->unit[0] ? " " : "",
             r->kind == ROW_POINTS ? r->unit : "");
    if (r->kind == ROW_POINTS) snprintf(q, qn, "%s", "");
    else if (r->a != 0) snprintf(q, qn, "%.3fx", r->b / r->a);
    else snprintf(q, qn, "%s", r->b == 0 ? "=" : "n/a");
}

static void op_delta(const op_row *o, char *d, size_t dn, char *q, size_t qn) {
    char v[32];
    double delta = o->b_ms - o->a_ms;
    rpt_fmt_ms(fabs(delta), v, sizeof(v));
    snprintf(d, dn, "%s%s", delta > 0 ? "+" : delta < 0 ? "-" : "", v);
    if (!o->in_a) snprintf(q, qn, "new");
    else if (!o->in_b) snprintf(q, qn, "gone");
    else if (o->a_ms > 0) snprintf(q, qn, "%.3fx", o->b_ms / o->a_ms);
    else snprintf(q, qn, "n/a");
}

static void describe(const rpt_profile *p, char *out, size_t n) {
    if (*p->model_name)
        snprintf(out, n, "%s (%s), %lld profiled steps", *p->job_name ? p->job_name : "?", p->model_name, (long long)p->bd.steps);
    else
        snprintf(out, n, "%s, %lld profiled steps", *p->job_name ? p->job_name : "?", (long long)p->bd.steps);
}

static void print_terminal(const comparison *c, FILE *f) {
    char da[256], db[256];
    describe(&c->a, da, sizeof(da));
    describe(&c->b, db, sizeof(db));
    fprintf(f, "A: %s  [%s]\nB: %s  [%s]\n\n", c->a.path, da, c->b.path, db);
    if (!c->configs_known) fprintf(f, "job keys: a profile has no stored config; cannot tell which keys differ\n\n");
    else if (c->n_diffs_total == 0) fprintf(f, "job keys: the same in A and B\n\n");
    else {
        fprintf(f, "job keys that differ (%d)\n", c->n_diffs_total);
        for (int i = 0; i < c->n_diffs; i++) fprintf(f, "  %-30s %s -> %s\n", c->diffs[i].key, c->diffs[i].a, c->diffs[i].b);
        if (c->n_diffs_total > c->n_diffs) fprintf(f, "  (%d more)\n", c->n_diffs_total - c->n_diffs);
        fputc('\n', f);
    }
    fprintf(f, "%-28s %12s %12s %12s %9s\n", "", "A", "B", "B - A", "B / A");
    for (int i = 0; i < c->n_rows; i++) {
        const row *r = &c->rows[i];
        char a[32], b[32], d[64], q[32], label[80];
        fmt_val(r->a, r->has_a, a, sizeof(a));
        fmt_val(r->b, r->has_b, b, sizeof(b));
        fmt_delta(r, d, sizeof(d), q, sizeof(q));
        snprintf(label, sizeof(label), "%s%s", r->indent ? "  " : "", r->label);
        fprintf(f, "%-28s %12s %12s %12s %9s\n", label, a, b, d, q);
    }
    if (c->n_ops > 0) {
        fprintf(f, "\ntop ops, kernel ms per profiled step (matched by name)\n%-28s %12s %12s %12s %9s\n", "op", "A", "B", "B - A", "B / A");
        for (int i = 0; i < c->n_ops && i < TOP_OPS_COMPARE; i++) {
            const op_row *o = &c->ops[i];
            char a[32], b[32], d[48], q[32];
            if (o->in_a) rpt_fmt_ms(o->a_ms, a, sizeof(a));
            else snprintf(a, sizeof(a), "-");
            if (o->in_b) rpt_fmt_ms(o->b_ms, b, sizeof(b));
            else snprintf(b, sizeof(b), "-");
            op_delta(o, d, sizeof(d), q, sizeof(q));
            fprintf(f, "%-28.28s %12s %12s %12s %9s\n", o->name, a, b, d, q);
        }
        if (c->n_ops > TOP_OPS_COMPARE) fprintf(f, "  (%d more ops)\n", c->n_ops - TOP_OPS_COMPARE);
    }
}

/* ---- JSON: compare.json, the same rows as the table ---- */

static void json_number(cJSON *o, const char *key, double v, bool has) {
    if (has && isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

static int write_json(const comparison *c, const char *out_dir, char *err, size_t errn) {
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    cJSON_AddStringToObject(root, "a", c->a.path);
    cJSON_AddStringToObject(root, "b", c->b.path);
    cJSON *keys = c->configs_known ? cJSON_AddArrayToObject(root, "job_keys_differ") : NULL;
    if (!c->configs_known) cJSON_AddNullToObject(root, "job_keys_differ");
    for (int i = 0; keys && i < c->n_diffs; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "key", c->diffs[i].key);
        cJSON *va = strcmp(c->diffs[i].a, "(absent)") ? cJSON_Parse(c->diffs[i].a) : NULL;
        cJSON *vb = strcmp(c->diffs[i].b, "(absent)") ? cJSON_Parse(c->diffs[i].b) : NULL;
        cJSON_AddItemToObject(d, "a", va ? va : cJSON_CreateNull());
        cJSON_AddItemToObject(d, "b", vb ? vb : cJSON_CreateNull());
        cJSON_AddItemToArray(keys, d);
    }
    if (keys && c->n_diffs_total > c->n_diffs) cJSON_AddNumberToObject(root, "job_keys_differ_total", c->n_diffs_total);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; rows && i < c->n_rows; i++) {
        const row *r = &c->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "label", r->label);
        if (r->id) cJSON_AddStringToObject(o, "id", r->id);
        json_number(o, "a", r->a, r->has_a);
        json_number(o, "b", r->b, r->has_b);
        json_number(o, "delta", r->b - r->a, r->has_a && r->has_b);
        if (r->kind == ROW_RATIO) json_number(o, "ratio", r->b / r->a, r->has_a && r->has_b && r->a != 0);
        cJSON_AddStringToObject(o, "unit", r->kind != ROW_POINTS ? "" : strcmp(r->unit, "pp") == 0 ? "points" : r->unit);
        cJSON_AddItemToArray(rows, o);
    }
    cJSON *ops = cJSON_AddArrayToObject(root, "ops");
    for (int i = 0; ops && i < c->n_ops; i++) {
        const op_row *o = &c->ops[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "op", o->name);
        json_number(j, "a_ms_per_step", o->a_ms, o->in_a);
        json_number(j, "b_ms_per_step", o->b_ms, o->in_b);
        json_number(j, "a_gflops", o->a_gflops, o->in_a);
        json_number(j, "b_gflops", o->b_gflops, o->in_b);
        cJSON_AddItemToArray(ops, j);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) goto oom;
    char path[4096];
    int rc = rpt_join(path, sizeof(path), out_dir, "compare.json") == 0 ? mst_write_atomic(path, text, strlen(text), err, errn) : -1;
    if (rc != 0 && rpt_join(path, sizeof(path), out_dir, "compare.json") != 0) snprintf(err, errn, "output folder '%s': path too long", out_dir);
    cJSON_free(text);
    return rc;
oom:
    snprintf(err, errn, "compare: out of memory");
    return -1;
}

/* ---- HTML ---- */

static int draw_grouped(const char *path, const char *title, const char *ylabel, const char *xlabel, const char *const *labels,
                        const double *a, const double *b, int n, char *err, size_t errn) {
    rpt_plot pl;
    if (rpt_plot_open(&pl, path, 900, 420, err, errn) != 0) return -1;
    FILE *f = pl.f;
    fputs("$d << EOD\n", f);
    for (int i = 0; i < n; i++) {
        char label[40];
        rpt_gnuplot_label(labels[i], label, 24);
        fprintf(f, "%s\t%.9g\t%.9g\n", label, a[i], b[i]);
    }
    fputs("EOD\n", f);
    fprintf(f, "set title '%s'\nset ylabel '%s'\nset xlabel '%s'\nset yrange [0:*]\nset style data histogram\n"
               "set style histogram clustered gap 1\nset boxwidth 0.9\nset xtics rotate by -30 scale 0\nset grid noxtics\n"
               "set key inside right top\n"
               "plot $d using 2:xtic(1) lc rgb '#4e79a7' title 'A (baseline)', '' using 3 lc rgb '#f28e2b' title 'B'\n",
            title, ylabel, xlabel);
    return rpt_plot_close(&pl, err, errn);
}

static void html_num(rpt_buf *b, const char *prefix, const row *r, double v, bool has) {
    char t[32];
    fmt_val(v, has, t, sizeof(t));
    if (r->id && has) rpt_printf(b, "<td class=\"n\" id=\"%s-%s\" data-value=\"%.17g\">%s</td>", prefix, r->id, v, t);
    else rpt_printf(b, "<td class=\"n\">%s</td>", t);
}

static int write_html(const comparison *c, const char *out_dir, char *err, size_t errn) {
    bool gnuplot = mst_report_have_gnuplot();
    char path[4096], chart_err[2][768] = {"", ""};
    int drawn[2] = {0, 0};
    static const char *const files[2] = {"compare_breakdown.png", "compare_ops.png"};
    if (gnuplot) {
        const char *labels[MST_CAT_COUNT];
        double a[TOP_OPS_COMPARE_CHART > MST_CAT_COUNT ? TOP_OPS_COMPARE_CHART : MST_CAT_COUNT],
            bv[TOP_OPS_COMPARE_CHART > MST_CAT_COUNT ? TOP_OPS_COMPARE_CHART : MST_CAT_COUNT];
        for (int k = 0; k < MST_CAT_COUNT; k++) {
            labels[k] = mst_prof_cat_name((mst_prof_cat)k);
            a[k] = c->a.bd.median_ns[k] / 1e6;
            bv[k] = c->b.bd.median_ns[k] / 1e6;
        }
        if (rpt_join(path, sizeof(path), out_dir, files[0]) == 0)
            drawn[0] = draw_grouped(path, "Median time per step by category", "ms per step (median)", "category", labels, a, bv,
                                    MST_CAT_COUNT, chart_err[0], sizeof(chart_err[0])) == 0;
        int n = c->n_ops < TOP_OPS_COMPARE_CHART ? c->n_ops : TOP_OPS_COMPARE_CHART;
        const char *op_labels[TOP_OPS_COMPARE_CHART];
        for (int i = 0; i < n; i++) {
            op_labels[i] = c->ops[i].name;
            a[i] = c->ops[i].a_ms;
            bv[i] = c->ops[i].b_ms;
        }
        if (n > 0 && rpt_join(path, sizeof(path), out_dir, files[1]) == 0)
            drawn[1] = draw_grouped(path, "Top ops: kernel time per step", "kernel ms per profiled step", "op", op_labels, a, bv, n,
                                    chart_err[1], sizeof(chart_err[1])) == 0;
    }
    for (int i = 0; i < 2; i++)
        if (!drawn[i] && rpt_join(path, sizeof(path), out_dir, files[i]) == 0) unlink(path);

    rpt_buf b = {0};
    rpt_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mstune compare</title>\n<style>%s</style>\n"
                   "</head>\n<body>\n<main>\n<header><h1>Comparison of two profiles</h1>\n<p class=\"meta\">A (baseline) <code>",
               rpt_css);
    char da[256], db[256];
    describe(&c->a, da, sizeof(da));
    describe(&c->b, db, sizeof(db));
    rpt_html(&b, c->a.path);
    rpt_puts(&b, "</code> ");
    rpt_html(&b, da);
    rpt_puts(&b, "<br>B <code>");
    rpt_html(&b, c->b.path);
    rpt_puts(&b, "</code> ");
    rpt_html(&b, db);
    rpt_puts(&b, "</p></header>\n<section class=\"answer\" id=\"answer\"><p class=\"verdict\" id=\"verdict\">");
    const row *st = &c->rows[0];
    if (st->has_a && st->has_b && st->a > 0) {
        double ratio = st->b / st->a;
        char ta[32], tb[32];
        rpt_fmt_ms(st->a, ta, sizeof(ta));
        rpt_fmt_ms(st->b, tb, sizeof(tb));
        rpt_printf(&b, "B's median step is <span id=\"step-time-ratio\" data-value=\"%.17g\">%.3f</span>x A's (%s ms vs %s ms): ", ratio,
                   ratio, tb, ta);
        if (fabs(ratio - 1) < 0.005) rpt_puts(&b, "the same to within 0.5%.");
        else if (ratio >= 2) rpt_printf(&b, "%.1f times slower.", ratio);
        else if (ratio <= 0.5) rpt_printf(&b, "%.1f times faster.", 1 / ratio);
        else rpt_printf(&b, "%s by %.1f%%.", ratio > 1 ? "slower" : "faster", 100 * fabs(ratio - 1));
    } else {
        rpt_puts(&b, "One of the profiles holds no finished steps: there is no step time to compare.");
    }
    rpt_puts(&b, "</p><p class=\"meta\">A description of two runs, not a significance test: use the regression gate to decide whether a "
                 "difference is real.</p></section>\n");
    if (!gnuplot) {
        rpt_puts(&b, "<div class=\"notice\" id=\"no-gnuplot\">Charts need gnuplot with the pngcairo terminal, and '");
        rpt_html(&b, rpt_gnuplot_program());
        rpt_puts(&b, "' was not found or cannot draw PNGs (set MSTUNE_GNUPLOT; on Debian: apt install gnuplot-nox). The tables have "
                     "every number.</div>\n");
    }
    rpt_puts(&b, "<section id=\"job-keys\"><h2>Job keys that differ</h2>\n");
    if (!c->configs_known) rpt_puts(&b, "<p>A profile has no stored config: which keys differ is unknown.</p>\n");
    else if (c->n_diffs_total == 0) rpt_puts(&b, "<p id=\"job-keys-same\">None: A and B ran the same job config.</p>\n");
    else {
        rpt_puts(&b, "<table id=\"job-keys-table\"><tr><th>key</th><th>A</th><th>B</th></tr>\n");
        for (int i = 0; i < c->n_diffs; i++) {
            rpt_puts(&b, "<tr><td><code>");
            rpt_html(&b, c->diffs[i].key);
            rpt_puts(&b, "</code></td><td>");
            rpt_html(&b, c->diffs[i].a);
            rpt_puts(&b, "</td><td>");
            rpt_html(&b, c->diffs[i].b);
            rpt_puts(&b, "</td></tr>\n");
        }
        rpt_puts(&b, "</table>\n");
        if (c->n_diffs_total > c->n_diffs) rpt_printf(&b, "<p>(%d more)</p>\n", c->n_diffs_total - c->n_diffs);
    }
    rpt_puts(&b, "</section>\n");
    rpt_puts(&b, "<section id=\"summary\"><h2>Side by side</h2>\n<table id=\"compare-table\">"
                 "<tr><th></th><th>A</th><th>B</th><th>B − A</th><th>B / A</th></tr>\n");
    for (int i = 0; i < c->n_rows; i++) {
        const row *r = &c->rows[i];
        char d[64], q[32];
        fmt_delta(r, d, sizeof(d), q, sizeof(q));
        rpt_puts(&b, r->indent ? "<tr><td style=\"padding-left:22px\">" : "<tr><td>");
        rpt_html(&b, r->label);
        rpt_puts(&b, "</td>");
        html_num(&b, "a", r, r->a, r->has_a);
        html_num(&b, "b", r, r->b, r->has_b);
        rpt_printf(&b, "<td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n", d, q);
    }
    rpt_puts(&b, "</table><p class=\"meta\">Medians over each profile's non-warm-up steps; category medians need not add up to the "
                 "median step. Throughput, peak memory and the job's metric come from the summary.json beside each profile when it is there (the numbers its report card shows), else from the profile.</p>\n<div class=\"row\">");
    for (int i = 0; i < 2; i++) {
        if (i == 1) rpt_puts(&b, "</div>\n</section>\n<section id=\"ops\"><h2>Top ops</h2>\n<div class=\"row\">");
        rpt_puts(&b, "<figure style=\"width:900px\">");
        if (drawn[i]) rpt_printf(&b, "<img src=\"%s\" width=\"900\" height=\"420\" alt=\"%s\">", files[i],
                                 i ? "top ops, A and B" : "breakdown, A and B");
        else if (chart_err[i][0]) {
            rpt_puts(&b, "<div class=\"nochart\">Chart not drawn: ");
            rpt_html(&b, chart_err[i]);
            rpt_puts(&b, "</div>");
        } else {
            rpt_puts(&b, i && c->n_ops == 0 ? "<div class=\"nochart\">No per-op statistics in either profile.</div>"
                                            : "<div class=\"nochart\">Chart not drawn: gnuplot is not available.</div>");
        }
        rpt_puts(&b, i ? "<figcaption>Kernel time per profiled step of the ops with the most time in either run, A beside B.</figcaption>"
                       : "<figcaption>Median milliseconds per step in each category, A beside B.</figcaption>");
        rpt_puts(&b, "</figure>\n");
    }
    rpt_puts(&b, "</div>\n");
    if (c->n_ops > 0) {
        rpt_puts(&b, "<table id=\"ops-table\"><tr><th>op</th><th>A ms/step</th><th>B ms/step</th><th>B − A</th><th>B / A</th>"
                     "<th>A GFLOP/s</th><th>B GFLOP/s</th></tr>\n");
        for (int i = 0; i < c->n_ops && i < TOP_OPS_COMPARE; i++) {
            const op_row *o = &c->ops[i];
            char d[48], q[32], t[32];
            op_delta(o, d, sizeof(d), q, sizeof(q));
            rpt_puts(&b, "<tr><td>");
            rpt_html(&b, o->name);
            rpt_puts(&b, "</td>");
            if (o->in_a) rpt_fmt_ms(o->a_ms, t, sizeof(t));
            rpt_printf(&b, "<td class=\"n\">%s</td>", o->in_a ? t : "—");
            if (o->in_b) rpt_fmt_ms(o->b_ms, t, sizeof(t));
            rpt_printf(&b, "<td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td>", o->in_b ? t : "—", d, q);
            if (o->in_a) rpt_printf(&b, "<td class=\"n\">%.1f</td>", o->a_gflops);
            else rpt_puts(&b, "<td class=\"n\">—</td>");
            if (o->in_b) rpt_printf(&b, "<td class=\"n\">%.1f</td></tr>\n", o->b_gflops);
            else rpt_puts(&b, "<td class=\"n\">—</td></tr>\n");
        }
        rpt_puts(&b, "</table>\n");
    }
    rpt_puts(&b, "</section>\n<footer>Written by mstune compare; docs/report.md describes this page.</footer>\n</main>\n</body>\n</html>\n");
    int rc = rpt_join(path, sizeof(path), out_dir, "index.html") == 0 ? rpt_buf_write(&b, path, err, errn) : -1;
    if (rc != 0 && rpt_join(path, sizeof(path), out_dir, "index.html") != 0) snprintf(err, errn, "output folder '%s': path too long", out_dir);
    rpt_buf_free(&b);
    if (rc == 0 && (chart_err[0][0] || chart_err[1][0])) {
        snprintf(err, errn, "comparison written to '%s', but gnuplot failed: %s", out_dir, chart_err[0][0] ? chart_err[0] : chart_err[1]);
        rc = -1;
    }
    return rc;
}

int mst_compare_render(const char *db_a, const char *db_b, const char *out_dir, FILE *terminal, char *err, size_t errn) {
    if (!db_a || !db_b) {
        snprintf(err, errn, "compare: two profile paths are required");
        return -1;
    }
    comparison c;
    memset(&c, 0, sizeof(c));
    if (rpt_profile_load(&c.a, db_a, err, errn) != 0) return -1;
    if (rpt_profile_load(&c.b, db_b, err, errn) != 0) {
        rpt_profile_free(&c.a);
        return -1;
    }
    int rc = -1;
    c.sa = sibling_summary(&c.a);
    c.sb = sibling_summary(&c.b);
    c.configs_known = c.a.config && c.b.config;
    if (c.configs_known) diff_config(&c, "", c.a.config, c.b.config);
    if (build(&c, err, errn) != 0) goto out;
    if (out_dir && mst_mkdirs(out_dir, err, errn) != 0) goto out;
    if (terminal) {
        print_terminal(&c, terminal);
        fflush(terminal);
    }
    rc = out_dir ? write_json(&c, out_dir, err, errn) : 0;
    if (rc == 0 && out_dir) rc = write_html(&c, out_dir, err, errn);
out:
    free(c.ops);
    rpt_profile_free(&c.a);
    rpt_profile_free(&c.b);
    return rc;
}
