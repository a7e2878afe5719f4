/* html.c — index.html of the report: the answer first (verdict, headline numbers with stable ids
 * that mirror summary.json, a CSS bar of the breakdown that needs no chart), then one section per
 * topic with its chart, the chart's reading and a table of the exact numbers, then the run's
 * metadata. Inline CSS only, no scripts, images by relative path; every string from the
 * database or summary.json goes through rpt_html. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/sampler.h"
#include "report/gnuplot.h"
#include "report/ranks.h"
#include "report/render.h"
#include "report/report.h"

#define TOP_OPS_TABLE 30
#define TOP_LEAVES 12

const char rpt_css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#222;background:#fafafa;line-height:1.4}"
    "main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}"
    "h1{font-size:1.6em;margin:8px 0 2px}h1 .model{color:#666;font-weight:normal;font-size:.7em}"
    "h2{font-size:1.25em;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}"
    ".meta{color:#666;font-size:.9em;margin:0 0 12px}code{font-size:.92em}"
    ".answer{background:#fff;border:1px solid #ddd;border-left:6px solid #1b9e77;border-radius:6px;padding:14px 18px;margin:12px 0}"
    ".verdict{font-size:1.3em;font-weight:600;margin:2px 0 6px}.verdict2{margin:0 0 10px;color:#444}"
    ".cards{display:flex;flex-wrap:wrap;gap:12px;margin:10px 0}"
    ".card{background:#f4f6f8;border-radius:6px;padding:8px 14px;min-width:150px}"
    ".card .k{font-size:.8em;color:#555;text-transform:uppercase;letter-spacing:.04em}"
    ".card .v{font-size:1.5em;font-weight:600}.card .s{font-size:.85em;color:#555}"
    ".bar{display:flex;height:22px;border-radius:4px;overflow:hidden;margin:8px 0 4px;background:#eee}"
    ".bar div{height:100%}.legend{font-size:.85em;color:#444}.legend>span{margin-right:14px;white-space:nowrap}"
    ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}"
    ".notice{background:#fff8e1;border:1px solid #f0c36d;border-radius:6px;padding:8px 12px;margin:8px 0}"
    ".notice.bad{background:#fdecea;border-color:#e0a09a}"
    ".row{display:flex;flex-wrap:wrap;gap:20px;align-items:flex-start;margin:10px 0 18px}"
    "figure{margin:0;flex:0 1 auto;max-width:100%}figure img{width:100%;height:auto;border:1px solid #e4e4e4;background:#fff}"
    "figcaption{font-size:.92em;color:#333;margin-top:4px}"
    ".nochart{border:1px dashed #bbb;background:#fff;color:#666;padding:28px 16px;text-align:center;border-radius:4px}"
    "table{border-collapse:collapse;background:#fff;font-size:.9em}th,td{border:1px solid #e2e2e2;padding:3px 8px}"
    "th{background:#f0f2f4;text-align:left}#compare-table td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".tables{flex:1 1 320px;min-width:min-content}details{margin:8px 0}pre{background:#fff;border:1px solid #e2e2e2;padding:8px;overflow:auto;font-size:.85em}"
    "nav{font-size:.9em;margin:6px 0}nav a{margin-right:12px}object{width:100%;border:1px solid #e4e4e4;background:#fff}"
    "footer{color:#777;font-size:.85em;margin-top:40px}";

/* A number with a stable id: data-value holds the exact double (%.17g reads back bit for bit),
 * data-summary-key the summary.json key it mirrors; the text is the rounded figure. */
