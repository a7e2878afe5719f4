/* conv_bn.h — the convolution + batch-norm unit the image classifiers (cnn.c's basic blocks,
 * resnet.c's bottlenecks) are built from, and the residual join that ends their blocks. One
 * builder, so both models name their parameters, initialise them and run them the same way.
 *
 *     mst_conv_bn a;
 *     mst_conv_bn_init(m, ctx, &a, "block1.a", 32, 64, 3, 2, 1.0);    // conv3x3 stride 2, BN
 *     mst_tensor *y = mst_relu(ctx, mst_conv_bn_forward(ctx, &a, x, training));
 *     h = mst_residual_relu(ctx, y, has_proj ? &proj : NULL, x, training);
 */
#ifndef MST_WORKLOADS_CONV_BN_H
#define MST_WORKLOADS_CONV_BN_H

#include <stdbool.h>

#include "runtime/model.h"

typedef struct {
    mst_tensor *w;                          /* (cout, cin, k, k), no bias: BN's beta is the bias */
    mst_tensor *gamma, *beta, *mean, *var;  /* (cout) */
    int stride, pad;                        /* pad k / 2: "same" at stride 1 */
} mst_conv_bn;

/* Parameters "<name>.conv", "<name>.bn.gamma", "<name>.bn.beta" and buffers "<name>.bn.running_mean",
 * "<name>.bn.running_var". Init as PyTorch's defaults: conv U(+-gain / sqrt(cin k k)), gamma 1,
 * beta 0, running mean 0, var 1. A failed allocation leaves the message in ctx and a NULL tensor. */
void mst_conv_bn_init(mst_model *m, mst_ctx *ctx, mst_conv_bn *l, const char *name, int cin, int cout, int k, int stride,
                      double gain);
/* BN(conv(x)); batch statistics (and running-stat updates) when training. */
mst_tensor *mst_conv_bn_forward(mst_ctx *ctx, const mst_conv_bn *l, mst_tensor *x, bool training);
/* ReLU(y + skip), skip = BN(conv(x)) through proj, or x itself when proj is NULL. */
mst_tensor *mst_residual_relu(mst_ctx *ctx, mst_tensor *y, const mst_conv_bn *proj, mst_tensor *x, bool training);

#endif
