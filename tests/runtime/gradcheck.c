/* gradcheck.c — central-difference gradient checker in f64 and fast-vs-reference comparison. */
#include "tests/runtime/gradcheck.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

uint64_t gc_seed(void) {
    const char *s = getenv("MST_TEST_SEED");
    return s ? strtoull(s, NULL, 10) : 1234;
}

void gc_make_inputs(mst_ctx *ctx, const gc_case *c, mst_dtype float_dtype, mst_tensor *in[]) {
    for (int i = 0; i < c->n_inputs; i++) {
        const gc_input *g = &c->inputs[i];
        mst_dtype dt = g->fill == GC_LABELS ? MST_DTYPE_I32 : float_dtype;
        mst_tensor *t = mst_tensor_new(ctx, dt, g->ndim, g->shape);
        assert_non_null(t);
        for (int64_t k = 0; k < t->numel; k++) {
            double v = 0;
            switch (g->fill) {
            case GC_RANDN: v = mst_rng_normal(&ctx->rng); break;
            case GC_AWAY_FROM_ZERO: {
                double u = mst_rng_uniform(&ctx->rng);
                v = (0.2 + mst_rng_uniform(&ctx->rng)) * (u < 0.5 ? -1 : 1);
                break;
            }
            case GC_POSITIVE: v = 0.5 + mst_rng_uniform(&ctx->rng); break;
            case GC_LABELS: v = (double)(mst_rng_u64(&ctx->rng) % (uint64_t)(g->range > 0 ? g->range : 1)); break;
            case GC_ZEROS: v = 0; break;
            case GC_ONES: v = 1; break;
            case GC_DISTINCT: v = 0.05 * (double)k - 0.025 * (double)t->numel; break;
            }
            mst_tensor_set(t, k, v);
        }
        if (g->fill == GC_DISTINCT)     /* shuffle so the order is not monotone */
            for (int64_t k = t->numel - 1; k > 0; k--) {
                int64_t j = (int64_t)(mst_rng_u64(&ctx->rng) % (uint64_t)(k + 1));
                double a = mst_tensor_get(t, k), b = mst_tensor_get(t, j);
                mst_tensor_set(t, k, b);
                mst_tensor_set(t, j, a);
            }
        t->requires_grad = g->diff;
        in[i] = t;
    }
}

/* L = sum(y * r) with grad recording off, random state rewound so random ops repeat. */
static double eval_loss(mst_ctx *ctx, const gc_case *c, mst_tensor *const in[], const mst_tensor *r, mst_rng rng) {
    mst_pool_push(ctx);
    bool was = mst_grad_is_enabled(ctx);
    mst_grad_set_enabled(ctx, false);
    ctx->rng = rng;
    mst_tensor *y = c->build(ctx, in, c->arg);
    if (!y) fail_msg("%s: build failed during numeric evaluation: %s", c->name, mst_ctx_error(ctx));
    double l = 0;
    for (int64_t k = 0; k < y->numel; k++) l += mst_tensor_get(y, k) * mst_tensor_get(r, k);
    mst_grad_set_enabled(ctx, was);
    mst_pool_pop(ctx);
    return l;
}

