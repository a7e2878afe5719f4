/* charts.c — the report's charts: which apply to a profile, the one-line reading under each
 * (computed here so it shows even without gnuplot), and the gnuplot script that draws each.
 * Long runs are bucketed to at most MAX_POINTS points per series (means for times, maxima for
 * memory, so peaks survive); the tables beside the charts keep the exact figures. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/gnuplot.h"
#include "report/render.h"

#define MAX_POINTS 1500
#define TOP_OPS_CHART 12

static const char *const chart_file[RPT_CH_COUNT] = {
    "breakdown_steps.png", "breakdown.png", "throughput.png", "loss.png",
    "loss_scale.png",      "memory.png",    "top_ops.png",    "trials.png",
};
static const char *const chart_title[RPT_CH_COUNT] = {
    "Step time by category over the run",
    "Where the step time goes",
    "Throughput per step",
    "Training loss and the validation metric",
    "Loss scale and overflow steps",
    "Memory in use by category",
    "Top ops by kernel time, with achieved GFLOP/s",
    "Advisor trials: predicted vs measured speedup",
};
_Static_assert(sizeof(chart_file) / sizeof(chart_file[0]) == RPT_CH_COUNT, "a file per chart");
_Static_assert(sizeof(chart_title) / sizeof(chart_title[0]) == RPT_CH_COUNT, "a title per chart");

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Quantile by nearest rank of a sorted array. */
static double q_sorted(const double *v, int64_t n, double q) {
    if (n == 0) return 0;
    int64_t i = (int64_t)ceil(q * (double)n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The used (non-warm-up) steps' values of f, in step order; caller frees. */
static double *used_values(const rpt_profile *p, double (*f)(const rpt_step *, const rpt_profile *), int64_t *n) {
    double *v = malloc((size_t)(p->n_used ? p->n_used : 1) * sizeof(double));
    *n = 0;
    if (!v) return NULL;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].used) v[(*n)++] = f(&p->steps[i], p);
    return v;
}

static double f_wall(const rpt_step *s, const rpt_profile *p) { return s->wall_ms; }
static double f_rate(const rpt_step *s, const rpt_profile *p) {
    double per = p->batch_size > 0 ? (double)p->batch_size : 1.0;
    return s->wall_ms > 0 ? per * 1000.0 / s->wall_ms : 0;
}

/* ---- readings ---- */

static void read_steps(const rpt_profile *p, char *out, size_t n) {
    int64_t k;
    double *w = used_values(p, f_wall, &k);
    if (!w || k == 0) {
        snprintf(out, n, "No profiled steps.");
        free(w);
        return;
    }
    int64_t tenth = k >= 20 ? k / 10 : (k + 1) / 2;
    double first = rpt_median(w, tenth), last = rpt_median(w + k - tenth, tenth), med = p->bd.wall_median_ns / 1e6;
    int64_t slow = 0, at = 0;
    double mx = 0;
    for (int64_t i = 0, j = 0; i < p->n_steps; i++) {
        if (!p->steps[i].used) continue;
        if (w[j] > 2 * med) slow++;
        if (w[j] > mx) mx = w[j], at = p->steps[i].step;
        j++;
    }
    double change = first > 0 ? (last - first) / first : 0;
    char a[32], b[32], m[32], x[32];
    rpt_fmt_ms(first, a, sizeof(a));
    rpt_fmt_ms(last, b, sizeof(b));
    rpt_fmt_ms(med, m, sizeof(m));
    rpt_fmt_ms(mx, x, sizeof(x));
    int len = snprintf(out, n, "Median step %s ms over %lld steps; the first tenth of the run has median %s ms, the last tenth %s ms "
                               "(%+.1f%%: %s).",
                       m, (long long)k, a, b, 100 * change,
                       change > 0.10 ? "steps got slower" : change < -0.10 ? "steps got faster" : "steady");
    if (slow > 0 && len > 0 && (size_t)len < n)
        snprintf(out + len, n - (size_t)len, " %lld step%s took more than twice the median (slowest %s ms, step %lld).",
                 (long long)slow, slow == 1 ? "" : "s", x, (long long)at);
    free(w);
}

