/* optable.c — the op table: one descriptor per mst_op, defined in the family files under ops/.
 * The _Static_assert fails when an op is added to the enum without a row here. */
#include <stdarg.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/op.h"
#include "runtime/ops/descs.h"

const mst_op_desc *const mst_op_table[MST_OP_COUNT] = {
    [MST_OP_ADD] = &mst_desc_add, [MST_OP_SUB] = &mst_desc_sub, [MST_OP_MUL] = &mst_desc_mul,
    [MST_OP_DIV] = &mst_desc_div, [MST_OP_SCALE] = &mst_desc_scale, [MST_OP_SUM_TO] = &mst_desc_sum_to,
    [MST_OP_BROADCAST_TO] = &mst_desc_broadcast_to,
    [MST_OP_RELU] = &mst_desc_relu, [MST_OP_RELU_GRAD] = &mst_desc_relu_grad,
    [MST_OP_GELU] = &mst_desc_gelu, [MST_OP_GELU_GRAD] = &mst_desc_gelu_grad,
    [MST_OP_TANH] = &mst_desc_tanh, [MST_OP_TANH_GRAD] = &mst_desc_tanh_grad,
    [MST_OP_SIGMOID] = &mst_desc_sigmoid, [MST_OP_SIGMOID_GRAD] = &mst_desc_sigmoid_grad,
    [MST_OP_MATMUL] = &mst_desc_matmul, [MST_OP_LINEAR] = &mst_desc_linear,
    [MST_OP_CONV2D] = &mst_desc_conv2d, [MST_OP_CONV2D_GRAD_INPUT] = &mst_desc_conv2d_grad_input,
    [MST_OP_CONV2D_GRAD_WEIGHT] = &mst_desc_conv2d_grad_weight,
    [MST_OP_BATCHNORM] = &mst_desc_batchnorm, [MST_OP_BATCHNORM_GRAD] = &mst_desc_batchnorm_grad,
    [MST_OP_LAYERNORM] = &mst_desc_layernorm, [MST_OP_LAYERNORM_GRAD] = &mst_desc_layernorm_grad,
    [MST_OP_MAXPOOL2D] = &mst_desc_maxpool2d, [MST_OP_MAXPOOL2D_GRAD] = &mst_desc_maxpool2d_grad,
    [MST_OP_AVGPOOL2D] = &mst_desc_avgpool2d, [MST_OP_AVGPOOL2D_GRAD] = &mst_desc_avgpool2d_grad,
    [MST_OP_GLOBAL_AVGPOOL] = &mst_desc_global_avgpool,
    [MST_OP_SOFTMAX] = &mst_desc_softmax, [MST_OP_SOFTMAX_GRAD] = &mst_desc_softmax_grad,
    [MST_OP_LOG_SOFTMAX] = &mst_desc_log_softmax, [MST_OP_LOG_SOFTMAX_GRAD] = &mst_desc_log_softmax_grad,
    [MST_OP_CROSS_ENTROPY] = &mst_desc_cross_entropy, [MST_OP_CROSS_ENTROPY_GRAD] = &mst_desc_cross_entropy_grad,
    [MST_OP_EMBEDDING] = &mst_desc_embedding, [MST_OP_EMBEDDING_GRAD] = &mst_desc_embedding_grad,
    [MST_OP_DROPOUT] = &mst_desc_dropout,
    [MST_OP_RESHAPE] = &mst_desc_reshape, [MST_OP_TRANSPOSE] = &mst_desc_transpose,
    [MST_OP_CONCAT] = &mst_desc_concat, [MST_OP_SLICE] = &mst_desc_slice, [MST_OP_SLICE_GRAD] = &mst_desc_slice_grad,
    [MST_OP_SUM] = &mst_desc_sum, [MST_OP_MEAN] = &mst_desc_mean,
    [MST_OP_CAST] = &mst_desc_cast,
    [MST_OP_SGD_UPDATE] = &mst_desc_sgd_update, [MST_OP_ADAM_UPDATE] = &mst_desc_adam_update,
    [MST_OP_COPY] = &mst_desc_copy,
    [MST_OP_AMP_UNSCALE_CHECK] = &mst_desc_amp_unscale_check, [MST_OP_AMP_UPDATE_SCALE] = &mst_desc_amp_update_scale,
    [MST_OP_CLIP_COEF] = &mst_desc_clip_coef,
    [MST_OP_SPIN] = &mst_desc_spin,
    [MST_OP_MASKED_SOFTMAX] = &mst_desc_masked_softmax,
    [MST_OP_L1_LOSS] = &mst_desc_l1_loss, [MST_OP_L1_LOSS_GRAD] = &mst_desc_l1_loss_grad,
    [MST_OP_MSE_LOSS] = &mst_desc_mse_loss, [MST_OP_MSE_LOSS_GRAD] = &mst_desc_mse_loss_grad,
    [MST_OP_ALLREDUCE_START] = &mst_desc_allreduce_start, [MST_OP_ALLREDUCE_WAIT] = &mst_desc_allreduce_wait,
    [MST_OP_SLICE_GRAD_SUM] = &mst_desc_slice_grad_sum,
    [MST_OP_BATCHNORM_MAXPOOL] = &mst_desc_batchnorm_maxpool,
};
_Static_assert(MST_OP_COUNT == 62, "a new op needs a descriptor row in mst_op_table");

const char *mst_op_name(mst_op op) {
    if ((unsigned)op >= MST_OP_COUNT || !mst_op_table[op]) return "?";
    return mst_op_table[op]->name;
}

int mst_op_parse(const char *name) {
    for (int op = 0; op < MST_OP_COUNT; op++)
        if (mst_op_table[op] && strcmp(mst_op_table[op]->name, name) == 0) return op;
    return -1;
}

int64_t mst_op_flops(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    return d->flops ? d->flops(c) : 0;
}

int64_t mst_op_bytes(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    if (d->bytes) return d->bytes(c);
    int64_t b = 0;
    for (int i = 0; i < c->n_in; i++) b += (int64_t)mst_tensor_nbytes(c->in[i]);
    for (int k = 0; k < c->n_out; k++) b += (int64_t)mst_tensor_nbytes(c->out[k]);
    return b;
}

mst_status mst_op_fail(mst_ctx *ctx, const mst_op_call *c, mst_status s, const char *fmt, ...) {
    if (ctx->status != MST_OK) return s;
    char msg[512], inputs[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t k = 0;
    for (int i = 0; i < c->n_in && k < sizeof(inputs); i++) {
        char t[96];
        k += (size_t)snprintf(inputs + k, sizeof(inputs) - k, "%s%s", i ? ", " : "", mst_tensor_desc(c->in[i], t, sizeof(t)));
    }
    return mst_ctx_fail(ctx, s, "%s: %s (inputs: %s)", mst_op_name(c->op), msg, c->n_in ? inputs : "none");
}
