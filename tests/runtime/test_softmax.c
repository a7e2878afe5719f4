/* test_softmax.c — softmax, log_softmax (any axis) and cross-entropy: finite-difference
 * gradients in f64, fast kernels against the reference ones on both layouts (axis last and
 * strided), values and stability for large logits, the loss against a hand computation, and
 * error paths (bad axis, labels out of range, wrong dtypes and shapes). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

static mst_tensor *b_softmax(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_softmax(ctx, in[0], *(const int *)arg);
}
static mst_tensor *b_log_softmax(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_log_softmax(ctx, in[0], *(const int *)arg);
}
static mst_tensor *b_cross_entropy(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_cross_entropy(ctx, in[0], in[1]);
}
/* logits scaled up so the softmax is peaked (gradients near 0 and 1) */
static mst_tensor *b_cross_entropy_peaked(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_cross_entropy(ctx, mst_scale(ctx, in[0], 5.0), in[1]);
}
/* both outputs used: loss + probs (broadcast), so gradients reach the op through each */
static mst_tensor *b_cross_entropy_both(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    if (mst_dispatch(ctx, MST_OP_CROSS_ENTROPY, 2, in, NULL, out) != MST_OK) return NULL;
    return mst_add(ctx, out[0], out[1]);
}
/* the softmax gradient ops at the softmax output, for fast vs reference */
static mst_tensor *b_softmax_grad(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    int axis = *(const int *)arg;
    return mst_softmax_grad(ctx, in[1], mst_softmax(ctx, in[0], axis), axis);
}
static mst_tensor *b_log_softmax_grad(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    int axis = *(const int *)arg;
    return mst_log_softmax_grad(ctx, in[1], mst_log_softmax(ctx, in[0], axis), axis);
}

static const int k_ax0 = 0, k_ax1 = 1, k_ax2 = 2, k_last = -1;

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define LABELS(n, range) {T1(n), GC_LABELS, false, range}

static const gc_case k_cases[] = {
    {"softmax 3x5 last", b_softmax, &k_last, 1, {{T2(3, 5), GC_RANDN, true}}},
    {"softmax batch 1", b_softmax, &k_last, 1, {{T2(1, 7), GC_RANDN, true}}},
    {"softmax rank 1", b_softmax, &k_ax0, 1, {{T1(6), GC_RANDN, true}}},
    {"softmax rank 3 last", b_softmax, &k_ax2, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"softmax rank 3 axis 0", b_softmax, &k_ax0, 1, {{T3(3, 2, 4), GC_RANDN, true}}},
    {"softmax rank 3 axis 1", b_softmax, &k_ax1, 1, {{T3(2, 5, 3), GC_RANDN, true}}},
    {"softmax axis of size 1", b_softmax, &k_ax1, 1, {{T3(2, 1, 3), GC_RANDN, true}}},
    {"log_softmax 3x5 last", b_log_softmax, &k_last, 1, {{T2(3, 5), GC_RANDN, true}}},
    {"log_softmax batch 1", b_log_softmax, &k_last, 1, {{T2(1, 7), GC_RANDN, true}}},
    {"log_softmax rank 3 last", b_log_softmax, &k_last, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"log_softmax rank 3 axis 0", b_log_softmax, &k_ax0, 1, {{T3(3, 2, 4), GC_RANDN, true}}},
    {"log_softmax rank 3 axis 1", b_log_softmax, &k_ax1, 1, {{T3(2, 5, 3), GC_RANDN, true}}},
    {"cross_entropy 4x5", b_cross_entropy, NULL, 2, {{T2(4, 5), GC_RANDN, true}, LABELS(4, 5)}},
    {"cross_entropy batch 1", b_cross_entropy, NULL, 2, {{T2(1, 3), GC_RANDN, true}, LABELS(1, 3)}},
    {"cross_entropy 6x10", b_cross_entropy, NULL, 2, {{T2(6, 10), GC_RANDN, true}, LABELS(6, 10)}},
    {"cross_entropy 2 classes", b_cross_entropy, NULL, 2, {{T2(5, 2), GC_RANDN, true}, LABELS(5, 2)}},
    {"cross_entropy peaked", b_cross_entropy_peaked, NULL, 2, {{T2(4, 6), GC_RANDN, true}, LABELS(4, 6)}},
    {"cross_entropy loss+probs", b_cross_entropy_both, NULL, 2, {{T2(3, 4), GC_RANDN, true}, LABELS(3, 4)}},
};

