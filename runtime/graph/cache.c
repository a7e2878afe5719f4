/* cache.c — the plan cache: one compiled plan per input signature (see graph.h).
 *
 * A signature is the inputs' dtypes and shapes (dim 0 left out with a dynamic batch) plus the
 * autocast setting, since autocast changes which casts the trace records. Compiling = tracing
 * the function under a tracer (shape-only tensors, no kernels), running the passes, planning
 * the arena and building the executor, all timed and inside one MST_CAT_COMPILE range.
 */
#include "runtime/graph/graph.h"

#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/autograd.h"
#include "runtime/graph/exec.h"
#include "runtime/graph/ir.h"
#include "runtime/graph/passes.h"
#include "runtime/graph/plan.h"
#include "runtime/graph/trace.h"
#include "runtime/layout.h"

typedef struct {
    int n_in;
    mst_dtype dtype[MST_GRAPH_MAX_IO];
    int ndim[MST_GRAPH_MAX_IO];
    int64_t shape[MST_GRAPH_MAX_IO][MST_MAX_DIMS];
    int amp_level;
    mst_dtype amp_dtype;
} signature;

typedef struct {
    signature sig;
    mst_graph *traced, *g;      /* before and after the passes */
    mst_graph_plan plan;
    mst_graph_exec *ex;
} plan_entry;

struct mst_graph_cache {
    mst_ctx *ctx;
    char name[64];
    mst_graph_fn fn;
    void *arg;
    mst_graph_options opt;
    plan_entry *entries;
    int n_entries;
    int last;
    int64_t compile_count;
    double compile_ms;
    int step_threads_pin;           /* mst_step_threads_pin for every plan (a resumed run's), 0 none */
};

mst_graph_cache *mst_graph_cache_new(mst_ctx *ctx, const char *name, mst_graph_fn fn, void *arg,
                                     const mst_graph_options *opt) {
    if (!fn) { mst_ctx_fail(ctx, MST_ERR_ARG, "graph cache: step function is NULL"); return NULL; }
    if (opt && opt->dynamic_batch && opt->max_batch < 1) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "graph cache %s: dynamic_batch needs max_batch >= 1, got %lld", name ? name : "",
                     (long long)opt->max_batch);
        return NULL;
    }
    mst_graph_cache *gc = calloc(1, sizeof(*gc));
    if (!gc) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: graph cache"); return NULL; }
    gc->ctx = ctx;
    snprintf(gc->name, sizeof(gc->name), "%s", name ? name : "graph");
    gc->fn = fn;
    gc->arg = arg;
    if (opt) gc->opt = *opt;
    gc->last = -1;
    return gc;
}

static void entry_free(plan_entry *e) {
    mst_graph_exec_free(e->ex);
    mst_graph_plan_free(&e->plan);
    mst_graph_free(e->g);
    mst_graph_free(e->traced);
}

void mst_graph_cache_free(mst_graph_cache *gc) {
    if (!gc) return;
    for (int i = 0; i < gc->n_entries; i++) entry_free(&gc->entries[i]);
    free(gc->entries);
    free(gc);
}

