/* test_stats.c — the gate's statistics against values computed independently once:
 *  - Mann–Whitney exact p-values: brute-force enumeration of every split of the pooled sample
 *    (Python, itertools.combinations over C(10,5) = 252 and C(10,4) = 210 splits);
 *  - critical values: the published two-tailed 0.05 and one-tailed 0.01 Mann–Whitney U tables
 *    (e.g. Siegel & Castellan, "Nonparametric Statistics", table J; the same numbers appear in
 *    every textbook's U table), re-derived by the same enumeration;
 *  - tie-corrected normal p-values: the formula scipy.stats.mannwhitneyu(method="asymptotic",
 *    use_continuity=True) uses, evaluated in Python with math.erfc;
 *  - Hodges–Lehmann estimates and Moses intervals: all pairwise differences sorted in Python,
 *    bounds at the enumerated critical values;
 *  - the Shamos scale: Python's statistics.median over the pairwise differences;
 *  - t and normal quantiles: mpmath 1.3 (findroot on betainc, erfinv) at 30 digits, and the
 *    3-decimal values of the usual printed t table.
 * tests/report/stats_reference.py prints every one of them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "report/stats.h"

#define CLOSE(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

static void test_order_statistics(void **state) {
    double x[] = {5, 1, 4, 2, 3};
    CLOSE(mst_stats_median(x, 5), 3, 0);
    CLOSE(mst_stats_median(x, 4), 3, 1e-15);            /* {5,1,4,2}: (2 + 4) / 2 */
    CLOSE(mst_stats_quantile(x, 5, 0.9), 4.6, 1e-12);   /* R type 7: 4 + 0.6 * (5 - 4) */
    CLOSE(mst_stats_quantile(x, 5, 0), 1, 0);
    CLOSE(mst_stats_quantile(x, 5, 1), 5, 0);
    CLOSE(mst_stats_mean(x, 5), 3, 0);
    CLOSE(mst_stats_sd(x, 5), sqrt(2.5), 1e-15);
    CLOSE(mst_stats_cv(x, 5), sqrt(2.5) / 3, 1e-15);
    CLOSE(mst_stats_sd(x, 1), 0, 0);
    assert_true(x[0] == 5 && x[1] == 1);                /* input untouched */
}

static void test_robust_scale(void **state) {
    /* Python: 1.0483 * statistics.median of the within-group |differences| */
    double a[] = {1.0, 1.2, 0.9, 1.1, 1.05, 0.95};
    CLOSE(mst_stats_shamos(a, 6), 0.10483000000000009, 1e-15);
    double b[] = {1, 2, 3, 4, 100};                 /* the sd is 43.6; one wild value barely counts */
    CLOSE(mst_stats_shamos(b, 5), 2.62075, 1e-12);
    double x[] = {1, 2, 3, 4, 5}, y[] = {10, 10.5, 11, 30};
    CLOSE(mst_stats_shamos_pooled(x, 5, y, 4), 2.0966, 1e-12);    /* the shift between x and y is not counted */
    CLOSE(mst_stats_shamos(x, 1), 0, 0);
}

static void test_normal(void **state) {
    /* mpmath: sqrt(2) * erfinv(2p - 1) */
    CLOSE(mst_stats_normal_quantile(0.975), 1.9599639845400539, 1e-14);
    CLOSE(mst_stats_normal_quantile(0.99), 2.3263478740408408, 1e-14);
    /* near 1 the double nearest 0.999999 is itself off by ~1e-16, times dx/dp = 1/phi(4.75) = 2e5 */
    CLOSE(mst_stats_normal_quantile(0.999999), 4.7534243088170878, 1e-10);
    CLOSE(mst_stats_normal_quantile(1e-10), -6.3613409024040562, 1e-11);
    CLOSE(mst_stats_normal_quantile(0.5), 0, 1e-15);
    CLOSE(mst_stats_normal_cdf(1.9599639845400539), 0.975, 1e-15);
    CLOSE(mst_stats_normal_cdf(-2.3263478740408408), 0.01, 1e-15);
    for (double p = 0.001; p < 1; p += 0.0613) CLOSE(mst_stats_normal_cdf(mst_stats_normal_quantile(p)), p, 1e-14);
}

