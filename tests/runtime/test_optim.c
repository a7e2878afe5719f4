/* test_optim.c — the SGD and Adam/AdamW update ops and the optimizer object: values against a
 * second, straightforward implementation of PyTorch's formulas written here in double, a few
 * hand-computed steps, f32 vs f64 agreement, parameters without gradients, convergence on a
 * quadratic through autograd, optimizer-state memory accounting, and every validation error. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/lr_schedule.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "tests/runtime/gradcheck.h"

/* ---- the reference: PyTorch's documented update rules, one element at a time, in double ---- */

typedef struct {
    mst_optim_kind kind;
    double lr, momentum, dampening, wd;
    bool nesterov;
    double beta1, beta2, eps;
} hparams;

typedef struct {
    double buf, m, v;
    int64_t t;          /* updates received */
} ref_state;

static double ref_update(const hparams *h, double p, double g, ref_state *s) {
    s->t++;
    if (h->kind == MST_OPTIM_SGD) {
        if (h->wd != 0) g = g + h->wd * p;
        if (h->momentum != 0) {
            if (s->t == 1) s->buf = g;
            else s->buf = h->momentum * s->buf + (1 - h->dampening) * g;
            g = h->nesterov ? g + h->momentum * s->buf : s->buf;
        }
        return p - h->lr * g;
    }
    if (h->kind == MST_OPTIM_ADAMW) p = p * (1 - h->lr * h->wd);
    else if (h->wd != 0) g = g + h->wd * p;
    s->m = h->beta1 * s->m + (1 - h->beta1) * g;
    s->v = h->beta2 * s->v + (1 - h->beta2) * g * g;
    double m_hat = s->m / (1 - pow(h->beta1, (double)s->t));
    double v_hat = s->v / (1 - pow(h->beta2, (double)s->t));
    return p - h->lr * m_hat / (sqrt(v_hat) + h->eps);
}

static mst_optim_config config_of(const hparams *h) {
    return (mst_optim_config){.kind = h->kind, .lr = h->lr, .momentum = h->momentum, .dampening = h->dampening,
                              .weight_decay = h->wd, .nesterov = h->nesterov, .beta1 = h->beta1, .beta2 = h->beta2,
                              .eps = h->eps};
}

/* Deterministic data: gradients bounded away from 0 (|g| in [0.1, 1.1]) so Adam's normalized
 * steps compare well between f32 and f64. */
static double init_value(int param, int64_t i) { return cos(0.9 * (double)i + 0.5 * param) + 0.25 * param; }
static double grad_value(int param, int64_t i, int step) {
    return 0.5 * sin(1.7 * (double)i + 0.9 * step + 0.3 * param) + ((i + param) % 2 ? 0.6 : -0.6);
}

static void set_grad(mst_ctx *ctx, mst_tensor *p, int param, int step) {
    mst_tensor *g = mst_tensor_new_cat(ctx, p->dtype, p->ndim, p->shape, MST_MEM_GRAD);
    assert_non_null(g);
    for (int64_t i = 0; i < g->numel; i++) mst_tensor_set(g, i, grad_value(param, i, step));
    mst_tensor_release(p->grad);
    p->grad = mst_tensor_retain(g);
}

static void assert_close(double got, double want, double tol, const char *what, int64_t i, int step) {
    if (fabs(got - want) > tol * fmax(1.0, fabs(want)))
        fail_msg("%s: element %lld after step %d: got %.17g, want %.17g (tol %g)", what, (long long)i, step, got, want, tol);
}

#define N_PARAMS 2
static const int64_t k_shape_w[2] = {3, 4}, k_shape_b[1] = {5};

static void make_params(mst_ctx *ctx, mst_dtype dt, mst_tensor *params[N_PARAMS]) {
    params[0] = mst_param_new(ctx, "w", dt, 2, k_shape_w);
    params[1] = mst_param_new(ctx, "b", dt, 1, k_shape_b);
    for (int k = 0; k < N_PARAMS; k++) {
        assert_non_null(params[k]);
        for (int64_t i = 0; i < params[k]->numel; i++) mst_tensor_set(params[k], i, init_value(k, i));
    }
}

static void free_params(mst_tensor *params[], int n) {
    mst_zero_grad(params, n);
    for (int k = 0; k < n; k++) mst_tensor_release(params[k]);
}

typedef struct {
    const char *name;
    hparams h;
} optim_case;

