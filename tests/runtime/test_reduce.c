/* test_reduce.c — sum and mean over axis masks: gradients by finite differences in f64, the
 * merged-axes fast kernel against the per-element reference, values, accuracy of the double
 * accumulator, empty inputs and error paths. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct { uint32_t axes; bool keepdim; } reduce_arg;

static mst_tensor *b_sum(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const reduce_arg *a = arg;
    return mst_sum(ctx, in[0], a->axes, a->keepdim);
}
static mst_tensor *b_mean(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const reduce_arg *a = arg;
    return mst_mean(ctx, in[0], a->axes, a->keepdim);
}
/* a reduction inside a larger expression: x * mean(x, axis 1, keepdim) */
static mst_tensor *b_scaled_by_mean(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_mul(ctx, in[0], mst_mean(ctx, in[0], 2, true));
}

static const reduce_arg k_all = {0, false}, k_all_keep = {0, true}, k_a0 = {1, false}, k_a0_keep = {1, true},
                        k_a1 = {2, false}, k_a1_keep = {2, true}, k_a02 = {5, false}, k_a02_keep = {5, true},
                        k_a023 = {13, false}, k_a13 = {10, true}, k_a12 = {6, false};

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define T4(a, b, c, d) 4, {a, b, c, d}

static const gc_case k_grad_cases[] = {
    {"sum all -> ()", b_sum, &k_all, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"sum all keepdim", b_sum, &k_all_keep, 1, {{T2(3, 4), GC_RANDN, true}}},
    {"sum of a scalar", b_sum, &k_all, 1, {{0, {0}, GC_RANDN, true}}},
    {"sum axis 0", b_sum, &k_a0, 1, {{T2(5, 3), GC_RANDN, true}}},
    {"sum axis 0 keepdim", b_sum, &k_a0_keep, 1, {{T2(5, 3), GC_RANDN, true}}},
    {"sum axis 1", b_sum, &k_a1, 1, {{T3(2, 4, 3), GC_RANDN, true}}},
    {"sum axis 1 keepdim", b_sum, &k_a1_keep, 1, {{T2(3, 4), GC_RANDN, true}}},
    {"sum axes 0,2", b_sum, &k_a02, 1, {{T3(3, 2, 4), GC_RANDN, true}}},
    {"sum axes 0,2 keepdim", b_sum, &k_a02_keep, 1, {{T3(3, 2, 4), GC_RANDN, true}}},
    {"sum NCHW axes 0,2,3", b_sum, &k_a023, 1, {{T4(2, 3, 4, 5), GC_RANDN, true}}},
    {"sum axes 1,3 keepdim", b_sum, &k_a13, 1, {{T4(2, 3, 2, 4), GC_RANDN, true}}},
    {"sum axis 0, batch 1", b_sum, &k_a0, 1, {{T2(1, 6), GC_RANDN, true}}},
    {"mean all", b_mean, &k_all, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"mean axis 0", b_mean, &k_a0, 1, {{T2(6, 3), GC_RANDN, true}}},
    {"mean axes 1,2", b_mean, &k_a12, 1, {{T3(2, 3, 5), GC_RANDN, true}}},
    {"mean NCHW axes 0,2,3", b_mean, &k_a023, 1, {{T4(3, 2, 3, 3), GC_RANDN, true}}},
    {"mean axes 0,2 keepdim", b_mean, &k_a02_keep, 1, {{T3(4, 2, 3), GC_RANDN, true}}},
    {"x * mean(x, 1)", b_scaled_by_mean, NULL, 1, {{T2(3, 4), GC_RANDN, true}}},
};

static void test_gradients(void **state) { gc_check_all(k_grad_cases, N_ELEMS(k_grad_cases)); }

/* Shapes that hit each fast path: trailing reduce (row sums), leading reduce (column sums into a
 * vector), reduce-keep-reduce (NCHW bias gradient), alternating groups, size-1 dims merged away. */
