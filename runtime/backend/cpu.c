/* cpu.c — the CPU backend (runtime/device.h): host memory from the context's caching allocator,
 * copies as memcpy (device and host memory are one), nothing to synchronize (a kernel has finished
 * when it returns; the thread pool joins inside it), and kernels from two providers — the builtin
 * kernels of the op descriptors (kernels/ref[MST_DEVICE_CPU], the half-via-f32 kernel) and oneDNN
 * in its plain and blocked layouts, through its Winograd kernels, and its f32 kernels for half
 * convolutions — chosen per op and shape by
 * runtime/backend/kernel_choice.c. */
#include <string.h>

#include "runtime/amp/half.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/device.h"

static const mst_op_desc *desc_of(mst_op op) { return (unsigned)op < MST_OP_COUNT ? mst_op_table[op] : NULL; }

static bool builtin_serves(mst_op op, mst_dtype dt) {
    const mst_op_desc *d = desc_of(op);
    if (!d || (unsigned)dt >= MST_DTYPE_COUNT) return false;
    if (d->flags & MST_OPF_VIEW) return true;
    return d->kernels[MST_DEVICE_CPU][dt] || d->ref[MST_DEVICE_CPU][dt] || mst_half_kernel_applies(d, dt);
}

static bool onednn_plain_serves(mst_op op, mst_dtype dt) { return mst_onednn_kernel(op, dt, MST_ONEDNN_PLAIN) != NULL; }
static bool onednn_blocked_serves(mst_op op, mst_dtype dt) { return mst_onednn_kernel(op, dt, MST_ONEDNN_BLOCKED) != NULL; }
static bool onednn_winograd_serves(mst_op op, mst_dtype dt) { return mst_onednn_kernel(op, dt, MST_ONEDNN_WINOGRAD) != NULL; }
static bool onednn_f32_serves(mst_op op, mst_dtype dt) {
    return mst_dtype_is_half(dt) && mst_onednn_kernel(op, MST_DTYPE_F32, MST_ONEDNN_BLOCKED) != NULL;
}
static const char *builtin_unavailable(void) { return NULL; }
static const char *onednn_unavailable(void) { return mst_onednn_available() ? NULL : mst_onednn_unavailable_reason(); }

/* Indexed by kernel_choice.h's mst_provider, the order the choice weighs them. */
static const mst_backend_provider cpu_providers[MST_PROVIDER_COUNT] = {
    [MST_PROVIDER_BUILTIN] = {"builtin", builtin_serves, builtin_unavailable},
    [MST_PROVIDER_ONEDNN] = {"onednn", onednn_plain_serves, onednn_unavailable},
    [MST_PROVIDER_ONEDNN_BLOCKED] = {"onednn_blocked", onednn_blocked_serves, onednn_unavailable},
    [MST_PROVIDER_ONEDNN_WINOGRAD] = {"onednn_winograd", onednn_winograd_serves, onednn_unavailable},
    [MST_PROVIDER_ONEDNN_F32] = {"onednn_f32", onednn_f32_serves, onednn_unavailable},
};

static void *cpu_alloc(mst_ctx *ctx, size_t bytes, mst_mem_cat cat) { return mst_alloc(ctx->alloc, bytes, cat); }
static void cpu_free(mst_ctx *ctx, void *p) { mst_free(ctx->alloc, p); }

static mst_status cpu_copy(mst_ctx *ctx, void *dst, const void *src, size_t bytes, mst_copy_kind kind) {
    if ((unsigned)kind >= MST_COPY_KIND_COUNT)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "cpu copy: copy kind %d is not one of host-to-device, device-to-host, "
                                              "device-to-device", (int)kind);
    if (bytes && (!dst || !src))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "cpu copy: %zu bytes with a NULL %s", bytes, dst ? "source" : "destination");
    if (bytes && dst != src) memmove(dst, src, bytes);
    return MST_OK;
}

static mst_status cpu_sync(mst_ctx *ctx) {
    (void)ctx;
    return MST_OK;
}

static mst_kernel_fn cpu_kernel(const mst_ctx *ctx, mst_op op, mst_dtype dt) {
    const mst_op_desc *d = desc_of(op);
    if (!d || (unsigned)dt >= MST_DTYPE_COUNT) return NULL;
    return mst_kernel_lookup(ctx, d, dt);
}

/* Some provider that can run in this process has a kernel for the pair. Every op oneDNN serves has
 * a builtin kernel too (it runs the shapes oneDNN does not implement), so this is builtin's answer
 * unless a future provider adds ops of its own. */
static bool cpu_supports(mst_op op, mst_dtype dt) {
    for (int p = 0; p < MST_PROVIDER_COUNT; p++)
        if (!cpu_providers[p].unavailable() && cpu_providers[p].serves(op, dt)) return true;
    return false;
}

const mst_backend mst_backend_cpu = {
    .kind = MST_DEVICE_CPU,
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .kernel = cpu_kernel,
    .supports = cpu_supports,
    .providers = cpu_providers,
    .n_providers = MST_PROVIDER_COUNT,
    /* streams and events: NULL, the CPU runs synchronously (device.h) */
};
