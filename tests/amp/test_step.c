/* test_step.c — the training step (runtime/step.h) end to end on small models:
 *   overflow:     a dynamic scaler from 2**30 under O2 f16 skips exactly the steps the gradient
 *                 magnitudes predict, settles at the predicted scale, and leaves the parameters
 *                 bitwise untouched on every skipped step;
 *   underflow:    gradients below f16's smallest subnormal vanish in O2 without scaling (nothing
 *                 moves, accuracy stuck) and survive with dynamic scaling (parameters move, loss
 *                 falls, accuracy rises);
 *   accumulation: 4 micro-batches of 16 match one batch of 64;
 *   clipping:     the global norm and the clipped gradients match a direct computation.
 * The f16 tests need the autocast of runtime/amp/autocast.h. */
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
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"
#include "runtime/step.h"
#include "workloads/zoo.h"

/* ---- a bias-free linear classifier, logits = c * (x W^T), for exact gradient control ---- */

typedef struct {
    mst_tensor *w;      /* (C, D) */
    int64_t d;
    double c;
} linear_impl;

static mst_tensor *linear_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    (void)training;
    linear_impl *p = m->impl;
    mst_tensor *y = mst_linear(ctx, mst_reshape(ctx, x, 2, (int64_t[]){-1, p->d}), p->w, NULL);
    return p->c == 1 ? y : mst_scale(ctx, y, p->c);
}

static mst_model *linear_new(mst_ctx *ctx, int64_t classes, int64_t d, double c, double bound) {
    mst_model *m = calloc(1, sizeof(*m));
    linear_impl *p = calloc(1, sizeof(*p));
    assert_true(m && p);
    snprintf(m->name, sizeof(m->name), "linear");
    m->impl = p;
    m->forward = linear_forward;
    p->d = d;
    p->c = c;
    p->w = mst_model_param(m, ctx, "w", 2, (int64_t[]){classes, d}, bound);
    assert_non_null(p->w);
    return m;
}

/* ±1 inputs from a fixed LCG; labels from a fixed ±1 teacher (argmax of x . T_c). */
static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

static void teacher_data(mst_ctx *ctx, int64_t n, int64_t d, int64_t classes, uint32_t seed, mst_tensor **x, mst_tensor **y) {
    uint32_t s = 12345;
    double t[8][32];
    for (int64_t c = 0; c < classes; c++)
        for (int64_t j = 0; j < d; j++) t[c][j] = (lcg(&s) >> 16) & 1 ? 1 : -1;
    s = seed;
    *x = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, 1, 1, d});
    *y = mst_tensor_new(ctx, MST_DTYPE_I32, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++) {
        double best = -1e9;
        int32_t label = 0;
        for (int64_t j = 0; j < d; j++) mst_tensor_f32(*x)[i * d + j] = (lcg(&s) >> 16) & 1 ? 1.0f : -1.0f;
        for (int64_t c = 0; c < classes; c++) {
            double v = 0;
            for (int64_t j = 0; j < d; j++) v += t[c][j] * mst_tensor_f32(*x)[i * d + j];
            v += 1e-3 * (double)c;      /* ties go to the higher class, deterministically */
            if (v > best) { best = v; label = (int32_t)c; }
        }
        mst_tensor_i32(*y)[i] = label;
    }
}

static double accuracy(mst_ctx *ctx, mst_model *m, mst_tensor *x, mst_tensor *y) {
    mst_tensor *logits, *loss;
    assert_int_equal(mst_step_eval(ctx, m, x, y, &logits, &loss), MST_OK);
    int64_t n = logits->shape[0], classes = logits->shape[1], right = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
            if (mst_tensor_get(logits, i * classes + c) > mst_tensor_get(logits, i * classes + best)) best = c;
        right += best == mst_tensor_i32(y)[i];
    }
    return (double)right / (double)n;
}

static double f16_round(double v) { return mst_f16_to_f32(mst_f32_to_f16((float)v)); }

/* ---- overflow ---- */

