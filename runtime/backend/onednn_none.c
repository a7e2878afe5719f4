/* onednn_none.c — the oneDNN provider in a build without oneDNN's headers: always unavailable,
 * so every op runs its builtin kernel. */
#include "runtime/backend/onednn.h"

bool mst_onednn_available(void) { return false; }
const char *mst_onednn_unavailable_reason(void) { return "built without oneDNN headers (install libdnnl-dev, reconfigure)"; }
const char *mst_onednn_version(void) { return "unavailable: built without oneDNN headers"; }
mst_kernel_fn mst_onednn_kernel(mst_op op, mst_dtype dtype, mst_onednn_layout layout) { return NULL; }
bool mst_onednn_supports(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout) { return false; }
const char *mst_onednn_impl(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout) { return NULL; }
void mst_onednn_ctx_free(mst_ctx *ctx) {}
