/* test_shape.c — reshape (a view), permute/transpose, concat, slice, slice_grad: gradients by
 * finite differences in f64, fast permute vs reference in every dtype, values, view semantics
 * and memory release, and every error path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- build functions; `arg` carries the op's parameters ---- */

typedef struct { int ndim; int64_t shape[MST_MAX_DIMS]; } shape_arg;
typedef struct { int perm[MST_MAX_DIMS]; } perm_arg;
typedef struct { int axis; int64_t start, len; } window_arg;

static mst_tensor *b_reshape(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const shape_arg *a = arg;
    return mst_reshape(ctx, in[0], a->ndim, a->shape);
}
/* reshape twice with an op in between, so the view's gradient must flow through another kernel */
static mst_tensor *b_reshape_chain(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *y = mst_reshape(ctx, in[0], 2, (int64_t[]){-1, 6});
    y = mst_mul(ctx, y, y);
    return mst_reshape(ctx, y, 3, (int64_t[]){6, 2, -1});
}
static mst_tensor *b_permute(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_permute(ctx, in[0], ((const perm_arg *)arg)->perm);
}
static mst_tensor *b_transpose01(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_transpose(ctx, in[0], 0, 1); }
static mst_tensor *b_transpose_last2(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    return mst_transpose(ctx, in[0], -1, -2);
}
static mst_tensor *b_concat0(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_concat(ctx, 3, in, 0); }
static mst_tensor *b_concat1(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_concat(ctx, 3, in, 1); }
static mst_tensor *b_concat_neg(mst_ctx *ctx, mst_tensor *const in[], const void *arg) { return mst_concat(ctx, 2, in, -1); }
/* the same tensor twice: both slices of the gradient accumulate into it */
static mst_tensor *b_concat_self(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    mst_tensor *xs[2] = {in[0], in[0]};
    return mst_concat(ctx, 2, xs, 0);
}
static mst_tensor *b_slice(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const window_arg *w = arg;
    return mst_slice(ctx, in[0], w->axis, w->start, w->len);
}
static mst_tensor *b_slice_grad(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
    const window_arg *w = arg;
    return mst_slice_grad(ctx, in[0], w->axis, w->start, w->len);
}

static const shape_arg k_flat = {2, {-1, 4}}, k_mid = {3, {2, -1, 2}}, k_scalar = {0, {0}}, k_vec = {1, {-1}};
static const perm_arg k_p201 = {{2, 0, 1}}, k_p120 = {{1, 2, 0}}, k_p0231 = {{0, 2, 3, 1}}, k_p3102 = {{3, 1, 0, 2}},
                      k_p1032 = {{1, 0, 3, 2}};
static const window_arg k_w0 = {0, 1, 2}, k_w1 = {1, 0, 3}, k_wlast = {-1, 2, 3}, k_wall = {1, 0, 5},
                        k_wempty = {0, 2, 0};
/* slice_grad windows: len is the full length */
static const window_arg k_g0 = {0, 1, 5}, k_g2 = {2, 3, 7}, k_gneg = {-1, 0, 4};

#define T1(a) 1, {a}
#define T2(a, b) 2, {a, b}
#define T3(a, b, c) 3, {a, b, c}
#define T4(a, b, c, d) 4, {a, b, c, d}

