/* step_runner.c — eager or graph execution of the step functions (see step_runner.h). */
#include "runtime/step_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/graph/step_threads.h"
#include "runtime/tensor.h"
#include "util/hash.h"

struct mst_step_runner {
    mst_ctx *ctx;
    const mst_step_spec *spec;
    mst_graph_cache *train, *eval;     /* NULL in eager mode */
    /* eager mode: the training step's thread budget (step_threads.h), tried on the first batch's
     * signature; graph plans keep their own */
    mst_step_threads threads;
    bool threads_started, threads_quiet;
    uint64_t threads_key;              /* the verdict file's key: the step, its inputs, the budget */
    uint64_t threads_batch;            /* the inputs' shapes and dtypes the trial times */
    int train_pin;                     /* eager: a resumed checkpoint's budget (mst_step_threads_pin), 0 none */
};

/* in = x[0..n), y[0..n); out = loss[, found_inf][, grad_norm] as the spec has them */
static mst_status traced_train(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    const mst_step_spec *spec = arg;
    int n = n_in / 2;
    mst_step_outputs o;
    mst_status s = mst_step_run(ctx, spec, in, in + n, &o);
    if (s != MST_OK) return s;
    int k = 0;
    out[k++] = o.loss;
    if (o.found_inf) out[k++] = o.found_inf;
    if (o.grad_norm) out[k++] = o.grad_norm;
    *n_out = k;
    return MST_OK;
}

static mst_status traced_eval(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    const mst_step_spec *spec = arg;
    (void)n_in;
    mst_status s = mst_step_eval(ctx, spec->model, in[0], in[1], &out[0], &out[1]);
    *n_out = 2;
    return s;
}

mst_step_runner *mst_step_runner_new(mst_ctx *ctx, const mst_step_spec *spec, bool graph, bool dynamic_batch,
                                     int64_t max_batch) {
    mst_step_runner *r = calloc(1, sizeof(*r));
    if (!r) {
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory creating the step runner");
        return NULL;
    }
    r->ctx = ctx;
    r->spec = spec;
    if (!graph) return r;
    if (2 * spec->accumulate > MST_GRAPH_MAX_IO) {
        mst_ctx_fail(ctx, MST_ERR_UNSUPPORTED, "graph mode: accumulate_steps %d needs %d graph inputs, at most %d are supported",
                     spec->accumulate, 2 * spec->accumulate, MST_GRAPH_MAX_IO);
        free(r);
        return NULL;
    }
    mst_graph_options opt = {.dynamic_batch = dynamic_batch, .max_batch = max_batch, .optimize = true};
    r->train = mst_graph_cache_new(ctx, "train_step", traced_train, (void *)spec, &opt);
    r->eval = r->train ? mst_graph_cache_new(ctx, "eval_step", traced_eval, (void *)spec, &opt) : NULL;
    if (!r->eval) {
        mst_step_runner_free(r);
        return NULL;
    }
    return r;
}

void mst_step_runner_free(mst_step_runner *r) {
    if (!r) return;
    mst_graph_cache_free(r->train);
    mst_graph_cache_free(r->eval);
    free(r);
}

static uint64_t hash_tensor_shape(uint64_t h, const mst_tensor *t) {
    const int32_t head[2] = {(int32_t)t->dtype, t->ndim};
    h = mst_fnv1a(h, head, sizeof(head));
    return mst_fnv1a(h, t->shape, (size_t)t->ndim * sizeof(t->shape[0]));
}

/* The micro-batches' shapes and dtypes: a step on another batch (an epoch's last, smaller one)
 * takes another time and is not part of the trial. */
static uint64_t batch_signature(const mst_step_spec *spec, mst_tensor *const x[], mst_tensor *const y[]) {
    uint64_t h = MST_FNV1A_OFFSET;
    for (int k = 0; k < spec->accumulate; k++) h = hash_tensor_shape(hash_tensor_shape(h, x[k]), y[k]);
    return h;
}

