/* test_norm.c — batchnorm and layernorm: gradients (finite differences in f64, training and
 * evaluation), fast vs reference kernels, running statistics against hand-computed numbers,
 * numerical robustness of the statistics, and every validation error with its message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/half.h"
#include "runtime/ops/bn_rows.h"
#include "runtime/rng.h"
#include "tests/runtime/gradcheck.h"

/* ---- builds: arg selects the mode (batchnorm) or eps (layernorm) ---- */

typedef struct {
    bool training;
    int out;    /* which output a grad-op build returns */
} bn_arg;

static const bn_arg k_train = {true, 0}, k_eval = {false, 0};

static mst_tensor *b_bn(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const bn_arg *a = arg;
    return mst_batchnorm(ctx, in[0], in[1], in[2], in[3], in[4], a->training, 0.1, 1e-5);
}

/* batchnorm followed by a nonlinear use of its output, so the upstream gradient is not constant */
static mst_tensor *b_bn_chain(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *y = b_bn(ctx, in, arg);
    return mst_mul(ctx, y, y);
}

static mst_tensor *b_bn_grad(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const bn_arg *a = arg;
    mst_tensor *out[3];
    if (mst_batchnorm_grad(ctx, in[0], in[1], in[2], in[3], in[4], a->training, out) != MST_OK) return NULL;
    return out[a->out];
}

static mst_tensor *b_ln(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_layernorm(ctx, in[0], in[1], in[2], arg ? *(const double *)arg : 1e-5);
}

static mst_tensor *b_ln_chain(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *y = b_ln(ctx, in, arg);
    return mst_mul(ctx, y, y);
}

static const double k_big_eps = 0.5;

/* x (shape), gamma, beta, running_mean, running_var (C) */
#define BN_INPUTS(C, ...)                                                                          \
    {{__VA_ARGS__, GC_RANDN, true}, {1, {C}, GC_RANDN, true}, {1, {C}, GC_RANDN, true},             \
     {1, {C}, GC_RANDN, false}, {1, {C}, GC_POSITIVE, false}}
#define LN_INPUTS(D, ...) {{__VA_ARGS__, GC_RANDN, true}, {1, {D}, GC_RANDN, true}, {1, {D}, GC_RANDN, true}}

static const gc_case k_grad_cases[] = {
    {"bn (N,C) train", b_bn, &k_train, 5, BN_INPUTS(3, 2, {4, 3})},
    {"bn (N,C) train N=2", b_bn, &k_train, 5, BN_INPUTS(4, 2, {2, 4})},
    {"bn (N,C) eval", b_bn, &k_eval, 5, BN_INPUTS(3, 2, {4, 3})},
    {"bn (N,C) eval batch 1", b_bn, &k_eval, 5, BN_INPUTS(3, 2, {1, 3})},
    {"bn (N,C,H,W) train", b_bn, &k_train, 5, BN_INPUTS(3, 4, {2, 3, 4, 5})},
    {"bn (N,C,H,W) train batch 1", b_bn, &k_train, 5, BN_INPUTS(2, 4, {1, 2, 3, 3})},
    {"bn (N,C,H,W) eval", b_bn, &k_eval, 5, BN_INPUTS(3, 4, {2, 3, 4, 5})},
    {"bn (N,C,H,W) eval batch 1", b_bn, &k_eval, 5, BN_INPUTS(2, 4, {1, 2, 3, 3})},
    {"bn (N,C,H,W) train 1x1", b_bn, &k_train, 5, BN_INPUTS(3, 4, {5, 3, 1, 1})},
    {"bn chain train", b_bn_chain, &k_train, 5, BN_INPUTS(3, 4, {3, 3, 2, 2})},
    {"bn chain eval", b_bn_chain, &k_eval, 5, BN_INPUTS(3, 4, {3, 3, 2, 2})},
    {"ln rank 1", b_ln, NULL, 3, LN_INPUTS(7, 1, {7})},
    {"ln rank 2", b_ln, NULL, 3, LN_INPUTS(6, 2, {4, 6})},
    {"ln rank 3", b_ln, NULL, 3, LN_INPUTS(5, 3, {2, 3, 5})},
    {"ln rank 3 big eps", b_ln, &k_big_eps, 3, LN_INPUTS(5, 3, {2, 3, 5})},
    {"ln D=1", b_ln, NULL, 3, LN_INPUTS(1, 2, {3, 1})},
    {"ln D=2", b_ln, NULL, 3, LN_INPUTS(2, 2, {3, 2})},
    {"ln chain", b_ln_chain, NULL, 3, LN_INPUTS(6, 3, {2, 2, 6})},
};

static void test_gradients(void **state) {
    gc_check_all(k_grad_cases, (int)(sizeof(k_grad_cases) / sizeof(k_grad_cases[0])));
}

/* ---- fast vs reference (f32) ---- */

static const bn_arg k_train_gx = {true, 0}, k_train_gg = {true, 1}, k_train_gb = {true, 2};
static const bn_arg k_eval_gx = {false, 0}, k_eval_gg = {false, 1}, k_eval_gb = {false, 2};

/* gy, x, gamma, save_mean, save_invstd */
#define BNG_INPUTS(C, ...)                                                                         \
    {{__VA_ARGS__, GC_RANDN, false}, {__VA_ARGS__, GC_RANDN, false}, {1, {C}, GC_RANDN, false},    \
     {1, {C}, GC_RANDN, false}, {1, {C}, GC_POSITIVE, false}}

