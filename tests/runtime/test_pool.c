/* test_pool.c — max, average and global average pooling: gradients (finite differences in f64;
 * max pooling on tie-free inputs), argmax indices and their tie-break, padding semantics, the
 * gradient ops' scatter-add, and every validation error with its message; max pooling's f32 fast
 * kernel (2x2 stride 2 through AVX-512 where the CPU has it) against the reference, bitwise, on
 * inputs full of ties and NaNs (CTest runs this file again with MSTUNE_CPU_MASK=avx512f, the
 * scalar fallback). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

typedef struct {
    int kh, kw, sh, sw, ph, pw;
} pool_arg;

static mst_tensor *b_max(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const pool_arg *p = arg;
    return mst_maxpool2d(ctx, in[0], p->kh, p->kw, p->sh, p->sw, p->ph, p->pw);
}
static mst_tensor *b_avg(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const pool_arg *p = arg;
    return mst_avgpool2d(ctx, in[0], p->kh, p->kw, p->sh, p->sw, p->ph, p->pw);
}
static mst_tensor *b_gap(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_global_avgpool(ctx, in[0]); }

static const pool_arg k2s2 = {2, 2, 2, 2, 0, 0}, k3s2p1 = {3, 3, 2, 2, 1, 1}, k3s1 = {3, 3, 1, 1, 0, 0},
                      k3s1p1 = {3, 3, 1, 1, 1, 1}, k23 = {2, 3, 1, 2, 1, 1}, k32 = {3, 2, 2, 1, 1, 0},
                      k1s2 = {1, 1, 2, 2, 0, 0};

#define X4(fill, n, c, h, w) {{4, {n, c, h, w}, fill, true}}

static const gc_case k_grad_cases[] = {
    {"maxpool 2x2/s2", b_max, &k2s2, 1, X4(GC_DISTINCT, 2, 3, 4, 4)},
    {"maxpool 2x2/s2 odd size", b_max, &k2s2, 1, X4(GC_DISTINCT, 1, 2, 5, 5)},
    {"maxpool 3x3/s2/p1", b_max, &k3s2p1, 1, X4(GC_DISTINCT, 2, 2, 5, 5)},
    {"maxpool 3x3/s2/p1 even size", b_max, &k3s2p1, 1, X4(GC_DISTINCT, 1, 2, 6, 6)},
    {"maxpool 3x3/s1 overlapping", b_max, &k3s1, 1, X4(GC_DISTINCT, 1, 2, 4, 5)},
    {"maxpool 2x3/s(1,2)/p1", b_max, &k23, 1, X4(GC_DISTINCT, 1, 2, 5, 7)},
    {"maxpool 1x1/s2", b_max, &k1s2, 1, X4(GC_DISTINCT, 2, 1, 5, 4)},
    {"avgpool 2x2/s2", b_avg, &k2s2, 1, X4(GC_RANDN, 2, 3, 4, 4)},
    {"avgpool 3x3/s2/p1", b_avg, &k3s2p1, 1, X4(GC_RANDN, 2, 2, 5, 5)},
    {"avgpool 3x3/s1/p1", b_avg, &k3s1p1, 1, X4(GC_RANDN, 1, 1, 3, 3)},
    {"avgpool 3x2/s(2,1)/p(1,0)", b_avg, &k32, 1, X4(GC_RANDN, 1, 2, 6, 5)},
    {"avgpool 3x3/s1 overlapping", b_avg, &k3s1, 1, X4(GC_RANDN, 1, 2, 4, 5)},
    {"global avgpool", b_gap, NULL, 1, X4(GC_RANDN, 2, 3, 4, 5)},
    {"global avgpool 1x1", b_gap, NULL, 1, X4(GC_RANDN, 1, 2, 1, 1)},
    {"global avgpool 1x7", b_gap, NULL, 1, X4(GC_RANDN, 3, 1, 1, 7)},
};

static void test_gradients(void **state) {
    gc_check_all(k_grad_cases, (int)(sizeof(k_grad_cases) / sizeof(k_grad_cases[0])));
}

/* ---- values ---- */

