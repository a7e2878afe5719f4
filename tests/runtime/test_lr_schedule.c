/* test_lr_schedule.c — learning-rate schedules: values at the key steps (warmup start and end,
 * step-decay boundaries, cosine start, midpoint, end and beyond), and every validation error. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/lr_schedule.h"

#define TOL 1e-15

static void assert_lr(const mst_lr_schedule *s, int64_t step, double want) {
    double got = mst_lr_at(s, step);
    if (fabs(got - want) > TOL * fmax(1.0, fabs(want)))
        fail_msg("%s schedule at step %lld: got %.17g, want %.17g", mst_lr_kind_name(s->kind), (long long)step, got, want);
}

static void test_constant(void **state) {
    mst_lr_schedule s = {.kind = MST_LR_CONSTANT, .base_lr = 0.1};
    assert_true(mst_lr_validate(&s, NULL, 0));
    assert_lr(&s, 0, 0.1);
    assert_lr(&s, 1000000, 0.1);
    assert_lr(&s, -5, 0.1);
    /* warmup 4: 0.025, 0.05, 0.075, 0.1 at steps 0..3, then flat */
    s.warmup_steps = 4;
    assert_lr(&s, -1, 0.025);
    assert_lr(&s, 0, 0.025);
    assert_lr(&s, 1, 0.05);
    assert_lr(&s, 3, 0.1);
    assert_lr(&s, 4, 0.1);
    assert_lr(&s, 99, 0.1);
    /* warmup 1 is no warmup at all */
    s.warmup_steps = 1;
    assert_lr(&s, 0, 0.1);
}

static void test_step_decay(void **state) {
    mst_lr_schedule s = {.kind = MST_LR_STEP, .base_lr = 1.0, .step_size = 10, .gamma = 0.5};
    assert_true(mst_lr_validate(&s, NULL, 0));
    assert_lr(&s, 0, 1.0);
    assert_lr(&s, 9, 1.0);
    assert_lr(&s, 10, 0.5);
    assert_lr(&s, 19, 0.5);
    assert_lr(&s, 20, 0.25);
    assert_lr(&s, 105, pow(0.5, 10));
    /* with warmup 5 the decay counts from the end of the warmup */
    s.warmup_steps = 5;
    assert_lr(&s, 0, 0.2);
    assert_lr(&s, 4, 1.0);
    assert_lr(&s, 5, 1.0);
    assert_lr(&s, 14, 1.0);
    assert_lr(&s, 15, 0.5);
    assert_lr(&s, 25, 0.25);
    /* gamma > 1 grows, step_size 1 decays every step */
    s = (mst_lr_schedule){.kind = MST_LR_STEP, .base_lr = 0.1, .step_size = 1, .gamma = 2.0};
    assert_lr(&s, 3, 0.8);
}

static void test_cosine(void **state) {
    mst_lr_schedule s = {.kind = MST_LR_COSINE, .base_lr = 0.1, .total_steps = 100, .min_lr = 0.0};
    assert_true(mst_lr_validate(&s, NULL, 0));
    assert_lr(&s, 0, 0.1);
    assert_lr(&s, 25, 0.05 * (1 + cos(M_PI / 4)));
    assert_lr(&s, 50, 0.05);                       /* midpoint: halfway between base and min */
    assert_lr(&s, 99, 0.05 * (1 + cos(M_PI * 0.99)));
    assert_lr(&s, 100, 0.0);                       /* end */
    assert_lr(&s, 1000, 0.0);                      /* beyond: clamped */

    /* warmup 10 of 110, min 0.01: T = 100 steps of cosine after the warmup */
    s = (mst_lr_schedule){.kind = MST_LR_COSINE, .base_lr = 0.1, .warmup_steps = 10, .total_steps = 110, .min_lr = 0.01};
    assert_true(mst_lr_validate(&s, NULL, 0));
    assert_lr(&s, 0, 0.01);                        /* warmup start: base / 10 */
    assert_lr(&s, 4, 0.05);
    assert_lr(&s, 9, 0.1);                         /* warmup end */
    assert_lr(&s, 10, 0.1);                        /* cosine start */
    assert_lr(&s, 60, 0.055);                      /* midpoint: (0.1 + 0.01) / 2 */
    assert_lr(&s, 110, 0.01);
    assert_lr(&s, 5000, 0.01);
    /* monotone non-increasing after the warmup, always within [min, base] */
    double prev = INFINITY;
    for (int64_t t = 10; t <= 120; t++) {
        double lr = mst_lr_at(&s, t);
        assert_true(lr <= prev && lr >= 0.01 && lr <= 0.1);
        prev = lr;
    }
    /* min == base is a constant */
    s.min_lr = 0.1;
    assert_true(mst_lr_validate(&s, NULL, 0));
    assert_lr(&s, 60, 0.1);
}

