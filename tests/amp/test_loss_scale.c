/* test_loss_scale.c — the loss-scaling and clipping ops (amp_unscale_check, amp_update_scale,
 * clip_coef), the copy op, and the loss scaler object: values against hand-computed sequences,
 * inf/NaN detection, the dynamic scale's MindSpore rules (shrink on overflow, grow after
 * `window` clean steps, floor), validation messages, and the consecutive-overflow limit. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/loss_scale.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "tests/runtime/gradcheck.h"

static void expect_error(mst_ctx *ctx, mst_status got, mst_status want, const char *needle) {
    if (got != want || mst_ctx_status(ctx) != want || !strstr(mst_ctx_error(ctx), needle))
        fail_msg("want status %d with \"%s\", got %d: \"%s\"", want, needle, got, mst_ctx_error(ctx));
    mst_ctx_clear_error(ctx);
}

static void test_unscale_check(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype dts[2] = {MST_DTYPE_F32, MST_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        mst_tensor *g = mst_tensor_new(ctx, dts[d], 1, (int64_t[]){37});
        for (int64_t i = 0; i < 37; i++) mst_tensor_set(g, i, (double)(i - 18) * 256.0 + 0.5);
        mst_tensor *scale = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1024), *found = mst_tensor_scalar(ctx, MST_DTYPE_F32, 7);
        assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
        for (int64_t i = 0; i < 37; i++) assert_true(mst_tensor_get(g, i) == ((double)(i - 18) * 256.0 + 0.5) / 1024);
        assert_true(mst_tensor_get(found, 0) == 0.0);       /* reset, and nothing non-finite */

        /* inf in one element, NaN in another, each alone: flagged; reset = false keeps a flag */
        const double bad[2] = {INFINITY, NAN};
        for (int b = 0; b < 2; b++) {
            mst_tensor_fill(g, 1.0);
            mst_tensor_set(g, 29, bad[b]);
            assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
            assert_true(mst_tensor_get(found, 0) == 1.0);
            mst_tensor_fill(g, 1.0);
            assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, false), MST_OK);
            assert_true(mst_tensor_get(found, 0) == 1.0);   /* a later clean gradient does not clear it */
            assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
            assert_true(mst_tensor_get(found, 0) == 0.0);
        }
        /* a non-finite value at every position (the kernel's 16 partial sums and its tail) */
        for (int64_t at = 0; at < 37; at++)
            for (int b = 0; b < 2; b++) {
                mst_tensor_fill(g, -2.0);
                mst_tensor_set(g, at, bad[b]);
                assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
                if (mst_tensor_get(found, 0) != 1.0) fail_msg("%s at %lld not flagged", b ? "NaN" : "inf", (long long)at);
            }
                /* -inf and the largest finite values: only the non-finite one counts */
        mst_tensor_fill(g, dts[d] == MST_DTYPE_F32 ? FLT_MAX : DBL_MAX);
        mst_tensor_fill(scale, 1);
        assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
        assert_true(mst_tensor_get(found, 0) == 0.0);
        mst_tensor_set(g, 0, -INFINITY);
        assert_int_equal(mst_amp_unscale_check(ctx, g, scale, found, true), MST_OK);
        assert_true(mst_tensor_get(found, 0) == 1.0);
    }
    /* validation */
    mst_tensor *g = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_tensor *s64 = mst_tensor_scalar(ctx, MST_DTYPE_F64, 1), *s1 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){1});
    mst_tensor *f = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0), *gi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){4});
    expect_error(ctx, mst_amp_unscale_check(ctx, g, s64, f, true), MST_ERR_DTYPE, "input 1 (scale) must be f32 (), got f64()");
    expect_error(ctx, mst_amp_unscale_check(ctx, g, f, s1, true), MST_ERR_SHAPE, "input 2 (found_inf) must be f32 (), got f32(1)");
    expect_error(ctx, mst_amp_unscale_check(ctx, gi, f, f, true), MST_ERR_DTYPE, "must be a float tensor, got i32");
    mst_ctx_free(ctx);
}