static void read_breakdown(const rpt_headline *h, const rpt_profile *p, char *out, size_t n) {
    int order[MST_CAT_COUNT];
    for (int c = 0; c < MST_CAT_COUNT; c++) order[c] = c;
    for (int i = 1; i < MST_CAT_COUNT; i++)     /* insertion sort by share, largest first */
        for (int j = i; j > 0 && h->share[order[j]] > h->share[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* the share and the mean per step are one measure (the table's two columns that add up) */
    double mean[MST_CAT_COUNT] = {0};
    int64_t used = 0;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].used) {
            used++;
            for (int c = 0; c < MST_CAT_COUNT; c++) mean[c] += p->steps[i].cat_ms[c];
        }
    size_t len = 0;
    int shown = 0;
    for (int i = 0; i < MST_CAT_COUNT && len < n; i++) {
        int c = order[i];
        if (h->share[c] < 0.001 && shown > 0) break;
        char ms[32];
        rpt_fmt_ms(used ? mean[c] / (double)used : 0, ms, sizeof(ms));
        int w = snprintf(out + len, n - len, "%s%s %.1f%% (%s ms/step, mean)", shown ? ", " : "", mst_prof_cat_name((mst_prof_cat)c),
                         100 * h->share[c], ms);
        if (w < 0) break;
        len += (size_t)w;
        shown++;
    }
    if (len < n) snprintf(out + len, n - len, "%s", shown < MST_CAT_COUNT ? "; the rest under 0.1%." : ".");
}

static void read_throughput(const rpt_profile *p, const rpt_headline *h, char *out, size_t n) {
    int64_t k;
    double *v = used_values(p, f_rate, &k);
    if (!v || k == 0) {
        snprintf(out, n, "No profiled steps.");
        free(v);
        return;
    }
    qsort(v, (size_t)k, sizeof(double), cmp_double);
    char m[32], lo[32], hi[32];
    rpt_fmt_rate(rpt_median(v, k), m, sizeof(m));
    rpt_fmt_rate(q_sorted(v, k, 0.05), lo, sizeof(lo));
    rpt_fmt_rate(q_sorted(v, k, 0.95), hi, sizeof(hi));
    const char *unit = p->batch_size > 0 ? "samples/s" : "steps/s";
    double run = p->batch_size > 0 ? h->samples_per_s : h->steps_per_s;
    char r[32] = "n/a";
    if (run >= 0) rpt_fmt_rate(run, r, sizeof(r));
    snprintf(out, n, "The run's throughput (processed / training-loop wall time) %s %s; per step: median %s %s, 90%% of steps "
                     "between %s and %s%s.", r, unit, m, unit, lo, hi,
             p->batch_size > 0 ? "" : " (the batch size is not in the profile's config)");
    free(v);
}

static const cJSON *epoch_records(const rpt_headline *h) {
    const cJSON *e = cJSON_GetObjectItem(h->summary, "epoch_records");
    return cJSON_IsArray(e) && cJSON_GetArraySize(e) > 0 ? e : NULL;
}

/* Epoch records with a finite validation metric: what the loss chart can plot beside the loss
 * (none with train.eval false, or when every recorded step came before the first epoch ended). */
static int epoch_metrics(const rpt_headline *h) {
    const cJSON *ep = epoch_records(h), *e;
    int n = 0;
    if (ep)
        cJSON_ArrayForEach(e, ep) n += !isnan(rpt_metric_epoch(&h->metric, e));
    return n;
}

static void read_loss(const rpt_profile *p, const rpt_headline *h, char *out, size_t n) {
    size_t len = 0;
    if (p->n_loss > 0) {
        const rpt_step *first = NULL, *last = NULL;
        double lo = INFINITY;
        for (int64_t i = 0; i < p->n_steps; i++) {
            if (!p->steps[i].has_loss) continue;
            if (!first) first = &p->steps[i];
            last = &p->steps[i];
            if (p->steps[i].loss < lo) lo = p->steps[i].loss;
        }
        int w = snprintf(out, n, "Training loss %.4g at step %lld, %.4g at step %lld (lowest %.4g).", first->loss,
                         (long long)first->step, last->loss, (long long)last->step, lo);
        len = w > 0 ? (size_t)w : 0;
    }
    const cJSON *ep = epoch_records(h);
    if (ep && len < n) {
        const cJSON *lastep = cJSON_GetArrayItem(ep, cJSON_GetArraySize(ep) - 1);
        double mv = rpt_metric_epoch(&h->metric, lastep);
        char t[48];
        rpt_metric_fmt(&h->metric, mv, t, sizeof(t));
        if (!isnan(mv))
            snprintf(out + len, n - len, "%sValidation %s %s after epoch %d.", len ? " " : "", h->metric.label, t,
                     cJSON_GetArraySize(ep));
    }
}

static void read_scale(const rpt_profile *p, char *out, size_t n) {
    double first = NAN, last = NAN, lo = INFINITY;
    for (int64_t i = 0; i < p->n_steps; i++) {
        if (!p->steps[i].has_scale) continue;
        if (isnan(first)) first = p->steps[i].loss_scale;
        last = p->steps[i].loss_scale;
        if (last < lo) lo = last;
    }
    snprintf(out, n, "%lld overflow step%s skipped by the loss scaler; the scale went from %g to %g (lowest %g).",
             (long long)p->n_overflow, p->n_overflow == 1 ? " was" : "s were", first, last, lo);
}

static void read_memory(const rpt_profile *p, char *out, size_t n) {
    char peak[32];
    rpt_fmt_bytes((double)p->mem_peak_step_total, peak, sizeof(peak));
    int w = snprintf(out, n, "Peak %s in use at step %lld:", peak, (long long)p->mem_peak_step);
    size_t len = w > 0 ? (size_t)w : 0;
    int64_t at = 0;
    for (int64_t i = 0; i < p->n_mem_steps; i++)
        if (p->mem_steps[i] == p->mem_peak_step) at = i;
    for (int c = 0; c < p->n_mem_cats && len < n; c++) {
        char b[32];
        rpt_fmt_bytes((double)(p->mem_bytes[c][at] > 0 ? p->mem_bytes[c][at] : 0), b, sizeof(b));
        w = snprintf(out + len, n - len, "%s %s %s", c ? "," : "", p->mem_cat[c], b);
        len += w > 0 ? (size_t)w : 0;
    }
    /* growth: the last tenth of the run against the first */
    int64_t k = p->n_mem_steps, tenth = k >= 20 ? k / 10 : (k + 1) / 2;
    double a = 0, b = 0;
    for (int64_t i = 0; i < tenth; i++)
        for (int c = 0; c < p->n_mem_cats; c++) {
            a += (double)(p->mem_bytes[c][i] > 0 ? p->mem_bytes[c][i] : 0);
            b += (double)(p->mem_bytes[c][k - 1 - i] > 0 ? p->mem_bytes[c][k - 1 - i] : 0);
        }
    if (len < n)
        snprintf(out + len, n - len, ". %s", a > 0 && b > 1.05 * a ? "Memory grows over the run (last tenth vs first): look for "
                                                                      "tensors kept across steps."
                                                                    : "Flat over the run after the first steps.");
}

static void read_ops(const rpt_profile *p, char *out, size_t n) {
    const rpt_op *o = &p->ops[0];
    double tot = p->ops_total_ns > 0 ? (double)p->ops_total_ns : 1, steps = p->bd.steps > 0 ? (double)p->bd.steps : 1;
    int64_t top3 = 0;
    for (int i = 0; i < p->n_ops && i < 3; i++) top3 += p->ops[i].total_ns;
    char ms[32];
    rpt_fmt_ms((double)o->total_ns / 1e6 / steps, ms, sizeof(ms));
    snprintf(out, n, "%s takes %.1f%% of kernel time (%s ms per step) at %.1f GFLOP/s; the top %d ops take %.1f%%.", o->name,
             100.0 * (double)o->total_ns / tot, ms, o->gflops, p->n_ops < 3 ? p->n_ops : 3, 100.0 * (double)top3 / tot);
}

static void read_trials(const rpt_profile *p, char *out, size_t n) {
    int accepted = 0, best = -1;
    for (int i = 0; i < p->n_trials; i++) {
        if (strcmp(p->trials[i].status, "accepted") == 0) accepted++;
        if (!isnan(p->trials[i].measured) && (best < 0 || p->trials[i].measured > p->trials[best].measured)) best = i;
    }
    if (best >= 0)
        snprintf(out, n, "%d trial%s, %d accepted; the best measured speedup is %.3gx (%s).", p->n_trials,
                 p->n_trials == 1 ? "" : "s", accepted, p->trials[best].measured, p->trials[best].change);
    else
        snprintf(out, n, "%d trial%s, %d accepted; none measured a speedup.", p->n_trials, p->n_trials == 1 ? "" : "s", accepted);
}

void rpt_charts_plan(const rpt_profile *p, const rpt_headline *h, rpt_chart charts[RPT_CH_COUNT]) {
    for (int i = 0; i < RPT_CH_COUNT; i++) {
        memset(&charts[i], 0, sizeof(charts[i]));
        charts[i].file = chart_file[i];
        charts[i].title = chart_title[i];
        charts[i].state = RPT_CHART_PLANNED;
        bool wide = i == RPT_CH_STEPS || i == RPT_CH_MEMORY || i == RPT_CH_OPS;
        charts[i].width = wide ? 960 : 760;
        charts[i].height = i == RPT_CH_OPS ? 460 : 400;
    }
    rpt_chart *c = charts;
    if (p->n_used == 0) {
        for (int i = RPT_CH_STEPS; i <= RPT_CH_THROUGHPUT; i++) {
            c[i].state = RPT_CHART_NO_DATA;
            snprintf(c[i].why_none, sizeof(c[i].why_none), "the profile holds no finished steps");
        }
    } else {
        read_steps(p, c[RPT_CH_STEPS].reading, sizeof(c[RPT_CH_STEPS].reading));
        read_breakdown(h, p, c[RPT_CH_BREAKDOWN].reading, sizeof(c[RPT_CH_BREAKDOWN].reading));
        read_throughput(p, h, c[RPT_CH_THROUGHPUT].reading, sizeof(c[RPT_CH_THROUGHPUT].reading));
    }
    if (p->n_loss == 0 && epoch_metrics(h) == 0) {     /* gnuplot refuses a plot with no point */
        c[RPT_CH_LOSS].state = RPT_CHART_NO_DATA;
        snprintf(c[RPT_CH_LOSS].why_none, sizeof(c[RPT_CH_LOSS].why_none),
                 "no loss values were recorded, and no validation %s", h->metric.label);
    } else {
        read_loss(p, h, c[RPT_CH_LOSS].reading, sizeof(c[RPT_CH_LOSS].reading));
    }
    if (p->n_scale == 0) {
        c[RPT_CH_SCALE].state = RPT_CHART_NO_DATA;
        snprintf(c[RPT_CH_SCALE].why_none, sizeof(c[RPT_CH_SCALE].why_none),
                 "no loss scale was recorded (the run did not use loss scaling)");
    } else {
        read_scale(p, c[RPT_CH_SCALE].reading, sizeof(c[RPT_CH_SCALE].reading));
    }
    if (p->n_mem_steps == 0) {
        c[RPT_CH_MEMORY].state = RPT_CHART_NO_DATA;
        snprintf(c[RPT_CH_MEMORY].why_none, sizeof(c[RPT_CH_MEMORY].why_none),
                 "no memory timeline: it is recorded at profile.level 2 (this profile: level %d)", p->level);
    } else {
        read_memory(p, c[RPT_CH_MEMORY].reading, sizeof(c[RPT_CH_MEMORY].reading));
    }
    if (p->n_ops == 0) {
        c[RPT_CH_OPS].state = RPT_CHART_NO_DATA;
        snprintf(c[RPT_CH_OPS].why_none, sizeof(c[RPT_CH_OPS].why_none),
                 "no per-op statistics: they are recorded from profile.level 1 (this profile: level %d)", p->level);
    } else {
        read_ops(p, c[RPT_CH_OPS].reading, sizeof(c[RPT_CH_OPS].reading));
    }
    if (p->n_trials == 0) {
        c[RPT_CH_TRIALS].state = RPT_CHART_NO_DATA;
        snprintf(c[RPT_CH_TRIALS].why_none, sizeof(c[RPT_CH_TRIALS].why_none), "no advisor trials in this profile");
    } else {
        read_trials(p, c[RPT_CH_TRIALS].reading, sizeof(c[RPT_CH_TRIALS].reading));
    }
}

/* ---- drawing ---- */

/* Consecutive used steps in buckets of `per` (1 when the run is short enough). */
static int64_t bucket_size(int64_t n) { return n > MAX_POINTS ? (n + MAX_POINTS - 1) / MAX_POINTS : 1; }

static void hex_color(FILE *f, const char *hex) { fprintf(f, "lc rgb '%s'", hex); }

static void draw_steps(FILE *f, const rpt_profile *p) {
    int64_t per = bucket_size(p->n_used), in = 0;
    double acc[MST_CAT_COUNT] = {0}, x0 = 0;
    bool any[MST_CAT_COUNT] = {0};
    fputs("$d << EOD\n", f);
    for (int64_t i = 0; i < p->n_steps; i++) {
        const rpt_step *s = &p->steps[i];
        if (!s->used) continue;
        if (in == 0) x0 = (double)s->step;
        for (int c = 0; c < MST_CAT_COUNT; c++) {
            acc[c] += s->cat_ms[c];
            any[c] |= s->cat_ms[c] > 0;
        }
        if (++in == per) {
            fprintf(f, "%.0f", x0);
            double cum = 0;
            for (int c = 0; c < MST_CAT_COUNT; c++) fprintf(f, "\t%.6g", cum += acc[c] / (double)in);
            fputc('\n', f);
            memset(acc, 0, sizeof(acc));
            in = 0;
        }
    }
    if (in > 0) {
        fprintf(f, "%.0f", x0);
        double cum = 0;
        for (int c = 0; c < MST_CAT_COUNT; c++) fprintf(f, "\t%.6g", cum += acc[c] / (double)in);
        fputc('\n', f);
    }
    fputs("EOD\n", f);
    fprintf(f, "set title '%s'\nset xlabel 'step%s'\nset ylabel 'time per step (ms)'\nset yrange [0:*]\nplot ", chart_title[RPT_CH_STEPS],
            per > 1 ? (per == 2 ? " (means of 2 steps)" : " (bucket means)") : "");
    /* the top of the stack first, each lower category painted over it */
    bool first = true;
    for (int c = MST_CAT_COUNT - 1; c >= 0; c--) {
        if (!any[c]) continue;
        fprintf(f, "%s$d using 1:%d with filledcurves x1 ", first ? "" : ", ", 2 + c);
        hex_color(f, rpt_cat_colors[c]);
        fprintf(f, " title '%s'", mst_prof_cat_name((mst_prof_cat)c));
        first = false;
    }
    if (first) fputs("$d using 1:8 with lines title 'wall'", f);
    fputc('\n', f);
}

static void draw_breakdown(FILE *f, const rpt_profile *p, const rpt_headline *h) {
    double top = 0;
    for (int c = 0; c < MST_CAT_COUNT; c++) top = fmax(top, 100 * h->share[c]);
    fputs("$d << EOD\n", f);
    for (int c = 0; c < MST_CAT_COUNT; c++)
        fprintf(f, "%s\t%.6g\t%.6g\t%ld\n", mst_prof_cat_name((mst_prof_cat)c), 100 * h->share[c], p->bd.median_ns[c] / 1e6,
                strtol(rpt_cat_colors[c] + 1, NULL, 16));
    fputs("EOD\n", f);
    fprintf(f, "set title '%s (share of all profiled step time)'\nset yrange [0:%.3g]\n", chart_title[RPT_CH_BREAKDOWN],
            top > 0 ? fmin(top * 1.15, 112) : 1);
    if (top > 90) fputs("set ytics 0,20,100\n", f);
    fputs("set xlabel 'category'\nset ylabel 'share of step time (%)'\n"
          "set xrange [-0.6:6.6]\n"
          "set boxwidth 0.6\nset xtics scale 0\nset grid noxtics\n"
          "plot $d using 0:2:4:xtic(1) with boxes lc rgb variable notitle, \\\n"
          "     $d using 0:2:(sprintf('%.1f%%', $2)) with labels offset 0,0.8 notitle\n",
          f);
}

static void draw_throughput(FILE *f, const rpt_profile *p, const rpt_headline *h) {
    int64_t per = bucket_size(p->n_used), in = 0, k = 0;
    double acc = 0, x0 = 0;
    double *all = used_values(p, f_rate, &k);
    double med = all ? rpt_median(all, k) : 0;
    free(all);
    fputs("$d << EOD\n", f);
    for (int64_t i = 0; i < p->n_steps; i++) {
        const rpt_step *s = &p->steps[i];
        if (!s->used) continue;
        if (in == 0) x0 = (double)s->step;
        acc += f_rate(s, p);
        if (++in == per) {
            fprintf(f, "%.0f\t%.6g\n", x0, acc / (double)in);
            acc = 0;
            in = 0;
        }
    }
    if (in > 0) fprintf(f, "%.0f\t%.6g\n", x0, acc / (double)in);
    fputs("EOD\n", f);
    const char *unit = p->batch_size > 0 ? "samples/s" : "steps/s";
    double run = p->batch_size > 0 ? h->samples_per_s : h->steps_per_s;
    fprintf(f, "set title '%s'\nset xlabel 'step%s'\nset ylabel 'throughput (%s)'\nset yrange [0:*]\nset key inside right bottom opaque\nMED = %.9g\nRUN = %.9g\n",
            chart_title[RPT_CH_THROUGHPUT], per > 1 ? " (bucket means)" : "", unit, med, run);
    fprintf(f, "plot $d using 1:2 with points pt 7 ps 0.35 lc rgb '%s' title 'per step', MED with lines dt 2 lw 2 lc rgb '#333333' "
               "title sprintf('median of the per-step rates %%.0f', MED)%s\n",
            rpt_cat_colors[MST_CAT_KERNEL],
            run > 0 ? ", RUN with lines lw 2 lc rgb '#c0392b' title sprintf('the run: processed / loop time %.0f', RUN)" : "");
}

static void draw_loss(FILE *f, const rpt_profile *p, const rpt_headline *h) {
    int64_t per = bucket_size(p->n_loss), in = 0;
    double acc = 0, x0 = 0;
    if (p->n_loss > 0) {
        fputs("$loss << EOD\n", f);
        for (int64_t i = 0; i < p->n_steps; i++) {
            const rpt_step *s = &p->steps[i];
            if (!s->has_loss) continue;
            if (in == 0) x0 = (double)s->step;
            acc += s->loss;
            if (++in == per) {
                fprintf(f, "%.0f\t%.9g\n", x0, acc / (double)in);
                acc = 0;
                in = 0;
            }
        }
        if (in > 0) fprintf(f, "%.0f\t%.9g\n", x0, acc / (double)in);
        fputs("EOD\n", f);
    }
    /* the job's metric (validation accuracy, PSNR, ...) at the step each epoch ended */
    const cJSON *ep = epoch_records(h);
    const rpt_metric *m = &h->metric;
    char mlabel[96];        /* label and unit come from summary.json: keep gnuplot's quoting safe */
    snprintf(mlabel, sizeof(mlabel), "validation %s%s%s%s", m->label, m->unit[0] ? " (" : "", m->unit, m->unit[0] ? ")" : "");
    for (char *q = mlabel; *q; q++)
        if (*q == '\'' || *q == '\\' || (unsigned char)*q < 0x20) *q = ' ';
    int n_acc = 0;
    double acc_min = INFINITY, acc_max = -INFINITY, x_min = INFINITY, x_max = -INFINITY;
    if (ep) {
        fputs("$acc << EOD\n", f);
        double steps = 0;
        const cJSON *e;
        int64_t base = p->n_steps > 0 ? p->steps[0].step : 0;
        cJSON_ArrayForEach(e, ep) {
            const cJSON *st = cJSON_GetObjectItem(e, "steps");
            double mv = rpt_metric_epoch(m, e);
            steps += cJSON_IsNumber(st) ? st->valuedouble : 0;
            if (!isnan(mv)) {
                fprintf(f, "%.0f\t%.6g\n", (double)base + steps - 1, m->scale * mv);
                x_min = fmin(x_min, (double)base + steps - 1);
                x_max = fmax(x_max, (double)base + steps - 1);
                acc_min = fmin(acc_min, m->scale * mv);
                acc_max = fmax(acc_max, m->scale * mv);
                n_acc++;
            }
        }
        fputs("EOD\n", f);
    }
    fprintf(f, "set title 'Training loss and %s'\nset xlabel 'step'\nset ylabel 'training loss'\nset key inside right top opaque\n",
            mlabel);
    if (p->n_loss > 0) fputs("set yrange [0:*]\n", f);
    if (n_acc > 0 && strcmp(m->unit, "%") == 0)
        fprintf(f, "set y2label '%s'\nset y2tics\nset ytics nomirror\nset y2range [%.0f:100]\n", mlabel,
                fmax(0, floor(acc_min / 10) * 10 - 10));
    else if (n_acc > 0)
        fprintf(f, "set y2label '%s'\nset y2tics\nset ytics nomirror\nset y2range [%.6g:%.6g]\n", mlabel,
                floor(acc_min) - 1, ceil(acc_max) + 1);
    if (p->n_loss == 0)         /* the metric alone: no loss axis to autoscale (gnuplot warned) */
        fputs("set yrange [0:1]\nunset ytics\nset ylabel ''\n", f);
    if (p->n_loss == 0 && n_acc > 0 && x_min == x_max)      /* one epoch's point: no x range either */
        fprintf(f, "set xrange [%.0f:%.0f]\nset xtics 1\n", x_min - 1, x_max + 1);
    fputs("plot ", f);
    if (p->n_loss > 0)
        fprintf(f, "$loss using 1:2 with lines lw 1.5 lc rgb '%s' title 'training loss%s'", rpt_cat_colors[MST_CAT_DISPATCH],
                per > 1 ? " (bucket means)" : "");
    if (n_acc > 0)
        fprintf(f, "%s$acc using 1:2 axes x1y2 with linespoints pt 7 ps 1.2 lw 2 lc rgb '%s' title '%s'",
                p->n_loss > 0 ? ", " : "", rpt_cat_colors[MST_CAT_COMM], mlabel);
    fputc('\n', f);
}

static void draw_scale(FILE *f, const rpt_profile *p) {
    fputs("$scale << EOD\n", f);
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].has_scale) fprintf(f, "%lld\t%.9g\n", (long long)p->steps[i].step, p->steps[i].loss_scale);
    fputs("EOD\n", f);
    if (p->n_overflow > 0) {
        fputs("$ovf << EOD\n", f);
        double last = NAN;
        for (int64_t i = 0; i < p->n_steps; i++) {
            if (p->steps[i].has_scale) last = p->steps[i].loss_scale;
            if (p->steps[i].overflow == 1 && !isnan(last)) fprintf(f, "%lld\t%.9g\n", (long long)p->steps[i].step, last);
        }
        fputs("EOD\n", f);
    }
    fprintf(f, "set title '%s'\nset xlabel 'step'\nset ylabel 'loss scale (log2 axis)'\nset logscale y 2\n"
               "plot $scale using 1:2 with steps lw 2 lc rgb '%s' title 'loss scale'",
            chart_title[RPT_CH_SCALE], rpt_cat_colors[MST_CAT_COMM]);
    if (p->n_overflow > 0) fputs(", $ovf using 1:2 with points pt 2 ps 1.5 lw 2 lc rgb '#d62728' title 'overflow (step skipped)'", f);
    fputc('\n', f);
}

