/* test_step_threads.c — the verdict on a graph step's thread budget (runtime/graph/step_threads.h)
 * from synthetic run times: the run order (warm-up pair, then pairs of two-run turns, each turn's
 * first run untimed), a one-thread step
 * kept only when its median is 10% faster and it won all pairs but one, a run order that no time and
 * no verdict on file changes (two processes on one verdict get the same bits), the pins (the job
 * key and the environment), nothing to decide on one thread, and a verdict from the machine's file
 * confirmed or overturned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/graph/step_threads.h"

/* Feeds the trial until decided: each timed run's time from the callback (pair -1: the warm-up
 * pair), 1e9 for a turn's untimed first run; returns the runs it took. */
static int feed(mst_step_threads *v, double (*time_of)(bool serial, int pair)) {
    int runs = 0;
    while (!mst_step_threads_decided(v)) {
        bool one = mst_step_threads_next(v);
        bool untimed_first = runs >= 2 && (runs - 2) % 2 == 0;
        mst_step_threads_record(v, one, untimed_first ? 1e9 : time_of(one, runs < 2 ? -1 : (runs - 2) / 4));
        runs++;
        assert_true(runs <= MST_STEP_THREADS_TRIAL_RUNS);
    }
    return runs;
}

static double one_faster(bool serial, int pair) { return pair < 0 ? 1e9 : serial ? 150e3 : 200e3; }
static double one_slower(bool serial, int pair) { (void)pair; return serial ? 40e6 : 15e6; }
static double one_slightly_faster(bool serial, int pair) { (void)pair; return serial ? 190e3 : 200e3; }
static double one_15_faster(bool serial, int pair) { (void)pair; return serial ? 170e3 : 200e3; }
static double all_15_faster(bool serial, int pair) { (void)pair; return serial ? 200e3 : 170e3; }
static double all_faster(bool serial, int pair) { (void)pair; return serial ? 260e3 : 200e3; }
static double level(bool serial, int pair) { (void)pair; return serial ? 205e3 : 200e3; }
/* one thread 25% faster at the median but slower in two pairs of five: drift, not a verdict */
static double one_faster_twice_lost(bool serial, int pair) {
    if (!serial) return 200e3;
    return pair == 1 || pair == 3 ? 210e3 : 150e3;
}
static double one_faster_once_lost(bool serial, int pair) {
    if (!serial) return 200e3;
    return pair == 2 ? 210e3 : 150e3;
}

static void test_run_order_alternates_after_a_warmup_pair(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads v;
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    bool expect[MST_STEP_THREADS_TRIAL_RUNS];
    for (int i = 0; i < MST_STEP_THREADS_TRIAL_RUNS; i++) {
        expect[i] = i < 2 ? i & 1 : (i - 2) % 4 >= 2;     /* all, one; then all, all, one, one per pair */
        assert_false(mst_step_threads_decided(&v));
        assert_int_equal(mst_step_threads_next(&v), expect[i]);
        mst_step_threads_record(&v, expect[i], expect[i] ? 100e3 : 200e3);
    }
    assert_true(mst_step_threads_decided(&v));
    assert_true(v.serial);
    assert_int_equal(v.timed, MST_STEP_THREADS_PAIRS);
    /* the warm-up pair's times are not samples: 1e9 there changes nothing */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_int_equal(feed(&v, one_faster), MST_STEP_THREADS_TRIAL_RUNS);
    assert_true(v.serial);
    assert_true(v.median_ns[1] == 150e3 && v.median_ns[0] == 200e3);
    assert_true(mst_step_threads_next(&v));     /* the verdict from now on */
}

static void test_out_of_turn_record_is_ignored(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads v;
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_record(&v, true, 1.0);     /* run 0 is an all-threads run */
    assert_int_equal(v.runs, 0);
    mst_step_threads_record(&v, false, 1.0);
    assert_int_equal(v.runs, 1);
}

static void test_slower_or_marginal_one_thread_keeps_the_pool(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads v;
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_int_equal(feed(&v, one_slower), MST_STEP_THREADS_TRIAL_RUNS);   /* no early stop */
    assert_false(v.serial);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_int_equal(feed(&v, one_slightly_faster), MST_STEP_THREADS_TRIAL_RUNS);
    assert_false(v.serial);                     /* 5% faster: inside the margin */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    feed(&v, one_faster_twice_lost);
    assert_false(v.serial);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    feed(&v, one_faster_once_lost);
    assert_true(v.serial);
}

