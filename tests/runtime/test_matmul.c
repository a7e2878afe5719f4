/* test_matmul.c — matmul (2-D, batched, shared operand, transposes) and linear (with and without
 * bias, any leading dims): finite-difference gradients in f64, sgemm against the triple-loop
 * reference in f32, the GEMMs split over 1, 2 and 3 threads (same results within f32 rounding,
 * the same bits run to run), known values, empty sizes, FLOP counts and every error path. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct { bool ta, tb; } mm_arg;
static const mm_arg k_nn = {false, false}, k_tn = {true, false}, k_nt = {false, true}, k_tt = {true, true};

static mst_tensor *b_matmul(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const mm_arg *a = arg;
    return mst_matmul_t(ctx, in[0], in[1], a->ta, a->tb);
}
static mst_tensor *b_linear(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_linear(ctx, in[0], in[1], NULL);
}
static mst_tensor *b_linear_bias(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_linear(ctx, in[0], in[1], in[2]);
}
/* two layers, so gradients flow through a linear's output into another */
static mst_tensor *b_mlp(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_linear(ctx, mst_linear(ctx, in[0], in[1], in[2]), in[3], NULL);
}

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define T4(a, b, c, d) 4, {a, b, c, d}
#define MM(name, arg, sa, sb) {name, b_matmul, &arg, 2, {{sa, GC_RANDN, true}, {sb, GC_RANDN, true}}}

static const gc_case k_cases[] = {
    MM("2-D", k_nn, T2(3, 4), T2(4, 5)),
    MM("2-D a^T", k_tn, T2(4, 3), T2(4, 5)),
    MM("2-D b^T", k_nt, T2(3, 4), T2(5, 4)),
    MM("2-D a^T b^T", k_tt, T2(4, 3), T2(5, 4)),
    MM("2-D vector-like", k_nn, T2(1, 6), T2(6, 1)),
    MM("batched", k_nn, T3(2, 3, 4), T3(2, 4, 5)),
    MM("batched a^T", k_tn, T3(2, 4, 3), T3(2, 4, 5)),
    MM("batched b^T", k_nt, T3(3, 3, 4), T3(3, 5, 4)),
    MM("batched a^T b^T", k_tt, T3(2, 4, 3), T3(2, 5, 4)),
    MM("batch 1", k_nn, T3(1, 3, 4), T3(1, 4, 2)),
    MM("shared b", k_nn, T3(3, 2, 4), T2(4, 5)),
    MM("shared b, b^T", k_nt, T3(3, 2, 4), T2(5, 4)),
    MM("shared b, a^T", k_tn, T3(2, 4, 3), T2(4, 5)),
    MM("shared b, a^T b^T", k_tt, T3(2, 4, 3), T2(5, 4)),
    MM("shared a", k_nn, T2(3, 4), T3(2, 4, 5)),
    MM("shared a, a^T", k_tn, T2(4, 3), T3(2, 4, 5)),
    MM("shared a, b^T", k_nt, T2(3, 4), T3(2, 5, 4)),
    MM("shared a, a^T b^T", k_tt, T2(4, 3), T3(2, 5, 4)),
    {"only b gets a gradient", b_matmul, &k_nn, 2, {{T3(2, 3, 4), GC_RANDN, false}, {T2(4, 5), GC_RANDN, true}}},
    {"linear", b_linear, NULL, 2, {{T2(3, 4), GC_RANDN, true}, {T2(5, 4), GC_RANDN, true}}},
    {"linear + bias", b_linear_bias, NULL, 3,
     {{T2(3, 4), GC_RANDN, true}, {T2(5, 4), GC_RANDN, true}, {T1(5), GC_RANDN, true}}},
    {"linear rank-3 input", b_linear_bias, NULL, 3,
     {{T3(2, 3, 4), GC_RANDN, true}, {T2(5, 4), GC_RANDN, true}, {T1(5), GC_RANDN, true}}},
    {"linear rank-4, no bias", b_linear, NULL, 2, {{T4(2, 1, 3, 4), GC_RANDN, true}, {T2(2, 4), GC_RANDN, true}}},
    {"linear rank-1 input", b_linear_bias, NULL, 3,
     {{T1(4), GC_RANDN, true}, {T2(3, 4), GC_RANDN, true}, {T1(3), GC_RANDN, true}}},
    {"linear batch 1", b_linear_bias, NULL, 3,
     {{T2(1, 6), GC_RANDN, true}, {T2(3, 6), GC_RANDN, true}, {T1(3), GC_RANDN, true}}},
    {"linear, frozen weight", b_linear_bias, NULL, 3,
     {{T2(3, 4), GC_RANDN, true}, {T2(5, 4), GC_RANDN, false}, {T1(5), GC_RANDN, true}}},
    {"two linears", b_mlp, NULL, 4,
     {{T2(3, 4), GC_RANDN, true}, {T2(5, 4), GC_RANDN, true}, {T1(5), GC_RANDN, true}, {T2(2, 5), GC_RANDN, true}}},
};

