/* test_autocast.c — MindSpore amp levels on a tiny conv-bn-relu-conv-linear model: which ops run
 * in which dtype per level (read off the autograd tape), parameter casts once per step (not per
 * use), f32 gradients close to O0's, never-cast rules (mutated running statistics, integer labels,
 * shape ops), the policy table itself, and an f16 O2 mlp whose loss falls over 50 steps. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/autocast.h"
#include "runtime/amp/half.h"
#include "tests/runtime/gradcheck.h"
#include "workloads/zoo.h"

/* x (4, 2, 6, 6) -> conv(w, b) -> batchnorm -> relu -> conv(w, b) again -> global avgpool
 * -> linear(lw, lb) (3 classes) -> cross entropy */
typedef struct {
    mst_tensor *w, *b, *gamma, *beta, *lw, *lb;     /* parameters */
    mst_tensor *rmean, *rvar;                       /* running statistics */
    mst_tensor *x, *labels;
    mst_tensor *conv_out;                           /* what the first mst_conv2d returned */
} tiny;

enum { N_PARAMS = 6 };

static mst_tensor **params(tiny *m) {
    static __thread mst_tensor *p[N_PARAMS];
    mst_tensor *q[N_PARAMS] = {m->w, m->b, m->gamma, m->beta, m->lw, m->lb};
    memcpy(p, q, sizeof(q));
    return p;
}

static void tiny_init(mst_ctx *ctx, tiny *m) {
    m->w = mst_param_new(ctx, "conv.w", MST_DTYPE_F32, 4, (int64_t[]){2, 2, 3, 3});
    m->b = mst_param_new(ctx, "conv.b", MST_DTYPE_F32, 1, (int64_t[]){2});
    m->gamma = mst_param_new(ctx, "bn.gamma", MST_DTYPE_F32, 1, (int64_t[]){2});
    m->beta = mst_param_new(ctx, "bn.beta", MST_DTYPE_F32, 1, (int64_t[]){2});
    m->lw = mst_param_new(ctx, "fc.w", MST_DTYPE_F32, 2, (int64_t[]){3, 2});
    m->lb = mst_param_new(ctx, "fc.b", MST_DTYPE_F32, 1, (int64_t[]){3});
    m->rmean = mst_state_new(ctx, "bn.mean", MST_DTYPE_F32, 1, (int64_t[]){2}, MST_MEM_PARAM);
    m->rvar = mst_state_new(ctx, "bn.var", MST_DTYPE_F32, 1, (int64_t[]){2}, MST_MEM_PARAM);
    mst_tensor_fill_randn(ctx, m->w, 0, 0.4);
    mst_tensor_fill_randn(ctx, m->b, 0, 0.1);
    mst_tensor_fill_rand(ctx, m->gamma, 0.8, 1.2);
    mst_tensor_fill_randn(ctx, m->beta, 0, 0.1);
    mst_tensor_fill_randn(ctx, m->lw, 0, 0.5);
    mst_tensor_fill_randn(ctx, m->lb, 0, 0.1);
    mst_tensor_fill(m->rvar, 1.0);
    m->x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 2, 6, 6}, 0, 1));
    m->labels = mst_tensor_retain(mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){4}, (int32_t[]){0, 2, 1, 2}));
}

static void tiny_free(tiny *m) {
    mst_tensor **p = params(m);
    for (int i = 0; i < N_PARAMS; i++) mst_tensor_release(p[i]);
    mst_tensor_release(m->rmean);
    mst_tensor_release(m->rvar);
    mst_tensor_release(m->x);
    mst_tensor_release(m->labels);
}

static mst_tensor *tiny_forward(mst_ctx *ctx, tiny *m) {
    mst_tensor *h = mst_conv2d(ctx, m->x, m->w, m->b, 1, 1, 1, 1);
    m->conv_out = h;
    h = mst_relu(ctx, mst_batchnorm(ctx, h, m->gamma, m->beta, m->rmean, m->rvar, true, 0.1, 1e-5));
    h = mst_conv2d(ctx, h, m->w, m->b, 1, 1, 1, 1);
    h = mst_linear(ctx, mst_global_avgpool(ctx, h), m->lw, m->lb);
    return mst_cross_entropy(ctx, h, m->labels);
}

