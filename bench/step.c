/* step.c — see step.h. */
#include "bench/step.h"

#include <stdio.h>
#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"
#include "runtime/amp/autocast.h"
#include "runtime/amp/loss_scale.h"
#include "runtime/step_runner.h"
#include "bench/timing.h"
#include "workloads/zoo.h"

void bench_step_init(bench_step *b, const char *model, int batch, int n_threads) {
    b->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = n_threads});
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10,
                           .hidden1 = 256, .hidden2 = 128, .width = 32, .blocks = 2};
    char err[256];
    b->model = mst_zoo_model_new(b->ctx, &spec, err, sizeof(err));
    if (!b->model) { fprintf(stderr, "bench: %s\n", err); exit(1); }
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    oc.momentum = 0.9;
    b->opt = mst_optim_new(b->ctx, &oc, b->model->params, b->model->n_params);
    b->x = mst_tensor_retain(mst_tensor_rand(b->ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 28, 28}, 0, 1));
    b->y = mst_tensor_retain(mst_tensor_zeros(b->ctx, MST_DTYPE_I32, 1, (int64_t[]){batch}));
    for (int k = 0; k < batch; k++) mst_tensor_i32(b->y)[k] = k % 10;
    b->batch = batch;
}

double bench_step_run(bench_step *b) {
    uint64_t t0 = mst_prof_now_ns();
    mst_pool_push(b->ctx);
    mst_tensor *loss = mst_cross_entropy(b->ctx, b->model->forward(b->model, b->ctx, b->x, true), b->y);
    if (!loss || mst_backward(b->ctx, loss) != MST_OK || mst_optim_step(b->opt, 0.01) != MST_OK) {
        fprintf(stderr, "bench: %s\n", mst_ctx_error(b->ctx));
        exit(1);
    }
    mst_zero_grad(b->model->params, b->model->n_params);
    mst_pool_pop(b->ctx);
    return (double)(mst_prof_now_ns() - t0) / 1e6;
}

void bench_step_free(bench_step *b) {
    mst_tensor_release(b->x);
    mst_tensor_release(b->y);
    mst_optim_free(b->opt);
    mst_model_free(b->model);
    mst_ctx_free(b->ctx);
}

static void runner_die(mst_ctx *ctx, const char *who, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", who, what, mst_ctx_error(ctx));
    exit(1);
}

bench_runner_result bench_runner_time(mst_ctx *ctx, const char *who, const mst_model_spec *spec, int batch, int level,
                                      mst_dtype half, bool graph, int warmup, int repeats) {
    if (graph && warmup < MST_GRAPH_SETTLE_RUNS) warmup = MST_GRAPH_SETTLE_RUNS;   /* past the plan's own trials */
    if (!graph && warmup < MST_STEP_THREADS_TRIAL_RUNS) warmup = MST_STEP_THREADS_TRIAL_RUNS;  /* eager's thread trial */
    char err[256];
    mst_model *m = mst_zoo_model_new(ctx, spec, err, sizeof(err));
    if (!m) { fprintf(stderr, "%s: %s\n", who, err); exit(1); }
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    oc.lr = 0.01, oc.momentum = 0.9;
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    if (!opt || mst_amp_set(ctx, level, half) != MST_OK) runner_die(ctx, who, "setup");
    mst_loss_scaler *scaler = NULL;
    if (level == 2) {
        mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
        if (!(scaler = mst_loss_scaler_new(ctx, &lc))) runner_die(ctx, who, "loss scaler");
    }
    mst_step_spec sp = {.model = m, .optim = opt, .scaler = scaler, .accumulate = 1};
    mst_step_runner *run = mst_step_runner_new(ctx, &sp, graph, false, batch);
    if (!run) runner_die(ctx, who, "step runner");
    mst_optim_set_lr(opt, 0.01);
    mst_tensor *x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 28, 28}, 0, 1));
    mst_tensor *y = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){batch}));
    for (int i = 0; i < batch; i++) mst_tensor_i32(y)[i] = i % 10;
    if (repeats > BENCH_MAX_REPEATS) repeats = BENCH_MAX_REPEATS;
    double t[BENCH_MAX_REPEATS];
    for (int i = 0; i < warmup + repeats; i++) {
        mst_pool_push(ctx);
        double t0 = bench_now_ms();
        mst_step_outputs out;
        mst_step_record rec;
        if (mst_step_runner_train(run, &x, &y, &out) != MST_OK || mst_step_finish(ctx, &sp, &out, &rec) != MST_OK)
            runner_die(ctx, who, "step");
        double dt = bench_now_ms() - t0;
        mst_pool_pop(ctx);
        if (i >= warmup) t[i - warmup] = dt;
    }
    bench_runner_result r = {bench_median(t, repeats), (double)mst_ctx_mem(ctx)->peak_total / 1048576.0,
                             (double)mst_ctx_mem(ctx)->peak[MST_MEM_ACT] / 1048576.0};
    mst_tensor_release(x);
    mst_tensor_release(y);
    mst_step_runner_free(run);
    mst_loss_scaler_free(scaler);
    mst_optim_free(opt);
    mst_model_free(m);
    return r;
}

mst_status bench_rig_step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)n_in;
    bench_rig *r = arg;
    mst_tensor *loss = mst_model_loss(r->model, ctx, r->model->forward(r->model, ctx, in[0], true), in[1]);
    mst_status s = mst_backward(ctx, loss);
    if (s == MST_OK) s = mst_optim_apply(r->opt, NULL);
    mst_zero_grad(r->model->params, r->model->n_params);
    out[0] = loss;
    *n_out = 1;
    return s;
}

double bench_rig_time_step(bench_rig *r, mst_graph_cache *gc, const char *who) {
    mst_pool_push(r->ctx);
    double t0 = bench_now_ms();
    mst_tensor *out[2];
    int n_out;
    mst_status s = gc ? mst_graph_cache_run(gc, (mst_tensor *[]){r->x, r->y}, 2, out, &n_out)
                      : bench_rig_step(r->ctx, r, (mst_tensor *[]){r->x, r->y}, 2, out, &n_out);
    double dt = bench_now_ms() - t0;
    if (s != MST_OK) {
        fprintf(stderr, "%s: %s\n", who, mst_ctx_error(r->ctx));
        exit(1);
    }
    mst_pool_pop(r->ctx);
    return dt;
}
