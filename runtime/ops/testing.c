/* testing.c — ops that exist to test the profiler: `spin` copies its input after busy-waiting a
 * given number of nanoseconds in its kernel (never a sleep: the time is spent on the core, as a
 * real kernel's would be), so attribution tests know exactly how much `kernel` time to expect. */
#include "profiler/events.h"
#include "runtime/ops/common.h"

static mst_status infer_spin(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    if (c->attrs.i[0] < 0) return mst_op_fail(ctx, c, MST_ERR_ARG, "spin time %lld ns must be >= 0", (long long)c->attrs.i[0]);
    out[0] = meta_like(c->in[0]);
    return MST_OK;
}

static mst_status spin_kernel(mst_ctx *ctx, const mst_op_call *c) {
    uint64_t end = mst_prof_now_ns() + (uint64_t)c->attrs.i[0];
    while (mst_prof_now_ns() < end) {}
    memcpy(mst_tensor_data(c->out[0]), mst_tensor_data(c->in[0]), mst_tensor_nbytes(c->in[0]));
    return MST_OK;
}

static mst_status spin_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = gy[0];
    return MST_OK;
}

const mst_op_desc mst_desc_spin = {
    .name = "spin", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .attr_i = {"ns"},
    .infer = infer_spin, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(spin_kernel), .backward = spin_backward,
};

mst_tensor *mst_spin(mst_ctx *ctx, mst_tensor *x, int64_t ns) {
    mst_attrs a = {.i = {ns}};
    return mst_dispatch1(ctx, MST_OP_SPIN, 1, (mst_tensor *[]){x}, &a);
}