static void test_t_distribution(void **state) {
    /* mpmath, 15 digits; printed table: 3.747, 2.776, 1.833, 31.821, 2.750, 3.174 */
    CLOSE(mst_stats_t_quantile(0.99, 4), 3.7469473879792, 1e-10);
    CLOSE(mst_stats_t_quantile(0.975, 4), 2.77644510519779, 1e-10);
    CLOSE(mst_stats_t_quantile(0.95, 9), 1.83311293265624, 1e-10);
    CLOSE(mst_stats_t_quantile(0.99, 1), 31.8205159537739, 1e-8);
    CLOSE(mst_stats_t_quantile(0.995, 30), 2.74999565356722, 1e-10);
    CLOSE(mst_stats_t_quantile(0.999, 100), 3.17373949373878, 1e-10);
    CLOSE(mst_stats_t_quantile(0.9, 2.5), 1.73025092880718, 1e-10);     /* non-integer df */
    CLOSE(mst_stats_t_quantile(0.01, 4), -3.7469473879792, 1e-10);
    CLOSE(mst_stats_t_quantile(0.5, 7), 0, 0);
    CLOSE(mst_stats_t_cdf(2.0, 5), 0.94903026058507082, 1e-13);
    CLOSE(mst_stats_t_cdf(-2.0, 5), 1 - 0.94903026058507082, 1e-13);
    /* the Cauchy closed form for df = 1 */
    CLOSE(mst_stats_t_cdf(1.0, 1), 0.75, 1e-14);
    /* large df tends to the normal */
    CLOSE(mst_stats_t_quantile(0.975, 1e7), 1.9599639845400539, 1e-5);
}

static void test_mann_whitney_exact(void **state) {
    mst_mwu t;
    /* case A: U = 20, P(U >= 20) = 19/252 by enumeration; the other side 240/252 */
    double ax[] = {1.1, 2.3, 3.5, 4.2, 5.9}, ay[] = {2.0, 4.8, 6.1, 7.3, 8.4};
    assert_int_equal(mst_stats_mann_whitney(ax, 5, ay, 5, &t), 0);
    assert_true(t.exact && !t.ties);
    CLOSE(t.u, 20, 0);
    CLOSE(t.p_greater, 19.0 / 252, 1e-15);
    CLOSE(t.p_less, 240.0 / 252, 1e-15);
    /* case B: complete separation, the smallest p five runs a side can give */
    double bx[] = {10, 11, 12, 13, 14}, by[] = {15, 16, 17, 18, 19};
    mst_stats_mann_whitney(bx, 5, by, 5, &t);
    CLOSE(t.u, 25, 0);
    CLOSE(t.p_greater, 1.0 / 252, 1e-16);
    CLOSE(t.p_less, 1.0, 1e-15);
    CLOSE(mst_stats_mwu_min_p(5, 5), 1.0 / 252, 1e-15);
    CLOSE(mst_stats_mwu_min_p(4, 4), 1.0 / 70, 1e-15);
    /* case C: unequal sizes 4 and 6: U = 17, P(U >= 17) = 37/210, P(U <= 17) = 183/210 */
    double cx[] = {3.1, 1.2, 5.5, 4.4}, cy[] = {2.2, 6.6, 7.7, 0.5, 8.8, 9.9};
    mst_stats_mann_whitney(cx, 4, cy, 6, &t);
    CLOSE(t.u, 17, 0);
    CLOSE(t.p_greater, 37.0 / 210, 1e-15);
    CLOSE(t.p_less, 183.0 / 210, 1e-15);
    /* the exact CDF: P(U <= 2) = 4/252 for 5 and 5 */
    CLOSE(mst_stats_mwu_cdf(5, 5, 2), 4.0 / 252, 1e-15);
    CLOSE(mst_stats_mwu_cdf(5, 5, 12), 0.5, 1e-15);    /* symmetric: P(U <= 12) = 126/252 */
    CLOSE(mst_stats_mwu_cdf(5, 5, 25), 1, 0);
}