static void test_gradients(void **state) { gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0]))); }

/* Every layout: axis last (contiguous rows), first and middle (strided columns). */
static const gc_case k_ref_cases[] = {
    {"softmax 8x33 last", b_softmax, &k_last, 1, {{T2(8, 33), GC_RANDN, false}}},
    {"softmax 5x7x9 axis 0", b_softmax, &k_ax0, 1, {{T3(5, 7, 9), GC_RANDN, false}}},
    {"softmax 5x7x9 axis 1", b_softmax, &k_ax1, 1, {{T3(5, 7, 9), GC_RANDN, false}}},
    {"softmax 5x7x9 axis 2", b_softmax, &k_ax2, 1, {{T3(5, 7, 9), GC_RANDN, false}}},
    {"log_softmax 8x33 last", b_log_softmax, &k_last, 1, {{T2(8, 33), GC_RANDN, false}}},
    {"log_softmax 5x7x9 axis 0", b_log_softmax, &k_ax0, 1, {{T3(5, 7, 9), GC_RANDN, false}}},
    {"log_softmax 5x7x9 axis 1", b_log_softmax, &k_ax1, 1, {{T3(5, 7, 9), GC_RANDN, false}}},
    {"softmax_grad 8x33 last", b_softmax_grad, &k_last, 2, {{T2(8, 33), GC_RANDN, false}, {T2(8, 33), GC_RANDN, false}}},
    {"softmax_grad 5x7x9 axis 0", b_softmax_grad, &k_ax0, 2,
     {{T3(5, 7, 9), GC_RANDN, false}, {T3(5, 7, 9), GC_RANDN, false}}},
    {"softmax_grad 5x7x9 axis 1", b_softmax_grad, &k_ax1, 2,
     {{T3(5, 7, 9), GC_RANDN, false}, {T3(5, 7, 9), GC_RANDN, false}}},
    {"log_softmax_grad 8x33 last", b_log_softmax_grad, &k_last, 2,
     {{T2(8, 33), GC_RANDN, false}, {T2(8, 33), GC_RANDN, false}}},
    {"log_softmax_grad 5x7x9 axis 0", b_log_softmax_grad, &k_ax0, 2,
     {{T3(5, 7, 9), GC_RANDN, false}, {T3(5, 7, 9), GC_RANDN, false}}},
    {"log_softmax_grad 5x7x9 axis 1", b_log_softmax_grad, &k_ax1, 2,
     {{T3(5, 7, 9), GC_RANDN, false}, {T3(5, 7, 9), GC_RANDN, false}}},
};

static void test_fast_vs_reference(void **state) {
    gc_check_ref_all(k_ref_cases, (int)(sizeof(k_ref_cases) / sizeof(k_ref_cases[0])), 2e-6);
}

/* Sum of y along `axis` of a (d0, d1, d2) tensor at (i, j) of the other two dims. */
static double sum_along(const mst_tensor *y, int axis, int64_t i, int64_t j) {
    const int64_t *s = y->shape;
    double acc = 0;
    for (int64_t k = 0; k < s[axis]; k++) {
        int64_t idx = axis == 0 ? (k * s[1] + i) * s[2] + j : axis == 1 ? (i * s[1] + k) * s[2] + j : (i * s[1] + j) * s[2] + k;
        acc += mst_tensor_get(y, idx);
    }
    return acc;
}

static void test_sums_to_one(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++)
        for (int axis = 0; axis < 3; axis++) {
            mst_tensor *x = mst_tensor_randn(ctx, (mst_dtype)dt, 3, (int64_t[]){4, 5, 6}, 0, 3);
            mst_tensor *y = mst_softmax(ctx, x, axis), *ly = mst_log_softmax(ctx, x, axis);
            if (!y || !ly) fail_msg("%s", mst_ctx_error(ctx));
            int64_t a = axis == 0 ? 5 : 4, b = axis == 2 ? 5 : 6;
            for (int64_t i = 0; i < a; i++)
                for (int64_t j = 0; j < b; j++) assert_float_equal(sum_along(y, axis, i, j), 1.0, 1e-6);
            for (int64_t k = 0; k < y->numel; k++) {
                assert_true(mst_tensor_get(y, k) > 0);
                assert_float_equal(exp(mst_tensor_get(ly, k)), mst_tensor_get(y, k), 1e-6);
            }
        }
    mst_ctx_free(ctx);
}