static const gc_case k_ref_cases[] = {
    {"bn (N,C) train", b_bn, &k_train, 5, BN_INPUTS(16, 2, {33, 16})},
    {"bn (N,C) eval", b_bn, &k_eval, 5, BN_INPUTS(16, 2, {33, 16})},
    {"bn (N,C,H,W) train", b_bn, &k_train, 5, BN_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn (N,C,H,W) eval", b_bn, &k_eval, 5, BN_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad gx train", b_bn_grad, &k_train_gx, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad ggamma train", b_bn_grad, &k_train_gg, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad gbeta train", b_bn_grad, &k_train_gb, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad gx eval", b_bn_grad, &k_eval_gx, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad ggamma eval", b_bn_grad, &k_eval_gg, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad gbeta eval", b_bn_grad, &k_eval_gb, 5, BNG_INPUTS(5, 4, {3, 5, 7, 6})},
    {"bn_grad gx (N,C) train", b_bn_grad, &k_train_gx, 5, BNG_INPUTS(16, 2, {33, 16})},
};

static void test_fast_vs_reference(void **state) {
    gc_check_ref_all(k_ref_cases, (int)(sizeof(k_ref_cases) / sizeof(k_ref_cases[0])), 1e-5);
}

/* The fast and reference kernels update the running statistics and save the same statistics. */
static void test_fast_vs_reference_stats(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    const int64_t xs[4] = {4, 3, 5, 2}, cs[1] = {3};
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, xs, 2.0, 3.0);
    mst_tensor *g = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, cs, 1, 1), *b = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, cs, 0, 1);
    mst_tensor *rm[2], *rv[2], *out[2][3];
    for (int k = 0; k < 2; k++) {
        rm[k] = mst_tensor_full(ctx, MST_DTYPE_F32, 1, cs, 0.5);
        rv[k] = mst_tensor_full(ctx, MST_DTYPE_F32, 1, cs, 2.0);
        mst_ctx_set_force_ref(ctx, k == 1);
        mst_tensor *in[5] = {x, g, b, rm[k], rv[k]};
        mst_attrs a = {.i = {1}, .f = {0.3, 1e-3}};
        assert_int_equal(mst_dispatch(ctx, MST_OP_BATCHNORM, 5, in, &a, out[k]), MST_OK);
    }
    for (int ch = 0; ch < 3; ch++) {
        assert_float_equal(mst_tensor_f32(rm[0])[ch], mst_tensor_f32(rm[1])[ch], 1e-6);
        assert_float_equal(mst_tensor_f32(rv[0])[ch], mst_tensor_f32(rv[1])[ch], 1e-5);
        assert_float_equal(mst_tensor_f32(out[0][1])[ch], mst_tensor_f32(out[1][1])[ch], 1e-6);
        assert_float_equal(mst_tensor_f32(out[0][2])[ch], mst_tensor_f32(out[1][2])[ch], 1e-6);
    }
    mst_ctx_free(ctx);
}

/* ---- values ---- */

/* Run batchnorm through the dispatcher to see all three outputs. */
static void bn_run(mst_ctx *ctx, mst_tensor *const in[5], bool training, double momentum, double eps, mst_tensor *out[3]) {
    mst_attrs a = {.i = {training}, .f = {momentum, eps}};
    mst_status s = mst_dispatch(ctx, MST_OP_BATCHNORM, 5, in, &a, out);
    if (s != MST_OK) fail_msg("batchnorm: %s", mst_ctx_error(ctx));
}

/* x (4, 2): channel 0 = 1, 2, 3, 4 (mean 2.5, biased var 1.25, unbiased 5/3);
 *           channel 1 = 2, 4, 6, 8 (mean 5, biased var 5, unbiased 20/3). */
static void test_running_stats_2d(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double eps = 1e-5;
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 2}, (float[]){1, 2, 2, 4, 3, 6, 4, 8});
    mst_tensor *gamma = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){1, 2});
    mst_tensor *beta = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){0, 1});
    mst_tensor *rm = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){2});
    mst_tensor *rv = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, 1.0);
    mst_tensor *out[3];
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, true, 0.1, eps, out);

    /* running = 0.9 running + 0.1 batch, unbiased variance */
    assert_float_equal(mst_tensor_f32(rm)[0], 0.25, 1e-7);
    assert_float_equal(mst_tensor_f32(rm)[1], 0.5, 1e-7);
    assert_float_equal(mst_tensor_f32(rv)[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
    assert_float_equal(mst_tensor_f32(rv)[1], 0.9 + 0.1 * 20.0 / 3.0, 1e-6);
    /* saved statistics are the batch's, biased */
    assert_float_equal(mst_tensor_f32(out[1])[0], 2.5, 1e-7);
    assert_float_equal(mst_tensor_f32(out[1])[1], 5.0, 1e-7);
    assert_float_equal(mst_tensor_f32(out[2])[0], 1 / sqrt(1.25 + eps), 1e-6);
    assert_float_equal(mst_tensor_f32(out[2])[1], 1 / sqrt(5.0 + eps), 1e-6);
    const float *y = mst_tensor_f32(out[0]);
    const double xv[4][2] = {{1, 2}, {2, 4}, {3, 6}, {4, 8}};
    for (int n = 0; n < 4; n++) {
        assert_float_equal(y[n * 2 + 0], (xv[n][0] - 2.5) / sqrt(1.25 + eps) * 1 + 0, 1e-6);
        assert_float_equal(y[n * 2 + 1], (xv[n][1] - 5.0) / sqrt(5.0 + eps) * 2 + 1, 1e-6);
    }

    /* a second call keeps averaging: 0.9 * 0.25 + 0.1 * 2.5 */
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, true, 0.1, eps, out);
    assert_float_equal(mst_tensor_f32(rm)[0], 0.9 * 0.25 + 0.25, 1e-6);
    /* momentum 1 replaces, momentum 0 keeps */
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, true, 1.0, eps, out);
    assert_float_equal(mst_tensor_f32(rm)[1], 5.0, 1e-6);
    assert_float_equal(mst_tensor_f32(rv)[1], 20.0 / 3.0, 1e-5);
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, true, 0.0, eps, out);
    assert_float_equal(mst_tensor_f32(rm)[1], 5.0, 1e-6);
    mst_ctx_free(ctx);
}

/* x (2, 2, 1, 2): channel 0 = {1, 3}, {5, 7} (mean 4, biased var 5, unbiased 20/3);
 *                 channel 1 = {0, 0}, {2, 2} (mean 1, biased var 1, unbiased 4/3). f64 this time. */