static void num_span(rpt_buf *b, const char *id, const char *key, double value, const char *text) {
    rpt_printf(b, "<span id=\"%s\" data-value=\"%.17g\"", id, value);
    if (key) rpt_printf(b, " data-summary-key=\"%s\"", key);
    rpt_puts(b, ">");
    rpt_html(b, text);
    rpt_puts(b, "</span>");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void td_num(rpt_buf *b, const char *fmt, double v) {
    rpt_puts(b, "<td class=\"n\">");
    rpt_printf(b, fmt, v);
    rpt_puts(b, "</td>");
}

static void td_text(rpt_buf *b, const char *s) {
    rpt_puts(b, "<td>");
    rpt_html(b, s);
    rpt_puts(b, "</td>");
}

static void td_ms(rpt_buf *b, double ms) {
    char t[32];
    rpt_fmt_ms(ms, t, sizeof(t));
    rpt_printf(b, "<td class=\"n\">%s</td>", t);
}

static void figure(rpt_buf *b, const rpt_page *pg, rpt_chart_id id) {
    const rpt_chart *c = &pg->charts[id];
    rpt_printf(b, "<figure style=\"width:%dpx\">", c->width);
    switch (c->state) {
    case RPT_CHART_DRAWN:
        rpt_printf(b, "<img src=\"%s\" width=\"%d\" height=\"%d\" alt=\"", c->file, c->width, c->height);
        rpt_html(b, c->title);
        rpt_puts(b, "\">");
        break;
    case RPT_CHART_FAILED:
        rpt_puts(b, "<div class=\"nochart\">Chart not drawn: ");
        rpt_html(b, c->error);
        rpt_puts(b, "</div>");
        break;
    case RPT_CHART_PLANNED:
        rpt_puts(b, "<div class=\"nochart\">");
        rpt_html(b, c->title);
        rpt_puts(b, ": chart not drawn because gnuplot is not available (see the notice at the top); the table has the numbers.</div>");
        break;
    case RPT_CHART_NO_DATA:
        rpt_puts(b, "<div class=\"nochart\">No chart: ");
        rpt_html(b, c->why_none);
        rpt_puts(b, ".</div>");
        break;
    }
    if (c->state != RPT_CHART_NO_DATA) {
        rpt_puts(b, "<figcaption><b>");
        rpt_html(b, c->title);
        rpt_puts(b, ".</b> ");
        rpt_html(b, c->reading);
        rpt_puts(b, "</figcaption>");
    }
    rpt_puts(b, "</figure>\n");
}

static void notice(rpt_buf *b, const char *id, bool bad, const char *text) {
    rpt_printf(b, "<div class=\"notice%s\" id=\"%s\">", bad ? " bad" : "", id);
    rpt_html(b, text);
    rpt_puts(b, "</div>\n");
}

static void answer(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    const rpt_headline *h = pg->h;
    char verdict[1024], second[512], t[64], t2[64];
    rpt_verdict(p, h, verdict, sizeof(verdict));
    rpt_verdict_second(p, h, second, sizeof(second));
    rpt_puts(b, "<section class=\"answer\" id=\"answer\">\n<p class=\"verdict\" id=\"verdict\">");
    rpt_html(b, verdict);
    rpt_puts(b, "</p>\n");
    if (*second) {
        rpt_puts(b, "<p class=\"verdict2\" id=\"verdict-next\">");
        rpt_html(b, second);
        rpt_puts(b, "</p>\n");
    }
    rpt_puts(b, "<div class=\"cards\">\n<div class=\"card\"><div class=\"k\">Step time (median)</div><div class=\"v\">");
    rpt_fmt_ms(h->step_ms, t, sizeof(t));
    num_span(b, "step-time-ms", h->step_key, h->step_ms, t);
    /* one median step on the card; the profiler's own median of the same steps is the breakdown
     * table's total row */
    if (strcmp(h->step_key, "step_time_ms_median") == 0)
        rpt_printf(b, " ms</div><div class=\"s\">trainer's timing, %lld profiled</div></div>\n", (long long)p->bd.steps);
    else
        rpt_printf(b, " ms</div><div class=\"s\">over %lld profiled steps</div></div>\n", (long long)p->bd.steps);

    rpt_puts(b, "<div class=\"card\"><div class=\"k\">Throughput</div><div class=\"v\">");
    if (h->samples_per_s >= 0) {
        rpt_fmt_rate(h->samples_per_s, t, sizeof(t));
        num_span(b, "throughput", "samples_per_s", h->samples_per_s, t);
        rpt_puts(b, " samples/s</div><div class=\"s\">");
    }
    rpt_fmt_rate(h->steps_per_s, t2, sizeof(t2));
    num_span(b, "steps-per-s", "steps_per_s", h->steps_per_s, t2);
    rpt_puts(b, h->samples_per_s >= 0 ? " steps/s, samples processed / training-loop wall time</div></div>\n"
                                      : " steps/s</div><div class=\"s\">batch size unknown</div></div>\n");

    int top = MST_CAT_KERNEL;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (h->share[c] > h->share[top]) top = c;
    rpt_printf(b, "<div class=\"card\"><div class=\"k\">Biggest bucket</div><div class=\"v\"><span id=\"top-category\">%s</span> ",
               mst_prof_cat_name((mst_prof_cat)top));
    snprintf(t, sizeof(t), "%.1f", 100 * h->share[top]);
    num_span(b, "top-share", NULL, h->share[top], t);
    rpt_puts(b, "%</div><div class=\"s\">of all profiled step time</div></div>\n");

    const rpt_metric *m = &h->metric;
    if (!isnan(m->value)) {     /* the job's metric: id val-<name> (val-accuracy, val-psnr) */
        char id[48];
        bool acc = strcmp(m->name, "accuracy") == 0;
        snprintf(id, sizeof(id), "val-%s", m->name);
        rpt_puts(b, "<div class=\"card\"><div class=\"k\">Validation ");
        rpt_html(b, m->label);
        rpt_puts(b, "</div><div class=\"v\">");
        snprintf(t, sizeof(t), "%.2f", m->value * m->scale);
        num_span(b, id, acc ? "val_accuracy" : "metric.value", m->value, t);
        if (strcmp(m->unit, "%") != 0 && m->unit[0]) rpt_puts(b, " ");
        rpt_html(b, m->unit);
        rpt_printf(b, "</div><div class=\"s\">last evaluation, %s is better</div></div>\n", m->higher_is_better ? "higher" : "lower");
    }
    if (h->peak_memory_bytes >= 0) {
        rpt_puts(b, "<div class=\"card\"><div class=\"k\">Peak memory</div><div class=\"v\">");
        rpt_fmt_bytes(h->peak_memory_bytes, t, sizeof(t));
        num_span(b, "peak-memory", "peak_memory_bytes", h->peak_memory_bytes, t);
        rpt_puts(b, "</div><div class=\"s\">bytes in use, all categories</div></div>\n");
    }
    rpt_puts(b, "</div>\n<div class=\"bar\" title=\"share of step time by category\">");
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (h->share[c] > 0)
            rpt_printf(b, "<div style=\"width:%.3f%%;background:%s\" title=\"%s %.1f%%\"></div>", 100 * h->share[c], rpt_cat_colors[c],
                       mst_prof_cat_name((mst_prof_cat)c), 100 * h->share[c]);
    rpt_puts(b, "</div>\n<div class=\"legend\">");
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        const char *name = mst_prof_cat_name((mst_prof_cat)c);
        rpt_printf(b, "<span><i style=\"background:%s\"></i>%s ", rpt_cat_colors[c], name);
        char id[32];
        snprintf(id, sizeof(id), "share-%s", name);
        snprintf(t, sizeof(t), "%.1f", 100 * h->share[c]);
        char key[64];
        snprintf(key, sizeof(key), "breakdown_share.%s", name);
        num_span(b, id, key, h->share[c], t);
        rpt_puts(b, "%</span>");
    }
    rpt_puts(b, "</div>\n</section>\n");
}

static void notices(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    char t[1024];
    if (!pg->gnuplot) {
        snprintf(t, sizeof(t),
                 "Charts need gnuplot with the pngcairo terminal, and '%s' was not found or cannot draw PNGs (set MSTUNE_GNUPLOT "
                 "to the program to use; on Debian: apt install gnuplot-nox). Every number is in the tables below; run the "
                 "report again once gnuplot is installed to draw the charts.",
                 rpt_gnuplot_program());
        notice(b, "no-gnuplot", false, t);
    }
    int failed = 0;
    for (int i = 0; i < RPT_CH_COUNT; i++) failed += pg->charts[i].state == RPT_CHART_FAILED;
    if (failed) {
        snprintf(t, sizeof(t), "gnuplot failed on %d chart%s; the affected sections say which and why.", failed, failed == 1 ? "" : "s");
        notice(b, "chart-failures", true, t);
    }
    if (pg->h->mismatch[0]) notice(b, "summary-mismatch", true, pg->h->mismatch);
    if (p->bd.includes_warmup) notice(b, "warmup-only", false, "Every step of this profile is a warm-up step, so the figures include them.");
    if (!p->bd.hidden_known && p->n_steps > 0)
        notice(b, "incomplete", true,
               "The run did not close its profile cleanly (killed?): hidden time, op statistics and memory peaks are missing.");
    if (p->events_dropped > 0) {
        snprintf(t, sizeof(t), "The store dropped %lld profiler records: the figures are incomplete.", (long long)p->events_dropped);
        notice(b, "dropped", true, t);
    }
    if (p->n_unmatched_steps > 0) {
        snprintf(t, sizeof(t), "%lld step%s had unmatched profiler ranges; their attribution is approximate.",
                 (long long)p->n_unmatched_steps, p->n_unmatched_steps == 1 ? "" : "s");
        notice(b, "unmatched", false, t);
    }
    if (p->overhead_share > 0.05) {
        snprintf(t, sizeof(t), "The profiler itself cost an estimated %.1f%% of the run: lower profile.level for tighter numbers.",
                 100 * p->overhead_share);
        notice(b, "overhead", false, t);
    }
}

