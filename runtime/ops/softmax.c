/* softmax.c — softmax and log-softmax along any axis, their gradient ops, and the cross-entropy
 * loss over (N, C) logits with i32 labels.
 *
 * A tensor is seen as (outer, n, inner) around the axis. When the axis is last (inner == 1, the
 * common case) each row is contiguous and is done in unit-stride passes: max, exp, sum,
 * normalize. Otherwise the kernels walk a whole (n, inner) block with the axis as the outer loop
 * and keep per-column maxima and sums in the context workspace, so the inner loops stay
 * unit-stride instead of striding by `inner` down each column. Inputs are shifted by the maximum
 * before exp, and sums of exponentials accumulate in double whatever the element type, so
 * logits around 1000 are as exact as logits around 0. The reference kernels are the textbook
 * column-at-a-time loops, entirely in double.
 *
 * Cross-entropy is computed from the log-sum-exp, loss_r = log(sum exp(x - m)) + m - x[label],
 * never from log(softmax), and saves the softmax as its second output for the backward rule:
 * d loss / d logits = (probs - onehot(labels)) gy / N. Labels are only known at run time, so
 * the kernels (not the inference) check that they lie in [0, C).
 *
 * FLOPs per element: softmax and log_softmax 5 (max, subtract, exp, sum, normalize), their
 * gradients 4, cross_entropy 5 plus 3 per row, cross_entropy_grad 2.
 */
#include <math.h>

#include "runtime/ops/common.h"

#define EXP(v) _Generic((v), float: expf, default: exp)(v)

/* A tensor as (outer, n, inner) around `axis`. */
typedef struct {
    int64_t outer, n, inner;
} axis_view;

static axis_view view_around(const mst_tensor *t, int axis) {
    axis_view v = {1, t->shape[axis], 1};
    for (int d = 0; d < axis; d++) v.outer *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) v.inner *= t->shape[d];
    return v;
}

/* Per-column scratch for the strided path: `inner` doubles (sums) then `inner` T (maxima). */
static double *column_scratch(mst_ctx *ctx, int64_t inner, size_t elem_size) {
    return (double *)mst_ctx_workspace(ctx, (size_t)inner * (sizeof(double) + elem_size));
}

/* Row reductions for the contiguous path. Four partial results break the loop-carried latency
 * chain, which the compiler may not do itself without -ffast-math; the order stays fixed, so
 * results are reproducible. A NaN anywhere still reaches the output through exp and the sum. */
#define ROW_HELPERS(T, SUF)                                                                  \
    static T row_max_##SUF(const T *v, int64_t n) {                                          \
        T m0 = v[0], m1 = v[0], m2 = v[0], m3 = v[0];                                        \
        int64_t k = 0;                                                                       \
        for (; k + 4 <= n; k += 4) {                                                         \
            m0 = v[k] > m0 ? v[k] : m0;                                                      \
            m1 = v[k + 1] > m1 ? v[k + 1] : m1;                                              \
            m2 = v[k + 2] > m2 ? v[k + 2] : m2;                                              \
            m3 = v[k + 3] > m3 ? v[k + 3] : m3;                                              \
        }                                                                                    \
        for (; k < n; k++) m0 = v[k] > m0 ? v[k] : m0;                                       \
        m0 = m1 > m0 ? m1 : m0;                                                              \
        m2 = m3 > m2 ? m3 : m2;                                                              \
        return m2 > m0 ? m2 : m0;                                                            \
    }                                                                                        \
    /* sum of a[k] (b == NULL) or of a[k] b[k], in double */                                 \
    static double row_sum_##SUF(const T *a, const T *b, int64_t n) {                         \
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                               \
        int64_t k = 0;                                                                       \
        if (b) {                                                                             \
            for (; k + 4 <= n; k += 4) {                                                     \
                s0 += a[k] * b[k];                                                           \
                s1 += a[k + 1] * b[k + 1];                                                   \
                s2 += a[k + 2] * b[k + 2];                                                   \
                s3 += a[k + 3] * b[k + 3];                                                   \
            }                                                                                \
            for (; k < n; k++) s0 += a[k] * b[k];                                            \
        } else {                                                                             \
            for (; k + 4 <= n; k += 4) {                                                     \
                s0 += a[k];                                                                  \
                s1 += a[k + 1];                                                              \
                s2 += a[k + 2];                                                              \
                s3 += a[k + 3];                                                              \
            }                                                                                \
            for (; k < n; k++) s0 += a[k];                                                   \
        }                                                                                    \
        return (s0 + s1) + (s2 + s3);                                                        \
    }