/* Larger shapes for sgemm vs the reference: OpenBLAS takes its blocked paths here. */
static const gc_case k_ref_cases[] = {
    MM("2-D 67x130 @ 130x33", k_nn, T2(67, 130), T2(130, 33)),
    MM("2-D a^T b^T", k_tt, T2(130, 67), T2(33, 130)),
    MM("batched a^T", k_tn, T3(3, 40, 21), T3(3, 40, 17)),
    MM("batched b^T", k_nt, T3(3, 21, 40), T3(3, 17, 40)),
    MM("shared b (one GEMM)", k_nn, T3(4, 19, 50), T2(50, 23)),
    MM("shared b, a^T b^T", k_tt, T3(4, 50, 19), T2(23, 50)),
    MM("shared a, b^T", k_nt, T2(19, 50), T3(4, 23, 50)),
    {"linear 64x784 -> 256 + bias", b_linear_bias, NULL, 3,
     {{T2(64, 784), GC_RANDN, false}, {T2(256, 784), GC_RANDN, false}, {T1(256), GC_RANDN, false}}},
    {"linear rank-3, no bias", b_linear, NULL, 2, {{T3(3, 7, 65), GC_RANDN, false}, {T2(10, 65), GC_RANDN, false}}},
};

static void test_gradients(void **state) { gc_check_all(k_cases, N_ELEMS(k_cases)); }
static void test_fast_vs_reference(void **state) {
    gc_check_ref_all(k_cases, N_ELEMS(k_cases), 1e-5);
    /* sgemm sums in f32 in its own order; the reference sums in double: the gap grows with the
     * reduction length, up to about K * FLT_EPSILON = 784 * 1.2e-7 here */
    gc_check_ref_all(k_ref_cases, N_ELEMS(k_ref_cases), 1e-4);
}

static mst_tensor *from_f32(mst_ctx *ctx, int ndim, const int64_t *shape, const float *data) {
    mst_tensor *t = mst_tensor_from_data(ctx, MST_DTYPE_F32, ndim, shape, data);
    assert_non_null(t);
    return t;
}

static void expect_values(mst_ctx *ctx, const mst_tensor *y, int ndim, const int64_t *shape, const float *want) {
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_true(mst_shape_equal(y->ndim, y->shape, ndim, shape));
    for (int64_t i = 0; i < y->numel; i++) assert_float_equal(mst_tensor_f32(y)[i], want[i], 1e-6);
}

