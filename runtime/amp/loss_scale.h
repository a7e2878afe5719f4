/* loss_scale.h — loss scaling for mixed precision: none, fixed, or dynamic (MindSpore's
 * FixedLossScaleManager / DynamicLossScaleManager, PyTorch's GradScaler).
 *
 * Half-precision gradients below f16's smallest subnormal (5.96e-8) flush to zero; multiplying the
 * loss by a large scale before backward keeps them representable, and the gradients are divided
 * by the scale again (with an inf/NaN check) before the optimizer sees them. A dynamic scale
 * starts high (2**24), halves on every overflow (the step is skipped) and doubles after `window`
 * clean steps, so it settles just below the largest scale the gradients tolerate.
 *
 * The scale, the clean-step counter and the overflow flag are persistent f32 () tensors updated
 * by ops (runtime/ops/amp_ops.c), so a training step that uses them can be traced and replayed
 * (runtime/step.h). The host keeps statistics (overflow and skipped steps, consecutive overflows)
 * in an f64 (3) tensor that is checkpointed with the scale and the counter.
 *
 *     mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
 *     mst_loss_scaler *ls = mst_loss_scaler_new(ctx, &lc);     // NULL: see mst_ctx_error
 *     ... spec.scaler = ls; mst_step_run / mst_step_finish ...
 *     mst_loss_scaler_free(ls);
 */
#ifndef MST_RUNTIME_AMP_LOSS_SCALE_H
#define MST_RUNTIME_AMP_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/context.h"
#include "runtime/tensor.h"

typedef enum {
    MST_LOSS_SCALE_NONE,
    MST_LOSS_SCALE_FIXED,
    MST_LOSS_SCALE_DYNAMIC,
    MST_LOSS_SCALE_TYPE_COUNT
} mst_loss_scale_type;

typedef struct {
    mst_loss_scale_type type;
    double init;                    /* > 0, finite in f32; default 2**24 */
    double factor;                  /* dynamic: > 1; default 2 */
    int window;                     /* dynamic: >= 1 clean steps before growing; default 2000 */
    double floor;                   /* dynamic: > 0, the scale never drops below; default 1 */
    bool drop_overflow_update;      /* fixed: skip the update on overflow (dynamic always does); default true */
    int max_consecutive_overflows;  /* > 0: mst_step_finish fails after this many in a row; default 1000 */
} mst_loss_scale_config;

typedef struct mst_loss_scaler mst_loss_scaler;

mst_loss_scale_config mst_loss_scale_defaults(mst_loss_scale_type type);
const char *mst_loss_scale_type_name(mst_loss_scale_type type);     /* "none", "fixed", "dynamic" */

/* Validates cfg (MST_ERR_ARG naming the field and range). A `none` config gives a scaler too:
 * its scale stays 1 and it never skips, but the step still checks for inf/NaN. */
mst_loss_scaler *mst_loss_scaler_new(mst_ctx *ctx, const mst_loss_scale_config *cfg);
void             mst_loss_scaler_free(mst_loss_scaler *ls);        /* NULL is fine */
const mst_loss_scale_config *mst_loss_scaler_config(const mst_loss_scaler *ls);

/* The tensors a step uses: scale and good_steps (f32 (), updated by mst_amp_update_scale),
 * found_inf (f32 (), written by mst_amp_unscale_check). */
mst_tensor *mst_loss_scaler_scale(const mst_loss_scaler *ls);
mst_tensor *mst_loss_scaler_good_steps(const mst_loss_scaler *ls);
mst_tensor *mst_loss_scaler_found_inf(const mst_loss_scaler *ls);
/* Whether an overflow skips the optimizer update: dynamic, or fixed with drop_overflow_update. */
bool        mst_loss_scaler_skips(const mst_loss_scaler *ls);

/* Host side, after a step: record whether it overflowed; MST_ERR_NONFINITE (with a message)
 * once max_consecutive_overflows steps in a row have. */
mst_status mst_loss_scaler_record(mst_loss_scaler *ls, bool overflow);
double  mst_loss_scaler_value(const mst_loss_scaler *ls);          /* the current scale */
int64_t mst_loss_scaler_overflow_steps(const mst_loss_scaler *ls);
int64_t mst_loss_scaler_skipped_steps(const mst_loss_scaler *ls);
int64_t mst_loss_scaler_consecutive_overflows(const mst_loss_scaler *ls);

/* Checkpointed state, in order: "loss_scale.scale", "loss_scale.good_steps", "loss_scale.stats". */
int         mst_loss_scaler_state_count(const mst_loss_scaler *ls);
mst_tensor *mst_loss_scaler_state_at(const mst_loss_scaler *ls, int i, const char **name);

#endif
