/* cast.c — conversions between all dtypes (target in attrs i[0]). Float-to-half rounds to
 * nearest even and keeps inf/NaN; f32 <-> f16/bf16 (what AMP casts) go through the vectorized bulk
 * conversions of runtime/amp/half.h, bit-identical to the scalar ones in runtime/dtype.c, which
 * force_ref selects. Float-to-int truncates toward zero. The backward of a cast is a cast back to
 * the input's dtype. */
#include <math.h>

#include "runtime/amp/half.h"
#include "runtime/ops/common.h"

static mst_status infer_cast(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    int64_t to = c->attrs.i[0];
    if (to < 0 || to >= MST_DTYPE_COUNT) return mst_op_fail(ctx, c, MST_ERR_DTYPE, "unknown target dtype %lld", (long long)to);
    out[0] = meta_make((mst_dtype)to, c->in[0]->ndim, c->in[0]->shape);
    return MST_OK;
}

/* f64 -> f32 rounding to odd: truncate toward zero and set the last bit when inexact. A second
 * rounding of the result to a format at least two bits narrower (f16, bf16) then equals a
 * single correct rounding of the double (Boldo and Melquiond, "When double rounding is odd"). */
static float f64_to_f32_round_odd(double d) {
    float f = (float)d;
    if (!isfinite(f) || (double)f == d) return f;
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= 1;
    memcpy(&f, &u, 4);
    return f;
}

/* Element conversions; the pairs AMP uses have direct loops. */
static mst_status cast_any(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *x = c->in[0];
    mst_tensor *y = c->out[0];
    int64_t n = x->numel;
    const void *src = mst_tensor_data(x);
    void *dst = mst_tensor_data(y);
    if (x->dtype == y->dtype) { memcpy(dst, src, mst_tensor_nbytes(x)); return MST_OK; }
    mst_half_path path = ctx->force_ref ? MST_HALF_PATH_SCALAR : mst_half_best_path();
    switch (x->dtype * MST_DTYPE_COUNT + y->dtype) {
    case MST_DTYPE_F32 * MST_DTYPE_COUNT + MST_DTYPE_F16:
    case MST_DTYPE_F32 * MST_DTYPE_COUNT + MST_DTYPE_BF16:
        mst_half_from_f32_path(path, y->dtype, src, dst, (size_t)n);
        return MST_OK;
    case MST_DTYPE_F16 * MST_DTYPE_COUNT + MST_DTYPE_F32:
    case MST_DTYPE_BF16 * MST_DTYPE_COUNT + MST_DTYPE_F32:
        mst_half_to_f32_path(path, x->dtype, src, dst, (size_t)n);
        return MST_OK;
    case MST_DTYPE_F32 * MST_DTYPE_COUNT + MST_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
        return MST_OK;
    case MST_DTYPE_F64 * MST_DTYPE_COUNT + MST_DTYPE_F32:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)src)[i];
        return MST_OK;
    case MST_DTYPE_F64 * MST_DTYPE_COUNT + MST_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((mst_f16 *)dst)[i] = mst_f32_to_f16(f64_to_f32_round_odd(((const double *)src)[i]));
        return MST_OK;
    case MST_DTYPE_F64 * MST_DTYPE_COUNT + MST_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((mst_bf16 *)dst)[i] = mst_f32_to_bf16(f64_to_f32_round_odd(((const double *)src)[i]));
        return MST_OK;
    default:
        break;
    }
    /* Everything else through double: exact for every remaining pair (half to f64, ints). */
    for (int64_t i = 0; i < n; i++) mst_tensor_set(y, i, mst_tensor_get(x, i));
    return MST_OK;
}

static mst_status cast_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_cast(ctx, gy[0], c->in[0]->dtype);
    return ctx->status;
}

const mst_op_desc mst_desc_cast = {
    .name = "cast", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_ELEMENTWISE,
    .attr_i = {"to"},
    .infer = infer_cast, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(cast_any), .backward = cast_backward,
};

/* A cast to the same dtype returns x itself (no copy, nothing recorded). */
mst_tensor *mst_cast(mst_ctx *ctx, mst_tensor *x, mst_dtype to) {
    if (x && x->dtype == to) return x;
    mst_attrs a = {.i = {to}};
    return op_call1(ctx, MST_OP_CAST, x, NULL, NULL, &a);
}
