/* test_underflow.c — the partial-underflow measurement (runtime/amp/underflow.h):
 *   counting: known f32 reference / half gradients give known counts and fractions, in f16 and bf16,
 *             at the rounding boundaries (2^-25 ties to zero in f16; just above it rounds to the
 *             smallest subnormal), and across the 1024-element chunks;
 *   probe:    on a small linear classifier whose gradients sit near f16's subnormal range, a scale
 *             of 1 loses most gradient elements and a scale of 2^24 none; on a cnn with batch norm
 *             the probe leaves parameters, buffers, the random generator and the amp settings
 *             bitwise as they were, and no gradient behind; O0 is refused. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/autocast.h"
#include "runtime/amp/underflow.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "workloads/zoo.h"

static void test_count_f16(void **state) {
    (void)state;
    /* ref: 0 and inf are not counted; the rest are nonzero and finite */
    const float ref[] = {0, 1e-3f, 0x1p-25f, 0x1.02p-25f, 0x1p-14f, 1e-10f, INFINITY, -3e-8f, 1e-5f, NAN};
    const float got[] = {0, 1e-3f, 0, 0, 0x1p-14f, 0, 0, 5.96e-8f, 1e-5f, 0};
    mst_underflow_counts c = {0};
    mst_underflow_count(MST_DTYPE_F16, ref, got, 10, &c);
    assert_int_equal(c.elements, 10);
    assert_int_equal(c.ref_nonzero, 7);      /* 1e-3, 2^-25, 1.01*2^-25, 2^-14, 1e-10, -3e-8, 1e-5 */
    assert_int_equal(c.half_zero, 3);        /* 2^-25, 1.01*2^-25, 1e-10 came back zero */
    assert_int_equal(c.cast_zero, 2);        /* 2^-25 (a tie, to even: zero) and 1e-10 round to zero */
    assert_int_equal(c.cast_subnormal, 3);   /* 1.01*2^-25 -> 2^-24, -3e-8 -> -2^-24, 1e-5 */
    assert_true(fabs(mst_underflow_fraction(&c) - 3.0 / 7.0) < 1e-15);
    /* counts add up over calls */
    mst_underflow_count(MST_DTYPE_F16, ref, ref, 10, &c);
    assert_int_equal(c.ref_nonzero, 14);
    assert_int_equal(c.half_zero, 3);
    assert_true(fabs(mst_underflow_fraction(&c) - 3.0 / 14.0) < 1e-15);
    mst_underflow_counts none = {0};
    assert_true(mst_underflow_fraction(&none) == 0);
}

static void test_count_bf16(void **state) {
    (void)state;
    /* bf16 has f32's exponent range: 1e-30 is normal, 1e-39 (f32 subnormal) is bf16-subnormal,
     * the smallest f32 subnormal (2^-149) is below bf16's (2^-133) and rounds to zero */
    const float ref[] = {1e-30f, 1e-39f, 0x1p-149f, 1e-3f};
    const float got[] = {1e-30f, 0, 0, 1e-3f};
    mst_underflow_counts c = {0};
    mst_underflow_count(MST_DTYPE_BF16, ref, got, 4, &c);
    assert_int_equal(c.ref_nonzero, 4);
    assert_int_equal(c.half_zero, 2);
    assert_int_equal(c.cast_zero, 1);
    assert_int_equal(c.cast_subnormal, 1);
    assert_true(mst_underflow_fraction(&c) == 0.5);
}

static void test_count_chunks(void **state) {
    (void)state;
    enum { N = 2500 };      /* more than two 1024-element chunks, and a partial one */
    float *ref = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    assert_true(ref && got);
    int64_t want_zero = 0, want_cast = 0;
    for (int i = 0; i < N; i++) {
        ref[i] = i % 3 == 0 ? 1e-9f : 0.25f;        /* 1e-9 < 2^-25: rounds to zero in f16 */
        got[i] = i % 5 == 0 ? 0 : ref[i];
        want_zero += i % 5 == 0;
        want_cast += i % 3 == 0;
    }
    mst_underflow_counts c = {0};
    mst_underflow_count(MST_DTYPE_F16, ref, got, N, &c);
    assert_int_equal(c.elements, N);
    assert_int_equal(c.ref_nonzero, N);
    assert_int_equal(c.half_zero, want_zero);
    assert_int_equal(c.cast_zero, want_cast);
    assert_int_equal(c.cast_subnormal, 0);
    free(ref);
    free(got);
}

/* ---- the probe ---- */

/* logits = 2^-20 * (x W^T): the gradient reaching the linear op is ~2^-20 * 2^-8, below f16's smallest
 * subnormal (2^-24) unless the loss is scaled */
typedef struct {
    mst_tensor *w;
} lin_impl;

static mst_tensor *lin_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    (void)training;
    lin_impl *p = m->impl;
    return mst_scale(ctx, mst_linear(ctx, mst_reshape(ctx, x, 2, (int64_t[]){-1, 16}), p->w, NULL), 0x1p-20);
}

static void batch(mst_ctx *ctx, int64_t n, int64_t c, int64_t h, int64_t w, mst_tensor **x, mst_tensor **y) {
    *x = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, c, h, w});
    *y = mst_tensor_new(ctx, MST_DTYPE_I32, 1, (int64_t[]){n});
    for (int64_t i = 0; i < (*x)->numel; i++) mst_tensor_f32(*x)[i] = (float)sin(0.37 * (double)i + 0.1);
    for (int64_t i = 0; i < n; i++) mst_tensor_i32(*y)[i] = (int32_t)(i * 7 % 4);
}