static const optim_case k_cases[] = {
    {"sgd plain", {MST_OPTIM_SGD, .lr = 0.1}},
    {"sgd weight decay", {MST_OPTIM_SGD, .lr = 0.05, .wd = 0.1}},
    {"sgd momentum", {MST_OPTIM_SGD, .lr = 0.05, .momentum = 0.9}},
    {"sgd momentum dampening", {MST_OPTIM_SGD, .lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
    {"sgd nesterov", {MST_OPTIM_SGD, .lr = 0.05, .momentum = 0.9, .nesterov = true}},
    {"sgd nesterov weight decay", {MST_OPTIM_SGD, .lr = 0.02, .momentum = 0.7, .wd = 0.05, .nesterov = true}},
    {"sgd all but nesterov", {MST_OPTIM_SGD, .lr = 0.02, .momentum = 0.5, .dampening = 0.5, .wd = 0.01}},
    {"adam", {MST_OPTIM_ADAM, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
    {"adam weight decay", {MST_OPTIM_ADAM, .lr = 0.01, .wd = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
    {"adam odd betas", {MST_OPTIM_ADAM, .lr = 0.03, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3}},
    {"adam beta1 0", {MST_OPTIM_ADAM, .lr = 0.01, .beta1 = 0.0, .beta2 = 0.99, .eps = 1e-8}},
    {"adamw", {MST_OPTIM_ADAMW, .lr = 0.01, .wd = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
    {"adamw strong decay", {MST_OPTIM_ADAMW, .lr = 0.05, .wd = 0.5, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6}},
};
#define N_CASES ((int)(sizeof(k_cases) / sizeof(k_cases[0])))
#define N_STEPS 6

/* Run N_STEPS optimizer steps in dtype dt; compare with the reference after every step. */
static void run_case(const optim_case *oc, mst_dtype dt, double tol) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *params[N_PARAMS];
    make_params(ctx, dt, params);
    mst_optim_config cfg = config_of(&oc->h);
    mst_optim *o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
    if (!o) fail_msg("%s: %s", oc->name, mst_ctx_error(ctx));

    double ref[N_PARAMS][12];
    ref_state st[N_PARAMS][12] = {{{0}}};
    for (int k = 0; k < N_PARAMS; k++)
        for (int64_t i = 0; i < params[k]->numel; i++) ref[k][i] = mst_tensor_get(params[k], i);  /* as stored */

    char what[128];
    snprintf(what, sizeof(what), "%s (%s)", oc->name, mst_dtype_name(dt));
    for (int step = 1; step <= N_STEPS; step++) {
        mst_pool_push(ctx);
        for (int k = 0; k < N_PARAMS; k++) set_grad(ctx, params[k], k, step);
        if (mst_optim_step(o, oc->h.lr) != MST_OK) fail_msg("%s: %s", what, mst_ctx_error(ctx));
        for (int k = 0; k < N_PARAMS; k++)
            for (int64_t i = 0; i < params[k]->numel; i++) {
                ref[k][i] = ref_update(&oc->h, ref[k][i], mst_tensor_get(params[k]->grad, i), &st[k][i]);
                assert_close(mst_tensor_get(params[k], i), ref[k][i], tol, what, i, step);
            }
        mst_zero_grad(params, N_PARAMS);
        mst_pool_pop(ctx);
    }
    assert_int_equal(mst_optim_steps(o), N_STEPS);
    mst_optim_free(o);
    free_params(params, N_PARAMS);
    mst_ctx_free(ctx);
}

/* f64 against the reference to rounding; f32 against the same double reference (so f32 and f64
 * agree with each other) to f32 accuracy. */
static void test_against_reference(void **state) {
    for (int c = 0; c < N_CASES; c++) {
        run_case(&k_cases[c], MST_DTYPE_F64, 1e-12);
        run_case(&k_cases[c], MST_DTYPE_F32, 2e-5);
    }
}

/* ---- hand-computed steps through the public update ops ---- */

static mst_tensor *scalar1(mst_ctx *ctx, mst_dtype dt, double v) {
    return mst_tensor_full(ctx, dt, 1, (int64_t[]){1}, v);
}

/* The per-step inputs of the update ops: lr f64 (), counts f64 (1) from 0, found_inf f32 (). */
typedef struct {
    mst_tensor *lr, *steps, *found;
} controls;

static controls ctl(mst_ctx *ctx, double lr) {
    controls k = {mst_tensor_scalar(ctx, MST_DTYPE_F64, lr), mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, (int64_t[]){1}),
                  mst_tensor_scalar(ctx, MST_DTYPE_F32, 0)};
    assert_true(k.lr && k.steps && k.found);
    return k;
}

static mst_status sgd(mst_ctx *ctx, mst_tensor *p, mst_tensor *g, mst_tensor *buf, controls k, double mom, double damp,
                      double wd, bool nesterov) {
    return mst_sgd_update(ctx, p, g, k.lr, k.steps, k.found, buf, 0, mom, damp, wd, nesterov);
}

static mst_status adam(mst_ctx *ctx, mst_tensor *p, mst_tensor *g, mst_tensor *m, mst_tensor *v, controls k, double b1,
                       double b2, double eps, double wd, bool decoupled) {
    return mst_adam_update(ctx, p, g, k.lr, k.steps, k.found, m, v, 0, b1, b2, eps, wd, decoupled);
}

static void test_sgd_by_hand(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype dts[2] = {MST_DTYPE_F64, MST_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        mst_dtype dt = dts[d];
        double tol = dt == MST_DTYPE_F64 ? 1e-15 : 1e-6;
        mst_tensor *g = scalar1(ctx, dt, 1.0);
        /* momentum 0.9, lr 0.1, g = 1: buf 1, 1.9, 2.71; p 0.9, 0.71, 0.439 */
        mst_tensor *p = scalar1(ctx, dt, 1.0), *buf = scalar1(ctx, dt, 123.0);   /* garbage is never read on step 1 */
        const double want_p[3] = {0.9, 0.71, 0.439}, want_buf[3] = {1, 1.9, 2.71};
        controls k = ctl(ctx, 0.1);
        for (int t = 1; t <= 3; t++) {
            assert_int_equal(sgd(ctx, p, g, buf, k, 0.9, 0, 0, false), MST_OK);
            assert_true(mst_tensor_get(k.steps, 0) == t);
            assert_close(mst_tensor_get(p, 0), want_p[t - 1], tol, "sgd momentum", 0, t);
            assert_close(mst_tensor_get(buf, 0), want_buf[t - 1], tol, "sgd momentum buffer", 0, t);
        }
        /* dampening 0.5: the first step is not dampened (buf 1, p 0.9), then buf 0.9 + 0.5 = 1.4, p 0.76 */
        p = scalar1(ctx, dt, 1.0);
        buf = scalar1(ctx, dt, 0.0);
        k = ctl(ctx, 0.1);
        assert_int_equal(sgd(ctx, p, g, buf, k, 0.9, 0.5, 0, false), MST_OK);
        assert_int_equal(sgd(ctx, p, g, buf, k, 0.9, 0.5, 0, false), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.76, tol, "sgd dampening", 0, 2);
        assert_close(mst_tensor_get(buf, 0), 1.4, tol, "sgd dampening buffer", 0, 2);
        /* nesterov 0.9: u = 1 + 0.9 * 1 = 1.9 -> 0.81; then buf 1.9, u = 1 + 1.71 = 2.71 -> 0.539 */
        p = scalar1(ctx, dt, 1.0);
        buf = scalar1(ctx, dt, 0.0);
        k = ctl(ctx, 0.1);
        assert_int_equal(sgd(ctx, p, g, buf, k, 0.9, 0, 0, true), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.81, tol, "sgd nesterov", 0, 1);
        assert_int_equal(sgd(ctx, p, g, buf, k, 0.9, 0, 0, true), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.539, tol, "sgd nesterov", 0, 2);
        /* plain with weight decay 0.1, no buffer: d = 1.1 -> 0.89; d = 1.089 -> 0.7811 */
        p = scalar1(ctx, dt, 1.0);
        k = ctl(ctx, 0.1);
        assert_int_equal(sgd(ctx, p, g, NULL, k, 0, 0, 0.1, false), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.89, tol, "sgd weight decay", 0, 1);
        assert_int_equal(sgd(ctx, p, g, NULL, k, 0, 0, 0.1, false), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.7811, tol, "sgd weight decay", 0, 2);
    }
    mst_ctx_free(ctx);
}

static void test_adam_by_hand(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const mst_dtype dts[2] = {MST_DTYPE_F64, MST_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        mst_dtype dt = dts[d];
        double tol = dt == MST_DTYPE_F64 ? 1e-15 : 1e-6;
        /* A constant gradient: bias correction makes m_hat = g and v_hat = g^2 at every step, so
         * each step moves p by lr g / (|g| + eps) = 0.1 * 0.5 / 0.50000001 = 0.099999998. */
        mst_tensor *g = scalar1(ctx, dt, 0.5);
        mst_tensor *p = scalar1(ctx, dt, 1.0), *m = scalar1(ctx, dt, 0), *v = scalar1(ctx, dt, 0);
        const double move = 0.1 * 0.5 / (0.5 + 1e-8);
        controls k = ctl(ctx, 0.1);
        for (int t = 1; t <= 3; t++) {
            assert_int_equal(adam(ctx, p, g, m, v, k, 0.9, 0.999, 1e-8, 0, false), MST_OK);
            assert_close(mst_tensor_get(p, 0), 1.0 - t * move, tol, "adam constant gradient", 0, t);
        }
        assert_close(mst_tensor_get(m, 0), 0.5 * (1 - pow(0.9, 3)), tol, "adam m", 0, 3);
        assert_close(mst_tensor_get(v, 0), 0.25 * (1 - pow(0.999, 3)), tol, "adam v", 0, 3);
        /* AdamW wd 0.1, lr 0.1: p = 1 * (1 - 0.01) - move = 0.890000002 */
        p = scalar1(ctx, dt, 1.0);
        m = scalar1(ctx, dt, 0);
        v = scalar1(ctx, dt, 0);
        assert_int_equal(adam(ctx, p, g, m, v, ctl(ctx, 0.1), 0.9, 0.999, 1e-8, 0.1, true), MST_OK);
        assert_close(mst_tensor_get(p, 0), 0.99 - move, tol, "adamw", 0, 1);
        /* Adam's L2 decay changes the gradient (0.5 + 0.1 = 0.6), not p directly */
        p = scalar1(ctx, dt, 1.0);
        m = scalar1(ctx, dt, 0);
        v = scalar1(ctx, dt, 0);
        assert_int_equal(adam(ctx, p, g, m, v, ctl(ctx, 0.1), 0.9, 0.999, 1e-8, 0.1, false), MST_OK);
        assert_close(mst_tensor_get(p, 0), 1.0 - 0.1 * 0.6 / (0.6 + 1e-8), tol, "adam l2", 0, 1);
        assert_close(mst_tensor_get(m, 0), 0.1 * 0.6, tol, "adam l2 m", 0, 1);
    }
    mst_ctx_free(ctx);
}

/* ---- parameters without gradients ---- */

static void test_skips_params_without_grad(void **state) {
    const hparams hs[2] = {{MST_OPTIM_SGD, .lr = 0.1, .momentum = 0.9},
                           {MST_OPTIM_ADAMW, .lr = 0.01, .wd = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}};
    for (int c = 0; c < 2; c++) {
        mst_ctx *ctx = mst_ctx_new(NULL);
        mst_tensor *params[N_PARAMS];
        make_params(ctx, MST_DTYPE_F64, params);
        mst_optim_config cfg = config_of(&hs[c]);
        mst_optim *o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
        assert_non_null(o);
        double ref[N_PARAMS][12];
        ref_state st[N_PARAMS][12] = {{{0}}};
        for (int k = 0; k < N_PARAMS; k++)
            for (int64_t i = 0; i < params[k]->numel; i++) ref[k][i] = init_value(k, i);

        /* steps 1-2: only w has a gradient; b and its state must not move */
        for (int step = 1; step <= 3; step++) {
            mst_pool_push(ctx);
            set_grad(ctx, params[0], 0, step);
            if (step == 3) set_grad(ctx, params[1], 1, step);
            assert_int_equal(mst_optim_step(o, hs[c].lr), MST_OK);
            for (int k = 0; k < N_PARAMS; k++) {
                if (!params[k]->grad) continue;
                for (int64_t i = 0; i < params[k]->numel; i++)
                    ref[k][i] = ref_update(&hs[c], ref[k][i], mst_tensor_get(params[k]->grad, i), &st[k][i]);
            }
            for (int k = 0; k < N_PARAMS; k++)
                for (int64_t i = 0; i < params[k]->numel; i++)
                    assert_close(mst_tensor_get(params[k], i), ref[k][i], 1e-12, "skip", i, step);
            if (step < 3) {
                /* b's state slots are still zero */
                for (int s = 0; s < mst_optim_state_count(o); s++) {
                    const char *name;
                    mst_tensor *t = mst_optim_state_at(o, s, &name);
                    if (strncmp(name, "b.", 2) != 0) continue;
                    for (int64_t i = 0; i < t->numel; i++) assert_true(mst_tensor_get(t, i) == 0.0);
                }
            }
            mst_zero_grad(params, N_PARAMS);
            mst_pool_pop(ctx);
        }
        /* per-parameter counts: w got 3 updates, b one (its first, so step 1 semantics applied) */
        const char *name;
        mst_tensor *counts = mst_optim_state_at(o, mst_optim_state_count(o) - 1, &name);
        assert_string_equal(name, "step");
        assert_true(mst_tensor_get(counts, 0) == 3.0);
        assert_true(mst_tensor_get(counts, 1) == 1.0);
        assert_int_equal(mst_optim_steps(o), 3);

        /* a step where nothing has a gradient still counts, and moves nothing */
        double before = mst_tensor_get(params[0], 0);
        assert_int_equal(mst_optim_step(o, hs[c].lr), MST_OK);
        assert_true(mst_tensor_get(params[0], 0) == before);
        assert_int_equal(mst_optim_steps(o), 4);
        mst_optim_free(o);
        free_params(params, N_PARAMS);
        mst_ctx_free(ctx);
    }
}

/* ---- convergence through autograd: minimize sum((w - t)^2) ---- */

static const float k_target[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.75f, 0.0f};

/* Train from a seeded random start; the final weights go to w_out. */
static void converge(const char *what, mst_optim_config cfg, const mst_lr_schedule *sched, int steps, double tol,
                     double w_out[6]) {
    const uint64_t seed = gc_seed();       /* the start point; MST_TEST_SEED overrides */
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = 1});
    const int64_t shape[1] = {6};
    const float *target = k_target;
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, shape);
    assert_non_null(w);
    mst_tensor_fill_randn(ctx, w, 0.0, 1.0);
    mst_optim *o = mst_optim_new(ctx, &cfg, &w, 1);
    if (!o) fail_msg("%s: %s", what, mst_ctx_error(ctx));
    double first_loss = -1, loss_v = -1;
    for (int step = 0; step < steps; step++) {
        mst_pool_push(ctx);
        mst_tensor *t = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, shape, target);
        mst_tensor *d = mst_sub(ctx, w, t);
        mst_tensor *loss = mst_sum(ctx, mst_mul(ctx, d, d), 0, false);
        if (!loss || mst_backward(ctx, loss) != MST_OK) fail_msg("%s: %s", what, mst_ctx_error(ctx));
        loss_v = mst_tensor_get(loss, 0);
        if (step == 0) first_loss = loss_v;
        if (mst_optim_step(o, mst_lr_at(sched, step)) != MST_OK) fail_msg("%s: %s", what, mst_ctx_error(ctx));
        mst_zero_grad(&w, 1);
        mst_pool_pop(ctx);
    }
    double worst = 0;
    for (int i = 0; i < 6; i++) {
        w_out[i] = mst_tensor_get(w, i);
        worst = fmax(worst, fabs(w_out[i] - target[i]));
    }
    if (!(worst < tol))
        fail_msg("%s (seed %llu): max |w - t| = %g after %d steps (loss %g -> %g)", what, (unsigned long long)seed, worst,
                 steps, first_loss, loss_v);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_GRAD], 0);
    mst_optim_free(o);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_converges_on_quadratic(void **state) {
    mst_lr_schedule constant = {.kind = MST_LR_CONSTANT, .base_lr = 0.1};
    mst_lr_schedule cosine = {.kind = MST_LR_COSINE, .base_lr = 0.1, .warmup_steps = 10, .total_steps = 400, .min_lr = 0};
    double w[6], w_adamw[6];
    mst_optim_config c = mst_optim_defaults(MST_OPTIM_SGD);
    converge("sgd", c, &constant, 100, 1e-4, w);
    c.momentum = 0.9;
    constant.base_lr = 0.02;
    converge("sgd momentum", c, &constant, 300, 1e-4, w);
    c.nesterov = true;
    converge("sgd nesterov", c, &constant, 300, 1e-4, w);
    c.nesterov = false;
    c.weight_decay = 0.1;
    /* L2 decay moves the minimum of sum((w - t)^2) + wd/2 |w|^2 to t / (1 + wd / 2) */
    converge("sgd weight decay", c, &constant, 300, 0.2, w);
    for (int i = 0; i < 6; i++) assert_float_equal(w[i], k_target[i] / 1.05, 1e-4);
    c = mst_optim_defaults(MST_OPTIM_ADAM);
    converge("adam cosine", c, &cosine, 400, 1e-3, w);
    /* Decoupled decay pulls the fixed point toward 0: close to t, never beyond it. */
    c = mst_optim_defaults(MST_OPTIM_ADAMW);
    converge("adamw cosine", c, &cosine, 400, 5e-2, w_adamw);
    for (int i = 0; i < 6; i++) assert_true(fabs(w_adamw[i]) <= fabs(k_target[i]) + 1e-3);
}

/* ---- memory accounting, state layout, defaults ---- */

static void test_state_memory_and_layout(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *params[N_PARAMS];
    make_params(ctx, MST_DTYPE_F32, params);
    /* plus the learning rate (f64 ()) and the zero overflow flag (f32 ()), not checkpointed */
    const int64_t param_bytes = (12 + 5) * 4, step_bytes = N_PARAMS * 8, control_bytes = 8 + 4;
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 0);

    mst_optim_config cfg = mst_optim_defaults(MST_OPTIM_ADAM);
    mst_optim *o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
    assert_non_null(o);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 2 * param_bytes + step_bytes + control_bytes);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_PARAM], param_bytes);
    const char *want[5] = {"w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq", "step"};
    assert_int_equal(mst_optim_state_count(o), 5);
    for (int i = 0; i < 5; i++) {
        const char *name;
        mst_tensor *t = mst_optim_state_at(o, i, &name);
        assert_non_null(t);
        assert_string_equal(name, want[i]);
        assert_int_equal(t->storage->cat, MST_MEM_OPTIM);
        if (i < 4) assert_true(mst_shape_equal(t->ndim, t->shape, params[i / 2]->ndim, params[i / 2]->shape));
        for (int64_t j = 0; j < t->numel; j++) assert_true(mst_tensor_get(t, j) == 0.0);
    }
    const char *name = "x";
    assert_null(mst_optim_state_at(o, 5, &name));
    assert_null(name);
    assert_null(mst_optim_state_at(o, -1, NULL));
    assert_int_equal(mst_optim_param_count(o), N_PARAMS);
    assert_ptr_equal(mst_optim_param_at(o, 1), params[1]);
    assert_null(mst_optim_param_at(o, 2));
    assert_int_equal(mst_optim_set_steps(o, 41), MST_OK);
    assert_int_equal(mst_optim_steps(o), 41);
    mst_optim_free(o);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 0);

    /* SGD with momentum: one buffer per parameter plus the counts; without: no checkpointed state
     * (the counts the update ops read still exist) */
    cfg = mst_optim_defaults(MST_OPTIM_SGD);
    cfg.momentum = 0.9;
    o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
    assert_non_null(o);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], param_bytes + step_bytes + control_bytes);
    assert_int_equal(mst_optim_state_count(o), 3);
    mst_optim_state_at(o, 0, &name);
    assert_string_equal(name, "w.momentum_buffer");
    mst_optim_free(o);
    cfg.momentum = 0;
    o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
    assert_non_null(o);
    assert_int_equal(mst_optim_state_count(o), 0);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], step_bytes + control_bytes);
    mst_optim_free(o);

    /* an unnamed parameter gets "param<i>"; the optimizer keeps its parameters alive */
    mst_tensor *anon = mst_param_new(ctx, NULL, MST_DTYPE_F32, 1, (int64_t[]){3});
    cfg = mst_optim_defaults(MST_OPTIM_ADAMW);
    o = mst_optim_new(ctx, &cfg, (mst_tensor *[]){params[0], anon}, 2);
    assert_non_null(o);
    mst_tensor_release(anon);
    mst_optim_state_at(o, 2, &name);
    assert_string_equal(name, "param1.exp_avg");
    mst_optim_free(o);

    free_params(params, N_PARAMS);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_PARAM], 0);
    mst_ctx_free(ctx);
}

