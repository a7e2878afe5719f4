/* lr_schedule.h — learning-rate schedules: constant, step decay and cosine, each with an
 * optional linear warmup. A schedule is a plain value; mst_lr_at is a pure function of the step,
 * so resuming from a checkpoint needs only the step count.
 *
 * Steps count from 0 (the lr of the first update is mst_lr_at(s, 0)). With W = warmup_steps:
 *
 *   warmup, step < W:       lr = base_lr * (step + 1) / W       (reaches base_lr at step W - 1)
 *   afterwards, t = step - W:
 *     MST_LR_CONSTANT:      lr = base_lr
 *     MST_LR_STEP:          lr = base_lr * gamma^floor(t / step_size)
 *     MST_LR_COSINE:        lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * t / T)) / 2,  T = total_steps - W,
 *                           and lr = min_lr for t >= T
 *
 * A negative step is treated as step 0. These match PyTorch's LinearLR warmup (start factor
 * 1/W) chained with StepLR / CosineAnnealingLR (eta_min = min_lr, T_max = T).
 *
 *     mst_lr_schedule s = {.kind = MST_LR_COSINE, .base_lr = 0.1, .warmup_steps = 100,
 *                          .total_steps = 10000, .min_lr = 1e-4};
 *     char err[256];
 *     if (!mst_lr_validate(&s, err, sizeof(err))) fprintf(stderr, "error: %s\n", err);
 *     double lr = mst_lr_at(&s, step);
 */
#ifndef MST_RUNTIME_LR_SCHEDULE_H
#define MST_RUNTIME_LR_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    MST_LR_CONSTANT,
    MST_LR_STEP,        /* multiply by gamma every step_size steps */
    MST_LR_COSINE,      /* cosine from base_lr down to min_lr at total_steps */
    MST_LR_KIND_COUNT
} mst_lr_kind;

typedef struct {
    mst_lr_kind kind;
    double base_lr;             /* >= 0 */
    int64_t warmup_steps;       /* >= 0; 0 = no warmup */
    int64_t step_size;          /* MST_LR_STEP: >= 1 */
    double gamma;               /* MST_LR_STEP: > 0 */
    int64_t total_steps;        /* MST_LR_COSINE: > warmup_steps */
    double min_lr;              /* MST_LR_COSINE: in [0, base_lr] */
} mst_lr_schedule;

/* The learning rate of the update at `step` (0-based). The schedule must be valid. */
double mst_lr_at(const mst_lr_schedule *s, int64_t step);

/* True when the schedule is valid; otherwise false with a message in err (n bytes, may be 0)
 * naming the field, its value and the valid range. */
bool mst_lr_validate(const mst_lr_schedule *s, char *err, size_t n);

const char *mst_lr_kind_name(mst_lr_kind kind);    /* "constant", "step", "cosine" */
int         mst_lr_kind_parse(const char *name);   /* -1 when unknown */

#endif
