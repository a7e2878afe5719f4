/* bench_core.c — the runtime core's benchmark: eager dispatch overhead per op and GEMM/conv
 * kernel throughput next to the raw OpenBLAS sgemm rate, all measured in the same run.
 *
 * Dispatch overhead is the time of a full mst_add call on one-element tensors (argument checks,
 * promotion check, shape inference, output allocation from the caching allocator, pool
 * bookkeeping, tape recording when on, kernel launch) minus the time of the kernel itself called
 * directly on the same tensors. Every figure is the median of repeats after warm-up.
 *
 *     build/bench_core            full run (about a minute)
 *     build/bench_core --quick    fewer repeats (make demo)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kernels.h"
#include "bench/timing.h"
#include "profiler/events.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"

#define OPS_PER_POOL 1000   /* outputs are released in batches, as a training step would */

typedef enum { MODE_PLAIN, MODE_AUTOGRAD, MODE_PROFILED } dispatch_mode;

/* ns per mst_add call on (1,) f32 tensors, pool pops included. */
static double time_dispatch(mst_ctx *ctx, dispatch_mode mode, int n_ops) {
    mst_tensor *a = mst_tensor_retain(mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){1}, 1.0));
    mst_tensor *b = mst_param_new(ctx, "b", MST_DTYPE_F32, 1, (int64_t[]){1});
    b->requires_grad = mode == MODE_AUTOGRAD;
    mst_profiler *p = NULL;
    if (mode == MODE_PROFILED) {
        p = mst_profiler_new();
        mst_profiler_start(p);
    }
    uint64_t t0 = mst_prof_now_ns();
    for (int done = 0; done < n_ops; done += OPS_PER_POOL) {
        mst_pool_push(ctx);
        for (int i = 0; i < OPS_PER_POOL; i++)
            if (!mst_add(ctx, a, b)) { fprintf(stderr, "bench: %s\n", mst_ctx_error(ctx)); exit(1); }
        mst_pool_pop(ctx);
    }
    uint64_t t1 = mst_prof_now_ns();
    if (p) {
        mst_profiler_stop(p);
        mst_profiler_free(p);
    }
    mst_tensor_release(a);
    mst_tensor_release(b);
    return (double)(t1 - t0) / n_ops;
}

/* ns per direct kernel call on the same one-element tensors: what dispatch adds nothing to. */
static double time_kernel_only(mst_ctx *ctx, int n_ops) {
    mst_pool_push(ctx);
    mst_tensor *a = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){1}, 1.0);
    mst_tensor *y = mst_add(ctx, a, a);
    mst_op_call c = {.op = MST_OP_ADD, .n_in = 2, .n_out = 1, .in = {a, a}, .out = {y}};
    mst_kernel_fn k = mst_op_table[MST_OP_ADD]->cpu[MST_DTYPE_F32];
    uint64_t t0 = mst_prof_now_ns();
    for (int i = 0; i < n_ops; i++) k(ctx, &c);
    uint64_t t1 = mst_prof_now_ns();
    mst_pool_pop(ctx);
    return (double)(t1 - t0) / n_ops;
}

static void bench_dispatch(FILE *out, int quick) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    int n_ops = quick ? 100000 : 400000, repeats = quick ? 5 : 15;
    double kern[BENCH_MAX_REPEATS], plain[BENCH_MAX_REPEATS], grad[BENCH_MAX_REPEATS], prof[BENCH_MAX_REPEATS];
    /* warm-up: fill the allocator's cache and the tape's array */
    time_dispatch(ctx, MODE_AUTOGRAD, n_ops / 4);
    time_dispatch(ctx, MODE_PLAIN, n_ops / 4);
    for (int r = 0; r < repeats; r++) {     /* interleaved, so drift hits all modes alike */
        kern[r] = time_kernel_only(ctx, n_ops);
        plain[r] = time_dispatch(ctx, MODE_PLAIN, n_ops);
        grad[r] = time_dispatch(ctx, MODE_AUTOGRAD, n_ops);
        prof[r] = time_dispatch(ctx, MODE_PROFILED, n_ops);
    }
    double k = bench_median(kern, repeats), p = bench_median(plain, repeats);
    double g = bench_median(grad, repeats), f = bench_median(prof, repeats);
    fprintf(out, "== eager dispatch overhead (mst_add on f32 (1,), %d ops x %d repeats, median) ==\n", n_ops, repeats);
    fprintf(out, "%-44s %10s %14s\n", "mode", "ns/op", "overhead ns/op");
    fprintf(out, "%-44s %10.1f %14s\n", "kernel called directly", k, "-");
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch, no autograd", p, p - k);
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch + autograd tape recording", g, g - k);
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch, profiler recording ranges", f, f - k);
    fprintf(out, "targets: < 500 ns/op without autograd, < 1000 ns/op with it\n\n");
    mst_ctx_free(ctx);
}

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else {
            fprintf(stderr, "usage: bench_core [--quick]\n");
            return 2;
        }
    }
    printf("mstune bench_core%s — medians of repeats after warm-up\n\n", quick ? " (quick)" : "");
    bench_dispatch(stdout, quick);
    bench_kernels(stdout, quick);
    return 0;
}