/* Logits around 1000 give the same softmax as logits around 0, with no inf or NaN. */
static void test_large_logits(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++)
        for (int axis = 0; axis < 2; axis++) {
            mst_tensor *big = mst_tensor_new(ctx, (mst_dtype)dt, 2, (int64_t[]){3, 3});
            mst_tensor *small = mst_tensor_new(ctx, (mst_dtype)dt, 2, (int64_t[]){3, 3});
            if (axis == 1) {  /* rows of 1000, 1001, 1002 */
                for (int k = 0; k < 9; k++) {
                    mst_tensor_set(big, k, 1000 + k % 3);
                    mst_tensor_set(small, k, k % 3);
                }
            } else {           /* columns of 1000, 1000.5, 1001 */
                for (int k = 0; k < 9; k++) {
                    mst_tensor_set(big, k, 1000 + 0.5 * (k / 3));
                    mst_tensor_set(small, k, 0.5 * (k / 3));
                }
            }
            mst_tensor *yb = mst_softmax(ctx, big, axis), *ys = mst_softmax(ctx, small, axis);
            mst_tensor *lb = mst_log_softmax(ctx, big, axis), *ls = mst_log_softmax(ctx, small, axis);
            if (!yb || !ys || !lb || !ls) fail_msg("%s", mst_ctx_error(ctx));
            for (int k = 0; k < 9; k++) {
                assert_true(isfinite(mst_tensor_get(yb, k)));
                assert_true(isfinite(mst_tensor_get(lb, k)));
                assert_float_equal(mst_tensor_get(yb, k), mst_tensor_get(ys, k), 1e-6);
                assert_float_equal(mst_tensor_get(lb, k), mst_tensor_get(ls, k), 1e-4);
            }
            /* softmax of (0, 1, 2) */
            double z = 1 + exp(1) + exp(2);
            if (axis == 1) assert_float_equal(mst_tensor_get(yb, 2), exp(2) / z, 1e-6);
        }
    mst_ctx_free(ctx);
}

static double hand_loss(const double *x, const int32_t *lab, int n, int nc) {
    double total = 0;
    for (int r = 0; r < n; r++) {
        double s = 0;
        for (int k = 0; k < nc; k++) s += exp(x[r * nc + k]);
        total += log(s) - x[r * nc + lab[r]];
    }
    return total / n;
}

static void test_cross_entropy_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double x[] = {1, 2, 3, 1, 0, -1};
    const int32_t lab[] = {2, 0};
    mst_tensor *labels = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){2}, lab);
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++) {
        mst_tensor *logits = mst_tensor_new(ctx, (mst_dtype)dt, 2, (int64_t[]){2, 3});
        for (int k = 0; k < 6; k++) mst_tensor_set(logits, k, x[k]);
        mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
        assert_int_equal(mst_dispatch(ctx, MST_OP_CROSS_ENTROPY, 2, (mst_tensor *[]){logits, labels}, NULL, out), MST_OK);
        assert_int_equal(out[0]->ndim, 0);
        assert_int_equal(out[0]->dtype, dt);
        assert_float_equal(mst_tensor_get(out[0], 0), hand_loss(x, lab, 2, 3), 1e-6);
        /* the second output is the softmax */
        mst_tensor *p = mst_softmax(ctx, logits, 1);
        for (int k = 0; k < 6; k++) assert_float_equal(mst_tensor_get(out[1], k), mst_tensor_get(p, k), 1e-7);
        /* the public constructor returns the loss */
        mst_tensor *loss = mst_cross_entropy(ctx, logits, labels);
        assert_non_null(loss);
        assert_float_equal(mst_tensor_get(loss, 0), hand_loss(x, lab, 2, 3), 1e-6);

        /* zero logits: log C */
        mst_tensor *zeros = mst_tensor_zeros(ctx, (mst_dtype)dt, 2, (int64_t[]){2, 7});
        mst_tensor *l7 = mst_cross_entropy(ctx, zeros, labels);
        assert_non_null(l7);
        assert_float_equal(mst_tensor_get(l7, 0), log(7.0), 1e-6);

        /* logits of 1000: finite and exact */
        mst_tensor *big = mst_tensor_new(ctx, (mst_dtype)dt, 2, (int64_t[]){2, 3});
        for (int k = 0; k < 6; k++) mst_tensor_set(big, k, x[k] + 1000);
        mst_tensor *lb = mst_cross_entropy(ctx, big, labels);
        assert_non_null(lb);
        assert_true(isfinite(mst_tensor_get(lb, 0)));
        assert_float_equal(mst_tensor_get(lb, 0), hand_loss(x, lab, 2, 3), 1e-4);
    }
    mst_ctx_free(ctx);
}