ROW_HELPERS(float, f32)
ROW_HELPERS(double, f64)
#define ROW_MAX(v, n) _Generic((v)[0] + 0, float: row_max_f32, default: row_max_f64)(v, n)
#define ROW_SUM(a, b, n) _Generic((a)[0] + 0, float: row_sum_f32, default: row_sum_f64)(a, b, n)

/* ---- inference ---- */

static mst_status require_axis(mst_ctx *ctx, const mst_op_call *c, const mst_tensor *x) {
    int64_t axis = c->attrs.i[0];
    if (axis >= 0 && axis < x->ndim) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_ARG, "axis %lld is outside [0, %d) for a rank-%d input", (long long)axis,
                       x->ndim, x->ndim);
}

/* softmax, log_softmax: (x) */
static mst_status infer_softmax(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s == MST_OK) s = require_axis(ctx, c, c->in[0]);
    if (s == MST_OK) out[0] = meta_like(c->in[0]);
    return s;
}

/* softmax_grad, log_softmax_grad: (gy, y), same dtype and shape */
static mst_status infer_softmax_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_infer_like_input0(ctx, c, out);
    return s == MST_OK ? require_axis(ctx, c, c->in[1]) : s;
}

/* ---- softmax / log_softmax: fast kernels ---- */

#define SOFTMAX_BODY(T, LOG)                                                                 \
    {                                                                                        \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                                   \
        T *y = (T *)mst_tensor_data(c->out[0]);                                              \
        axis_view v = view_around(c->in[0], (int)c->attrs.i[0]);                             \
        if (c->out[0]->numel == 0) return MST_OK;                                            \
        if (v.inner == 1) {                                                                  \
            for (int64_t o = 0; o < v.outer; o++) {                                          \
                const T *xr = x + o * v.n;                                                   \
                T *yr = y + o * v.n;                                                         \
                T m = ROW_MAX(xr, v.n);                                                      \
                for (int64_t k = 0; k < v.n; k++) yr[k] = EXP(xr[k] - m);                    \
                double s = ROW_SUM(yr, (const T *)NULL, v.n);                                \
                if (LOG) {                                                                   \
                    T shift = m + (T)log(s);                                                 \
                    for (int64_t k = 0; k < v.n; k++) yr[k] = xr[k] - shift;                 \
                } else {                                                                     \
                    T inv = (T)(1.0 / s);                                                    \
                    for (int64_t k = 0; k < v.n; k++) yr[k] *= inv;                          \
                }                                                                            \
            }                                                                                \
            return MST_OK;                                                                   \
        }                                                                                    \
        double *sum = column_scratch(ctx, v.inner, sizeof(T));                               \
        if (!sum) return ctx->status;                                                        \
        T *mx = (T *)(sum + v.inner);                                                        \
        for (int64_t o = 0; o < v.outer; o++) {                                              \
            const T *xb = x + o * v.n * v.inner; /* (n, inner) */                            \
            T *yb = y + o * v.n * v.inner;                                                   \
            for (int64_t j = 0; j < v.inner; j++) { mx[j] = xb[j]; sum[j] = 0; }             \
            for (int64_t k = 1; k < v.n; k++) {                                              \
                const T *xr = xb + k * v.inner;                                              \
                for (int64_t j = 0; j < v.inner; j++) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j]; \
            }                                                                                \
            for (int64_t k = 0; k < v.n; k++) {                                              \
                const T *xr = xb + k * v.inner;                                              \
                T *yr = yb + k * v.inner;                                                    \
                for (int64_t j = 0; j < v.inner; j++) {                                      \
                    T e = EXP(xr[j] - mx[j]);                                                \
                    if (!LOG) yr[j] = e;                                                     \
                    sum[j] += e;                                                             \
                }                                                                            \
            }                                                                                \
            /* log_softmax: mx becomes the shift m + log s; softmax: sum becomes 1 / s */    \
            for (int64_t j = 0; j < v.inner; j++) {                                          \
                if (LOG) mx[j] += (T)log(sum[j]);                                            \
                else sum[j] = 1.0 / sum[j];                                                  \
            }                                                                                \
            for (int64_t k = 0; k < v.n; k++) {                                              \
                const T *xr = xb + k * v.inner;                                              \
                T *yr = yb + k * v.inner;                                                    \
                if (LOG) for (int64_t j = 0; j < v.inner; j++) yr[j] = xr[j] - mx[j];        \
                else for (int64_t j = 0; j < v.inner; j++) yr[j] = (T)(yr[j] * sum[j]);      \
            }                                                                                \
        }                                                                                    \
        return MST_OK;                                                                       \
    }

