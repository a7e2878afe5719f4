/* test_core.c — allocator, tensors and pools, the dispatcher's checks, autograd bookkeeping,
 * dtype promotion and the counter-based RNG. Op-specific behaviour lives in the family tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/rng.h"

/* ---- allocator ---- */

static void test_alloc_accounting(void **state) {
    mst_allocator *a = mst_allocator_new();
    void *p = mst_alloc(a, 1000, MST_MEM_ACT);
    void *q = mst_alloc(a, 3000, MST_MEM_PARAM);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal((uintptr_t)p % 64, 0);
    const mst_alloc_stats *s = mst_allocator_stats(a);
    assert_int_equal(s->in_use[MST_MEM_ACT], 1000);
    assert_int_equal(s->in_use[MST_MEM_PARAM], 3000);
    assert_int_equal(s->in_use_total, 4000);
    mst_free(a, p);
    assert_int_equal(s->in_use[MST_MEM_ACT], 0);
    assert_int_equal(s->peak[MST_MEM_ACT], 1000);
    assert_int_equal(s->peak_total, 4000);
    /* a block of the same class comes back from the cache, not from malloc */
    uint64_t sys = s->n_system;
    void *r = mst_alloc(a, 990, MST_MEM_GRAD);
    assert_ptr_equal(r, p);
    assert_int_equal(s->n_system, sys);
    assert_int_equal(s->in_use[MST_MEM_GRAD], 990);
    mst_free(a, r);
    mst_free(a, q);
    assert_int_equal(s->in_use_total, 0);
    mst_allocator_reset_peak(a);
    assert_int_equal(s->peak_total, 0);
    mst_allocator_free(a);
}

/* A reserved block counts in the totals and reserved_bytes only; accounted bytes move a category's
 * in_use and peak as a block would, not the totals. */
static void test_alloc_reserved(void **state) {
    mst_allocator *a = mst_allocator_new();
    const mst_alloc_stats *s = mst_allocator_stats(a);
    void *r = mst_alloc(a, 5000, MST_MEM_RESERVED);
    assert_non_null(r);
    assert_int_equal(s->reserved_bytes, 5000);
    assert_int_equal(s->in_use_total, 5000);
    for (int c = 0; c < MST_MEM_COUNT; c++) assert_int_equal(s->in_use[c] + s->peak[c], 0);
    mst_allocator_account(a, MST_MEM_ACT, 3000);
    mst_allocator_account(a, MST_MEM_GRAD, 1500);
    mst_allocator_account(a, MST_MEM_ACT, -3000);
    mst_allocator_account(a, MST_MEM_GRAD, 2000);
    assert_int_equal(s->in_use[MST_MEM_ACT], 0);
    assert_int_equal(s->peak[MST_MEM_ACT], 3000);
    assert_int_equal(s->in_use[MST_MEM_GRAD], 3500);
    assert_int_equal(s->peak[MST_MEM_GRAD], 3500);
    assert_int_equal(s->in_use_total, 5000);
    mst_allocator_account(a, MST_MEM_GRAD, -3500);
    mst_free(a, r);
    assert_int_equal(s->reserved_bytes, 0);
    assert_int_equal(s->in_use_total, 0);
    assert_int_equal(s->peak_total, 5000);
    mst_allocator_free(a);
}

static void test_alloc_size_classes(void **state) {
    mst_allocator *a = mst_allocator_new();
    /* every size gets a block at least that large: write the whole block */
    for (size_t n = 1; n < 300000; n = n * 3 / 2 + 1) {
        unsigned char *p = mst_alloc(a, n, MST_MEM_ACT);
        assert_non_null(p);
        memset(p, 0xab, n);
        mst_free(a, p);
    }
    assert_int_equal(mst_allocator_stats(a)->in_use_total, 0);
    mst_allocator_trim(a);
    assert_int_equal(mst_allocator_stats(a)->cached_bytes, 0);
    mst_allocator_free(a);
}

static void test_alloc_fail_at(void **state) {
    mst_allocator *a = mst_allocator_new();
    mst_allocator_fail_at(a, 3);
    void *p1 = mst_alloc(a, 10, MST_MEM_ACT), *p2 = mst_alloc(a, 10, MST_MEM_ACT);
    assert_non_null(p1);
    assert_non_null(p2);
    assert_null(mst_alloc(a, 10, MST_MEM_ACT));
    void *p4 = mst_alloc(a, 10, MST_MEM_ACT);   /* one-shot */
    assert_non_null(p4);
    mst_free(a, p1);
    mst_free(a, p2);
    mst_free(a, p4);
    mst_allocator_free(a);
}

/* Each allocation of a small op chain fails in turn: every failure is a clean error, never a
 * crash, and nothing leaks once the pool is popped. */
