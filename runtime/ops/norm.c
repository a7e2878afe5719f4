/* norm.c — batch normalization and layer normalization, with the gradient ops their backward
 * rules call.
 *
 * Statistics accumulate in double for every dtype and take two passes (the mean, then the sum of
 * squared deviations from it): one more read of x than the one-pass E[x^2] - E[x]^2 form, which
 * cancels catastrophically when |mean| >> std. Training batchnorm normalizes with the batch's
 * biased variance and updates the running statistics in place with the unbiased one; evaluation
 * normalizes with the running statistics (PyTorch's semantics, torch.nn.functional.batch_norm).
 * The fast batchnorm kernels walk x in memory order with per-channel accumulators, which keeps
 * (N, C) inputs unit-stride; the reference kernels loop channel by channel.
 * References: Ioffe & Szegedy 2015 (arXiv:1502.03167), Ba, Kiros & Hinton 2016 (arXiv:1607.06450).
 */
#include <math.h>
#include <stdlib.h>

#include "runtime/amp/half.h"
#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "runtime/ops/bn_rows.h"
#include "runtime/ops/common.h"
#include "runtime/ops/pool_slab.h"

/* ======================================================================================= */
/* batchnorm                                                                                */
/* ======================================================================================= */

/* x viewed as (N, C, S): S = H * W for (N, C, H, W), 1 for (N, C). M = N * S values per channel. */
typedef struct {
    int64_t n, c, s, m;
} bn_dims;

static bn_dims bn_dims_of(const mst_tensor *x) {
    bn_dims d = {x->shape[0], x->shape[1], x->ndim == 4 ? x->shape[2] * x->shape[3] : 1, 0};
    d.m = d.n * d.s;
    return d;
}

/* Error unless x is (N, C) or (N, C, H, W). */
static mst_status bn_require_x(mst_ctx *ctx, const mst_op_call *c, int i, const char *what) {
    int nd = c->in[i]->ndim;
    if (nd == 2 || nd == 4) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s must have rank 2 (N, C) or 4 (N, C, H, W), got rank %d", what, nd);
}

/* Error unless input i is a vector of length n (per channel or per feature). */
static mst_status require_vector(mst_ctx *ctx, const mst_op_call *c, int i, const char *what, int64_t n,
                                 const char *of) {
    const mst_tensor *t = c->in[i];
    if (t->ndim == 1 && t->shape[0] == n) return MST_OK;
    char got[96];
    return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s (input %d) must have shape (%lld) to match %s, got %s", what, i,
                       (long long)n, of, mst_shape_str(t->ndim, t->shape, got, sizeof(got)));
}

/* The meta of an (n) vector with every dim slot set: meta_make leaves the unused slots
 * uninitialized, which gcc's -Wmaybe-uninitialized reports when the struct is copied out. */
static mst_meta meta_vector(mst_dtype dtype, int64_t n) { return (mst_meta){.dtype = dtype, .ndim = 1, .shape = {n}}; }

/* Error unless every input is a float tensor of input 0's dtype. */
static mst_status require_float_all(mst_ctx *ctx, const mst_op_call *c) {
    mst_status s = op_require_float(ctx, c, 0);
    for (int i = 1; s == MST_OK && i < c->n_in; i++) s = op_require_same_dtype(ctx, c, 0, i);
    return s;
}

static mst_status require_eps(mst_ctx *ctx, const mst_op_call *c, double eps) {
    if (eps > 0 && isfinite(eps)) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_ARG, "eps must be a finite number > 0, got %g", eps);
}

/* in: x, gamma, beta, running_mean, running_var; attrs i[0] training, i[1] relu (graph mode's
 * epilogue: y = max(y, 0) as it is stored; the public op never sets it), f[0] momentum, f[1] eps.
 * out: y (like x), save_mean (C), save_invstd (C). */
/* Batch norm's inputs come in groups (activations; parameters; running or saved statistics), each
 * of one float dtype. A later group has the activations' dtype, or is f32 beside half activations:
 * amp keeps parameters (O2) and running statistics (O2, O3: updated in place, never cast) in f32,
 * and the half kernel passes f32 operands to the f32 kernel untouched. group[k] is the first input
 * of group k; the last group ends before input n_inputs. */
static mst_status bn_require_groups(mst_ctx *ctx, const mst_op_call *c, const int *group, int n_groups, int n_inputs) {
    mst_status s = op_require_float(ctx, c, 0);
    for (int g = 0; s == MST_OK && g < n_groups; g++) {
        int first = group[g], end = g + 1 < n_groups ? group[g + 1] : n_inputs;
        bool f32_beside_half = g > 0 && mst_dtype_is_half(c->in[0]->dtype) && c->in[first]->dtype == MST_DTYPE_F32;
        for (int i = first; s == MST_OK && i < end; i++) s = op_require_same_dtype(ctx, c, f32_beside_half ? first : 0, i);
    }
    return s;
}

static mst_status infer_batchnorm(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    static const char *const names[] = {"x", "gamma", "beta", "running_mean", "running_var"};
    mst_status s = bn_require_groups(ctx, c, (const int[]){0, 1, 3}, 3, c->n_in);     /* x; gamma, beta; running */
    if (s == MST_OK) s = bn_require_x(ctx, c, 0, "x");
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0];
    int64_t ch = x->shape[1];
    for (int i = 1; i < 5; i++)
        if ((s = require_vector(ctx, c, i, names[i], ch, "the channels of x (dim 1)")) != MST_OK) return s;
    if ((s = require_eps(ctx, c, c->attrs.f[1])) != MST_OK) return s;
    double momentum = c->attrs.f[0];
    if (!(momentum >= 0 && momentum <= 1))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "momentum must be in [0, 1], got %g", momentum);
    bn_dims d = bn_dims_of(x);
    if (c->attrs.i[0] && d.m <= 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "expected more than 1 value per channel when training, got N*H*W = %lld",
                           (long long)d.m);
    /* the saved statistics take gamma's dtype: f32 beside half x under amp O2 */
    out[0] = meta_like(x);
    out[1] = meta_vector(c->in[1]->dtype, ch);
    out[2] = meta_vector(c->in[1]->dtype, ch);
    return MST_OK;
}

/* k arrays of C doubles of scratch (a spare slot so C = 0 still gets a valid pointer). */
static double *bn_scratch(mst_ctx *ctx, int64_t ch, int k) {
    return (double *)mst_ctx_workspace(ctx, (size_t)(k * ch + 1) * sizeof(double));
}

/* Threads: the fast kernels split the channels into ranges over the context's pool. Every
 * per-channel sum runs over the same elements in the same order whatever the range, so the
 * results are the same bits for any thread count; the price is that each range walks all N
 * images (for (N, C) inputs: a short run of every row) instead of one stream through memory.
 * A range holds at least k_bn_min_chunk elements (about 50 us of one core), so small inputs run
 * inline. */
enum { k_bn_min_chunk = 65536 };

typedef struct {
    const mst_op_call *c;
    bn_dims d;
    double *scratch;        /* k arrays of C doubles, each channel's entries written by its range only */
} bn_job;

/* The kernel: scratch of k per-channel arrays, then CHUNK over the channels of X. */
#define BN_RUN(X, k, CHUNK)                                                                          \
    {                                                                                                \
        bn_dims d = bn_dims_of(X);                                                                   \
        double *scratch = bn_scratch(ctx, d.c, k);                                                   \
        if (!scratch) return ctx->status;                                                            \
        bn_job job = {c, d, scratch};                                                                \
        int64_t per_channel = d.m > 0 ? d.m : 1;                                                     \
        mst_parallel_for(ctx, d.c, (k_bn_min_chunk + per_channel - 1) / per_channel, CHUNK, &job);   \
        return MST_OK;                                                                               \
    }

/* Runs STMT for every element of x viewed as (N, C, S) whose channel is in [c0, c1), in memory
 * order, with i the element and ch its channel. (N, C) inputs (S = 1) get one unit-stride loop
 * over the channels per row instead of runs of length 1. */
#define BN_FOR_EACH(d, c0, c1, STMT)                                                                 \
    for (int64_t n = 0; n < (d).n; n++) {                                                            \
        if ((d).s == 1)                                                                              \
            for (int64_t ch = (c0), i = n * (d).c + (c0); ch < (c1); ch++, i++) { STMT; }            \
        else                                                                                         \
            for (int64_t ch = (c0); ch < (c1); ch++)                                                 \
                for (int64_t i = (n * (d).c + ch) * (d).s, end_ = i + (d).s; i < end_; i++) { STMT; } \
    }
/* acc1[ch] += E1 and acc2[ch] += E2 over every element of the channels [c0, c1) (E2 may be 0
 * for one sum). Runs of S elements use four partial sums: double adds cannot be reordered by the
 * compiler (no -ffast-math), and one chain of dependent adds would cap the pass at one element
 * per add latency. A channel's sums see its elements in the same order whatever the range. */
#define BN_ACCUMULATE(d, c0, c1, acc1, E1, acc2, E2)                                                 \
    for (int64_t n = 0; n < (d).n; n++) {                                                            \
        if ((d).s == 1) {                                                                            \
            for (int64_t ch = (c0), i = n * (d).c + (c0); ch < (c1); ch++, i++) { acc1[ch] += (E1); acc2[ch] += (E2); } \
            continue;                                                                                \
        }                                                                                            \
        for (int64_t ch = (c0); ch < (c1); ch++) {                                                   \
            double a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;                   \
            int64_t i_ = (n * (d).c + ch) * (d).s, end_ = i_ + (d).s;                                \
            for (; i_ + 4 <= end_; i_ += 4) {                                                        \
                { const int64_t i = i_;     a0 += (E1); b0 += (E2); }                                \
                { const int64_t i = i_ + 1; a1 += (E1); b1 += (E2); }                                \
                { const int64_t i = i_ + 2; a2 += (E1); b2 += (E2); }                                \
                { const int64_t i = i_ + 3; a3 += (E1); b3 += (E2); }                                \
            }                                                                                        \
            for (; i_ < end_; i_++) { const int64_t i = i_; a0 += (E1); b0 += (E2); }                \
            acc1[ch] += (a0 + a1) + (a2 + a3);                                                       \
            acc2[ch] += (b0 + b1) + (b2 + b3);                                                       \
        }                                                                                            \
    }

/* Fast forward, channels [c0, c1): per-channel mean and biased variance by two memory-order
 * passes, then y = (x - mean) a + beta in T with a = gamma invstd (subtracting first keeps y
 * accurate when |mean| >> std). */
#define BN_FWD_CHUNK_BODY                                                                            \
    {                                                                                                \
        const bn_job *j = arg;                                                                       \
        const mst_op_call *c = j->c;                                                                 \
        bn_dims d = j->d;                                                                            \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                                           \
        const T *gamma = (const T *)mst_tensor_data(c->in[1]), *beta = (const T *)mst_tensor_data(c->in[2]); \
        T *rmean = (T *)mst_tensor_data(c->in[3]), *rvar = (T *)mst_tensor_data(c->in[4]);           \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                      \
        T *save_mean = (T *)mst_tensor_data(c->out[1]), *save_invstd = (T *)mst_tensor_data(c->out[2]); \
        double momentum = c->attrs.f[0], eps = c->attrs.f[1];                                        \
        double *mean = j->scratch;                                                                   \
        double *invstd = mean + d.c, *acc = invstd + d.c, *scale = acc + d.c;                        \
        if (c->attrs.i[0]) {                                                                         \
            for (int64_t ch = c0; ch < c1; ch++) mean[ch] = acc[ch] = invstd[ch] = 0;                \
            BN_ACCUMULATE(d, c0, c1, mean, (double)x[i], acc, 0.0)                                   \
            for (int64_t ch = c0; ch < c1; ch++) mean[ch] /= (double)d.m;                            \
            BN_ACCUMULATE(d, c0, c1, acc, ((double)x[i] - mean[ch]) * ((double)x[i] - mean[ch]), invstd, 0.0) \
            for (int64_t ch = c0; ch < c1; ch++) {                                                   \
                double var = acc[ch] / (double)d.m;                                                  \
                invstd[ch] = 1.0 / sqrt(var + eps);                                                  \
                rmean[ch] = (T)((1 - momentum) * (double)rmean[ch] + momentum * mean[ch]);           \
                rvar[ch] = (T)((1 - momentum) * (double)rvar[ch] + momentum * var * (double)d.m / (double)(d.m - 1)); \
            }                                                                                        \
        } else {                                                                                     \
            for (int64_t ch = c0; ch < c1; ch++) {                                                   \
                mean[ch] = (double)rmean[ch];                                                        \
                invstd[ch] = 1.0 / sqrt((double)rvar[ch] + eps);                                     \
            }                                                                                        \
        }                                                                                            \
        for (int64_t ch = c0; ch < c1; ch++) {                                                       \
            save_mean[ch] = (T)mean[ch];                                                             \
            save_invstd[ch] = (T)invstd[ch];                                                         \
            scale[ch] = (double)gamma[ch] * invstd[ch];                                              \
        }                                                                                            \
        if (c->attrs.i[1])  /* graph mode's relu epilogue, applied as the value is stored */          \
            BN_FOR_EACH(d, c0, c1, { T v_ = (x[i] - (T)mean[ch]) * (T)scale[ch] + beta[ch]; y[i] = v_ <= 0 ? (T)0 : v_; }) \
        else                                                                                         \
            BN_FOR_EACH(d, c0, c1, y[i] = (x[i] - (T)mean[ch]) * (T)scale[ch] + beta[ch])            \
    }
