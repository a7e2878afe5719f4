/* test_embedding_dropout.c — embedding (lookup and scatter-add gradient) and inverted dropout:
 * finite-difference gradients in f64 (repeated indices; dropout with its mask repeated by the
 * checker rewinding the context's generator), values, the statistics and reproducibility of
 * the mask, the identity cases, and error paths. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

static mst_tensor *b_embedding(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_embedding(ctx, in[0], in[1]);
}
static mst_tensor *b_dropout(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_dropout(ctx, in[0], *(const double *)arg, true);
}
/* two dropouts in one build draw two seeds; both repeat on every evaluation */
static mst_tensor *b_dropout_twice(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_dropout(ctx, mst_tanh(ctx, mst_dropout(ctx, in[0], 0.25, true)), 0.5, true);
}
/* embedding feeding dropout: the gradient reaches the table through the mask */
static mst_tensor *b_embedding_dropout(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_dropout(ctx, mst_embedding(ctx, in[0], in[1]), 0.4, true);
}

static const double k_p03 = 0.3, k_p05 = 0.5, k_p09 = 0.9;

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define IDX(range, ...) {__VA_ARGS__, GC_LABELS, false, range}

static const gc_case k_cases[] = {
    /* 20 indices into 3 rows: every row is hit several times */
    {"embedding repeated 4x5 into 3x4", b_embedding, NULL, 2, {IDX(3, T2(4, 5)), {T2(3, 4), GC_RANDN, true}}},
    {"embedding 7 into 10x3", b_embedding, NULL, 2, {IDX(10, T1(7)), {T2(10, 3), GC_RANDN, true}}},
    {"embedding rank 3 indices", b_embedding, NULL, 2, {IDX(4, T3(2, 2, 3)), {T2(4, 2), GC_RANDN, true}}},
    {"embedding scalar index", b_embedding, NULL, 2, {IDX(5, 0, {0}), {T2(5, 6), GC_RANDN, true}}},
    {"embedding D = 1", b_embedding, NULL, 2, {IDX(6, T1(9)), {T2(6, 1), GC_RANDN, true}}},
    {"dropout p=0.3 5x7", b_dropout, &k_p03, 1, {{T2(5, 7), GC_RANDN, true}}},
    {"dropout p=0.5 63", b_dropout, &k_p05, 1, {{T1(63), GC_RANDN, true}}},
    {"dropout p=0.9 rank 3", b_dropout, &k_p09, 1, {{T3(2, 3, 5), GC_RANDN, true}}},
    {"dropout twice", b_dropout_twice, NULL, 1, {{T2(6, 6), GC_RANDN, true}}},
    {"embedding then dropout", b_embedding_dropout, NULL, 2, {IDX(4, T2(3, 5)), {T2(4, 8), GC_RANDN, true}}},
};

static void test_gradients(void **state) { gc_check_all(k_cases, (int)(sizeof(k_cases) / sizeof(k_cases[0]))); }

static void expect_error(mst_ctx *ctx, mst_status s, const char *a, const char *b) {
    assert_int_equal(mst_ctx_status(ctx), s);
    const char *e = mst_ctx_error(ctx);
    if (a && !strstr(e, a)) fail_msg("error '%s' does not mention '%s'", e, a);
    if (b && !strstr(e, b)) fail_msg("error '%s' does not mention '%s'", e, b);
    mst_ctx_clear_error(ctx);
}

/* ---- embedding ---- */

static void test_embedding_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int dt = MST_DTYPE_F32; dt <= MST_DTYPE_F64; dt++) {
        mst_tensor *w = mst_tensor_new(ctx, (mst_dtype)dt, 2, (int64_t[]){4, 3});
        for (int k = 0; k < 12; k++) mst_tensor_set(w, k, 10 * (k / 3) + k % 3);     /* row r: 10r, 10r+1, 10r+2 */
        mst_tensor *ix = mst_tensor_from_data(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 2}, (int32_t[]){3, 0, 3, 1});
        mst_tensor *y = mst_embedding(ctx, ix, w);
        if (!y) fail_msg("%s", mst_ctx_error(ctx));
        assert_int_equal(y->dtype, dt);
        assert_int_equal(y->ndim, 3);
        assert_int_equal(y->shape[0], 2);
        assert_int_equal(y->shape[1], 2);
        assert_int_equal(y->shape[2], 3);
        const int rows[] = {3, 0, 3, 1};
        for (int k = 0; k < 12; k++) assert_float_equal(mst_tensor_get(y, k), 10 * rows[k / 3] + k % 3, 0);

        /* the gradient adds the gy rows of repeated indices: row 3 gets gy[0] + gy[2] */
        mst_tensor *gy = mst_tensor_new(ctx, (mst_dtype)dt, 3, (int64_t[]){2, 2, 3});
        for (int k = 0; k < 12; k++) mst_tensor_set(gy, k, k + 1);
        mst_tensor *gw = mst_embedding_grad(ctx, gy, ix, 5);
        if (!gw) fail_msg("%s", mst_ctx_error(ctx));
        assert_int_equal(gw->ndim, 2);
        assert_int_equal(gw->shape[0], 5);
        assert_int_equal(gw->shape[1], 3);
        const double want[15] = {4, 5, 6, 10, 11, 12, 0, 0, 0, 1 + 7, 2 + 8, 3 + 9, 0, 0, 0};
        for (int k = 0; k < 15; k++) assert_float_equal(mst_tensor_get(gw, k), want[k], 0);
    }
    mst_ctx_free(ctx);
}

