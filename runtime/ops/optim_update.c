/* optim_update.c — the in-place parameter updates of SGD (momentum, dampening, Nesterov, weight
 * decay) and Adam/AdamW, as ops so graph mode can trace and fuse the optimizer step.
 *
 * Each update is one fused loop over the parameter that reads the gradient and the state once
 * and writes the parameter and the state once; the per-step scalars (bias corrections, step
 * size) are computed in double and the elementwise arithmetic runs in the parameter's dtype, as
 * PyTorch's single-tensor path does. The loop bodies are branch-free so they vectorize; the
 * trade-off is a multiply by 0 or 1 where an option is off.
 * Reference: torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW (PyTorch 2.x documentation).
 */
#include <math.h>

#include "runtime/ops/common.h"

/* ---- shared checks ---- */

/* Error unless inputs 1..n_in-1 match input 0 (the parameter) in dtype and shape. */
static mst_status require_like_param(mst_ctx *ctx, const mst_op_call *c) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    for (int i = 1; i < c->n_in; i++) {
        if ((s = op_require_same_dtype(ctx, c, 0, i)) != MST_OK) return s;
        if ((s = op_require_same_shape(ctx, c, 0, i)) != MST_OK) return s;
    }
    return MST_OK;
}

static mst_status require_step(mst_ctx *ctx, const mst_op_call *c, int64_t step) {
    if (step >= 1) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_ARG, "step must be >= 1 (the 1-based count of this update), got %lld",
                       (long long)step);
}

/* Bytes moved: every input is read, every mutated input is written back. */
static int64_t cost_bytes_inplace(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    int64_t b = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t nb = (int64_t)mst_tensor_nbytes(c->in[i]);
        b += (d->mutates >> i & 1) ? 2 * nb : nb;
    }
    return b;
}

/* ---- SGD: inputs param, grad[, momentum_buf]; f = lr, momentum, dampening, weight_decay;
 *      i = nesterov, step ---- */

enum { SGD_LR, SGD_MOMENTUM, SGD_DAMPENING, SGD_WD };
enum { SGD_NESTEROV, SGD_STEP };

static mst_status infer_sgd(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_like_param(ctx, c);
    if (s != MST_OK) return s;
    const double *f = c->attrs.f;
    if (!(f[SGD_LR] >= 0 && isfinite(f[SGD_LR])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "lr must be finite and >= 0, got %g", f[SGD_LR]);
    if (!(f[SGD_MOMENTUM] >= 0 && isfinite(f[SGD_MOMENTUM])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "momentum must be finite and >= 0, got %g", f[SGD_MOMENTUM]);
    if (!(f[SGD_DAMPENING] >= 0 && f[SGD_DAMPENING] <= 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "dampening must be in [0, 1], got %g", f[SGD_DAMPENING]);
    if (!(f[SGD_WD] >= 0 && isfinite(f[SGD_WD])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "weight_decay must be finite and >= 0, got %g", f[SGD_WD]);
    if (f[SGD_MOMENTUM] > 0 && c->n_in < 3)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "momentum %g > 0 needs a momentum buffer (input 2)", f[SGD_MOMENTUM]);
    if (c->attrs.i[SGD_NESTEROV] && (f[SGD_MOMENTUM] <= 0 || f[SGD_DAMPENING] != 0))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "nesterov needs momentum > 0 and dampening == 0, got momentum %g, dampening %g",
                           f[SGD_MOMENTUM], f[SGD_DAMPENING]);
    return require_step(ctx, c, c->attrs.i[SGD_STEP]);
}

/* d = g + wd p;  b = step == 1 ? d : momentum b + (1 - dampening) d;
 * u = nesterov ? d + momentum b : b;  p -= lr u.
 * Without momentum the buffer is neither read nor written and u = d. With it, u = k_d d + k_b b
 * where (k_d, k_b) = (1, momentum) for Nesterov and (0, 1) otherwise. The first step never reads
 * the buffer (PyTorch clones d into it), so whatever it held cannot leak in. */
#define SGD_BODY(T)                                                                        \
    {                                                                                      \
        const double *f = c->attrs.f;                                                      \
        T *p = (T *)mst_tensor_data(c->in[0]);                                             \
        const T *g = (const T *)mst_tensor_data(c->in[1]);                                 \
        const int64_t n = c->in[0]->numel;                                                 \
        const T lr = (T)f[SGD_LR], wd = (T)f[SGD_WD];                                      \
        if (f[SGD_MOMENTUM] == 0) {                                                        \
            for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);               \
            return MST_OK;                                                                 \
        }                                                                                  \
        T *buf = (T *)mst_tensor_data(c->in[2]);                                           \
        const bool nesterov = c->attrs.i[SGD_NESTEROV] != 0;                               \
        const T mom = (T)f[SGD_MOMENTUM], mix = (T)(1.0 - f[SGD_DAMPENING]);               \
        const T k_d = nesterov ? (T)1 : (T)0, k_b = nesterov ? mom : (T)1;                 \
        if (c->attrs.i[SGD_STEP] == 1) {                                                   \
            for (int64_t i = 0; i < n; i++) {                                              \
                T d = g[i] + wd * p[i];                                                    \
                buf[i] = d;                                                                \
                p[i] -= lr * (k_d * d + k_b * d);                                          \
            }                                                                              \
            return MST_OK;                                                                 \
        }                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                  \
            T d = g[i] + wd * p[i];                                                        \
            T b = mom * buf[i] + mix * d;                                                  \
            buf[i] = b;                                                                    \
            p[i] -= lr * (k_d * d + k_b * b);                                              \
        }                                                                                  \
        return MST_OK;                                                                     \
    }