static void draw_memory(FILE *f, const rpt_profile *p) {
    int64_t per = bucket_size(p->n_mem_steps), in = 0;
    double mx[RPT_MEM_CATS] = {0}, x0 = 0;
    const double mib = 1024.0 * 1024.0;
    fputs("$m << EOD\n", f);
    for (int64_t i = 0; i < p->n_mem_steps; i++) {
        if (in == 0) x0 = (double)p->mem_steps[i];
        for (int c = 0; c < p->n_mem_cats; c++)
            if ((double)p->mem_bytes[c][i] > mx[c]) mx[c] = (double)p->mem_bytes[c][i];
        if (++in == per || i == p->n_mem_steps - 1) {
            fprintf(f, "%.0f", x0);
            double cum = 0;
            for (int c = 0; c < p->n_mem_cats; c++) fprintf(f, "\t%.6g", (cum += mx[c]) / mib);
            fputc('\n', f);
            memset(mx, 0, sizeof(mx));
            in = 0;
        }
    }
    fputs("EOD\n", f);
    static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
    fprintf(f, "set title '%s (stacked)'\nset xlabel 'step%s'\nset ylabel 'memory in use (MiB)'\nset yrange [0:*]\nplot ",
            chart_title[RPT_CH_MEMORY], per > 1 ? " (bucket maxima)" : "");
    for (int c = p->n_mem_cats - 1; c >= 0; c--) {
        char label[48];
        rpt_gnuplot_label(p->mem_cat[c], label, 40);
        fprintf(f, "%s$m using 1:%d with filledcurves x1 lc rgb '%s' title '%s'", c == p->n_mem_cats - 1 ? "" : ", ", 2 + c,
                palette[c % 8], label);
    }
    fputc('\n', f);
}

