/* headline.c — the numbers and the sentence a report leads with, number formatting, and a
 * summary.json regenerated from the database. The headline's figures are taken from summary.json
 * whenever it has them, so the page shows exactly what CI reads from the file; the verdict names
 * the biggest bucket of the step and the one change most likely to shrink it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/render.h"

/* What each bucket means and what to try, in the order of mst_prof_cat. */
static const struct {
    const char *what;       /* "X% of each step <what>" */
    const char *advice;
} cat_text[MST_CAT_COUNT] = {
    {"is per-op dispatch (framework work outside the kernels)",
     "graph mode (runtime.mode: graph) can remove most of it; a larger batch amortises it"},
    {"is kernel time", "the compute kernels bound the step; look at the top ops"},
    {"is exposed communication", "overlap the collectives with the backward pass or cut their volume"},
    {"waits for the data loader", "the input pipeline bounds the step; add data.num_workers"},
    {"is graph compilation", "the plan is being rebuilt; keep input shapes fixed (data.drop_remainder: true) so it is reused"},
    {"is host/device copying", "keep tensors on the device and overlap transfers with compute"},
    {"is in marked regions outside ops and data (other)", "the flame graph and the trace show what runs there"},
};
_Static_assert(sizeof(cat_text) / sizeof(cat_text[0]) == MST_CAT_COUNT, "a verdict per profiler category");

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The run's throughput from the profile alone (the run table's samples_processed, steps_processed and
 * train_loop_s, written by `mstune profile`): the same definition as summary.json's. A profile
 * without them (older) falls back to its profiled steps: batch size x steps / their summed wall time. */
double rpt_profile_throughput(const rpt_profile *p, bool samples) {
    const char *n = rpt_profile_meta(p, samples ? "samples_processed" : "steps_processed"), *t = rpt_profile_meta(p, "train_loop_s");
    if (n && t) {
        double cnt = strtod(n, NULL), sec = strtod(t, NULL);
        if (isfinite(cnt) && cnt >= 0 && isfinite(sec) && sec > 0) return cnt / sec;
    }
    if (samples && p->batch_size <= 0) return -1;
    double ms = 0;
    for (int64_t i = 0; i < p->n_steps; i++) ms += p->steps[i].wall_ms;
    if (!(ms > 0)) return -1;
    return (double)p->n_steps * (samples ? (double)p->batch_size : 1.0) * 1000.0 / ms;
}

void rpt_metric_from_summary(const cJSON *summary, rpt_metric *m) {
    memset(m, 0, sizeof(*m));
    m->value = NAN;
    m->scale = 1;
    m->higher_is_better = true;
    const cJSON *o = cJSON_GetObjectItem(summary, "metric");
    const cJSON *name = cJSON_GetObjectItem(o, "name");
    if (cJSON_IsObject(o) && cJSON_IsString(name) && name->valuestring[0]) {
        const cJSON *label = cJSON_GetObjectItem(o, "label"), *unit = cJSON_GetObjectItem(o, "unit");
        const cJSON *scale = cJSON_GetObjectItem(o, "display_scale"), *v = cJSON_GetObjectItem(o, "value");
        bool acc = strcmp(name->valuestring, "accuracy") == 0;      /* summaries before label/unit were written */
        m->known = true;
        snprintf(m->name, sizeof(m->name), "%s", name->valuestring);
        snprintf(m->label, sizeof(m->label), "%s", cJSON_IsString(label) ? label->valuestring : name->valuestring);
        snprintf(m->unit, sizeof(m->unit), "%s", cJSON_IsString(unit) ? unit->valuestring : acc ? "%" : "");
        m->scale = cJSON_IsNumber(scale) && isfinite(scale->valuedouble) && scale->valuedouble > 0 ? scale->valuedouble : acc ? 100 : 1;
        m->higher_is_better = !cJSON_IsFalse(cJSON_GetObjectItem(o, "higher_is_better"));
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) m->value = v->valuedouble;
    } else {        /* an older summary: accuracy only */
        snprintf(m->name, sizeof(m->name), "accuracy");
        snprintf(m->label, sizeof(m->label), "accuracy");
        snprintf(m->unit, sizeof(m->unit), "%%");
        m->scale = 100;
        double acc = num(summary, "val_accuracy", -1);
        if (acc >= 0) m->value = acc;
        m->known = acc >= 0;
    }
    snprintf(m->diff_unit, sizeof(m->diff_unit), "%s", strcmp(m->unit, "%") == 0 ? "pp" : m->unit);
}

void rpt_metric_fmt(const rpt_metric *m, double v, char *out, size_t n) {
    if (isnan(v)) snprintf(out, n, "n/a");
    else snprintf(out, n, "%.2f%s%s", v * m->scale, strcmp(m->unit, "%") == 0 || !m->unit[0] ? "" : " ", m->unit);
}

double rpt_metric_epoch(const rpt_metric *m, const cJSON *e) {
    const cJSON *v = cJSON_GetObjectItem(e, "val_metric");
    if (cJSON_IsNumber(v)) return isfinite(v->valuedouble) ? v->valuedouble : NAN;
    if (cJSON_IsNull(v)) return NAN;
    v = cJSON_GetObjectItem(e, "val_accuracy");         /* older summaries */
    return strcmp(m->name, "accuracy") == 0 && cJSON_IsNumber(v) && v->valuedouble >= 0 ? v->valuedouble : NAN;
}

