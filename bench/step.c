/* step.c — see step.h. */
#include "bench/step.h"

#include <stdio.h>
#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"
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
