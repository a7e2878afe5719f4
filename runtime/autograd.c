/* autograd.c — the eager tape and the reverse walk over it.
 *
 * The tape is in execution order, which is a topological order, so walking it backwards visits
 * each op after every consumer of its outputs has contributed. Interior gradients live in the
 * outputs' ->grad only until their producer has been processed.
 */
#include "runtime/autograd.h"

#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/amp/autocast.h"
#include "runtime/comm/dp.h"
#include "runtime/context.h"
#include "runtime/ops.h"

void mst_grad_set_enabled(mst_ctx *ctx, bool on) { ctx->grad_enabled = on; }
bool mst_grad_is_enabled(const mst_ctx *ctx) { return ctx->grad_enabled; }

void mst_zero_grad(mst_tensor *const params[], int n) {
    for (int i = 0; i < n; i++) {
        mst_tensor_release(params[i]->grad);
        params[i]->grad = NULL;
    }
}

void mst_tape_record(mst_ctx *ctx, const mst_op_call *c) {
    if (ctx->tape_len == ctx->tape_cap) {
        size_t cap = ctx->tape_cap ? ctx->tape_cap * 2 : 256;
        mst_op_call *t = realloc(ctx->tape, cap * sizeof(*t));
        MST_ASSERT(t);
        ctx->tape = t;
        ctx->tape_cap = cap;
    }
    mst_op_call *e = &ctx->tape[ctx->tape_len++];
    *e = *c;
    for (int i = 0; i < c->n_in; i++) mst_tensor_retain(c->in[i]);
    for (int k = 0; k < c->n_out; k++) {
        mst_tensor_retain(c->out[k]);
        c->out[k]->on_tape = true;
    }
}

static void entry_release(mst_op_call *e) {
    for (int i = 0; i < e->n_in; i++) mst_tensor_release(e->in[i]);
    for (int k = 0; k < e->n_out; k++) {
        mst_tensor *o = e->out[k];
        mst_tensor_release(o->grad);        /* an interior gradient left by an aborted backward */
        o->grad = NULL;
        o->on_tape = false;
        mst_tensor_release(o);
    }
}

void mst_tape_truncate(mst_ctx *ctx, size_t len) {
    while (ctx->tape_len > len) entry_release(&ctx->tape[--ctx->tape_len]);
}

void mst_tape_clear(mst_ctx *ctx) { mst_tape_truncate(ctx, 0); }
size_t mst_tape_length(const mst_ctx *ctx) { return ctx->tape_len; }

/* Add g into t->grad. Leaf gradients must be tensors nobody else holds, since optimizers and
 * clipping may update them in place: a gradient shared with another tensor is copied, through
 * the copy op so graph mode's tracer records it. */
static mst_status accumulate(mst_ctx *ctx, mst_tensor *t, mst_tensor *g, bool leaf) {
    if (!t->grad) {
        if (leaf && g->refcount > 1) {
            g = mst_copy(ctx, g);
            if (!g) return ctx->status;
        }
        t->grad = mst_tensor_retain(g);
        return MST_OK;
    }
    mst_tensor *sum = mst_add(ctx, t->grad, g);
    if (!sum) return ctx->status;
    mst_tensor_release(t->grad);
    t->grad = mst_tensor_retain(sum);
    return MST_OK;
}

