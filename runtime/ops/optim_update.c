/* optim_update.c — the in-place parameter updates of SGD (momentum, dampening, Nesterov, weight
 * decay) and Adam/AdamW, as ops so graph mode can trace and replay the optimizer step.
 *
 * Everything that changes from step to step is an input tensor, never an attribute: the learning
 * rate (f64 ()), the per-parameter update counts (f64 (n_params), indexed by the attribute
 * `index`, incremented here) and the loss scaler's overflow flag (f32 (); when it is non-zero the
 * kernel returns without touching anything, the count included). Attributes hold only what is
 * fixed for a run (momentum, betas, ...), so a traced step replays with new values.
 *
 * Each update is one fused loop over the parameter that reads the gradient and the state once
 * and writes the parameter and the state once; the per-step scalars (bias corrections, step
 * size) are computed in double and the elementwise arithmetic runs in the parameter's dtype, as
 * PyTorch's single-tensor path does. The loop bodies are branch-free so they vectorize; the
 * trade-off is a multiply by 0 or 1 where an option is off.
 * Reference: torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW (PyTorch 2.x documentation).
 */
#include <math.h>

#include "runtime/cpu_features.h"
#include "runtime/ops/common.h"

/* Inputs shared by both updates. */
enum { IN_PARAM, IN_GRAD, IN_LR, IN_STEPS, IN_FOUND_INF, IN_STATE0 };
/* Integer attributes shared by both: the parameter's slot in `steps`, then the variant flag. */
enum { ATTR_INDEX, ATTR_FLAG };

/* ---- shared checks ---- */

static mst_status require_control(mst_ctx *ctx, const mst_op_call *c) {
    char d[96];
    const mst_tensor *lr = c->in[IN_LR], *steps = c->in[IN_STEPS], *found = c->in[IN_FOUND_INF];
    if (lr->dtype != MST_DTYPE_F64 || lr->ndim != 0)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "lr (input 2) must be f64 (), got %s", mst_tensor_desc(lr, d, sizeof(d)));
    if (steps->dtype != MST_DTYPE_F64 || steps->ndim != 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "steps (input 3) must be f64 (n_params), got %s",
                           mst_tensor_desc(steps, d, sizeof(d)));
    if (found->dtype != MST_DTYPE_F32 || found->ndim != 0)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "found_inf (input 4) must be f32 (), got %s",
                           mst_tensor_desc(found, d, sizeof(d)));
    int64_t i = c->attrs.i[ATTR_INDEX];
    if (i < 0 || i >= steps->numel)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "index %lld is outside steps' %lld entries", (long long)i,
                           (long long)steps->numel);
    return MST_OK;
}

/* Error unless grad and the state inputs match the parameter in dtype and shape. */
static mst_status require_like_param(mst_ctx *ctx, const mst_op_call *c) {
    mst_status s = op_require_float(ctx, c, IN_PARAM);
    if (s != MST_OK) return s;
    for (int i = 1; i < c->n_in; i++) {
        if (i >= IN_LR && i < IN_STATE0) continue;
        if ((s = op_require_same_dtype(ctx, c, IN_PARAM, i)) != MST_OK) return s;
        if ((s = op_require_same_shape(ctx, c, IN_PARAM, i)) != MST_OK) return s;
    }
    return require_control(ctx, c);
}

/* The count of this update (t >= 1), recorded; 0 when the step is skipped for an overflow. */
static int64_t take_step(const mst_op_call *c) {
    if (mst_tensor_f32(c->in[IN_FOUND_INF])[0] != 0) return 0;
    double *steps = mst_tensor_f64(c->in[IN_STEPS]);
    double t = steps[c->attrs.i[ATTR_INDEX]] + 1;
    steps[c->attrs.i[ATTR_INDEX]] = t;
    return (int64_t)t;
}

/* Bytes moved: every input is read, every mutated input is written back. */
static int64_t cost_bytes_inplace(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    int64_t b = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t nb = (int64_t)mst_tensor_nbytes(c->in[i]);
        if (i >= IN_LR && i < IN_STATE0) nb = i == IN_STEPS ? 8 : (int64_t)mst_dtype_size(c->in[i]->dtype);
        b += (d->mutates >> i & 1) ? 2 * nb : nb;
    }
    return b;
}

