/* report.c — mst_report_render: read the profile, settle summary.json (the run's own, copied
 * byte for byte, or one regenerated from the database), draw the charts when gnuplot is there,
 * write flame.svg, summary.json, summary.md and, last, index.html — so a folder with an
 * index.html is a complete report. Chart files this render did not draw are removed, so an
 * older chart never sits beside a page that does not show it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/flamegraph.h"
#include "report/ranks.h"
#include "util/fsutil.h"
#include "report/render.h"
#include "report/report.h"

static int out_path(char *path, size_t n, const char *dir, const char *name, char *err, size_t errn) {
    if (rpt_join(path, n, dir, name) == 0) return 0;
    snprintf(err, errn, "output folder '%s': path too long", dir);
    return -1;
}

int mst_report_render(const char *db_path, const char *summary_json_path, const char *out_dir, char *err, size_t errn) {
    return mst_report_render_with(db_path, summary_json_path, out_dir, NULL, err, errn);
}

/* trace.json beside the profile (mstune profile writes it there), as a link from out_dir: relative
 * when both paths are relative or both absolute, else absolute. */
static bool trace_link(const char *db_path, const char *out_dir, char *href, size_t n) {
    char trace[4096];
    const char *slash = strrchr(db_path, '/');
    snprintf(trace, sizeof(trace), "%.*strace.json", slash ? (int)(slash - db_path + 1) : 0, db_path);
    if (access(trace, R_OK) != 0) return false;
    char *rt = realpath(trace, NULL), *ro = realpath(out_dir, NULL);
    bool ok = rt && ro;
    if (ok) {
        /* common prefix by path components, then one ../ per remaining component of out_dir */
        size_t i = 0, last = 0;
        while (rt[i] && rt[i] == ro[i]) {
            if (rt[i] == '/') last = i;
            i++;
        }
        if (!ro[i] && rt[i] == '/') last = i;
        size_t k = 0;
        href[0] = '\0';
        for (const char *q = ro + last; *q; q++)
            if (*q == '/' && k + 4 < n) k += (size_t)snprintf(href + k, n - k, "../");
        snprintf(href + k, n - k, "%s", rt + last + 1);
    }
    free(rt);
    free(ro);
    return ok;
}

int mst_report_render_with(const char *db_path, const char *summary_json_path, const char *out_dir,
                           const mst_report_extras *extras, char *err, size_t errn) {
    if (!db_path || !out_dir) {
        snprintf(err, errn, "report: %s is required", !db_path ? "the profile path" : "the output folder");
        return -1;
    }
    rpt_profile p;
    if (rpt_profile_load(&p, db_path, err, errn) != 0) return -1;
    char *shown = extras && extras->profile_shown ? strdup(extras->profile_shown) : NULL;
    if (shown) {        /* named on the page (and in a regenerated summary) as the reader will find it */
        free(p.path);
        p.path = shown;
    }
    int rc = -1;
    cJSON *advice = NULL;
    char *summary_text = NULL;
    size_t summary_len = 0;
    cJSON *summary = NULL;
    rpt_chart charts[RPT_CH_COUNT];
    rpt_ranks ranks = {.slowest = -1};
    char path[4096], chart_err[1024] = "";
    if (summary_json_path) {
        if (!(summary_text = rpt_read_file(summary_json_path, &summary_len, err, errn))) goto out;
        summary = cJSON_Parse(summary_text);
        if (!cJSON_IsObject(summary)) {
            snprintf(err, errn, "summary '%s': not a JSON object%s", summary_json_path, summary ? "" : " (cannot parse it)");
            goto out;
        }
    } else {
        /* printed and parsed back: cJSON prints 15 significant digits when they compare equal within
         * an epsilon, so the page must show what a reader of the file gets, not the unprinted double */
        cJSON *gen = rpt_summary_from_profile(&p);
        char *text = gen ? cJSON_Print(gen) : NULL;
        cJSON_Delete(gen);
        if (text) {
            summary_len = strlen(text);
            summary_text = malloc(summary_len + 2);
            if (summary_text) {
                memcpy(summary_text, text, summary_len);
                summary_text[summary_len++] = '\n';
                summary_text[summary_len] = '\0';
            }
        }
        cJSON_free(text);
        if (!summary_text || !(summary = cJSON_Parse(summary_text))) {
            snprintf(err, errn, "report for '%s': out of memory", db_path);
            goto out;
        }
    }
    if (extras && extras->advice_json_path) {
        char *text = rpt_read_file(extras->advice_json_path, NULL, err, errn);
        if (!text) goto out;
        advice = cJSON_Parse(text);
        free(text);
        if (!cJSON_IsObject(advice)) {
            snprintf(err, errn, "advice '%s': not a JSON object", extras->advice_json_path);
            goto out;
        }
    }
    if (mst_mkdirs(out_dir, err, errn) != 0) goto out;

    if (rpt_ranks_load(&ranks, &p, summary, err, errn) != 0) goto out;
    rpt_headline h;
    rpt_headline_fill(&h, &p, summary, summary_json_path != NULL);
    rpt_charts_plan(&p, &h, charts);
    bool gnuplot = mst_report_have_gnuplot();
    int failed = gnuplot ? rpt_charts_draw(&p, &h, charts, out_dir) : 0;
    for (int i = 0; i < RPT_CH_COUNT; i++) {
        if (charts[i].state == RPT_CHART_FAILED && !chart_err[0]) snprintf(chart_err, sizeof(chart_err), "%s", charts[i].error);
        if (charts[i].state != RPT_CHART_DRAWN && rpt_join(path, sizeof(path), out_dir, charts[i].file) == 0 && unlink(path) != 0 &&
            errno != ENOENT) {
            snprintf(err, errn, "cannot remove the stale chart '%s': %s", path, strerror(errno));
            goto out;
        }
    }

    rpt_flame_stats fs;
    char title[300];
    snprintf(title, sizeof(title), "%s", *p.job_name ? p.job_name : "profile");
    if (out_path(path, sizeof(path), out_dir, "flame.svg", err, errn) != 0 ||
        rpt_flamegraph_write(path, p.samples, p.n_samples, title, &fs, err, errn) != 0)
        goto out;
    if (out_path(path, sizeof(path), out_dir, "summary.json", err, errn) != 0 ||
        mst_write_atomic(path, summary_text, summary_len, err, errn) != 0)
        goto out;
    rpt_page pg = {&p, &h, charts, gnuplot, "flame.svg", fs.frames, fs.frames_pruned, advice, extras ? extras->next_hint : NULL};
    pg.ranks = &ranks;
    pg.have_trace = trace_link(db_path, out_dir, pg.trace_href, sizeof(pg.trace_href));
    if (out_path(path, sizeof(path), out_dir, "summary.md", err, errn) != 0 || rpt_markdown_write(&pg, path, err, errn) != 0)
        goto out;
    if (out_path(path, sizeof(path), out_dir, "index.html", err, errn) != 0 || rpt_html_write(&pg, path, err, errn) != 0)
        goto out;
    if (failed > 0) {
        snprintf(err, errn, "report written to '%s', but gnuplot failed on %d chart%s: %s", out_dir, failed, failed == 1 ? "" : "s",
                 chart_err);
        goto out;
    }
    rc = 0;
out:
    rpt_ranks_free(&ranks);
    cJSON_Delete(advice);
    cJSON_Delete(summary);
    free(summary_text);
    rpt_profile_free(&p);
    return rc;
}
