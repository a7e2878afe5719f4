/* test_checked.c — util/checked.h: doubles from files become integers only inside their range
 * (NaN, infinities and 4e44 — the fuzzer's find in the trial reader — are refused), size and
 * element-count arithmetic reports overflow, and a tensor whose element count overflows is
 * refused with a message instead of wrapping. (issue 15, item 6) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/context.h"
#include "runtime/tensor.h"
#include "util/checked.h"

static void test_f64_to_i64(void **state) {
    int64_t v = 0;
    assert_true(mst_f64_to_i64(3.9, 0, 10, &v));
    assert_int_equal(v, 3);
    assert_true(mst_f64_to_i64(-2.5, -5, 0, &v));
    assert_int_equal(v, -2);
    v = 77;
    assert_false(mst_f64_to_i64(4e44, 0, INT64_MAX, &v));
    assert_false(mst_f64_to_i64(-4e44, INT64_MIN, 0, &v));
    assert_false(mst_f64_to_i64(NAN, 0, 10, &v));
    assert_false(mst_f64_to_i64(INFINITY, 0, INT64_MAX, &v));
    assert_false(mst_f64_to_i64(9223372036854775808.0, 0, INT64_MAX, &v));     /* 2^63: one past */
    assert_false(mst_f64_to_i64(11, 0, 10, &v));
    assert_int_equal(v, 77);        /* untouched on refusal */
    assert_true(mst_f64_to_i64(-9223372036854775808.0, INT64_MIN, 0, &v));
    assert_true(v == INT64_MIN);
    assert_int_equal(mst_f64_to_i64_or(4e44, 0, 100, -1), -1);
    assert_int_equal(mst_f64_to_int_or(1.1e9 * 4, 0, 1 << 20, 0), 0);
    assert_int_equal(mst_f64_to_int_or(64, 0, 1 << 20, 0), 64);
}

static void test_overflow_arithmetic(void **state) {
    int64_t r = 5;
    assert_true(mst_i64_mul(1 << 20, 1 << 20, &r));
    assert_true(r == (int64_t)1 << 40);
    assert_false(mst_i64_mul(INT64_MAX / 2 + 1, 2, &r));
    assert_false(mst_i64_mul(-1, 2, &r));
    assert_false(mst_i64_add(INT64_MAX, 1, &r));
    size_t z = 0;
    assert_false(mst_size_mul(SIZE_MAX / 2 + 1, 2, &z));
    assert_false(mst_size_add(SIZE_MAX, 1, &z));
    assert_true(mst_size_mul(1000, 1000, &z) && z == 1000000);
}

static void test_tensor_count_overflow(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    assert_non_null(ctx);
    int64_t shape[3] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31};     /* 2^93 elements */
    mst_tensor *t = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, shape);
    assert_null(t);
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "too many elements"));
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f64_to_i64),
        cmocka_unit_test(test_overflow_arithmetic),
        cmocka_unit_test(test_tensor_count_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
