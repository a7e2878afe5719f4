/* test_conv.c — conv2d and its gradient ops: finite-difference gradients in f64 (strides,
 * padding, 1x1, non-square, batch 1, with and without bias, grouped and per-image GEMMs),
 * im2col+sgemm against the direct-loop references in f32 and, over hundreds of random
 * geometries, in f64; the batch split over 1, 2 and 3 threads (same results within f32
 * rounding, the same bits run to run); hand-computed values, FLOP counts, and every error path
 * including allocation failures. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "tests/runtime/gradcheck.h"

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct { int sh, sw, ph, pw; } conv_arg;
static const conv_arg k_s1p0 = {1, 1, 0, 0}, k_s1p1 = {1, 1, 1, 1}, k_s2p0 = {2, 2, 0, 0}, k_s2p1 = {2, 2, 1, 1},
                      k_s21p10 = {2, 1, 1, 0}, k_s3p2 = {3, 3, 2, 2}, k_s1p2 = {1, 1, 2, 2}, k_s1p01 = {1, 1, 0, 1},
                      k_s1p21 = {1, 1, 2, 1};

static mst_tensor *b_conv(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const conv_arg *a = arg;
    return mst_conv2d(ctx, in[0], in[1], NULL, a->sh, a->sw, a->ph, a->pw);
}
static mst_tensor *b_conv_bias(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const conv_arg *a = arg;
    return mst_conv2d(ctx, in[0], in[1], in[2], a->sh, a->sw, a->ph, a->pw);
}
/* two convolutions in a row: the first one's input gradient comes through the second */
static mst_tensor *b_conv_conv(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *h = mst_conv2d(ctx, in[0], in[1], in[2], 1, 1, 1, 1);
    return mst_conv2d(ctx, h, in[3], NULL, 2, 2, 1, 1);
}

#define T1(a) 1, {a}
#define T4(a, b, c, d) 4, {a, b, c, d}
#define CONV(name, arg, sx, sw) {name, b_conv, &arg, 2, {{sx, GC_RANDN, true}, {sw, GC_RANDN, true}}}
#define CONVB(name, arg, sx, sw, k) \
    {name, b_conv_bias, &arg, 3, {{sx, GC_RANDN, true}, {sw, GC_RANDN, true}, {T1(k), GC_RANDN, true}}}

/* Small images share a GEMM (as many as fit in 1024 columns); a 32x32 output takes the
 * one-image-per-GEMM path, 20x20 outputs come two to a GEMM with a partial last group. */
static const gc_case k_cases[] = {
    CONVB("3x3 stride 1 pad 1 + bias", k_s1p1, T4(2, 3, 5, 5), T4(4, 3, 3, 3), 4),
    CONV("3x3 stride 1 pad 0", k_s1p0, T4(2, 2, 5, 5), T4(3, 2, 3, 3)),
    CONV("3x3 stride 2 pad 0", k_s2p0, T4(2, 2, 7, 7), T4(3, 2, 3, 3)),
    CONVB("3x3 stride 2 pad 1, batch 1", k_s2p1, T4(1, 2, 6, 6), T4(2, 2, 3, 3), 2),
    CONVB("1x1 pointwise + bias", k_s1p0, T4(2, 3, 4, 4), T4(5, 3, 1, 1), 5),
    CONV("1x1 pointwise, batch 1", k_s1p0, T4(1, 4, 3, 5), T4(2, 4, 1, 1)),
    CONV("1x1 stride 2", k_s2p0, T4(2, 3, 5, 5), T4(2, 3, 1, 1)),
    CONVB("non-square kernel and input", k_s21p10, T4(2, 2, 6, 4), T4(3, 2, 3, 2), 3),
    CONV("kernel = padded input", k_s1p1, T4(2, 1, 2, 3), T4(2, 1, 4, 5)),
    CONV("stride 3 pad 2 (stride > kernel)", k_s3p2, T4(2, 2, 5, 6), T4(2, 2, 2, 2)),
    CONV("5x5 kernel", k_s1p1, T4(1, 2, 6, 6), T4(2, 2, 5, 5)),
    /* stride 1 with Q == W: im2col/col2im take the whole-plane shifted copy */
    CONVB("same 5x5, pad 2", k_s1p2, T4(2, 2, 6, 7), T4(3, 2, 5, 5), 3),
    CONV("same width, 2x3 kernel, pad (0, 1)", k_s1p01, T4(2, 2, 5, 6), T4(2, 2, 2, 3)),
    CONV("same width, taller output, pad (2, 1)", k_s1p21, T4(1, 2, 4, 5), T4(2, 2, 3, 3)),
    CONV("same width, kernel rows mostly padding", k_s1p21, T4(2, 1, 1, 3), T4(2, 1, 5, 3)),
    CONVB("32x32: one image per GEMM", k_s1p1, T4(2, 1, 32, 32), T4(2, 1, 3, 3), 2),
    CONVB("20x20: partial last group", k_s1p1, T4(5, 1, 20, 20), T4(2, 1, 3, 3), 2),
    {"frozen weight, bias only", b_conv_bias, &k_s1p1, 3,
     {{T4(2, 2, 4, 4), GC_RANDN, true}, {T4(3, 2, 3, 3), GC_RANDN, false}, {T1(3), GC_RANDN, true}}},
    {"conv -> conv", b_conv_conv, NULL, 4,
     {{T4(2, 2, 5, 5), GC_RANDN, true}, {T4(3, 2, 3, 3), GC_RANDN, true}, {T1(3), GC_RANDN, true},
      {T4(2, 3, 3, 3), GC_RANDN, true}}},
};