static void test_forced_and_single_thread(void **state) {
    (void)state;
    mst_step_threads v;
    setenv("MSTUNE_GRAPH_THREADS", "one", 1);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_true(mst_step_threads_decided(&v) && v.serial && v.forced);
    assert_true(mst_step_threads_next(&v));
    mst_step_threads_init(&v, 1, MST_STEP_THREADS_AUTO, NULL);               /* one thread already: nothing to make serial */
    assert_true(mst_step_threads_decided(&v));
    assert_false(v.serial);
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    mst_step_threads_init(&v, 4, MST_STEP_THREADS_AUTO, NULL);
    assert_true(mst_step_threads_decided(&v) && !v.serial);
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads_init(&v, 1, MST_STEP_THREADS_AUTO, NULL);
    assert_true(mst_step_threads_decided(&v) && !v.serial);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_false(mst_step_threads_decided(&v));
    /* runtime.step_threads pins it as the environment does; the environment wins over the job */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_ONE, NULL);
    assert_true(mst_step_threads_decided(&v) && v.serial && v.forced && !v.pinned_by_env);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_ALL, NULL);
    assert_true(mst_step_threads_decided(&v) && !v.serial);
    setenv("MSTUNE_STEP_THREADS", "all", 1);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_ONE, NULL);
    assert_true(mst_step_threads_decided(&v) && !v.serial && v.pinned_by_env);
    setenv("MSTUNE_STEP_THREADS", "auto", 1);   /* auto in the environment leaves the job's pin */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_ONE, NULL);
    assert_true(v.serial && !v.pinned_by_env);
    setenv("MSTUNE_STEP_THREADS", "two", 1);    /* not a value: ignored (with a warning on stderr) */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_false(mst_step_threads_decided(&v) || v.pinned_by_env);
    unsetenv("MSTUNE_STEP_THREADS");
    assert_int_equal(mst_step_threads_pin_parse("one"), MST_STEP_THREADS_ONE);
    assert_int_equal(mst_step_threads_pin_parse("two"), -1);
}

/* The budgets a trial runs, run by run, until it decides: the same for a new trial and a
 * confirmation, whatever the times (the first version stopped a trial early when one thread was
 * 1.5x slower and confirmed with a shorter one, so two runs of a job on one verdict ran different
 * budgets at some steps and got different bits). */
static int schedule(bool from_file, bool file_one, double (*time_of)(bool serial, int pair), bool order[MST_STEP_THREADS_TRIAL_RUNS + 1]) {
    mst_step_threads v;
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    if (from_file) mst_step_threads_set(&v, file_one);
    int runs = 0;
    while (!mst_step_threads_decided(&v) && runs <= MST_STEP_THREADS_TRIAL_RUNS) {
        bool one = order[runs] = mst_step_threads_next(&v);
        bool untimed_first = runs >= 2 && (runs - 2) % 2 == 0;
        mst_step_threads_record(&v, one, untimed_first ? 1e9 : time_of(one, runs < 2 ? -1 : (runs - 2) / 4));
        runs++;
    }
    return runs;
}

static void test_run_order_is_the_same_whatever_the_times(void **state) {
    (void)state;
    unsetenv("MSTUNE_STEP_THREADS");
    unsetenv("MSTUNE_GRAPH_THREADS");
    double (*const times[])(bool, int) = {one_faster, one_slower, one_slightly_faster, one_faster_twice_lost, all_faster, level};
    bool first[MST_STEP_THREADS_TRIAL_RUNS + 1], other[MST_STEP_THREADS_TRIAL_RUNS + 1];
    assert_int_equal(schedule(false, false, one_faster, first), MST_STEP_THREADS_TRIAL_RUNS);
    for (size_t t = 0; t < sizeof(times) / sizeof(times[0]); t++)
        for (int file = 0; file < 3; file++) {      /* a new trial; all threads on file; one thread on file */
            assert_int_equal(schedule(file > 0, file == 2, times[t], other), MST_STEP_THREADS_TRIAL_RUNS);
            assert_memory_equal(first, other, sizeof(bool) * MST_STEP_THREADS_TRIAL_RUNS);
        }
}

/* What `mstune graph` and the log say before the trial and after it (two threads), into buf. */
static void describe_around_trial(mst_step_threads *v, double (*time_of)(bool serial, int pair), char *buf, size_t n) {
    FILE *f = fmemopen(buf, n, "w");
    mst_step_threads_describe(v, 2, f);
    feed(v, time_of);
    mst_step_threads_describe(v, 2, f);
    fclose(f);
}

static void test_describe_names_the_verdict(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads v;
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    char buf[512];
    describe_around_trial(&v, one_faster, buf, sizeof(buf));
    assert_non_null(strstr(buf, "decided by the step's first 18 runs"));
    assert_non_null(strstr(buf, "one thread kept: one thread 150.0 us vs 2 threads 200.0 us"));
}

/* A verdict from the file: the confirmation runs as a trial does, and is overturned only by the
 * trial's rule for the other budget at twice its margin. */