static void maxpool_run(mst_ctx *ctx, mst_tensor *x, pool_arg p, mst_tensor *out[2]) {
    mst_attrs a = {.i = {p.kh, p.kw, p.sh, p.sw, p.ph, p.pw}};
    if (mst_dispatch(ctx, MST_OP_MAXPOOL2D, 1, (mst_tensor *[]){x}, &a, out) != MST_OK)
        fail_msg("maxpool2d: %s", mst_ctx_error(ctx));
}

static mst_tensor *f32_4d(mst_ctx *ctx, int64_t n, int64_t c, int64_t h, int64_t w, const float *v) {
    return mst_tensor_from_data(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, c, h, w}, v);
}

static void expect_f32(const mst_tensor *t, const float *want, int n, double tol) {
    assert_int_equal(t->numel, n);
    for (int i = 0; i < n; i++)
        if (!(fabs(mst_tensor_f32(t)[i] - want[i]) <= tol)) fail_msg("element %d: %g, expected %g", i, mst_tensor_f32(t)[i], want[i]);
}

static void expect_i32(const mst_tensor *t, const int32_t *want, int n) {
    assert_int_equal(t->dtype, MST_DTYPE_I32);
    assert_int_equal(t->numel, n);
    for (int i = 0; i < n; i++) assert_int_equal(mst_tensor_i32(t)[i], want[i]);
}

/* Fast vs reference kernel, bitwise (values and indices), for widths around the vector block, in
 * f32, f16 and bf16. */
static void test_maxpool_fast_matches_reference(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 2});
    static const int64_t widths[] = {2, 31, 32, 33, 37, 64, 70};
    static const pool_arg geoms[] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 1, 1}};
    uint32_t r = 12345;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
        for (size_t gi = 0; gi < sizeof(geoms) / sizeof(geoms[0]); gi++) {
            int64_t n = 2, c = 3, h = 9, w = widths[wi];
            if (w < geoms[gi].kw) continue;
            float *v = malloc(sizeof(float) * (size_t)(n * c * h * w));
            assert_non_null(v);
            for (int64_t i = 0; i < n * c * h * w; i++) {
                r = r * 1664525u + 1013904223u;
                unsigned u = r >> 24;       /* few distinct values: ties everywhere; some NaN, -inf, -0 */
                v[i] = u < 8 ? NAN : u < 16 ? -INFINITY : u < 24 ? -0.0f : (float)(u % 5) - 2.0f;
            }
            /* f32, and f16/bf16 (the half kernel's widened planes against the half-via-f32 reference) */
            static const mst_dtype types[] = {MST_DTYPE_F32, MST_DTYPE_F16, MST_DTYPE_BF16};
            for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
                mst_tensor *x = f32_4d(ctx, n, c, h, w, v), *fast[2], *ref[2];
                if (types[ti] != MST_DTYPE_F32) x = mst_cast(ctx, x, types[ti]);
                maxpool_run(ctx, x, geoms[gi], fast);
                mst_ctx_set_force_ref(ctx, true);
                maxpool_run(ctx, x, geoms[gi], ref);
                mst_ctx_set_force_ref(ctx, false);
                assert_int_equal(fast[0]->dtype, types[ti]);
                assert_int_equal(fast[0]->numel, ref[0]->numel);
                assert_memory_equal(mst_tensor_data(fast[0]), mst_tensor_data(ref[0]), mst_tensor_nbytes(ref[0]));
                assert_memory_equal(mst_tensor_data(fast[1]), mst_tensor_data(ref[1]), mst_tensor_nbytes(ref[1]));
            }
            free(v);
        }
    mst_ctx_free(ctx);
}

