/* bench_workloads.c — mstune's side of bench/torch_compare_workloads.sh: whole training steps of
 * the language-id transformer and the super-resolution net on the shapes of their shipped jobs
 * (workloads/jobs/langid_transformer.yaml, fashion_sr.yaml), eager and graph mode. A step is
 * forward, the model's loss (cross-entropy; L1 for srnet), backward and the job's optimizer
 * (AdamW; Adam) on one fixed random batch, data loading excluded. Prints one line per row and
 * mode, "model batch mode median_ms", the format of bench/torch_compare_workloads.py.
 * Never part of pass/fail.
 *
 *     MST_BENCH_THREADS=2 ./build/bench_workloads [--quick] [--passes] [transformer:128 srnet:32 ...]
 * --quick: 2 warm-up steps and 5 timed ones instead of 3 and 15. --passes: per row, the graph step
 * with each fusion pass left out against all passes, alternated in one process (pass_table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/data/source.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/passes.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "workloads/zoo.h"

enum { LANGID_LEN = 24, LANGID_VOCAB = 56, SR_SIDE = 14 };

typedef bench_rig rig;

/* The job's model and optimizer, and a batch shaped like its loader's: token ids with [CLS]
 * first, 3..20 characters, zero padding (the word lengths of the langid split), labels 0..7; or
 * 14x14 inputs in [0, 1] with 28x28 targets. */
static void rig_init(rig *r, const char *model, int batch, int threads) {
    r->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    const bool tr = strcmp(model, "transformer") == 0;
    mst_model_spec spec = tr ? (mst_model_spec){.name = "transformer", .in_c = 1, .in_h = 1, .in_w = LANGID_LEN, .tokens = true,
                                                .vocab = LANGID_VOCAB, .classes = MST_LANGID_CLASSES, .d_model = 64, .heads = 4,
                                                .layers = 2}
                             : (mst_model_spec){.name = "srnet", .in_c = 1, .in_h = SR_SIDE, .in_w = SR_SIDE, .paired = true,
                                                .classes = 2, .width = 32, .blocks = 4};
    char err[256];
    r->model = mst_zoo_model_new(r->ctx, &spec, err, sizeof(err));
    if (!r->model) { fprintf(stderr, "bench_workloads: %s\n", err); exit(1); }
    mst_optim_config cfg = mst_optim_defaults(tr ? MST_OPTIM_ADAMW : MST_OPTIM_ADAM);
    cfg.lr = tr ? 3e-3 : 1e-3;
    r->opt = mst_optim_new(r->ctx, &cfg, r->model->params, r->model->n_params);
    mst_optim_set_lr(r->opt, cfg.lr);
    if (tr) {
        r->x = mst_tensor_zeros(r->ctx, MST_DTYPE_I32, 2, (int64_t[]){batch, LANGID_LEN});
        r->y = mst_tensor_zeros(r->ctx, MST_DTYPE_I32, 1, (int64_t[]){batch});
        int32_t *ids = mst_tensor_i32(r->x), *lab = mst_tensor_i32(r->y);
        unsigned h = 12345;
        for (int i = 0; i < batch; i++) {
            h = h * 1103515245u + 12345u;
            int len = 3 + (int)((h >> 16) % 18);
            ids[i * LANGID_LEN] = MST_TOKEN_CLS;
            for (int j = 1; j <= len; j++) {
                h = h * 1103515245u + 12345u;
                ids[i * LANGID_LEN + j] = MST_TOKEN_FIRST_CHAR + (int)((h >> 16) % (LANGID_VOCAB - MST_TOKEN_FIRST_CHAR));
            }
            lab[i] = i % MST_LANGID_CLASSES;
        }
    } else {
        r->x = mst_tensor_rand(r->ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, SR_SIDE, SR_SIDE}, 0, 1);
        r->y = mst_tensor_rand(r->ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, 1, 2 * SR_SIDE, 2 * SR_SIDE}, 0, 1);
    }
    if (!r->x || !r->y || !r->opt) { fprintf(stderr, "bench_workloads: %s\n", mst_ctx_error(r->ctx)); exit(1); }
    mst_tensor_retain(r->x);
    mst_tensor_retain(r->y);
}

static void rig_free(rig *r) {
    mst_tensor_release(r->x);
    mst_tensor_release(r->y);
    mst_optim_free(r->opt);
    mst_model_free(r->model);
    mst_ctx_free(r->ctx);
}