/* A table cell with the exact number in data-value (id rank-<k>-<what>). */
static void td_rank(rpt_buf *b, int rank, const char *what, double v, const char *text) {
    rpt_printf(b, "<td class=\"n\" id=\"rank-%d-%s\" data-value=\"%.17g\">", rank, what, v);
    rpt_html(b, text);
    rpt_puts(b, "</td>");
}

/* Data parallel: one row per rank from its own profile.db, the slowest rank, the imbalance. */
static void ranks_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_ranks *rk = pg->ranks;
    if (!rk || rk->n <= 1) return;
    rpt_printf(b, "<section id=\"ranks\"><h2>Ranks</h2>\n<p class=\"verdict2\" id=\"ranks-verdict\">");
    char t[64];
    if (rk->slowest >= 0) {
        const rpt_rank_row *sl = &rk->rows[rk->slowest];
        rpt_fmt_ms(sl->step_ms_median, t, sizeof(t));
        char r[16];
        snprintf(r, sizeof(r), "%d", rk->slowest);
        rpt_printf(b, "%d ranks. The slowest is rank ", rk->n);
        num_span(b, "ranks-slowest", NULL, rk->slowest, r);
        rpt_printf(b, " (median step %s ms); imbalance (max - min) / mean of the ranks' median step times ", t);
        snprintf(t, sizeof(t), "%.1f%%", 100 * rk->imbalance);
        num_span(b, "ranks-imbalance", NULL, rk->imbalance, t);
        if (rk->flagged)
            rpt_puts(b, ": <strong id=\"ranks-flag\">above 5%, a slow rank holds the others back</strong> (every all-reduce waits "
                        "for it; look at its own report for why).");
        else
            rpt_puts(b, ", within 5%.");
    } else {
        rpt_printf(b, "%d ranks, but fewer than two profiles could be read: no slowest rank or imbalance.", rk->n);
    }
    if (rk->n_ok < rk->n)
        rpt_printf(b, " <span id=\"ranks-problems\">%d of %d rank profiles are missing or unusable (below).</span>", rk->n - rk->n_ok,
                   rk->n);
    rpt_puts(b, "</p>\n<table id=\"ranks-table\"><tr><th>rank</th><th>profile</th><th>steps</th><th>step median ms</th>"
                "<th>step mean ms</th><th>exposed comm ms/step (mean)</th><th>exposed p10 / p90 ms</th><th>hidden comm ms/step (mean)</th>"
                "<th>all-reduces/step</th><th>bytes/step</th><th>all-reduce ms/step</th><th>GB/s</th></tr>\n");
    for (int k = 0; k < rk->n; k++) {
        const rpt_rank_row *r = &rk->rows[k];
        rpt_printf(b, "<tr id=\"rank-%d\"%s><td>%d%s</td>", k, r->ok ? "" : " class=\"bad\"", k, k == rk->slowest ? " (slowest)" : "");
        td_text(b, r->path);
        if (!r->ok) {
            rpt_printf(b, "<td colspan=\"10\" id=\"rank-%d-problem\">", k);
            rpt_html(b, r->problem);
            rpt_puts(b, "</td></tr>\n");
            continue;
        }
        snprintf(t, sizeof(t), "%lld", (long long)r->steps);
        td_rank(b, k, "steps", (double)r->steps, t);
        rpt_fmt_ms(r->step_ms_median, t, sizeof(t));
        td_rank(b, k, "step-median", r->step_ms_median, t);
        rpt_fmt_ms(r->step_ms_mean, t, sizeof(t));
        td_rank(b, k, "step-mean", r->step_ms_mean, t);
        if (!r->has_comm) {
            rpt_puts(b, "<td colspan=\"7\">n/a: no communicator counters in this profile</td></tr>\n");
            continue;
        }
        rpt_fmt_ms(r->exposed_ms, t, sizeof(t));
        td_rank(b, k, "exposed", r->exposed_ms, t);
        char t2[32];
        rpt_fmt_ms(r->exposed_p10_ms, t, sizeof(t));
        rpt_fmt_ms(r->exposed_p90_ms, t2, sizeof(t2));
        rpt_printf(b, "<td class=\"n\"><span id=\"rank-%d-exposed-p10\" data-value=\"%.17g\">%s</span> / "
                      "<span id=\"rank-%d-exposed-p90\" data-value=\"%.17g\">%s</span></td>",
                   k, r->exposed_p10_ms, t, k, r->exposed_p90_ms, t2);
        rpt_fmt_ms(r->hidden_ms, t, sizeof(t));
        td_rank(b, k, "hidden", r->hidden_ms, t);
        snprintf(t, sizeof(t), "%.1f", r->calls);
        td_rank(b, k, "calls", r->calls, t);
        rpt_fmt_bytes(r->bytes, t, sizeof(t));
        td_rank(b, k, "bytes", r->bytes, t);
        rpt_fmt_ms(r->allreduce_ms, t, sizeof(t));
        td_rank(b, k, "allreduce", r->allreduce_ms, t);
        snprintf(t, sizeof(t), "%.3g", r->gbps);
        td_rank(b, k, "gbps", r->gbps, t);
        rpt_puts(b, "</tr>\n");
    }
    rpt_puts(b, "</table>\n<p class=\"meta\">One row per rank, each from its own profile.db (rank k &gt; 0 writes DIR.rank&lt;k&gt;; "
                "the number of ranks from the run's record: ");
    rpt_html(b, rk->source);
    rpt_puts(b, "). Over each rank's profiled steps: the median and mean step wall time; exposed comm is the time the main thread "
                "waited for communication per step (mean, and its 10th / 90th percentile over the steps: on a machine with more "
                "runnable processes than cores the wait is bimodal, short when the peer rank is running and a scheduler "
                "time slice when it is not, so compare runs by these, not by one median), hidden comm the all-reduces' remaining start-to-completion time that "
                "overlapped backward; all-reduce calls and payload bytes per step; GB/s is the payload bytes over the all-reduce "
                "time. Imbalance is (max - min) / mean of the median step times, flagged above 5% (msprof-analyze's "
                "threshold).</p>\n</section>\n");
}

