/* stats.c — see stats.h. The exact Mann–Whitney distribution is counted, not looked up: the number
 * of orderings of m x's and n y's with U = u follows g(i,j,u) = g(i,j-1,u-i) + g(i-1,j,u) (is the
 * largest value a y, which beats all i x's, or an x?), filled in place over one (m+1) x (mn+1)
 * table (GSL has no Mann–Whitney distribution). Counts are sums of positive terms, so doubles hold
 * them to full relative precision. The normal and t distributions are GSL's (gsl_cdf_*). */
#include "util/stats.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *sorted_copy(const double *x, int n) {
    double *s = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!s) return NULL;
    memcpy(s, x, (size_t)n * sizeof(double));
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return s;
}

double mst_stats_quantile(const double *x, int n, double q) {
    if (n < 1) return NAN;
    double *s = sorted_copy(x, n);
    if (!s) return NAN;
    double h = (n - 1) * q;
    int lo = (int)floor(h);
    if (lo < 0) lo = 0;
    if (lo > n - 1) lo = n - 1;
    int hi = lo + 1 < n ? lo + 1 : n - 1;
    double v = s[lo] + (h - lo) * (s[hi] - s[lo]);
    free(s);
    return v;
}

double mst_stats_median(const double *x, int n) { return mst_stats_quantile(x, n, 0.5); }

double mst_stats_mean(const double *x, int n) {
    if (n < 1) return NAN;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

double mst_stats_sd(const double *x, int n) {
    if (n < 2) return 0;
    double m = mst_stats_mean(x, n), ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    return sqrt(ss / (n - 1));
}

double mst_stats_cv(const double *x, int n) {
    double m = mst_stats_mean(x, n);
    if (n < 2 || m == 0) return 0;
    return mst_stats_sd(x, n) / fabs(m);
}

double mst_stats_shamos_pooled(const double *x, int m, const double *y, int n) {
    size_t pairs = (size_t)(m > 1 ? m * (m - 1) / 2 : 0) + (size_t)(n > 1 ? n * (n - 1) / 2 : 0);
    if (pairs == 0) return 0;
    double *d = malloc(pairs * sizeof(double));
    if (!d) return NAN;
    size_t k = 0;
    for (int i = 0; i < m; i++)
        for (int j = i + 1; j < m; j++) d[k++] = fabs(x[i] - x[j]);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) d[k++] = fabs(y[i] - y[j]);
    qsort(d, pairs, sizeof(double), cmp_double);
    double med = pairs % 2 ? d[pairs / 2] : 0.5 * (d[pairs / 2 - 1] + d[pairs / 2]);
    free(d);
    /* median |X - Y| for X, Y iid N(0, s^2) is s * sqrt(2) * 0.67449 = 0.95387 s */
    return 1.0483 * med;
}

double mst_stats_shamos(const double *x, int n) { return mst_stats_shamos_pooled(x, n, NULL, 0); }

/* ---- normal and t ---- */

/* GSL's distributions (gsl_cdf_*): arguments are checked here first, so GSL's error handler (which
 * aborts by default) is never reached from these calls. */
double mst_stats_normal_cdf(double z) { return isnan(z) ? NAN : gsl_cdf_ugaussian_P(z); }

double mst_stats_normal_quantile(double p) {
    if (isnan(p)) return NAN;
    if (!(p > 0)) return -INFINITY;
    if (!(p < 1)) return INFINITY;
    return gsl_cdf_ugaussian_Pinv(p);
}

double mst_stats_t_cdf(double t, double df) {
    if (isnan(t) || !(df > 0)) return NAN;
    if (isinf(t)) return t > 0 ? 1 : 0;
    return gsl_cdf_tdist_P(t, df);
}

double mst_stats_t_quantile(double p, double df) {
    if (!(df > 0) || isnan(p)) return NAN;
    if (p <= 0) return -INFINITY;
    if (p >= 1) return INFINITY;
    if (p == 0.5) return 0;
    return gsl_cdf_tdist_Pinv(p, df);
}

/* ---- Mann–Whitney ---- */

/* Number of orderings of m x's and n y's for each U = 0..m*n (malloc'd, m*n + 1 entries). */
static double *mwu_counts(int m, int n) {
    size_t w = (size_t)m * (size_t)n + 1;
    double *g = calloc((size_t)(m + 1) * w, sizeof(double));
    if (!g) return NULL;
    for (int i = 0; i <= m; i++) g[(size_t)i * w] = 1;   /* j = 0: U = 0, one ordering */
    for (int j = 1; j <= n; j++)
        for (int i = 1; i <= m; i++) {
            double *row = g + (size_t)i * w, *prev = g + (size_t)(i - 1) * w;
            for (int u = i * j; u >= 0; u--) row[u] = (u >= i ? row[u - i] : 0) + prev[u];
        }
    double *out = malloc(w * sizeof(double));
    if (out) memcpy(out, g + (size_t)m * w, w * sizeof(double));
    free(g);
    return out;
}

