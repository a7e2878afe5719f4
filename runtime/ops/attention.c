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
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu_features.h"
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

#if defined(__x86_64__)
/* masked_row_f32 with AVX2 over a block of rows, bit for bit. The max is exact whatever the order
 * (a NaN score is skipped, as `x[k] > m` skips it); the subtraction, exp and scaling are
 * elementwise; the four double partials are the four lanes of one vector, each taking every
 * fourth key below the row's last kept one in order, the tail into the first, summed
 * (s0 + s1) + (s2 + s3). In stages over up to k_block_rows rows: the maxima and x - max, one exp
 * over the whole block (rows are contiguous: full vectors, one call), then the masks, sums and
 * scaling. Keys past the last kept one get an exp too, then their 0. Per row (24 keys, the
 * transformer's) an exp call and reading back its masked vector store stalled the scalar loop:
 * ~60 ns a row. */
enum { k_block_rows = 64 };

__attribute__((target("avx2"))) static float row_max_avx2(const float *x, const int32_t *keep, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mv = ninf;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 drop = _mm256_castsi256_ps(
            _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(keep + k)), _mm256_setzero_si256()));
        mv = _mm256_max_ps(_mm256_blendv_ps(_mm256_loadu_ps(x + k), ninf, drop), mv);   /* a NaN x gives mv */
    }
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, mv);
    for (int l = 0; l < 8; l++)
        if (lanes[l] > m) m = lanes[l];
    for (; k < n; k++)
        if (keep[k] && x[k] > m) m = x[k];
    return m;
}

/* y holds exp(x - m) for the row's keys; masks, sums and scales it as masked_row_f32 does. */
__attribute__((target("avx2"))) static void row_finish_avx2(const int32_t *keep, float *y, int64_t n) {
    int64_t hi = n, k;
    while (hi > 0 && !keep[hi - 1]) hi--;
    __m256d acc = _mm256_setzero_pd();
    for (k = 0; k + 4 <= hi; k += 4) {
        __m128 drop = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(const void *)(keep + k)), _mm_setzero_si128()));
        __m128 v = _mm_blendv_ps(_mm_loadu_ps(y + k), _mm_setzero_ps(), drop);
        _mm_storeu_ps(y + k, v);
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(v));
    }
    double s[4];
    _mm256_storeu_pd(s, acc);
    for (; k < hi; k++) {
        y[k] = keep[k] ? y[k] : 0.0f;
        s[0] += y[k];
    }
    for (k = hi; k < n; k++) y[k] = 0.0f;
    const float inv = (float)(1.0 / ((s[0] + s[1]) + (s[2] + s[3])));
    const __m256 ib = _mm256_set1_ps(inv);
    for (k = 0; k + 8 <= hi; k += 8) _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_loadu_ps(y + k), ib));
    for (; k < hi; k++) y[k] *= inv;
}

/* Rows [begin, end); row r's keep row is keep + (r / rows_per_batch) * n. */
__attribute__((target("avx2"))) static void masked_rows_f32_avx2(const float *x, const int32_t *keep, float *y, int64_t begin,
                                                                 int64_t end, int64_t n, int64_t rows_per_batch) {
    float m[k_block_rows];
    for (int64_t r0 = begin; r0 < end; r0 += k_block_rows) {
        const int64_t r1 = end - r0 < k_block_rows ? end : r0 + k_block_rows;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = x + r * n;
            float *yr = y + r * n;
            const float mr = m[r - r0] = row_max_avx2(xr, keep + (r / rows_per_batch) * n, n);
            const __m256 mb = _mm256_set1_ps(mr == -INFINITY ? 0.0f : mr);
            int64_t k = 0;
            for (; k + 8 <= n; k += 8) _mm256_storeu_ps(yr + k, _mm256_sub_ps(_mm256_loadu_ps(xr + k), mb));
            for (; k < n; k++) yr[k] = xr[k] - (mr == -INFINITY ? 0.0f : mr);
        }
        mst_vmath_expf(y + r0 * n, y + r0 * n, (r1 - r0) * n);
        for (int64_t r = r0; r < r1; r++) {
            float *yr = y + r * n;
            if (m[r - r0] == -INFINITY) {   /* no real key (or every kept score is -inf) */
                for (int64_t k = 0; k < n; k++) yr[k] = 0;
                continue;
            }
            row_finish_avx2(keep + (r / rows_per_batch) * n, yr, n);
        }
    }
}
#endif

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
#if defined(__x86_64__)
    if (mst_cpu_has(MST_CPU_AVX2)) {
        masked_rows_f32_avx2(x, keep, y, begin, end, j->v.lk, j->v.rows_per_batch);
        return;
    }
#endif
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
