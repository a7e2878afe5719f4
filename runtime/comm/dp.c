/* dp.c — gradient buckets and their all-reduces (see dp.h). Trade-off: a bucket is packed into
 * one contiguous send buffer (a copy) rather than all-reduced tensor by tensor, because one large
 * message reaches the link's bandwidth and small ones pay its latency each; the copy costs a
 * fraction of the transfer. */
#include "runtime/comm/dp.h"

#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/context.h"
#include "runtime/op.h"
#include "runtime/ops.h"

typedef struct {
    mst_comm_req req;
    void *send, *recv;
    size_t cap;                 /* bytes of each buffer */
    int64_t n;                  /* elements in flight */
    mst_dtype dtype;
    bool in_flight;
} slot;

typedef struct {
    int first, count;           /* params order[first .. first+count) */
    int pending;                /* params not complete yet */
    bool started;
} bucket;

struct mst_dp {
    mst_comm *comm;
    mst_dp_config cfg;
    slot *slots;
    int n_slots;
    /* the armed step */
    bool armed;
    mst_tensor **params;        /* (n_params) in bucket order */
    size_t *first_use;          /* (n_params) smallest tape index reading the param; SIZE_MAX = none */
    int *bucket_of;             /* (n_params) */
    bool *complete;
    int n_params, cap_params;
    bucket *buckets;
    int n_buckets;
    int64_t grad_bytes;
    uint32_t name_wait, name_progress;
};

bool mst_dp_active(const mst_ctx *ctx) { return ctx->dp && mst_comm_size(ctx->dp->comm) > 1; }
mst_comm *mst_dp_comm(const mst_ctx *ctx) { return ctx->dp ? ctx->dp->comm : NULL; }
int mst_dp_bucket_count(const mst_ctx *ctx) { return ctx->dp ? ctx->dp->n_buckets : 0; }
int64_t mst_dp_grad_bytes(const mst_ctx *ctx) { return ctx->dp ? ctx->dp->grad_bytes : 0; }

void mst_dp_free(mst_dp *dp) {
    if (!dp) return;
    for (int i = 0; i < dp->n_slots; i++) {
        free(dp->slots[i].send);
        free(dp->slots[i].recv);
    }
    free(dp->slots);
    free(dp->params);
    free(dp->first_use);
    free(dp->bucket_of);
    free(dp->complete);
    free(dp->buckets);
    free(dp);
}

mst_status mst_dp_attach(mst_ctx *ctx, mst_comm *comm, const mst_dp_config *cfg) {
    if (!(cfg->bucket_mb > 0))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "data parallel: runtime.comm.bucket_mb must be > 0, got %g", cfg->bucket_mb);
    mst_dp *dp = calloc(1, sizeof(*dp));
    if (!dp) return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: data-parallel state");
    dp->comm = comm;
    dp->cfg = *cfg;
    dp->name_wait = mst_prof_intern("allreduce.wait");
    dp->name_progress = mst_prof_intern("allreduce.progress");
    mst_dp_free(ctx->dp);
    ctx->dp = dp;
    return MST_OK;
}

void mst_dp_detach(mst_ctx *ctx) {
    mst_dp_free(ctx->dp);
    ctx->dp = NULL;
}