/* The gradient ops called directly, for fast vs reference: in[0] plays gy, in[1] w or x. */
typedef struct { conv_arg c; int a, b; } grad_arg;     /* (in_h, in_w) or (k_h, k_w) */
static mst_tensor *b_grad_input(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const grad_arg *g = arg;
    return mst_conv2d_grad_input(ctx, in[0], in[1], g->a, g->b, g->c.sh, g->c.sw, g->c.ph, g->c.pw);
}
static mst_tensor *b_grad_weight(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const grad_arg *g = arg;
    return mst_conv2d_grad_weight(ctx, in[0], in[1], g->a, g->b, g->c.sh, g->c.sw, g->c.ph, g->c.pw);
}
static const grad_arg k_gi_28 = {{1, 1, 1, 1}, 28, 28}, k_gw_33 = {{1, 1, 1, 1}, 3, 3}, k_gi_s2 = {{2, 2, 1, 1}, 13, 13},
                      k_gw_s2 = {{2, 2, 1, 1}, 3, 3}, k_gi_1x1 = {{1, 1, 0, 0}, 6, 6}, k_gw_1x1 = {{1, 1, 0, 0}, 1, 1},
                      k_gi_ns = {{2, 1, 1, 0}, 9, 6}, k_gw_ns = {{2, 1, 1, 0}, 3, 2};

#define REF(name, build, arg, s0, s1) {name, build, &arg, 2, {{s0, GC_RANDN, false}, {s1, GC_RANDN, false}}}
static const gc_case k_ref_cases[] = {
    REF("grad_input 28x28 (per image)", b_grad_input, k_gi_28, T4(3, 4, 28, 28), T4(4, 3, 3, 3)),
    REF("grad_weight 28x28 (per image)", b_grad_weight, k_gw_33, T4(3, 4, 28, 28), T4(3, 3, 28, 28)),
    REF("grad_input stride 2, odd input", b_grad_input, k_gi_s2, T4(5, 4, 7, 7), T4(4, 3, 3, 3)),
    REF("grad_weight stride 2, odd input", b_grad_weight, k_gw_s2, T4(5, 4, 7, 7), T4(5, 3, 13, 13)),
    REF("grad_input 1x1", b_grad_input, k_gi_1x1, T4(2, 5, 6, 6), T4(5, 3, 1, 1)),
    REF("grad_weight 1x1", b_grad_weight, k_gw_1x1, T4(2, 5, 6, 6), T4(2, 3, 6, 6)),
    REF("grad_input non-square", b_grad_input, k_gi_ns, T4(3, 2, 5, 5), T4(2, 3, 3, 2)),
    REF("grad_weight non-square", b_grad_weight, k_gw_ns, T4(3, 2, 5, 5), T4(3, 3, 9, 6)),
    CONVB("conv 32->32 3x3 on 28x28 (per image)", k_s1p1, T4(2, 32, 28, 28), T4(32, 32, 3, 3), 32),
    CONVB("conv 16->24 stride 2 on 14x14 (grouped)", k_s2p1, T4(9, 16, 14, 14), T4(24, 16, 3, 3), 24),
};

static void test_gradients(void **state) { gc_check_all(k_cases, N_ELEMS(k_cases)); }

static void test_fast_vs_reference(void **state) {
    gc_check_ref_all(k_cases, N_ELEMS(k_cases), 1e-5);
    /* sgemm sums in f32 in its own order, the references in double; reductions here run up to
     * N*P*Q = 3*784 terms (grad_weight), so allow about that many f32 roundings */
    gc_check_ref_all(k_ref_cases, N_ELEMS(k_ref_cases), 3e-4);
}

/* Random geometries (stride 1-3, padding 0-3, kernels 1-5, tiny to mid-sized images, batches
 * that split into partial groups), each op fast against reference in f64, where the two differ
 * only by summation order. Catches the edge cases of the im2col index ranges. */