/* What the eager step's time depends on besides the machine: the model (its name, parameters and
 * buffers), the step's settings, the batch and the context's budget, kernels, precision and the
 * loader's workers beside it. */
static uint64_t eager_step_key(const mst_ctx *ctx, const mst_step_spec *spec, uint64_t batch) {
    const mst_model *m = spec->model;
    uint64_t h = mst_fnv1a(MST_FNV1A_OFFSET, "eager", 5);
    h = mst_fnv1a(h, m->name, strnlen(m->name, sizeof(m->name)));
    for (int i = 0; i < m->n_params; i++) h = hash_tensor_shape(h, m->params[i]);
    for (int i = 0; i < m->n_buffers; i++) h = hash_tensor_shape(h, m->buffers[i]);
    const int32_t settings[9] = {ctx->n_threads, ctx->kernels, ctx->force_ref, ctx->amp_level, (int32_t)ctx->amp_dtype,
                                 spec->accumulate, spec->scaler != NULL, spec->clip_grad_norm > 0, ctx->loader_threads};
    h = mst_fnv1a(h, settings, sizeof(settings));
    return mst_fnv1a(h, &batch, sizeof(batch));
}

/* Eager mode's thread budget, as graph mode's plans have theirs (step_threads.h): forced, on file
 * for this machine, or measured by the first steps on the first batch's shapes. Not tried in a
 * data-parallel process: its steps wait for the other ranks' gradients, which the trial would time. */
static void start_eager_threads(mst_step_runner *r, mst_tensor *const x[], mst_tensor *const y[]) {
    mst_ctx *ctx = r->ctx;
    r->threads_started = true;
    const bool resumed = ctx->step_threads_pin == MST_STEP_THREADS_AUTO && r->train_pin;     /* the job's pin wins */
    mst_step_threads_init(&r->threads, ctx->dp ? 1 : ctx->n_threads,
                          (mst_step_threads_pin)(resumed ? r->train_pin : ctx->step_threads_pin),
                          resumed ? "the checkpoint resumed" : NULL);
    if (mst_step_threads_decided(&r->threads)) return;
    r->threads_batch = batch_signature(r->spec, x, y);
    r->threads_key = eager_step_key(ctx, r->spec, r->threads_batch);
    bool one = false;
    if (mst_plan_verdict_use(r->threads_key, &one, &r->threads_quiet)) {
        mst_step_threads_set(&r->threads, one);
        if (mst_kernels_log_on()) {
            fprintf(stderr, "mstune eager: ");
            mst_step_threads_describe(&r->threads, ctx->n_threads, stderr);
        }
    }
}

static mst_status eager_train(mst_step_runner *r, mst_tensor *const x[], mst_tensor *const y[], mst_step_outputs *out) {
    mst_ctx *ctx = r->ctx;
    if (!r->threads_started) start_eager_threads(r, x, y);
    mst_step_threads *v = &r->threads;
    const bool decided = mst_step_threads_decided(v);
    const bool deciding = !decided && batch_signature(r->spec, x, y) == r->threads_batch;
    const bool serial = (decided || deciding) && mst_step_threads_next(v);
    const bool was_serial = ctx->serial;
    ctx->serial = was_serial || serial;
    const uint64_t t0 = deciding ? mst_prof_now_ns() : 0;
    mst_status s = mst_step_run(ctx, r->spec, x, y, out);
    ctx->serial = was_serial;
    if (!deciding || s != MST_OK) return s;
    mst_step_threads_record(v, serial, (double)(mst_prof_now_ns() - t0));
    if (!mst_step_threads_decided(v)) return s;
    if (mst_step_threads_measured_new(v))
        mst_plan_verdict_put(r->threads_key, ctx->n_threads, v->serial, v->median_ns[0], v->median_ns[1],
                             r->threads_quiet && mst_machine_quiet(), r->spec->model->name);
    if (mst_kernels_log_on()) {
        fprintf(stderr, "mstune eager: ");
        mst_step_threads_describe(v, ctx->n_threads, stderr);
    }
    return s;
}

