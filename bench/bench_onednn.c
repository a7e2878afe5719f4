/* bench_onednn.c — the CPU providers side by side, per op and per step, naming the CPU.
 *
 * Part 1, per op: every matmul/linear/conv shape of one training step of the mlp
 * (784-1024-1024-10, batch 256) and the cnn (width 32, 2 blocks, batch 64) — the forward calls are
 * read off the autograd tape of a real forward pass, and each one's two gradient ops are derived
 * as the backward rules issue them (linear: gy w and gy^T x; conv2d: grad_input, grad_weight) — run
 * as f32 builtin, f32 oneDNN, bf16 builtin (stored bf16, computed in f32) and bf16 oneDNN, in
 * GFLOP/s (median of k_op_repeats after warm-up), with the implementation oneDNN reports.
 * Part 2, per step: graph mode O0 f32 against O2 bf16 for both models under runtime.kernels
 * auto, and O2 bf16 with builtin forced, in the same run: median step time and peak memory.
 * Never part of pass/fail; the numbers go to docs/benchmarks.md.
 *
 *     ./build/bench_onednn            # MST_BENCH_THREADS=2 by default
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "runtime/amp/autocast.h"
#include "runtime/amp/loss_scale.h"
#include "runtime/autograd.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/ops.h"
#include "runtime/step_runner.h"
#include "workloads/zoo.h"

enum { k_op_warmup = 2, k_op_repeats = 7, k_step_warmup = 3, k_step_repeats = 9, k_max_shapes = 64 };

static void die(mst_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_onednn: %s: %s\n", what, ctx ? mst_ctx_error(ctx) : "");
    exit(1);
}

typedef struct {
    char name[48];
    mst_op op;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    mst_attrs attrs;
} shape_case;

static int n_cases;
static shape_case cases[k_max_shapes];

static void add_case(const char *name, mst_op op, int n_in, const mst_tensor *const t[], const int64_t (*shapes)[4],
                     const int *ndims, const mst_attrs *a) {
    if (n_cases == k_max_shapes) return;
    shape_case c = {.op = op, .n_in = n_in, .attrs = *a};
    snprintf(c.name, sizeof(c.name), "%s", name);
    for (int i = 0; i < n_in; i++) {
        c.ndim[i] = t ? t[i]->ndim : ndims[i];
        for (int d = 0; d < c.ndim[i]; d++) c.shape[i][d] = t ? t[i]->shape[d] : shapes[i][d];
    }
    for (int k = 0; k < n_cases; k++)       /* one row per distinct shape */
        if (cases[k].op == c.op && !memcmp(cases[k].shape, c.shape, sizeof(c.shape)) &&
            !memcmp(cases[k].attrs.i, c.attrs.i, sizeof(c.attrs.i)) && cases[k].n_in == c.n_in)
            return;
    cases[n_cases++] = c;
}

