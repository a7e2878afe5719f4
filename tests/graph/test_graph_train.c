/* test_graph_train.c — graph mode against eager mode on real training steps: an MLP (with
 * dropout, so the per-run seeds are checked too) for 20 SGD-momentum steps, the zoo's CNN
 * (conv, batch norm with running statistics, residual adds, max pool) for a few steps at batch 8,
 * dynamic batch (one compile for several batch sizes) vs a static signature (a second compile),
 * and the errors for steps that cannot be captured. Two contexts with the same seed build the
 * same model, so eager and graph runs start from the same bits; losses and parameters must agree
 * to 1e-6 relative (they are expected to be bitwise equal). */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/amp/autocast.h"
#include "runtime/graph/exec.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/passes.h"
#include "runtime/graph/plan.h"
#include "runtime/graph/trace.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "workloads/zoo.h"

typedef struct {
    mst_ctx *ctx;
    mst_model *model;
    mst_optim *opt;
} trainer;

static void trainer_init(trainer *t, const mst_model_spec *spec, double lr, int n_threads) {
    t->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1234, .n_threads = n_threads});
    char err[256];
    t->model = mst_zoo_model_new(t->ctx, spec, err, sizeof(err));
    if (!t->model) fail_msg("model: %s", err);
    mst_optim_config cfg = mst_optim_defaults(MST_OPTIM_SGD);
    cfg.lr = lr;
    cfg.momentum = 0.9;
    cfg.weight_decay = 1e-4;
    t->opt = mst_optim_new(t->ctx, &cfg, t->model->params, t->model->n_params);
    assert_non_null(t->opt);
    assert_int_equal(mst_optim_set_lr(t->opt, lr), MST_OK);
}

static void trainer_free(trainer *t) {
    mst_optim_free(t->opt);
    mst_model_free(t->model);
    mst_ctx_free(t->ctx);
}

static int g_amp_level;             /* run_pair's amp level (bf16), both sides: train_step autocasts */

/* The traced step: forward, loss, backward, update, zero_grad; no host reads. */
static mst_status train_step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)n_in;
    trainer *t = arg;
    if (g_amp_level) mst_amp_autocast(ctx, true);
    mst_tensor *logits = t->model->forward(t->model, ctx, in[0], true);
    mst_tensor *loss = mst_cross_entropy(ctx, logits, in[1]);
    if (g_amp_level) mst_amp_autocast(ctx, false);
    mst_status s = mst_backward(ctx, loss);
    if (s == MST_OK) s = mst_optim_apply(t->opt, NULL);
    mst_zero_grad(t->model->params, t->model->n_params);
    out[0] = loss;
    *n_out = 1;
    return s;
}

/* A deterministic batch, the same in every context: x in [-1, 1), labels spread over classes. */
static void make_batch(mst_ctx *ctx, const mst_model_spec *spec, int batch, int step, mst_tensor **x, mst_tensor **y) {
    int64_t xs[4] = {batch, spec->in_c, spec->in_h, spec->in_w};
    *x = mst_tensor_new(ctx, MST_DTYPE_F32, 4, xs);
    *y = mst_tensor_new(ctx, MST_DTYPE_I32, 1, (int64_t[]){batch});
    assert_non_null(*x);
    float *px = mst_tensor_f32(*x);
    for (int64_t i = 0; i < (*x)->numel; i++) px[i] = (float)(((i * 7919 + step * 104729) % 2000) / 1000.0 - 1.0);
    for (int i = 0; i < batch; i++) mst_tensor_i32(*y)[i] = (i * 3 + step) % spec->classes;
}

static double eager_step(trainer *t, const mst_model_spec *spec, int batch, int step) {
    mst_pool_push(t->ctx);
    mst_tensor *x, *y, *out[1];
    int n_out;
    make_batch(t->ctx, spec, batch, step, &x, &y);
    assert_int_equal(train_step(t->ctx, t, (mst_tensor *[]){x, y}, 2, out, &n_out), MST_OK);
    mst_optim_count_step(t->opt);
    double loss = mst_tensor_get(out[0], 0);
    mst_pool_pop(t->ctx);
    return loss;
}