static void draw_ops(FILE *f, const rpt_profile *p) {
    int n = p->n_ops < TOP_OPS_CHART ? p->n_ops : TOP_OPS_CHART;
    double steps = p->bd.steps > 0 ? (double)p->bd.steps : 1;
    fputs("$ops << EOD\n", f);
    for (int i = 0; i < n; i++) {
        char label[32];
        rpt_gnuplot_label(p->ops[i].name, label, 24);
        fprintf(f, "%s\t%.6g\t%.6g\n", label, (double)p->ops[i].total_ns / 1e6 / steps, p->ops[i].gflops);
    }
    fputs("EOD\n", f);
    fprintf(f, "set title '%s'\nset xlabel 'op'\nset ylabel 'kernel time per step (ms)'\nset y2label 'achieved GFLOP/s'\n"
               "set yrange [0:*]\nset y2range [0:*]\nset y2tics\nset ytics nomirror\nset xtics rotate by -35 scale 0\n"
               "set grid noxtics\nset boxwidth 0.6\nset key inside right top\n",
            chart_title[RPT_CH_OPS]);
    fprintf(f, "set xrange [-0.6:%d.4]\n", n - 1);
    fprintf(f, "plot $ops using 0:2:xtic(1) with boxes lc rgb '%s' title 'kernel ms per step', \\\n"
               "     $ops using 0:3 axes x1y2 with points pt 7 ps 1.3 lc rgb '%s' title 'GFLOP/s'\n",
            rpt_cat_colors[MST_CAT_KERNEL], rpt_cat_colors[MST_CAT_DISPATCH]);
}