static void test_defaults_and_names(void **state) {
    mst_optim_config c = mst_optim_defaults(MST_OPTIM_SGD);
    assert_true(c.kind == MST_OPTIM_SGD && c.lr == 1e-3 && c.momentum == 0 && c.dampening == 0 && c.weight_decay == 0 &&
                !c.nesterov);
    c = mst_optim_defaults(MST_OPTIM_ADAM);
    assert_true(c.kind == MST_OPTIM_ADAM && c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 &&
                c.weight_decay == 0);
    c = mst_optim_defaults(MST_OPTIM_ADAMW);
    assert_true(c.kind == MST_OPTIM_ADAMW && c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 &&
                c.weight_decay == 0.01);
    for (int k = 0; k < MST_OPTIM_KIND_COUNT; k++) assert_int_equal(mst_optim_kind_parse(mst_optim_kind_name(k)), k);
    assert_string_equal(mst_optim_kind_name(MST_OPTIM_ADAMW), "adamw");
    assert_int_equal(mst_optim_kind_parse("lamb"), -1);
    assert_int_equal(mst_optim_kind_parse(NULL), -1);
    assert_string_equal(mst_optim_kind_name(MST_OPTIM_KIND_COUNT), "?");
}

static void test_cost_formulas(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *p = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){10});
    controls k = ctl(ctx, 0.1);
    const int64_t control = 8 + 2 * 8 + 4;              /* read lr, read+write steps[index], read found_inf */
    mst_op_call c = {.op = MST_OP_SGD_UPDATE, .n_in = 6, .in = {p, p, k.lr, k.steps, k.found, p},
                     .attrs = {.i = {0, 0}, .f = {0.9, 0, 0}}};
    assert_int_equal(mst_op_bytes(&c), 5 * 40 + control);   /* read p, g, buf; write p, buf */
    assert_int_equal(mst_op_flops(&c), 5 * 10);
    c.n_in = 5;
    c.attrs.f[0] = 0;
    assert_int_equal(mst_op_bytes(&c), 3 * 40 + control);
    assert_int_equal(mst_op_flops(&c), 2 * 10);
    mst_op_call a = {.op = MST_OP_ADAM_UPDATE, .n_in = 7, .in = {p, p, k.lr, k.steps, k.found, p, p},
                     .attrs = {.i = {0, 1}, .f = {0.9, 0.999, 1e-8, 0}}};
    assert_int_equal(mst_op_bytes(&a), 7 * 40 + control);   /* read 4, write p, m, v */
    assert_int_equal(mst_op_flops(&a), 13 * 10);
    assert_string_equal(mst_op_name(MST_OP_ADAM_UPDATE), "adam_update");
    mst_ctx_free(ctx);
}