static const gc_case k_grad_cases[] = {
    {"reshape -1 (2,3,4)->(-1,4)", b_reshape, &k_flat, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"reshape -1 middle", b_reshape, &k_mid, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"reshape to flat", b_reshape, &k_vec, 1, {{T4(2, 1, 3, 2), GC_RANDN, true}}},
    {"reshape (1,1) to scalar", b_reshape, &k_scalar, 1, {{T2(1, 1), GC_RANDN, true}}},
    {"reshape chain", b_reshape_chain, NULL, 1, {{T3(3, 2, 4), GC_RANDN, true}}},
    {"permute rank 3 (2,0,1)", b_permute, &k_p201, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"permute rank 3 (1,2,0)", b_permute, &k_p120, 1, {{T3(3, 1, 5), GC_RANDN, true}}},
    {"permute rank 4 (0,2,3,1)", b_permute, &k_p0231, 1, {{T4(2, 3, 4, 5), GC_RANDN, true}}},
    {"permute rank 4 (3,1,0,2)", b_permute, &k_p3102, 1, {{T4(2, 3, 4, 5), GC_RANDN, true}}},
    {"permute rank 4 (1,0,3,2)", b_permute, &k_p1032, 1, {{T4(1, 3, 2, 5), GC_RANDN, true}}},
    {"transpose 2D", b_transpose01, NULL, 1, {{T2(3, 5), GC_RANDN, true}}},
    {"transpose 2D batch 1 row", b_transpose01, NULL, 1, {{T2(1, 7), GC_RANDN, true}}},
    {"transpose last two, rank 3", b_transpose_last2, NULL, 1, {{T3(2, 4, 3), GC_RANDN, true}}},
    {"concat 3 on axis 0", b_concat0, NULL, 3,
     {{T2(2, 3), GC_RANDN, true}, {T2(1, 3), GC_RANDN, true}, {T2(4, 3), GC_RANDN, true}}},
    {"concat 3 on axis 1", b_concat1, NULL, 3,
     {{T3(2, 1, 3), GC_RANDN, true}, {T3(2, 4, 3), GC_RANDN, false}, {T3(2, 2, 3), GC_RANDN, true}}},
    {"concat on axis -1", b_concat_neg, NULL, 2, {{T2(3, 2), GC_RANDN, true}, {T2(3, 5), GC_RANDN, true}}},
    {"concat same tensor twice", b_concat_self, NULL, 1, {{T2(2, 3), GC_RANDN, true}}},
    {"slice axis 0", b_slice, &k_w0, 1, {{T2(4, 3), GC_RANDN, true}}},
    {"slice axis 1 of rank 3", b_slice, &k_w1, 1, {{T3(2, 5, 3), GC_RANDN, true}}},
    {"slice axis -1", b_slice, &k_wlast, 1, {{T3(2, 3, 6), GC_RANDN, true}}},
    {"slice whole axis", b_slice, &k_wall, 1, {{T2(2, 5), GC_RANDN, true}}},
    {"slice_grad axis 0", b_slice_grad, &k_g0, 1, {{T2(3, 2), GC_RANDN, true}}},
    {"slice_grad axis 2", b_slice_grad, &k_g2, 1, {{T3(2, 3, 4), GC_RANDN, true}}},
    {"slice_grad axis -1 full", b_slice_grad, &k_gneg, 1, {{T2(3, 4), GC_RANDN, true}}},
};

static void test_gradients(void **state) { gc_check_all(k_grad_cases, N_ELEMS(k_grad_cases)); }

/* An empty slice has no elements to differentiate, but must still run forward and backward. */
static void test_empty_slice(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F64, 2, (int64_t[]){4, 3}, 0, 1);
    x->requires_grad = true;
    mst_tensor *y = b_slice(ctx, &x, &k_wempty);
    if (!y) fail_msg("%s", mst_ctx_error(ctx));
    assert_int_equal(y->numel, 0);
    assert_int_equal(mst_backward_seeded(ctx, y, mst_tensor_zeros(ctx, MST_DTYPE_F64, 2, (int64_t[]){0, 3})), MST_OK);
    assert_non_null(x->grad);
    for (int64_t i = 0; i < x->numel; i++) assert_true(mst_tensor_get(x->grad, i) == 0.0);
    mst_ctx_free(ctx);
}

/* ---- fast permute (tiled / row-copy / gather paths) against the per-element reference ---- */

static const perm_arg k_p10 = {{1, 0}}, k_p021 = {{0, 2, 1}}, k_p102 = {{1, 0, 2}}, k_p2310 = {{2, 3, 1, 0}},
                      k_p021345 = {{0, 2, 1, 3, 5, 4}};