FLOAT_CHUNKS(bn_fwd_chunk, BN_FWD_CHUNK_BODY, c0, c1)
#define BN_FWD_BODY(T) BN_RUN(c->in[0], 4, FLOAT_CHUNK(bn_fwd_chunk, T))
FLOAT_KERNELS(batchnorm_direct, BN_FWD_BODY)

/* Reference forward: channel by channel, every step in double, the textbook formula. */
#define BN_FWD_REF_BODY(T)                                                                           \
    {                                                                                                \
        bn_dims d = bn_dims_of(c->in[0]);                                                            \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                                           \
        const T *gamma = (const T *)mst_tensor_data(c->in[1]), *beta = (const T *)mst_tensor_data(c->in[2]); \
        T *rmean = (T *)mst_tensor_data(c->in[3]), *rvar = (T *)mst_tensor_data(c->in[4]);           \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                      \
        T *save_mean = (T *)mst_tensor_data(c->out[1]), *save_invstd = (T *)mst_tensor_data(c->out[2]); \
        double momentum = c->attrs.f[0], eps = c->attrs.f[1];                                        \
        for (int64_t ch = 0; ch < d.c; ch++) {                                                       \
            double mean, var;                                                                        \
            if (c->attrs.i[0]) {                                                                     \
                double sum = 0, sq = 0;                                                              \
                for (int64_t n = 0; n < d.n; n++)                                                    \
                    for (int64_t k = 0; k < d.s; k++) sum += x[(n * d.c + ch) * d.s + k];            \
                mean = sum / (double)d.m;                                                            \
                for (int64_t n = 0; n < d.n; n++)                                                    \
                    for (int64_t k = 0; k < d.s; k++) {                                              \
                        double t = x[(n * d.c + ch) * d.s + k] - mean;                               \
                        sq += t * t;                                                                 \
                    }                                                                                \
                var = sq / (double)d.m;                                                              \
                double unbiased = sq / (double)(d.m - 1);                                            \
                rmean[ch] = (T)((1 - momentum) * (double)rmean[ch] + momentum * mean);               \
                rvar[ch] = (T)((1 - momentum) * (double)rvar[ch] + momentum * unbiased);             \
            } else {                                                                                 \
                mean = rmean[ch];                                                                    \
                var = rvar[ch];                                                                      \
            }                                                                                        \
            double invstd = 1.0 / sqrt(var + eps);                                                   \
            save_mean[ch] = (T)mean;                                                                 \
            save_invstd[ch] = (T)invstd;                                                             \
            for (int64_t n = 0; n < d.n; n++)                                                        \
                for (int64_t k = 0; k < d.s; k++) {                                                  \
                    int64_t i = (n * d.c + ch) * d.s + k;                                            \
                    T v_ = (T)((x[i] - mean) * invstd * gamma[ch] + beta[ch]);                       \
                    y[i] = c->attrs.i[1] && v_ <= 0 ? (T)0 : v_;                                     \
                }                                                                                    \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(batchnorm_ref, BN_FWD_REF_BODY)

static mst_status batchnorm_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (!gy[0]) return MST_OK;      /* the saved statistics carry no gradient */
    mst_tensor *g[3] = {0};
    mst_status s = mst_batchnorm_grad(ctx, gy[0], c->in[0], c->in[1], c->out[1], c->out[2], c->attrs.i[0] != 0, g);
    if (s != MST_OK) return s;
    gx[0] = g[0];
    gx[1] = g[1];
    gx[2] = g[2];
    return MST_OK;
}

/* training: sum, squared deviations, apply (1 + 3 + 3 per element); eval: apply only */
static int64_t batchnorm_flops(const mst_op_call *c) { return (c->attrs.i[0] ? 7 : 3) * c->in[0]->numel; }

static mst_status batchnorm_rows(mst_ctx *ctx, const mst_op_call *c);
static mst_status batchnorm_grad_rows(mst_ctx *ctx, const mst_op_call *c);

const mst_op_desc mst_desc_batchnorm = {
    .name = "batchnorm", .min_inputs = 5, .max_inputs = 5, .n_outputs = 3, .flags = MST_OPF_RELU_EPILOGUE,
    .amp_class = MST_AMP_CLASS_NORM, .relu_in_kernel_attr = 1 + 1,     /* attr_i "relu" */
    .mutates = 1u << 3 | 1u << 4, .nondiff = 1u << 3 | 1u << 4,
    .attr_i = {"training", "relu"}, .attr_f = {"momentum", "eps"},
    .infer = infer_batchnorm,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = batchnorm_rows, [MST_DTYPE_F64] = batchnorm_direct_f64, [MST_DTYPE_F16] = batchnorm_rows,
            [MST_DTYPE_BF16] = batchnorm_rows},
    /* the reference for half: the generic half kernel around the f32 reference */
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = batchnorm_ref_f32, [MST_DTYPE_F64] = batchnorm_ref_f64, [MST_DTYPE_F16] = mst_half_kernel,
                [MST_DTYPE_BF16] = mst_half_kernel},
    .backward = batchnorm_backward, .flops = batchnorm_flops,
    /* x and y, each its own layout (bn_layouts_taken: plain x into a blocked y included) */
    .blocked_in = 1u << 0, .blocked_out = 1u << 0,
};

/* ---- batchnorm_grad: in gy, x, gamma, save_mean, save_invstd; attr i[0] training;
 *      out gx (like x), ggamma (C), gbeta (C) ---- */

/* The pooled form's extra inputs: gy (N, C, P, Q) is max pooling's output gradient, indices i32 and
 * pooled (gy's dtype) of its shape, x (N, C, H, W) of the same N and C. */
static mst_status infer_bn_grad_pooled(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *gy = c->in[0], *x = c->in[1];
    char a[96], b[96];
    if (gy->ndim != 4 || x->ndim != 4 || gy->shape[0] != x->shape[0] || gy->shape[1] != x->shape[1])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "the pooled form needs gy (N, C, P, Q) and x (N, C, H, W) of one N and C, got gy %s, x %s",
                           mst_shape_str(gy->ndim, gy->shape, a, sizeof(a)), mst_shape_str(x->ndim, x->shape, b, sizeof(b)));
    if (c->in[5]->dtype != MST_DTYPE_I32)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "indices (input 5) must be i32, got %s", mst_dtype_name(c->in[5]->dtype));
    mst_status s = op_require_same_shape(ctx, c, 0, 5);
    if (s == MST_OK && c->n_in > 6) s = op_require_same_shape(ctx, c, 0, 6);
    if (s == MST_OK && c->n_in > 6) s = op_require_same_dtype(ctx, c, 0, 6);
    return s;
}

static mst_status infer_batchnorm_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    static const char *const names[] = {"gy", "x", "gamma", "save_mean", "save_invstd"};
    bool pooled = c->n_in > 5;
    /* gy, x; gamma, saved stats (the pooled form's indices and pooled values: infer_bn_grad_pooled) */
    mst_status s = bn_require_groups(ctx, c, (const int[]){0, 2}, 2, 5);
    if (s == MST_OK) s = bn_require_x(ctx, c, 1, "x");
    if (s == MST_OK) s = pooled ? infer_bn_grad_pooled(ctx, c) : op_require_same_shape(ctx, c, 0, 1);
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[1];
    int64_t ch = x->shape[1];
    for (int i = 2; i < 5; i++)
        if ((s = require_vector(ctx, c, i, names[i], ch, "the channels of x (dim 1)")) != MST_OK) return s;
    /* ggamma and gbeta take gamma's dtype (f32 beside half x under amp O2) */
    out[0] = meta_like(x);
    out[1] = meta_vector(c->in[2]->dtype, ch);
    out[2] = meta_vector(c->in[2]->dtype, ch);
    return MST_OK;
}

/* Fast, channels [c0, c1): one memory-order pass for sum(gy) and sum(gy (x - mean)) per channel,
 * one for gx:
 *   ggamma = invstd sum(gy (x - mean)),  gbeta = sum(gy)
 *   training: gx = gamma invstd (gy - gbeta / M - (x - mean) invstd ggamma / M)
 *   eval:     gx = gamma invstd gy */
#define BN_GRAD_CHUNK_BODY                                                                           \
    {                                                                                                \
        const bn_job *j = arg;                                                                       \
        const mst_op_call *c = j->c;                                                                 \
        bn_dims d = j->d;                                                                            \
        const T *gy = (const T *)mst_tensor_data(c->in[0]), *x = (const T *)mst_tensor_data(c->in[1]); \
        const T *gamma = (const T *)mst_tensor_data(c->in[2]);                                       \
        const T *save_mean = (const T *)mst_tensor_data(c->in[3]);                                   \
        const T *save_invstd = (const T *)mst_tensor_data(c->in[4]);                                 \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                                     \
        T *ggamma = (T *)mst_tensor_data(c->out[1]), *gbeta = (T *)mst_tensor_data(c->out[2]);       \
        double *sum_gy = j->scratch;                                                                 \
        double *sum_gyx = sum_gy + d.c, *mean = sum_gyx + d.c, *scale = mean + d.c, *q = scale + d.c; \
        for (int64_t ch = c0; ch < c1; ch++) {                                                       \
            sum_gy[ch] = sum_gyx[ch] = 0;                                                            \
            mean[ch] = (double)save_mean[ch];                                                        \
        }                                                                                            \
        BN_ACCUMULATE(d, c0, c1, sum_gy, (double)gy[i], sum_gyx, (double)gy[i] * ((double)x[i] - mean[ch])) \
        double inv_m = d.m > 0 ? 1.0 / (double)d.m : 0;                                              \
        for (int64_t ch = c0; ch < c1; ch++) {                                                       \
            double is = (double)save_invstd[ch];                                                     \
            ggamma[ch] = (T)(sum_gyx[ch] * is);                                                      \
            gbeta[ch] = (T)sum_gy[ch];                                                               \
            scale[ch] = (double)gamma[ch] * is;                                                      \
            q[ch] = sum_gyx[ch] * is * is * inv_m;                                                   \
            sum_gy[ch] *= inv_m;                                      /* now mean(gy) */             \
        }                                                                                            \
        if (c->attrs.i[0])                                                                           \
            BN_FOR_EACH(d, c0, c1, gx[i] = (T)scale[ch] * (gy[i] - (T)sum_gy[ch] - (x[i] - (T)mean[ch]) * (T)q[ch])) \
        else                                                                                         \
            BN_FOR_EACH(d, c0, c1, gx[i] = (T)scale[ch] * gy[i])                                     \
    }
FLOAT_CHUNKS(bn_grad_chunk, BN_GRAD_CHUNK_BODY, c0, c1)
#define BN_GRAD_BODY(T) BN_RUN(c->in[1], 5, FLOAT_CHUNK(bn_grad_chunk, T))
FLOAT_KERNELS(batchnorm_grad_direct, BN_GRAD_BODY)

/* Reference: channel by channel in double, the formula as written in the paper:
 * gx = gamma invstd / M (M gy - sum(gy) - xhat sum(gy xhat)). */