static void test_maxpool_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = f32_4d(ctx, 1, 1, 4, 4, (float[]){1, 5, 2, 0, 3, 4, 8, 6, 9, 0, 1, 1, 2, 7, 3, 10});
    mst_tensor *out[2];
    maxpool_run(ctx, x, k2s2, out);
    assert_int_equal(out[0]->shape[2], 2);
    assert_int_equal(out[0]->shape[3], 2);
    expect_f32(out[0], (float[]){5, 8, 9, 10}, 4, 0);
    expect_i32(out[1], (int32_t[]){1, 6, 8, 15}, 4);

    /* 3x3/s2/p1 on the same plane: windows rows/cols {-1..1}, {1..3} */
    maxpool_run(ctx, x, k3s2p1, out);
    expect_f32(out[0], (float[]){5, 8, 9, 10}, 4, 0);
    expect_i32(out[1], (int32_t[]){1, 6, 8, 15}, 4);

    /* the public constructor returns the same values */
    mst_tensor *y = mst_maxpool2d(ctx, x, 2, 2, 2, 2, 0, 0);
    assert_non_null(y);
    expect_f32(y, (float[]){5, 8, 9, 10}, 4, 0);

    /* indices are within each (H, W) plane: a second plane starts again at 0 */
    mst_tensor *x2 = f32_4d(ctx, 1, 2, 2, 2, (float[]){0, 1, 2, 3, 7, 6, 5, 4});
    maxpool_run(ctx, x2, k2s2, out);
    expect_f32(out[0], (float[]){3, 7}, 2, 0);
    expect_i32(out[1], (int32_t[]){3, 0}, 2);

    /* an empty batch gives an empty result */
    mst_tensor *e = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){0, 3, 4, 4});
    y = mst_maxpool2d(ctx, e, 2, 2, 2, 2, 0, 0);
    assert_non_null(y);
    assert_int_equal(y->numel, 0);
    assert_int_equal(y->shape[1], 3);
    mst_ctx_free(ctx);
}

static void test_maxpool_tie_break(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *out[2];
    /* all equal: every window picks its top-left element, the first in row-major order */
    mst_tensor *flat = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 3}, 2.0);
    maxpool_run(ctx, flat, (pool_arg){2, 2, 1, 1, 0, 0}, out);
    expect_i32(out[1], (int32_t[]){0, 1, 3, 4}, 4);
    /* two equal maxima in one window: the first (row 0, col 1) wins over (row 1, col 0) */
    mst_tensor *x = f32_4d(ctx, 1, 1, 2, 2, (float[]){1, 7, 7, 2});
    maxpool_run(ctx, x, k2s2, out);
    expect_f32(out[0], (float[]){7}, 1, 0);
    expect_i32(out[1], (int32_t[]){1}, 1);
    mst_ctx_free(ctx);
}

static void test_maxpool_padding_never_selected(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *out[2];
    /* all negative: zero padding would win; -inf padding never does */
    mst_tensor *x = f32_4d(ctx, 1, 1, 2, 2, (float[]){-4, -3, -2, -1});
    maxpool_run(ctx, x, k3s1p1, out);
    expect_f32(out[0], (float[]){-1, -1, -1, -1}, 4, 0);
    expect_i32(out[1], (int32_t[]){3, 3, 3, 3}, 4);
    /* corner windows holding a single real element */
    mst_tensor *x3 = f32_4d(ctx, 1, 1, 3, 3, (float[]){-9, -8, -7, -6, -5, -4, -3, -2, -1});
    maxpool_run(ctx, x3, (pool_arg){2, 2, 2, 2, 1, 1}, out);
    expect_f32(out[0], (float[]){-9, -7, -3, -1}, 4, 0);
    expect_i32(out[1], (int32_t[]){0, 2, 6, 8}, 4);
    /* -inf inputs are selectable: the index still points at a real element */
    mst_tensor *xi = f32_4d(ctx, 1, 1, 1, 2, (float[]){-INFINITY, -INFINITY});
    maxpool_run(ctx, xi, (pool_arg){2, 2, 1, 1, 1, 1}, out);
    assert_true(isinf(mst_tensor_f32(out[0])[0]));
    for (int k = 0; k < out[1]->numel; k++) assert_in_range(mst_tensor_i32(out[1])[k], 0, 1);
    /* NaN propagates, like PyTorch */
    mst_tensor *xn = f32_4d(ctx, 1, 1, 2, 2, (float[]){1, NAN, 3, 2});
    maxpool_run(ctx, xn, k2s2, out);
    assert_true(isnan(mst_tensor_f32(out[0])[0]));
    expect_i32(out[1], (int32_t[]){1}, 1);
    mst_ctx_free(ctx);
}