static const gc_case k_ref_cases[] = {
    {"transpose (67, 45)", b_permute, &k_p10, 1, {{T2(67, 45), GC_RANDN}}},
    {"transpose (128, 64)", b_permute, &k_p10, 1, {{T2(128, 64), GC_RANDN}}},
    {"batched transpose (3, 33, 70)", b_permute, &k_p021, 1, {{T3(3, 33, 70), GC_RANDN}}},
    {"row copy (5, 7, 9) (1,0,2)", b_permute, &k_p102, 1, {{T3(5, 7, 9), GC_RANDN}}},
    {"gather (4, 5, 6, 7)", b_permute, &k_p2310, 1, {{T4(4, 5, 6, 7), GC_RANDN}}},
    {"gather (4, 5, 6, 7) (3,1,0,2)", b_permute, &k_p3102, 1, {{T4(4, 5, 6, 7), GC_RANDN}}},
    {"NCHW->NHWC (2, 3, 17, 19)", b_permute, &k_p0231, 1, {{T4(2, 3, 17, 19), GC_RANDN}}},
    {"size-1 dims (1, 6, 1, 5)", b_permute, &k_p3102, 1, {{T4(1, 6, 1, 5), GC_RANDN}}},
    {"rank 6", b_permute, &k_p021345, 1, {{6, {2, 3, 4, 1, 3, 2}, GC_RANDN}}},
    {"merged runs (2,3,4)->(1,2,0)", b_permute, &k_p120, 1, {{T3(6, 10, 11), GC_RANDN}}},
};

static void test_permute_fast_vs_ref(void **state) { gc_check_ref_all(k_ref_cases, N_ELEMS(k_ref_cases), 0.0); }

/* Every dtype goes through the same size-keyed kernels: compare fast and reference bytes. */
static void test_permute_all_dtypes(void **state) {
    static const perm_arg *perms[] = {&k_p2310, &k_p3102, &k_p0231, &k_p1032};
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int dt = 0; dt < MST_DTYPE_COUNT; dt++) {
        mst_tensor *x = mst_tensor_new(ctx, (mst_dtype)dt, 4, (int64_t[]){3, 5, 4, 33});
        assert_non_null(x);
        unsigned char *p = mst_tensor_data(x);
        for (size_t i = 0; i < mst_tensor_nbytes(x); i++) p[i] = (unsigned char)(i * 131 + (i >> 8));
        for (int k = 0; k < N_ELEMS(perms); k++) {
            mst_ctx_set_force_ref(ctx, false);
            mst_tensor *fast = mst_permute(ctx, x, perms[k]->perm);
            mst_ctx_set_force_ref(ctx, true);
            mst_tensor *ref = mst_permute(ctx, x, perms[k]->perm);
            if (!fast || !ref) fail_msg("%s: %s", mst_dtype_name((mst_dtype)dt), mst_ctx_error(ctx));
            assert_int_equal(fast->dtype, dt);
            assert_memory_equal(mst_tensor_data(fast), mst_tensor_data(ref), mst_tensor_nbytes(ref));
        }
        mst_ctx_set_force_ref(ctx, false);
    }
    mst_ctx_free(ctx);
}

/* x of the shape filled with a byte pattern, permuted by the fast kernel and by the reference;
 * fails the test when either call fails. */
static void permute_fast_and_ref(mst_ctx *ctx, mst_dtype dt, int ndim, const int64_t *shape, const int *perm,
                                 mst_tensor **fast, mst_tensor **ref) {
    mst_tensor *x = mst_tensor_new(ctx, dt, ndim, shape);
    assert_non_null(x);
    unsigned char *p = mst_tensor_data(x);
    for (size_t i = 0; i < mst_tensor_nbytes(x); i++) p[i] = (unsigned char)(i * 131 + (i >> 8));
    mst_ctx_set_force_ref(ctx, false);
    *fast = mst_permute(ctx, x, perm);
    mst_ctx_set_force_ref(ctx, true);
    *ref = mst_permute(ctx, x, perm);
    mst_ctx_set_force_ref(ctx, false);
    if (!*fast || !*ref) fail_msg("%s permute of %lld elements: %s", mst_dtype_name(dt), (long long)x->numel, mst_ctx_error(ctx));
}

/* Permutes large enough to split over the pool (2^17 elements a chunk at least), at 1, 2 and 3
 * threads, against the reference, in f32 and bf16: the row copy (attention heads), the tiled
 * transpose, the pixel shuffle's interleave and de-interleave, and the general gather. Sizes put
 * chunk edges in the middle of the outer dims' odometer. */
