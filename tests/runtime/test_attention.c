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

#include "runtime/ops/vmath.h"
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

/* The f32 kernel's bits on this process's path (AVX2, or the portable loop: ctest runs this file
 * again with AVX2 masked): each row as documented in ops/attention.c, computed here one key at a
 * time — the max of the kept, non-NaN scores, x - max up to the last kept key through the same
 * vector exp, masked keys zeroed, four double partials over every fourth key (the tail into the
 * first) summed (s0 + s1) + (s2 + s3), each value times the float of 1 / sum. Rows of 1 to 41
 * keys, masks with gaps and a padding suffix, a fully masked row, a NaN score and -inf scores. */
static void expected_row(const float *x, const int32_t *keep, float *y, int64_t n) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; k++)
        if (keep[k] && x[k] > m) m = x[k];
    if (m == -INFINITY) {
        for (int64_t k = 0; k < n; k++) y[k] = 0;
        return;
    }
    int64_t hi = n;
    while (hi > 0 && !keep[hi - 1]) hi--;
    for (int64_t k = 0; k < n; k++) y[k] = k < hi ? x[k] - m : 0.0f;
    mst_vmath_expf(y, y, hi);
    double s[4] = {0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 4 <= hi; k += 4)
        for (int j = 0; j < 4; j++) {
            y[k + j] = keep[k + j] ? y[k + j] : 0.0f;
            s[j] += y[k + j];
        }
    for (; k < hi; k++) {
        y[k] = keep[k] ? y[k] : 0.0f;
        s[0] += y[k];
    }
    float inv = (float)(1.0 / ((s[0] + s[1]) + (s[2] + s[3])));
    for (k = 0; k < hi; k++) y[k] *= inv;
}

static void test_f32_bits_every_path(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    const int64_t lks[] = {1, 3, 4, 7, 8, 9, 16, 24, 33, 41};
    for (size_t c = 0; c < sizeof(lks) / sizeof(lks[0]); c++) {
        const int64_t b = 5, rows = 3, lk = lks[c];
        mst_tensor *x = mst_tensor_new(ctx, MST_DTYPE_F32, 3, (int64_t[]){b, rows, lk});
        mst_tensor_fill_rand(ctx, x, -6, 6);
        mst_tensor *keep = mst_tensor_new(ctx, MST_DTYPE_I32, 2, (int64_t[]){b, lk});
        for (int64_t i = 0; i < b; i++)
            for (int64_t k = 0; k < lk; k++) {
                int32_t v = 1;
                if (i == 1) v = k < lk - lk / 3;             /* a padding suffix */
                if (i == 2) v = (k % 3) != 1;                /* gaps */
                if (i == 3) v = 0;                           /* nothing kept */
                mst_tensor_i32(keep)[i * lk + k] = v;
            }
        float *xd = mst_tensor_f32(x);
        xd[4 * rows * lk] = NAN;                             /* sample 4: a NaN, then -inf scores */
        if (lk > 2) xd[4 * rows * lk + rows * lk - 1] = -INFINITY, xd[4 * rows * lk + lk] = -INFINITY;
        mst_tensor *y = mst_masked_softmax(ctx, x, keep);
        assert_non_null(y);
        float want[64];
        for (int64_t r = 0; r < b * rows; r++) {
            expected_row(xd + r * lk, mst_tensor_i32(keep) + (r / rows) * lk, want, lk);
            if (memcmp(want, mst_tensor_f32(y) + r * lk, (size_t)lk * sizeof(float)) != 0)
                fail_msg("masked_softmax f32 row %lld of %lld keys differs from the documented bits", (long long)r, (long long)lk);
        }
    }
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
        cmocka_unit_test(test_f32_bits_every_path),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_descriptor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
