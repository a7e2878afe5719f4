/* onednn.h — oneDNN (Debian libdnnl 2.6) as a CPU kernel provider: matmul and linear (whose
 * gradients are matmuls), conv2d and its two gradient ops, in f32 and bf16 with f32
 * accumulation. f16 is not served: oneDNN 2.6 has no f16 matmul/convolution on the CPU, so f16
 * stays on the builtin half-via-f32 path.
 *
 * The library is loaded with dlopen at the first use, not linked: libgomp (oneDNN's OpenMP
 * runtime) reads OMP_WAIT_POLICY once when it loads, and loading it ourselves lets the runtime set
 * the passive policy first (docs/runtime.md, "Threads"), so oneDNN's team sleeps between
 * primitives instead of spinning against the runtime's pool. A machine without the library runs
 * the builtin kernels (mst_onednn_available() says so). The ISA oneDNN may use follows
 * runtime/cpu_features.h, so MSTUNE_CPU_MASK narrows oneDNN too.
 *
 * Primitives are created once per shape (runtime/backend/shape_key.h) and layout, and cached in
 * the context; a call only swaps data pointers and executes. A shape oneDNN does not implement is
 * remembered as unsupported, and the builtin kernel runs it.
 *
 * Layouts: the tensors are always plain (NCHW, OIHW, row-major). A convolution may also run in
 * oneDNN's blocked layouts (nChw16c, ...), where its direct JIT kernels live, and in them through
 * its Winograd kernels: the call then reorders its inputs in and its outputs out (onednn_conv.c).
 * Which one a shape gets is the kernel choice's measurement (kernel_choice.h), like builtin against
 * oneDNN.
 *
 *     if (mst_onednn_supports(ctx, c, MST_DTYPE_BF16, MST_ONEDNN_PLAIN))
 *         s = mst_onednn_kernel(c->op, MST_DTYPE_BF16, MST_ONEDNN_PLAIN)(ctx, c);
 */
#ifndef MST_RUNTIME_BACKEND_ONEDNN_H
#define MST_RUNTIME_BACKEND_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/op.h"

/* The library loaded and a CPU engine made (once per process); why not, in why, when it failed. */
bool        mst_onednn_available(void);
const char *mst_onednn_unavailable_reason(void);
/* "2.6.0 (isa avx512_core_bf16)" or "unavailable: ..." */
const char *mst_onednn_version(void);

/* Where oneDNN's primitive keeps the data: the tensors' own plain layout, or its blocked layouts
 * with reorders in the call (convolutions only); WINOGRAD: blocked, and the convolution computed by
 * oneDNN's Winograd F(4x4, 3x3) kernels instead of the direct ones (f32 3x3 stride-1 convolutions
 * with channels in multiples of 16: jit_wino_4x3; 2.25x fewer multiplications, rounded
 * differently from a direct convolution, within f32 tolerance of it: tests/runtime/test_onednn.c). */
typedef enum { MST_ONEDNN_PLAIN, MST_ONEDNN_BLOCKED, MST_ONEDNN_WINOGRAD, MST_ONEDNN_LAYOUT_COUNT } mst_onednn_layout;

/* oneDNN's kernel for (op, dtype, layout), or NULL when the provider has none for that triple. */
mst_kernel_fn mst_onednn_kernel(mst_op op, mst_dtype dtype, mst_onednn_layout layout);
/* Whether oneDNN implements this call's shape in that layout (creates and caches the primitive on
 * first ask). */
bool mst_onednn_supports(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout);
/* The implementation oneDNN picked for this shape ("brg:avx512_core_bf16", ...), or NULL. */
const char *mst_onednn_impl(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout);

/* Frees the context's primitive cache (mst_ctx_free calls it). */
void mst_onednn_ctx_free(mst_ctx *ctx);

#endif
