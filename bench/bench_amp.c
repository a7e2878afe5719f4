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
#include "bench/step.h"
#include "bench/timing.h"
#include "runtime/context.h"
#include "runtime/step_runner.h"
#include "workloads/zoo.h"

enum { k_warmup = 3, k_repeats = 11 };


typedef struct { double ms; double peak_mib; } result;

static result measure(const char *model, int batch, int threads, int level, mst_dtype half, bool graph) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 256,
                           .hidden2 = 128, .width = 32, .blocks = 2};
    bench_runner_result b = bench_runner_time(ctx, "bench_amp", &spec, batch, level, half, graph, k_warmup, k_repeats);
    result r = {b.ms, b.peak_mib};
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