static void test_running_stats_4d(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F64, 4, (int64_t[]){2, 2, 1, 2}, (double[]){1, 3, 0, 0, 5, 7, 2, 2});
    mst_tensor *gamma = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){2}, 1.0);
    mst_tensor *beta = mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, (int64_t[]){2});
    mst_tensor *rm = mst_tensor_from_data(ctx, MST_DTYPE_F64, 1, (int64_t[]){2}, (double[]){1, -1});
    mst_tensor *rv = mst_tensor_from_data(ctx, MST_DTYPE_F64, 1, (int64_t[]){2}, (double[]){2, 3});
    mst_tensor *out[3];
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, true, 0.1, 1e-5, out);
    assert_float_equal(mst_tensor_f64(rm)[0], 0.9 * 1 + 0.1 * 4, 1e-14);
    assert_float_equal(mst_tensor_f64(rm)[1], 0.9 * -1 + 0.1 * 1, 1e-14);
    assert_float_equal(mst_tensor_f64(rv)[0], 0.9 * 2 + 0.1 * 20.0 / 3.0, 1e-14);
    assert_float_equal(mst_tensor_f64(rv)[1], 0.9 * 3 + 0.1 * 4.0 / 3.0, 1e-14);
    assert_float_equal(mst_tensor_f64(out[1])[0], 4, 1e-14);
    assert_float_equal(mst_tensor_f64(out[2])[1], 1 / sqrt(1 + 1e-5), 1e-14);
    /* x[1, 0, 0, 1] = 7 -> (7 - 4) / sqrt(5 + eps) */
    assert_float_equal(mst_tensor_f64(out[0])[5], 3 / sqrt(5 + 1e-5), 1e-14);
    mst_ctx_free(ctx);
}

static void test_eval_uses_running_stats(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double eps = 1e-5;
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 2, 1, 3}, (float[]){1, 2, 3, 4, 5, 6});
    mst_tensor *gamma = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){2, -1});
    mst_tensor *beta = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){0.5f, 3});
    mst_tensor *rm = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){1, -1});
    mst_tensor *rv = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, (float[]){4, 0.25f});
    mst_tensor *out[3];
    bn_run(ctx, (mst_tensor *[]){x, gamma, beta, rm, rv}, false, 0.1, eps, out);
    const float *y = mst_tensor_f32(out[0]);
    for (int k = 0; k < 3; k++) {
        assert_float_equal(y[k], (k + 1 - 1.0) / sqrt(4 + eps) * 2 + 0.5, 1e-6);
        assert_float_equal(y[3 + k], (k + 4 + 1.0) / sqrt(0.25 + eps) * -1 + 3, 1e-5);
    }
    /* running statistics untouched; saved ones are the running ones */
    assert_float_equal(mst_tensor_f32(rm)[0], 1, 0);
    assert_float_equal(mst_tensor_f32(rv)[1], 0.25, 0);
    assert_float_equal(mst_tensor_f32(out[1])[1], -1, 0);
    assert_float_equal(mst_tensor_f32(out[2])[0], 1 / sqrt(4 + eps), 1e-7);
    /* the public constructor gives the same y */
    mst_tensor *y2 = mst_batchnorm(ctx, x, gamma, beta, rm, rv, false, 0.1, eps);
    assert_non_null(y2);
    for (int k = 0; k < 6; k++) assert_float_equal(mst_tensor_f32(y2)[k], y[k], 0);
    mst_ctx_free(ctx);
}

/* f32 data with |mean| >> std: the two-pass double statistics stay exact where a one-pass
 * E[x^2] - E[x]^2 in f32 would return garbage (or a negative variance). */
static void test_statistics_robust(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    enum { N = 1000 };
    float xv[N];
    for (int i = 0; i < N; i++) xv[i] = 10000.0f + (i % 2 ? 1.0f : -1.0f);   /* mean 1e4, var 1 */
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){N, 1}, xv);
    mst_tensor *g = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){1}, 1);
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){1});
    mst_tensor *rm = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){1});
    mst_tensor *rv = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){1}, 1);
    for (int ref = 0; ref < 2; ref++) {
        mst_ctx_set_force_ref(ctx, ref);
        mst_tensor *out[3];
        bn_run(ctx, (mst_tensor *[]){x, g, b, rm, rv}, true, 0.1, 1e-5, out);
        assert_float_equal(mst_tensor_f32(out[1])[0], 10000.0, 1e-3);
        assert_float_equal(mst_tensor_f32(out[2])[0], 1 / sqrt(1 + 1e-5), 1e-6);
        assert_float_equal(mst_tensor_f32(out[0])[0], -1 / sqrt(1 + 1e-5), 1e-5);
        assert_float_equal(mst_tensor_f32(out[0])[1], 1 / sqrt(1 + 1e-5), 1e-5);
    }
    /* layernorm over the same values */
    mst_tensor *row = mst_tensor_view(ctx, x, 2, (int64_t[]){1, N});
    mst_tensor *lg = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){N}, 1);
    mst_tensor *lb = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){N});
    mst_tensor *y = mst_layernorm(ctx, row, lg, lb, 1e-5);
    assert_non_null(y);
    assert_float_equal(mst_tensor_f32(y)[0], -1 / sqrt(1 + 1e-5), 1e-5);
    mst_ctx_free(ctx);
}

static void test_layernorm_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double eps = 1e-5;
    /* rows: 1, 2, 3, 4 (mean 2.5, var 1.25) and 2, 2, 2, 2 (var 0: y = beta) */
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 1, 4}, (float[]){1, 2, 3, 4, 2, 2, 2, 2});
    mst_tensor *gamma = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
    mst_tensor *beta = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, (float[]){0, 0, 1, 1});
    mst_tensor *out[3];
    mst_status s = mst_dispatch(ctx, MST_OP_LAYERNORM, 3, (mst_tensor *[]){x, gamma, beta}, &(mst_attrs){.f = {eps}}, out);
    if (s != MST_OK) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(out[1]->ndim, 2);
    assert_int_equal(out[1]->shape[0], 2);
    assert_int_equal(out[1]->shape[1], 1);
    assert_float_equal(mst_tensor_f32(out[1])[0], 2.5, 0);
    assert_float_equal(mst_tensor_f32(out[1])[1], 2, 0);
    assert_float_equal(mst_tensor_f32(out[2])[0], 1 / sqrt(1.25 + eps), 1e-6);
    assert_float_equal(mst_tensor_f32(out[2])[1], 1 / sqrt(eps), 1e-2);
    const float *y = mst_tensor_f32(out[0]);
    const float g[4] = {1, 2, 3, 4}, b[4] = {0, 0, 1, 1};
    for (int j = 0; j < 4; j++) {
        assert_float_equal(y[j], (j + 1 - 2.5) / sqrt(1.25 + eps) * g[j] + b[j], 1e-5);
        assert_float_equal(y[4 + j], b[j], 0);
    }
    mst_ctx_free(ctx);
}

