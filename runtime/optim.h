/* optim.h — optimizers over a parameter list: SGD (momentum, dampening, Nesterov, weight decay),
 * Adam and AdamW, with PyTorch's update rules and defaults (torch.optim.SGD / Adam / AdamW).
 *
 * An optimizer holds its parameters (retained) and their state, created zero-filled at
 * construction in the optimizer-state memory category, so the allocator reports it from the
 * first step. Each step applies the in-place update ops of runtime/ops/optim_update.c to every
 * parameter that has a gradient; the learning rate comes from the caller (runtime/lr_schedule.h).
 *
 * Steps are counted twice, as in PyTorch: the optimizer's own count (mst_optim_steps), and per
 * parameter the number of updates it has received (the "step" state tensor), which drives Adam's
 * bias correction and SGD's first-step momentum buffer, so a parameter that had no gradient for a
 * while starts correctly when it gets one.
 *
 * State, in the order mst_optim_state_at returns it: per parameter, in the order given,
 *   SGD with momentum > 0:  "<param>.momentum_buffer"
 *   Adam / AdamW:           "<param>.exp_avg", "<param>.exp_avg_sq"
 * then, when there is any per-parameter state (and n_params > 0), "step": f64 (n_params), each parameter's update
 * count. <param> is the parameter's name, or "param<i>" when it has none. A checkpoint saves
 * these tensors and mst_optim_steps; resuming copies them back and calls mst_optim_set_steps.
 * The learning rate (f64 ()) and a zero overflow flag are tensors too (persistent, so a traced
 * step binds them by reference) but not state: a checkpoint does not hold them.
 *
 *     mst_optim_config cfg = mst_optim_defaults(MST_OPTIM_ADAMW);
 *     cfg.lr = 3e-4;
 *     mst_optim *opt = mst_optim_new(ctx, &cfg, params, n_params);   // NULL: see mst_ctx_error
 *     for (int64_t step = 0; step < total; step++) {
 *         ... forward, mst_backward(ctx, loss) ...
 *         mst_optim_step(opt, mst_lr_at(&sched, step));
 *         mst_zero_grad(params, n_params);
 *     }
 *     mst_optim_free(opt);
 */
#ifndef MST_RUNTIME_OPTIM_H
#define MST_RUNTIME_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/context.h"
#include "runtime/tensor.h"

typedef enum {
    MST_OPTIM_SGD,
    MST_OPTIM_ADAM,     /* weight decay added to the gradient (L2 penalty) */
    MST_OPTIM_ADAMW,    /* decoupled weight decay: p *= 1 - lr wd before the Adam update */
    MST_OPTIM_KIND_COUNT
} mst_optim_kind;

typedef struct {
    mst_optim_kind kind;
    double lr;              /* >= 0; mst_optim_step takes the lr of each step, this is the base */
    double momentum;        /* SGD: >= 0 */
    double dampening;       /* SGD: in [0, 1] */
    double weight_decay;    /* >= 0 */
    bool nesterov;          /* SGD: needs momentum > 0 and dampening == 0 */
    double beta1, beta2;    /* Adam/AdamW: in [0, 1) */
    double eps;             /* Adam/AdamW: > 0 */
} mst_optim_config;

typedef struct mst_optim mst_optim;

/* PyTorch's defaults: lr 1e-3 for all; SGD momentum 0, dampening 0, wd 0, no Nesterov;
 * Adam betas (0.9, 0.999), eps 1e-8, wd 0; AdamW the same with wd 0.01. */
mst_optim_config mst_optim_defaults(mst_optim_kind kind);
const char *mst_optim_kind_name(mst_optim_kind kind);      /* "sgd", "adam", "adamw" */
int         mst_optim_kind_parse(const char *name);        /* -1 when unknown */

/* Validates the config and the parameters (non-NULL, float, all distinct); on a problem returns
 * NULL with MST_ERR_ARG (or MST_ERR_OOM) and a message naming the field and its valid range. */
mst_optim *mst_optim_new(mst_ctx *ctx, const mst_optim_config *cfg, mst_tensor *const params[], int n);
void       mst_optim_free(mst_optim *o);                   /* NULL is fine */

/* One update of every parameter whose grad is not NULL, with learning rate lr; parameters
 * without a gradient are left alone (and so is their state). Gradients are checked against their
 * parameters before anything is updated, so a bad gradient leaves the whole model untouched.
 * The same as mst_optim_set_lr + mst_optim_apply(o, NULL) + mst_optim_count_step. */
mst_status mst_optim_step(mst_optim *o, double lr);

/* The parts of a step, for a traced training step (runtime/step.h):
 * set_lr writes the learning-rate tensor on the host (finite, >= 0) before the step runs;
 * apply dispatches the update ops and reads no tensor value on the host, so graph mode can trace
 * it; every update is skipped (parameters, state and per-parameter counts untouched) when
 * found_inf (f32 ()) holds a non-zero value at run time; NULL: never skipped;
 * count_step advances the optimizer's own count, on the host, after a step that was not skipped. */
mst_status  mst_optim_set_lr(mst_optim *o, double lr);
mst_status  mst_optim_apply(mst_optim *o, mst_tensor *found_inf);
void        mst_optim_count_step(mst_optim *o);
mst_tensor *mst_optim_lr(const mst_optim *o);              /* the f64 () learning-rate tensor */
int64_t    mst_optim_steps(const mst_optim *o);
/* Resume: restores the optimizer's count (>= 0); per-parameter counts are the "step" state. */
mst_status mst_optim_set_steps(mst_optim *o, int64_t steps);

const mst_optim_config *mst_optim_get_config(const mst_optim *o);
int          mst_optim_param_count(const mst_optim *o);
mst_tensor  *mst_optim_param_at(const mst_optim *o, int i);
/* State tensors for checkpoints: count and the i-th (0 <= i < count) with its name. */
int          mst_optim_state_count(const mst_optim *o);
mst_tensor  *mst_optim_state_at(const mst_optim *o, int i, const char **name);

#endif
