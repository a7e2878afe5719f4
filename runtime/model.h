/* model.h — what the trainer needs from a model: its parameters, its persistent buffers
 * (batch-norm running statistics: checkpointed, not trained) and a forward pass written with the
 * public ops, which runs eagerly today and is traced by graph mode later. The zoo lives in
 * workloads/.
 *
 *     mst_model *m = mst_workload_model_new(ctx, &spec, err, sizeof(err));
 *     mst_tensor *logits = m->forward(m, ctx, x, true);     // x (N, C, H, W) f32
 *     mst_model_free(m);
 */
#ifndef MST_RUNTIME_MODEL_H
#define MST_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/context.h"

typedef struct mst_model mst_model;

struct mst_model {
    char name[32];
    mst_tensor **params;        /* trained; owned by the model */
    int n_params;
    mst_tensor **buffers;       /* persistent state that is not trained; owned by the model */
    int n_buffers;
    int cap_params, cap_buffers;
    mst_tensor *(*forward)(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training);
    void *impl;                 /* the model's own layout (layer pointers into params/buffers) */
};

/* A parameter of the given shape, registered with the model, initialized U(-bound, bound). */
mst_tensor *mst_model_param(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double bound);
/* A parameter filled with a constant (batch-norm gamma = 1, beta = 0). */
mst_tensor *mst_model_param_const(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value);
/* A persistent buffer filled with a constant. */
mst_tensor *mst_model_buffer(mst_model *m, mst_ctx *ctx, const char *name, int ndim, const int64_t *shape, double value);

int64_t mst_model_param_count(const mst_model *m);     /* number of trained scalars */
void    mst_model_free(mst_model *m);

#endif