static void test_random_geometries(void **state) {
    uint64_t seed = gc_seed();
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 1});
    mst_rng *rng = &ctx->rng;
    int checked = 0;
    for (int it = 0; it < 400; it++) {
        bool big = it % 10 == 0;
        int64_t n = 1 + (int64_t)(mst_rng_u64(rng) % (big ? 5 : 3)), c = 1 + (int64_t)(mst_rng_u64(rng) % 3);
        int64_t k = 1 + (int64_t)(mst_rng_u64(rng) % 3);
        int64_t h = 1 + (int64_t)(mst_rng_u64(rng) % (big ? 24 : 9)), w = 1 + (int64_t)(mst_rng_u64(rng) % (big ? 24 : 9));
        int64_t r = 1 + (int64_t)(mst_rng_u64(rng) % 5), s = 1 + (int64_t)(mst_rng_u64(rng) % 5);
        int sh = 1 + (int)(mst_rng_u64(rng) % 3), sw = 1 + (int)(mst_rng_u64(rng) % 3);
        int ph = (int)(mst_rng_u64(rng) % 4), pw = (int)(mst_rng_u64(rng) % 4);
        if (mst_rng_u64(rng) % 2) { sh = sw = 1; pw = (int)(s - 1) / 2; s = 2 * pw + 1; }   /* often "same" width */
        if (r > h + 2 * ph || s > w + 2 * pw) continue;
        int64_t p = (h + 2 * ph - r) / sh + 1, q = (w + 2 * pw - s) / sw + 1;
        mst_pool_push(ctx);
        mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F64, 4, (int64_t[]){n, c, h, w}, 0, 1);
        mst_tensor *wt = mst_tensor_randn(ctx, MST_DTYPE_F64, 4, (int64_t[]){k, c, r, s}, 0, 1);
        mst_tensor *bias = mst_tensor_randn(ctx, MST_DTYPE_F64, 1, (int64_t[]){k}, 0, 1);
        mst_tensor *gy = mst_tensor_randn(ctx, MST_DTYPE_F64, 4, (int64_t[]){n, k, p, q}, 0, 1);
        mst_tensor *fast[3], *ref[3];
        for (int pass = 0; pass < 2; pass++) {
            mst_tensor **out = pass ? ref : fast;
            mst_ctx_set_force_ref(ctx, pass == 1);
            out[0] = mst_conv2d(ctx, x, wt, it % 2 ? bias : NULL, sh, sw, ph, pw);
            out[1] = mst_conv2d_grad_input(ctx, gy, wt, (int)h, (int)w, sh, sw, ph, pw);
            out[2] = mst_conv2d_grad_weight(ctx, gy, x, (int)r, (int)s, sh, sw, ph, pw);
        }
        mst_ctx_set_force_ref(ctx, false);
        for (int o = 0; o < 3; o++) {
            if (!fast[o] || !ref[o]) fail_msg("case %d: %s", it, mst_ctx_error(ctx));
            for (int64_t i = 0; i < fast[o]->numel; i++) {
                double a = mst_tensor_f64(fast[o])[i], b = mst_tensor_f64(ref[o])[i];
                if (fabs(a - b) > 1e-10 * (1 + fabs(b)))
                    fail_msg("seed %llu case %d op %d: x (%lld,%lld,%lld,%lld) w (%lld,%lld,%lld,%lld) stride (%d,%d) "
                             "pad (%d,%d): element %lld: %.12g vs reference %.12g",
                             (unsigned long long)seed, it, o, (long long)n, (long long)c, (long long)h, (long long)w,
                             (long long)k, (long long)c, (long long)r, (long long)s, sh, sw, ph, pw, (long long)i, a, b);
            }
        }
        checked++;
        mst_pool_pop(ctx);
    }
    printf("random geometries: %d checked, seed %llu\n", checked, (unsigned long long)seed);
    assert_true(checked > 200);
    mst_ctx_free(ctx);
}

static mst_tensor *from_f32(mst_ctx *ctx, int ndim, const int64_t *shape, const float *data) {
    mst_tensor *t = mst_tensor_from_data(ctx, MST_DTYPE_F32, ndim, shape, data);
    assert_non_null(t);
    return t;
}

static void expect_values(mst_ctx *ctx, const mst_tensor *y, int ndim, const int64_t *shape, const float *want) {
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    char a[96], b[96];
    if (!mst_shape_equal(y->ndim, y->shape, ndim, shape))
        fail_msg("shape %s, expected %s", mst_shape_str(y->ndim, y->shape, a, sizeof(a)), mst_shape_str(ndim, shape, b, sizeof(b)));
    for (int64_t i = 0; i < y->numel; i++) assert_float_equal(mst_tensor_f32(y)[i], want[i], 1e-5);
}