static double graph_step(trainer *t, mst_graph_cache *gc, const mst_model_spec *spec, int batch, int step) {
    mst_pool_push(t->ctx);
    mst_tensor *x, *y, *out[4];
    int n_out;
    make_batch(t->ctx, spec, batch, step, &x, &y);
    mst_status s = mst_graph_cache_run(gc, (mst_tensor *[]){x, y}, 2, out, &n_out);
    if (s != MST_OK) fail_msg("graph run: %s", mst_ctx_error(t->ctx));
    assert_int_equal(n_out, 1);
    mst_optim_count_step(t->opt);
    double loss = mst_tensor_get(out[0], 0);
    mst_pool_pop(t->ctx);
    return loss;
}

static void assert_close(double a, double b, const char *what, int i) {
    double tol = 1e-6 * fmax(1.0, fmax(fabs(a), fabs(b)));
    if (!(fabs(a - b) <= tol)) fail_msg("%s %d: eager %.9g vs graph %.9g", what, i, a, b);
}

/* Parameters and buffers (batch-norm running statistics) of both models agree; returns how many
 * elements differ in any bit. */
static int64_t compare_models(const trainer *e, const trainer *g) {
    int64_t diff_bits = 0;
    for (int p = 0; p < e->model->n_params + e->model->n_buffers; p++) {
        bool buf = p >= e->model->n_params;
        const mst_tensor *a = buf ? e->model->buffers[p - e->model->n_params] : e->model->params[p];
        const mst_tensor *b = buf ? g->model->buffers[p - e->model->n_params] : g->model->params[p];
        for (int64_t i = 0; i < a->numel; i++) {
            double x = mst_tensor_get(a, i), y = mst_tensor_get(b, i);
            assert_close(x, y, a->name, (int)i);
            diff_bits += x != y;
        }
    }
    return diff_bits;
}

static int64_t g_blocked_values;    /* the last run_pair's graph: values in nChw16c */

static bool g_blocked_everywhere;  /* run_pair's graph option */
static int g_eager_threads = 2;     /* run_pair's eager context; the graph's has 2 */

/* Trains eager and graph side by side; returns how many losses and parameter elements differ in bits. */
static int64_t run_pair(const mst_model_spec *spec, int batch, int steps, bool optimize, double lr) {
    trainer e, g;
    trainer_init(&e, spec, lr, g_eager_threads);
    trainer_init(&g, spec, lr, 2);
    if (g_amp_level) {
        assert_int_equal(mst_amp_set(e.ctx, g_amp_level, MST_DTYPE_BF16), MST_OK);
        assert_int_equal(mst_amp_set(g.ctx, g_amp_level, MST_DTYPE_BF16), MST_OK);
    }
    mst_graph_options opt = {.optimize = optimize, .blocked_everywhere = g_blocked_everywhere};
    mst_graph_cache *gc = mst_graph_cache_new(g.ctx, "train", train_step, &g, &opt);
    assert_non_null(gc);
    int64_t loss_bits = 0;
    for (int s = 0; s < steps; s++) {
        double le = eager_step(&e, spec, batch, s), lg = graph_step(&g, gc, spec, batch, s);
        assert_true(isfinite(le));
        assert_close(le, lg, "loss at step", s);
        loss_bits += le != lg;
    }
    int64_t param_bits = compare_models(&e, &g);
    mst_graph_stats st;
    mst_graph_cache_stats(gc, &st);
    assert_int_equal(st.compile_count, 1);
    assert_true(st.kernels > 0 && st.arena_bytes > 0 && st.arena_bytes <= st.intermediate_bytes);
    print_message("%s b%d optimize=%d: %lld traced nodes -> %lld, %lld kernels, arena %lld of %lld bytes; "
                  "%lld values in nChw16c; %lld losses and %lld parameter elements not bitwise equal\n",
                  spec->name, batch, optimize, (long long)st.nodes_traced, (long long)st.nodes_after_passes,
                  (long long)st.kernels, (long long)st.arena_bytes, (long long)st.intermediate_bytes,
                  (long long)st.blocked_values, (long long)loss_bits, (long long)param_bits);
    g_blocked_values = st.blocked_values;
    mst_graph_cache_free(gc);
    trainer_free(&e);
    trainer_free(&g);
    return loss_bits + param_bits;
}