/* Backward through mst_backward wires x, gamma and beta (and never the running statistics). */
static void test_autograd_wiring(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const int64_t xs[2] = {4, 3}, cs[1] = {3};
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, xs, 0, 1);
    mst_tensor *gamma = mst_tensor_full(ctx, MST_DTYPE_F32, 1, cs, 1);
    mst_tensor *beta = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, cs);
    mst_tensor *rm = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, cs), *rv = mst_tensor_full(ctx, MST_DTYPE_F32, 1, cs, 1);
    x->requires_grad = gamma->requires_grad = beta->requires_grad = true;
    rm->requires_grad = rv->requires_grad = true;   /* nondiff: must still get nothing */
    mst_tensor *y = mst_batchnorm(ctx, x, gamma, beta, rm, rv, true, 0.1, 1e-5);
    mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F32, 2, xs, 1);
    assert_int_equal(mst_backward_seeded(ctx, y, gy), MST_OK);
    assert_non_null(x->grad);
    assert_non_null(gamma->grad);
    assert_non_null(beta->grad);
    assert_null(rm->grad);
    assert_null(rv->grad);
    /* a constant upstream gradient: gx = 0 in training, gbeta = N, ggamma = sum(xhat) = 0 */
    for (int k = 0; k < 12; k++) assert_float_equal(mst_tensor_f32(x->grad)[k], 0, 1e-6);
    for (int k = 0; k < 3; k++) {
        assert_float_equal(mst_tensor_f32(beta->grad)[k], 4, 1e-6);
        assert_float_equal(mst_tensor_f32(gamma->grad)[k], 0, 1e-5);
    }
    assert_int_equal(mst_op_flops(&(mst_op_call){.op = MST_OP_BATCHNORM, .n_in = 1, .in = {x}, .attrs = {.i = {1}}}), 7 * 12);
    mst_ctx_free(ctx);
}

/* ---- errors ---- */