/* max over |dL/dlogits| and |dL/dW| at scale 1, in double from the f16-rounded inputs O2 uses. */
static double max_gradient(const mst_tensor *w, const mst_tensor *x, const mst_tensor *y) {
    const int64_t classes = w->shape[0], d = w->shape[1], n = x->shape[0];
    double g_w[8][32] = {{0}}, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double logit[8], mx = -1e300, z = 0;
        for (int64_t c = 0; c < classes; c++) {
            double v = 0;
            for (int64_t j = 0; j < d; j++) v += f16_round(mst_tensor_f32(w)[c * d + j]) * f16_round(mst_tensor_f32(x)[i * d + j]);
            logit[c] = f16_round(v);
            mx = fmax(mx, logit[c]);
        }
        for (int64_t c = 0; c < classes; c++) z += exp(logit[c] - mx);
        for (int64_t c = 0; c < classes; c++) {
            double g = (exp(logit[c] - mx) / z - (c == mst_tensor_i32(y)[i])) / (double)n;
            worst = fmax(worst, fabs(g));
            for (int64_t j = 0; j < d; j++) g_w[c][j] += g * f16_round(mst_tensor_f32(x)[i * d + j]);
        }
    }
    for (int64_t c = 0; c < classes; c++)
        for (int64_t j = 0; j < d; j++) worst = fmax(worst, fabs(g_w[c][j]));
    return worst;
}

static void test_overflow_skips_and_settles(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = 1});
    assert_int_equal(mst_amp_set(ctx, 2, MST_DTYPE_F16), MST_OK);
    mst_model *m = linear_new(ctx, 4, 16, 1.0, 0.5);
    mst_tensor *x, *y;
    teacher_data(ctx, 8, 16, 4, 99, &x, &y);
    mst_tensor_retain(x), mst_tensor_retain(y);

    /* The prediction: scaled gradients pass through f16, whose largest finite value is 65504;
     * a step overflows while G * scale >= 65504. Each overflow halves the scale and skips the
     * update, so the gradients stay the same until the first clean step. */
    const double g_max = max_gradient(m->params[0], x, y), f16_max = 65504;
    int k = 0;
    while (g_max * ldexp(1, 30 - k) >= f16_max) k++;
    const double settled = ldexp(1, 30 - k), margin = g_max * settled / f16_max;
    if (margin < 0.55 || margin > 0.95) fail_msg("data too close to the f16 boundary to predict exactly (%.3f)", margin);
    assert_true(k >= 10);      /* the test exercises many skips: 2**30 is far above what f16 tolerates */

    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    oc.lr = 1e-3;
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    lc.init = ldexp(1, 30);
    lc.window = 1000;
    mst_loss_scaler *ls = mst_loss_scaler_new(ctx, &lc);
    assert_true(opt && ls);
    mst_step_spec spec = {.model = m, .optim = opt, .scaler = ls, .accumulate = 1};
    const int64_t nw = m->params[0]->numel;
    float before[64];
    for (int step = 0; step < k + 4; step++) {
        memcpy(before, mst_tensor_f32(m->params[0]), (size_t)nw * sizeof(float));
        mst_pool_push(ctx);
        mst_step_outputs out;
        mst_step_record rec;
        assert_int_equal(mst_optim_set_lr(opt, oc.lr), MST_OK);
        if (mst_step_run(ctx, &spec, &x, &y, &out) != MST_OK || mst_step_finish(ctx, &spec, &out, &rec) != MST_OK)
            fail_msg("step %d: %s", step, mst_ctx_error(ctx));
        mst_pool_pop(ctx);
        bool expect_skip = step < k;
        if (rec.overflow != expect_skip || rec.skipped != expect_skip)
            fail_msg("step %d: overflow %d skipped %d, predicted %d (k = %d, G = %g)", step, rec.overflow, rec.skipped,
                     expect_skip, k, g_max);
        assert_true(isfinite(rec.loss));
        if (expect_skip) {
            assert_memory_equal(before, mst_tensor_f32(m->params[0]), (size_t)nw * sizeof(float));
            assert_true(rec.loss_scale == ldexp(1, 29 - step));
        } else {
            assert_memory_not_equal(before, mst_tensor_f32(m->params[0]), (size_t)nw * sizeof(float));
            assert_true(rec.loss_scale == settled);
        }
    }
    assert_int_equal(mst_loss_scaler_skipped_steps(ls), k);
    assert_int_equal(mst_loss_scaler_overflow_steps(ls), k);
    assert_int_equal(mst_optim_steps(opt), 4);
    assert_true(mst_tensor_get(mst_loss_scaler_good_steps(ls), 0) == 4.0);
    mst_loss_scaler_free(ls);
    mst_optim_free(opt);
    mst_tensor_release(x), mst_tensor_release(y);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

/* ---- underflow ---- */

typedef struct {
    double loss0, loss_end, acc0, acc_end;
    bool moved;
} run_result;

/* 512 samples, logits = 2**-16 x W^T: |dL/dlogits| <= 1/512, so the gradient reaching the
 * linear layer is below 2**-25, half of f16's smallest subnormal: it rounds to zero in f16. */