static void breakdown_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"breakdown\"><h2>Step time breakdown</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_BREAKDOWN);
    /* one definition for the two columns that must add up: the mean per step over the profiled
     * steps (sum / steps) and its share (sum / sum of wall); both add up to the mean step */
    double mean[MST_CAT_COUNT] = {0}, wall = 0;
    int64_t used = 0;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].used) {
            used++;
            wall += p->steps[i].wall_ms;
            for (int c = 0; c < MST_CAT_COUNT; c++) mean[c] += p->steps[i].cat_ms[c];
        }
    rpt_printf(b, "<div class=\"tables\"><table id=\"breakdown-table\"><tr><th>category</th><th>ms/step (mean)</th><th>share</th>"
                  "<th>median ms/step</th><th>hidden ms/step</th></tr>\n");
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        rpt_printf(b, "<tr><td>%s</td>", mst_prof_cat_name((mst_prof_cat)c));
        if (used) td_ms(b, mean[c] / (double)used);
        else rpt_puts(b, "<td class=\"n\">n/a</td>");
        td_num(b, "%.2f%%", 100 * p->bd.share[c]);
        td_ms(b, p->bd.median_ns[c] / 1e6);
        if (p->bd.hidden_known) td_ms(b, p->bd.hidden_median_ns[c] / 1e6);
        else rpt_puts(b, "<td class=\"n\">n/a</td>");
        rpt_puts(b, "</tr>\n");
    }
    if (used) {
        rpt_puts(b, "<tr id=\"breakdown-total\"><th>step (mean)</th>");
        td_ms(b, wall / (double)used);
        rpt_puts(b, "<td class=\"n\">100%</td><td class=\"n\">");
        char t[64];
        rpt_fmt_ms(pg->h->profiled_ms, t, sizeof(t));
        num_span(b, "profiled-step-ms", "profiled_step_ms_median", pg->h->profiled_ms, t);
        rpt_puts(b, "</td><td></td></tr>\n");
    }
    rpt_puts(b, "</table><p class=\"meta\">Categories partition each step on the main thread (docs/attribution.md). The mean "
                "ms/step and the share are one measure (the category's total over the profiled steps) and both add up to the mean "
                "step; the median column is each category's own median, which need not add up (its total row is the median "
                "step). Hidden: work on other threads overlapping the step (median).</p>");
    if (p->sampler_dispatch_share >= 0) {
        double d = p->bd.share[MST_CAT_DISPATCH], k = p->bd.share[MST_CAT_KERNEL], instrumented = d + k > 0 ? 100 * d / (d + k) : 0;
        if (p->sampler_samples >= MST_SAMPLER_MIN_SHARE_SAMPLES)
            rpt_printf(b, "<p class=\"meta\">Dispatch share of op time: instrumented %.1f%%, sampled %.1f%% (%lld main-thread samples; a cross-check).</p>",
                       instrumented, 100 * p->sampler_dispatch_share, (long long)p->sampler_samples);
        else
            rpt_printf(b, "<p class=\"meta\">Dispatch share of op time: instrumented %.1f%%; the sampler's %lld main-thread samples are too few to cross-check it.</p>",
                       instrumented, (long long)p->sampler_samples);
    }
    rpt_puts(b, "</div></div>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_STEPS);
    /* step-time distribution */
    int64_t k = 0;
    double *w = malloc((size_t)(p->n_used ? p->n_used : 1) * sizeof(double));
    if (w) {
        for (int64_t i = 0; i < p->n_steps; i++)
            if (p->steps[i].used) w[k++] = p->steps[i].wall_ms;
        qsort(w, (size_t)k, sizeof(double), cmp_double);
        double med = rpt_median(w, k);
        rpt_puts(b, "<div class=\"tables\"><table id=\"step-stats\"><tr><th>step wall time</th><th>ms</th></tr>\n");
        const struct { const char *name; double q; } rows[] = {{"min", 0}, {"5th percentile", 0.05}, {"median", -1},
                                                               {"95th percentile", 0.95}, {"max", 1}};
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]) && k > 0; r++) {
            double v = rows[r].q < 0 ? med : w[(int64_t)fmin((double)(k - 1), fmax(0.0, ceil(rows[r].q * (double)k) - 1))];
            rpt_printf(b, "<tr><td>%s</td>", rows[r].name);
            td_ms(b, v);
            rpt_puts(b, "</tr>\n");
        }
        rpt_printf(b, "<tr><td>steps</td><td class=\"n\">%lld of %lld</td></tr></table></div>", (long long)k, (long long)p->n_steps);
        free(w);
    }
    rpt_puts(b, "</div>\n</section>\n");
}

static void throughput_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    const rpt_headline *h = pg->h;
    rpt_puts(b, "<section id=\"throughput-section\"><h2>Throughput</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_THROUGHPUT);
    rpt_puts(b, "<div class=\"tables\"><table><tr><th>measure</th><th>value</th></tr>\n");
    char t[64];
    if (h->samples_per_s >= 0) {
        rpt_fmt_rate(h->samples_per_s, t, sizeof(t));
        rpt_printf(b, "<tr><td>samples/s (%s)</td><td class=\"n\">%s</td></tr>\n", h->summary_given ? "summary.json" : "profile", t);
    }
    rpt_fmt_rate(h->steps_per_s, t, sizeof(t));
    rpt_printf(b, "<tr><td>steps/s</td><td class=\"n\">%s</td></tr>\n", t);
    if (p->batch_size > 0) rpt_printf(b, "<tr><td>batch size</td><td class=\"n\">%lld</td></tr>\n", (long long)p->batch_size);
    if (h->samples_processed >= 0) rpt_printf(b, "<tr><td>samples processed</td><td class=\"n\">%.0f</td></tr>\n", h->samples_processed);
    if (h->train_loop_s > 0) rpt_printf(b, "<tr><td>training loop (s)</td><td class=\"n\">%.3f</td></tr>\n", h->train_loop_s);
    rpt_fmt_ms(h->step_ms, t, sizeof(t));
    rpt_printf(b, "<tr><td>median step (ms)</td><td class=\"n\">%s</td></tr>\n", t);
    rpt_puts(b, "</table><p class=\"meta\">Throughput is the samples the run actually processed over the wall time of its "
                "training loop (warm-up, compiles and data waits included; evaluation and checkpoints not): the figure "
                "<code>mstune train</code> prints and summary.json holds. The chart shows each step's own rate (batch size over "
                "the step's time) beside it.</p></div></div>\n</section>\n");
}

