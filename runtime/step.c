/* step.c — one training step as a function over tensors (see step.h): micro-batch forward and
 * backward with the loss scale, one fused unscale + overflow check per gradient, optional
 * clipping by global norm, the optimizer update (skipped at run time on overflow), the dynamic
 * scale's update.
 *
 * The rule that makes it traceable: nothing here reads a tensor's value, and every per-step
 * quantity is a tensor (the loss scale multiplies the loss as a tensor, the learning rate and the
 * update counts are the optimizer's tensors, the overflow flag gates the update inside the update
 * kernels). Host-side bookkeeping waits for mst_step_finish.
 */
#include "runtime/step.h"

#include <math.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd.h"
#include "runtime/comm/dp.h"
#include "runtime/ops.h"

static mst_status check_spec(mst_ctx *ctx, const mst_step_spec *spec, mst_tensor *const x[], mst_tensor *const y[]) {
    if (!spec || !spec->model || !spec->optim)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "step: the spec needs a model and an optimizer");
    if (spec->accumulate < 1 || spec->accumulate > MST_STEP_MAX_MICRO)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "step: accumulate must be in 1..%d, got %d", MST_STEP_MAX_MICRO, spec->accumulate);
    if (!(spec->clip_grad_norm >= 0 && isfinite(spec->clip_grad_norm)))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "step: clip_grad_norm must be finite and >= 0, got %g", spec->clip_grad_norm);
    for (int k = 0; k < spec->accumulate; k++)
        if (!x || !y || !x[k] || !y[k])
            return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "step: micro-batch %d is NULL", k);
    return MST_OK;
}

/* Forward (autocast on), loss / accumulate, times the scale, backward. *unscaled: this
 * micro-batch's share of the mean loss, f32 (), off the tape. */
static mst_status micro_step(mst_ctx *ctx, const mst_step_spec *spec, mst_tensor *x, mst_tensor *y, mst_tensor **unscaled) {
    mst_model *m = spec->model;
    mst_amp_autocast(ctx, true);
    mst_tensor *loss = mst_model_loss(m, ctx, m->forward(m, ctx, x, true), y);
    mst_amp_autocast(ctx, false);
    if (spec->accumulate > 1) loss = mst_scale(ctx, loss, 1.0 / spec->accumulate);
    mst_tensor *seed = spec->scaler ? mst_mul(ctx, loss, mst_loss_scaler_scale(spec->scaler)) : loss;
    if (!seed) return ctx->status;
    mst_status s = mst_backward(ctx, seed);
    if (s != MST_OK) return s;
    bool grad_was = mst_grad_is_enabled(ctx);
    mst_grad_set_enabled(ctx, false);
    *unscaled = mst_cast(ctx, loss, MST_DTYPE_F32);
    mst_grad_set_enabled(ctx, grad_was);
    return *unscaled ? MST_OK : ctx->status;
}

/* Every gradient divided by the scale, with the overflow flag set when one holds inf/NaN. */
static mst_status unscale(mst_ctx *ctx, const mst_step_spec *spec) {
    const mst_model *m = spec->model;
    mst_tensor *scale = mst_loss_scaler_scale(spec->scaler), *found = mst_loss_scaler_found_inf(spec->scaler);
    bool first = true;
    for (int i = 0; i < m->n_params; i++) {
        if (!m->params[i]->grad) continue;
        mst_status s = mst_amp_unscale_check(ctx, m->params[i]->grad, scale, found, first);
        if (s != MST_OK) return s;
        first = false;
    }
    return MST_OK;
}

/* PyTorch's clip_grad_norm_: the global L2 norm over all gradients, every gradient times
 * min(1, max_norm / (norm + 1e-6)). The scaled gradients replace the old ones. */
static mst_status clip(mst_ctx *ctx, const mst_step_spec *spec, mst_tensor **norm) {
    const mst_model *m = spec->model;
    mst_tensor *sum_sq = NULL;
    for (int i = 0; i < m->n_params; i++) {
        mst_tensor *g = m->params[i]->grad;
        if (!g) continue;
        mst_tensor *sq = mst_sum(ctx, mst_mul(ctx, g, g), 0, false);
        sum_sq = sum_sq ? mst_add(ctx, sum_sq, sq) : sq;
        if (!sum_sq) return ctx->status;
    }
    if (!sum_sq) return MST_OK;     /* no gradient: nothing to clip */
    mst_tensor *coef;
    mst_status s = mst_clip_coef(ctx, sum_sq, spec->clip_grad_norm, &coef, norm);
    if (s != MST_OK) return s;
    *norm = mst_cast(ctx, *norm, MST_DTYPE_F32);
    for (int i = 0; i < m->n_params; i++) {
        mst_tensor *p = m->params[i];
        if (!p->grad) continue;
        mst_tensor *g = mst_mul(ctx, p->grad, mst_cast(ctx, coef, p->grad->dtype));
        if (!g) return ctx->status;
        mst_tensor_release(p->grad);
        p->grad = mst_tensor_retain(g);
    }
    return *norm ? MST_OK : ctx->status;
}