/* The first tape entry of op, or fail. */
static const mst_op_call *tape_find(mst_ctx *ctx, mst_op op) {
    for (size_t i = 0; i < ctx->tape_len; i++)
        if (ctx->tape[i].op == op) return &ctx->tape[i];
    fail_msg("no %s on the tape", mst_op_name(op));
    return NULL;
}

static int tape_param_casts(mst_ctx *ctx) {
    int n = 0;
    for (size_t i = 0; i < ctx->tape_len; i++) n += ctx->tape[i].op == MST_OP_CAST && ctx->tape[i].in[0]->persistent;
    return n;
}

static int tape_count(mst_ctx *ctx, mst_op op) {
    int n = 0;
    for (size_t i = 0; i < ctx->tape_len; i++) n += ctx->tape[i].op == op;
    return n;
}

typedef struct {
    mst_dtype conv, conv_returns, bn, bn_params, relu, linear, loss;
    int param_casts;
} level_expect;

/* One forward and backward at `level`; checks the dtypes each op ran in and the cast count, and
 * leaves the gradients in the parameters. */
static void step_at(mst_ctx *ctx, tiny *m, int level, mst_dtype half, const level_expect *e) {
    mst_zero_grad(params(m), N_PARAMS);
    assert_int_equal(mst_amp_set(ctx, level, half), MST_OK);
    mst_pool_push(ctx);
    uint64_t casts0 = mst_amp_cache_casts(ctx);
    float rv0 = mst_tensor_f32(m->rvar)[0];
    mst_amp_autocast(ctx, true);
    mst_tensor *loss = tiny_forward(ctx, m);
    mst_amp_autocast(ctx, false);
    if (!loss) fail_msg("O%d %s: %s", level, mst_dtype_name(half), mst_ctx_error(ctx));
    const mst_op_call *conv = tape_find(ctx, MST_OP_CONV2D), *bn = tape_find(ctx, MST_OP_BATCHNORM);
    assert_int_equal(conv->in[0]->dtype, e->conv);
    assert_int_equal(conv->in[1]->dtype, e->conv);
    assert_int_equal(conv->out[0]->dtype, e->conv);
    assert_int_equal(m->conv_out->dtype, e->conv_returns);
    assert_int_equal(bn->in[0]->dtype, e->bn);
    assert_int_equal(bn->in[1]->dtype, e->bn_params);
    assert_int_equal(bn->out[1]->dtype, e->bn_params);         /* saved statistics beside the parameters */
    assert_int_equal(bn->in[3]->dtype, MST_DTYPE_F32);         /* running statistics: mutated, never cast */
    assert_int_equal(bn->in[4]->dtype, MST_DTYPE_F32);
    assert_ptr_equal(bn->in[3], m->rmean);
    assert_int_equal(tape_find(ctx, MST_OP_RELU)->in[0]->dtype, e->relu);
    assert_int_equal(tape_find(ctx, MST_OP_LINEAR)->in[0]->dtype, e->linear);
    assert_int_equal(tape_find(ctx, MST_OP_CROSS_ENTROPY)->in[1]->dtype, MST_DTYPE_I32);   /* integer: never cast */
    assert_int_equal(loss->dtype, e->loss);
    assert_true(mst_tensor_f32(m->rvar)[0] != rv0);            /* the f32 running statistics were updated */
    /* parameters are cast once per step, not once per use (w and b feed two convs) */
    assert_int_equal(tape_count(ctx, MST_OP_CONV2D), 2);
    assert_int_equal(tape_param_casts(ctx), e->param_casts);
    assert_int_equal((int)(mst_amp_cache_casts(ctx) - casts0), e->param_casts);
    if (level == 0) assert_int_equal(tape_count(ctx, MST_OP_CAST), 0);
    if (mst_backward(ctx, loss) != MST_OK) fail_msg("O%d backward: %s", level, mst_ctx_error(ctx));
    mst_pool_pop(ctx);
    mst_tensor **p = params(m);
    for (int i = 0; i < N_PARAMS; i++) {
        assert_non_null(p[i]->grad);
        assert_int_equal(p[i]->grad->dtype, MST_DTYPE_F32);   /* the cast's backward brings them to f32 */
    }
}