static mst_status make_signature(mst_graph_cache *gc, mst_tensor *const in[], int n_in, signature *s) {
    mst_ctx *ctx = gc->ctx;
    memset(s, 0, sizeof(*s));
    if (n_in < 0 || n_in > MST_GRAPH_MAX_IO)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "graph %s: %d inputs, expected 0..%d", gc->name, n_in, MST_GRAPH_MAX_IO);
    s->n_in = n_in;
    s->amp_level = ctx->amp_level;
    s->amp_dtype = ctx->amp_dtype;
    for (int i = 0; i < n_in; i++) {
        const mst_tensor *t = in[i];
        char d[96];
        if (!t) return ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "graph %s: input %d is NULL", gc->name, i);
        if (mst_tensor_is_meta(t))
            return mst_ctx_fail(ctx, MST_ERR_ARG, "graph %s: input %d %s has no data", gc->name, i, mst_tensor_desc(t, d, sizeof(d)));
        s->dtype[i] = t->dtype;
        s->ndim[i] = t->ndim;
        memcpy(s->shape[i], t->shape, sizeof(s->shape[i]));
        if (gc->opt.dynamic_batch) {
            if (t->ndim < 1 || t->shape[0] > gc->opt.max_batch || t->shape[0] < 1)
                return mst_ctx_fail(ctx, MST_ERR_SHAPE, "graph %s: input %d %s: dim 0 is the batch, expected 1..%lld",
                                    gc->name, i, mst_tensor_desc(t, d, sizeof(d)), (long long)gc->opt.max_batch);
            s->shape[i][0] = -1;
        }
    }
    return MST_OK;
}

/* Trace the function on shape-only inputs into g; outputs become graph outputs. */
static mst_status trace(mst_graph_cache *gc, const signature *sig, mst_graph *g) {
    mst_ctx *ctx = gc->ctx;
    if (ctx->tracer) return mst_ctx_fail(ctx, MST_ERR_UNSUPPORTED, "graph %s: cannot trace inside another trace", gc->name);
    mst_tracer *tr = mst_tracer_new(ctx, g);
    if (!tr) return ctx->status;
    mst_rng saved_rng = ctx->rng;           /* the trace draws seeds; the runs must draw the same ones eager would */
    mst_pool_push(ctx);
    mst_tensor *in[MST_GRAPH_MAX_IO], *out[MST_GRAPH_MAX_IO];
    int n_out = 0;
    mst_status s = MST_OK;
    for (int i = 0; i < sig->n_in && s == MST_OK; i++) {
        int64_t shape[MST_MAX_DIMS];
        memcpy(shape, sig->shape[i], sizeof(shape));
        if (gc->opt.dynamic_batch) shape[0] = gc->opt.max_batch;
        in[i] = mst_tensor_meta_new(ctx, sig->dtype[i], sig->ndim[i], shape);
        if (!in[i]) s = ctx->status;
        else mst_trace_bind_input(tr, in[i], i);
    }
    if (s == MST_OK) {
        ctx->tracer = tr;
        s = gc->fn(ctx, gc->arg, in, sig->n_in, out, &n_out);
        if (s == MST_OK) s = ctx->status;
        if (s == MST_OK && (n_out < 0 || n_out > MST_GRAPH_MAX_IO))
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "graph %s: step returned %d outputs, expected 0..%d", gc->name, n_out, MST_GRAPH_MAX_IO);
        for (int k = 0; s == MST_OK && k < n_out; k++) {
            int v = out[k] ? mst_trace_value_of(tr, out[k]) : -1;
            if (v < 0) s = ctx->status != MST_OK ? ctx->status : mst_ctx_fail(ctx, MST_ERR_ARG, "graph %s: output %d is NULL", gc->name, k);
            else mst_graph_add_output(g, v);
        }
    }
    mst_pool_pop(ctx);                      /* releases the shape-only tensors while the tracer still forgets them */
    mst_tape_clear(ctx);
    ctx->tracer = NULL;
    ctx->rng = saved_rng;
    mst_tracer_free(tr);
    return s;
}

/* The layout pass's question for op node n (runtime/layout.h), asked on zero-filled plain tensors
 * of the traced shapes (persistent values: their own tensors), which the kernel choice may time. */
