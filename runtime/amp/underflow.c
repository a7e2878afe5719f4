/* underflow.c — the partial-underflow probe (see underflow.h): an f32 reference backward beside
 * the job's half-precision one on the same batch, compared element by element.
 *
 * Trade-off: two extra eager forward + backward passes per sampled step (the trainer samples every
 * N-th step, runtime/trainer.h), in exchange for a measurement that sees underflow anywhere in the
 * backward chain rather than guessing it from a threshold on the final values. */
#include "runtime/amp/underflow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/amp/autocast.h"
#include "runtime/amp/half.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"

#define CHUNK 1024

/* Smallest normal magnitude of the half type: 2^-14 (f16), 2^-126 (bf16, f32's). */
static float half_min_normal(mst_dtype half) { return half == MST_DTYPE_F16 ? 0x1p-14f : 0x1p-126f; }

void mst_underflow_count(mst_dtype half_type, const float *ref, const float *half, size_t n, mst_underflow_counts *c) {
    uint16_t h[CHUNK];
    float back[CHUNK];
    const float tiny = half_min_normal(half_type);
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        size_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        /* the reference rounded to the half type exactly as a cast would (nearest even, subnormals kept) */
        mst_half_from_f32(half_type, ref + i0, h, m);
        mst_half_to_f32(half_type, h, back, m);
        for (size_t i = 0; i < m; i++) {
            float r = ref[i0 + i];
            if (r == 0 || !isfinite(r)) continue;
            c->ref_nonzero++;
            if (half[i0 + i] == 0) c->half_zero++;
            if (back[i] == 0) c->cast_zero++;
            else if (fabsf(back[i]) < tiny) c->cast_subnormal++;
        }
    }
    c->elements += (int64_t)n;
}

double mst_underflow_fraction(const mst_underflow_counts *c) {
    return c->ref_nonzero > 0 ? (double)c->half_zero / (double)c->ref_nonzero : 0;
}

/* What a forward in training mode changes besides the gradients: the buffers (batch-norm running
 * statistics) and the context's random generator (dropout seeds). */
typedef struct {
    void **buf;
    mst_rng rng;
} saved_state;

static mst_status state_save(mst_ctx *ctx, const mst_model *m, saved_state *s) {
    s->rng = ctx->rng;
    s->buf = calloc((size_t)(m->n_buffers > 0 ? m->n_buffers : 1), sizeof(*s->buf));
    if (!s->buf) return mst_ctx_fail(ctx, MST_ERR_OOM, "underflow probe: out of memory saving the model's buffers");
    for (int i = 0; i < m->n_buffers; i++) {
        size_t nb = mst_tensor_nbytes(m->buffers[i]);
        if (!(s->buf[i] = malloc(nb ? nb : 1))) return mst_ctx_fail(ctx, MST_ERR_OOM, "underflow probe: out of memory saving the model's buffers");
        memcpy(s->buf[i], mst_tensor_data(m->buffers[i]), nb);
    }
    return MST_OK;
}

static void state_restore(mst_ctx *ctx, const mst_model *m, const saved_state *s) {
    ctx->rng = s->rng;
    for (int i = 0; s->buf && i < m->n_buffers; i++)
        if (s->buf[i]) memcpy(mst_tensor_data(m->buffers[i]), s->buf[i], mst_tensor_nbytes(m->buffers[i]));
}

static void state_free(const mst_model *m, saved_state *s) {
    for (int i = 0; s->buf && i < m->n_buffers; i++) free(s->buf[i]);
    free(s->buf);
    s->buf = NULL;
}

/* One forward + backward of every micro-batch under the current autocast settings, the loss
 * divided by accumulate and times the scale, as runtime/step.c's micro_step; the parameters'
 * accumulated f32 gradients are copied into g (sum of the params' numel floats; absent gradients
 * are zeros) and then dropped. */