/* d loss / d logits = (softmax - onehot) / N, through the tape. */
static void test_cross_entropy_grad_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double x[] = {1, 2, 3, 1, 0, -1};
    mst_tensor *logits = mst_tensor_from_data(ctx, MST_DTYPE_F64, 2, (int64_t[]){2, 3}, x);
    logits->requires_grad = true;
    mst_tensor *labels = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){2}, (int32_t[]){2, 0});
    mst_tensor *loss = mst_cross_entropy(ctx, logits, labels);
    assert_non_null(loss);
    assert_int_equal(mst_backward(ctx, loss), MST_OK);
    assert_non_null(logits->grad);
    mst_grad_set_enabled(ctx, false);
    mst_tensor *p = mst_softmax(ctx, logits, -1);
    const int onehot[] = {0, 0, 1, 1, 0, 0};
    for (int k = 0; k < 6; k++) assert_float_equal(mst_tensor_get(logits->grad, k), (mst_tensor_get(p, k) - onehot[k]) / 2, 1e-15);
    /* the grad op scales by gy */
    mst_tensor *gy = mst_tensor_scalar(ctx, MST_DTYPE_F64, 3.0);
    mst_tensor *g = mst_cross_entropy_grad(ctx, gy, p, labels);
    assert_non_null(g);
    for (int k = 0; k < 6; k++) assert_float_equal(mst_tensor_get(g, k), 3 * (mst_tensor_get(p, k) - onehot[k]) / 2, 1e-15);
    mst_tensor_release(logits->grad);
    logits->grad = NULL;
    mst_ctx_free(ctx);
}

static void expect_error(mst_ctx *ctx, mst_status s, const char *a, const char *b) {
    assert_int_equal(mst_ctx_status(ctx), s);
    const char *e = mst_ctx_error(ctx);
    if (a && !strstr(e, a)) fail_msg("error '%s' does not mention '%s'", e, a);
    if (b && !strstr(e, b)) fail_msg("error '%s' does not mention '%s'", e, b);
    mst_ctx_clear_error(ctx);
}

static void test_axis_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    assert_null(mst_softmax(ctx, x, 2));
    expect_error(ctx, MST_ERR_ARG, "softmax: axis 2", "[-2, 2)");
    assert_null(mst_log_softmax(ctx, x, -3));
    expect_error(ctx, MST_ERR_ARG, "log_softmax: axis -3", "f32(2, 3)");
    assert_null(mst_softmax_grad(ctx, x, x, 5));
    expect_error(ctx, MST_ERR_ARG, "softmax_grad", "axis 5");
    mst_tensor *s = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1.0);
    assert_null(mst_softmax(ctx, s, 0));
    expect_error(ctx, MST_ERR_ARG, "axis 0", "[0, 0)");
    /* attributes that skip the constructor are checked by the inference */
    mst_attrs a = {.i = {7}};
    assert_null(mst_dispatch1(ctx, MST_OP_SOFTMAX, 1, (mst_tensor *[]){x}, &a));
    expect_error(ctx, MST_ERR_ARG, "axis 7 is outside [0, 2)", NULL);
    /* dtype and shape errors */
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 3});
    assert_null(mst_softmax(ctx, xi, -1));
    expect_error(ctx, MST_ERR_DTYPE, "softmax", "float");
    mst_tensor *y = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 2});
    assert_null(mst_log_softmax_grad(ctx, x, y, 1));
    expect_error(ctx, MST_ERR_SHAPE, "log_softmax_grad", "same shape");
    /* NULL passes through with the first error kept */
    assert_null(mst_softmax(ctx, mst_softmax(ctx, x, 9), 0));
    expect_error(ctx, MST_ERR_ARG, "axis 9", NULL);
    mst_ctx_free(ctx);
}

