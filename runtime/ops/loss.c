/* loss.c — regression losses between a prediction and a target of the same shape, as the mean
 * over every element (PyTorch's reduction='mean'): L1 mean |a - b| and MSE mean (a - b)^2, with
 * their gradient ops ga = sign(a - b) gy / n and ga = 2 (a - b) gy / n (gb = -ga for both).
 *
 * Used by the super-resolution model (L1 as in ESRGAN's pre-training stage, MSE for PSNR-oriented
 * training). Sums accumulate in double in a fixed order, so the loss is reproducible bit for bit;
 * the kernels are single loops that are their own reference (ref NULL). sign(0) = 0, as
 * torch.sign, so the L1 gradient at an exact match is 0. FLOPs: 3 per element forward, 3 backward.
 */
#include <math.h>

#include "runtime/ops/common.h"

typedef enum { LOSS_L1, LOSS_MSE } loss_kind;

/* l1_loss, mse_loss: (a, b) -> () */
static mst_status infer_loss(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s == MST_OK) s = op_require_same_dtype(ctx, c, 0, 1);
    if (s == MST_OK) s = op_require_same_shape(ctx, c, 0, 1);
    if (s == MST_OK && c->in[0]->numel == 0) s = mst_op_fail(ctx, c, MST_ERR_SHAPE, "the mean of no elements is undefined");
    if (s == MST_OK) out[0] = meta_make(c->in[0]->dtype, 0, NULL);
    return s;
}

/* l1_loss_grad, mse_loss_grad: (gy (), a, b) -> like a */
static mst_status infer_loss_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 1);
    if (s == MST_OK) s = op_require_same_dtype(ctx, c, 1, 2);
    if (s == MST_OK) s = op_require_same_dtype(ctx, c, 0, 1);
    if (s == MST_OK) s = op_require_same_shape(ctx, c, 1, 2);
    if (s == MST_OK && c->in[0]->numel != 1)
        s = mst_op_fail(ctx, c, MST_ERR_SHAPE, "the output gradient must be a scalar, got %lld elements", (long long)c->in[0]->numel);
    if (s == MST_OK) out[0] = meta_like(c->in[1]);
    return s;
}

static double load(const mst_tensor *t, int64_t i) {
    return t->dtype == MST_DTYPE_F32 ? (double)mst_tensor_f32(t)[i] : mst_tensor_f64(t)[i];
}

static void store(const mst_tensor *t, int64_t i, double v) {
    if (t->dtype == MST_DTYPE_F32) mst_tensor_f32(t)[i] = (float)v;
    else mst_tensor_f64(t)[i] = v;
}

static double loss_value(const mst_tensor *a, const mst_tensor *b, loss_kind k) {
    double s = 0;
    if (a->dtype == MST_DTYPE_F32) {
        const float *x = mst_tensor_f32(a), *y = mst_tensor_f32(b);
        for (int64_t i = 0; i < a->numel; i++) {
            double d = (double)x[i] - (double)y[i];
            s += k == LOSS_L1 ? fabs(d) : d * d;
        }
    } else {
        const double *x = mst_tensor_f64(a), *y = mst_tensor_f64(b);
        for (int64_t i = 0; i < a->numel; i++) {
            double d = x[i] - y[i];
            s += k == LOSS_L1 ? fabs(d) : d * d;
        }
    }
    return s / (double)a->numel;
}

static mst_status l1_loss_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    store(c->out[0], 0, loss_value(c->in[0], c->in[1], LOSS_L1));
    return MST_OK;
}

static mst_status mse_loss_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    store(c->out[0], 0, loss_value(c->in[0], c->in[1], LOSS_MSE));
    return MST_OK;
}

static void loss_grad(const mst_op_call *c, loss_kind k) {
    const mst_tensor *a = c->in[1], *b = c->in[2], *g = c->out[0];
    const double scale = load(c->in[0], 0) / (double)a->numel;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = load(a, i) - load(b, i);
        double v = k == LOSS_L1 ? (d > 0 ? scale : d < 0 ? -scale : 0.0) : 2.0 * d * scale;
        store(g, i, v);
    }
}

