/* test_activation.c — relu, gelu, tanh, sigmoid and their gradient ops: finite-difference
 * gradients in f64, values against closed forms, saturation without NaN, f32 against f64,
 * descriptor flags and FLOP counts, error paths, and the vector erfcf/expf GELU's f32 kernels use. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/ops/vmath.h"
#include "tests/runtime/gradcheck.h"

static mst_tensor *b_relu(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_relu(ctx, in[0]); }
static mst_tensor *b_gelu(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_gelu(ctx, in[0]); }
static mst_tensor *b_tanh(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_tanh(ctx, in[0]); }
static mst_tensor *b_sigmoid(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_sigmoid(ctx, in[0]); }
/* a chain: tanh and sigmoid differentiate from their outputs, gelu and relu from their inputs */
static mst_tensor *b_chain(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_mul(ctx, mst_sigmoid(ctx, mst_tanh(ctx, mst_gelu(ctx, in[0]))), mst_relu(ctx, in[1]));
}
/* a larger-magnitude input reaches the tails of gelu and sigmoid */
static mst_tensor *b_gelu_wide(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_gelu(ctx, mst_scale(ctx, in[0], 4.0));
}
static mst_tensor *b_sigmoid_wide(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_sigmoid(ctx, mst_scale(ctx, in[0], 6.0));
}

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}

static const gc_case k_cases[] = {
    {"relu 3x4", b_relu, NULL, 1, {{T2(3, 4), GC_AWAY_FROM_ZERO, true}}},
    {"relu rank 3", b_relu, NULL, 1, {{T3(2, 3, 5), GC_AWAY_FROM_ZERO, true}}},
    {"relu scalar", b_relu, NULL, 1, {{0, {0}, GC_AWAY_FROM_ZERO, true}}},
    {"gelu 3x4", b_gelu, NULL, 1, {{T2(3, 4), GC_AWAY_FROM_ZERO, true}}},
    {"gelu randn 1x7", b_gelu, NULL, 1, {{T2(1, 7), GC_RANDN, true}}},
    {"gelu wide", b_gelu_wide, NULL, 1, {{T1(40), GC_RANDN, true}}},
    {"tanh 3x4", b_tanh, NULL, 1, {{T2(3, 4), GC_RANDN, true}}},
    {"tanh rank 3", b_tanh, NULL, 1, {{T3(2, 1, 6), GC_RANDN, true}}},
    {"sigmoid 3x4", b_sigmoid, NULL, 1, {{T2(3, 4), GC_RANDN, true}}},
    {"sigmoid wide", b_sigmoid_wide, NULL, 1, {{T1(40), GC_RANDN, true}}},
    {"chain", b_chain, NULL, 2, {{T2(4, 3), GC_AWAY_FROM_ZERO, true}, {T2(4, 3), GC_AWAY_FROM_ZERO, true}}},
};

static void test_gradients(void **state) { gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0]))); }

static mst_tensor *vec64(mst_ctx *ctx, int n, const double *v) {
    return mst_tensor_from_data(ctx, MST_DTYPE_F64, 1, (int64_t[]){n}, v);
}

static void test_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double xs[] = {-10, -1, -0.5, 0, 0.5, 1, 3};
    mst_tensor *x = vec64(ctx, 7, xs);
    mst_tensor *r = mst_relu(ctx, x), *g = mst_gelu(ctx, x), *t = mst_tanh(ctx, x), *s = mst_sigmoid(ctx, x);
    if (!r || !g || !t || !s) fail_msg("%s", mst_ctx_error(ctx));
    for (int i = 0; i < 7; i++) {
        double v = xs[i];
        assert_float_equal(mst_tensor_get(r, i), v > 0 ? v : 0, 0);
        double gelu = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        assert_float_equal(mst_tensor_get(g, i), gelu, 1e-15 + 1e-14 * fabs(gelu));
        assert_float_equal(mst_tensor_get(t, i), tanh(v), 1e-15);
        assert_float_equal(mst_tensor_get(s, i), 1 / (1 + exp(-v)), 1e-15);
    }
    /* closed forms: gelu(1) = Phi(1), gelu(-1) = -Phi(-1) */
    assert_float_equal(mst_tensor_get(g, 5), 0.8413447460685429, 1e-15);
    assert_float_equal(mst_tensor_get(g, 1), -0.15865525393145707, 1e-15);
    /* the erfc form keeps gelu's tail: gelu(-10) = -10 Phi(-10) = -7.6e-23, not 0 */
    assert_true(mst_tensor_get(g, 0) < 0);
    assert_float_equal(mst_tensor_get(g, 0) / (-10 * 0.5 * erfc(10 / sqrt(2.0))), 1.0, 1e-12);
    mst_ctx_free(ctx);
}