static void test_mann_whitney_ties(void **state) {
    mst_mwu t;
    /* x = {1,2,2,3,4}, y = {2,3,3,5,6}: U = 19, tie groups {2,2,2} and {3,3,3};
     * scipy-style continuity-corrected normal p (Python): greater 0.09941447200822119 */
    double x[] = {1, 2, 2, 3, 4}, y[] = {2, 3, 3, 5, 6};
    mst_stats_mann_whitney(x, 5, y, 5, &t);
    assert_true(t.ties && !t.exact);
    CLOSE(t.u, 19, 0);
    CLOSE(t.p_greater, 0.09941447200822119, 1e-12);
    /* and y against x: U = 6, p_greater 0.9330689276222845 */
    mst_stats_mann_whitney(y, 5, x, 5, &t);
    CLOSE(t.u, 6, 0);
    CLOSE(t.p_greater, 0.9330689276222845, 1e-12);
    /* two tied blocks (deterministic accuracy: 85% every run vs 84% every run): U = 0,
     * p_less = 0.001988375854894326 (Python, same formula) */
    double a[] = {85, 85, 85, 85, 85}, b[] = {84, 84, 84, 84, 84};
    mst_stats_mann_whitney(a, 5, b, 5, &t);
    CLOSE(t.u, 0, 0);
    CLOSE(t.p_less, 0.001988375854894326, 1e-12);
    /* everything equal: no evidence either way */
    mst_stats_mann_whitney(a, 5, a, 5, &t);
    CLOSE(t.p_greater, 1, 0);
    CLOSE(t.p_less, 1, 0);
}

static void test_critical_values(void **state) {
    /* published U tables, two-tailed 0.05 (alpha 0.025 a side): (5,5) 2, (8,8) 13, (10,10) 23, (5,10) 8 */
    assert_int_equal(mst_stats_mwu_critical(5, 5, 0.025), 2);
    assert_int_equal(mst_stats_mwu_critical(8, 8, 0.025), 13);
    assert_int_equal(mst_stats_mwu_critical(10, 10, 0.025), 23);
    assert_int_equal(mst_stats_mwu_critical(5, 10, 0.025), 8);
    assert_int_equal(mst_stats_mwu_critical(10, 5, 0.025), 8);
    /* one-tailed 0.01: (5,5) 1, (10,10) 19; (6,8) at 0.05: 10 (enumeration) */
    assert_int_equal(mst_stats_mwu_critical(5, 5, 0.01), 1);
    assert_int_equal(mst_stats_mwu_critical(10, 10, 0.01), 19);
    assert_int_equal(mst_stats_mwu_critical(6, 8, 0.05), 10);
    /* 4 and 4 runs cannot reach 0.01 (1/70 > 0.01) */
    assert_int_equal(mst_stats_mwu_critical(4, 4, 0.01), -1);
    /* above MST_STATS_EXACT_MAX: Hollander & Wolfe's normal approximation,
     * floor(1800 - 2.3263478740408408 * sqrt(60*60*121/12) - 0.5) = 1356 */
    assert_int_equal(mst_stats_mwu_critical(60, 60, 0.01), 1356);
}