/* The dynamic rules over a scripted overflow pattern, against a hand-written trace. */
static void test_update_scale_sequence(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *scale = mst_tensor_scalar(ctx, MST_DTYPE_F32, 8), *good = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0);
    mst_tensor *found = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0);
    /* window 3, factor 2, floor 2 */
    const int overflow[] = {0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0};
    const double want_scale[] = {8, 8, 16, 8, 8, 4, 2, 2, 2, 2, 2, 4, 4};
    const double want_good[] = {1, 2, 0, 0, 1, 0, 0, 0, 0, 1, 2, 0, 1};
    for (size_t k = 0; k < sizeof(overflow) / sizeof(overflow[0]); k++) {
        mst_tensor_fill(found, overflow[k]);
        assert_int_equal(mst_amp_update_scale(ctx, scale, good, found, 2, 3, 2), MST_OK);
        if (mst_tensor_get(scale, 0) != want_scale[k] || mst_tensor_get(good, 0) != want_good[k])
            fail_msg("step %zu: scale %g good %g, want %g %g", k, mst_tensor_get(scale, 0), mst_tensor_get(good, 0),
                     want_scale[k], want_good[k]);
    }
    /* growth that would overflow f32 keeps the scale finite */
    mst_tensor_fill(scale, FLT_MAX / 1.5);
    mst_tensor_fill(good, 0);
    mst_tensor_fill(found, 0);
    assert_int_equal(mst_amp_update_scale(ctx, scale, good, found, 2, 1, 1), MST_OK);
    assert_true(mst_tensor_get(scale, 0) == (double)(float)(FLT_MAX / 1.5));
    assert_true(mst_tensor_get(good, 0) == 0.0);
    /* f64 state works the same */
    mst_tensor *s64 = mst_tensor_scalar(ctx, MST_DTYPE_F64, 3), *g64 = mst_tensor_scalar(ctx, MST_DTYPE_F64, 0);
    mst_tensor_fill(found, 1);
    assert_int_equal(mst_amp_update_scale(ctx, s64, g64, found, 4, 10, 0.5), MST_OK);
    assert_true(mst_tensor_get(s64, 0) == 0.75);
    assert_int_equal(mst_amp_update_scale(ctx, s64, g64, found, 4, 10, 0.5), MST_OK);
    assert_true(mst_tensor_get(s64, 0) == 0.5);             /* floor */
    /* validation */
    expect_error(ctx, mst_amp_update_scale(ctx, scale, good, found, 1, 3, 1), MST_ERR_ARG, "factor must be finite and > 1, got 1");
    expect_error(ctx, mst_amp_update_scale(ctx, scale, good, found, 2, 0, 1), MST_ERR_ARG, "window must be >= 1, got 0");
    expect_error(ctx, mst_amp_update_scale(ctx, scale, good, found, 2, 3, 0), MST_ERR_ARG, "floor must be finite and > 0, got 0");
    expect_error(ctx, mst_amp_update_scale(ctx, scale, g64, found, 2, 3, 1), MST_ERR_DTYPE, "input 1 (good_steps) must be f32 ()");
    mst_ctx_free(ctx);
}

static void test_clip_coef(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype dts[2] = {MST_DTYPE_F32, MST_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        mst_tensor *sq = mst_tensor_scalar(ctx, dts[d], 16), *coef, *norm;
        assert_int_equal(mst_clip_coef(ctx, sq, 2.0, &coef, &norm), MST_OK);
        assert_int_equal(coef->dtype, dts[d]);
        assert_true(mst_tensor_get(norm, 0) == 4.0);
        assert_true(mst_tensor_get(coef, 0) == (double)(dts[d] == MST_DTYPE_F32 ? (float)(2.0 / (4.0 + 1e-6)) : 2.0 / (4.0 + 1e-6)));
        assert_int_equal(mst_clip_coef(ctx, sq, 10.0, &coef, &norm), MST_OK);
        assert_true(mst_tensor_get(coef, 0) == 1.0);         /* never scales up */
    }
    mst_tensor *sq = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1), *coef, *norm;
    expect_error(ctx, mst_clip_coef(ctx, sq, 0, &coef, &norm), MST_ERR_ARG, "max_norm must be finite and > 0, got 0");
    assert_null(coef);
    mst_tensor *v = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){2});
    expect_error(ctx, mst_clip_coef(ctx, v, 1, &coef, &norm), MST_ERR_SHAPE, "input 0 (sum of squares) must be f32 (), got f32(2)");
    mst_ctx_free(ctx);
}

static mst_tensor *build_copy(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    return mst_mul(ctx, mst_copy(ctx, in[0]), in[1]);
}

static void test_copy(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 5}, 0, 1);
    mst_tensor *y = mst_copy(ctx, x);
    assert_non_null(y);
    assert_ptr_not_equal(y->storage, x->storage);
    assert_memory_equal(mst_tensor_data(x), mst_tensor_data(y), mst_tensor_nbytes(x));
    mst_tensor *h = mst_tensor_full(ctx, MST_DTYPE_F16, 1, (int64_t[]){4}, 1.5);
    assert_true(mst_tensor_get(mst_copy(ctx, h), 3) == 1.5);    /* every dtype */
    mst_ctx_free(ctx);
    const gc_case cases[] = {
        {"copy", build_copy, NULL, 2, {{2, {3, 4}, GC_RANDN, true}, {2, {3, 4}, GC_RANDN, true}}},
    };
    gc_check_all(cases, 1);
}