static const mst_model_spec k_mlp = {.name = "mlp", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 10,
                                     .hidden1 = 48, .hidden2 = 32, .dropout = 0.2};
static const mst_model_spec k_cnn = {.name = "cnn", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                     .width = 8, .blocks = 2};

/* The fused optimizer split over both threads (forced: the plan-time verdict depends on timing)
 * updates every element as the one-parameter-at-a-time eager updates do, bit for bit. */
static void test_fused_optimizer_split_is_bitwise(void **state) {
    (void)state;
    static const mst_model_spec big = {.name = "mlp", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                       .hidden1 = 256, .hidden2 = 128};
    setenv("MSTUNE_OPTIM_SPLIT", "on", 1);
    int64_t diff = run_pair(&big, 8, 5, true, 0.05);
    unsetenv("MSTUNE_OPTIM_SPLIT");
    assert_int_equal(diff, 0);
}

/* A plan whose step runs on the calling thread alone (the thread verdict, runtime/graph/
 * step_threads.h, forced) is a step of a one-thread context: bitwise equal to eager on one thread,
 * its own kernel verdicts and oneDNN primitives (made for a team of one) included. The wide cnn's
 * convolutions are past oneDNN's threshold for a second thread, so on two threads they would
 * split their reductions otherwise. */
static void test_one_thread_step_is_a_one_thread_context(void **state) {
    (void)state;
    static const mst_model_spec wide = {.name = "cnn", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                        .width = 16, .blocks = 2};
    static const mst_model_spec big = {.name = "mlp", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                       .hidden1 = 256, .hidden2 = 128};
    setenv("MSTUNE_GRAPH_THREADS", "one", 1);
    g_eager_threads = 1;
    int64_t diff = run_pair(&wide, 8, 4, true, 0.02) + run_pair(&big, 16, 5, true, 0.05);
    g_eager_threads = 2;
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    assert_int_equal(diff, 0);
}

static void test_mlp_20_steps(void **state) {
    (void)state;
    run_pair(&k_mlp, 16, 20, true, 0.05);
}

static void test_mlp_20_steps_unoptimized(void **state) {
    (void)state;
    run_pair(&k_mlp, 16, 20, false, 0.05);
}

/* The cnn's graph takes the relu epilogues, the elementwise fusions and the stem's relu_grad
 * folded into its pooling gradient: all of them keep eager's bits. */
static void test_cnn_steps(void **state) {
    (void)state;
    assert_int_equal(run_pair(&k_cnn, 8, 4, true, 0.02), 0);
}

/* Channels of 16 and 32: the convolution chains' activations and gradients lie in nChw16c
 * (runtime/graph/layout.c) where oneDNN is loaded, read and written there by oneDNN's blocked
 * kernels, through plain copies by the builtin ones (blocked_everywhere: whatever each shape's
 * kernel choice is), and by the slab paths of batch norm, max pooling, global pooling and
 * broadcast_to — and the steps stay eager's, bit for bit. Then the default rule (only convolutions
 * on oneDNN's blocked kernels) keeps the bits too. Without oneDNN every value stays plain and the
 * test is the plain one at these widths. */