/* ---- validation ---- */

static void expect_error(mst_ctx *ctx, mst_status got, mst_status want, const char *needle) {
    if (got != want || mst_ctx_status(ctx) != want || !strstr(mst_ctx_error(ctx), needle))
        fail_msg("want status %d with \"%s\", got %d: \"%s\"", want, needle, got, mst_ctx_error(ctx));
    mst_ctx_clear_error(ctx);
}

static void test_update_op_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const int64_t s4[1] = {4}, s5[1] = {5};
    mst_tensor *p = mst_tensor_full(ctx, MST_DTYPE_F32, 1, s4, 1.0), *g = mst_tensor_full(ctx, MST_DTYPE_F32, 1, s4, 0.5);
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, s4), *b5 = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, s5);
    mst_tensor *g64 = mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, s4), *pi = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, s4);
    mst_tensor *m = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, s4), *v = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, s4);

    controls k = ctl(ctx, 0.1);
    mst_tensor *lr32 = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0.1), *steps2d = mst_tensor_zeros(ctx, MST_DTYPE_F64, 2, (int64_t[]){1, 1});
    mst_tensor *found64 = mst_tensor_scalar(ctx, MST_DTYPE_F64, 0);
    expect_error(ctx, sgd(ctx, p, b5, NULL, k, 0, 0, 0, false), MST_ERR_SHAPE, "same shape");
    expect_error(ctx, sgd(ctx, p, g, b5, k, 0.9, 0, 0, false), MST_ERR_SHAPE, "f32(5)");
    expect_error(ctx, sgd(ctx, p, g64, NULL, k, 0, 0, 0, false), MST_ERR_DTYPE, "same dtype (f32 vs f64)");
    expect_error(ctx, sgd(ctx, pi, pi, NULL, k, 0, 0, 0, false), MST_ERR_DTYPE, "float tensor, got i32");
    expect_error(ctx, mst_sgd_update(ctx, p, g, lr32, k.steps, k.found, b, 0, 0.9, 0, 0, false), MST_ERR_ARG,
                 "sgd_update: lr (input 2) must be f64 (), got f32()");
    expect_error(ctx, mst_sgd_update(ctx, p, g, k.lr, steps2d, k.found, b, 0, 0.9, 0, 0, false), MST_ERR_ARG,
                 "steps (input 3) must be f64 (n_params), got f64(1, 1)");
    expect_error(ctx, mst_sgd_update(ctx, p, g, k.lr, k.steps, found64, b, 0, 0.9, 0, 0, false), MST_ERR_ARG,
                 "found_inf (input 4) must be f32 (), got f64()");
    expect_error(ctx, mst_sgd_update(ctx, p, g, k.lr, k.steps, k.found, b, 1, 0.9, 0, 0, false), MST_ERR_ARG,
                 "index 1 is outside steps' 1 entries");
    expect_error(ctx, sgd(ctx, p, g, b, k, -0.5, 0, 0, false), MST_ERR_ARG, "momentum must be finite and >= 0, got -0.5");
    expect_error(ctx, sgd(ctx, p, g, b, k, 0.9, 1.5, 0, false), MST_ERR_ARG, "dampening must be in [0, 1], got 1.5");
    expect_error(ctx, sgd(ctx, p, g, b, k, 0.9, 0, -1, false), MST_ERR_ARG, "weight_decay must be finite and >= 0, got -1");
    expect_error(ctx, sgd(ctx, p, g, NULL, k, 0.9, 0, 0, false), MST_ERR_ARG, "momentum 0.9 > 0 needs a momentum buffer");
    expect_error(ctx, sgd(ctx, p, g, NULL, k, 0, 0, 0, true), MST_ERR_ARG,
                 "nesterov needs momentum > 0 and dampening == 0, got momentum 0, dampening 0");
    expect_error(ctx, sgd(ctx, p, g, b, k, 0.9, 0.1, 0, true), MST_ERR_ARG, "dampening 0.1");
    expect_error(ctx, sgd(ctx, p, NULL, NULL, k, 0, 0, 0, false), MST_ERR_ARG, "sgd_update: input 1 is NULL");

    expect_error(ctx, adam(ctx, p, g, m, b5, k, 0.9, 0.999, 1e-8, 0, false), MST_ERR_SHAPE, "inputs 0 and 6 must have the same shape");
    expect_error(ctx, adam(ctx, p, g64, m, v, k, 0.9, 0.999, 1e-8, 0, false), MST_ERR_DTYPE, "same dtype");
    expect_error(ctx, mst_adam_update(ctx, p, g, lr32, k.steps, k.found, m, v, 0, 0.9, 0.999, 1e-8, 0, false), MST_ERR_ARG,
                 "adam_update: lr (input 2) must be f64 ()");
    expect_error(ctx, adam(ctx, p, g, m, v, k, 1.0, 0.999, 1e-8, 0, false), MST_ERR_ARG, "beta1 must be in [0, 1), got 1");
    expect_error(ctx, adam(ctx, p, g, m, v, k, -0.1, 0.999, 1e-8, 0, false), MST_ERR_ARG, "beta1 must be in [0, 1), got -0.1");
    expect_error(ctx, adam(ctx, p, g, m, v, k, 0.9, 1.5, 1e-8, 0, false), MST_ERR_ARG, "beta2 must be in [0, 1), got 1.5");
    expect_error(ctx, adam(ctx, p, g, m, v, k, 0.9, 0.999, 0, 0, false), MST_ERR_ARG, "eps must be finite and > 0, got 0");
    expect_error(ctx, adam(ctx, p, g, m, v, k, 0.9, 0.999, 1e-8, -0.01, true), MST_ERR_ARG, "weight_decay must be finite and >= 0, got -0.01");
    assert_true(mst_tensor_get(k.steps, 0) == 0.0);     /* no failed call counted an update */

    /* nothing moved, and an earlier failure passes through a NULL argument untouched */
    for (int i = 0; i < 4; i++) assert_true(mst_tensor_f32(p)[i] == 1.0f && mst_tensor_f32(m)[i] == 0.0f);
    mst_tensor *bad = mst_add(ctx, p, b5);
    assert_null(bad);
    assert_int_equal(sgd(ctx, p, g, bad, k, 0.9, 0, 0, false), MST_ERR_SHAPE);
    assert_int_equal(adam(ctx, bad, g, m, v, k, 0.9, 0.999, 1e-8, 0, false), MST_ERR_SHAPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "add"));
    mst_ctx_free(ctx);
}