static void test_batchnorm_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype f = MST_DTYPE_F32;
    mst_tensor *x = mst_tensor_zeros(ctx, f, 4, (int64_t[]){2, 3, 2, 2});
    mst_tensor *v3 = mst_tensor_full(ctx, f, 1, (int64_t[]){3}, 1), *v4 = mst_tensor_full(ctx, f, 1, (int64_t[]){4}, 1);
    mst_tensor *x3 = mst_tensor_zeros(ctx, f, 3, (int64_t[]){2, 3, 4});
    mst_tensor *m13 = mst_tensor_zeros(ctx, f, 2, (int64_t[]){1, 3});

    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x3, v3, v3, v3, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm",
                 "rank 2 (N, C) or 4 (N, C, H, W), got rank 3");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v4, v3, v3, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm",
                 "gamma (input 1) must have shape (3)");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v4, v3, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm", "beta (input 2)");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v4, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm",
                 "running_mean (input 3)");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, m13, false, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm",
                 "running_var (input 4) must have shape (3) to match the channels of x (dim 1), got (1, 3)");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3, true, 0.1, 0), MST_ERR_ARG, "batchnorm", "eps must be a finite number > 0, got 0");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3, false, 0.1, -1e-5), MST_ERR_ARG, "batchnorm", "eps");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3, true, 0.1, NAN), MST_ERR_ARG, "batchnorm", "eps");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3, true, 1.5, 1e-5), MST_ERR_ARG, "batchnorm",
                 "momentum must be in [0, 1], got 1.5");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3, true, -0.1, 1e-5), MST_ERR_ARG, "batchnorm", "momentum");
    /* PyTorch: "Expected more than 1 value per channel when training" */
    mst_tensor *x1 = mst_tensor_zeros(ctx, f, 2, (int64_t[]){1, 3});
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x1, v3, v3, v3, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm",
                 "expected more than 1 value per channel when training, got N*H*W = 1");
    mst_tensor *x1111 = mst_tensor_zeros(ctx, f, 4, (int64_t[]){1, 3, 1, 1});
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x1111, v3, v3, v3, v3, true, 0.1, 1e-5), MST_ERR_SHAPE, "batchnorm", "more than 1 value");
    assert_non_null(mst_batchnorm(ctx, x1, v3, v3, v3, v3, false, 0.1, 1e-5));     /* fine in evaluation */
    /* dtypes */
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 3});
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, xi, v3, v3, v3, v3, true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm", "float tensor, got i32");
    mst_tensor *v3d = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){3}, 1);
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, x, v3, v3, v3, v3d, true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm",
                 "inputs 0 and 4 must have the same dtype (f32 vs f64)");
    /* NULL from an earlier failure passes through with its message */
    mst_ctx_fail(ctx, MST_ERR_ARG, "earlier failure");
    assert_null(mst_batchnorm(ctx, NULL, v3, v3, v3, v3, true, 0.1, 1e-5));
    assert_string_equal(mst_ctx_error(ctx), "earlier failure");
    mst_ctx_clear_error(ctx);

    /* batchnorm_grad */
    mst_tensor *out[3] = {x, x, x};
    mst_tensor *gy = mst_tensor_zeros(ctx, f, 4, (int64_t[]){2, 3, 2, 3});
    assert_int_equal(mst_batchnorm_grad(ctx, gy, x, v3, v3, v3, true, out), MST_ERR_SHAPE);
    assert_null(out[0]);
    assert_non_null(strstr(mst_ctx_error(ctx), "batchnorm_grad: inputs 0 and 1 must have the same shape"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_batchnorm_grad(ctx, x, x, v3, v3, v4, true, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "save_invstd (input 4) must have shape (3)"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_batchnorm_grad(ctx, x3, x3, v3, v3, v3, false, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "rank 2 (N, C) or 4 (N, C, H, W)"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_batchnorm_grad(ctx, x, x, v3d, v3, v3, false, out), MST_ERR_DTYPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "same dtype"));
    mst_ctx_free(ctx);
}

static void test_layernorm_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype f = MST_DTYPE_F32;
    mst_tensor *x = mst_tensor_zeros(ctx, f, 3, (int64_t[]){2, 3, 4});
    mst_tensor *v4 = mst_tensor_full(ctx, f, 1, (int64_t[]){4}, 1), *v3 = mst_tensor_full(ctx, f, 1, (int64_t[]){3}, 1);
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v3, v4, 1e-5), MST_ERR_SHAPE, "layernorm",
                 "gamma (input 1) must have shape (4) to match the last dimension of x, got (3)");
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v4, v3, 1e-5), MST_ERR_SHAPE, "layernorm", "beta (input 2) must have shape (4)");
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v4, v4, 0), MST_ERR_ARG, "layernorm", "eps must be a finite number > 0");
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v4, v4, INFINITY), MST_ERR_ARG, "layernorm", "eps");
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v4, NULL, 1e-5), MST_ERR_ARG, "layernorm", "input 2 is NULL");
    mst_tensor *s = mst_tensor_scalar(ctx, f, 1);
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, s, v4, v4, 1e-5), MST_ERR_SHAPE, "layernorm", "rank >= 1");
    mst_tensor *x0 = mst_tensor_zeros(ctx, f, 2, (int64_t[]){2, 0});
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x0, v4, v4, 1e-5), MST_ERR_SHAPE, "layernorm", "last) dimension of x must be >= 1");
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 4});
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, xi, v4, v4, 1e-5), MST_ERR_DTYPE, "layernorm", "got i32");
    mst_tensor *v4d = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){4}, 1);
    GC_EXPECT_ERROR(ctx, mst_layernorm(ctx, x, v4, v4d, 1e-5), MST_ERR_DTYPE, "layernorm", "same dtype (f32 vs f64)");

    /* layernorm_grad: statistics must have x's shape without its last dimension */
    mst_tensor *out[3];
    mst_tensor *stats = mst_tensor_zeros(ctx, f, 2, (int64_t[]){2, 3}), *bad = mst_tensor_zeros(ctx, f, 1, (int64_t[]){6});
    assert_int_equal(mst_layernorm_grad(ctx, x, x, v4, stats, stats, out), MST_OK);
    assert_int_equal(mst_layernorm_grad(ctx, x, x, v4, bad, stats, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "layernorm_grad: mean (input 3) must have shape (2, 3) (x without its last dimension), got (6)"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_layernorm_grad(ctx, x, x, v4, stats, bad, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "rstd (input 4)"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_layernorm_grad(ctx, x, x, v3, stats, stats, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "gamma (input 2) must have shape (4)"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_layernorm_grad(ctx, stats, x, v4, stats, stats, out), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "inputs 0 and 1 must have the same shape"));
    mst_ctx_free(ctx);
}

/* The relu attribute graph mode's epilogue sets gives relu(batchnorm(x)) bit for bit, in the fast
 * and the reference kernel, and updates the running statistics the same way. */
/* Batch norm's row sums are defined to the bit (runtime/ops/bn_rows.h): sixteen partial double
 * sums, element i into partial i mod 16, a fixed tree. Computed here by hand on values spread over
 * 2^-40..2^40 (so a different order would change the double result) and wanted bit for bit from
 * the CPU's path and from the portable one, for lengths around the 16-lane blocks. CTest runs it
 * again with AVX-512 masked (runtime.test_norm.noavx512). */
static double lanes_total(const double a[16]) {
    double s8[8], s4[4];
    for (int k = 0; k < 8; k++) s8[k] = a[2 * k] + a[2 * k + 1];
    for (int k = 0; k < 4; k++) s4[k] = s8[2 * k] + s8[2 * k + 1];
    return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

static void test_row_sums_bits(void **state) {
    enum { n_max = 100 };
    float x[n_max], gy[n_max];
    mst_rng rng = mst_rng_make(gc_seed(), 0);
    for (int i = 0; i < n_max; i++) {
        x[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 81) - 40);
        gy[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 41) - 20);
    }
    const double m = 0.37;
    int order_matters = 0;
    for (int s = 0; s <= n_max; s++) {
        double a[3][16] = {{0}};
        double naive = 0;
        for (int i = 0; i < s; i++) {
            a[0][i % 16] += (double)x[i];
            a[1][i % 16] += ((double)x[i] - m) * ((double)x[i] - m);
            a[2][i % 16] += (double)gy[i] * ((double)x[i] - m);
            naive += (double)x[i];
        }
        for (int k = 0; k < 3; k++) {
            double want = lanes_total(a[k]);
            for (int vector = 0; vector < 2; vector++) {
                double got = mst_bn_row_sum_path((mst_bn_sum_kind)k, x, gy, s, m, vector);
                if (memcmp(&want, &got, sizeof(double)) != 0)
                    fail_msg("row sum kind %d, length %d, %s path: %.17g, defined %.17g", k, s, vector ? "CPU's" : "portable",
                             got, want);
            }
        }
        order_matters += naive != lanes_total(a[0]);
    }
    assert_true(order_matters > 10);    /* the data does tell one order from another */
}

/* The f32 layernorm kernels run LN_ROWS rows' sums as interleaved chains (runtime/ops/norm.c):
 * every output must keep the row-at-a-time reference's bits, for row counts around the block size,
 * dims from 1 up and a forward that splits its rows over 2 threads. Two kinds of data: values
 * spread over 80 binary orders with random gamma and beta (the arithmetic), and rows holding
 * B, 1, -B, 1 (B = 2^60) in x and in gy, gamma 1.25, where the order of a row's additions changes
 * its f32 mean and gradient (a reversed or pairwise sum gives other floats: checked on row 0), so a
 * kernel that reorders a sum fails. */