static const reduce_arg k_a3 = {8, false}, k_a01 = {3, false}, k_a24 = {20, true}, k_a0134 = {27, false};
static const gc_case k_ref_cases[] = {
    {"(N, C) axis 0", b_sum, &k_a0, 1, {{T2(257, 33), GC_RANDN}}},
    {"(N, C) axis 1", b_sum, &k_a1, 1, {{T2(33, 257), GC_RANDN}}},
    {"NCHW axes 0,2,3", b_sum, &k_a023, 1, {{T4(8, 16, 7, 9), GC_RANDN}}},
    {"NCHW axis 3", b_sum, &k_a3, 1, {{T4(4, 3, 5, 11), GC_RANDN}}},
    {"leading 0,1", b_sum, &k_a01, 1, {{T3(6, 7, 19), GC_RANDN}}},
    {"alternating 1,3", b_mean, &k_a13, 1, {{T4(6, 5, 4, 3), GC_RANDN}}},
    {"size-1 dims 2,4", b_sum, &k_a24, 1, {{5, {5, 1, 7, 1, 3}, GC_RANDN}}},
    {"rank 5 axes 0,1,3,4", b_mean, &k_a0134, 1, {{5, {3, 4, 5, 6, 7}, GC_RANDN}}},
    {"all", b_sum, &k_all, 1, {{T3(31, 17, 13), GC_RANDN}}},
    {"mean axes 0,2", b_mean, &k_a02, 1, {{T3(9, 10, 11), GC_RANDN}}},
    {"only a size-1 dim reduced", b_sum, &k_a1_keep, 1, {{T3(3, 1, 4), GC_RANDN}}},
    {"all dims size 1", b_mean, &k_a0, 1, {{T3(1, 1, 1), GC_RANDN}}},
};

static void test_fast_vs_ref(void **state) { gc_check_ref_all(k_ref_cases, N_ELEMS(k_ref_cases), 1e-6); }

/* The same comparison in f64, where the fast kernel accumulates in a different order. */
static void test_fast_vs_ref_f64(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed()});
    static const uint32_t masks[] = {1, 2, 4, 8, 5, 10, 13, 6, 15};
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F64, 4, (int64_t[]){7, 6, 5, 9}, 0, 1);
    for (int k = 0; k < N_ELEMS(masks); k++)
        for (int keep = 0; keep < 2; keep++) {
            mst_ctx_set_force_ref(ctx, false);
            mst_tensor *fast = mst_sum(ctx, x, masks[k], keep);
            mst_ctx_set_force_ref(ctx, true);
            mst_tensor *ref = mst_sum(ctx, x, masks[k], keep);
            if (!fast || !ref) fail_msg("%s", mst_ctx_error(ctx));
            assert_true(mst_shape_equal(fast->ndim, fast->shape, ref->ndim, ref->shape));
            for (int64_t i = 0; i < ref->numel; i++)
                assert_float_equal(mst_tensor_get(fast, i), mst_tensor_get(ref, i), 1e-12 * (1 + fabs(mst_tensor_get(ref, i))));
        }
    mst_ctx_free(ctx);
}