#define BN_GRAD_REF_BODY(T)                                                                          \
    {                                                                                                \
        bn_dims d = bn_dims_of(c->in[1]);                                                            \
        const T *gy = (const T *)mst_tensor_data(c->in[0]), *x = (const T *)mst_tensor_data(c->in[1]); \
        const T *gamma = (const T *)mst_tensor_data(c->in[2]);                                       \
        const T *mean = (const T *)mst_tensor_data(c->in[3]), *invstd = (const T *)mst_tensor_data(c->in[4]); \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                                     \
        T *ggamma = (T *)mst_tensor_data(c->out[1]), *gbeta = (T *)mst_tensor_data(c->out[2]);       \
        double M = (double)d.m;                                                                      \
        for (int64_t ch = 0; ch < d.c; ch++) {                                                       \
            double sg = 0, sgx = 0;                                                                  \
            for (int64_t n = 0; n < d.n; n++)                                                        \
                for (int64_t k = 0; k < d.s; k++) {                                                  \
                    int64_t i = (n * d.c + ch) * d.s + k;                                            \
                    double xhat = (x[i] - (double)mean[ch]) * invstd[ch];                            \
                    sg += gy[i];                                                                     \
                    sgx += gy[i] * xhat;                                                             \
                }                                                                                    \
            ggamma[ch] = (T)sgx;                                                                     \
            gbeta[ch] = (T)sg;                                                                       \
            for (int64_t n = 0; n < d.n; n++)                                                        \
                for (int64_t k = 0; k < d.s; k++) {                                                  \
                    int64_t i = (n * d.c + ch) * d.s + k;                                            \
                    double xhat = (x[i] - (double)mean[ch]) * invstd[ch];                            \
                    gx[i] = c->attrs.i[0] ? (T)(gamma[ch] * invstd[ch] / M * (M * gy[i] - sg - xhat * sgx)) \
                                          : (T)(gy[i] * gamma[ch] * invstd[ch]);                     \
                }                                                                                    \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(batchnorm_grad_ref, BN_GRAD_REF_BODY)

/* the sums (4 per element), then gx (5 per element training, 1 eval) */
static int64_t batchnorm_grad_flops(const mst_op_call *c) { return (c->attrs.i[0] ? 9 : 5) * c->in[1]->numel; }

/* The (N, C, H, W) tensor between the two ops a fused form runs in turn (bn_grad_unpooled's dense
 * pooling gradient, bn_pool_in_turn's batch norm output), per thread, grown to the largest call
 * and kept (a fresh 6 MiB allocation a call faults its pages in anew); NULL after failing. */
static _Thread_local struct {
    void *data;
    size_t cap;
} bn_dense_scratch;

static void *bn_dense_memory(mst_ctx *ctx, const mst_op_call *c, size_t nbytes) {
    if (nbytes > bn_dense_scratch.cap) {
        void *p = aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
        if (!p) {
            mst_op_fail(ctx, c, MST_ERR_OOM, "out of memory: %zu bytes between its two ops", nbytes);
            return NULL;
        }
        free(bn_dense_scratch.data);
        bn_dense_scratch.data = p;
        bn_dense_scratch.cap = nbytes;
    }
    return bn_dense_scratch.data;
}

/* The pooled form (6 or 7 inputs: graph mode's fuse_pool_bn) through any kernel k of the plain
 * form: max pooling's gradient into a dense tensor of x's shape (gy's dtype and layout) by
 * maxpool2d_grad's own kernel, then k on it. The f32 rows kernel fuses the two instead
 * (bn_grad_pooled_fused); this is every other case's path, with the bits of the two ops. */
static mst_status bn_grad_unpooled(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn k) {
    const mst_tensor *gy = c->in[0], *x = c->in[1];
    mst_kernel_fn unpool = mst_op_kernel(ctx, MST_OP_MAXPOOL2D_GRAD, gy->dtype);
    if (!unpool) return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "no maxpool2d_grad kernel for %s", mst_dtype_name(gy->dtype));
    void *memory = bn_dense_memory(ctx, c, mst_tensor_nbytes(x));   /* gy's dtype is x's (infer_batchnorm_grad) */
    if (!memory) return ctx->status;
    /* x's header in gy's layout (nChw16c needs channels in 16s, which gy's layout says it has) over
     * the scratch */
    mst_storage st;
    mst_tensor dense_t, *dense = &dense_t;
    mst_layout_twin_header(x, (mst_layout)gy->layout, memory, dense, &st);
    mst_op_call mp = {.op = MST_OP_MAXPOOL2D_GRAD, .n_in = c->n_in - 4, .n_out = 1, .in = {c->in[0], c->in[5]}, .out = {dense}};
    if (c->n_in > 6) mp.in[2] = c->in[6];
    mp.attrs.i[0] = x->shape[2];
    mp.attrs.i[1] = x->shape[3];
    mst_status s = unpool(ctx, &mp);
    if (s == MST_OK) {
        mst_op_call plain_form = *c;
        plain_form.n_in = 5;
        plain_form.in[0] = dense;
        plain_form.in[5] = plain_form.in[6] = NULL;
        s = k(ctx, &plain_form);
    }
    return s;
}

/* The descriptor's kernels: the pooled form through bn_grad_unpooled, the plain one as it is. */
#define BN_GRAD_ANY_FORM(name, k) \
    static mst_status name(mst_ctx *ctx, const mst_op_call *c) { return c->n_in > 5 ? bn_grad_unpooled(ctx, c, k) : k(ctx, c); }
BN_GRAD_ANY_FORM(batchnorm_grad_direct_any_f64, batchnorm_grad_direct_f64)
BN_GRAD_ANY_FORM(batchnorm_grad_ref_any_f32, batchnorm_grad_ref_f32)
BN_GRAD_ANY_FORM(batchnorm_grad_ref_any_f64, batchnorm_grad_ref_f64)
BN_GRAD_ANY_FORM(batchnorm_grad_half_any, mst_half_kernel)

/* in[5], in[6] (optional): the pooled form, where gy is max pooling's output gradient and these its
 * indices and pooled values (maxpool2d_grad's inputs): the op is batchnorm_grad of
 * maxpool2d_grad(gy, indices[, pooled]), to the bit, without the (N, C, H, W) gradient in memory on
 * the fused path. Graph mode's fuse_pool_bn makes it; eager never does. */
const mst_op_desc mst_desc_batchnorm_grad = {
    .name = "batchnorm_grad", .min_inputs = 5, .max_inputs = 7, .n_outputs = 3, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"training"},
    .infer = infer_batchnorm_grad,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = batchnorm_grad_rows, [MST_DTYPE_F64] = batchnorm_grad_direct_any_f64,
            [MST_DTYPE_F16] = batchnorm_grad_rows, [MST_DTYPE_BF16] = batchnorm_grad_rows},
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = batchnorm_grad_ref_any_f32, [MST_DTYPE_F64] = batchnorm_grad_ref_any_f64,
                [MST_DTYPE_F16] = batchnorm_grad_half_any, [MST_DTYPE_BF16] = batchnorm_grad_half_any},
    .flops = batchnorm_grad_flops,
    /* gy, x, gx: each its own layout (bn_layouts_taken); the pooled form's gy, indices and pooled
     * take one layout together, as maxpool2d_grad's do */
    .blocked_in = 1u << 0 | 1u << 1 | 1u << 5 | 1u << 6, .blocked_out = 1u << 0, .blocked_tied = 1u << 0 | 1u << 5 | 1u << 6,
};

/* ---- batchnorm and batchnorm_grad by rows: (N, C, H, W) f32, and half x with f32 parameters ----
 *
 * A channel's sums and its outputs go one (image, channel) row of S values at a time through
 * runtime/ops/bn_rows.h: the double sums in sixteen partials and the applies, each with an
 * AVX-512 path chosen at run time that gives the portable path's bits. f32 rows are read and
 * written in place. Under amp O2, x, y, gy and gx are f16/bf16 while gamma, beta and every
 * statistic stay f32: half rows are read by the half row functions, which widen them exactly in
 * registers, and the outputs are computed into a per-worker f32 buffer of a few rows that stays
 * in L1/L2 and rounded to nearest even as they are stored. So a half kernel computes exactly the
 * f32 kernel's values and moves half its bytes (the generic half kernel moves 2.5x). This is the
 * half-via-f32 reference (runtime/amp/half_kernels.c: widen the tensor, run the f32 kernel,
 * round) to the bit wherever the f32 kernel takes rows too (planes of 64 or more values; on
 * smaller planes only the order of the double sums differs, an ulp of double that rarely
 * survives two roundings). On the cnn's batch-64 shapes the row functions made the f32 kernels
 * 1.6-2.3x faster than the scalar four-partial loops they replaced, and widening in registers
 * made the half gradient 1.2-1.5x faster than widening rows into a buffer first
 * (bench/bench_amp_kernels, Zen 5). Other dtype mixes (O3's half parameters), f64 and (N, C)
 * inputs keep the direct kernels above or the generic half kernel. nChw16c operands (graph mode,
 * runtime/layout.h) go a slab of 16 channels at a time, with the same partial sums and the same
 * per-element operations (bn_sums and the slab applies below), so the bits do not depend on the
 * layout; bn_layouts_taken lists the layout combinations taken, the rest run on plain copies.
 * All-nChw16c calls split the images between the threads (bn_images_run), the others the channels. */

/* Planes shorter than this keep the direct f32 kernel: a row's three calls cost more than its
 * arithmetic there (64x64x7x7: 110 us direct, 151 us by rows; bench_amp_kernels, Zen 5, 2 threads). */
enum { k_bn_rows_min_plane_f32 = 64 };

/* batchnorm_maxpool's pooling attributes (its i[2..7]) as maxpool2d's (i[0..5]). */
static mst_attrs bn_pool_attrs(const mst_op_call *c) {
    mst_attrs a = {0};
    for (int k = 0; k < 6; k++) a.i[k] = c->attrs.i[2 + k];
    return a;
}

/* x (input x_index) is (N, C, H, W) with S > 1 (f32: S >= k_bn_rows_min_plane_f32), f32 or half,
 * and so is every other (N, C, ...) operand; every (C) operand f32. */
static bool bn_rows_apply_to(const mst_op_call *c, int x_index) {
    const mst_tensor *x = c->in[x_index];
    bool f32 = x->dtype == MST_DTYPE_F32;
    if (!(f32 || mst_dtype_is_half(x->dtype)) || x->ndim != 4) return false;
    int64_t plane = x->shape[2] * x->shape[3];
    /* nChw16c (graph mode, f32): slabs for any plane, with the direct kernel's partials under 64 */
    if (!mst_tensor_blocked(x) && (plane <= 1 || (f32 && plane < k_bn_rows_min_plane_f32))) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->dtype != (c->in[i]->ndim == 4 ? x->dtype : MST_DTYPE_F32)) return false;
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k]->dtype != (c->out[k]->ndim == 4 ? x->dtype : MST_DTYPE_F32)) return false;
    return true;
}

/* An index of the pooled form outside its plane: maxpool2d_grad's plain position (-1: none) and value. */
typedef struct {
    int64_t pos, k;
} bn_bad_index;

typedef struct {
    const mst_op_call *c;
    bn_dims d;
    double *scratch;        /* as bn_job's */
    float *rows;            /* half only, per worker: one block of block_stride floats (the output's f32 rows) */
    int64_t block_ch;       /* channels a block holds: one row of S values, or more when S is small */
    int64_t block_stride;   /* floats between blocks */
    float *mixed;           /* nChw16c operands beside plain x or in half, per worker: 3 x 16 x S floats */
    bn_bad_index *bad;      /* the pooled form, per worker: the first index outside the plane */
} bn_rows_job;

/* Outputs are rounded a block of rows at a time: the rows (image n, channels [ch0, ch1)) are
 * contiguous, so a short half row (7x7, 14x14) shares its conversion call with its neighbours;
 * one call per 49-value row cost more than the row's arithmetic (the 64x64x7x7 batch norm ran 5x
 * slower in bf16 than in f32, bench_amp_kernels). */
enum { k_bn_half_block = 4096 };

static int64_t bn_rows_block_channels(bn_dims d) {
    int64_t b = d.s > 0 ? k_bn_half_block / d.s : 1;
    return b < 1 ? 1 : b;
}

/* Row (image n, channel ch) of x (and gy) through bn_rows: f32 rows in place, half rows widened
 * in registers. */
static size_t bn_row_at(bn_dims d, int64_t n, int64_t ch) { return (size_t)((n * d.c + ch) * d.s); }

static double bn_row_sum(mst_bn_sum_kind k, const mst_tensor *xt, const mst_tensor *gyt, bn_dims d, int64_t n,
                         int64_t ch, double m) {
    size_t at = bn_row_at(d, n, ch);
    if (xt->dtype == MST_DTYPE_F32)
        return mst_bn_row_sum_path(k, mst_tensor_f32(xt) + at, gyt ? mst_tensor_f32(gyt) + at : NULL, d.s, m, true);
    return mst_bn_row_sum_half_path(k, xt->dtype, (const uint16_t *)mst_tensor_data(xt) + at,
                                    gyt ? (const uint16_t *)mst_tensor_data(gyt) + at : NULL, d.s, m, true);
}

static void bn_row_apply(const mst_tensor *xt, bn_dims d, int64_t n, int64_t ch, float *y, float m, float a, float b,
                         bool relu) {
    size_t at = bn_row_at(d, n, ch);
    if (xt->dtype == MST_DTYPE_F32) mst_bn_row_apply(mst_tensor_f32(xt) + at, y, d.s, m, a, b, relu);
    else mst_bn_row_apply_half_path(xt->dtype, (const uint16_t *)mst_tensor_data(xt) + at, y, d.s, m, a, b, relu, true);
}

/* x NULL: evaluation's gx = a gy. */
static void bn_row_grad_apply(const mst_tensor *gyt, const mst_tensor *xt, bn_dims d, int64_t n, int64_t ch, float *gx,
                              float a, float mg, float m, float q) {
    size_t at = bn_row_at(d, n, ch);
    if (gyt->dtype == MST_DTYPE_F32)
        mst_bn_row_grad_apply(mst_tensor_f32(gyt) + at, xt ? mst_tensor_f32(xt) + at : NULL, gx, d.s, a, mg, m, q);
    else
        mst_bn_row_grad_apply_half_path(gyt->dtype, (const uint16_t *)mst_tensor_data(gyt) + at,
                                        xt ? (const uint16_t *)mst_tensor_data(xt) + at : NULL, gx, d.s, a, mg, m, q, true);
}

/* Where the rows (image n, channels [ch0, ...)) of output t are computed: in place for f32, buf for
 * half (rounded into t by bn_rows_store). */
static float *bn_rows_out(const mst_tensor *t, bn_dims d, int64_t n, int64_t ch0, float *buf) {
    return t->dtype == MST_DTYPE_F32 ? mst_tensor_f32(t) + bn_row_at(d, n, ch0) : buf;
}
static void bn_rows_store(const mst_tensor *t, bn_dims d, int64_t n, int64_t ch0, int64_t ch1, const float *rows) {
    if (t->dtype == MST_DTYPE_F32) return;
    mst_half_from_f32(t->dtype, rows, (uint16_t *)mst_tensor_data(t) + bn_row_at(d, n, ch0), (size_t)((ch1 - ch0) * d.s));
}

/* The slab at element `at` of t as the slab functions read it: t's own f32 or bf16 values (bf16
 * widened in registers: *bf16 set), f16 widened (exactly) into buf (16 x S floats). */
static const void *bn_slab_src(const mst_tensor *t, bn_dims d, size_t at, float *buf, bool *bf16) {
    *bf16 = t->dtype == MST_DTYPE_BF16;
    if (t->dtype == MST_DTYPE_F32) return mst_tensor_f32(t) + at;
    if (*bf16) return (const uint16_t *)mst_tensor_data(t) + at;
    mst_half_to_f32(t->dtype, (const uint16_t *)mst_tensor_data(t) + at, buf, (size_t)(MST_NCHW16C_BLOCK * d.s));
    return buf;
}

