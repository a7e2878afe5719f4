/* attention.c — the masked softmax of attention scores: softmax over the last axis (the keys)
 * where keys a padding mask marks absent get probability exactly 0.
 *
 *   scores (B, ..., Lk) float, keep (B, Lk) i32 (non-zero: the key is a real token) -> probs (B, ..., Lk)
 *
 * The mask is per batch row and per key, which is what a padded batch of sequences needs: every
 * head and every query of sample b sees the same keys. Taking the token ids themselves as `keep`
 * (id 0 = padding) needs no separate mask tensor. A row whose keys are all masked is all zeros
 * rather than NaN. Trade-off against an additive -inf bias (PyTorch's attn_mask): no (B, 1, 1, Lk)
 * float bias to build and broadcast, and no -inf that a half-precision add would have to carry;
 * the price is one op that knows about masking.
 *
 * Backward: the masked entries of y are exact zeros, so the softmax gradient rule
 * gx = y (gy - sum(gy y)) gives them zero gradient with no mask at all: the rule is softmax_grad
 * on the last axis. Sums of exponentials accumulate in double (f32: exp through the vector math
 * of runtime/ops/vmath.h); the reference kernel works in double throughout. FLOPs per element: 5, as softmax.
 */
#include <math.h>

#include "runtime/ops/common.h"
#include "runtime/ops/vmath.h"

/* Rows of Lk scores and the batch row each belongs to. */
typedef struct {
    int64_t rows, lk, rows_per_batch;
} mask_view;

static mask_view view_of(const mst_tensor *x) {
    mask_view v = {1, x->shape[x->ndim - 1], 1};
    for (int d = 0; d < x->ndim - 1; d++) v.rows *= x->shape[d];
    v.rows_per_batch = x->shape[0] ? v.rows / x->shape[0] : 1;
    return v;
}

/* masked_softmax: (scores, keep) */
static mst_status infer_masked_softmax(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0], *keep = c->in[1];
    if (x->ndim < 2)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "scores must have rank >= 2 (batch, ..., keys), got rank %d", x->ndim);
    if (keep->dtype != MST_DTYPE_I32)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "keep must be i32 (non-zero = real key), got %s", mst_dtype_name(keep->dtype));
    if (keep->ndim != 2 || keep->shape[0] != x->shape[0] || keep->shape[1] != x->shape[x->ndim - 1])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "keep must be (batch, keys) = (%lld, %lld)", (long long)x->shape[0],
                           (long long)x->shape[x->ndim - 1]);
    out[0] = meta_like(x);
    return MST_OK;
}

/* ---- fast kernels: one unit-stride row at a time ---- */

static void masked_row_f32(const float *x, const int32_t *keep, float *y, int64_t n) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; k++)
        if (keep[k] && x[k] > m) m = x[k];
    if (m == -INFINITY) {       /* no real key (or every kept score is -inf) */
        for (int64_t k = 0; k < n; k++) y[k] = 0;
        return;
    }
    /* exp up to the last real key through the vector math (masked keys before it computed, then
     * zeroed), the sum in double over four fixed partials: the scalar expf and one dependent add
     * chain were ~10% of the transformer's step */
    int64_t hi = n;     /* padding is a suffix in practice: no exp past the last real key */
    while (hi > 0 && !keep[hi - 1]) hi--;
    for (int64_t k = 0; k < hi; k++) y[k] = x[k] - m;
    for (int64_t k = hi; k < n; k++) y[k] = 0.0f;
    mst_vmath_expf(y, y, hi);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= hi; k += 4) {
        y[k] = keep[k] ? y[k] : 0.0f;
        y[k + 1] = keep[k + 1] ? y[k + 1] : 0.0f;
        y[k + 2] = keep[k + 2] ? y[k + 2] : 0.0f;
        y[k + 3] = keep[k + 3] ? y[k + 3] : 0.0f;
        s0 += y[k], s1 += y[k + 1], s2 += y[k + 2], s3 += y[k + 3];
    }
    for (; k < hi; k++) {
        y[k] = keep[k] ? y[k] : 0.0f;
        s0 += y[k];
    }
    float inv = (float)(1.0 / ((s0 + s1) + (s2 + s3)));
    for (k = 0; k < hi; k++) y[k] *= inv;
}

static void masked_row_f64(const double *x, const int32_t *keep, double *y, int64_t n) {
    double m = -INFINITY;
    for (int64_t k = 0; k < n; k++)
        if (keep[k] && x[k] > m) m = x[k];
    if (m == -INFINITY) {
        for (int64_t k = 0; k < n; k++) y[k] = 0;
        return;
    }
    double s = 0;
    for (int64_t k = 0; k < n; k++) {
        double e = keep[k] ? exp(x[k] - m) : 0.0;
        y[k] = e;
        s += e;
    }
    double inv = 1.0 / s;
    for (int64_t k = 0; k < n; k++) y[k] *= inv;
}