/* x = 1..9 as a 3x3 image, w = [[1, 2], [3, 4]], worked by hand. */
static void test_values(void **state) {
    for (int ref = 0; ref < 2; ref++) {
        mst_ctx *ctx = mst_ctx_new(NULL);
        mst_ctx_set_force_ref(ctx, ref);
        mst_tensor *x = from_f32(ctx, 4, (int64_t[]){1, 1, 3, 3}, (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
        mst_tensor *w = from_f32(ctx, 4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4});
        mst_tensor *bias = from_f32(ctx, 1, (int64_t[]){1}, (float[]){0.5f});
        /* y[0,0] = 1*1 + 2*2 + 3*4 + 4*5 = 37, then 47, 67, 77; plus the bias */
        expect_values(ctx, mst_conv2d(ctx, x, w, bias, 1, 1, 0, 0), 4, (int64_t[]){1, 1, 2, 2},
                      (float[]){37.5f, 47.5f, 67.5f, 77.5f});
        /* stride 2, pad 1, a 2x2 box: windows see {1}, {2, 3}, {4, 7}, {5, 6, 8, 9} */
        mst_tensor *ones = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, 1.0);
        expect_values(ctx, mst_conv2d(ctx, x, ones, NULL, 2, 2, 1, 1), 4, (int64_t[]){1, 1, 2, 2},
                      (float[]){1, 5, 11, 28});
        /* two output channels, two images: channel 1 is channel 0 negated */
        mst_tensor *x2 = from_f32(ctx, 4, (int64_t[]){2, 1, 2, 2}, (float[]){1, 2, 3, 4, -1, 0, 0, 1});
        mst_tensor *w2 = from_f32(ctx, 4, (int64_t[]){2, 1, 1, 1}, (float[]){2, -2});
        expect_values(ctx, mst_conv2d(ctx, x2, w2, NULL, 1, 1, 0, 0), 4, (int64_t[]){2, 2, 2, 2},
                      (float[]){2, 4, 6, 8, -2, -4, -6, -8, -2, 0, 0, 2, 2, 0, 0, -2});
        /* gradients for gy = ones (1, 1, 2, 2): gx counts each weight over the windows covering
         * a pixel; gw sums each window position's pixels */
        mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, 1.0);
        expect_values(ctx, mst_conv2d_grad_input(ctx, gy, w, 3, 3, 1, 1, 0, 0), 4, (int64_t[]){1, 1, 3, 3},
                      (float[]){1, 3, 2, 4, 10, 6, 3, 7, 4});
        expect_values(ctx, mst_conv2d_grad_weight(ctx, gy, x, 2, 2, 1, 1, 0, 0), 4, (int64_t[]){1, 1, 2, 2},
                      (float[]){12, 16, 24, 28});
        mst_ctx_free(ctx);
    }
}

/* Through autograd: the bias gradient is gy summed over batch and space. */
static void test_backward_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = from_f32(ctx, 4, (int64_t[]){1, 1, 3, 3}, (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
    mst_tensor *w = from_f32(ctx, 4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4});
    mst_tensor *bias = from_f32(ctx, 1, (int64_t[]){1}, (float[]){0});
    x->requires_grad = w->requires_grad = bias->requires_grad = true;
    mst_tensor *y = mst_conv2d(ctx, x, w, bias, 1, 1, 0, 0);
    mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, 1.0);
    if (mst_backward_seeded(ctx, y, gy) != MST_OK) fail_msg("%s", mst_ctx_error(ctx));
    expect_values(ctx, x->grad, 4, (int64_t[]){1, 1, 3, 3}, (float[]){1, 3, 2, 4, 10, 6, 3, 7, 4});
    expect_values(ctx, w->grad, 4, (int64_t[]){1, 1, 2, 2}, (float[]){12, 16, 24, 28});
    expect_values(ctx, bias->grad, 1, (int64_t[]){1}, (float[]){4});
    mst_ctx_free(ctx);
}

static void test_empty_batch_and_flops(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){0, 3, 8, 8});
    mst_tensor *w = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3});
    mst_tensor *y = mst_conv2d(ctx, x, w, NULL, 1, 1, 1, 1);
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(y->shape[0], 0);
    assert_int_equal(y->shape[1], 4);
    mst_tensor *gw = mst_conv2d_grad_weight(ctx, y, x, 3, 3, 1, 1, 1, 1);      /* an empty sum: zeros */
    if (!gw) fail_msg("%s", mst_ctx_error(ctx));
    for (int64_t i = 0; i < gw->numel; i++) assert_float_equal(mst_tensor_f32(gw)[i], 0, 0);

    mst_tensor *x1 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 8, 6});
    mst_op_call c = {.op = MST_OP_CONV2D, .n_in = 2, .in = {x1, w}, .attrs = {.i = {2, 1, 1, 0}}};
    int64_t p = (8 + 2 - 3) / 2 + 1, q = (6 - 3) / 1 + 1, want = 2 * 2 * 4 * p * q * 3 * 3 * 3;
    assert_int_equal(mst_op_flops(&c), want);
    mst_tensor *gy = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 4, p, q});
    mst_op_call gi = {.op = MST_OP_CONV2D_GRAD_INPUT, .n_in = 2, .in = {gy, w}, .attrs = {.i = {2, 1, 1, 0, 8, 6}}};
    mst_op_call gwc = {.op = MST_OP_CONV2D_GRAD_WEIGHT, .n_in = 2, .in = {gy, x1}, .attrs = {.i = {2, 1, 1, 0, 3, 3}}};
    assert_int_equal(mst_op_flops(&gi), want);
    assert_int_equal(mst_op_flops(&gwc), want);
    mst_ctx_free(ctx);
}