/* The widest vector path this CPU takes through the update loops: the build is generic x86-64
 * (SSE2, 4 floats a vector), and the same loop compiled for AVX2 ran ~2x faster on the mlp's
 * 235k parameters (bench_core's optimizer row). The bodies are plain C compiled twice; with
 * -ffp-contract=off (CMakeLists.txt) neither path fuses a multiply into an add, so both give the
 * bits of the formula evaluated one element at a time (test_optim checks that on every path). */
static bool update_use_avx2(void) { return mst_cpu_has(MST_CPU_AVX2); }

/* One range body for f32 and f64 (one-line instantiations), each compiled for the portable and
 * the AVX2 path, and the op's kernel as begin + the whole range (the portable one under
 * force_ref): the same loop the fused optimizer splits, so eager and graph agree bit for bit. */
#define UPDATE_RANGE_ONE(NAME, SUFFIX, T_, BODY)                                                               \
    static void NAME##_##SUFFIX##_portable(const mst_op_call *c, const mst_update_scalars *sc, int64_t lo, int64_t hi) { typedef T_ T; BODY(T) } \
    __attribute__((target("avx2"))) static void NAME##_##SUFFIX##_avx2(const mst_op_call *c, const mst_update_scalars *sc, int64_t lo, int64_t hi) { typedef T_ T; BODY(T) } \
    static void NAME##_##SUFFIX(const mst_op_call *c, const mst_update_scalars *sc, int64_t lo, int64_t hi) {  \
        (update_use_avx2() ? NAME##_##SUFFIX##_avx2 : NAME##_##SUFFIX##_portable)(c, sc, lo, hi);               \
    }
#define UPDATE_RANGES(NAME, BODY) UPDATE_RANGE_ONE(NAME, f32, float, BODY) UPDATE_RANGE_ONE(NAME, f64, double, BODY)
#define UPDATE_KERNELS(NAME, BEGIN, RANGE)                                                                      \
    static mst_status NAME##_f32(mst_ctx *ctx, const mst_op_call *c) {                                         \
        return run_whole(ctx, c, BEGIN, ctx->force_ref ? RANGE##_f32_portable : RANGE##_f32);                   \
    }                                                                                                          \
    static mst_status NAME##_f64(mst_ctx *ctx, const mst_op_call *c) {                                         \
        return run_whole(ctx, c, BEGIN, ctx->force_ref ? RANGE##_f64_portable : RANGE##_f64);                   \
    }

#define SQRT_T(x) _Generic((x), float: sqrtf, default: sqrt)(x)

/* One update as a kernel (eager mode, and graph mode's updates when the optimizer is not fused):
 * begin, then the elementwise range over the whole parameter, split over the context's pool for a
 * parameter of at least 2 k_update_min_chunk elements. Each element is computed alone, so the split
 * changes no bit; PyTorch's CPU update splits its loops the same way (at::parallel_for, grain
 * 32768). Before, eager mode ran every update on one thread: 44 us for the mlp's 784x256 weight
 * while the second thread waited, where graph mode's fused update split all six parameters. */
enum { k_update_min_chunk = 65536 };

typedef struct {
    const mst_op_call *c;
    const mst_update_scalars *sc;
    mst_update_range_fn range;
} update_job;

static void update_chunk(void *arg, int64_t lo, int64_t hi, int worker) {
    (void)worker;
    const update_job *j = arg;
    j->range(j->c, j->sc, lo, hi);
}

static mst_status run_whole(mst_ctx *ctx, const mst_op_call *c, mst_update_begin_fn begin, mst_update_range_fn range) {
    mst_update_scalars sc;
    if (!begin(c, &sc)) return MST_OK;
    update_job job = {c, &sc, range};     /* inline below 2 k_update_min_chunk elements (the pool's rule) */
    mst_parallel_for(ctx, c->in[IN_PARAM]->numel, k_update_min_chunk, update_chunk, &job);
    return MST_OK;
}

/* ---- SGD: inputs param, grad, lr, steps, found_inf[, momentum_buf]; f = momentum, dampening,
 *      weight_decay; i = index, nesterov ---- */

enum { SGD_MOMENTUM, SGD_DAMPENING, SGD_WD };

