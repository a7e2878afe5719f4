/* stats.h — the small statistics the regression gate needs: order statistics, the Mann–Whitney U
 * test (exact null distribution without ties, normal approximation with tie correction otherwise),
 * the Hodges–Lehmann shift with its distribution-free Moses/Lehmann interval, the normal and
 * Student t distributions, and a prediction interval for a future mean.
 *
 * Trade-off: rank methods ignore how far apart values are, so they lose little power on clean
 * data and nothing to one slow outlier run — the case that matters for timing. References:
 * Hollander, Wolfe & Chicken, "Nonparametric Statistical Methods" (3rd ed.), §4.1–4.3;
 * Lehmann, "Nonparametrics: Statistical Methods Based on Ranks" (1975), ch. 2.
 *
 *     double base[5] = {...}, cand[5] = {...};       // per-run log step times
 *     mst_mwu t;
 *     mst_stats_mann_whitney(base, 5, cand, 5, &t);    // t.p_greater: is cand slower?
 *     mst_shift s;
 *     mst_stats_hodges_lehmann(base, 5, cand, 5, 0.98, &s);   // s.estimate, [s.lo, s.hi]
 */
#ifndef MST_UTIL_STATS_H
#define MST_UTIL_STATS_H

#include <stdbool.h>

/* Largest group size for which the exact null distribution of U is tabulated; above it the normal
 * approximation is used (it is accurate to about 1e-3 in p well before this size). */
#define MST_STATS_EXACT_MAX 50

/* Order statistics of n values (the input is not modified; NaN values must be filtered out). */
double mst_stats_median(const double *x, int n);
/* Quantile q in [0,1] with linear interpolation between order statistics (R's type 7). */
double mst_stats_quantile(const double *x, int n, double q);
double mst_stats_mean(const double *x, int n);
/* Sample standard deviation (n - 1 denominator); 0 when n < 2. */
double mst_stats_sd(const double *x, int n);
/* Coefficient of variation sd / mean; 0 when n < 2 or the mean is 0. */
double mst_stats_cv(const double *x, int n);
/* Robust scale: the Shamos estimator 1.0483 * median{|x_i - x_j|, i < j} (consistent for the sd of
 * a normal sample; one wild value among five moves it little, unlike the sd). The pooled form
 * takes the pairs within x and within y, never across, so a shift between them does not count.
 * 0 when there is no pair. Reference: Shamos (1976); Rousseeuw & Croux, JASA 88 (1993). */
double mst_stats_shamos(const double *x, int n);
double mst_stats_shamos_pooled(const double *x, int m, const double *y, int n);

double mst_stats_normal_cdf(double z);
/* Inverse of the standard normal CDF, p in (0,1); full double precision (Acklam + one Halley step). */
double mst_stats_normal_quantile(double p);
/* Student t with df > 0 degrees of freedom (df need not be an integer). */
double mst_stats_t_cdf(double t, double df);
double mst_stats_t_quantile(double p, double df);

/* Mann–Whitney U of y against x: U = #{(i,j): y_j > x_i} + 0.5 #{(i,j): y_j == x_i}. */
typedef struct {
    double u;           /* 0 .. m*n; m*n/2 expected when x and y come from one distribution */
    double p_greater;   /* one-sided p-value, H1: y tends to be larger than x */
    double p_less;      /* one-sided p-value, H1: y tends to be smaller than x */
    double z;           /* standardized U (tie-corrected, no continuity correction) */
    bool exact;         /* p from the exact null distribution (no ties, m and n <= MST_STATS_EXACT_MAX) */
    bool ties;          /* some values are equal across or within the groups */
} mst_mwu;

/* 0 on success; -1 if m or n < 1 or memory ran out. */
int mst_stats_mann_whitney(const double *x, int m, const double *y, int n, mst_mwu *out);
/* P(U <= u) under H0 without ties (exact for m, n <= MST_STATS_EXACT_MAX, normal otherwise). */
double mst_stats_mwu_cdf(int m, int n, double u);
/* Largest c with P(U <= c) <= alpha under H0 (exact for small groups, normal approximation for
 * large ones); -1 when even U = 0 is more likely than alpha: the sizes cannot reach alpha. */
int mst_stats_mwu_critical(int m, int n, double alpha);
/* The smallest one-sided p-value m and n runs can give: 1 / C(m+n, m). */
double mst_stats_mwu_min_p(int m, int n);

/* Hodges–Lehmann estimate of the shift y - x (median of all m*n differences y_j - x_i) and the
 * Moses/Lehmann interval [D(k), D(mn+1-k)] at two-sided level conf, where k - 1 is the
 * Mann–Whitney critical value at (1 - conf) / 2. Each bound alone is a one-sided bound at level
 * 1 - (1 - conf) / 2. */
typedef struct {
    double estimate;
    double lo, hi;      /* -inf / +inf when the sizes are too small for the level */
    double level;
    bool bounded;
} mst_shift;

int mst_stats_hodges_lehmann(const double *x, int m, const double *y, int n, double conf, mst_shift *out);

/* The same estimate stratified: x[i] belongs to stratum xs[i], y[j] to ys[j], and only differences
 * within a stratum count (groups measured in turns share a stratum, so a drift of the machine
 * between strata falls out). The estimate is the median of all within-stratum differences; the
 * interval inverts T = the sum of the strata's Mann–Whitney U, whose exact null distribution is
 * the convolution of theirs (Lehmann's stratified shift, van Elteren with unit weights). With one
 * stratum it equals mst_stats_hodges_lehmann. A value in a stratum the other group lacks is not
 * used; -1 when no stratum holds both groups, when a stratum exceeds MST_STATS_EXACT_MAX, or when
 * memory ran out. */
int mst_stats_hodges_lehmann_strata(const double *x, const int *xs, int m, const double *y, const int *ys, int n, double conf,
                                    mst_shift *out);

/* Two-sided t interval at level conf for the mean of x (normal model): mean(x) +- t_{(1+conf)/2, n-1}
 * * sd(x) / sqrt(n). Needs n >= 2; -1 otherwise (lo and hi untouched). */
int mst_stats_mean_interval(const double *x, int n, double conf, double *lo, double *hi);

/* Two-sided prediction interval at level conf for the mean of k future values drawn like x
 * (normal model): mean(x) +- t_{(1+conf)/2, n-1} * sd(x) * sqrt(1/n + 1/k). Needs n >= 2. */
int mst_stats_prediction_interval(const double *x, int n, int k, double conf, double *lo, double *hi);

#endif