static void test_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    /* a (2, 3), b (3, 2) */
    mst_tensor *a = from_f32(ctx, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    mst_tensor *b = from_f32(ctx, 2, (int64_t[]){3, 2}, (float[]){7, 8, 9, 10, 11, 12});
    expect_values(ctx, mst_matmul(ctx, a, b), 2, (int64_t[]){2, 2}, (float[]){58, 64, 139, 154});
    /* a^T (3, 2) @ a (2, 3) */
    expect_values(ctx, mst_matmul_t(ctx, a, a, true, false), 2, (int64_t[]){3, 3},
                  (float[]){17, 22, 27, 22, 29, 36, 27, 36, 45});
    /* a (2, 3) @ a^T */
    expect_values(ctx, mst_matmul_t(ctx, a, a, false, true), 2, (int64_t[]){2, 2}, (float[]){14, 32, 32, 77});
    /* batched with b shared: both batch items use b */
    mst_tensor *a3 = from_f32(ctx, 3, (int64_t[]){2, 1, 3}, (float[]){1, 2, 3, 4, 5, 6});
    expect_values(ctx, mst_matmul(ctx, a3, b), 3, (int64_t[]){2, 1, 2}, (float[]){58, 64, 139, 154});
    /* linear: x (2, 3) w (2, 3) bias (2) -> x w^T + bias */
    mst_tensor *w = from_f32(ctx, 2, (int64_t[]){2, 3}, (float[]){1, 0, -1, 0.5f, 0.5f, 0.5f});
    mst_tensor *bias = from_f32(ctx, 1, (int64_t[]){2}, (float[]){10, -1});
    expect_values(ctx, mst_linear(ctx, a, w, bias), 2, (int64_t[]){2, 2}, (float[]){8, 2, 8, 6.5f});
    expect_values(ctx, mst_linear(ctx, a, w, NULL), 2, (int64_t[]){2, 2}, (float[]){-2, 3, -2, 7.5f});
    /* leading dims are kept: (2, 1, 3) -> (2, 1, 2) */
    expect_values(ctx, mst_linear(ctx, a3, w, bias), 3, (int64_t[]){2, 1, 2}, (float[]){8, 2, 8, 6.5f});
    mst_ctx_free(ctx);
}

/* Backward through a linear gives the textbook gradients. */
static void test_linear_gradient_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = from_f32(ctx, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
    mst_tensor *w = from_f32(ctx, 2, (int64_t[]){1, 2}, (float[]){0.5f, -1});
    mst_tensor *bias = from_f32(ctx, 1, (int64_t[]){1}, (float[]){0});
    x->requires_grad = w->requires_grad = bias->requires_grad = true;
    mst_tensor *y = mst_linear(ctx, x, w, bias);            /* (2, 1) */
    mst_tensor *gy = from_f32(ctx, 2, (int64_t[]){2, 1}, (float[]){1, 2});
    assert_int_equal(mst_backward_seeded(ctx, y, gy), MST_OK);
    expect_values(ctx, x->grad, 2, (int64_t[]){2, 2}, (float[]){0.5f, -1, 1, -2});     /* gy w */
    expect_values(ctx, w->grad, 2, (int64_t[]){1, 2}, (float[]){7, 10});               /* gy^T x */
    expect_values(ctx, bias->grad, 1, (int64_t[]){1}, (float[]){3});
    mst_ctx_free(ctx);
}

static void test_empty_and_promotion(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    /* K = 0: the product of empty sums is zero */
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 0});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){0, 2});
    mst_tensor *y = mst_matmul(ctx, a, b);
    expect_values(ctx, y, 2, (int64_t[]){3, 2}, (float[]){0, 0, 0, 0, 0, 0});
    /* M = 0 */
    mst_tensor *e = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){0, 4});
    mst_tensor *w = mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 4}, 1.0);
    y = mst_linear(ctx, e, w, NULL);
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(y->shape[0], 0);
    assert_int_equal(y->shape[1], 5);
    /* f32 @ f64 is computed in f64 */
    mst_tensor *a32 = mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3}, 0.5);
    mst_tensor *b64 = mst_tensor_full(ctx, MST_DTYPE_F64, 2, (int64_t[]){3, 2}, 0.25);
    y = mst_matmul(ctx, a32, b64);
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(y->dtype, MST_DTYPE_F64);
    assert_float_equal(mst_tensor_get(y, 3), 0.375, 0);
    mst_ctx_free(ctx);
}

