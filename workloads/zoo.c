/* zoo.c — the zoo's index and the checks shared by every model constructor. */
#include "workloads/zoo.h"

#include <stdio.h>
#include <string.h>

const mst_zoo_entry mst_zoo[] = {
    {"mlp", "multi-layer perceptron: flatten, hidden1, hidden2, classes; ReLU (784-256-128-10 on Fashion-MNIST)"},
    {"cnn", "small ResNet: conv-BN-ReLU-maxpool stem, residual blocks (3x3 conv-BN-ReLU-conv-BN + skip), global average pool, linear"},
};
const int mst_zoo_count = (int)(sizeof(mst_zoo) / sizeof(mst_zoo[0]));

mst_model *mst_zoo_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn) {
    if (spec->in_c < 1 || spec->in_h < 1 || spec->in_w < 1 || spec->classes < 2) {
        snprintf(err, errn, "model %s: input shape (%d, %d, %d) and %d classes: expected positive sizes and >= 2 classes",
                 spec->name, spec->in_c, spec->in_h, spec->in_w, spec->classes);
        return NULL;
    }
    mst_model *m = NULL;
    if (strcmp(spec->name, "mlp") == 0) {
        if (spec->hidden1 < 1 || spec->hidden2 < 1 || spec->dropout < 0 || spec->dropout >= 1) {
            snprintf(err, errn, "model mlp: hidden sizes must be >= 1 and dropout in [0, 1)");
            return NULL;
        }
        m = mst_mlp_new(ctx, spec);
    } else if (strcmp(spec->name, "cnn") == 0) {
        if (spec->width < 1 || spec->blocks < 1 || spec->blocks > 4) {
            snprintf(err, errn, "model cnn: width must be >= 1 and blocks in 1..4");
            return NULL;
        }
        m = mst_cnn_new(ctx, spec);
    } else {
        snprintf(err, errn, "unknown model '%s' (known: mlp, cnn)", spec->name);
        return NULL;
    }
    if (!m) snprintf(err, errn, "model %s: %s", spec->name, mst_ctx_error(ctx));
    return m;
}