/* The gradient's slab (image n, channels [ch, ch + 16)) as the slab functions read it: gy's own
 * (bn_slab_src), or in the pooled form (f32, bn_grad_pooled_fused) maxpool2d_grad's slab from gy,
 * the indices and the pooled values, computed into buf (16 x S floats; its bits, runtime/ops/
 * pool_slab.h); an index outside the plane is recorded in *bad as maxpool2d_grad's position. */
static const void *bn_grad_gy_slab(const mst_op_call *c, bn_dims d, int64_t n, int64_t ch, float *buf, bool *bf16,
                                   bn_bad_index *bad) {
    const mst_tensor *gyt = c->in[0], *xt = c->in[1];
    if (c->n_in <= 5) return bn_slab_src(gyt, d, bn_row_at(d, n, ch), buf, bf16);
    int64_t P = gyt->shape[2], Q = gyt->shape[3], PQ = P * Q;
    size_t at = (size_t)((n * d.c + ch) * PQ);
    const int32_t *ip = mst_tensor_i32(c->in[5]) + at;
    *bf16 = false;
    int64_t b = mst_maxpool_grad_slab_f32(mst_tensor_f32(gyt) + at, c->n_in > 6 ? mst_tensor_f32(c->in[6]) + at : NULL, ip, buf,
                                          P, Q, xt->shape[2], xt->shape[3]);
    if (b >= 0 && bad->pos < 0)     /* b = lane * PQ + position; the slab stores position * 16 + lane */
        *bad = (bn_bad_index){(n * d.c + ch + b / PQ) * PQ + b % PQ, ip[(b % PQ) * MST_NCHW16C_BLOCK + b / PQ]};
    return buf;
}

/* acc[ch] += the sum of kind k (x, and gy for MST_BN_SUM_GYX; m[ch] the mean, NULL for plain
 * sums) over every row of the channels [c0, c1), image by image. nChw16c tensors go a slab of 16
 * channels at a time (c0 and c1 multiples of 16), with the f32 direct kernel's four partials on f32
 * planes under k_bn_rows_min_plane_f32 values (half rows always take sixteen), so every channel's
 * sum is the plain kernel's; half slabs are widened into buf (2 x 16 x S floats) first. */
static void bn_sums(mst_bn_sum_kind k, const mst_tensor *xt, const mst_tensor *gyt, bn_dims d, int64_t c0, int64_t c1,
                    const double *m, double *acc, float *buf) {
    if (!mst_tensor_blocked(xt)) {
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t ch = c0; ch < c1; ch++) acc[ch] += bn_row_sum(k, xt, gyt, d, n, ch, m ? m[ch] : 0);
        return;
    }
    static const double zeros[MST_NCHW16C_BLOCK];
    bool four = xt->dtype == MST_DTYPE_F32 && d.s < k_bn_rows_min_plane_f32;
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
            size_t at = bn_row_at(d, n, ch);        /* the slab of (n, ch / 16) starts where row (n, ch) would */
            double out[MST_NCHW16C_BLOCK];
            bool bf16;
            const void *x = bn_slab_src(xt, d, at, buf, &bf16);
            const void *gy = gyt ? bn_slab_src(gyt, d, at, buf + MST_NCHW16C_BLOCK * d.s, &bf16) : NULL;
            mst_bn_slab_sums_any(k, bf16, x, gy, d.s, m ? m + ch : zeros, four, out, true);
            for (int l = 0; l < MST_NCHW16C_BLOCK; l++) acc[ch + l] += out[l];
        }
}

/* Plain x's 16 rows at element `at` (consecutive rows of one image) as a slab the slab functions
 * read: f32 into slab, half transposed into stage (16 x S two-byte values; bf16 read from there,
 * *bf16 set; f16 then widened exactly into slab). */
static const void *bn_rows_as_slab(const mst_tensor *xt, bn_dims d, size_t at, float *slab, uint16_t *stage, bool *bf16) {
    *bf16 = xt->dtype == MST_DTYPE_BF16;
    if (xt->dtype == MST_DTYPE_F32) {
        mst_nchw16c_rows_to_slab(mst_tensor_f32(xt) + at, slab, d.s, 4);
        return slab;
    }
    mst_nchw16c_rows_to_slab((const uint16_t *)mst_tensor_data(xt) + at, stage, d.s, 2);
    if (*bf16) return stage;
    mst_half_to_f32(xt->dtype, stage, slab, (size_t)(MST_NCHW16C_BLOCK * d.s));
    return slab;
}

/* The gradient's two sums over channels [c0, c1) with gy in nChw16c (as bn_sums' MST_BN_SUM_X of
 * gy and MST_BN_SUM_GYX, to the bit), each slab read once for both. x in nChw16c too, or plain (its
 * 16 rows transposed into a slab first: planes of >= 64 f32 values or half rows, which take the
 * sixteen partials either way). buf: per worker, x's slab, gy's, then a two-byte staging slab. */
static void bn_grad_sums(const mst_op_call *c, bn_dims d, int64_t c0, int64_t c1, const double *m, double *sum_gy,
                         double *sum_gyx, float *buf, bn_bad_index *bad) {
    const mst_tensor *xt = c->in[1];
    bool x_slabs = mst_tensor_blocked(xt), four = x_slabs && xt->dtype == MST_DTYPE_F32 && d.s < k_bn_rows_min_plane_f32;
    /* no buffer for f32 slabs on both sides: they are read in place */
    float *x_buf = buf, *gy_buf = buf ? buf + MST_NCHW16C_BLOCK * d.s : NULL;
    uint16_t *stage = buf ? (uint16_t *)(gy_buf + MST_NCHW16C_BLOCK * d.s) : NULL;
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
            size_t at = bn_row_at(d, n, ch);
            double s_gy[MST_NCHW16C_BLOCK], s_gyx[MST_NCHW16C_BLOCK];
            bool bf16;
            const void *x = x_slabs ? bn_slab_src(xt, d, at, x_buf, &bf16) : bn_rows_as_slab(xt, d, at, x_buf, stage, &bf16);
            const void *gy = bn_grad_gy_slab(c, d, n, ch, gy_buf, &bf16, bad);
            mst_bn_slab_grad_sums_any(bf16, x, gy, d.s, m + ch, four, s_gy, s_gyx, true);
            for (int l = 0; l < MST_NCHW16C_BLOCK; l++) sum_gy[ch + l] += s_gy[l], sum_gyx[ch + l] += s_gyx[l];
        }
}

/* An f32 slab of results into plain t's 16 rows at element `at`, rounded to half first for half
 * t (through stage). */
static void bn_slab_to_rows(const float *slab, const mst_tensor *t, bn_dims d, size_t at, uint16_t *stage) {
    if (t->dtype == MST_DTYPE_F32) {
        mst_nchw16c_slab_to_rows(slab, mst_tensor_f32(t) + at, d.s, 4);
        return;
    }
    mst_half_from_f32(t->dtype, slab, stage, (size_t)(MST_NCHW16C_BLOCK * d.s));
    mst_nchw16c_slab_to_rows(stage, (uint16_t *)mst_tensor_data(t) + at, d.s, 2);
}

/* A slab of f32 results at out into t at element `at`: already there for f32, rounded to half
 * (nearest even, as the rows' stores) otherwise. */
static void bn_slab_store(const mst_tensor *t, bn_dims d, size_t at, const float *out) {
    if (t->dtype != MST_DTYPE_F32)
        mst_half_from_f32(t->dtype, out, (uint16_t *)mst_tensor_data(t) + at, (size_t)(MST_NCHW16C_BLOCK * d.s));
}

/* The slab applies visit the images last to first: the sums pass before them ended on the last
 * images, whose slabs are still in this core's L2 (a 28x28 slab is 50 KB; a worker's 64 of them are
 * 3.2 MB). The order of an apply changes no bits. */
#define BN_APPLY_IMAGE(d, i) ((d).n - 1 - (i))

/* nChw16c applies, channels [c0, c1) (multiples of 16): y from x (forward) or gx from gy and x
 * (backward, x NULL in evaluation) with per-channel m, a, b (mg, q) rounded to f32 as the rows do. */
static void bn_slabs_apply(const mst_tensor *xt, const mst_tensor *yt, bn_dims d, int64_t c0, int64_t c1,
                           const double *mean, const double *scale, const float *beta, bool relu, float *buf) {
    for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
        float m[MST_NCHW16C_BLOCK], a[MST_NCHW16C_BLOCK];
        for (int l = 0; l < MST_NCHW16C_BLOCK; l++) m[l] = (float)mean[ch + l], a[l] = (float)scale[ch + l];
        for (int64_t i = 0; i < d.n; i++) {
            int64_t n = BN_APPLY_IMAGE(d, i);
            size_t at = bn_row_at(d, n, ch);
            bool bf16;
            const void *x = bn_slab_src(xt, d, at, buf, &bf16);
            float *out = yt->dtype == MST_DTYPE_F32 ? mst_tensor_f32(yt) + at : buf;    /* half: f32 results, then rounded */
            mst_bn_slab_apply_any(bf16, x, out, d.s, m, a, beta + ch, relu, true);
            bn_slab_store(yt, d, at, out);
        }
    }
}

/* The gradient apply's per-channel factors for the 16 channels from ch, rounded to f32 as the rows'. */
typedef struct {
    float a[MST_NCHW16C_BLOCK], mg[MST_NCHW16C_BLOCK], m[MST_NCHW16C_BLOCK], q[MST_NCHW16C_BLOCK];
} bn_grad_lanes;

static bn_grad_lanes bn_grad_lanes_at(int64_t ch, const double *scale, const double *mean_gy, const double *mean,
                                      const double *q) {
    bn_grad_lanes f;
    for (int l = 0; l < MST_NCHW16C_BLOCK; l++)
        f.a[l] = (float)scale[ch + l], f.mg[l] = (float)mean_gy[ch + l], f.m[l] = (float)mean[ch + l], f.q[l] = (float)q[ch + l];
    return f;
}

static void bn_slabs_grad_apply(const mst_op_call *c, bool training, bn_dims d, int64_t c0, int64_t c1, const double *scale,
                                const double *mean_gy, const double *mean, const double *q, float *buf, bn_bad_index *bad) {
    const mst_tensor *xt = training ? c->in[1] : NULL, *gxt = c->out[0];
    bool gx_slabs = mst_tensor_blocked(gxt);
    for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
        bn_grad_lanes f = bn_grad_lanes_at(ch, scale, mean_gy, mean, q);
        for (int64_t i = 0; i < d.n; i++) {
            int64_t n = BN_APPLY_IMAGE(d, i);
            size_t at = bn_row_at(d, n, ch);
            bool bf16;
            const void *gy = bn_grad_gy_slab(c, d, n, ch, buf, &bf16, bad);
            const void *x = xt ? bn_slab_src(xt, d, at, buf + MST_NCHW16C_BLOCK * d.s, &bf16) : NULL;
            /* f32 results into gx's own slab; otherwise into buf (in place over f16's widened gy) and
             * from there rounded into a half slab, or transposed (through x's buffer, free by then)
             * into plain gx's rows */
            float *out = gx_slabs && gxt->dtype == MST_DTYPE_F32 ? mst_tensor_f32(gxt) + at : buf;
            mst_bn_slab_grad_apply_any(bf16, gy, x, out, d.s, f.a, f.mg, f.m, f.q, true);
            if (gx_slabs) bn_slab_store(gxt, d, at, out);
            else bn_slab_to_rows(out, gxt, d, at, (uint16_t *)(buf + MST_NCHW16C_BLOCK * d.s));
        }
    }
}

/* Blocks of channels [c0, c1): b0 and b1 bound each. */
#define BN_ROW_BLOCKS(j, c0, c1, b0, b1) \
    for (int64_t b0 = (c0), b1 = (c0) + (j)->block_ch < (c1) ? (c0) + (j)->block_ch : (c1); b0 < (c1); \
         b0 = b1, b1 = b1 + (j)->block_ch < (c1) ? b1 + (j)->block_ch : (c1))

/* The forward's per-channel results for channels [c0, c1), training with mean[] the channel sums'
 * mean and acc[] the sums of squared deviations from it (evaluation: from the running
 * statistics): invstd, the running statistics' update, save_mean and save_invstd (outputs save_at
 * and save_at + 1: batchnorm's 1 and 2, batchnorm_maxpool's 2 and 3), and scale = gamma invstd. */
static void bn_fwd_statistics(const mst_op_call *c, int save_at, bn_dims d, int64_t c0, int64_t c1, double *mean,
                              const double *acc, double *invstd, double *scale) {
    const float *gamma = mst_tensor_f32(c->in[1]);
    float *rmean = mst_tensor_f32(c->in[3]), *rvar = mst_tensor_f32(c->in[4]);
    float *save_mean = mst_tensor_f32(c->out[save_at]), *save_invstd = mst_tensor_f32(c->out[save_at + 1]);
    double momentum = c->attrs.f[0], eps = c->attrs.f[1];
    if (c->attrs.i[0]) {
        for (int64_t ch = c0; ch < c1; ch++) {
            double var = acc[ch] / (double)d.m;
            invstd[ch] = 1.0 / sqrt(var + eps);
            rmean[ch] = (float)((1 - momentum) * (double)rmean[ch] + momentum * mean[ch]);
            rvar[ch] = (float)((1 - momentum) * (double)rvar[ch] + momentum * var * (double)d.m / (double)(d.m - 1));
        }
    } else {
        for (int64_t ch = c0; ch < c1; ch++) {
            mean[ch] = (double)rmean[ch];
            invstd[ch] = 1.0 / sqrt((double)rvar[ch] + eps);
        }
    }
    for (int64_t ch = c0; ch < c1; ch++) {
        save_mean[ch] = (float)mean[ch];
        save_invstd[ch] = (float)invstd[ch];
        scale[ch] = (double)gamma[ch] * invstd[ch];
    }
}