static void test_cnn_blocked_steps(void **state) {
    (void)state;
    static const mst_model_spec wide = {.name = "cnn", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                        .width = 16, .blocks = 2};
    g_blocked_everywhere = true;
    int64_t diff = run_pair(&wide, 8, 4, true, 0.02);
    g_blocked_everywhere = false;
    assert_int_equal(diff, 0);
    /* every 4-D f32 value of the 16- and 32-channel chains but the graph's edges */
    if (mst_onednn_available()) assert_true(g_blocked_values >= 30);
    else assert_int_equal(g_blocked_values, 0);
    assert_int_equal(run_pair(&wide, 8, 4, true, 0.02), 0);
}

/* The same at amp O2 (bf16 activations, oneDNN's bf16 convolutions in nChw16c, batch norm and
 * pooling widening their slabs): bitwise equal to eager O2. */
static void test_cnn_blocked_steps_o2(void **state) {
    (void)state;
    static const mst_model_spec wide = {.name = "cnn", .in_c = 1, .in_h = 16, .in_w = 16, .classes = 10,
                                        .width = 16, .blocks = 2};
    g_amp_level = 2;
    g_blocked_everywhere = true;
    int64_t diff = run_pair(&wide, 8, 4, true, 0.02);
    g_blocked_everywhere = false;
    int64_t blocked = g_blocked_values;
    int64_t diff_default = run_pair(&wide, 8, 4, true, 0.02);
    g_amp_level = 0;
    assert_int_equal(diff, 0);
    assert_int_equal(diff_default, 0);
    if (mst_onednn_available()) assert_true(blocked >= 30);
}

/* With a dynamic batch, smaller batches reuse the plan; without, a new size compiles again. */
static void dynamic_case(bool dynamic) {
    trainer e, g;
    trainer_init(&e, &k_cnn, 0.02, 2);
    trainer_init(&g, &k_cnn, 0.02, 2);
    mst_graph_options opt = {.optimize = true, .dynamic_batch = dynamic, .max_batch = 8};
    mst_graph_cache *gc = mst_graph_cache_new(g.ctx, "train", train_step, &g, &opt);
    assert_non_null(gc);
    const int batches[] = {8, 5, 8, 3};
    for (int s = 0; s < 4; s++) {
        double le = eager_step(&e, &k_cnn, batches[s], s), lg = graph_step(&g, gc, &k_cnn, batches[s], s);
        assert_close(le, lg, "loss at step", s);
    }
    compare_models(&e, &g);
    mst_graph_stats st;
    mst_graph_cache_stats(gc, &st);
    assert_int_equal(st.compile_count, dynamic ? 1 : 3);
    mst_graph_cache_free(gc);
    trainer_free(&e);
    trainer_free(&g);
}

static void test_dynamic_batch_no_recompile(void **state) { (void)state; dynamic_case(true); }
static void test_static_batch_recompiles(void **state) { (void)state; dynamic_case(false); }

/* ---- the arena counted by category (plan.h) ---- */

/* train_step with the forward under autocast, as the trainer's step runs it (no-op at O0). */
static mst_status amp_train_step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)n_in;
    trainer *t = arg;
    mst_amp_autocast(ctx, true);
    mst_tensor *logits = t->model->forward(t->model, ctx, in[0], true);
    mst_tensor *loss = mst_cross_entropy(ctx, logits, in[1]);
    mst_amp_autocast(ctx, false);
    mst_status s = mst_backward(ctx, loss);
    if (s == MST_OK) s = mst_optim_apply(t->opt, NULL);
    mst_zero_grad(t->model->params, t->model->n_params);
    out[0] = loss;
    *n_out = 1;
    return s;
}