/* Copies of the parameters' gradients as doubles. */
static double *grads_of(tiny *m, int *n) {
    mst_tensor **p = params(m);
    int64_t total = 0;
    for (int i = 0; i < N_PARAMS; i++) total += p[i]->numel;
    double *g = malloc((size_t)total * sizeof(double));
    int64_t k = 0;
    for (int i = 0; i < N_PARAMS; i++)
        for (int64_t j = 0; j < p[i]->numel; j++) g[k++] = mst_tensor_get(p[i]->grad, j);
    *n = (int)total;
    return g;
}

static void check_levels(mst_dtype half) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    tiny m;
    tiny_init(ctx, &m);
    const mst_dtype F = MST_DTYPE_F32, H = half;
    const level_expect expect[4] = {
        {F, F, F, F, F, F, F, 0},   /* O0: nothing cast */
        {H, F, F, F, H, H, F, 4},   /* O1: conv, relu, linear in half, their outputs back in f32; w, b, lw, lb */
        {H, H, H, F, H, H, F, 4},   /* O2: batchnorm's parameters and statistics and the loss in f32, the rest half */
        {H, H, H, H, H, H, H, 6},   /* O3: all half, gamma and beta cast too */
    };
    int n0 = 0;
    step_at(ctx, &m, 0, half, &expect[0]);
    double *g0 = grads_of(&m, &n0);
    for (int level = 1; level <= 3; level++) {
        for (int rep = 0; rep < 2; rep++) {     /* the second step casts afresh: backward emptied the cache */
            step_at(ctx, &m, level, half, &expect[level]);
            int n;
            double *g = grads_of(&m, &n);
            double err = 0, norm = 0;
            for (int i = 0; i < n; i++) {
                err += (g[i] - g0[i]) * (g[i] - g0[i]);
                norm += g0[i] * g0[i];
            }
            double rel = sqrt(err / norm), tol = half == MST_DTYPE_F16 ? 1e-2 : 6e-2;
            printf("O%d %s: gradient relative error %.2e against O0 (tolerance %.0e)\n", level, mst_dtype_name(half), rel, tol);
            if (!(rel < tol)) fail_msg("O%d %s: gradients differ from O0 by %.3g", level, mst_dtype_name(half), rel);
            free(g);
        }
    }
    free(g0);
    assert_false(ctx->autocast);
    tiny_free(&m);
    mst_ctx_free(ctx);
}

static void test_levels_f16(void **state) { check_levels(MST_DTYPE_F16); }
static void test_levels_bf16(void **state) { check_levels(MST_DTYPE_BF16); }

/* Shape ops, casts and integer inputs are left alone even at O3; backward runs with autocast off
 * and restores it; the cache empties after backward. */