/* Overlapping windows that choose the same element add their gradients. */
static void test_maxpool_grad_scatter_add(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = f32_4d(ctx, 1, 1, 3, 3, (float[]){1, 2, 3, 4, 9, 5, 6, 7, 8});
    mst_tensor *out[2];
    maxpool_run(ctx, x, (pool_arg){2, 2, 1, 1, 0, 0}, out);
    expect_i32(out[1], (int32_t[]){4, 4, 4, 4}, 4);
    mst_tensor *gy = f32_4d(ctx, 1, 1, 2, 2, (float[]){1, 2, 3, 4});
    mst_tensor *gx = mst_maxpool2d_grad(ctx, gy, out[1], 3, 3);
    assert_non_null(gx);
    expect_f32(gx, (float[]){0, 0, 0, 0, 10, 0, 0, 0, 0}, 9, 0);

    /* and through autograd */
    x->requires_grad = true;
    mst_tensor *y = mst_maxpool2d(ctx, x, 2, 2, 1, 1, 0, 0);
    assert_int_equal(mst_backward_seeded(ctx, y, gy), MST_OK);
    expect_f32(x->grad, (float[]){0, 0, 0, 0, 10, 0, 0, 0, 0}, 9, 0);
    mst_ctx_free(ctx);
}

/* The gradient kernels against the reference (f32; f16 and bf16: the half-via-f32 reference),
 * bitwise: disjoint indices in 2x2 windows (f32: the write-once 2x2 plane, 16 pooled values a
 * step and a masked tail; half: the direct path; -0 and NaN values among gy), indices that meet
 * (the plane redone the general way), and an index outside the plane. */
static void test_maxpool_grad_fast_paths(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 2});
    static const struct { int P, Q; } geoms[] = {{4, 5}, {3, 21}};
    enum { N = 2, C = 3, MAX = N * C * 4 * 21 };
    static float g[MAX];
    static int32_t disjoint[MAX], meeting[MAX];
    static const mst_dtype types[] = {MST_DTYPE_F32, MST_DTYPE_F16, MST_DTYPE_BF16};
    for (int gi = 0; gi < 2; gi++) {
        int P = geoms[gi].P, Q = geoms[gi].Q, H = 2 * P, W = 2 * Q, n = N * C * P * Q;
        for (int i = 0; i < n; i++) {
            int p = (i / Q) % P, q = i % Q;
            g[i] = i % 7 == 0 ? -0.0f : i % 11 == 0 ? NAN : (float)(i * 0.37 - 9.0);
            disjoint[i] = (2 * p + i % 2) * W + 2 * q + (i / 2) % 2;
            meeting[i] = i % 3 == 0 ? 0 : disjoint[i];     /* every third index of a plane the same element */
        }
        for (int ti = 0; ti < 3; ti++)
            for (int kind = 0; kind < 2; kind++) {
                int64_t shape[4] = {N, C, P, Q};
                mst_tensor *gy = mst_cast(ctx, mst_tensor_from_data(ctx, MST_DTYPE_F32, 4, shape, g), types[ti]);
                mst_tensor *ind = mst_tensor_from_data(ctx, MST_DTYPE_I32, 4, shape, kind ? meeting : disjoint);
                mst_tensor *fast = mst_maxpool2d_grad(ctx, gy, ind, H, W);
                mst_ctx_set_force_ref(ctx, true);
                mst_tensor *ref = mst_maxpool2d_grad(ctx, gy, ind, H, W);
                mst_ctx_set_force_ref(ctx, false);
                assert_non_null(fast);
                assert_non_null(ref);
                assert_int_equal(fast->dtype, types[ti]);
                assert_memory_equal(mst_tensor_data(fast), mst_tensor_data(ref), mst_tensor_nbytes(ref));
                mst_tensor_i32(ind)[Q + 1] = H * W;
                char want[96];
                snprintf(want, sizeof(want), "index %d at position %d is outside [0, %d) (in_h * in_w)", H * W, Q + 1, H * W);
                GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind, H, W), MST_ERR_ARG, "maxpool2d_grad", want);
            }
    }
    mst_ctx_free(ctx);
}

/* maxpool2d_grad with the pooled values (graph mode's fold of relu_grad, runtime/graph/
 * fuse_pool_relu.c) against relu_grad(maxpool2d_grad(gy, indices), y), bit for bit, y = relu(x)
 * with zeros, -0 and NaN, gy with NaN and -0: f32 2x2 windows (the write-once plane) and
 * overlapping 3x3 stride-2 padded ones (the scatter), f64, f16 and bf16. */