static void test_permute_split(void **state) {
    static const struct { int ndim; int64_t shape[6]; int perm[6]; } cases[] = {
        {4, {8, 129, 8, 64}, {0, 2, 1, 3}},            {3, {3, 300, 301}, {0, 2, 1}},
        {6, {2, 17, 2, 2, 64, 61}, {0, 1, 4, 2, 5, 3}}, {6, {2, 17, 61, 2, 64, 2}, {0, 1, 3, 5, 2, 4}},
        {4, {41, 50, 60, 7}, {2, 3, 1, 0}},
    };
    static const mst_dtype dtypes[] = {MST_DTYPE_F32, MST_DTYPE_BF16};
    for (int threads = 1; threads <= 3; threads++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = threads});
        for (int d = 0; d < N_ELEMS(dtypes); d++)
            for (int k = 0; k < N_ELEMS(cases); k++) {
                mst_tensor *fast, *ref;
                permute_fast_and_ref(ctx, dtypes[d], cases[k].ndim, cases[k].shape, cases[k].perm, &fast, &ref);
                assert_true(ref->numel >= 2 * (1 << 17));
                if (memcmp(mst_tensor_data(fast), mst_tensor_data(ref), mst_tensor_nbytes(ref)) != 0)
                    fail_msg("threads %d, %s, case %d: the split permute differs from the reference", threads,
                             mst_dtype_name(dtypes[d]), k);
            }
        mst_ctx_free(ctx);
    }
}

/* The row-copy path's fixed-size copies (rows of 4 to 128 bytes) and its general one, in every
 * dtype: the attention heads' permutes (N, L, 3, H, dh) -> (3, N, H, L, dh) and
 * (N, H, L, dh) -> (N, L, H, dh) with dh of 8, 16 and 3 elements; and the pixel shuffle's
 * (N, C, r, r, H, W) -> (N, C, H, r, W, r) with r = 2, 4 and 3 (the interleaves with a constant
 * count, and the general tile) and its inverse (the de-interleaves at input strides 2 and 4). */
static void test_permute_rows_all_dtypes(void **state) {
    static const struct { int ndim; int64_t shape[6]; int perm[6]; } cases[] = {
        {5, {3, 5, 3, 2, 8}, {2, 0, 3, 1, 4}},         {4, {3, 2, 5, 8}, {0, 2, 1, 3}},
        {4, {2, 3, 5, 16}, {0, 2, 1, 3}},              {5, {2, 4, 3, 2, 3}, {2, 0, 3, 1, 4}},
        {6, {2, 3, 2, 2, 5, 7}, {0, 1, 4, 2, 5, 3}},   {6, {2, 3, 4, 4, 5, 7}, {0, 1, 4, 2, 5, 3}},
        {6, {2, 3, 3, 3, 5, 7}, {0, 1, 4, 2, 5, 3}},   {6, {2, 3, 5, 2, 7, 2}, {0, 1, 3, 5, 2, 4}},
        {6, {2, 3, 5, 4, 7, 4}, {0, 1, 3, 5, 2, 4}},   {6, {2, 3, 5, 3, 7, 3}, {0, 1, 3, 5, 2, 4}},
    };
    mst_ctx *ctx = mst_ctx_new(NULL);
    for (int dt = 0; dt < MST_DTYPE_COUNT; dt++)
        for (int k = 0; k < N_ELEMS(cases); k++) {
            mst_tensor *fast, *ref;
            permute_fast_and_ref(ctx, (mst_dtype)dt, cases[k].ndim, cases[k].shape, cases[k].perm, &fast, &ref);
            assert_memory_equal(mst_tensor_data(fast), mst_tensor_data(ref), mst_tensor_nbytes(ref));
        }
    mst_ctx_free(ctx);
}

/* ---- values ---- */