static void ops_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"ops\"><h2>Top ops</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_OPS);
    rpt_puts(b, "</div>\n");
    if (p->n_ops > 0) {
        double steps = p->bd.steps > 0 ? (double)p->bd.steps : 1, tot = p->ops_total_ns > 0 ? (double)p->ops_total_ns : 1;
        rpt_puts(b, "<table id=\"ops-table\"><tr><th>op</th><th>calls</th><th>total ms</th><th>ms/step</th><th>share of kernel time</th>"
                    "<th>mean µs</th><th>p50 µs</th><th>p95 µs</th><th>GFLOP/s</th><th>GB/s</th></tr>\n");
        for (int i = 0; i < p->n_ops && i < TOP_OPS_TABLE; i++) {
            const rpt_op *o = &p->ops[i];
            rpt_puts(b, "<tr>");
            td_text(b, o->name);
            rpt_printf(b, "<td class=\"n\">%lld</td>", (long long)o->calls);
            td_num(b, "%.3f", (double)o->total_ns / 1e6);
            td_ms(b, (double)o->total_ns / 1e6 / steps);
            td_num(b, "%.1f%%", 100.0 * (double)o->total_ns / tot);
            td_num(b, "%.2f", o->mean_ns / 1e3);
            td_num(b, "%.2f", o->p50_ns / 1e3);
            td_num(b, "%.2f", o->p95_ns / 1e3);
            td_num(b, "%.2f", o->gflops);
            td_num(b, "%.2f", o->gbps);
            rpt_puts(b, "</tr>\n");
        }
        rpt_puts(b, "</table>\n");
        if (p->n_ops > TOP_OPS_TABLE) rpt_printf(b, "<p class=\"meta\">%d more ops in the op_stats table.</p>", p->n_ops - TOP_OPS_TABLE);
        rpt_puts(b, "<p class=\"meta\">Kernel time of the main thread in profiled steps; achieved GFLOP/s and GB/s from the op "
                    "table's FLOP and byte formulas over kernel time.</p>\n");
    }
    rpt_puts(b, "</section>\n");
}

static void training_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"training\"><h2>Training curves</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_LOSS);
    rpt_puts(b, "<div class=\"tables\">");
    const cJSON *ep = cJSON_GetObjectItem(pg->h->summary, "epoch_records");
    if (cJSON_IsArray(ep) && cJSON_GetArraySize(ep) > 0) {
        rpt_puts(b, "<table id=\"epochs\"><tr><th>epoch</th><th>steps</th><th>wall s</th><th>train loss</th><th>val ");
        rpt_html(b, pg->h->metric.label);
        if (pg->h->metric.unit[0]) {
            rpt_puts(b, " (");
            rpt_html(b, pg->h->metric.unit);
            rpt_puts(b, ")");
        }
        rpt_puts(b, "</th><th>val loss</th></tr>\n");
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, ep) {
            const char *keys[] = {"steps", "wall_s", "train_loss", NULL, "val_loss"};
            rpt_printf(b, "<tr><td class=\"n\">%d</td>", ++i);
            for (int k = 0; k < 5; k++) {
                double mv = k == 3 ? rpt_metric_epoch(&pg->h->metric, e) : NAN;
                const cJSON *v = keys[k] ? cJSON_GetObjectItem(e, keys[k]) : NULL;
                if (k == 3 && isnan(mv)) rpt_puts(b, "<td class=\"n\">none</td>");
                else if (k == 3) td_num(b, "%.2f", mv * pg->h->metric.scale);
                else if (!cJSON_IsNumber(v)) rpt_puts(b, "<td class=\"n\">n/a</td>");
                else if (k == 0) td_num(b, "%.0f", v->valuedouble);
                else td_num(b, "%.4f", v->valuedouble);
            }
            rpt_puts(b, "</tr>\n");
        }
        rpt_puts(b, "</table>");
    }
    if (p->n_loss > 0) {
        double lo = INFINITY, first = NAN, last = NAN;
        for (int64_t i = 0; i < p->n_steps; i++) {
            if (!p->steps[i].has_loss) continue;
            if (isnan(first)) first = p->steps[i].loss;
            last = p->steps[i].loss;
            lo = fmin(lo, last);
        }
        rpt_printf(b, "<table id=\"loss-table\"><tr><th>training loss</th><th>value</th></tr>\n"
                      "<tr><td>first step</td><td class=\"n\">%.5g</td></tr><tr><td>last step</td><td class=\"n\">%.5g</td></tr>"
                      "<tr><td>lowest</td><td class=\"n\">%.5g</td></tr><tr><td>steps with a loss</td><td class=\"n\">%lld</td></tr>"
                      "</table>",
                   first, last, lo, (long long)p->n_loss);
    }
    rpt_puts(b, "</div></div>\n");
    if (pg->charts[RPT_CH_SCALE].state != RPT_CHART_NO_DATA) {
        rpt_puts(b, "<div class=\"row\">");
        figure(b, pg, RPT_CH_SCALE);
        rpt_printf(b, "<div class=\"tables\"><table id=\"scale-table\"><tr><th>loss scaling</th><th>value</th></tr>\n"
                      "<tr><td>steps with a scale</td><td class=\"n\">%lld</td></tr><tr><td>overflow steps (skipped)</td>"
                      "<td class=\"n\" id=\"overflow-steps\">%lld</td></tr></table></div></div>\n",
                   (long long)p->n_scale, (long long)p->n_overflow);
    } else {
        rpt_puts(b, "<p class=\"meta\">Loss scale: ");
        rpt_html(b, pg->charts[RPT_CH_SCALE].why_none);
        rpt_puts(b, ".</p>\n");
    }
    rpt_puts(b, "</section>\n");
}