/* The forward calls of one pass of the model, and their gradient ops. */
static void collect(const char *model, int batch) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 1});
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 1024,
                           .hidden2 = 1024, .width = 32, .blocks = 2};
    char err[256];
    mst_model *m = mst_zoo_model_new(ctx, &spec, err, sizeof(err));
    if (!m) die(ctx, err);
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 28, 28}, 0, 1);
    mst_pool_push(ctx);
    if (!m->forward(m, ctx, x, true)) die(ctx, "forward");
    char nm[48];
    for (size_t i = 0; i < ctx->tape_len; i++) {
        const mst_op_call *c = &ctx->tape[i];
        if (c->op == MST_OP_LINEAR) {
            const mst_tensor *xi = c->in[0], *w = c->in[1];
            int64_t rows = xi->numel / xi->shape[xi->ndim - 1], n = w->shape[0], k = w->shape[1];
            snprintf(nm, sizeof(nm), "%s linear %lldx%lld->%lld", model, (long long)rows, (long long)k, (long long)n);
            add_case(nm, MST_OP_LINEAR, c->n_in, (const mst_tensor *const *)c->in, NULL, NULL, &c->attrs);
            snprintf(nm, sizeof(nm), "%s  gx = gy w", model);
            add_case(nm, MST_OP_MATMUL, 2, NULL, (const int64_t[][4]){{rows, n}, {n, k}}, (const int[]){2, 2}, &(mst_attrs){0});
            snprintf(nm, sizeof(nm), "%s  gw = gy^T x", model);
            add_case(nm, MST_OP_MATMUL, 2, NULL, (const int64_t[][4]){{rows, n}, {rows, k}}, (const int[]){2, 2},
                     &(mst_attrs){.i = {1, 0}});
        } else if (c->op == MST_OP_CONV2D) {
            const mst_tensor *xi = c->in[0], *w = c->in[1];
            const int64_t *a = c->attrs.i;
            int64_t p = (xi->shape[2] + 2 * a[2] - w->shape[2]) / a[0] + 1, q = (xi->shape[3] + 2 * a[3] - w->shape[3]) / a[1] + 1;
            snprintf(nm, sizeof(nm), "%s conv %lldx%lld %lld->%lld k%lld s%lld", model, (long long)xi->shape[2],
                     (long long)xi->shape[3], (long long)xi->shape[1], (long long)w->shape[0], (long long)w->shape[2], (long long)a[0]);
            add_case(nm, MST_OP_CONV2D, c->n_in, (const mst_tensor *const *)c->in, NULL, NULL, &c->attrs);
            const int64_t gy[4] = {xi->shape[0], w->shape[0], p, q};
            mst_attrs gi = {.i = {a[0], a[1], a[2], a[3], xi->shape[2], xi->shape[3]}};
            mst_attrs gw = {.i = {a[0], a[1], a[2], a[3], w->shape[2], w->shape[3]}};
            snprintf(nm, sizeof(nm), "%s  grad_input", model);
            add_case(nm, MST_OP_CONV2D_GRAD_INPUT, 2, NULL,
                     (const int64_t[][4]){{gy[0], gy[1], gy[2], gy[3]}, {w->shape[0], w->shape[1], w->shape[2], w->shape[3]}},
                     (const int[]){4, 4}, &gi);
            snprintf(nm, sizeof(nm), "%s  grad_weight", model);
            add_case(nm, MST_OP_CONV2D_GRAD_WEIGHT, 2, NULL,
                     (const int64_t[][4]){{gy[0], gy[1], gy[2], gy[3]}, {xi->shape[0], xi->shape[1], xi->shape[2], xi->shape[3]}},
                     (const int[]){4, 4}, &gw);
        }
    }
    mst_pool_pop(ctx);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

/* A call of case k on fresh random inputs of dtype dt, output allocated. */
static void make_call(mst_ctx *ctx, const shape_case *k, mst_dtype dt, mst_op_call *c) {
    memset(c, 0, sizeof(*c));
    c->op = k->op, c->n_in = k->n_in, c->n_out = 1, c->attrs = k->attrs;
    for (int i = 0; i < k->n_in; i++) {
        mst_tensor *t = mst_tensor_randn(ctx, MST_DTYPE_F32, k->ndim[i], k->shape[i], 0, 1);
        c->in[i] = dt == MST_DTYPE_F32 ? t : mst_cast(ctx, t, dt);
    }
    mst_meta m[MST_MAX_OP_OUTPUTS];
    if (mst_op_table[k->op]->infer(ctx, c, m) != MST_OK) die(ctx, k->name);
    c->out[0] = mst_tensor_new(ctx, dt, m[0].ndim, m[0].shape);
    if (!c->out[0]) die(ctx, "output");
}

/* GFLOP/s of fn on c (median), or 0 when fn is NULL. */
static double rate(mst_ctx *ctx, mst_kernel_fn fn, const mst_op_call *c) {
    if (!fn) return 0;
    double t[k_op_repeats];
    for (int i = 0; i < k_op_warmup + k_op_repeats; i++) {
        double t0 = bench_now_ms();
        if (fn(ctx, c) != MST_OK) die(ctx, "kernel");
        if (i >= k_op_warmup) t[i - k_op_warmup] = bench_now_ms() - t0;
    }
    return (double)mst_op_flops(c) / (bench_median(t, k_op_repeats) * 1e6);
}

/* Per op and dtype: builtin, oneDNN on the plain layouts, oneDNN in its blocked layouts (the
 * reorders in and out counted; convolutions only) and through its Winograd kernels (f32 3x3
 * stride-1 convolutions), and the implementations oneDNN picked. */