static void test_grad_op_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double xs[] = {-2, -0.5, 0, 0.5, 2};
    mst_tensor *x = vec64(ctx, 5, xs);
    mst_tensor *gy = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){5}, 3.0);
    mst_tensor *rg = mst_relu_grad(ctx, gy, x), *gg = mst_gelu_grad(ctx, gy, x);
    mst_tensor *tg = mst_tanh_grad(ctx, gy, x), *sg = mst_sigmoid_grad(ctx, gy, x);
    if (!rg || !gg || !tg || !sg) fail_msg("%s", mst_ctx_error(ctx));
    for (int i = 0; i < 5; i++) {
        double v = xs[i];
        assert_float_equal(mst_tensor_get(rg, i), v > 0 ? 3 : 0, 0);   /* 0 at the kink */
        double phi = exp(-v * v / 2) / sqrt(2 * M_PI), cdf = 0.5 * erfc(-v / sqrt(2.0));
        assert_float_equal(mst_tensor_get(gg, i), 3 * (cdf + v * phi), 1e-14);
        /* the tanh and sigmoid grad ops take the forward output y */
        assert_float_equal(mst_tensor_get(tg, i), 3 * (1 - v * v), 1e-14);
        assert_float_equal(mst_tensor_get(sg, i), 3 * v * (1 - v), 1e-14);
    }
    assert_float_equal(mst_tensor_get(gg, 2), 1.5, 0);     /* gelu'(0) = 1/2 */
    mst_ctx_free(ctx);
}

static void test_saturation(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++) {
        mst_tensor *x = mst_tensor_new(ctx, (mst_dtype)dt, 1, (int64_t[]){6});
        const double v[] = {-1000, 1000, -90, 90, -INFINITY, INFINITY};
        for (int i = 0; i < 6; i++) mst_tensor_set(x, i, v[i]);
        mst_tensor *s = mst_sigmoid(ctx, x), *t = mst_tanh(ctx, x), *g = mst_gelu(ctx, x);
        if (!s || !t || !g) fail_msg("%s", mst_ctx_error(ctx));
        assert_true(mst_tensor_get(s, 0) == 0.0);
        assert_true(mst_tensor_get(s, 1) == 1.0);
        assert_true(mst_tensor_get(s, 4) == 0.0);
        assert_true(mst_tensor_get(s, 5) == 1.0);
        assert_true(mst_tensor_get(s, 2) >= 0 && mst_tensor_get(s, 2) < 1e-30);
        assert_true(mst_tensor_get(t, 0) == -1.0 && mst_tensor_get(t, 1) == 1.0);
        assert_true(mst_tensor_get(g, 1) == 1000.0);
        for (int i = 0; i < 4; i++) {
            assert_false(isnan(mst_tensor_get(s, i)));
            assert_false(isnan(mst_tensor_get(t, i)));
            assert_false(isnan(mst_tensor_get(g, i)));
        }
        /* the gradients at saturation are 0 (or a tiny tail), not NaN */
        mst_tensor *gy = mst_tensor_full(ctx, (mst_dtype)dt, 1, (int64_t[]){6}, 1.0);
        mst_tensor *sg = mst_sigmoid_grad(ctx, gy, s), *tg = mst_tanh_grad(ctx, gy, t);
        assert_non_null(sg);
        assert_non_null(tg);
        for (int i = 0; i < 6; i++) {
            double a = mst_tensor_get(sg, i), b = mst_tensor_get(tg, i);
            assert_true(a >= 0 && a < 1e-30);
            assert_true(b >= 0 && b < 1e-30);
            if (i != 2) assert_true(a == 0.0);
        }
    }
    mst_ctx_free(ctx);
}

/* ReLU keeps NaN so the loss scaler's overflow check still sees it. */
static void test_relu_nan(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, (float[]){NAN, -1.0f, 2.0f});
    mst_tensor *y = mst_relu(ctx, x);
    assert_non_null(y);
    assert_true(isnan(mst_tensor_f32(y)[0]));
    assert_true(mst_tensor_f32(y)[1] == 0.0f);
    assert_true(mst_tensor_f32(y)[2] == 2.0f);
    mst_ctx_free(ctx);
}

