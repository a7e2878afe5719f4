/* test_self_cost.c — the in-run cost of recording (profiler/self_cost.h) from synthetic step
 * times: the pairs a schedule makes, window means (a rare costly step counts), untimed steps and
 * steps outside the run left out, the t interval, and the schedules that cannot measure. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "profiler/self_cost.h"

/* 3 off + 1 warmup + 2 active per cycle, after 2 skipped steps: off steps 1.0 ms, recording steps
 * 1.1 ms, except one recording step per cycle at 1.3 (a lumpy cost: the window mean keeps it). */
static void test_pairs_and_means(void **state) {
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .skip = 2, .warmup = 1, .active = 2, .wait = 3};
    enum { N = 2 + 6 * 10 };
    double ms[N];
    for (int s = 0; s < N; s++) {
        mst_prof_phase ph = mst_prof_schedule_phase(&c, s);
        ms[s] = ph == MST_PROF_STEP_OFF ? 1.0 : 1.1;
        if (s >= 2 && (s - 2) % 6 == 5) ms[s] = 1.3;
    }
    ms[0] = 50;                     /* skipped steps are no one's pair */
    ms[2 + 6 * 4] = NAN;            /* an untimed step (an epoch's first) is left out */
    mst_prof_self_cost r;
    assert_int_equal(mst_prof_measure_self_cost(&c, 0, ms, N, 0.90, &r), 0);
    assert_int_equal(r.pairs, 10);
    double on = (1.1 * 2 + 1.3) / 3;
    assert_true(fabs(r.cost - (on - 1)) < 1e-9);
    assert_true(fabs(r.off_ms - 1.0) < 1e-9 && fabs(r.on_ms - on) < 1e-9);
    assert_true(fabs(r.lo - r.cost) < 1e-9 && fabs(r.hi - r.cost) < 1e-9);   /* every pair alike: no spread */
    assert_true(fabs(r.recorded_ms - 10 * 3 * on) < 1e-9);
}

/* Pairs that differ give an interval around the mean; a run that starts late (resumed) pairs only
 * what it ran; one pair has no interval. */
static void test_interval_and_partial_runs(void **state) {
    mst_prof_config c = {.level = MST_PROF_LEVEL_STEPS, .active = 1, .wait = 1};
    double ms[8] = {1.0, 1.02, 1.0, 1.06, 1.0, 1.04, 1.0, 1.00};
    mst_prof_self_cost r;
    assert_int_equal(mst_prof_measure_self_cost(&c, 0, ms, 8, 0.90, &r), 0);
    assert_int_equal(r.pairs, 4);
    assert_true(fabs(r.cost - 0.03) < 1e-9);
    /* sd of {.02,.06,.04,0} = 0.02582; t(0.95, 3) = 2.3534 */
    assert_true(fabs(r.hi - r.cost - 2.3534 * 0.025820 / 2) < 1e-4);
    assert_true(fabs(r.cost - r.lo - (r.hi - r.cost)) < 1e-12);
    assert_int_equal(mst_prof_measure_self_cost(&c, 5, ms + 5, 3, 0.90, &r), 0);     /* steps 5..7: only 6,7 pair */
    assert_int_equal(r.pairs, 1);
    assert_true(isinf(r.lo) && isinf(r.hi));
    assert_true(fabs(r.cost - 0.0) < 1e-9);
}

/* Noise in the off windows is not a cost: with recording steps at 1.0 ms and off windows at 0.8
 * or 1.2 ms alike, the ratio of the means is 1 (a mean of per-pair ratios read +4.2%: 1/off is
 * convex, so noise alone pushed it up); the interval is the ratio estimator's (delta method). */
static void test_noisy_off_windows_cost_nothing(void **state) {
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .active = 1, .wait = 1};
    double ms[8] = {0.8, 1.0, 1.2, 1.0, 0.8, 1.0, 1.2, 1.0};
    mst_prof_self_cost r;
    assert_int_equal(mst_prof_measure_self_cost(&c, 0, ms, 8, 0.90, &r), 0);
    assert_true(fabs(r.cost) < 1e-12);
    /* residuals on - 1 * off = {.2, -.2, .2, -.2}: sd 0.23094; t(0.95, 3) = 2.3534; mean(off) = 1 */
    assert_true(fabs(r.hi - 2.3534 * 0.23094 / 2) < 1e-4);
    assert_true(fabs(r.lo + r.hi) < 1e-12);
}

static void test_cannot_measure(void **state) {
    double ms[4] = {1, 1, 1, 1};
    mst_prof_self_cost r;
    mst_prof_config every = {.level = MST_PROF_LEVEL_OPS, .warmup = 1};              /* no off steps */
    assert_int_equal(mst_prof_measure_self_cost(&every, 0, ms, 4, 0.9, &r), -1);
    mst_prof_config all_off = {.level = MST_PROF_LEVEL_OPS, .skip = 10, .active = 1, .wait = 1};
    assert_int_equal(mst_prof_measure_self_cost(&all_off, 0, ms, 4, 0.9, &r), -1);
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .active = 2, .wait = 2};
    double untimed[4] = {NAN, NAN, 1, 1};                                              /* no off step timed */
    assert_int_equal(mst_prof_measure_self_cost(&c, 0, untimed, 4, 0.9, &r), -1);
    assert_int_equal(r.pairs, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_and_means),
        cmocka_unit_test(test_noisy_off_windows_cost_nothing),
        cmocka_unit_test(test_interval_and_partial_runs),
        cmocka_unit_test(test_cannot_measure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
