/* bench_graph.c — graph mode vs eager mode on whole training steps (forward, cross-entropy,
 * backward, SGD-momentum update): median step time after warm-up, peak memory (all categories
 * and activations+gradients, the per-step categories) and the roofline per row: the step's FLOPs
 * (op-table formulas over the compiled plan) at the raw sgemm rate measured in the same run.
 * Prints a Markdown table. Never part of pass/fail; numbers go to docs/graph.md.
 *
 *     ./build/bench_graph                    # MST_BENCH_THREADS=2 to pin the thread count
 *     ./build/bench_graph mlp:32 cnn:32      # only these rows (bench/torch_compare.sh)
 *     ./build/bench_graph --passes [ROWS]    # per-pass table: graph mode with each fusion left out
 *                                            # (MST_BENCH_ROUNDS rounds, default 5)
 *
 * --passes answers "does each fusion pay for this shape": the graph step with all passes against
 * the same step with one fusion pass left out (none of them changes the bits), alternated in one
 * run; a ratio below 1.00x means the fusion loses there.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/passes.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "workloads/zoo.h"

enum { k_warmup = MST_GRAPH_SETTLE_RUNS, k_repeats = 15 };   /* warm-up past the plan's own trials */


typedef bench_rig rig;

static void rig_init(rig *r, const char *model, int batch, int threads) {
    r->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    mst_model_spec spec = {.name = model, .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10, .hidden1 = 256,
                           .hidden2 = 128, .width = 32, .blocks = 2};
    char err[256];
    r->model = mst_zoo_model_new(r->ctx, &spec, err, sizeof(err));
    if (!r->model) { fprintf(stderr, "bench_graph: %s\n", err); exit(1); }
    mst_optim_config cfg = mst_optim_defaults(MST_OPTIM_SGD);
    cfg.lr = 0.01;
    cfg.momentum = 0.9;
    r->opt = mst_optim_new(r->ctx, &cfg, r->model->params, r->model->n_params);
    mst_optim_set_lr(r->opt, 0.01);
    r->x = mst_tensor_randn(r->ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 28, 28}, 0, 1);
    r->y = mst_tensor_zeros(r->ctx, MST_DTYPE_I32, 1, (int64_t[]){batch});
    mst_tensor_retain(r->x);
    mst_tensor_retain(r->y);
    for (int i = 0; i < batch; i++) mst_tensor_i32(r->y)[i] = i % 10;
}

static void rig_free(rig *r) {
    mst_tensor_release(r->x);
    mst_tensor_release(r->y);
    mst_optim_free(r->opt);
    mst_model_free(r->model);
    mst_ctx_free(r->ctx);
}

typedef struct { double ms; int64_t peak_total, peak_step; int64_t flops; } result;

static result measure_skipping(const char *model, int batch, int threads, bool graph, unsigned skip) {
    rig r;
    rig_init(&r, model, batch, threads);
    mst_graph_options go = {.optimize = true, .skip_passes = skip};
    mst_graph_cache *gc = graph ? mst_graph_cache_new(r.ctx, "bench", bench_rig_step, &r, &go) : NULL;
    double t[k_repeats];
    result res = {0};
    for (int i = 0; i < k_warmup + k_repeats; i++) {
        if (i == k_warmup) mst_allocator_reset_peak(r.ctx->alloc);
        double dt = bench_rig_time_step(&r, gc, "bench_graph");
        if (i >= k_warmup) t[i - k_warmup] = dt;
    }
    qsort(t, k_repeats, sizeof(double), bench_cmp_double);
    res.ms = t[k_repeats / 2];
    const mst_alloc_stats *m = mst_ctx_mem(r.ctx);
    res.peak_total = m->peak_total;
    res.peak_step = m->peak[MST_MEM_ACT] + m->peak[MST_MEM_GRAD];
    if (gc) res.flops = mst_graph_cache_flops(gc);
    mst_graph_cache_free(gc);
    rig_free(&r);
    return res;
}

static result measure(const char *model, int batch, int threads, bool graph) {
    return measure_skipping(model, batch, threads, graph, 0);
}