/* The f32 kernels (float libm) agree with the f64 ones to float precision. */
static void test_f32_matches_f64(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    mst_tensor *x64 = mst_tensor_randn(ctx, MST_DTYPE_F64, 2, (int64_t[]){17, 33}, 0, 3);
    mst_tensor *x32 = mst_cast(ctx, x64, MST_DTYPE_F32);
    mst_tensor *gy64 = mst_tensor_randn(ctx, MST_DTYPE_F64, 2, (int64_t[]){17, 33}, 0, 1);
    mst_tensor *gy32 = mst_cast(ctx, gy64, MST_DTYPE_F32);
    /* the f64 reference sees the rounded f32 inputs */
    x64 = mst_cast(ctx, x32, MST_DTYPE_F64);
    gy64 = mst_cast(ctx, gy32, MST_DTYPE_F64);
    mst_tensor *(*fwd[4])(mst_ctx *, mst_tensor *) = {mst_relu, mst_gelu, mst_tanh, mst_sigmoid};
    mst_tensor *(*bwd[4])(mst_ctx *, mst_tensor *, mst_tensor *) = {mst_relu_grad, mst_gelu_grad, mst_tanh_grad,
                                                                    mst_sigmoid_grad};
    for (int f = 0; f < 4; f++) {
        mst_tensor *a = fwd[f](ctx, x32), *b = fwd[f](ctx, x64);
        mst_tensor *ga = bwd[f](ctx, gy32, x32), *gb = bwd[f](ctx, gy64, x64);
        if (!a || !b || !ga || !gb) fail_msg("%s", mst_ctx_error(ctx));
        for (int64_t i = 0; i < a->numel; i++) {
            double va = mst_tensor_get(a, i), vb = mst_tensor_get(b, i);
            if (fabs(va - vb) > 1e-6 * (1 + fabs(vb))) fail_msg("op %d at %lld: f32 %.9g vs f64 %.9g", f, (long long)i, va, vb);
            va = mst_tensor_get(ga, i), vb = mst_tensor_get(gb, i);
            if (fabs(va - vb) > 2e-6 * (1 + fabs(vb))) fail_msg("grad %d at %lld: f32 %.9g vs f64 %.9g", f, (long long)i, va, vb);
        }
    }
    mst_ctx_free(ctx);
}

/* The vector math GELU's f32 kernels use (runtime/ops/vmath.h), on the path this CPU and
 * MSTUNE_CPU_MASK select (ctest runs it with AVX-512 and AVX2 masked too): erfcf and expf within
 * 4 ulp of the double functions over their working range, every block length 0..40 (the masked
 * tails), in place, lanes independent of the block (a value's result is the same at any offset). */
static void test_vmath(void **state) {
    (void)state;
    printf("vmath path: %s\n", mst_vmath_path());
    enum { N = 4096 };
    static float x[N], e[N], p[N], again[N];
    for (int i = 0; i < N; i++) x[i] = -10.0f + 20.0f * (float)i / N + (i % 7) * 1e-4f;
    mst_vmath_erfcf(x, e, N);
    for (int i = 0; i < N; i++) p[i] = -0.5f * x[i] * x[i] / 4;
    float *u = again;
    mst_vmath_expf(p, u, N);
    for (int i = 0; i < N; i++) {
        double re = erfc((double)x[i]), rx = exp((double)p[i]);
        /* 4 ulp of the f32 result, or an absolute 1e-44 where erfc underflows to subnormals */
        if (fabs(e[i] - re) > 4 * (double)nextafterf((float)re, INFINITY) - 4 * (double)(float)re + 1e-44)
            fail_msg("erfcf(%.9g) = %.9g, erfc %.17g", x[i], e[i], re);
        if (fabs(u[i] - rx) > 4 * ((double)nextafterf((float)rx, INFINITY) - (double)(float)rx) + 1e-44)
            fail_msg("expf(%.9g) = %.9g, exp %.17g", p[i], u[i], rx);
    }
    for (int n = 0; n <= 40; n++)
        for (int off = 0; off < 3; off++) {
            float buf[48];
            memcpy(buf, x + 1000 + off, sizeof(float) * (size_t)n);
            buf[n] = 12345.0f;
            mst_vmath_erfcf(buf, buf, n);       /* in place */
            assert_true(buf[n] == 12345.0f);
            assert_memory_equal(buf, e + 1000 + off, sizeof(float) * (size_t)n);
        }
}

