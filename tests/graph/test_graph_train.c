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
#include "runtime/context.h"
#include "runtime/graph/graph.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "workloads/zoo.h"

typedef struct {
    mst_ctx *ctx;
    mst_model *model;
    mst_optim *opt;
} trainer;

static void trainer_init(trainer *t, const mst_model_spec *spec, double lr) {
    t->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1234, .n_threads = 2});
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

/* The traced step: forward, loss, backward, update, zero_grad; no host reads. */
static mst_status train_step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)n_in;
    trainer *t = arg;
    mst_tensor *logits = t->model->forward(t->model, ctx, in[0], true);
    mst_tensor *loss = mst_cross_entropy(ctx, logits, in[1]);
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

/* Trains eager and graph side by side; returns how many losses and parameter elements differ in bits. */
static int64_t run_pair(const mst_model_spec *spec, int batch, int steps, bool optimize, double lr) {
    trainer e, g;
    trainer_init(&e, spec, lr);
    trainer_init(&g, spec, lr);
    mst_graph_options opt = {.optimize = optimize};
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
                  "%lld losses and %lld parameter elements not bitwise equal\n",
                  spec->name, batch, optimize, (long long)st.nodes_traced, (long long)st.nodes_after_passes,
                  (long long)st.kernels, (long long)st.arena_bytes, (long long)st.intermediate_bytes,
                  (long long)loss_bits, (long long)param_bits);
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

static void test_mlp_20_steps(void **state) {
    (void)state;
    run_pair(&k_mlp, 16, 20, true, 0.05);
}

static void test_mlp_20_steps_unoptimized(void **state) {
    (void)state;
    run_pair(&k_mlp, 16, 20, false, 0.05);
}

static void test_cnn_steps(void **state) {
    (void)state;
    run_pair(&k_cnn, 8, 4, true, 0.02);
}

/* With a dynamic batch, smaller batches reuse the plan; without, a new size compiles again. */
static void dynamic_case(bool dynamic) {
    trainer e, g;
    trainer_init(&e, &k_cnn, 0.02);
    trainer_init(&g, &k_cnn, 0.02);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_20_steps),
        cmocka_unit_test(test_fused_optimizer_split_is_bitwise),
        cmocka_unit_test(test_mlp_20_steps_unoptimized),
        cmocka_unit_test(test_cnn_steps),
        cmocka_unit_test(test_dynamic_batch_no_recompile),
        cmocka_unit_test(test_static_batch_recompiles),
        cmocka_unit_test(test_untraceable_update_is_a_clear_error),
        cmocka_unit_test(test_host_read_while_tracing_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
