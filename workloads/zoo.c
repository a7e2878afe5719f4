/* zoo.c — the zoo's table and the checks shared by every model constructor. */
#include "workloads/zoo.h"

#include <stdio.h>
#include <string.h>

static int images_only(const mst_model_spec *spec, const char *name, char *err, size_t errn) {
    if (!spec->tokens && !spec->paired) return 0;
    snprintf(err, errn, "model %s: classifies images, but the dataset yields %s (use model.name %s)", name,
             spec->tokens ? "token ids" : "image pairs", spec->tokens ? "transformer" : "srnet");
    return -1;
}

static int mlp_check(const mst_model_spec *spec, char *err, size_t errn) {
    if (images_only(spec, "mlp", err, errn) != 0) return -1;
    if (spec->hidden1 < 1 || spec->hidden2 < 1 || spec->dropout < 0 || spec->dropout >= 1) {
        snprintf(err, errn, "model mlp: hidden sizes must be >= 1 and dropout in [0, 1)");
        return -1;
    }
    return 0;
}

static int cnn_check(const mst_model_spec *spec, char *err, size_t errn) {
    if (images_only(spec, "cnn", err, errn) != 0) return -1;
    if (spec->width < 1 || spec->blocks < 1 || spec->blocks > 4) {
        snprintf(err, errn, "model cnn: width must be >= 1 and blocks in 1..4");
        return -1;
    }
    return 0;
}

#ifdef MSTUNE_HAVE_PYTHON
#include "python/host.h"
#endif

/* python: a model written in Python (python/host.h); the builder checks its own sizes. */
static int python_check(const mst_model_spec *spec, char *err, size_t errn) {
#ifdef MSTUNE_HAVE_PYTHON
    if (!spec->py_file || !*spec->py_file) {
        snprintf(err, errn, "model python: set model.file to the Python file that defines build(info, **args)");
        return -1;
    }
    return 0;
#else
    snprintf(err, errn, "model python: this mstune was built without Python (python3-dev was missing at configure time; "
                        "scripts/setup.sh installs it, then rebuild)");
    return -1;
#endif
}

static mst_model *python_create(mst_ctx *ctx, const mst_model_spec *spec) {
#ifdef MSTUNE_HAVE_PYTHON
    char err[768];
    mst_model *m = mst_py_model_new(ctx, spec, err, sizeof(err));
    if (!m) mst_ctx_fail(ctx, MST_ERR_ARG, "%s", err);
    return m;
#else
    mst_ctx_fail(ctx, MST_ERR_UNSUPPORTED, "built without Python");
    return NULL;
#endif
}

const mst_zoo_entry mst_zoo[] = {
    {"mlp", "multi-layer perceptron: flatten, hidden1, hidden2, classes; ReLU (784-256-128-10 on Fashion-MNIST)",
     "model.hidden1 model.hidden2 model.dropout model.init_gain", "images", mlp_check, mst_mlp_new},
    {"cnn", "small ResNet: conv-BN-ReLU-maxpool stem, residual blocks (3x3 conv-BN-ReLU-conv-BN + skip), global average pool, linear",
     "model.width model.blocks model.init_gain", "images", cnn_check, mst_cnn_new},
    {"resnet", "deeper ResNet with bottleneck blocks (1x1-3x3-1x1, x4 expansion): conv-BN-ReLU stem, 3 stages of "
               "model.blocks bottlenecks (widths w, 2w, 4w; stride 2 into stages 2, 3), global average pool, linear; "
               "depth 9 blocks + 2",
     "model.width model.blocks model.init_gain", "images", mst_resnet_check, mst_resnet_new},
    {"transformer", "transformer encoder classifier: token + position embeddings, pre-norm blocks of masked multi-head "
                    "self-attention and a GELU MLP, dropout, [CLS] pooling, linear",
     "model.d_model model.heads model.layers model.ff model.dropout model.init_gain", "tokens", mst_transformer_check,
     mst_transformer_new},
    {"srnet", "ESRGAN-style super-resolution x2: conv stem, BN-free residual blocks (scaled 0.2) with a long skip, "
              "conv + pixel-shuffle upsampler, nearest-upsampled input added; L1 or MSE loss, PSNR metric",
     "model.width model.blocks model.loss model.init_gain", "image pairs", mst_srnet_check, mst_srnet_new},
    {"python", "a model written in Python: model.file defines build(info, **args) returning an mstune.nn.Module "
               "(forward, optional loss, metric); eager runs its Python per op, graph mode traces it once (docs/python.md)",
     "model.file model.args", "any", python_check, python_create},
};
const int mst_zoo_count = (int)(sizeof(mst_zoo) / sizeof(mst_zoo[0]));

const mst_zoo_entry *mst_zoo_find(const char *name) {
    for (int i = 0; i < mst_zoo_count; i++)
        if (strcmp(mst_zoo[i].name, name) == 0) return &mst_zoo[i];
    return NULL;
}

mst_model *mst_zoo_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn) {
    if (spec->in_c < 1 || spec->in_h < 1 || spec->in_w < 1 || spec->classes < 2) {
        snprintf(err, errn, "model %s: input shape (%d, %d, %d) and %d classes: expected positive sizes and >= 2 classes",
                 spec->name, spec->in_c, spec->in_h, spec->in_w, spec->classes);
        return NULL;
    }
    const mst_zoo_entry *e = mst_zoo_find(spec->name);
    if (!e) {
        size_t k = (size_t)snprintf(err, errn, "unknown model '%s' (known:", spec->name);
        for (int i = 0; i < mst_zoo_count && k < errn; i++)
            k += (size_t)snprintf(err + k, errn - k, "%s %s", i ? "," : "", mst_zoo[i].name);
        if (k < errn) snprintf(err + k, errn - k, ")");
        return NULL;
    }
    if (e->check(spec, err, errn) != 0) return NULL;
    mst_model *m = e->create(ctx, spec);
    if (!m) snprintf(err, errn, "model %s: %s", spec->name, mst_ctx_error(ctx));
    return m;
}