mst_status mst_dp_arm(mst_ctx *ctx, mst_tensor *const params[], int n_params) {
    mst_dp *dp = ctx->dp;
    if (!dp) return MST_OK;
    if (n_params > dp->cap_params) {
        free(dp->params); free(dp->first_use); free(dp->bucket_of); free(dp->complete); free(dp->buckets);
        dp->params = calloc((size_t)n_params, sizeof(*dp->params));
        dp->first_use = calloc((size_t)n_params, sizeof(*dp->first_use));
        dp->bucket_of = calloc((size_t)n_params, sizeof(*dp->bucket_of));
        dp->complete = calloc((size_t)n_params, sizeof(*dp->complete));
        dp->buckets = calloc((size_t)n_params, sizeof(*dp->buckets));
        if (!dp->params || !dp->first_use || !dp->bucket_of || !dp->complete || !dp->buckets) {
            dp->cap_params = 0;
            return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: gradient buckets");
        }
        dp->cap_params = n_params;
    }
    /* reverse parameter order: backward completes the last layer's gradients first */
    const double cap = dp->cfg.bucket_mb * 1048576.0;
    dp->n_params = 0;
    dp->n_buckets = 0;
    dp->grad_bytes = 0;
    double bytes = 0;
    for (int i = n_params - 1; i >= 0; i--) {
        mst_tensor *p = params[i];
        if (!p->requires_grad) continue;
        if (p->dtype != MST_DTYPE_F32 && p->dtype != MST_DTYPE_F64)
            return mst_ctx_fail(ctx, MST_ERR_DTYPE, "data parallel: parameter \"%s\" is %s; gradients are all-reduced in f32 or f64",
                                p->name, mst_dtype_name(p->dtype));
        const int k = dp->n_params++;
        bucket *b = dp->n_buckets ? &dp->buckets[dp->n_buckets - 1] : NULL;
        const double pb = (double)mst_tensor_nbytes(p);
        if (!b || bytes >= cap || b->count == MST_MAX_OP_INPUTS || dp->params[b->first]->dtype != p->dtype) {
            b = &dp->buckets[dp->n_buckets++];
            *b = (bucket){.first = k};
            bytes = 0;
        }
        dp->params[k] = p;
        dp->bucket_of[k] = dp->n_buckets - 1;
        dp->complete[k] = false;
        dp->first_use[k] = SIZE_MAX;
        b->count++;
        b->pending++;
        bytes += pb;
        dp->grad_bytes += (int64_t)pb;
    }
    dp->armed = true;
    return MST_OK;
}

void mst_dp_backward_begin(mst_ctx *ctx) {
    mst_dp *dp = ctx->dp;
    if (!dp || !dp->armed) return;
    for (size_t n = 0; n < ctx->tape_len; n++) {
        const mst_op_call *e = &ctx->tape[n];
        for (int i = 0; i < e->n_in; i++) {
            const mst_tensor *t = e->in[i];
            if (t->on_tape || !t->requires_grad) continue;
            for (int k = 0; k < dp->n_params; k++)
                if (dp->params[k] == t && dp->first_use[k] == SIZE_MAX) dp->first_use[k] = n;
        }
    }
}

/* Drives the transfers in flight but `skip` (OpenMPI progresses inside MPI calls). The polls'
 * time is communication on this thread (a poll may run a copy or a reduction of the transfer):
 * a comm span, and exposed in the communicator's totals. */
static void progress(mst_dp *dp, int skip) {
    bool any = false;
    for (int i = 0; i < dp->n_slots && !any; i++) any = i != skip && dp->slots[i].in_flight && !dp->slots[i].req.done;
    if (!any) return;
    mst_prof_begin(MST_CAT_COMM, dp->name_progress, -1);
    for (int i = 0; i < dp->n_slots; i++)
        if (i != skip && dp->slots[i].in_flight) mst_comm_poll(dp->comm, &dp->slots[i].req);
    mst_prof_end(MST_CAT_COMM, dp->name_progress, -1);
}

void mst_dp_progress(mst_ctx *ctx) {
    if (ctx->dp) progress(ctx->dp, -1);
}

static mst_status start_bucket(mst_ctx *ctx, int id) {
    mst_dp *dp = ctx->dp;
    bucket *b = &dp->buckets[id];
    b->started = true;
    mst_tensor *g[MST_MAX_OP_INPUTS];
    int n = 0;
    for (int k = b->first; k < b->first + b->count; k++)
        if (dp->params[k]->grad) g[n++] = dp->params[k]->grad;
    return n ? mst_allreduce_start(ctx, n, g, id) : MST_OK;
}

mst_status mst_dp_entry_done(mst_ctx *ctx, size_t tape_index) {
    mst_dp *dp = ctx->dp;
    if (!dp || !dp->armed) return MST_OK;
    for (int k = 0; k < dp->n_params; k++) {
        if (dp->complete[k] || dp->first_use[k] != tape_index) continue;
        dp->complete[k] = true;
        bucket *b = &dp->buckets[dp->bucket_of[k]];
        if (--b->pending == 0 && dp->cfg.overlap && !b->started) {
            mst_status s = start_bucket(ctx, dp->bucket_of[k]);
            if (s != MST_OK) return s;
        }
    }
    if (!ctx->tracer) progress(dp, -1);     /* graph mode: the plan's allreduce_start ops poll */
    return MST_OK;
}