/* ---- softmax / log_softmax gradients: fast kernels ----
 * softmax:     gx = y (gy - sum(gy y))        log_softmax: gx = gy - exp(y) sum(gy) */

#define SOFTMAX_GRAD_BODY(T, LOG)                                                            \
    {                                                                                        \
        const T *g = (const T *)mst_tensor_data(c->in[0]);                                   \
        const T *y = (const T *)mst_tensor_data(c->in[1]);                                   \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                             \
        axis_view v = view_around(c->in[1], (int)c->attrs.i[0]);                             \
        if (c->out[0]->numel == 0) return MST_OK;                                            \
        if (v.inner == 1) {                                                                  \
            for (int64_t o = 0; o < v.outer; o++) {                                          \
                const T *gr = g + o * v.n, *yr = y + o * v.n;                                \
                T *xr = gx + o * v.n;                                                        \
                T st = (T)ROW_SUM(gr, LOG ? NULL : yr, v.n);                                 \
                if (LOG) for (int64_t k = 0; k < v.n; k++) xr[k] = gr[k] - EXP(yr[k]) * st;  \
                else for (int64_t k = 0; k < v.n; k++) xr[k] = yr[k] * (gr[k] - st);         \
            }                                                                                \
            return MST_OK;                                                                   \
        }                                                                                    \
        double *sum = column_scratch(ctx, v.inner, sizeof(T));                               \
        if (!sum) return ctx->status;                                                        \
        T *st = (T *)(sum + v.inner);                                                        \
        for (int64_t o = 0; o < v.outer; o++) {                                              \
            size_t base = (size_t)(o * v.n * v.inner); /* (n, inner) blocks */               \
            for (int64_t j = 0; j < v.inner; j++) sum[j] = 0;                                \
            for (int64_t k = 0; k < v.n; k++) {                                              \
                const T *gr = g + base + k * v.inner, *yr = y + base + k * v.inner;          \
                for (int64_t j = 0; j < v.inner; j++) sum[j] += LOG ? gr[j] : gr[j] * yr[j]; \
            }                                                                                \
            for (int64_t j = 0; j < v.inner; j++) st[j] = (T)sum[j];                         \
            for (int64_t k = 0; k < v.n; k++) {                                              \
                const T *gr = g + base + k * v.inner, *yr = y + base + k * v.inner;          \
                T *xr = gx + base + k * v.inner;                                             \
                if (LOG) for (int64_t j = 0; j < v.inner; j++) xr[j] = gr[j] - EXP(yr[j]) * st[j]; \
                else for (int64_t j = 0; j < v.inner; j++) xr[j] = yr[j] * (gr[j] - st[j]);  \
            }                                                                                \
        }                                                                                    \
        return MST_OK;                                                                       \
    }

#define SOFTMAX_FWD(T) SOFTMAX_BODY(T, 0)
#define LOG_SOFTMAX_FWD(T) SOFTMAX_BODY(T, 1)
#define SOFTMAX_BWD(T) SOFTMAX_GRAD_BODY(T, 0)
#define LOG_SOFTMAX_BWD(T) SOFTMAX_GRAD_BODY(T, 1)
FLOAT_KERNELS(softmax, SOFTMAX_FWD)
FLOAT_KERNELS(log_softmax, LOG_SOFTMAX_FWD)
FLOAT_KERNELS(softmax_grad, SOFTMAX_BWD)
FLOAT_KERNELS(log_softmax_grad, LOG_SOFTMAX_BWD)

/* ---- reference kernels: one column at a time, stride `inner`, all in double ---- */

#define SOFTMAX_REF_BODY(T, LOG)                                                             \
    {                                                                                        \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                                   \
        T *y = (T *)mst_tensor_data(c->out[0]);                                              \
        axis_view v = view_around(c->in[0], (int)c->attrs.i[0]);                             \
        if (v.n == 0) return MST_OK;                                                         \
        for (int64_t o = 0; o < v.outer; o++)                                                \
            for (int64_t j = 0; j < v.inner; j++) {                                          \
                int64_t base = o * v.n * v.inner + j;                                        \
                double m = x[base];                                                          \
                for (int64_t k = 1; k < v.n; k++)                                            \
                    if (x[base + k * v.inner] > m) m = x[base + k * v.inner];                \
                double s = 0;                                                                \
                for (int64_t k = 0; k < v.n; k++) s += exp((double)x[base + k * v.inner] - m); \
                for (int64_t k = 0; k < v.n; k++) {                                          \
                    double xk = x[base + k * v.inner];                                       \
                    y[base + k * v.inner] = (T)(LOG ? xk - m - log(s) : exp(xk - m) / s);    \
                }                                                                            \
            }                                                                                \
        return MST_OK;                                                                       \
    }