/* Traces amp_train_step on shape-only copies of in[] and runs the passes (cache.c's compile, by hand). */
static mst_graph *trace_step(trainer *t, mst_tensor *const in[2]) {
    mst_ctx *ctx = t->ctx;
    mst_graph *g = mst_graph_new("train");
    mst_tracer *tr = mst_tracer_new(ctx, g);
    assert_non_null(tr);
    mst_rng saved = ctx->rng;
    mst_pool_push(ctx);
    mst_tensor *meta[2], *out[1];
    for (int i = 0; i < 2; i++) {
        meta[i] = mst_tensor_meta_new(ctx, in[i]->dtype, in[i]->ndim, in[i]->shape);
        mst_trace_bind_input(tr, meta[i], i);
    }
    ctx->tracer = tr;
    int n_out = 0;
    assert_int_equal(amp_train_step(ctx, t, meta, 2, out, &n_out), MST_OK);
    mst_graph_add_output(g, mst_trace_value_of(tr, out[0]));
    mst_pool_pop(ctx);
    mst_tape_clear(ctx);
    ctx->tracer = NULL;
    ctx->rng = saved;
    mst_tracer_free(tr);
    mst_graph_optimize(g, NULL);
    return g;
}

static bool param_shaped(const trainer *t, const mst_gvalue *x) {
    for (int q = 0; q < t->model->n_params; q++)
        if (mst_shape_equal(x->ndim, x->shape, t->model->params[q]->ndim, t->model->params[q]->shape)) return true;
    return false;
}

/* Each value is counted under the category eager allocates it under: every gradient the optimizer
 * reads as a gradient (their bytes = the parameters' f32 bytes), nothing parameter-shaped among
 * the activations, at O2 the parameters' half copies as parameters. The categories share one
 * arena (a gradient takes a dead activation's slot); the arena is reserved memory, and running the
 * plan moves each category's in-use bytes by its live values: its peak grows by exactly the plan's
 * live peak and in-use is back where it was after the run. The loss equals eager's bit for bit. */