/* The gradient's per-channel results for channels [c0, c1) from the sums of gy (sum_gy, turned
 * into its mean) and of gy (x - mean) (sum_gyx): ggamma, gbeta, scale = gamma invstd and
 * q = sum_gyx invstd^2 / M. */
static void bn_grad_factors(const mst_op_call *c, bn_dims d, int64_t c0, int64_t c1, double *sum_gy, const double *sum_gyx,
                            double *scale, double *q) {
    const float *gamma = mst_tensor_f32(c->in[2]), *save_invstd = mst_tensor_f32(c->in[4]);
    float *ggamma = mst_tensor_f32(c->out[1]), *gbeta = mst_tensor_f32(c->out[2]);
    double inv_m = d.m > 0 ? 1.0 / (double)d.m : 0;
    for (int64_t ch = c0; ch < c1; ch++) {
        double is = (double)save_invstd[ch];
        ggamma[ch] = (float)(sum_gyx[ch] * is);
        gbeta[ch] = (float)sum_gy[ch];
        scale[ch] = (double)gamma[ch] * is;
        q[ch] = sum_gyx[ch] * is * is * inv_m;
        sum_gy[ch] *= inv_m;                                      /* now mean(gy) */
    }
}

static void bn_fwd_rows_chunk(void *arg, int64_t c0, int64_t c1, int worker) {
    const bn_rows_job *j = arg;
    const mst_op_call *c = j->c;
    bn_dims d = j->d;
    const mst_tensor *xt = c->in[0], *yt = c->out[0];
    const float *beta = mst_tensor_f32(c->in[2]);
    float *yb = j->rows ? j->rows + (size_t)worker * (size_t)j->block_stride : NULL;
    double *mean = j->scratch, *invstd = mean + d.c, *acc = invstd + d.c, *scale = acc + d.c;
    bool blocked = mst_tensor_blocked(xt);
    if (blocked || mst_tensor_blocked(yt)) c0 *= MST_NCHW16C_BLOCK, c1 *= MST_NCHW16C_BLOCK;  /* the job split channel blocks */
    float *slab_buf = j->mixed ? j->mixed + (size_t)worker * (size_t)(3 * MST_NCHW16C_BLOCK * d.s) : NULL;
    if (c->attrs.i[0]) {
        for (int64_t ch = c0; ch < c1; ch++) mean[ch] = acc[ch] = invstd[ch] = 0;
        bn_sums(MST_BN_SUM_X, xt, NULL, d, c0, c1, NULL, mean, slab_buf);
        for (int64_t ch = c0; ch < c1; ch++) mean[ch] /= (double)d.m;
        bn_sums(MST_BN_SUM_DEV2, xt, NULL, d, c0, c1, mean, acc, slab_buf);
    }
    bn_fwd_statistics(c, 1, d, c0, c1, mean, acc, invstd, scale);
    bool relu = c->attrs.i[1] != 0;
    if (blocked) {
        bn_slabs_apply(xt, yt, d, c0, c1, mean, scale, beta, relu, slab_buf);
        return;
    }
    if (mst_tensor_blocked(yt)) {   /* plain rows in, a slab out: the rows into a buffer, then transposed */
        float *rows = slab_buf, *slab = rows + MST_NCHW16C_BLOCK * d.s;
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
                size_t at = bn_row_at(d, n, ch);
                for (int l = 0; l < MST_NCHW16C_BLOCK; l++)
                    bn_row_apply(xt, d, n, ch + l, rows + l * d.s, (float)mean[ch + l], (float)scale[ch + l], beta[ch + l], relu);
                float *out = yt->dtype == MST_DTYPE_F32 ? mst_tensor_f32(yt) + at : slab;
                mst_nchw16c_rows_to_slab(rows, out, d.s, 4);
                bn_slab_store(yt, d, at, out);
            }
        return;
    }
    for (int64_t n = 0; n < d.n; n++)
        BN_ROW_BLOCKS(j, c0, c1, b0, b1) {
            float *ys = bn_rows_out(yt, d, n, b0, yb);
            for (int64_t ch = b0; ch < b1; ch++)
                bn_row_apply(xt, d, n, ch, ys + (ch - b0) * d.s, (float)mean[ch], (float)scale[ch], beta[ch], relu);
            bn_rows_store(yt, d, n, b0, b1, ys);
        }
}

static void bn_grad_rows_chunk(void *arg, int64_t c0, int64_t c1, int worker) {
    const bn_rows_job *j = arg;
    const mst_op_call *c = j->c;
    bn_dims d = j->d;
    const mst_tensor *gyt = c->in[0], *xt = c->in[1], *gxt = c->out[0];
    const float *save_mean = mst_tensor_f32(c->in[3]);
    float *gxb = j->rows ? j->rows + (size_t)worker * (size_t)j->block_stride : NULL;
    double *sum_gy = j->scratch;
    double *sum_gyx = sum_gy + d.c, *mean = sum_gyx + d.c, *scale = mean + d.c, *q = scale + d.c;
    bool blocked = mst_tensor_blocked(xt), gy_slabs = !blocked && mst_tensor_blocked(gyt);
    if (blocked || gy_slabs || mst_tensor_blocked(gxt)) c0 *= MST_NCHW16C_BLOCK, c1 *= MST_NCHW16C_BLOCK;
    float *slab_buf = j->mixed ? j->mixed + (size_t)worker * (size_t)(3 * MST_NCHW16C_BLOCK * d.s) : NULL;
    bn_bad_index no_bad = {-1, 0}, *bad = j->bad ? &j->bad[worker] : &no_bad;
    for (int64_t ch = c0; ch < c1; ch++) {
        sum_gy[ch] = sum_gyx[ch] = 0;
        mean[ch] = (double)save_mean[ch];
    }
    /* plain x with gy in slabs: x's 16 rows of a slab (consecutive in plain memory) transposed into
     * an f32 slab in a buffer, then the slab functions with sixteen partials (the rows' bits: these
     * planes have >= 64 f32 values, or are half rows, which always take sixteen); half operands
     * widened on the way, through a two-byte staging slab */
    float *x_slab = gy_slabs ? slab_buf : NULL, *gy_slab = x_slab ? x_slab + MST_NCHW16C_BLOCK * d.s : NULL;
    uint16_t *stage = gy_slab ? (uint16_t *)(gy_slab + MST_NCHW16C_BLOCK * d.s) : NULL;
    if (gy_slabs || blocked) {
        bn_grad_sums(c, d, c0, c1, mean, sum_gy, sum_gyx, slab_buf, bad);
    } else {
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t ch = c0; ch < c1; ch++) {
                sum_gy[ch] += bn_row_sum(MST_BN_SUM_X, gyt, NULL, d, n, ch, 0);
                sum_gyx[ch] += bn_row_sum(MST_BN_SUM_GYX, xt, gyt, d, n, ch, mean[ch]);
            }
    }
    bn_grad_factors(c, d, c0, c1, sum_gy, sum_gyx, scale, q);
    bool training = c->attrs.i[0] != 0;
    if (blocked) {
        bn_slabs_grad_apply(c, training, d, c0, c1, scale, sum_gy, mean, q, slab_buf, bad);
        return;
    }
    if (gy_slabs) {     /* gx into its slab, or into the buffer and transposed into its plain rows */
        bool gx_slabs = mst_tensor_blocked(gxt);
        for (int64_t ch = c0; ch < c1; ch += MST_NCHW16C_BLOCK) {
            bn_grad_lanes f = bn_grad_lanes_at(ch, scale, sum_gy, mean, q);
            for (int64_t n = 0; n < d.n; n++) {
                size_t at = bn_row_at(d, n, ch);
                bool bf16;
                const void *x = training ? bn_rows_as_slab(xt, d, at, x_slab, stage, &bf16) : NULL;
                const void *gy = bn_grad_gy_slab(c, d, n, ch, gy_slab, &bf16, bad);
                /* f32 results into gx's own slab, or gy_slab (free for bf16, in place over f16's widened gy) */
                float *out = gx_slabs && gxt->dtype == MST_DTYPE_F32 ? mst_tensor_f32(gxt) + at : gy_slab;
                mst_bn_slab_grad_apply_any(bf16, gy, x, out, d.s, f.a, f.mg, f.m, f.q, true);
                if (gx_slabs) bn_slab_store(gxt, d, at, out);
                else bn_slab_to_rows(out, gxt, d, at, stage);
            }
        }
        return;
    }
    for (int64_t n = 0; n < d.n; n++)
        BN_ROW_BLOCKS(j, c0, c1, b0, b1) {
            float *gxs = bn_rows_out(gxt, d, n, b0, gxb);
            for (int64_t ch = b0; ch < b1; ch++)
                bn_row_grad_apply(gyt, training ? xt : NULL, d, n, ch, gxs + (ch - b0) * d.s, (float)scale[ch],
                                  (float)sum_gy[ch], (float)mean[ch], (float)q[ch]);
            bn_rows_store(gxt, d, n, b0, b1, gxs);
        }
}

/* The row kernels' run: k per-channel double arrays, for half a block per worker, and for plain x
 * beside nChw16c operands two slabs' rows per worker, in one workspace; the chunks split whole
 * 16-channel blocks when any operand is in nChw16c. */
static mst_status bn_rows_run(mst_ctx *ctx, const mst_op_call *c, const mst_tensor *x, int k, mst_parallel_fn chunk) {
    bn_dims d = bn_dims_of(x);
    int64_t per_channel = d.m > 0 ? d.m : 1, min_chunk = (k_bn_min_chunk + per_channel - 1) / per_channel;
    bool widen = x->dtype != MST_DTYPE_F32;
    int workers = widen ? mst_parallel_chunks_ctx(ctx, d.c, min_chunk) : 0;
    int64_t block_ch = bn_rows_block_channels(d);
    size_t doubles = (size_t)(k * d.c + 1), stride = ((size_t)(block_ch * d.s) + 15) & ~(size_t)15;
    /* plain x beside slabs, or half slabs (runtime/layout.h): per worker, three slabs of f32 */
    bool any_blocked = mst_tensor_blocked(x) || mst_tensor_blocked(c->in[0]) || mst_tensor_blocked(c->out[0]);
    int64_t block_min = (min_chunk + MST_NCHW16C_BLOCK - 1) / MST_NCHW16C_BLOCK;
    /* (the pooled form builds every gy slab in a buffer, bn_grad_gy_slab) */
    bool pooled = c->n_in > 5;
    int slab_workers = any_blocked ? mst_parallel_chunks_ctx(ctx, d.c / MST_NCHW16C_BLOCK, block_min) : 0;
    size_t mixed = any_blocked && (!mst_tensor_blocked(x) || !mst_tensor_blocked(c->out[0]) || widen || pooled)
                       ? (size_t)slab_workers * (size_t)(3 * MST_NCHW16C_BLOCK * d.s)
                       : 0;
    size_t bad_slots = pooled ? (size_t)slab_workers : 0;
    double *scratch = (double *)mst_ctx_workspace(ctx, doubles * sizeof(double) + bad_slots * sizeof(bn_bad_index) + 128 +
                                                           ((size_t)workers * stride + mixed) * sizeof(float));
    if (!scratch) return ctx->status;
    bn_bad_index *bad = pooled ? (bn_bad_index *)(scratch + doubles) : NULL;
    for (size_t w = 0; w < bad_slots; w++) bad[w] = (bn_bad_index){-1, 0};
    float *rows = (float *)(((uintptr_t)(bad ? (void *)(bad + bad_slots) : (void *)(scratch + doubles)) + 63) & ~(uintptr_t)63);
    bn_rows_job job = {c, d, scratch, widen ? rows : NULL, block_ch, (int64_t)stride,
                       mixed ? rows + (size_t)workers * stride : NULL, bad};
    if (any_blocked)                /* the chunks split whole blocks of 16 channels */
        mst_parallel_for(ctx, d.c / MST_NCHW16C_BLOCK, block_min, chunk, &job);
    else
        mst_parallel_for(ctx, d.c, min_chunk, chunk, &job);
    const bn_bad_index *first = NULL;
    for (size_t w = 0; w < bad_slots; w++)
        if (bad[w].pos >= 0 && (!first || bad[w].pos < first->pos)) first = &bad[w];
    return first ? mst_maxpool_grad_bad_index(ctx, c, first->k, first->pos, x->shape[2] * x->shape[3]) : MST_OK;
}

/* ---- nChw16c by images ----
 *
 * Where x and y (gy, x and gx) are all nChw16c, the kernels split the images between the threads
 * instead of the channel blocks. The ops around a batch norm in a graph-mode plan split their
 * work by images too (oneDNN's convolutions, the slab pooling, the elementwise ops: image-major
 * ranges), so a thread reads the slabs its own core just wrote. On the 2-vCPU Zen 5 VM a thread
 * read 0.4-3.2 MB its own core had written at 72-103 GB/s and what the other core had written at
 * 28-37 GB/s; split by channel blocks, half of every batch norm's reads were the other core's,
 * and the 14x14 and 7x7 batch norms ran no faster on two threads than on one (docs/
 * benchmarks.md). Each (image, block) slab's sums are kept per image and added over the images
 * in order once the region is over: the order bn_sums adds them in, so the bits are the channel
 * split's. It costs three regions forward (the sums, the squared deviations, the apply) and two
 * backward instead of one. */

