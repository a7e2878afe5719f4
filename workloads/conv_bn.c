/* conv_bn.c — conv + batch norm and the residual join shared by cnn.c and resnet.c (conv_bn.h).
 * BN momentum and epsilon are PyTorch's defaults, so the PyTorch replicas match without settings. */
#include "workloads/conv_bn.h"

#include <math.h>
#include <stdio.h>

#include "runtime/ops.h"

#define BN_MOMENTUM 0.1
#define BN_EPS 1e-5

void mst_conv_bn_init(mst_model *m, mst_ctx *ctx, mst_conv_bn *l, const char *name, int cin, int cout, int k, int stride,
                      double gain) {
    char n[64];
    l->stride = stride;
    l->pad = k / 2;
    snprintf(n, sizeof(n), "%s.conv", name);
    l->w = mst_model_param(m, ctx, n, 4, (int64_t[]){cout, cin, k, k}, gain / sqrt((double)cin * k * k));
    snprintf(n, sizeof(n), "%s.bn.gamma", name);
    l->gamma = mst_model_param_const(m, ctx, n, 1, (int64_t[]){cout}, 1.0);
    snprintf(n, sizeof(n), "%s.bn.beta", name);
    l->beta = mst_model_param_const(m, ctx, n, 1, (int64_t[]){cout}, 0.0);
    snprintf(n, sizeof(n), "%s.bn.running_mean", name);
    l->mean = mst_model_buffer(m, ctx, n, 1, (int64_t[]){cout}, 0.0);
    snprintf(n, sizeof(n), "%s.bn.running_var", name);
    l->var = mst_model_buffer(m, ctx, n, 1, (int64_t[]){cout}, 1.0);
}

mst_tensor *mst_conv_bn_forward(mst_ctx *ctx, const mst_conv_bn *l, mst_tensor *x, bool training) {
    mst_tensor *y = mst_conv2d(ctx, x, l->w, NULL, l->stride, l->stride, l->pad, l->pad);
    return mst_batchnorm(ctx, y, l->gamma, l->beta, l->mean, l->var, training, BN_MOMENTUM, BN_EPS);
}

mst_tensor *mst_residual_relu(mst_ctx *ctx, mst_tensor *y, const mst_conv_bn *proj, mst_tensor *x, bool training) {
    return mst_relu(ctx, mst_add(ctx, y, proj ? mst_conv_bn_forward(ctx, proj, x, training) : x));
}