static void arena_categories_case(int amp_level) {
    enum { batch = 24 };    /* no activation of the mlp (24 x 48, 24 x 32, 24 x 10, 24) has a parameter's shape */
    trainer e, t;
    trainer_init(&e, &k_mlp, 0.05, 2);
    trainer_init(&t, &k_mlp, 0.05, 2);
    assert_int_equal(mst_amp_set(e.ctx, amp_level, MST_DTYPE_BF16), MST_OK);
    assert_int_equal(mst_amp_set(t.ctx, amp_level, MST_DTYPE_BF16), MST_OK);
    mst_ctx *ctx = t.ctx;
    mst_pool_push(ctx);
    mst_tensor *x, *y;
    make_batch(ctx, &k_mlp, batch, 0, &x, &y);
    mst_graph *g = trace_step(&t, (mst_tensor *[]){x, y});
    mst_graph_plan p;
    mst_graph_plan_build(g, &p);
    assert_int_equal(mst_graph_plan_check(g, &p), 0);

    int64_t param_bytes = 0, grad_bytes = 0;
    int n_grads = 0, n_half = 0;
    for (int q = 0; q < t.model->n_params; q++) param_bytes += (int64_t)mst_tensor_nbytes(t.model->params[q]);
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x_v = &g->values[v];
        if (p.buffer[v] < 0 || x_v->kind == MST_GV_VIEW) continue;
        mst_mem_cat c = p.buf_cat[p.buffer[v]];
        assert_int_equal(c, x_v->cat);
        if (param_shaped(&t, x_v) && c == MST_MEM_ACT) fail_msg("%%%d (%s) is parameter-shaped but counted as an activation", v, x_v->name);
        if (c == MST_MEM_PARAM) {       /* only the half copies autocast makes of the parameters */
            assert_true(amp_level >= 2 && x_v->dtype == MST_DTYPE_BF16 && param_shaped(&t, x_v));
            n_half++;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {     /* what the optimizer updates with: the gradients */
        const mst_gnode *n = &g->nodes[i];
        int n_m = n->kind == MST_GN_FUSED_OPTIM ? n->n_members : 1;
        for (int m = 0; m < n_m; m++) {
            const mst_gnode *u = n->kind == MST_GN_FUSED_OPTIM ? &n->members[m] : n;
            if (!(mst_op_table[u->op]->flags & MST_OPF_PARAM_UPDATE)) continue;
            for (int k = 0; k < u->n_in; k++) {
                const mst_gvalue *gv = &g->values[mst_graph_root(g, u->in[k])];
                if (gv->kind != MST_GV_INTERMEDIATE) continue;
                assert_int_equal(gv->cat, MST_MEM_GRAD);
                assert_int_equal(gv->dtype, MST_DTYPE_F32);
                grad_bytes += mst_gvalue_bytes(gv);
                n_grads++;
            }
        }
    }
    assert_int_equal(n_grads, t.model->n_params);
    assert_int_equal(grad_bytes, param_bytes);
    assert_true(p.live_peak[MST_MEM_GRAD] >= param_bytes);     /* all live at the fused update */
    assert_true(p.live_peak[MST_MEM_ACT] > 0);
    if (amp_level >= 2) assert_true(n_half > 0 && p.live_peak[MST_MEM_PARAM] > 0);
    else assert_int_equal(p.live_peak[MST_MEM_PARAM], 0);
    assert_int_equal(p.live_peak[MST_MEM_OPTIM], 0);
    /* one arena for all categories: some gradient lies in bytes an activation used earlier */
    bool shared = false;
    for (int a = 0; a < p.n_buffers; a++)
        for (int b = 0; b < p.n_buffers; b++)
            shared |= p.buf_cat[a] == MST_MEM_ACT && p.buf_cat[b] == MST_MEM_GRAD && p.buf_end[a] < p.buf_start[b] &&
                      p.buf_offset[a] < p.buf_offset[b] + p.buf_size[b] && p.buf_offset[b] < p.buf_offset[a] + p.buf_size[a];
    assert_true(shared);

    mst_graph_exec *ex = mst_graph_exec_new(ctx, g, &p, -1);
    assert_non_null(ex);
    mst_allocator_reset_peak(ctx->alloc);
    mst_alloc_stats before = *mst_allocator_stats(ctx->alloc);
    assert_int_equal(mst_graph_exec_run(ex, (mst_tensor *[]){x, y}, 2), MST_OK);
    const mst_alloc_stats *after = mst_allocator_stats(ctx->alloc);
    assert_int_equal(after->reserved_bytes - before.reserved_bytes, p.arena_bytes + MST_GRAPH_ALIGN);
    for (int c = MST_MEM_PARAM; c <= MST_MEM_ACT; c++) {    /* workspace: the half kernel's scratch grows at O2 */
        if (after->in_use[c] != before.in_use[c])
            fail_msg("O%d %s: in use %lld after the run, %lld before", amp_level, mst_mem_cat_name((mst_mem_cat)c),
                     (long long)after->in_use[c], (long long)before.in_use[c]);
        if (after->peak[c] - before.in_use[c] != p.live_peak[c])
            fail_msg("O%d %s: peak grew by %lld, the plan's live peak is %lld", amp_level, mst_mem_cat_name((mst_mem_cat)c),
                     (long long)(after->peak[c] - before.in_use[c]), (long long)p.live_peak[c]);
    }
    mst_optim_count_step(t.opt);
    double lg = mst_tensor_get(mst_graph_exec_value(ex, g->outputs[0]), 0);
    mst_pool_push(e.ctx);
    mst_tensor *ex_in, *ey, *out[1];
    int n_out;
    make_batch(e.ctx, &k_mlp, batch, 0, &ex_in, &ey);
    assert_int_equal(amp_train_step(e.ctx, &e, (mst_tensor *[]){ex_in, ey}, 2, out, &n_out), MST_OK);
    mst_optim_count_step(e.opt);
    double le = mst_tensor_get(out[0], 0);
    mst_pool_pop(e.ctx);
    if (le != lg) fail_msg("O%d: eager loss %.9g, graph %.9g", amp_level, le, lg);
    assert_int_equal(compare_models(&e, &t), 0);
    print_message("O%d: arena %lld bytes; live peaks: activations %lld, gradients %lld, parameters %lld\n", amp_level,
                  (long long)p.arena_bytes, (long long)p.live_peak[MST_MEM_ACT], (long long)p.live_peak[MST_MEM_GRAD],
                  (long long)p.live_peak[MST_MEM_PARAM]);
    mst_graph_exec_free(ex);
    mst_graph_plan_free(&p);
    mst_graph_free(g);
    mst_pool_pop(ctx);
    trainer_free(&e);
    trainer_free(&t);
}

static void test_arena_categories_o0(void **state) { (void)state; arena_categories_case(0); }
static void test_arena_categories_o2(void **state) { (void)state; arena_categories_case(2); }

/* A step that updates a tensor it made itself: neither state nor a graph value. */
static mst_status bad_update(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)arg, (void)n_in;
    mst_tensor *p = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_tensor *lr = mst_tensor_scalar(ctx, MST_DTYPE_F64, 0.1);
    mst_tensor *steps = mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, (int64_t[]){1});
    mst_tensor *inf = mst_tensor_scalar(ctx, MST_DTYPE_F32, 0);
    mst_status s = mst_sgd_update(ctx, p, in[0], lr, steps, inf, NULL, 0, 0, 0, 0, false);
    out[0] = in[0];
    *n_out = 1;
    return s;
}