/* Through the tape: the table gradient of sum(embedding) counts each row's uses. */
static void test_embedding_backward_counts(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "table", MST_DTYPE_F32, 2, (int64_t[]){3, 2});
    mst_tensor_fill(w, 0.5);
    mst_tensor *ix = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){5}, (int32_t[]){2, 2, 0, 2, 0});
    mst_tensor *y = mst_embedding(ctx, ix, w);
    assert_non_null(y);
    assert_true(y->requires_grad);
    assert_int_equal(mst_backward_seeded(ctx, y, mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 2}, 1.0)), MST_OK);
    assert_non_null(w->grad);
    const float want[] = {2, 2, 0, 0, 3, 3};
    for (int k = 0; k < 6; k++) assert_float_equal(mst_tensor_f32(w->grad)[k], want[k], 0);
    mst_tensor_release(w->grad);
    w->grad = NULL;
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_embedding_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){5, 3});
    mst_tensor *ix = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){3}, (int32_t[]){0, 4, 7});
    assert_null(mst_embedding(ctx, ix, w));
    expect_error(ctx, MST_ERR_ARG, "embedding", "index 7 at position 2 is outside [0, 5)");
    mst_tensor *neg = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){2}, (int32_t[]){-1, 0});
    assert_null(mst_embedding(ctx, neg, w));
    expect_error(ctx, MST_ERR_ARG, "index -1 at position 0", NULL);

    mst_tensor *fix = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    assert_null(mst_embedding(ctx, fix, w));
    expect_error(ctx, MST_ERR_DTYPE, "indices must be i32", "f32");
    mst_tensor *ok = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){3});
    mst_tensor *w1 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){5});
    assert_null(mst_embedding(ctx, ok, w1));
    expect_error(ctx, MST_ERR_SHAPE, "weight must have rank 2 (V, D)", NULL);
    mst_tensor *wi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){5, 3});
    assert_null(mst_embedding(ctx, ok, wi));
    expect_error(ctx, MST_ERR_DTYPE, "weight must be a float tensor", NULL);
    mst_tensor *ix6 = mst_tensor_zeros(ctx, MST_DTYPE_I32, 6, (int64_t[]){1, 1, 1, 1, 1, 2});
    assert_null(mst_embedding(ctx, ix6, w));
    expect_error(ctx, MST_ERR_SHAPE, "rank <= 5", NULL);

    /* the gradient op: its own index check, shapes, and num_embeddings */
    mst_tensor *gy = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 3});
    assert_null(mst_embedding_grad(ctx, gy, ix, 5));
    expect_error(ctx, MST_ERR_ARG, "embedding_grad", "index 7 at position 2");
    assert_null(mst_embedding_grad(ctx, gy, ok, -1));
    expect_error(ctx, MST_ERR_ARG, "num_embeddings is -1", NULL);
    mst_tensor *gy_bad = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 3});
    assert_null(mst_embedding_grad(ctx, gy_bad, ok, 5));
    expect_error(ctx, MST_ERR_SHAPE, "indices' shape plus one trailing dimension", NULL);
    mst_attrs a = {.i = {-3}};
    assert_null(mst_dispatch1(ctx, MST_OP_EMBEDDING_GRAD, 2, (mst_tensor *[]){gy, ok}, &a));
    expect_error(ctx, MST_ERR_ARG, "num_embeddings is -3", NULL);
    mst_ctx_free(ctx);
}

static void test_embedding_descriptors(void **state) {
    const mst_op_desc *d = mst_op_table[MST_OP_EMBEDDING];
    assert_int_equal(d->dtype_arg, 1);
    assert_int_equal(d->nondiff, 1u << 0);
    assert_true(mst_op_table[MST_OP_EMBEDDING_GRAD]->flags & MST_OPF_GRAD_OP);
    assert_null(mst_op_table[MST_OP_EMBEDDING_GRAD]->backward);
    /* bytes count the rows read, not the whole table */
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){1000, 8});
    mst_tensor *ix = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){4});
    mst_tensor *y = mst_embedding(ctx, ix, w);
    assert_non_null(y);
    mst_op_call c = {.op = MST_OP_EMBEDDING, .n_in = 2, .n_out = 1, .in = {ix, w}, .out = {y}};
    assert_int_equal(mst_op_bytes(&c), 4 * 4 + 2 * 4 * 8 * 4);
    mst_ctx_free(ctx);
}