static void test_maxpool_grad_relu_fold(void **state) {
    (void)state;
    static const struct { mst_dtype dt; int k, s, p; } cases[] = {
        {MST_DTYPE_F32, 2, 2, 0}, {MST_DTYPE_F32, 3, 2, 1}, {MST_DTYPE_F64, 2, 2, 0},
        {MST_DTYPE_F16, 2, 2, 0}, {MST_DTYPE_BF16, 2, 2, 0}, {MST_DTYPE_BF16, 3, 2, 1},
    };
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5 + (uint64_t)t, .n_threads = 2});
        int64_t shape[4] = {2, 3, 8, 34};
        mst_tensor *x32 = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, shape, 0, 1);
        float *xv = mst_tensor_f32(x32);
        xv[3] = NAN, xv[20] = -0.0f, xv[41] = 0.0f, xv[42] = 0.0f, xv[43] = 0.0f, xv[44] = 0.0f;
        mst_tensor *y = mst_cast(ctx, mst_relu(ctx, x32), cases[t].dt);
        mst_tensor *pool[2];
        maxpool_run(ctx, y, (pool_arg){cases[t].k, cases[t].k, cases[t].s, cases[t].s, cases[t].p, cases[t].p}, pool);
        mst_tensor *gy32 = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, pool[0]->shape, 0, 1);
        mst_tensor_f32(gy32)[1] = NAN, mst_tensor_f32(gy32)[2] = -0.0f;
        mst_tensor *gy = mst_cast(ctx, gy32, cases[t].dt);
        mst_tensor *want = mst_relu_grad(ctx, mst_maxpool2d_grad(ctx, gy, pool[1], 8, 34), y);
        mst_attrs ga = {.i = {8, 34}};
        mst_tensor *got = mst_dispatch1(ctx, MST_OP_MAXPOOL2D_GRAD, 3, (mst_tensor *[]){gy, pool[1], pool[0]}, &ga);
        assert_non_null(want);
        assert_non_null(got);
        if (memcmp(mst_tensor_data(want), mst_tensor_data(got), mst_tensor_nbytes(want)) != 0)
            fail_msg("case %zu (%s, %dx%d stride %d): the fold differs from relu_grad after the pooling gradient", t,
                     mst_dtype_name(cases[t].dt), cases[t].k, cases[t].k, cases[t].s);
        mst_ctx_set_force_ref(ctx, true);
        mst_tensor *ref = mst_dispatch1(ctx, MST_OP_MAXPOOL2D_GRAD, 3, (mst_tensor *[]){gy, pool[1], pool[0]}, &ga);
        mst_ctx_set_force_ref(ctx, false);
        assert_non_null(ref);
        assert_memory_equal(mst_tensor_data(ref), mst_tensor_data(got), mst_tensor_nbytes(ref));
        mst_ctx_free(ctx);
    }
}

static void test_avgpool_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = f32_4d(ctx, 1, 1, 4, 4, (float[]){1, 5, 2, 0, 3, 4, 8, 6, 9, 0, 1, 1, 2, 7, 3, 10});
    mst_tensor *y = mst_avgpool2d(ctx, x, 2, 2, 2, 2, 0, 0);
    assert_non_null(y);
    expect_f32(y, (float[]){13 / 4.0f, 16 / 4.0f, 18 / 4.0f, 15 / 4.0f}, 4, 1e-6);

    /* count_include_pad: every window divides by 9, padding counted as zeros */
    mst_tensor *ones = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, 1.0);
    y = mst_avgpool2d(ctx, ones, 3, 3, 1, 1, 1, 1);
    assert_non_null(y);
    expect_f32(y, (float[]){4 / 9.0f, 4 / 9.0f, 4 / 9.0f, 4 / 9.0f}, 4, 1e-7);
    /* 3x3/s2/p1 on 3x3 ones: the corner windows see 4 real elements, of 9 */
    mst_tensor *ones3 = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 3}, 1.0);
    y = mst_avgpool2d(ctx, ones3, 3, 3, 2, 2, 1, 1);
    expect_f32(y, (float[]){4 / 9.0f, 4 / 9.0f, 4 / 9.0f, 4 / 9.0f}, 4, 1e-7);

    /* the gradient op spreads gy / 9 over each window's real elements */
    mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, 1.0);
    mst_tensor *gx = mst_avgpool2d_grad(ctx, gy, 2, 2, 3, 3, 1, 1, 1, 1);
    assert_non_null(gx);
    expect_f32(gx, (float[]){4 / 9.0f, 4 / 9.0f, 4 / 9.0f, 4 / 9.0f}, 4, 1e-7);
    gx = mst_avgpool2d_grad(ctx, gy, 3, 3, 3, 3, 2, 2, 1, 1);
    assert_non_null(gx);
    expect_f32(gx, (float[]){1 / 9.0f, 2 / 9.0f, 1 / 9.0f, 2 / 9.0f, 4 / 9.0f, 2 / 9.0f, 1 / 9.0f, 2 / 9.0f, 1 / 9.0f}, 9, 1e-7);
    mst_ctx_free(ctx);
}

