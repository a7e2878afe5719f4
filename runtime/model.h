/* model.h — what the trainer needs from a model: its parameters, its persistent buffers
 * (batch-norm running statistics: checkpointed, not trained) and a forward pass written with the
 * public ops, which runs eagerly today and is traced by graph mode later. The zoo lives in
 * workloads/.
 *
 *     mst_model *m = mst_workload_model_new(ctx, &spec, err, sizeof(err));
 *     mst_tensor *logits = m->forward(m, ctx, x, true);     // x (N, C, H, W) f32, or (N, L) i32 tokens
 *     mst_tensor *loss = mst_model_loss(m, ctx, logits, y);  // y: (N) i32 labels, or the target images
 *     mst_model_free(m);
 */
#ifndef MST_RUNTIME_MODEL_H
#define MST_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/context.h"

typedef struct mst_model mst_model;

/* What evaluation measures, and which way is better (mst_metric_higher_is_better). */
typedef enum {
    MST_METRIC_ACCURACY,        /* classification: argmax of the output (N, classes) against i32 labels (N) */
    MST_METRIC_PSNR,            /* image restoration: 10 log10(1 / MSE) per image, output clamped to [0, 1], in dB */
    MST_METRIC_COUNT
} mst_metric;

const char *mst_metric_name(mst_metric m);         /* "accuracy", "psnr" */
bool mst_metric_higher_is_better(mst_metric m);
const char *mst_metric_label(mst_metric m);        /* for people: "accuracy", "PSNR" */
const char *mst_metric_unit(mst_metric m);         /* of the displayed value: "%", "dB" */
double mst_metric_display_scale(mst_metric m);     /* value * scale = displayed value (accuracy 0..1 -> %) */

struct mst_model {
    char name[32];
    mst_tensor **params;        /* trained; owned by the model */
    int n_params;
    mst_tensor **buffers;       /* persistent state that is not trained; owned by the model */
    int n_buffers;
    int cap_params, cap_buffers;
    mst_tensor *(*forward)(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training);
    /* The training loss of the forward's output against the batch's target (labels or images);
     * NULL: cross-entropy against i32 labels. Traceable like forward. */
    mst_tensor *(*loss)(mst_model *m, mst_ctx *ctx, mst_tensor *out, mst_tensor *target);
    mst_metric metric;          /* what evaluation reports (0: accuracy) */
    void *impl;                 /* the model's own layout (layer pointers into params/buffers) */
    void (*free_impl)(void *impl);  /* how mst_model_free releases impl; NULL: free() (a Python model holds interpreter objects) */
};

/* A parameter of the given shape, registered with the model, initialized U(-bound, bound). */
mst_tensor *mst_model_param(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double bound);
/* A parameter filled with a constant (batch-norm gamma = 1, beta = 0). */
mst_tensor *mst_model_param_const(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value);
/* A persistent buffer filled with a constant. */
mst_tensor *mst_model_buffer(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value);

int64_t mst_model_param_count(const mst_model *m);     /* number of trained scalars */
/* m->loss, or cross-entropy when the model has none. */
mst_tensor *mst_model_loss(mst_model *m, mst_ctx *ctx, mst_tensor *out, mst_tensor *target);
void    mst_model_free(mst_model *m);

#endif