static run_result underflow_run(bool scaled) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 1});
    assert_int_equal(mst_amp_set(ctx, 2, MST_DTYPE_F16), MST_OK);
    mst_model *m = linear_new(ctx, 4, 16, ldexp(1, -16), 0.1);
    mst_tensor *x, *y;
    teacher_data(ctx, 512, 16, 4, 5, &x, &y);
    mst_tensor_retain(x), mst_tensor_retain(y);
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_ADAM);
    oc.lr = 300;
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    mst_loss_scaler *ls = scaled ? mst_loss_scaler_new(ctx, &lc) : NULL;
    mst_step_spec spec = {.model = m, .optim = opt, .scaler = ls, .accumulate = 1};
    run_result r = {0};
    float w0[64];
    memcpy(w0, mst_tensor_f32(m->params[0]), sizeof(float) * 64);
    mst_pool_push(ctx);
    r.acc0 = accuracy(ctx, m, x, y);
    mst_pool_pop(ctx);
    for (int step = 0; step < 6; step++) {
        mst_pool_push(ctx);
        mst_step_outputs out;
        mst_step_record rec;
        if (mst_step_run(ctx, &spec, &x, &y, &out) != MST_OK || mst_step_finish(ctx, &spec, &out, &rec) != MST_OK)
            fail_msg("step %d: %s", step, mst_ctx_error(ctx));
        if (step == 0) r.loss0 = rec.loss;
        mst_pool_pop(ctx);
    }
    mst_pool_push(ctx);
    mst_tensor *logits, *loss;
    assert_int_equal(mst_step_eval(ctx, m, x, y, &logits, &loss), MST_OK);
    r.loss_end = mst_tensor_get(loss, 0);
    r.acc_end = accuracy(ctx, m, x, y);
    mst_pool_pop(ctx);
    r.moved = memcmp(w0, mst_tensor_f32(m->params[0]), sizeof(float) * 64) != 0;
    print_message("underflow %s: loss %.6f -> %.6f, accuracy %.3f -> %.3f\n", scaled ? "dynamic" : "none", r.loss0, r.loss_end,
                  r.acc0, r.acc_end);
    mst_loss_scaler_free(ls);
    mst_optim_free(opt);
    mst_tensor_release(x), mst_tensor_release(y);
    mst_model_free(m);
    mst_ctx_free(ctx);
    return r;
}

static void test_underflow_needs_scaling(void **state) {
    run_result plain = underflow_run(false), scaled = underflow_run(true);
    assert_false(plain.moved);                       /* every gradient was exactly zero */
    assert_true(plain.acc_end == plain.acc0);
    assert_true(plain.loss_end == plain.loss0);
    assert_true(scaled.moved);
    assert_true(scaled.loss_end < scaled.loss0 - 0.05);
    assert_true(scaled.acc_end > scaled.acc0 + 0.2);
}

/* ---- accumulation ---- */

static mst_model *small_mlp(mst_ctx *ctx) {
    mst_model_spec spec = {.name = "mlp", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 10, .hidden1 = 32, .hidden2 = 16};
    mst_model *m = mst_mlp_new(ctx, &spec);
    assert_non_null(m);
    return m;
}

static mst_tensor *images(mst_ctx *ctx, int64_t n, int64_t first) {
    mst_tensor *x = mst_tensor_new(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, 1, 8, 8});
    for (int64_t i = 0; i < n * 64; i++) mst_tensor_f32(x)[i] = (float)sin(0.37 * (double)(first * 64 + i) + 0.1);
    return x;
}

static mst_tensor *labels(mst_ctx *ctx, int64_t n, int64_t first) {
    mst_tensor *y = mst_tensor_new(ctx, MST_DTYPE_I32, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++) mst_tensor_i32(y)[i] = (int32_t)((first + i) * 7 % 10);
    return y;
}

static void train_mlp(mst_ctx *ctx, mst_model *m, int accumulate, double clip, int steps, double lr, double momentum,
                      double *norm_out) {
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    oc.lr = lr;
    oc.momentum = momentum;
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    assert_non_null(opt);
    mst_step_spec spec = {.model = m, .optim = opt, .clip_grad_norm = clip, .accumulate = accumulate};
    for (int step = 0; step < steps; step++) {
        mst_pool_push(ctx);
        mst_tensor *x[4], *y[4];
        int64_t per = 64 / accumulate;
        for (int k = 0; k < accumulate; k++) {
            x[k] = images(ctx, per, step * 64 + k * per);
            y[k] = labels(ctx, per, step * 64 + k * per);
        }
        mst_step_outputs out;
        mst_step_record rec;
        if (mst_step_run(ctx, &spec, x, y, &out) != MST_OK || mst_step_finish(ctx, &spec, &out, &rec) != MST_OK)
            fail_msg("step %d: %s", step, mst_ctx_error(ctx));
        assert_false(rec.overflow);
        if (norm_out) *norm_out = rec.grad_norm;
        mst_pool_pop(ctx);
    }
    assert_int_equal(mst_optim_steps(opt), steps);
    mst_optim_free(opt);
}

