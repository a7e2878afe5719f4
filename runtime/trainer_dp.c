/* trainer_dp.c — the trainer's data-parallel steps (see trainer_dp.h). */
#include "runtime/trainer_dp.h"

#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/comm/dp.h"
#include "runtime/context.h"

static mst_status comm_fail(mst_ctx *ctx, mst_status s) { return mst_ctx_fail(ctx, s, "%s", mst_comm_error(mst_dp_comm(ctx))); }

mst_status mst_train_dp_begin(mst_ctx *ctx, const mst_train_config *cfg, const mst_ckpt_entry *e, int n) {
    if (!cfg->comm || mst_comm_size(cfg->comm) <= 1) return MST_OK;
    const mst_dp_config dc = {.bucket_mb = cfg->comm_bucket_mb > 0 ? cfg->comm_bucket_mb : 25.0, .overlap = cfg->comm_overlap};
    mst_status s = mst_dp_attach(ctx, cfg->comm, &dc);
    for (int i = 0; i < n && s == MST_OK; i++) {
        s = mst_comm_broadcast(cfg->comm, mst_tensor_data(e[i].t), (int64_t)mst_tensor_nbytes(e[i].t), 0);
        if (s != MST_OK) s = comm_fail(ctx, s);
    }
    if (s == MST_OK) {      /* dropout seeds: the same stream on every rank, as in one process */
        s = mst_comm_broadcast(cfg->comm, &ctx->rng, (int64_t)sizeof(ctx->rng), 0);
        if (s != MST_OK) s = comm_fail(ctx, s);
    }
    mst_comm_stats_reset(cfg->comm);
    return s;
}

void mst_train_dp_end(mst_ctx *ctx) {
    if (ctx->dp) mst_dp_detach(ctx);
}

int mst_train_dp_size(const mst_ctx *ctx) { return mst_dp_active(ctx) ? mst_comm_size(mst_dp_comm(ctx)) : 1; }
bool mst_train_dp_writes(const mst_ctx *ctx) { return !mst_dp_active(ctx) || mst_comm_rank(mst_dp_comm(ctx)) == 0; }

mst_status mst_train_dp_sum(mst_ctx *ctx, double *v, int n) {
    if (!mst_dp_active(ctx)) return MST_OK;
    const uint32_t name = mst_prof_intern("allreduce.host");
    mst_prof_begin(MST_CAT_COMM, name, -1);
    mst_status s = mst_comm_allreduce_sum_f64(mst_dp_comm(ctx), v, n);
    mst_prof_end(MST_CAT_COMM, name, -1);
    return s == MST_OK ? MST_OK : comm_fail(ctx, s);
}

mst_status mst_train_dp_loss(mst_ctx *ctx, double *loss) {
    if (!mst_dp_active(ctx)) return MST_OK;
    mst_status s = mst_train_dp_sum(ctx, loss, 1);
    if (s == MST_OK) *loss /= mst_comm_size(mst_dp_comm(ctx));
    return s;
}

void mst_train_dp_step_stats(mst_ctx *ctx, double *exposed_ms, double *hidden_ms, double *busy_ms) {
    *exposed_ms = *hidden_ms = *busy_ms = 0;
    if (!mst_dp_active(ctx)) return;
    mst_comm *c = mst_dp_comm(ctx);
    *exposed_ms = (double)c->stats.wait_ns / 1e6;
    *busy_ms = (double)c->stats.busy_ns / 1e6;
    *hidden_ms = *busy_ms > *exposed_ms ? *busy_ms - *exposed_ms : 0;
    if (mst_prof_on(MST_PROF_LEVEL_STEPS)) {
        mst_prof_value(mst_prof_intern("comm_exposed_ms"), *exposed_ms);
        mst_prof_value(mst_prof_intern("comm_hidden_ms"), *hidden_ms);
        mst_prof_value(mst_prof_intern("comm_bytes"), (double)c->stats.allreduce_bytes);
    }
    mst_comm_stats_reset(c);
}

mst_status mst_train_dp_sync_buffers(mst_ctx *ctx, mst_model *model) {
    if (!mst_dp_active(ctx)) return MST_OK;
    for (int i = 0; i < model->n_buffers; i++) {
        mst_tensor *b = model->buffers[i];
        mst_status s = mst_comm_broadcast(mst_dp_comm(ctx), mst_tensor_data(b), (int64_t)mst_tensor_nbytes(b), 0);
        if (s != MST_OK) return comm_fail(ctx, s);
    }
    return MST_OK;
}

mst_status mst_train_dp_gather(mst_ctx *ctx, mst_train_result *res) {
    if (!mst_dp_active(ctx)) return MST_OK;
    const int n = mst_comm_size(mst_dp_comm(ctx)), me = mst_comm_rank(mst_dp_comm(ctx));
    double *v = calloc((size_t)(3 * n), sizeof(double));
    res->rank_step_ms = calloc((size_t)n, sizeof(double));
    res->rank_exposed_ms = calloc((size_t)n, sizeof(double));
    res->rank_hidden_ms = calloc((size_t)n, sizeof(double));
    if (!v || !res->rank_step_ms || !res->rank_exposed_ms || !res->rank_hidden_ms) {
        free(v);
        return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: per-rank statistics");
    }
    v[me] = res->step_time_ms_median;
    v[n + me] = res->comm_exposed_ms_median;
    v[2 * n + me] = res->comm_hidden_ms_median;
    mst_status s = mst_train_dp_sum(ctx, v, 3 * n);     /* each rank fills its own slots: a gather */
    for (int r = 0; r < n && s == MST_OK; r++) {
        res->rank_step_ms[r] = v[r];
        res->rank_exposed_ms[r] = v[n + r];
        res->rank_hidden_ms[r] = v[2 * n + r];
    }
    free(v);
    return s;
}
