/* zoo.h — the model zoo: named models mstune can train, profile and tune.
 *
 *     mst_model_spec spec = {.name = "cnn", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .width = 32, .blocks = 2};
 *     mst_model *m = mst_zoo_model_new(ctx, &spec, err, sizeof(err));
 */
#ifndef MST_WORKLOADS_ZOO_H
#define MST_WORKLOADS_ZOO_H

#include <stddef.h>

#include "runtime/model.h"

typedef struct {
    const char *name;           /* "mlp" or "cnn" */
    int in_c, in_h, in_w;       /* input sample shape */
    int classes;
    int hidden1, hidden2;       /* mlp: 784-256-128-10 by default */
    double dropout;             /* mlp: dropout after each hidden layer (0 = none) */
    int width;                  /* cnn: stem channels */
    int blocks;                 /* cnn: residual blocks; every block after the first halves H, W and doubles channels */
    double init_gain;           /* multiplies every weight's init bound (PyTorch's defaults at 1; 0 counts as 1) */
} mst_model_spec;

typedef struct {
    const char *name;
    const char *description;
} mst_zoo_entry;

extern const mst_zoo_entry mst_zoo[];
extern const int mst_zoo_count;

/* NULL with a message in err for an unknown name or bad sizes. */
mst_model *mst_zoo_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn);

mst_model *mst_mlp_new(mst_ctx *ctx, const mst_model_spec *spec);
mst_model *mst_cnn_new(mst_ctx *ctx, const mst_model_spec *spec);

#endif
