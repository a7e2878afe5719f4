/* resnet.c — a deeper ResNet with bottleneck blocks for 28x28 images (He et al., 2016, the
 * ResNet-50 block): a model whose step is many small convolutions rather than a few large ones.
 *
 *   stem:    conv3x3(C -> w) - BN - ReLU                          (28x28, no pooling)
 *   stages:  3 stages of `blocks` bottlenecks each, widths w, 2w, 4w (outputs 4x that); the first
 *            block of stages 2 and 3 has stride 2 (28 -> 14 -> 7)
 *   block:   conv1x1(-> m) - BN - ReLU - conv3x3(m, stride s) - BN - ReLU - conv1x1(-> 4m) - BN,
 *            plus the input (through conv1x1(stride s) - BN when the shape changes), then ReLU
 *   head:    global average pool - linear(classes)
 * Depth = 9 blocks + 2 = 3 * 3 * blocks + 2 layers: blocks 1 -> ResNet-11, 3 -> ResNet-29,
 * 5 -> ResNet-47. Init as PyTorch's defaults (conv/linear U(+-g/sqrt(fan_in)), BN gamma 1, beta 0). */
#include <math.h>
#include <stdlib.h>

#include "runtime/ops.h"
#include "workloads/conv_bn.h"
#include "workloads/zoo.h"

#define MAX_PER_STAGE 16
#define STAGES 3

typedef struct {
    mst_conv_bn a, b, c, proj;
    int has_proj;
} bottleneck;

typedef struct {
    mst_conv_bn stem;
    bottleneck blocks[STAGES][MAX_PER_STAGE];
    int per_stage;
    mst_tensor *fc_w, *fc_b;
} resnet;

static mst_tensor *resnet_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    const resnet *p = m->impl;
    mst_tensor *h = mst_relu(ctx, mst_conv_bn_forward(ctx, &p->stem, x, training));
    for (int s = 0; s < STAGES; s++)
        for (int i = 0; i < p->per_stage; i++) {
            const bottleneck *b = &p->blocks[s][i];
            mst_tensor *y = mst_relu(ctx, mst_conv_bn_forward(ctx, &b->a, h, training));
            y = mst_relu(ctx, mst_conv_bn_forward(ctx, &b->b, y, training));
            y = mst_conv_bn_forward(ctx, &b->c, y, training);
            h = mst_residual_relu(ctx, y, b->has_proj ? &b->proj : NULL, h, training);
        }
    return mst_linear(ctx, mst_global_avgpool(ctx, h), p->fc_w, p->fc_b);
}

mst_model *mst_resnet_new(mst_ctx *ctx, const mst_model_spec *spec) {
    mst_model *m = calloc(1, sizeof(*m));
    resnet *p = calloc(1, sizeof(*p));
    if (!m || !p) {
        free(m);
        free(p);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory building resnet");
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "resnet%d", 9 * spec->blocks + 2);
    m->impl = p;
    m->forward = resnet_forward;
    const double gain = spec->init_gain > 0 ? spec->init_gain : 1.0;
    int c = spec->width;
    mst_conv_bn_init(m, ctx, &p->stem, "stem", spec->in_c, c, 3, 1, gain);
    p->per_stage = spec->blocks;
    for (int s = 0; s < STAGES; s++) {
        const int mid = spec->width << s, out = 4 * mid;
        for (int i = 0; i < p->per_stage; i++) {
            bottleneck *b = &p->blocks[s][i];
            const int stride = s > 0 && i == 0 ? 2 : 1;
            char n[40];
            snprintf(n, sizeof(n), "stage%d.block%d.a", s + 1, i + 1);
            mst_conv_bn_init(m, ctx, &b->a, n, c, mid, 1, 1, gain);
            snprintf(n, sizeof(n), "stage%d.block%d.b", s + 1, i + 1);
            mst_conv_bn_init(m, ctx, &b->b, n, mid, mid, 3, stride, gain);
            snprintf(n, sizeof(n), "stage%d.block%d.c", s + 1, i + 1);
            mst_conv_bn_init(m, ctx, &b->c, n, mid, out, 1, 1, gain);
            b->has_proj = stride != 1 || c != out;
            if (b->has_proj) {
                snprintf(n, sizeof(n), "stage%d.block%d.proj", s + 1, i + 1);
                mst_conv_bn_init(m, ctx, &b->proj, n, c, out, 1, stride, gain);
            }
            c = out;
        }
    }
    const double bound = gain / sqrt((double)c);
    p->fc_w = mst_model_param(m, ctx, "fc.weight", 2, (int64_t[]){spec->classes, c}, bound);
    p->fc_b = mst_model_param(m, ctx, "fc.bias", 1, (int64_t[]){spec->classes}, bound);
    if (!p->fc_b) {
        mst_model_free(m);
        return NULL;
    }
    return m;
}

int mst_resnet_check(const mst_model_spec *spec, char *err, size_t errn) {
    if (spec->tokens || spec->paired) {
        snprintf(err, errn, "model resnet: classifies images, but the dataset yields %s", spec->tokens ? "token ids" : "image pairs");
        return -1;
    }
    if (spec->width < 1 || spec->blocks < 1 || spec->blocks > MAX_PER_STAGE) {
        snprintf(err, errn, "model resnet: model.width must be >= 1 and model.blocks (bottlenecks per stage) in 1..%d",
                 MAX_PER_STAGE);
        return -1;
    }
    return 0;
}