static void draw_trials(FILE *f, const rpt_profile *p) {
    fputs("$t << EOD\n", f);
    for (int i = 0; i < p->n_trials; i++) {
        const rpt_trial *t = &p->trials[i];
        char label[40];
        rpt_gnuplot_label(t->change, label, 32);
        double m = isnan(t->measured) ? 0 : t->measured;
        fprintf(f, "%s\t%.6g\t%.6g\t%.6g\t%.6g\n", label, m, isnan(t->ci_low) ? m : t->ci_low, isnan(t->ci_high) ? m : t->ci_high,
                isnan(t->predicted) ? 0 : t->predicted);
    }
    fputs("EOD\n", f);
    fprintf(f, "set title '%s'\nset xlabel 'change tried'\nset ylabel 'speedup vs baseline (x)'\nset yrange [0:*]\n"
               "set xtics rotate by -30 scale 0\nset grid noxtics\nset boxwidth 0.5\nset key outside right top\n",
            chart_title[RPT_CH_TRIALS]);
    fprintf(f, "set xrange [-0.6:%d.4]\n", p->n_trials - 1);
    fprintf(f, "plot $t using 0:2:xtic(1) with boxes lc rgb '%s' title 'measured', \\\n"
               "     $t using 0:2:3:4 with yerrorbars lc rgb '#333333' lw 1.5 pt 7 ps 0 title 'confidence interval', \\\n"
               "     $t using 0:5 with points pt 9 ps 1.4 lc rgb '%s' title 'predicted', \\\n"
               "     1 with lines dt 2 lc rgb '#888888' title 'no change'\n",
            rpt_cat_colors[MST_CAT_KERNEL], rpt_cat_colors[MST_CAT_DISPATCH]);
}