static void test_optim_config_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_tensor *params[1] = {w};
    const mst_optim_config sgd = mst_optim_defaults(MST_OPTIM_SGD), adam = mst_optim_defaults(MST_OPTIM_ADAM);
    struct {
        mst_optim_config cfg;
        const char *msg;
    } bad[] = {
        {{.kind = (mst_optim_kind)7}, "kind 7 is not one of sgd, adam, adamw"},
        {sgd, ""}, {sgd, ""}, {sgd, ""}, {sgd, ""}, {sgd, ""}, {sgd, ""},
        {adam, ""}, {adam, ""}, {adam, ""}, {adam, ""}, {adam, ""},
    };
    int k = 1;
    bad[k].cfg.lr = -1, bad[k++].msg = "optim sgd: lr must be finite and >= 0, got -1";
    bad[k].cfg.weight_decay = -0.5, bad[k++].msg = "optim sgd: weight_decay must be finite and >= 0, got -0.5";
    bad[k].cfg.momentum = -0.9, bad[k++].msg = "optim sgd: momentum must be finite and >= 0, got -0.9";
    bad[k].cfg.momentum = 0.9, bad[k].cfg.dampening = 2, bad[k++].msg = "optim sgd: dampening must be in [0, 1], got 2";
    bad[k].cfg.nesterov = true, bad[k++].msg = "optim sgd: nesterov needs momentum > 0 and dampening == 0, got momentum 0, dampening 0";
    bad[k].cfg.nesterov = true, bad[k].cfg.momentum = 0.9, bad[k].cfg.dampening = 0.1,
    bad[k++].msg = "optim sgd: nesterov needs momentum > 0 and dampening == 0, got momentum 0.9, dampening 0.1";
    bad[k].cfg.beta1 = 1, bad[k++].msg = "optim adam: beta1 must be in [0, 1), got 1";
    bad[k].cfg.beta2 = -0.1, bad[k++].msg = "optim adam: beta2 must be in [0, 1), got -0.1";
    bad[k].cfg.eps = 0, bad[k++].msg = "optim adam: eps must be finite and > 0, got 0";
    bad[k].cfg.kind = MST_OPTIM_ADAMW, bad[k].cfg.lr = INFINITY, bad[k++].msg = "optim adamw: lr must be finite and >= 0, got inf";
    bad[k].cfg.kind = MST_OPTIM_ADAMW, bad[k].cfg.weight_decay = NAN, bad[k++].msg = "optim adamw: weight_decay must be finite and >= 0, got nan";
    assert_int_equal(k, (int)(sizeof(bad) / sizeof(bad[0])));
    for (int i = 0; i < k; i++) {
        assert_null(mst_optim_new(ctx, &bad[i].cfg, params, 1));
        expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, bad[i].msg);
    }

    /* parameter lists */
    assert_null(mst_optim_new(ctx, NULL, params, 1));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "optim: config is NULL");
    assert_null(mst_optim_new(ctx, &adam, params, -1));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "parameter count must be >= 0, got -1");
    assert_null(mst_optim_new(ctx, &adam, NULL, 1));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "parameter list is NULL");
    assert_null(mst_optim_new(ctx, &adam, (mst_tensor *[]){w, NULL}, 2));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "parameter 1 is NULL");
    assert_null(mst_optim_new(ctx, &adam, (mst_tensor *[]){w, w}, 2));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "parameter 1 (w) appears twice (also at 0)");
    mst_tensor *ints = mst_state_new(ctx, "ids", MST_DTYPE_I32, 1, (int64_t[]){4}, MST_MEM_PARAM);
    assert_null(mst_optim_new(ctx, &adam, (mst_tensor *[]){w, ints}, 2));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_DTYPE, "parameter 1 (ids) must be a float tensor, got i32(4)");
    mst_ctx *other = mst_ctx_new(NULL);
    mst_tensor *foreign = mst_param_new(other, "f", MST_DTYPE_F32, 1, (int64_t[]){2});
    assert_null(mst_optim_new(ctx, &adam, (mst_tensor *[]){foreign}, 1));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_ARG, "parameter 0 belongs to another context");
    mst_tensor_release(foreign);
    mst_ctx_free(other);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 0);

    /* an empty list is fine */
    mst_optim *o = mst_optim_new(ctx, &adam, NULL, 0);
    assert_non_null(o);
    assert_int_equal(mst_optim_state_count(o), 0);
    assert_int_equal(mst_optim_step(o, 0.1), MST_OK);
    mst_optim_free(o);

    /* out of memory while creating the state: NULL, MST_ERR_OOM, nothing leaked */
    mst_allocator_fail_at(ctx->alloc, 2);
    assert_null(mst_optim_new(ctx, &adam, params, 1));
    expect_error(ctx, mst_ctx_status(ctx), MST_ERR_OOM, "out of memory");
    mst_allocator_fail_at(ctx->alloc, 0);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_OPTIM], 0);
    assert_int_equal(w->refcount, 1);

    mst_tensor_release(ints);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