mst_status mst_dp_sync(mst_ctx *ctx) {
    mst_dp *dp = ctx->dp;
    if (!dp || !dp->armed) return MST_OK;
    dp->armed = false;
    mst_status s = MST_OK;
    for (int id = 0; id < dp->n_buckets && s == MST_OK; id++)
        if (!dp->buckets[id].started) s = start_bucket(ctx, id);
    const double scale = 1.0 / mst_comm_size(dp->comm);
    for (int id = 0; id < dp->n_buckets && s == MST_OK; id++) {
        const bucket *b = &dp->buckets[id];
        mst_tensor *g[MST_MAX_OP_INPUTS];
        int n = 0;
        for (int k = b->first; k < b->first + b->count; k++)
            if (dp->params[k]->grad) g[n++] = dp->params[k]->grad;
        if (n) s = mst_allreduce_wait(ctx, n, g, id, scale);
    }
    return s;
}

/* ---- the kernels' side ---- */

static slot *get_slot(mst_ctx *ctx, int id) {
    mst_dp *dp = ctx->dp;
    if (id >= dp->n_slots) {
        slot *s = realloc(dp->slots, (size_t)(id + 1) * sizeof(*s));
        if (!s) return NULL;
        memset(s + dp->n_slots, 0, (size_t)(id + 1 - dp->n_slots) * sizeof(*s));
        dp->slots = s;
        dp->n_slots = id + 1;
    }
    return &dp->slots[id];
}

mst_status mst_dp_bucket_start(mst_ctx *ctx, int id, mst_tensor *const g[], int n) {
    mst_dp *dp = ctx->dp;
    if (!dp) return mst_ctx_fail(ctx, MST_ERR_ARG, "allreduce_start: the context has no communicator");
    slot *sl = get_slot(ctx, id);
    if (!sl) return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: all-reduce slot %d", id);
    if (sl->in_flight) return mst_ctx_fail(ctx, MST_ERR_INTERNAL, "allreduce_start: bucket %d is already in flight", id);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += mst_tensor_nbytes(g[i]);
    if (bytes > sl->cap) {
        void *a = realloc(sl->send, bytes), *b = a ? realloc(sl->recv, bytes) : NULL;
        if (a) sl->send = a;
        if (!a || !b) return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: %zu bytes for all-reduce bucket %d", bytes, id);
        sl->recv = b;
        sl->cap = bytes;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy((char *)sl->send + off, mst_tensor_data(g[i]), mst_tensor_nbytes(g[i]));
        off += mst_tensor_nbytes(g[i]);
    }
    sl->dtype = g[0]->dtype;
    sl->n = (int64_t)(bytes / mst_dtype_size(sl->dtype));
    sl->req = (mst_comm_req){0};
    mst_status s = sl->dtype == MST_DTYPE_F32 ? mst_comm_iallreduce_sum_f32(dp->comm, sl->send, sl->recv, sl->n, &sl->req)
                                              : mst_comm_iallreduce_sum_f64(dp->comm, sl->send, sl->recv, sl->n, &sl->req);
    if (s != MST_OK) return mst_ctx_fail(ctx, s, "%s", mst_comm_error(dp->comm));
    sl->in_flight = true;
    progress(dp, id);                           /* drive the earlier buckets while we are inside MPI */
    return MST_OK;
}

mst_status mst_dp_bucket_wait(mst_ctx *ctx, int id, mst_tensor *const g[], int n, double scale) {
    mst_dp *dp = ctx->dp;
    if (!dp || id >= dp->n_slots || !dp->slots[id].in_flight)
        return mst_ctx_fail(ctx, MST_ERR_INTERNAL, "allreduce_wait: bucket %d was not started", id);
    slot *sl = &dp->slots[id];
    mst_prof_begin(MST_CAT_COMM, dp->name_wait, -1);
    mst_status s = mst_comm_wait(dp->comm, &sl->req, "gradient all-reduce");
    mst_prof_end(MST_CAT_COMM, dp->name_wait, -1);
    sl->in_flight = false;
    if (s != MST_OK) return mst_ctx_fail(ctx, s, "%s", mst_comm_error(dp->comm));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const int64_t m = g[i]->numel;
        if (sl->dtype == MST_DTYPE_F32) {
            float *dst = mst_tensor_f32(g[i]);
            const float *src = (const float *)((const char *)sl->recv + off), f = (float)scale;
            for (int64_t j = 0; j < m; j++) dst[j] = src[j] * f;
        } else {
            double *dst = mst_tensor_data(g[i]);
            const double *src = (const double *)((const char *)sl->recv + off);
            for (int64_t j = 0; j < m; j++) dst[j] = src[j] * scale;
        }
        off += mst_tensor_nbytes(g[i]);
    }
    return MST_OK;
}