static mst_status pass(mst_ctx *ctx, mst_model *m, const mst_loss_scaler *scaler, int accumulate, mst_tensor *const x[],
                       mst_tensor *const y[], float *g) {
    mst_status s = MST_OK;
    bool grad_was = mst_grad_is_enabled(ctx);
    mst_grad_set_enabled(ctx, true);
    mst_pool_push(ctx);
    for (int k = 0; k < accumulate && s == MST_OK; k++) {
        mst_amp_autocast(ctx, true);
        mst_tensor *loss = mst_model_loss(m, ctx, m->forward(m, ctx, x[k], true), y[k]);
        mst_amp_autocast(ctx, false);
        if (loss && accumulate > 1) loss = mst_scale(ctx, loss, 1.0 / accumulate);
        mst_tensor *seed = loss && scaler ? mst_mul(ctx, loss, mst_loss_scaler_scale(scaler)) : loss;
        s = seed ? mst_backward(ctx, seed) : (ctx->status != MST_OK ? ctx->status : MST_ERR_INTERNAL);
    }
    size_t off = 0;
    for (int i = 0; i < m->n_params; i++) {
        const mst_tensor *p = m->params[i], *gr = p->grad;
        size_t n = (size_t)p->numel;
        if (s == MST_OK && gr && gr->numel == p->numel && gr->dtype == MST_DTYPE_F32) memcpy(g + off, mst_tensor_f32(gr), n * sizeof(float));
        else if (s == MST_OK && gr && gr->numel == p->numel)
            for (size_t j = 0; j < n; j++) g[off + j] = (float)mst_tensor_get(gr, (int64_t)j);
        else memset(g + off, 0, n * sizeof(float));
        off += n;
    }
    mst_zero_grad(m->params, m->n_params);
    mst_amp_cache_clear(ctx);
    mst_pool_pop(ctx);
    mst_grad_set_enabled(ctx, grad_was);
    return s;
}

mst_status mst_underflow_probe(mst_ctx *ctx, mst_model *model, const mst_loss_scaler *scaler, int accumulate,
                               mst_tensor *const x[], mst_tensor *const y[], mst_underflow_counts *c) {
    const int level = ctx->amp_level;
    const mst_dtype half = ctx->amp_dtype;
    if (level <= 0 || !mst_dtype_is_half(half))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "underflow probe: needs an amp level O1..O3 with f16 or bf16 (level %d)", level);
    if (accumulate < 1) return mst_ctx_fail(ctx, MST_ERR_ARG, "underflow probe: accumulate must be >= 1, got %d", accumulate);
    size_t total = 0;
    for (int i = 0; i < model->n_params; i++) total += (size_t)model->params[i]->numel;
    float *gh = malloc(sizeof(float) * (total ? total : 1)), *gr = malloc(sizeof(float) * (total ? total : 1));
    saved_state st = {0};
    mst_status s = gh && gr ? state_save(ctx, model, &st) : mst_ctx_fail(ctx, MST_ERR_OOM, "underflow probe: out of memory (%zu gradient values)", total);
    if (s == MST_OK) {
        s = pass(ctx, model, scaler, accumulate, x, y, gh);         /* the job's numerics */
        state_restore(ctx, model, &st);
    }
    if (s == MST_OK && (s = mst_amp_set(ctx, 0, half)) == MST_OK) {
        s = pass(ctx, model, scaler, accumulate, x, y, gr);         /* the f32 reference */
        state_restore(ctx, model, &st);
        mst_status s2 = mst_amp_set(ctx, level, half);
        if (s == MST_OK) s = s2;
    }
    if (s == MST_OK) mst_underflow_count(half, gr, gh, total, c);
    state_free(model, &st);
    free(gh);
    free(gr);
    return s;
}

bool mst_underflow_within_budget(int64_t done, double first_ns, double last_ns, double probes_ns, double loop_ns,
                                 double budget) {
    if (done < 2 || budget >= 1) return true;
    return probes_ns - first_ns + last_ns <= budget * loop_ns;
}
