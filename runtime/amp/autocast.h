/* autocast.h — mixed precision autocast with MindSpore's amp levels, and the parameter cast cache.
 *
 * One policy table over the op enum says, per level, whether an op runs in half, stays in f32 or is
 * never touched. The dispatcher consults it right after dtype promotion while ctx->autocast is on
 * (forward passes only: backward and the optimizer run with it off):
 *   O0  nothing is cast (all f32).
 *   O1  allow-list ops (matmul, linear, conv2d, relu: MindSpore's white list) run in half; their
 *       float outputs are cast back to f32.
 *   O2  everything in half except a keep-f32 list (batchnorm, layernorm, softmax, log_softmax,
 *       cross_entropy, sum, mean), whose float inputs are cast to f32.
 *   O3  everything in half, norms and loss included.
 * Never cast: cast itself, shape/view ops, grad ops, in-place state updates, and any op missing from
 * the table; mutated inputs and integer inputs are never cast.
 *
 * Parameters (persistent leaves that require grad) are cast once per forward/backward: the half copy
 * made by mst_cast (on the tape, so the gradient reaches the f32 master as f32) is cached in
 * ctx->amp_cache until mst_amp_cache_clear (backward clears it).
 *
 *     mst_amp_set(ctx, 2, MST_DTYPE_F16);     // O2, f16
 *     mst_amp_autocast(ctx, true);            // forward
 *     mst_tensor *loss = model_forward(ctx, x, y);
 *     mst_amp_autocast(ctx, false);
 *     mst_backward(ctx, loss);                // also clears the cast cache
 */
#ifndef MST_RUNTIME_AMP_AUTOCAST_H
#define MST_RUNTIME_AMP_AUTOCAST_H

#include <stdbool.h>

#include "runtime/context.h"
#include "runtime/op.h"

typedef enum {
    MST_AMP_NEVER,      /* leave the call alone */
    MST_AMP_HALF,       /* float inputs cast to ctx->amp_dtype */
    MST_AMP_F32,        /* float inputs cast to f32 */
    MST_AMP_F32_PARAMS, /* batch norm at O2: parameters cast to f32, the activation (input 0) stays as it
                           is — statistics are computed in f32 either way, and no f32 copy of the
                           activation is made and saved for backward (cuDNN's half batch norm with
                           f32 parameters; MindSpore's keep_batchnorm_fp32 casts the input instead) */
} mst_amp_action;

/* Level 0..3 (O0..O3) and the half type (MST_DTYPE_F16 or MST_DTYPE_BF16). Errors go to the
 * context: a bad level or half type leaves the settings unchanged. */
mst_status mst_amp_set(mst_ctx *ctx, int level, mst_dtype half);
/* Turn autocast on for a forward pass, off for backward / the optimizer. */
void mst_amp_autocast(mst_ctx *ctx, bool on);
/* Drop the cached half copies of the parameters (after backward, or between steps). */
void mst_amp_cache_clear(mst_ctx *ctx);
/* Free the cache itself (mst_ctx_free calls it). */
void mst_amp_cache_free(mst_ctx *ctx);

/* What autocast does to op at level (0..3). */
mst_amp_action mst_amp_policy(mst_op op, int level);
/* Whether the op's float outputs are cast back to f32 at level (O1's allow-list). */
bool mst_amp_casts_back(mst_op op, int level);
const char *mst_amp_level_name(int level);         /* "O0".."O3", "?" otherwise */
int         mst_amp_level_parse(const char *s);     /* "O2"/"o2"/"2" -> 2; -1 when unknown */
const char *mst_amp_action_name(mst_amp_action a); /* "never", "half", "f32" */

/* How many parameter casts the cache has made since the context was created (tests, profiler). */
uint64_t mst_amp_cache_casts(const mst_ctx *ctx);

/* Dispatcher hooks (runtime/dispatch.c). Cast c's float inputs per the policy; after the kernel, cast
 * float outputs back to f32 for O1 allow-list ops (replacing c->out[k]). */
mst_status mst_amp_cast_inputs(mst_ctx *ctx, mst_op_call *c);
mst_status mst_amp_cast_outputs(mst_ctx *ctx, mst_op_call *c);

#endif