static mst_status l1_loss_grad_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    loss_grad(c, LOSS_L1);
    return MST_OK;
}

static mst_status mse_loss_grad_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    loss_grad(c, LOSS_MSE);
    return MST_OK;
}

/* ga from the grad op, gb = -ga */
static mst_status loss_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[], mst_op grad_op) {
    gx[0] = mst_dispatch1(ctx, grad_op, 3, (mst_tensor *[]){gy[0], c->in[0], c->in[1]}, NULL);
    gx[1] = mst_scale(ctx, gx[0], -1.0);
    return gx[0] && gx[1] ? MST_OK : ctx->status;
}

static mst_status l1_loss_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    return loss_backward(ctx, c, gy, gx, MST_OP_L1_LOSS_GRAD);
}

static mst_status mse_loss_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    return loss_backward(ctx, c, gy, gx, MST_OP_MSE_LOSS_GRAD);
}

static int64_t cost_loss(const mst_op_call *c) { return 3 * c->in[0]->numel; }
static int64_t cost_loss_grad(const mst_op_call *c) { return 3 * c->out[0]->numel; }

#define LOSS_KERNELS(f) {[MST_DTYPE_F32] = f, [MST_DTYPE_F64] = f}

const mst_op_desc mst_desc_l1_loss = {
    .name = "l1_loss", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .infer = infer_loss, .kernels[MST_DEVICE_CPU] = LOSS_KERNELS(l1_loss_kernel), .backward = l1_loss_backward, .flops = cost_loss,
};

const mst_op_desc mst_desc_l1_loss_grad = {
    .name = "l1_loss_grad", .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_GRAD_OP, .dtype_arg = 1,
    .infer = infer_loss_grad, .kernels[MST_DEVICE_CPU] = LOSS_KERNELS(l1_loss_grad_kernel), .flops = cost_loss_grad,
};

const mst_op_desc mst_desc_mse_loss = {
    .name = "mse_loss", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_KEEP_F32,
    .infer = infer_loss, .kernels[MST_DEVICE_CPU] = LOSS_KERNELS(mse_loss_kernel), .backward = mse_loss_backward, .flops = cost_loss,
};

const mst_op_desc mst_desc_mse_loss_grad = {
    .name = "mse_loss_grad", .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_GRAD_OP, .dtype_arg = 1,
    .infer = infer_loss_grad, .kernels[MST_DEVICE_CPU] = LOSS_KERNELS(mse_loss_grad_kernel), .flops = cost_loss_grad,
};

mst_tensor *mst_l1_loss(mst_ctx *ctx, mst_tensor *pred, mst_tensor *target) {
    return mst_dispatch1(ctx, MST_OP_L1_LOSS, 2, (mst_tensor *[]){pred, target}, NULL);
}

mst_tensor *mst_mse_loss(mst_ctx *ctx, mst_tensor *pred, mst_tensor *target) {
    return mst_dispatch1(ctx, MST_OP_MSE_LOSS, 2, (mst_tensor *[]){pred, target}, NULL);
}

/* (N, C r^2, H, W) -> (N, C, H r, W r), out[n, c, h r + i, w r + j] = in[n, c r^2 + i r + j, h, w]:
 * a reshape and one permute, so its gradient is theirs. */
mst_tensor *mst_pixel_shuffle(mst_ctx *ctx, mst_tensor *x, int r) {
    if (!x) return NULL;
    if (x->ndim != 4 || r < 1 || x->shape[1] % ((int64_t)r * r) != 0) {
        char t[96];
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "pixel_shuffle: input %s with factor %d, expected (N, C r^2, H, W)",
                     mst_tensor_desc(x, t, sizeof(t)), r);
        return NULL;
    }
    const int64_t n = x->shape[0], c = x->shape[1] / ((int64_t)r * r), h = x->shape[2], w = x->shape[3];
    mst_tensor *y = mst_reshape(ctx, x, 6, (int64_t[]){n, c, r, r, h, w});
    y = mst_permute(ctx, y, (int[]){0, 1, 4, 2, 5, 3});       /* (N, C, H, r, W, r) */
    return mst_reshape(ctx, y, 4, (int64_t[]){n, c, h * r, w * r});
}
