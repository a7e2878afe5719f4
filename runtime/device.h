/* device.h — what a backend (one device kind) provides to the runtime: allocation, copies between
 * the host and the device, synchronization, and the kernel for an (op, dtype) with a supports
 * query; later, streams and events. Executors (eager dispatch, graph plans, the half kernel) never
 * name a device's kernels or libraries: they ask the context's backend. A backend is a const table
 * of function pointers plus the list of its kernel providers (on the CPU: the builtin kernels and
 * oneDNN; on CUDA: its own kernels, cuBLAS, cuDNN), the shape of ggml's backend interface.
 *
 * The registry is closed like the op table: one slot per mst_device (runtime/tensor.h). A kind
 * this build has no backend for (CUDA without MSTUNE_CUDA) answers through the same calls —
 * mst_backend_get() is NULL, mst_device_unavailable() says why, mst_device_supports() is false —
 * never a crash.
 *
 *     const mst_backend *b = mst_backend_get(MST_DEVICE_CPU);
 *     if (b->supports(MST_OP_CONV2D, MST_DTYPE_BF16)) ...
 *     mst_kernel_fn k = b->kernel(ctx, MST_OP_CONV2D, MST_DTYPE_BF16);   // what mst_op_kernel binds
 *     const char *why = mst_device_unavailable(MST_DEVICE_CUDA);        // "... not available in this build ..."
 */
#ifndef MST_RUNTIME_DEVICE_H
#define MST_RUNTIME_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/alloc.h"
#include "runtime/op.h"
#include "runtime/status.h"

typedef enum {
    MST_COPY_HOST_TO_DEVICE,
    MST_COPY_DEVICE_TO_HOST,
    MST_COPY_DEVICE_TO_DEVICE,
    MST_COPY_KIND_COUNT
} mst_copy_kind;

/* One source of kernels on a device. serves(op, dtype): whether the provider has a kernel for the
 * pair at all (a shape it does not implement still falls back to the builtin provider at run
 * time); unavailable(): NULL when the provider can run in this process, else why not (a library
 * that did not load). */
typedef struct {
    const char *name;
    bool (*serves)(mst_op op, mst_dtype dtype);
    const char *(*unavailable)(void);
} mst_backend_provider;

/* A stream and an event of a device that queues work (CUDA); opaque to the runtime. */
typedef struct mst_stream mst_stream;
typedef struct mst_event mst_event;

typedef struct mst_backend {
    mst_device kind;
    const char *name;                       /* "cpu", as runtime.device names it */

    /* Memory of the device, counted by category in the context's allocator statistics (cat may be
     * MST_MEM_RESERVED: in no category, alloc.h). NULL on failure, the caller setting the error. */
    void *(*alloc)(mst_ctx *ctx, size_t bytes, mst_mem_cat cat);
    void (*free)(mst_ctx *ctx, void *p);
    /* Copy bytes; host pointers are ordinary memory. Returns a status (a CUDA error is recoverable). */
    mst_status (*copy)(mst_ctx *ctx, void *dst, const void *src, size_t bytes, mst_copy_kind kind);
    /* Wait until every queued operation of the context on the device has finished. */
    mst_status (*sync)(mst_ctx *ctx);

    /* The kernel executors bind for (op, dtype) under the context's switches (force_ref,
     * runtime.kernels), or NULL when the device has none; supports() is that question without a
     * context: true when some provider can run the op on that dtype (view ops need no kernel and
     * are supported everywhere). */
    mst_kernel_fn (*kernel)(const mst_ctx *ctx, mst_op op, mst_dtype dtype);
    bool (*supports)(mst_op op, mst_dtype dtype);
    const mst_backend_provider *providers;  /* in the order the kernel choice weighs them */
    int n_providers;

    /* Streams and events, for a device that queues work (CUDA: cudaStream_t/cudaEvent_t; graph
     * mode: CUDA graphs captured on a stream). NULL on a synchronous device such as the CPU, where
     * a kernel has finished when it returns and sync() is all there is. */
    mst_status (*stream_new)(mst_ctx *ctx, mst_stream **out);
    void (*stream_free)(mst_ctx *ctx, mst_stream *s);
    mst_status (*stream_sync)(mst_ctx *ctx, mst_stream *s);
    mst_status (*event_record)(mst_ctx *ctx, mst_event **out, mst_stream *s);
    mst_status (*event_wait)(mst_ctx *ctx, mst_stream *s, mst_event *e);    /* s waits for e */
} mst_backend;

const char *mst_device_name(mst_device kind);
int         mst_device_parse(const char *name);        /* -1 if unknown */

/* The backend of a device kind, or NULL when this build has none (mst_device_unavailable says why). */
const mst_backend *mst_backend_get(mst_device kind);
/* NULL when the kind has a backend in this build, else a sentence for the user. */
const char *mst_device_unavailable(mst_device kind);
/* Whether the device can run op on dtype; false (not a crash) for a kind without a backend. */
bool mst_device_supports(mst_device kind, mst_op op, mst_dtype dtype);

/* Make kind the context's device: its allocations, copies and kernel lookups go to that backend.
 * MST_ERR_UNSUPPORTED, with the reason in the context, for a kind this build lacks. A context
 * starts on the CPU; switch before creating tensors (storage records its device). */
mst_status mst_ctx_set_device(mst_ctx *ctx, mst_device kind);

/* Load the kernel providers the context may call (a library loaded at its first use, oneDNN's
 * dlopen) now rather than inside the first op that needs one: the trainer calls it before its
 * timed loop, where the loading (3-10 ms measured on the first eager step of a tiny MLP) is process
 * setup, not training work. Nothing with runtime.kernels builtin or reference kernels forced. */
void mst_ctx_load_providers(mst_ctx *ctx);

/* The CPU backend (runtime/backend/cpu.c): builtin kernels and oneDNN. */
extern const mst_backend mst_backend_cpu;

#endif