static mst_blocked_how node_blocked_how(void *arg, const mst_graph *g, const mst_gnode *n) {
    mst_ctx *ctx = arg;
    mst_op_call c = {.op = n->op, .n_in = n->n_in, .n_out = n->n_out, .attrs = n->attrs};
    mst_pool_push(ctx);
    bool ok = true;
    for (int p = 0; p < n->n_in + n->n_out && ok; p++) {
        const mst_gvalue *x = &g->values[p < n->n_in ? n->in[p] : n->out[p - n->n_in]];
        mst_tensor *t = x->kind == MST_GV_PERSISTENT || x->kind == MST_GV_CONSTANT
                            ? x->tensor
                            : mst_tensor_zeros(ctx, x->dtype, x->ndim, x->shape);
        if (p < n->n_in) c.in[p] = t;
        else c.out[p - n->n_in] = t;
        ok = t != NULL;
    }
    mst_blocked_how how = ok ? mst_layout_call_blocked_how(ctx, &c) : MST_BLOCKED_COPIES;
    mst_ctx_clear_error(ctx);
    mst_pool_pop(ctx);
    return how;
}

static mst_status compile(mst_graph_cache *gc, const signature *sig, plan_entry *e) {
    mst_ctx *ctx = gc->ctx;
    memset(e, 0, sizeof(*e));
    e->sig = *sig;
    e->traced = mst_graph_new(gc->name);
    mst_status s = trace(gc, sig, e->traced);
    if (s != MST_OK) return s;
    e->g = mst_graph_clone(e->traced);
    if (gc->opt.optimize) mst_graph_optimize_skipping(e->g, gc->opt.skip_passes, NULL);
    else mst_graph_compact(e->g);
    if (gc->opt.optimize && !(gc->opt.skip_passes & MST_PASS_BLOCKED_LAYOUT) && mst_layout_blocked_allowed(ctx))
        mst_pass_blocked_layout(e->g, gc->opt.blocked_everywhere ? NULL : node_blocked_how, ctx);
    mst_graph_plan_build(e->g, &e->plan);
    MST_ASSERT(mst_graph_plan_check(e->g, &e->plan) == 0);
    e->ex = mst_graph_exec_new(ctx, e->g, &e->plan, gc->opt.dynamic_batch ? gc->opt.max_batch : -1);
    return e->ex ? MST_OK : ctx->status;
}

static bool sig_equal(const signature *a, const signature *b) {
    if (a->n_in != b->n_in || a->amp_level != b->amp_level || a->amp_dtype != b->amp_dtype) return false;
    for (int i = 0; i < a->n_in; i++)
        if (a->dtype[i] != b->dtype[i] || !mst_shape_equal(a->ndim[i], a->shape[i], b->ndim[i], b->shape[i])) return false;
    return true;
}

static int find_or_compile(mst_graph_cache *gc, const signature *sig) {
    for (int i = 0; i < gc->n_entries; i++)
        if (sig_equal(&gc->entries[i].sig, sig)) return i;
    plan_entry *grown = realloc(gc->entries, ((size_t)gc->n_entries + 1) * sizeof(*grown));
    if (!grown) { mst_ctx_fail(gc->ctx, MST_ERR_OOM, "out of memory: graph cache"); return -1; }
    gc->entries = grown;
    uint32_t name = mst_prof_intern("graph_compile");
    mst_prof_begin(MST_CAT_COMPILE, name, -1);
    double t0 = (double)mst_prof_now_ns() * 1e-6;
    plan_entry *e = &gc->entries[gc->n_entries];
    mst_status s = compile(gc, sig, e);
    gc->compile_ms += (double)mst_prof_now_ns() * 1e-6 - t0;
    mst_prof_end(MST_CAT_COMPILE, name, -1);
    if (s != MST_OK) {
        entry_free(e);
        return -1;
    }
    gc->compile_count++;
    /* The step's thread budget: a plan of another shape than the first (an epoch's smaller last
     * batch, run once an epoch) takes the first plan's instead of trying its own (18 runs: as many
     * epochs of alternating budgets, which a resumed run restarted at other steps), all threads
     * while the first is still deciding; eager mode's smaller batches do the same. */
    if (gc->step_threads_pin) {
        mst_graph_exec_pin_step_threads(e->ex, gc->step_threads_pin, "the checkpoint resumed");
    } else if (gc->n_entries > 0) {
        const int first = mst_graph_exec_step_threads(gc->entries[0].ex);
        mst_graph_exec_pin_step_threads(e->ex, first == 1 ? MST_STEP_THREADS_ONE : MST_STEP_THREADS_ALL,
                                        first ? "the first batch shape's verdict" : "the first batch shape's trial, not decided yet");
    }
    return gc->n_entries++;
}