/* The per-pass table: MST_BENCH_ROUNDS rounds (default 5), each measuring eager and every
 * configuration once in its own fresh context, the order rotated every round so no configuration
 * always runs first; per configuration the median over rounds of its step medians, and the median
 * [min-max] over rounds of its step / the all-passes step of the same round (> 1: the pass pays),
 * the robust figure on a noisy machine since a round's runs are seconds apart. */
enum { k_max_rounds = BENCH_MAX_REPEATS };
/* The per-pass table's configurations: all passes first, then each fusion left out, then none. */
static const struct { const char *name; unsigned skip; } pass_cfg[] = {
        {"all passes", 0}, {"no relu epilogue", MST_PASS_EPILOGUE}, {"no elementwise fusion", MST_PASS_FUSE_ELEM},
        {"no fused optimizer", MST_PASS_FUSE_OPTIM}, {"no pooling+relu gradient fusion", MST_PASS_FUSE_POOL_RELU},
        {"no pooling gradient in batch norm's", MST_PASS_FUSE_POOL_BN}, {"no pooling in batch norm", MST_PASS_FUSE_BN_POOL},
        {"no nChw16c layout", MST_PASS_BLOCKED_LAYOUT},
        {"no fusion at all", MST_PASS_EPILOGUE | MST_PASS_FUSE_ELEM | MST_PASS_FUSE_OPTIM | MST_PASS_FUSE_POOL_RELU |
                                 MST_PASS_FUSE_POOL_BN | MST_PASS_FUSE_BN_POOL | MST_PASS_BLOCKED_LAYOUT}};
enum { n_pass_cfg = sizeof(pass_cfg) / sizeof(pass_cfg[0]) };

static void pass_table(const char *model, int batch, int threads, int rounds) {
    enum { n_cfg = n_pass_cfg, n_runs = n_cfg + 1 };   /* the last run is eager */
    static double ms[n_runs][k_max_rounds];
    for (int round = 0; round < rounds; round++)
        for (int k = 0; k < n_runs; k++) {
            int c = (k + round) % n_runs;
            ms[c][round] = c == n_cfg ? measure(model, batch, threads, false).ms
                                      : measure_skipping(model, batch, threads, true, pass_cfg[c].skip).ms;
        }
    double med[n_runs], ratio[n_runs][3], tmp[k_max_rounds];
    int pays[n_runs];       /* rounds where the step without the pass was slower */
    for (int c = 0; c < n_runs; c++) {
        pays[c] = 0;
        ratio[c][0] = 1e300, ratio[c][2] = 0;
        for (int r = 0; r < rounds; r++) {
            tmp[r] = ms[c][r] / ms[0][r];
            pays[c] += tmp[r] > 1;
            if (tmp[r] < ratio[c][0]) ratio[c][0] = tmp[r];
            if (tmp[r] > ratio[c][2]) ratio[c][2] = tmp[r];
        }
        ratio[c][1] = bench_median(tmp, rounds);
        med[c] = bench_median(ms[c], rounds);
    }
    printf("| %s | %d | %.3f | %.3f |", model, batch, med[n_cfg], med[0]);
    for (int c = 1; c < n_cfg; c++)
        printf(" %.3f, %.2fx [%.2f-%.2f] %d/%d |", med[c], ratio[c][1], ratio[c][0], ratio[c][2], pays[c], rounds);
    printf(" %.2fx [%.2f-%.2f] %d/%d |\n", ratio[n_cfg][1], ratio[n_cfg][0], ratio[n_cfg][2], pays[n_cfg], rounds);
    fflush(stdout);
}

/* Raw single-thread sgemm GFLOP/s on a 256x784x256 product, times the thread count (the runtime
 * splits GEMMs over its pool, one OpenBLAS thread each). */