int rpt_charts_draw(const rpt_profile *p, const rpt_headline *h, rpt_chart charts[RPT_CH_COUNT], const char *out_dir) {
    int failed = 0;
    for (int i = 0; i < RPT_CH_COUNT; i++) {
        rpt_chart *c = &charts[i];
        if (c->state != RPT_CHART_PLANNED) continue;
        char path[4096];
        rpt_plot pl;
        if (rpt_join(path, sizeof(path), out_dir, c->file) != 0) {
            snprintf(c->error, sizeof(c->error), "chart '%s/%s': path too long", out_dir, c->file);
        } else if (rpt_plot_open(&pl, path, c->width, c->height, c->error, sizeof(c->error)) == 0) {
            switch ((rpt_chart_id)i) {
            case RPT_CH_STEPS: draw_steps(pl.f, p); break;
            case RPT_CH_BREAKDOWN: draw_breakdown(pl.f, p, h); break;
            case RPT_CH_THROUGHPUT: draw_throughput(pl.f, p, h); break;
            case RPT_CH_LOSS: draw_loss(pl.f, p, h); break;
            case RPT_CH_SCALE: draw_scale(pl.f, p); break;
            case RPT_CH_MEMORY: draw_memory(pl.f, p); break;
            case RPT_CH_OPS: draw_ops(pl.f, p); break;
            case RPT_CH_TRIALS: draw_trials(pl.f, p); break;
            case RPT_CH_COUNT: break;
            }
            if (rpt_plot_close(&pl, c->error, sizeof(c->error)) == 0) {
                c->state = RPT_CHART_DRAWN;
                continue;
            }
        }
        c->state = RPT_CHART_FAILED;
        failed++;
    }
    return failed;
}
