/* step.h — the training step the bench programs time: a zoo model on a fixed random batch,
 * forward, cross-entropy, backward, SGD-momentum update (data loading excluded). */
#ifndef MST_BENCH_STEP_H
#define MST_BENCH_STEP_H

#include "runtime/graph/graph.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "workloads/zoo.h"

typedef struct {
    mst_ctx *ctx;
    mst_model *model;
    mst_optim *opt;
    mst_tensor *x, *y;
    int batch;
} bench_step;

/* model "mlp" or "cnn" on (batch, 1, 28, 28); exits with a message on failure. */
void   bench_step_init(bench_step *b, const char *model, int batch, int n_threads);
double bench_step_run(bench_step *b);       /* one step; returns its wall time in ms */
void   bench_step_free(bench_step *b);

/* The trainer's own step (runtime/step_runner.h) timed on ctx: the model of spec on a fixed
 * (batch, 1, 28, 28) batch, SGD momentum 0.9 at lr 0.01, the amp level in `half` with dynamic
 * loss scaling at O2 (MindSpore's default there, none elsewhere), eager or graph. Median ms of
 * `repeats` steps after `warmup`, and the peaks (MiB) of all memory and of the activations.
 * Everything but ctx is freed; exits with a message naming `who` on failure. */
typedef struct { double ms, peak_mib, act_mib; } bench_runner_result;
bench_runner_result bench_runner_time(mst_ctx *ctx, const char *who, const mst_model_spec *spec, int batch, int level,
                                      mst_dtype half, bool graph, int warmup, int repeats);

/* A model, its optimizer and one fixed batch on a context, and the step the graph cache traces:
 * forward, the model's own loss (cross-entropy unless the model has one), backward, the update,
 * zero-grad. bench_graph and bench_workloads time it eager and graph; in[0], in[1] are x, y. */
typedef struct {
    mst_ctx *ctx;
    mst_model *model;
    mst_optim *opt;
    mst_tensor *x, *y;
} bench_rig;
mst_status bench_rig_step(mst_ctx *ctx, void *rig, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out);
/* One timed step of the rig: through gc (graph mode) when it is not NULL, else eager; its wall
 * time in ms. Exits with a message naming `who` on failure. */
double bench_rig_time_step(bench_rig *r, mst_graph_cache *gc, const char *who);

#endif