static void test_optim_step_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *params[N_PARAMS];
    make_params(ctx, MST_DTYPE_F32, params);
    mst_optim_config cfg = mst_optim_defaults(MST_OPTIM_SGD);
    cfg.momentum = 0.9;
    mst_optim *o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
    assert_non_null(o);
    mst_pool_push(ctx);
    set_grad(ctx, params[0], 0, 1);
    set_grad(ctx, params[1], 1, 1);
    expect_error(ctx, mst_optim_step(o, -0.1), MST_ERR_ARG, "optim step: lr must be finite and >= 0, got -0.1");
    expect_error(ctx, mst_optim_step(o, NAN), MST_ERR_ARG, "got nan");

    /* a bad gradient on the second parameter: the first must not move either */
    mst_tensor_release(params[1]->grad);
    params[1]->grad = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}));
    expect_error(ctx, mst_optim_step(o, 0.1), MST_ERR_SHAPE, "gradient f32(4) does not match parameter 1 (b) f32(5)");
    mst_tensor_release(params[1]->grad);
    params[1]->grad = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, (int64_t[]){5}));
    expect_error(ctx, mst_optim_step(o, 0.1), MST_ERR_DTYPE, "gradient f64(5) does not match parameter 1 (b) f32(5)");
    for (int64_t i = 0; i < params[0]->numel; i++)
        assert_true(mst_tensor_get(params[0], i) == (double)(float)init_value(0, i));
    assert_int_equal(mst_optim_steps(o), 0);
    expect_error(ctx, mst_optim_set_steps(o, -1), MST_ERR_ARG, "step count must be >= 0, got -1");
    mst_pool_pop(ctx);
    mst_optim_free(o);
    free_params(params, N_PARAMS);
    mst_ctx_free(ctx);
}