/* After backward: unscale, clip, update, the scale's update. Runs without the tape, and its
 * outputs (clipped gradients) count as gradients in the allocator. */
static mst_status update(mst_ctx *ctx, const mst_step_spec *spec, mst_step_outputs *out) {
    mst_loss_scaler *ls = spec->scaler;
    mst_status s = MST_OK;
    if (ls) s = unscale(ctx, spec);
    if (s == MST_OK && spec->clip_grad_norm > 0) s = clip(ctx, spec, &out->grad_norm);
    if (s == MST_OK) s = mst_optim_apply(spec->optim, ls && mst_loss_scaler_skips(ls) ? mst_loss_scaler_found_inf(ls) : NULL);
    if (s == MST_OK && ls && mst_loss_scaler_config(ls)->type == MST_LOSS_SCALE_DYNAMIC) {
        const mst_loss_scale_config *c = mst_loss_scaler_config(ls);
        s = mst_amp_update_scale(ctx, mst_loss_scaler_scale(ls), mst_loss_scaler_good_steps(ls), mst_loss_scaler_found_inf(ls),
                                 c->factor, c->window, c->floor);
    }
    return s;
}

mst_status mst_step_run(mst_ctx *ctx, const mst_step_spec *spec, mst_tensor *const x[], mst_tensor *const y[],
                        mst_step_outputs *out) {
    out->loss = out->found_inf = out->grad_norm = NULL;
    mst_status s = check_spec(ctx, spec, x, y);
    if (s != MST_OK) return s;
    mst_model *m = spec->model;
    mst_tensor *loss = NULL;
    for (int k = 0; k < spec->accumulate && s == MST_OK; k++) {
        mst_tensor *part = NULL;
        /* data parallel: the last micro-batch's backward starts the gradient buckets' all-reduces */
        if (k == spec->accumulate - 1 && mst_dp_active(ctx)) s = mst_dp_arm(ctx, m->params, m->n_params);
        if (s == MST_OK) s = micro_step(ctx, spec, x[k], y[k], &part);
        if (s == MST_OK) {
            bool grad_was = mst_grad_is_enabled(ctx);
            mst_grad_set_enabled(ctx, false);
            loss = loss ? mst_add(ctx, loss, part) : part;
            mst_grad_set_enabled(ctx, grad_was);
            if (!loss) s = ctx->status;
        }
    }
    if (s == MST_OK) {
        bool grad_was = mst_grad_is_enabled(ctx);
        mst_mem_cat cat_was = ctx->out_cat;
        mst_grad_set_enabled(ctx, false);
        ctx->out_cat = MST_MEM_GRAD;
        if (mst_dp_active(ctx)) s = mst_dp_sync(ctx);      /* the mean over ranks, before unscale and clipping */
        if (s == MST_OK) s = update(ctx, spec, out);
        ctx->out_cat = cat_was;
        mst_grad_set_enabled(ctx, grad_was);
    }
    mst_zero_grad(m->params, m->n_params);
    mst_amp_cache_clear(ctx);
    if (s != MST_OK) {
        out->grad_norm = NULL;
        return s;
    }
    out->loss = loss;
    out->found_inf = spec->scaler ? mst_loss_scaler_found_inf(spec->scaler) : NULL;
    return MST_OK;
}

mst_status mst_step_eval(mst_ctx *ctx, mst_model *model, mst_tensor *x, mst_tensor *y, mst_tensor **logits,
                         mst_tensor **loss) {
    bool grad_was = mst_grad_is_enabled(ctx);
    mst_grad_set_enabled(ctx, false);
    mst_amp_autocast(ctx, true);
    *logits = model->forward(model, ctx, x, false);
    *loss = mst_model_loss(model, ctx, *logits, y);
    mst_amp_autocast(ctx, false);
    mst_amp_cache_clear(ctx);
    mst_grad_set_enabled(ctx, grad_was);
    if (!*logits || !*loss) {
        *logits = *loss = NULL;
        return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_INTERNAL, "step eval: no output");
    }
    return MST_OK;
}

mst_status mst_step_finish(mst_ctx *ctx, const mst_step_spec *spec, const mst_step_outputs *out, mst_step_record *rec) {
    if (!out->loss) return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "step finish: no loss output");
    rec->loss = mst_tensor_get(out->loss, 0);
    rec->overflow = out->found_inf && mst_tensor_get(out->found_inf, 0) != 0;
    rec->skipped = rec->overflow && spec->scaler && mst_loss_scaler_skips(spec->scaler);
    rec->loss_scale = spec->scaler ? mst_loss_scaler_value(spec->scaler) : 1.0;
    rec->grad_norm = out->grad_norm ? mst_tensor_get(out->grad_norm, 0) : -1.0;
    if (!rec->skipped) mst_optim_count_step(spec->optim);
    return spec->scaler ? mst_loss_scaler_record(spec->scaler, rec->overflow) : MST_OK;
}