static void test_never_cast(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    mst_amp_set(ctx, 3, MST_DTYPE_BF16);
    mst_amp_autocast(ctx, true);
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){4, 6}, 0, 1);
    mst_tensor *r = mst_reshape(ctx, x, 2, (int64_t[]){6, 4});
    assert_int_equal(r->dtype, MST_DTYPE_F32);
    assert_int_equal(mst_transpose(ctx, x, 0, 1)->dtype, MST_DTYPE_F32);
    assert_int_equal(mst_slice(ctx, x, 1, 1, 3)->dtype, MST_DTYPE_F32);
    assert_int_equal(mst_cast(ctx, x, MST_DTYPE_F64)->dtype, MST_DTYPE_F64);
    mst_tensor *y = mst_relu(ctx, x);
    assert_int_equal(y->dtype, MST_DTYPE_BF16);
    /* f64 (reference checks) is not an amp type: left as it is */
    assert_int_equal(mst_relu(ctx, mst_cast(ctx, x, MST_DTYPE_F64))->dtype, MST_DTYPE_F64);

    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 2, (int64_t[]){3, 6});
    mst_tensor_fill_randn(ctx, w, 0, 1);
    mst_tensor *loss = mst_mean(ctx, mst_linear(ctx, x, w, NULL), 0, false);
    assert_int_equal(mst_amp_cache_casts(ctx), 1);
    assert_int_equal(mst_backward(ctx, loss), MST_OK);
    assert_true(ctx->autocast);                 /* restored after backward */
    assert_int_equal(w->grad->dtype, MST_DTYPE_F32);
    /* a new use after backward casts again (the cache was cleared) */
    assert_non_null(mst_linear(ctx, x, w, NULL));
    assert_int_equal(mst_amp_cache_casts(ctx), 2);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_policy_table(void **state) {
    assert_int_equal(mst_amp_policy(MST_OP_CONV2D, 0), MST_AMP_NEVER);
    assert_int_equal(mst_amp_policy(MST_OP_CONV2D, 1), MST_AMP_HALF);
    assert_int_equal(mst_amp_policy(MST_OP_MATMUL, 1), MST_AMP_HALF);
    assert_int_equal(mst_amp_policy(MST_OP_LINEAR, 1), MST_AMP_HALF);
    assert_int_equal(mst_amp_policy(MST_OP_RELU, 1), MST_AMP_HALF);
    assert_int_equal(mst_amp_policy(MST_OP_ADD, 1), MST_AMP_NEVER);
    assert_int_equal(mst_amp_policy(MST_OP_BATCHNORM, 1), MST_AMP_NEVER);
    assert_true(mst_amp_casts_back(MST_OP_CONV2D, 1));
    assert_false(mst_amp_casts_back(MST_OP_CONV2D, 2));
    assert_int_equal(mst_amp_policy(MST_OP_ADD, 2), MST_AMP_HALF);
    assert_int_equal(mst_amp_policy(MST_OP_BATCHNORM, 2), MST_AMP_F32_PARAMS);
    assert_int_equal(mst_amp_policy(MST_OP_BATCHNORM, 3), MST_AMP_HALF);
    const mst_op keep[] = {MST_OP_LAYERNORM, MST_OP_SOFTMAX, MST_OP_LOG_SOFTMAX, MST_OP_CROSS_ENTROPY, MST_OP_SUM,
                           MST_OP_MEAN};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        assert_int_equal(mst_amp_policy(keep[i], 2), MST_AMP_F32);
        assert_int_equal(mst_amp_policy(keep[i], 3), MST_AMP_HALF);
    }
    const mst_op never[] = {MST_OP_CAST, MST_OP_RESHAPE, MST_OP_TRANSPOSE, MST_OP_CONCAT, MST_OP_SLICE,
                            MST_OP_SGD_UPDATE, MST_OP_ADAM_UPDATE};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        for (int level = 0; level <= 3; level++) assert_int_equal(mst_amp_policy(never[i], level), MST_AMP_NEVER);
    /* every grad op and every pure in-place update is never cast; so are ops the table does not name */
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d || !((d->flags & MST_OPF_GRAD_OP) || (d->mutates && d->n_outputs == 0))) continue;
        for (int level = 0; level <= 3; level++)
            if (mst_amp_policy((mst_op)op, level) != MST_AMP_NEVER) fail_msg("%s is cast at O%d", d->name, level);
    }
    const char *later[] = {"copy", "amp_unscale_check", "amp_update_scale", "clip_coef"};
    for (int i = 0; i < 4; i++) {
        int op = mst_op_parse(later[i]);
        if (op >= 0) assert_int_equal(mst_amp_policy((mst_op)op, 3), MST_AMP_NEVER);
    }
    assert_int_equal(mst_amp_policy((mst_op)MST_OP_COUNT, 3), MST_AMP_NEVER);
    assert_string_equal(mst_amp_level_name(2), "O2");
    assert_int_equal(mst_amp_level_parse("O3"), 3);
    assert_int_equal(mst_amp_level_parse("o1"), 1);
    assert_int_equal(mst_amp_level_parse("2"), 2);
    assert_int_equal(mst_amp_level_parse("O4"), -1);

    mst_ctx *ctx = mst_ctx_new(NULL);
    assert_int_equal(mst_amp_set(ctx, 4, MST_DTYPE_F16), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "0..3"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_amp_set(ctx, 2, MST_DTYPE_F32), MST_ERR_DTYPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "f16 or bf16, got f32"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(ctx->amp_level, 0);
    mst_ctx_free(ctx);
}

