/* test_loss.c — the regression losses and pixel shuffle (ops/loss.c): finite-difference
 * gradients in f64 for both inputs, values against a hand computation, pixel shuffle's layout
 * against torch.nn.functional.pixel_shuffle's definition, and the shape and dtype errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

static mst_tensor *b_l1(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    return mst_l1_loss(ctx, in[0], in[1]);
}
static mst_tensor *b_mse(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    return mst_mse_loss(ctx, in[0], in[1]);
}
static mst_tensor *b_shuffle(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_pixel_shuffle(ctx, in[0], *(const int *)arg);
}
/* an upsampler as the SR net uses it: conv to 4 C channels, pixel shuffle 2, L1 against a target */
static mst_tensor *b_upsample_l1(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    mst_tensor *y = mst_pixel_shuffle(ctx, mst_conv2d(ctx, in[0], in[1], NULL, 1, 1, 1, 1), 2);
    return mst_l1_loss(ctx, y, in[2]);
}

static const int k_r2 = 2, k_r3 = 3;

#define T1(a) 1, {a}
#define T4(a, b, c, d) 4, {a, b, c, d}

static const gc_case k_cases[] = {
    {"l1_loss (3, 4)", b_l1, NULL, 2, {{2, {3, 4}, GC_RANDN, true}, {2, {3, 4}, GC_RANDN, true}}},
    {"l1_loss (2, 1, 5, 5)", b_l1, NULL, 2, {{T4(2, 1, 5, 5), GC_RANDN, true}, {T4(2, 1, 5, 5), GC_RANDN, true}}},
    {"mse_loss (3, 4)", b_mse, NULL, 2, {{2, {3, 4}, GC_RANDN, true}, {2, {3, 4}, GC_RANDN, true}}},
    {"mse_loss (7)", b_mse, NULL, 2, {{T1(7), GC_RANDN, true}, {T1(7), GC_RANDN, false}}},
    {"pixel_shuffle r 2", b_shuffle, &k_r2, 1, {{T4(2, 8, 3, 2), GC_RANDN, true}}},
    {"pixel_shuffle r 3", b_shuffle, &k_r3, 1, {{T4(1, 9, 2, 2), GC_RANDN, true}}},
    {"conv + pixel_shuffle + l1", b_upsample_l1, NULL, 3,
     {{T4(2, 2, 3, 3), GC_RANDN, true}, {T4(8, 2, 3, 3), GC_RANDN, true}, {T4(2, 2, 6, 6), GC_RANDN, false}}},
};

static void test_gradients(void **state) {
    (void)state;
    gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0])));
}

static void test_values(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double a[] = {1, -2, 3.5, 0}, b[] = {0.5, 1, 3.5, -4};
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++) {
        mst_tensor *x = mst_tensor_new(ctx, (mst_dtype)dt, 1, (int64_t[]){4}), *y = mst_tensor_new(ctx, (mst_dtype)dt, 1, (int64_t[]){4});
        for (int k = 0; k < 4; k++) {
            mst_tensor_set(x, k, a[k]);
            mst_tensor_set(y, k, b[k]);
        }
        mst_tensor *l1 = mst_l1_loss(ctx, x, y), *l2 = mst_mse_loss(ctx, x, y);
        assert_non_null(l1);
        assert_non_null(l2);
        assert_int_equal(l1->ndim, 0);
        assert_float_equal(mst_tensor_get(l1, 0), (0.5 + 3 + 0 + 4) / 4, 1e-6);
        assert_float_equal(mst_tensor_get(l2, 0), (0.25 + 9 + 0 + 16) / 4, 1e-6);
    }
    /* pixel shuffle: out[n, c, h r + i, w r + j] = in[n, c r^2 + i r + j, h, w] */
    const int r = 2;
    mst_tensor *x = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 8, 3, 5});
    for (int64_t k = 0; k < x->numel; k++) mst_tensor_set(x, k, (double)k);
    mst_tensor *y = mst_pixel_shuffle(ctx, x, r);
    assert_non_null(y);
    assert_int_equal(y->shape[1], 2);
    assert_int_equal(y->shape[2], 6);
    assert_int_equal(y->shape[3], 10);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 2; c++)
            for (int h = 0; h < 6; h++)
                for (int w = 0; w < 10; w++) {
                    int64_t src = (((int64_t)n * 8 + c * 4 + (h % r) * r + (w % r)) * 3 + h / r) * 5 + w / r;
                    assert_true(mst_tensor_get(y, ((n * 2 + c) * 6 + h) * 10 + w) == (double)src);
                }
    mst_ctx_free(ctx);
}

static void test_errors(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    GC_EXPECT_ERROR(ctx, mst_l1_loss(ctx, a, gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 2})), MST_ERR_SHAPE, "l1_loss");
    GC_EXPECT_ERROR(ctx, mst_mse_loss(ctx, a, gc_zeros(ctx, MST_DTYPE_F64, 2, (int64_t[]){2, 3})), MST_ERR_DTYPE, "mse_loss");
    GC_EXPECT_ERROR(ctx, mst_l1_loss(ctx, gc_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3}), gc_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3})),
                    MST_ERR_DTYPE, "l1_loss");
    GC_EXPECT_ERROR(ctx, mst_pixel_shuffle(ctx, gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 6, 2, 2}), 2), MST_ERR_SHAPE,
                    "pixel_shuffle", "(N, C r^2, H, W)");
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