static void test_flops(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 4});
    mst_op_call c = {.op = MST_OP_MATMUL, .n_in = 2, .in = {a, b}, .attrs = {.i = {0, 1}}};
    assert_int_equal(mst_op_flops(&c), 2 * 2 * 3 * 5 * 4);
    mst_op_call l = {.op = MST_OP_LINEAR, .n_in = 2, .in = {a, b}};
    assert_int_equal(mst_op_flops(&l), 2 * 6 * 5 * 4);
    mst_ctx_free(ctx);
}

static void test_matmul_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    mst_tensor *b = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 5});
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, a, b), MST_ERR_SHAPE, "matmul", "inner dimensions", "f32(2, 3)", "f32(4, 5)");
    /* a transpose that breaks an otherwise fitting product */
    mst_tensor *b3 = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 5});
    GC_EXPECT_ERROR(ctx, mst_matmul_t(ctx, a, b3, true, false), MST_ERR_SHAPE, "inner dimensions", "a^T");
    mst_tensor *v = gc_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, v, b3), MST_ERR_SHAPE, "rank 1");
    mst_tensor *r4 = gc_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){1, 1, 2, 3});
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, r4, b3), MST_ERR_SHAPE, "rank 4");
    mst_tensor *x1 = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 2, 3}), *x2 = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){3, 3, 4});
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, x1, x2), MST_ERR_SHAPE, "batch sizes differ", "2 vs 3");
    mst_tensor *i1 = gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 3}), *i2 = gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){3, 2});
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, i1, i2), MST_ERR_DTYPE, "matmul", "float", "i32");
    /* a bad trans flag reaching the op through the dispatcher */
    mst_attrs bad = {.i = {2, 0}};
    GC_EXPECT_ERROR(ctx, mst_dispatch1(ctx, MST_OP_MATMUL, 2, (mst_tensor *[]){a, b3}, &bad), MST_ERR_ARG, "trans_a");
    /* an earlier failure passes through, keeping the first message */
    assert_null(mst_matmul(ctx, mst_matmul(ctx, a, b), b3));
    assert_non_null(strstr(mst_ctx_error(ctx), "inner dimensions"));
    mst_ctx_clear_error(ctx);
    /* out of memory on the output */
    mst_allocator_fail_at(ctx->alloc, 1);
    GC_EXPECT_ERROR(ctx, mst_matmul(ctx, a, b3), MST_ERR_OOM, "out of memory");
    assert_non_null(mst_matmul(ctx, a, b3));    /* recovers afterwards */
    mst_ctx_free(ctx);
}

static void test_linear_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 3});
    mst_tensor *w = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 6});
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, w, NULL), MST_ERR_SHAPE, "linear", "6 input features", "last dim is 3", "f32(4, 3)");
    mst_tensor *w_ok = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 3});
    mst_tensor *bias = gc_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, w_ok, bias), MST_ERR_SHAPE, "bias must be (5)");
    mst_tensor *bias2 = gc_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){1, 5});
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, w_ok, bias2), MST_ERR_SHAPE, "bias must be (5)");
    mst_tensor *w3 = gc_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){1, 5, 3});
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, w3, NULL), MST_ERR_SHAPE, "weight must be (out_features, in_features)");
    mst_tensor *s = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1.0);
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, s, w_ok, NULL), MST_ERR_SHAPE, "scalar");
    mst_tensor *xi = gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){4, 3}), *wi = gc_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){5, 3});
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, xi, wi, NULL), MST_ERR_DTYPE, "i32");
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, NULL, NULL), MST_ERR_ARG, "input 1 is NULL");
    mst_allocator_fail_at(ctx->alloc, 1);
    GC_EXPECT_ERROR(ctx, mst_linear(ctx, x, w_ok, NULL), MST_ERR_OOM, "out of memory");
    mst_ctx_free(ctx);
}

/* ---- the split over threads ----
 * Products big enough to pass the work threshold (k_par_min_chunk_flops, 4 MFLOP a block), so
 * they split: by columns (N a multiple of 16 or not), by rows (M > N), every transpose, one GEMM
 * for a batch with b shared, and batches split by items (many small, or two large items whose
 * GEMMs then stay whole on their threads). */