static void test_file_verdict_confirmed_or_overturned(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    mst_step_threads v;
    /* one thread on file, two threads 23% faster in every pair: overturned */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, true);
    assert_false(mst_step_threads_decided(&v));
    assert_int_equal(feed(&v, all_faster), MST_STEP_THREADS_TRIAL_RUNS);
    assert_false(v.serial);
    assert_true(v.overturned && mst_step_threads_measured_new(&v));
    /* one thread on file, level: kept, nothing new to write */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, true);
    feed(&v, level);
    assert_true(v.serial);
    assert_false(v.overturned || mst_step_threads_measured_new(&v));
    /* one thread on file, far slower: overturned */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, true);
    assert_int_equal(feed(&v, one_slower), MST_STEP_THREADS_TRIAL_RUNS);
    assert_false(v.serial);
    assert_true(v.overturned);
    /* all threads on file: one thread 25% faster in every pair overturns it; level keeps it */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, false);
    feed(&v, one_faster);
    assert_true(v.serial && v.overturned);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, false);
    feed(&v, one_slightly_faster);
    assert_false(v.serial || v.overturned);
    /* one thread 15% faster: a new trial keeps it, but it does not overturn all threads on file
     * (the overturn takes 20%: budgets near the first margin do not flip from process to process) */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    feed(&v, one_15_faster);
    assert_true(v.serial);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, false);
    feed(&v, one_15_faster);
    assert_false(v.serial || v.overturned);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);        /* nor all threads 15% faster one thread on file */
    mst_step_threads_set(&v, true);
    feed(&v, all_15_faster);
    assert_true(v.serial && !v.overturned);
    /* a new trial's verdict is new to the file; a forced one is not */
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    feed(&v, one_faster);
    assert_true(mst_step_threads_measured_new(&v));
    setenv("MSTUNE_GRAPH_THREADS", "one", 1);
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    assert_false(mst_step_threads_measured_new(&v));
    unsetenv("MSTUNE_GRAPH_THREADS");
    /* what `mstune graph` and the log say */
    char buf[512];
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, true);
    describe_around_trial(&v, all_faster, buf, sizeof(buf));
    assert_non_null(strstr(buf, "one thread (this machine's verdict file), confirmed by the step's first 18 runs"));
    assert_non_null(strstr(buf, "all threads (this machine's verdict file overturned): one thread 260.0 us vs 2 threads 200.0 us"));
}

/* MSTUNE_VERDICTS=keep (what `mstune advise` sets for its runs): a verdict on file is decided at
 * once, as the file says, with no confirming runs, so it is never overturned and nothing new is
 * written; without a verdict on file the trial runs as before. */
static void test_kept_file_verdict(void **state) {
    (void)state;
    unsetenv("MSTUNE_GRAPH_THREADS");
    unsetenv("MSTUNE_STEP_THREADS");
    setenv("MSTUNE_VERDICTS", "keep", 1);
    assert_true(mst_verdicts_kept());
    mst_step_threads v;
    for (int one = 0; one <= 1; one++) {
        mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
        mst_step_threads_set(&v, one);
        assert_true(mst_step_threads_decided(&v));
        assert_int_equal(v.serial, one);
        assert_int_equal(mst_step_threads_next(&v), one);      /* every run on the file's budget */
        assert_int_equal(feed(&v, one ? all_faster : one_faster), 0);    /* no run is part of a trial */
        assert_int_equal(v.serial, one);
        assert_false(v.overturned || mst_step_threads_measured_new(&v));
        char buf[512];
        describe_around_trial(&v, level, buf, sizeof(buf));
        assert_non_null(strstr(buf, "(this machine's verdict file, kept as it stands: MSTUNE_VERDICTS=keep)"));
    }
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);       /* no verdict on file: a trial */
    assert_false(mst_step_threads_decided(&v));
    assert_int_equal(feed(&v, one_faster), MST_STEP_THREADS_TRIAL_RUNS);
    assert_true(v.serial && mst_step_threads_measured_new(&v));
    setenv("MSTUNE_VERDICTS", "confirm", 1);                         /* any other value: confirmed as before */
    assert_false(mst_verdicts_kept());
    mst_step_threads_init(&v, 2, MST_STEP_THREADS_AUTO, NULL);
    mst_step_threads_set(&v, true);
    assert_false(mst_step_threads_decided(&v));
    unsetenv("MSTUNE_VERDICTS");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_order_alternates_after_a_warmup_pair),
        cmocka_unit_test(test_out_of_turn_record_is_ignored),
        cmocka_unit_test(test_slower_or_marginal_one_thread_keeps_the_pool),
        cmocka_unit_test(test_forced_and_single_thread),
        cmocka_unit_test(test_run_order_is_the_same_whatever_the_times),
        cmocka_unit_test(test_describe_names_the_verdict),
        cmocka_unit_test(test_file_verdict_confirmed_or_overturned),
        cmocka_unit_test(test_kept_file_verdict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