static void test_values(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    mst_tensor *t = mst_transpose(ctx, x, 0, -1);
    assert_non_null(t);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 2);
    const float want_t[] = {1, 4, 2, 5, 3, 6};
    assert_memory_equal(mst_tensor_f32(t), want_t, sizeof(want_t));

    mst_tensor *r = mst_reshape(ctx, x, 3, (int64_t[]){3, -1, 1});
    assert_non_null(r);
    assert_int_equal(r->ndim, 3);
    assert_int_equal(r->shape[1], 2);
    /* same shape: x itself, nothing recorded */
    assert_ptr_equal(mst_reshape(ctx, x, 2, (int64_t[]){2, -1}), x);
    assert_ptr_equal(mst_transpose(ctx, x, 1, 1), x);

    /* permute copies: writing its output leaves x alone */
    mst_tensor_f32(t)[1] = 99;
    assert_true(mst_tensor_f32(x)[3] == 4.0f);
    /* reshape views any dtype */
    mst_tensor *iv = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){4}, (int32_t[]){1, 2, 3, 4});
    mst_tensor *ir = mst_reshape(ctx, iv, 2, (int64_t[]){2, 2});
    assert_non_null(ir);
    assert_int_equal(ir->dtype, MST_DTYPE_I32);
    assert_ptr_equal(mst_tensor_data(ir), mst_tensor_data(iv));
    mst_tensor *u8r = mst_reshape(ctx, mst_tensor_zeros(ctx, MST_DTYPE_U8, 1, (int64_t[]){6}), 3, (int64_t[]){1, -1, 3});
    assert_non_null(u8r);
    assert_int_equal(u8r->shape[1], 2);

    /* concat on axis 1 of i32 tensors */
    mst_tensor *a = mst_tensor_from_data(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 1}, (int32_t[]){7, 8});
    mst_tensor *b = mst_tensor_from_data(ctx, MST_DTYPE_I32, 2, (int64_t[]){2, 2}, (int32_t[]){1, 2, 3, 4});
    mst_tensor *cat = mst_concat(ctx, 2, (mst_tensor *[]){a, b}, 1);
    assert_non_null(cat);
    const int32_t want_cat[] = {7, 1, 2, 8, 3, 4};
    assert_memory_equal(mst_tensor_i32(cat), want_cat, sizeof(want_cat));

    /* u8 slice of the middle column, then slice_grad puts it back among zeros */
    mst_tensor *u = mst_tensor_from_data(ctx, MST_DTYPE_U8, 2, (int64_t[]){2, 3}, (uint8_t[]){1, 2, 3, 4, 5, 6});
    mst_tensor *s = mst_slice(ctx, u, 1, 1, 1);
    assert_non_null(s);
    assert_int_equal(s->shape[0], 2);
    assert_int_equal(s->shape[1], 1);
    assert_memory_equal(mst_tensor_data(s), ((uint8_t[]){2, 5}), 2);
    mst_tensor *g = mst_slice_grad(ctx, s, 1, 2, 4);
    assert_non_null(g);
    assert_memory_equal(mst_tensor_data(g), ((uint8_t[]){0, 0, 2, 0, 0, 0, 5, 0}), 8);

    /* f16 and bf16 move as raw bits */
    mst_tensor *h = mst_tensor_from_data(ctx, MST_DTYPE_F16, 1, (int64_t[]){4}, (uint16_t[]){0x3c00, 0x7e01, 0x8001, 0xfc00});
    mst_tensor *hs = mst_slice(ctx, mst_concat(ctx, 2, (mst_tensor *[]){h, h}, 0), 0, 3, 3);
    assert_non_null(hs);
    assert_memory_equal(mst_tensor_data(hs), ((uint16_t[]){0xfc00, 0x3c00, 0x7e01}), 6);
    mst_ctx_free(ctx);
}

/* ---- view semantics and memory release ---- */