static void memory_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"memory\"><h2>Memory</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_MEMORY);
    if (p->n_peaks > 0 || p->n_mem_steps > 0) {
        rpt_puts(b, "<div class=\"tables\"><table id=\"memory-table\"><tr><th>category</th><th>peak (any time)</th>"
                    "<th>at the peak step</th></tr>\n");
        int64_t at = -1;
        for (int64_t i = 0; i < p->n_mem_steps; i++)
            if (p->mem_steps[i] == p->mem_peak_step) at = i;
        for (int i = 0; i < p->n_peaks; i++) {
            char t[32];
            rpt_puts(b, "<tr>");
            td_text(b, p->peak_cat[i]);
            rpt_fmt_bytes((double)p->peak_bytes[i], t, sizeof(t));
            rpt_printf(b, "<td class=\"n\">%s</td>", t);
            int c = -1;
            for (int k = 0; k < p->n_mem_cats; k++)
                if (strcmp(p->mem_cat[k], p->peak_cat[i]) == 0) c = k;
            if (at >= 0 && c >= 0 && p->mem_bytes[c][at] >= 0) {
                rpt_fmt_bytes((double)p->mem_bytes[c][at], t, sizeof(t));
                rpt_printf(b, "<td class=\"n\">%s</td>", t);
            } else {
                rpt_puts(b, "<td class=\"n\">n/a</td>");
            }
            rpt_puts(b, "</tr>\n");
        }
        if (p->mem_peak_step_total >= 0) {
            char t[32];
            rpt_fmt_bytes((double)p->mem_peak_step_total, t, sizeof(t));
            rpt_printf(b, "<tr><th>total</th><td></td><td class=\"n\">%s (step %lld)</td></tr>\n", t, (long long)p->mem_peak_step);
        }
        rpt_puts(b, "</table><p class=\"meta\">Bytes in use per allocator category: the peak of each over the whole run, and "
                    "each category at the step where their sum peaked.</p></div>");
    }
    rpt_puts(b, "</div>\n</section>\n");
}

typedef struct {
    const char *name;
    size_t len;
    int64_t count;
} leaf;

static int leaf_cmp(const void *a, const void *b) {
    const leaf *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void flame_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"flame\"><h2>Where the CPU was: flame graph</h2>\n");
    if (p->samples_total == 0) {
        rpt_puts(b, "<p class=\"nochart\">No stack samples in this profile (the sampler is profile.sampler; it was off or the run "
                    "was too short).</p>\n</section>\n");
        return;
    }
    rpt_printf(b, "<object data=\"%s\" type=\"image/svg+xml\" aria-label=\"flame graph\"><a href=\"%s\">flame.svg</a></object>\n",
               pg->flame_file, pg->flame_file);
    rpt_printf(b, "<p class=\"meta\">%lld stack samples (%.0f Hz per thread), %lld distinct frames drawn%s. Each box is a function; "
                  "its width is its share of samples, the boxes above it are what it called. Hover a box for its numbers, or open "
                  "<a href=\"%s\">flame.svg</a> on its own.</p>\n",
               (long long)p->samples_total, p->sampler_hz, (long long)pg->flame_frames,
               pg->flame_pruned > 0 ? " (very narrow frames left out)" : "", pg->flame_file);
    /* self time: the leaf frame of each stack */
    leaf *lv = calloc((size_t)p->n_samples, sizeof(leaf));
    int64_t n = 0;
    if (lv) {
        for (int64_t i = 0; i < p->n_samples; i++) {
            const char *s = p->samples[i].stack, *semi = strrchr(s, ';');
            const char *name = semi ? semi + 1 : s;
            size_t len = strlen(name);
            int64_t k = 0;
            while (k < n && !(lv[k].len == len && memcmp(lv[k].name, name, len) == 0)) k++;
            if (k == n) lv[n++] = (leaf){name, len, 0};
            lv[k].count += p->samples[i].count;
        }
        qsort(lv, (size_t)n, sizeof(leaf), leaf_cmp);
        rpt_puts(b, "<table id=\"leaf-table\"><tr><th>function (innermost frame)</th><th>samples</th><th>share</th></tr>\n");
        for (int64_t i = 0; i < n && i < TOP_LEAVES; i++) {
            char name[1024];
            snprintf(name, sizeof(name), "%.*s", (int)(lv[i].len < 1000 ? lv[i].len : 1000), lv[i].name);
            rpt_puts(b, "<tr>");
            td_text(b, name);
            rpt_printf(b, "<td class=\"n\">%lld</td>", (long long)lv[i].count);
            td_num(b, "%.1f%%", 100.0 * (double)lv[i].count / (double)p->samples_total);
            rpt_puts(b, "</tr>\n");
        }
        rpt_puts(b, "</table>\n");
        free(lv);
    }
    rpt_puts(b, "</section>\n");
}

static void trials_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    if (p->n_trials == 0) return;
    rpt_puts(b, "<section id=\"trials\"><h2>Advisor trials</h2>\n<div class=\"row\">");
    figure(b, pg, RPT_CH_TRIALS);
    rpt_puts(b, "</div>\n<table id=\"trials-table\"><tr><th>rule</th><th>evidence</th><th>change</th><th>status</th>"
                "<th>predicted</th><th>measured</th><th>interval</th><th>memory</th><th>accuracy (pp)</th><th>reason</th></tr>\n");
    for (int i = 0; i < p->n_trials; i++) {
        const rpt_trial *t = &p->trials[i];
        rpt_puts(b, "<tr>");
        td_text(b, t->rule);
        td_text(b, t->evidence);
        td_text(b, t->change);
        td_text(b, t->status);
        if (isnan(t->predicted)) rpt_puts(b, "<td class=\"n\">n/a</td>");
        else td_num(b, "%.3fx", t->predicted);
        if (isnan(t->measured)) rpt_puts(b, "<td class=\"n\">n/a</td>");
        else td_num(b, "%.3fx", t->measured);
        if (isnan(t->ci_low) || isnan(t->ci_high)) rpt_puts(b, "<td class=\"n\">n/a</td>");
        else rpt_printf(b, "<td class=\"n\">%.3f–%.3f</td>", t->ci_low, t->ci_high);
        if (t->has_memory_delta) {
            char m[32];
            rpt_fmt_bytes((double)t->memory_delta, m, sizeof(m));
            rpt_printf(b, "<td class=\"n\">%s%s</td>", t->memory_delta > 0 ? "+" : "", m);
        } else {
            rpt_puts(b, "<td class=\"n\">n/a</td>");
        }
        if (isnan(t->accuracy_delta)) rpt_puts(b, "<td class=\"n\">n/a</td>");
        else td_num(b, "%+.2f", t->accuracy_delta);
        td_text(b, t->reason);
        rpt_puts(b, "</tr>\n");
    }
    rpt_puts(b, "</table>\n</section>\n");
}

