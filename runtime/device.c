/* device.c — the backend registry (see device.h): one const slot per device kind, filled by the
 * backends this build compiles. A CUDA backend is one more slot (runtime/backend/cuda.c, compiled
 * when the build finds CUDA and defines MSTUNE_HAVE_CUDA); no executor changes with it. */
#include "runtime/device.h"

#include <string.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"

#ifdef MSTUNE_HAVE_CUDA
extern const mst_backend mst_backend_cuda;
#define CUDA_BACKEND (&mst_backend_cuda)
#else
#define CUDA_BACKEND NULL
#endif

static const char *const device_names[MST_DEVICE_COUNT] = {[MST_DEVICE_CPU] = "cpu", [MST_DEVICE_CUDA] = "cuda"};
static const mst_backend *const backends[MST_DEVICE_COUNT] = {[MST_DEVICE_CPU] = &mst_backend_cpu,
                                                              [MST_DEVICE_CUDA] = CUDA_BACKEND};
static const char *const missing[MST_DEVICE_COUNT] = {
    [MST_DEVICE_CPU] = "device cpu is not available in this build",
    [MST_DEVICE_CUDA] = "device cuda is not available in this build: mstune was built without a CUDA backend "
                        "(cuBLAS/cuDNN); use cpu",
};

const char *mst_device_name(mst_device kind) { return (unsigned)kind < MST_DEVICE_COUNT ? device_names[kind] : "?"; }

int mst_device_parse(const char *name) {
    for (int k = 0; k < MST_DEVICE_COUNT; k++)
        if (name && strcmp(device_names[k], name) == 0) return k;
    return -1;
}

const mst_backend *mst_backend_get(mst_device kind) { return (unsigned)kind < MST_DEVICE_COUNT ? backends[kind] : NULL; }

const char *mst_device_unavailable(mst_device kind) {
    if ((unsigned)kind >= MST_DEVICE_COUNT) return "unknown device kind";
    return backends[kind] ? NULL : missing[kind];
}

bool mst_device_supports(mst_device kind, mst_op op, mst_dtype dtype) {
    const mst_backend *b = mst_backend_get(kind);
    return b && (unsigned)op < MST_OP_COUNT && (unsigned)dtype < MST_DTYPE_COUNT && b->supports(op, dtype);
}

mst_status mst_ctx_set_device(mst_ctx *ctx, mst_device kind) {
    const mst_backend *b = mst_backend_get(kind);
    if (!b) return mst_ctx_fail(ctx, MST_ERR_UNSUPPORTED, "%s", mst_device_unavailable(kind));
    ctx->backend = b;
    return MST_OK;
}

void mst_ctx_load_providers(mst_ctx *ctx) {
    if (!ctx || !ctx->backend || ctx->force_ref || ctx->kernels == MST_KERNELS_BUILTIN) return;
    for (int p = 0; p < ctx->backend->n_providers; p++) (void)ctx->backend->providers[p].unavailable();
}
