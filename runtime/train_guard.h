/* train_guard.h — the trainer's checks that a run is worth keeping: finite weights before any
 * checkpoint is written, and at the end finite final loss, evaluation and weights, and a skip
 * rate of the loss scaler below a documented threshold (docs/training.md, "When a run fails").
 *
 *     if (!mst_guard_entries_finite(e, n, &bad)) ...refuse to save, name e[bad].name...;
 *     if ((s = mst_guard_run(ctx, model, res)) != MST_OK) ...the run diverged...;
 */
#ifndef MST_RUNTIME_TRAIN_GUARD_H
#define MST_RUNTIME_TRAIN_GUARD_H

#include <stdbool.h>

#include "runtime/checkpoint.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

/* A run whose loss scaler skipped more than this share of its steps fails ... */
#define MST_GUARD_MAX_SKIP_SHARE 0.5
/* ... once it skipped more than this many: dynamic scaling from 2^24 may halve its way down
 * through a few dozen overflowing steps at the start of a healthy run. */
#define MST_GUARD_MIN_SKIPS 32

/* True when every value of every entry's tensor is finite; else false and *bad = the first
 * entry holding a NaN or an infinity. */
bool mst_guard_entries_finite(const mst_ckpt_entry *e, int n, int *bad);

/* The end-of-run verdict over res (filled by mst_train) and the model's parameters and buffers:
 * MST_OK, or MST_ERR_NONFINITE with a message in ctx saying what is non-finite or how many steps
 * were skipped against the threshold. */
mst_status mst_guard_run(mst_ctx *ctx, const mst_model *model, const mst_train_result *res);

#endif