/* ---- the advisor's results (advice.json), first on an advise report ---- */

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The job config's value at a dotted path, as JSON text ("(unset)" when absent). */
static void config_value(const cJSON *config, const char *path, char *out, size_t n) {
    const cJSON *v = config;
    char part[128];
    for (const char *p = path; v && *p;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(part, sizeof(part), "%.*s", (int)len, p);
        v = cJSON_GetObjectItemCaseSensitive(v, part);
        p += len + (dot ? 1 : 0);
    }
    char *t = v && v != config ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(out, n, "%s", t ? t : "(unset)");
    cJSON_free(t);
}

static void td_ratio(rpt_buf *b, double v) {
    if (isnan(v)) rpt_puts(b, "<td class=\"n\">n/a</td>");
    else td_num(b, "%.3fx", v);
}

static void advice_row(rpt_buf *b, const char *num, const char *rule, const char *finding, const char *change,
                       double predicted, const cJSON *res) {
    rpt_puts(b, "<tr>");
    td_text(b, num);
    td_text(b, rule);
    td_text(b, finding);
    td_text(b, change);
    td_ratio(b, predicted);
    td_ratio(b, jnum(res, "speedup"));
    double lo = jnum(res, "ci_low"), hi = jnum(res, "ci_high");
    if (isnan(lo) || isnan(hi)) rpt_puts(b, "<td class=\"n\">n/a</td>");
    else rpt_printf(b, "<td class=\"n\">%.3f–%.3f</td>", lo, hi);
    double acc = jnum(res, "accuracy_delta_pp"), mem = jnum(res, "memory_delta_bytes");
    if (isnan(acc)) rpt_puts(b, "<td class=\"n\">n/a</td>");
    else td_num(b, "%+.2f", acc);
    if (isnan(mem)) rpt_puts(b, "<td class=\"n\">n/a</td>");
    else {
        char m[32];
        rpt_fmt_bytes(fabs(mem), m, sizeof(m));
        rpt_printf(b, "<td class=\"n\">%s%s</td>", mem > 0 ? "+" : mem < 0 ? "-" : "", m);
    }
    rpt_puts(b, "<td class=\"verdict-cell\">");
    rpt_html(b, jstr(res, "verdict"));
    rpt_puts(b, "</td>");
    td_text(b, jstr(res, "reason"));
    rpt_puts(b, "</tr>\n");
}

static void advice_section(rpt_buf *b, const rpt_page *pg) {
    const cJSON *a = pg->advice;
    rpt_puts(b, "<section id=\"advice\"><h2>Advice</h2>\n<p class=\"verdict\" id=\"advice-outcome\">");
    rpt_html(b, *jstr(a, "outcome") ? jstr(a, "outcome") : "No outcome recorded in advice.json.");
    rpt_puts(b, "</p>\n<table id=\"advice-table\"><tr><th>#</th><th>rule</th><th>finding</th><th>change</th><th>predicted</th>"
                "<th>measured</th><th>interval</th><th>accuracy (pp)</th><th>memory</th><th>verdict</th><th>reason</th></tr>\n");
    const cJSON *f;
    int i = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(a, "findings")) {
        char num[16];
        snprintf(num, sizeof(num), "%d", ++i);
        advice_row(b, num, jstr(f, "rule"), jstr(f, "title"), jstr(f, "change"), jnum(f, "predicted_speedup"),
                   cJSON_GetObjectItemCaseSensitive(f, "result"));
    }
    const cJSON *comb = cJSON_GetObjectItemCaseSensitive(a, "combined");
    if (cJSON_IsObject(comb)) {
        char sets[1024] = "";
        size_t k = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(comb, "sets"))
            if (cJSON_IsString(s) && k < sizeof(sets)) k += (size_t)snprintf(sets + k, sizeof(sets) - k, "%s%s", k ? ", " : "", s->valuestring);
        advice_row(b, "all", "combined", "the accepted changes together", sets, NAN, cJSON_GetObjectItemCaseSensitive(comb, "result"));
    }
    rpt_puts(b, "</table>\n");
    /* tuned.yaml against the job: one -/+ pair per applied override */
    const cJSON *applied = cJSON_GetObjectItemCaseSensitive(a, "applied");
    if (cJSON_GetArraySize(applied) == 0) {
        rpt_puts(b, "<p id=\"tuned-diff-none\">tuned.yaml is the job unchanged: no change was accepted.</p>\n");
    } else {
        rpt_puts(b, "<p>tuned.yaml against the job (keys it changes):</p>\n<pre id=\"tuned-diff\">");
        const cJSON *s;
        cJSON_ArrayForEach(s, applied) {
            if (!cJSON_IsString(s)) continue;
            const char *eq = strchr(s->valuestring, '=');
            char key[256], old[256];
            snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - s->valuestring) : (int)strlen(s->valuestring), s->valuestring);
            config_value(pg->p->config, key, old, sizeof(old));
            rpt_puts(b, "- ");
            rpt_html(b, key);
            rpt_puts(b, ": ");
            rpt_html(b, old);
            rpt_puts(b, "\n+ ");
            rpt_html(b, key);
            rpt_puts(b, ": ");
            rpt_html(b, eq ? eq + 1 : "");
            rpt_puts(b, "\n");
        }
        rpt_puts(b, "</pre>\n");
    }
    rpt_printf(b, "<p class=\"meta\">From advice.json (advice.md says the same): every change ran as its own trial, %d runs each, "
                  "accuracy tolerance %g pp. The baseline's profile follows below.</p>\n</section>\n",
               (int)jnum(a, "repeats"), jnum(a, "tolerance_pp"));
}

