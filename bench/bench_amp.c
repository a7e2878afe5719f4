/* bench_amp.c — mixed precision on whole training steps: O0/O1/O2/O3 x f16/bf16, mlp and cnn,
 * eager and graph, in one run. Each configuration runs the real step (runtime/step.c: autocast,
 * loss scaling as the level defaults it — dynamic at O2 —, SGD momentum) through the trainer's step
 * runner on a fixed batch: median step time after warm-up and peak memory (all categories), with
 * the ratios to O0 of the same model and mode. Never part of pass/fail; docs/benchmarks.md.
 *
 *     ./build/bench_amp [BATCH_MLP BATCH_CNN]       # defaults 256 and 64; MST_BENCH_THREADS=2
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/amp/autocast.h"
#include "runtime/amp/loss_scale.h"
#include "bench/timing.h"
#include "runtime/context.h"
#include "runtime/step_runner.h"
#include "workloads/zoo.h"

enum { k_warmup = 3, k_repeats = 11 };


typedef struct { double ms; double peak_mib; } result;

static void die(mst_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_amp: %s: %s\n", what, mst_ctx_error(ctx));
    exit(1);
}

static result measure(const char *model, int batch, int threads, int level, mst_dtype half, bool graph) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 256,
                           .hidden2 = 128, .width = 32, .blocks = 2};
    char err[256];
    mst_model *m = mst_zoo_model_new(ctx, &spec, err, sizeof(err));
    if (!m) { fprintf(stderr, "bench_amp: %s\n", err); exit(1); }
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    oc.lr = 0.01;
    oc.momentum = 0.9;
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    if (!opt || mst_amp_set(ctx, level, half) != MST_OK) die(ctx, "setup");
    mst_loss_scaler *scaler = NULL;
    if (level == 2) {       /* MindSpore: O2 defaults to dynamic loss scaling, the others to none */
        mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
        if (!(scaler = mst_loss_scaler_new(ctx, &lc))) die(ctx, "loss scaler");
    }
    mst_step_spec sp = {.model = m, .optim = opt, .scaler = scaler, .accumulate = 1};
    mst_step_runner *run = mst_step_runner_new(ctx, &sp, graph, false, batch);
    if (!run) die(ctx, "step runner");
    mst_optim_set_lr(opt, 0.01);
    mst_tensor *x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 28, 28}, 0, 1));
    mst_tensor *y = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){batch}));
    for (int i = 0; i < batch; i++) mst_tensor_i32(y)[i] = i % 10;
    double t[k_repeats];
    for (int i = 0; i < k_warmup + k_repeats; i++) {
        mst_pool_push(ctx);
        double t0 = bench_now_ms();
        mst_step_outputs out;
        mst_step_record rec;
        if (mst_step_runner_train(run, &x, &y, &out) != MST_OK || mst_step_finish(ctx, &sp, &out, &rec) != MST_OK)
            die(ctx, "step");
        double dt = bench_now_ms() - t0;
        mst_pool_pop(ctx);
        if (i >= k_warmup) t[i - k_warmup] = dt;
    }
    qsort(t, k_repeats, sizeof(double), bench_cmp_double);
    result r = {t[k_repeats / 2], (double)mst_ctx_mem(ctx)->peak_total / 1048576.0};
    mst_tensor_release(x);
    mst_tensor_release(y);
    mst_step_runner_free(run);
    mst_loss_scaler_free(scaler);
    mst_optim_free(opt);
    mst_model_free(m);
    mst_ctx_free(ctx);
    return r;
}

int main(int argc, char **argv) {
    int threads = getenv("MST_BENCH_THREADS") ? atoi(getenv("MST_BENCH_THREADS")) : 2;
    int batches[2] = {argc > 1 ? atoi(argv[1]) : 256, argc > 2 ? atoi(argv[2]) : 64};
    const char *models[2] = {"mlp", "cnn"};
    printf("%d threads; mlp batch %d, cnn batch %d; medians of %d steps after %d warm-up\n\n", threads, batches[0],
           batches[1], k_repeats, k_warmup);
    printf("| model | mode | level | half | step ms | time vs O0 | peak MiB | memory vs O0 |\n|---|---|---|---|---|---|---|---|\n");
    (void)measure(models[0], batches[0], threads, 0, MST_DTYPE_F16, false);   /* process warm-up: first touch, thread start */
    for (int mi = 0; mi < 2; mi++)
        for (int g = 0; g < 2; g++) {
            result base = measure(models[mi], batches[mi], threads, 0, MST_DTYPE_F16, g);
            printf("| %s | %s | O0 | - | %.3f | 1.00x | %.1f | 1.00x |\n", models[mi], g ? "graph" : "eager", base.ms, base.peak_mib);
            for (int level = 1; level <= 3; level++)
                for (int h = 0; h < 2; h++) {
                    mst_dtype half = h ? MST_DTYPE_BF16 : MST_DTYPE_F16;
                    result r = measure(models[mi], batches[mi], threads, level, half, g);
                    printf("| %s | %s | O%d | %s | %.3f | %.2fx | %.1f | %.2fx |\n", models[mi], g ? "graph" : "eager", level,
                           mst_dtype_name(half), r.ms, r.ms / base.ms, r.peak_mib, r.peak_mib / base.peak_mib);
                    fflush(stdout);
                }
        }
    return 0;
}