static mst_status run_backward(mst_ctx *ctx) {
    mst_dp_backward_begin(ctx);     /* data parallel: which entry completes each parameter's gradient */
    for (size_t n = ctx->tape_len; n-- > 0;) {
        mst_op_call *e = &ctx->tape[n];
        const mst_op_desc *d = mst_op_table[e->op];
        mst_tensor *gy[MST_MAX_OP_OUTPUTS] = {0};
        bool any = false;
        for (int k = 0; k < e->n_out; k++) {
            gy[k] = e->out[k]->grad;
            any |= gy[k] != NULL;
        }
        if (!any) {
            mst_status s0 = ctx->dp ? mst_dp_entry_done(ctx, n) : MST_OK;
            if (s0 != MST_OK) return s0;
            continue;
        }
        mst_tensor *gx[MST_MAX_OP_INPUTS] = {0};
        int64_t prev = mst_prof_flow_enter_backward(e->prof_seq);  /* the trace links these ops to e's forward */
        mst_status s = d->backward(ctx, e, gy, gx);
        mst_prof_flow_enter_backward(prev);
        if (s != MST_OK) return s;
        for (int i = 0; i < e->n_in; i++) {
            mst_tensor *x = e->in[i];
            if (!gx[i] || !x->requires_grad || (d->nondiff >> i & 1)) continue;
            if (gx[i]->dtype != x->dtype || !mst_shape_equal(gx[i]->ndim, gx[i]->shape, x->ndim, x->shape)) {
                char a[96], b[96];
                return mst_ctx_fail(ctx, MST_ERR_INTERNAL, "%s backward: gradient %s for input %d of %s", d->name,
                                    mst_tensor_desc(gx[i], a, sizeof(a)), i, mst_tensor_desc(x, b, sizeof(b)));
            }
            s = accumulate(ctx, x, gx[i], !x->on_tape);
            if (s != MST_OK) return s;
        }
        for (int k = 0; k < e->n_out; k++) {
            mst_tensor_release(e->out[k]->grad);
            e->out[k]->grad = NULL;
        }
        if (ctx->dp && (s = mst_dp_entry_done(ctx, n)) != MST_OK) return s;    /* a bucket may start now */
    }
    return MST_OK;
}

mst_status mst_backward_seeded(mst_ctx *ctx, mst_tensor *y, mst_tensor *gy) {
    if (!y || !gy) return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "backward: NULL tensor");
    if (!y->requires_grad) {
        mst_tape_clear(ctx);
        return mst_ctx_fail(ctx, MST_ERR_ARG, "backward: the tensor does not require grad (no parameter reaches it, or grad was disabled)");
    }
    if (gy->dtype != y->dtype || !mst_shape_equal(gy->ndim, gy->shape, y->ndim, y->shape)) {
        char a[96], b[96];
        mst_tape_clear(ctx);
        return mst_ctx_fail(ctx, MST_ERR_SHAPE, "backward: seed gradient %s does not match %s",
                            mst_tensor_desc(gy, a, sizeof(a)), mst_tensor_desc(y, b, sizeof(b)));
    }
    bool was_enabled = ctx->grad_enabled, was_autocast = ctx->autocast;
    mst_mem_cat was_cat = ctx->out_cat;
    ctx->grad_enabled = false;
    ctx->autocast = false;          /* gradients run in the dtypes the forward produced */
    ctx->out_cat = MST_MEM_GRAD;
    mst_tensor_release(y->grad);
    y->grad = mst_tensor_retain(gy);
    mst_status s = run_backward(ctx);
    ctx->grad_enabled = was_enabled;
    ctx->autocast = was_autocast;
    ctx->out_cat = was_cat;
    mst_tape_clear(ctx);
    mst_amp_cache_clear(ctx);       /* the next forward casts the updated parameters afresh */
    return s;
}

mst_status mst_backward(mst_ctx *ctx, mst_tensor *loss) {
    if (!loss) return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "backward: NULL loss");
    if (loss->numel != 1) {
        char a[96];
        mst_tape_clear(ctx);
        return mst_ctx_fail(ctx, MST_ERR_SHAPE, "backward: loss must have one element, got %s",
                            mst_tensor_desc(loss, a, sizeof(a)));
    }
    mst_tensor *one = mst_tensor_full(ctx, loss->dtype, loss->ndim, loss->shape, 1.0);
    if (!one) { mst_tape_clear(ctx); return ctx->status; }
    return mst_backward_seeded(ctx, loss, one);
}