enum { k_cols = 1 + MST_ONEDNN_LAYOUT_COUNT };  /* per dtype: builtin, then one per oneDNN layout */
static void per_op_table(int threads) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 11, .n_threads = threads});
    mst_grad_set_enabled(ctx, false);
    printf("%-34s %8s %8s %8s %8s %8s %8s %8s %8s  %-30s %-30s\n", "op (GFLOP/s)", "f32 blt", "f32 dnnl", "f32 blkd",
           "f32 wino", "bf16 blt", "bf16 dnl", "bf16 blk", "bf16 wno", "oneDNN f32 impl (plain)",
           "oneDNN bf16 impl (blocked, else plain)");
    double sum_t[2 * k_cols] = {0};
    for (int i = 0; i < n_cases; i++) {
        const shape_case *k = &cases[i];
        const mst_op_desc *d = mst_op_table[k->op];
        double r[2 * k_cols];
        const char *impl[2];
        for (int bf = 0; bf < 2; bf++) {
            mst_dtype dt = bf ? MST_DTYPE_BF16 : MST_DTYPE_F32;
            mst_pool_push(ctx);
            mst_op_call c;
            make_call(ctx, k, dt, &c);
            r[k_cols * bf] = rate(ctx, mst_kernel_builtin(ctx, d, dt), &c);
            impl[bf] = "-";
            for (int l = 0; l < MST_ONEDNN_LAYOUT_COUNT; l++) {
                mst_kernel_fn fn = mst_onednn_kernel(k->op, dt, (mst_onednn_layout)l);
                bool ok = fn && mst_onednn_supports(ctx, &c, dt, (mst_onednn_layout)l);
                r[k_cols * bf + 1 + l] = ok ? rate(ctx, fn, &c) : 0;
                if (ok && (bf == 0 ? l == MST_ONEDNN_PLAIN : l != MST_ONEDNN_WINOGRAD))
                    impl[bf] = mst_onednn_impl(ctx, &c, dt, (mst_onednn_layout)l);
            }
            for (int j = 0; j < k_cols; j++)
                if (r[k_cols * bf + j] > 0) sum_t[k_cols * bf + j] += (double)mst_op_flops(&c) / (r[k_cols * bf + j] * 1e6);
            mst_pool_pop(ctx);
        }
        printf("%-34s", k->name);
        for (int j = 0; j < 2 * k_cols; j++) printf(" %8.1f", r[j]);
        printf("  %-30s %-30s\n", impl[0], impl[1]);
    }
    printf("%-34s", "total time");
    for (int j = 0; j < 2 * k_cols; j++) printf(" %8.2f", sum_t[j]);
    printf("  (ms, all rows once; blocked and wino: convolutions only; 0: not served)\n");
    mst_ctx_free(ctx);
}

typedef struct { double ms, peak_mib, act_mib; } step_result;

static step_result step_time(const char *model, int batch, int threads, int level, mst_kernels_mode kernels) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    mst_ctx_set_kernels(ctx, kernels);
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 1024,
                           .hidden2 = 1024, .width = 32, .blocks = 2};
    bench_runner_result b = bench_runner_time(ctx, "bench_onednn", &spec, batch, level, MST_DTYPE_BF16, true, k_step_warmup,
                                              k_step_repeats);
    step_result r = {b.ms, b.peak_mib, b.act_mib};
    mst_ctx_free(ctx);
    return r;
}

int main(void) {
    int threads = getenv("MST_BENCH_THREADS") ? atoi(getenv("MST_BENCH_THREADS")) : 2;
    char feats[256];
    mst_cpu_features_str(feats, sizeof(feats), " ");
    printf("bench_onednn: %s; features: %s\noneDNN %s; %d threads\n\n", mst_cpu_info_get()->model, feats, mst_onednn_version(),
           threads);
    collect("mlp", 256);
    collect("cnn", 64);
    per_op_table(threads);

    printf("\ngraph-mode training step (SGD momentum, fixed batch), median of %d after %d warm-up:\n", k_step_repeats,
           k_step_warmup);
    printf("%-22s %11s %11s %12s %7s %9s %9s %9s %9s\n", "model", "O0 f32 ms", "O2 bf16 ms", "O2 bltin ms", "O0/O2", "O0 MiB",
           "O2 MiB", "O0 act", "O2 act");
    static const struct { const char *model, *label; int batch; } runs[] = {
        {"mlp", "mlp 784-1024-1024-10", 256}, {"cnn", "cnn w32 b2", 64}};
    for (int i = 0; i < 2; i++) {
        step_result o0 = step_time(runs[i].model, runs[i].batch, threads, 0, MST_KERNELS_AUTO);
        step_result o2 = step_time(runs[i].model, runs[i].batch, threads, 2, MST_KERNELS_AUTO);
        step_result o2b = step_time(runs[i].model, runs[i].batch, threads, 2, MST_KERNELS_BUILTIN);
        printf("%-17s b%-4d %11.2f %11.2f %12.2f %6.2fx %9.1f %9.1f %9.1f %9.1f\n", runs[i].label, runs[i].batch, o0.ms, o2.ms,
               o2b.ms, o0.ms / o2.ms, o0.peak_mib, o2.peak_mib, o0.act_mib, o2.act_mib);
    }
    printf("(O0 and O2 under runtime.kernels: auto; \"O2 bltin\" forces builtin; MiB = peak of all memory categories,\n"
           " act = peak of the activations category; graph mode keeps activations in its arena)\n");
    return 0;
}
