/* step.h — one training step as a function over tensors: what eager mode runs directly and graph
 * mode traces once and replays (runtime/graph/).
 *
 * A step is: for each of `accumulate` micro-batches, forward, the model's loss (cross-entropy
 * unless it supplies one) / accumulate, times the loss scale, backward (gradients add up in each
 * parameter's ->grad); then one fused unscale + overflow check over all gradients, optional
 * clipping by global norm, and the optimizer update of every parameter, skipped as a whole when
 * a gradient was inf/NaN; then the dynamic loss scale's update. Everything that changes from step to step lives in tensors (the optimizer's
 * learning-rate and step-count tensors, the scaler's scale and counters), never in host
 * variables or attributes, and nothing here reads a tensor's value on the host: that is what
 * makes the function traceable. The host reads the outputs after the step (mst_step_finish).
 *
 *     mst_step_spec spec = {.model = m, .optim = opt, .scaler = scaler, .clip_grad_norm = 0, .accumulate = 1};
 *     mst_step_outputs out;
 *     mst_optim_set_lr(opt, lr);
 *     mst_step_run(ctx, &spec, x, y, &out);        // eager; graph mode replays the same calls
 *     mst_step_finish(ctx, &spec, &out, &rec);      // host bookkeeping and the per-step record
 */
#ifndef MST_RUNTIME_STEP_H
#define MST_RUNTIME_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/amp/loss_scale.h"
#include "runtime/model.h"
#include "runtime/optim.h"

#define MST_STEP_MAX_MICRO 64

typedef struct {
    mst_model *model;
    mst_optim *optim;
    mst_loss_scaler *scaler;    /* NULL: no loss scaling (and no overflow check) */
    double clip_grad_norm;      /* > 0: clip the unscaled gradients to this global L2 norm */
    int accumulate;             /* micro-batches per optimizer step, 1..MST_STEP_MAX_MICRO */
} mst_step_spec;

typedef struct {
    mst_tensor *loss;           /* f32 (): mean of the micro-batches' unscaled losses */
    mst_tensor *found_inf;      /* f32 (): 1 when a gradient was inf/NaN (update skipped); NULL without a scaler */
    mst_tensor *grad_norm;      /* f32 (): global norm of the unscaled gradients; NULL unless clipping */
} mst_step_outputs;

/* What the host learns after a step. */
typedef struct {
    double loss;
    bool overflow;              /* a gradient was inf/NaN */
    bool skipped;               /* the update was skipped */
    double loss_scale;          /* the scale after this step's update; 1 without a scaler */
    double grad_norm;           /* -1 when not computed */
} mst_step_record;

/* x[k] the model's input (N, C, H, W) f32 or (N, L) i32 tokens, y[k] its target ((N) i32 labels,
 * or images for a model with its own loss) for k < spec->accumulate. Traceable (see above). */
mst_status mst_step_run(mst_ctx *ctx, const mst_step_spec *spec, mst_tensor *const x[], mst_tensor *const y[],
                        mst_step_outputs *out);
/* Forward only, evaluation mode: the output (logits (N, classes), or images) and the mean loss (). Traceable. */
mst_status mst_step_eval(mst_ctx *ctx, mst_model *model, mst_tensor *x, mst_tensor *y, mst_tensor **logits,
                         mst_tensor **loss);
/* Reads the outputs, updates the host-side counts (the optimizer's step count unless skipped,
 * the scaler's overflow statistics) and fills rec. Fails with MST_ERR_NONFINITE after
 * the scaler's limit of consecutive overflows. */
mst_status mst_step_finish(mst_ctx *ctx, const mst_step_spec *spec, const mst_step_outputs *out, mst_step_record *rec);

#endif