/* The exact and the normal p agree closely where both apply (40 and 40, no ties). */
static void test_exact_close_to_normal(void **state) {
    double x[40], y[40];
    for (int i = 0; i < 40; i++) {
        x[i] = i * 1.0;
        y[i] = i * 1.0 + 6.5;          /* a moderate shift, no ties */
    }
    mst_mwu t;
    mst_stats_mann_whitney(x, 40, y, 40, &t);
    assert_true(t.exact);
    double mu = 800, sd = sqrt(1600.0 * 81 / 12);
    double normal = 1 - mst_stats_normal_cdf((t.u - mu - 0.5) / sd);
    CLOSE(t.p_greater, normal, 2e-3);
    assert_true(t.p_greater > 0 && t.p_greater < 0.2);
}

static void test_hodges_lehmann(void **state) {
    mst_shift s;
    /* case A: 25 differences, median 2.5; 95%: [D(3), D(23)] = [-1.5, 6.1]; 98%: [D(2), D(24)] = [-2.2, 6.2] */
    double ax[] = {1.1, 2.3, 3.5, 4.2, 5.9}, ay[] = {2.0, 4.8, 6.1, 7.3, 8.4};
    assert_int_equal(mst_stats_hodges_lehmann(ax, 5, ay, 5, 0.95, &s), 0);
    assert_true(s.bounded);
    CLOSE(s.estimate, 2.5, 1e-12);
    CLOSE(s.lo, -1.5, 1e-12);
    CLOSE(s.hi, 6.1, 1e-12);
    mst_stats_hodges_lehmann(ax, 5, ay, 5, 0.98, &s);
    CLOSE(s.lo, -2.2, 1e-12);
    CLOSE(s.hi, 6.2, 1e-12);
    /* case C (4 and 6, 24 differences): estimate 3.3 (mean of the 12th and 13th), 90%: [D(4), D(21)] = [-2.6, 6.5] */
    double cx[] = {3.1, 1.2, 5.5, 4.4}, cy[] = {2.2, 6.6, 7.7, 0.5, 8.8, 9.9};
    mst_stats_hodges_lehmann(cx, 4, cy, 6, 0.90, &s);
    CLOSE(s.estimate, 3.3, 1e-12);
    CLOSE(s.lo, -2.6, 1e-12);
    CLOSE(s.hi, 6.5, 1e-12);
    /* a pure shift is recovered exactly */
    double x[] = {1, 2, 3, 4, 5, 6, 7}, y[7];
    for (int i = 0; i < 7; i++) y[i] = x[i] + 0.75;
    mst_stats_hodges_lehmann(x, 7, y, 7, 0.95, &s);
    CLOSE(s.estimate, 0.75, 1e-12);
    assert_true(s.lo < 0.75 && s.hi > 0.75);
    /* 2 and 2 values cannot bound a 95% interval */
    mst_stats_hodges_lehmann(x, 2, y, 2, 0.95, &s);
    assert_false(s.bounded);
    assert_true(isinf(s.lo) && isinf(s.hi));
}

/* Two blocks measured minutes apart (the second 4 units higher: the machine drifted), y 1 below x
 * within each. Pooled, the drift hides the shift; within the blocks it is resolved. Python
 * (exact convolution of two 3x3 U distributions): 90% c = 3 -> [D(4), D(33)] = [-1.3, -0.7], 80%
 * c = 4 -> [-1.2, -0.8], estimate -1.0. */