static mst_status infer_sgd(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    (void)out;
    mst_status s = require_like_param(ctx, c);
    if (s != MST_OK) return s;
    const double *f = c->attrs.f;
    if (!(f[SGD_MOMENTUM] >= 0 && isfinite(f[SGD_MOMENTUM])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "momentum must be finite and >= 0, got %g", f[SGD_MOMENTUM]);
    if (!(f[SGD_DAMPENING] >= 0 && f[SGD_DAMPENING] <= 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "dampening must be in [0, 1], got %g", f[SGD_DAMPENING]);
    if (!(f[SGD_WD] >= 0 && isfinite(f[SGD_WD])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "weight_decay must be finite and >= 0, got %g", f[SGD_WD]);
    if (f[SGD_MOMENTUM] > 0 && c->n_in <= IN_STATE0)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "momentum %g > 0 needs a momentum buffer (input 5)", f[SGD_MOMENTUM]);
    if (c->attrs.i[ATTR_FLAG] && (f[SGD_MOMENTUM] <= 0 || f[SGD_DAMPENING] != 0))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "nesterov needs momentum > 0 and dampening == 0, got momentum %g, dampening %g",
                           f[SGD_MOMENTUM], f[SGD_DAMPENING]);
    return MST_OK;
}

/* d = g + wd p;  b = t == 1 ? d : momentum b + (1 - dampening) d;
 * u = nesterov ? d + momentum b : b;  p -= lr u.
 * Without momentum the buffer is neither read nor written and u = d. With it, u = k_d d + k_b b
 * where (k_d, k_b) = (1, momentum) for Nesterov and (0, 1) otherwise. The first update never
 * reads the buffer (PyTorch clones d into it), so whatever it held cannot leak in.
 * Scalars: s = lr, weight_decay, momentum, 1 - dampening, k_d, k_b. */
enum { SGD_S_LR, SGD_S_WD, SGD_S_MOM, SGD_S_MIX, SGD_S_KD, SGD_S_KB };

static bool sgd_begin(const mst_op_call *c, mst_update_scalars *sc) {
    sc->t = take_step(c);
    if (sc->t == 0) return false;
    const double *f = c->attrs.f;
    const bool nesterov = c->attrs.i[ATTR_FLAG] != 0;
    sc->s[SGD_S_LR] = mst_tensor_f64(c->in[IN_LR])[0];
    sc->s[SGD_S_WD] = f[SGD_WD];
    sc->s[SGD_S_MOM] = f[SGD_MOMENTUM];
    sc->s[SGD_S_MIX] = 1.0 - f[SGD_DAMPENING];
    sc->s[SGD_S_KD] = nesterov ? 1.0 : 0.0;
    sc->s[SGD_S_KB] = nesterov ? f[SGD_MOMENTUM] : 1.0;
    return true;
}

#define SGD_RANGE_BODY(T)                                                                  \
    {                                                                                      \
        T *p = (T *)mst_tensor_data(c->in[IN_PARAM]);                                      \
        const T *g = (const T *)mst_tensor_data(c->in[IN_GRAD]);                           \
        const T lr = (T)sc->s[SGD_S_LR], wd = (T)sc->s[SGD_S_WD];                          \
        if (sc->s[SGD_S_MOM] == 0) {                                                       \
            for (int64_t i = lo; i < hi; i++) p[i] -= lr * (g[i] + wd * p[i]);             \
            return;                                                                        \
        }                                                                                  \
        T *buf = (T *)mst_tensor_data(c->in[IN_STATE0]);                                   \
        const T mom = (T)sc->s[SGD_S_MOM], mix = (T)sc->s[SGD_S_MIX];                      \
        const T k_d = (T)sc->s[SGD_S_KD], k_b = (T)sc->s[SGD_S_KB];                        \
        if (sc->t == 1) {                                                                  \
            for (int64_t i = lo; i < hi; i++) {                                            \
                T d = g[i] + wd * p[i];                                                    \
                buf[i] = d;                                                                \
                p[i] -= lr * (k_d * d + k_b * d);                                          \
            }                                                                              \
            return;                                                                        \
        }                                                                                  \
        for (int64_t i = lo; i < hi; i++) {                                                \
            T d = g[i] + wd * p[i];                                                        \
            T b = mom * buf[i] + mix * d;                                                  \
            buf[i] = b;                                                                    \
            p[i] -= lr * (k_d * d + k_b * b);                                              \
        }                                                                                  \
    }
UPDATE_RANGES(sgd_range, SGD_RANGE_BODY)
UPDATE_KERNELS(sgd_update, sgd_begin, sgd_range)

static int64_t cost_sgd(const mst_op_call *c) {
    const double *f = c->attrs.f;
    int64_t per = 2;                                    /* p -= lr u */
    if (f[SGD_WD] != 0) per += 2;
    if (f[SGD_MOMENTUM] != 0) per += 3 + (c->attrs.i[ATTR_FLAG] ? 2 : 0);
    return per * c->in[IN_PARAM]->numel;
}

const mst_op_desc mst_desc_sgd_update = {
    .name = "sgd_update", .min_inputs = 5, .max_inputs = 6, .n_outputs = 0,
    .flags = MST_OPF_PARAM_UPDATE,
    .mutates = 1u << IN_PARAM | 1u << IN_STEPS | 1u << IN_STATE0, .nondiff = 0x3fu,
    .attr_i = {"index", "nesterov"},
    .attr_f = {"momentum", "dampening", "weight_decay"},
    .infer = infer_sgd, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(sgd_update),
    .param_index_attr = 1 + ATTR_INDEX, .update_begin = sgd_begin, .update_range = FLOAT_KERNEL_TABLE(sgd_range),
    .flops = cost_sgd, .bytes = cost_bytes_inplace,
};

/* ---- Adam/AdamW: inputs param, grad, lr, steps, found_inf, m, v; f = beta1, beta2, eps,
 *      weight_decay; i = index, decoupled ---- */

enum { ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WD };

static mst_status infer_adam(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    (void)out;
    mst_status s = require_like_param(ctx, c);
    if (s != MST_OK) return s;
    const double *f = c->attrs.f;
    if (!(f[ADAM_BETA1] >= 0 && f[ADAM_BETA1] < 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "beta1 must be in [0, 1), got %g", f[ADAM_BETA1]);
    if (!(f[ADAM_BETA2] >= 0 && f[ADAM_BETA2] < 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "beta2 must be in [0, 1), got %g", f[ADAM_BETA2]);
    if (!(f[ADAM_EPS] > 0 && isfinite(f[ADAM_EPS])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "eps must be finite and > 0, got %g", f[ADAM_EPS]);
    if (!(f[ADAM_WD] >= 0 && isfinite(f[ADAM_WD])))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "weight_decay must be finite and >= 0, got %g", f[ADAM_WD]);
    return MST_OK;
}


/* Adam:  g += wd p;  AdamW:  p *= 1 - lr wd.  Then
 * m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 * p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
 * Scalars (double, cast to T in the loop as before the split): step size, sqrt(1 - beta2^t),
 * the gradient's weight decay, the decoupled decay factor. */
enum { ADAM_S_STEP, ADAM_S_BC2, ADAM_S_GWD, ADAM_S_DECAY };

static bool adam_begin(const mst_op_call *c, mst_update_scalars *sc) {
    sc->t = take_step(c);
    if (sc->t == 0) return false;
    const double *f = c->attrs.f;
    const double lr = mst_tensor_f64(c->in[IN_LR])[0], t = (double)sc->t;
    const bool decoupled = c->attrs.i[ATTR_FLAG] != 0;
    sc->s[ADAM_S_STEP] = lr / (1.0 - pow(f[ADAM_BETA1], t));
    sc->s[ADAM_S_BC2] = sqrt(1.0 - pow(f[ADAM_BETA2], t));
    sc->s[ADAM_S_GWD] = decoupled ? 0.0 : f[ADAM_WD];
    sc->s[ADAM_S_DECAY] = decoupled ? 1.0 - lr * f[ADAM_WD] : 1.0;
    return true;
}

#define ADAM_RANGE_BODY(T)                                                                 \
    {                                                                                      \
        const double *f = c->attrs.f;                                                      \
        T *p = (T *)mst_tensor_data(c->in[IN_PARAM]);                                      \
        const T *g = (const T *)mst_tensor_data(c->in[IN_GRAD]);                           \
        T *m = (T *)mst_tensor_data(c->in[IN_STATE0]);                                     \
        T *v = (T *)mst_tensor_data(c->in[IN_STATE0 + 1]);                                 \
        const T b1 = (T)f[ADAM_BETA1], b2 = (T)f[ADAM_BETA2];                              \
        const T one_b1 = (T)(1.0 - f[ADAM_BETA1]), one_b2 = (T)(1.0 - f[ADAM_BETA2]);      \
        const T step_size = (T)sc->s[ADAM_S_STEP], bc2_sqrt = (T)sc->s[ADAM_S_BC2];        \
        const T eps = (T)f[ADAM_EPS];                                                      \
        const T g_wd = (T)sc->s[ADAM_S_GWD], decay = (T)sc->s[ADAM_S_DECAY];               \
        for (int64_t i = lo; i < hi; i++) {                                                \
            T gi = g[i] + g_wd * p[i];                                                     \
            T mi = b1 * m[i] + one_b1 * gi;                                                \
            T vi = b2 * v[i] + one_b2 * gi * gi;                                           \
            m[i] = mi;                                                                     \
            v[i] = vi;                                                                     \
            p[i] = decay * p[i] - step_size * mi / (SQRT_T(vi) / bc2_sqrt + eps);          \
        }                                                                                  \
    }
UPDATE_RANGES(adam_range, ADAM_RANGE_BODY)
UPDATE_KERNELS(adam_update, adam_begin, adam_range)

static int64_t cost_adam(const mst_op_call *c) {
    int64_t per = 13;                                   /* moments 7, denominator 3, update 3 */
    if (c->attrs.f[ADAM_WD] != 0) per += c->attrs.i[ATTR_FLAG] ? 1 : 2;
    return per * c->in[IN_PARAM]->numel;
}

const mst_op_desc mst_desc_adam_update = {
    .name = "adam_update", .min_inputs = 7, .max_inputs = 7, .n_outputs = 0,
    .flags = MST_OPF_PARAM_UPDATE,
    .mutates = 1u << IN_PARAM | 1u << IN_STEPS | 1u << IN_STATE0 | 1u << (IN_STATE0 + 1), .nondiff = 0x7fu,
    .attr_i = {"index", "decoupled"},
    .attr_f = {"beta1", "beta2", "eps", "weight_decay"},
    .infer = infer_adam, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(adam_update),
    .param_index_attr = 1 + ATTR_INDEX, .update_begin = adam_begin, .update_range = FLOAT_KERNEL_TABLE(adam_range),
    .flops = cost_adam, .bytes = cost_bytes_inplace,
};

/* ---- public constructors ---- */

mst_status mst_sgd_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *lr, mst_tensor *steps,
                          mst_tensor *found_inf, mst_tensor *momentum_buf, int index, double momentum, double dampening,
                          double weight_decay, bool nesterov) {
    /* A NULL buffer where momentum needs one is either an earlier failure passing through or a
     * caller error; the dispatcher tells them apart for the other inputs. */
    if (!momentum_buf && momentum > 0 && ctx->status != MST_OK) return ctx->status;
    mst_attrs a = {.i = {[ATTR_INDEX] = index, [ATTR_FLAG] = nesterov},
                   .f = {[SGD_MOMENTUM] = momentum, [SGD_DAMPENING] = dampening, [SGD_WD] = weight_decay}};
    mst_tensor *in[6] = {param, grad, lr, steps, found_inf, momentum_buf};
    return mst_dispatch(ctx, MST_OP_SGD_UPDATE, momentum_buf ? 6 : 5, in, &a, NULL);
}

mst_status mst_adam_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *lr, mst_tensor *steps,
                           mst_tensor *found_inf, mst_tensor *m, mst_tensor *v, int index, double beta1, double beta2,
                           double eps, double weight_decay, bool decoupled) {
    mst_attrs a = {.i = {[ATTR_INDEX] = index, [ATTR_FLAG] = decoupled},
                   .f = {[ADAM_BETA1] = beta1, [ADAM_BETA2] = beta2, [ADAM_EPS] = eps, [ADAM_WD] = weight_decay}};
    mst_tensor *in[7] = {param, grad, lr, steps, found_inf, m, v};
    return mst_dispatch(ctx, MST_OP_ADAM_UPDATE, 7, in, &a, NULL);
}
