/* bench_train.c — training-step time per workload and batch size (eager), and the data
 * loader's throughput per worker count with the expensive augmentation on.
 *
 * A step is what the trainer runs: forward, cross-entropy, backward, SGD-momentum update, on a
 * fixed batch (data loading excluded; the loader is measured on its own below). Each figure is the
 * median of repeats after warm-up steps.
 *
 *     build/bench_train            full run
 *     build/bench_train --quick    fewer repeats
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "profiler/events.h"
#include "runtime/autograd.h"
#include "runtime/data/loader.h"
#include "runtime/optim.h"
#include "runtime/ops.h"
#include "workloads/zoo.h"

typedef struct {
    const char *model;
    int batch;
} workload;


static void bench_steps(int quick) {
    const workload w[] = {{"mlp", 16}, {"mlp", 64}, {"mlp", 256}, {"cnn", 32}, {"cnn", 128}};
    printf("== training step, eager, fwd + bwd + SGD momentum (median of repeats after warm-up) ==\n");
    printf("%-6s %6s %12s %12s %14s\n", "model", "batch", "ms/step", "samples/s", "peak MiB");
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        bench_step bs;
        bench_step_init(&bs, w[i].model, w[i].batch, 0);
        int cnn = strcmp(w[i].model, "cnn") == 0;
        int warm = cnn ? 2 : 10, reps = quick ? (cnn ? 3 : 15) : (cnn ? 9 : 41);
        for (int k = 0; k < warm; k++) bench_step_run(&bs);
        mst_allocator_reset_peak(bs.ctx->alloc);
        double t[BENCH_MAX_REPEATS];
        for (int k = 0; k < reps; k++) t[k] = bench_step_run(&bs);
        double med = bench_median(t, reps);
        printf("%-6s %6d %12.2f %12.0f %14.1f\n", w[i].model, w[i].batch, med, w[i].batch * 1000.0 / med,
               (double)mst_ctx_mem(bs.ctx)->peak_total / (1 << 20));
        bench_step_free(&bs);
    }
    printf("\n");
}

static void bench_loader(int quick) {
    char err[512];
    mst_source *src = mst_source_idx_open(MST_FASHION_MNIST_DIR, "train", err, sizeof(err));
    if (!src) {
        printf("== loader: skipped: %s ==\n", err);
        return;
    }
    const int workers[] = {0, 1, 2, 4};
    int64_t n_batches = quick ? 60 : 200, reps = quick ? 3 : 5;
    printf("== data loader, Fashion-MNIST train, heavy augmentation (crop, flip, affine warp) + normalize, batch 64,"
           " prefetch 4: %lld batches x %lld repeats ==\n", (long long)n_batches, (long long)reps);
    printf("%-8s %14s\n", "workers", "samples/s");
    for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++) {
        mst_loader_config c = {.batch_size = 64, .shuffle = true, .seed = 1, .num_workers = workers[i], .prefetch = 4,
                               .augment = MST_AUGMENT_HEAVY, .normalize = true, .mean = 0.2860f, .std = 0.3530f};
        mst_loader *ld = mst_loader_new(src, &c, err, sizeof(err));
        if (!ld) { fprintf(stderr, "bench_train: %s\n", err); exit(1); }
        double rate[BENCH_MAX_REPEATS];
        for (int64_t r = -1; r < reps; r++) {           /* r = -1: warm-up */
            mst_loader_start_epoch(ld, r + 1, 0);
            mst_batch b;
            int64_t samples = 0;
            uint64_t t0 = mst_prof_now_ns();
            for (int64_t k = 0; k < n_batches && mst_loader_next(ld, &b) == 1; k++) samples += b.size;
            double s = (double)(mst_prof_now_ns() - t0) / 1e9;
            if (r >= 0) rate[r] = (double)samples / s;
        }
        printf("%-8d %14.0f\n", workers[i], bench_median(rate, (int)reps));
        mst_loader_free(ld);
    }
    printf("\n");
    mst_source_free(src);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: bench_train [--quick]\n");
        return 2;
    }
    printf("mstune bench_train%s\n\n", quick ? " (quick)" : "");
    bench_steps(quick);
    bench_loader(quick);
    return 0;
}