static void test_layernorm_fast_bits(void **state) {
    const int64_t dims[] = {1, 3, 32, 33, 100}, rows_of[] = {1, 7, 8, 9, 17, 2100};
    int order_matters = 0;
    for (int cancel = 0; cancel < 2; cancel++)
        for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
            for (size_t ri = 0; ri < sizeof(rows_of) / sizeof(rows_of[0]); ri++) {
                int64_t dim = dims[di], rows = rows_of[ri];
                if (rows * dim > 100000 && dim != 32) continue;
                if (cancel && dim < 4) continue;
                mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 2});
                const int64_t xs[2] = {rows, dim};
                mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, xs, 0.5, 1.0);
                mst_tensor *gy = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, xs, 0, 1.0);
                mst_tensor *gamma = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &dim, 1, 0.5);
                mst_tensor *beta = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &dim, 0, 1);
                float *xv = mst_tensor_f32(x), *gv = mst_tensor_f32(gy);
                mst_rng rng = mst_rng_make(gc_seed(), 7);
                if (!cancel) {
                    for (int64_t i = 0; i < rows * dim; i++)
                        xv[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 81) - 40);
                } else {
                    const float big = 0x1p60f, pattern[4] = {big, 1, -big, 1};
                    for (int64_t r = 0; r < rows; r++) {
                        int64_t p = (r * 5) % (dim - 3);
                        for (int k = 0; k < 4; k++) xv[r * dim + p + k] = gv[r * dim + p + k] = pattern[k];
                    }
                    for (int64_t j = 0; j < dim; j++) mst_tensor_f32(gamma)[j] = 1.25f;
                }
                mst_tensor *out[2][3], *gout[2][3];
                for (int ref = 0; ref < 2; ref++) {
                    mst_ctx_set_force_ref(ctx, ref);
                    mst_status s = mst_dispatch(ctx, MST_OP_LAYERNORM, 3, (mst_tensor *[]){x, gamma, beta},
                                                &(mst_attrs){.f = {1e-5}}, out[ref]);
                    if (s != MST_OK) fail_msg("%s", mst_ctx_error(ctx));
                    s = mst_layernorm_grad(ctx, gy, x, gamma, out[0][1], out[0][2], gout[ref]);
                    if (s != MST_OK) fail_msg("%s", mst_ctx_error(ctx));
                }
                for (int k = 0; k < 3; k++) {
                    const mst_tensor *fa[2] = {out[0][k], gout[0][k]}, *fb[2] = {out[1][k], gout[1][k]};
                    for (int w = 0; w < 2; w++)
                        if (memcmp(mst_tensor_data(fa[w]), mst_tensor_data(fb[w]), (size_t)fa[w]->numel * sizeof(float)) != 0)
                            fail_msg("layernorm%s output %d, %s data, %lld rows of %lld: fast kernel's bits differ from the "
                                     "reference's", w ? "_grad" : "", k, cancel ? "cancelling" : "spread", (long long)rows,
                                     (long long)dim);
                }
                if (cancel) {
                    /* row 0's mean as the reference sums it, reversed and pairwise: other floats */
                    double fwd = 0, bwd = 0, pair = 0;
                    for (int64_t j = 0; j < dim; j++) fwd += xv[j];
                    for (int64_t j = dim - 1; j >= 0; j--) bwd += xv[j];
                    for (int64_t j = 0; j + 1 < dim; j += 2) pair += (double)xv[j] + (double)xv[j + 1];
                    if (dim % 2) pair += xv[dim - 1];
                    order_matters += (float)(fwd / dim) != (float)(bwd / dim) && (float)(fwd / dim) != (float)(pair / dim);
                }
                mst_ctx_free(ctx);
            }
    assert_true(order_matters > 10);
}

/* The row applies are defined by their f32 expressions, one rounding per operation in the order
 * written: computed here by hand, with NaN, +-inf, -0 and values that round to <= 0 after the
 * shift, and wanted bit for bit from both paths for every length 0..40 (the masked last block),
 * with relu on and off, training and evaluation, and in place. */
static void test_row_applies_bits(void **state) {
    enum { n_max = 40 };
    float x[n_max], gy[n_max], want[n_max], got[n_max], inplace[n_max];
    mst_rng rng = mst_rng_make(gc_seed(), 1);
    for (int i = 0; i < n_max; i++) {
        x[i] = (float)mst_rng_normal(&rng);
        gy[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 21) - 10);
    }
    x[3] = NAN, x[7] = INFINITY, x[11] = -INFINITY, x[13] = -0.0f, x[17] = 0.25f;   /* 0.25: y = -0 exactly */
    gy[5] = NAN, gy[9] = -0.0f;
    const float m = 0.25f, a = 1.7f, b = -0.0f, mg = 0.01f, q = -0.3f;
    for (int s = 0; s <= n_max; s++)
        for (int vector = 0; vector < 2; vector++) {
            for (int relu = 0; relu < 2; relu++) {
                for (int i = 0; i < s; i++) {
                    float v = (x[i] - m) * a + b;
                    want[i] = relu && v <= 0 ? 0.0f : v;
                }
                mst_bn_row_apply_path(x, got, s, m, a, b, relu, vector);
                memcpy(inplace, x, sizeof(x));
                mst_bn_row_apply_path(inplace, inplace, s, m, a, b, relu, vector);
                if (memcmp(want, got, (size_t)s * sizeof(float)) || memcmp(want, inplace, (size_t)s * sizeof(float)))
                    fail_msg("row apply, length %d, relu %d, %s path", s, relu, vector ? "CPU's" : "portable");
            }
            for (int training = 0; training < 2; training++) {
                for (int i = 0; i < s; i++) want[i] = training ? a * ((gy[i] - mg) - (x[i] - m) * q) : a * gy[i];
                mst_bn_row_grad_apply_path(gy, training ? x : NULL, got, s, a, mg, m, q, vector);
                memcpy(inplace, gy, sizeof(gy));
                mst_bn_row_grad_apply_path(inplace, training ? x : NULL, inplace, s, a, mg, m, q, vector);
                if (memcmp(want, got, (size_t)s * sizeof(float)) || memcmp(want, inplace, (size_t)s * sizeof(float)))
                    fail_msg("row grad apply, length %d, training %d, %s path", s, training, vector ? "CPU's" : "portable");
            }
        }
}

/* The half row functions are the f32 ones on the exactly widened row, bit for bit: sums, the
 * apply and the gradient apply, f16 and bf16 (values with subnormals, NaN, inf, -0 among them),
 * both paths, every length to 300 (the masked tail, the portable path's 256-value pieces). */