/* The largest c with P(T <= c) <= alpha for a statistic T on 0..top whose null counts are f (over
 * total); -1 when even T = 0 is more likely than alpha. */
static int lower_critical(const double *f, int top, double total, double alpha) {
    double cum = 0;
    int c = -1;
    for (int k = 0; k <= top; k++) {
        cum += f[k];
        if (cum / total <= alpha * (1 + 1e-12)) c = k;
        else break;
    }
    return c;
}

/* The estimate (median) and the interval [D(c+1), D(nd-c)] of nd sorted differences d, c the lower
 * critical value of the statistic counting differences below the shift. */
static void shift_from_sorted(const double *d, size_t nd, int c, double conf, mst_shift *out) {
    out->estimate = nd % 2 ? d[nd / 2] : 0.5 * (d[nd / 2 - 1] + d[nd / 2]);
    out->level = conf;
    if (c < 0 || (size_t)c >= nd / 2) {
        out->lo = -INFINITY;
        out->hi = INFINITY;
        out->bounded = false;
    } else {
        out->lo = d[c];             /* D(k) with k = c + 1, 1-based */
        out->hi = d[nd - 1 - (size_t)c];    /* D(nd + 1 - k) */
        out->bounded = true;
    }
}

static bool exact_ok(int m, int n) { return m <= MST_STATS_EXACT_MAX && n <= MST_STATS_EXACT_MAX; }

double mst_stats_mwu_min_p(int m, int n) {
    /* 1 / C(m+n, m) through lgamma: exact enough for any size this is asked about */
    return exp(lgamma(m + 1.0) + lgamma(n + 1.0) - lgamma(m + n + 1.0));
}

double mst_stats_mwu_cdf(int m, int n, double u) {
    if (m < 1 || n < 1) return NAN;
    if (u < 0) return 0;
    if (u >= (double)m * n) return 1;
    if (exact_ok(m, n)) {
        double *f = mwu_counts(m, n);
        if (f) {
            double below = 0, total = 0;
            for (int k = 0; k <= m * n; k++) {
                total += f[k];
                if (k <= u) below += f[k];
            }
            free(f);
            return below / total;
        }
    }
    double mu = m * (double)n / 2, sd = sqrt(m * (double)n * (m + n + 1) / 12.0);
    return mst_stats_normal_cdf((floor(u) + 0.5 - mu) / sd);
}

int mst_stats_mwu_critical(int m, int n, double alpha) {
    if (m < 1 || n < 1 || !(alpha > 0)) return -1;
    if (exact_ok(m, n)) {
        double *f = mwu_counts(m, n);
        if (f) {
            double total = 0;
            for (int k = 0; k <= m * n; k++) total += f[k];
            int c = lower_critical(f, m * n, total, alpha);
            free(f);
            return c;
        }
    }
    /* Hollander & Wolfe (4.43): C = mn/2 - z_{1-alpha} sqrt(mn(m+n+1)/12), rounded down */
    double mu = m * (double)n / 2, sd = sqrt(m * (double)n * (m + n + 1) / 12.0);
    double c = floor(mu - mst_stats_normal_quantile(1 - alpha) * sd - 0.5);
    return c < 0 ? -1 : (int)c;
}

int mst_stats_mann_whitney(const double *x, int m, const double *y, int n, mst_mwu *out) {
    memset(out, 0, sizeof(*out));
    if (m < 1 || n < 1) return -1;
    double u = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) u += y[j] > x[i] ? 1.0 : (y[j] == x[i] ? 0.5 : 0.0);
    out->u = u;
    /* ties: sum of t^3 - t over groups of equal values in the pooled sample */
    int N = m + n;
    double *all = malloc((size_t)N * sizeof(double));
    if (!all) return -1;
    memcpy(all, x, (size_t)m * sizeof(double));
    memcpy(all + m, y, (size_t)n * sizeof(double));
    qsort(all, (size_t)N, sizeof(double), cmp_double);
    double tie_sum = 0;
    for (int i = 0; i < N;) {
        int k = i;
        while (k < N && all[k] == all[i]) k++;
        double t = k - i;
        tie_sum += t * t * t - t;
        i = k;
    }
    free(all);
    out->ties = tie_sum > 0;
    double mn = (double)m * n, mu = mn / 2;
    double var = mn / 12.0 * ((N + 1) - tie_sum / ((double)N * (N - 1)));
    double sd = var > 0 ? sqrt(var) : 0;
    out->z = sd > 0 ? (u - mu) / sd : 0;
    if (!out->ties && exact_ok(m, n)) {
        double *f = mwu_counts(m, n);
        if (!f) return -1;
        int ui = (int)llround(u);
        double total = 0, ge = 0, le = 0;
        for (int k = 0; k <= m * n; k++) {
            total += f[k];
            if (k >= ui) ge += f[k];
            if (k <= ui) le += f[k];
        }
        free(f);
        out->p_greater = ge / total;
        out->p_less = le / total;
        out->exact = true;
        return 0;
    }
    if (sd == 0) {          /* every value equal: no evidence either way */
        out->p_greater = out->p_less = 1;
        return 0;
    }
    /* continuity-corrected normal approximation (as scipy.stats.mannwhitneyu) */
    out->p_greater = fmin(1, 1 - mst_stats_normal_cdf((u - mu - 0.5) / sd));
    out->p_less = fmin(1, mst_stats_normal_cdf((u - mu + 0.5) / sd));
    return 0;
}