mst_status mst_graph_cache_run(mst_graph_cache *gc, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    mst_ctx *ctx = gc->ctx;
    if (n_out) *n_out = 0;
    signature sig;
    mst_status s = make_signature(gc, in, n_in, &sig);
    if (s != MST_OK) return s;
    int i = find_or_compile(gc, &sig);
    if (i < 0) return ctx->status;
    gc->last = i;
    plan_entry *e = &gc->entries[i];
    s = mst_graph_exec_run(e->ex, in, n_in);
    if (s != MST_OK) return s;
    for (int k = 0; k < e->g->n_outputs; k++) {
        mst_tensor *v = mst_graph_exec_value(e->ex, e->g->outputs[k]);
        mst_tensor *copy = mst_tensor_new(ctx, v->dtype, v->ndim, v->shape);
        if (!copy) return ctx->status;
        memcpy(mst_tensor_data(copy), mst_tensor_data(v), mst_tensor_nbytes(v));
        if (out) out[k] = copy;
    }
    if (n_out) *n_out = e->g->n_outputs;
    return MST_OK;
}

void mst_graph_cache_stats(const mst_graph_cache *gc, mst_graph_stats *st) {
    memset(st, 0, sizeof(*st));
    st->compile_count = gc->compile_count;
    st->compile_ms = gc->compile_ms;
    if (gc->last < 0) return;
    const plan_entry *e = &gc->entries[gc->last];
    st->arena_bytes = e->plan.arena_bytes;
    st->intermediate_bytes = e->plan.intermediate_bytes;
    for (int c = 0; c < MST_MEM_COUNT; c++) st->arena_cat_bytes[c] = e->plan.live_peak[c];
    st->nodes_traced = e->traced->n_nodes;
    st->nodes_after_passes = mst_graph_live_nodes(e->g);
    st->kernels = mst_graph_exec_kernels(e->ex);
    st->step_threads = mst_graph_exec_step_threads(e->ex);
    st->blocked_values = 0;
    for (int v = 0; v < e->g->n_values; v++) st->blocked_values += e->g->values[v].layout == MST_LAYOUT_NCHW16C;
}

int mst_graph_cache_first_step_threads(const mst_graph_cache *gc) {
    return gc->n_entries > 0 ? mst_graph_exec_step_threads(gc->entries[0].ex) : 0;
}

void mst_graph_cache_pin_step_threads(mst_graph_cache *gc, int pin) { gc->step_threads_pin = pin; }

bool mst_graph_cache_dump(const mst_graph_cache *gc, FILE *f, bool after_passes) {
    if (gc->last < 0) return false;
    mst_graph_dump(after_passes ? gc->entries[gc->last].g : gc->entries[gc->last].traced, f);
    return true;
}

bool mst_graph_cache_describe_fusions(const mst_graph_cache *gc, FILE *f) {
    if (gc->last < 0) return false;
    mst_graph_exec_describe_fusions(gc->entries[gc->last].ex, f);
    return true;
}

bool mst_graph_cache_dump_dot(const mst_graph_cache *gc, FILE *f, bool after_passes) {
    if (gc->last < 0) return false;
    mst_graph_dump_dot(after_passes ? gc->entries[gc->last].g : gc->entries[gc->last].traced, f);
    return true;
}

int64_t mst_graph_cache_flops(const mst_graph_cache *gc) {
    return gc->last < 0 ? 0 : mst_graph_exec_flops(gc->entries[gc->last].ex);
}