static const gc_case k_thread_cases[] = {
    {"linear 64x784 -> 256 + bias", b_linear_bias, NULL, 3,
     {{T2(64, 784), GC_RANDN, false}, {T2(256, 784), GC_RANDN, false}, {T1(256), GC_RANDN, false}}},
    MM("NN 64x256 @ 256x784", k_nn, T2(64, 256), T2(256, 784)),
    MM("TN 256x64^T @ 64x784", k_tn, T2(64, 256), T2(64, 784)),
    MM("NT rows split 512x256 @ 40x256^T", k_nt, T2(512, 256), T2(40, 256)),
    MM("TT 300x64^T @ 256x300^T", k_tt, T2(300, 64), T2(256, 300)),
    MM("N = 200, not a multiple of 16", k_nn, T2(64, 512), T2(512, 200)),
    MM("shared b, one GEMM", k_nn, T3(4, 64, 256), T2(256, 300)),
    MM("batch of 6 small items", k_nn, T3(6, 64, 256), T3(6, 256, 128)),
    MM("batch of 2 large items, b^T", k_nt, T3(2, 128, 512), T3(2, 256, 512)),
    {"linear rank-3 input", b_linear, NULL, 2, {{T3(4, 32, 512), GC_RANDN, false}, {T2(384, 512), GC_RANDN, false}}},
};

/* One case's output on a fresh context with `threads` threads (inputs depend on the seed only). */
static float *run_threads_case(const gc_case *c, int threads, uint64_t seed, int64_t *numel) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = threads});
    assert_non_null(ctx);
    assert_int_equal(ctx->n_threads, threads);
    mst_tensor *in[MST_MAX_OP_INPUTS] = {0};
    gc_make_inputs(ctx, c, MST_DTYPE_F32, in);
    mst_grad_set_enabled(ctx, false);
    mst_tensor *y = c->build(ctx, in, c->arg);
    if (!y) fail_msg("%s, %d threads: %s", c->name, threads, mst_ctx_error(ctx));
    *numel = y->numel;
    float *out = malloc((size_t)y->numel * sizeof(float));
    assert_non_null(out);
    memcpy(out, mst_tensor_f32(y), (size_t)y->numel * sizeof(float));
    mst_ctx_free(ctx);
    return out;
}

static void test_threads(void **state) {
    uint64_t seed = gc_seed();
    /* one thread against the triple loops, as test_fast_vs_reference */
    gc_check_ref_all(k_thread_cases, N_ELEMS(k_thread_cases), 1e-4);
    for (int ci = 0; ci < N_ELEMS(k_thread_cases); ci++) {
        const gc_case *c = &k_thread_cases[ci];
        int64_t n1, n;
        float *base = run_threads_case(c, 1, seed, &n1);
        for (int threads = 2; threads <= 3; threads++) {
            float *a = run_threads_case(c, threads, seed, &n), *b = run_threads_case(c, threads, seed, &n);
            assert_int_equal(n, n1);
            if (memcmp(a, b, (size_t)n * sizeof(float)) != 0)
                fail_msg("%s (seed %llu): two runs at %d threads differ", c->name, (unsigned long long)seed, threads);
            /* each element is one dot product of K terms whichever thread computes it; only the
             * GEMM's blocking may differ, so 1e-5 relative to the element and the output's RMS */
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)base[i] * base[i];
            double rms = sqrt(ss / (double)n);
            for (int64_t i = 0; i < n; i++)
                if (fabs((double)a[i] - base[i]) > 1e-5 * (fabs(base[i]) + rms))
                    fail_msg("%s (seed %llu): element %lld: %.9g at %d threads vs %.9g at 1", c->name,
                             (unsigned long long)seed, (long long)i, a[i], threads, base[i]);
            free(a);
            free(b);
        }
        printf("threads 1/2/3 %-36s seed %llu\n", c->name, (unsigned long long)seed);
        free(base);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),       cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_values),          cmocka_unit_test(test_linear_gradient_values),
        cmocka_unit_test(test_empty_and_promotion), cmocka_unit_test(test_flops),
        cmocka_unit_test(test_matmul_errors),   cmocka_unit_test(test_linear_errors),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