#define SOFTMAX_GRAD_REF_BODY(T, LOG)                                                        \
    {                                                                                        \
        const T *g = (const T *)mst_tensor_data(c->in[0]);                                   \
        const T *y = (const T *)mst_tensor_data(c->in[1]);                                   \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                             \
        axis_view v = view_around(c->in[1], (int)c->attrs.i[0]);                             \
        for (int64_t o = 0; o < v.outer; o++)                                                \
            for (int64_t j = 0; j < v.inner; j++) {                                          \
                int64_t base = o * v.n * v.inner + j;                                        \
                double s = 0;                                                                \
                for (int64_t k = 0; k < v.n; k++) {                                          \
                    int64_t i = base + k * v.inner;                                          \
                    s += LOG ? (double)g[i] : (double)g[i] * y[i];                           \
                }                                                                            \
                for (int64_t k = 0; k < v.n; k++) {                                          \
                    int64_t i = base + k * v.inner;                                          \
                    gx[i] = (T)(LOG ? g[i] - exp((double)y[i]) * s : y[i] * ((double)g[i] - s)); \
                }                                                                            \
            }                                                                                \
        return MST_OK;                                                                       \
    }

#define SOFTMAX_REF(T) SOFTMAX_REF_BODY(T, 0)
#define LOG_SOFTMAX_REF(T) SOFTMAX_REF_BODY(T, 1)
#define SOFTMAX_GRAD_REF(T) SOFTMAX_GRAD_REF_BODY(T, 0)
#define LOG_SOFTMAX_GRAD_REF(T) SOFTMAX_GRAD_REF_BODY(T, 1)
FLOAT_KERNELS(softmax_ref, SOFTMAX_REF)
FLOAT_KERNELS(log_softmax_ref, LOG_SOFTMAX_REF)
FLOAT_KERNELS(softmax_grad_ref, SOFTMAX_GRAD_REF)
FLOAT_KERNELS(log_softmax_grad_ref, LOG_SOFTMAX_GRAD_REF)

/* ---- softmax family: backward rules and descriptors ---- */

static mst_status softmax_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_softmax_grad(ctx, gy[0], c->out[0], (int)c->attrs.i[0]);
    return ctx->status;
}

static mst_status log_softmax_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_log_softmax_grad(ctx, gy[0], c->out[0], (int)c->attrs.i[0]);
    return ctx->status;
}

static int64_t cost_softmax(const mst_op_call *c) { return 5 * c->out[0]->numel; }
static int64_t cost_softmax_grad(const mst_op_call *c) { return 4 * c->out[0]->numel; }

const mst_op_desc mst_desc_softmax = {
    .name = "softmax", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .attr_i = {"axis"},
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .infer = infer_softmax, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(softmax), .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(softmax_ref),
    .backward = softmax_backward, .flops = cost_softmax,
};

const mst_op_desc mst_desc_log_softmax = {
    .name = "log_softmax", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .attr_i = {"axis"},
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .infer = infer_softmax, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(log_softmax), .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(log_softmax_ref),
    .backward = log_softmax_backward, .flops = cost_softmax,
};

const mst_op_desc mst_desc_softmax_grad = {
    .name = "softmax_grad", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"axis"},
    .infer = infer_softmax_grad, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(softmax_grad),
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(softmax_grad_ref), .flops = cost_softmax_grad,
};

const mst_op_desc mst_desc_log_softmax_grad = {
    .name = "log_softmax_grad", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"axis"},
    .infer = infer_softmax_grad, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(log_softmax_grad),
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(log_softmax_grad_ref), .flops = cost_softmax_grad,
};

/* ---- cross-entropy: logits (N, C), labels i32 (N) -> loss (), probs (N, C) ---- */