static void test_global_avgpool_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = f32_4d(ctx, 2, 2, 1, 3, (float[]){1, 2, 3, 4, 5, 6, -1, 0, 4, 10, 20, 30});
    mst_tensor *y = mst_global_avgpool(ctx, x);
    assert_non_null(y);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 2);
    expect_f32(y, (float[]){2, 5, 1, 20}, 4, 1e-6);
    mst_ctx_free(ctx);
}

/* ---- errors ---- */

static void test_pool_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 2, 5, 5});
    mst_tensor *x3 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 5, 5});
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x3, 2, 2, 2, 2, 0, 0), MST_ERR_SHAPE, "maxpool2d", "x must have rank 4 (N, C, H, W), got rank 3");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, x3, 2, 2, 2, 2, 0, 0), MST_ERR_SHAPE, "avgpool2d", "rank 4");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x, 0, 2, 1, 1, 0, 0), MST_ERR_ARG, "maxpool2d", "kernel size must be >= 1, got 0x2");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, x, 2, -1, 1, 1, 0, 0), MST_ERR_ARG, "avgpool2d", "kernel size must be >= 1, got 2x-1");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x, 2, 2, 0, 1, 0, 0), MST_ERR_ARG, "maxpool2d", "stride must be >= 1, got 0x1");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, x, 2, 2, 1, -2, 0, 0), MST_ERR_ARG, "avgpool2d", "stride must be >= 1");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x, 3, 3, 1, 1, 2, 0), MST_ERR_ARG, "maxpool2d",
                 "padding must be in [0, kernel / 2], got pad 2x0 for kernel 3x3");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x, 2, 2, 1, 1, 0, 2), MST_ERR_ARG, "maxpool2d", "padding must be in [0, kernel / 2]");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, x, 3, 3, 1, 1, -1, 0), MST_ERR_ARG, "avgpool2d", "padding");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, x, 6, 2, 1, 1, 0, 0), MST_ERR_SHAPE, "maxpool2d",
                 "output size must be >= 1: kernel 6x2 is larger than the padded input 5x5");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, x, 2, 7, 1, 1, 0, 0), MST_ERR_SHAPE, "avgpool2d", "kernel 2x7 is larger than the padded input 5x5");
    assert_non_null(mst_maxpool2d(ctx, x, 5, 5, 1, 1, 0, 0));       /* kernel == input: 1x1 output */
    mst_tensor *xe = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 0, 3});
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, xe, 2, 2, 1, 1, 1, 1), MST_ERR_SHAPE, "maxpool2d", "input H and W must be >= 1, got 0x3");
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){1, 2, 5, 5});
    GC_EXPECT_ERROR(ctx, mst_maxpool2d(ctx, xi, 2, 2, 2, 2, 0, 0), MST_ERR_DTYPE, "maxpool2d", "float tensor, got i32");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d(ctx, xi, 2, 2, 2, 2, 0, 0), MST_ERR_DTYPE, "avgpool2d", "float tensor, got i32");

    /* global average pooling */
    GC_EXPECT_ERROR(ctx, mst_global_avgpool(ctx, x3), MST_ERR_SHAPE, "global_avgpool", "x must have rank 4 (N, C, H, W)");
    GC_EXPECT_ERROR(ctx, mst_global_avgpool(ctx, xe), MST_ERR_SHAPE, "global_avgpool", "at least 1x1, got 0x3");
    GC_EXPECT_ERROR(ctx, mst_global_avgpool(ctx, xi), MST_ERR_DTYPE, "global_avgpool", "got i32");
    /* a NULL input from an earlier failure passes through with its message */
    mst_ctx_fail(ctx, MST_ERR_ARG, "earlier failure");
    assert_null(mst_global_avgpool(ctx, NULL));
    assert_string_equal(mst_ctx_error(ctx), "earlier failure");
    mst_ctx_clear_error(ctx);
    mst_ctx_free(ctx);
}