typedef struct {
    const mst_op_call *c;
    mask_view v;
} masked_job;

static void masked_chunk_f32(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const masked_job *j = arg;
    const float *x = mst_tensor_f32(j->c->in[0]);
    const int32_t *keep = mst_tensor_i32(j->c->in[1]);
    float *y = mst_tensor_f32(j->c->out[0]);
    for (int64_t r = begin; r < end; r++)
        masked_row_f32(x + r * j->v.lk, keep + (r / j->v.rows_per_batch) * j->v.lk, y + r * j->v.lk, j->v.lk);
}

static void masked_chunk_f64(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const masked_job *j = arg;
    const double *x = mst_tensor_f64(j->c->in[0]);
    const int32_t *keep = mst_tensor_i32(j->c->in[1]);
    double *y = mst_tensor_f64(j->c->out[0]);
    for (int64_t r = begin; r < end; r++)
        masked_row_f64(x + r * j->v.lk, keep + (r / j->v.rows_per_batch) * j->v.lk, y + r * j->v.lk, j->v.lk);
}

/* Rows are independent and each is computed whole by one worker: the bits do not depend on the
 * thread count. */
static int64_t min_rows(int64_t lk) { return lk > 0 ? (16384 + lk - 1) / lk : 1; }

static mst_status masked_softmax_f32(mst_ctx *ctx, const mst_op_call *c) {
    masked_job j = {c, view_of(c->in[0])};
    if (c->out[0]->numel) mst_parallel_for(ctx, j.v.rows, min_rows(j.v.lk), masked_chunk_f32, &j);
    return MST_OK;
}

static mst_status masked_softmax_f64(mst_ctx *ctx, const mst_op_call *c) {
    masked_job j = {c, view_of(c->in[0])};
    if (c->out[0]->numel) mst_parallel_for(ctx, j.v.rows, min_rows(j.v.lk), masked_chunk_f64, &j);
    return MST_OK;
}

/* ---- reference kernels: the definition, in double, one element at a time ---- */

static double load(const mst_tensor *t, int64_t i) {
    return t->dtype == MST_DTYPE_F32 ? (double)mst_tensor_f32(t)[i] : mst_tensor_f64(t)[i];
}

static void store(const mst_tensor *t, int64_t i, double v) {
    if (t->dtype == MST_DTYPE_F32) mst_tensor_f32(t)[i] = (float)v;
    else mst_tensor_f64(t)[i] = v;
}

static mst_status masked_softmax_ref(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    const mst_tensor *x = c->in[0], *y = c->out[0];
    const int32_t *keep = mst_tensor_i32(c->in[1]);
    mask_view v = view_of(x);
    for (int64_t r = 0; r < v.rows; r++) {
        const int32_t *kr = keep + (r / v.rows_per_batch) * v.lk;
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < v.lk; k++)
            if (kr[k]) m = fmax(m, load(x, r * v.lk + k));
        for (int64_t k = 0; k < v.lk; k++)
            if (kr[k] && m != -INFINITY) s += exp(load(x, r * v.lk + k) - m);
        for (int64_t k = 0; k < v.lk; k++)
            store(y, r * v.lk + k, kr[k] && m != -INFINITY ? exp(load(x, r * v.lk + k) - m) / s : 0.0);
    }
    return MST_OK;
}

static mst_status masked_softmax_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_softmax_grad(ctx, gy[0], c->out[0], -1);
    return gx[0] ? MST_OK : ctx->status;
}

static int64_t cost_masked_softmax(const mst_op_call *c) { return 5 * c->out[0]->numel; }

const mst_op_desc mst_desc_masked_softmax = {
    .name = "masked_softmax", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .nondiff = 1u << 1,         /* keep */
    .infer = infer_masked_softmax,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = masked_softmax_f32, [MST_DTYPE_F64] = masked_softmax_f64},
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = masked_softmax_ref, [MST_DTYPE_F64] = masked_softmax_ref},
    .backward = masked_softmax_backward, .flops = cost_masked_softmax,
};

mst_tensor *mst_masked_softmax(mst_ctx *ctx, mst_tensor *scores, mst_tensor *keep) {
    return mst_dispatch1(ctx, MST_OP_MASKED_SOFTMAX, 2, (mst_tensor *[]){scores, keep}, NULL);
}