static void test_half_rows_bits(void **state) {
    enum { n_max = 300 };
    static float xf[n_max], gf[n_max], want[n_max], got[n_max];
    static uint16_t xh[n_max], gh[n_max];
    mst_rng rng = mst_rng_make(gc_seed(), 2);
    for (int i = 0; i < n_max; i++) {
        xf[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 31) - 20);
        gf[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 31) - 20);
    }
    xf[5] = NAN, xf[9] = INFINITY, xf[12] = -0.0f, gf[7] = -INFINITY, gf[33] = NAN, xf[40] = 1e-41f;
    const mst_dtype dts[2] = {MST_DTYPE_F16, MST_DTYPE_BF16};
    const double m = 0.37;
    for (int t = 0; t < 2; t++) {
        mst_half_from_f32(dts[t], xf, xh, n_max);
        mst_half_from_f32(dts[t], gf, gh, n_max);
        float xw[n_max], gw[n_max];
        mst_half_to_f32(dts[t], xh, xw, n_max);
        mst_half_to_f32(dts[t], gh, gw, n_max);
        for (int s = 0; s <= n_max; s += s < 40 ? 1 : 13)
            for (int vector = 0; vector < 2; vector++) {
                for (int k = 0; k < 3; k++) {
                    double w = mst_bn_row_sum_path((mst_bn_sum_kind)k, xw, gw, s, m, false);
                    double g = mst_bn_row_sum_half_path((mst_bn_sum_kind)k, dts[t], xh, gh, s, m, vector);
                    if (memcmp(&w, &g, sizeof(w)) != 0)
                        fail_msg("%s row sum kind %d, length %d, %s path: %.17g, widened %.17g", mst_dtype_name(dts[t]),
                                 k, s, vector ? "CPU's" : "portable", g, w);
                }
                mst_bn_row_apply_path(xw, want, s, 0.25f, 1.7f, -0.1f, true, false);
                mst_bn_row_apply_half_path(dts[t], xh, got, s, 0.25f, 1.7f, -0.1f, true, vector);
                if (memcmp(want, got, (size_t)s * sizeof(float)) != 0)
                    fail_msg("%s row apply, length %d, %s path", mst_dtype_name(dts[t]), s, vector ? "CPU's" : "portable");
                for (int training = 0; training < 2; training++) {
                    mst_bn_row_grad_apply_path(gw, training ? xw : NULL, want, s, 1.7f, 0.01f, 0.25f, -0.3f, false);
                    mst_bn_row_grad_apply_half_path(dts[t], gh, training ? xh : NULL, got, s, 1.7f, 0.01f, 0.25f, -0.3f,
                                                    vector);
                    if (memcmp(want, got, (size_t)s * sizeof(float)) != 0)
                        fail_msg("%s row grad apply, length %d, training %d, %s path", mst_dtype_name(dts[t]), s,
                                 training, vector ? "CPU's" : "portable");
                }
            }
    }
}

/* The nChw16c slab functions: each lane is its own row, bit for bit. Sums against the row sums
 * (sixteen partials, which test_row_sums_bits pins) or, four_partials, against the four-partial
 * definition written out here; the gradient's fused sums against the two single sums; the applies
 * against the row applies; f32 and bf16 slabs (widened exactly), both paths, every length to 100
 * (the four-partial tail, whole and partial periods of sixteen), with NaN, inf and -0 in the
 * applies' data and spiky magnitudes in the sums' (so a changed order shows). */
static double four_partials_sum(mst_bn_sum_kind k, const float *x, const float *gy, int s, double m) {
    double p[4] = {0};
    int whole = s / 4 * 4;
    for (int i = 0; i < s; i++) {
        double t = k == MST_BN_SUM_X      ? (double)x[i]
                   : k == MST_BN_SUM_DEV2 ? ((double)x[i] - m) * ((double)x[i] - m)
                                          : (double)gy[i] * ((double)x[i] - m);
        p[i < whole ? i & 3 : 0] += t;
    }
    return (p[0] + p[1]) + (p[2] + p[3]);
}

