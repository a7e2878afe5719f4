/* layout.h — oneDNN's nChw16c layout for graph mode's convolution chains.
 *
 * A (N, C, H, W) tensor with C a multiple of 16 can lie as (N, C/16, H, W, 16): the element of
 * channel c = 16 cb + l at (n, h, w) is at ((n C/16 + cb) S + h W + w) 16 + l, S = H W. That is
 * what oneDNN's direct convolution kernels read and write, so a value kept in it between two
 * convolutions costs no reorder in or out (each was a full pass over the tensor, ~15% of the cnn's
 * f32 step). Graph mode's layout pass (runtime/graph/layout.c) decides which intermediates lie so;
 * the tensor says it in mst_tensor.layout. The slab of (image n, channel block cb) is S x 16
 * values; kernels that work on plain rows gather a slab into 16 rows of S, run the plain row code
 * (so the bits are the plain kernel's) and scatter the result back.
 *
 *     if (mst_tensor_blocked(x)) ...                       // a kernel's blocked branch
 *     mst_nchw16c_slab_to_rows(x32 + slab * 16 * S, rows, S, sizeof(float));
 */
#ifndef MST_RUNTIME_LAYOUT_H
#define MST_RUNTIME_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"

enum { MST_NCHW16C_BLOCK = 16 };

static inline bool mst_tensor_blocked(const mst_tensor *t) { return t && t->layout == MST_LAYOUT_NCHW16C; }

/* Can a value of this dtype and shape lie in nChw16c: 4-D, channels a positive multiple of 16,
 * f32 or bf16 data (oneDNN's bf16 convolutions take nChw16c too) or i32 pooling indices. */
bool mst_layout_blockable(mst_dtype dtype, int ndim, const int64_t *shape);

/* One slab (S x 16 values of elem bytes: 4 for f32/i32, 2 for bf16) to 16 rows of S values, and
 * back. */
void mst_nchw16c_slab_to_rows(const void *slab, void *rows, int64_t s, size_t elem);
void mst_nchw16c_rows_to_slab(const void *rows, void *slab, int64_t s, size_t elem);

/* Whole (N, C, H, W) tensors of elem-byte values (4 or 2) between plain and nChw16c, on ctx's
 * kernel pool (NULL: on the calling thread). */
void mst_nchw16c_from_plain(mst_ctx *ctx, const void *plain, void *blocked, int64_t n, int64_t c, int64_t s, size_t elem);
void mst_nchw16c_to_plain(mst_ctx *ctx, const void *blocked, void *plain, int64_t n, int64_t c, int64_t s, size_t elem);

/* May graph mode put values in nChw16c under this context: the CPU's fast kernels with the kernel
 * choice in auto and oneDNN loaded (the reference, builtin-only and plain-oneDNN modes keep every
 * value plain). */
bool mst_layout_blocked_allowed(const mst_ctx *ctx);

/* How a kernel meets nChw16c operands. */
typedef enum {
    MST_BLOCKED_COPIES,     /* runs on plain copies of them (mst_layout_run_plain) */
    MST_BLOCKED_TAKES,      /* reads and writes them itself; plain operands cost nothing more */
    MST_BLOCKED_REORDERS,   /* reads and writes them itself and reorders plain ones (oneDNN's blocked kernels) */
} mst_blocked_how;

/* How the kernel that runs c meets nChw16c: an op with its own slab paths takes it; one the kernel
 * choice serves (the convolutions) reorders plain operands when its provider for the shape is
 * oneDNN's blocked or Winograd kernels, takes them when it is a builtin kernel that reads the
 * layout itself (mst_builtin_takes_blocked), and runs on plain copies otherwise (the provider is
 * decided now if it is not yet: runtime/backend/kernel_choice.h; c's tensors are plain and only
 * timed). The layout pass weighs the copies against the reorders. */
mst_blocked_how mst_layout_call_blocked_how(mst_ctx *ctx, const mst_op_call *c);
/* Does the op's builtin kernel read and write this call's nChw16c operands itself
 * (mst_op_desc.builtin_takes_blocked)? */
bool mst_builtin_takes_blocked(const mst_op_call *c);

/* h = t's header (shape, dtype) in `layout` over `data` (t's byte size, the caller's memory), with
 * st as its storage: neither is ever freed through the other (mst_layout_run_plain's twins). */
void mst_layout_twin_header(const mst_tensor *t, mst_layout layout, void *data, mst_tensor *h, mst_storage *st);

/* Does any of the call's tensors lie in nChw16c? */
bool mst_call_has_blocked(const mst_op_call *c);

/* Call c as graph mode's blocked chains would make it: every position c's op descriptor lets lie
 * in nChw16c (blocked_in / blocked_out) whose plain tensor can (mst_layout_blockable) replaced by
 * an nChw16c twin in memory of its own (inputs holding c's values, outputs for the kernel to write). The kernel
 * choice times candidates on it too. make returns false (and needs no free) when no position
 * qualifies or memory ran out. */
typedef struct {
    mst_op_call call;
    mst_tensor twin[MST_MAX_OP_INPUTS + MST_MAX_OP_OUTPUTS];
    mst_storage storage[MST_MAX_OP_INPUTS + MST_MAX_OP_OUTPUTS];
    void *mem;
} mst_blocked_call;
bool mst_blocked_call_make(mst_ctx *ctx, const mst_op_call *c, mst_blocked_call *b);
void mst_blocked_call_free(mst_blocked_call *b);

/* Runs kernel k on plain copies of the call's nChw16c tensors and writes its blocked outputs back
 * (a kernel that cannot read the layout, e.g. the builtin convolution a kernel choice picked for a
 * shape inside a blocked chain). Correct, and a reorder in and out like oneDNN's staged arguments. */
mst_status mst_layout_run_plain(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn k);

#endif