/* ---- dropout ---- */

/* Dropout with a given seed, both outputs. */
static void dropout_seeded(mst_ctx *ctx, mst_tensor *x, double p, uint64_t seed, mst_tensor *out[]) {
    mst_attrs a = {{0}};
    a.i[0] = (int64_t)seed;
    a.f[0] = p;
    if (mst_dispatch(ctx, MST_OP_DROPOUT, 1, (mst_tensor *[]){x}, &a, out) != MST_OK) fail_msg("%s", mst_ctx_error(ctx));
}

static void test_dropout_mask(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    const int64_t n = 200000;
    const double p = 0.3;
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){400, 500}, 1.0, 1.0);
    mst_tensor *a[MST_MAX_OP_OUTPUTS], *b[MST_MAX_OP_OUTPUTS], *o[MST_MAX_OP_OUTPUTS];
    dropout_seeded(ctx, x, p, 0xfeedface12345678ull, a);
    dropout_seeded(ctx, x, p, 0xfeedface12345678ull, b);
    dropout_seeded(ctx, x, p, 0xfeedface12345679ull, o);
    int64_t zeros = 0, same_as_other = 0;
    const float keep = (float)(1.0 / (1.0 - p));
    double sum_x = 0, sum_y = 0;
    for (int64_t k = 0; k < n; k++) {
        float m = mst_tensor_f32(a[1])[k];
        assert_true(m == 0.0f || m == keep);                                 /* 0 or 1/(1-p) */
        assert_true(mst_tensor_f32(a[0])[k] == mst_tensor_f32(x)[k] * m);   /* y = x mask */
        assert_true(m == mst_tensor_f32(b[1])[k]);                           /* same seed, same mask */
        zeros += m == 0.0f;
        same_as_other += m == mst_tensor_f32(o[1])[k];
        sum_x += mst_tensor_f32(x)[k];
        sum_y += mst_tensor_f32(a[0])[k];
    }
    /* the zero count is Binomial(n, p): within 4 sigma */
    double sigma = sqrt(n * p * (1 - p));
    if (fabs((double)zeros - n * p) > 4 * sigma) fail_msg("%lld zeros of %lld, expected %.0f +- %.0f", (long long)zeros, (long long)n, n * p, 4 * sigma);
    /* another seed agrees only where both keep or both drop: p^2 + (1-p)^2 of the time */
    double agree = p * p + (1 - p) * (1 - p), sa = sqrt(n * agree * (1 - agree));
    assert_true(fabs((double)same_as_other - n * agree) < 4 * sa);
    /* E[y] = E[x]: mean(y) - mean(x) has standard deviation about sqrt(p/(1-p) E[x^2] / n) */
    double tol = 4 * sqrt(p / (1 - p) * 2.0 / n);
    if (fabs(sum_y / n - sum_x / n) > tol) fail_msg("mean(y) %.5f vs mean(x) %.5f (tol %.5f)", sum_y / n, sum_x / n, tol);
    mst_ctx_free(ctx);
}

/* Mask element k depends on (seed, k) only: not on the tensor's length or dtype. */
static void test_dropout_mask_is_positional(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x7 = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){7}, 1.0);
    mst_tensor *x1000 = mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){10, 100}, 1.0);
    mst_tensor *x64 = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){1000}, 1.0);
    mst_tensor *a[MST_MAX_OP_OUTPUTS], *b[MST_MAX_OP_OUTPUTS], *d[MST_MAX_OP_OUTPUTS];
    dropout_seeded(ctx, x7, 0.5, 42, a);
    dropout_seeded(ctx, x1000, 0.5, 42, b);
    dropout_seeded(ctx, x64, 0.5, 42, d);
    for (int k = 0; k < 7; k++) assert_true(mst_tensor_get(a[1], k) == mst_tensor_get(b[1], k));
    for (int k = 0; k < 1000; k++) assert_true(mst_tensor_get(b[1], k) == mst_tensor_get(d[1], k));
    assert_int_equal(d[1]->dtype, MST_DTYPE_F64);
    mst_ctx_free(ctx);
}

/* The mask is the definition's, element by element (draw k of counter k / 4, word k % 4, kept
 * when its 24-bit uniform is >= p), on 1 and 2 threads alike (blocks split over the pool). */
