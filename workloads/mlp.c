/* mlp.c — the multi-layer perceptron: flatten, linear-ReLU, linear-ReLU, linear.
 * Init as PyTorch's nn.Linear: weights and biases U(-g/sqrt(fan_in), g/sqrt(fan_in)), gain g = 1 by default. */
#include <math.h>
#include <stdlib.h>

#include "runtime/ops.h"
#include "workloads/zoo.h"

typedef struct {
    mst_tensor *w1, *b1, *w2, *b2, *w3, *b3;
    int64_t in_features;
    double dropout;
} mlp;

static mst_tensor *mlp_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    mlp *p = m->impl;
    mst_tensor *h = mst_reshape(ctx, x, 2, (int64_t[]){-1, p->in_features});
    h = mst_relu(ctx, mst_linear(ctx, h, p->w1, p->b1));
    h = mst_dropout(ctx, h, p->dropout, training);
    h = mst_relu(ctx, mst_linear(ctx, h, p->w2, p->b2));
    h = mst_dropout(ctx, h, p->dropout, training);
    return mst_linear(ctx, h, p->w3, p->b3);
}

static void linear_params(mst_model *m, mst_ctx *ctx, const char *name, int64_t in, int64_t out, double gain, mst_tensor **w,
                          mst_tensor **b) {
    char n[32];
    double bound = gain / sqrt((double)in);
    snprintf(n, sizeof(n), "%s.weight", name);
    *w = mst_model_param(m, ctx, n, 2, (int64_t[]){out, in}, bound);
    snprintf(n, sizeof(n), "%s.bias", name);
    *b = mst_model_param(m, ctx, n, 1, (int64_t[]){out}, bound);
}

mst_model *mst_mlp_new(mst_ctx *ctx, const mst_model_spec *spec) {
    mst_model *m = calloc(1, sizeof(*m));
    mlp *p = calloc(1, sizeof(*p));
    if (!m || !p) {
        free(m);
        free(p);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory building mlp");
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "mlp");
    m->impl = p;
    m->forward = mlp_forward;
    p->in_features = (int64_t)spec->in_c * spec->in_h * spec->in_w;
    p->dropout = spec->dropout;
    double gain = spec->init_gain > 0 ? spec->init_gain : 1.0;
    linear_params(m, ctx, "fc1", p->in_features, spec->hidden1, gain, &p->w1, &p->b1);
    linear_params(m, ctx, "fc2", spec->hidden1, spec->hidden2, gain, &p->w2, &p->b2);
    linear_params(m, ctx, "fc3", spec->hidden2, spec->classes, gain, &p->w3, &p->b3);
    if (!p->b3) {
        mst_model_free(m);
        return NULL;
    }
    return m;
}
