/* dp.h — data parallelism in a runtime context: gradient buckets all-reduced over the context's
 * communicator, started during backward as soon as a bucket's gradients are complete.
 *
 * How a step uses it (runtime/step.c): before the last micro-batch's backward, mst_dp_arm groups
 * the parameters into buckets (reverse parameter order, the order backward finishes them, up to
 * bucket_mb megabytes or MST_MAX_OP_INPUTS tensors each). Autograd (runtime/autograd.c) calls
 * mst_dp_backward_begin once and mst_dp_entry_done after each tape entry; when the last entry that
 * contributes to a bucket's gradients has run, and overlap is on, the bucket's `allreduce_start`
 * op is dispatched right there. mst_dp_sync then starts what is left and dispatches one
 * `allreduce_wait` per bucket (the sum times 1/N, in place). Both are ops (runtime/ops/collective.c),
 * so graph mode traces them into the step where backward put them, and its plan runs them in
 * that order: the all-reduce is part of the traced step.
 *
 * The overflow check agrees across ranks by construction: it runs after the all-reduce on the
 * summed gradients, and an inf/NaN on any rank makes the sum inf/NaN on every rank.
 */
#ifndef MST_RUNTIME_COMM_DP_H
#define MST_RUNTIME_COMM_DP_H

#include <stdbool.h>

#include "runtime/comm/comm.h"
#include "runtime/tensor.h"

typedef struct mst_dp mst_dp;

typedef struct {
    double bucket_mb;           /* > 0: bucket capacity in MiB of gradients */
    bool overlap;               /* start buckets during backward (true) or after it (false) */
} mst_dp_config;

/* Attaches data parallelism over comm (not owned) to ctx; replaces an earlier one. */
mst_status mst_dp_attach(mst_ctx *ctx, mst_comm *comm, const mst_dp_config *cfg);
void mst_dp_detach(mst_ctx *ctx);
/* True when ctx has a communicator of more than one rank. */
bool mst_dp_active(const mst_ctx *ctx);
mst_comm *mst_dp_comm(const mst_ctx *ctx);

/* The step's hooks (see above). */
mst_status mst_dp_arm(mst_ctx *ctx, mst_tensor *const params[], int n_params);
void mst_dp_backward_begin(mst_ctx *ctx);
mst_status mst_dp_entry_done(mst_ctx *ctx, size_t tape_index);
mst_status mst_dp_sync(mst_ctx *ctx);
/* Polls the buckets in flight (eager calls it after each tape entry, graph mode's plan after each
 * step): OpenMPI moves a transfer only inside MPI calls. Nothing in flight: returns at once. */
void mst_dp_progress(mst_ctx *ctx);
/* Buckets of the last armed step (their count and gradient bytes). */
int mst_dp_bucket_count(const mst_ctx *ctx);
int64_t mst_dp_grad_bytes(const mst_ctx *ctx);

/* The kernels' side (runtime/ops/collective.c): pack bucket `slot` and start its all-reduce;
 * wait for it and write the sum times `scale` back into the gradients. */
mst_status mst_dp_bucket_start(mst_ctx *ctx, int slot, mst_tensor *const g[], int n);
mst_status mst_dp_bucket_wait(mst_ctx *ctx, int slot, mst_tensor *const g[], int n, double scale);

void mst_dp_free(mst_dp *dp);

#endif