static void test_cross_entropy_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *logits = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 4});
    mst_tensor *bad = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){3}, (int32_t[]){0, 4, 1});
    assert_null(mst_cross_entropy(ctx, logits, bad));
    expect_error(ctx, MST_ERR_ARG, "cross_entropy", "label 4 at row 1 is outside [0, 4)");
    mst_tensor *neg = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){3}, (int32_t[]){0, 1, -2});
    assert_null(mst_cross_entropy(ctx, logits, neg));
    expect_error(ctx, MST_ERR_ARG, "label -2 at row 2", NULL);

    mst_tensor *labels = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3});
    mst_tensor *int_logits = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){3, 4});
    assert_null(mst_cross_entropy(ctx, int_logits, labels));
    expect_error(ctx, MST_ERR_DTYPE, "logits must be a float tensor", "i32");
    mst_tensor *f_labels = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    assert_null(mst_cross_entropy(ctx, logits, f_labels));
    expect_error(ctx, MST_ERR_DTYPE, "labels must be i32", "f32");
    mst_tensor *short_labels = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){2});
    assert_null(mst_cross_entropy(ctx, logits, short_labels));
    expect_error(ctx, MST_ERR_SHAPE, "labels must have shape (3)", "got (2)");
    mst_tensor *labels_2d = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){3, 1});
    assert_null(mst_cross_entropy(ctx, logits, labels_2d));
    expect_error(ctx, MST_ERR_SHAPE, "labels must have shape (3)", "got (3, 1)");
    mst_tensor *logits_3d = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){3, 4, 1});
    assert_null(mst_cross_entropy(ctx, logits_3d, labels));
    expect_error(ctx, MST_ERR_SHAPE, "rank 2 (N, C)", NULL);

    /* the grad op checks its labels and its scalar too */
    mst_tensor *gy = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1.0);
    assert_null(mst_cross_entropy_grad(ctx, gy, logits, bad));
    expect_error(ctx, MST_ERR_ARG, "cross_entropy_grad", "label 4 at row 1");
    mst_tensor *gy_vec = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){1});
    assert_null(mst_cross_entropy_grad(ctx, gy_vec, logits, labels));
    expect_error(ctx, MST_ERR_SHAPE, "scalar", NULL);
    mst_tensor *gy64 = mst_tensor_scalar(ctx, MST_DTYPE_F64, 1.0);
    assert_null(mst_cross_entropy_grad(ctx, gy64, logits, labels));
    expect_error(ctx, MST_ERR_DTYPE, "same dtype", NULL);
    mst_ctx_free(ctx);
}

static void test_descriptors(void **state) {
    assert_int_equal(mst_op_table[MST_OP_CROSS_ENTROPY]->nondiff, 1u << 1);
    assert_int_equal(mst_op_table[MST_OP_CROSS_ENTROPY]->n_outputs, 2);
    const mst_op grads[] = {MST_OP_SOFTMAX_GRAD, MST_OP_LOG_SOFTMAX_GRAD, MST_OP_CROSS_ENTROPY_GRAD};
    for (int i = 0; i < 3; i++) {
        assert_true(mst_op_table[grads[i]]->flags & MST_OPF_GRAD_OP);
        assert_null(mst_op_table[grads[i]]->backward);
    }
    assert_non_null(mst_op_table[MST_OP_SOFTMAX]->ref[MST_DEVICE_CPU][MST_DTYPE_F32]);
    assert_non_null(mst_op_table[MST_OP_LOG_SOFTMAX_GRAD]->ref[MST_DEVICE_CPU][MST_DTYPE_F64]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_sums_to_one),
        cmocka_unit_test(test_large_logits),
        cmocka_unit_test(test_cross_entropy_values),
        cmocka_unit_test(test_cross_entropy_grad_values),
        cmocka_unit_test(test_axis_errors),
        cmocka_unit_test(test_cross_entropy_errors),
        cmocka_unit_test(test_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
