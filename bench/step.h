/* step.h — the training step the bench programs time: a zoo model on a fixed random batch,
 * forward, cross-entropy, backward, SGD-momentum update (data loading excluded). */
#ifndef MST_BENCH_STEP_H
#define MST_BENCH_STEP_H

#include "runtime/model.h"
#include "runtime/optim.h"

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

#endif