static void test_hodges_lehmann_strata(void **state) {
    mst_shift s, pooled;
    double x[] = {10.0, 10.4, 9.8, 14.0, 14.3, 13.9}, y[] = {9.1, 9.6, 8.7, 13.2, 13.1, 12.8};
    int xs[] = {0, 0, 0, 1, 1, 1}, ys[] = {0, 0, 0, 1, 1, 1};
    assert_int_equal(mst_stats_hodges_lehmann_strata(x, xs, 6, y, ys, 6, 0.90, &s), 0);
    assert_true(s.bounded);
    CLOSE(s.estimate, -1.0, 1e-12);
    CLOSE(s.lo, -1.3, 1e-12);
    CLOSE(s.hi, -0.7, 1e-12);
    mst_stats_hodges_lehmann_strata(x, xs, 6, y, ys, 6, 0.80, &s);
    CLOSE(s.lo, -1.2, 1e-12);
    CLOSE(s.hi, -0.8, 1e-12);
    mst_stats_hodges_lehmann(x, 6, y, 6, 0.90, &pooled);
    assert_true(pooled.lo < 0 && pooled.hi > 0);       /* the drift hides it when pooled */
    /* one stratum: the plain estimate and interval (case C of test_hodges_lehmann) */
    double cx[] = {3.1, 1.2, 5.5, 4.4}, cy[] = {2.2, 6.6, 7.7, 0.5, 8.8, 9.9};
    int zero[6] = {0};
    mst_stats_hodges_lehmann_strata(cx, zero, 4, cy, zero, 6, 0.90, &s);
    CLOSE(s.estimate, 3.3, 1e-12);
    CLOSE(s.lo, -2.6, 1e-12);
    CLOSE(s.hi, 6.5, 1e-12);
    /* a value in a stratum the other group lacks is not used */
    int ys2[] = {0, 0, 0, 1, 1, 7};
    double y2[] = {9.1, 9.6, 8.7, 13.2, 13.1, -100};
    mst_stats_hodges_lehmann_strata(x, xs, 6, y2, ys2, 6, 0.90, &s);
    assert_true(s.estimate > -1.3 && s.estimate < -0.7);
    /* no stratum in common */
    int other[] = {5, 5, 5, 5, 5, 5};
    assert_int_equal(mst_stats_hodges_lehmann_strata(x, xs, 6, y, other, 6, 0.90, &s), -1);
}

static void test_prediction_interval(void **state) {
    /* Python: mean 1.05, sd 0.1049, t_{0.975,5} = 2.5705818356363155, k = 2 future values */
    double x[] = {1.0, 1.2, 0.9, 1.1, 1.05, 0.95};
    double lo, hi;
    assert_int_equal(mst_stats_prediction_interval(x, 6, 2, 0.95, &lo, &hi), 0);
    CLOSE(lo, 0.8066293246055467, 1e-10);
    CLOSE(hi, 1.2600373420611202, 1e-10);
    assert_int_equal(mst_stats_prediction_interval(x, 1, 2, 0.95, &lo, &hi), -1);
}

/* Under H0 the exact test's size is at most alpha: over many seeded A/A draws the rejection rate
 * at 0.05 stays near 0.05 (binomial sd at 4000 draws: 0.0034). Seed printed on failure. */
static void test_size_under_null(void **state) {
    uint64_t seed = 0x5eed5eedull, s = seed;
    int rejects = 0, n = 4000;
    for (int it = 0; it < n; it++) {
        double x[5], y[5];
        for (int i = 0; i < 5; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (double)(s >> 11);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            y[i] = (double)(s >> 11);
        }
        mst_mwu t;
        mst_stats_mann_whitney(x, 5, y, 5, &t);
        rejects += t.p_greater <= 0.05;
    }
    double rate = (double)rejects / n;
    /* the largest exact p <= 0.05 for 5 and 5 is P(U >= 21) = 0.0476 */
    if (!(rate > 0.035 && rate < 0.06)) fail_msg("rejection rate %.4f under H0 (seed %#llx)", rate, (unsigned long long)seed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_statistics),   cmocka_unit_test(test_robust_scale),
        cmocka_unit_test(test_normal),
        cmocka_unit_test(test_t_distribution),     cmocka_unit_test(test_mann_whitney_exact),
        cmocka_unit_test(test_mann_whitney_ties),  cmocka_unit_test(test_critical_values),
        cmocka_unit_test(test_exact_close_to_normal), cmocka_unit_test(test_hodges_lehmann),
        cmocka_unit_test(test_hodges_lehmann_strata),
        cmocka_unit_test(test_prediction_interval), cmocka_unit_test(test_size_under_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