mst_status mst_step_runner_train(mst_step_runner *r, mst_tensor *const x[], mst_tensor *const y[], mst_step_outputs *out) {
    if (!r->train) return eager_train(r, x, y, out);
    int n = r->spec->accumulate;
    mst_tensor *in[MST_GRAPH_MAX_IO], *res[MST_GRAPH_MAX_IO];
    for (int k = 0; k < n; k++) {
        in[k] = x[k];
        in[n + k] = y[k];
    }
    int n_out = 0;
    mst_status s = mst_graph_cache_run(r->train, in, 2 * n, res, &n_out);
    if (s != MST_OK) return s;
    memset(out, 0, sizeof(*out));
    int k = 0;
    out->loss = res[k++];
    if (r->spec->scaler) out->found_inf = res[k++];
    if (r->spec->clip_grad_norm > 0) out->grad_norm = res[k++];
    if (k != n_out)
        return mst_ctx_fail(r->ctx, MST_ERR_INTERNAL, "graph mode: the training plan returned %d outputs, expected %d", n_out, k);
    return MST_OK;
}

void mst_step_runner_set_train_pin(mst_step_runner *r, int pin) {
    if (pin != MST_STEP_THREADS_ALL && pin != MST_STEP_THREADS_ONE) return;
    r->train_pin = pin;
    if (r->train) mst_graph_cache_pin_step_threads(r->train, pin);
}

int mst_step_runner_train_pin(const mst_step_runner *r) {
    const int n = r->ctx->n_threads;
    const int threads = r->train ? mst_graph_cache_first_step_threads(r->train) : mst_step_runner_eager_threads(r);
    if (n <= 1 || threads == 0) return MST_STEP_THREADS_AUTO;
    return threads == 1 ? MST_STEP_THREADS_ONE : MST_STEP_THREADS_ALL;
}

mst_status mst_step_runner_eval(mst_step_runner *r, mst_tensor *x, mst_tensor *y, mst_tensor **logits, mst_tensor **loss) {
    if (!r->eval) return mst_step_eval(r->ctx, r->spec->model, x, y, logits, loss);
    mst_tensor *res[MST_GRAPH_MAX_IO];
    int n_out = 0;
    mst_status s = mst_graph_cache_run(r->eval, (mst_tensor *[]){x, y}, 2, res, &n_out);
    if (s != MST_OK) return s;
    *logits = res[0];
    *loss = res[1];
    return MST_OK;
}

mst_graph_cache *mst_step_runner_train_cache(const mst_step_runner *r) { return r->train; }

int mst_step_runner_eager_threads(const mst_step_runner *r) {
    if (r->train || !r->threads_started || !mst_step_threads_decided(&r->threads)) return 0;
    return r->threads.serial ? 1 : r->ctx->n_threads;
}

void mst_step_runner_stats(const mst_step_runner *r, mst_graph_stats *st) {
    memset(st, 0, sizeof(*st));
    if (!r->train) return;
    mst_graph_stats a, b;
    mst_graph_cache_stats(r->train, &a);
    mst_graph_cache_stats(r->eval, &b);
    *st = a;
    st->step_threads = mst_graph_cache_first_step_threads(r->train);   /* the first batch shape's, not a last smaller batch's */
    st->compile_count = a.compile_count + b.compile_count;
    st->compile_ms = a.compile_ms + b.compile_ms;
    if (b.arena_bytes > st->arena_bytes) st->arena_bytes = b.arena_bytes;
    for (int c = 0; c < MST_MEM_COUNT; c++)     /* per category, the larger plan's peak live bytes */
        if (b.arena_cat_bytes[c] > st->arena_cat_bytes[c]) st->arena_cat_bytes[c] = b.arena_cat_bytes[c];
}