/* APPLY_POOL: batchnorm_maxpool's apply, each slab of y into a buffer and pooled from there. */
typedef enum { BN_IMG_SUM_X, BN_IMG_SUM_DEV2, BN_IMG_APPLY, BN_IMG_APPLY_POOL, BN_IMG_GRAD_SUMS, BN_IMG_GRAD_APPLY } bn_images_phase;

typedef struct {
    const mst_op_call *c;
    bn_dims d;
    bn_images_phase phase;
    double *part, *part_b;  /* (N, C): each (image, channel) row's sum (the gradient's: of gy, of gy (x - m)) */
    const double *mean;     /* (C) the sums' mean */
    /* (C) the applies' per-channel factors in f32: forward m, a, b; backward a, mg, m, q (bn_grad_lanes) */
    const float *lane_m, *lane_a, *lane_b, *lane_mg, *lane_q;
    float *buf;             /* per worker: 3 x 16 x S floats (half slabs widened or rounded, pooled gy, y to pool) */
    mst_attrs pool;         /* APPLY_POOL: maxpool2d's attributes */
    bool stream;            /* the applies' f32 outputs through buf with streaming stores (op_output_streams) */
    bn_bad_index *bad;      /* the pooled form, per worker: the first index outside the plane */
} bn_images_job;

/* An apply's slab of f32 results at out into t at element `at`: streamed from the buffer, rounded
 * to half, or already there. */
static void bn_slab_out(const bn_images_job *j, const mst_tensor *t, bn_dims d, size_t at, const float *out) {
    if (j->stream) op_store_streaming_f32(mst_tensor_f32(t) + at, out, MST_NCHW16C_BLOCK * d.s);
    else bn_slab_store(t, d, at, out);
}

static void bn_images_chunk(void *arg, int64_t n0, int64_t n1, int worker) {
    const bn_images_job *j = arg;
    const mst_op_call *c = j->c;
    bn_dims d = j->d;
    bool grad = j->phase >= BN_IMG_GRAD_SUMS, four = c->in[grad ? 1 : 0]->dtype == MST_DTYPE_F32 && d.s < k_bn_rows_min_plane_f32;
    const mst_tensor *xt = c->in[grad ? 1 : 0], *outt = c->out[0];
    float *buf = j->buf ? j->buf + (size_t)worker * (size_t)(3 * MST_NCHW16C_BLOCK * d.s) : NULL;
    float *buf_b = buf ? buf + MST_NCHW16C_BLOCK * d.s : NULL;
    static const double zeros[MST_NCHW16C_BLOCK];
    /* the sums go through the images in order and the rest back again, so each starts on the
     * slabs the last one read (still in this core's cache); no order changes a bit */
    bool back = j->phase == BN_IMG_SUM_DEV2 || j->phase == BN_IMG_GRAD_APPLY;
    for (int64_t i = n0; i < n1; i++) {
        int64_t n = back ? n0 + n1 - 1 - i : i;
        for (int64_t ch = 0; ch < d.c; ch += MST_NCHW16C_BLOCK) {
            size_t at = bn_row_at(d, n, ch);
            double *part = j->part + n * d.c + ch;
            bool bf16;
            switch (j->phase) {
            case BN_IMG_SUM_X:
            case BN_IMG_SUM_DEV2: {
                const void *x = bn_slab_src(xt, d, at, buf, &bf16);
                bool dev2 = j->phase == BN_IMG_SUM_DEV2;
                mst_bn_slab_sums_any(dev2 ? MST_BN_SUM_DEV2 : MST_BN_SUM_X, bf16, x, NULL, d.s, dev2 ? j->mean + ch : zeros,
                                     four, part, true);
                break;
            }
            case BN_IMG_APPLY: {
                const void *x = bn_slab_src(xt, d, at, buf, &bf16);
                float *out = outt->dtype == MST_DTYPE_F32 && !j->stream ? mst_tensor_f32(outt) + at : buf;
                mst_bn_slab_apply_any(bf16, x, out, d.s, j->lane_m + ch, j->lane_a + ch, j->lane_b + ch, c->attrs.i[1] != 0, true);
                bn_slab_out(j, outt, d, at, out);
                break;
            }
            case BN_IMG_APPLY_POOL: {
                const void *x = bn_slab_src(xt, d, at, buf_b, &bf16);
                mst_bn_slab_apply_any(bf16, x, buf, d.s, j->lane_m + ch, j->lane_a + ch, j->lane_b + ch, c->attrs.i[1] != 0, true);
                int64_t pq = outt->shape[2] * outt->shape[3];
                size_t pooled_at = (size_t)((n * d.c + ch) * pq);
                mst_maxpool_slab_f32(buf, xt->shape[2], xt->shape[3], mst_tensor_f32(outt) + pooled_at,
                                     mst_tensor_i32(c->out[1]) + pooled_at, outt->shape[2], outt->shape[3], &j->pool);
                break;
            }
            case BN_IMG_GRAD_SUMS: {
                const void *x = bn_slab_src(xt, d, at, buf, &bf16);
                const void *gy = bn_grad_gy_slab(c, d, n, ch, buf_b, &bf16, &j->bad[worker]);
                mst_bn_slab_grad_sums_any(bf16, x, gy, d.s, j->mean + ch, four, part, j->part_b + n * d.c + ch, true);
                break;
            }
            case BN_IMG_GRAD_APPLY: {
                const void *gy = bn_grad_gy_slab(c, d, n, ch, buf, &bf16, &j->bad[worker]);
                const void *x = c->attrs.i[0] ? bn_slab_src(xt, d, at, buf_b, &bf16) : NULL;
                /* half or streamed: over gy's buffer (or into it, for f32 gy read in place) */
                float *out = outt->dtype == MST_DTYPE_F32 && !j->stream ? mst_tensor_f32(outt) + at : buf;
                mst_bn_slab_grad_apply_any(bf16, gy, x, out, d.s, j->lane_a + ch, j->lane_mg + ch, j->lane_m + ch,
                                           j->lane_q + ch, true);
                bn_slab_out(j, outt, d, at, out);
                break;
            }
            }
        }
    }
}

/* acc[ch] = the sum over the images, in order, of part[n][ch]: bn_sums' order. */
static void bn_images_total(bn_dims d, const double *part, double *acc) {
    for (int64_t ch = 0; ch < d.c; ch++) acc[ch] = 0;
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t ch = 0; ch < d.c; ch++) acc[ch] += part[n * d.c + ch];
}

/* The images' run, forward (grad false: x = in[0]) or backward (x = in[1]). */
static mst_status bn_images_run(mst_ctx *ctx, const mst_op_call *c, bool grad) {
    const mst_tensor *x = c->in[grad ? 1 : 0];
    bn_dims d = bn_dims_of(x);
    int64_t per_image = d.c * d.s > 0 ? d.c * d.s : 1, min_images = (k_bn_min_chunk + per_image - 1) / per_image;
    int workers = mst_parallel_chunks_ctx(ctx, d.n, min_images);
    bool pooled = grad ? c->n_in > 5 : c->op == MST_OP_BATCHNORM_MAXPOOL;
    /* the applies' outputs stream where a worker writes more than its cache keeps (not the pooled
     * forward: it writes the pooled values, a quarter of y, through maxpool2d's slab loops) */
    int64_t per_worker_images = (d.n + workers - 1) / workers;
    bool stream = c->out[0]->dtype == MST_DTYPE_F32 && !(pooled && !grad) &&
                  op_output_streams(per_worker_images * d.c * d.s * (int64_t)sizeof(float));
    bool buffered = x->dtype != MST_DTYPE_F32 || pooled || stream;
    size_t per_worker_floats = buffered ? (size_t)(3 * MST_NCHW16C_BLOCK * d.s) : 0;
    /* doubles: part and part_b (N x C each), then six (C) arrays; then the f32 lanes (5 x C), the
     * bad slots and the buffers */
    size_t doubles = (size_t)(2 * d.n * d.c + 6 * d.c + 1), lanes = (size_t)(5 * d.c);
    size_t bytes = doubles * sizeof(double) + lanes * sizeof(float) + (size_t)workers * sizeof(bn_bad_index) + 128 +
                   (size_t)workers * per_worker_floats * sizeof(float);
    double *part = (double *)mst_ctx_workspace(ctx, bytes);
    if (!part) return ctx->status;
    double *part_b = part + d.n * d.c, *mean = part_b + d.n * d.c, *acc = mean + d.c, *invstd = acc + d.c;
    double *scale = invstd + d.c, *q = scale + d.c;
    float *lane_m = (float *)(q + d.c + 1), *lane_a = lane_m + d.c, *lane_b = lane_a + d.c, *lane_mg = lane_b + d.c;
    float *lane_q = lane_mg + d.c;
    bn_bad_index *bad = (bn_bad_index *)(lane_q + d.c);
    for (int w = 0; w < workers; w++) bad[w] = (bn_bad_index){-1, 0};
    float *buf = buffered ? (float *)(((uintptr_t)(bad + workers) + 63) & ~(uintptr_t)63) : NULL;
    bn_images_job job = {.c = c, .d = d, .part = part, .part_b = part_b, .mean = mean, .buf = buf, .bad = bad, .stream = stream,
                         .lane_m = lane_m, .lane_a = lane_a, .lane_b = lane_b, .lane_mg = lane_mg, .lane_q = lane_q};
    if (!grad) {
        if (c->attrs.i[0]) {
            job.phase = BN_IMG_SUM_X;
            mst_parallel_for(ctx, d.n, min_images, bn_images_chunk, &job);
            bn_images_total(d, part, mean);
            for (int64_t ch = 0; ch < d.c; ch++) mean[ch] /= (double)d.m;
            job.phase = BN_IMG_SUM_DEV2;
            mst_parallel_for(ctx, d.n, min_images, bn_images_chunk, &job);
            bn_images_total(d, part, acc);
        }
        bn_fwd_statistics(c, pooled ? 2 : 1, d, 0, d.c, mean, acc, invstd, scale);
        const float *beta = mst_tensor_f32(c->in[2]);
        for (int64_t ch = 0; ch < d.c; ch++) lane_m[ch] = (float)mean[ch], lane_a[ch] = (float)scale[ch], lane_b[ch] = beta[ch];
        job.phase = pooled ? BN_IMG_APPLY_POOL : BN_IMG_APPLY;
        if (pooled) job.pool = bn_pool_attrs(c);
        mst_parallel_for(ctx, d.n, min_images, bn_images_chunk, &job);
        return MST_OK;
    }
    const float *save_mean = mst_tensor_f32(c->in[3]);
    for (int64_t ch = 0; ch < d.c; ch++) mean[ch] = (double)save_mean[ch];
    job.phase = BN_IMG_GRAD_SUMS;
    mst_parallel_for(ctx, d.n, min_images, bn_images_chunk, &job);
    double *sum_gy = acc, *sum_gyx = invstd;
    bn_images_total(d, part, sum_gy);
    bn_images_total(d, part_b, sum_gyx);
    bn_grad_factors(c, d, 0, d.c, sum_gy, sum_gyx, scale, q);
    for (int64_t ch = 0; ch < d.c; ch++)        /* bn_grad_lanes_at's roundings */
        lane_a[ch] = (float)scale[ch], lane_mg[ch] = (float)sum_gy[ch], lane_m[ch] = (float)mean[ch], lane_q[ch] = (float)q[ch];
    job.phase = BN_IMG_GRAD_APPLY;
    mst_parallel_for(ctx, d.n, min_images, bn_images_chunk, &job);
    const bn_bad_index *first = NULL;
    for (int w = 0; w < workers; w++)
        if (bad[w].pos >= 0 && (!first || bad[w].pos < first->pos)) first = &bad[w];
    return first ? mst_maxpool_grad_bad_index(ctx, c, first->k, first->pos, x->shape[2] * x->shape[3]) : MST_OK;
}

/* The layouts the kernels take (runtime/layout.h): all plain; all nChw16c (f32, or half with planes
 * of more than one value, widened a slab at a time), in the gradient with gx in either layout (the
 * stem's gx into a builtin convolution: each slab's results transposed into the rows); plain x on the rows' path (f32 planes of at
 * least k_bn_rows_min_plane_f32 values, half ones of more than one) with y, or gy and either gx, in
 * nChw16c (the cnn's stem: a builtin convolution's plain output into the blocked chain). */
static bool bn_layouts_taken(const mst_op_call *c, bool grad) {
    const mst_tensor *x = c->in[grad ? 1 : 0];
    bool xb = mst_tensor_blocked(x), ob = mst_tensor_blocked(c->out[0]), gb = grad && mst_tensor_blocked(c->in[0]);
    if (!xb && !ob && !gb) return true;
    int64_t plane = x->shape[2] * x->shape[3];
    if (xb) return (grad ? gb : ob) && (x->dtype == MST_DTYPE_F32 || plane > 1);    /* half slabs: the rows' S > 1 */
    /* plain x: the rows' path (f32 planes of >= 64 values, half ones of > 1) */
    return (x->dtype == MST_DTYPE_F32 ? plane >= k_bn_rows_min_plane_f32 : plane > 1) && (grad ? gb : ob);
}

static mst_status batchnorm_rows(mst_ctx *ctx, const mst_op_call *c) {
    if (!bn_layouts_taken(c, false)) return mst_layout_run_plain(ctx, c, batchnorm_rows);
    if (bn_rows_apply_to(c, 0)) {
        if (mst_tensor_blocked(c->in[0]) && mst_tensor_blocked(c->out[0])) return bn_images_run(ctx, c, false);
        return bn_rows_run(ctx, c, c->in[0], 4, bn_fwd_rows_chunk);
    }
    return c->in[0]->dtype == MST_DTYPE_F32 ? batchnorm_direct_f32(ctx, c) : mst_half_kernel(ctx, c);
}