static void test_conv_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 3, 5, 5});
    mst_tensor *w = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 3, 3});
    mst_tensor *w4 = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 4, 3, 3});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w4, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "conv2d", "4 input channels", "has 3",
                 "f32(1, 3, 5, 5)", "f32(2, 4, 3, 3)");
    mst_tensor *small = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 3, 2, 2});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, small, w, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "kernel 3x3 is larger than the padded input 2x2");
    assert_non_null(mst_conv2d(ctx, small, w, NULL, 1, 1, 1, 1));     /* padding makes it fit */
    mst_tensor *wide = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 1, 7});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, wide, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "kernel 1x7", "5x5");
    mst_tensor *x3 = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){3, 5, 5});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x3, w, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "input (N, C, H, W) must have rank 4", "rank 3");
    mst_tensor *w2 = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 27});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w2, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "weight (K, C, R, S) must have rank 4");
    mst_tensor *xi = gc_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){1, 3, 5, 5}), *wi = gc_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){2, 3, 3, 3});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, xi, wi, NULL, 1, 1, 0, 0), MST_ERR_DTYPE, "float", "i32");
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w, NULL, 0, 1, 0, 0), MST_ERR_ARG, "stride must be >= 1", "(0, 1)");
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w, NULL, 1, 1, 0, -1), MST_ERR_ARG, "padding must be >= 0", "(0, -1)");
    mst_tensor *bias = gc_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w, bias, 1, 1, 0, 0), MST_ERR_SHAPE, "bias must be (2)");
    mst_tensor *w0 = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){0, 3, 3, 3});
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, w0, NULL, 1, 1, 0, 0), MST_ERR_SHAPE, "positive dims");
    GC_EXPECT_ERROR(ctx, mst_conv2d(ctx, x, NULL, NULL, 1, 1, 0, 0), MST_ERR_ARG, "input 1 is NULL");
    /* a failure upstream passes through untouched */
    assert_null(mst_conv2d(ctx, mst_conv2d(ctx, x, w4, NULL, 1, 1, 0, 0), w, NULL, 1, 1, 0, 0));
    assert_non_null(strstr(mst_ctx_error(ctx), "4 input channels"));
    mst_ctx_free(ctx);
}

static void test_grad_op_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 6, 6});
    mst_tensor *w = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3});
    mst_tensor *gy = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 4, 4, 4});      /* 6x6, 3x3, no padding */
    assert_non_null(mst_conv2d_grad_input(ctx, gy, w, 6, 6, 1, 1, 0, 0));
    assert_non_null(mst_conv2d_grad_weight(ctx, gy, x, 3, 3, 1, 1, 0, 0));
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gy, w, 7, 6, 1, 1, 0, 0), MST_ERR_SHAPE, "conv2d_grad_input", "gy is 4x4",
                 "7x6 input", "gives 5x4");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gy, w, 0, 6, 1, 1, 0, 0), MST_ERR_SHAPE, "must be positive");
    mst_tensor *gy5 = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 5, 4, 4});
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gy5, w, 6, 6, 1, 1, 0, 0), MST_ERR_SHAPE, "gy has 5 channels", "4 output channels");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gy, w, 6, 6, 1, 0, 0, 0), MST_ERR_ARG, "stride");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy, x, 3, 3, 1, 1, -2, 0), MST_ERR_ARG, "padding");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy, x, 2, 3, 1, 1, 0, 0), MST_ERR_SHAPE, "conv2d_grad_weight", "gy is 4x4",
                 "gives 5x4");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy, x, 0, 3, 1, 1, 0, 0), MST_ERR_SHAPE, "positive dims");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy, x, 9, 9, 1, 1, 0, 0), MST_ERR_SHAPE, "larger than the padded input");
    mst_tensor *x1 = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 3, 6, 6});
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy, x1, 3, 3, 1, 1, 0, 0), MST_ERR_SHAPE, "gy has batch 2", "batch 1");
    mst_tensor *gy3 = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){4, 4, 4});
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_weight(ctx, gy3, x, 3, 3, 1, 1, 0, 0), MST_ERR_SHAPE, "gy (N, K, P, Q) must have rank 4");
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gy3, w, 6, 6, 1, 1, 0, 0), MST_ERR_SHAPE, "rank 4");
    mst_tensor *gyi = gc_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){2, 4, 4, 4}), *wi = gc_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){4, 3, 3, 3});
    GC_EXPECT_ERROR(ctx, mst_conv2d_grad_input(ctx, gyi, wi, 6, 6, 1, 1, 0, 0), MST_ERR_DTYPE, "i32");
    mst_ctx_free(ctx);
}