/* A leaf gradient shared with another tensor is copied (by the copy op) before it is kept. */
static void test_leaf_gradient_is_private(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, (int64_t[]){3});
    mst_tensor_fill(w, 2.0);
    mst_pool_push(ctx);
    mst_tensor *y = mst_spin(ctx, w, 0);    /* its backward hands the upstream gradient through unchanged */
    mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, 0.5);
    assert_int_equal(mst_backward_seeded(ctx, y, gy), MST_OK);
    assert_non_null(w->grad);
    assert_ptr_not_equal(w->grad, gy);
    assert_ptr_not_equal(w->grad->storage, gy->storage);
    assert_true(mst_tensor_get(w->grad, 2) == 0.5);
    assert_int_equal(w->grad->storage->cat, MST_MEM_GRAD);
    mst_zero_grad(&w, 1);
    mst_pool_pop(ctx);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_scaler_object(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_loss_scale_config c = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    assert_true(c.init == 16777216.0 && c.factor == 2 && c.window == 2000 && c.floor == 1 && c.drop_overflow_update &&
                c.max_consecutive_overflows == 1000);
    assert_string_equal(mst_loss_scale_type_name(MST_LOSS_SCALE_FIXED), "fixed");
    mst_loss_scaler *ls = mst_loss_scaler_new(ctx, &c);
    assert_non_null(ls);
    assert_true(mst_loss_scaler_value(ls) == 16777216.0);
    assert_true(mst_loss_scaler_scale(ls)->persistent && mst_loss_scaler_found_inf(ls)->persistent);
    assert_true(mst_loss_scaler_skips(ls));
    const char *want[3] = {"loss_scale.scale", "loss_scale.good_steps", "loss_scale.stats"};
    assert_int_equal(mst_loss_scaler_state_count(ls), 3);
    for (int i = 0; i < 3; i++) {
        const char *name;
        assert_non_null(mst_loss_scaler_state_at(ls, i, &name));
        assert_string_equal(name, want[i]);
    }
    assert_null(mst_loss_scaler_state_at(ls, 3, NULL));
    /* statistics and the consecutive-overflow limit */
    assert_int_equal(mst_loss_scaler_record(ls, true), MST_OK);
    assert_int_equal(mst_loss_scaler_record(ls, false), MST_OK);
    assert_int_equal(mst_loss_scaler_consecutive_overflows(ls), 0);
    for (int i = 0; i < 999; i++) assert_int_equal(mst_loss_scaler_record(ls, true), MST_OK);
    expect_error(ctx, mst_loss_scaler_record(ls, true), MST_ERR_NONFINITE, "1000 consecutive steps had inf/NaN gradients");
    assert_int_equal(mst_loss_scaler_overflow_steps(ls), 1001);
    assert_int_equal(mst_loss_scaler_skipped_steps(ls), 1001);
    mst_loss_scaler_free(ls);

    /* fixed without dropping: overflows are counted, never skipped */
    c = mst_loss_scale_defaults(MST_LOSS_SCALE_FIXED);
    c.drop_overflow_update = false;
    c.init = 128;
    ls = mst_loss_scaler_new(ctx, &c);
    assert_false(mst_loss_scaler_skips(ls));
    assert_int_equal(mst_loss_scaler_record(ls, true), MST_OK);
    assert_int_equal(mst_loss_scaler_overflow_steps(ls), 1);
    assert_int_equal(mst_loss_scaler_skipped_steps(ls), 0);
    mst_loss_scaler_free(ls);

    /* validation */
    struct { mst_loss_scale_config c; const char *msg; } bad[5];
    for (int i = 0; i < 5; i++) bad[i].c = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    bad[0].c.init = 0, bad[0].msg = "init must be > 0 and finite in f32, got 0";
    bad[1].c.init = 1e39, bad[1].msg = "init must be > 0 and finite in f32, got 1e+39";
    bad[2].c.factor = 1, bad[2].msg = "factor must be finite and > 1, got 1";
    bad[3].c.window = 0, bad[3].msg = "window must be >= 1, got 0";
    bad[4].c.type = (mst_loss_scale_type)9, bad[4].msg = "type 9 is not one of none, fixed, dynamic";
    for (int i = 0; i < 5; i++) {
        assert_null(mst_loss_scaler_new(ctx, &bad[i].c));
        expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, bad[i].msg);
    }
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 0);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unscale_check), cmocka_unit_test(test_update_scale_sequence),
        cmocka_unit_test(test_clip_coef),     cmocka_unit_test(test_copy),
        cmocka_unit_test(test_leaf_gradient_is_private), cmocka_unit_test(test_scaler_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