static void test_values_and_shapes(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    mst_tensor *s0 = mst_sum(ctx, x, 1, false);
    assert_non_null(s0);
    assert_int_equal(s0->ndim, 1);
    assert_memory_equal(mst_tensor_f32(s0), ((float[]){5, 7, 9}), 3 * sizeof(float));
    mst_tensor *s1 = mst_sum(ctx, x, 2, true);
    assert_int_equal(s1->ndim, 2);
    assert_int_equal(s1->shape[0], 2);
    assert_int_equal(s1->shape[1], 1);
    assert_memory_equal(mst_tensor_f32(s1), ((float[]){6, 15}), 2 * sizeof(float));
    mst_tensor *all = mst_sum(ctx, x, 0, false);
    assert_int_equal(all->ndim, 0);
    assert_int_equal(all->numel, 1);
    assert_true(mst_tensor_f32(all)[0] == 21.0f);
    mst_tensor *all_keep = mst_mean(ctx, x, 3, true);   /* explicit full mask == 0 */
    assert_int_equal(all_keep->ndim, 2);
    assert_int_equal(all_keep->shape[0] * all_keep->shape[1], 1);
    assert_true(mst_tensor_f32(all_keep)[0] == 3.5f);
    mst_tensor *m1 = mst_mean(ctx, x, 2, false);
    assert_memory_equal(mst_tensor_f32(m1), ((float[]){2, 5}), 2 * sizeof(float));
    /* f64 in, f64 out */
    mst_tensor *d = mst_tensor_full(ctx, MST_DTYPE_F64, 3, (int64_t[]){2, 3, 4}, 0.5);
    mst_tensor *ds = mst_sum(ctx, d, 5, false);
    assert_int_equal(ds->dtype, MST_DTYPE_F64);
    assert_int_equal(ds->numel, 3);
    for (int i = 0; i < 3; i++) assert_true(mst_tensor_f64(ds)[i] == 4.0);
    mst_ctx_free(ctx);
}

/* 2^24 + many small values: an f32 accumulator would stall at 2^24; double keeps every one. */
static void test_accumulates_in_double(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const int64_t n = 1 << 20;
    for (int ref = 0; ref < 2; ref++) {
        mst_ctx_set_force_ref(ctx, ref);
        mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, n}, 1.0);
        mst_tensor_f32(x)[0] = 16777216.0f;     /* 2^24 */
        mst_tensor_f32(x)[n] = 16777216.0f;
        mst_tensor *s = mst_sum(ctx, x, 2, false);          /* trailing reduce */
        assert_non_null(s);
        for (int r = 0; r < 2; r++) assert_true(mst_tensor_f32(s)[r] == (float)(16777216.0 + (double)(n - 1)));
        mst_tensor *t = mst_sum(ctx, mst_transpose(ctx, x, 0, 1), 1, false);  /* leading reduce */
        assert_non_null(t);
        for (int r = 0; r < 2; r++) assert_true(mst_tensor_f32(t)[r] == (float)(16777216.0 + (double)(n - 1)));
        /* mean of 0.1f: error stays at the final rounding */
        mst_tensor *m = mst_mean(ctx, mst_tensor_full(ctx, MST_DTYPE_F32, 1, &n, 0.1), 0, false);
        assert_true(mst_tensor_f32(m)[0] == 0.1f);
    }
    mst_ctx_free(ctx);
}

static void test_empty(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int ref = 0; ref < 2; ref++) {
        mst_ctx_set_force_ref(ctx, ref);
        mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 0});
        mst_tensor *s = mst_sum(ctx, x, 2, false);      /* (3, 0) -> (3): empty sums are 0 */
        assert_non_null(s);
        assert_int_equal(s->numel, 3);
        for (int i = 0; i < 3; i++) assert_true(mst_tensor_f32(s)[i] == 0.0f);
        mst_tensor *m = mst_mean(ctx, x, 2, false);     /* the mean of nothing is NaN, as in NumPy */
        for (int i = 0; i < 3; i++) assert_true(isnan(mst_tensor_f32(m)[i]));
        mst_tensor *e = mst_sum(ctx, x, 1, false);      /* (3, 0) -> (0) */
        assert_non_null(e);
        assert_int_equal(e->numel, 0);
    }
    mst_ctx_free(ctx);
}

/* Bytes held by tensors: everything but the grow-only kernel workspace the reductions use. */
static int64_t tensor_bytes(const mst_ctx *ctx) {
    return mst_ctx_mem(ctx)->in_use_total - mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE];
}