static void test_slab_bits(void **state) {
    enum { n_max = 100, lanes = 16 };
    static float xf[n_max * lanes], gf[n_max * lanes], rows_x[lanes][n_max], rows_g[lanes][n_max];
    static float want[n_max * lanes], got[n_max * lanes], row_out[n_max];
    static uint16_t xh[n_max * lanes], gh[n_max * lanes];
    double m[lanes], sums[lanes], sums2[lanes], want_gy[lanes], want_gyx[lanes];
    float mf[lanes], a[lanes], b[lanes], mg[lanes], q[lanes];
    for (int l = 0; l < lanes; l++) {
        m[l] = l == 3 ? -0.375 : 0.1 * l - 0.7;     /* lane 3: x = m, a < 0, b = -0 gives y = -0 (relu: +0) */
        mf[l] = (float)m[l], a[l] = l == 3 ? -0.5f : 0.5f + 0.25f * (float)l, b[l] = l == 3 ? -0.0f : 0.01f * (float)l;
        mg[l] = 0.002f * (float)l, q[l] = -0.3f + 0.05f * (float)l;
    }
    for (int bf16 = 0; bf16 < 2; bf16++) {
        mst_rng rng = mst_rng_make(gc_seed(), 3);
        for (int i = 0; i < n_max * lanes; i++) {
            xf[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 61) - 30);
            gf[i] = (float)ldexp(mst_rng_normal(&rng), (int)(mst_rng_u64(&rng) % 41) - 20);
        }
        mst_half_from_f32(MST_DTYPE_BF16, xf, xh, n_max * lanes);
        mst_half_from_f32(MST_DTYPE_BF16, gf, gh, n_max * lanes);
        if (bf16) {     /* the rows hold what the slab functions see: the exactly widened bf16 values */
            mst_half_to_f32(MST_DTYPE_BF16, xh, xf, n_max * lanes);
            mst_half_to_f32(MST_DTYPE_BF16, gh, gf, n_max * lanes);
        }
        const void *xs = bf16 ? (const void *)xh : xf, *gs = bf16 ? (const void *)gh : gf;
        for (int i = 0; i < n_max; i++)
            for (int l = 0; l < lanes; l++) rows_x[l][i] = xf[i * lanes + l], rows_g[l][i] = gf[i * lanes + l];
        for (int s = 0; s <= n_max; s++)
            for (int vector = 0; vector < 2; vector++) {
                const char *path = vector ? "CPU's" : "portable";
                for (int four = 0; four < 2; four++) {
                    for (int k = 0; k < 3; k++) {
                        mst_bn_slab_sums_any((mst_bn_sum_kind)k, bf16, xs, gs, s, m, four, sums, vector);
                        for (int l = 0; l < lanes; l++) {
                            double w = four ? four_partials_sum((mst_bn_sum_kind)k, rows_x[l], rows_g[l], s, m[l])
                                            : mst_bn_row_sum_path((mst_bn_sum_kind)k, rows_x[l], rows_g[l], s, m[l], false);
                            if (memcmp(&w, &sums[l], sizeof(w)) != 0)
                                fail_msg("slab sum kind %d, bf16 %d, four %d, length %d, lane %d, %s path: %.17g, row's %.17g",
                                         k, bf16, four, s, l, path, sums[l], w);
                        }
                    }
                    mst_bn_slab_sums_any(MST_BN_SUM_X, bf16, gs, NULL, s, m, four, want_gy, false);
                    mst_bn_slab_sums_any(MST_BN_SUM_GYX, bf16, xs, gs, s, m, four, want_gyx, false);
                    mst_bn_slab_grad_sums_any(bf16, xs, gs, s, m, four, sums, sums2, vector);
                    if (memcmp(want_gy, sums, sizeof(sums)) || memcmp(want_gyx, sums2, sizeof(sums2)))
                        fail_msg("slab grad sums, bf16 %d, four %d, length %d, %s path", bf16, four, s, path);
                }
            }
        /* the applies, with NaN, inf and -0 among the values */
        for (int i = 0; i < n_max * lanes; i += 37) xf[i] = i % 3 ? NAN : i % 2 ? INFINITY : -0.0f;
        for (int i = 0; i < n_max; i += 3) xf[i * lanes + 3] = mf[3];
        mst_half_from_f32(MST_DTYPE_BF16, xf, xh, n_max * lanes);
        if (bf16) mst_half_to_f32(MST_DTYPE_BF16, xh, xf, n_max * lanes);
        for (int i = 0; i < n_max; i++)
            for (int l = 0; l < lanes; l++) rows_x[l][i] = xf[i * lanes + l];
        for (int s = 0; s <= n_max; s += s < 20 ? 1 : 7)
            for (int vector = 0; vector < 2; vector++) {
                const char *path = vector ? "CPU's" : "portable";
                for (int relu = 0; relu < 2; relu++) {
                    for (int l = 0; l < lanes; l++) {
                        mst_bn_row_apply_path(rows_x[l], row_out, s, mf[l], a[l], b[l], relu, false);
                        for (int i = 0; i < s; i++) want[i * lanes + l] = row_out[i];
                    }
                    mst_bn_slab_apply_any(bf16, xs, got, s, mf, a, b, relu, vector);
                    if (memcmp(want, got, (size_t)(s * lanes) * sizeof(float)))
                        fail_msg("slab apply, bf16 %d, relu %d, length %d, %s path", bf16, relu, s, path);
                }
                for (int training = 0; training < 2; training++) {
                    for (int l = 0; l < lanes; l++) {
                        mst_bn_row_grad_apply_path(rows_g[l], training ? rows_x[l] : NULL, row_out, s, a[l], mg[l], mf[l],
                                                   q[l], false);
                        for (int i = 0; i < s; i++) want[i * lanes + l] = row_out[i];
                    }
                    mst_bn_slab_grad_apply_any(bf16, gs, training ? xs : NULL, got, s, a, mg, mf, q, vector);
                    if (memcmp(want, got, (size_t)(s * lanes) * sizeof(float)))
                        fail_msg("slab grad apply, bf16 %d, training %d, length %d, %s path", bf16, training, s, path);
                }
            }
    }
}

static void test_relu_attribute(void **state) {
    for (int ref = 0; ref < 2; ref++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 2});
        mst_ctx_set_force_ref(ctx, ref);
        mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 3, 5, 5}, 0.3, 1);
        mst_tensor *g = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, 1, 0.2);
        mst_tensor *b = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, 0, 0.2);
        mst_tensor *rm[2], *rv[2], *y[2];
        for (int k = 0; k < 2; k++) {
            rm[k] = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
            rv[k] = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, 1.0);
            mst_attrs a = {.i = {1, k}, .f = {0.1, 1e-5}};
            mst_tensor *out[3] = {0};
            assert_int_equal(mst_dispatch(ctx, MST_OP_BATCHNORM, 5, (mst_tensor *[]){x, g, b, rm[k], rv[k]}, &a, out), MST_OK);
            y[k] = k ? out[0] : mst_relu(ctx, out[0]);
        }
        assert_memory_equal(mst_tensor_data(y[0]), mst_tensor_data(y[1]), mst_tensor_nbytes(y[0]));
        assert_memory_equal(mst_tensor_data(rm[0]), mst_tensor_data(rm[1]), 3 * sizeof(float));
        assert_memory_equal(mst_tensor_data(rv[0]), mst_tensor_data(rv[1]), 3 * sizeof(float));
        mst_ctx_free(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu_attribute),
        cmocka_unit_test(test_row_sums_bits),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_fast_vs_reference_stats),
        cmocka_unit_test(test_running_stats_2d),
        cmocka_unit_test(test_running_stats_4d),
        cmocka_unit_test(test_eval_uses_running_stats),
        cmocka_unit_test(test_statistics_robust),
        cmocka_unit_test(test_row_applies_bits),
        cmocka_unit_test(test_half_rows_bits),
        cmocka_unit_test(test_slab_bits),
        cmocka_unit_test(test_layernorm_values),
        cmocka_unit_test(test_layernorm_fast_bits),
        cmocka_unit_test(test_autograd_wiring),
        cmocka_unit_test(test_batchnorm_errors),
        cmocka_unit_test(test_layernorm_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