/* The n-th allocation fails: first the output, then (in a fresh context, whose workspace is
 * still empty) the im2col workspace. Each call reports MST_ERR_OOM, and the context works again
 * once the error is cleared. */
typedef mst_tensor *(*conv_call)(mst_ctx *ctx, mst_tensor *const t[]);
static mst_tensor *call_conv(mst_ctx *ctx, mst_tensor *const t[]) { return mst_conv2d(ctx, t[0], t[1], t[2], 1, 1, 1, 1); }
static mst_tensor *call_grad_input(mst_ctx *ctx, mst_tensor *const t[]) {
    return mst_conv2d_grad_input(ctx, t[3], t[1], 8, 8, 1, 1, 1, 1);
}
static mst_tensor *call_grad_weight(mst_ctx *ctx, mst_tensor *const t[]) {
    return mst_conv2d_grad_weight(ctx, t[3], t[0], 3, 3, 1, 1, 1, 1);
}

static void test_out_of_memory(void **state) {
    const conv_call calls[] = {call_conv, call_grad_input, call_grad_weight};
    for (int ci = 0; ci < 3; ci++)
        for (int nth = 1; nth <= 2; nth++) {
            mst_ctx *ctx = mst_ctx_new(NULL);
            mst_ctx_set_kernels(ctx, MST_KERNELS_BUILTIN);   /* the builtin kernels' workspace is what fails */
            mst_tensor *t[4] = {
                gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 8, 8}), gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3}),
                gc_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}), gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 4, 8, 8}),
            };
            mst_allocator_fail_at(ctx->alloc, nth);
            GC_EXPECT_ERROR(ctx, calls[ci](ctx, t), MST_ERR_OOM, "out of memory", nth == 1 ? "tensor" : "workspace");
            mst_tensor *y = calls[ci](ctx, t);
            if (!y) fail_msg("call %d did not recover: %s", ci, mst_ctx_error(ctx));
            mst_ctx_free(ctx);
        }
}

/* ---- the split over threads ----
 * Shapes big enough to pass the kernels' work threshold (k_par_min_chunk_flops, 4 MFLOP a chunk),
 * so the batch really splits: into uneven ranges, ranges holding partial groups of images, and
 * grad_weight partials reduced from two or three threads; batch 1 splits each GEMM instead. */
typedef struct {
    const char *name;
    int64_t n, c, h, w, k, r, s;
    conv_arg a;
    bool bias;
} thread_case;

static const thread_case k_thread_cases[] = {
    {"14x14 grouped, 3x3 pad 1", 9, 16, 14, 14, 32, 3, 3, {1, 1, 1, 1}, false},
    {"7x7 grouped + bias, partial groups", 22, 32, 7, 7, 32, 3, 3, {1, 1, 1, 1}, true},
    {"28x28 stride 2 pad 1", 9, 16, 28, 28, 32, 3, 3, {2, 2, 1, 1}, false},
    {"1x1 pointwise + bias", 10, 64, 14, 14, 64, 1, 1, {1, 1, 0, 0}, true},
    {"1x1 stride 2 (projection)", 64, 32, 14, 14, 64, 1, 1, {2, 2, 0, 0}, false},
    {"batch 1: the GEMMs split", 1, 32, 28, 28, 32, 3, 3, {1, 1, 1, 1}, true},
};

/* forward, grad_input, grad_weight of one case on a fresh context with `threads` threads; the
 * inputs come from the seed alone, so every call sees the same data. */
static void run_threads_case(const thread_case *tc, int threads, uint64_t seed, float *out[3], int64_t numel[3],
                             bool with_ref) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = threads});
    assert_non_null(ctx);
    assert_int_equal(ctx->n_threads, threads);
    mst_grad_set_enabled(ctx, false);
    const conv_arg *a = &tc->a;
    int64_t p = (tc->h + 2 * a->ph - tc->r) / a->sh + 1, q = (tc->w + 2 * a->pw - tc->s) / a->sw + 1;
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){tc->n, tc->c, tc->h, tc->w}, 0, 1);
    mst_tensor *wt = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){tc->k, tc->c, tc->r, tc->s}, 0, 1);
    mst_tensor *bias = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){tc->k}, 0, 1);
    mst_tensor *gy = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){tc->n, tc->k, p, q}, 0, 1);
    for (int pass = 0; pass < (with_ref ? 2 : 1); pass++) {
        mst_ctx_set_force_ref(ctx, pass == 1);
        mst_tensor *y[3] = {
            mst_conv2d(ctx, x, wt, tc->bias ? bias : NULL, a->sh, a->sw, a->ph, a->pw),
            mst_conv2d_grad_input(ctx, gy, wt, (int)tc->h, (int)tc->w, a->sh, a->sw, a->ph, a->pw),
            mst_conv2d_grad_weight(ctx, gy, x, (int)tc->r, (int)tc->s, a->sh, a->sw, a->ph, a->pw),
        };
        for (int o = 0; o < 3; o++) {
            if (!y[o]) fail_msg("%s, %d threads: %s", tc->name, threads, mst_ctx_error(ctx));
            float *dst = out[o] + (pass ? numel[o] : 0);
            if (!pass) numel[o] = y[o]->numel;
            memcpy(dst, mst_tensor_f32(y[o]), (size_t)y[o]->numel * sizeof(float));
        }
    }
    mst_ctx_free(ctx);
}