static void test_grad_op_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *gy = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2});
    mst_tensor *ind = mst_tensor_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){1, 1, 2, 2});
    mst_tensor *ind_f = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 2});
    mst_tensor *ind_3 = mst_tensor_zeros(ctx, MST_DTYPE_I32, 4, (int64_t[]){1, 1, 2, 3});
    assert_non_null(mst_maxpool2d_grad(ctx, gy, ind, 2, 2));
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind_f, 4, 4), MST_ERR_DTYPE, "maxpool2d_grad", "indices must be i32, got f32");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind_3, 4, 4), MST_ERR_SHAPE, "maxpool2d_grad", "inputs 0 and 1 must have the same shape");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind, 0, 4), MST_ERR_ARG, "maxpool2d_grad", "input size must be >= 1, got 0x4");
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, NULL, 4, 4), MST_ERR_ARG, "maxpool2d_grad", "input 1 is NULL");
    /* indices outside the (in_h, in_w) plane are caught by the kernel */
    mst_tensor_i32(ind)[2] = 4;
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind, 2, 2), MST_ERR_ARG, "maxpool2d_grad",
                 "index 4 at position 2 is outside [0, 4) (in_h * in_w)");
    mst_tensor_i32(ind)[2] = -1;
    GC_EXPECT_ERROR(ctx, mst_maxpool2d_grad(ctx, gy, ind, 2, 2), MST_ERR_ARG, "maxpool2d_grad", "index -1");

    /* avgpool2d_grad: gy must be the pooled size of (in_h, in_w) */
    assert_non_null(mst_avgpool2d_grad(ctx, gy, 4, 4, 2, 2, 2, 2, 0, 0));
    GC_EXPECT_ERROR(ctx, mst_avgpool2d_grad(ctx, gy, 5, 5, 2, 2, 1, 1, 0, 0), MST_ERR_SHAPE, "avgpool2d_grad",
                 "gy must be 4x4 spatially (the pooled size of a 5x5 input), got 2x2");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d_grad(ctx, gy, 0, 4, 2, 2, 2, 2, 0, 0), MST_ERR_ARG, "avgpool2d_grad", "input size must be >= 1");
    GC_EXPECT_ERROR(ctx, mst_avgpool2d_grad(ctx, gy, 4, 4, 2, 2, 2, 2, 3, 0), MST_ERR_ARG, "avgpool2d_grad", "padding must be in");
    mst_tensor *gy3 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){1, 2, 2});
    GC_EXPECT_ERROR(ctx, mst_avgpool2d_grad(ctx, gy3, 4, 4, 2, 2, 2, 2, 0, 0), MST_ERR_SHAPE, "avgpool2d_grad",
                 "gy must have rank 4 (N, C, H, W), got rank 3");
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_maxpool_values),
        cmocka_unit_test(test_maxpool_tie_break),
        cmocka_unit_test(test_maxpool_padding_never_selected),
        cmocka_unit_test(test_maxpool_grad_scatter_add), cmocka_unit_test(test_maxpool_grad_fast_paths), cmocka_unit_test(test_maxpool_grad_relu_fold),
        cmocka_unit_test(test_avgpool_values),
        cmocka_unit_test(test_global_avgpool_values),
        cmocka_unit_test(test_pool_errors),
        cmocka_unit_test(test_maxpool_fast_matches_reference),
        cmocka_unit_test(test_grad_op_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