/* O2 with f16 on a small mlp: plain SGD on the f32 masters, the loss falls over 50 steps. */
static void test_o2_f16_mlp_trains(void **state) {
    uint64_t seed = gc_seed();
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 1});
    mst_model_spec spec = {.name = "mlp", .in_c = 1, .in_h = 4, .in_w = 4, .classes = 4, .hidden1 = 32, .hidden2 = 16};
    mst_model *m = mst_mlp_new(ctx, &spec);
    assert_non_null(m);
    /* labels: the argmax of a fixed random projection of x, so the task is learnable */
    int64_t n = 64;
    mst_tensor *x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){n, 1, 4, 4}, 0, 1));
    mst_tensor *proj = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){16, 4}, 0, 1);
    mst_tensor *labels = mst_tensor_retain(mst_tensor_new(ctx, MST_DTYPE_I32, 1, &n));
    for (int64_t i = 0; i < n; i++) {
        int best = 0;
        double best_v = -INFINITY;
        for (int c = 0; c < 4; c++) {
            double v = 0;
            for (int k = 0; k < 16; k++) v += mst_tensor_get(x, i * 16 + k) * mst_tensor_get(proj, k * 4 + c);
            if (v > best_v) { best_v = v; best = c; }
        }
        mst_tensor_i32(labels)[i] = best;
    }
    mst_amp_set(ctx, 2, MST_DTYPE_F16);
    double first = 0, last = 0;
    for (int step = 0; step < 50; step++) {
        mst_pool_push(ctx);
        mst_amp_autocast(ctx, true);
        mst_tensor *loss = mst_cross_entropy(ctx, m->forward(m, ctx, x, true), labels);
        mst_amp_autocast(ctx, false);
        if (!loss) fail_msg("step %d: %s", step, mst_ctx_error(ctx));
        assert_int_equal(loss->dtype, MST_DTYPE_F32);
        double l = mst_tensor_get(loss, 0);
        assert_true(isfinite(l));
        if (step == 0) first = l;
        last = l;
        assert_int_equal(mst_backward(ctx, loss), MST_OK);
        for (int i = 0; i < m->n_params; i++) {
            mst_tensor *p = m->params[i];
            assert_int_equal(p->grad->dtype, MST_DTYPE_F32);
            float *pv = mst_tensor_f32(p), *gv = mst_tensor_f32(p->grad);
            for (int64_t k = 0; k < p->numel; k++) pv[k] -= 0.5f * gv[k];
        }
        mst_zero_grad(m->params, m->n_params);
        mst_pool_pop(ctx);
    }
    printf("O2 f16 mlp (seed %llu): loss %.4f -> %.4f over 50 steps\n", (unsigned long long)seed, first, last);
    if (!(last < 0.6 * first)) fail_msg("loss did not fall: %.4f -> %.4f (seed %llu)", first, last, (unsigned long long)seed);
    mst_tensor_release(x);
    mst_tensor_release(labels);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_f16),  cmocka_unit_test(test_levels_bf16),
        cmocka_unit_test(test_never_cast),  cmocka_unit_test(test_policy_table),
        cmocka_unit_test(test_o2_f16_mlp_trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