static double probe_fraction(mst_ctx *ctx, mst_model *m, double scale, mst_tensor *x, mst_tensor *y) {
    mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_FIXED);
    lc.init = scale;
    mst_loss_scaler *ls = mst_loss_scaler_new(ctx, &lc);
    assert_non_null(ls);
    mst_underflow_counts c = {0};
    assert_int_equal(mst_underflow_probe(ctx, m, ls, 1, &x, &y, &c), MST_OK);
    assert_int_equal(c.elements, 4 * 16);
    assert_true(c.ref_nonzero > 32);
    mst_loss_scaler_free(ls);
    return mst_underflow_fraction(&c);
}

static void test_probe_scale(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_model *m = calloc(1, sizeof(*m));
    lin_impl *p = calloc(1, sizeof(*p));
    assert_true(m && p);
    m->impl = p;
    m->forward = lin_forward;
    p->w = mst_model_param(m, ctx, "w", 2, (int64_t[]){4, 16}, 0.5);
    assert_non_null(p->w);
    mst_tensor *x, *y;
    mst_pool_push(ctx);
    batch(ctx, 64, 1, 4, 4, &x, &y);
    assert_int_equal(mst_amp_set(ctx, 2, MST_DTYPE_F16), MST_OK);
    double lost_1 = probe_fraction(ctx, m, 1, x, y), lost_big = probe_fraction(ctx, m, 16777216, x, y);
    if (!(lost_1 > 0.5 && lost_big == 0)) fail_msg("lost %g with scale 1, %g with 2^24", lost_1, lost_big);
    assert_true(lost_1 > 0.5);      /* most elements below 2^-24 without a scale */
    assert_true(lost_big == 0);     /* none with 2^24 */
    /* O0 has nothing to compare */
    assert_int_equal(mst_amp_set(ctx, 0, MST_DTYPE_F16), MST_OK);
    mst_underflow_counts c = {0};
    assert_int_equal(mst_underflow_probe(ctx, m, NULL, 1, &x, &y, &c), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "amp level"));
    mst_ctx_clear_error(ctx);
    mst_pool_pop(ctx);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

static mst_tensor *snapshot(mst_ctx *ctx, const mst_tensor *t) { return mst_tensor_clone(ctx, t); }

static void test_probe_leaves_state(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(NULL);
    char err[256];
    mst_model_spec spec = {.name = "cnn", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 4, .width = 4, .blocks = 1};
    mst_model *m = mst_zoo_model_new(ctx, &spec, err, sizeof(err));
    assert_non_null(m);
    assert_true(m->n_buffers > 0);      /* batch-norm running statistics: a training forward moves them */
    mst_pool_push(ctx);
    mst_tensor *x, *y;
    batch(ctx, 16, 1, 8, 8, &x, &y);
    mst_tensor *before[64];
    int n = m->n_params + m->n_buffers;
    assert_true(n <= 64);
    for (int i = 0; i < m->n_params; i++) before[i] = snapshot(ctx, m->params[i]);
    for (int i = 0; i < m->n_buffers; i++) before[m->n_params + i] = snapshot(ctx, m->buffers[i]);
    mst_rng rng = ctx->rng;
    assert_int_equal(mst_amp_set(ctx, 3, MST_DTYPE_BF16), MST_OK);
    mst_underflow_counts c = {0};
    assert_int_equal(mst_underflow_probe(ctx, m, NULL, 2, (mst_tensor *[]){x, x}, (mst_tensor *[]){y, y}, &c), MST_OK);
    assert_true(c.ref_nonzero > 0);
    assert_int_equal(ctx->amp_level, 3);
    assert_int_equal(ctx->amp_dtype, MST_DTYPE_BF16);
    assert_memory_equal(&ctx->rng, &rng, sizeof(rng));
    for (int i = 0; i < n; i++) {
        const mst_tensor *t = i < m->n_params ? m->params[i] : m->buffers[i - m->n_params];
        assert_memory_equal(mst_tensor_data(t), mst_tensor_data(before[i]), mst_tensor_nbytes(t));
        if (i < m->n_params) assert_null(t->grad);
    }
    mst_pool_pop(ctx);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

/* The probe schedule's budget: the first two probes always run; later ones while the warm probes
 * (all but the cold first) and the next (estimated as the last) fit in the budget's share of the
 * loop; a budget of 1 or more runs every due probe. */
static void test_budget(void **state) {
    (void)state;
    assert_true(mst_underflow_within_budget(0, 0, 0, 0, 0, 0.01));
    assert_true(mst_underflow_within_budget(1, 300e6, 300e6, 300e6, 1e6, 0.01));     /* step N: always */
    /* first 300 ms (cold), one warm 30 ms: the next warm 30 ms needs 6 s of loop at 1% */
    assert_false(mst_underflow_within_budget(2, 300e6, 30e6, 330e6, 5.9e9, 0.01));
    assert_true(mst_underflow_within_budget(2, 300e6, 30e6, 330e6, 6.0e9, 0.01));
    assert_true(mst_underflow_within_budget(2, 300e6, 30e6, 330e6, 1e6, 1.0));
    /* the cold first probe is not what limits the later ones */
    assert_true(mst_underflow_within_budget(3, 5e9, 30e6, 5.06e9, 9e9, 0.01));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_f16),
        cmocka_unit_test(test_count_bf16),
        cmocka_unit_test(test_count_chunks),
        cmocka_unit_test(test_probe_scale),
        cmocka_unit_test(test_probe_leaves_state),  cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