/* ---- the overflow flag: a skipped update leaves everything bitwise untouched ---- */

static void snapshot(mst_optim *o, mst_tensor *params[], double *buf, int64_t *n) {
    *n = 0;
    for (int k = 0; k < N_PARAMS; k++)
        for (int64_t i = 0; i < params[k]->numel; i++) buf[(*n)++] = mst_tensor_get(params[k], i);
    for (int s = 0; s < mst_optim_state_count(o); s++) {
        mst_tensor *t = mst_optim_state_at(o, s, NULL);
        for (int64_t i = 0; i < t->numel; i++) buf[(*n)++] = mst_tensor_get(t, i);
    }
}

static void test_skipped_update_touches_nothing(void **state) {
    const hparams hs[3] = {{MST_OPTIM_SGD, .lr = 0.1, .momentum = 0.9, .wd = 0.01},
                           {MST_OPTIM_ADAM, .lr = 0.01, .wd = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
                           {MST_OPTIM_ADAMW, .lr = 0.01, .wd = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}};
    for (int c = 0; c < 3; c++) {
        mst_ctx *ctx = mst_ctx_new(NULL);
        mst_tensor *params[N_PARAMS];
        make_params(ctx, MST_DTYPE_F32, params);
        mst_optim_config cfg = config_of(&hs[c]);
        mst_optim *o = mst_optim_new(ctx, &cfg, params, N_PARAMS);
        assert_non_null(o);
        mst_tensor *flag = mst_state_new(ctx, "found_inf", MST_DTYPE_F32, 0, NULL, MST_MEM_ACT);
        double before[80], after[80];
        int64_t nb, na;
        for (int step = 1; step <= 4; step++) {
            mst_pool_push(ctx);
            for (int k = 0; k < N_PARAMS; k++) set_grad(ctx, params[k], k, step);
            bool skip = step == 2 || step == 3;             /* an overflow at the second and third step */
            mst_tensor_f32(flag)[0] = skip ? 1.0f : 0.0f;
            if (skip) mst_tensor_f32(params[0]->grad)[1] = NAN;
            snapshot(o, params, before, &nb);
            assert_int_equal(mst_optim_set_lr(o, hs[c].lr), MST_OK);
            assert_int_equal(mst_optim_apply(o, flag), MST_OK);
            snapshot(o, params, after, &na);
            assert_int_equal(nb, na);
            if (skip) assert_memory_equal(before, after, (size_t)nb * sizeof(double));
            else assert_memory_not_equal(before, after, (size_t)nb * sizeof(double));
            mst_zero_grad(params, N_PARAMS);
            mst_pool_pop(ctx);
        }
        /* two real updates per parameter, and the optimizer's own count is the host's business */
        mst_tensor *counts = mst_optim_state_at(o, mst_optim_state_count(o) - 1, NULL);
        assert_true(mst_tensor_get(counts, 0) == 2.0 && mst_tensor_get(counts, 1) == 2.0);
        assert_int_equal(mst_optim_steps(o), 0);
        mst_optim_count_step(o);
        assert_int_equal(mst_optim_steps(o), 1);
        mst_tensor_release(flag);
        mst_optim_free(o);
        free_params(params, N_PARAMS);
        mst_ctx_free(ctx);
    }
}

/* ---- the update loops' bits on this process's path ----
 * The f32 loops run on the widest vector path the CPU offers (AVX2, or the portable SSE2 build);
 * ctest runs this file again with AVX2 masked. Every path must give the bits of the formula
 * evaluated here one element at a time in float, each operation rounded as written (no FMA:
 * the build has -ffp-contract=off), over a length that leaves a tail after every vector width. */

#define BITS_N 1037

static float bits_value(int64_t i, int salt) {
    return (float)sin((double)(i * 7 + salt * 13) * 0.37) * (salt == 2 ? 1e-3f : 1.0f);
}

static void fill_bits(mst_tensor *t, int salt) {
    for (int64_t i = 0; i < t->numel; i++) mst_tensor_f32(t)[i] = bits_value(i, salt);
}

static void test_update_bits_every_path(void **state) {
    (void)state;
    const int64_t shape[1] = {BITS_N};
    const double lr = 0.05, wd = 0.01;
    /* SGD: plain, momentum with dampening, Nesterov */
    const struct { double mom, damp; bool nesterov; } sgd_cases[3] = {{0, 0, false}, {0.9, 0.1, false}, {0.9, 0, true}};
    for (int c = 0; c < 3; c++) {
        mst_ctx *ctx = mst_ctx_new(NULL);
        mst_tensor *p = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape), *g = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape);
        mst_tensor *buf = sgd_cases[c].mom > 0 ? mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape) : NULL;
        fill_bits(p, 0);
        static float wp[BITS_N], wb[BITS_N];
        for (int64_t i = 0; i < BITS_N; i++) wp[i] = bits_value(i, 0), wb[i] = 0;
        controls k = ctl(ctx, lr);
        const float flr = (float)lr, fwd = (float)wd, mom = (float)sgd_cases[c].mom, mix = (float)(1.0 - sgd_cases[c].damp);
        const float k_d = sgd_cases[c].nesterov ? 1.0f : 0.0f, k_b = sgd_cases[c].nesterov ? mom : 1.0f;
        for (int t = 1; t <= 3; t++) {
            fill_bits(g, t);
            assert_int_equal(sgd(ctx, p, g, buf, k, sgd_cases[c].mom, sgd_cases[c].damp, wd, sgd_cases[c].nesterov), MST_OK);
            for (int64_t i = 0; i < BITS_N; i++) {
                float d = bits_value(i, t) + fwd * wp[i];
                if (mom == 0) { wp[i] -= flr * (d); continue; }
                float b = t == 1 ? d : mom * wb[i] + mix * d;
                wb[i] = b;
                wp[i] -= flr * (k_d * d + k_b * b);
            }
            assert_memory_equal(mst_tensor_f32(p), wp, sizeof(wp));
            if (buf) assert_memory_equal(mst_tensor_f32(buf), wb, sizeof(wb));
        }
        mst_ctx_free(ctx);
    }
    /* Adam (L2 decay into the gradient) and AdamW (decoupled decay) */
    for (int decoupled = 0; decoupled <= 1; decoupled++) {
        mst_ctx *ctx = mst_ctx_new(NULL);
        mst_tensor *p = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape), *g = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape);
        mst_tensor *m = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape), *v = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, shape);
        fill_bits(p, 0);
        static float wp[BITS_N], wm[BITS_N], wv[BITS_N];
        for (int64_t i = 0; i < BITS_N; i++) wp[i] = bits_value(i, 0), wm[i] = wv[i] = 0;
        controls k = ctl(ctx, lr);
        const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
        for (int t = 1; t <= 3; t++) {
            fill_bits(g, t);
            assert_int_equal(adam(ctx, p, g, m, v, k, b1, b2, eps, wd, decoupled), MST_OK);
            const float step = (float)(lr / (1.0 - pow(b1, t))), bc2 = (float)sqrt(1.0 - pow(b2, t));
            const float g_wd = decoupled ? 0.0f : (float)wd, decay = decoupled ? (float)(1.0 - lr * wd) : 1.0f;
            const float fb1 = (float)b1, fb2 = (float)b2, o1 = (float)(1.0 - b1), o2 = (float)(1.0 - b2), feps = (float)eps;
            for (int64_t i = 0; i < BITS_N; i++) {
                float gi = bits_value(i, t) + g_wd * wp[i];
                float mi = fb1 * wm[i] + o1 * gi;
                float vi = fb2 * wv[i] + o2 * gi * gi;
                wm[i] = mi;
                wv[i] = vi;
                wp[i] = decay * wp[i] - step * mi / (sqrtf(vi) / bc2 + feps);
            }
            assert_memory_equal(mst_tensor_f32(p), wp, sizeof(wp));
            assert_memory_equal(mst_tensor_f32(m), wm, sizeof(wm));
            assert_memory_equal(mst_tensor_f32(v), wv, sizeof(wv));
        }
        mst_ctx_free(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),     cmocka_unit_test(test_sgd_by_hand),
        cmocka_unit_test(test_adam_by_hand),          cmocka_unit_test(test_skips_params_without_grad),
        cmocka_unit_test(test_converges_on_quadratic), cmocka_unit_test(test_state_memory_and_layout),
        cmocka_unit_test(test_defaults_and_names),    cmocka_unit_test(test_cost_formulas),
        cmocka_unit_test(test_update_op_errors),      cmocka_unit_test(test_optim_config_errors),
        cmocka_unit_test(test_optim_step_errors),     cmocka_unit_test(test_skipped_update_touches_nothing),
        cmocka_unit_test(test_update_bits_every_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
