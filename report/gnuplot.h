/* gnuplot.h — one PNG chart drawn by gnuplot through a pipe.
 *
 * The script and its data go down popen(gnuplot, "w") as inline data blocks ($name << EOD ...
 * EOD), so nothing is left on disk but the chart. gnuplot draws into a temp file beside the
 * target that is renamed over it only when gnuplot exits 0: a failed chart never leaves a
 * half-drawn PNG. SIGPIPE is blocked for the calling thread while the pipe is open (a gnuplot
 * that dies early makes writes fail instead of killing the process).
 *
 *     rpt_plot pl;
 *     if (rpt_plot_open(&pl, "out/throughput.png", 900, 420, err, errn) == 0) {
 *         fprintf(pl.f, "$d << EOD\n1\t2.5\nEOD\nplot $d using 1:2 with lines\n");
 *         rc = rpt_plot_close(&pl, err, errn);
 *     }
 */
#ifndef MST_REPORT_GNUPLOT_H
#define MST_REPORT_GNUPLOT_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;                /* the pipe into gnuplot: write the script here */
    char path[4096];        /* the chart */
    char tmp[4096];         /* where gnuplot draws it */
    sigset_t old_mask;
    int sigpipe_pending;    /* SIGPIPE was already pending before the pipe opened */
} rpt_plot;

/* $MSTUNE_GNUPLOT, or "gnuplot". */
const char *rpt_gnuplot_program(void);
/* Start gnuplot drawing a width x height pngcairo chart into path, with the report's common
 * style (font, grid, no enhanced text so names print as they are, tab-separated data). */
int rpt_plot_open(rpt_plot *pl, const char *path, int width, int height, char *err, size_t errn);
/* End the script, wait for gnuplot and check its exit status; on success the chart replaces
 * path. 0, or -1 with a message naming the chart (gnuplot's own messages go to stderr). */
int rpt_plot_close(rpt_plot *pl, char *err, size_t errn);

/* The report's category colours, by mst_prof_cat, as gnuplot/HTML "#rrggbb". */
extern const char *const rpt_cat_colors[];

#endif