static void test_accumulation_matches_big_batch(void **state) {
    mst_ctx *a = mst_ctx_new(&(mst_ctx_config){.seed = 11, .n_threads = 1});
    mst_ctx *b = mst_ctx_new(&(mst_ctx_config){.seed = 11, .n_threads = 1});
    mst_model *ma = small_mlp(a), *mb = small_mlp(b);
    train_mlp(a, ma, 4, 0, 3, 0.05, 0.9, NULL);
    train_mlp(b, mb, 1, 0, 3, 0.05, 0.9, NULL);
    double worst = 0;
    for (int p = 0; p < ma->n_params; p++)
        for (int64_t i = 0; i < ma->params[p]->numel; i++) {
            double u = mst_tensor_get(ma->params[p], i), v = mst_tensor_get(mb->params[p], i);
            worst = fmax(worst, fabs(u - v) / fmax(fabs(v), 1e-2));
        }
    print_message("accumulation: worst relative difference %.3g\n", worst);
    assert_true(worst <= 1e-5);
    mst_model_free(ma), mst_model_free(mb);
    mst_ctx_free(a), mst_ctx_free(b);
}

/* ---- clipping ---- */

static void test_clipping_matches_direct(void **state) {
    mst_ctx *a = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 1});
    mst_ctx *b = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 1});
    mst_model *ma = small_mlp(a), *mb = small_mlp(b);
    /* direct: plain forward/backward, the norm in double, p - lr * coef * g */
    mst_pool_push(b);
    mst_tensor *loss = mst_cross_entropy(b, mb->forward(mb, b, images(b, 64, 0), true), labels(b, 64, 0));
    assert_int_equal(mst_backward(b, loss), MST_OK);
    double sq = 0;
    for (int p = 0; p < mb->n_params; p++)
        for (int64_t i = 0; i < mb->params[p]->numel; i++) sq += pow(mst_tensor_get(mb->params[p]->grad, i), 2);
    const double norm = sqrt(sq), max_norm = norm / 4, coef = max_norm / (norm + 1e-6), lr = 1.0;
    double norm_got = -1;
    train_mlp(a, ma, 1, max_norm, 1, lr, 0, &norm_got);
    print_message("clipping: norm %.9g (step %.9g), coef %.6f\n", norm, norm_got, coef);
    assert_true(fabs(norm_got - norm) <= 1e-5 * norm);
    for (int p = 0; p < mb->n_params; p++)
        for (int64_t i = 0; i < mb->params[p]->numel; i++) {
            double p0 = mst_tensor_get(mb->params[p], i), g = mst_tensor_get(mb->params[p]->grad, i);
            double clipped_got = (p0 - mst_tensor_get(ma->params[p], i)) / lr, clipped_want = coef * g;
            if (fabs(clipped_got - clipped_want) > 1e-6 + 1e-4 * fabs(clipped_want))
                fail_msg("param %d element %lld: clipped gradient %.9g, want %.9g", p, (long long)i, clipped_got, clipped_want);
        }
    mst_zero_grad(mb->params, mb->n_params);
    mst_pool_pop(b);
    mst_model_free(ma), mst_model_free(mb);
    mst_ctx_free(a), mst_ctx_free(b);
}

static void test_spec_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_model *m = small_mlp(ctx);
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    mst_tensor *x = images(ctx, 4, 0), *y = labels(ctx, 4, 0);
    mst_step_outputs out;
    mst_step_spec spec = {.model = m, .optim = opt, .accumulate = 0};
    assert_int_equal(mst_step_run(ctx, &spec, &x, &y, &out), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "accumulate must be in 1..64, got 0"));
    mst_ctx_clear_error(ctx);
    spec.accumulate = 1;
    spec.clip_grad_norm = -1;
    assert_int_equal(mst_step_run(ctx, &spec, &x, &y, &out), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "clip_grad_norm must be finite and >= 0, got -1"));
    mst_ctx_clear_error(ctx);
    assert_null(out.loss);
    mst_optim_free(opt);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overflow_skips_and_settles), cmocka_unit_test(test_underflow_needs_scaling),
        cmocka_unit_test(test_accumulation_matches_big_batch), cmocka_unit_test(test_clipping_matches_direct),
        cmocka_unit_test(test_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
