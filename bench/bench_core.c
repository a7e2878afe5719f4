/* bench_core.c — the runtime core's benchmark: eager dispatch overhead per op and GEMM/conv
 * kernel throughput next to the raw OpenBLAS sgemm rate, all measured in the same run.
 *
 * Dispatch overhead is the time of a full mst_add call on one-element tensors (argument checks,
 * promotion check, shape inference, output allocation from the caching allocator, pool
 * bookkeeping, tape recording when on, kernel launch) minus the time of the kernel itself called
 * directly on the same tensors; beside it, a (1, 1) x (1, 1) matmul through dispatch, whose kernel
 * is the kernel choice's (runtime/backend/kernel_choice.c): its shape is looked up on every call,
 * once for the provider and, on oneDNN, once more for the primitive. Every figure is the median of
 * repeats after warm-up.
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

typedef enum { MODE_PLAIN, MODE_AUTOGRAD, MODE_PROFILED, MODE_MATMUL } dispatch_mode;

/* ns per mst_add call on (1,) f32 tensors (MODE_MATMUL: mst_matmul on (1, 1) ones), pool pops included. */
static double time_dispatch(mst_ctx *ctx, dispatch_mode mode, int n_ops) {
    const int nd = mode == MODE_MATMUL ? 2 : 1;
    mst_tensor *a = mst_tensor_retain(mst_tensor_full(ctx, MST_DTYPE_F32, nd, (int64_t[]){1, 1}, 1.0));
    mst_tensor *b = mst_param_new(ctx, "b", MST_DTYPE_F32, nd, (int64_t[]){1, 1});
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
            if (!(mode == MODE_MATMUL ? mst_matmul(ctx, a, b) : mst_add(ctx, a, b))) {
                fprintf(stderr, "bench: %s\n", mst_ctx_error(ctx));
                exit(1);
            }
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
    mst_kernel_fn k = mst_op_table[MST_OP_ADD]->kernels[MST_DEVICE_CPU][MST_DTYPE_F32];
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
    double mm[BENCH_MAX_REPEATS];
    /* warm-up: fill the allocator's cache and the tape's array; the matmul's kernel is chosen here */
    time_dispatch(ctx, MODE_AUTOGRAD, n_ops / 4);
    time_dispatch(ctx, MODE_PLAIN, n_ops / 4);
    time_dispatch(ctx, MODE_MATMUL, n_ops / 4);
    for (int r = 0; r < repeats; r++) {     /* interleaved, so drift hits all modes alike */
        kern[r] = time_kernel_only(ctx, n_ops);
        plain[r] = time_dispatch(ctx, MODE_PLAIN, n_ops);
        grad[r] = time_dispatch(ctx, MODE_AUTOGRAD, n_ops);
        prof[r] = time_dispatch(ctx, MODE_PROFILED, n_ops);
        mm[r] = time_dispatch(ctx, MODE_MATMUL, n_ops);
    }
    double k = bench_median(kern, repeats), p = bench_median(plain, repeats);
    double g = bench_median(grad, repeats), f = bench_median(prof, repeats);
    fprintf(out, "== eager dispatch overhead (mst_add on f32 (1,), %d ops x %d repeats, median) ==\n", n_ops, repeats);
    fprintf(out, "%-44s %10s %14s\n", "mode", "ns/op", "overhead ns/op");
    fprintf(out, "%-44s %10.1f %14s\n", "kernel called directly", k, "-");
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch, no autograd", p, p - k);
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch + autograd tape recording", g, g - k);
    fprintf(out, "%-44s %10.1f %14.1f\n", "dispatch, profiler recording ranges", f, f - k);
    fprintf(out, "%-44s %10.1f %14s\n", "matmul (1,1)x(1,1), kernel choice per call", bench_median(mm, repeats), "-");
    fprintf(out, "targets: < 500 ns/op without autograd, < 1000 ns/op with it\n\n");
    mst_ctx_free(ctx);
}

/* Max pooling 2x2 stride 2 on the cnn's stem output (64, 32, 28, 28), one thread: the fast kernel
 * (AVX-512 where the CPU has it, runtime/ops/pool.c) against the reference loop; GB/s counts the
 * input read and the values and indices written. Best of the repeats, not the median: the kernel
 * takes a millisecond or two and a preempted run is ten times that. */