static void test_oom_every_allocation(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 2, (int64_t[]){4, 5});
    mst_tensor_fill(w, 0.5);
    int64_t base = mst_ctx_mem(ctx)->in_use_total;
    int failures = 0;
    for (int n = 1; n < 40; n++) {
        mst_pool_push(ctx);
        mst_allocator_fail_at(ctx->alloc, n);
        mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 5}, 2.0);
        mst_tensor *y = mst_scale(ctx, mst_mul(ctx, mst_add(ctx, x, w), w), 3.0);
        mst_status s = y ? mst_backward_seeded(ctx, y, mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 5}, 1.0))
                         : mst_ctx_status(ctx);
        if (s != MST_OK) {
            failures++;
            assert_int_equal(s, MST_ERR_OOM);
            assert_non_null(strstr(mst_ctx_error(ctx), "out of memory"));
        }
        mst_allocator_fail_at(ctx->alloc, 0);
        mst_ctx_clear_error(ctx);
        mst_zero_grad(&w, 1);
        mst_pool_pop(ctx);
        assert_int_equal(mst_tape_length(ctx), 0);
        assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base);
    }
    assert_true(failures > 3);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

/* ---- tensors and pools ---- */

static void test_pool_releases(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    int64_t base = mst_ctx_mem(ctx)->in_use_total;
    mst_pool_push(ctx);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){16, 16});
    mst_tensor *b = mst_add(ctx, a, a);
    mst_tensor *kept = mst_tensor_retain(mst_scale(ctx, b, 2.0));
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base + 3 * 16 * 16 * 4);
    mst_pool_pop(ctx);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base + 16 * 16 * 4);
    assert_float_equal(mst_tensor_f32(kept)[0], 0.0f, 0);
    mst_tensor_release(kept);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, base);
    mst_ctx_free(ctx);
}

static void test_tensor_basics(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *t = mst_tensor_new(ctx, MST_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    assert_int_equal(t->numel, 24);
    assert_int_equal(t->strides[0], 12);
    assert_int_equal(t->strides[2], 1);
    char buf[64];
    assert_string_equal(mst_tensor_desc(t, buf, sizeof(buf)), "f32(2, 3, 4)");
    mst_tensor *s = mst_tensor_scalar(ctx, MST_DTYPE_F64, 2.5);
    assert_int_equal(s->ndim, 0);
    assert_int_equal(s->numel, 1);
    assert_float_equal(mst_tensor_get(s, 0), 2.5, 0);
    mst_tensor *v = mst_tensor_view(ctx, t, 2, (int64_t[]){6, 4});
    assert_ptr_equal(mst_tensor_data(v), mst_tensor_data(t));
    assert_null(mst_tensor_view(ctx, t, 2, (int64_t[]){5, 5}));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_SHAPE);
    mst_ctx_clear_error(ctx);
    assert_null(mst_tensor_new(ctx, MST_DTYPE_F32, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 1}));
    assert_non_null(strstr(mst_ctx_error(ctx), "rank 7"));
    mst_ctx_clear_error(ctx);
    assert_null(mst_tensor_new(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, -1}));
    assert_non_null(strstr(mst_ctx_error(ctx), "negative"));
    mst_ctx_free(ctx);
}

/* ---- dispatcher ---- */

static void test_dispatch_arity_and_null(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    mst_tensor *in[3] = {a, a, a};
    mst_tensor *out[MST_MAX_OP_OUTPUTS];
    assert_int_equal(mst_dispatch(ctx, MST_OP_ADD, 3, in, NULL, out), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "add: takes 2..2 inputs, got 3"));
    mst_ctx_clear_error(ctx);
    assert_null(mst_add(ctx, a, NULL));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "input 1 is NULL"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_dispatch(ctx, (mst_op)MST_OP_COUNT, 1, in, NULL, out), MST_ERR_UNSUPPORTED);
    mst_ctx_free(ctx);
}

static void test_dispatch_other_context(void **state) {
    mst_ctx *c1 = mst_ctx_new(NULL), *c2 = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(c1, MST_DTYPE_F32, 1, (int64_t[]){3});
    mst_tensor *b = mst_tensor_zeros(c2, MST_DTYPE_F32, 1, (int64_t[]){3});
    assert_null(mst_add(c1, a, b));
    assert_non_null(strstr(mst_ctx_error(c1), "another context"));
    mst_ctx_free(c1);
    mst_ctx_free(c2);
}

/* An op with no native half kernel runs in half through the generic half-via-f32 kernel
 * (runtime/amp/half_kernels.c): every float dtype has a kernel, so "no cpu kernel" is unreachable
 * through the public ops. */