void rpt_headline_fill(rpt_headline *h, const rpt_profile *p, const cJSON *summary, bool summary_given) {
    memset(h, 0, sizeof(*h));
    h->summary = summary;
    h->summary_given = summary_given;
    h->profiled_ms = p->bd.wall_median_ns / 1e6;
    h->step_key = "step_time_ms_median";
    h->step_ms = num(summary, "step_time_ms_median", -1);
    if (!(h->step_ms > 0)) {
        h->step_ms = h->profiled_ms;
        h->step_key = "profiled_step_ms_median";
    }
    h->steps_per_s = num(summary, "steps_per_s", rpt_profile_throughput(p, false));
    h->samples_per_s = num(summary, "samples_per_s", rpt_profile_throughput(p, true));
    h->samples_processed = num(summary, "samples_processed", -1);
    h->train_loop_s = num(summary, "train_loop_s", -1);
    const cJSON *share = cJSON_GetObjectItem(summary, "breakdown_share");
    for (int c = 0; c < MST_CAT_COUNT; c++) h->share[c] = num(share, mst_prof_cat_name((mst_prof_cat)c), p->bd.share[c]);
    h->val_accuracy = num(summary, "val_accuracy", -1);
    rpt_metric_from_summary(summary, &h->metric);
    h->peak_memory_bytes = num(summary, "peak_memory_bytes", (double)p->mem_peak_step_total);
    if (!summary_given) return;
    /* a summary.json from another run would make the headline lie: say so on the page */
    const cJSON *name = cJSON_GetObjectItem(summary, "name");
    double sp = num(summary, "profiled_step_ms_median", NAN);
    if (cJSON_IsString(name) && *p->job_name && strcmp(name->valuestring, p->job_name) != 0)
        snprintf(h->mismatch, sizeof(h->mismatch), "summary.json is for job '%s' but this profile is of job '%s'.",
                 name->valuestring, p->job_name);
    else if (!isnan(sp) && fabs(sp - h->profiled_ms) > 1e-9 * fmax(1.0, fabs(sp)))
        snprintf(h->mismatch, sizeof(h->mismatch),
                 "summary.json's profiled_step_ms_median (%.6g ms) differs from this profile's (%.6g ms): "
                 "the two files are from different runs.",
                 sp, h->profiled_ms);
}

static void pct(double share, char *out, size_t n) {
    double v = 100 * share;
    if (v >= 9.95 || v == 0) snprintf(out, n, "%.0f%%", v);
    else snprintf(out, n, "%.1f%%", v);
}

void rpt_verdict(const rpt_profile *p, const rpt_headline *h, char *out, size_t n) {
    if (p->bd.steps == 0) {
        snprintf(out, n, "The profile holds no finished steps: there is nothing to attribute (the run stopped before its "
                         "first step ended).");
        return;
    }
    int top = MST_CAT_KERNEL;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (h->share[c] > h->share[top]) top = c;
    char s[16];
    pct(h->share[top], s, sizeof(s));
    if (top == MST_CAT_KERNEL && p->n_ops > 0 && p->ops_total_ns > 0) {
        const rpt_op *o = &p->ops[0];
        snprintf(out, n, "%s of each step is kernel time: the compute kernels bound the step. Look at the top ops: %s alone "
                         "takes %.0f%% of kernel time at %.1f GFLOP/s.",
                 s, o->name, 100.0 * (double)o->total_ns / (double)p->ops_total_ns, o->gflops);
    } else if (top == MST_CAT_DATA && p->num_workers >= 0) {
        snprintf(out, n, "%s of each step waits for the data loader: the input pipeline bounds the step. Add "
                         "data.num_workers (now %lld)%s.",
                 s, (long long)p->num_workers, p->num_workers > 0 ? " or raise data.prefetch" : "");
    } else {
        snprintf(out, n, "%s of each step %s: %s.", s, cat_text[top].what, cat_text[top].advice);
    }
}

void rpt_verdict_second(const rpt_profile *p, const rpt_headline *h, char *out, size_t n) {
    out[0] = '\0';
    if (p->bd.steps == 0) return;
    int top = MST_CAT_KERNEL, second = -1;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (h->share[c] > h->share[top]) top = c;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (c != top && (second < 0 || h->share[c] > h->share[second])) second = c;
    if (second < 0 || h->share[second] < 0.10) return;
    char s[16];
    pct(h->share[second], s, sizeof(s));
    snprintf(out, n, "Next: %s %s of each step (%s) — %s.", s, cat_text[second].what, mst_prof_cat_name((mst_prof_cat)second),
             cat_text[second].advice);
}

void rpt_fmt_ms(double ms, char *out, size_t n) {
    if (ms == 0) snprintf(out, n, "0");
    else if (fabs(ms) < 1) snprintf(out, n, "%.3g", ms);
    else if (fabs(ms) < 100) snprintf(out, n, "%.2f", ms);
    else snprintf(out, n, "%.1f", ms);
}