double gc_check_one(const gc_case *c, uint64_t seed) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 1});
    assert_non_null(ctx);
    mst_tensor *in[MST_MAX_OP_INPUTS] = {0};
    gc_make_inputs(ctx, c, MST_DTYPE_F64, in);

    mst_rng rng = ctx->rng;
    mst_tensor *y = c->build(ctx, in, c->arg);
    if (!y) fail_msg("%s (seed %llu): build failed: %s", c->name, (unsigned long long)seed, mst_ctx_error(ctx));
    mst_grad_set_enabled(ctx, false);
    mst_tensor *r = mst_tensor_randn(ctx, y->dtype, y->ndim, y->shape, 0, 1);
    mst_grad_set_enabled(ctx, true);
    assert_non_null(r);
    mst_status s = mst_backward_seeded(ctx, y, r);
    if (s != MST_OK) fail_msg("%s (seed %llu): backward failed: %s", c->name, (unsigned long long)seed, mst_ctx_error(ctx));

    double tol = c->tol > 0 ? c->tol : 1e-6, worst = 0;
    const double h = 1e-6;
    for (int i = 0; i < c->n_inputs; i++) {
        if (!c->inputs[i].diff) continue;
        mst_tensor *x = in[i];
        if (!x->grad) fail_msg("%s (seed %llu): input %d got no gradient", c->name, (unsigned long long)seed, i);
        /* check at most 48 elements, spread over the tensor */
        int64_t step = x->numel > 48 ? x->numel / 48 : 1;
        for (int64_t k = 0; k < x->numel; k += step) {
            double x0 = mst_tensor_get(x, k);
            mst_tensor_set(x, k, x0 + h);
            double lp = eval_loss(ctx, c, in, r, rng);
            mst_tensor_set(x, k, x0 - h);
            double lm = eval_loss(ctx, c, in, r, rng);
            mst_tensor_set(x, k, x0);
            double num = (lp - lm) / (2 * h), ana = mst_tensor_get(x->grad, k);
            double err = fabs(num - ana) / (fabs(num) + 1.0);
            if (err > worst) worst = err;
            if (fabs(num - ana) > tol * fabs(num) + 10 * tol)
                fail_msg("%s (seed %llu): d/d input%d[%lld]: analytic %.10g vs numeric %.10g", c->name,
                         (unsigned long long)seed, i, (long long)k, ana, num);
        }
    }
    for (int i = 0; i < c->n_inputs; i++) {
        mst_tensor_release(in[i]->grad);
        in[i]->grad = NULL;
    }
    mst_ctx_free(ctx);
    return worst;
}

void gc_check_all(const gc_case *cases, int n) {
    uint64_t seed = gc_seed();
    for (int i = 0; i < n; i++) {
        printf("gradcheck %-28s seed %llu\n", cases[i].name, (unsigned long long)seed);
        gc_check_one(&cases[i], seed);
    }
}

void gc_check_ref_all(const gc_case *cases, int n, double tol) {
    uint64_t seed = gc_seed();
    for (int ci = 0; ci < n; ci++) {
        const gc_case *c = &cases[ci];
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 1});
        mst_tensor *in[MST_MAX_OP_INPUTS] = {0};
        gc_make_inputs(ctx, c, MST_DTYPE_F32, in);
        mst_grad_set_enabled(ctx, false);
        mst_rng rng = ctx->rng;
        mst_tensor *fast = c->build(ctx, in, c->arg);
        ctx->rng = rng;
        mst_ctx_set_force_ref(ctx, true);
        mst_tensor *ref = c->build(ctx, in, c->arg);
        if (!fast || !ref) fail_msg("%s (seed %llu): build failed: %s", c->name, (unsigned long long)seed, mst_ctx_error(ctx));
        assert_int_equal(fast->numel, ref->numel);
        for (int64_t k = 0; k < fast->numel; k++) {
            double a = mst_tensor_get(fast, k), b = mst_tensor_get(ref, k);
            if (fabs(a - b) > tol * (1 + fabs(b)))
                fail_msg("%s (seed %llu): fast vs reference differ at %lld: %.9g vs %.9g", c->name,
                         (unsigned long long)seed, (long long)k, a, b);
        }
        printf("fast==ref %-28s seed %llu (%lld elements)\n", c->name, (unsigned long long)seed, (long long)fast->numel);
        mst_ctx_free(ctx);
    }
}

void gc_expect_error(mst_ctx *ctx, const mst_tensor *y, mst_status status, const char *const needles[]) {
    assert_null(y);
    if (mst_ctx_status(ctx) != status)
        fail_msg("expected %s, got %s: %s", mst_status_name(status), mst_status_name(mst_ctx_status(ctx)), mst_ctx_error(ctx));
    for (int i = 0; needles[i]; i++)
        if (!strstr(mst_ctx_error(ctx), needles[i])) fail_msg("message lacks \"%s\": %s", needles[i], mst_ctx_error(ctx));
    mst_ctx_clear_error(ctx);
}

mst_tensor *gc_zeros(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape) {
    mst_tensor *t = mst_tensor_zeros(ctx, dtype, ndim, shape);
    assert_non_null(t);
    return t;
}