/* The pooled form on the fused slab path: f32 throughout, training, gy, indices and pooled in
 * nChw16c, x in nChw16c or plain rows (bn_layouts_taken's plain x: planes of >= 64 values), gx
 * either. Other pooled calls go through bn_grad_unpooled. */
static bool bn_grad_pooled_fused(const mst_op_call *c) {
    const mst_tensor *x = c->in[1];
    for (int i = 0; i < c->n_in; i++)
        if (i != 5 && c->in[i]->dtype != MST_DTYPE_F32) return false;
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k]->dtype != MST_DTYPE_F32) return false;
    return c->attrs.i[0] && mst_tensor_blocked(c->in[0]) && mst_tensor_blocked(c->in[5]) && (c->n_in < 7 || mst_tensor_blocked(c->in[6])) &&
           (mst_tensor_blocked(x) || x->shape[2] * x->shape[3] >= k_bn_rows_min_plane_f32);
}

/* The gradient's f32 or half operands all in nChw16c (gy as pooled slabs in the pooled form). */
static bool bn_grad_by_images(const mst_op_call *c) {
    return mst_tensor_blocked(c->in[0]) && mst_tensor_blocked(c->in[1]) && mst_tensor_blocked(c->out[0]);
}

static mst_status batchnorm_grad_rows(mst_ctx *ctx, const mst_op_call *c) {
    if (c->n_in > 5) {
        if (!bn_grad_pooled_fused(c)) return bn_grad_unpooled(ctx, c, batchnorm_grad_rows);
        return bn_grad_by_images(c) ? bn_images_run(ctx, c, true) : bn_rows_run(ctx, c, c->in[1], 5, bn_grad_rows_chunk);
    }
    if (!bn_layouts_taken(c, true)) return mst_layout_run_plain(ctx, c, batchnorm_grad_rows);
    if (bn_rows_apply_to(c, 1))
        return bn_grad_by_images(c) ? bn_images_run(ctx, c, true) : bn_rows_run(ctx, c, c->in[1], 5, bn_grad_rows_chunk);
    return c->in[1]->dtype == MST_DTYPE_F32 ? batchnorm_grad_direct_f32(ctx, c) : mst_half_kernel(ctx, c);
}


/* ---- batchnorm_maxpool: graph mode's batch norm with the max pooling that reads its output ----
 *
 * in: x, gamma, beta, running_mean!, running_var! (batchnorm's); attrs i[0] training, i[1] relu,
 * i[2..7] maxpool2d's (k_h, k_w, stride_h, stride_w, pad_h, pad_w), f[0] momentum, f[1] eps. out:
 * the pooled values and their indices (maxpool2d's), save_mean and save_invstd (batchnorm's).
 * graph mode's fuse_bn_pool makes it where nothing else reads batch norm's output; eager never
 * does. Every result is the two ops' to the bit. With x and the pooled outputs in nChw16c (f32),
 * the apply writes each slab of y into a per-worker buffer (16 x H x W floats, in L2) and pools it
 * from there with maxpool2d's own slab loops (mst_maxpool_slab_f32), so the (N, C, H, W) output
 * is neither written nor read back: on the cnn's stem (64x32x28x28) that is 6.4 MB each way of
 * the 3 x 6.4 MB read and 6.4 + 3.2 MB written by the two ops (docs/benchmarks.md). Other
 * operands run the two ops' kernels in turn (bn_pool_in_turn). */

/* The batch norm part of a batchnorm_maxpool call (y its output) and its pooling part (reading y). */
static mst_op_call bn_pool_bn_part(const mst_op_call *c, mst_tensor *y) {
    mst_op_call bn = {.op = MST_OP_BATCHNORM, .n_in = 5, .n_out = 3, .out = {y, c->out[2], c->out[3]}};
    for (int i = 0; i < 5; i++) bn.in[i] = c->in[i];
    bn.attrs.i[0] = c->attrs.i[0], bn.attrs.i[1] = c->attrs.i[1];
    bn.attrs.f[0] = c->attrs.f[0], bn.attrs.f[1] = c->attrs.f[1];
    return bn;
}
static mst_op_call bn_pool_pool_part(const mst_op_call *c, mst_tensor *y) {
    return (mst_op_call){.op = MST_OP_MAXPOOL2D, .n_in = 1, .n_out = 2, .attrs = bn_pool_attrs(c), .in = {y},
                         .out = {c->out[0], c->out[1]}};
}

static mst_status infer_batchnorm_maxpool(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_meta bn_out[3], pool_out[2];
    mst_op_call bn = bn_pool_bn_part(c, NULL);
    mst_status s = mst_desc_batchnorm.infer(ctx, &bn, bn_out);
    if (s != MST_OK) return s;
    /* y is x's shape and dtype: the pooling's checks on x are its checks on y */
    mst_op_call mp = bn_pool_pool_part(c, c->in[0]);
    if ((s = mst_op_table[MST_OP_MAXPOOL2D]->infer(ctx, &mp, pool_out)) != MST_OK) return s;
    out[0] = pool_out[0], out[1] = pool_out[1], out[2] = bn_out[1], out[3] = bn_out[2];
    return MST_OK;
}

/* The two ops' own kernels in turn, y in x's layout in the per-thread scratch. */
static mst_status bn_pool_in_turn(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *x = c->in[0];
    mst_kernel_fn norm = mst_op_kernel(ctx, MST_OP_BATCHNORM, x->dtype), pool = mst_op_kernel(ctx, MST_OP_MAXPOOL2D, x->dtype);
    if (!norm || !pool) return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "no batchnorm or maxpool2d kernel for %s", mst_dtype_name(x->dtype));
    void *memory = bn_dense_memory(ctx, c, mst_tensor_nbytes(x));
    if (!memory) return ctx->status;
    mst_storage st;
    mst_tensor y;
    mst_layout_twin_header(x, (mst_layout)x->layout, memory, &y, &st);
    mst_op_call bn = bn_pool_bn_part(c, &y), mp = bn_pool_pool_part(c, &y);
    mst_status s = norm(ctx, &bn);
    return s == MST_OK ? pool(ctx, &mp) : s;
}

/* The fused path's operands: f32 (the statistics and parameters too), x and the pooled values and
 * indices in nChw16c. */
static bool bn_pool_fused(const mst_op_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->dtype != MST_DTYPE_F32) return false;
    return c->out[0]->dtype == MST_DTYPE_F32 && c->out[2]->dtype == MST_DTYPE_F32 && mst_tensor_blocked(c->in[0]) &&
           mst_tensor_blocked(c->out[0]) && mst_tensor_blocked(c->out[1]);
}

static mst_status batchnorm_maxpool_fast(mst_ctx *ctx, const mst_op_call *c) {
    return bn_pool_fused(c) ? bn_images_run(ctx, c, false) : bn_pool_in_turn(ctx, c);
}

static int64_t batchnorm_maxpool_flops(const mst_op_call *c) {
    return batchnorm_flops(c) + c->out[0]->numel * c->attrs.i[2] * c->attrs.i[3];
}

const mst_op_desc mst_desc_batchnorm_maxpool = {
    .name = "batchnorm_maxpool", .min_inputs = 5, .max_inputs = 5, .n_outputs = 4,
    .mutates = 1u << 3 | 1u << 4, .nondiff = 1u << 3 | 1u << 4,
    .attr_i = {"training", "relu", "k_h", "k_w", "stride_h", "stride_w", "pad_h", "pad_w"}, .attr_f = {"momentum", "eps"},
    .infer = infer_batchnorm_maxpool,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = batchnorm_maxpool_fast, [MST_DTYPE_F64] = bn_pool_in_turn,
                                [MST_DTYPE_F16] = bn_pool_in_turn, [MST_DTYPE_BF16] = bn_pool_in_turn},
    /* the reference: the two ops' kernels in turn, which are their references under force_ref */
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = bn_pool_in_turn, [MST_DTYPE_F64] = bn_pool_in_turn,
                            [MST_DTYPE_F16] = bn_pool_in_turn, [MST_DTYPE_BF16] = bn_pool_in_turn},
    .flops = batchnorm_maxpool_flops,
    /* x in either layout; the pooled values and indices in one together (maxpool2d's y and indices) */
    .blocked_in = 1u << 0, .blocked_out = 1u << 0 | 1u << 1, .blocked_tied = 1u << MST_TIED_OUT | 1u << (MST_TIED_OUT + 1),
};

/* ======================================================================================= */
/* layernorm                                                                                */
/* ======================================================================================= */

/* in: x (..., D), gamma (D), beta (D); attr f[0] eps. out: y (like x), mean and rstd (...). */
static mst_status infer_layernorm(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_float_all(ctx, c);
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0];
    if (x->ndim < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "x must have rank >= 1 (normalized over its last dimension), got a scalar");
    int64_t dim = x->shape[x->ndim - 1];
    if (dim < 1) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "the normalized (last) dimension of x must be >= 1, got 0");
    if ((s = require_vector(ctx, c, 1, "gamma", dim, "the last dimension of x")) != MST_OK) return s;
    if ((s = require_vector(ctx, c, 2, "beta", dim, "the last dimension of x")) != MST_OK) return s;
    if ((s = require_eps(ctx, c, c->attrs.f[0])) != MST_OK) return s;
    out[0] = meta_like(x);
    out[1] = meta_make(x->dtype, x->ndim - 1, x->shape);
    out[2] = meta_make(x->dtype, x->ndim - 1, x->shape);
    return MST_OK;
}

/* The reference: one row at a time, two-pass mean and biased variance in double, then
 * y = (x - mean) rstd gamma + beta in T. */
#define LN_FWD_REF_BODY(T)                                                                           \
    {                                                                                                \
        const mst_tensor *X = c->in[0];                                                              \
        int64_t dim = X->shape[X->ndim - 1], rows = X->numel / dim;                                  \
        const T *x = (const T *)mst_tensor_data(X);                                                  \
        const T *gamma = (const T *)mst_tensor_data(c->in[1]), *beta = (const T *)mst_tensor_data(c->in[2]); \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                      \
        T *mean_out = (T *)mst_tensor_data(c->out[1]), *rstd_out = (T *)mst_tensor_data(c->out[2]);  \
        double eps = c->attrs.f[0];                                                                  \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const T *xr = x + r * dim;                                                               \
            T *yr = y + r * dim;                                                                     \
            double sum = 0, sq = 0;                                                                  \
            for (int64_t j = 0; j < dim; j++) sum += xr[j];                                          \
            double mean = sum / (double)dim;                                                         \
            for (int64_t j = 0; j < dim; j++) { double t = (double)xr[j] - mean; sq += t * t; }      \
            double rstd = 1.0 / sqrt(sq / (double)dim + eps);                                        \
            mean_out[r] = (T)mean;                                                                   \
            rstd_out[r] = (T)rstd;                                                                   \
            T m = (T)mean, rs = (T)rstd;                                                             \
            for (int64_t j = 0; j < dim; j++) yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];         \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(layernorm_ref, LN_FWD_REF_BODY)

/* The fast f32 kernel: the reference's arithmetic, LN_ROWS rows at a time. A row's sums are one
 * chain of dependent double adds (4 cycles each), which the reference runs one row after another,
 * ~8 cycles an element over the two passes; here the block's LN_ROWS chains advance together, each
 * in the reference's order, so every row gets the reference's bits (test_norm checks them). The
 * block size is a constant in the loops, so the chains stay in registers; rows past the last full
 * block go one at a time. The elementwise passes vectorize; the body is compiled for the generic
 * target and for AVX2 (4 doubles a vector instead of 2), chosen by the CPU (MSTUNE_CPU_MASK
 * honoured): -ffp-contract=off keeps one rounding per operation in both, so both have the
 * reference's bits. Rows are independent: a large tensor's rows split over the pool
 * (k_ln_min_chunk_elems elements a chunk at least). f64 (gradient checks) runs the reference. */
enum { LN_ROWS = 8 };
enum { k_ln_min_chunk_elems = 1 << 15 };

typedef struct {
    const float *x, *gamma, *beta;
    float *y, *mean, *rstd;
    int64_t dim;
    double eps;
} ln_fwd_args;

/* sums of nb rows at xb (nb a constant where inlined: LN_ROWS or 1) */
static inline __attribute__((always_inline)) void ln_row_stats(const float *xb, int64_t dim, int nb, double *mean,
                                                               double *sq) {
    double sum[LN_ROWS] = {0};
    for (int64_t j = 0; j < dim; j++)
        for (int k = 0; k < nb; k++) sum[k] += xb[k * dim + j];
    for (int k = 0; k < nb; k++) {
        mean[k] = sum[k] / (double)dim;
        sq[k] = 0;
    }
    for (int64_t j = 0; j < dim; j++)
        for (int k = 0; k < nb; k++) {
            double t = (double)xb[k * dim + j] - mean[k];
            sq[k] += t * t;
        }
}