static double measure(const char *model, int batch, int threads, bool graph, unsigned skip, int warmup, int repeats) {
    if (warmup < MST_GRAPH_SETTLE_RUNS) warmup = MST_GRAPH_SETTLE_RUNS;   /* eager too, so both modes warm alike */
    rig r;
    rig_init(&r, model, batch, threads);
    mst_graph_cache *gc =
        graph ? mst_graph_cache_new(r.ctx, "bench", bench_rig_step, &r, &(mst_graph_options){.optimize = true, .skip_passes = skip})
              : NULL;
    double t[64];
    for (int i = 0; i < warmup + repeats; i++) {
        double dt = bench_rig_time_step(&r, gc, "bench_workloads");
        if (i >= warmup) t[i - warmup] = dt;
    }
    qsort(t, (size_t)repeats, sizeof(double), bench_cmp_double);
    mst_graph_cache_free(gc);
    rig_free(&r);
    return t[repeats / 2];
}

/* --passes: the graph step with all passes against the step leaving one out, MST_BENCH_ROUNDS
 * rounds (default 5, at most k_max_rounds), the configurations in turns within each round; per configuration the median step over rounds
 * and the median (range) over rounds of its step / the all-passes step of the same round (> 1: the
 * pass left out pays for itself by that much). */
enum { k_max_rounds = 31 };
static void pass_table(const char *model, int batch, int threads, int warmup, int repeats) {
    int rounds = getenv("MST_BENCH_ROUNDS") ? atoi(getenv("MST_BENCH_ROUNDS")) : 5;
    if (rounds < 1) rounds = 1;
    if (rounds > k_max_rounds) rounds = k_max_rounds;
    static const struct { const char *name; unsigned skip; } cfg[] = {
        {"all passes", 0},
        {"no slice-gradient sums", MST_PASS_SLICE_SUM},
        {"no elementwise fusion", MST_PASS_FUSE_ELEM},
        {"no fused optimizer", MST_PASS_FUSE_OPTIM},
        {"no relu epilogue", MST_PASS_EPILOGUE},
        {"none of these", MST_PASS_SLICE_SUM | MST_PASS_FUSE_ELEM | MST_PASS_FUSE_OPTIM | MST_PASS_EPILOGUE},
    };
    enum { n_cfg = sizeof(cfg) / sizeof(cfg[0]) };
    double ms[n_cfg][k_max_rounds], ratio[n_cfg][k_max_rounds];
    for (int round = 0; round < rounds; round++)
        for (int c = 0; c < n_cfg; c++) {
            ms[c][round] = measure(model, batch, threads, true, cfg[c].skip, warmup, repeats);
            ratio[c][round] = ms[c][round] / ms[0][round];
        }
    printf("| %s:%d graph step, %d rounds | median ms | vs all passes, median [range] over rounds |\n|---|---|---|\n", model,
           batch, rounds);
    for (int c = 0; c < n_cfg; c++) {
        qsort(ms[c], (size_t)rounds, sizeof(double), bench_cmp_double);
        qsort(ratio[c], (size_t)rounds, sizeof(double), bench_cmp_double);
        printf("| %s | %.3f | %.3fx [%.3f-%.3f] |\n", cfg[c].name, ms[c][rounds / 2], ratio[c][rounds / 2], ratio[c][0],
               ratio[c][rounds - 1]);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    const int threads = getenv("MST_BENCH_THREADS") ? atoi(getenv("MST_BENCH_THREADS")) : 2;
    int warmup = 3, repeats = 15, n_rows = 0;
    bool passes = false;
    struct { char model[16]; int batch; } rows[16];
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--quick") == 0) {
            warmup = 2;
            repeats = 5;
            continue;
        }
        if (strcmp(argv[a], "--passes") == 0) {
            passes = true;
            continue;
        }
        if (n_rows == 16 || sscanf(argv[a], "%15[a-z]:%d", rows[n_rows].model, &rows[n_rows].batch) != 2 ||
            rows[n_rows].batch < 1 || rows[n_rows].batch > 4096 ||
            (strcmp(rows[n_rows].model, "transformer") != 0 && strcmp(rows[n_rows].model, "srnet") != 0)) {
            fprintf(stderr, "bench_workloads: '%s': expected --quick, --passes, transformer:BATCH or srnet:BATCH (at most 16 rows)\n",
                    argv[a]);
            return 2;
        }
        n_rows++;
    }
    if (n_rows == 0) {
        rows[0] = (typeof(rows[0])){"transformer", 128};
        rows[1] = (typeof(rows[1])){"srnet", 32};
        n_rows = 2;
    }
    printf("# mstune, %d threads, %d warm-up + %d timed steps (median)\n", threads, warmup, repeats);
    if (passes) {
        for (int i = 0; i < n_rows; i++) pass_table(rows[i].model, rows[i].batch, threads, warmup, repeats);
        return 0;
    }
    for (int i = 0; i < n_rows; i++)
        for (int g = 0; g < 2; g++)
            printf("%s %d %s %.4f\n", rows[i].model, rows[i].batch, g ? "graph" : "eager",
                   measure(rows[i].model, rows[i].batch, threads, g, 0, warmup, repeats));
    return 0;
}
