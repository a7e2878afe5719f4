/* dispatch.c — the eager (PyNative-style) dispatcher: the one path every op call takes.
 *
 * Per call: argument checks, dtype promotion, shape inference, output allocation, tape recording,
 * kernel selection and launch. The host work is what the profiler reports as `dispatch` (the
 * enclosing range) and the kernel as `kernel` (the nested range); nothing here is padded or
 * skipped to look faster. bench/bench_core measures its cost per op.
 */
#include <string.h>

#include "profiler/events.h"
#include "runtime/amp/autocast.h"
#include "runtime/amp/half.h"
#include "runtime/autograd.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/graph/trace.h"
#include "runtime/op.h"
#include "runtime/ops.h"

static mst_status check_args(mst_ctx *ctx, const mst_op_desc *d, mst_op_call *c, int n_in, mst_tensor *const in[]) {
    if (ctx->status != MST_OK)                                  /* an earlier call failed: pass it on */
        for (int i = 0; i < n_in && i < MST_MAX_OP_INPUTS; i++)
            if (!in[i]) return ctx->status;
    if (n_in < d->min_inputs || n_in > d->max_inputs || n_in > MST_MAX_OP_INPUTS)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "%s: takes %d..%d inputs, got %d", d->name, d->min_inputs, d->max_inputs, n_in);
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) return mst_ctx_fail(ctx, MST_ERR_ARG, "%s: input %d is NULL", d->name, i);
        if (in[i]->ctx != ctx)
            return mst_ctx_fail(ctx, MST_ERR_ARG, "%s: input %d belongs to another context", d->name, i);
        c->in[i] = in[i];
    }
    c->n_in = n_in;
    return MST_OK;
}

/* Cast float inputs to their common type, on the tape so gradients flow back in each input's
 * own dtype. Integer inputs of a promoting op are promoted too (add(f32, i32) is f32). */
static mst_status promote(mst_ctx *ctx, mst_op_call *c) {
    mst_dtype common = c->in[0]->dtype;
    for (int i = 1; i < c->n_in; i++) common = mst_dtype_promote(common, c->in[i]->dtype);
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i]->dtype == common) continue;
        mst_tensor *t = mst_cast(ctx, c->in[i], common);
        if (!t) return ctx->status;
        c->in[i] = t;
    }
    return MST_OK;
}

/* The trace's view of a call (profiler/events.h: mst_prof_intern_sig): "[[d0,d1],..]|f32,..", then
 * the attribute slots the op names, "|i:1,1,0,0" and "|f:0.1,1e-05" (exact: %.17g), so a call can be
 * rebuilt from the profile (the advisor's AMP calibration does). */
