/* copy.c — `copy`: y = x into fresh storage, differentiable (the gradient passes through).
 *
 * Autograd uses it where a gradient must become a tensor nobody else holds (a leaf's ->grad that
 * optimizers and clipping update in place): as an op, graph mode's tracer sees the copy instead
 * of a host-side clone it could not replay. One memcpy for every dtype.
 */
#include "runtime/ops/common.h"

static mst_status infer_copy(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    (void)ctx;
    out[0] = meta_like(c->in[0]);
    return MST_OK;
}

static mst_status copy_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    memcpy(mst_tensor_data(c->out[0]), mst_tensor_data(c->in[0]), mst_tensor_nbytes(c->in[0]));
    return MST_OK;
}

static mst_status copy_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    (void)ctx, (void)c;
    gx[0] = gy[0];
    return MST_OK;
}

/* Bytes: read x, write y. */
static int64_t cost_copy(const mst_op_call *c) { return 2 * (int64_t)mst_tensor_nbytes(c->in[0]); }

const mst_op_desc mst_desc_copy = {
    .name = "copy", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_ELEMENTWISE,
    .infer = infer_copy, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(copy_kernel), .backward = copy_backward, .bytes = cost_copy,
};

mst_tensor *mst_copy(mst_ctx *ctx, mst_tensor *x) {
    return mst_dispatch1(ctx, MST_OP_COPY, 1, (mst_tensor *[]){x}, NULL);
}