/* Checks inputs[logits_i] is float (N, C) and inputs[logits_i + 1] is i32 (N). */
static mst_status require_logits_labels(mst_ctx *ctx, const mst_op_call *c, int logits_i, const char *what) {
    const mst_tensor *x = c->in[logits_i], *labels = c->in[logits_i + 1];
    if (!mst_dtype_is_float(x->dtype))
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "%s must be a float tensor, got %s", what, mst_dtype_name(x->dtype));
    if (x->ndim != 2) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s must have rank 2 (N, C), got rank %d", what, x->ndim);
    if (labels->dtype != MST_DTYPE_I32)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "labels must be i32 class indices, got %s", mst_dtype_name(labels->dtype));
    if (labels->ndim != 1 || labels->shape[0] != x->shape[0]) {
        char t[96];
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "labels must have shape (%lld), one per row of %s, got %s",
                           (long long)x->shape[0], what, mst_shape_str(labels->ndim, labels->shape, t, sizeof(t)));
    }
    return MST_OK;
}

static mst_status infer_cross_entropy(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_logits_labels(ctx, c, 0, "logits");
    if (s != MST_OK) return s;
    out[0].dtype = c->in[0]->dtype;     /* the loss, shape (); meta_make would copy unset dims */
    out[0].ndim = 0;
    out[1] = meta_like(c->in[0]);
    return MST_OK;
}

/* (gy (), probs (N, C), labels (N)) -> (N, C) */
static mst_status infer_cross_entropy_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_logits_labels(ctx, c, 1, "probs");
    if (s != MST_OK) return s;
    if ((s = op_require_same_dtype(ctx, c, 0, 1)) != MST_OK) return s;
    if (c->in[0]->ndim != 0)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "the loss gradient must be a scalar (shape ()), got rank %d", c->in[0]->ndim);
    out[0] = meta_like(c->in[1]);
    return MST_OK;
}

/* Labels are data: checked where they are read. */
static mst_status check_labels(mst_ctx *ctx, const mst_op_call *c, const mst_tensor *labels, int64_t n_classes) {
    const int32_t *lab = mst_tensor_i32(labels);
    for (int64_t r = 0; r < labels->numel; r++)
        if (lab[r] < 0 || lab[r] >= n_classes)
            return mst_op_fail(ctx, c, MST_ERR_ARG, "label %d at row %lld is outside [0, %lld)", lab[r], (long long)r,
                               (long long)n_classes);
    return MST_OK;
}

#define CROSS_ENTROPY_BODY(T)                                                                \
    {                                                                                        \
        const mst_tensor *X = c->in[0];                                                      \
        int64_t n = X->shape[0], nc = X->shape[1];                                           \
        mst_status st = check_labels(ctx, c, c->in[1], nc);                                  \
        if (st != MST_OK) return st;                                                         \
        const T *x = (const T *)mst_tensor_data(X);                                          \
        const int32_t *lab = mst_tensor_i32(c->in[1]);                                       \
        T *loss = (T *)mst_tensor_data(c->out[0]);                                           \
        T *p = (T *)mst_tensor_data(c->out[1]);                                              \
        double total = 0;                                                                    \
        for (int64_t r = 0; r < n; r++) {                                                    \
            const T *xr = x + r * nc;                                                        \
            T *pr = p + r * nc;                                                              \
            T m = ROW_MAX(xr, nc);                                                           \
            for (int64_t k = 0; k < nc; k++) pr[k] = EXP(xr[k] - m);                         \
            double s = ROW_SUM(pr, (const T *)NULL, nc);                                     \
            T inv = (T)(1.0 / s);                                                            \
            for (int64_t k = 0; k < nc; k++) pr[k] *= inv;                                   \
            total += log(s) + (double)m - (double)xr[lab[r]];                                \
        }                                                                                    \
        loss[0] = (T)(n > 0 ? total / (double)n : NAN); /* the mean of nothing, as NumPy */   \
        return MST_OK;                                                                       \
    }

#define CROSS_ENTROPY_GRAD_BODY(T)                                                           \
    {                                                                                        \
        const mst_tensor *P = c->in[1];                                                      \
        int64_t n = P->shape[0], nc = P->shape[1];                                           \
        mst_status st = check_labels(ctx, c, c->in[2], nc);                                  \
        if (st != MST_OK) return st;                                                         \
        if (n == 0) return MST_OK;                                                           \
        const T *p = (const T *)mst_tensor_data(P);                                          \
        const int32_t *lab = mst_tensor_i32(c->in[2]);                                       \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                             \
        T scale = (T)((double)*(const T *)mst_tensor_data(c->in[0]) / (double)n);            \
        for (int64_t r = 0; r < n; r++) {                                                    \
            const T *pr = p + r * nc;                                                        \
            T *gr = gx + r * nc;                                                             \
            for (int64_t k = 0; k < nc; k++) gr[k] = pr[k] * scale;                          \
            gr[lab[r]] = (pr[lab[r]] - (T)1) * scale;                                        \
        }                                                                                    \
        return MST_OK;                                                                       \
    }

