/* zoo.h — the model zoo: named models mstune can train, profile and tune. The zoo is one table
 * (zoo.c) of constructors, each with the job keys it reads and a check of its sizes: a new model
 * is one file and one row.
 *
 *     mst_model_spec spec = {.name = "cnn", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .width = 32, .blocks = 2};
 *     mst_model *m = mst_zoo_model_new(ctx, &spec, err, sizeof(err));
 */
#ifndef MST_WORKLOADS_ZOO_H
#define MST_WORKLOADS_ZOO_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/model.h"

typedef struct {
    const char *name;           /* a row of mst_zoo */
    int in_c, in_h, in_w;       /* input sample shape; token sequences: (1, 1, L) */
    bool tokens;                /* the input is i32 token ids (N, L) rather than f32 images */
    bool paired;                /* the target is an image (super-resolution pairs), not a label */
    bool mse_loss;              /* srnet: MSE instead of L1 */
    int vocab;                  /* token inputs: ids are < vocab */
    int classes;
    int hidden1, hidden2;       /* mlp: 784-256-128-10 by default */
    double dropout;             /* mlp: after each hidden layer; transformer: embeddings, attention, residuals (0 = none) */
    int width;                  /* cnn: stem channels; srnet: feature channels */
    int blocks;                 /* cnn: residual blocks, each after the first halves H, W and doubles channels; srnet: residual blocks */
    int d_model, heads, layers; /* transformer: width, attention heads (d_model % heads == 0), blocks */
    int ff;                     /* transformer: MLP width; 0 = 4 d_model */
    double init_gain;           /* multiplies every weight's init bound (PyTorch's defaults at 1; 0 counts as 1) */
    const char *py_file;        /* python: the model file (absolute, or relative to the working directory) */
    const char *py_args;        /* python: the builder's keyword arguments as a JSON object ("{}" when none) */
} mst_model_spec;

typedef struct {
    const char *name;
    const char *description;
    const char *keys;                   /* the model.* job keys it reads, for `mstune list workloads` */
    const char *input;                  /* what it takes: "images" or "tokens" */
    int (*check)(const mst_model_spec *spec, char *err, size_t errn);  /* 0, or -1 naming the bad size */
    mst_model *(*create)(mst_ctx *ctx, const mst_model_spec *spec);
} mst_zoo_entry;

extern const mst_zoo_entry mst_zoo[];
extern const int mst_zoo_count;

/* NULL with a message in err for an unknown name or bad sizes. */
mst_model *mst_zoo_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn);
const mst_zoo_entry *mst_zoo_find(const char *name);

mst_model *mst_mlp_new(mst_ctx *ctx, const mst_model_spec *spec);
mst_model *mst_cnn_new(mst_ctx *ctx, const mst_model_spec *spec);
mst_model *mst_transformer_new(mst_ctx *ctx, const mst_model_spec *spec);
int mst_transformer_check(const mst_model_spec *spec, char *err, size_t errn);
mst_model *mst_resnet_new(mst_ctx *ctx, const mst_model_spec *spec);
int mst_resnet_check(const mst_model_spec *spec, char *err, size_t errn);
mst_model *mst_srnet_new(mst_ctx *ctx, const mst_model_spec *spec);
int mst_srnet_check(const mst_model_spec *spec, char *err, size_t errn);

#endif