FLOAT_KERNELS(sgd_update, SGD_BODY)

static int64_t cost_sgd(const mst_op_call *c) {
    const double *f = c->attrs.f;
    int64_t per = 2;                                    /* p -= lr u */
    if (f[SGD_WD] != 0) per += 2;
    if (f[SGD_MOMENTUM] != 0) per += 3 + (c->attrs.i[SGD_NESTEROV] ? 2 : 0);
    return per * c->in[0]->numel;
}

const mst_op_desc mst_desc_sgd_update = {
    .name = "sgd_update", .min_inputs = 2, .max_inputs = 3, .n_outputs = 0,
    .mutates = 1u << 0 | 1u << 2, .nondiff = 0x7u,
    .attr_i = {"nesterov", "step"},
    .attr_f = {"lr", "momentum", "dampening", "weight_decay"},
    .infer = infer_sgd, .cpu = FLOAT_KERNEL_TABLE(sgd_update),
    .flops = cost_sgd, .bytes = cost_bytes_inplace,
};

/* ---- Adam/AdamW: inputs param, grad, m, v; f = lr, beta1, beta2, eps, weight_decay;
 *      i = decoupled, step ---- */

enum { ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WD };
enum { ADAM_DECOUPLED, ADAM_STEP };

static mst_status infer_adam(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_like_param(ctx, c);
    if (s != MST_OK) return s;
    const double *f = c->attrs.f;
    if (!(f[ADAM_LR] >= 0 && isfinite(f[ADAM_LR])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "lr must be finite and >= 0, got %g", f[ADAM_LR]);
    if (!(f[ADAM_BETA1] >= 0 && f[ADAM_BETA1] < 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "beta1 must be in [0, 1), got %g", f[ADAM_BETA1]);
    if (!(f[ADAM_BETA2] >= 0 && f[ADAM_BETA2] < 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "beta2 must be in [0, 1), got %g", f[ADAM_BETA2]);
    if (!(f[ADAM_EPS] > 0 && isfinite(f[ADAM_EPS])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "eps must be finite and > 0, got %g", f[ADAM_EPS]);
    if (!(f[ADAM_WD] >= 0 && isfinite(f[ADAM_WD])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "weight_decay must be finite and >= 0, got %g", f[ADAM_WD]);
    return require_step(ctx, c, c->attrs.i[ADAM_STEP]);
}

#define SQRT_T(x) _Generic((x), float: sqrtf, default: sqrt)(x)

/* Adam:  g += wd p;  AdamW:  p *= 1 - lr wd.  Then
 * m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 * p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps). */
#define ADAM_BODY(T)                                                                       \
    {                                                                                      \
        const double *f = c->attrs.f;                                                      \
        T *p = (T *)mst_tensor_data(c->in[0]);                                             \
        const T *g = (const T *)mst_tensor_data(c->in[1]);                                 \
        T *m = (T *)mst_tensor_data(c->in[2]), *v = (T *)mst_tensor_data(c->in[3]);        \
        const int64_t n = c->in[0]->numel;                                                 \
        const double t = (double)c->attrs.i[ADAM_STEP];                                    \
        const bool decoupled = c->attrs.i[ADAM_DECOUPLED] != 0;                            \
        const T b1 = (T)f[ADAM_BETA1], b2 = (T)f[ADAM_BETA2];                              \
        const T one_b1 = (T)(1.0 - f[ADAM_BETA1]), one_b2 = (T)(1.0 - f[ADAM_BETA2]);      \
        const T step_size = (T)(f[ADAM_LR] / (1.0 - pow(f[ADAM_BETA1], t)));               \
        const T bc2_sqrt = (T)sqrt(1.0 - pow(f[ADAM_BETA2], t));                           \
        const T eps = (T)f[ADAM_EPS];                                                      \
        const T g_wd = decoupled ? (T)0 : (T)f[ADAM_WD];                                   \
        const T decay = decoupled ? (T)(1.0 - f[ADAM_LR] * f[ADAM_WD]) : (T)1;             \
        for (int64_t i = 0; i < n; i++) {                                                  \
            T gi = g[i] + g_wd * p[i];                                                     \
            T mi = b1 * m[i] + one_b1 * gi;                                                \
            T vi = b2 * v[i] + one_b2 * gi * gi;                                           \
            m[i] = mi;                                                                     \
            v[i] = vi;                                                                     \
            p[i] = decay * p[i] - step_size * mi / (SQRT_T(vi) / bc2_sqrt + eps);          \
        }                                                                                  \
        return MST_OK;                                                                     \
    }
FLOAT_KERNELS(adam_update, ADAM_BODY)

static int64_t cost_adam(const mst_op_call *c) {
    int64_t per = 13;                                   /* moments 7, denominator 3, update 3 */
    if (c->attrs.f[ADAM_WD] != 0) per += c->attrs.i[ADAM_DECOUPLED] ? 1 : 2;
    return per * c->in[0]->numel;
}

const mst_op_desc mst_desc_adam_update = {
    .name = "adam_update", .min_inputs = 4, .max_inputs = 4, .n_outputs = 0,
    .mutates = 1u << 0 | 1u << 2 | 1u << 3, .nondiff = 0xfu,
    .attr_i = {"decoupled", "step"},
    .attr_f = {"lr", "beta1", "beta2", "eps", "weight_decay"},
    .infer = infer_adam, .cpu = FLOAT_KERNEL_TABLE(adam_update),
    .flops = cost_adam, .bytes = cost_bytes_inplace,
};

/* ---- public constructors ---- */

mst_status mst_sgd_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *momentum_buf,
                          double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                          int64_t step) {
    /* A NULL buffer where momentum needs one is either an earlier failure passing through or a
     * caller error; the dispatcher tells them apart for the other inputs. */
    if (!momentum_buf && momentum > 0 && ctx->status != MST_OK) return ctx->status;
    mst_attrs a = {.i = {[SGD_NESTEROV] = nesterov, [SGD_STEP] = step},
                   .f = {[SGD_LR] = lr, [SGD_MOMENTUM] = momentum, [SGD_DAMPENING] = dampening, [SGD_WD] = weight_decay}};
    mst_tensor *in[3] = {param, grad, momentum_buf};
    return mst_dispatch(ctx, MST_OP_SGD_UPDATE, momentum_buf ? 3 : 2, in, &a, NULL);
}

mst_status mst_adam_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *m, mst_tensor *v,
                           double lr, double beta1, double beta2, double eps, double weight_decay,
                           bool decoupled, int64_t step) {
    mst_attrs a = {.i = {[ADAM_DECOUPLED] = decoupled, [ADAM_STEP] = step},
                   .f = {[ADAM_LR] = lr, [ADAM_BETA1] = beta1, [ADAM_BETA2] = beta2, [ADAM_EPS] = eps,
                         [ADAM_WD] = weight_decay}};
    mst_tensor *in[4] = {param, grad, m, v};
    return mst_dispatch(ctx, MST_OP_ADAM_UPDATE, 4, in, &a, NULL);
}