/* Forward and backward through reductions, then popping the pool, releases every tensor. */
static void test_backward_memory(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    int64_t base = tensor_bytes(ctx);
    mst_pool_push(ctx);
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 3, 4, 5}, 0, 1);
    x->requires_grad = true;
    mst_tensor *loss = mst_sum(ctx, mst_mean(ctx, x, 13, true), 0, false);
    assert_non_null(loss);
    assert_int_equal(mst_backward(ctx, loss), MST_OK);
    for (int64_t i = 0; i < x->numel; i++) assert_float_equal(mst_tensor_f32(x->grad)[i], 1.0 / 40.0, 1e-9);
    mst_pool_pop(ctx);
    assert_int_equal(tensor_bytes(ctx), base);
    assert_int_equal(mst_tape_length(ctx), 0);
    mst_ctx_free(ctx);
}

static void expect_error(mst_ctx *ctx, const mst_tensor *r, mst_status s, const char *needle) {
    if (r) fail_msg("expected an error mentioning \"%s\", got a tensor", needle);
    assert_int_equal(mst_ctx_status(ctx), s);
    if (!strstr(mst_ctx_error(ctx), needle)) fail_msg("error \"%s\" does not mention \"%s\"", mst_ctx_error(ctx), needle);
    mst_ctx_clear_error(ctx);
}

static void test_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    expect_error(ctx, mst_sum(ctx, x, 4, false), MST_ERR_ARG, "axes mask 0x4 names a dim >= rank 2");
    expect_error(ctx, mst_mean(ctx, x, 0x80000001u, true), MST_ERR_ARG, "expected bits below the rank");
    expect_error(ctx, mst_sum(ctx, mst_tensor_scalar(ctx, MST_DTYPE_F32, 1), 1, false), MST_ERR_ARG, "rank 0");
    mst_tensor *i = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3});
    expect_error(ctx, mst_sum(ctx, i, 0, false), MST_ERR_DTYPE, "float tensor, got i32");
    mst_ctx_fail(ctx, MST_ERR_SHAPE, "earlier failure");
    expect_error(ctx, mst_mean(ctx, NULL, 0, false), MST_ERR_SHAPE, "earlier failure");
    mst_ctx_free(ctx);
}

/* Sums and means over rows large enough to split by columns over the pool (2^17 elements a
 * chunk), at 1, 2 and 3 threads: every output is the in-order double sum of its column, to the
 * bit, for (rows, cols) over axis 0 and for (a, rows, cols) over axes 0 and 1. */
static void test_split_by_columns(void **state) {
    const int64_t a = 3, rows = 500, cols = 301;
    for (int threads = 1; threads <= 3; threads++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = threads});
        mst_tensor *x = mst_tensor_new(ctx, MST_DTYPE_F32, 3, (int64_t[]){a, rows, cols});
        float *xv = mst_tensor_f32(x);
        for (int64_t i = 0; i < x->numel; i++) xv[i] = (float)((i * 7919) % 10007) * 1e-3f - 5.0f;
        mst_tensor *flat = mst_reshape(ctx, x, 2, (int64_t[]){a * rows, cols});
        const float *s0 = mst_tensor_f32(mst_sum(ctx, flat, 1u << 0, false));
        const float *m0 = mst_tensor_f32(mst_mean(ctx, flat, 1u << 0, false));
        const float *s01 = mst_tensor_f32(mst_sum(ctx, x, 3u, true));
        assert_non_null(s0);
        assert_non_null(m0);
        assert_non_null(s01);
        for (int64_t j = 0; j < cols; j++) {
            double acc = 0;
            for (int64_t r = 0; r < a * rows; r++) acc += xv[r * cols + j];
            if (s0[j] != (float)acc || m0[j] != (float)(acc * (1.0 / (double)(a * rows))) || s01[j] != (float)acc)
                fail_msg("threads %d: column %lld is not the in-order sum", threads, (long long)j);
        }
        mst_ctx_free(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),          cmocka_unit_test(test_fast_vs_ref),
        cmocka_unit_test(test_fast_vs_ref_f64),    cmocka_unit_test(test_values_and_shapes),
        cmocka_unit_test(test_accumulates_in_double), cmocka_unit_test(test_empty),
        cmocka_unit_test(test_backward_memory),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_split_by_columns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
