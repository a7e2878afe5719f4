/* bench_compare.c — mstune's side of bench/torch_compare.sh: the trainer's own step (shared loop,
 * bench/step.c) for the rows asked, in three configurations: eager O0 f32, graph O0 f32, graph O2
 * bf16 (dynamic loss scaling, runtime.kernels auto: oneDNN where it measured faster). The first
 * line names the CPU and its features; then one line per row and configuration:
 *   model batch mode median_ms
 *
 *     MST_BENCH_THREADS=2 ./build/bench_compare mlp:32 cnn:64
 *     MST_BENCH_REPEATS=5 ...        # fewer timed steps (the quick mode of torch_compare.sh)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"

int main(int argc, char **argv) {
    int threads = getenv("MST_BENCH_THREADS") ? atoi(getenv("MST_BENCH_THREADS")) : 2;
    int repeats = getenv("MST_BENCH_REPEATS") ? atoi(getenv("MST_BENCH_REPEATS")) : 15;
    if (threads < 1 || repeats < 1 || repeats > BENCH_MAX_REPEATS) {
        fprintf(stderr, "bench_compare: MST_BENCH_THREADS must be >= 1 and MST_BENCH_REPEATS in [1, %d]\n", BENCH_MAX_REPEATS);
        return 2;
    }
    char feats[256];
    mst_cpu_features_str(feats, sizeof(feats), " ");
    printf("# mstune: %s; features: %s; %d threads\n", mst_cpu_info_get()->model, feats, threads);
    static const struct { const char *name; int level; bool graph; } cfg[] = {
        {"eager", 0, false}, {"graph", 0, true}, {"graph_o2_bf16", 2, true}};
    for (int a = 1; a < argc; a++) {
        char model[8];
        int batch = 0;
        if (sscanf(argv[a], "%7[a-z]:%d", model, &batch) != 2 || batch < 1 || (strcmp(model, "mlp") && strcmp(model, "cnn"))) {
            fprintf(stderr, "bench_compare: '%s': expected mlp:BATCH or cnn:BATCH\n", argv[a]);
            return 2;
        }
        mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 256,
                               .hidden2 = 128, .width = 32, .blocks = 2};
        for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
            mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
            if (!ctx) { fprintf(stderr, "bench_compare: out of memory\n"); return 1; }
            bench_runner_result r =
                bench_runner_time(ctx, "bench_compare", &spec, batch, cfg[c].level, MST_DTYPE_BF16, cfg[c].graph, 3, repeats);
            printf("%s %d %s %.4f\n", model, batch, cfg[c].name, r.ms);
            fflush(stdout);
            mst_ctx_free(ctx);
        }
    }
    return 0;
}