static void test_dispatch_half_without_native_kernel(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *h = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, (float[]){1.5f, -2.0f, 0.25f});
    mst_tensor *y = mst_scale(ctx, mst_cast(ctx, h, MST_DTYPE_F16), 2.0);
    assert_non_null(y);
    assert_int_equal(y->dtype, MST_DTYPE_F16);
    assert_true(mst_tensor_get(y, 0) == 3.0 && mst_tensor_get(y, 1) == -4.0 && mst_tensor_get(y, 2) == 0.5);
    mst_ctx_free(ctx);
}

static void test_every_op_has_a_descriptor(void **state) {
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d) fail_msg("op %d has no descriptor", op);
        assert_non_null(d->name);
        assert_non_null(d->infer);
        assert_int_equal(mst_op_parse(d->name), op);
        assert_true(d->min_inputs <= d->max_inputs);
        assert_true(d->max_inputs <= MST_MAX_OP_INPUTS);
        assert_true(d->n_outputs <= MST_MAX_OP_OUTPUTS);
        /* every op can run in f32 and f64 (gradient checks run in f64) */
        if (!(d->flags & MST_OPF_VIEW)) {
            if (!d->kernels[MST_DEVICE_CPU][MST_DTYPE_F32] || !d->kernels[MST_DEVICE_CPU][MST_DTYPE_F64]) fail_msg("%s lacks an f32 or f64 kernel", d->name);
        }
    }
}

/* ---- autograd ---- */

static void test_backward_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){3}, 1.0);
    mst_tensor *y = mst_scale(ctx, a, 2.0);
    assert_int_equal(mst_backward(ctx, y), MST_ERR_SHAPE);          /* not one element */
    mst_ctx_clear_error(ctx);
    mst_tensor *s = mst_sum_to(ctx, y, 0, NULL);
    assert_int_equal(mst_backward(ctx, s), MST_ERR_ARG);            /* nothing requires grad */
    assert_non_null(strstr(mst_ctx_error(ctx), "does not require grad"));
    mst_ctx_free(ctx);
}

static void test_leaf_grads_survive_pool(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_tensor_fill(w, 3.0);
    for (int step = 0; step < 2; step++) {          /* two backward passes accumulate */
        mst_pool_push(ctx);
        mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, 2.0);
        mst_tensor *loss = mst_sum_to(ctx, mst_mul(ctx, mst_mul(ctx, w, w), x), 0, NULL);   /* sum(2 w^2) */
        assert_int_equal(mst_tape_length(ctx), 3);
        assert_int_equal(mst_backward(ctx, loss), MST_OK);
        assert_int_equal(mst_tape_length(ctx), 0);
        mst_pool_pop(ctx);
    }
    assert_non_null(w->grad);
    assert_int_equal(w->grad->storage->cat, MST_MEM_GRAD);
    for (int i = 0; i < 4; i++) assert_float_equal(mst_tensor_f32(w->grad)[i], 2 * 12.0f, 1e-6);
    mst_zero_grad(&w, 1);
    assert_null(w->grad);
    mst_tensor_release(w);
    assert_int_equal(mst_ctx_mem(ctx)->in_use_total, 0);
    mst_ctx_free(ctx);
}

static void test_leaf_grad_not_shared(void **state) {
    /* y = a + b: both gradients equal gy, but each leaf must get its own tensor */
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_param_new(ctx, "a", MST_DTYPE_F32, 1, (int64_t[]){2});
    mst_tensor *b = mst_param_new(ctx, "b", MST_DTYPE_F32, 1, (int64_t[]){2});
    mst_tensor *y = mst_add(ctx, a, b);
    assert_int_equal(mst_backward_seeded(ctx, y, mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){2}, 1.0)), MST_OK);
    assert_ptr_not_equal(a->grad, b->grad);
    assert_ptr_not_equal(mst_tensor_data(a->grad), mst_tensor_data(b->grad));
    mst_tensor_release(a);
    mst_tensor_release(b);
    mst_ctx_free(ctx);
}

static void test_no_grad_records_nothing(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_grad_set_enabled(ctx, false);
    mst_tensor *y = mst_mul(ctx, w, w);
    assert_false(y->requires_grad);
    assert_int_equal(mst_tape_length(ctx), 0);
    mst_grad_set_enabled(ctx, true);
    y = mst_mul(ctx, w, w);
    assert_true(y->requires_grad);
    assert_int_equal(mst_tape_length(ctx), 1);
    mst_tape_clear(ctx);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_promotion_keeps_input_grad_dtype(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, (int64_t[]){3});
    mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){3}, 2.0);
    mst_tensor_fill(w, 1.5);
    mst_tensor *y = mst_mul(ctx, w, x);
    assert_int_equal(y->dtype, MST_DTYPE_F64);
    assert_int_equal(mst_backward_seeded(ctx, y, mst_tensor_full(ctx, MST_DTYPE_F64, 1, (int64_t[]){3}, 1.0)), MST_OK);
    assert_int_equal(w->grad->dtype, MST_DTYPE_F32);
    assert_float_equal(mst_tensor_f32(w->grad)[0], 2.0f, 0);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

