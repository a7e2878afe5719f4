/* markdown.c — summary.md: the headline, the verdict, the breakdown table and the top ops in
 * GitHub-flavoured Markdown, short enough for a CI job summary ($GITHUB_STEP_SUMMARY). The
 * figures are the same ones index.html leads with. */
#include <stdio.h>

#include "report/ranks.h"
#include "report/render.h"

#define TOP_OPS_MD 5

int rpt_markdown_write(const rpt_page *pg, const char *path, char *err, size_t errn) {
    const rpt_profile *p = pg->p;
    const rpt_headline *h = pg->h;
    rpt_buf b = {0};
    char t[64], verdict[1024], second[512];
    rpt_puts(&b, "## mstune profile: ");
    rpt_md(&b, *p->job_name ? p->job_name : "profile");
    if (*p->model_name) {
        rpt_puts(&b, " (");
        rpt_md(&b, p->model_name);
        rpt_puts(&b, ")");
    }
    rpt_verdict(p, h, verdict, sizeof(verdict));
    rpt_verdict_second(p, h, second, sizeof(second));
    rpt_puts(&b, "\n\n> **");
    rpt_md(&b, verdict);
    rpt_puts(&b, "**");
    if (*second) {
        rpt_puts(&b, "\n> ");
        rpt_md(&b, second);
    }
    rpt_puts(&b, "\n\n| step time (median) | throughput | biggest bucket | validation ");
    rpt_md(&b, h->metric.label);
    rpt_puts(&b, " | peak memory |\n|---:|---:|---|---:|---:|\n| ");
    rpt_fmt_ms(h->step_ms, t, sizeof(t));
    rpt_printf(&b, "%s ms | ", t);
    if (h->samples_per_s >= 0) {
        rpt_fmt_rate(h->samples_per_s, t, sizeof(t));
        rpt_printf(&b, "%s samples/s | ", t);
    } else {
        rpt_fmt_rate(h->steps_per_s, t, sizeof(t));
        rpt_printf(&b, "%s steps/s | ", t);
    }
    int top = MST_CAT_KERNEL;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (h->share[c] > h->share[top]) top = c;
    rpt_printf(&b, "%s %.1f%% | ", mst_prof_cat_name((mst_prof_cat)top), 100 * h->share[top]);
    rpt_metric_fmt(&h->metric, h->metric.value, t, sizeof(t));
    rpt_md(&b, t);
    rpt_puts(&b, " | ");
    if (h->peak_memory_bytes >= 0) {
        rpt_fmt_bytes(h->peak_memory_bytes, t, sizeof(t));
        rpt_printf(&b, "%s |\n", t);
    } else {
        rpt_puts(&b, "n/a |\n");
    }
    if (h->mismatch[0]) {
        rpt_puts(&b, "\n**Warning:** ");
        rpt_md(&b, h->mismatch);
        rpt_puts(&b, "\n");
    }
    if (p->events_dropped > 0) rpt_printf(&b, "\n**Warning:** the store dropped %lld profiler records.\n", (long long)p->events_dropped);
    rpt_fmt_ms(h->profiled_ms, t, sizeof(t));
    rpt_printf(&b, "\n### Step time breakdown\n\nMedian per step over %lld profiled steps (median step %s ms).\n\n"
                   "| category | ms/step | share | hidden ms/step |\n|---|---:|---:|---:|\n",
               (long long)p->bd.steps, t);
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        char ms[32], hid[32];
        rpt_fmt_ms(p->bd.median_ns[c] / 1e6, ms, sizeof(ms));
        if (p->bd.hidden_known) rpt_fmt_ms(p->bd.hidden_median_ns[c] / 1e6, hid, sizeof(hid));
        else snprintf(hid, sizeof(hid), "n/a");
        rpt_printf(&b, "| %s | %s | %.1f%% | %s |\n", mst_prof_cat_name((mst_prof_cat)c), ms, 100 * h->share[c], hid);
    }
    if (p->n_ops > 0) {
        double steps = p->bd.steps > 0 ? (double)p->bd.steps : 1, tot = p->ops_total_ns > 0 ? (double)p->ops_total_ns : 1;
        rpt_puts(&b, "\n### Top ops by kernel time\n\n| op | calls | ms/step | share of kernel time | GFLOP/s |\n|---|---:|---:|---:|---:|\n");
        for (int i = 0; i < p->n_ops && i < TOP_OPS_MD; i++) {
            const rpt_op *o = &p->ops[i];
            char ms[32];
            rpt_fmt_ms((double)o->total_ns / 1e6 / steps, ms, sizeof(ms));
            rpt_puts(&b, "| ");
            rpt_md(&b, o->name);
            rpt_printf(&b, " | %lld | %s | %.1f%% | %.1f |\n", (long long)o->calls, ms, 100.0 * (double)o->total_ns / tot, o->gflops);
        }
    }
    const rpt_ranks *rk = pg->ranks;
    if (rk && rk->n > 1) {
        rpt_printf(&b, "\n### Ranks\n\n");
        if (rk->slowest >= 0)
            rpt_printf(&b, "%d ranks; the slowest is rank %d; imbalance (max - min) / mean %.1f%%%s.\n\n", rk->n, rk->slowest,
                       100 * rk->imbalance, rk->flagged ? ": **above 5%, a slow rank holds the others back**" : ", within 5%");
        else
            rpt_printf(&b, "%d ranks, but fewer than two profiles could be read.\n\n", rk->n);
        rpt_puts(&b, "| rank | step median ms | step mean ms | exposed comm ms/step | hidden comm ms/step | all-reduces/step | bytes/step "
                     "| GB/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int k = 0; k < rk->n; k++) {
            const rpt_rank_row *r = &rk->rows[k];
            rpt_printf(&b, "| %d%s | ", k, k == rk->slowest ? " (slowest)" : "");
            if (!r->ok) {
                rpt_md(&b, r->path);
                rpt_puts(&b, ": ");
                rpt_md(&b, r->problem);
                rpt_puts(&b, " | | | | | | | |\n");
                continue;
            }
            char med[32], mean[32], ex[32], hid[32], by[32];
            rpt_fmt_ms(r->step_ms_median, med, sizeof(med));
            rpt_fmt_ms(r->step_ms_mean, mean, sizeof(mean));
            if (!r->has_comm) {
                rpt_printf(&b, "%s | %s | n/a | n/a | n/a | n/a | n/a |\n", med, mean);
                continue;
            }
            rpt_fmt_ms(r->exposed_ms, ex, sizeof(ex));
            rpt_fmt_ms(r->hidden_ms, hid, sizeof(hid));
            rpt_fmt_bytes(r->bytes, by, sizeof(by));
            rpt_printf(&b, "%s | %s | %s | %s | %.1f | %s | %.3g |\n", med, mean, ex, hid, r->calls, by, r->gbps);
        }
    }
    rpt_puts(&b, "\nThe full report (charts, memory, flame graph) is index.html in the same folder.\n");
    int rc = rpt_buf_write(&b, path, err, errn);
    rpt_buf_free(&b);
    return rc;
}