int mst_stats_hodges_lehmann(const double *x, int m, const double *y, int n, double conf, mst_shift *out) {
    memset(out, 0, sizeof(*out));
    if (m < 1 || n < 1 || !(conf > 0 && conf < 1)) return -1;
    size_t mn = (size_t)m * (size_t)n;
    double *d = malloc(mn * sizeof(double));
    if (!d) return -1;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) d[(size_t)j * m + i] = y[j] - x[i];
    qsort(d, mn, sizeof(double), cmp_double);
    shift_from_sorted(d, mn, mst_stats_mwu_critical(m, n, (1 - conf) / 2), conf, out);
    free(d);
    return 0;
}

int mst_stats_hodges_lehmann_strata(const double *x, const int *xs, int m, const double *y, const int *ys, int n, double conf,
                                    mst_shift *out) {
    memset(out, 0, sizeof(*out));
    if (m < 1 || n < 1 || !(conf > 0 && conf < 1)) return -1;
    double *d = malloc((size_t)m * (size_t)n * sizeof(double));
    double *dist = calloc((size_t)m * (size_t)n + 1, sizeof(double));     /* T's null counts, normalised per stratum */
    double *next = calloc((size_t)m * (size_t)n + 1, sizeof(double));
    bool *done = calloc((size_t)m, sizeof(bool));
    int rc = -1;
    if (!d || !dist || !next || !done) goto out;
    size_t nd = 0;
    int tmax = 0;       /* T's largest value so far */
    dist[0] = 1;
    for (int i0 = 0; i0 < m; i0++) {
        if (done[i0]) continue;
        int k = xs[i0], mk = 0, nk = 0;
        for (int i = i0; i < m; i++)
            if (xs[i] == k) {
                done[i] = true;
                mk++;
            }
        for (int j = 0; j < n; j++)
            if (ys[j] == k) {
                nk++;
                for (int i = i0; i < m; i++)
                    if (xs[i] == k) d[nd++] = y[j] - x[i];
            }
        if (nk == 0) continue;
        if (!exact_ok(mk, nk)) goto out;
        double *f = mwu_counts(mk, nk), total = 0;
        if (!f) goto out;
        for (int u = 0; u <= mk * nk; u++) total += f[u];
        memset(next, 0, ((size_t)tmax + (size_t)mk * nk + 1) * sizeof(double));
        for (int t = 0; t <= tmax; t++)
            if (dist[t] != 0)
                for (int u = 0; u <= mk * nk; u++) next[t + u] += dist[t] * f[u] / total;
        free(f);
        tmax += mk * nk;
        memcpy(dist, next, ((size_t)tmax + 1) * sizeof(double));
    }
    if (nd == 0) goto out;
    qsort(d, nd, sizeof(double), cmp_double);
    shift_from_sorted(d, nd, lower_critical(dist, tmax, 1.0, (1 - conf) / 2), conf, out);
    rc = 0;
out:
    free(d);
    free(dist);
    free(next);
    free(done);
    return rc;
}

int mst_stats_mean_interval(const double *x, int n, double conf, double *lo, double *hi) {
    if (n < 2 || !(conf > 0 && conf < 1)) return -1;
    double m = mst_stats_mean(x, n);
    double half = mst_stats_t_quantile((1 + conf) / 2, n - 1) * mst_stats_sd(x, n) / sqrt((double)n);
    *lo = m - half;
    *hi = m + half;
    return 0;
}

int mst_stats_prediction_interval(const double *x, int n, int k, double conf, double *lo, double *hi) {
    if (n < 2 || k < 1 || !(conf > 0 && conf < 1)) return -1;
    double m = mst_stats_mean(x, n), s = mst_stats_sd(x, n);
    double t = mst_stats_t_quantile((1 + conf) / 2, n - 1);
    double half = t * s * sqrt(1.0 / n + 1.0 / k);
    *lo = m - half;
    *hi = m + half;
    return 0;
}
