/* bench_allreduce.c — all-reduce bandwidth between the ranks of this machine through mstune's
 * communicator (runtime/comm/: MPI_Iallreduce plus the polling wait the training step uses),
 * at 1 MiB and 16 MiB (persistent buffers, as the gradient buckets'), and each workload's gradient bytes per step, so the expected cost of a
 * data-parallel step is known. Run it under mpirun:
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun -np 2 --oversubscribe --bind-to none -mca btl self,vader build/bench_allreduce [reps]
 *
 * Prints a table on rank 0: size, median and min time per all-reduce, algorithm bandwidth
 * (bytes / time) and bus bandwidth (2 (N-1)/N bytes / time, nccl-tests' convention). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/comm/comm.h"
#include "runtime/context.h"
#include "workloads/zoo.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int64_t grad_bytes(const mst_model_spec *spec) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    char err[256];
    mst_model *m = mst_zoo_model_new(ctx, spec, err, sizeof(err));
    int64_t b = 0;
    for (int i = 0; m && i < m->n_params; i++) b += (int64_t)mst_tensor_nbytes(m->params[i]);
    mst_model_free(m);
    mst_ctx_free(ctx);
    return b;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 3) reps = 3;
    char err[256];
    mst_comm *c = mst_comm_new_auto(120, err, sizeof(err));
    if (!c) { fprintf(stderr, "bench_allreduce: %s\n", err); return 2; }
    const int rank = mst_comm_rank(c), n = mst_comm_size(c);
    if (rank == 0) {
        printf("all-reduce (sum, f32) over %d rank%s, communicator %s, %d repetitions per size\n", n, n == 1 ? "" : "s",
               mst_comm_name(c), reps);
        printf("%10s %12s %12s %12s %12s\n", "bytes", "median ms", "min ms", "algbw GB/s", "busbw GB/s");
    }
    const int64_t sizes[] = {1 << 20, 16 << 20};
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (size_t k = 0; k < 2; k++) {
        const int64_t nf = sizes[k] / 4;
        /* persistent send and receive buffers, as the gradient buckets' (runtime/comm/dp.c) */
        float *buf = malloc((size_t)sizes[k]), *out = malloc((size_t)sizes[k]);
        for (int64_t i = 0; i < nf; i++) buf[i] = (float)(i % 13);
        for (int r = -3; r < reps; r++) {      /* 3 warm-up rounds: connections, pages */
            mst_comm_barrier(c);
            uint64_t t0 = mst_prof_now_ns();
            mst_comm_req req = {0};
            if (mst_comm_iallreduce_sum_f32(c, buf, out, nf, &req) != MST_OK || mst_comm_wait(c, &req, "bench") != MST_OK) {
                fprintf(stderr, "%s\n", mst_comm_error(c));
                return 1;
            }
            if (r >= 0) t[r] = (double)(mst_prof_now_ns() - t0) / 1e6;
        }
        /* the slowest rank's time is the collective's */
        double *all = calloc((size_t)reps, sizeof(double));
        for (int r = 0; r < reps; r++) all[r] = t[r];
        for (int r = 0; r < reps; r++) {
            double v = all[r];
            for (int q = 0; q < n; q++) {       /* max over ranks via n broadcasts of each rank's value */
                double x = v;
                mst_comm_broadcast(c, &x, sizeof(x), q);
                if (x > all[r]) all[r] = x;
            }
        }
        qsort(all, (size_t)reps, sizeof(double), cmp);
        double med = all[reps / 2], mn = all[0];
        if (rank == 0)
            printf("%10lld %12.3f %12.3f %12.2f %12.2f\n", (long long)sizes[k], med, mn, (double)sizes[k] / (med * 1e6),
                   n > 1 ? 2.0 * (n - 1) / n * (double)sizes[k] / (med * 1e6) : 0.0);
        free(all);
        free(buf);
        free(out);
    }
    if (rank == 0) {
        const mst_model_spec mlp = {.name = "mlp", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 256, .hidden2 = 128};
        const mst_model_spec cnn = {.name = "cnn", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .width = 32, .blocks = 2};
        printf("\ngradient bytes per step (f32, all-reduced once per step)\n");
        printf("  mlp 784-256-128-10      %10lld\n", (long long)grad_bytes(&mlp));
        printf("  cnn width 32, 2 blocks  %10lld\n", (long long)grad_bytes(&cnn));
    }
    free(t);
    mst_comm_free(c);
    return 0;
}
