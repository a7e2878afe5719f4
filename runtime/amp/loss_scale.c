/* loss_scale.c — the loss scaler's tensors, configuration and host statistics (see loss_scale.h).
 * The per-step arithmetic is in ops (runtime/ops/amp_ops.c), driven by runtime/step.c. */
#include "runtime/amp/loss_scale.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

enum { STAT_OVERFLOW, STAT_SKIPPED, STAT_CONSECUTIVE, STAT_COUNT };

struct mst_loss_scaler {
    mst_ctx *ctx;
    mst_loss_scale_config cfg;
    mst_tensor *scale, *good_steps, *found_inf;     /* f32 () */
    mst_tensor *stats;                              /* f64 (3): overflow, skipped, consecutive */
};

static const char *const k_type_names[MST_LOSS_SCALE_TYPE_COUNT] = {"none", "fixed", "dynamic"};

const char *mst_loss_scale_type_name(mst_loss_scale_type type) {
    return (unsigned)type < MST_LOSS_SCALE_TYPE_COUNT ? k_type_names[type] : "?";
}

mst_loss_scale_config mst_loss_scale_defaults(mst_loss_scale_type type) {
    return (mst_loss_scale_config){.type = type, .init = 16777216.0, .factor = 2, .window = 2000, .floor = 1,
                                   .drop_overflow_update = true, .max_consecutive_overflows = 1000};
}

static mst_status validate(mst_ctx *ctx, const mst_loss_scale_config *c) {
    if ((unsigned)c->type >= MST_LOSS_SCALE_TYPE_COUNT)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: type %d is not one of none, fixed, dynamic", (int)c->type);
    if (!(c->init > 0 && c->init <= FLT_MAX))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: init must be > 0 and finite in f32, got %g", c->init);
    if (!(c->factor > 1 && isfinite(c->factor)))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: factor must be finite and > 1, got %g", c->factor);
    if (c->window < 1) return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: window must be >= 1, got %d", c->window);
    if (!(c->floor > 0 && c->floor <= FLT_MAX))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: floor must be > 0 and finite in f32, got %g", c->floor);
    if (c->max_consecutive_overflows < 1)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: max_consecutive_overflows must be >= 1, got %d",
                            c->max_consecutive_overflows);
    return MST_OK;
}

mst_loss_scaler *mst_loss_scaler_new(mst_ctx *ctx, const mst_loss_scale_config *cfg) {
    if (!cfg) { mst_ctx_fail(ctx, MST_ERR_ARG, "loss scale: config is NULL"); return NULL; }
    if (validate(ctx, cfg) != MST_OK) return NULL;
    mst_loss_scaler *ls = calloc(1, sizeof(*ls));
    if (!ls) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory creating the loss scaler"); return NULL; }
    ls->ctx = ctx;
    ls->cfg = *cfg;
    ls->scale = mst_state_new(ctx, "loss_scale.scale", MST_DTYPE_F32, 0, NULL, MST_MEM_OPTIM);
    ls->good_steps = mst_state_new(ctx, "loss_scale.good_steps", MST_DTYPE_F32, 0, NULL, MST_MEM_OPTIM);
    ls->found_inf = mst_state_new(ctx, "loss_scale.found_inf", MST_DTYPE_F32, 0, NULL, MST_MEM_OPTIM);
    ls->stats = mst_state_new(ctx, "loss_scale.stats", MST_DTYPE_F64, 1, (int64_t[]){STAT_COUNT}, MST_MEM_OPTIM);
    if (!ls->scale || !ls->good_steps || !ls->found_inf || !ls->stats) {
        mst_loss_scaler_free(ls);
        return NULL;
    }
    mst_tensor_f32(ls->scale)[0] = cfg->type == MST_LOSS_SCALE_NONE ? 1.0f : (float)cfg->init;
    return ls;
}

void mst_loss_scaler_free(mst_loss_scaler *ls) {
    if (!ls) return;
    mst_tensor_release(ls->scale);
    mst_tensor_release(ls->good_steps);
    mst_tensor_release(ls->found_inf);
    mst_tensor_release(ls->stats);
    free(ls);
}

const mst_loss_scale_config *mst_loss_scaler_config(const mst_loss_scaler *ls) { return &ls->cfg; }
mst_tensor *mst_loss_scaler_scale(const mst_loss_scaler *ls) { return ls->scale; }
mst_tensor *mst_loss_scaler_good_steps(const mst_loss_scaler *ls) { return ls->good_steps; }
mst_tensor *mst_loss_scaler_found_inf(const mst_loss_scaler *ls) { return ls->found_inf; }

bool mst_loss_scaler_skips(const mst_loss_scaler *ls) {
    return ls->cfg.type == MST_LOSS_SCALE_DYNAMIC || (ls->cfg.type == MST_LOSS_SCALE_FIXED && ls->cfg.drop_overflow_update);
}

mst_status mst_loss_scaler_record(mst_loss_scaler *ls, bool overflow) {
    double *st = mst_tensor_f64(ls->stats);
    if (!overflow) {
        st[STAT_CONSECUTIVE] = 0;
        return MST_OK;
    }
    st[STAT_OVERFLOW] += 1;
    if (mst_loss_scaler_skips(ls)) st[STAT_SKIPPED] += 1;
    st[STAT_CONSECUTIVE] += 1;
    if (st[STAT_CONSECUTIVE] >= ls->cfg.max_consecutive_overflows)
        return mst_ctx_fail(ls->ctx, MST_ERR_NONFINITE,
                            "loss scale: %d consecutive steps had inf/NaN gradients (%s scale now %g); the model or the "
                            "learning rate diverged, or the gradients overflow even at the floor scale",
                            (int)st[STAT_CONSECUTIVE], k_type_names[ls->cfg.type], mst_loss_scaler_value(ls));
    return MST_OK;
}

double mst_loss_scaler_value(const mst_loss_scaler *ls) { return mst_tensor_f32(ls->scale)[0]; }
int64_t mst_loss_scaler_overflow_steps(const mst_loss_scaler *ls) { return (int64_t)mst_tensor_f64(ls->stats)[STAT_OVERFLOW]; }
int64_t mst_loss_scaler_skipped_steps(const mst_loss_scaler *ls) { return (int64_t)mst_tensor_f64(ls->stats)[STAT_SKIPPED]; }
int64_t mst_loss_scaler_consecutive_overflows(const mst_loss_scaler *ls) {
    return (int64_t)mst_tensor_f64(ls->stats)[STAT_CONSECUTIVE];
}

int mst_loss_scaler_state_count(const mst_loss_scaler *ls) { return ls ? 3 : 0; }

mst_tensor *mst_loss_scaler_state_at(const mst_loss_scaler *ls, int i, const char **name) {
    mst_tensor *t = !ls ? NULL : i == 0 ? ls->scale : i == 1 ? ls->good_steps : i == 2 ? ls->stats : NULL;
    if (name) *name = t ? t->name : NULL;
    return t;
}