FLOAT_KERNELS(cross_entropy, CROSS_ENTROPY_BODY)
FLOAT_KERNELS(cross_entropy_grad, CROSS_ENTROPY_GRAD_BODY)

/* Gradients can reach both outputs: the loss (the usual case) and the saved softmax, when a
 * caller also uses probs (dispatching the op directly) — that part is softmax's own rule. */
static mst_status cross_entropy_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    mst_tensor *probs = c->out[1], *g = NULL;
    if (gy[0]) g = mst_cross_entropy_grad(ctx, gy[0], probs, c->in[1]);
    if (gy[1]) {
        mst_tensor *gp = mst_softmax_grad(ctx, gy[1], probs, 1);
        g = g ? mst_add(ctx, g, gp) : gp;
    }
    gx[0] = g;
    return ctx->status;
}

static int64_t cost_cross_entropy(const mst_op_call *c) { return 5 * c->out[1]->numel + 3 * c->out[1]->shape[0]; }
static int64_t cost_cross_entropy_grad(const mst_op_call *c) { return 2 * c->out[0]->numel; }

const mst_op_desc mst_desc_cross_entropy = {
    .name = "cross_entropy", .min_inputs = 2, .max_inputs = 2, .n_outputs = 2,
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .nondiff = 1u << 1,         /* labels */
    .infer = infer_cross_entropy, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(cross_entropy),
    .backward = cross_entropy_backward, .flops = cost_cross_entropy,
};

const mst_op_desc mst_desc_cross_entropy_grad = {
    .name = "cross_entropy_grad", .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .infer = infer_cross_entropy_grad, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(cross_entropy_grad),
    .flops = cost_cross_entropy_grad,
};

/* ---- public constructors ---- */

/* Normalizes `axis` against the last input (x, or y for the gradients), which must exist; a
 * NULL input goes to the dispatcher, which passes the earlier error on. */
static mst_tensor *call_along_axis(mst_ctx *ctx, mst_op op, int n_in, mst_tensor *const in[], int axis) {
    const mst_tensor *x = in[n_in - 1];
    mst_attrs a = {{0}};
    if (x) {
        int ax = op_axis(axis, x->ndim);
        if (ax < 0) {
            char t[96];
            mst_ctx_fail(ctx, MST_ERR_ARG, "%s: axis %d is outside [%d, %d) for input %s", mst_op_name(op), axis,
                         -x->ndim, x->ndim, mst_tensor_desc(x, t, sizeof(t)));
            return NULL;
        }
        a.i[0] = ax;
    }
    return mst_dispatch1(ctx, op, n_in, in, &a);
}

mst_tensor *mst_softmax(mst_ctx *ctx, mst_tensor *x, int axis) {
    return call_along_axis(ctx, MST_OP_SOFTMAX, 1, (mst_tensor *[]){x}, axis);
}

mst_tensor *mst_log_softmax(mst_ctx *ctx, mst_tensor *x, int axis) {
    return call_along_axis(ctx, MST_OP_LOG_SOFTMAX, 1, (mst_tensor *[]){x}, axis);
}

mst_tensor *mst_softmax_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y, int axis) {
    return call_along_axis(ctx, MST_OP_SOFTMAX_GRAD, 2, (mst_tensor *[]){gy, y}, axis);
}

mst_tensor *mst_log_softmax_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y, int axis) {
    return call_along_axis(ctx, MST_OP_LOG_SOFTMAX_GRAD, 2, (mst_tensor *[]){gy, y}, axis);
}

/* Returns the loss; the saved softmax (second output) stays on the tape for backward. */
mst_tensor *mst_cross_entropy(mst_ctx *ctx, mst_tensor *logits, mst_tensor *labels) {
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    mst_dispatch(ctx, MST_OP_CROSS_ENTROPY, 2, (mst_tensor *[]){logits, labels}, NULL, out);
    return out[0];
}

mst_tensor *mst_cross_entropy_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *probs, mst_tensor *labels) {
    return mst_dispatch1(ctx, MST_OP_CROSS_ENTROPY_GRAD, 3, (mst_tensor *[]){gy, probs, labels}, NULL);
}
