/* step_runner.c — eager or graph execution of the step functions (see step_runner.h). */
#include "runtime/step_runner.h"

#include <stdlib.h>
#include <string.h>

struct mst_step_runner {
    mst_ctx *ctx;
    const mst_step_spec *spec;
    mst_graph_cache *train, *eval;     /* NULL in eager mode */
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

mst_status mst_step_runner_train(mst_step_runner *r, mst_tensor *const x[], mst_tensor *const y[], mst_step_outputs *out) {
    if (!r->train) return mst_step_run(r->ctx, r->spec, x, y, out);
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

void mst_step_runner_stats(const mst_step_runner *r, mst_graph_stats *st) {
    memset(st, 0, sizeof(*st));
    if (!r->train) return;
    mst_graph_stats a, b;
    mst_graph_cache_stats(r->train, &a);
    mst_graph_cache_stats(r->eval, &b);
    *st = a;
    st->compile_count = a.compile_count + b.compile_count;
    st->compile_ms = a.compile_ms + b.compile_ms;
    if (b.arena_bytes > st->arena_bytes) st->arena_bytes = b.arena_bytes;
    for (int c = 0; c < MST_MEM_COUNT; c++)     /* per category, the larger plan's peak live bytes */
        if (b.arena_cat_bytes[c] > st->arena_cat_bytes[c]) st->arena_cat_bytes[c] = b.arena_cat_bytes[c];
}