/* |a - b| <= tol (|b| + rms(b)) elementwise, and the whole-tensor relative error below tol. */
static void expect_close(const float *a, const float *b, int64_t n, double tol, const char *name, const char *op,
                         int threads, uint64_t seed) {
    double ss = 0, se = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        ss += (double)b[i] * b[i];
        se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    }
    double rms = sqrt(ss / (double)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (fabs(b[i]) + rms);
        if (e > worst) worst = e;
        if (e > tol)
            fail_msg("%s (seed %llu): %s element %lld: %.9g at %d threads vs %.9g at 1 (rms %.3g)", name,
                     (unsigned long long)seed, op, (long long)i, a[i], threads, b[i], rms);
    }
    double rel = ss > 0 ? sqrt(se / ss) : sqrt(se);
    printf("  %-12s %d threads: worst %.2g, norm-wise %.2g\n", op, threads, worst, rel);
    assert_true(rel <= tol);
}

static void test_threads(void **state) {
    static const char *const ops[] = {"conv2d", "grad_input", "grad_weight"};
    uint64_t seed = gc_seed();
    for (int ci = 0; ci < N_ELEMS(k_thread_cases); ci++) {
        const thread_case *tc = &k_thread_cases[ci];
        int64_t sizes[3] = {tc->n * tc->k * tc->h * tc->w, tc->n * tc->c * tc->h * tc->w, tc->k * tc->c * tc->r * tc->s};
        float *base[3], *run[3];
        int64_t numel[3];
        for (int o = 0; o < 3; o++) {
            base[o] = malloc((size_t)(2 * sizes[o]) * sizeof(float));     /* fast, then reference */
            run[o] = malloc((size_t)sizes[o] * sizeof(float));
            assert_true(base[o] && run[o]);
        }
        run_threads_case(tc, 1, seed, base, numel, true);
        for (int o = 0; o < 3; o++)     /* one thread against the direct loops, as test_fast_vs_reference */
            for (int64_t i = 0; i < numel[o]; i++) {
                float f = base[o][i], r = base[o][numel[o] + i];
                if (fabsf(f - r) > 3e-4f * (1 + fabsf(r)))
                    fail_msg("%s (seed %llu): %s element %lld: %.9g vs reference %.9g", tc->name,
                             (unsigned long long)seed, ops[o], (long long)i, f, r);
            }
        for (int threads = 2; threads <= 3; threads++) {
            float *first[3];
            for (int rep = 0; rep < 2; rep++) {
                run_threads_case(tc, threads, seed, run, numel, false);
                for (int o = 0; o < 3; o++) {
                    if (rep == 1) {     /* run to run: the same bits */
                        if (memcmp(first[o], run[o], (size_t)numel[o] * sizeof(float)) != 0)
                            fail_msg("%s (seed %llu): %s at %d threads differs between two runs", tc->name,
                                     (unsigned long long)seed, ops[o], threads);
                        free(first[o]);
                        continue;
                    }
                    /* against one thread: summation order differs (grad_weight's partials, GEMM
                     * blocking), so within f32 rounding — relative to the output's RMS, since an
                     * element that cancels to near 0 carries the rounding of its large terms */
                    expect_close(run[o], base[o], numel[o], 1e-5, tc->name, ops[o], threads, seed);
                    first[o] = malloc((size_t)numel[o] * sizeof(float));
                    assert_non_null(first[o]);
                    memcpy(first[o], run[o], (size_t)numel[o] * sizeof(float));
                }
            }
        }
        printf("threads 1/2/3 %-36s seed %llu\n", tc->name, (unsigned long long)seed);
        for (int o = 0; o < 3; o++) {
            free(base[o]);
            free(run[o]);
        }
    }
}

/* The builtin f32 kernels on inputs of few channels (C < 16, C*R*S <= 27, K in 16s: the direct
 * path of runtime/ops/conv_direct.h where the CPU has AVX-512, im2col + GEMM under the
 * noavx512 run) against the direct-loop references over random geometries: the stem's 1-channel
 * 3x3, three channels, 5x5, strides 1-2, padding, rows whose width is not a multiple of 8, bias;
 * the forward the same bits run to run. */