static void bench_pool(FILE *out, int quick) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    mst_tensor *x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){64, 32, 28, 28}, 0, 1));
    int repeats = quick ? 5 : 15;
    double t[2][BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats + 2; r++)
        for (int k = 0; k < 2; k++) {
            int ref = (r + k) % 2;        /* alternate which runs first */
            mst_ctx_set_force_ref(ctx, ref);
            mst_pool_push(ctx);
            double t0 = bench_now_ms();
            mst_tensor *y = mst_maxpool2d(ctx, x, 2, 2, 2, 2, 0, 0);
            double dt = bench_now_ms() - t0;
            if (!y) { fprintf(stderr, "bench_core: %s\n", mst_ctx_error(ctx)); exit(1); }
            mst_pool_pop(ctx);
            if (r >= 2) t[ref][r - 2] = dt;
        }
    double bytes = 64.0 * 32 * 28 * 28 * 4 + 64.0 * 32 * 14 * 14 * 8;
    double f = 1e300, g = 1e300;          /* best of: a 1-2 ms kernel on a shared machine is often preempted */
    for (int r = 0; r < repeats; r++) f = t[0][r] < f ? t[0][r] : f, g = t[1][r] < g ? t[1][r] : g;
    fprintf(out, "== max pooling 2x2/s2, f32 (64, 32, 28, 28), 1 thread, best of %d alternated ==\n", repeats);
    fprintf(out, "%-44s %10.3f ms %8.1f GB/s\n", "fast kernel (AVX-512 when the CPU has it)", f, bytes / (f * 1e6));
    fprintf(out, "%-44s %10.3f ms %8.1f GB/s  (%.2fx)\n\n", "reference loop", g, bytes / (g * 1e6), g / f);
    mst_tensor_release(x);
    mst_ctx_free(ctx);
}

/* The SGD-with-momentum update over the fashion mlp's 235,146 parameters (one f32 tensor of that
 * size: parameter, gradient and momentum buffer, 4.7 MB moved), its vector loop (AVX2 when the
 * CPU has it) against the portable SSE2 loop (force_ref), alternated, one thread. Medians: a
 * 30-100 us kernel. The update bumps the parameter by lr * momentum each call, which stays far
 * from subnormal and overflow over the repeats. */
static void bench_optim(FILE *out, int quick) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    const int64_t n = 235146;
    mst_tensor *p = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &n, 0, 0.05));
    mst_tensor *g = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &n, 0, 0.01));
    mst_tensor *buf = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, &n));
    mst_tensor *lr = mst_tensor_retain(mst_tensor_scalar(ctx, MST_DTYPE_F64, 0.01));
    mst_tensor *steps = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_F64, 1, (int64_t[]){1}));
    mst_tensor *found = mst_tensor_retain(mst_tensor_scalar(ctx, MST_DTYPE_F32, 0));
    int repeats = quick ? 21 : BENCH_MAX_REPEATS;
    double t[2][BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats + 5; r++)
        for (int k = 0; k < 2; k++) {
            int ref = (r + k) % 2;
            mst_ctx_set_force_ref(ctx, ref);
            double t0 = bench_now_ms();
            mst_status s = mst_sgd_update(ctx, p, g, lr, steps, found, buf, 0, 0.9, 0, 0, false);
            double dt = bench_now_ms() - t0;
            if (s != MST_OK) { fprintf(stderr, "bench_core: %s\n", mst_ctx_error(ctx)); exit(1); }
            if (r >= 5) t[ref][r - 5] = dt;
        }
    double f = bench_median(t[0], repeats), ref = bench_median(t[1], repeats);
    double bytes = 5.0 * 4 * (double)n;
    fprintf(out, "== SGD momentum update, f32, 235146 parameters (the fashion mlp), 1 thread, median of %d alternated ==\n", repeats);
    fprintf(out, "%-44s %10.1f us %8.1f GB/s\n", "vector loop (AVX2 when the CPU has it)", f * 1e3, bytes / (f * 1e6));
    fprintf(out, "%-44s %10.1f us %8.1f GB/s  (%.2fx)\n\n", "portable loop (SSE2)", ref * 1e3, bytes / (ref * 1e6), ref / f);
    mst_tensor_release(p), mst_tensor_release(g), mst_tensor_release(buf);
    mst_tensor_release(lr), mst_tensor_release(steps), mst_tensor_release(found);
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
    bench_pool(stdout, quick);
    bench_optim(stdout, quick);
    bench_kernels(stdout, quick);
    return 0;
}