void mst_op_signature(const mst_op_call *c, char *buf, size_t n) {
    const mst_op_desc *d = mst_op_table[c->op];
    size_t k = 0;
    if (n < 8) {
        if (n) buf[0] = '\0';
        return;
    }
    buf[k++] = '[';
    for (int i = 0; i < c->n_in && k + 64 < n; i++) {
        if (i) buf[k++] = ',';
        buf[k++] = '[';
        for (int j = 0; j < c->in[i]->ndim && k + 32 < n; j++)
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", j ? "," : "", (long long)c->in[i]->shape[j]);
        buf[k++] = ']';
    }
    buf[k++] = ']';
    buf[k++] = '|';
    for (int i = 0; i < c->n_in && k + 16 < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", mst_dtype_name(c->in[i]->dtype));
    for (int j = 0; d && j < MST_MAX_ATTR_I && d->attr_i[j] && k + 24 < n; j++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", j ? "," : "|i:", (long long)c->attrs.i[j]);
    for (int j = 0; d && j < MST_MAX_ATTR_F && d->attr_f[j] && k + 32 < n; j++)
        k += (size_t)snprintf(buf + k, n - k, "%s%.17g", j ? "," : "|f:", c->attrs.f[j]);
    buf[k < n ? k : n - 1] = '\0';
}

static void sig_text(const void *arg, char *buf, size_t n) { mst_op_signature(arg, buf, n); }

uint64_t mst_op_signature_key(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    uint64_t h = 1469598103934665603ull;        /* FNV-1a over what mst_op_signature prints */
    h = (h ^ (uint64_t)c->op) * 1099511628211ull;
    h = (h ^ (uint64_t)c->n_in) * 1099511628211ull;
    for (int i = 0; i < c->n_in; i++) {
        h = (h ^ (uint64_t)c->in[i]->dtype) * 1099511628211ull;
        h = (h ^ (uint64_t)c->in[i]->ndim) * 1099511628211ull;
        for (int j = 0; j < c->in[i]->ndim; j++) h = (h ^ (uint64_t)c->in[i]->shape[j]) * 1099511628211ull;
    }
    for (int j = 0; d && j < MST_MAX_ATTR_I && d->attr_i[j]; j++) h = (h ^ (uint64_t)c->attrs.i[j]) * 1099511628211ull;
    for (int j = 0; d && j < MST_MAX_ATTR_F && d->attr_f[j]; j++) {
        uint64_t bits;
        memcpy(&bits, &c->attrs.f[j], sizeof(bits));
        h = (h ^ bits) * 1099511628211ull;
    }
    return h;
}

/* The context's backend answers (runtime/device.h); on the CPU the provider choice (builtin,
 * oneDNN) is runtime/backend/kernel_choice.c's. */
mst_kernel_fn mst_op_kernel(const mst_ctx *ctx, mst_op op, mst_dtype key) { return ctx->backend->kernel(ctx, op, key); }

mst_status mst_dispatch(mst_ctx *ctx, mst_op op, int n_in, mst_tensor *const in[], const mst_attrs *attrs,
                        mst_tensor *out[]) {
    if ((unsigned)op >= MST_OP_COUNT || !mst_op_table[op])
        return mst_ctx_fail(ctx, MST_ERR_UNSUPPORTED, "op %d is not available in this build", (int)op);
    const mst_op_desc *d = mst_op_table[op];
    uint32_t prof_name = ctx->prof_op_names[op];
    mst_prof_op_begin(MST_CAT_DISPATCH, prof_name, op);

    mst_op_call c;
    c.op = op;
    c.prof_seq = 0;
    c.n_out = d->n_outputs;
    memset(c.out, 0, sizeof(c.out));
    if (attrs) c.attrs = *attrs;
    else memset(&c.attrs, 0, sizeof(c.attrs));

    mst_status s = check_args(ctx, d, &c, n_in, in);
    /* mixed precision first: cast float inputs to the op's amp dtype (runtime/amp/autocast.c); then
     * promotion has nothing left to do for them. The other order turned conv2d(half x, f32 weight)
     * into a cast of x up to f32 and back down — two copies, both kept for backward. */
    if (s == MST_OK && ctx->autocast && ctx->amp_level > 0) s = mst_amp_cast_inputs(ctx, &c);
    if (s == MST_OK && (d->flags & MST_OPF_PROMOTE)) s = promote(ctx, &c);

    mst_meta meta[MST_MAX_OP_OUTPUTS];
    if (s == MST_OK) s = d->infer(ctx, &c, meta);

    mst_kernel_fn kernel = NULL;
    if (s == MST_OK && !(d->flags & MST_OPF_VIEW)) {
        mst_dtype key = c.n_in > 0 ? c.in[d->dtype_arg]->dtype : meta[0].dtype;
        kernel = mst_op_kernel(ctx, op, key);
        if (!kernel)
            s = mst_op_fail(ctx, &c, MST_ERR_DTYPE, "no %s kernel for dtype %s", ctx->backend->name, mst_dtype_name(key));
    }

    /* graph mode: while tracing, outputs are shape-only and the call is recorded, not run */
    bool tracing = ctx->tracer != NULL;
    for (int k = 0; s == MST_OK && k < c.n_out; k++) {
        c.out[k] = (d->flags & MST_OPF_VIEW) ? mst_tensor_view(ctx, c.in[0], meta[k].ndim, meta[k].shape)
                   : tracing                 ? mst_tensor_meta_new(ctx, meta[k].dtype, meta[k].ndim, meta[k].shape)
                                             : mst_tensor_new(ctx, meta[k].dtype, meta[k].ndim, meta[k].shape);
        if (!c.out[k]) s = ctx->status;
    }
    if (s == MST_OK && tracing) s = mst_trace_record(ctx, &c);

    if (s == MST_OK && kernel && !tracing) {
        if (mst_prof_on(MST_PROF_LEVEL_OPS)) {     /* shapes, dtypes and the forward-backward link for the trace */
            uint64_t prep = mst_prof_prep_begin();
            int64_t bwd = mst_prof_flow_backward_of();
            if (!bwd && ctx->grad_enabled && d->backward) c.prof_seq = mst_prof_flow_next();
            uint32_t sig = mst_prof_intern_sig(mst_op_signature_key(&c), sig_text, &c);
            mst_prof_prep_end(prep);
            mst_prof_kernel_begin(prof_name, op, sig, bwd ? -bwd : c.prof_seq);
        }
        s = kernel(ctx, &c);
        mst_prof_event *end = mst_prof_on(MST_PROF_LEVEL_OPS) ? mst_prof_record_(MST_EV_END, MST_CAT_KERNEL, prof_name, op, 0, 0) : NULL;
        if (end) {      /* counted after the kernel's end is stamped: the counting is not kernel time */
            uint64_t prep = mst_prof_prep_begin();
            end->a = mst_op_flops(&c);
            end->b = mst_op_bytes(&c);
            mst_prof_prep_end(prep);
        }
    }

    if (s == MST_OK && ctx->grad_enabled && d->backward) {
        bool needs_grad = false;
        for (int i = 0; i < c.n_in; i++)
            needs_grad |= c.in[i]->requires_grad && !(d->nondiff >> i & 1);
        if (needs_grad) {
            for (int k = 0; k < c.n_out; k++) c.out[k]->requires_grad = mst_dtype_is_float(c.out[k]->dtype);
            mst_tape_record(ctx, &c);
        }
    }

    /* O1 allow-list ops hand their float outputs back in f32 */
    if (s == MST_OK && ctx->autocast && ctx->amp_level > 0) s = mst_amp_cast_outputs(ctx, &c);
    for (int k = 0; k < d->n_outputs; k++) out[k] = s == MST_OK ? c.out[k] : NULL;
    mst_prof_op_end(MST_CAT_DISPATCH, prof_name, op);
    return s;
}

mst_tensor *mst_dispatch1(mst_ctx *ctx, mst_op op, int n_in, mst_tensor *const in[], const mst_attrs *attrs) {
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    return mst_dispatch(ctx, op, n_in, in, attrs, out) == MST_OK ? out[0] : NULL;
}