static void test_untraceable_update_is_a_clear_error(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    mst_graph_cache *gc = mst_graph_cache_new(ctx, "bad", bad_update, NULL, &(mst_graph_options){.optimize = true});
    mst_pool_push(ctx);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    mst_tensor *out[2];
    int n_out;
    assert_int_not_equal(mst_graph_cache_run(gc, &x, 1, out, &n_out), MST_OK);
    print_message("error: %s\n", mst_ctx_error(ctx));
    assert_non_null(strstr(mst_ctx_error(ctx), "cannot capture"));
    assert_non_null(strstr(mst_ctx_error(ctx), "neither state nor a graph value"));
    assert_non_null(strstr(mst_ctx_error(ctx), "sgd_update"));
    assert_null(ctx->tracer);
    mst_pool_pop(ctx);
    mst_graph_cache_free(gc);
    mst_ctx_free(ctx);
}

static mst_status host_read(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)arg, (void)n_in;
    mst_tensor *y = mst_relu(ctx, in[0]);
    if (mst_tensor_get(y, 0) > 0) y = mst_relu(ctx, y);     /* a value read on the host: not traceable */
    out[0] = y;
    *n_out = 1;
    return MST_OK;
}

/* Reading a value while tracing aborts with a message (in a child process). */
static void test_host_read_while_tracing_aborts(void **state) {
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
        mst_graph_cache *gc = mst_graph_cache_new(ctx, "read", host_read, NULL, &(mst_graph_options){0});
        mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
        mst_tensor *out[2];
        int n_out;
        mst_graph_cache_run(gc, &x, 1, out, &n_out);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

int main(void) {
    /* eager and graph on the same budget: the plan's thread verdict (measured, so timing-dependent)
     * is forced to all threads; test_one_thread_step_is_a_one_thread_context covers the other */
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_20_steps),
        cmocka_unit_test(test_one_thread_step_is_a_one_thread_context),
        cmocka_unit_test(test_fused_optimizer_split_is_bitwise),
        cmocka_unit_test(test_mlp_20_steps_unoptimized),
        cmocka_unit_test(test_cnn_steps),
        cmocka_unit_test(test_cnn_blocked_steps),
        cmocka_unit_test(test_cnn_blocked_steps_o2),
        cmocka_unit_test(test_dynamic_batch_no_recompile),
        cmocka_unit_test(test_static_batch_recompiles),
        cmocka_unit_test(test_arena_categories_o0),
        cmocka_unit_test(test_arena_categories_o2),
        cmocka_unit_test(test_untraceable_update_is_a_clear_error),
        cmocka_unit_test(test_host_read_while_tracing_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
