/* trainer_dp.h — the trainer's data-parallel steps (private to runtime/): what mst_train does
 * differently with more than one rank, kept out of the loop itself. All are no-ops (MST_OK) in
 * one process. */
#ifndef MST_RUNTIME_TRAINER_DP_H
#define MST_RUNTIME_TRAINER_DP_H

#include "runtime/checkpoint.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

/* Attach the communicator's gradient buckets to ctx and broadcast every entry (parameters,
 * buffers, optimizer and scaler state) from rank 0, so all ranks start from the same bits. */
mst_status mst_train_dp_begin(mst_ctx *ctx, const mst_train_config *cfg, const mst_ckpt_entry *e, int n);
void mst_train_dp_end(mst_ctx *ctx);
/* The step's loss averaged over ranks (every rank then sees the same loss and stops together). */
mst_status mst_train_dp_loss(mst_ctx *ctx, double *loss);
/* The communicator's time in the step just finished (exposed, hidden, start-to-completion, in
 * ms), recorded as profile values; the counters restart. */
void mst_train_dp_step_stats(mst_ctx *ctx, double *exposed_ms, double *hidden_ms, double *busy_ms);
/* Sums over ranks in place (evaluation's loss, metric and sample counts). */
mst_status mst_train_dp_sum(mst_ctx *ctx, double *v, int n);
/* Rank 0's buffers (batch-norm running statistics) to every rank, as DDP's broadcast_buffers. */
mst_status mst_train_dp_sync_buffers(mst_ctx *ctx, mst_model *model);
/* Whether this rank writes checkpoints (rank 0). */
bool mst_train_dp_writes(const mst_ctx *ctx);
int mst_train_dp_size(const mst_ctx *ctx);
/* Every rank's median step time and comm times into res->rank_* (an all-reduce of one slot per rank). */
mst_status mst_train_dp_gather(mst_ctx *ctx, mst_train_result *res);

#endif
