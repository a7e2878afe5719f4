/* model.c — parameter and buffer registration shared by every model in the zoo, the default
 * loss (cross-entropy) and the metric table. */
#include "runtime/model.h"

#include <stdlib.h>

#include "runtime/ops.h"

static const struct {
    const char *name;
    bool higher_is_better;
    const char *label, *unit;
    double display_scale;
} k_metrics[MST_METRIC_COUNT] = {
    [MST_METRIC_ACCURACY] = {"accuracy", true, "accuracy", "%", 100},
    [MST_METRIC_PSNR] = {"psnr", true, "PSNR", "dB", 1},
};

const char *mst_metric_name(mst_metric m) { return (unsigned)m < MST_METRIC_COUNT ? k_metrics[m].name : "?"; }
bool mst_metric_higher_is_better(mst_metric m) { return (unsigned)m < MST_METRIC_COUNT && k_metrics[m].higher_is_better; }
const char *mst_metric_label(mst_metric m) { return (unsigned)m < MST_METRIC_COUNT ? k_metrics[m].label : "?"; }
const char *mst_metric_unit(mst_metric m) { return (unsigned)m < MST_METRIC_COUNT ? k_metrics[m].unit : ""; }
double mst_metric_display_scale(mst_metric m) { return (unsigned)m < MST_METRIC_COUNT ? k_metrics[m].display_scale : 1; }

mst_tensor *mst_model_loss(mst_model *m, mst_ctx *ctx, mst_tensor *out, mst_tensor *target) {
    return m->loss ? m->loss(m, ctx, out, target) : mst_cross_entropy(ctx, out, target);
}

static mst_tensor *push(mst_tensor ***list, int *n, int *cap, mst_tensor *t) {
    if (!t) return NULL;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        mst_tensor **p = realloc(*list, (size_t)c * sizeof(*p));
        if (!p) { mst_tensor_release(t); return NULL; }
        *list = p;
        *cap = c;
    }
    (*list)[(*n)++] = t;
    return t;
}

mst_tensor *mst_model_param(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double bound) {
    mst_tensor *t = mst_param_new(ctx, name, MST_DTYPE_F32, ndim, shape);
    if (t) mst_tensor_fill_rand(ctx, t, -bound, bound);
    return push(&m->params, &m->n_params, &m->cap_params, t);
}

mst_tensor *mst_model_param_const(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value) {
    mst_tensor *t = mst_param_new(ctx, name, MST_DTYPE_F32, ndim, shape);
    if (t) mst_tensor_fill(t, value);
    return push(&m->params, &m->n_params, &m->cap_params, t);
}

mst_tensor *mst_model_buffer(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value) {
    mst_tensor *t = mst_state_new(ctx, name, MST_DTYPE_F32, ndim, shape, MST_MEM_PARAM);
    if (t) mst_tensor_fill(t, value);
    return push(&m->buffers, &m->n_buffers, &m->cap_buffers, t);
}

int64_t mst_model_param_count(const mst_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += m->params[i]->numel;
    return n;
}

void mst_model_free(mst_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) mst_tensor_release(m->params[i]);
    for (int i = 0; i < m->n_buffers; i++) mst_tensor_release(m->buffers[i]);
    free(m->params);
    free(m->buffers);
    if (m->free_impl) m->free_impl(m->impl);
    else free(m->impl);
    free(m);
}