static inline __attribute__((always_inline)) void ln_fwd_rows_body(const ln_fwd_args *a, int64_t begin, int64_t end) {
    const int64_t dim = a->dim;
    for (int64_t r0 = begin; r0 < end;) {
        int nb = end - r0 < LN_ROWS ? 1 : LN_ROWS;
        const float *xb = a->x + r0 * dim;
        double mean[LN_ROWS], sq[LN_ROWS];
        if (nb == LN_ROWS) ln_row_stats(xb, dim, LN_ROWS, mean, sq);
        else ln_row_stats(xb, dim, 1, mean, sq);
        for (int k = 0; k < nb; k++) {
            double rstd = 1.0 / sqrt(sq[k] / (double)dim + a->eps);
            a->mean[r0 + k] = (float)mean[k];
            a->rstd[r0 + k] = (float)rstd;
            float m = (float)mean[k], rs = (float)rstd;
            const float *xr = xb + k * dim;
            float *yr = a->y + (r0 + k) * dim;
            for (int64_t j = 0; j < dim; j++) yr[j] = (xr[j] - m) * rs * a->gamma[j] + a->beta[j];
        }
        r0 += nb;
    }
}
static void ln_fwd_rows_portable(const ln_fwd_args *a, int64_t begin, int64_t end) { ln_fwd_rows_body(a, begin, end); }
__attribute__((target("avx2"))) static void ln_fwd_rows_avx2(const ln_fwd_args *a, int64_t begin, int64_t end) {
    ln_fwd_rows_body(a, begin, end);
}

static void ln_fwd_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    (mst_cpu_has(MST_CPU_AVX2) ? ln_fwd_rows_avx2 : ln_fwd_rows_portable)(arg, begin, end);
}

static mst_status layernorm_f32(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *X = c->in[0];
    ln_fwd_args a = {.x = mst_tensor_f32(X), .gamma = mst_tensor_f32(c->in[1]), .beta = mst_tensor_f32(c->in[2]),
                     .y = mst_tensor_f32(c->out[0]), .mean = mst_tensor_f32(c->out[1]), .rstd = mst_tensor_f32(c->out[2]),
                     .dim = X->shape[X->ndim - 1], .eps = c->attrs.f[0]};
    int64_t rows = X->numel / a.dim, min_rows = k_ln_min_chunk_elems / a.dim > 0 ? k_ln_min_chunk_elems / a.dim : 1;
    mst_parallel_for(ctx, rows, min_rows, ln_fwd_chunk, &a);
    return MST_OK;
}

static mst_status layernorm_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (!gy[0]) return MST_OK;
    mst_tensor *g[3] = {0};
    mst_status s = mst_layernorm_grad(ctx, gy[0], c->in[0], c->in[1], c->out[1], c->out[2], g);
    if (s != MST_OK) return s;
    gx[0] = g[0];
    gx[1] = g[1];
    gx[2] = g[2];
    return MST_OK;
}

/* sum, squared deviations, apply: 1 + 3 + 4 per element */
static int64_t layernorm_flops(const mst_op_call *c) { return 8 * c->in[0]->numel; }

const mst_op_desc mst_desc_layernorm = {
    .name = "layernorm", .min_inputs = 3, .max_inputs = 3, .n_outputs = 3,
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .attr_f = {"eps"},
    .infer = infer_layernorm,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = layernorm_f32, [MST_DTYPE_F64] = layernorm_ref_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(layernorm_ref),
    .backward = layernorm_backward, .flops = layernorm_flops,
};

/* ---- layernorm_grad: in gy, x, gamma, mean, rstd; out gx, ggamma, gbeta ---- */

static mst_status infer_layernorm_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_float_all(ctx, c);
    if (s == MST_OK) s = op_require_same_shape(ctx, c, 0, 1);
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[1];
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "x must have rank >= 1 and a last dimension >= 1");
    int64_t dim = x->shape[x->ndim - 1];
    if ((s = require_vector(ctx, c, 2, "gamma", dim, "the last dimension of x")) != MST_OK) return s;
    for (int i = 3; i < 5; i++) {
        const mst_tensor *t = c->in[i];
        if (!mst_shape_equal(t->ndim, t->shape, x->ndim - 1, x->shape)) {
            char want[96], got[96];
            return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s (input %d) must have shape %s (x without its last dimension), got %s",
                               i == 3 ? "mean" : "rstd", i, mst_shape_str(x->ndim - 1, x->shape, want, sizeof(want)),
                               mst_shape_str(t->ndim, t->shape, got, sizeof(got)));
        }
    }
    out[0] = meta_like(x);
    out[1] = meta_vector(x->dtype, dim);
    out[2] = meta_vector(x->dtype, dim);
    return MST_OK;
}

/* Per row, with g = gy gamma and xhat = (x - mean) rstd:
 *   gx = rstd (g - mean(g) - xhat mean(g xhat));  ggamma += gy xhat;  gbeta += gy
 * The per-feature sums accumulate in double scratch, row after row. The reference: one row at a time. */
#define LN_GRAD_REF_BODY(T)                                                                              \
    {                                                                                                \
        const mst_tensor *X = c->in[1];                                                              \
        int64_t dim = X->shape[X->ndim - 1], rows = X->numel / dim;                                  \
        const T *gy = (const T *)mst_tensor_data(c->in[0]), *x = (const T *)mst_tensor_data(X);      \
        const T *gamma = (const T *)mst_tensor_data(c->in[2]);                                       \
        const T *mean = (const T *)mst_tensor_data(c->in[3]), *rstd = (const T *)mst_tensor_data(c->in[4]); \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                                     \
        T *ggamma = (T *)mst_tensor_data(c->out[1]), *gbeta = (T *)mst_tensor_data(c->out[2]);       \
        double *acc_gamma = (double *)mst_ctx_workspace(ctx, (size_t)(2 * dim) * sizeof(double));    \
        if (!acc_gamma) return ctx->status;                                                          \
        double *acc_beta = acc_gamma + dim;                                                          \
        for (int64_t j = 0; j < dim; j++) acc_gamma[j] = acc_beta[j] = 0;                            \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const T *gyr = gy + r * dim, *xr = x + r * dim;                                          \
            T *gxr = gx + r * dim;                                                                   \
            double m = mean[r], rs = rstd[r], sg = 0, sgx = 0;                                       \
            for (int64_t j = 0; j < dim; j++) {                                                      \
                double xhat = ((double)xr[j] - m) * rs, g = (double)gyr[j] * gamma[j];               \
                sg += g;                                                                             \
                sgx += g * xhat;                                                                     \
                acc_gamma[j] += gyr[j] * xhat;                                                       \
                acc_beta[j] += gyr[j];                                                               \
            }                                                                                        \
            sg /= (double)dim;                                                                       \
            sgx /= (double)dim;                                                                      \
            for (int64_t j = 0; j < dim; j++) {                                                      \
                double xhat = ((double)xr[j] - m) * rs;                                              \
                gxr[j] = (T)(rs * ((double)gyr[j] * gamma[j] - sg - xhat * sgx));                    \
            }                                                                                        \
        }                                                                                            \
        for (int64_t j = 0; j < dim; j++) { ggamma[j] = (T)acc_gamma[j]; gbeta[j] = (T)acc_beta[j]; } \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(layernorm_grad_ref, LN_GRAD_REF_BODY)

/* The fast f32 kernel: the reference's arithmetic in three passes over a block of LN_ROWS rows: the
 * rows' sums as LN_ROWS chains (as the forward's), then row by row the feature sums (independent
 * across features, so they vectorize) and gx. Each sum keeps the reference's order (a row's over
 * its features, a feature's over the rows), so every output has the reference's bits; compiled
 * twice as the forward is. One thread: splitting the rows would split the feature sums' order. */
typedef struct {
    const float *gy, *x, *gamma, *mean, *rstd;
    float *gx;
    double *acc_gamma, *acc_beta;      /* dim each, zeroed */
    int64_t dim, rows;
} ln_grad_args;

/* the row sums of nb rows (nb a constant where inlined) */
static inline __attribute__((always_inline)) void ln_grad_row_sums(const ln_grad_args *a, const float *gyb, const float *xb,
                                                                   int nb, const double *m, const double *rs, double *sg,
                                                                   double *sgx) {
    for (int k = 0; k < nb; k++) sg[k] = sgx[k] = 0;
    for (int64_t j = 0; j < a->dim; j++)
        for (int k = 0; k < nb; k++) {
            double xhat = ((double)xb[k * a->dim + j] - m[k]) * rs[k], g = (double)gyb[k * a->dim + j] * a->gamma[j];
            sg[k] += g;
            sgx[k] += g * xhat;
        }
}

static inline __attribute__((always_inline)) void ln_grad_rows_body(const ln_grad_args *a) {
    const int64_t dim = a->dim;
    for (int64_t r0 = 0; r0 < a->rows;) {
        int nb = a->rows - r0 < LN_ROWS ? 1 : LN_ROWS;
        const float *gyb = a->gy + r0 * dim, *xb = a->x + r0 * dim;
        double m[LN_ROWS], rs[LN_ROWS], sg[LN_ROWS], sgx[LN_ROWS];
        for (int k = 0; k < nb; k++) {
            m[k] = a->mean[r0 + k];
            rs[k] = a->rstd[r0 + k];
        }
        if (nb == LN_ROWS) ln_grad_row_sums(a, gyb, xb, LN_ROWS, m, rs, sg, sgx);
        else ln_grad_row_sums(a, gyb, xb, 1, m, rs, sg, sgx);
        for (int k = 0; k < nb; k++) {
            double sgk = sg[k] / (double)dim, sgxk = sgx[k] / (double)dim, mk = m[k], rsk = rs[k];
            const float *gyr = gyb + k * dim, *xr = xb + k * dim;
            float *gxr = a->gx + (r0 + k) * dim;
            for (int64_t j = 0; j < dim; j++) {
                double xhat = ((double)xr[j] - mk) * rsk;
                a->acc_gamma[j] += gyr[j] * xhat;
                a->acc_beta[j] += gyr[j];
            }
            for (int64_t j = 0; j < dim; j++) {
                double xhat = ((double)xr[j] - mk) * rsk;
                gxr[j] = (float)(rsk * ((double)gyr[j] * a->gamma[j] - sgk - xhat * sgxk));
            }
        }
        r0 += nb;
    }
}
static void ln_grad_rows_portable(const ln_grad_args *a) { ln_grad_rows_body(a); }
__attribute__((target("avx2"))) static void ln_grad_rows_avx2(const ln_grad_args *a) { ln_grad_rows_body(a); }

static mst_status layernorm_grad_f32(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *X = c->in[1];
    int64_t dim = X->shape[X->ndim - 1];
    double *acc = (double *)mst_ctx_workspace(ctx, (size_t)(2 * dim) * sizeof(double));
    if (!acc) return ctx->status;
    for (int64_t j = 0; j < 2 * dim; j++) acc[j] = 0;
    ln_grad_args a = {.gy = mst_tensor_f32(c->in[0]), .x = mst_tensor_f32(X), .gamma = mst_tensor_f32(c->in[2]),
                      .mean = mst_tensor_f32(c->in[3]), .rstd = mst_tensor_f32(c->in[4]), .gx = mst_tensor_f32(c->out[0]),
                      .acc_gamma = acc, .acc_beta = acc + dim, .dim = dim, .rows = X->numel / dim};
    (mst_cpu_has(MST_CPU_AVX2) ? ln_grad_rows_avx2 : ln_grad_rows_portable)(&a);
    float *ggamma = mst_tensor_f32(c->out[1]), *gbeta = mst_tensor_f32(c->out[2]);
    for (int64_t j = 0; j < dim; j++) {
        ggamma[j] = (float)acc[j];
        gbeta[j] = (float)acc[dim + j];
    }
    return MST_OK;
}

/* the row and feature sums (9 per element), then gx (7 per element) */
static int64_t layernorm_grad_flops(const mst_op_call *c) { return 16 * c->in[0]->numel; }

const mst_op_desc mst_desc_layernorm_grad = {
    .name = "layernorm_grad", .min_inputs = 5, .max_inputs = 5, .n_outputs = 3, .flags = MST_OPF_GRAD_OP,
    .infer = infer_layernorm_grad,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = layernorm_grad_f32, [MST_DTYPE_F64] = layernorm_grad_ref_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(layernorm_grad_ref), .flops = layernorm_grad_flops,
};

/* ======================================================================================= */
/* public constructors                                                                      */
/* ======================================================================================= */

mst_tensor *mst_batchnorm(mst_ctx *ctx, mst_tensor *x, mst_tensor *gamma, mst_tensor *beta,
                          mst_tensor *running_mean, mst_tensor *running_var,
                          bool training, double momentum, double eps) {
    mst_tensor *in[5] = {x, gamma, beta, running_mean, running_var};
    mst_attrs a = {.i = {training}, .f = {momentum, eps}};
    return mst_dispatch1(ctx, MST_OP_BATCHNORM, 5, in, &a);
}

mst_tensor *mst_layernorm(mst_ctx *ctx, mst_tensor *x, mst_tensor *gamma, mst_tensor *beta, double eps) {
    mst_tensor *in[3] = {x, gamma, beta};
    mst_attrs a = {.f = {eps}};
    return mst_dispatch1(ctx, MST_OP_LAYERNORM, 3, in, &a);
}

mst_status mst_batchnorm_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, mst_tensor *gamma,
                              mst_tensor *save_mean, mst_tensor *save_invstd, bool training, mst_tensor *out[3]) {
    mst_tensor *in[5] = {gy, x, gamma, save_mean, save_invstd};
    mst_attrs a = {.i = {training}};
    out[0] = out[1] = out[2] = NULL;
    return mst_dispatch(ctx, MST_OP_BATCHNORM_GRAD, 5, in, &a, out);
}

mst_status mst_layernorm_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, mst_tensor *gamma,
                              mst_tensor *mean, mst_tensor *rstd, mst_tensor *out[3]) {
    mst_tensor *in[5] = {gy, x, gamma, mean, rstd};
    out[0] = out[1] = out[2] = NULL;
    return mst_dispatch(ctx, MST_OP_LAYERNORM_GRAD, 5, in, NULL, out);
}
