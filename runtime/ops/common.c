/* common.c — shared inference checks, the broadcasting iterator and streaming stores for op family files. */
#include "runtime/ops/common.h"

#include <stdint.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

mst_status op_require_float(mst_ctx *ctx, const mst_op_call *c, int i) {
    if (mst_dtype_is_float(c->in[i]->dtype)) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_DTYPE, "input %d must be a float tensor, got %s", i, mst_dtype_name(c->in[i]->dtype));
}

mst_status op_require_same_dtype(mst_ctx *ctx, const mst_op_call *c, int i, int j) {
    if (c->in[i]->dtype == c->in[j]->dtype) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_DTYPE, "inputs %d and %d must have the same dtype (%s vs %s)", i, j,
                       mst_dtype_name(c->in[i]->dtype), mst_dtype_name(c->in[j]->dtype));
}

mst_status op_require_ndim(mst_ctx *ctx, const mst_op_call *c, int i, int ndim) {
    if (c->in[i]->ndim == ndim) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input %d must have rank %d, got rank %d", i, ndim, c->in[i]->ndim);
}

mst_status op_require_same_shape(mst_ctx *ctx, const mst_op_call *c, int i, int j) {
    const mst_tensor *a = c->in[i], *b = c->in[j];
    if (mst_shape_equal(a->ndim, a->shape, b->ndim, b->shape)) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_SHAPE, "inputs %d and %d must have the same shape", i, j);
}

int op_axis(int axis, int ndim) {
    if (axis < 0) axis += ndim;
    return axis >= 0 && axis < ndim ? axis : -1;
}

mst_status op_infer_like_input0(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    for (int i = 1; i < c->n_in; i++) {
        if ((s = op_require_same_dtype(ctx, c, 0, i)) != MST_OK) return s;
        if ((s = op_require_same_shape(ctx, c, 0, i)) != MST_OK) return s;
    }
    out[0] = meta_like(c->in[0]);
    return MST_OK;
}

int64_t op_cost_numel(const mst_op_call *c) { return c->n_out > 0 ? c->out[0]->numel : c->in[0]->numel; }

bool op_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int d = 0; d < n; d++) {
        int da = d - (n - na), db = d - (n - nb);
        int64_t sa = da >= 0 ? a[da] : 1, sb = db >= 0 ? b[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        out[d] = sa == 1 ? sb : sa;
    }
    *nout = n;
    return true;
}

void op_bcast_init(op_bcast *it, int ndim, const int64_t *shape, int n, const mst_tensor *const ts[]) {
    MST_ASSERT(n <= 3);
    it->ndim = ndim;
    it->n = n;
    for (int d = 0; d < ndim; d++) it->shape[d] = shape[d];
    for (int k = 0; k < n; k++) {
        const mst_tensor *t = ts[k];
        int off = ndim - t->ndim;
        for (int d = 0; d < ndim; d++) {
            int td = d - off;
            it->stride[k][d] = (td >= 0 && t->shape[td] != 1) ? t->strides[td] : 0;
        }
    }
}

bool op_output_streams(int64_t bytes_per_worker) { return bytes_per_worker > 2 * mst_cpu_l2_bytes(); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void store_streaming_avx512(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    _mm_sfence();
}
#endif

void op_store_streaming_f32(float *dst, const float *src, int64_t n) {
#if defined(__x86_64__)
    if (((uintptr_t)dst & 63) == 0 && n % 16 == 0 && mst_cpu_has(MST_CPU_AVX512F)) {
        store_streaming_avx512(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof(float));
}
