/* test_elementwise.c — broadcasting binary ops, scale, sum_to/broadcast_to: values, gradients
 * (finite differences in f64) and error paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

static mst_tensor *b_add(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_add(ctx, in[0], in[1]); }
static mst_tensor *b_sub(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_sub(ctx, in[0], in[1]); }
static mst_tensor *b_mul(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_mul(ctx, in[0], in[1]); }
static mst_tensor *b_div(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_div(ctx, in[0], in[1]); }
static mst_tensor *b_scale(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_scale(ctx, in[0], -2.5); }
static mst_tensor *b_sum_to(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_sum_to(ctx, in[0], 3, (int64_t[]){2, 1, 4});
}
static mst_tensor *b_broadcast_to(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_broadcast_to(ctx, in[0], 3, (int64_t[]){2, 3, 4});
}
/* a value used twice: gradients from both uses accumulate */
static mst_tensor *b_reuse(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_mul(ctx, mst_add(ctx, in[0], in[1]), in[0]);
}

#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}

static const gc_case k_cases[] = {
    {"add same shape", b_add, NULL, 2, {{T2(3, 4), GC_RANDN, true}, {T2(3, 4), GC_RANDN, true}}},
    {"add row broadcast", b_add, NULL, 2, {{T2(3, 4), GC_RANDN, true}, {1, {4}, GC_RANDN, true}}},
    {"add column broadcast", b_add, NULL, 2, {{T2(3, 1), GC_RANDN, true}, {T2(1, 4), GC_RANDN, true}}},
    {"add scalar", b_add, NULL, 2, {{T3(2, 3, 4), GC_RANDN, true}, {0, {0}, GC_RANDN, true}}},
    {"sub broadcast", b_sub, NULL, 2, {{T3(2, 3, 4), GC_RANDN, true}, {T3(2, 1, 4), GC_RANDN, true}}},
    {"mul broadcast", b_mul, NULL, 2, {{T3(2, 3, 4), GC_RANDN, true}, {T2(3, 1), GC_RANDN, true}}},
    {"div broadcast", b_div, NULL, 2, {{T2(3, 4), GC_RANDN, true}, {1, {4}, GC_POSITIVE, true}}},
    {"scale", b_scale, NULL, 1, {{T2(3, 4), GC_RANDN, true}}},
    {"sum_to", b_sum_to, NULL, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"broadcast_to", b_broadcast_to, NULL, 1, {{T2(3, 1), GC_RANDN, true}}},
    {"reuse accumulates", b_reuse, NULL, 2, {{T2(3, 4), GC_RANDN, true}, {T2(3, 4), GC_RANDN, true}}},
};

static void test_gradients(void **state) { gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0]))); }

static void test_values_broadcast(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    mst_tensor *b = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, (float[]){10, 20, 30});
    mst_tensor *y = mst_add(ctx, a, b);
    assert_non_null(y);
    const float want[] = {11, 22, 33, 14, 25, 36};
    for (int i = 0; i < 6; i++) assert_float_equal(mst_tensor_f32(y)[i], want[i], 0);
    mst_tensor *col = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 1}, (float[]){2, 4});
    y = mst_div(ctx, a, col);
    const float want_div[] = {0.5f, 1, 1.5f, 1, 1.25f, 1.5f};
    for (int i = 0; i < 6; i++) assert_float_equal(mst_tensor_f32(y)[i], want_div[i], 0);
    mst_tensor *s = mst_sum_to(ctx, a, 1, (int64_t[]){3});
    const float want_sum[] = {5, 7, 9};
    for (int i = 0; i < 3; i++) assert_float_equal(mst_tensor_f32(s)[i], want_sum[i], 0);
    mst_ctx_free(ctx);
}

/* broadcast_to's contiguous-run path (small = big's leading dims, then ones) and its general walk
 * against the definition y[i] = x[i's coordinates, 0 on x's size-1 dims], on shapes that take
 * each: trailing ones, a scalar, a copy, leading dims x lacks, a middle one. */
static void test_broadcast_to_shapes(void **state) {
    static const struct { int xn; int64_t xs[4]; int yn; int64_t ys[4]; } k[] = {
        {4, {3, 5, 1, 1}, 4, {3, 5, 7, 7}}, {1, {1}, 3, {2, 3, 4}},          {3, {2, 1, 4}, 3, {2, 1, 4}},
        {2, {3, 1}, 3, {2, 3, 5}},          {3, {2, 1, 4}, 3, {2, 3, 4}},     {2, {1, 4}, 2, {3, 4}},        {3, {3, 1, 1}, 4, {2, 3, 4, 5}},
    };
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (size_t t = 0; t < sizeof(k) / sizeof(k[0]); t++) {
        int xn = k[t].xn, yn = k[t].yn;
        mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, xn, k[t].xs, 0, 1);
        mst_tensor *y = mst_broadcast_to(ctx, x, yn, k[t].ys);
        assert_non_null(y);
        for (int64_t i = 0; i < y->numel; i++) {
            int64_t rem = i, xi = 0, xstride = 1;
            for (int d = yn - 1; d >= 0; d--) {
                int64_t coord = rem % k[t].ys[d];
                rem /= k[t].ys[d];
                int xd = d - (yn - xn);
                if (xd < 0) continue;
                if (k[t].xs[xd] != 1) xi += coord * xstride;
                xstride *= k[t].xs[xd];
            }
            if (mst_tensor_f32(y)[i] != mst_tensor_f32(x)[xi]) fail_msg("case %zu: element %lld", t, (long long)i);
        }
    }
    mst_ctx_free(ctx);
}