static void test_reshape_view(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    int64_t base = mst_ctx_mem(ctx)->in_use_total;
    mst_pool_push(ctx);
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    int64_t after_x = mst_ctx_mem(ctx)->in_use_total;
    mst_tensor *y = mst_reshape(ctx, x, 1, (int64_t[]){-1});
    assert_non_null(y);
    /* no new storage: the same bytes, one more reference */
    assert_ptr_equal(y->storage, x->storage);
    assert_ptr_equal(mst_tensor_data(y), mst_tensor_data(x));
    assert_int_equal(x->storage->refcount, 2);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, after_x);
    mst_tensor_f32(y)[4] = 42;
    assert_true(mst_tensor_f32(x)[4] == 42.0f);
    mst_tensor_f32(x)[0] = -1;
    assert_true(mst_tensor_f32(y)[0] == -1.0f);

    /* a retained view keeps the storage alive past the pool that made the source */
    mst_tensor *kept = mst_tensor_retain(mst_reshape(ctx, x, 2, (int64_t[]){3, 2}));
    assert_non_null(kept);
    mst_pool_pop(ctx);
    assert_true(mst_tensor_f32(kept)[4] == 42.0f);
    assert_int_equal(kept->storage->refcount, 1);
    assert_true(mst_ctx_mem(ctx)->in_use_total > base);
    mst_tensor_release(kept);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base);

    /* a whole forward and backward through views and copies releases everything */
    mst_pool_push(ctx);
    mst_tensor *w = mst_tensor_randn(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, 0, 1);
    w->requires_grad = true;
    mst_tensor *v = mst_reshape(ctx, w, 2, (int64_t[]){6, -1});
    v = mst_transpose(ctx, v, 0, 1);
    v = mst_concat(ctx, 2, (mst_tensor *[]){v, mst_slice(ctx, v, 0, 1, 2)}, 0);
    v = mst_reshape(ctx, v, 1, (int64_t[]){-1});
    assert_non_null(v);
    assert_int_equal(mst_backward_seeded(ctx, v, mst_tensor_full(ctx, MST_DTYPE_F32, 1, v->shape, 1.0)), MST_OK);
    assert_non_null(w->grad);
    /* every element of w appears once, and those in rows 1..2 of the transposed view once more */
    double total = 0;
    for (int64_t i = 0; i < w->numel; i++) total += mst_tensor_get(w->grad, i);
    assert_true(total == 24.0 + 12.0);
    mst_pool_pop(ctx);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base);
    assert_int_equal(mst_tape_length(ctx), 0);
    mst_ctx_free(ctx);
}

/* ---- error paths ---- */

static void expect_error(mst_ctx *ctx, const mst_tensor *r, mst_status s, const char *needle) {
    if (r) fail_msg("expected an error mentioning \"%s\", got a tensor", needle);
    assert_int_equal(mst_ctx_status(ctx), s);
    if (!strstr(mst_ctx_error(ctx), needle)) fail_msg("error \"%s\" does not mention \"%s\"", mst_ctx_error(ctx), needle);
    mst_ctx_clear_error(ctx);
}

static void test_reshape_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    expect_error(ctx, mst_reshape(ctx, x, 2, (int64_t[]){-1, -1}), MST_ERR_SHAPE, "more than one -1");
    expect_error(ctx, mst_reshape(ctx, x, 2, (int64_t[]){4, -1}), MST_ERR_SHAPE, "cannot infer the -1");
    expect_error(ctx, mst_reshape(ctx, x, 2, (int64_t[]){0, -1}), MST_ERR_SHAPE, "cannot infer the -1");
    expect_error(ctx, mst_reshape(ctx, x, 2, (int64_t[]){4, 2}), MST_ERR_SHAPE, "same element count");
    expect_error(ctx, mst_reshape(ctx, x, 1, (int64_t[]){5}), MST_ERR_SHAPE, "f32(2, 3)");
    expect_error(ctx, mst_reshape(ctx, x, 2, (int64_t[]){-2, -3}), MST_ERR_SHAPE, "negative dim");
    expect_error(ctx, mst_reshape(ctx, x, 7, (int64_t[]){1, 1, 1, 1, 1, 2, 3}), MST_ERR_SHAPE, "rank 7");
    /* NULL from an earlier failure passes through with its message kept */
    mst_ctx_fail(ctx, MST_ERR_ARG, "earlier failure");
    expect_error(ctx, mst_reshape(ctx, NULL, 1, (int64_t[]){-1}), MST_ERR_ARG, "earlier failure");
    mst_ctx_free(ctx);
}

static void test_permute_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    expect_error(ctx, mst_permute(ctx, x, (int[]){0, 0, 1}), MST_ERR_ARG, "permutation of 0..2");
    expect_error(ctx, mst_permute(ctx, x, (int[]){0, 1, 3}), MST_ERR_ARG, "permutation of 0..2");
    expect_error(ctx, mst_permute(ctx, x, (int[]){-1, 0, 1}), MST_ERR_ARG, "permutation");
    expect_error(ctx, mst_transpose(ctx, x, 0, 3), MST_ERR_ARG, "expected dims in -3..2");
    expect_error(ctx, mst_transpose(ctx, x, -4, 0), MST_ERR_ARG, "expected dims in -3..2");
    mst_ctx_free(ctx);
}

