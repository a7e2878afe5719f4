/* train_guard.c — see train_guard.h. A NaN that the loss scaler keeps skipping never fails a
 * step, so the run itself must be judged: its weights, its last loss and evaluation, and how
 * much of it was skipped. */
#include "runtime/train_guard.h"

#include <math.h>
#include <string.h>

#include "runtime/tensor.h"

static bool tensor_finite(const mst_tensor *t) {
    if (!t) return true;
    if (t->dtype == MST_DTYPE_F32) {
        const float *p = mst_tensor_data(t);
        for (int64_t i = 0; i < t->numel; i++)
            if (!isfinite(p[i])) return false;
        return true;
    }
    if (t->dtype == MST_DTYPE_I32 || t->dtype == MST_DTYPE_U8) return true;
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(mst_tensor_get(t, i))) return false;
    return true;
}

bool mst_guard_entries_finite(const mst_ckpt_entry *e, int n, int *bad) {
    for (int i = 0; i < n; i++)
        if (!tensor_finite(e[i].t)) {
            if (bad) *bad = i;
            return false;
        }
    return true;
}

static const char *what(double v) { return isnan(v) ? "NaN" : "infinite"; }

mst_status mst_guard_run(mst_ctx *ctx, const mst_model *model, const mst_train_result *res) {
    for (int i = 0; i < model->n_params; i++)
        if (!tensor_finite(model->params[i]))
            return mst_ctx_fail(ctx, MST_ERR_NONFINITE, "the run diverged: parameter %s holds NaN or infinite values after %lld steps",
                                model->params[i]->name, (long long)res->steps);
    for (int i = 0; i < model->n_buffers; i++)
        if (!tensor_finite(model->buffers[i]))
            return mst_ctx_fail(ctx, MST_ERR_NONFINITE, "the run diverged: buffer %s holds NaN or infinite values after %lld steps",
                                model->buffers[i]->name, (long long)res->steps);
    if (res->n_losses > 0 && !isfinite(res->final_loss))
        return mst_ctx_fail(ctx, MST_ERR_NONFINITE, "the run diverged: the last step's training loss is %s", what(res->final_loss));
    if (res->val_loss != -1 && !isfinite(res->val_loss))
        return mst_ctx_fail(ctx, MST_ERR_NONFINITE, "the run diverged: the validation loss is %s", what(res->val_loss));
    if (res->val_accuracy != -1 && !isfinite(res->val_accuracy))
        return mst_ctx_fail(ctx, MST_ERR_NONFINITE, "the run diverged: the validation accuracy is %s", what(res->val_accuracy));
    int64_t steps = res->steps, skipped = res->skipped_steps;
    if (steps > 0 && skipped > MST_GUARD_MIN_SKIPS && (double)skipped > MST_GUARD_MAX_SKIP_SHARE * (double)steps)
        return mst_ctx_fail(ctx, MST_ERR_NONFINITE,
                            "the run is meaningless: the loss scaler skipped %lld of %lld steps (%.0f%%) for inf/NaN gradients; a run "
                            "fails above %.0f%% once more than %d are skipped (docs/training.md); lower optimizer.lr or the AMP level",
                            (long long)skipped, (long long)steps, 100.0 * (double)skipped / (double)steps,
                            100 * MST_GUARD_MAX_SKIP_SHARE, MST_GUARD_MIN_SKIPS);
    return MST_OK;
}