static double sgemm_gflops(int threads) {
    int m = 256, k = 784, n = 256;
    float *a = calloc((size_t)m * k, 4), *b = calloc((size_t)k * n, 4), *c = calloc((size_t)m * n, 4);
    openblas_set_num_threads(1);
    for (int i = 0; i < 3; i++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
    int reps = 30;
    double t0 = bench_now_ms();
    for (int i = 0; i < reps; i++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
    double ms = (bench_now_ms() - t0) / reps;
    free(a), free(b), free(c);
    return 2.0 * m * n * k / (ms * 1e6) * threads;
}

int main(int argc, char **argv) {
    int threads = getenv("MST_BENCH_THREADS") ? atoi(getenv("MST_BENCH_THREADS")) : 2;
    bool passes = argc > 1 && strcmp(argv[1], "--passes") == 0;
    if (passes) argv++, argc--;
    double gf = sgemm_gflops(threads);
    printf("sgemm rate (%d threads): %.1f GFLOP/s\n\n", threads, gf);
    struct { const char *model; int batch; } rows[16] = {{"mlp", 16}, {"mlp", 64}, {"mlp", 256}, {"cnn", 32}, {"cnn", 128}};
    size_t n_rows = 5;
    if (argc > 1) {
        n_rows = 0;
        for (int a = 1; a < argc && n_rows < 16; a++) {
            static char names[16][8];
            int batch = 0;
            if (sscanf(argv[a], "%7[a-z]:%d", names[n_rows], &batch) != 2 || batch < 1 ||
                (strcmp(names[n_rows], "mlp") != 0 && strcmp(names[n_rows], "cnn") != 0)) {
                fprintf(stderr, "bench_graph: '%s': expected mlp:BATCH or cnn:BATCH\n", argv[a]);
                return 2;
            }
            rows[n_rows].model = names[n_rows];
            rows[n_rows].batch = batch;
            n_rows++;
        }
    }
    if (passes) {
        int rounds = getenv("MST_BENCH_ROUNDS") ? atoi(getenv("MST_BENCH_ROUNDS")) : 5;
        if (rounds < 1 || rounds > k_max_rounds) {
            fprintf(stderr, "bench_graph: MST_BENCH_ROUNDS must be 1..%d\n", k_max_rounds);
            return 2;
        }
        printf("per-pass: graph step with each fusion left out; %d rounds, each configuration once a round (rotated), "
               "a run's figure the median of %d steps; cells: median ms over rounds, then the median [min-max] over "
               "rounds of without / with (> 1.00x: the fusion pays) and in how many rounds it paid\n\n", rounds, k_repeats);
        printf("| model | batch | eager ms | graph ms, %s |", pass_cfg[0].name);
        for (int k = 1; k < n_pass_cfg; k++) printf(" %s |", pass_cfg[k].name);
        printf(" graph vs eager |\n|---|---|---|");
        for (int k = 0; k < n_pass_cfg + 1; k++) printf("---|");
        printf("\n");
        for (size_t i = 0; i < n_rows; i++) pass_table(rows[i].model, rows[i].batch, threads, rounds);
        return 0;
    }
    printf("| model | batch | eager ms | graph ms | speedup | step GFLOP | roofline ms | graph/roofline | graph GFLOP/s (%% of sgemm) | peak MiB eager / graph | act+grad peak MiB eager / graph (ratio) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n_rows; i++) {
        result e = measure(rows[i].model, rows[i].batch, threads, false);
        result g = measure(rows[i].model, rows[i].batch, threads, true);
        double gflop = (double)g.flops * 1e-9, roof = gflop / gf * 1e3;
        printf("| %s | %d | %.3f | %.3f | %.2fx | %.3f | %.3f | %.2fx | %.1f (%.0f%%) | %.1f / %.1f | %.1f / %.1f (%.2f) |\n",
               rows[i].model, rows[i].batch, e.ms, g.ms, e.ms / g.ms, gflop, roof, g.ms / roof, gflop / g.ms * 1e3,
               100.0 * gflop / g.ms * 1e3 / gf, e.peak_total / 1048576.0, g.peak_total / 1048576.0,
               e.peak_step / 1048576.0, g.peak_step / 1048576.0, (double)g.peak_step / (double)e.peak_step);
        fflush(stdout);
    }
    return 0;
}