/* On an AVX-512 CPU a function may take libmvec's 8-lane variant where it gave the 16-lane
 * variant's bits on vmath.c's probe values and ran faster: whatever was chosen, the results must
 * be the 16-lane variant's bits over a far wider sample, one float bit pattern in 1021 over the
 * whole range (4.2 million values, NaNs compared as NaN). Without a 16-lane path no function may
 * name a lane choice. */
static void test_vmath_lane_choice(void **state) {
    (void)state;
    enum { B = 4096 };
    static float x[B], got[B], want[B];
    const char *names[2] = {"erfcf", "expf"};
    if (!mst_vmath_variant("erfcf", 16, x, want, 0)) {
        /* no 16-lane path (no AVX-512, or masked): nothing to choose between, and nothing chosen */
        assert_null(strstr(mst_vmath_path(), "on avx2"));
        return;
    }
    for (int f = 0; f < 2; f++) {
        uint64_t bits = 0;
        while (bits < (1ull << 32)) {
            int n = 0;
            for (; n < B && bits < (1ull << 32); n++, bits += 1021) {
                uint32_t u = (uint32_t)bits;
                memcpy(&x[n], &u, sizeof(float));
            }
            if (f == 0) mst_vmath_erfcf(x, got, n);
            else mst_vmath_expf(x, got, n);
            assert_true(mst_vmath_variant(names[f], 16, x, want, n));
            for (int i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(isnan(got[i]) && isnan(want[i])))
                    fail_msg("%s(%a): %a on the chosen path (%s), %a on the 16-lane variant", names[f], x[i], got[i],
                             mst_vmath_path(), want[i]);
        }
    }
}

static void test_descriptors(void **state) {
    const mst_op fwd[] = {MST_OP_RELU, MST_OP_GELU, MST_OP_TANH, MST_OP_SIGMOID};
    const mst_op grad[] = {MST_OP_RELU_GRAD, MST_OP_GELU_GRAD, MST_OP_TANH_GRAD, MST_OP_SIGMOID_GRAD};
    const int64_t fwd_flops[] = {1, 4, 1, 4}, grad_flops[] = {1, 10, 3, 3};
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 5});
    for (int i = 0; i < 4; i++) {
        const mst_op_desc *d = mst_op_table[fwd[i]], *g = mst_op_table[grad[i]];
        assert_non_null(d);
        assert_non_null(g);
        assert_true(d->flags & MST_OPF_ELEMENTWISE);
        assert_false(d->flags & MST_OPF_GRAD_OP);
        assert_non_null(d->backward);
        assert_true(g->flags & MST_OPF_ELEMENTWISE);
        assert_true(g->flags & MST_OPF_GRAD_OP);
        assert_null(g->backward);
        mst_op_call c = {.op = fwd[i], .n_in = 1, .n_out = 1, .in = {x}, .out = {x}};
        assert_int_equal(mst_op_flops(&c), fwd_flops[i] * 15);
        mst_op_call cg = {.op = grad[i], .n_in = 2, .n_out = 1, .in = {x, x}, .out = {x}};
        assert_int_equal(mst_op_flops(&cg), grad_flops[i] * 15);
        assert_int_equal(mst_op_bytes(&cg), 3 * 15 * 4);
    }
    mst_ctx_free(ctx);
}

static void test_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3});
    assert_null(mst_gelu(ctx, xi));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_DTYPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "gelu"));
    assert_non_null(strstr(mst_ctx_error(ctx), "float"));
    mst_ctx_clear_error(ctx);

    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 2});
    assert_null(mst_relu_grad(ctx, a, b));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "relu_grad"));
    assert_non_null(strstr(mst_ctx_error(ctx), "same shape"));
    mst_ctx_clear_error(ctx);

    mst_tensor *d = mst_tensor_zeros(ctx, MST_DTYPE_F64, 2, (int64_t[]){2, 3});
    assert_null(mst_tanh_grad(ctx, a, d));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_DTYPE);
    mst_ctx_clear_error(ctx);

    /* a failed call passes through a chain, the first message kept; a NULL gy included */
    assert_null(mst_sigmoid(ctx, mst_tanh(ctx, mst_relu(ctx, xi))));
    assert_non_null(strstr(mst_ctx_error(ctx), "relu"));
    assert_null(mst_gelu_grad(ctx, NULL, a));
    assert_null(mst_gelu_grad(ctx, a, NULL));
    assert_non_null(strstr(mst_ctx_error(ctx), "relu"));
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),      cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_op_values), cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_relu_nan),       cmocka_unit_test(test_f32_matches_f64),
        cmocka_unit_test(test_descriptors),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_vmath),
        cmocka_unit_test(test_vmath_lane_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