/* ---- dtypes and random numbers ---- */

static void test_dtype_promotion_table(void **state) {
    assert_int_equal(mst_dtype_promote(MST_DTYPE_F32, MST_DTYPE_F64), MST_DTYPE_F64);
    assert_int_equal(mst_dtype_promote(MST_DTYPE_F16, MST_DTYPE_F32), MST_DTYPE_F32);
    assert_int_equal(mst_dtype_promote(MST_DTYPE_F16, MST_DTYPE_BF16), MST_DTYPE_F32);
    assert_int_equal(mst_dtype_promote(MST_DTYPE_I32, MST_DTYPE_F16), MST_DTYPE_F16);
    assert_int_equal(mst_dtype_promote(MST_DTYPE_U8, MST_DTYPE_I32), MST_DTYPE_I32);
    assert_int_equal(mst_dtype_parse("bf16"), MST_DTYPE_BF16);
    assert_int_equal(mst_dtype_parse("f8"), -1);
}

static void test_philox_known_answer(void **state) {
    /* Random123's published known-answer vectors for philox4x32-10. */
    mst_philox_out o = mst_philox(0, 0, 0);
    assert_int_equal(o.v[0], 0x6627e8d5u);
    assert_int_equal(o.v[1], 0xe169c58du);
    assert_int_equal(o.v[2], 0xbc57ac4cu);
    assert_int_equal(o.v[3], 0x9b00dbd8u);
    /* ctr = {243f6a88, 85a308d3, 13198a2e, 03707344}, key = {a4093822, 299f31d0}, low word first */
    o = mst_philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
    assert_int_equal(o.v[0], 0xd16cfe09u);
    assert_int_equal(o.v[1], 0x94fdccebu);
    assert_int_equal(o.v[2], 0x5001e420u);
    assert_int_equal(o.v[3], 0x24126ea1u);
}

/* Sixteen counters at once give mst_philox's bits, on the vector path and across the 2^32
 * counter boundary (where it draws one at a time). */
static void test_philox16(void **state) {
    static const uint64_t keys[] = {0, 42, 0x299f31d0a4093822ull, ~0ull};
    static const uint64_t counters[] = {0, 1, 12345, (1ull << 32) - 20, (1ull << 32) - 8, 1ull << 40};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
            uint32_t out[4][16];
            mst_philox16(keys[k], counters[c], out);
            for (int j = 0; j < 16; j++) {
                mst_philox_out o = mst_philox(keys[k], 0, counters[c] + (uint64_t)j);
                for (int w = 0; w < 4; w++) assert_int_equal(out[w][j], o.v[w]);
            }
        }
}

static void test_rng_reproducible(void **state) {
    mst_ctx *c1 = mst_ctx_new(&(mst_ctx_config){.seed = 7}), *c2 = mst_ctx_new(&(mst_ctx_config){.seed = 7});
    mst_tensor *a = mst_tensor_randn(c1, MST_DTYPE_F32, 1, (int64_t[]){100}, 0, 1);
    mst_tensor *b = mst_tensor_randn(c2, MST_DTYPE_F32, 1, (int64_t[]){100}, 0, 1);
    assert_memory_equal(mst_tensor_data(a), mst_tensor_data(b), 400);
    assert_int_equal(mst_ctx_next_seed(c1), mst_ctx_next_seed(c2));
    mst_ctx_free(c1);
    mst_ctx_free(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_accounting),
        cmocka_unit_test(test_alloc_reserved),
        cmocka_unit_test(test_alloc_size_classes),
        cmocka_unit_test(test_alloc_fail_at),
        cmocka_unit_test(test_oom_every_allocation),
        cmocka_unit_test(test_pool_releases),
        cmocka_unit_test(test_tensor_basics),
        cmocka_unit_test(test_dispatch_arity_and_null),
        cmocka_unit_test(test_dispatch_other_context),
        cmocka_unit_test(test_dispatch_half_without_native_kernel),
        cmocka_unit_test(test_every_op_has_a_descriptor),
        cmocka_unit_test(test_backward_errors),
        cmocka_unit_test(test_leaf_grads_survive_pool),
        cmocka_unit_test(test_leaf_grad_not_shared),
        cmocka_unit_test(test_no_grad_records_nothing),
        cmocka_unit_test(test_promotion_keeps_input_grad_dtype),
        cmocka_unit_test(test_dtype_promotion_table),
        cmocka_unit_test(test_philox_known_answer), cmocka_unit_test(test_philox16),
        cmocka_unit_test(test_rng_reproducible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
