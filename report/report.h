/* report.h — the profile report and the comparison of two profiles.
 *
 * mst_report_render reads a profile database (docs/profile-schema.md) and writes a folder that
 * opens offline: index.html (inline CSS, no scripts, every embedded string escaped) that leads
 * with the answer — step time, throughput, the biggest bucket of the step and what to do about
 * it — then PNG charts drawn by gnuplot through a pipe with the exact numbers in tables beside
 * them, flame.svg (written here, not by gnuplot), summary.json and summary.md (for CI job
 * summaries). Without gnuplot the folder still renders: tables and a visible notice instead of
 * charts. mst_compare_render puts two profiles side by side. docs/report.md describes the pages.
 *
 * Usage:
 *     char err[1024];
 *     if (mst_report_render("run/profile.db", "run/summary.json", "run/report", err, sizeof err) != 0)
 *         fprintf(stderr, "mstune report: %s\n", err);
 *     if (mst_compare_render("a/profile.db", "b/profile.db", NULL, stdout, err, sizeof err) != 0)
 *         fprintf(stderr, "mstune compare: %s\n", err);
 *
 * The gnuplot program is `gnuplot` from PATH, or $MSTUNE_GNUPLOT when set (a name or a path);
 * MSTUNE_GNUPLOT=/nonexistent renders the no-charts variant.
 */
#ifndef MST_REPORT_REPORT_H
#define MST_REPORT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Render the report of the profile at db_path into out_dir (created if missing). summary_json_path
 * (may be NULL): the run's summary.json, copied verbatim into the folder and the source of the
 * headline's trainer figures (step_time_ms_median, samples_per_s, validation accuracy); when NULL
 * a summary.json is regenerated from the database alone. Every final file is replaced
 * atomically. 0; or -1 with a message naming the path that failed — including when the folder
 * was written but gnuplot failed on a chart (the page then says which chart). */
int mst_report_render(const char *db_path, const char *summary_json_path, const char *out_dir, char *err, size_t errn);

/* What a caller can add to the page. */
typedef struct {
    const char *advice_json_path;   /* `mstune advise`'s advice.json (advisor/deliver.c): findings, trial table,
                                     * verdicts and the tuned.yaml changes, first on the page */
    const char *next_hint;          /* a last line such as "next: mstune advise JOB (graph mode: ...)" */
    const char *profile_shown;      /* the profile's path as the page names it (NULL: db_path): a staged run's
                                     * database is named where promotion puts it (cli/outdir.h) */
} mst_report_extras;

/* mst_report_render with extras (NULL: none). An unreadable advice.json is an error naming it. */
int mst_report_render_with(const char *db_path, const char *summary_json_path, const char *out_dir,
                           const mst_report_extras *extras, char *err, size_t errn);

/* Compare profile A (db_a, the baseline) with B (db_b): median step time and each category per
 * step with deltas and ratios B/A, top ops matched by name, peak memory, validation accuracy
 * (from a summary.json beside each database, when it belongs to the same job). Prints a table on
 * terminal (may be NULL) and, when out_dir is not NULL, writes out_dir/index.html with grouped
 * bar charts. 0, or -1 with a message naming the path. */
int mst_compare_render(const char *db_a, const char *db_b, const char *out_dir, FILE *terminal, char *err, size_t errn);

/* True when the gnuplot program (see above) runs and has the pngcairo terminal. */
bool mst_report_have_gnuplot(void);

#endif