static void run_section(rpt_buf *b, const rpt_page *pg) {
    const rpt_profile *p = pg->p;
    rpt_puts(b, "<section id=\"run\"><h2>Run</h2>\n<div class=\"row\"><table id=\"run-table\"><tr><th>key</th><th>value</th></tr>\n");
    for (int i = 0; i < p->n_meta; i++) {
        if (strcmp(p->meta_key[i], "config") == 0 || strcmp(p->meta_key[i], "profiler.cost_measured") == 0) continue;  /* shown below */
        rpt_puts(b, "<tr>");
        td_text(b, p->meta_key[i]);
        td_text(b, p->meta_value[i]);
        rpt_puts(b, "</tr>\n");
    }
    rpt_puts(b, "</table><table id=\"health-table\"><tr><th>profiler</th><th>value</th></tr>\n");
    if (p->overhead_share >= 0) rpt_printf(b, "<tr><td>overhead (estimated)</td><td class=\"n\">%.2f%%</td></tr>\n", 100 * p->overhead_share);
    const char *measured = rpt_profile_meta(p, "profiler.cost_measured");
    if (measured) {
        rpt_puts(b, "<tr><td>cost measured in this run (off vs recording steps)</td>");
        td_text(b, measured);
        rpt_puts(b, "</tr>\n");
    }
    rpt_printf(b, "<tr><td>records dropped</td><td class=\"n\">%lld</td></tr>\n", (long long)p->events_dropped);
    rpt_printf(b, "<tr><td>threads</td><td class=\"n\">%lld</td></tr>\n", (long long)p->n_threads);
    rpt_printf(b, "<tr><td>steps recorded</td><td class=\"n\">%lld</td></tr>\n", (long long)p->n_steps);
    rpt_printf(b, "<tr><td>steps with unmatched ranges</td><td class=\"n\">%lld</td></tr>\n", (long long)p->n_unmatched_steps);
    rpt_puts(b, "</table></div>\n");
    if (pg->have_trace) {
        rpt_puts(b, "<p id=\"trace-link\">Trace: <a href=\"");
        rpt_html(b, pg->trace_href);
        rpt_puts(b, "\">trace.json</a> (Chrome trace format). Open it at ui.perfetto.dev (\"Open trace file\"; the file stays on "
                    "this machine) or in chrome://tracing; steps are named ProfilerStep#N, as PyTorch names them, so HTA and "
                    "TensorBoard's profiler plugin can segment them.</p>\n");
    }
    if (p->config) {
        char *cfg = cJSON_Print(p->config);
        if (cfg) {
            rpt_puts(b, "<details><summary>Job config</summary><pre>");
            rpt_html(b, cfg);
            rpt_puts(b, "</pre></details>\n");
            cJSON_free(cfg);
        }
    }
    rpt_puts(b, "</section>\n");
}

int rpt_html_write(const rpt_page *pg, const char *path, char *err, size_t errn) {
    const rpt_profile *p = pg->p;
    rpt_buf b = {0};
    const char *name = *p->job_name ? p->job_name : "profile";
    rpt_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>mstune report: ");
    rpt_html(&b, name);
    rpt_printf(&b, "</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n<header><h1>", rpt_css);
    rpt_html(&b, name);
    if (*p->model_name) {
        rpt_puts(&b, " <span class=\"model\">");
        rpt_html(&b, p->model_name);
        rpt_puts(&b, "</span>");
    }
    rpt_puts(&b, "</h1>\n<p class=\"meta\">profile <code>");
    rpt_html(&b, p->path);
    rpt_printf(&b, "</code> · %lld steps recorded, %lld profiled · profiler level %d", (long long)p->n_steps, (long long)p->bd.steps,
               p->level);
    if (p->level >= 1 && p->op_every > 1) rpt_printf(&b, ", ops on one step in %d", p->op_every);     /* profiled = those steps */
    const char *rev = rpt_profile_meta(p, "git_revision"), *host = rpt_profile_meta(p, "host"), *cpu = rpt_profile_meta(p, "cpu_model");
    if (rev) {
        rpt_puts(&b, " · revision ");
        rpt_html(&b, rev);
    }
    if (host) {
        rpt_puts(&b, " · host ");
        rpt_html(&b, host);
    }
    if (cpu) {
        rpt_puts(&b, " · ");
        rpt_html(&b, cpu);
    }
    const char *feats = rpt_profile_meta(p, "cpu_features");
    if (feats && *feats) {
        rpt_puts(&b, " (");
        rpt_html(&b, feats);
        rpt_puts(&b, ")");
    }
    rpt_puts(&b, "</p></header>\n");
    if (pg->advice) {
        advice_section(&b, pg);
        trials_section(&b, pg);
    }
    answer(&b, pg);
    notices(&b, pg);
    rpt_puts(&b, "<nav>");
    if (pg->advice) rpt_puts(&b, "<a href=\"#advice\">advice</a>");
    rpt_puts(&b, "<a href=\"#breakdown\">breakdown</a><a href=\"#throughput-section\">throughput</a><a href=\"#ops\">top ops</a>"
                 "<a href=\"#training\">training</a><a href=\"#memory\">memory</a><a href=\"#flame\">flame graph</a>");
    if (p->n_trials > 0) rpt_puts(&b, "<a href=\"#trials\">advisor trials</a>");
    if (pg->ranks && pg->ranks->n > 1) rpt_puts(&b, "<a href=\"#ranks\">ranks</a>");
    rpt_puts(&b, "<a href=\"#run\">run</a><a href=\"summary.json\">summary.json</a><a href=\"summary.md\">summary.md</a></nav>\n");
    ranks_section(&b, pg);
    breakdown_section(&b, pg);
    throughput_section(&b, pg);
    ops_section(&b, pg);
    training_section(&b, pg);
    memory_section(&b, pg);
    flame_section(&b, pg);
    if (!pg->advice) trials_section(&b, pg);
    run_section(&b, pg);
    if (pg->next_hint) {
        rpt_puts(&b, "<p class=\"verdict2\" id=\"next-step\">");
        rpt_html(&b, pg->next_hint);
        rpt_puts(&b, "</p>\n");
    }
    rpt_puts(&b, "<footer>Written by mstune report. Times are medians over the profiled (non-warm-up) steps unless a label says "
                 "otherwise; docs/report.md explains every chart.</footer>\n</main>\n</body>\n</html>\n");
    int rc = rpt_buf_write(&b, path, err, errn);
    rpt_buf_free(&b);
    return rc;
}