static void test_small_channels(void **state) {
    (void)state;
    uint64_t seed = gc_seed();
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 2});
    mst_rng *rng = &ctx->rng;
    const mst_op_desc *fwd = mst_op_table[MST_OP_CONV2D], *gwd = mst_op_table[MST_OP_CONV2D_GRAD_WEIGHT];
    int checked = 0, direct = 0;
    for (int it = 0; it < 60; it++) {
        int64_t c = 1 + (int64_t)(mst_rng_u64(rng) % 3), k = 16 * (1 + (int64_t)(mst_rng_u64(rng) % 3));
        int64_t r = 1 + (int64_t)(mst_rng_u64(rng) % 5), s = 1 + (int64_t)(mst_rng_u64(rng) % 5);
        if (it == 0) c = 1, k = 32, r = s = 3;      /* the cnn's stem */
        if (c * r * s > 27) continue;
        int64_t n = 1 + (int64_t)(mst_rng_u64(rng) % 3), h = r + (int64_t)(mst_rng_u64(rng) % 20), w = s + (int64_t)(mst_rng_u64(rng) % 20);
        int sh = 1 + (int)(mst_rng_u64(rng) % 2), sw = 1 + (int)(mst_rng_u64(rng) % 2);
        int ph = (int)(mst_rng_u64(rng) % (uint64_t)(r / 2 + 1)), pw = (int)(mst_rng_u64(rng) % (uint64_t)(s / 2 + 1));
        int64_t p = (h + 2 * ph - r) / sh + 1, q = (w + 2 * pw - s) / sw + 1;
        mst_pool_push(ctx);
        mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, c, h, w}, 0, 1);
        mst_tensor *wt = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){k, c, r, s}, 0, 1);
        mst_tensor *bias = it % 2 ? mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){k}, 0, 1) : NULL;
        mst_tensor *gy = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, k, p, q}, 0, 1);
        mst_attrs fa = {.i = {sh, sw, ph, pw}}, ga = {.i = {sh, sw, ph, pw, r, s}};
        mst_tensor *out[2][3];      /* [fast, reference][y, gw, y again] */
        for (int ref = 0; ref < 2; ref++) {
            mst_ctx_set_force_ref(ctx, ref);
            for (int rep = 0; rep < (ref ? 1 : 2); rep++) {
                mst_tensor *y = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, k, p, q});
                mst_op_call fc = {.op = MST_OP_CONV2D, .n_in = bias ? 3 : 2, .n_out = 1, .in = {x, wt, bias}, .out = {y}, .attrs = fa};
                assert_int_equal(mst_kernel_builtin(ctx, fwd, MST_DTYPE_F32)(ctx, &fc), MST_OK);
                out[ref][rep ? 2 : 0] = y;
            }
            mst_tensor *gw = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){k, c, r, s});
            mst_op_call gc = {.op = MST_OP_CONV2D_GRAD_WEIGHT, .n_in = 2, .n_out = 1, .in = {gy, x}, .out = {gw}, .attrs = ga};
            assert_int_equal(mst_kernel_builtin(ctx, gwd, MST_DTYPE_F32)(ctx, &gc), MST_OK);
            out[ref][1] = gw;
        }
        mst_op_call probe = {.op = MST_OP_CONV2D, .n_in = 2, .n_out = 1, .in = {x, wt}, .out = {out[0][0]}, .attrs = fa};
        direct += mst_builtin_takes_blocked(&probe);
        mst_ctx_set_force_ref(ctx, false);
        assert_memory_equal(mst_tensor_data(out[0][0]), mst_tensor_data(out[0][2]), mst_tensor_nbytes(out[0][0]));
        /* forward: C*R*S <= 27 products; weight gradient: N*P*Q of them, summed in f32 */
        const double tol[2] = {1e-5, 3e-4};
        for (int o = 0; o < 2; o++)
            for (int64_t i = 0; i < out[0][o]->numel; i++) {
                float a = mst_tensor_f32(out[0][o])[i], b = mst_tensor_f32(out[1][o])[i];
                if (fabsf(a - b) > tol[o] * (1 + fabsf(b)))
                    fail_msg("seed %llu case %d %s: x (%lld,%lld,%lld,%lld) w (%lld,%lld,%lld,%lld) stride (%d,%d) pad (%d,%d): "
                             "element %lld: %.9g vs reference %.9g", (unsigned long long)seed, it, o ? "grad_weight" : "conv2d",
                             (long long)n, (long long)c, (long long)h, (long long)w, (long long)k, (long long)c, (long long)r,
                             (long long)s, sh, sw, ph, pw, (long long)i, a, b);
            }
        checked++;
        mst_pool_pop(ctx);
    }
    printf("small-channel geometries: %d checked, %d on the direct path, seed %llu\n", checked, direct, (unsigned long long)seed);
    assert_true(checked > 20);
    if (mst_cpu_has(MST_CPU_AVX512F)) assert_int_equal(direct, checked);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_channels),
        cmocka_unit_test(test_gradients),        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_random_geometries),
        cmocka_unit_test(test_values),           cmocka_unit_test(test_backward_values),
        cmocka_unit_test(test_empty_batch_and_flops), cmocka_unit_test(test_conv_errors),
        cmocka_unit_test(test_grad_op_errors),   cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
