/* autograd.h — reverse-mode differentiation over the eager tape.
 *
 * The dispatcher appends every op call whose inputs require gradients to the context's tape
 * (holding references to its inputs and outputs). mst_backward walks the tape in reverse, calls
 * each op's backward rule — written in other ops, so the same rules can be traced by graph mode —
 * and accumulates input gradients. Leaves (parameters) keep theirs in ->grad, in the gradients
 * memory category, until mst_zero_grad. The tape is cleared afterwards; popping the pool that
 * recorded entries drops them too, so an abandoned forward pass never leaks.
 *
 *     mst_tensor *loss = mst_cross_entropy(ctx, logits, labels);
 *     mst_backward(ctx, loss);              // params[i]->grad now holds dloss/dparam
 */
#ifndef MST_RUNTIME_AUTOGRAD_H
#define MST_RUNTIME_AUTOGRAD_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/op.h"

/* Backpropagate from a one-element tensor (seed 1). */
mst_status mst_backward(mst_ctx *ctx, mst_tensor *loss);
/* Backpropagate from y with an explicit upstream gradient gy of y's shape and dtype. */
mst_status mst_backward_seeded(mst_ctx *ctx, mst_tensor *y, mst_tensor *gy);

void mst_grad_set_enabled(mst_ctx *ctx, bool on);   /* off: no tape recording (evaluation) */
bool mst_grad_is_enabled(const mst_ctx *ctx);
void mst_zero_grad(mst_tensor *const params[], int n);

/* Used by the dispatcher and the pools. */
void   mst_tape_record(mst_ctx *ctx, const mst_op_call *c);
void   mst_tape_truncate(mst_ctx *ctx, size_t len);
void   mst_tape_clear(mst_ctx *ctx);
size_t mst_tape_length(const mst_ctx *ctx);

#endif