static void test_concat_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 3});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){2, 4});
    mst_tensor *c = mst_tensor_zeros(ctx, MST_DTYPE_F64, 2, (int64_t[]){2, 3});
    mst_tensor *d = mst_tensor_zeros(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 1});
    mst_tensor *s = mst_tensor_scalar(ctx, MST_DTYPE_F32, 1.0);
    expect_error(ctx, mst_concat(ctx, 2, (mst_tensor *[]){a, b}, 0), MST_ERR_SHAPE, "equal shapes except on axis 0");
    expect_error(ctx, mst_concat(ctx, 2, (mst_tensor *[]){a, d}, 1), MST_ERR_SHAPE, "equal shapes except on axis 1");
    expect_error(ctx, mst_concat(ctx, 2, (mst_tensor *[]){a, c}, 0), MST_ERR_DTYPE, "same dtype");
    expect_error(ctx, mst_concat(ctx, 2, (mst_tensor *[]){a, a}, 2), MST_ERR_ARG, "expected -2..1");
    expect_error(ctx, mst_concat(ctx, 2, (mst_tensor *[]){a, a}, -3), MST_ERR_ARG, "expected -2..1");
    expect_error(ctx, mst_concat(ctx, 1, (mst_tensor *[]){s}, 0), MST_ERR_SHAPE, "expected rank >= 1");
    expect_error(ctx, mst_concat(ctx, 0, (mst_tensor *[]){a}, 0), MST_ERR_ARG, "1..8 inputs");
    mst_tensor *many[9] = {a, a, a, a, a, a, a, a, a};
    expect_error(ctx, mst_concat(ctx, 9, many, 0), MST_ERR_ARG, "1..8 inputs");
    mst_tensor *y = mst_concat(ctx, 8, many, 1);    /* the maximum is fine */
    assert_non_null(y);
    assert_int_equal(y->shape[1], 24);
    mst_ctx_free(ctx);
}

static void test_slice_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 3});
    expect_error(ctx, mst_slice(ctx, x, 0, 3, 2), MST_ERR_ARG, "outside [0, 4)");
    expect_error(ctx, mst_slice(ctx, x, 1, -1, 2), MST_ERR_ARG, "outside [0, 3)");
    expect_error(ctx, mst_slice(ctx, x, 1, 0, -1), MST_ERR_ARG, "outside [0, 3)");
    expect_error(ctx, mst_slice(ctx, x, 1, 4, 0), MST_ERR_ARG, "outside [0, 3)");
    expect_error(ctx, mst_slice(ctx, x, 2, 0, 1), MST_ERR_ARG, "expected -2..1");
    expect_error(ctx, mst_slice(ctx, mst_tensor_scalar(ctx, MST_DTYPE_F32, 1), 0, 0, 1), MST_ERR_SHAPE, "expected rank >= 1");
    /* slice_grad: the window must fit in the full length */
    expect_error(ctx, mst_slice_grad(ctx, x, 0, 1, 4), MST_ERR_ARG, "outside [0, 4)");
    expect_error(ctx, mst_slice_grad(ctx, x, 1, -1, 5), MST_ERR_ARG, "outside [0, 5)");
    expect_error(ctx, mst_slice_grad(ctx, x, 1, 0, 2), MST_ERR_ARG, "outside [0, 2)");
    expect_error(ctx, mst_slice_grad(ctx, x, -3, 0, 5), MST_ERR_ARG, "expected -2..1");
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),          cmocka_unit_test(test_empty_slice),
        cmocka_unit_test(test_permute_fast_vs_ref), cmocka_unit_test(test_permute_all_dtypes), cmocka_unit_test(test_permute_rows_all_dtypes), cmocka_unit_test(test_permute_split),
        cmocka_unit_test(test_values),             cmocka_unit_test(test_reshape_view),
        cmocka_unit_test(test_reshape_errors),     cmocka_unit_test(test_permute_errors),
        cmocka_unit_test(test_concat_errors),      cmocka_unit_test(test_slice_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
