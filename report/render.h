/* render.h — what the report's renderers share: the headline (the numbers the page leads with,
 * taken from summary.json so the page and the file agree exactly), the verdict sentence, the
 * chart list with each chart's one-line reading, and the writers of index.html, summary.md and
 * a summary.json regenerated from the database. mst_report_render (report.c) calls them in turn.
 */
#ifndef MST_REPORT_RENDER_H
#define MST_REPORT_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "report/profile_view.h"
#include "report/textbuf.h"

/* The job's metric as summary.json's "metric" describes it ({name, value, higher_is_better,
 * direction, label, unit, display_scale}); an older summary without it has accuracy only
 * (val_accuracy). Every renderer names and formats the job's metric through this. */
typedef struct {
    bool known;                 /* the summary names a metric (or has a val_accuracy >= 0) */
    char name[32];              /* "accuracy", "psnr" */
    char label[32];             /* "accuracy", "PSNR" */
    char unit[16];              /* of the displayed value: "%", "dB" */
    char diff_unit[16];         /* of a difference: "pp" for a percentage, else the unit */
    double scale;               /* summary value * scale = displayed value */
    bool higher_is_better;
    double value;               /* last evaluation, summary units; NAN when none ran */
} rpt_metric;

void rpt_metric_from_summary(const cJSON *summary, rpt_metric *m);
/* "83.44%", "18.70 dB": a value in summary units, displayed. */
void rpt_metric_fmt(const rpt_metric *m, double v, char *out, size_t n);
/* An epoch record's metric value (its val_metric, or val_accuracy in older summaries); NAN if none. */
double rpt_metric_epoch(const rpt_metric *m, const cJSON *epoch_record);

typedef struct {
    const cJSON *summary;       /* the summary.json the folder gets (given or regenerated) */
    bool summary_given;         /* false: regenerated from the database */
    double step_ms;             /* summary step_time_ms_median, else the profiled median */
    const char *step_key;       /* the summary key step_ms mirrors */
    double profiled_ms;         /* profiled_step_ms_median (the breakdown's steps) */
    double samples_per_s;       /* < 0 when unknown */
    double steps_per_s;         /* < 0 when unknown */
    double samples_processed;   /* summary.json's; < 0 when unknown */
    double train_loop_s;        /* summary.json's; < 0 when unknown */
    double share[7];            /* breakdown_share, by mst_prof_cat */
    double val_accuracy;        /* 0..1; < 0 when none ran or unknown */
    rpt_metric metric;          /* the job's metric (summary.json "metric") */
    double peak_memory_bytes;   /* < 0 when unknown */
    char mismatch[512];         /* non-empty: summary.json does not describe this profile */
} rpt_headline;

/* The run's throughput (samples when `samples`, else steps) from the profile alone: processed / the
 * training loop's wall time, as summary.json's samples_per_s; -1 when unknown. */
double rpt_profile_throughput(const rpt_profile *p, bool samples);
/* Headline from the summary (when it has the keys) and the profile otherwise. */
void rpt_headline_fill(rpt_headline *h, const rpt_profile *p, const cJSON *summary, bool summary_given);
/* The answer in one sentence: the biggest bucket of the step, its share, what it means and what
 * to try (plain text, escaped by the writer). */
void rpt_verdict(const rpt_profile *p, const rpt_headline *h, char *out, size_t n);
/* A second sentence on the next-biggest bucket when it matters (>= 10%), else "". */
void rpt_verdict_second(const rpt_profile *p, const rpt_headline *h, char *out, size_t n);

typedef enum {
    RPT_CH_STEPS,       /* per-step stacked breakdown over the run */
    RPT_CH_BREAKDOWN,   /* overall breakdown */
    RPT_CH_THROUGHPUT,
    RPT_CH_LOSS,        /* training loss, validation accuracy */
    RPT_CH_SCALE,       /* loss scale with overflow markers */
    RPT_CH_MEMORY,      /* memory by category over steps */
    RPT_CH_OPS,         /* top ops: time and GFLOP/s */
    RPT_CH_TRIALS,      /* advisor trials */
    RPT_CH_COUNT
} rpt_chart_id;

typedef enum {
    RPT_CHART_NO_DATA,      /* the profile has nothing for it (level 1, no loss scale, ...) */
    RPT_CHART_PLANNED,      /* has data; not drawn (yet, or no gnuplot) */
    RPT_CHART_DRAWN,
    RPT_CHART_FAILED,
} rpt_chart_state;

typedef struct {
    const char *file;       /* "throughput.png" */
    const char *title;
    int width, height;      /* pixels */
    char reading[768];      /* one line: what the chart shows, with the numbers */
    char why_none[256];     /* when NO_DATA: why */
    rpt_chart_state state;
    char error[768];        /* when FAILED */
} rpt_chart;

/* Titles, files, readings and which charts apply. */
void rpt_charts_plan(const rpt_profile *p, const rpt_headline *h, rpt_chart charts[RPT_CH_COUNT]);
/* Draw the planned charts into out_dir with gnuplot; returns how many failed. */
int rpt_charts_draw(const rpt_profile *p, const rpt_headline *h, rpt_chart charts[RPT_CH_COUNT], const char *out_dir);

/* Number formatting shared by the writers: "24.26", "0.518", "2,635", "84.8 MiB". */
void rpt_fmt_ms(double ms, char *out, size_t n);
void rpt_fmt_rate(double v, char *out, size_t n);
void rpt_fmt_bytes(double bytes, char *out, size_t n);

/* The writers. Each replaces its file atomically; 0, or -1 with a message naming the path. */
typedef struct {
    const rpt_profile *p;
    const rpt_headline *h;
    const rpt_chart *charts;
    bool gnuplot;                   /* charts were attempted */
    const char *flame_file;         /* "flame.svg" */
    int64_t flame_frames, flame_pruned;
    const cJSON *advice;            /* the advisor's advice.json, shown first; NULL: none */
    const char *next_hint;          /* the page's last line ("next: mstune advise JOB ..."); NULL: none */
    bool have_trace;                /* a trace.json beside the profile: linked, with how to open it */
    char trace_href[1024];          /* relative link to it from the report folder */
    const struct rpt_ranks_s *ranks; /* data parallel: every rank's row (report/ranks.h); NULL or n = 0: one process */
} rpt_page;
int rpt_html_write(const rpt_page *pg, const char *path, char *err, size_t errn);
int rpt_markdown_write(const rpt_page *pg, const char *path, char *err, size_t errn);
/* summary.json from the database alone (the keys `mstune profile` writes that the profile can
 * answer; docs/report.md lists them). NULL when out of memory. */
cJSON *rpt_summary_from_profile(const rpt_profile *p);

/* The <style> block both HTML pages use. */
extern const char rpt_css[];

#endif