static void test_dropout_mask_definition(void **state) {
    const int64_t n = 600001;       /* more than one chunk on 2 threads, and a partial last block */
    const double ps[] = {0.1, 0.5, 1.0 - 1.0 / 16777216.0};
    for (int threads = 1; threads <= 2; threads++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 9, .n_threads = threads});
        mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){n}, 2.0);
        for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
            mst_tensor *o[MST_MAX_OP_OUTPUTS];
            const uint64_t seed = 0x1234567890abcdefull + pi;
            dropout_seeded(ctx, x, ps[pi], seed, o);
            const float keep = (float)(1.0 / (1.0 - ps[pi]));
            for (int64_t k = 0; k < n; k++) {
                mst_philox_out r = mst_philox(seed, 0, (uint64_t)k / 4);
                float want = (double)mst_u32_to_unit(r.v[k % 4]) >= ps[pi] ? keep : 0.0f;
                if (mst_tensor_f32(o[1])[k] != want)
                    fail_msg("threads %d, p %g: mask[%lld] = %g, expected %g", threads, ps[pi], (long long)k,
                             mst_tensor_f32(o[1])[k], want);
            }
        }
        mst_ctx_free(ctx);
    }
}

/* The public constructor: seeds from the context, so equal context seeds give equal masks and
 * successive calls differ; identity when not training or p = 0. */
static void test_dropout_public(void **state) {
    mst_ctx *c1 = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = 1});
    mst_ctx *c2 = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = 1});
    mst_tensor *x1 = mst_tensor_full(c1, MST_DTYPE_F32, 1, (int64_t[]){256}, 2.0);
    mst_tensor *x2 = mst_tensor_full(c2, MST_DTYPE_F32, 1, (int64_t[]){256}, 2.0);
    mst_tensor *y1 = mst_dropout(c1, x1, 0.5, true), *y2 = mst_dropout(c2, x2, 0.5, true);
    mst_tensor *z1 = mst_dropout(c1, x1, 0.5, true);
    assert_non_null(y1);
    assert_non_null(y2);
    assert_non_null(z1);
    int differ = 0;
    for (int k = 0; k < 256; k++) {
        float v = mst_tensor_f32(y1)[k];
        assert_true(v == 0.0f || v == 4.0f);        /* 2 / (1 - 0.5) */
        assert_true(v == mst_tensor_f32(y2)[k]);
        differ += v != mst_tensor_f32(z1)[k];
    }
    assert_true(differ > 0);                        /* a fresh seed per call */
    /* identity cases return x itself and draw no seed */
    mst_rng before = c1->rng;
    assert_ptr_equal(mst_dropout(c1, x1, 0.5, false), x1);
    assert_ptr_equal(mst_dropout(c1, x1, 0.0, true), x1);
    assert_int_equal(c1->rng.counter, before.counter);
    assert_int_equal(mst_ctx_status(c1), MST_OK);
    mst_ctx_free(c1);
    mst_ctx_free(c2);
}

static void test_dropout_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    const double bad[] = {-0.1, 1.0, 1.5, NAN};
    for (int i = 0; i < 4; i++) {
        assert_null(mst_dropout(ctx, x, bad[i], true));
        expect_error(ctx, MST_ERR_ARG, "dropout: p is", "expected 0 <= p < 1");
        assert_null(mst_dropout(ctx, x, bad[i], false));    /* checked in evaluation too */
        expect_error(ctx, MST_ERR_ARG, "dropout: p is", NULL);
    }
    mst_attrs a = {.f = {2.0}};
    assert_null(mst_dispatch1(ctx, MST_OP_DROPOUT, 1, (mst_tensor *[]){x}, &a));
    expect_error(ctx, MST_ERR_ARG, "p is 2, expected 0 <= p < 1", NULL);
    mst_tensor *xi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){4});
    assert_null(mst_dropout(ctx, xi, 0.5, true));
    expect_error(ctx, MST_ERR_DTYPE, "dropout", "float");
    /* a NULL from an earlier failure passes through */
    assert_null(mst_dropout(ctx, mst_dropout(ctx, xi, 0.5, true), 0.5, true));
    expect_error(ctx, MST_ERR_DTYPE, "dropout", NULL);
    const mst_op_desc *d = mst_op_table[MST_OP_DROPOUT];
    assert_true(d->flags & MST_OPF_RANDOM);
    assert_false(d->flags & MST_OPF_ELEMENTWISE);     /* depends on the position too */
    assert_int_equal(d->n_outputs, 2);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_embedding_values),
        cmocka_unit_test(test_embedding_backward_counts),
        cmocka_unit_test(test_embedding_errors),
        cmocka_unit_test(test_embedding_descriptors),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_mask_is_positional), cmocka_unit_test(test_dropout_mask_definition),
        cmocka_unit_test(test_dropout_public),
        cmocka_unit_test(test_dropout_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