void rpt_fmt_rate(double v, char *out, size_t n) {
    if (!(fabs(v) >= 1000)) {
        snprintf(out, n, fabs(v) < 10 ? "%.2f" : "%.1f", v);
        return;
    }
    char digits[64];
    snprintf(digits, sizeof(digits), "%.0f", fabs(v));
    size_t len = strlen(digits), k = 0;
    char tmp[96];
    if (v < 0) tmp[k++] = '-';
    for (size_t i = 0; i < len && k + 2 < sizeof(tmp); i++) {
        if (i > 0 && (len - i) % 3 == 0) tmp[k++] = ',';
        tmp[k++] = digits[i];
    }
    tmp[k] = '\0';
    snprintf(out, n, "%s", tmp);
}

void rpt_fmt_bytes(double bytes, char *out, size_t n) {
    double a = fabs(bytes);
    if (a >= 1024.0 * 1024 * 1024) snprintf(out, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (a >= 1024.0 * 1024) snprintf(out, n, "%.1f MiB", bytes / (1024.0 * 1024));
    else if (a >= 1024.0) snprintf(out, n, "%.1f KiB", bytes / 1024.0);
    else snprintf(out, n, "%.0f B", bytes);
}

cJSON *rpt_summary_from_profile(const rpt_profile *p) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const mst_breakdown *b = &p->bd;
    double ms = b->wall_median_ns / 1e6;
    cJSON_AddStringToObject(o, "name", p->job_name);
    cJSON_AddStringToObject(o, "model", p->model_name);
    cJSON_AddNumberToObject(o, "steps", (double)p->n_steps);
    cJSON_AddNumberToObject(o, "step_time_ms_median", ms);
    double steps_per_s = rpt_profile_throughput(p, false), samples_per_s = rpt_profile_throughput(p, true);
    cJSON_AddNumberToObject(o, "steps_per_s", steps_per_s > 0 ? steps_per_s : 0);
    if (samples_per_s >= 0) cJSON_AddNumberToObject(o, "samples_per_s", samples_per_s);
    const char *sp = rpt_profile_meta(p, "samples_processed"), *tl = rpt_profile_meta(p, "train_loop_s");
    if (sp) cJSON_AddNumberToObject(o, "samples_processed", strtod(sp, NULL));
    if (tl) cJSON_AddNumberToObject(o, "train_loop_s", strtod(tl, NULL));
    if (p->mem_peak_step_total >= 0) cJSON_AddNumberToObject(o, "peak_memory_bytes", (double)p->mem_peak_step_total);
    for (int64_t i = p->n_steps - 1; i >= 0; i--)
        if (p->steps[i].has_loss) {
            cJSON_AddNumberToObject(o, "final_train_loss", p->steps[i].loss);
            break;
        }
    cJSON *bms = cJSON_AddObjectToObject(o, "breakdown_ms"), *share = cJSON_AddObjectToObject(o, "breakdown_share");
    cJSON *hidden = cJSON_AddObjectToObject(o, "hidden_ms");
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        const char *name = mst_prof_cat_name((mst_prof_cat)c);
        cJSON_AddNumberToObject(bms, name, b->median_ns[c] / 1e6);
        cJSON_AddNumberToObject(share, name, b->share[c]);
        cJSON_AddNumberToObject(hidden, name, b->hidden_known ? b->hidden_median_ns[c] / 1e6 : 0.0);
    }
    cJSON_AddNumberToObject(o, "profiled_steps", (double)b->steps);
    cJSON_AddNumberToObject(o, "profiled_step_ms_median", ms);
    if (p->sampler_dispatch_share >= 0) cJSON_AddNumberToObject(o, "sampler_dispatch_share", p->sampler_dispatch_share);
    else cJSON_AddNullToObject(o, "sampler_dispatch_share");
    double d = b->share[MST_CAT_DISPATCH], k = b->share[MST_CAT_KERNEL];
    cJSON_AddNumberToObject(o, "instrumented_dispatch_share", d + k > 0 ? d / (d + k) : 0);
    if (p->overhead_share >= 0) cJSON_AddNumberToObject(o, "profiler_overhead_share", p->overhead_share);
    cJSON *top = cJSON_AddArrayToObject(o, "top_ops");
    for (int i = 0; i < p->n_ops && i < 10; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", p->ops[i].name);
        cJSON_AddNumberToObject(r, "calls", (double)p->ops[i].calls);
        cJSON_AddNumberToObject(r, "total_ms", (double)p->ops[i].total_ns / 1e6);
        cJSON_AddNumberToObject(r, "gflops", p->ops[i].gflops);
        cJSON_AddItemToArray(top, r);
    }
    cJSON *losses = cJSON_AddArrayToObject(o, "train_loss");
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].has_loss) cJSON_AddItemToArray(losses, cJSON_CreateNumber(p->steps[i].loss));
    if (p->config) cJSON_AddItemToObject(o, "config", cJSON_Duplicate(p->config, 1));
    cJSON_AddStringToObject(o, "regenerated_from", p->path);
    return o;
}
