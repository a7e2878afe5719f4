/* test_attention.c — the masked softmax (ops/attention.c): finite-difference gradients in f64,
 * alone and inside a scaled dot-product attention (q k^T / sqrt(d), masked softmax, @ v), fast
 * kernels against the reference, masked keys exactly 0, equality with softmax when nothing is
 * masked, the all-masked row, and the shape and dtype errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

static mst_tensor *b_masked(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    return mst_masked_softmax(ctx, in[0], in[1]);
}

/* nothing masked: keep is all ones, made here (the checker's i32 fills start at 0) */
static mst_tensor *b_masked_all_kept(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    mst_tensor *keep = gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){in[0]->shape[0], in[0]->shape[in[0]->ndim - 1]});
    for (int64_t k = 0; k < keep->numel; k++) mst_tensor_i32(keep)[k] = 1;
    return mst_masked_softmax(ctx, in[0], keep);
}

/* q, k, v (B*H, L, d) with B = 2: scores reshaped to (B, H, L, L) for the (B, L) mask. */
static mst_tensor *b_attention(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    (void)arg;
    const int64_t bh = in[0]->shape[0], l = in[0]->shape[1], d = in[0]->shape[2];
    mst_tensor *s = mst_scale(ctx, mst_matmul_t(ctx, in[0], in[1], false, true), 1.0 / sqrt((double)d));
    s = mst_reshape(ctx, s, 4, (int64_t[]){2, bh / 2, l, l});
    mst_tensor *p = mst_reshape(ctx, mst_masked_softmax(ctx, s, in[3]), 3, (int64_t[]){bh, l, l});
    return mst_matmul(ctx, p, in[2]);
}

#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define T4(a, b, c, d) 4, {a, b, c, d}
#define MASK(b, l) {T2(b, l), GC_LABELS, false, 2}

static const gc_case k_cases[] = {
    {"masked_softmax (2, 5)", b_masked, NULL, 2, {{T2(2, 5), GC_RANDN, true}, MASK(2, 5)}},
    {"masked_softmax (3, 2, 4, 6)", b_masked, NULL, 2, {{T4(3, 2, 4, 6), GC_RANDN, true}, MASK(3, 6)}},
    {"masked_softmax all kept", b_masked_all_kept, NULL, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"masked_softmax all masked", b_masked, NULL, 2, {{T3(2, 3, 4), GC_RANDN, true}, {T2(2, 4), GC_LABELS, false, 1}}},
    {"attention q k v", b_attention, NULL, 4,
     {{T3(4, 5, 3), GC_RANDN, true}, {T3(4, 5, 3), GC_RANDN, true}, {T3(4, 5, 3), GC_RANDN, true}, MASK(2, 5)}},
};

static void test_gradients(void **state) {
    (void)state;
    gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0])));
}

static const gc_case k_ref_cases[] = {
    {"masked_softmax (4, 3, 17, 33)", b_masked, NULL, 2, {{T4(4, 3, 17, 33), GC_RANDN, false}, MASK(4, 33)}},
    {"attention (6, 9, 8)", b_attention, NULL, 4,
     {{T3(6, 9, 8), GC_RANDN, false}, {T3(6, 9, 8), GC_RANDN, false}, {T3(6, 9, 8), GC_RANDN, false}, MASK(2, 9)}},
};

static void test_fast_vs_reference(void **state) {
    (void)state;
    gc_check_ref_all(k_ref_cases, (int)(sizeof(k_ref_cases) / sizeof(k_ref_cases[0])), 2e-6);
}

/* Masked keys get exactly 0, kept ones sum to 1 and equal the softmax over the kept keys alone. */
static void test_values(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    const double x[2][4] = {{1, 2, 3, 1000}, {-1, 0.5, 2, 4}};
    const int32_t keep[2][4] = {{7, 3, 9, 0}, {0, 0, 0, 0}};     /* token ids: 0 = padding */
    mst_tensor *s = mst_tensor_new(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 1, 4});
    for (int k = 0; k < 8; k++) mst_tensor_set(s, k, x[k / 4][k % 4]);
    mst_tensor *m = mst_tensor_from_data(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 4}, keep);
    mst_tensor *y = mst_masked_softmax(ctx, s, m);
    assert_non_null(y);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    assert_float_equal(mst_tensor_get(y, 0), exp(1.0) / z, 1e-6);
    assert_float_equal(mst_tensor_get(y, 1), exp(2.0) / z, 1e-6);
    assert_float_equal(mst_tensor_get(y, 2), exp(3.0) / z, 1e-6);
    assert_true(mst_tensor_get(y, 3) == 0.0);       /* the masked 1000 takes no share */
    for (int k = 4; k < 8; k++) assert_true(mst_tensor_get(y, k) == 0.0);     /* no key left: zeros, not NaN */

    /* nothing masked: bit-equal to softmax on the last axis */
    mst_tensor *r = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){3, 2, 5, 7});
    mst_tensor_fill_rand(ctx, r, -3, 3);
    mst_tensor *ones = mst_tensor_new(ctx, MST_DTYPE_I32, 2, (int64_t[]){3, 7});
    for (int k = 0; k < 21; k++) mst_tensor_i32(ones)[k] = 1;
    mst_tensor *a = mst_masked_softmax(ctx, r, ones), *b = mst_softmax(ctx, r, -1);
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t k = 0; k < a->numel; k++) assert_float_equal(mst_tensor_get(a, k), mst_tensor_get(b, k), 2e-7);
    mst_ctx_free(ctx);
}

static void test_errors(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *s = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    GC_EXPECT_ERROR(ctx, mst_masked_softmax(ctx, s, gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 4})), MST_ERR_DTYPE,
                    "masked_softmax", "keep must be i32");
    GC_EXPECT_ERROR(ctx, mst_masked_softmax(ctx, s, gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 3})), MST_ERR_SHAPE,
                    "masked_softmax", "(batch, keys) = (2, 4)");
    GC_EXPECT_ERROR(ctx, mst_masked_softmax(ctx, s, gc_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){4})), MST_ERR_SHAPE,
                    "masked_softmax", "(batch, keys)");
    GC_EXPECT_ERROR(ctx, mst_masked_softmax(ctx, gc_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}),
                                            gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){1, 4})),
                    MST_ERR_SHAPE, "masked_softmax", "rank >= 2");
    GC_EXPECT_ERROR(ctx, mst_masked_softmax(ctx, gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 4}),
                                            gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 4})),
                    MST_ERR_DTYPE, "masked_softmax");
    mst_ctx_free(ctx);
}

static void test_descriptor(void **state) {
    (void)state;
    const mst_op_desc *d = mst_op_table[MST_OP_MASKED_SOFTMAX];
    assert_string_equal(d->name, "masked_softmax");
    assert_int_equal(d->nondiff, 1u << 1);
    assert_non_null(d->backward);
    assert_non_null(d->ref[MST_DEVICE_CPU][MST_DTYPE_F32]);
    assert_int_equal(mst_op_parse("masked_softmax"), MST_OP_MASKED_SOFTMAX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_descriptor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