/* Tensors large enough to split over the pool (2^17 elements a chunk at least): every element is
 * the scalar expression's, at 1, 2 and 3 threads, with a same-shape b, a scalar b, and f64. An odd
 * element count puts a chunk edge off any vector width. */
static void test_large_split(void **state) {
    const int64_t n = 3 * (1 << 17) + 7;
    for (int threads = 1; threads <= 3; threads++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = threads});
        mst_tensor *a = mst_tensor_new(ctx, MST_DTYPE_F32, 1, &n), *b = mst_tensor_new(ctx, MST_DTYPE_F32, 1, &n);
        mst_tensor *s = mst_tensor_from_data(ctx, MST_DTYPE_F32, 0, NULL, (float[]){1.75f});
        mst_tensor *ad = mst_tensor_new(ctx, MST_DTYPE_F64, 1, &n), *bd = mst_tensor_new(ctx, MST_DTYPE_F64, 1, &n);
        for (int64_t i = 0; i < n; i++) {
            mst_tensor_f32(a)[i] = (float)(i % 1009) * 0.37f - 100.0f;
            mst_tensor_f32(b)[i] = (float)(i % 997) * 0.11f + 0.5f;
            ((double *)mst_tensor_data(ad))[i] = (double)mst_tensor_f32(a)[i];
            ((double *)mst_tensor_data(bd))[i] = (double)mst_tensor_f32(b)[i];
        }
        const float *x = mst_tensor_f32(a), *y = mst_tensor_f32(b);
        const float *sum = mst_tensor_f32(mst_add(ctx, a, b)), *dif = mst_tensor_f32(mst_sub(ctx, a, b));
        const float *prod = mst_tensor_f32(mst_mul(ctx, a, b)), *quot = mst_tensor_f32(mst_div(ctx, a, b));
        const float *by_s = mst_tensor_f32(mst_mul(ctx, a, s)), *scaled = mst_tensor_f32(mst_scale(ctx, a, -2.5));
        const double *sum_d = (const double *)mst_tensor_data(mst_add(ctx, ad, bd));
        assert_non_null(sum_d);
        for (int64_t i = 0; i < n; i++) {
            if (sum[i] != x[i] + y[i] || dif[i] != x[i] - y[i] || prod[i] != x[i] * y[i] || quot[i] != x[i] / y[i] ||
                by_s[i] != x[i] * 1.75f || scaled[i] != -2.5f * x[i] || sum_d[i] != (double)x[i] + (double)y[i])
                fail_msg("threads %d: element %lld differs from the scalar expression", threads, (long long)i);
        }
        mst_ctx_free(ctx);
    }
}

static void test_promotion(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, 1.5);
    mst_tensor *b = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){4}, 0.25);
    mst_tensor *y = mst_mul(ctx, a, b);
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(y->dtype, MST_DTYPE_F64);
    assert_float_equal(mst_tensor_get(y, 3), 0.375, 0);
    mst_ctx_free(ctx);
}

static void test_shape_error(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 4});
    assert_null(mst_add(ctx, a, b));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_SHAPE);
    const char *e = mst_ctx_error(ctx);
    assert_non_null(strstr(e, "add"));
    assert_non_null(strstr(e, "f32(2, 3)"));
    assert_non_null(strstr(e, "f32(2, 4)"));
    /* the failure propagates through a chain without a crash, keeping the first message */
    assert_null(mst_scale(ctx, mst_mul(ctx, mst_add(ctx, a, b), a), 2.0));
    assert_non_null(strstr(mst_ctx_error(ctx), "add"));
    mst_ctx_free(ctx);
}

static void test_dtype_error(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3});
    assert_null(mst_scale(ctx, a, 2.0));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_DTYPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "i32"));
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),   cmocka_unit_test(test_values_broadcast),
        cmocka_unit_test(test_promotion),   cmocka_unit_test(test_shape_error),
        cmocka_unit_test(test_dtype_error), cmocka_unit_test(test_broadcast_to_shapes),
        cmocka_unit_test(test_large_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