static void expect_invalid(const mst_lr_schedule *s, const char *needle) {
    char err[256] = "untouched";
    if (mst_lr_validate(s, err, sizeof(err))) fail_msg("expected \"%s\", but the schedule validated", needle);
    if (!strstr(err, needle)) fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

static void test_validation(void **state) {
    expect_invalid(NULL, "lr schedule: NULL");
    expect_invalid(&(mst_lr_schedule){.kind = (mst_lr_kind)9}, "kind 9 is not one of constant, step, cosine");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = -0.1},
                   "lr schedule constant: base_lr must be finite and >= 0, got -0.1");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = NAN}, "base_lr must be finite and >= 0, got nan");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = INFINITY}, "got inf");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = 0.1, .warmup_steps = -1},
                   "warmup_steps must be >= 0, got -1");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_STEP, .base_lr = 0.1, .step_size = 0, .gamma = 0.5},
                   "lr schedule step: step_size must be >= 1, got 0");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_STEP, .base_lr = 0.1, .step_size = 10, .gamma = 0},
                   "lr schedule step: gamma must be finite and > 0, got 0");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_STEP, .base_lr = 0.1, .step_size = 10, .gamma = -0.5}, "got -0.5");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_COSINE, .base_lr = 0.1, .warmup_steps = 100, .total_steps = 100},
                   "lr schedule cosine: total_steps must be > warmup_steps (100), got 100");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_COSINE, .base_lr = 0.1, .total_steps = 0},
                   "total_steps must be > warmup_steps (0), got 0");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_COSINE, .base_lr = 0.1, .total_steps = 10, .min_lr = 0.2},
                   "lr schedule cosine: min_lr must be in [0, base_lr = 0.1], got 0.2");
    expect_invalid(&(mst_lr_schedule){.kind = MST_LR_COSINE, .base_lr = 0.1, .total_steps = 10, .min_lr = -1e-3},
                   "got -0.001");
    /* fields of other kinds are ignored; a valid schedule clears err; a short buffer is fine */
    char err[8] = "xx";
    assert_true(mst_lr_validate(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = 0.1, .gamma = -1}, err, sizeof(err)));
    assert_string_equal(err, "");
    assert_false(mst_lr_validate(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = -1}, err, sizeof(err)));
    assert_int_equal(strlen(err), sizeof(err) - 1);
    assert_false(mst_lr_validate(&(mst_lr_schedule){.kind = MST_LR_CONSTANT, .base_lr = -1}, NULL, 0));
}

static void test_names(void **state) {
    for (int k = 0; k < MST_LR_KIND_COUNT; k++) assert_int_equal(mst_lr_kind_parse(mst_lr_kind_name(k)), k);
    assert_string_equal(mst_lr_kind_name(MST_LR_COSINE), "cosine");
    assert_string_equal(mst_lr_kind_name(MST_LR_KIND_COUNT), "?");
    assert_int_equal(mst_lr_kind_parse("linear"), -1);
    assert_int_equal(mst_lr_kind_parse(NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant), cmocka_unit_test(test_step_decay), cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_validation), cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
