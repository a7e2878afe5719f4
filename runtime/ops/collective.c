/* collective.c — the gradient all-reduce as two ops, so graph mode traces it into the step:
 * `allreduce_start` packs a bucket of gradients and starts a non-blocking all-reduce (slot =
 * the bucket's number), `allreduce_wait` waits for it and writes the sum times `scale` (1/N: the
 * mean over ranks) back in place. Between the two the gradients may be read but not written; the
 * start marks its first input as updated only so that dead-code elimination keeps it (it writes
 * nothing). State (buffers, requests) lives in the context's data-parallel record (runtime/comm/dp.c);
 * with one process the step never emits them. */
#include "runtime/comm/dp.h"
#include "runtime/ops/common.h"

static mst_status infer_allreduce(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    (void)out;
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i]->dtype != MST_DTYPE_F32 && c->in[i]->dtype != MST_DTYPE_F64)
            return mst_op_fail(ctx, c, MST_ERR_DTYPE, "input %d: gradients are all-reduced in f32 or f64", i);
        mst_status s = op_require_same_dtype(ctx, c, 0, i);
        if (s != MST_OK) return s;
    }
    if (c->attrs.i[0] < 0) return mst_op_fail(ctx, c, MST_ERR_ARG, "slot %lld must be >= 0", (long long)c->attrs.i[0]);
    return MST_OK;
}

static mst_status start_kernel(mst_ctx *ctx, const mst_op_call *c) {
    return mst_dp_bucket_start(ctx, (int)c->attrs.i[0], c->in, c->n_in);
}

static mst_status wait_kernel(mst_ctx *ctx, const mst_op_call *c) {
    return mst_dp_bucket_wait(ctx, (int)c->attrs.i[0], c->in, c->n_in, c->attrs.f[0]);
}

static int64_t cost_bytes(const mst_op_call *c) {
    int64_t b = 0;
    for (int i = 0; i < c->n_in; i++) b += 2 * (int64_t)mst_tensor_nbytes(c->in[i]);
    return b;
}

const mst_op_desc mst_desc_allreduce_start = {
    .name = "allreduce_start", .min_inputs = 1, .max_inputs = MST_MAX_OP_INPUTS, .n_outputs = 0,
    .mutates = 1u << 0, .nondiff = 0xffu, .attr_i = {"slot"},
    .infer = infer_allreduce, .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = start_kernel, [MST_DTYPE_F64] = start_kernel},
    .bytes = cost_bytes,
};

const mst_op_desc mst_desc_allreduce_wait = {
    .name = "allreduce_wait", .min_inputs = 1, .max_inputs = MST_MAX_OP_INPUTS, .n_outputs = 0,
    .mutates = 0xffu, .nondiff = 0xffu, .attr_i = {"slot"}, .attr_f = {"scale"},
    .infer = infer_allreduce, .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = wait_kernel, [MST_DTYPE_F64] = wait_kernel},
    .bytes = cost_bytes,
};

mst_status mst_allreduce_start(mst_ctx *ctx, int n, mst_tensor *const g[], int slot) {
    mst_attrs a = {.i = {slot}};
    return mst_dispatch(ctx, MST_OP_ALLREDUCE_START, n, g, &a, NULL);
}

mst_status mst_allreduce_wait(mst_ctx *ctx, int n, mst_tensor *const g[], int slot, double scale) {
    mst_attrs a = {.i = {slot}, .f = {scale}};
    return mst_dispatch(ctx, MST_OP_ALLREDUCE_WAIT, n, g, &a, NULL);
}
